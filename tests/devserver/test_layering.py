"""The operator never imports the devserver (design.md: devserver "must not" be imported)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OPERATOR_PACKAGES = ("k8s", "workers", "controlplane")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_operator_packages_do_not_import_the_devserver():
    offenders = [
        str(path.relative_to(REPO))
        for package in OPERATOR_PACKAGES
        for path in (REPO / package).rglob("*.py")
        if any(name == "devserver" or name.startswith("devserver.") for name in _imports(path))
    ]

    assert offenders == []


def test_devserver_imports_nothing_from_the_operator():
    offenders = [
        str(path.relative_to(REPO))
        for path in (REPO / "devserver").rglob("*.py")
        if any(name.split(".")[0] in OPERATOR_PACKAGES for name in _imports(path))
    ]

    assert offenders == []
