"""The load the operator benchmarks measure: one Hikyo scope of KEYS config keys on the devserver,
one HikyoInstance, a bootstrap credential per namespace and N HikyoSecrets spread over
NAMESPACES namespaces, each with its own target; and the floor that does the same work bare."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from bench.apiserver import CALL_TIMEOUT, list_json, ready_at_generation
from bench.common import CREDENTIAL, INSTANCE, bench_hikyosecret, create_bench_instance
from workers.engine.expiry import rfc3339

NAMESPACES = 10
KEYS = 10
TOKEN = "bench-token"  # a devserver credential of this run only
CREATE_THREADS = 8
OPERATOR_NAMESPACE = "hikyo-system"
HIKYOSECRETS = "/apis/hikyo.dev/v1alpha1/hikyosecrets"


def key_items(suffix: str = "") -> list[dict[str, str]]:
    """The scope's KEYS config keys; ``suffix`` changes every value (a new revision)."""
    return [
        {"name": f"KEY_{i}", "classification": "config", "value": f"v-{i}{suffix}"}
        for i in range(KEYS)
    ]


def create_world(
    api: Any,
    hikyo: Any,
    count: int,
    resync_seconds: int | None = None,
    namespaces: int = NAMESPACES,
) -> dict[str, Any]:
    """``namespaces`` namespaces, the scope and its credential, the instance, and ``count``
    HikyoSecrets spread over them (``resync_seconds`` their resyncInterval, else the CRD
    default). Returns the CRs as (namespace, name), the delivery URL and the scope."""
    from kubernetes import client

    from devserver import new_id

    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    names = [f"bench-{i}" for i in range(namespaces)]
    for name in (OPERATOR_NAMESPACE, *names):
        core.create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=name)),
            _request_timeout=CALL_TIMEOUT,
        )
    org, project, environment = new_id("org"), new_id("prj"), new_id("env")
    hikyo.publish(org, project, environment, key_items())
    hikyo.add_credential(
        TOKEN, org, project, environment, grants=("read", "reveal", "report-delivery-status")
    )
    create_bench_instance(custom, hikyo.url, hikyo.ca_bundle_b64, CALL_TIMEOUT)
    for namespace in names:
        core.create_namespaced_secret(
            namespace,
            client.V1Secret(
                metadata=client.V1ObjectMeta(
                    name=CREDENTIAL,
                    labels={"hikyo.dev/delivery": "true", "hikyo.dev/instance": INSTANCE},
                ),
                string_data={"hikyo-token": TOKEN},
            ),
            _request_timeout=CALL_TIMEOUT,
        )
    crs = [(names[i % namespaces], f"app-{i:05d}") for i in range(count)]
    scope = (org, project, environment)

    def create(cr: tuple[str, str]) -> int:
        namespace, name = cr
        created = custom.create_namespaced_custom_object(
            "hikyo.dev",
            "v1alpha1",
            namespace,
            "hikyosecrets",
            bench_hikyosecret(name, scope, resync_seconds),
            _request_timeout=CALL_TIMEOUT,
        )
        return created["metadata"]["generation"]

    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        generations = list(pool.map(create, crs))
    return {
        "crs": crs,
        "generation": dict(zip(crs, generations, strict=True)),
        "delivery_url": hikyo.delivery_url(*scope),
        "scope": scope,
    }


def ready_count(api: Any) -> tuple[int, int]:
    """(CRs Ready=True at their generation, CRs) from one raw LIST."""
    items = list_json(api, HIKYOSECRETS)
    return sum(1 for item in items if ready_at_generation(item)), len(items)


def floor_status(generation: int, label: str, now: str) -> dict[str, Any]:
    """The least status that ends a CR's cold start as P1 sees it: Ready=True at the CR's
    generation. Every field is in the CRD's status schema: a field it lacks is pruned, and a
    patch left with nothing to change writes nothing (the floor once patched such a field, so
    its "status write" never reached etcd)."""
    return {
        "status": {
            "observedGeneration": generation,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Delivered",
                    "message": label,
                    "lastTransitionTime": now,
                    "observedGeneration": generation,
                }
            ],
        }
    }


def floor(api: Any, hikyo: Any, world: dict[str, Any], threads: int) -> dict[str, Any]:
    """Per CR: one fetch (kept-alive), one Secret create, one status merge-patch that writes
    Ready=True at the CR's generation (floor_status), as the operator's cold start ends."""
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
            _request_timeout=CALL_TIMEOUT,
        )
        now = rfc3339(datetime.now(UTC))
        patched = custom.patch_namespaced_custom_object_status(
            "hikyo.dev",
            "v1alpha1",
            namespace,
            "hikyosecrets",
            name,
            floor_status(world["generation"][cr], label, now),
            _request_timeout=CALL_TIMEOUT,
        )
        kept = patched["status"]["conditions"][0]["message"] == label
        if not (kept and ready_at_generation(patched)):
            raise RuntimeError(f"the floor's status patch of {namespace}/{name} was not kept")

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as workers:
        list(workers.map(one, world["crs"]))
    pool.clear()
    return {"threads": threads, "seconds": round(time.perf_counter() - started, 2)}
