"""S4.8, S11.4: one writer per creation policy, and one apply write per action kind."""

from __future__ import annotations

import pytest

from tests.unit.decide_fixtures import cr
from tests.unit.test_decide_s11 import MERGE, merge_target
from workers.engine.plan import WriteKind
from workers.engine.policy_writes import WRITES_BY_KIND, WRITES_BY_POLICY, policy_write
from workers.engine.ports import FIELD_MANAGER
from workers.engine.spec import CREATION_POLICIES, parse_spec


def test_every_creation_policy_has_a_writer_and_every_write_kind_an_apply_write():
    assert set(WRITES_BY_POLICY) == set(CREATION_POLICIES)
    # RELEASE runs only at the CR's deletion (apply's finalizing write), never as a delivery
    assert set(WRITES_BY_KIND) == set(WriteKind) - {WriteKind.RELEASE}


@pytest.mark.parametrize("policy", ["Owner", "Orphan"])
def test_a_controlled_target_is_written_whole_and_identical_bytes_skip(policy):
    spec = parse_spec(cr(target={"name": "app-env", "creationPolicy": policy}))
    write = policy_write(spec)
    target = merge_target(data={"a": b"1"})
    assert write.kind == WriteKind.CONVERGE
    assert write.refusal(spec, target, {"helm-key": b"mine"}) is None  # the write replaces it
    assert not write.changes(target, {"a": b"1"})
    assert write.changes(target, {"a": b"1", "b": b"2"})
    assert write.changes(None, {})


def test_a_merge_cr_refuses_keys_another_manager_owns_and_skips_only_its_own_exact_keys():
    spec = parse_spec(cr(target=MERGE))
    write = policy_write(spec)
    target = merge_target(
        data={"helm-key": b"h", "mine": b"1"}, managers={FIELD_MANAGER: frozenset({"mine"})}
    )
    assert write.kind == WriteKind.MERGE
    refused = write.refusal(spec, target, {"helm-key": b"x", "mine": b"1"})
    assert refused is not None and "helm-key" in refused.conditions["Conflict"].message
    assert write.refusal(spec, target, {"mine": b"2"}) is None
    assert not write.changes(target, {"mine": b"1"})  # helm's key beside ours changes nothing
    assert write.changes(target, {"mine": b"2"})
    assert write.changes(target, {"mine": b"1", "more": b"3"})  # a key we do not own yet
