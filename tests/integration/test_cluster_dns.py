"""Cluster DNS for the local node (issue 50): CoreDNS built by tools/build-coredns.sh (or the one
COREDNS names) serves the session's control plane through its kubernetes plugin, zone
cluster.local, as the node's pods would ask it. Needs KUBEBUILDER_ASSETS like every integration
test, and the coredns build: if it cannot be built the tests fail saying why."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.support.coredns import Answer, coredns_binary, query_a
from tests.support.processes import Service, free_port
from tests.support.waiting import wait_for

HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def dns_port(kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """CoreDNS on 127.0.0.1 with the usual kubeadm Corefile's kubernetes block, no cache (an
    answer must be the apiserver's current state), once it answers for the kubernetes Service."""
    binary = coredns_binary()
    directory = tmp_path_factory.mktemp("coredns")
    port = free_port()
    corefile = directory / "Corefile"
    corefile.write_text(
        f""".:{port} {{
    bind {HOST}
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
}}
"""
    )
    coredns = Service("coredns", [binary, "-conf", str(corefile)], directory / "coredns.log")
    coredns.start()
    try:

        def synced() -> Answer | None:
            assert coredns.alive(), f"coredns exited:\n{coredns.log()}"
            answer = query_a(HOST, port, "kubernetes.default.svc.cluster.local", timeout=0.5)
            return answer if answer and answer.addresses else None

        wait_for(synced, timeout=60, what=f"coredns answering on {HOST}:{port}")
        yield port
    finally:
        coredns.stop()


def test_kubernetes_default_resolves_to_the_apiserver_service(dns_port, api_client):
    cluster_ip = client.CoreV1Api(api_client).read_namespaced_service("kubernetes", "default")
    answer = query_a(HOST, dns_port, "kubernetes.default.svc.cluster.local")
    assert answer == Answer("NOERROR", [cluster_ip.spec.cluster_ip])
    assert cluster_ip.spec.cluster_ip == "10.0.0.1"  # the local control plane's service range


def test_a_service_resolves_while_it_exists(dns_port, api_client, namespace):
    core = client.CoreV1Api(api_client)
    name = f"svc-{uuid.uuid4().hex[:8]}"
    fqdn = f"{name}.{namespace}.svc.cluster.local"
    # Not there yet: NXDOMAIN, not some catch-all address.
    assert query_a(HOST, dns_port, fqdn) == Answer("NXDOMAIN", [])
    service = core.create_namespaced_service(
        namespace,
        client.V1Service(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1ServiceSpec(ports=[client.V1ServicePort(port=6379, name="redis")]),
        ),
    )
    ip = service.spec.cluster_ip
    assert ip and ip != "None"

    def resolves() -> Answer | None:
        answer = query_a(HOST, dns_port, fqdn)
        return answer if answer and answer.addresses else None

    assert wait_for(resolves, timeout=30, what=f"{fqdn} in CoreDNS") == Answer("NOERROR", [ip])
    core.delete_namespaced_service(name, namespace)

    def gone() -> bool:
        answer = query_a(HOST, dns_port, fqdn)
        return answer is not None and answer.rcode == "NXDOMAIN"

    wait_for(gone, timeout=30, what=f"{fqdn} gone from CoreDNS once the Service is deleted")
