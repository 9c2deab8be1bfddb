"""The bundled Redis of the chart's scaled mode as the local node runs it (issue 50): the image
tools/build-node-images.sh builds from Debian's redis-server (localhost/hikyo-redis, named by
its digest), run by podman + runc with exactly what the chart's rendered Redis Deployment says:
its args (the password through $(REDIS_PASSWORD)), its user, read-only root, dropped
capabilities, no privilege escalation and its emptyDir, with no network. Opt-in:
`pytest -m image`. HIKYO_NODE_IMAGES names a directory the script already built into; without
buildah, podman or runc it fails, unless HIKYO_SKIP_IMAGE=1 says to skip."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.helm import objects, operator_values, template
from tests.support.image import REPO, Container, Podman
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.image, pytest.mark.timeout(900)]

BUILD_SCRIPT = REPO / "tools/build-node-images.sh"
BUILD_TIMEOUT = 900  # seconds: a cold build downloads a few .debs and compiles the pause program
NEEDED = ("buildah", "podman", "go", "apt-get", "dpkg-deb", "/usr/sbin/runc")
# The host's own rlimits: this sandbox cannot raise them (no CAP_SYS_RESOURCE).
ULIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")


@pytest.fixture(scope="module")
def images_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """HIKYO_NODE_IMAGES's directory, or a fresh one tools/build-node-images.sh builds into
    (not var/node-images: a running node may be importing from there)."""
    if os.environ.get("HIKYO_SKIP_IMAGE") == "1":
        pytest.skip("HIKYO_SKIP_IMAGE=1")
    given = os.environ.get("HIKYO_NODE_IMAGES")
    if given:
        return Path(given)
    missing = [t for t in NEEDED if not (Path(t).exists() or _which(t))]
    if missing:
        pytest.fail(
            f"the Redis image test needs {', '.join(missing)} (apt-get install buildah podman "
            "runc; Go >= 1.26); HIKYO_NODE_IMAGES names a built directory; HIKYO_SKIP_IMAGE=1 "
            "skips it"
        )
    out = tmp_path_factory.mktemp("node-images")
    done = subprocess.run(
        ["bash", str(BUILD_SCRIPT)],
        env={**os.environ, "HIKYO_NODE_IMAGES": str(out)},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    assert done.returncode == 0, f"tools/build-node-images.sh failed:\n{done.stderr[-4000:]}"
    assert done.stdout.split()[-1] == str(out)
    return out


def _which(tool: str) -> bool:
    return any(Path(d, tool).exists() for d in os.environ.get("PATH", "").split(os.pathsep) if d)


@pytest.fixture(scope="module")
def digest(images_dir: Path) -> str:
    found = (images_dir / "redis.oci.tar.digest").read_text().strip()
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", found), found
    return found


@pytest.fixture(scope="module")
def podman(images_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podman]:
    engine = Podman(tmp_path_factory.mktemp("podman"))
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def image_id(podman: Podman, images_dir: Path, digest: str) -> Iterator[str]:
    loaded = podman.load(images_dir / "redis.oci.tar")
    # The chart names the image by this digest; the archive's manifest must be the one it names.
    assert podman("image", "inspect", "--format", "{{.Digest}}", loaded).strip() == digest
    yield loaded
    podman("rmi", "--force", loaded, check=False)


def redis_pod(tmp: Path, image: str) -> dict[str, Any]:
    """The pod template of the chart's bundled Redis in scaled mode, with ``image``."""
    scaled = {
        "enabled": True,
        "database": {"existingSecret": "observations-dsn"},
        "redis": {"image": image},
    }
    rendered = template(operator_values(scaled=scaled), tmp).manifests()
    redis = [
        d
        for d in objects(rendered, "Deployment")
        if d["metadata"]["labels"].get("app.kubernetes.io/component") == "redis"
    ]
    assert len(redis) == 1, [d["metadata"]["name"] for d in objects(rendered, "Deployment")]
    return redis[0]["spec"]["template"]["spec"]


def expand(arg: str, env: dict[str, str]) -> str:
    """$(NAME) as the kubelet expands it in a container's args."""
    return re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], arg)


