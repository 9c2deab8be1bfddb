"""S6.3: the stamp-root decision considers only the CRs in reach whose stamps our root made."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from workers.engine.ports import SecretObject
from workers.engine.settings import OperatorSettings
from workers.engine.stamp_root import (
    STAMP_ROOT_KEY,
    STAMP_ROOT_SECRET,
    StampRootUnavailable,
    read_stamp_root,
    stamped_in_reach,
)

HOME = "hikyo-system"


def _cr(namespace: str, name: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name}, "status": status}


def test_only_stamps_written_under_our_root_count():
    crs = [
        _cr("team-a", "ours", stamp="v1:aa", operatorNamespace=HOME),
        _cr("team-a", "legacy", stamp="v1:bb"),  # written before operatorNamespace existed
        _cr("team-a", "unstamped", operatorNamespace=HOME),
        _cr("team-a", "empty", stamp="", operatorNamespace=HOME),
        _cr("team-b", "theirs", stamp="v1:cc", operatorNamespace="other-operator"),  # S4.1.7
        _cr(HOME, "ignored", stamp="v1:dd"),  # S8.5: never reconciled here
        {"metadata": {"namespace": "team-c", "name": "no-status"}},
    ]
    assert stamped_in_reach(crs, HOME) == ["team-a/ours", "team-a/legacy"]


class _Cluster:
    """Just the reads and the create that read_stamp_root uses."""

    def __init__(self, crs_by_namespace: dict[str, list[dict[str, Any]]]) -> None:
        self.crs_by_namespace = crs_by_namespace
        self.listed: list[tuple[str, ...]] = []
        self.created: list[SecretObject] = []

    def get_secret(self, namespace: str, name: str) -> SecretObject | None:
        return self.created[-1] if self.created else None

    def list_hikyosecrets_in(self, namespaces: Sequence[str]) -> list[dict[str, Any]]:
        self.listed.append(tuple(namespaces))
        wanted = namespaces or list(self.crs_by_namespace)
        return [cr for ns in wanted for cr in self.crs_by_namespace.get(ns, [])]

    def create_secret(self, secret: SecretObject) -> SecretObject:
        self.created.append(secret)
        return secret


WORLD = {
    "watched": [_cr("watched", "fresh")],
    "elsewhere": [_cr("elsewhere", "stamped", stamp="v1:ee", operatorNamespace=HOME)],
}


def test_a_namespaced_operator_creates_the_root_despite_stamps_outside_its_watch_list():
    cluster = _Cluster(WORLD)
    settings = OperatorSettings(operator_namespace=HOME, namespaces=("watched",))
    root = read_stamp_root(cluster, settings)  # type: ignore[arg-type]
    assert cluster.listed == [("watched",)]
    assert len(root) == 32
    assert cluster.created[0].name == STAMP_ROOT_SECRET
    assert cluster.created[0].data[STAMP_ROOT_KEY] == root


def test_a_cluster_wide_operator_still_refuses_when_a_cr_in_reach_has_a_stamp():
    cluster = _Cluster(WORLD)
    with pytest.raises(StampRootUnavailable, match="stamp root missing"):
        read_stamp_root(cluster, OperatorSettings(operator_namespace=HOME))  # type: ignore[arg-type]
    assert cluster.listed == [()]
    assert cluster.created == []
