"""S11.2 templates: a sandboxed, deterministic, bounded subset of Jinja2. Pure.

``parse_templates`` runs before the fetch (a syntax error, an unknown filter or function, an
object emitted where the parser can see it, or in mapping mode a variable that is no assembled
key); ``render_templates`` runs after a valid full 200, over the assembled keys. Every error is
a ``TemplateFault`` that names the destination key and the kind of error, and at most a
variable's name: never template text, never a value, never Jinja's own exception text (which
can quote data).

The bounds (template_bounds.py) hold whatever the template does: loops (recursive ``loop(...)``
included), concatenations and literal output are routed through guard functions by rewriting
the parsed template (``_BoundedEnvironment._parse``); operators through the sandbox's
intercepted binary operators; filters are wrapped. A guard that trips raises
``BoundExceeded``, which unwinds the render at once. These functions run in-process; the
operator calls them through workers/engine/rendering.py, which its processes point at an
isolated renderer with an operating-system budget (S11.2 Containment).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from jinja2 import StrictUndefined, TemplateSyntaxError, nodes
from jinja2.exceptions import SecurityError, UndefinedError
from jinja2.runtime import LoopContext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .template_bounds import (
    BUDGET,
    MAX_RECURSION,
    MAX_STRING,
    NESTED_TOO_DEEP,
    OVER_MEMORY,
    RENDERS_AN_OBJECT,
    STRING_TOO_LONG,
    TOO_MANY_OPERATIONS,
    BinaryValue,
    BoundExceeded,
    Budget,
    FilterFailed,
    MissingSource,
    Values,
    budget,
    checked,
    counted,
    emitted,
    filter_inputs,
    size_of,
)
from .template_filters import ADDED_FILTERS, dockerconfigjson
from .template_reading import (
    RESERVED,
    defined,
    emits_an_object,
    reads_values_whole,
    variables,
)

__all__ = [
    "Rendered",
    "TemplateFault",
    "dockerconfigjson",
    "parse_templates",
    "render_templates",
    "template_variables",
]

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

    @property
    def facts(self) -> dict[str, str]:
        return {"key": self.key, "kind": self.kind}


@dataclass(frozen=True)
class Rendered:
    """The rendered destinations, and the destinations left out for lack of sources."""

    data: dict[str, bytes] = field(repr=False)
    lacking: dict[str, tuple[str, ...]] = field(default_factory=dict)


def _guarded_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    passes = getattr(function, "jinja_pass_arg", None)
    head = 1 if passes is not None else 0

    def guarded(*args: Any, **kwargs: Any) -> Any:
        current = budget()
        current.operate()
        values = list(args[head:])
        filter_inputs(name, values, kwargs, current)
        try:
            result = function(*args[:head], *values, **kwargs)
        except (BoundExceeded, MissingSource, FilterFailed, RecursionError, MemoryError):
            raise  # each has a kind of its own (_render_one)
        except Exception:
            raise FilterFailed(f"filter {name} failed on its input") from None
        if isinstance(result, Iterator):  # map/select/... : bounded as they are consumed
            return counted(result, current)
        return checked(result)

    if passes is not None:
        guarded.jinja_pass_arg = passes  # type: ignore[attr-defined]
    return guarded


# -- the environment ---------------------------------------------------------------------------


class _BoundedEnvironment(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"+", "*", "**", "%"})

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        reserved = [n for n in tree.find_all(nodes.Name) if n.name in RESERVED]
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
        budget().operate()
        if operator == "*" and isinstance(left, int) and isinstance(right, str | list | tuple):
            left, right = right, left
        repeated = isinstance(left, str | list | tuple) and isinstance(right, int)
        if operator == "*" and repeated and max(size_of(left), 1) * max(right, 0) > MAX_STRING:
            raise BoundExceeded(STRING_TOO_LONG)
        if operator in ("*", "**") and isinstance(left, int) and isinstance(right, int):
            bits = abs(left).bit_length() * (abs(right) if operator == "**" else 1)
            if bits + (abs(right).bit_length() if operator == "*" else 0) > 8 * MAX_STRING:
                raise BoundExceeded(f"a number over {8 * MAX_STRING:,} bits")
        if operator == "%" and isinstance(left, str):
            raise SecurityError("string formatting with %")
        return checked(super().call_binop(context, operator, left, right))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        current = budget()
        if __obj is _emit:
            return _emit(*args)
        if isinstance(__obj, LoopContext) and args:  # a recursive loop's inner iterations
            args = (_loop(args[0]), *args[1:])
        method = getattr(__obj, "__wrapped__", __obj)  # the sandbox wraps str.format
        if isinstance(getattr(method, "__self__", None), str) and (
            getattr(method, "__name__", "") not in _STR_METHODS
        ):
            raise SecurityError("a string method that can amplify")
        current.operate()
        current.depth += 1
        try:
            if current.depth > MAX_RECURSION:
                raise BoundExceeded(f"calls nested over {MAX_RECURSION} deep")
            return checked(super().call(__context, __obj, *args, **kwargs))
        finally:
            current.depth -= 1


def _guard_call(name: str, args: list[nodes.Expr], lineno: int) -> nodes.Call:
    return nodes.Call(nodes.Name(name, "load"), list(args), [], None, None, lineno=lineno)


def _rewritten(parent: nodes.Node, item: Any) -> Any:
    if isinstance(item, nodes.Concat):
        return _guard_call("hikyo_concat", item.nodes, item.lineno)
    if isinstance(parent, nodes.Output) and isinstance(item, nodes.TemplateData):
        return _guard_call("hikyo_emit", [nodes.Const(item.data)], item.lineno)
    return item


def _loop(items: Any) -> Iterator[Any]:
    current = budget()
    for item in items:
        current.operate()
        yield item


def _concat(*parts: Any) -> str:
    budget().operate()
    texts = [str(emitted(p)) for p in parts]
    if sum(len(t) for t in texts) > MAX_STRING:
        raise BoundExceeded(STRING_TOO_LONG)
    return checked("".join(texts))


def _emit(text: str) -> str:
    return text  # a literal made a call, so ``_finalize`` counts it when it is emitted


def _finalize(value: Any) -> Any:
    budget().emit(len(str(emitted(value))))
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
    env.filters.update(ADDED_FILTERS)
    env.filters = {name: _guarded_filter(name, f) for name, f in env.filters.items()}
    return env


_ENVIRONMENT = _environment()


# -- before the fetch ---------------------------------------------------------------------------


def _parsed(text: str) -> nodes.Template | str:
    """The tree, or the kind of error that stops it being parsed."""
    try:
        return _ENVIRONMENT.parse(text)
    except TemplateSyntaxError as error:
        return f"a syntax error on line {error.lineno}"
    except RecursionError:
        return NESTED_TOO_DEEP
    except MemoryError:
        return OVER_MEMORY


def _compile_fault(tree: nodes.Template) -> str | None:
    """Python's own compiler has nesting limits of its own: what Jinja parses, it may not."""
    try:
        _ENVIRONMENT.compile(tree)
    except TemplateSyntaxError as error:
        return f"a syntax error on line {error.lineno}"
    except (RecursionError, SyntaxError):
        return NESTED_TOO_DEEP
    except MemoryError:
        return OVER_MEMORY
    return None


