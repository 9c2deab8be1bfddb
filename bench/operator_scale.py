"""The embedded operator at N HikyoSecrets: P1 cold start to all Ready against a floor, its
peak memory, the apiserver requests and the Hikyo TLS handshakes it needed (issue 13). Prints
one JSON object.

    python bench/operator_scale.py [--crs 1000] [--fetch-qps 1000] [--browse] [--no-floor]

Starts a local control plane (KUBEBUILDER_ASSETS, else tools/build-control-plane.sh) and the
devserver in this process (10 config keys; every CR its own target, 10 namespaces), creates N
HikyoSecrets, then one embedded ``manage.py run_operator`` (DJANGO_DEBUG=false, a fresh
SQLite store; HIKYO_OPERATOR_FETCH_QPS/BURST from ``--fetch-qps``: the default 10/s
per instance would make P1 a measure of the S4.1.6 pacing, not of the operator). Timed from
the operator's start to every CR Ready=True at its generation (a LIST every 0.5 s). A thread
samples the operator's VmRSS/VmHWM; VmHWM at the end is the lifetime peak. ``--browse`` then
pages the dashboard with real headless Chromium (bench/dashboard_memory.py's browsing) over
the N tracked objects and reports the peak again.

The floor (after the operator stopped, same run, same devserver and apiserver): per CR one
HTTPS fetch of the same delivery (one kept-alive connection per thread), one Secret create,
one status merge-patch writing Ready=True at the CR's generation; with 1 thread and with 8.
Figures, not assertions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

import dashboard_memory as dashboard  # noqa: E402

from bench.apiserver import request_counts  # noqa: E402
from bench.common import cpu_seconds, machine_busy_seconds  # noqa: E402
from bench.world import KEYS, NAMESPACES, create_world, floor, ready_count  # noqa: E402

READY_TIMEOUT = 1800.0
RESOURCES = ("hikyosecrets", "hikyoinstances", "secrets", "events", "leases", "serviceaccounts")


def _apiserver_requests(api: Any) -> Counter[str]:
    """apiserver_request_total as "resource VERB" for the resources the operator touches."""
    totals: Counter[str] = Counter()
    for (verb, resource, subresource), n in request_counts(api).items():
        if resource in RESOURCES:
            totals[f"{resource}{f'/{subresource}' if subresource else ''} {verb}"] += n
    return totals


class Handshakes:
    """Counts TLS handshakes the devserver accepted (one per new connection), bench side."""

    def __init__(self) -> None:
        from devserver.http import OriginServer

        self.count = 0
        self._lock = threading.Lock()
        original = OriginServer.finish_request

        def counted(server: Any, request: Any, client_address: Any) -> None:
            with self._lock:
                self.count += 1
            original(server, request, client_address)

        OriginServer.finish_request = counted  # type: ignore[method-assign]


def _browse_store(operator_env: dict[str, str], count: int) -> dict[str, Any]:
    """The superuser (seeding no objects), then the store's counts once the recorder caught up."""
    password = secrets.token_urlsafe(16)
    env = {
        **os.environ,
        **operator_env,
        "BENCH_ADMIN_USER": "bench-admin",
        "BENCH_ADMIN_PASSWORD": password,
    }
    store = dashboard._seed_store(env, 0)
    deadline = time.monotonic() + 120
    while store["tracked_objects"] < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the store tracks {store['tracked_objects']} of {count} CRs")
        time.sleep(2)
        store = _counts(env)
    return {"store": store, "password": password}


