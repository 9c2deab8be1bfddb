"""S11.2 templates: a sandboxed, deterministic, bounded subset of Jinja2. Pure.

``parse_templates`` runs before the fetch (a syntax error, an unknown filter or function, or
in mapping mode a variable that is no assembled key); ``render_templates`` runs after a valid
full 200, over the assembled keys. Every error is a ``TemplateFault`` that names the
destination key and the kind of error, and at most a variable's name: never template text,
never a value, never Jinja's own exception text (which can quote data).

The bounds hold whatever the template does: every loop iteration and every call counts
against ``MAX_OPERATIONS``; every string an operator, a concatenation, a filter or a call
builds, and everything a render emits (macro bodies included), counts against
``MAX_STRING``. Loops, concatenations and literal output are routed through guard functions
by rewriting the parsed template (``_BoundedEnvironment._parse``); operators through the
sandbox's intercepted binary operators; filters are wrapped. A guard that trips raises
``_BoundExceeded``, which unwinds the render at once.
"""

from __future__ import annotations

import base64
import contextvars
import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from jinja2 import StrictUndefined, TemplateSyntaxError, nodes
from jinja2.exceptions import SecurityError, UndefinedError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .file_formats import yaml_quoted

MAX_OPERATIONS = 100_000  # loop iterations and calls, per render (S11.2)
MAX_STRING = 1_048_576  # characters in any string built, and emitted in total (S11.2)
MAX_RECURSION = 64  # nested calls (macros calling macros)
_RESERVED = ("hikyo_loop", "hikyo_concat", "hikyo_emit")
# str methods a template may call: none of them builds a string longer than its input. The
# ones that can (format, center, ljust, zfill, replace, join, expandtabs, ...) have guarded
# filters of their own.
_STR_METHODS = frozenset(
    {
        "lower", "upper", "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines",
        "startswith", "endswith", "title", "capitalize", "casefold", "swapcase", "count",
        "find", "rfind", "index", "rindex", "partition", "rpartition", "removeprefix",
        "removesuffix", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit",
        "isidentifier", "islower", "isnumeric", "isspace", "istitle", "isupper",
    }
)  # fmt: skip
_FORMAT_WIDTH = re.compile(r"\d+")
_NOT_OFFERED_GLOBALS = ("dict", "lipsum", "cycler", "joiner", "namespace")
_NOT_OFFERED_FILTERS = ("random",)  # S11.2: no randomness


@dataclass(frozen=True)
class TemplateFault:
    """Why a destination key's template cannot be used: ``Delivery=False/InvalidTemplate``."""

    key: str
    kind: str

    @property
    def message(self) -> str:
        return f"the template of data key {self.key} is invalid: {self.kind}"


@dataclass(frozen=True)
class Rendered:
    """The rendered destinations, and the destinations left out for lack of sources."""

    data: dict[str, bytes] = field(repr=False)
    lacking: dict[str, tuple[str, ...]] = field(default_factory=dict)


