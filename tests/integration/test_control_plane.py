"""The local control plane is real: pinned version, running controllers, TokenRequest, teardown."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import jwt
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster import ComponentFailed, LocalControlPlane
from localcluster.binaries import REPO_ROOT
from tests.support.factories import GROUP, VERSION, make_hikyosecret
from tests.support.kube import get_raw
from tests.support.waiting import wait_for


def _pinned_kubernetes_version() -> str:
    for line in (REPO_ROOT / "tools" / "versions.env").read_text().splitlines():
        if line.startswith("K8S_VERSION="):
            return line.split("=", 1)[1].strip()
    raise AssertionError("K8S_VERSION missing from tools/versions.env")


def test_server_reports_the_pinned_version(api_client):
    """The apiserver's /version is the pinned release, stamped at build time."""
    info = client.VersionApi(api_client).get_code()
    print(f"kube-apiserver /version: {info.git_version}")
    if not os.environ.get("HIKYO_TEST_KUBECONFIG"):
        assert info.git_version == _pinned_kubernetes_version()
    assert info.major == "1"


def test_owned_secret_is_garbage_collected_after_its_hikyosecret(api_client, crds, namespace):
    """The garbage collector runs: a Secret owned by a deleted HikyoSecret goes away."""
    custom = client.CustomObjectsApi(api_client)
    core = client.CoreV1Api(api_client)
    owner = custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "hikyosecrets", make_hikyosecret("owner")
    )
    core.create_namespaced_secret(
        namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(
                name="app-env",
                owner_references=[
                    client.V1OwnerReference(
                        api_version=f"{GROUP}/{VERSION}",
                        kind="HikyoSecret",
                        name="owner",
                        uid=owner["metadata"]["uid"],
                        controller=True,
                    )
                ],
            ),
            string_data={"K": "v"},
        ),
    )
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "hikyosecrets", "owner")

    def secret_gone() -> bool:
        try:
            core.read_namespaced_secret("app-env", namespace)
        except ApiException as error:
            return error.status == 404
        return False

    # GC refreshes discovery every 30 s, so a just-installed CRD can take that long.
    wait_for(secret_gone, timeout=120, what="owned Secret to be garbage-collected")


def test_deployment_gets_a_replicaset(api_client, namespace):
    """The deployment controller runs."""
    apps = client.AppsV1Api(api_client)
    labels = {"app": "web"}
    apps.create_namespaced_deployment(
        namespace,
        client.V1Deployment(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1DeploymentSpec(
                replicas=1,
                selector=client.V1LabelSelector(match_labels=labels),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels=labels),
                    spec=client.V1PodSpec(
                        containers=[client.V1Container(name="web", image="registry.invalid/w")]
                    ),
                ),
            ),
        ),
    )
    replica_sets = wait_for(
        lambda: apps.list_namespaced_replica_set(namespace).items,
        timeout=60,
        what="a ReplicaSet for the Deployment",
    )
    assert replica_sets[0].metadata.owner_references[0].name == "web"


def test_token_request_carries_the_requested_audience(api_client, namespace):
    """TokenRequest works and honours a custom audience (S2.3 needs exactly this)."""
    core = client.CoreV1Api(api_client)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="builder"))
    )
    audience = "https://hikyo.example.test/kubernetes/primary"
    response = core.create_namespaced_service_account_token(
        "builder",
        namespace,
        client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[audience], expiration_seconds=600)
        ),
    )
    claims = _verified_claims(response.status.token, api_client, audience)
    assert claims["aud"] == [audience]
    assert claims["sub"] == f"system:serviceaccount:{namespace}:builder"


def test_printer_columns_through_the_table_api(api_client, crds, namespace):
    """S1.5: `kubectl get hksec` shows the columns a user needs at a glance."""
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "hikyosecrets", make_hikyosecret("cols")
    )
    table = json.loads(
        get_raw(
            api_client,
            f"/apis/{GROUP}/{VERSION}/hikyosecrets",
            accept="application/json;as=Table;v=v1;g=meta.k8s.io",
        )
    )
    names = [column["name"] for column in table["columnDefinitions"]]
    for expected in (
        "Name",
        "Instance",
        "Target",
        "Keys",
        "Lifecycle",
        "Ready",
        "Synced",
        "Last Delivery",
        "Age",
    ):
        assert expected in names, names
    row = next(r for r in table["rows"] if r["object"]["metadata"]["name"] == "cols")
    assert row["cells"][names.index("Target")] == "app-env"


def test_kubectl_get_hksec_all_namespaces(binaries, kubeconfig, crds, api_client, namespace):
    """The short name and columns work through the real kubectl too."""
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "hikyosecrets", make_hikyosecret("shown")
    )
    result = subprocess.run(
        [str(binaries.kubectl), f"--kubeconfig={kubeconfig}", "get", "hksec", "-A"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    header = result.stdout.splitlines()[0].split()
    assert header[:4] == ["NAMESPACE", "NAME", "INSTANCE", "TARGET"], result.stdout
    assert "READY" in header and "SYNCED" in header and "KEYS" in header
    assert any(line.split()[:2] == [namespace, "shown"] for line in result.stdout.splitlines())


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and text.encode() in cmdline:
            found.append(int(entry))
    return found


def test_teardown_leaves_no_process_behind(binaries, tmp_path):
    """A second, independent cluster starts and stops without leaving a process."""
    cluster = LocalControlPlane(binaries, tmp_path / "cp")
    cluster.start()
    pids = cluster.pids()
    assert len(pids) == 3
    assert _processes_mentioning(str(cluster.state_dir))
    cluster.stop()
    assert _processes_mentioning(str(cluster.state_dir)) == []
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or (
            Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        )


def test_port_clash_names_the_component_and_cleans_up(binaries, tmp_path):
    """Bad input: an apiserver port already taken is reported, and etcd is not left running."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cluster = LocalControlPlane(binaries, tmp_path / "cp", apiserver_port=port)
        with pytest.raises(ComponentFailed) as caught:
            cluster.start()
    assert caught.value.component == "kube-apiserver"
    assert f"port {port}" in str(caught.value)
    assert _processes_mentioning(str(cluster.state_dir)) == []


def test_component_that_dies_reports_its_last_log_lines(binaries, tmp_path):
    """Bad input: a component exiting at start names itself and shows its log tail."""
    broken = tmp_path / "kube-apiserver"
    broken.write_text("#!/bin/sh\necho 'fatal: flag --nonsense is broken' >&2\nexit 3\n")
    broken.chmod(0o755)
    cluster = LocalControlPlane(
        type(binaries)(binaries.etcd, broken, binaries.kube_controller_manager, binaries.kubectl),
        tmp_path / "cp",
    )
    with pytest.raises(ComponentFailed) as caught:
        cluster.start()
    message = str(caught.value)
    assert message.startswith("kube-apiserver: exited with code 3")
    assert "fatal: flag --nonsense is broken" in message
    assert _processes_mentioning(str(cluster.state_dir)) == []


def _verified_claims(token: str, api_client: client.ApiClient, audience: str) -> dict:
    """Verifies the token's signature against the issuer's published JWKS, as a verifier would."""
    jwks = get_raw(api_client, "/openid/v1/jwks", accept="application/jwk-set+json")
    key_id = jwt.get_unverified_header(token)["kid"]
    key = jwt.PyJWKSet.from_json(jwks.decode())[key_id]
    return jwt.decode(token, key=key, algorithms=["RS256"], audience=audience)
