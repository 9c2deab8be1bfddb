"""S11.2's render bounds hold at the numbers the spec gives (100,000 loop iterations and calls,
1 MiB strings and output), and what a template builds is sized *before* it is built: a string
far past the bound fails with the same clear fault whether or not it would fit in memory, and
the traced peak shows it was never built (tools/mutants.py breaks each of these guards; these
tests are the ones that notice). The numbers are pinned literally, not read from the module."""

from __future__ import annotations

import pytest

from bench.hostile_templates import TRACED_BOUND_MIB, measure
from workers.engine.templates import Rendered, TemplateFault, render_templates

SOURCES = {"user": b"admin"}
FAULT = "the template of data key dest is invalid: "
SANDBOX = "an operation the sandbox does not allow"


def _two_loops(each: int) -> str:
    """``2 * each`` loop iterations, each loop within Jinja's own range() limit."""
    return ("{% for i in range(" + str(each) + ") %}{% endfor %}") * 2


def test_a_render_may_loop_about_100_000_times_and_no_more():
    assert render_templates({"k": _two_loops(45_000)}, SOURCES) == Rendered({"k": b""})
    assert render_templates({"k": _two_loops(55_000)}, SOURCES) == TemplateFault(
        "k", "more than 100,000 loop iterations and calls"
    )


def test_one_entry_s_output_stops_at_1_mib_while_it_renders():
    """Stopped by the render's own count (characters), before the entry's bytes exist; the
    check over all entries' bytes comes after and has a message of its own."""
    template = "{% for i in range(11) %}{{ 'x' * 100000 }}{% endfor %}"
    assert render_templates({"k": template}, SOURCES) == TemplateFault(
        "k", "output over 1,048,576 characters"
    )


@pytest.mark.parametrize(
    "template",
    [
        pytest.param("{{ 'a' * 50000000 }}", id="repetition"),
        pytest.param(
            "{% set s = 'a' * 1000000 %}{{ " + " ~ ".join(["s"] * 40) + " }}", id="concatenation"
        ),
        pytest.param("{{ ('a' * 1000000)|replace('a', 'b' * 40) }}", id="replace"),
        pytest.param("{{ range(400)|join('x' * 100000) }}", id="join"),
    ],
)
def test_a_string_far_past_1_mib_is_refused_before_it_is_built(template):
    message, _, peak_mib = measure(template)
    assert message == FAULT + "a string over 1,048,576 characters"
    assert peak_mib < TRACED_BOUND_MIB  # 40-50 MB if it had been built, then refused


@pytest.mark.parametrize(
    "call", ["user.zfill(12)", "user.ljust(12)", "user.center(12)", "user.expandtabs(8)"]
)
def test_string_methods_that_can_build_longer_strings_are_refused(call):
    """Their guarded filters (center, format, ...) size the result first; the methods
    themselves cannot be called at all."""
    assert render_templates({"k": "{{ " + call + " }}"}, SOURCES) == TemplateFault("k", SANDBOX)
    assert render_templates({"k": "{{ user.upper() }}"}, SOURCES) == Rendered({"k": b"ADMIN"})


def test_a_number_past_8_mebibits_is_refused_before_it_is_computed():
    assert render_templates({"k": "{{ 2 ** 5000000 }}"}, SOURCES) == TemplateFault(
        "k", "a number over 8,388,608 bits"
    )
    assert render_templates({"k": "{{ 2 ** 4000000 > 1 }}"}, SOURCES) == Rendered({"k": b"True"})
