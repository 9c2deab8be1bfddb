"""The renderer child (S11.2 Containment): ``python -m workers.render_child``, started and fed by
workers/render_pool.py. It runs templates.py over requests read from stdin and writes answers to
stdout, under limits the kernel enforces:

- ``RLIMIT_AS``: the address space at start plus the memory budget, for the child's life (an
  allocation over it is a ``MemoryError``, answered as "exceeds its memory budget");
- ``RLIMIT_CPU``: raised before each request to the CPU time used so far plus the CPU budget
  (the kernel stops the child with SIGXCPU, whatever holds its interpreter);
- ``RLIMIT_CORE`` 0: a stopped child leaves no core file (it held values);
- ``oom_score_adj`` 1000: when the pod as a whole runs out of memory, the kernel kills a
  renderer before the operator.

Values cross only the two pipes: never a file, an argument, the environment or a log. The child
writes nothing to stderr (the pool discards it), and its answers carry a fault's fixed kind,
never exception text. Frames are a 4-byte big-endian length and a JSON object; bytes travel as
base64.
"""

from __future__ import annotations

import base64
import json
import math
import resource
import sys
from collections.abc import Callable, Mapping
from typing import Any, BinaryIO

from .engine import templates
from .engine.template_bounds import OVER_MEMORY

MEMORY_EXIT = 75  # the child could not even answer within its memory budget
_RECYCLE_GROWTH = 16 * 2**20  # resident growth after which the child asks to be replaced


def write_frame(stream: BinaryIO, message: Mapping[str, Any]) -> None:
    body = json.dumps(message, separators=(",", ":")).encode("utf-8")
    stream.write(len(body).to_bytes(4, "big") + body)
    stream.flush()


def read_frame(stream: BinaryIO) -> dict[str, Any] | None:
    header = stream.read(4)
    if len(header) < 4:
        return None
    body = stream.read(int.from_bytes(header, "big"))
    return json.loads(body)


def encoded(data: Mapping[str, bytes]) -> dict[str, str]:
    return {key: base64.b64encode(value).decode("ascii") for key, value in data.items()}


def decoded(data: Mapping[str, str]) -> dict[str, bytes]:
    return {key: base64.b64decode(value) for key, value in data.items()}


def answer(request: Mapping[str, Any], entering: Callable[[str], None]) -> dict[str, Any]:
    """One request's answer: a fault (key and kind), the rendered data, or the variables.
    ``entering`` hears each destination key before its entry is checked or rendered."""
    texts = request["templates"]
    if request["op"] == "variables":
        return {"variables": {k: sorted(v) for k, v in templates.template_variables(texts).items()}}
    if request["op"] == "parse":
        known = request.get("known")
        known_keys = None if known is None else frozenset(known)
        fault = templates.parse_templates(texts, known_keys, entering)
    else:
        missing = frozenset(request.get("missing") or ())
        assembled = decoded(request["assembled"])
        outcome = templates.render_templates(texts, assembled, missing, entering)
        if isinstance(outcome, templates.Rendered):
            return {
                "rendered": encoded(outcome.data),
                "lacking": {k: list(v) for k, v in outcome.lacking.items()},
            }
        fault = outcome
    return {"fault": None if fault is None else [fault.key, fault.kind]}


def _status_kib(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _limit_cpu(budget_seconds: float) -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(usage.ru_utime + usage.ru_stime + budget_seconds)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (soft if hard < 0 else min(soft, hard), hard))


def _first_to_go() -> None:
    """Raising one's own OOM score needs no privilege; where /proc has none, nothing to do."""
    try:
        with open("/proc/self/oom_score_adj", "w", encoding="ascii") as score:
            score.write("1000")
    except OSError:
        pass


def serve(stdin: BinaryIO, stdout: BinaryIO, cpu_seconds: float, memory_bytes: int) -> int:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _first_to_go()
    templates.render_templates({"warm": "{{ warm|tojson }}"}, {"warm": b"x"})  # load it all
    baseline_rss = _status_kib("VmRSS") * 1024
    address_space = _status_kib("VmSize") * 1024 + memory_bytes
    _, hard = resource.getrlimit(resource.RLIMIT_AS)  # a pod may set one; never raise it
    if hard != resource.RLIM_INFINITY:
        address_space = min(address_space, hard)
    resource.setrlimit(resource.RLIMIT_AS, (address_space, hard))
    write_frame(stdout, {"ready": True})

    def entering(key: str) -> None:  # so a stopped render still names its destination
        write_frame(stdout, {"at": key})

    while True:
        try:
            request = read_frame(stdin)
            if request is None:
                return 0
            _limit_cpu(cpu_seconds)
            reply = answer(request, entering)
            grown = _status_kib("VmRSS") * 1024 - baseline_rss > _RECYCLE_GROWTH
            overran = (reply.get("fault") or [None, None])[1] == OVER_MEMORY
            reply["recycle"] = grown or overran  # a fresh child after any overrun
            write_frame(stdout, reply)
            if reply["recycle"]:
                return 0
        except MemoryError:
            try:
                write_frame(stdout, {"fault": [None, OVER_MEMORY], "recycle": True})
            except MemoryError:
                return MEMORY_EXIT
            return 0


def main() -> int:
    cpu_seconds, memory_bytes = float(sys.argv[1]), int(sys.argv[2])
    return serve(sys.stdin.buffer, sys.stdout.buffer, cpu_seconds, memory_bytes)


if __name__ == "__main__":
    sys.exit(main())
