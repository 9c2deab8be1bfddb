"""What the dashboard costs in memory: the embedded operator's RSS while real headless Chromium
pages through 1,000 tracked objects (issue 10: within the chart's 128 MiB). Prints one JSON
object.

    python bench/dashboard_memory.py [--objects 1000] [--details 50]

Starts a local control plane (KUBEBUILDER_ASSETS, else tools/build-control-plane.sh), installs
the CRDs and the operator namespace, migrates and seeds a fresh SQLite observation store (in a
temporary HIKYO_OPERATOR_DATA_DIR) with N TrackedObjects and their history, then runs one
embedded ``manage.py run_operator`` (DJANGO_DEBUG=false) and drives Debian's chromium through
playwright (never ``playwright install``): the login, the overview, every page of the
HikyoSecrets list, the not-Ready filter and detail pages. A thread reads the operator's VmRSS
and VmHWM from /proc/<pid>/status every 0.2 s; VmHWM is reset (clear_refs 5) when the browsing
starts, so its value at the end is the exact peak of the browsing (the sampled peak can miss a
spike shorter than 0.2 s). Figures, not assertions; a page that does not answer 200 (or a list
that shows the wrong rows) stops the run, since its figures would mean nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

from bench.common import status_kib  # noqa: E402

LIMIT_MIB = 128  # the chart's memory limit for the operator container (issue 10)
OVERVIEW = "/admin/observations/trackedobject/overview/"
CHANGELIST = "/admin/observations/trackedobject/"
PER_PAGE = 100  # ReadOnlyAdmin.list_per_page
SAMPLE_SECONDS = 0.2
READY_TIMEOUT = 120.0
NAVIGATION_TIMEOUT_MS = 60_000
HISTORY = {"runs": 20, "condition_changes": 5, "events": 5, "status_reports": 3}  # per object
NAMESPACES = 20
INSTANCES = ("prod", "staging", "eu-west")
SEED_FLAG = "--seed-child"  # the seeding subprocess: this file, run with the operator's env


# --- seeding (runs in a subprocess with the operator's environment) --------------------------

# weight, lifecycle, the conditions besides Ready (type, status, reason, message), the run reason.
# Ready and the blocking Type/Reason are derived with the engine's own rule (S5.2), as a
# recorded run would store them. Names and reasons only: no value, token, cursor or stamp.
PROFILES: tuple[tuple[int, str, tuple[tuple[str, str, str, str], ...], str], ...] = (
    (85, "Synced", (("Synced", "True", "Current", "the cursor is current"),), "Current"),
    (
        5,
        "Retained",
        (("Synced", "False", "FetchFailed", "the instance answered 503; Secret retained"),),
        "FetchFailed",
    ),
    (
        4,
        "Refused",
        (
            ("Synced", "True", "Current", "the cursor is current"),
            ("Delivery", "False", "UndeliveredSecrets", "API_KEY arrived presence-only"),
        ),
        "UndeliveredSecrets",
    ),
    (
        3,
        "Refused",
        (("Designation", "False", "SecretNotDesignated", "Secret credential is missing"),),
        "SecretNotDesignated",
    ),
    (
        1,
        "Scrubbed",
        (("Scrubbed", "True", "AuthorizationWithdrawn", "the target was emptied"),),
        "AuthorizationWithdrawn",
    ),
    (
        1,
        "Unreconciled",
        (("Unreconciled", "True", "NamespaceNotBound", "no RBAC in this namespace"),),
        "NamespaceNotBound",
    ),
    (1, "", (), ""),  # seen, no status written yet: Ready Unknown
)


def _conditions(
    lifecycle: str, others: tuple[tuple[str, str, str, str], ...], at: datetime, generation: int
) -> tuple[list[dict[str, Any]], bool | None, str]:
    """(stored conditions, ready, blocking) as recording._record keeps them."""
    from workers.engine.conditions import (
        Condition,
        as_dict,
        first_blocker,
        ready_condition,
    )

    when = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    by_type = {t: as_dict(Condition(t, s, r, m)) for t, s, r, m in others}  # S5.1-checked
    if not lifecycle:
        return [], None, first_blocker(by_type, None) or ""
    ready = as_dict(ready_condition(by_type, lifecycle))
    stored = [ready, *by_type.values()]
    for condition in stored:
        condition.update(observedGeneration=generation, lastTransitionTime=when)
    return stored, ready["status"] == "True", first_blocker(by_type, lifecycle) or ""


def seed(count: int) -> dict[str, Any]:
    """N TrackedObjects with HISTORY rows each, and the superuser named in the environment."""
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.db import connection, transaction

    from controlplane.observations.models import (
        ConditionChange,
        EventRecord,
        ReconcileRun,
        StatusReport,
        TrackedObject,
    )

    started = time.perf_counter()
    rng = random.Random(10)
    now = datetime.now(UTC)
    weights = [profile[0] for profile in PROFILES]
    tracked, runs, changes, events, reports = [], [], [], [], []
    for index in range(count):
        _, lifecycle, others, reason = rng.choices(PROFILES, weights)[0]
        namespace = f"team-{index % NAMESPACES:02d}"
        name = f"app-{index:05d}"
        uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        identity = {"uid": uid, "namespace": namespace, "name": name}
        instance = INSTANCES[index % len(INSTANCES)] if lifecycle else ""
        generation = rng.randint(1, 6)
        checked = now - timedelta(seconds=rng.uniform(0, 300))
        conditions, ready, blocking = _conditions(lifecycle, others, checked, generation)
        delivered = checked - timedelta(hours=rng.uniform(1, 72))
        tracked.append(
            TrackedObject(
                **identity,
                generation=generation,
                lifecycle=lifecycle,
                ready=ready,
                synced_reason=next((r for t, _, r, _ in others if t == "Synced"), ""),
                conditions=conditions,
                last_checked_at=checked if lifecycle else None,
                last_changed_at=delivered if lifecycle else None,
                runs_total=HISTORY["runs"] * 12 if lifecycle else 0,
                runs_unchanged=HISTORY["runs"] * 11 if lifecycle else 0,
                blocking=blocking,
                last_outcome=reason,
                target=f"{name}-env",
                instance=instance,
                key_count=rng.randint(3, 40) if lifecycle == "Synced" else None,
                last_delivery_at=delivered if lifecycle in ("Synced", "Retained") else None,
                last_fetch_at=checked if lifecycle else None,
                last_fetch_status=503 if reason == "FetchFailed" else (304 if lifecycle else None),
                last_fetch_ok_at=delivered if lifecycle else None,
            )
        )
        if not lifecycle:
            continue
        failing = reason == "FetchFailed"
        for run in range(HISTORY["runs"]):
            first = run == HISTORY["runs"] - 1
            run_reason = "Delivered" if first or run % 7 == 3 else reason
            runs.append(
                ReconcileRun(
                    **identity,
                    started_at=checked - timedelta(minutes=15 * run),
                    duration_ms=rng.randint(15, 450),
                    reason=run_reason,
                    message="the instance answered 503" if run_reason == "FetchFailed" else "",
                    lifecycle=lifecycle,
                    requeue="backoff" if run_reason == "FetchFailed" else "resync",
                    fetched=run_reason != "SecretNotDesignated",
                    wrote_secret=run_reason == "Delivered",
                    status_written=True,
                    forced_sync=f"bench-request-{index}" if run == 5 else "",
                )
            )
        transitions = [
            ("Synced", "", "", "True", "Delivered"),
            ("Ready", "", "", "True", "Reconciled"),
            ("Synced", "True", "Delivered", "True", "Current"),
        ]
        if ready:  # a redelivery since
            transitions += [
                ("Synced", "True", "Current", "True", "Delivered"),
                ("Synced", "True", "Delivered", "True", "Current"),
            ]
        else:  # what broke, then Ready
            type_, status, why, _ = others[-1]
            was = ("True", "Current") if type_ == "Synced" else ("", "")
            transitions += [
                (type_, *was, status, why),
                ("Ready", "True", "Reconciled", "False", "Blocked"),
            ]
        for step, (type_, old_s, old_r, new_s, new_r) in enumerate(transitions):
            changes.append(
                ConditionChange(
                    **identity,
                    at=checked - timedelta(hours=5 - step),
                    type=type_,
                    old_status=old_s,
                    old_reason=old_r,
                    new_status=new_s,
                    new_reason=new_r,
                    message=f"not ready: {blocking}" if new_r == "Blocked" else "",
                )
            )
        for step in range(HISTORY["events"]):
            warning = failing and step % 2 == 0
            events.append(
                EventRecord(
                    **identity,
                    at=checked - timedelta(hours=step),
                    type="Warning" if warning else "Normal",
                    reason="FetchFailed" if warning else "Delivered",
                    message=(
                        "fetch failed: the instance answered 503"
                        if warning
                        else f"wrote Secret {name}-env"
                    ),
                )
            )
        sent = [{k: c[k] for k in ("type", "status", "reason")} for c in conditions]
        for step in range(HISTORY["status_reports"]):
            reports.append(
                StatusReport(
                    **identity,
                    at=checked - timedelta(minutes=5 * step),
                    http_status=204,
                    outcome="accepted",
                    conditions=sent,
                )
            )
    with transaction.atomic():
        for model, rows in (
            (TrackedObject, tracked),
            (ReconcileRun, runs),
            (ConditionChange, changes),
            (EventRecord, events),
            (StatusReport, reports),
        ):
            model.objects.bulk_create(rows, batch_size=500)
        User.objects.create_superuser(
            os.environ["BENCH_ADMIN_USER"],
            "admin@bench.example",
            os.environ["BENCH_ADMIN_PASSWORD"],
        )
    seeded = {
        "tracked_objects": TrackedObject.objects.count(),
        "not_ready": TrackedObject.objects.exclude(ready=True).count(),
        "reconcile_runs": ReconcileRun.objects.count(),
        "condition_changes": ConditionChange.objects.count(),
        "events": EventRecord.objects.count(),
        "status_reports": StatusReport.objects.count(),
        "seconds": round(time.perf_counter() - started, 2),
    }
    connection.close()
    return seeded


# --- the operator's memory --------------------------------------------------------------------


def _mib(kib: float) -> float:
    return round(kib / 1024, 1)


class Sampler(threading.Thread):
    """Reads the process's VmRSS and VmHWM every SAMPLE_SECONDS until stopped."""

    def __init__(self, pid: int) -> None:
        super().__init__(name="rss-sampler", daemon=True)
        self.pid = pid
        self.samples: list[tuple[float, int, int]] = []  # (monotonic, rss KiB, hwm KiB)
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.sample()
            self._stop_event.wait(SAMPLE_SECONDS)

    def sample(self) -> dict[str, int]:
        found = status_kib(self.pid, ("VmRSS", "VmHWM", "RssAnon", "RssFile"))
        if found:
            self.samples.append((time.monotonic(), found["VmRSS"], found["VmHWM"]))
        return found

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=5)

    def peak_rss(self, since: float, until: float) -> int:
        return max((rss for at, rss, _ in self.samples if since <= at <= until), default=0)


