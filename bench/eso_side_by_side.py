"""External Secrets Operator side by side with ours (issue 13, deliverable 3): P1 cold, P2 one
unchanged refresh period and P4 peak RSS, against a real local control plane and the devserver.
Prints a markdown table and writes JSON.

    python bench/eso_side_by_side.py [--n 1000] [--refresh 30] [--ours] [--json var/bench/eso.json]

Same load on both sides: one published scope of 10 config keys and one credential; N objects,
each reading all 10 keys into its own target Secret, refreshed every ``--refresh`` seconds.

- ESO: ``tools/build-eso.sh`` (``ESO_VERSION`` of tools/versions.env, or ``ESO=`` a prebuilt
  binary), run out of cluster with the kubeconfig of the local control plane and its shipped
  defaults (``--concurrent 1``, client QPS 50 / burst 100; ``--eso-concurrent`` changes the
  first). One namespaced SecretStore uses the generic webhook provider on the devserver's
  ``GET .../delivery/values`` route (flat JSON, bearer from a Secret, caBundle = the devserver
  CA); each ExternalSecret has ``dataFrom: [{extract: {key: <its name>}}]``, one fetch per
  refresh, the key only tagging the request (``?es=``) so the devserver counts per object.
- ours (``--ours``): ``manage.py run_operator`` in embedded mode (the env the end-to-end tests
  use), N HikyoSecrets with ``allKeys`` and ``resyncInterval`` = ``--refresh``.

Each side gets its own fresh control plane, so the apiserver's ``apiserver_request_total`` holds
only that side's requests. P1: from the first create to every target Secret holding the exact
10 values and every object Ready. P2: after one settling period, one period with this script
idle: apiserver writes by verb/resource (Leases apart) and all requests, fetches per object
and objects not fetched. P4: VmHWM from /proc/<pid>/status at the end. Figures, not
assertions; the machine is shared, so run it more than once.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kubernetes import client, config  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from bench.apiserver import (  # noqa: E402
    CALL_TIMEOUT,
    current,
    list_json,
    measure_period,
    ready,
)
from bench.common import bench_hikyosecret, create_bench_instance, status_kib  # noqa: E402
from devserver import DevServer, new_id  # noqa: E402
from localcluster import LocalControlPlane, locate_binaries  # noqa: E402
from localcluster.ports import free_port  # noqa: E402

NAMESPACE = "bench"
KEYS = {f"KEY_{i}": f"value-{i}" for i in range(10)}
TOKEN = "hik_bench_side_by_side"
ESO_GROUP, ESO_VERSION = "external-secrets.io", "v1"
BUILD_SCRIPT = REPO / "tools" / "build-eso.sh"
BUILD_TIMEOUT = 3600.0  # a cold build of every ESO provider on 2 shared cores
POLL_SECONDS = 1.0


class EsoUnavailable(RuntimeError):
    """ESO could not be built or located; the message is the build script's last line."""


# --- ESO: binary, CRDs, manifests ----------------------------------------------------------


@dataclass(frozen=True)
class EsoBuild:
    binary: Path
    crds: Path


