"""The real node's tests' shared parts (tests/integration/test_real_node*.py): the node and
the devserver it reaches, the chart's namespaces, and the applications that read a delivered
Secret (tools/node-images/app)."""

from __future__ import annotations

import base64
import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from devserver.server import DevServer
from localcluster import BinariesUnavailable, locate_binaries
from localcluster.binaries import locate_coredns, locate_node_binaries
from localcluster.node import NodeFailed
from localcluster.node_cluster import NodeCluster, node_images
from localcluster.node_layout import NODE_IP
from tests.support.clocks import ShiftedClock
from tests.support.helm import CHART, Helm, helm, seed_values
from tests.support.waiting import wait_for
from tests.support.world import canary

NAMESPACE = "hikyo-system"
APPS = "payments"  # the seed's values watch this namespace
RELEASE = "hikyo"
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}
APP_IMAGE = "localhost/hikyo-node-app:local"
ORG, PROJECT, ENVIRONMENT = (f"{kind}_{uuid.uuid4()}" for kind in ("org", "proj", "env"))
TOKEN = canary("nodetoken")
# The tests' kubelet syncs pods every 10 s rather than every minute: a mounted Secret's new
# content shows within seconds, and the lane does not wait out three minute-long syncs.
TEST_KUBELET_SYNC = "10s"


@dataclass
class Node:
    cluster: NodeCluster
    api: client.ApiClient
    devserver: DevServer
    tmp: Path
    clock: ShiftedClock  # the devserver's

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def publish(self, value: str) -> None:
        key = {"name": "APP_VALUE", "classification": "config", "value": value}
        self.devserver.publish(ORG, PROJECT, ENVIRONMENT, [key])

    def logs(self, namespace: str, pod: str) -> str:
        try:
            return self.core.read_namespaced_pod_log(pod, namespace, _request_timeout=10)
        except client.ApiException:
            return ""  # not started yet

    def pods(self, namespace: str, app: str) -> list[client.V1Pod]:
        found = self.core.list_namespaced_pod(namespace, label_selector=f"app={app}")
        return [p for p in found.items if p.metadata.deletion_timestamp is None]


def selects(selector: dict[str, Any], labels: dict[str, str] | None) -> bool:
    """Whether a label selector of the chart's (matchLabels only) selects ``labels``."""
    assert set(selector) <= {"matchLabels"}, selector
    return all((labels or {}).get(k) == v for k, v in selector.get("matchLabels", {}).items())


def skip_or_fail(why: str) -> None:
    if os.environ.get("HIKYO_SKIP_NODE") == "1":
        pytest.skip(why)
    pytest.fail(f"{why} (HIKYO_SKIP_NODE=1 skips the real-node tests)")


@contextlib.contextmanager
def running_node(tmp: Path, kubelet_sync: str | None = TEST_KUBELET_SYNC) -> Iterator[Node]:
    """The node (with cluster DNS and every local image, the operator's from
    HIKYO_IMAGE_ARCHIVE) and a devserver on the node's address, stopped at the end;
    ``kubelet_sync``: the kubelet's syncFrequency (None: its default, a minute)."""
    if os.geteuid() != 0:
        skip_or_fail("a node runs containers and a bridge: run as root")
    archive = os.environ.get("HIKYO_IMAGE_ARCHIVE")
    if not archive or not Path(archive).is_file():
        skip_or_fail("HIKYO_IMAGE_ARCHIVE must name the operator image (tools/build-image.sh)")
    try:
        cluster = NodeCluster(
            locate_binaries(),
            locate_node_binaries(),
            tmp / "cluster",
            node_images(),
            coredns=locate_coredns(),
            kubelet_sync=kubelet_sync,
        )
        cluster.start()
    except (BinariesUnavailable, NodeFailed) as error:
        skip_or_fail(f"the node could not start: {error}")
        raise
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    clock = ShiftedClock()  # the Hikyo server's clock, which a test may set apart
    devserver = DevServer(host=NODE_IP, clock=clock.now).start()  # where the pods reach it
    try:
        yield Node(cluster, api, devserver, tmp, clock)
    finally:
        devserver.stop()
        api.close()
        cluster.stop()


def wait(what: str, check: Callable[[], object], timeout: float, every: float = 0.5) -> object:
    """``check``'s first truthy result (tests.support.waiting.wait_for, the node tests' order)."""
    return wait_for(check, timeout, every, what)


def namespace(node: Node, name: str) -> None:
    node.core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=RESTRICTED))
    )


def image_digest() -> str:
    return Path(f"{os.environ['HIKYO_IMAGE_ARCHIVE']}.digest").read_text().strip()


def install_embedded(node: Node) -> Helm:
    """The chart with the seed's values and the local operator image's digest, into
    namespaces that enforce Pod Security restricted, as a user installs it."""
    namespace(node, NAMESPACE)
    namespace(node, APPS)
    values = seed_values()
    values["operator"]["image"] = {"digest": image_digest()}
    return helm(
        "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--wait", "--timeout", "100s",
        kubeconfig=node.cluster.kubeconfig, values=values, tmp=node.tmp,
    )  # fmt: skip


