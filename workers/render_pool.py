"""S11.2 Containment: the operator's templates run in renderer children, never in the process
that holds the Lease, answers probes and runs other reconciles.

``RenderPool`` is the engine's ``Renderer`` (workers/engine/rendering.py) in every operator
process. Each call takes an idle child (or starts one, up to ``max_children``), sends it the
request over a pipe and waits at most the wall budget. The child (workers/render_child.py)
runs under ``RLIMIT_CPU`` and ``RLIMIT_AS``; whatever stops it ends the call as the entry's
``InvalidTemplate`` of a fixed kind:

- SIGXCPU (the kernel, at the CPU budget): "exceeds its CPU budget";
- a ``MemoryError`` under ``RLIMIT_AS``, or a kill by the kernel: "exceeds its memory budget";
- no answer within the wall budget (we kill it): "exceeds its time budget".

A stopped child is replaced by a fresh one on the next call; so is one whose memory grew. The
destination a stopped render was on is known because the child names each key before it starts
it. Parse verdicts depend only on the templates and the known keys, so they are remembered
(by digest, bounded): the observe loop asks for them on every pass. Renders carry values and are
never remembered.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .engine.template_bounds import OVER_CPU, OVER_MEMORY, OVER_TIME
from .engine.templates import Rendered, TemplateFault
from .render_child import MEMORY_EXIT, decoded, encoded

CPU_SECONDS = 2.0  # S11.2: per render of one HikyoSecret
MEMORY_BYTES = 64 * 2**20  # above the child's baseline
WALL_SECONDS = 5.0
START_SECONDS = 20.0  # a cold interpreter and Jinja's import on a busy host
MAX_CHILDREN = 2  # renders at once per process; more wait for a free child
IDLE_CHILDREN = 1  # kept warm between calls
SLOT_WAIT_SECONDS = 60.0  # each holder frees its child within the wall budget
PARSE_VERDICTS = 1024
_READ_CHUNK = 65536
# An answer holds at most 1 MiB of rendered bytes (templates.render_templates), as base64.
MAX_FRAME_BYTES = 4 * 2**20
_STOPPED = "stops the renderer"


class RendererUnavailable(OSError):
    """No renderer child could be started or reached in time: the run fails and retries."""


class _Stopped(Exception):
    def __init__(self, kind: str, key: str | None) -> None:
        super().__init__(kind)
        self.kind, self.key = kind, key


class _Child:
    """One renderer process and the pipes to it."""

    def __init__(self, cpu_seconds: float, memory_bytes: int) -> None:
        root = Path(__file__).resolve().parent.parent
        self.process = subprocess.Popen(
            [sys.executable, "-m", "workers.render_child", str(cpu_seconds), str(memory_bytes)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            # Nothing of the operator's environment (tokens, database URLs) reaches the child.
            env={"PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"},
            cwd=str(root),
            close_fds=True,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._out, self._in = self.process.stdin.fileno(), self.process.stdout.fileno()
        os.set_blocking(self._out, False)
        os.set_blocking(self._in, False)
        self._buffer = bytearray()
        self.killed = False

    def ready(self, seconds: float) -> None:
        self.exchange(None, time.monotonic() + seconds)

    def exchange(self, request: Mapping[str, Any] | None, deadline: float) -> dict[str, Any]:
        """Send ``request`` (None: only wait for the ready frame) and return the answer."""
        pending = b""
        if request is not None:
            body = json.dumps(request, separators=(",", ":")).encode("utf-8")
            pending = len(body).to_bytes(4, "big") + body
        key: str | None = None
        poller = select.poll()
        poller.register(self._in, select.POLLIN)
        if pending:
            poller.register(self._out, select.POLLOUT)
        while True:
            for frame in self._frames():
                if "at" in frame:
                    key = frame["at"]
                else:
                    return frame
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise _Stopped(OVER_TIME, key)
            for fd, _ in poller.poll(remaining * 1000):
                if fd == self._out:
                    try:
                        written = os.write(self._out, pending[:_READ_CHUNK])
                    except (BrokenPipeError, BlockingIOError):
                        written = 0 if not self.stopped() else len(pending)
                    pending = pending[written:]
                    if not pending:
                        poller.unregister(self._out)
                elif fd == self._in:
                    chunk = os.read(self._in, _READ_CHUNK)
                    if not chunk:
                        raise _Stopped(self._death(), key)
                    self._buffer += chunk

    def _frames(self) -> list[dict[str, Any]]:
        frames = []
        while len(self._buffer) >= 4:
            size = int.from_bytes(self._buffer[:4], "big")
            if size > MAX_FRAME_BYTES:  # more than any answer holds: the child is not ours
                self.kill()
                raise _Stopped(_STOPPED, None)
            if len(self._buffer) < 4 + size:
                break
            frames.append(json.loads(bytes(self._buffer[4 : 4 + size])))
            del self._buffer[: 4 + size]
        return frames

    def _death(self) -> str:
        try:
            code = self.process.wait(timeout=WALL_SECONDS)
        except subprocess.TimeoutExpired:
            self.kill()
            return _STOPPED
        if code == -signal.SIGXCPU:
            return OVER_CPU
        if code in (MEMORY_EXIT, -signal.SIGKILL):  # under RLIMIT_AS, or the kernel's OOM kill
            return OVER_MEMORY
        return _STOPPED

    def stopped(self) -> bool:
        return self.process.poll() is not None

    def kill(self) -> None:
        self.killed = True
        if self.process.poll() is None:
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILL cannot be refused
            self.process.wait(timeout=WALL_SECONDS)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


class RenderPool:
    """The engine's ``Renderer`` for an operator process: children under an OS budget."""

    def __init__(
        self,
        *,
        cpu_seconds: float = CPU_SECONDS,
        memory_bytes: int = MEMORY_BYTES,
        wall_seconds: float = WALL_SECONDS,
        max_children: int = MAX_CHILDREN,
        idle_children: int = IDLE_CHILDREN,
    ) -> None:
        self.cpu_seconds, self.memory_bytes = cpu_seconds, memory_bytes
        self.wall_seconds = wall_seconds
        self._max_children, self._idle_children = max_children, idle_children
        self._lock = threading.Lock()
        self._reset()
        self._verdicts: OrderedDict[str, TemplateFault | None] = OrderedDict()
        self.started = 0  # children started over this pool's life (a test reads it)

    def _reset(self) -> None:
        self._pid = os.getpid()  # a Celery worker forks: children are per process
        self._idle: list[_Child] = []
        self._slots = threading.BoundedSemaphore(self._max_children)

    # -- the Renderer protocol -----------------------------------------------------------------

    def parse(
        self, templates: Mapping[str, str], known_keys: frozenset[str] | None
    ) -> TemplateFault | None:
        known = None if known_keys is None else sorted(known_keys)
        request = {"op": "parse", "templates": dict(templates), "known": known}
        digest = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()
        with self._lock:
            if digest in self._verdicts:
                self._verdicts.move_to_end(digest)
                return self._verdicts[digest]
        verdict = self._fault_of(self._call(request, templates))
        with self._lock:
            self._verdicts[digest] = verdict
            while len(self._verdicts) > PARSE_VERDICTS:
                self._verdicts.popitem(last=False)
        return verdict

    def render(
        self, templates: Mapping[str, str], assembled: Mapping[str, bytes], missing: frozenset[str]
    ) -> Rendered | TemplateFault:
        request = {
            "op": "render",
            "templates": dict(templates),
            "assembled": encoded(assembled),
            "missing": sorted(missing),
        }
        answer = self._call(request, templates)
        if "rendered" in answer:
            lacking = {k: tuple(v) for k, v in answer["lacking"].items()}
            return Rendered(decoded(answer["rendered"]), lacking)
        fault = self._fault_of(answer)
        assert fault is not None
        return fault

    def variables(self, templates: Mapping[str, str]) -> dict[str, frozenset[str]]:
        answer = self._call({"op": "variables", "templates": dict(templates)}, templates)
        found = answer.get("variables") or {}
        return {key: frozenset(found.get(key, ())) for key in templates}

    # -- children -------------------------------------------------------------------------------

    @staticmethod
    def _fault_of(answer: Mapping[str, Any]) -> TemplateFault | None:
        fault = answer.get("fault")
        return None if fault is None else TemplateFault(fault[0], fault[1])

    def _call(self, request: Mapping[str, Any], templates: Mapping[str, str]) -> dict[str, Any]:
        with self._lock:
            if self._pid != os.getpid():
                self._reset()
            slots = self._slots
        if not slots.acquire(timeout=SLOT_WAIT_SECONDS):
            raise RendererUnavailable("no template renderer was free in time")
        child: _Child | None = None
        try:
            child = self._take()
            answer = child.exchange(request, time.monotonic() + self.wall_seconds)
            if answer.get("fault") and answer["fault"][0] is None:
                answer["fault"][0] = _first_key(templates)
            if answer.get("recycle"):
                child.kill()
            return answer
        except _Stopped as stopped:
            assert child is not None
            child.kill()
            return {"fault": [stopped.key or _first_key(templates), stopped.kind]}
        finally:
            if child is not None:
                self._give_back(child)
            slots.release()

    def _take(self) -> _Child:
        with self._lock:
            while self._idle:
                child = self._idle.pop()
                if not child.stopped():
                    return child
        try:
            child = _Child(self.cpu_seconds, self.memory_bytes)
        except OSError as error:
            reason = error.strerror or type(error).__name__
            raise RendererUnavailable(f"cannot start a template renderer: {reason}") from None
        self.started += 1
        try:
            child.ready(START_SECONDS)
        except _Stopped:
            child.kill()
            raise RendererUnavailable("a template renderer did not start in time") from None
        return child

    def _give_back(self, child: _Child) -> None:
        if child.killed or child.stopped():
            child.kill()
            return
        with self._lock:
            if len(self._idle) < self._idle_children and self._pid == os.getpid():
                self._idle.append(child)
                return
        child.kill()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for child in idle:
            child.kill()


def _first_key(templates: Mapping[str, str]) -> str:
    return min(templates) if templates else ""


_shared: list[RenderPool] = []
_shared_lock = threading.Lock()


def shared_pool() -> RenderPool:
    """This process's pool (children start on first use, after any fork)."""
    with _shared_lock:
        if not _shared:
            _shared.append(RenderPool())
        return _shared[0]
