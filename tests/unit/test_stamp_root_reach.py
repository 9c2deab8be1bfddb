"""S6.3: the stamp-root decision considers only the CRs in reach whose stamps our root made."""

from __future__ import annotations

from typing import Any

from workers.engine.stamp_root import stamped_in_reach

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
