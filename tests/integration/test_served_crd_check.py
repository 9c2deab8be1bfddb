"""S8.7 against a real apiserver: an operator whose served HikyoSecret CRD lacks spec.allKeys
(an older CRD left by an upgrade) fails /readyz naming the field and the CRD, and reconciles
nothing until the CRD is upgraded and a check passes.

The CRDs are swapped in a throwaway control plane of this test's own, so the session's shared
apiserver always serves the real ones.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from k8s.crd_manifests import install_crds, load_crd_manifests
from localcluster import LocalControlPlane
from tests.support.operator_harness import RUN_LINE, Operator, populate, ready_count, readyz
from tests.support.waiting import wait_for
from tests.support.world import World
from workers.engine.crd_check import HIKYOSECRETS_CRD

from .conftest import OPERATOR_NAMESPACE, make_engine


def _readyz_saying(port: int, *texts: str) -> tuple[int, str] | None:
    answer = readyz(port)
    return answer if all(text in answer[1] for text in texts) else None


def _without_all_keys(crd: dict[str, Any]) -> dict[str, Any]:
    """The HikyoSecret CRD as an older release served it: no spec.allKeys (and so none of the
    S1.3.3/S1.3.4 rules that name it, which would not compile without the field)."""
    older = copy.deepcopy(crd)
    for version in older["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        del spec["properties"]["allKeys"]
        spec["x-kubernetes-validations"] = [
            rule for rule in spec.get("x-kubernetes-validations") or []
            if "allKeys" not in rule["rule"]
        ]  # fmt: skip
    return older


def _established(extensions: client.ApiextensionsV1Api, name: str) -> bool:
    conditions = extensions.read_custom_resource_definition(name).status.conditions or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def _install_older_crds(api: client.ApiClient) -> None:
    extensions = client.ApiextensionsV1Api(api)
    for manifest in load_crd_manifests():
        name = manifest["metadata"]["name"]
        if name == HIKYOSECRETS_CRD:
            manifest = _without_all_keys(manifest)
        extensions.create_custom_resource_definition(manifest)
        wait_for(lambda n=name: _established(extensions, n), timeout=60, what=f"{name} Established")


@pytest.fixture
def own_cluster(binaries, tmp_path) -> Iterator[tuple[LocalControlPlane, client.ApiClient]]:
    cluster = LocalControlPlane(binaries, tmp_path / "cp")
    cluster.start()
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    try:
        yield cluster, api
    finally:
        api.close()
        cluster.stop()


@pytest.mark.timeout(600)
def test_a_served_crd_without_all_keys_fails_readyz_and_holds_every_reconcile(
    own_cluster, devserver, tmp_path
):
    cluster, api = own_cluster
    _install_older_crds(api)
    core = client.CoreV1Api(api)
    for name in (OPERATOR_NAMESPACE, "apps"):
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    world = World(api, devserver, make_engine(api), "apps")
    populate(world, 1)  # a mapping-mode CR: valid under the older CRD too
    operator = Operator(tmp_path / "operator", cluster.kubeconfig, None)
    try:
        leader = operator.start_leader()
        # The check has run, and the leader has listed the CR and holds it: it waits in the
        # queue, undispatched.
        lacks = "served CRD hikyosecrets.hikyo.dev (v1alpha1) lacks spec.allKeys"
        status, _ = wait_for(
            lambda: _readyz_saying(operator.http_port, lacks, "1 HikyoSecrets waiting"),
            timeout=90,
            what="/readyz to report the missing field and the held CR",
        )
        assert status == 503
        assert world.requests() == []  # no fetch
        assert world.status("app-0") == {}  # no write

        install_crds(api)  # the upgrade brings spec.allKeys
        wait_for(lambda: readyz(operator.http_port)[0] == 200, timeout=90, what="/readyz ok")
        wait_for(lambda: ready_count(world) == 1, timeout=90, what="the held CR reconciled")
    finally:
        operator.stop()
    log = leader.log()
    assert "served-CRD check failed (S8.7)" in log
    first_run = RUN_LINE.search(log)
    assert first_run is not None
    assert log.index("served-CRD check passed (S8.7)") < first_run.start()