def build_eso(progress: Callable[[str], None] | None = None) -> EsoBuild:
    """Runs tools/build-eso.sh (a no-op when cached, or ESO= a prebuilt binary); relays its
    stderr lines to ``progress``. Raises EsoUnavailable with the script's last error line."""
    last = ""
    with subprocess.Popen(
        ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stderr is not None and proc.stdout is not None
        deadline = time.monotonic() + BUILD_TIMEOUT
        for line in proc.stderr:  # ends when the script exits
            last = line.rstrip() or last
            if progress:
                progress(line.rstrip())
            if time.monotonic() > deadline:
                proc.kill()
                last = f"{BUILD_SCRIPT} still running after {BUILD_TIMEOUT:.0f} s; killed"
                break
        stdout = proc.stdout.read()
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = -9
    lines = stdout.strip().splitlines()
    if code != 0 or not lines:
        raise EsoUnavailable(last or f"{BUILD_SCRIPT} exited {code}")
    binary = Path(lines[-1])
    crds = Path(os.environ.get("ESO_CRDS") or binary.parent / "crds")
    return EsoBuild(binary, crds)


def install_eso_crds(api: client.ApiClient, crds: Path, timeout: float = 120.0) -> list[str]:
    """Creates every CRD of ESO's config/crds/bases and waits until each is Established."""
    ext = client.ApiextensionsV1Api(api)
    names = []
    for path in sorted(crds.glob("*.yaml")):
        for manifest in yaml.safe_load_all(path.read_text()):
            if not manifest or manifest.get("kind") != "CustomResourceDefinition":
                continue
            with contextlib.suppress(ApiException):  # 409: already there (rerun)
                ext.create_custom_resource_definition(manifest, _request_timeout=CALL_TIMEOUT)
            names.append(manifest["metadata"]["name"])
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            crd = ext.read_custom_resource_definition(name, _request_timeout=CALL_TIMEOUT)
            conditions = (crd.status and crd.status.conditions) or []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established within {timeout:.0f} s")
            time.sleep(0.2)
    return names


def credential_secret() -> dict[str, Any]:
    """The bearer the webhook sends; ESO reads only Secrets labelled for the webhook."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "hikyo-credential", "labels": {"external-secrets.io/type": "webhook"}},
        "stringData": {"token": TOKEN},
    }


def secret_store(values_url: str, ca_bundle_b64: str) -> dict[str, Any]:
    """One SecretStore, webhook provider on the devserver's values route (flat JSON)."""
    return {
        "apiVersion": f"{ESO_GROUP}/{ESO_VERSION}",
        "kind": "SecretStore",
        "metadata": {"name": "hikyo"},
        "spec": {
            "provider": {
                "webhook": {
                    "url": values_url + "?es={{ .remoteRef.key }}",
                    "method": "GET",
                    "headers": {"Authorization": "Bearer {{ .auth.token }}"},
                    "secrets": [
                        {"name": "auth", "secretRef": {"name": "hikyo-credential", "key": "token"}}
                    ],
                    "caBundle": ca_bundle_b64,
                    "timeout": "10s",
                    "result": {"jsonPath": "$"},
                }
            }
        },
    }


def external_secret(name: str, refresh_seconds: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{ESO_GROUP}/{ESO_VERSION}",
        "kind": "ExternalSecret",
        "metadata": {"name": name},
        "spec": {
            "refreshInterval": f"{refresh_seconds}s",
            "secretStoreRef": {"name": "hikyo", "kind": "SecretStore"},
            "target": {"name": f"{name}-env", "creationPolicy": "Owner"},
            "dataFrom": [{"extract": {"key": name}}],
        },
    }


# --- processes -------------------------------------------------------------------------------


@contextlib.contextmanager
def process(argv: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A child with its output in ``log``; terminated (then killed) on exit."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=20)


def eso_argv(binary: Path, metrics_port: int, concurrent: int, namespace: str) -> list[str]:
    """The controller (ESO's default command), out of cluster, one namespace, no leader
    election; the cluster-wide and push reconcilers are off since nothing here uses them."""
    return [
        str(binary),
        f"--metrics-addr=127.0.0.1:{metrics_port}",
        f"--namespace={namespace}",
        f"--concurrent={concurrent}",
        "--enable-leader-election=false",
        "--enable-cluster-store-reconciler=false",
        "--enable-cluster-external-secret-reconciler=false",
        "--enable-cluster-push-secret-reconciler=false",
        "--enable-push-secret-reconciler=false",
        "--loglevel=info",
    ]


def start_eso(
    build: EsoBuild, kubeconfig: Path, log: Path, concurrent: int = 1, namespace: str = NAMESPACE
):
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/root")}
    env["KUBECONFIG"] = str(kubeconfig)
    return process(eso_argv(build.binary, free_port(), concurrent, namespace), env, log)


def operator_env(kubeconfig: Path, data_dir: Path, health_port: int) -> dict[str, str]:
    """Embedded mode, as tests/support/operator_harness.py runs it."""
    return {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "HIKYO_OPERATOR_NAMESPACE": "hikyo-system",
        "HIKYO_OPERATOR_DATA_DIR": str(data_dir),
        "HIKYO_OPERATOR_HEALTH_ADDR": f"127.0.0.1:{health_port}",
        "HIKYO_OPERATOR_METRICS_ADDR": f"127.0.0.1:{free_port()}",
        "HIKYO_LOG_LEVEL": "INFO",
        "PYTHONDONTWRITEBYTECODE": "1",
        "REDIS_URL": "",
        "HIKYO_OPERATOR_REDIS_URL": "",
        "DATABASE_URL": "",
        "HIKYO_OPERATOR_DATABASE_URL": "",
    }


# --- apiserver reads -------------------------------------------------------------------------


EXPECTED = {name: base64.b64encode(value.encode()).decode() for name, value in KEYS.items()}


def synced_targets(api: client.ApiClient, objects_path: str, names: list[str]) -> tuple[int, int]:
    """(objects Ready, targets holding exactly the 10 values) among ``names``."""
    wanted = set(names)
    n_ready = sum(
        1 for o in list_json(api, objects_path) if o["metadata"]["name"] in wanted and ready(o)
    )
    targets = {f"{n}-env" for n in names}
    n_data = sum(
        1
        for s in list_json(api, f"/api/v1/namespaces/{NAMESPACE}/secrets")
        if s["metadata"]["name"] in targets and (s.get("data") or {}) == EXPECTED
    )
    return n_ready, n_data


def wait_synced(
    api: client.ApiClient,
    objects_path: str,
    names: list[str],
    timeout: float,
    alive: Callable[[], bool],
) -> float:
    """Monotonic time when every object is Ready and every target correct."""
    deadline = time.monotonic() + timeout
    last = (0, 0)
    while time.monotonic() < deadline:
        if not alive():
            raise RuntimeError("the operator under test exited")
        last = synced_targets(api, objects_path, names)
        if last == (len(names), len(names)):
            return time.monotonic()
        time.sleep(POLL_SECONDS)
    raise TimeoutError(
        f"after {timeout:.0f} s: {last[0]} Ready, {last[1]} targets correct of {len(names)}"
    )


# --- one side --------------------------------------------------------------------------------


@dataclass
class Side:
    name: str
    n: int
    p1_seconds: float = 0.0
    create_seconds: float = 0.0
    settle_seconds: float = 0.0  # P1 end until every object had its first refresh
    p2: dict[str, Any] = field(default_factory=dict)
    p4_vmhwm_mib: float = 0.0
    p4_vmrss_mib: float = 0.0


def new_cluster(tmp: Path) -> tuple[LocalControlPlane, client.ApiClient]:
    cluster = LocalControlPlane(locate_binaries(), tmp)
    cluster.start()
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    return cluster, api


def eso_fetches(hikyo: DevServer, names: list[str]) -> Counter[str]:
    tagged = Counter(r.query.get("es", "") for r in hikyo.requests if r.path.endswith("/values"))
    return Counter({name: tagged[name] for name in names})


def settle(done: Callable[[], bool], refresh: int, alive: Callable[[], bool]) -> float:
    """Seconds until ``done()``, at least one period; gives up (and says so) after 20."""
    started = time.monotonic()
    time.sleep(refresh)
    while not done():
        if not alive():
            raise RuntimeError("the operator under test exited")
        if time.monotonic() - started > 20 * refresh:
            print("settle: gave up after 20 periods; P2 includes first refreshes", file=sys.stderr)
            break
        time.sleep(2)
    return time.monotonic() - started


def run_eso(
    build: EsoBuild,
    hikyo: DevServer,
    scope: tuple[str, str, str],
    n: int,
    refresh: int,
    tmp: Path,
    concurrent: int,
    timeout: float,
) -> Side:
    side = Side("ESO", n)
    cluster, api = new_cluster(tmp / "eso-cluster")
    try:
        install_eso_crds(api, build.crds)
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        core.create_namespace({"metadata": {"name": NAMESPACE}}, _request_timeout=CALL_TIMEOUT)
        core.create_namespaced_secret(NAMESPACE, credential_secret(), _request_timeout=CALL_TIMEOUT)
        custom.create_namespaced_custom_object(
            ESO_GROUP,
            ESO_VERSION,
            NAMESPACE,
            "secretstores",
            secret_store(hikyo.values_url(*scope), hikyo.ca_bundle_b64),
            _request_timeout=CALL_TIMEOUT,
        )
        log = tmp / "eso.log"
        with start_eso(build, cluster.kubeconfig, log, concurrent) as proc:
            names = [f"es-{i}" for i in range(n)]
            wait_store_ready(api, proc, log)
            started = time.monotonic()
            for name in names:
                custom.create_namespaced_custom_object(
                    ESO_GROUP,
                    ESO_VERSION,
                    NAMESPACE,
                    "externalsecrets",
                    external_secret(name, refresh),
                    _request_timeout=CALL_TIMEOUT,
                )
            side.create_seconds = time.monotonic() - started
            done = wait_synced(
                api,
                f"/apis/{ESO_GROUP}/{ESO_VERSION}/namespaces/{NAMESPACE}/externalsecrets",
                names,
                timeout,
                lambda: proc.poll() is None,
            )
            side.p1_seconds = done - started
            # Settle: every ExternalSecret fetched again after its cold sync (the es= tag),
            # so the period below holds steady-state refreshes only.
            side.settle_seconds = settle(
                lambda: all(n >= 2 for n in eso_fetches(hikyo, names).values()),
                refresh,
                lambda: proc.poll() is None,
            )
            p2, fetched = measure_period(api, hikyo, refresh, lambda r: r.path.endswith("/values"))
            tagged = Counter(r.query.get("es") for r in fetched)
            p2["fetches_per_object"] = round(len(fetched) / n, 2)
            p2["objects_not_fetched"] = sum(1 for name in names if not tagged[name])
            side.p2 = p2
            mem = status_kib(proc.pid)
            side.p4_vmhwm_mib = round(mem.get("VmHWM", 0) / 1024, 1)
            side.p4_vmrss_mib = round(mem.get("VmRSS", 0) / 1024, 1)
    finally:
        api.close()
        cluster.stop()
    return side


def wait_store_ready(
    api: client.ApiClient,
    proc: subprocess.Popen[bytes],
    log: Path,
    namespace: str = NAMESPACE,
    timeout: float = 120.0,
) -> None:
    """ESO validates the store first; ExternalSecrets of a store not Ready wait (flood gate)."""
    custom = client.CustomObjectsApi(api)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"ESO exited {proc.returncode}; log tail:\n{tail(log)}")
        store = custom.get_namespaced_custom_object(
            ESO_GROUP,
            ESO_VERSION,
            namespace,
            "secretstores",
            "hikyo",
            _request_timeout=CALL_TIMEOUT,
        )
        if ready(store):
            return
        time.sleep(0.5)
    raise TimeoutError(f"SecretStore not Ready within {timeout:.0f} s; ESO log tail:\n{tail(log)}")


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


RUN_LINE = re.compile(r"run (\S+) uid=(\S+) start=([\d.]+) end=([\d.]+) outcome=(\w+)")


def run_ours(
    hikyo: DevServer,
    scope: tuple[str, str, str],
    n: int,
    refresh: int,
    tmp: Path,
    timeout: float,
    fetch_qps: float | None = None,
) -> Side:
    from k8s.crd_manifests import install_crds

    side = Side("hikyo-operator (embedded)", n)
    cluster, api = new_cluster(tmp / "ours-cluster")
    try:
        install_crds(api)
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        for ns in ("hikyo-system", NAMESPACE):
            core.create_namespace({"metadata": {"name": ns}}, _request_timeout=CALL_TIMEOUT)
        create_bench_instance(custom, hikyo.url, hikyo.ca_bundle_b64, CALL_TIMEOUT)
        core.create_namespaced_secret(
            NAMESPACE,
            {
                "metadata": {
                    "name": "credential",
                    "labels": {"hikyo.dev/delivery": "true", "hikyo.dev/instance": "bench"},
                },
                "stringData": {"hikyo-token": TOKEN},
            },
            _request_timeout=CALL_TIMEOUT,
        )
        health = free_port()
        env = operator_env(cluster.kubeconfig, tmp / "ours-data", health)
        if fetch_qps is not None:  # S4.1.6's pace per instance, raised as the main bench does
            env["HIKYO_OPERATOR_FETCH_QPS"] = f"{fetch_qps:g}"
            env["HIKYO_OPERATOR_FETCH_BURST"] = str(max(1, int(fetch_qps * 2)))
        manage = [sys.executable, str(REPO / "manage.py")]
        subprocess.run(
            [*manage, "migrate", "--noinput"], env=env, check=True, capture_output=True, timeout=300
        )
        log = tmp / "operator.log"
        with process([*manage, "run_operator"], env, log) as proc:
            wait_healthy(health, proc, log)
            names = [f"app-{i}" for i in range(n)]
            started = time.monotonic()
            for name in names:
                custom.create_namespaced_custom_object(
                    "hikyo.dev",
                    "v1alpha1",
                    NAMESPACE,
                    "hikyosecrets",
                    bench_hikyosecret(name, scope, refresh),
                    _request_timeout=CALL_TIMEOUT,
                )
            side.create_seconds = time.monotonic() - started
            done = wait_synced(
                api,
                f"/apis/hikyo.dev/v1alpha1/namespaces/{NAMESPACE}/hikyosecrets",
                names,
                timeout,
                lambda: proc.poll() is None,
            )
            side.p1_seconds = done - started
            # Settle: the first resync after a delivery still writes (Synced Delivered ->
            # Current, S4.17); wait until every CR reports Current, then measure.
            objects = f"/apis/hikyo.dev/v1alpha1/namespaces/{NAMESPACE}/hikyosecrets"
            side.settle_seconds = settle(
                lambda: all(current(o) for o in list_json(api, objects)),
                refresh,
                lambda: proc.poll() is None,
            )
            window_start = time.time()
            p2, fetched = measure_period(
                api, hikyo, refresh, lambda r: r.path.endswith("/delivery")
            )
            window_end = time.time()
            ran = {
                m[2]
                for m in RUN_LINE.finditer(log.read_text(errors="replace"))
                if window_start <= float(m[3]) <= window_end
            }
            p2["fetches_per_object"] = round(len(fetched) / n, 2)
            p2["objects_not_fetched"] = max(0, n - len(ran))  # from the run lines in the window
            side.p2 = p2
            mem = status_kib(proc.pid)
            side.p4_vmhwm_mib = round(mem.get("VmHWM", 0) / 1024, 1)
            side.p4_vmrss_mib = round(mem.get("VmRSS", 0) / 1024, 1)
    finally:
        api.close()
        cluster.stop()
    return side


def wait_healthy(
    port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 120.0
) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"run_operator exited {proc.returncode}; log tail:\n{tail(log)}")
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=3),
        ):
            return
        time.sleep(0.5)
    raise TimeoutError(f"run_operator not healthy within {timeout:.0f} s")


