"""Workers survive Redis (issue 7 item 4, S8.4): in scaled mode, redis-server killed with
SIGKILL and restarted empty, three times in a row, while reconciles are in flight. Both
``celery worker`` processes keep working (Celery's reconnect used to die with "Unrecoverable
error: AttributeError('NoneType' object has no attribute 'hostname')"), and after each loss a
change reaches every HikyoSecret: nothing lost, nothing wrongly deleted, no tracebacks.
"""

from __future__ import annotations

import pytest

from devserver import Fault
from tests.support.factories import GROUP, VERSION
from tests.support.operator_harness import Operator
from tests.support.processes import RedisServer, locate_redis_server
from tests.support.waiting import wait_for
from tests.support.world import World, canary

COUNT = 10
ROUNDS = 3
# One fetch per round is slow, so at the kill a worker has a run in flight (an unacknowledged
# message) while its other pool slot waits in BRPOP: the state whose reconnect killed workers.
SLOW_FETCH_SECONDS = 6.0


def _mapping(secret_key: str) -> list[dict[str, str]]:
    return [{"key": "DATABASE_URL"}, {"key": "LOG_LEVEL", "secretKey": secret_key}]


def _crs(world: World) -> list[dict]:
    return world.custom.list_namespaced_custom_object(
        GROUP, VERSION, world.namespace, "hikyosecrets"
    )["items"]


def _ready(item: dict) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (item.get("status") or {}).get("conditions") or []
    )


def _lagging(world: World, names: dict[str, str], expected: dict[str, bytes]) -> list[str]:
    """CRs (by name) not Ready, or whose target Secret does not hold exactly ``expected``."""
    items = {item["metadata"]["name"]: item for item in _crs(world)}
    lagging = []
    for name, target in names.items():
        secret = world.target(target)
        current = secret is not None and secret.data == expected
        if name not in items or not _ready(items[name]) or not current:
            lagging.append(name)
    return lagging


@pytest.mark.timeout(1500)
def test_two_workers_survive_redis_lost_three_times_and_nothing_is_lost(
    world, kubeconfig, tmp_path, postgres_server
):
    redis_server = RedisServer(tmp_path / "redis", locate_redis_server(False)).start()
    operator = Operator(tmp_path, kubeconfig, redis_server.url, postgres_server.url)
    log_level = canary("value")
    database_url = world.publish(DATABASE_URL=canary("value"), LOG_LEVEL=log_level)["DATABASE_URL"]
    world.grant()
    world.create_instance()
    world.create_credential()
    names = {f"app-{i}": f"app-env-{i}" for i in range(COUNT)}
    for name, target in names.items():
        world.create_cr(name, target={"name": target})
    expected = {"DATABASE_URL": database_url.encode(), "log-level": log_level.encode()}
    try:
        operator.start_leader()
        workers = [operator.start_worker("w1"), operator.start_worker("w2")]
        wait_for(
            lambda: not _lagging(world, names, expected),
            timeout=300,
            interval=1,
            what=f"{COUNT} HikyoSecrets Ready with their values",
        )
        secret_uids = {target: world.target(target).uid for target in names.values()}

        for round_ in range(1, ROUNDS + 1):
            # A value change and a spec change (generation bump, so the watch enqueues every
            # CR); the round's first fetch is slow, so a reconcile is in flight when Redis dies.
            secret_key = f"log-level-r{round_}"
            database_url = world.publish(DATABASE_URL=canary("value"), LOG_LEVEL=log_level)[
                "DATABASE_URL"
            ]
            world.devserver.set_fault(None, Fault.slow(SLOW_FETCH_SECONDS), times=1)
            fetched = len(world.requests())
            for name in names:
                world.patch_cr(name, {"mapping": _mapping(secret_key)})
            wait_for(  # every CR's fetch has arrived; the slow one is still being answered
                lambda fetched=fetched: len(world.requests()) >= fetched + len(names),
                timeout=120,
                what=f"round {round_}: every CR fetching",
            )

            redis_server.kill()  # SIGKILL: no goodbye to any client
            redis_server.start()  # same port, no persistence: back empty

            # A change after the loss: a new CR, reconciled from the empty store (S8.4).
            extra = f"extra-{round_}"
            names[extra] = f"extra-env-{round_}"
            world.create_cr(extra, target={"name": names[extra]}, mapping=_mapping(secret_key))
            expected = {"DATABASE_URL": database_url.encode(), secret_key: log_level.encode()}
            wait_for(
                lambda expected=expected: not _lagging(world, names, expected),
                timeout=400,
                interval=2,
                what=f"round {round_}: all {len(names)} HikyoSecrets current after Redis loss",
            )
            world.devserver.clear_faults()
            dead = [worker.name for worker in workers if not worker.alive()]
            assert not dead, f"round {round_}: worker(s) {dead} exited:\n{operator.logs()[-4000:]}"

        worker_logs = {worker.name: worker.log() for worker in workers}  # before stopping
    finally:
        world.devserver.clear_faults()
        operator.stop()
        redis_server.stop()

    # No CR lost: every one exists and is Ready with the latest values (checked above); no
    # wrong deletion: each original target is the same object (never deleted and recreated).
    assert {item["metadata"]["name"] for item in _crs(world)} == set(names)
    assert {target: world.target(target).uid for target in secret_uids} == secret_uids
    for name, text in worker_logs.items():
        assert "Connection to broker lost" in text, f"{name} never saw Redis go away"
        assert "Unrecoverable error" not in text, f"{name}:\n{text[-4000:]}"
        assert "Traceback" not in text, f"{name}:\n{text[-4000:]}"
