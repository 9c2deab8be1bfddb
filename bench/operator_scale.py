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
one status merge-patch; with 1 thread and with 8. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

import dashboard_memory as dashboard  # noqa: E402

from bench.common import bench_hikyosecret, bench_instance  # noqa: E402

NAMESPACES = 10
KEYS = 10
TOKEN = "bench-token"  # a devserver credential of this run only
READY_TIMEOUT = 1800.0
RESOURCES = ("hikyosecrets", "hikyoinstances", "secrets", "events", "leases", "serviceaccounts")


def _apiserver_requests(api: Any) -> Counter[str]:
    """apiserver_request_total as "resource VERB" for the resources the operator touches."""
    method, url, headers, *_ = api.param_serialize(
        "GET", "/metrics", header_params={"Accept": "text/plain"}, auth_settings=["BearerToken"]
    )
    response = api.call_api(method, url, header_params=headers, _request_timeout=(5, 60))
    response.read()
    totals: Counter[str] = Counter()
    for line in response.data.decode().splitlines():
        if line.startswith("apiserver_request_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            resource = labels.get("resource", "")
            if resource in RESOURCES:
                sub = f"/{labels['subresource']}" if labels.get("subresource") else ""
                totals[f"{resource}{sub} {labels['verb']}"] += int(float(line.rsplit(" ", 1)[1]))
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


def _world(api: Any, hikyo: Any, count: int) -> dict[str, Any]:
    from kubernetes import client

    from devserver import new_id

    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    names = [f"bench-{i}" for i in range(NAMESPACES)]
    for name in ("hikyo-system", *names):
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    org, project, environment = new_id("org"), new_id("prj"), new_id("env")
    hikyo.publish(
        org,
        project,
        environment,
        [{"name": f"KEY_{i}", "classification": "config", "value": f"v-{i}"} for i in range(KEYS)],
    )
    hikyo.add_credential(
        TOKEN, org, project, environment, grants=("read", "reveal", "report-delivery-status")
    )
    custom.create_cluster_custom_object(
        "hikyo.dev",
        "v1alpha1",
        "hikyoinstances",
        bench_instance(hikyo.url, hikyo.ca_bundle_b64),
    )
    for namespace in names:
        core.create_namespaced_secret(
            namespace,
            client.V1Secret(
                metadata=client.V1ObjectMeta(
                    name="credential",
                    labels={"hikyo.dev/delivery": "true", "hikyo.dev/instance": "bench"},
                ),
                string_data={"hikyo-token": TOKEN},
            ),
        )
    crs = [(names[i % NAMESPACES], f"app-{i:05d}") for i in range(count)]

    def create(cr: tuple[str, str]) -> None:
        namespace, name = cr
        custom.create_namespaced_custom_object(
            "hikyo.dev",
            "v1alpha1",
            namespace,
            "hikyosecrets",
            bench_hikyosecret(name, (org, project, environment)),
        )

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, crs))
    return {"crs": crs, "delivery_url": hikyo.delivery_url(org, project, environment)}


def _ready(api: Any) -> tuple[int, int]:
    """(CRs Ready=True at their generation, CRs) from one LIST."""
    from kubernetes import client

    listed = client.CustomObjectsApi(api).list_cluster_custom_object(
        "hikyo.dev", "v1alpha1", "hikyosecrets", _request_timeout=(5, 120)
    )
    ready = 0
    for item in listed["items"]:
        status = item.get("status") or {}
        generation = item["metadata"].get("generation")
        if status.get("observedGeneration") == generation and any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or ()
        ):
            ready += 1
    return ready, len(listed["items"])


def floor(api: Any, hikyo: Any, world: dict[str, Any], threads: int) -> dict[str, Any]:
    """Per CR: one fetch (kept-alive), one Secret create, one status merge-patch."""
    import urllib3
    from kubernetes import client

    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    pool = urllib3.PoolManager(
        maxsize=threads, ca_certs=str(hikyo.ca_path), timeout=urllib3.Timeout(5, 30)
    )
    label = f"floor{threads}"

    def one(cr: tuple[str, str]) -> None:
        namespace, name = cr
        answer = pool.request(
            "GET", world["delivery_url"], headers={"Authorization": f"Bearer {TOKEN}"}
        )
        if answer.status != 200:
            raise RuntimeError(f"floor fetch answered {answer.status}")
        body = json.loads(answer.data)
        data = {str(i): str(len(json.dumps(body))) for i in range(KEYS)}
        core.create_namespaced_secret(
            namespace,
            client.V1Secret(metadata=client.V1ObjectMeta(name=f"{name}-{label}"), string_data=data),
        )
        custom.patch_namespaced_custom_object_status(
            "hikyo.dev",
            "v1alpha1",
            namespace,
            "hikyosecrets",
            name,
            {"status": {"message": label}},
        )

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as workers:
        list(workers.map(one, world["crs"]))
    pool.clear()
    return {"threads": threads, "seconds": round(time.perf_counter() - started, 2)}


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


def run(
    count: int, qps: float, browse: bool, with_floor: bool, cleanup: contextlib.ExitStack
) -> dict:
    from kubernetes import config

    from devserver import DevServer
    from k8s.crd_manifests import install_crds
    from k8s.localcluster import LocalControlPlane, locate_binaries
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
    world = _world(api, hikyo, count)
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
    started = time.monotonic()
    leader = operator.start_leader()  # waits for /healthz
    sampler = dashboard.Sampler(leader.pid)
    cleanup.callback(sampler.stop)
    sampler.start()
    progress: list[tuple[float, int]] = []

    def all_ready() -> bool:
        ready, listed = _ready(api)
        progress.append((time.monotonic() - started, ready))
        return ready == listed == count

    wait_for(all_ready, timeout=READY_TIMEOUT, interval=0.5, what="every CR Ready")
    p1 = time.monotonic() - started
    after = sampler.sample()
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
        floors = [floor(api, hikyo, world, threads) for threads in (1, 8)]
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
