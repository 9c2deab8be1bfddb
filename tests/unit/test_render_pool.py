"""S11.2 Containment (workers/render_pool.py, render_child.py): a render runs in a child process
under the kernel's CPU and memory limits and a wall-clock kill; whatever stops it is the entry's
InvalidTemplate of a fixed kind, naming the destination that was rendering; the operator's own
process spends nothing on it; the next render gets a fresh child."""

from __future__ import annotations

import math
import os
import re
import resource
import threading
from pathlib import Path

import pytest

from workers.engine import rendering
from workers.engine.template_bounds import NESTED_TOO_DEEP, OVER_CPU, OVER_MEMORY, OVER_TIME
from workers.engine.templates import Rendered, TemplateFault
from workers.render_pool import MAX_FRAME_BYTES, RenderPool
from workers.runtime import contain_templates

CANARY = "CANARYRENDERPOOL5b1c"
VALUES = {"user": b"admin", "password": CANARY.encode()}
# One big-integer division: inside every count bound, about 25 s of CPU held in one C call.
BIG_DIVISION = "{% set y = 3**2500000 %}{% set x = 2**4000000 * y %}{{ x // y }}"
# The same, about 6 s of CPU: still far past a wall budget of half a second on any host, and
# soon over when nothing stops it (a test that proves the stop does not wait 25 s without it).
SMALLER_DIVISION = "{% set y = 3**1250000 %}{% set x = 2**2000000 * y %}{{ x // y }}"
# About 100 MiB of distinct 1 MB integers: no string is built, so no count bound sees it.
BIG_INTEGERS = (
    "{% set a = 7**2700000 %}{% set l = ["
    + ", ".join(f"a*{n}" for n in range(1, 101))
    + "] %}{{ l|length }}"
)


@pytest.fixture
def pool():
    made = RenderPool()
    yield made
    made.close()


@pytest.fixture
def patient_pool():
    """A wall budget no loaded host reaches first: only the kernel's limits stop a render here,
    however busy the host (the wall budget has a test of its own)."""
    made = RenderPool(wall_seconds=600)
    yield made
    made.close()


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def test_a_render_returns_the_bytes_the_in_process_render_gives(pool):
    templates = {"url": "{{ user }}:{{ password|urlquote }}", "all": "{{ values|toyaml }}"}
    isolated = pool.render(templates, VALUES, frozenset())
    local = rendering.InProcessRenderer().render(templates, VALUES, frozenset())
    assert isinstance(isolated, Rendered) and isolated == local


def test_a_cpu_hog_is_stopped_by_the_kernel_and_costs_this_process_nothing(patient_pool):
    pool = patient_pool
    own, children = _own_cpu(), _children_cpu()
    fault = pool.render({"a-first": "{{ user }}", "b-hog": BIG_DIVISION}, VALUES, frozenset())
    pool.close()  # reap the children, so their CPU is counted
    assert fault == TemplateFault("b-hog", OVER_CPU)  # the key that was rendering, not the first
    assert _children_cpu() - children >= pool.cpu_seconds  # the child spent the budget
    assert _own_cpu() - own < pool.cpu_seconds / 2  # this process waited, it did not compute


def test_another_render_goes_on_while_a_hog_holds_a_child(patient_pool):
    pool = patient_pool
    hog: list[object] = []
    thread = threading.Thread(
        target=lambda: hog.append(pool.render({"k": BIG_DIVISION}, VALUES, frozenset()))
    )
    thread.start()
    other = pool.render({"k": "{{ user }}"}, VALUES, frozenset())
    thread.join()
    assert isinstance(other, Rendered) and other.data == {"k": b"admin"}
    assert hog == [TemplateFault("k", OVER_CPU)]


