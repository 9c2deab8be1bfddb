"""bench/world.py: the floor's status patch is a real write that ends a cold start as P1 sees it.

The floor once patched ``status.message``, a field the CRD's schema lacks: the apiserver pruned
it, found nothing to change and wrote nothing, so the floor did one write per CR, not two."""

from __future__ import annotations

from typing import Any

from bench.apiserver import ready_at_generation
from bench.world import floor_status
from k8s.crd_manifests import load_crd_manifests


def pruned_paths(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """The paths in ``value`` a structural schema would prune (fields it does not declare)."""
    if isinstance(value, dict) and not schema.get("x-kubernetes-preserve-unknown-fields"):
        known = schema.get("properties", {})
        found = [f"{path}.{key}" for key in value if key not in known]
        for key, item in value.items():
            if key in known:
                found += pruned_paths(known[key], item, f"{path}.{key}")
        return found
    if isinstance(value, list):
        return [p for item in value for p in pruned_paths(schema.get("items", {}), item, path)]
    return []


def status_schema() -> dict[str, Any]:
    [crd] = [c for c in load_crd_manifests() if c["spec"]["names"]["kind"] == "HikyoSecret"]
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]


def test_the_pruning_walk_finds_an_undeclared_field():
    assert pruned_paths(status_schema(), {"message": "floor1"}) == [".message"]


def test_the_floor_status_declares_every_field_it_writes():
    body = floor_status(3, "floor1", "2026-12-04T00:00:00Z")
    assert pruned_paths(status_schema(), body["status"]) == []


def test_the_floor_status_makes_the_cr_ready_at_its_generation_only():
    body = floor_status(3, "floor1", "2026-12-04T00:00:00Z")
    assert ready_at_generation({"metadata": {"generation": 3}, **body})
    assert not ready_at_generation({"metadata": {"generation": 4}, **body})
