"""``apply``, the only writer (S4.9), and the R12 stamp-root creation before the fetch (S6.3),
over a recording fake of the Cluster port: what a write reveals changes the outcome, never the
order, and a forced-sync request is recorded by full reconciles only."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tests.unit.decide_fixtures import (
    CURSOR,
    FRESH_ROOT,
    NOW,
    NS,
    SETTINGS,
    TARGET,
    cr,
    delivery,
    observed,
    planned,
)
from workers.engine.apply import apply, create_stamp_root
from workers.engine.decide_after_fetch import decide_after_fetch
from workers.engine.decide_rollout import decide_rollout_only
from workers.engine.errors import AlreadyExists, FieldsOwnedElsewhere, Forbidden, ServerError
from workers.engine.force_sync import FORCE_SYNC_ANNOTATION
from workers.engine.merge import MERGE_FINALIZER
from workers.engine.plan import FetchPlan, Stop
from workers.engine.ports import Event, SecretObject
from workers.queue.memory import MemoryQueue


class _Cluster:
    """Records writes; ``fail`` maps a method name to the error it raises."""

    def __init__(self, fail: dict[str, Exception] | None = None) -> None:
        self.fail = fail or {}
        self.calls: list[tuple[str, Any]] = []
        self.secrets: dict[tuple[str, str], SecretObject] = {}

    def _call(self, name: str, arg: Any) -> None:
        self.calls.append((name, arg))
        if name in self.fail:
            raise self.fail[name]

    def create_secret(self, secret: SecretObject) -> SecretObject:
        self._call("create_secret", secret.name)
        written = SecretObject(**{**secret.__dict__, "uid": "new-uid", "resource_version": "1"})
        self.secrets[(secret.namespace, secret.name)] = written
        return written

    def replace_secret(self, secret: SecretObject) -> SecretObject:
        self._call("replace_secret", secret.name)
        self.secrets[(secret.namespace, secret.name)] = secret
        return secret

    def get_secret(self, namespace: str, name: str) -> SecretObject | None:
        return self.secrets.get((namespace, name))

    def apply_secret_data(self, namespace, name, uid, resource_version, data) -> SecretObject:
        self._call("apply_secret_data", sorted(data))
        raise AssertionError("only a failing apply is faked here: give it in fail=")

    def patch_hikyosecret_status(self, namespace, name, patch, resource_version) -> None:
        self._call("patch_hikyosecret_status", patch)

    def emit_event(self, cr_obj: dict[str, Any], event: Event) -> None:
        self._call("emit_event", event.reason)

    def access_allowed(self, *args: Any) -> bool:
        return False


def _forbidden(resource: str) -> Forbidden:
    return Forbidden("create", 403, verb="create", resource=resource, namespace="team-a")


def _delivered_plan(obs):
    return decide_after_fetch(obs, delivery(), SETTINGS, NOW)


def test_S4_8_4_a_failed_secret_write_keeps_the_fetch_in_the_status():
    """lastFetch is carried whenever the run fetched, also when the write turned the outcome
    into FetchFailed (S4.2 R15)."""
    obs = observed()
    cluster = _Cluster(fail={"create_secret": AlreadyExists("create secrets", 409)})
    applied = apply(_delivered_plan(obs), obs, cluster, MemoryQueue(), SETTINGS, NOW)
    assert applied.outcome.reason == "FetchFailed"
    assert applied.outcome.fetched
    (patch,) = [arg for name, arg in cluster.calls if name == "patch_hikyosecret_status"]
    assert "lastFetch" in patch and patch.get("cursor") is None


def test_force_sync_is_recorded_by_a_full_reconcile():
    obs = observed(cr(metadata={"annotations": {FORCE_SYNC_ANNOTATION: "req-1"}}))
    cluster = _Cluster()
    apply(_delivered_plan(obs), obs, cluster, MemoryQueue(), SETTINGS, NOW)
    (patch,) = [arg for name, arg in cluster.calls if name == "patch_hikyosecret_status"]
    assert patch["lastForcedSync"]["value"] == "req-1"
    assert patch["lastForcedSync"]["fetched"] is True


def test_a_rollout_only_evaluation_never_uses_up_a_pending_force_sync():
    """S4.1.1's rollout-only status write must not mark the request handled: the forced full
    fetch it asks for has not happened."""
    status = {
        "stamp": "v1:aa",
        "observedGeneration": 1,
        "operatorNamespace": "hikyo-system",
        "lifecycle": "Synced",
    }
    the_cr = cr(metadata={"annotations": {FORCE_SYNC_ANNOTATION: "req-2"}}, status=status)
    rollouts = replace(SETTINGS, trigger_rollouts=True)
    obs = observed(the_cr, workloads=[])
    plan = decide_rollout_only(obs, rollouts, NOW)
    assert plan is not None
    cluster = _Cluster()
    apply(plan, obs, cluster, MemoryQueue(), rollouts, NOW)
    patches = [arg for name, arg in cluster.calls if name == "patch_hikyosecret_status"]
    assert all("lastForcedSync" not in patch for patch in patches)


def test_R12_the_fresh_root_is_created_before_the_fetch():
    obs = observed(stamp_root=None, fresh_root=FRESH_ROOT, reach=[])
    fetch = planned(obs)
    cluster = _Cluster()
    created = create_stamp_root(cluster, SETTINGS, obs, fetch)
    assert isinstance(created, FetchPlan) and created.stamp_root is None
    root = cluster.secrets[("hikyo-system", "hikyo-operator-stamp-root")]
    assert root.data["root"] == FRESH_ROOT


def test_R12_a_root_created_elsewhere_first_stops_the_run_unwritten_for_a_rerun():
    obs = observed(stamp_root=None, fresh_root=FRESH_ROOT, reach=[])
    cluster = _Cluster(fail={"create_secret": AlreadyExists("create secrets", 409)})
    stopped = create_stamp_root(cluster, SETTINGS, obs, planned(obs))
    assert isinstance(stopped, Stop)
    outcome = stopped.plan.outcome
    assert (outcome.reason, outcome.write_status, outcome.delay) == (
        "StampRootCreatedElsewhere",
        False,
        0.0,
    )


def test_R12_a_forbidden_root_creation_is_S4_15():
    obs = observed(stamp_root=None, fresh_root=FRESH_ROOT, reach=[])
    cluster = _Cluster(fail={"create_secret": _forbidden("secrets")})
    stopped = create_stamp_root(cluster, SETTINGS, obs, planned(obs))
    assert isinstance(stopped, Stop)
    assert stopped.plan.outcome.reason == "NamespaceNotBound"
    assert stopped.plan.step == "R12"


def test_a_failed_status_write_is_a_failure_that_keeps_what_the_run_did():
    obs = observed()
    cluster = _Cluster(fail={"patch_hikyosecret_status": ServerError("patch", 503)})
    applied = apply(_delivered_plan(obs), obs, cluster, MemoryQueue(), SETTINGS, NOW)
    assert applied.outcome.reason == "FetchFailed"
    assert "status write failed" in applied.outcome.message
    assert applied.outcome.fetched and applied.outcome.wrote_secret
    assert not applied.outcome.write_status and not applied.status_written


def test_S11_4_a_409_field_conflict_of_the_apply_is_key_owned_elsewhere_by_name():
    """Another field manager took a key between R8's read and the apply: the decision saw no
    conflict, the apiserver's 409 names the key. The run ends as the decision would have
    ended it (Conflict=True/KeyOwnedElsewhere naming the key, the cursor cleared, nothing
    written), never as a plain write failure that retries with backoff."""
    merging = cr(
        target={"name": TARGET, "creationPolicy": "Merge"},
        metadata={"finalizers": [MERGE_FINALIZER]},
        status={"cursor": CURSOR},
    )
    target = SecretObject(
        NS,
        TARGET,
        data={"helm-key": b"h"},
        uid="target-uid",
        resource_version="11",
        data_managers={"helm": frozenset({"helm-key"})},
    )
    obs = observed(merging, target=target)
    plan = _delivered_plan(obs)
    assert plan.secret is not None and plan.secret.kind == "merge"
    conflict = FieldsOwnedElsewhere("apply secrets team-a/app-env", 409, "Conflict", ("log-level",))
    cluster = _Cluster(fail={"apply_secret_data": conflict})

    applied = apply(plan, obs, cluster, MemoryQueue(), SETTINGS, NOW)

    outcome = applied.outcome
    condition = outcome.conditions["Conflict"]
    assert condition is not None
    assert (outcome.reason, condition.status) == ("KeyOwnedElsewhere", "True")
    assert condition.facts == {"keys": "log-level"} and "log-level" in condition.message
    assert outcome.lifecycle == "Refused" and not outcome.wrote_secret
    (patch,) = [arg for name, arg in cluster.calls if name == "patch_hikyosecret_status"]
    assert patch["cursor"] is None  # the stored cursor goes: the next run delivers in full
