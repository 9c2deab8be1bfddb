"""A cold build of the control plane reports progress on stderr, and stdout keeps its contract.

No real Go build runs here: a fake ``go`` on PATH answers the calls the script makes, prints
``go build -v`` package lines and writes stand-in binaries. To stay deterministic without
timing, the fake build finishes only once the script's ticker has reported it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from localcluster.binaries import BUILD_SCRIPT, BinariesUnavailable, locate_binaries

VERSIONS = dict(
    re.findall(r"^(\w+)=(\S+)$", (BUILD_SCRIPT.parent / "versions.env").read_text(), re.M)
)
K8S_LABEL = "kube-apiserver, kube-controller-manager, kubectl"

FAKE_GO = r"""#!/usr/bin/env bash
# Stands in for the Go toolchain: answers build-control-plane.sh's calls.
set -eu
case "$1" in
  version) echo "go version go1.26.0 linux/amd64"; exit 0 ;;
  env) case "$2" in GOVERSION) echo go1.26.0 ;; GOPROXY) echo off ;; esac; exit 0 ;;
  mod) exit 0 ;;
  list) for i in 1 2 3 4 5; do echo "example.com/pkg$i"; done; exit 0 ;;
  build) shift ;;
  *) echo "fake go: unexpected $*" >&2; exit 2 ;;
esac
out=; pkgs=()
while (($#)); do
  case "$1" in
    -o) out=$2; shift 2 ;;
    -ldflags|-p) shift 2 ;;
    -*) shift ;;
    *) pkgs+=("$1"); shift ;;
  esac
done
echo "go: downloading example.com/mod v1.0.0" >&2  # a note, not a package
for i in 1 2 3; do echo "example.com/pkg$i" >&2; done
if [[ -n "${FAKE_GO_FAIL:-}" ]]; then echo "pkg3/x.go:1:1: syntax error" >&2; exit 1; fi
names=()
if [[ "$out" == */ ]]; then
  for p in "${pkgs[@]}"; do names+=("$out${p##*/}"); done
else
  names=("$out")
fi
first=$(basename "${names[0]}")
if [[ -n "${FAKE_GO_WAIT_FOR:-}" ]]; then
  # Finish only after the script reported this build at 3 of 5: an ordering, not a timing.
  for _ in $(seq 1200); do
    if grep -Eq "^building $first(,[^:]*)?: 3 of 5 packages compiled" "$FAKE_GO_WAIT_FOR"; then
      break
    fi
    sleep 0.05
  done
fi
for i in 4 5; do echo "example.com/pkg$i" >&2; done
for n in "${names[@]}"; do
  case "$(basename "$n")" in
    kube-apiserver) printf '#!/bin/sh\necho "Kubernetes @K8S@"\n' >"$n" ;;
    etcd) printf '#!/bin/sh\necho "etcd Version: @ETCD@"\necho "Git SHA: fake"\n' >"$n" ;;
    *) printf '#!/bin/sh\n' >"$n" ;;
  esac
  chmod +x "$n"