class _BoundExceeded(Exception):
    """A render error of a fixed kind (a bound, or any other error, by kind only)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class _MissingSource(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class _FilterFailed(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


@dataclass
class _Budget:
    operations: int = 0
    emitted: int = 0
    depth: int = 0

    def operate(self, count: int = 1) -> None:
        self.operations += count
        if self.operations > MAX_OPERATIONS:
            raise _BoundExceeded(f"more than {MAX_OPERATIONS:,} loop iterations and calls")

    def emit(self, size: int) -> None:
        self.emitted += size
        if self.emitted > MAX_STRING:
            raise _BoundExceeded(f"output over {MAX_STRING:,} characters")


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("budget", default=None)


def _budget() -> _Budget:
    budget = _BUDGET.get()
    if budget is None:  # at compile time: refuse, so Jinja does not fold it into a constant
        raise _BoundExceeded("not rendering")
    return budget


def _size(value: Any) -> int:
    """Characters, counting each element of a container as one more."""
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, list | tuple):
        return len(value) + sum(_size(item) for item in value)
    if isinstance(value, dict):
        return len(value) + sum(_size(k) + _size(v) for k, v in value.items())
    return 0


def _checked(value: Any) -> Any:
    if _size(value) > MAX_STRING:
        raise _BoundExceeded(f"a string over {MAX_STRING:,} characters")
    return value


class BinaryValue:
    """A delivered value that is not UTF-8 text: only ``b64encode`` reads it (S11.2)."""

    __slots__ = ("_raw",)

    def __init__(self, raw: bytes) -> None:
        self._raw = raw

    def __str__(self) -> str:
        raise _FilterFailed("a value that is not UTF-8 text, used as text")

    __repr__ = __str__

    def __len__(self) -> int:
        return len(self._raw)


class _Values(Mapping[str, Any]):
    """``values[...]``: every assembled key; a missing source ends the entry (KeysMissing)."""

    def __init__(self, present: Mapping[str, Any], missing: frozenset[str]) -> None:
        self._present, self._missing = present, missing

    def __getitem__(self, name: str) -> Any:
        if name in self._present:
            return self._present[name]
        if name in self._missing:
            raise _MissingSource(name)
        raise _FilterFailed("a key that is not delivered, looked up in values")

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._present))

    def __len__(self) -> int:
        return len(self._present)


# -- the filters S11.2 adds -------------------------------------------------------------------


def _text(value: Any) -> str:
    return str(value)


def _b64encode(value: Any) -> str:
    raw = value._raw if isinstance(value, BinaryValue) else _text(value).encode("utf-8")
    return base64.b64encode(raw).decode("ascii")


def _b64decode(value: Any) -> str:
    return base64.b64decode(_text(value).encode("ascii"), validate=True).decode("utf-8")


def _urlquote(value: Any) -> str:
    return quote(_text(value), safe="")  # everything but unreserved characters


def _sha256(value: Any) -> str:
    return hashlib.sha256(_text(value).encode("utf-8")).hexdigest()


def _tojson(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _toyaml(value: Any) -> str:
    return (
        "".join(_yaml_lines(value, 0))
        if isinstance(value, dict | list)
        else (_yaml_scalar(value) + "\n")
    )


def _yaml_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return repr(value)
    return yaml_quoted(_text(value))


def _yaml_lines(value: Any, indent: int) -> Iterator[str]:
    pad = " " * indent
    if isinstance(value, dict):
        if not value:
            yield f"{pad}{{}}\n"
        for key in sorted(value, key=str):
            item = value[key]
            if isinstance(item, dict | list) and item:
                yield f"{pad}{yaml_quoted(str(key))}:\n"
                yield from _yaml_lines(item, indent + 2)
            else:
                yield f"{pad}{yaml_quoted(str(key))}: {_inline(item)}\n"
    else:
        if not value:
            yield f"{pad}[]\n"
        for item in value:
            if isinstance(item, dict | list) and item:
                yield f"{pad}-\n"
                yield from _yaml_lines(item, indent + 2)
            else:
                yield f"{pad}- {_inline(item)}\n"


def _inline(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _yaml_scalar(value)


def dockerconfigjson(registry: Any, username: Any, password: Any) -> str:
    """The canonical ``.dockerconfigjson`` text, as ``kubectl create secret docker-registry``
    writes it (key order username, password, auth; no spaces)."""
    user, secret = _text(username), _text(password)
    auth = base64.b64encode(f"{user}:{secret}".encode()).decode("ascii")
    entry = {"username": user, "password": secret, "auth": auth}
    return json.dumps({"auths": {_text(registry): entry}}, separators=(",", ":"))


_ADDED_FILTERS: dict[str, Callable[..., Any]] = {
    "b64encode": _b64encode,
    "b64decode": _b64decode,
    "urlquote": _urlquote,
    "tojson": _tojson,
    "toyaml": _toyaml,
    "sha256": _sha256,
}

# Arguments that size a filter's output beyond its input's (width, count).
_AMPLIFIERS = {"center": 1, "indent": 1, "wordwrap": 1, "truncate": 1}


def _guarded_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    passes = getattr(function, "jinja_pass_arg", None)

    def guarded(*args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.operate()
        values = args[1:] if passes is not None else args
        inputs = sum(_size(v) for v in values) + sum(_size(v) for v in kwargs.values())
        numbers = [v for v in (*values, *kwargs.values()) if isinstance(v, int | float)]
        if inputs > MAX_STRING or any(abs(n) > MAX_STRING for n in numbers):
            raise _BoundExceeded(f"a string over {MAX_STRING:,} characters")
        if (
            name == "format"
            and values
            and any(int(n) > MAX_STRING for n in _FORMAT_WIDTH.findall(_text(values[0])))
        ):
            raise _BoundExceeded(f"a string over {MAX_STRING:,} characters")
        if name == "indent" and values:
            lines = _text(values[0]).count("\n") + 1
            width = next((n for n in numbers if isinstance(n, int)), 4)
            if lines * abs(width) > MAX_STRING:
                raise _BoundExceeded(f"a string over {MAX_STRING:,} characters")
        if name == "replace" and len(values) >= 3:
            text, old, new = (_text(v) for v in values[:3])
            if old and text.count(old) * max(len(new) - len(old), 0) + len(text) > MAX_STRING:
                raise _BoundExceeded(f"a string over {MAX_STRING:,} characters")
            if not old and (len(text) + 1) * len(new) + len(text) > MAX_STRING:
                raise _BoundExceeded(f"a string over {MAX_STRING:,} characters")
        try:
            result = function(*args, **kwargs)
        except (_BoundExceeded, _MissingSource, _FilterFailed):
            raise
        except Exception:
            raise _FilterFailed(f"filter {name} failed on its input") from None
        if isinstance(result, Iterator):  # map/select/... : bounded as they are consumed
            return _counted(result, budget)
        return _checked(result)

    if passes is not None:
        guarded.jinja_pass_arg = passes  # type: ignore[attr-defined]
    return guarded


def _counted(items: Iterable[Any], budget: _Budget) -> Iterator[Any]:
    for item in items:
        budget.operate()
        yield _checked(item)


# -- the environment ---------------------------------------------------------------------------


class _BoundedEnvironment(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"+", "*", "**", "%"})

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        reserved = [n for n in tree.find_all(nodes.Name) if n.name in _RESERVED]
        if reserved:
            raise TemplateSyntaxError("reserved name", reserved[0].lineno)
        for loop in tree.find_all(nodes.For):
            loop.iter = _guard_call("hikyo_loop", [loop.iter], loop.lineno)
        for parent in list(tree.find_all(nodes.Node)):
            for field_name in parent.fields:
                child = getattr(parent, field_name, None)
                if isinstance(child, nodes.Concat):
                    setattr(parent, field_name, _guard_call("hikyo_concat", child.nodes, 0))
                elif isinstance(child, list):
                    setattr(parent, field_name, [_rewritten(parent, item) for item in child])
        return tree

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _budget().operate()
        if operator == "*" and isinstance(left, int) and isinstance(right, str | list | tuple):
            left, right = right, left
        repeated = isinstance(left, str | list | tuple) and isinstance(right, int)
        if operator == "*" and repeated and max(_size(left), 1) * max(right, 0) > MAX_STRING:
            raise _BoundExceeded(f"a string over {MAX_STRING:,} characters")
        if operator in ("*", "**") and isinstance(left, int) and isinstance(right, int):
            bits = abs(left).bit_length() * (abs(right) if operator == "**" else 1)
            if bits + (abs(right).bit_length() if operator == "*" else 0) > 8 * MAX_STRING:
                raise _BoundExceeded(f"a number over {8 * MAX_STRING:,} bits")
        if operator == "%" and isinstance(left, str):
            raise SecurityError("string formatting with %")
        return _checked(super().call_binop(context, operator, left, right))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        if __obj is _emit:
            return _emit(*args)
        method = getattr(__obj, "__wrapped__", __obj)  # the sandbox wraps str.format
        if isinstance(getattr(method, "__self__", None), str) and (
            getattr(method, "__name__", "") not in _STR_METHODS
        ):
            raise SecurityError("a string method that can amplify")
        budget.operate()
        budget.depth += 1
        try:
            if budget.depth > MAX_RECURSION:
                raise _BoundExceeded(f"calls nested over {MAX_RECURSION} deep")
            return _checked(super().call(__context, __obj, *args, **kwargs))
        finally:
            budget.depth -= 1


def _guard_call(name: str, args: list[nodes.Expr], lineno: int) -> nodes.Call:
    return nodes.Call(nodes.Name(name, "load"), list(args), [], None, None, lineno=lineno)


def _rewritten(parent: nodes.Node, item: Any) -> Any:
    if isinstance(item, nodes.Concat):
        return _guard_call("hikyo_concat", item.nodes, item.lineno)
    if isinstance(parent, nodes.Output) and isinstance(item, nodes.TemplateData):
        return _guard_call("hikyo_emit", [nodes.Const(item.data)], item.lineno)
    return item


def _loop(items: Any) -> Iterator[Any]:
    budget = _budget()
    for item in items:
        budget.operate()
        yield item


def _concat(*parts: Any) -> str:
    _budget().operate()
    if sum(len(str(p)) for p in parts) > MAX_STRING:
        raise _BoundExceeded(f"a string over {MAX_STRING:,} characters")
    return "".join(str(p) for p in parts)


def _emit(text: str) -> str:
    return text  # a literal made a call, so ``_finalize`` counts it when it is emitted


def _finalize(value: Any) -> Any:
    _budget().emit(len(str(value)))
    return value


def _environment() -> _BoundedEnvironment:
    env = _BoundedEnvironment(  # byte-exact: the text's last line break is kept (S11.2)
        undefined=StrictUndefined,
        autoescape=False,
        finalize=_finalize,
        cache_size=0,
        keep_trailing_newline=True,
    )
    for name in _NOT_OFFERED_GLOBALS:
        env.globals.pop(name, None)
    env.globals.update(
        dockerconfigjson=dockerconfigjson, hikyo_loop=_loop, hikyo_concat=_concat, hikyo_emit=_emit
    )
    for name in _NOT_OFFERED_FILTERS:
        env.filters.pop(name, None)
    env.filters.update(_ADDED_FILTERS)
    env.filters = {name: _guarded_filter(name, f) for name, f in env.filters.items()}
    return env


_ENVIRONMENT = _environment()
_FUNCTIONS = frozenset({"dockerconfigjson", "range", "values"})
_IMPLICIT = frozenset({"loop", "caller", "varargs", "kwargs"})  # Jinja's own names


# -- before the fetch ---------------------------------------------------------------------------


def template_variables(templates: Mapping[str, str]) -> dict[str, frozenset[str]]:
    """The variables each entry reads (by name or ``values["name"]``); for ``explain``."""
    return {key: _variables(_ENVIRONMENT.parse(text)) for key, text in templates.items()}


def _variables(tree: nodes.Template) -> frozenset[str]:
    loaded = {n.name for n in tree.find_all(nodes.Name) if n.ctx == "load"}
    names = loaded - _defined(tree) - _FUNCTIONS - _IMPLICIT - set(_RESERVED)
    for item in tree.find_all(nodes.Getitem):
        if (
            isinstance(item.node, nodes.Name)
            and item.node.name == "values"
            and isinstance(item.arg, nodes.Const)
            and isinstance(item.arg.value, str)
        ):
            names.add(item.arg.value)
    return frozenset(names)


def _defined(tree: nodes.Template) -> set[str]:
    """Names the template binds itself: set, loop targets, macro names and parameters."""
    names = {n.name for n in tree.find_all(nodes.Name) if n.ctx in ("store", "param")}
    return names | {m.name for m in tree.find_all(nodes.Macro)}


def parse_templates(
    templates: Mapping[str, str], known_keys: frozenset[str] | None
) -> TemplateFault | None:
    """S11.2 before the fetch: None when every entry parses and (``known_keys`` given:
    mapping mode) reads only assembled keys; else the first fault, by destination key."""
    for key in sorted(templates):
        try:
            tree = _ENVIRONMENT.parse(templates[key])
        except TemplateSyntaxError as error:
            return TemplateFault(key, f"a syntax error on line {error.lineno}")
        for node in tree.find_all(nodes.Filter):
            if node.name not in _ENVIRONMENT.filters:
                return TemplateFault(key, f"an unknown filter on line {node.lineno}")
        # The guards' calls are the parser's own (a template may not name them).
        offered = set(_ENVIRONMENT.globals) | _defined(tree) | {"caller"}
        for call in tree.find_all(nodes.Call):
            callee = call.node
            if isinstance(callee, nodes.Name) and callee.name not in offered:
                return TemplateFault(key, f"an unknown function on line {call.lineno}")
        if known_keys is not None:
            unknown = sorted(_variables(tree) - known_keys)
            if unknown:
                return TemplateFault(key, f"variable {unknown[0]} is no assembled key")
    return None


# -- after a valid full 200 ---------------------------------------------------------------------


def render_templates(
    templates: Mapping[str, str],
    assembled: Mapping[str, bytes],
    missing: frozenset[str] = frozenset(),
) -> Rendered | TemplateFault:
    """Each entry over the assembled keys (S4.4/S4.5 done). An entry that reads a missing
    source is left out and named in ``lacking``; any other error is the entry's fault."""
    present: dict[str, Any] = {}
    for name, raw in assembled.items():
        try:
            present[name] = raw.decode("utf-8")
        except UnicodeDecodeError:
            present[name] = BinaryValue(raw)
    context = {k: v for k, v in present.items() if k.isidentifier()}
    context["values"] = _Values(present, missing)
    data: dict[str, bytes] = {}
    lacking: dict[str, tuple[str, ...]] = {}
    for key in sorted(templates):
        outcome = _render_one(templates[key], context, missing)
        if isinstance(outcome, _MissingSource):
            lacking[key] = (outcome.name,)
        elif isinstance(outcome, bytes):
            data[key] = outcome
        else:
            return TemplateFault(key, outcome.kind)
    return Rendered(data, lacking)