def reset_hwm(pid: int) -> bool:
    """Resets VmHWM to the current RSS (Linux >= 4.0; our own child, so allowed)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


# --- the browser --------------------------------------------------------------------------------


class Browsing:
    """One logged-in page, every navigation timed: wall time to ``load`` and the document's
    time to first byte (playwright's request timing: requestStart to responseStart)."""

    def __init__(self, page: Any, base: str) -> None:
        self.page, self.base = page, base
        self.timings: dict[str, list[tuple[float, float | None]]] = {}

    def _timed(self, kind: str, navigate: Any) -> Any:
        started = time.perf_counter()
        response = navigate()
        wall_ms = (time.perf_counter() - started) * 1000
        if response is None or response.status != 200:
            status = None if response is None else response.status
            raise RuntimeError(f"{kind} page {self.page.url}: HTTP {status}")
        timing = response.request.timing
        ttfb = None
        if timing.get("requestStart", -1) >= 0 and timing.get("responseStart", -1) >= 0:
            ttfb = timing["responseStart"] - timing["requestStart"]
        self.timings.setdefault(kind, []).append((wall_ms, ttfb))
        return response

    def goto(self, kind: str, path: str) -> Any:
        return self._timed(kind, lambda: self.page.goto(self.base + path, wait_until="load"))

    def login(self, username: str, password: str) -> None:
        self.goto("login_form", "/admin/login/?next=/admin/")
        self.page.fill("#id_username", username)
        self.page.fill("#id_password", password)

        def submit() -> Any:
            with self.page.expect_navigation(wait_until="load") as navigation:
                self.page.click("input[type=submit]")
            return navigation.value

        self._timed("login", submit)
        if not self.page.url.rstrip("/").endswith("/admin"):
            raise RuntimeError(f"login failed: at {self.page.url}")

    def list_rows(self) -> list[str]:
        """The detail links of the list page shown."""
        return self.page.eval_on_selector_all(
            "#result_list tbody th.field-name a", "links => links.map(a => a.getAttribute('href'))"
        )

    def medians(self) -> dict[str, dict[str, float | int | None]]:
        shown: dict[str, dict[str, float | int | None]] = {}
        for kind, rows in self.timings.items():
            ttfbs = [t for _, t in rows if t is not None]
            shown[kind] = {
                "pages": len(rows),
                "wall_ms_median": round(statistics.median(w for w, _ in rows), 1),
                "wall_ms_max": round(max(w for w, _ in rows), 1),
                "ttfb_ms_median": round(statistics.median(ttfbs), 1) if ttfbs else None,
            }
        return shown


def _pages(rows: int) -> range:
    return range(1, max(1, math.ceil(rows / PER_PAGE)) + 1)


def browse(
    base: str, username: str, password: str, store: dict[str, Any], details: int
) -> dict[str, Any]:
    """Login, the overview, every page of the list and of the not-Ready filter, ``details``
    detail pages (spread over the list)."""
    from playwright.sync_api import sync_playwright

    from tests.support.browser import CHROMIUM, CHROMIUM_ARGS

    with sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            page = context.new_page()
            page.set_default_timeout(NAVIGATION_TIMEOUT_MS)
            visit = Browsing(page, base)
            visit.login(username, password)
            visit.goto("overview", OVERVIEW)
            count, not_ready = store["tracked_objects"], store["not_ready"]
            links: list[str] = []
            for number in _pages(count):
                visit.goto("list", f"{CHANGELIST}?p={number}")
                links.extend(visit.list_rows())
            if len(links) != count or len(set(links)) != count:
                raise RuntimeError(f"the list pages showed {len(links)} rows, not {count}")
            filtered_rows = 0
            for number in _pages(not_ready):
                visit.goto("filtered_list", f"{CHANGELIST}?ready=not&p={number}")
                filtered_rows += len(visit.list_rows())
            if filtered_rows != not_ready:
                raise RuntimeError(f"?ready=not showed {filtered_rows} rows, not {not_ready}")
            step = max(1, len(links) // max(1, details))
            for href in links[::step][:details]:
                visit.goto("detail", href)
                if not page.locator("h1, h2").first.inner_text():
                    raise RuntimeError(f"detail page {href} has no heading")
            context.close()
        finally:
            with contextlib.suppress(Exception):  # the driver may already be gone (Ctrl-C)
                browser.close()
    pages = sum(len(rows) for rows in visit.timings.values())
    return {"pages": pages, "filtered_rows": filtered_rows, "timings": visit.medians()}


# --- the run ----------------------------------------------------------------------------------


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # unwinds through every cleanup below


def _seed_store(env: dict[str, str], count: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), SEED_FLAG, str(count)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"seeding failed:\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(objects: int, details: int, cleanup: contextlib.ExitStack) -> dict[str, Any]:
    """Everything started is stopped by ``cleanup`` (LIFO), on success, error or Ctrl-C."""
    from kubernetes import client, config

    from k8s.crd_manifests import install_crds
    from localcluster import LocalControlPlane, locate_binaries
    from tests.support.operator_harness import Operator, readyz
    from tests.support.waiting import wait_for

    tmp = Path(tempfile.mkdtemp(prefix="bench-dashboard-"))
    cleanup.callback(shutil.rmtree, tmp, ignore_errors=True)
    binaries = locate_binaries()  # KUBEBUILDER_ASSETS, else tools/build-control-plane.sh
    cluster = LocalControlPlane(binaries, tmp / "control-plane")
    cleanup.callback(cluster.stop)
    cluster.start()
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    cleanup.callback(api.close)
    install_crds(api)
    client.CoreV1Api(api).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name="hikyo-system"))
    )

    try:
        operator = Operator(tmp / "operator", cluster.kubeconfig, None)  # migrates the SQLite
    except subprocess.CalledProcessError as error:
        raise RuntimeError(f"migrate failed:\n{(error.stderr or b'').decode()[-4000:]}") from None
    operator.env.update(DJANGO_DEBUG="false", HIKYO_LOG_LEVEL="WARNING")
    username, password = "bench-admin", secrets.token_urlsafe(16)
    store = _seed_store(
        {
            **os.environ,
            **operator.env,
            "BENCH_ADMIN_USER": username,
            "BENCH_ADMIN_PASSWORD": password,
        },
        objects,
    )

    outcome: dict[str, bool] = {"ok": False}

    def log_tail_on_failure() -> None:  # before the temporary directory goes
        if not outcome["ok"] and operator.services:
            sys.stderr.write(f"--- operator log (tail) ---\n{operator.logs()[-4000:]}\n")

    cleanup.callback(log_tail_on_failure)
    cleanup.callback(operator.stop)
    leader = operator.start_leader()  # waits for /healthz
    wait_for(
        lambda: readyz(operator.http_port)[0] == 200,
        timeout=READY_TIMEOUT,
        interval=0.5,
        what="the operator's /readyz",
    )
    sampler = Sampler(leader.pid)
    cleanup.callback(sampler.stop)
    sampler.start()
    time.sleep(3)  # settled: the watches have listed (an empty cluster: nothing to reconcile)
    before = sampler.sample()
    if not before:
        raise RuntimeError("the operator exited before the browsing")
    hwm_reset = reset_hwm(leader.pid)
    browse_start = time.monotonic()
    browsed = browse(
        f"http://{leader.env['HIKYO_OPERATOR_HEALTH_ADDR']}", username, password, store, details
    )
    browse_end = time.monotonic()
    end = sampler.sample()
    sampler.stop()
    if not leader.alive() or not end:
        raise RuntimeError("the operator exited while the browser paged")
    peak_kib = max(sampler.peak_rss(browse_start, browse_end), end["VmRSS"])
    browse_peak_kib = max(peak_kib, end["VmHWM"]) if hwm_reset else peak_kib
    outcome["ok"] = True
    return {
        "objects": store["tracked_objects"],
        "history_per_object": HISTORY,
        "store": store,
        "pages_visited": browsed["pages"],
        "pages_by_kind": {kind: row["pages"] for kind, row in browsed["timings"].items()},
        "filtered_rows": browsed["filtered_rows"],
        "seconds": round(browse_end - browse_start, 1),
        "samples": sum(1 for at, *_ in sampler.samples if browse_start <= at <= browse_end),
        "rss_before_mib": _mib(before["VmRSS"]),
        "rss_peak_mib": _mib(peak_kib),
        "rss_end_mib": _mib(end["VmRSS"]),
        # VmRSS = RssAnon (heap: what the pages cost) + RssFile (mapped code: python, .so files)
        # + RssShmem; as read before the browsing and at its end.
        "rss_anon_mib": {"before": _mib(before["RssAnon"]), "end": _mib(end["RssAnon"])},
        "rss_file_mib": {"before": _mib(before["RssFile"]), "end": _mib(end["RssFile"])},
        "vmhwm_before_browsing_mib": _mib(before["VmHWM"]),  # the start-up's peak
        "vmhwm_reset_at_browse_start": hwm_reset,
        "vmhwm_end_mib": _mib(end["VmHWM"]),  # the browsing's exact peak, when reset
        "limit_mib": LIMIT_MIB,
        "within_limit": browse_peak_kib <= LIMIT_MIB * 1024,
        "lifetime_peak_within_limit": max(before["VmHWM"], end["VmHWM"]) <= LIMIT_MIB * 1024,
        "median_ms": browsed["timings"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=1000, help="TrackedObjects (1000)")
    parser.add_argument("--details", type=int, default=50, help="detail pages visited (50)")
    options = parser.parse_args()
    if options.objects < 1 or options.details < 0:
        parser.error("--objects must be at least 1 and --details at least 0")
    signal.signal(signal.SIGTERM, _terminate)
    with contextlib.ExitStack() as cleanup:
        report = run(options.objects, options.details, cleanup)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == SEED_FLAG:
        print(json.dumps(seed(int(sys.argv[2]))))
    else:
        main()
