"""Which HikyoSecrets are Ready, kept current by one LIST and a WATCH rather than a LIST every
half second: at thousands of CRs a full LIST per poll would load the apiserver and this
process (and the devserver it hosts) with megabytes of JSON while the operator is measured."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

from bench.apiserver import CALL_TIMEOUT, current, ready_at_generation
from bench.world import HIKYOSECRETS

WATCH_SECONDS = 30  # the server ends each watch after this; the tracker watches on from there


def list_with_version(api: Any, path: str) -> tuple[list[dict[str, Any]], str]:
    """A raw LIST and its resourceVersion (for a WATCH from there)."""
    method, url, headers, *_ = api.param_serialize(
        "GET", path, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
    )
    response = api.call_api(method, url, header_params=headers, _request_timeout=CALL_TIMEOUT)
    response.read()
    body = json.loads(response.data)
    return body["items"], body["metadata"]["resourceVersion"]


def open_watch(api: Any, path: str, version: str, seconds: int = WATCH_SECONDS) -> Any:
    """A server-bounded raw WATCH of ``path`` from ``version`` (bookmarks on): the answer, whose
    ``status`` says whether it opened and whose ``response`` is the urllib3 stream to read."""
    method, url, headers, *_ = api.param_serialize(
        "GET",
        path,
        query_params=[
            ("watch", "true"),
            ("resourceVersion", version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(seconds)),
        ],
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    return api.call_api(method, url, header_params=headers, _request_timeout=(5, seconds + 30))


def watch_events(raw: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """(type, object) of each event on an open WATCH stream, until the server ends it."""
    pending = b""
    for chunk in raw.stream(64 * 1024):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                event = json.loads(line)
                yield event["type"], event["object"]


class ReadyTracker(threading.Thread):
    """Per CR uid: (Ready=True at its generation, Synced=Current). ``lists`` counts the LISTs
    it made (the bench takes them out of the operator's requests); its WATCHes are long-running
    and left out of per-reconcile figures anyway."""

    def __init__(self, api: Any) -> None:
        super().__init__(name="ready-tracker", daemon=True)
        self.api = api
        self.lists = 0
        self.watch_ends: list[float] = []  # monotonic times its WATCHes ended
        self.error: BaseException | None = None
        self._state: dict[str, tuple[bool, bool]] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._synced = threading.Event()  # the first LIST is in
        self._open: Any = None  # the urllib3 response of the WATCH being read

    def start_and_wait(self, timeout: float = 60.0) -> ReadyTracker:
        self.start()
        if not self._synced.wait(timeout):
            raise TimeoutError(f"the first LIST of HikyoSecrets took over {timeout:.0f} s")
        self._raise()
        return self

    def run(self) -> None:
        try:
            version = self._relist()
            while not self._stopping.is_set():
                version = self._watch(version)
        except BaseException as error:
            if not self._stopping.is_set():
                self.error = error
                with self._changed:
                    self._changed.notify_all()
        finally:
            self._synced.set()

    def _relist(self) -> str:
        items, version = list_with_version(self.api, HIKYOSECRETS)
        with self._changed:
            self.lists += 1
            self._state = {item["metadata"]["uid"]: self._of(item) for item in items}
            self._changed.notify_all()
        self._synced.set()
        return version

    def _watch(self, version: str) -> str:
        """One server-bounded WATCH from ``version``, read raw so that ``stop`` can end it at
        once (an open watch holds the apiserver's shutdown back); the version to go on from."""
        answer = open_watch(self.api, HIKYOSECRETS, version)
        raw = answer.response
        try:
            if answer.status == 410:
                return self._relist()
            if answer.status != 200:
                raise RuntimeError(f"the WATCH of HikyoSecrets answered {answer.status}")
            with self._lock:
                self._open = raw
            return self._follow(raw, version)
        finally:
            with self._lock:
                self._open = None
                self.watch_ends.append(time.monotonic())
            raw.release_conn()

    def _follow(self, raw: Any, version: str) -> str:
        for kind, item in watch_events(raw):
            if kind == "ERROR":
                if item.get("code") == 410:  # the version is too old: start over
                    return self._relist()
                raise RuntimeError(f"the WATCH of HikyoSecrets failed: {item.get('message')}")
            version = item["metadata"]["resourceVersion"]
            if kind != "BOOKMARK":
                uid = item["metadata"]["uid"]
                with self._changed:
                    if kind == "DELETED":
                        self._state.pop(uid, None)
                    else:
                        self._state[uid] = self._of(item)
                    self._changed.notify_all()
            if self._stopping.is_set():
                break
        return version

    @staticmethod
    def _of(item: dict[str, Any]) -> tuple[bool, bool]:
        return ready_at_generation(item), current(item)

    def _raise(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"tracking HikyoSecrets failed: {self.error}") from self.error

    def counts(self) -> tuple[int, int, int]:
        """(Ready at generation, Synced=Current, CRs)."""
        self._raise()
        with self._lock:
            states = list(self._state.values())
        return sum(r for r, _ in states), sum(c for _, c in states), len(states)

    def uids(self) -> set[str]:
        with self._lock:
            return set(self._state)

    def wait_change(self, timeout: float) -> None:
        """Returns after the next change, or ``timeout`` seconds."""
        with self._changed:
            self._changed.wait(timeout)
        self._raise()

    def stop(self) -> None:
        """Ends the open WATCH now (shutting its socket down wakes the blocked read)."""
        self._stopping.set()
        with self._lock:
            open_watch = self._open
        if open_watch is not None:
            with contextlib.suppress(OSError, AttributeError):
                open_watch.shutdown()

    def close(self, timeout: float = 5.0) -> None:
        self.stop()
        if self.is_alive():
            self.join(timeout)

    def watches_ended_between(self, start: float, end: float) -> int:
        with self._lock:
            return sum(1 for at in self.watch_ends if start <= at <= end)


def wait_ready(
    tracker: ReadyTracker,
    n: int,
    deadline: float,
    dead: Any,
    note: Any,
    progress: list[tuple[float, int]],
) -> float:
    """Monotonic time when all ``n`` CRs are Ready at their generation, the ready count over
    time appended to ``progress``; ``dead()`` names the processes that exited (raises then),
    ``note(ready)`` is called about every 15 s."""
    last_note = time.monotonic()
    while True:
        ready, _, listed = tracker.counts()
        now = time.monotonic()
        if not progress or progress[-1][1] != ready:
            progress.append((now, ready))
        if ready == listed == n:
            return now
        exited = dead()
        if exited:
            raise RuntimeError(f"{', '.join(exited)} exited")
        if now > deadline:
            raise TimeoutError(f"{ready} of {n} Ready at the deadline")
        if now - last_note > 15:
            note(ready)
            last_note = now
        tracker.wait_change(min(1.0, max(0.01, deadline - now)))
