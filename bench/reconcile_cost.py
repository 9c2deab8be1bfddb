"""What a reconcile costs: wall time and apiserver requests for first syncs and for unchanged
resyncs, against a real local control plane and the devserver. Prints one JSON object.

    python bench/reconcile_cost.py [--crs 100]

Figures, not assertions (tests never assert timings). The steady-state numbers are the ones
that matter at thousands of objects: an unchanged resync should be one conditional fetch and
zero Kubernetes writes (S4.17).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

from kubernetes import client, config  # noqa: E402

from bench.common import bench_hikyosecret, bench_instance  # noqa: E402
from devserver import DevServer, new_id  # noqa: E402
from hikyo.clients import ClientCache  # noqa: E402
from k8s.crd_manifests import install_crds  # noqa: E402
from k8s.gateway import KubeCluster  # noqa: E402
from localcluster import LocalControlPlane, locate_binaries  # noqa: E402
from workers.engine.reconcile import Engine, reconcile  # noqa: E402
from workers.engine.settings import OperatorSettings  # noqa: E402
from workers.queue.memory import MemoryQueue  # noqa: E402

NAMESPACE = "bench"


def _requests(api: client.ApiClient) -> Counter[str]:
    """apiserver_request_total by verb for the resources a reconcile touches."""
    method, url, headers, *_ = api.param_serialize(
        "GET", "/metrics", header_params={"Accept": "text/plain"}, auth_settings=["BearerToken"]
    )
    response = api.call_api(method, url, header_params=headers)
    response.read()
    totals: Counter[str] = Counter()
    for line in response.data.decode().splitlines():
        if line.startswith("apiserver_request_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            if labels.get("resource") in {"secrets", "hikyosecrets", "hikyoinstances", "events"}:
                totals[labels["verb"]] += int(float(line.rsplit(" ", 1)[1]))
    return totals


def _pass(engine: Engine, names: list[str]) -> list[float]:
    durations = []
    for name in names:
        started = time.perf_counter()
        reconcile(engine, NAMESPACE, name)
        durations.append(time.perf_counter() - started)
    return durations


def _summary(
    durations: list[float], before: Counter[str], after: Counter[str], fetches: int
) -> dict[str, object]:
    delta = {verb: after[verb] - before[verb] for verb in after if after[verb] != before[verb]}
    writes = sum(n for verb, n in delta.items() if verb not in ("GET", "LIST", "WATCH"))
    return {
        "reconciles": len(durations),
        "ms_median": round(statistics.median(durations) * 1000, 2),
        "ms_p95": round(sorted(durations)[int(len(durations) * 0.95) - 1] * 1000, 2),
        "apiserver_requests_per_reconcile": round(sum(delta.values()) / len(durations), 2),
        "apiserver_writes": writes,
        "by_verb": delta,
        "hikyo_fetches": fetches,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crs", type=int, default=100)
    count = parser.parse_args().crs

    cluster = LocalControlPlane(locate_binaries(), Path(tempfile.mkdtemp(prefix="bench-")))
    cluster.start()
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    try:
        install_crds(api)
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        for name in ("hikyo-system", NAMESPACE):
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        with DevServer() as hikyo:
            org, project, environment = new_id("org"), new_id("prj"), new_id("env")
            hikyo.publish(
                org,
                project,
                environment,
                [
                    {"name": f"KEY_{i}", "classification": "config", "value": f"value-{i}"}
                    for i in range(10)
                ],
            )
            hikyo.add_credential("bench-token", org, project, environment)
            custom.create_cluster_custom_object(
                "hikyo.dev",
                "v1alpha1",
                "hikyoinstances",
                bench_instance(hikyo.url, hikyo.ca_bundle_b64),
            )
            core.create_namespaced_secret(
                NAMESPACE,
                client.V1Secret(
                    metadata=client.V1ObjectMeta(
                        name="credential",
                        labels={"hikyo.dev/delivery": "true", "hikyo.dev/instance": "bench"},
                    ),
                    string_data={"hikyo-token": "bench-token"},
                ),
            )
            names = [f"app-{i}" for i in range(count)]
            for name in names:
                custom.create_namespaced_custom_object(
                    "hikyo.dev",
                    "v1alpha1",
                    NAMESPACE,
                    "hikyosecrets",
                    bench_hikyosecret(name, (org, project, environment)),
                )
            engine = Engine(
                cluster=KubeCluster(api),
                store=MemoryQueue(),
                settings=OperatorSettings(
                    operator_namespace="hikyo-system", fetch_qps=1000, fetch_burst=1000
                ),
                client_for=ClientCache(),
            )
            results = {}
            for label in ("first_sync", "first_current", "unchanged_resync"):
                before, fetched = _requests(api), len(hikyo.requests)
                durations = _pass(engine, names)
                results[label] = _summary(
                    durations, before, _requests(api), len(hikyo.requests) - fetched
                )
    finally:
        api.close()
        cluster.stop()
    print(json.dumps({"crs": count, "keys_per_secret": 10, **results}, indent=2))


if __name__ == "__main__":
    main()