def template_variables(templates: Mapping[str, str]) -> dict[str, frozenset[str]]:
    """The variables each entry reads (by name or ``values["name"]``); for ``explain``. An
    entry that cannot be parsed reads nothing (its fault is ``parse_templates``')."""
    found: dict[str, frozenset[str]] = {}
    for key, text in templates.items():
        tree = _parsed(text)
        try:
            found[key] = frozenset() if isinstance(tree, str) else variables(tree)
        except RecursionError:
            found[key] = frozenset()
    return found


def parse_templates(
    templates: Mapping[str, str],
    known_keys: frozenset[str] | None,
    entering: Callable[[str], None] = lambda key: None,
) -> TemplateFault | None:
    """S11.2 before the fetch: None when every entry parses and (``known_keys`` given:
    mapping mode) reads only assembled keys; else the first fault, by destination key.
    ``entering`` hears each destination key before its entry is checked."""
    for key in sorted(templates):
        entering(key)
        try:
            kind = _parse_fault(templates[key], known_keys)
        except RecursionError:
            kind = NESTED_TOO_DEEP
        if kind is not None:
            return TemplateFault(key, kind)
    return None


def _parse_fault(text: str, known_keys: frozenset[str] | None) -> str | None:
    tree = _parsed(text)
    if isinstance(tree, str):
        return tree
    for node in tree.find_all(nodes.Filter):
        if node.name not in _ENVIRONMENT.filters:
            return f"an unknown filter on line {node.lineno}"
    # The guards' calls are the parser's own (a template may not name them).
    offered = set(_ENVIRONMENT.globals) | defined(tree) | {"caller", "loop"}
    for call in tree.find_all(nodes.Call):
        callee = call.node
        if isinstance(callee, nodes.Name) and callee.name not in offered:
            return f"an unknown function on line {call.lineno}"
    if emits_an_object(tree):
        return RENDERS_AN_OBJECT
    if known_keys is not None:
        unknown = sorted(variables(tree) - known_keys)
        if unknown:
            return f"variable {unknown[0]} is no assembled key"
    return _compile_fault(tree)


