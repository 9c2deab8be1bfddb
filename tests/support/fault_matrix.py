"""The fault matrix (issue 7): what each fault test measures and how it is printed.

A fault test sets up one or more fleets of HikyoSecrets, lets the operator's real processes
converge them, records every target Secret's UID, injects its fault, makes a change, and waits
(event-based, ``wait_for``) until every CR is Ready with its Secret holding the currently
published values. Each test fills one :class:`FaultRow`; ``tests/integration/conftest.py``
prints the rows at the end of the session (``pytest_terminal_summary``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import signal
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from devserver import Fault, RecordedRequest
from tests.support.factories import GROUP, VERSION
from tests.support.operator_harness import Operator
from tests.support.processes import REPO, Service
from tests.support.waiting import wait_for
from tests.support.world import World, canary

# What may never appear in an operator or worker log, whatever the fault.
FORBIDDEN_LOG_TEXT = ("Traceback", "Unrecoverable error")


# -- the table ----------------------------------------------------------------------------------


@dataclass
class FaultRow:
    name: str
    mode: str
    converged: int = 0
    total: int = 0
    lost: int = 0
    wrong_deletions: int = 0
    seconds: float | None = None
    note: str = ""  # a skip's reason, or how the test failed before measuring

    def line(self) -> str:
        if self.note and self.seconds is None:
            return f"{self.name:<38} {self.mode:<9} {self.note}"
        seconds = "-" if self.seconds is None else f"{self.seconds:.1f}"
        return (
            f"{self.name:<38} {self.mode:<9} {f'{self.converged}/{self.total}':>9} "
            f"{self.lost:>5} {self.wrong_deletions:>16} {seconds:>8}"
            + (f"  {self.note}" if self.note else "")
        )


ROWS: list[FaultRow] = []
HEADER = (
    f"{'fault':<38} {'mode':<9} {'converged':>9} {'lost':>5} {'wrong deletions':>16} {'seconds':>8}"
)


def table_lines() -> list[str]:
    """The printed fault matrix; empty when no fault test ran."""
    if not ROWS:
        return []
    return ["fault matrix (issue 7; seconds = from the change after the fault to converged)",
            HEADER, *(row.line() for row in ROWS)]  # fmt: skip


@contextlib.contextmanager
def fault_row(name: str, mode: str) -> Iterator[FaultRow]:
    """A row in the table, kept even when the test fails (then with how it failed)."""
    row = FaultRow(name, mode)
    ROWS.append(row)
    try:
        yield row
    except BaseException as error:
        if row.seconds is None and not row.note:
            row.note = f"failed before converging: {type(error).__name__}"
        raise


def skip_row(name: str, mode: str, reason: str) -> None:
    ROWS.append(FaultRow(name, mode, note=f"skipped: {reason}"))


def assert_row_clean(row: FaultRow) -> None:
    assert row.total > 0, row
    assert row.converged == row.total, row
    assert row.lost == 0, row
    assert row.wrong_deletions == 0, row


# -- fleets of HikyoSecrets ---------------------------------------------------------------------


def mapping(secret_key: str) -> list[dict[str, str]]:
    return [{"key": "DATABASE_URL"}, {"key": "LOG_LEVEL", "secretKey": secret_key}]


@dataclass
class Fleet:
    """``count`` HikyoSecrets of one World (one Hikyo instance and credential), and what their
    target Secrets must hold: the values currently published, under the current mapping."""

    world: World
    prefix: str
    count: int
    resync: str | None = None  # spec.resyncInterval; None: the 5 min default
    names: dict[str, str] = field(default_factory=dict)  # CR name -> target Secret name
    database_url: str = ""
    log_level: str = ""
    secret_key: str = "log-level"
    baseline_uids: dict[str, str] = field(default_factory=dict)  # target -> UID before the fault
    extras: int = 0

    def create(self) -> Fleet:
        """Publishes values, grants, creates the instance, the credential and the CRs."""
        self.log_level = canary("value")
        self.database_url = self.world.publish(
            DATABASE_URL=canary("value"), LOG_LEVEL=self.log_level
        )["DATABASE_URL"]
        self.world.grant()
        self.world.create_instance()
        self.world.create_credential()
        for index in range(self.count):
            self.add_cr(f"{self.prefix}-{index}")
        return self

    def add_cr(self, name: str) -> None:
        spec: dict[str, Any] = {
            "target": {"name": f"{name}-env"},
            "mapping": mapping(self.secret_key),
        }
        if self.resync:
            spec["resyncInterval"] = self.resync
        self.world.create_cr(name, **spec)
        self.names[name] = f"{name}-env"

    def publish_new_value(self) -> None:
        self.database_url = self.world.publish(
            DATABASE_URL=canary("value"), LOG_LEVEL=self.log_level
        )["DATABASE_URL"]

    def change(self, label: str) -> None:
        """A change the operator can only meet by watching: a new published value, a spec change
        on every CR (new generation: the watch enqueues each) and one new CR."""
        self.publish_new_value()
        self.secret_key = f"log-level-{label}"
        for name in self.names:
            self.world.patch_cr(name, {"mapping": mapping(self.secret_key)})
        self.extras += 1
        self.add_cr(f"{self.prefix}-extra-{self.extras}")

    def expected(self) -> dict[str, bytes]:
        return {
            "DATABASE_URL": self.database_url.encode(),
            self.secret_key: self.log_level.encode(),
        }

    def _secrets(self) -> dict[str, Any]:
        listed = self.world.core.list_namespaced_secret(self.world.namespace)
        return {secret.metadata.name: secret for secret in listed.items}

    def lagging(self) -> list[str]:
        """CRs (by name) not Ready, or whose target Secret does not hold exactly the expected
        data. One list of CRs and one of Secrets per call: cheap enough to poll."""
        items = {
            item["metadata"]["name"]: item
            for item in self.world.custom.list_namespaced_custom_object(
                GROUP, VERSION, self.world.namespace, "hikyosecrets"
            )["items"]
        }
        secrets = self._secrets()
        expected = self.expected()
        behind = []
        for name, target in self.names.items():
            secret = secrets.get(target)
            data = {
                k: base64.b64decode(v) for k, v in ((secret.data or {}) if secret else {}).items()
            }
            if name not in items or not _ready(items[name]) or secret is None or data != expected:
                behind.append(name)
        return behind

    def record_uids(self) -> None:
        secrets = self._secrets()
        self.baseline_uids = {
            t: secrets[t].metadata.uid for t in self.names.values() if t in secrets
        }
        assert len(self.baseline_uids) == len(self.names), "a target Secret is missing"

    def wrong_deletions(self) -> list[str]:
        """Targets recorded before the fault that are gone now or were deleted and recreated
        (another UID): no fault may make the operator delete a Secret it should keep."""
        secrets = self._secrets()
        return [
            target
            for target, uid in self.baseline_uids.items()
            if target not in secrets or secrets[target].metadata.uid != uid
        ]

    def release(self) -> None:
        """Test hygiene once the operator is stopped: drops our finalizers and deletes the CRs,
        so the next test's operator (it watches every namespace) has none of them to finalize
        or reconcile while this namespace is still being torn down."""
        custom, namespace = self.world.custom, self.world.namespace
        for name in self.names:
            with contextlib.suppress(ApiException):  # gone already, or never created
                custom.patch_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    namespace,
                    "hikyosecrets",
                    name,
                    {"metadata": {"finalizers": None}},
                )
                custom.delete_namespaced_custom_object(
                    GROUP, VERSION, namespace, "hikyosecrets", name
                )

        def gone() -> bool:
            listed = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "hikyosecrets")
            return not {item["metadata"]["name"] for item in listed["items"]} & set(self.names)

        wait_for(gone, timeout=60, what="the fault test's HikyoSecrets to be deleted")


def _ready(item: dict[str, Any]) -> bool:
    """Ready=True for the CR's current generation: a Ready left from before a spec change
    does not count."""
    generation = item["metadata"].get("generation")
    return any(
        c["type"] == "Ready" and c["status"] == "True" and c.get("observedGeneration") == generation
        for c in (item.get("status") or {}).get("conditions") or []
    )


def converge(fleets: list[Fleet], timeout: float, what: str, interval: float = 1.0) -> float:
    """Waits until no fleet lags and returns the seconds waited; on timeout raises
    NotConverged, which says how many converged and who did not."""
    started = time.monotonic()
    try:
        wait_for(
            lambda: not any(fleet.lagging() for fleet in fleets),
            timeout=timeout,
            interval=interval,
            what=what,
        )
    except AssertionError as error:
        behind = [name for fleet in fleets for name in fleet.lagging()]
        total = sum(len(fleet.names) for fleet in fleets)
        raise NotConverged(total - len(behind), total, behind, str(error)) from None
    return time.monotonic() - started


class NotConverged(AssertionError):
    def __init__(self, converged: int, total: int, behind: list[str], message: str) -> None:
        self.converged, self.total, self.behind = converged, total, behind
        super().__init__(f"{message}; {len(behind)} of {total} never converged: {behind[:20]}")


def measure(row: FaultRow, fleets: list[Fleet], timeout: float, what: str) -> None:
    """Fills ``row`` from one convergence wait (started right after the change) and the UIDs
    recorded before the fault; a CR that never converges within ``timeout`` counts as lost."""
    try:
        row.seconds = converge(fleets, timeout, what)
        row.total = row.converged = sum(len(fleet.names) for fleet in fleets)
    except NotConverged as error:
        row.converged, row.total, row.lost = error.converged, error.total, len(error.behind)
        row.seconds = timeout
        row.note = "timed out"
        raise
    finally:
        row.wrong_deletions = sum(len(fleet.wrong_deletions()) for fleet in fleets)


def stop_keeping_logs(operator: Operator) -> dict[str, str]:
    """Stops every process and returns their logs as they were just before the stop: what the
    log checks judge is the fault, not how a test ends its processes."""
    logs = {service.name: service.log() for service in operator.services}
    operator.stop()
    return logs


def assert_logs_clean(logs: dict[str, str]) -> None:
    """No traceback and no "Unrecoverable error" in any operator or worker log."""
    assert logs, "no process logs kept"
    for name, text in logs.items():
        for forbidden in FORBIDDEN_LOG_TEXT:
            at = text.find(forbidden)
            assert at < 0, f"{forbidden!r} in {name}'s log:\n{text[max(0, at - 2000) : at + 3000]}"


# -- a worker's reconcile in flight ------------------------------------------------------------

_TASK = re.compile(
    r"Task hikyo\.reconcile(?:_full)?\[([0-9a-f-]+)\] (received|succeeded|failed|raised|retry)"
)


def reconciles_in_flight(log: str) -> int:
    """Reconcile tasks a celery worker's log shows received and not yet finished (prefetch is
    1, so these are running or about to)."""
    received: set[str] = set()
    finished: set[str] = set()
    for task_id, what in _TASK.findall(log):
        (received if what == "received" else finished).add(task_id)
    return len(received - finished)


# -- a Hikyo server in its own process (to SIGSTOP it) -----------------------------------------


class StandaloneDevserver:
    """``python -m devserver`` as a child process, driven through its JSON control API.

    Quacks like :class:`devserver.DevServer` as far as :class:`World` needs (publish,
    add_credential, url, ca_bundle_b64, requests, faults), so a World can use it. While it is
    paused (SIGSTOP) its control API does not answer either: call nothing on it then.
    """

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.service = Service(
            "devserver",
            [sys.executable, "-m", "devserver", "--json", "--state-dir", str(directory / "state")],
            directory / "devserver.log",
            env={"PYTHONPATH": str(REPO)},
        )
        self.info: dict[str, str] = {}

    def start(self) -> StandaloneDevserver:
        self.service.start()

        def announced() -> dict[str, str] | None:
            if not self.service.alive():
                raise AssertionError(f"python -m devserver exited:\n{self.service.log()}")
            first = self.service.log().split("\n", 1)[0]
            try:
                return json.loads(first)
            except ValueError:
                return None

        self.info = wait_for(
            announced, timeout=30, what="python -m devserver to print its addresses"
        )
        return self

    @property
    def pid(self) -> int:
        return self.service.pid

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)  # every thread stops; the kernel still accepts TCP

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.service.alive():
            self.resume()  # a stopped process would not act on SIGTERM
        self.service.stop()

    # -- DevServer's surface, over the control API --

    @property
    def url(self) -> str:
        return self.info["url"]

    @property
    def ca_bundle_b64(self) -> str:
        return self.info["ca_bundle"]

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(
            f"{self.info['control_url']}{path}",
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={
                "Authorization": f"Bearer {self.info['control_token']}",
                "Content-Type": "application/json",
            },
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"null")

    def publish(self, org: str, project: str, environment: str, keys: list[dict[str, Any]]) -> int:
        body = {"org": org, "project": project, "environment": environment, "keys": list(keys)}
        return self._call("POST", "/v1/publish", body)["revision"]

    def add_credential(
        self, token: str, org: str, project: str, environment: str, grants: Any = ("read", "reveal")
    ) -> str:
        body = {"token": token, "org": org, "project": project, "environment": environment,
                "grants": list(grants)}  # fmt: skip
        return self._call("POST", "/v1/add_credential", body)["credential_id"]

    def set_fault(self, token: str | None, fault: Fault, times: int | None = None) -> None:
        self._call(
            "POST", "/v1/set_fault", {"token": token, "fault": fault.to_dict(), "times": times}
        )

    def clear_fault(self, token: str | None) -> None:
        self._call("POST", "/v1/clear_fault", {"token": token})

    def clear_faults(self) -> None:
        self._call("POST", "/v1/clear_faults", {})

    @property
    def requests(self) -> list[RecordedRequest]:
        listed = self._call("GET", "/v1/requests")
        return [
            RecordedRequest(**{**entry, "acknowledged_keys": tuple(entry["acknowledged_keys"])})
            for entry in listed
        ]


def answered(world: World, status: int) -> int:
    """How many of the World's requests its server answered with ``status``."""
    return sum(1 for request in world.requests() if request.status == status)


def control_plane_pid(cluster: Any, component: str = "kube-apiserver") -> int:
    """The pid of one component of the session's LocalControlPlane."""
    found = next(c for c in cluster.components if c.name == component)
    assert found.pid is not None, f"{component} is not running"
    return found.pid
