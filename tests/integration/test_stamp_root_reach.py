"""S6.3 against the real apiserver: whether a missing stamp root may be created is decided over
the CRs in reach only. A namespaced operator is not blocked by a stamped CR outside its watch
list; the same CR does block a cluster-wide operator, which has it in reach."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from k8s.gateway import KubeCluster
from tests.support.factories import GROUP, VERSION, make_hikyosecret
from tests.support.world import World
from workers.engine.reconcile import Engine, RunResult
from workers.engine.stamp_root import STAMP_ROOT_SECRET

from .conftest import make_engine


@pytest.fixture
def spare_namespaces(api_client) -> Iterator[tuple[str, str]]:
    """A fresh operator namespace (no stamp root yet) and a namespace outside the watch list."""
    core = client.CoreV1Api(api_client)
    suffix = uuid.uuid4().hex[:8]
    names = (f"home-{suffix}", f"elsewhere-{suffix}")
    for name in names:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield names
    for name in names:
        core.delete_namespace(name)


def _stamped_cr_in(api_client, namespace: str, home: str) -> None:
    """A CR recording a stamp made under the root of the operator living in ``home`` (only an
    operator with that home counts it, so the session's other tests never see it)."""
    custom = client.CustomObjectsApi(api_client)
    custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "hikyosecrets", make_hikyosecret("stamped")
    )
    custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        "hikyosecrets",
        "stamped",
        {"status": {"stamp": "v1:8bd23b33d75c3d0dec60ba14711dc242", "operatorNamespace": home}},
    )


def _reconcile(world: World, engine: Engine) -> RunResult:
    result = world.reconcile(engine=engine)
    if result.outcome.reason == "FinalizerAdded":  # R2 stops after the patch; rerun
        result = world.reconcile(engine=engine)
    return result


def test_a_stamp_outside_the_watch_list_does_not_block_creating_the_root(
    world, api_client, spare_namespaces
):
    home, elsewhere = spare_namespaces
    _stamped_cr_in(api_client, elsewhere, home)
    world.publish(DATABASE_URL="postgres://x", LOG_LEVEL="info")
    world.grant()
    world.create_instance()
    world.create_credential()
    world.create_cr()
    cluster = KubeCluster(api_client)

    # Control: cluster-wide, the stamped CR is in reach, so the root is not created.
    cluster_wide = make_engine(api_client, operator_namespace=home)
    refused = _reconcile(world, cluster_wide)
    assert refused.outcome.reason == "FetchFailed"
    assert "stamp root missing" in refused.outcome.message
    assert cluster.get_secret(home, STAMP_ROOT_SECRET) is None

    # Namespaced: only the watch list counts, and nothing in it has a stamp yet.
    namespaced = make_engine(api_client, operator_namespace=home, namespaces=(world.namespace,))
    delivered = _reconcile(world, namespaced)
    assert delivered.outcome.reason == "Delivered", delivered.outcome.message
    root = cluster.get_secret(home, STAMP_ROOT_SECRET)
    assert root is not None and len(root.data["root"]) == 32
    assert world.status()["operatorNamespace"] == home
