"""What a parsed template reads and emits, from its syntax tree alone (S11.2): the variables an
entry uses (``explain``, the sources it lacks), whether it reads ``values`` whole, and whether
an output is an object the parser can already see. Pure; no rendering."""

from __future__ import annotations

from jinja2 import nodes

RESERVED = ("hikyo_loop", "hikyo_concat", "hikyo_emit")  # the rewriter's own calls
FUNCTIONS = frozenset({"dockerconfigjson", "range", "values"})
IMPLICIT = frozenset({"loop", "caller", "varargs", "kwargs"})  # Jinja's own names


def variables(tree: nodes.Template) -> frozenset[str]:
    """The names an entry reads: loaded and not bound by itself, or ``values["name"]``."""
    loaded = {n.name for n in tree.find_all(nodes.Name) if n.ctx == "load"}
    names = loaded - defined(tree) - FUNCTIONS - IMPLICIT - set(RESERVED)
    for item in tree.find_all(nodes.Getitem):
        constant = item.arg.value if isinstance(item.arg, nodes.Const) else None
        if _is_values(item.node) and isinstance(constant, str):
            names.add(constant)
    return frozenset(names)


def _is_values(node: nodes.Node) -> bool:
    return isinstance(node, nodes.Name) and node.name == "values" and node.ctx == "load"


def reads_values_whole(tree: nodes.Template) -> bool:
    """Whether ``values`` is read other than by subscript (``values | tojson``, a loop over
    it): then every missing source is one the entry uses."""
    subscripted = {id(item.node) for item in tree.find_all(nodes.Getitem)}
    return any(
        _is_values(name) and id(name) not in subscripted for name in tree.find_all(nodes.Name)
    )


def defined(tree: nodes.Template) -> set[str]:
    """Names the template binds itself: set, loop targets, macro names and parameters."""
    names = {n.name for n in tree.find_all(nodes.Name) if n.ctx in ("store", "param")}
    return names | {m.name for m in tree.find_all(nodes.Macro)}


def emits_an_object(tree: nodes.Template) -> bool:
    """An output the parser already knows is no string, number, boolean or none: a literal
    list, dict or tuple, ``values`` itself, or an attribute of a value (a str method)."""
    bound = defined(tree)
    values = set() if "values" in bound else {"values"}
    for output in tree.find_all(nodes.Output):
        for child in output.nodes:
            if isinstance(child, nodes.List | nodes.Dict | nodes.Tuple):
                return True
            if isinstance(child, nodes.Name) and child.name in values:
                return True
            if (
                isinstance(child, nodes.Getattr)
                and isinstance(child.node, nodes.Name)
                and child.node.name not in bound | IMPLICIT | FUNCTIONS
            ):
                return True
    return False
