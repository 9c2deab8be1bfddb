"""``python -m bench.hostile_templates``: every hostile template of S11.2 rendered over a canary
value, each case's time and peak traced memory printed against its bound (the 90 s run
deadline, S4.1.4; 64 MiB), as a table and JSON. Tests assert the fault, never the time.
"""

from __future__ import annotations

import json
import sys
import time
import tracemalloc

from workers.engine.templates import Rendered, render_templates

CANARY = "CANARYTEMPLATEVALUE7f3e"
VALUES = {"user": b"admin", "password": CANARY.encode(), "blob": b"\xff\xfe" + CANARY.encode()}
RUN_DEADLINE_SECONDS = 90.0
MEMORY_BOUND_MIB = 64.0

# name -> (template, the fault's kind starts with)
HOSTILE: dict[str, tuple[str, str]] = {
    "string-repetition": ("{{ 'a' * 10**9 }}", "a string over"),
    "list-repetition": ("{{ ([1] * 10**9)|length }}", "a string over"),
    "huge-range": ("{% for i in range(10**9) %}x{% endfor %}", "more than 100,000"),
    "nested-loops": (
        "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
        "more than 100,000",
    ),
    "class-escape": ("{{ ''.__class__ }}", "an operation the sandbox"),
    "subclasses": ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "an operation the sandbox"),
    "deep-recursion": ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "calls nested over"),
    "exponential-calls": (
        "{% macro f(n) %}{% if n > 0 %}{{ f(n-1) }}{{ f(n-1) }}{% endif %}{% endmacro %}"
        "{{ f(40) }}",
        "more than 100,000",
    ),
    "doubling-concat": (
        "{% macro d(s, n) %}{% if n %}{{ d(s ~ s, n-1) }}{% else %}{{ s }}{% endif %}"
        "{% endmacro %}{{ d(password, 40) }}",
        "a string over",
    ),
    "literal-in-a-loop": (
        "{% for i in range(99999) %}" + "A" * 100 + "{% endfor %}",
        "output over",
    ),
    "filter-fails-on-canary": ("{{ password|b64decode }}", "filter b64decode failed"),
    "filter-int-on-canary": ("{{ password|float + password }}", "a render error"),
    "binary-as-text": ("{{ blob }}", "a value that is not UTF-8"),
    "center-amplifier": ("{{ 'a'|center(10**9) }}", "a string over"),
    "indent-amplifier": ("{{ ('\n' * 100000)|indent(1000) }}", "a string over"),
    "replace-amplifier": ("{{ ('a' * 1000)|replace('a', 'b' * 10000) }}", "a string over"),
    "format-width": ("{{ '%999999999s'|format(password) }}", "a string over"),
    "str-format-width": ("{{ '{:>999999999}'.format(password) }}", "an operation the sandbox"),
    "percent-format": ("{{ '%999999999s' % password }}", "an operation the sandbox"),
    "join-amplifier": ("{% set s = 'a' * 1000000 %}{{ [s, s, s, s]|join }}", "a string over"),
    "huge-power": ("{{ 10 ** (10**7) }}", "a number over"),
    "repeated-squaring": (
        "{% macro s(x, n) %}{% if n %}{{ s(x*x, n-1) }}{% else %}{{ x }}{% endif %}"
        "{% endmacro %}{{ s(3, 60) }}",
        "a number over",
    ),
    "undefined": ("{{ values[password] }}", "a key that is not delivered"),
}


def measure(template: str) -> tuple[str, float, float]:
    """(the fault's message or 'rendered', seconds, peak traced MiB)."""
    tracemalloc.start()
    started = time.perf_counter()
    outcome = render_templates({"dest": template}, VALUES)
    seconds = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    message = "rendered" if isinstance(outcome, Rendered) else outcome.message
    return message, seconds, peak


def main() -> int:
    rows, failed = [], False
    print(f"| case | seconds (bound {RUN_DEADLINE_SECONDS:.0f}) | peak MiB (bound "
          f"{MEMORY_BOUND_MIB:.0f}) | fault |")  # fmt: skip
    print("|---|---|---|---|")
    for name, (template, _) in HOSTILE.items():
        message, seconds, peak = measure(template)
        ok = seconds < RUN_DEADLINE_SECONDS and peak < MEMORY_BOUND_MIB and CANARY not in message
        failed |= not ok
        rows.append({"case": name, "seconds": seconds, "peak_mib": peak, "met": ok})
        print(f"| {name} | {seconds:.3f} | {peak:.1f} | {message.split(': ', 1)[-1]} |")
    print(json.dumps(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
