"""The operator image end to end (issue 12): built by tools/build-image.sh (or the archive
HIKYO_IMAGE_ARCHIVE names), run by podman + runc with exactly the S8.3 restrictions on the
host network, the local control plane's kubeconfig mounted read-only; it delivers a
HikyoSecret from the devserver (trusted through the HikyoInstance's caBundle, S2) and answers
/healthz and /readyz. Opt-in: `pytest -m image` (.ci/run runs it). Without buildah, podman,
debootstrap or runc it fails, unless HIKYO_SKIP_IMAGE=1 says to skip."""

from __future__ import annotations

import json
import os
import stat
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from tests.support.image import (
    DATA_DIR,
    REPO,
    Podman,
    build_image,
    missing_tools,
    run_operator,
)
from tests.support.operator_harness import SERVICE_LOGS, readyz
from tests.support.processes import free_port
from tests.support.waiting import wait_for
from tests.support.world import canary

pytestmark = [pytest.mark.image, pytest.mark.timeout(1800)]

IMAGE_FIGURES: dict[str, object] = {}  # printed at the session's end (conftest)
SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"  # where the Containerfile installs
TEST_DOUBLES = {"devserver", "localcluster", "dev_cluster"}  # in the checkout, never the image


@pytest.fixture(scope="module")
def archive() -> Path:
    """The image as an OCI archive: HIKYO_IMAGE_ARCHIVE's, or built by tools/build-image.sh."""
    if os.environ.get("HIKYO_SKIP_IMAGE") == "1":
        pytest.skip("HIKYO_SKIP_IMAGE=1")
    missing = missing_tools()
    if missing:
        pytest.fail(
            f"the image test needs {', '.join(missing)} (apt-get install buildah podman "
            "debootstrap runc; .ci/run does); HIKYO_SKIP_IMAGE=1 skips it"
        )
    given = os.environ.get("HIKYO_IMAGE_ARCHIVE")
    if given:
        return Path(given)
    built, digest = build_image(REPO / "var/image/hikyo-operator.oci.tar")
    IMAGE_FIGURES["digest"] = digest
    return built


@pytest.fixture(scope="module")
def image(archive: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Podman, str]]:
    podman = Podman(tmp_path_factory.mktemp("podman"))
    image_id = podman.load(archive)
    IMAGE_FIGURES["archive_bytes"] = archive.stat().st_size
    size = podman("image", "inspect", "--format", "{{.Size}}", image_id)
    IMAGE_FIGURES["image_bytes"] = int(size)
    yield podman, image_id
    podman("rmi", "--force", image_id, check=False)
    podman.close()