done
"""


@pytest.fixture
def fake_env(tmp_path: Path) -> dict[str, str]:
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    go = bindir / "go"
    go.write_text(
        FAKE_GO.replace("@K8S@", VERSIONS["K8S_VERSION"]).replace(
            "@ETCD@", VERSIONS["ETCD_VERSION"].removeprefix("v")
        )
    )
    go.chmod(0o755)
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "KUBEBUILDER_ASSETS" and not k.startswith(("TEST_ASSET_", "FAKE_GO_"))
    }
    env["PATH"] = f"{bindir}:/usr/bin:/bin"
    env["HIKYO_DEV_CACHE"] = str(tmp_path / "cache")
    env["HIKYO_BUILD_PROGRESS_SECONDS"] = "0.05"
    return env


def _expected_bin(env: dict[str, str]) -> str:
    return (
        f"{env['HIKYO_DEV_CACHE']}/bin/"
        f"k8s-{VERSIONS['K8S_VERSION']}-etcd-{VERSIONS['ETCD_VERSION']}"
    )


def _processes_of(env: dict[str, str]) -> list[int]:
    """Live processes carrying this test's cache path in their environment (the script's)."""
    marker = f"HIKYO_DEV_CACHE={env['HIKYO_DEV_CACHE']}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(proc.name))
        except OSError:
            continue
    return found


def _run(env: dict[str, str], tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], str]:
    err = tmp_path / "stderr.txt"
    env = {**env, "FAKE_GO_WAIT_FOR": str(err)}
    with err.open("w") as stderr:
        result = subprocess.run(
            ["bash", str(BUILD_SCRIPT)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
            timeout=120,
        )
    return result, err.read_text()


def test_cold_build_reports_each_component_and_keeps_stdout_contract(fake_env, tmp_path):
    result, stderr = _run(fake_env, tmp_path)
    assert result.returncode == 0, stderr
    assert result.stdout.splitlines()[-1] == _expected_bin(fake_env)
    assert "building" not in result.stdout  # progress goes to stderr only
    for label in ("etcd", "etcdctl", K8S_LABEL):
        assert f"building {label} from tools/" in stderr
        assert re.search(
            rf"^building {re.escape(label)}: 3 of 5 packages compiled, \d+ s elapsed$",
            stderr,
            re.M,
        ), stderr
        # go's "downloading" note is not counted as a package.
        assert re.search(
            rf"^built {re.escape(label)} in \d+ s \(5 of 5 packages compiled\)$", stderr, re.M
        ), stderr
    assert _processes_of(fake_env) == []  # the ticker and its sleeps are gone


def test_warm_run_takes_the_stamp_fast_path_without_progress(fake_env, tmp_path):
    first, _ = _run(fake_env, tmp_path)
    assert first.returncode == 0
    again = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, env=fake_env, timeout=60
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [_expected_bin(fake_env)]
    assert (
        again.stderr.strip() == f"control plane binaries are current in {_expected_bin(fake_env)}"
    )


def test_failed_build_exit_code_and_last_line_survive_the_ticker(fake_env, tmp_path):
    result, stderr = _run({**fake_env, "FAKE_GO_FAIL": "1"}, tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    last = stderr.strip().splitlines()[-1]
    assert "go build of etcd in tools/etcd failed" in last and "KUBEBUILDER_ASSETS" in last
    assert "syntax error" in stderr  # the log's tail is shown
    assert _processes_of(fake_env) == []


def test_bad_progress_interval_is_one_clear_line(fake_env, tmp_path):
    result, stderr = _run({**fake_env, "HIKYO_BUILD_PROGRESS_SECONDS": "soon"}, tmp_path)
    assert result.returncode == 1
    assert "HIKYO_BUILD_PROGRESS_SECONDS=soon is not a number" in stderr.strip().splitlines()[-1]


def _wait_for(condition, what: str, timeout: float = 30.0) -> None:
    """Polls a condition (never asserts on elapsed time; the timeout only bounds a failure)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.mark.parametrize("how", ["group-term", "script-term", "script-kill"])
