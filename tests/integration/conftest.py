"""Session fixtures for the real local control plane (etcd, kube-apiserver, KCM)."""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from controlplane.observations.recording import record_run
from devserver import DevServer
from hikyo.clients import ClientCache
from k8s.crd_manifests import install_crds
from k8s.gateway import KubeCluster
from localcluster import LocalControlPlane, locate_binaries
from tests.support.fault_matrix import table_lines as fault_table_lines
from tests.support.world import World
from workers.engine.reconcile import Engine
from workers.engine.rendering import use_renderer
from workers.engine.settings import OperatorSettings
from workers.queue.memory import MemoryQueue
from workers.render_pool import RenderPool

_server_version: dict[str, str] = {}
_RENDERERS = RenderPool(wall_seconds=120)
LOCAL_CLUSTER: list[LocalControlPlane] = []  # the session's own control plane, when it made one


@pytest.fixture(scope="session")
def binaries():
    return locate_binaries()


@pytest.fixture(scope="session")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A kubeconfig for a fresh local control plane, or HIKYO_TEST_KUBECONFIG's cluster."""
    existing = os.environ.get("HIKYO_TEST_KUBECONFIG")
    if existing:
        yield Path(existing)
        return
    cluster = LocalControlPlane(locate_binaries(), tmp_path_factory.mktemp("control-plane"))
    cluster.start()
    LOCAL_CLUSTER.append(cluster)
    try:
        yield cluster.kubeconfig
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def audit_log(kubeconfig: Path) -> Path:
    """The control plane's audit log of ServiceAccount requests: the session's own cluster's,
    or that of the ``python -m localcluster up`` whose kubeconfig HIKYO_TEST_KUBECONFIG names."""
    if LOCAL_CLUSTER:
        return LOCAL_CLUSTER[0].audit_log
    state = kubeconfig.parent / "state.json"
    if state.exists() and "audit_log" in (recorded := json.loads(state.read_text())):
        return Path(recorded["audit_log"])
    pytest.fail(
        f"HIKYO_TEST_KUBECONFIG={kubeconfig} is not a local control plane with an audit log "
        "(localcluster); these tests read what the operator's ServiceAccount requested"
    )


@pytest.fixture(scope="session")
def api_client(kubeconfig: Path) -> Iterator[client.ApiClient]:
    api = config.new_client_from_config(config_file=str(kubeconfig))
    info = client.VersionApi(api).get_code()
    _server_version.update(git_version=info.git_version, platform=info.platform)
    yield api
    api.close()


@pytest.fixture(scope="session")
def crds(api_client: client.ApiClient) -> list[str]:
    return install_crds(api_client)


@pytest.fixture
def namespace(api_client: client.ApiClient) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (the namespace controller finishes it)."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    _remove_hikyosecrets(api_client, name)
    core.delete_namespace(name)


def _remove_hikyosecrets(api_client: client.ApiClient, namespace: str) -> None:
    """Test hygiene: no operator runs once a test ends, so a finalizer a test left (Orphan,
    Merge) would hold its namespace in Terminating, and later tests wait on that. Each
    HikyoSecret is deleted here too, at once (no finalizer holds it): left to the namespace
    controller, it could still be there when the next test's operator starts, which would put
    its finalizer back and stop before it handled the deletion."""
    custom = client.CustomObjectsApi(api_client)
    try:
        listed = custom.list_namespaced_custom_object(
            "hikyo.dev", "v1alpha1", namespace, "hikyosecrets"
        )
    except ApiException as error:
        if error.status == 404:  # the CRDs are not installed for this test
            return
        raise
    for item in listed["items"]:
        name = item["metadata"]["name"]
        if item["metadata"].get("finalizers"):
            custom.patch_namespaced_custom_object(
                "hikyo.dev", "v1alpha1", namespace, "hikyosecrets", name,
                {"metadata": {"finalizers": None}},
            )  # fmt: skip
        try:
            custom.delete_namespaced_custom_object(
                "hikyo.dev", "v1alpha1", namespace, "hikyosecrets", name
            )
        except ApiException as error:
            if error.status != 404:
                raise


