"""Session fixtures for the real local control plane (etcd, kube-apiserver, KCM)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from k8s.crd_manifests import install_crds
from k8s.localcluster import LocalControlPlane, locate_binaries

_server_version: dict[str, str] = {}


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
    try:
        yield cluster.kubeconfig
    finally:
        cluster.stop()


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
    core.delete_namespace(name)


def pytest_terminal_summary(terminalreporter) -> None:
    if _server_version:
        terminalreporter.write_line(
            f"kube-apiserver /version: {_server_version['git_version']} "
            f"({_server_version['platform']})"
        )
