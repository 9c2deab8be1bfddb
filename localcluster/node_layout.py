"""The local node's fixed names and addresses (``python -m localcluster up --node``).

Pods get addresses on a bridge of their own; the host's end of it is the node's address,
where pods reach the apiserver (through the ``kubernetes`` Service and kube-proxy) and any
development server the tests run on the host.
"""

NODE_NAME = "hikyo-node"
BRIDGE = "hikyo0"
POD_SUBNET = "10.244.0.0/16"  # not podman's default 10.88.0.0/16
NODE_IP = "10.244.0.1"  # the bridge's own address: the pods' gateway
SERVICE_SUBNET = "10.0.0.0/24"  # the apiserver's --service-cluster-ip-range
