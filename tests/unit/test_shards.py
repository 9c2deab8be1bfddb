"""S4.1.8: which shard a namespace belongs to, and the names each shard uses. The table pins
the hash: a release that moved a namespace to another shard would run its CRs in two leaders
during an upgrade that did not change the shard count."""

from __future__ import annotations

import hashlib

import pytest

from workers.engine.ports import LEASE_NAME
from workers.shards import ShardLayout, layout_of_tag, of_another_layout, shard_of

NAMESPACES = ("default", "team-a", "team-b", "payments", "kube-system", "hikyo-system")


def reference_shard(namespace: str, shards: int) -> int:
    """docs/scaling.md's definition, spelled out apart from the code under test."""
    return int(hashlib.sha256(namespace.encode()).hexdigest()[:16], 16) % shards


@pytest.mark.parametrize("shards", [1, 2, 3, 8])
def test_the_shard_of_a_namespace_is_the_documented_hash(shards):
    for namespace in NAMESPACES:
        assert shard_of(namespace, shards) == reference_shard(namespace, shards)


def test_the_shard_table_is_stable_across_releases():
    assert {n: (shard_of(n, 2), shard_of(n, 3), shard_of(n, 8)) for n in NAMESPACES} == {
        "default": (1, 1, 5),
        "team-a": (0, 0, 4),
        "team-b": (0, 2, 2),
        "payments": (0, 0, 0),
        "kube-system": (1, 1, 1),
        "hikyo-system": (0, 0, 0),
    }


def test_every_namespace_has_exactly_one_owner():
    layouts = [ShardLayout(k, 3) for k in range(3)]
    for namespace in NAMESPACES:
        assert sum(layout.owns(namespace) for layout in layouts) == 1
        assert ShardLayout().owns(namespace)


def test_shard_zero_keeps_the_install_lease_and_the_unsharded_names():
    assert ShardLayout().lease_name == ShardLayout(0, 3).lease_name == LEASE_NAME
    assert ShardLayout(2, 3).lease_name == f"{LEASE_NAME}-shard-2"
    assert ShardLayout().schedule_prefix("hikyo") == "hikyo"
    assert ShardLayout(2, 3).schedule_prefix("hikyo") == "hikyo:s2of3"
    assert ShardLayout().tag == ""
    assert layout_of_tag("") == ShardLayout()
    assert layout_of_tag(ShardLayout(2, 3).tag) == ShardLayout(2, 3)


@pytest.mark.parametrize("tag", ["s3of3", "x1of2", "s1of", "s1of2:", "s0of65"])
def test_a_malformed_tag_is_refused(tag):
    with pytest.raises(ValueError):
        layout_of_tag(tag)


@pytest.mark.parametrize(("shard", "shards"), [(0, 0), (3, 3), (-1, 2), (0, 65)])
def test_an_impossible_layout_is_refused(shard, shards):
    with pytest.raises(ValueError):
        ShardLayout(shard, shards)


def test_only_other_layouts_scheduling_is_retired():
    mine = ShardLayout(0, 3)
    retired = {
        "hikyo:s1of2:state:ns/a/u": True,  # the old layout's shard 1
        "hikyo:s0of2:due:3": True,
        "hikyo:state:proof/a/u": True,  # the unsharded layout's
        "hikyo:due:0": True,
        "hikyo:dispatched": True,
        "hikyo:generation": True,
        "hikyo:s0of3:state:ns/a/u": False,  # its own
        "hikyo:lock:ns/a/u": False,  # shared by every layout
        "hikyo:fence": False,
        "hikyo:notfound:uid": False,
        "hikyo:stall:uid": False,
        "hikyo:workers": False,
        "hikyo:view:instances": False,
        "hikyo-reports:state:ns/a/u": False,  # another queue
    }
    assert {key: of_another_layout(key, "hikyo", mine) for key in retired} == retired
    # The unsharded layout retires only sharded layouts' keys.
    assert of_another_layout("hikyo:s1of2:due:0", "hikyo", ShardLayout())
    assert not of_another_layout("hikyo:state:ns/a/u", "hikyo", ShardLayout())
