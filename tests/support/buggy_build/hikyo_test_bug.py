"""A bug, for the live HikyoOperatorReconcilePanics test only: copied with a .pth file into a
variant of the operator image (tests/integration/test_real_node_scaled.py), never into the
product's. Once workers.engine.reconcile is imported, a run of a HikyoSecret named ``panics``
raises, as a bug in the engine would."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any

PATCHED = "workers.engine.reconcile"
FAILING_NAME = "panics"


def _patch(module: ModuleType) -> None:
    original = module._reconcile

    def failing(engine: Any, namespace: str, name: str, *args: Any, **kwargs: Any) -> Any:
        if name == FAILING_NAME:
            raise RuntimeError(f"an injected bug for {namespace}/{name}")
        return original(engine, namespace, name, *args, **kwargs)

    module._reconcile = failing


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != PATCHED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


sys.meta_path.insert(0, _Finder())