def readable_copy(kubeconfig: Path, directory: Path) -> Path:
    """The kubeconfig, readable by the container's UID 65532 (the original is 0600 root's)."""
    copy = directory / "kubeconfig"
    copy.write_bytes(kubeconfig.read_bytes())
    copy.chmod(stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
    return copy


def test_the_image_delivers_under_pod_security(image, world, kubeconfig, tmp_path):
    podman, image_id = image
    health, metrics = free_port(), free_port()
    env = {
        "HIKYO_OPERATOR_NAMESPACE": "hikyo-system",
        "HIKYO_OPERATOR_NAMESPACES": f"{world.namespace}, hikyo-system",
        "HIKYO_OPERATOR_NATIVE_SECRET_TYPES": "true",
        "HIKYO_OPERATOR_HEALTH_ADDR": f"127.0.0.1:{health}",
        "HIKYO_OPERATOR_METRICS_ADDR": f"127.0.0.1:{metrics}",
    }
    values = {"DATABASE_URL": canary("value"), "LOG_LEVEL": canary("value")}
    world.publish(**values)
    world.grant()
    world.create_instance()  # the devserver's CA as the HikyoInstance's caBundle, as elsewhere
    world.create_credential()
    world.create_cr("app-0", target={"name": "app-env-0"})
    instance = world.custom.get_cluster_custom_object(
        "hikyo.dev", "v1alpha1", "hikyoinstances", world.instance
    )
    assert instance["spec"]["caBundle"] == world.devserver.ca_bundle_b64
    name = f"hikyo-operator-{uuid.uuid4().hex[:8]}"
    container = run_operator(podman, image_id, name, env, readable_copy(kubeconfig, tmp_path))
    try:
        wait_for(
            lambda: _alive(container) and readyz(health)[0] == 200,
            timeout=180,
            what="/readyz 200 from the container",
        )
        wait_for(
            lambda: _alive(container) and world.target("app-env-0") is not None,
            timeout=120,
            what="the Secret delivered by the container",
        )
        secret = world.target("app-env-0")
        assert secret is not None
        # Both published values, under the keys the CR's default mapping gives them.
        assert secret.data["DATABASE_URL"] == values["DATABASE_URL"].encode()
        assert sorted(secret.data.values()) == sorted(v.encode() for v in values.values())
        assert world.conditions("app-0")["Ready"] == ("True", "Reconciled")

        # Both probes answer inside the container too (its own python: there is no shell).
        inside = container.python(
            "import json, urllib.request as u\n"
            f"print(json.dumps([u.urlopen('http://127.0.0.1:{health}' + p, timeout=5).status"
            " for p in ('/healthz', '/readyz')]))"
        )
        assert inside.returncode == 0, inside.stderr
        assert json.loads(inside.stdout) == [200, 200]

        # S8.3 as the kernel sees the main process: UID/GID 65532, no capabilities at all,
        # no new privileges; the root filesystem refuses writes, the SQLite dir takes them.
        status = container.status()
        assert status["Uid"].split() == ["65532"] * 4
        assert status["Gid"].split() == ["65532"] * 4
        for capabilities in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert int(status[capabilities], 16) == 0, capabilities
        assert status["NoNewPrivs"] == "1"
        writes = container.python(
            "import errno, os\n"
            "for path in ('/usr/local/x', '/etc/x', '/var/lib/x', '/x'):\n"
            "    try:\n"
            "        open(path, 'w')\n"
            "    except OSError as e:\n"
            "        assert e.errno == errno.EROFS, (path, e)\n"
            "    else:\n"
            "        raise SystemExit(path + ' is writable')\n"
            "open('/tmp/x', 'w').write('a tmpfs')\n"
            f"print(sorted(os.listdir('{DATA_DIR}')))"
        )
        assert writes.returncode == 0, writes.stderr
        assert "hikyo-operator.sqlite3" in writes.stdout  # migrated at start, on the tmpfs
        IMAGE_FIGURES["idle_rss_kib"] = int(status["VmRSS"].split()[0])
    finally:
        logs = container.logs()
        container.remove()
        SERVICE_LOGS.append(logs)  # the final canary sweep reads these too
    assert "Traceback" not in logs


def test_the_image_runs_the_worker_command(image):
    """The same image runs a scaled-mode Celery worker with another command (S8.4): its
    entrypoint is `python -m`, and every module of the installed packages imports."""
    podman, image_id = image
    out = podman(
        "run",
        "--rm",
        "--network",
        "none",
        "--read-only",
        "--user",
        "65532:65532",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=1024:1024",
        "--read-only-tmpfs=false",
        "--tmpfs",
        "/tmp:U",
        "--entrypoint",
        "/usr/bin/python",
        image_id,
        "-c",
        "import importlib, pkgutil, sys\n"
        "import django; django.setup()\n"
        "for package in ('controlplane', 'workers', 'k8s', 'hikyo'):\n"
        "    root = importlib.import_module(package)\n"
        "    for info in pkgutil.walk_packages(root.__path__, package + '.'):\n"
        "        if info.name != 'controlplane.__main__':\n"
        "            importlib.import_module(info.name)\n"
        "print('imported')",
    )
    assert out.strip().endswith("imported")
    help_text = podman(
        "run",
        "--rm",
        "--network",
        "none",
        "--read-only",
        "--user",
        "65532:65532",
        "--cap-drop",
        "ALL",
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=1024:1024",
        "--read-only-tmpfs=false",
        "--tmpfs",
        "/tmp:U",
        image_id,
        "celery",
        "-A",
        "workers.celery_app",
        "worker",
        "--help",
    )
    assert "--concurrency" in help_text


def test_the_image_holds_no_test_double(archive):
    """Issue 34: neither the devserver, nor the local control plane, nor its command."""
    files = image_files(archive)
    doubles = sorted(
        name for name in files if TEST_DOUBLES & {p.removesuffix(".py") for p in name.split("/")}
    )

    assert f"{SITE_PACKAGES}/controlplane/__main__.py" in files  # the product is there
    assert f"{SITE_PACKAGES}/k8s/crds/hikyo.dev_hikyosecrets.yaml" in files
    assert doubles == []
    # Issue 51: only the doubles mint certificates, so the image has no cryptography.
    assert not [name for name in files if name.startswith(f"{SITE_PACKAGES}/cryptography")]


def image_files(archive: Path) -> set[str]:
    """Every path in the image's root filesystem: its layers from the OCI archive's manifest,
    applied in order (a whiteout ``.wh.NAME`` deletes NAME, ``.wh..wh..opq`` a directory's
    earlier content)."""
    with tarfile.open(archive) as outer:

        def read(name: str) -> IO[bytes]:
            member = outer.extractfile(name)
            assert member is not None, name
            return member

        def blob(digest: str) -> IO[bytes]:
            return read("blobs/" + digest.replace(":", "/", 1))

        manifest = json.load(blob(json.load(read("index.json"))["manifests"][0]["digest"]))
        files: set[str] = set()
        for layer in manifest["layers"]:
            with tarfile.open(fileobj=blob(layer["digest"]), mode="r:*") as entries:
                for entry in entries:
                    path = entry.name.removeprefix("./").rstrip("/")
                    parent, _, base = path.rpartition("/")
                    if base == ".wh..wh..opq":
                        files = {f for f in files if not f.startswith(parent + "/")}
                    elif base.startswith(".wh."):
                        gone = f"{parent}/{base.removeprefix('.wh.')}".lstrip("/")
                        files = {f for f in files if f != gone and not f.startswith(gone + "/")}
                    else:
                        files.add(path)
    return files


def _alive(container) -> bool:
    if not container.running():
        raise AssertionError(f"the operator container exited:\n{container.logs()[-4000:]}")
    return True


def image_summary() -> str | None:
    """One JSON line of what the image test measured, for the session's end."""
    if not IMAGE_FIGURES:
        return None
    return "operator image: " + json.dumps(IMAGE_FIGURES, sort_keys=True)