# --- report ----------------------------------------------------------------------------------


def table(sides: list[Side]) -> str:
    rows = [
        ("P1 cold → all N targets correct and Ready", lambda s: f"{s.p1_seconds:.1f} s"),
        ("  of which creating the N objects", lambda s: f"{s.create_seconds:.1f} s"),
        ("settle: P1 end → every object refreshed once", lambda s: f"{s.settle_seconds:.0f} s"),
        (
            "P2 apiserver writes in one unchanged period",
            lambda s: str(s.p2["apiserver_writes_total"]),
        ),
        (
            "  writes by verb/resource",
            lambda s: ", ".join(f"{k}: {v}" for k, v in s.p2["apiserver_writes"].items()) or "none",
        ),
        (
            "P2 apiserver requests in the period (all verbs)",
            lambda s: str(s.p2["apiserver_requests_total"]),
        ),
        ("P2 fetches per object in the period", lambda s: f"{s.p2['fetches_per_object']:.2f}"),
        ("P2 objects not fetched in the period", lambda s: str(s.p2["objects_not_fetched"])),
        ("P4 peak RSS (VmHWM)", lambda s: f"{s.p4_vmhwm_mib:.1f} MiB"),
    ]
    out = ["| Figure | " + " | ".join(s.name for s in sides) + " |"]
    out.append("|---" * (len(sides) + 1) + "|")
    for label, cell in rows:
        out.append(f"| {label} | " + " | ".join(cell(s) for s in sides) + " |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--refresh", type=int, default=30, help="refresh/resync period, seconds")
    parser.add_argument("--ours", action="store_true", help="also run our embedded operator")
    parser.add_argument("--eso-concurrent", type=int, default=1)
    parser.add_argument(
        "--fetch-qps",
        type=float,
        help="ours: HIKYO_OPERATOR_FETCH_QPS (burst twice that); default: the operator's own",
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="P1 limit per side, s")
    parser.add_argument("--json", type=Path, default=REPO / "var" / "bench" / "eso.json")
    args = parser.parse_args()
    if args.fetch_qps is not None and args.fetch_qps <= 0:
        parser.error("--fetch-qps is positive")

    started = time.monotonic()
    build = build_eso(progress=lambda line: print(line, file=sys.stderr))
    print(f"ESO binary ready ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    sides = []
    with tempfile.TemporaryDirectory(prefix="bench-eso-") as raw, DevServer() as hikyo:
        tmp = Path(raw)
        scope = (new_id("org"), new_id("prj"), new_id("env"))
        hikyo.publish(
            *scope, [{"name": k, "classification": "config", "value": v} for k, v in KEYS.items()]
        )
        hikyo.add_credential(TOKEN, *scope, grants={"read"})
        if args.ours:
            sides.append(
                run_ours(hikyo, scope, args.n, args.refresh, tmp, args.timeout, args.fetch_qps)
            )
            print(f"ours done: P1 {sides[-1].p1_seconds:.1f} s", file=sys.stderr)
        sides.append(
            run_eso(
                build, hikyo, scope, args.n, args.refresh, tmp, args.eso_concurrent, args.timeout
            )
        )
    report = {
        "n": args.n,
        "keys_per_object": len(KEYS),
        "refresh_seconds": args.refresh,
        "eso_version": build.binary.parent.name,
        "eso_concurrent": args.eso_concurrent,
        "ours_fetch_qps": args.fetch_qps,
        "machine": {"cores": os.cpu_count()},
        "sides": [vars(s) for s in sides],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"N = {args.n}, 10 keys each, refresh {args.refresh} s, {os.cpu_count()} cores\n")
    print(table(sides))
    print(f"\nJSON: {args.json}")


if __name__ == "__main__":
    main()