# -- after a valid full 200 ---------------------------------------------------------------------


def render_templates(
    templates: Mapping[str, str],
    assembled: Mapping[str, bytes],
    missing: frozenset[str] = frozenset(),
    entering: Callable[[str], None] = lambda key: None,
) -> Rendered | TemplateFault:
    """Each entry over the assembled keys (S4.4/S4.5 done). An entry that reads a missing
    source is left out and named in ``lacking``; any other error is the entry's fault.
    ``entering`` hears each destination key before its entry renders."""
    present: dict[str, Any] = {}
    for name, raw in assembled.items():
        try:
            present[name] = raw.decode("utf-8")
        except UnicodeDecodeError:
            present[name] = BinaryValue(raw)
    context = {k: v for k, v in present.items() if k.isidentifier()}
    context["values"] = Values(present, missing)
    data: dict[str, bytes] = {}
    lacking: dict[str, tuple[str, ...]] = {}
    total = 0
    for key in sorted(templates):
        entering(key)
        outcome = _render_one(templates[key], context, missing)
        if isinstance(outcome, MissingSource):
            lacking[key] = (outcome.name,)
        elif isinstance(outcome, bytes):
            total += len(outcome)
            if total > MAX_STRING:  # no Secret holds more (S4.4.3): stop before carrying it
                return TemplateFault(key, f"output over {MAX_STRING:,} bytes in all")
            data[key] = outcome
        else:
            return TemplateFault(key, outcome.kind)
    return Rendered(data, lacking)


def _render_one(
    text: str, context: dict[str, Any], missing: frozenset[str]
) -> bytes | MissingSource | BoundExceeded:
    """The rendered bytes, the missing source it reads, or its error (a fixed kind)."""
    tree = _parsed(text)
    if isinstance(tree, str):
        return BoundExceeded(tree)
    try:
        lacking = sorted(variables(tree) & missing)
        if not lacking and missing and reads_values_whole(tree):
            lacking = sorted(missing)
    except RecursionError:
        return BoundExceeded(NESTED_TOO_DEEP)
    if lacking:
        return MissingSource(lacking[0])
    token = BUDGET.set(Budget())
    try:
        template = _ENVIRONMENT.from_string(text)
        return "".join(template.generate(context)).encode("utf-8")
    except (MissingSource, BoundExceeded) as error:
        return error
    except FilterFailed as error:
        return BoundExceeded(error.name)
    except UndefinedError:
        return BoundExceeded("an undefined variable or attribute")
    except SecurityError:
        return BoundExceeded("an operation the sandbox does not allow")
    except OverflowError:  # the sandbox's range() over its bound
        return BoundExceeded(TOO_MANY_OPERATIONS)
    except (RecursionError, SyntaxError):  # Python's compiler nests less deep than Jinja
        return BoundExceeded(NESTED_TOO_DEEP)
    except MemoryError:
        return BoundExceeded(OVER_MEMORY)
    except TemplateSyntaxError as error:
        return BoundExceeded(f"a syntax error on line {error.lineno}")
    except Exception as error:  # the engine's own text can quote data: only its kind
        return BoundExceeded(f"a render error ({type(error).__name__})")
    finally:
        BUDGET.reset(token)