def pytest_terminal_summary(terminalreporter) -> None:
    if _server_version:
        terminalreporter.write_line(
            f"kube-apiserver /version: {_server_version['git_version']} "
            f"({_server_version['platform']})"
        )
    # The fault matrix (tests/integration/test_fault_matrix.py), one line per fault that ran.
    for line in fault_table_lines():
        terminalreporter.write_line(line)
    # What the image test measured (size, digest, idle RSS), when it ran.
    from tests.integration.test_operator_image import image_summary

    if (summary := image_summary()) is not None:
        terminalreporter.write_line(summary)


# --- the delivery engine's world --------------------------------------------------------------

OPERATOR_NAMESPACE = "hikyo-system"


@pytest.fixture(scope="session")
def devserver() -> Iterator[DevServer]:
    with DevServer() as server:
        yield server


@pytest.fixture(scope="session")
def operator_namespace(api_client: client.ApiClient) -> str:
    core = client.CoreV1Api(api_client)
    try:
        core.create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=OPERATOR_NAMESPACE))
        )
    except ApiException as error:
        if error.status != 409:
            raise
    return OPERATOR_NAMESPACE


def make_engine(api_client: client.ApiClient, **settings: Any) -> Engine:
    # Templates render in renderer children, as in every operator process; the wall budget is
    # raised so that on a busy test host only the kernel's CPU and memory limits stop a render
    # (run_operator processes keep the product's 5 s: test_template_containment.py).
    use_renderer(_RENDERERS)
    options = {
        "operator_namespace": OPERATOR_NAMESPACE,
        "native_secret_types": True,
        "not_found_confirmation_seconds": 1.0,
        **settings,
    }
    return Engine(
        cluster=KubeCluster(api_client),
        store=MemoryQueue(),
        settings=OperatorSettings(**options),
        # Short timeouts keep the slow-server tests quick; the 30 s default is the product's.
        client_for=ClientCache(timeout=3.0, handshake_timeout=3.0),
    )


@pytest.fixture
def engine(api_client, crds, operator_namespace) -> Engine:
    return make_engine(api_client)


@pytest.fixture
def world(api_client, devserver, engine, namespace, db) -> Iterator[World]:
    built = World(api_client, devserver, engine, namespace)
    yield built
    for result in built.results:
        record_run(result, datetime.now(UTC), 0.01)
    SWEPT["database"].append(_dump_database())
    SWEPT["exceptions"].extend(result.outcome.message for result in built.results)
    _keep_for_sweep(built)
    devserver.clear_fault(built.token)


def _keep_for_sweep(world: World) -> None:
    """Before the namespace goes: its events and CR statuses, minus the fields that hold the
    cursor and stamp by design; those go to SECRETS_OF_RECORD instead."""
    for event in world.core.list_namespaced_event(world.namespace).items:
        SWEPT["events"].append(f"{event.reason} {event.message} {event.metadata.annotations}")
    listed = world.custom.list_namespaced_custom_object(
        "hikyo.dev", "v1alpha1", world.namespace, "hikyosecrets"
    )
    for item in listed["items"]:
        status = dict(item.get("status") or {})
        for field in ("cursor", "stamp"):
            if status.get(field):
                SECRETS_OF_RECORD.add(status.pop(field))
        SWEPT["status"].append(json.dumps(status))


def _dump_database() -> str:
    out = StringIO()
    call_command("dumpdata", "observations", stdout=out)
    return out.getvalue()


# What the canary sweep reads: everything the operator wrote outside the Secret itself.
SWEPT: dict[str, list[str]] = {"database": [], "exceptions": [], "events": [], "status": []}
SECRETS_OF_RECORD: set[str] = set()  # cursors and stamps seen in status
CAPTURED_LOGS = StringIO()


@pytest.fixture(scope="session", autouse=True)
def _capture_all_logs() -> Iterator[None]:
    """Every log line of the session, tracebacks included, for the canary sweep."""
    handler = logging.StreamHandler(CAPTURED_LOGS)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield
    root.removeHandler(handler)
    root.setLevel(previous)