def test_memory_over_the_budget_is_a_fault_and_the_next_render_gets_a_fresh_child(patient_pool):
    pool = patient_pool
    assert pool.render({"k": BIG_INTEGERS}, VALUES, frozenset()) == TemplateFault("k", OVER_MEMORY)
    started = pool.started
    assert pool.render({"k": "{{ user }}"}, VALUES, frozenset()) == Rendered({"k": b"admin"})
    assert pool.started == started + 1


def test_without_an_answer_in_the_wall_budget_the_child_is_killed():
    pool = RenderPool(cpu_seconds=60, wall_seconds=0.5)
    try:
        assert pool.render({"k": SMALLER_DIVISION}, VALUES, frozenset()) == TemplateFault(
            "k", OVER_TIME
        )
    finally:
        pool.close()


def test_a_parse_nested_past_python_s_limits_is_a_fault_through_the_pool(patient_pool):
    pool = patient_pool
    for text in (
        "{% if 1 %}" * 300 + "x" + "{% endif %}" * 300,
        "{{ " + "(" * 200 + "1" + ")" * 200 + " }}",
    ):
        assert pool.parse({"k": text}, None) == TemplateFault("k", NESTED_TOO_DEEP)


def test_the_child_holds_none_of_the_operator_s_environment(pool, monkeypatch):
    monkeypatch.setenv("HIKYO_OPERATOR_DATABASE_URL", f"postgres://u:{CANARY}@db/x")
    pool.close()
    assert isinstance(pool.render({"k": "{{ user }}"}, VALUES, frozenset()), Rendered)
    (child,) = pool._idle  # the warm child the render used
    environ = Path(f"/proc/{child.process.pid}/environ").read_bytes()
    assert CANARY.encode() not in environ and b"DATABASE_URL" not in environ
    assert child.process.pid != os.getpid()


def test_an_operator_process_points_the_engine_at_the_pool():
    previous = rendering.active_renderer()
    try:
        contain_templates()
        assert isinstance(rendering.active_renderer(), RenderPool)
    finally:
        rendering.use_renderer(previous)


def test_a_renderer_is_the_kernel_s_first_choice_when_the_pod_runs_out_of_memory(pool):
    assert isinstance(pool.render({"k": "{{ user }}"}, VALUES, frozenset()), Rendered)
    (child,) = pool._idle
    assert Path(f"/proc/{child.process.pid}/oom_score_adj").read_text().strip() == "1000"
    limits = Path(f"/proc/{child.process.pid}/limits").read_text()
    assert re.search(r"Max core file size\s+0\s+0", limits)
    assert re.search(r"Max address space\s+\d+", limits)


def test_a_render_runs_under_the_kernel_s_cpu_limit_of_its_budget(pool):
    """RLIMIT_CPU is set before each request to the child's CPU so far plus the budget, so the
    kernel stops whatever holds the child's interpreter (rounded up to whole seconds)."""
    assert isinstance(pool.render({"k": "{{ user }}"}, VALUES, frozenset()), Rendered)
    (child,) = pool._idle
    pid = child.process.pid
    limit = re.search(r"Max cpu time\s+(\S+)", Path(f"/proc/{pid}/limits").read_text())
    assert limit is not None and limit[1] != "unlimited"
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = 1 / os.sysconf("SC_CLK_TCK")  # /proc counts whole ticks; the child's rusage does not
    used = (int(fields[11]) + int(fields[12])) * tick  # utime + stime so far
    assert int(limit[1]) <= math.ceil(used + tick + pool.cpu_seconds)


def test_a_frame_larger_than_any_answer_stops_the_child(pool):
    """What a child may send is bounded before it is read whole: a length past any answer's
    ends the call (the child is killed), however the child came to send it."""
    assert isinstance(pool.render({"k": "{{ user }}"}, VALUES, frozenset()), Rendered)
    (child,) = pool._idle
    child._buffer += (MAX_FRAME_BYTES + 1).to_bytes(4, "big")
    fault = pool.render({"k": "{{ user }}"}, VALUES, frozenset())
    assert fault == TemplateFault("k", "stops the renderer") and child.stopped()