def _counts(env: dict[str, str]) -> dict[str, Any]:
    code = (
        "import django, json; django.setup()\n"
        "from controlplane.observations.models import TrackedObject as T\n"
        "print(json.dumps({'tracked_objects': T.objects.count(),"
        " 'not_ready': T.objects.exclude(ready=True).count()}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise RuntimeError(f"counting failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cpu_now(cluster: Any) -> tuple[float, dict[str, float]]:
    """The machine's busy CPU seconds and each control-plane process's (etcd, apiserver, ...)."""
    found = {c.name: cpu_seconds(c.pid) for c in cluster.components if c.pid is not None}
    return machine_busy_seconds(), {n: sec for n, sec in found.items() if sec is not None}


def _cpu_since(cluster: Any, before: tuple[float, dict[str, float]], seconds: float) -> dict:
    """How many cores the machine kept busy over ``seconds`` since ``before`` (every process:
    apiserver, etcd, devserver, this bench) and each control-plane process's CPU seconds."""
    machine, components = _cpu_now(cluster)
    return {
        "machine_busy_cores": round((machine - before[0]) / seconds, 2),
        "control_plane_cpu_seconds": {
            name: round(sec - before[1].get(name, 0.0), 1) for name, sec in components.items()
        },
    }


def run(
    count: int, qps: float, browse: bool, with_floor: bool, cleanup: contextlib.ExitStack
) -> dict:
    from kubernetes import config

    from devserver import DevServer
    from k8s.crd_manifests import install_crds
    from localcluster import LocalControlPlane, locate_binaries
    from tests.support.operator_harness import Operator, readyz
    from tests.support.waiting import wait_for

    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    cleanup.callback(shutil.rmtree, tmp, ignore_errors=True)
    cluster = LocalControlPlane(locate_binaries(), tmp / "control-plane")
    cleanup.callback(cluster.stop)
    cluster.start()
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    cleanup.callback(api.close)
    install_crds(api)
    handshakes = Handshakes()
    hikyo = cleanup.enter_context(DevServer())
    created = time.perf_counter()
    world = create_world(api, hikyo, count)
    creation_seconds = time.perf_counter() - created

    operator = Operator(tmp / "operator", cluster.kubeconfig, None)
    operator.env.update(
        DJANGO_DEBUG="false",
        HIKYO_LOG_LEVEL="WARNING",
        HIKYO_OPERATOR_FETCH_QPS=f"{qps:g}",
        HIKYO_OPERATOR_FETCH_BURST=str(max(1, int(qps * 2))),
    )
    cleanup.callback(operator.stop)
    requests_before, fetches_before = _apiserver_requests(api), len(hikyo.requests)
    handshakes_before = handshakes.count
    cpu_before = _cpu_now(cluster)
    started = time.monotonic()
    leader = operator.start_leader()  # waits for /healthz
    sampler = dashboard.Sampler(leader.pid)
    cleanup.callback(sampler.stop)
    sampler.start()
    progress: list[tuple[float, int]] = []

    def all_ready() -> bool:
        ready, listed = ready_count(api)
        progress.append((time.monotonic() - started, ready))
        return ready == listed == count

    wait_for(all_ready, timeout=READY_TIMEOUT, interval=0.5, what="every CR Ready")
    p1 = time.monotonic() - started
    after = sampler.sample()
    cpu = cpu_seconds(leader.pid)
    machine_cpu = _cpu_since(cluster, cpu_before, p1)
    requests = _apiserver_requests(api) - requests_before
    requests["hikyosecrets LIST"] -= len(progress)  # this bench's own polls
    answered = hikyo.requests[fetches_before:]
    fetches = len(answered)
    tls = handshakes.count - handshakes_before
    report: dict[str, Any] = {
        "crs": count,
        "keys_per_secret": KEYS,
        "namespaces": NAMESPACES,
        "fetch_qps": qps,
        "creation_seconds": round(creation_seconds, 1),
        "p1_cold_seconds": round(p1, 2),
        "ready_after_seconds": {
            f"{share}%": next((round(t, 1) for t, n in progress if n >= count * share / 100), None)
            for share in (25, 50, 75, 100)
        },
        "hikyo_requests": fetches,
        "hikyo_tls_handshakes": tls,
        "hikyo_by_method_status": dict(
            sorted(Counter(f"{r.method} {r.status}" for r in answered).items())
        ),
        "apiserver_requests": sum(requests.values()),
        "apiserver_requests_per_cr": round(sum(requests.values()) / count, 2),
        "apiserver_by_resource_verb": dict(sorted(requests.items())),
        "operator_cpu_seconds": None if cpu is None else round(cpu, 1),
        "operator_cpu_ms_per_cr": None if cpu is None else round(cpu * 1000 / count, 1),
        **machine_cpu,
        "rss_at_all_ready_mib": dashboard._mib(after["VmRSS"]),
        "vmhwm_at_all_ready_mib": dashboard._mib(after["VmHWM"]),
    }
    if browse:
        wait_for(
            lambda: readyz(operator.http_port)[0] == 200, timeout=60, interval=0.5, what="ready"
        )
        seeded = _browse_store(operator.env, count)
        browse_start = time.monotonic()
        browsed = dashboard.browse(
            f"http://{leader.env['HIKYO_OPERATOR_HEALTH_ADDR']}",
            "bench-admin",
            seeded["password"],
            seeded["store"],
            50,
        )
        end = sampler.sample()
        report["browse"] = {
            "pages": browsed["pages"],
            "seconds": round(time.monotonic() - browse_start, 1),
            "rss_end_mib": dashboard._mib(end["VmRSS"]),
            "vmhwm_lifetime_mib": dashboard._mib(end["VmHWM"]),
        }
    end = sampler.sample()
    if not end or not leader.alive():
        raise RuntimeError("the operator exited during the run")
    report["vmhwm_lifetime_mib"] = dashboard._mib(end["VmHWM"])
    report["rss_anon_end_mib"] = dashboard._mib(end["RssAnon"])
    report["limit_mib"] = dashboard.LIMIT_MIB
    report["within_limit"] = end["VmHWM"] <= dashboard.LIMIT_MIB * 1024
    sampler.stop()
    operator.stop()
    if with_floor:
        floors = []
        for threads in (1, 8):
            before = _cpu_now(cluster)
            measured = floor(api, hikyo, world, threads)
            floors.append({**measured, **_cpu_since(cluster, before, measured["seconds"])})
        report["floor"] = floors
        report["p1_ratio_to_floor"] = {
            f"{f['threads']}_thread": round(p1 / f["seconds"], 2) for f in floors
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crs", type=int, default=1000, help="HikyoSecrets (1000)")
    parser.add_argument(
        "--fetch-qps", type=float, default=1000.0, help="per-instance QPS (1000; default 10)"
    )
    parser.add_argument("--browse", action="store_true", help="page the dashboard afterwards")
    parser.add_argument("--no-floor", action="store_true", help="skip the floor runs")
    options = parser.parse_args()
    if options.crs < 1 or options.fetch_qps <= 0:
        parser.error("--crs must be at least 1 and --fetch-qps positive")
    signal.signal(signal.SIGTERM, dashboard._terminate)
    with contextlib.ExitStack() as cleanup:
        report = run(options.crs, options.fetch_qps, options.browse, not options.no_floor, cleanup)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