def pod_flags(pod: dict[str, Any], container: dict[str, Any]) -> list[str]:
    """podman run flags for what the chart's pod and container securityContext say."""
    context = {**pod["securityContext"], **container["securityContext"]}
    assert context["runAsNonRoot"] is True and context["runAsUser"] != 0
    # RuntimeDefault is podman's default seccomp profile: nothing to add, checked below.
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    flags = ["--user", f"{context['runAsUser']}:{context['runAsGroup']}"]
    if context.get("readOnlyRootFilesystem"):
        flags += ["--read-only", "--read-only-tmpfs=false"]
    for capability in context["capabilities"]["drop"]:
        flags += ["--cap-drop", capability]
    assert not context["capabilities"].get("add")
    if context.get("allowPrivilegeEscalation") is False:
        flags += ["--security-opt", "no-new-privileges"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        empty_dir = volumes[mount["name"]]["emptyDir"]  # the chart's Redis has no other kind
        size = empty_dir.get("sizeLimit", "64Mi")
        assert size.endswith("Mi"), size
        # U: the tmpfs belongs to the container's user, as fsGroup makes the emptyDir its own.
        flags += ["--tmpfs", f"{mount['mountPath']}:rw,nosuid,nodev,size={size[:-2]}m,U"]
    return flags


@pytest.fixture
def redis(podman: Podman, image_id: str, digest: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The image run as the chart's Redis Deployment runs it; yields what the test reads."""
    pod = redis_pod(tmp_path, f"localhost/hikyo-redis@{digest}")
    (container,) = pod["containers"]
    assert container["image"] == f"localhost/hikyo-redis@{digest}"
    password = secrets.token_hex(16)
    env_from = {e["name"]: e["valueFrom"]["secretKeyRef"]["key"] for e in container["env"]}
    assert env_from == {"REDIS_PASSWORD": "password"}  # the chart's kept Secret's key
    env = {"REDIS_PASSWORD": password}
    name = f"hikyo-redis-{uuid.uuid4().hex[:8]}"
    argv = ["run", "--detach", "--name", name, "--network", "none", *ULIMITS]
    argv += pod_flags(pod, container)
    argv += ["--env", f"REDIS_PASSWORD={password}"]
    if "command" in container:  # the chart passes only args today: the image's entrypoint
        argv += ["--entrypoint", json.dumps(container["command"])]
    podman(*argv, image_id, *[expand(a, env) for a in container.get("args", [])])
    running = Container(podman, name)
    try:
        yield {"container": running, "password": password, "spec": container, "pod": pod}
    finally:
        running.remove()


def cli(redis: dict[str, Any], *args: str, password: bool = True) -> str:
    """redis-cli inside the container, at the port the chart's probes and Service use."""
    container: Container = redis["container"]
    (port,) = [p["containerPort"] for p in redis["spec"]["ports"] if p["name"] == "redis"]
    auth = ["-a", redis["password"], "--no-auth-warning"] if password else []
    at = ["-h", "127.0.0.1", "-p", str(port)]
    done = subprocess.run(
        [*container.podman.base, "exec", container.name, "redis-cli", *at, *auth, *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return done.stdout + done.stderr  # not stripped: an empty value is an empty last line


def test_the_image_runs_the_charts_redis_under_its_restrictions(redis):
    container: Container = redis["container"]
    # The chart's probes are TCP connects to the named port, which redis-cli's connection makes too.
    for probe in ("readinessProbe", "livenessProbe"):
        assert redis["spec"][probe]["tcpSocket"] == {"port": "redis"}

    def answers() -> bool:
        assert container.running(), f"Redis exited:\n{container.logs()}"
        return cli(redis, "ping") == "PONG\n"

    wait_for(answers, timeout=60, what="PONG from redis-cli in the container")
    # --requirepass took: without the password Redis refuses.
    assert "NOAUTH" in cli(redis, "ping", password=False)
    # The other args took: no snapshots, no AOF, the memory cap.
    assert cli(redis, "config", "get", "save").splitlines() == ["save", ""]
    assert cli(redis, "config", "get", "appendonly").splitlines() == ["appendonly", "no"]
    assert cli(redis, "config", "get", "maxmemory").splitlines() == ["maxmemory", str(96 << 20)]
    # Its working directory is the chart's emptyDir, writable under the read-only root.
    mounts = [m["mountPath"] for m in redis["spec"]["volumeMounts"]]
    assert cli(redis, "config", "get", "dir").splitlines() == ["dir", *mounts]
    assert cli(redis, "save") == "OK\n"
    status = container.status()
    assert status["Uid"].split()[0] == str(redis["pod"]["securityContext"]["runAsUser"])
    assert status["CapEff"] == "0000000000000000"
    assert status["NoNewPrivs"] == "1"
    assert status["Seccomp"] == "2"  # filter mode: RuntimeDefault's profile is on
    assert container.running(), container.logs()