def _render_one(
    text: str, context: dict[str, Any], missing: frozenset[str]
) -> bytes | _MissingSource | _BoundExceeded:
    """The rendered bytes, the missing source it reads, or its error (a fixed kind)."""
    try:
        tree_variables = _variables(_ENVIRONMENT.parse(text))
    except TemplateSyntaxError as error:
        return _BoundExceeded(f"a syntax error on line {error.lineno}")
    lacking = sorted(tree_variables & missing)
    if lacking:
        return _MissingSource(lacking[0])
    token = _BUDGET.set(_Budget())
    try:
        template = _ENVIRONMENT.from_string(text)
        return "".join(template.generate(context)).encode("utf-8")
    except (_MissingSource, _BoundExceeded) as error:
        return error
    except _FilterFailed as error:
        return _BoundExceeded(error.name)
    except UndefinedError:
        return _BoundExceeded("an undefined variable or attribute")
    except SecurityError:
        return _BoundExceeded("an operation the sandbox does not allow")
    except OverflowError:  # the sandbox's range() over its bound
        return _BoundExceeded(f"more than {MAX_OPERATIONS:,} loop iterations and calls")
    except RecursionError:
        return _BoundExceeded(f"calls nested over {MAX_RECURSION} deep")
    except TemplateSyntaxError as error:
        return _BoundExceeded(f"a syntax error on line {error.lineno}")
    except Exception as error:  # the engine's own text can quote data: only its kind
        return _BoundExceeded(f"a render error ({type(error).__name__})")
    finally:
        _BUDGET.reset(token)
