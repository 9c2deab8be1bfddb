"""The dashboard's pure parts of issue 35: why a HikyoSecret is not Ready and what to do
(``why``: explain's remediation texts with the recorded spec names), the warnings and a 429
pause; the instance page's facts (a URL's userinfo redacted, missing instances, pauses per
org); the timeline's folding; the times (ISO 8601 with zone and seconds, and relative)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from controlplane.observations import instances, timeline, times, why
from tests.support.factories import make_hikyosecret
from workers.engine.explain import blocking_condition, status_remediation
from workers.engine.facts import Cause
from workers.engine.remediation import remediation
from workers.engine.remediation_context import spec_context

NOW = datetime(2026, 12, 4, 21, 37, 12, tzinfo=UTC)


def _cond(
    type_: str, status: str, reason: str, message: str = "", facts: dict[str, str] | None = None
) -> dict[str, Any]:
    """A condition as stored; ``facts`` as the engine keeps them beside the message."""
    stored = {"type": type_, "status": status, "reason": reason, "message": message}
    return stored | ({"facts": facts} if facts else {})


def _cr(**spec: Any) -> dict[str, Any]:
    auth = spec.pop("auth", None)
    cr = make_hikyosecret("ledger", "payments", **spec)
    if auth is not None:  # one credential, not merged over the factory's Secret
        cr["spec"]["auth"] = auth
    return cr


def _why(cr: dict[str, Any], conditions: list[dict[str, Any]], **fields: Any) -> why.Why:
    """``why`` over what the recorder keeps of ``cr``: its spec names, not the CR."""
    ready = next((c["status"] == "True" for c in conditions if c["type"] == "Ready"), None)
    return why.why(
        conditions=conditions,
        lifecycle=fields.get("lifecycle", "Retained"),
        ready=ready,
        names=spec_context(cr),
        paused_until=fields.get("paused_until"),
        now=NOW,
    )


def _status_text(cr: dict[str, Any], conditions: list[dict[str, Any]], lifecycle: str) -> str:
    """What ``manage.py status`` says of the full CR (explain.status_remediation)."""
    status = {"conditions": conditions, "lifecycle": lifecycle}
    return status_remediation({**cr, "status": status}, blocking_condition(status))


BLOCKERS = {
    "401": (
        {"auth": {"secretRef": {"name": "ledger-token"}}, "instanceRef": {"name": "eu"}},
        _cond(
            "Synced",
            "False",
            "FetchFailed",
            "fetch failed: status 401 (unauthenticated)",
            {"cause": Cause.UNAUTHORIZED},
        ),
        ("ledger-token", "hikyo-token"),
    ),
    "missing instance": (
        {"instanceRef": {"name": "old"}},
        _cond(
            "Synced",
            "False",
            "FetchFailed",
            "HikyoInstance old not found",
            {"cause": Cause.INSTANCE_MISSING},
        ),
        ("HikyoInstance old does not exist",),
    ),
    "not designated": (
        {"auth": {"secretRef": {"name": "absent-credential"}}, "instanceRef": {"name": "eu"}},
        _cond("Designation", "False", "SecretNotDesignated", "Secret absent-credential not found"),
        ("kubectl -n payments label secret absent-credential", "hikyo.dev/instance=eu"),
    ),
    "service account": (
        {"auth": {"serviceAccountRef": {"name": "ledger-sa"}}, "instanceRef": {"name": "eu"}},
        _cond("Designation", "False", "ServiceAccountNotDesignated", "not labelled"),
        ("label serviceaccount ledger-sa", "designatedServiceAccounts.payments"),
    ),
}


@pytest.mark.parametrize("case", sorted(BLOCKERS))
def test_the_blocker_reads_with_explains_text_and_real_names(case):
    spec, condition, names = BLOCKERS[case]
    cr = _cr(**spec)
    conditions = [_cond("Ready", "False", "Blocked", "not ready"), condition]
    found = _why(cr, conditions)
    assert found.state == why.BLOCKED_STATE
    assert found.blocker is not None
    assert found.blocker.name == f"{condition['type']}/{condition['reason']}"
    assert found.blocker.message == condition["message"]
    # The same text `status` gives from the whole CR, though only the names were kept.
    assert found.blocker.remediation == _status_text(cr, conditions, "Retained")
    for name in names:
        assert name in found.blocker.remediation
    assert "<" not in found.blocker.remediation  # no placeholder: names, or plain words
    assert found.instance_missing is (case == "missing instance")


def test_informational_problems_of_a_ready_object_are_warnings_not_nothing_to_do():
    cr = _cr(instanceRef={"name": "eu"})
    conditions = [
        _cond("Ready", "True", "Reconciled", "delivered and current"),
        _cond("Synced", "True", "Delivered", "2 keys"),
        _cond(
            "Delivery",
            "False",
            "KeysMissing",
            "the server did not deliver mapped keys MISSING_KEY; their destinations are absent",
            {"keys": "MISSING_KEY"},
        ),
        _cond("Rollout", "False", "Stalled", "not progressed: Deployment/web"),
        _cond("CredentialExpiry", "True", "ExpiresSoon", "the credential expires at ..."),
    ]
    found = _why(cr, conditions, lifecycle="Synced")
    assert found.blocker is None and found.state == why.WARNING_STATE
    assert [w.name for w in found.warnings] == [
        "Delivery/KeysMissing",
        "Rollout/Stalled",
        "CredentialExpiry/ExpiresSoon",
    ]
    keys_missing = found.warnings[0]
    assert "Mapped keys MISSING_KEY are missing" in keys_missing.remediation
    assert "hikyo-credential" in found.warnings[2].remediation  # the credential Secret by name
    blocker = blocking_condition({"conditions": conditions, "lifecycle": "Synced"})
    assert why.warning_names(conditions, blocker) == (
        "Delivery/KeysMissing, Rollout/Stalled, CredentialExpiry/ExpiresSoon"
    )


def test_a_healthy_object_has_nothing_to_do():
    conditions = [_cond("Ready", "True", "Reconciled"), _cond("Synced", "True", "Current")]
    found = _why(_cr(), conditions, lifecycle="Synced")
    assert found.state == why.READY_STATE and found.blocker is None and found.warnings == []


def test_a_blocker_besides_a_warning_keeps_both():
    conditions = [
        _cond("Ready", "False", "Blocked", "not ready"),
        _cond("Synced", "True", "Delivered"),
        _cond("Delivery", "False", "UndeliveredSecrets", "presence of secret keys API_KEY: no"),
        _cond("Rollout", "False", "Stalled", "not progressed: Deployment/web"),
    ]
    found = _why(_cr(), conditions, lifecycle="Refused")
    assert found.blocker is not None and found.blocker.name == "Delivery/UndeliveredSecrets"
    assert [w.name for w in found.warnings] == ["Rollout/Stalled"]


def test_a_cr_waiting_on_a_429_pause_says_so_with_instance_org_and_end():
    cr = _cr(instanceRef={"name": "eu"}, scope={"org": "org_ledger"})
    until = NOW + timedelta(minutes=4)
    found = _why(cr, [], lifecycle="", paused_until=until)
    assert found.state == why.PAUSED_STATE
    assert (found.pause.instance, found.pause.org, found.pause.until) == ("eu", "org_ledger", until)
    assert found.pause.remediation == (
        "HikyoInstance eu answered 429 for org org_ledger: every fetch to it for that org waits "
        "out the pause, and then they run in the order they became due; nothing to do."
    )
    # Not "no delivery has been attempted yet": the pause is why.
    assert found.blocker is None
    # A pause that ended is no longer shown.
    assert _why(cr, [], lifecycle="", paused_until=NOW).pause is None


def test_the_cr_that_drew_the_429_keeps_its_blocker_beside_the_pause():
    cr = _cr(instanceRef={"name": "eu"}, scope={"org": "org_ledger"})
    conditions = [
        _cond("Ready", "False", "Blocked"),
        _cond(
            "Synced",
            "False",
            "FetchFailed",
            "rate limited by the Hikyo server (status 429)",
            {"cause": Cause.RATE_LIMITED},
        ),
    ]
    found = _why(cr, conditions, paused_until=NOW + timedelta(seconds=30))
    assert found.pause is not None and found.blocker is not None
    assert "answered 429 for org org_ledger" in found.blocker.remediation


# -- the instance page ----------------------------------------------------------------------


def test_an_instance_url_never_shows_its_userinfo():
    shown = instances.spec_of(
        {"spec": {"url": "https://ops:hunter2@hikyo.example:8443/base", "caBundle": "LS0t"}}
    )
    assert shown.url == "https://redacted@hikyo.example:8443/base"
    assert "hunter2" not in repr(shown) and shown.ca_present and shown.found
    assert instances.spec_of({"spec": {"url": "https://h.example", "audience": "hikyo"}}) == (
        instances.InstanceSpec(found=True, url="https://h.example", audience="hikyo")
    )
    assert instances.spec_of(None) == instances.InstanceSpec(found=False)


def test_missing_instances_are_those_r5_found_missing():
    rows = [
        ("old", [_cond("Synced", "False", "FetchFailed", "", {"cause": Cause.INSTANCE_MISSING})]),
        ("eu", [_cond("Synced", "False", "FetchFailed", "", {"cause": Cause.NO_CLIENT})]),
        ("us", [_cond("Synced", "False", "FetchFailed", "HikyoInstance us not found")]),  # no facts
    ]
    assert instances.names_missing(rows) == {"old"}


def test_pauses_are_per_instance_and_org_with_the_latest_end():
    early, late = NOW + timedelta(seconds=10), NOW + timedelta(seconds=90)
    rows = [
        ("eu", {"org": "org_a"}, early),
        ("eu", {"org": "org_a"}, late),
        ("eu", {"org": "org_b"}, early),
        ("us", {}, late),
    ]
    assert instances.pauses(rows) == {
        "eu": [instances.OrgPause("org_a", late), instances.OrgPause("org_b", early)],
        "us": [instances.OrgPause("", late)],
    }


# -- the timeline and the times --------------------------------------------------------------


def _entry(at: datetime, what: str, message: str = "refused") -> dict[str, Any]:
    return {"at": at, "kind": "run", "what": what, "lifecycle": "Refused", "message": message}


def test_identical_consecutive_timeline_entries_fold_into_one():
    base = datetime(2026, 12, 4, 21, 30, 5, tzinfo=UTC)
    newest_first = [
        _entry(base + timedelta(minutes=8), "run: Delivered", "2 keys"),
        *[_entry(base + timedelta(minutes=m), "run: FetchFailed") for m in range(7, -1, -1)],
        _entry(base - timedelta(minutes=1), "run: FetchFailed", "another message"),
    ]
    folded = timeline.collapse(newest_first)
    assert [(e["what"], e["count"]) for e in folded] == [
        ("run: Delivered", 1),
        ("run: FetchFailed", 8),
        ("run: FetchFailed", 1),
    ]
    assert folded[1]["span"] == "\u00d78, 21:30:05\u201321:37:05"
    assert folded[1]["at"] == base + timedelta(minutes=7) and folded[1]["first_at"] == base
    assert folded[0]["span"] == "" and folded[2]["span"] == ""


def test_times_are_iso_8601_with_zone_and_seconds():
    local = datetime(2026, 12, 4, 22, 35, 7, tzinfo=UTC).astimezone()
    assert times.iso(local) == "2026-12-04T22:35:07Z"
    assert times.clock(local) == "22:35:07"


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "now"),
        (12, "12 s ago"),
        (59, "59 s ago"),
        (60, "1 min ago"),
        (3599, "59 min ago"),
        (7200, "2 h ago"),
        (3 * 86400 + 5, "3 d ago"),
        (-240, "in 4 min"),
    ],
)
def test_relative_times_use_the_largest_whole_unit(seconds, shown):
    assert times.relative(NOW - timedelta(seconds=seconds), NOW) == shown


def test_an_instance_without_a_client_reads_as_explains_r14_text():
    cr = _cr(instanceRef={"name": "eu"})
    message = "HikyoInstance eu: spec.url must use https"
    conditions = [
        _cond("Ready", "False", "Blocked"),
        _cond("Synced", "False", "FetchFailed", message, {"cause": Cause.NO_CLIENT}),
    ]
    found = _why(cr, conditions)
    assert found.blocker is not None and not found.instance_missing
    assert found.blocker.remediation.startswith("No client could be built for HikyoInstance eu")


def test_a_failed_synced_from_before_the_last_successful_fetch_is_history_not_a_warning():
    """Issue 49: a CR refused after a fetch that succeeded keeps its old Synced=False (a
    refusal leaves Synced as it was, S5.4); it is shown as history, not as a live warning."""
    stale = _cond("Synced", "False", "FetchFailed", "did not answer in time") | {
        "lastTransitionTime": "2026-12-04T21:00:00Z"
    }
    conditions = [
        _cond("Ready", "False", "Blocked"),
        stale,
        _cond(
            "Delivery", "False", "UndeliveredSecrets", "presence of API_KEY", {"keys": "API_KEY"}
        ),
    ]
    fetched = datetime(2026, 12, 4, 21, 30, tzinfo=UTC)
    found = why.why(
        conditions=conditions,
        lifecycle="Refused",
        ready=False,
        names={},
        paused_until=None,
        now=NOW,
        fetched_ok_at=fetched,
    )
    assert found.blocker is not None and found.blocker.name == "Delivery/UndeliveredSecrets"
    assert found.warnings == [] and [e.name for e in found.earlier] == ["Synced/FetchFailed"]
    blocker = blocking_condition({"conditions": conditions, "lifecycle": "Refused"})
    assert why.warning_names(conditions, blocker, fetched) == ""
    # The same failure after that fetch is live.
    later = fetched - timedelta(minutes=31)
    assert why.warning_names(conditions, blocker, later) == "Synced/FetchFailed"
    assert why.warning_names(conditions, blocker, None) == "Synced/FetchFailed"


def test_a_cr_waiting_on_an_unanswering_instance_is_paused_not_failed():
    """S4.1.9: its conditions stay as they were (Ready here); the wait shows with its reason,
    instance, since and last try, and explain's text for that wait."""
    cr = _cr(instanceRef={"name": "eu"}, scope={"org": "org_ledger"})
    since, last = NOW - timedelta(minutes=3), NOW - timedelta(seconds=20)
    conditions = [_cond("Ready", "True", "Reconciled"), _cond("Synced", "True", "Current")]
    found = why.why(
        conditions=conditions,
        lifecycle="Synced",
        ready=True,
        names=spec_context(cr),
        paused_until=None,
        now=NOW,
        waiting=("InstanceUnresponsive", since, last),
    )
    assert found.state == why.PAUSED_STATE and found.blocker is None and found.warnings == []
    assert found.waiting is not None
    assert (found.waiting.instance, found.waiting.since, found.waiting.last_try) == (
        "eu",
        since,
        last,
    )
    assert found.waiting.remediation == remediation("InstanceUnresponsive", spec_context(cr))
    assert found.waiting.remediation.startswith("HikyoInstance eu stopped answering")
    assert [line.name for line in found.lines] == ["InstanceUnresponsive"]


def test_the_timeline_reads_a_forced_resync_as_a_value_and_says_whether_a_run_handled_it():
    base = datetime(2026, 12, 4, 21, 30, tzinfo=UTC)
    run = SimpleNamespace(
        started_at=base + timedelta(seconds=5),
        reason="Delivered",
        forced_sync="req-1",
        rolled="",
        lifecycle="Synced",
        duration_ms=120,
        fetched=True,
        wrote_secret=True,
        message="2 keys",
    )
    handled = SimpleNamespace(at=base, value="req-1", requested_by="ops")
    waiting = SimpleNamespace(at=base + timedelta(seconds=9), value="req-2", requested_by="ops")
    found = timeline.entries([run], [], [handled, waiting], last_forced_sync="")
    assert [(e["kind"], e["message"]) for e in found] == [
        ("force resync", "not handled yet"),
        ("run", "2 keys"),
        ("force resync", "handled"),
    ]
    assert found[0]["what"] == "requested by ops: hikyo.dev/force-sync=req-2"
    # The object's last handled value counts too (its run may be pruned from the history).
    assert timeline.entries([], [], [waiting], "req-2")[0]["message"] == "handled"
