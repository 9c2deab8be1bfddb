"""Issue 33 item 5: a Celery worker that loses Redis and gets it back says so without an ERROR.

The worker is started as the chart starts it (no ``--without-gossip``/``--without-mingle``), on
its own real redis-server, which the test stops and starts again on the same port. Celery's
gossip step used to fail on the restart (``ERROR celery.bootsteps Error on restarting Gossip:
AttributeError``) although the worker recovered; the worker needs neither gossip nor mingle
(slots are advertised through the keyed store, workers/broker_window.py), so neither runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.conftest import SKIP_INTEGRATION
from tests.support.kube import unreached_kubeconfig
from tests.support.processes import RedisServer, Service, free_port, locate_redis_server
from tests.support.waiting import wait_for


def _worker(tmp_path: Path, redis_url: str, database_url: str) -> Service:
    argv = [
        sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker",
        "--pool", "threads", "--concurrency", "1", "--loglevel", "INFO", "-n", "loss@%h",
    ]  # fmt: skip
    env = {
        "HIKYO_OPERATOR_REDIS_URL": redis_url,
        "REDIS_URL": "",
        "HIKYO_OPERATOR_DATABASE_URL": database_url,
        "DATABASE_URL": "",
        "HIKYO_OPERATOR_NAMESPACE": "hikyo-system",
        "HIKYO_OPERATOR_DATA_DIR": str(tmp_path / "data"),
        "HIKYO_OPERATOR_METRICS_ADDR": f"127.0.0.1:{free_port()}",
        "KUBECONFIG": str(unreached_kubeconfig(tmp_path)),  # loaded at the start, never reached
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return Service("worker", argv, tmp_path / "worker.log", env)


def test_a_worker_survives_a_redis_restart_without_an_error(tmp_path, postgres_server):
    redis = RedisServer(tmp_path / "redis", locate_redis_server(SKIP_INTEGRATION)).start()
    worker = _worker(tmp_path, redis.url, postgres_server.url)
    try:
        worker.start()

        def log() -> str:
            assert worker.alive(), worker.log_path.read_text()[-3000:]
            return worker.log_path.read_text()

        wait_for(lambda: " ready." in log(), timeout=90, what="the worker to be ready")
        for loss in (1, 2):  # the second loss follows a reconnect, as in a rolling Redis
            redis.stop()
            wait_for(
                lambda: log().count("Connection to broker lost") >= loss,  # noqa: B023
                timeout=60,
                what="the worker to notice",
            )
            redis.start()
            wait_for(
                lambda: log().count("Connected to ") >= loss + 1,  # noqa: B023
                timeout=90,
                what="the worker to reconnect",
            )
        text = log()
        assert "Error on restarting" not in text, text[-3000:]
        assert "Gossip" not in text and "mingle" not in text.lower(), text[-3000:]
        # Nor Celery's nine-line warning about runs kept on a lost connection, nor a traceback.
        assert "CPendingDeprecationWarning" not in text and "Traceback" not in text, text[-3000:]
        errors = [line for line in text.splitlines() if "ERROR" in line and "bootsteps" in line]
        assert errors == [], errors
        assert worker.alive()
    finally:
        worker.stop()
        redis.stop()