def deliver(node: Node, first: str) -> None:
    """The Hikyo side and the cluster side of one delivery into Secret app-env, with two
    applications reading it: ``app`` (opted in to restarts) and ``app-mounted`` (not)."""
    node.publish(first)
    node.devserver.add_credential(TOKEN, ORG, PROJECT, ENVIRONMENT)
    node.custom.create_cluster_custom_object(
        "hikyo.dev", "v1alpha1", "hikyoinstances",
        {"apiVersion": "hikyo.dev/v1alpha1", "kind": "HikyoInstance",
         "metadata": {"name": "primary"},
         "spec": {"url": node.devserver.url, "caBundle": node.devserver.ca_bundle_b64}},
    )  # fmt: skip
    node.core.create_namespaced_secret(
        APPS,
        client.V1Secret(
            metadata=client.V1ObjectMeta(
                name="hikyo-credential",
                labels={"hikyo.dev/delivery": "true", "hikyo.dev/instance": "primary"},
            ),
            data={"hikyo-token": base64.b64encode(TOKEN.encode()).decode()},
        ),
    )
    create_cr(node, "app", "app-env")
    for name, opted_in in (("app", True), ("app-mounted", False)):
        node.apps.create_namespaced_deployment(APPS, application(name, opted_in))


def create_cr(node: Node, name: str, target: str) -> None:
    """A HikyoSecret delivering APP_VALUE into Secret ``target``, resynced every 30 s."""
    node.custom.create_namespaced_custom_object(
        "hikyo.dev", "v1alpha1", APPS, "hikyosecrets",
        {"apiVersion": "hikyo.dev/v1alpha1", "kind": "HikyoSecret", "metadata": {"name": name},
         "spec": {"instanceRef": {"name": "primary"},
                  "auth": {"secretRef": {"name": "hikyo-credential"}},
                  "scope": {"org": ORG, "project": PROJECT, "environment": ENVIRONMENT},
                  "mapping": [{"key": "APP_VALUE"}], "target": {"name": target},
                  "resyncInterval": "30s"}},
    )  # fmt: skip


def delivered(node: Node, target: str) -> str | None:
    """APP_VALUE as Secret ``target`` holds it now, None while it is absent."""
    try:
        secret = node.core.read_namespaced_secret(target, APPS, _request_timeout=10)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
    encoded = (secret.data or {}).get("APP_VALUE")
    return base64.b64decode(encoded).decode() if encoded else None


def application(name: str, opted_in: bool) -> client.V1Deployment:
    annotations = {"hikyo.dev/secrets": "app-env"} if opted_in else {}
    container = client.V1Container(
        name="app",
        image=APP_IMAGE,
        image_pull_policy="Never",
        env_from=[client.V1EnvFromSource(secret_ref=client.V1SecretEnvSource(name="app-env"))],
        env=[client.V1EnvVar(name="APP_VALUE_FILE", value="/etc/app/APP_VALUE")],
        volume_mounts=[client.V1VolumeMount(name="value", mount_path="/etc/app", read_only=True)],
        security_context=client.V1SecurityContext(
            allow_privilege_escalation=False,
            capabilities=client.V1Capabilities(drop=["ALL"]),
        ),
    )
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name, annotations=annotations),
        spec=client.V1DeploymentSpec(
            replicas=1,
            selector=client.V1LabelSelector(match_labels={"app": name}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": name}),
                spec=client.V1PodSpec(
                    containers=[container],
                    termination_grace_period_seconds=2,
                    security_context=client.V1PodSecurityContext(
                        run_as_non_root=True,
                        seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault"),
                    ),
                    volumes=[
                        client.V1Volume(
                            name="value",
                            secret=client.V1SecretVolumeSource(secret_name="app-env"),
                        )
                    ],
                ),
            ),
        ),
    )


def serving(node: Node, app: str, line: str) -> list[str]:
    """The pods of ``app`` whose output has ``line``."""
    pods = node.pods(APPS, app)
    return [p.metadata.name for p in pods if line in node.logs(APPS, p.metadata.name).splitlines()]


def rolled_out(node: Node, app: str, line: str) -> bool:
    deployment = node.apps.read_namespaced_deployment_status(app, APPS)
    status, wanted = deployment.status, deployment.spec.replicas
    done = (
        (status.observed_generation or 0) >= deployment.metadata.generation
        and status.updated_replicas == wanted
        and status.available_replicas == wanted
        and (status.replicas or 0) == wanted
    )
    return done and len(serving(node, app, line)) == len(node.pods(APPS, app)) == wanted


def available(node: Node, app: str) -> bool:
    status = node.apps.read_namespaced_deployment_status(app, APPS).status
    return (status.available_replicas or 0) == (status.replicas or 0) > 0


def force_sync(node: Node, value: str, name: str = "app") -> None:
    node.custom.patch_namespaced_custom_object(
        "hikyo.dev", "v1alpha1", APPS, "hikyosecrets", name,
        {"metadata": {"annotations": {"hikyo.dev/force-sync": value}}},
    )  # fmt: skip


def lease(node: Node) -> client.V1Lease:
    leases = client.CoordinationV1Api(node.api).list_namespaced_lease(NAMESPACE).items
    assert len(leases) == 1
    return leases[0]


def operator_pods(node: Node) -> list[client.V1Pod]:
    return [
        p
        for p in node.core.list_namespaced_pod(NAMESPACE).items
        if p.metadata.deletion_timestamp is None
    ]
