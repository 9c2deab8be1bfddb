"""S11.2's count bounds for one render, and the checks that hold them before anything is built.
Pure.

Every loop iteration, call and filter counts against ``MAX_OPERATIONS``, and a filter that
iterates its input counts each element first. A string or list that an operator or a filter
builds is sized from its inputs *before* it is built wherever its inputs size it (repetition,
``join``, ``format``, ``replace``, ``indent``, ``wordwrap``; ``center``, ``truncate`` and the
rest build at most their largest input or number argument, which are bounded first): over
``MAX_STRING`` is a fault. Everything built counts against ``MAX_BUILT`` in total, so many
distinct large strings fail as clearly as one. What these counts cannot see (one big-integer
division, a slow regular expression) the operating system's budget catches
(workers/render_pool.py); the counts come first because their message is the clearer one.

Output is deterministic (S11.2 rev 4): only strings, numbers, booleans and none are emitted or
stringified; anything else is ``renders an object``, never a ``repr`` with a memory address.
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from jinja2 import Undefined

MAX_OPERATIONS = 100_000  # loop iterations, calls and filter inputs' elements, per render
MAX_STRING = 1_048_576  # characters in any one string or list built, and emitted in total
MAX_BUILT = 16 * MAX_STRING  # characters built over a whole render
MAX_RECURSION = 64  # nested calls (macros calling macros)

# The fixed kinds a render can fail with beyond the count bounds (S11.2 rev 4).
RENDERS_AN_OBJECT = "renders an object"
NESTED_TOO_DEEP = "nested too deep"
OVER_MEMORY = "exceeds its memory budget"
OVER_CPU = "exceeds its CPU budget"
OVER_TIME = "exceeds its time budget"

STRING_TOO_LONG = f"a string over {MAX_STRING:,} characters"
TOO_MANY_OPERATIONS = f"more than {MAX_OPERATIONS:,} loop iterations and calls"

_SCALARS = (str, int, float, bool, type(None))
_PLAIN_DEPTH = 32


class BoundExceeded(Exception):
    """A render error of a fixed kind (a bound, or any other error, by kind only)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class MissingSource(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class FilterFailed(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class BinaryValue:
    """A delivered value that is not UTF-8 text: only ``b64encode`` reads it (S11.2)."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def __str__(self) -> str:
        raise FilterFailed("a value that is not UTF-8 text, used as text")

    __repr__ = __str__

    def __len__(self) -> int:
        return len(self.raw)


class Values(dict[str, Any]):
    """``values``: a mapping of every assembled key to its text, in key order (so ``tojson``,
    ``toyaml``, ``items()`` and ``dictsort`` work); a missing source ends the entry."""

    __slots__ = ("_missing",)

    def __init__(self, present: Mapping[str, Any], missing: frozenset[str]) -> None:
        super().__init__(sorted(present.items()))
        self._missing = missing

    def __missing__(self, name: str) -> Any:
        if name in self._missing:
            raise MissingSource(name)
        raise FilterFailed("a key that is not delivered, looked up in values")


@dataclass
class Budget:
    operations: int = 0
    emitted: int = 0
    built: int = 0
    depth: int = 0

    def operate(self, count: int = 1) -> None:
        self.operations += count
        if self.operations > MAX_OPERATIONS:
            raise BoundExceeded(TOO_MANY_OPERATIONS)

    def emit(self, size: int) -> None:
        self.emitted += size
        if self.emitted > MAX_STRING:
            raise BoundExceeded(f"output over {MAX_STRING:,} characters")

    def build(self, size: int) -> None:
        self.built += size
        if self.built > MAX_BUILT:
            raise BoundExceeded(f"builds over {MAX_BUILT:,} characters in all")


BUDGET: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("budget", default=None)


def budget() -> Budget:
    current = BUDGET.get()
    if current is None:  # at compile time: refuse, so Jinja does not fold it into a constant
        raise BoundExceeded("not rendering")
    return current


def size_of(value: Any) -> int:
    """Characters, counting each element of a container as one more."""
    if isinstance(value, str | bytes | BinaryValue):
        return len(value)
    if isinstance(value, list | tuple):
        return len(value) + sum(size_of(item) for item in value)
    if isinstance(value, dict):
        return len(value) + sum(size_of(k) + size_of(v) for k, v in value.items())
    return 0


def text_size(value: Any) -> int:
    """An upper bound on ``len(str(value))`` for a plain value, without building it."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value.bit_length() // 3 + 2  # decimal digits, and a sign
    if isinstance(value, _SCALARS):
        return 32
    return 8 * size_of(value) + 2  # quotes, separators and escapes of a container's repr


def checked(value: Any) -> Any:
    """A value just built: its size against the bounds, and against the render's total."""
    size = size_of(value)
    if size > MAX_STRING:
        raise BoundExceeded(STRING_TOO_LONG)
    current = BUDGET.get()
    if current is not None:
        current.build(size)
    return value


def is_plain(value: Any, depth: int = 0) -> bool:
    """A scalar, or a list, tuple or dict of plain values: what stringifies the same in every
    process (no memory address, no internal name)."""
    if isinstance(value, (*_SCALARS, BinaryValue)):
        return True
    if depth > _PLAIN_DEPTH:
        raise BoundExceeded(NESTED_TOO_DEEP)
    if isinstance(value, list | tuple):
        return all(is_plain(item, depth + 1) for item in value)
    if isinstance(value, dict):
        return all(is_plain(k, depth + 1) and is_plain(v, depth + 1) for k, v in value.items())
    return False


def emitted(value: Any) -> Any:
    """What a render may write into its output: a string, number, boolean or none."""
    if isinstance(value, Undefined | BinaryValue):
        str(value)  # each raises its own, clearer error (undefined, not UTF-8)
    if not isinstance(value, _SCALARS):
        raise BoundExceeded(RENDERS_AN_OBJECT)
    return value


def counted(items: Iterable[Any], current: Budget) -> Iterator[Any]:
    """Elements of an iterable a filter consumes or yields: each one an operation, each one
    sized. Whether each is plain is checked where it is emitted or stringified."""
    for item in items:
        current.operate()
        yield checked(item)


# -- filters ----------------------------------------------------------------------------------

# Filters that iterate their first argument: each element of a container counts as an
# operation, and an iterator, range or view handed to them is consumed (counted) before they
# run. Those in CHARACTERWISE iterate a string's characters too.
CHARACTERWISE = frozenset(
    {
        "batch", "groupby", "join", "list", "map", "max", "min", "reject", "rejectattr",
        "select", "selectattr", "slice", "sort", "sum", "unique",
    }
)  # fmt: skip
ITERATING = CHARACTERWISE | {"dictsort", "items", "reverse", "tojson", "toyaml"}
_CONSUMING = ITERATING | {"first", "last", "length"}
_PERCENT = re.compile(
    r"%(?:\([^)]*\))?[#0\- +]*(?P<width>\*|\d+)?(?:\.(?P<precision>\*|\d*))?[hlL]?(?P<conv>.)",
    re.S,
)


def filter_inputs(name: str, values: list[Any], kwargs: dict[str, Any], current: Budget) -> None:
    """Before a filter runs: its inputs are plain (an iterable first argument of an iterating
    filter is consumed into a counted list), and what it would build fits ``MAX_STRING``."""
    if values and name in _CONSUMING and _consumable(values[0]):
        values[0] = list(counted(values[0], current))
    for value in (*values, *kwargs.values()):
        if not (is_plain(value) or isinstance(value, Undefined)):
            raise BoundExceeded(RENDERS_AN_OBJECT)
    head = values[0] if values else None
    iterated = name in ITERATING and isinstance(head, list | tuple | dict)
    if iterated or (name in CHARACTERWISE and isinstance(head, str)):
        current.operate(len(head))
    inputs = sum(size_of(v) for v in values) + sum(size_of(v) for v in kwargs.values())
    numbers = [v for v in (*values, *kwargs.values()) if isinstance(v, int | float)]
    if inputs > MAX_STRING or any(abs(n) > MAX_STRING for n in numbers):
        raise BoundExceeded(STRING_TOO_LONG)
    built = _BUILDS.get(name)
    if built is not None and values and built(values, kwargs) > MAX_STRING:
        raise BoundExceeded(STRING_TOO_LONG)


def _consumable(value: Any) -> bool:
    plain = is_plain(value) or isinstance(value, Undefined | Mapping)
    return not plain and isinstance(value, Iterable)


def _argument(
    values: list[Any], kwargs: dict[str, Any], index: int, name: str, default: Any
) -> Any:
    return values[index] if len(values) > index else kwargs.get(name, default)


def _join_size(values: list[Any], kwargs: dict[str, Any]) -> int:
    items = values[0] if isinstance(values[0], list | tuple | dict) else str(values[0])
    separator = _argument(values, kwargs, 1, "d", "")
    count = len(items)
    return sum(text_size(i) for i in items) + max(count - 1, 0) * text_size(separator)


def _format_size(values: list[Any], kwargs: dict[str, Any]) -> int:
    """``%``-formatting: each directive at most its width, its precision and the widest
    argument, widths and precisions given by ``*`` at the largest number among the arguments."""
    template, arguments = str(values[0]), [*values[1:], *kwargs.values()]
    widest = max((text_size(a) for a in arguments), default=0)
    largest = max((abs(a) for a in arguments if isinstance(a, int)), default=0)
    total = len(template)
    for directive in _PERCENT.finditer(template):
        if directive["conv"] == "%":
            continue
        width, precision = directive["width"], directive["precision"]
        total += widest
        total += largest if width == "*" else int(width or 0)
        total += largest if precision == "*" else int(precision or 0)
    return total


def _replace_size(values: list[Any], kwargs: dict[str, Any]) -> int:
    if len(values) < 3:
        return 0
    text, old, new = (str(v) for v in values[:3])
    count = _argument(values, kwargs, 3, "count", None)
    hits = (text.count(old) if old else len(text) + 1) if count is None else abs(count)
    return len(text) + hits * max(len(new) - len(old), 0)


def _indent_size(values: list[Any], kwargs: dict[str, Any]) -> int:
    """Jinja indents every line after the first (blank ones only with ``blank``), and the
    first with ``first``."""
    text = str(values[0])
    width = _argument(values, kwargs, 1, "width", 4)
    step = len(width) if isinstance(width, str) else abs(int(width))
    first, blank = (
        _argument(values, kwargs, 2, "first", False),
        _argument(values, kwargs, 3, "blank", False),
    )
    lines = (text + "\n").splitlines()
    indented = sum(1 for line in lines[1:] if blank or line) + (1 if first else 0)
    return len(text) + 1 + indented * step


def _wordwrap_size(values: list[Any], kwargs: dict[str, Any]) -> int:
    text = str(values[0])
    width = max(int(_argument(values, kwargs, 1, "width", 79)), 1)
    wrap = _argument(values, kwargs, 3, "wrapstring", None)
    lines = min(len(text) + 1, len(text) // width + text.count(" ") + text.count("\n") + 1)
    return len(text) + lines * (len(str(wrap)) if wrap is not None else 1)


_BUILDS = {
    "join": _join_size,
    "format": _format_size,
    "replace": _replace_size,
    "indent": _indent_size,
    "wordwrap": _wordwrap_size,
}