def test_interrupted_build_leaves_no_stray_process(fake_env, tmp_path, how):
    err = tmp_path / "stderr.txt"
    # The fake build waits for a line in a file the script never writes, so the script is
    # certainly mid-build, with its ticker running, when it is signalled.
    release = tmp_path / "release.txt"
    release.touch()
    env = {**fake_env, "FAKE_GO_WAIT_FOR": str(release)}
    with err.open("w") as stderr:
        proc = subprocess.Popen(
            ["bash", str(BUILD_SCRIPT)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
            start_new_session=True,
        )
    try:
        _wait_for(lambda: "building etcd: 3 of 5" in err.read_text(), "a progress line")
        if how == "group-term":  # like Ctrl-C in a terminal: the whole group is signalled
            os.killpg(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=30) == 143
            # go's own children die of the signal unreaped by the script: poll for them.
            _wait_for(lambda: _processes_of(fake_env) == [], "no processes left")
        elif how == "script-term":  # only the script: its exit trap must end the ticker
            os.kill(proc.pid, signal.SIGTERM)
            release.write_text("building etcd: 3 of 5 packages compiled\n")  # go finishes
            assert proc.wait(timeout=30) == 143
            assert _processes_of(fake_env) == []  # at once: the script reaped its ticker
        else:  # the script alone dies hard; its ticker must notice and exit by itself
            proc.kill()
            proc.wait(timeout=30)
            release.write_text("building etcd: 3 of 5 packages compiled\n")  # go finishes
            _wait_for(lambda: _processes_of(fake_env) == [], "the orphaned ticker to exit")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_locate_binaries_relays_progress_live(fake_env, monkeypatch):
    for key in [k for k in os.environ if k.startswith(("TEST_ASSET_", "FAKE_GO_"))]:
        monkeypatch.delenv(key)
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    for key in ("PATH", "HIKYO_DEV_CACHE"):
        monkeypatch.setenv(key, fake_env[key])
    monkeypatch.setenv("HIKYO_BUILD_PROGRESS_SECONDS", "0")  # start/end lines only
    lines: list[str] = []
    binaries = locate_binaries(progress=lines.append)
    assert binaries.kube_apiserver == Path(_expected_bin(fake_env)) / "kube-apiserver"
    assert "building etcd from tools/etcd (a cold build takes minutes)..." in lines
    assert any(line.startswith(f"built {K8S_LABEL} in ") for line in lines)

    monkeypatch.setenv("FAKE_GO_FAIL", "1")
    monkeypatch.setenv("HIKYO_DEV_CACHE", fake_env["HIKYO_DEV_CACHE"] + "-cold")
    lines.clear()
    with pytest.raises(BinariesUnavailable, match="go build of etcd in tools/etcd failed"):
        locate_binaries(progress=lines.append)
    assert any("syntax error" in line for line in lines)


def test_localcluster_up_sends_build_progress_to_stderr_only(fake_env, monkeypatch):
    from io import StringIO

    from localcluster import ComponentFailed
    from localcluster import __main__ as command

    class _NoCluster:  # the binaries are stand-ins: stop right after locating them
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise ComponentFailed("etcd", "not started in this test")

    monkeypatch.setattr(command, "LocalControlPlane", _NoCluster)
    for key in [k for k in os.environ if k.startswith(("TEST_ASSET_", "FAKE_GO_"))]:
        monkeypatch.delenv(key)
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    for key in ("PATH", "HIKYO_DEV_CACHE"):
        monkeypatch.setenv(key, fake_env[key])
    monkeypatch.setenv("HIKYO_BUILD_PROGRESS_SECONDS", "0")
    out, err = StringIO(), StringIO()
    state_dir = Path(fake_env["HIKYO_DEV_CACHE"]) / "state"
    assert command.main(["up", "--state-dir", str(state_dir)], out, err) == 1
    assert out.getvalue() == ""  # stdout stays the kubeconfig path alone
    lines = err.getvalue().splitlines()
    assert lines[0] == "control plane binaries: locating (a first run builds them)..."
    assert "  building etcd from tools/etcd (a cold build takes minutes)..." in lines
    assert any(re.fullmatch(r"control plane binaries: ready in \d+\.\d s", x) for x in lines)
    assert lines[-2:] == [
        "control plane: starting etcd, kube-apiserver, controller-manager...",
        "error: etcd: not started in this test",
    ]


def test_demo_phases_print_start_and_end(capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("hikyo_demo", BUILD_SCRIPT.parent / "demo.py")
    assert spec and spec.loader
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)

    with demo._Phase("devserver", "starting") as phase:
        phase.done = "ready at https://127.0.0.1:1"
    with pytest.raises(RuntimeError), demo._Phase("operator", "starting"):
        raise RuntimeError("boom")
    samples = demo._Phase("sample objects", "creating")
    samples.end("created")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "devserver: starting..."
    assert re.fullmatch(r"devserver: ready at https://127\.0\.0\.1:1 in \d+\.\d s", lines[1])
    assert lines[2] == "operator: starting..."
    assert re.fullmatch(r"operator: failed after \d+\.\d s", lines[3])
    assert lines[4] == "sample objects: creating..."
    assert re.fullmatch(r"sample objects: created in \d+\.\d s", lines[5])
