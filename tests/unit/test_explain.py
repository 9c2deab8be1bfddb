"""``explain`` lines (issue 9) on plain ``Observed`` data: the S4.2 steps passed, the one that
stops (number and name), the outcome and its remediation; never a value, token, cursor or
stamp. And ``blocking_condition``: the Ready rule's own first blocker (S5.2)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from tests.unit.decide_fixtures import (
    CANARY,
    NATIVE,
    NOW,
    SETTINGS,
    VALUE,
    claimant,
    controlled_target,
    cr,
    credential_secret,
    decide,
    delivery,
    dk,
    observed,
    planned,
    typed_cr,
    with_status,
)
from workers.engine.conditions import ready_condition
from workers.engine.decide_after_fetch import decide_after_fetch
from workers.engine.explain import STEPS, blocking_condition, explain, status_remediation
from workers.engine.fetched import FetchOutcome, FetchResult
from workers.engine.observed import UNREAD, ForbiddenRead
from workers.engine.plan import FetchAttempt, Gate
from workers.engine.ports import SecretObject

SPEC = Path(__file__).parents[2] / "docs" / "operator-spec.md"  # the spec, kept in the repo


def _lines(obs, settings=SETTINGS, attempt=None):
    decision = decide(obs, settings)
    plan = None
    if attempt is not None:
        plan = decide_after_fetch(obs, attempt, settings, NOW)
    return explain(obs, decision, NOW, attempt=attempt, plan=plan)


def _stop_line(lines):
    stops = [line for line in lines if re.match(r"  (STOP|done) ", line)]
    assert len(stops) == 1, lines
    return stops[0].split()[1]


def _passed(lines):
    return [line.split()[1] for line in lines if line.startswith("  ok ")]


def steps_before(step: str) -> list[str]:
    return list(STEPS)[: list(STEPS).index(step)]


def test_the_step_names_are_the_s4_2_table():
    assert SPEC.is_file(), f"the spec is missing: {SPEC}"
    text = SPEC.read_text(encoding="utf-8")
    section = text.split("### S4.2", 1)[1].split("### S4.3", 1)[0]
    steps = re.findall(r"^\| (R\d+) \|", section, flags=re.MULTILINE)
    # S11.2: the templates' parse is a step of its own after R11
    assert [*steps[: steps.index("R11") + 1], "R11a", *steps[steps.index("R12") :]] == list(STEPS)


def test_a_healthy_record_passes_every_step_before_the_fetch():
    lines = _lines(observed())
    assert _passed(lines) == steps_before("R15")
    assert any(line.startswith("  next  R15") for line in lines)
    assert "--fetch" in lines[-1]
    assert "full) fetch would be made" in "\n".join(lines)


def test_with_the_answer_a_full_delivery_is_done_at_r16():
    lines = _lines(observed(), attempt=delivery())
    assert _passed(lines) == steps_before("R16")
    assert _stop_line(lines) == "R16"
    text = "\n".join(lines)
    assert "done  R16" in text and "HTTP 200" in text
    assert "outcome: Synced=True/Delivered" in text
    assert "Ready would be: True/Reconciled" in text
    assert "create Secret app-env (2 keys)" in text
    assert "remediation: Nothing to do" in text
    assert "(explain wrote nothing)" in text


SITUATIONS = [
    pytest.param(
        observed(instance=None),
        SETTINGS,
        "R5",
        "Synced=False/FetchFailed",
        "does not exist",
        id="missing-instance",
    ),
    pytest.param(
        observed(credential_secret=credential_secret(labels={})),
        SETTINGS,
        "R6",
        "Designation=False/SecretNotDesignated",
        'hikyo.dev/delivery="true"',
        id="not-designated",
    ),
    pytest.param(
        observed(
            credential_secret=credential_secret(
                labels={"hikyo.dev/delivery": "true", "hikyo.dev/instance": "staging"}
            )
        ),
        SETTINGS,
        "R6",
        "Designation=False/InstanceMismatch",
        "point spec.instanceRef.name at staging",
        id="instance-mismatch",
    ),
    pytest.param(
        observed(claimants=[cr(), claimant("first", "uid-a", "2024-01-01T00:00:00Z")]),
        SETTINGS,
        "R7",
        "Conflict=True/TargetClaimed",
        "HikyoSecret first (created earlier)",
        id="target-claimed",
    ),
    pytest.param(
        observed(target=SecretObject("team-a", "app-env", uid="x")),
        SETTINGS,
        "R8",
        "Conflict=True/ManagedSecretNotOwned",
        "never adopts",
        id="not-owned",
    ),
    pytest.param(
        observed(typed_cr(), target=controlled_target()),
        NATIVE,
        "R9",
        "Conflict=True/TargetTypeImmutable",
        "has type Opaque",
        id="type-immutable",
    ),
    pytest.param(
        observed(typed_cr(mapping=[{"key": "TLS_CRT", "secretKey": "tls.crt"}])),
        NATIVE,
        "R10",
        "Delivery=False/KeysMissing",
        "needs destinations tls.key",
        id="keys-missing",
    ),
    pytest.param(
        observed(cr(mapping=[{"key": "PATH"}, {"key": "LOG_LEVEL"}])),
        SETTINGS,
        "R11",
        "Delivery=False/LoaderControlUnacknowledged",
        'acknowledgedLoaderKeys: ["PATH"]',
        id="loader-control",
    ),
    pytest.param(
        observed(typed_cr()),
        SETTINGS,
        "R4",
        "Delivery=False/NativeSecretTypesDisabled",
        "operator.nativeSecretTypes=true",
        id="native-types-disabled",
    ),
    pytest.param(
        observed(target=UNREAD, forbidden=ForbiddenRead("get", "secrets")),
        SETTINGS,
        "R8",
        "Unreconciled=True/NamespaceNotBound",
        "operator.namespaces",
        id="namespace-not-bound",
    ),
]


@pytest.mark.parametrize(("obs", "settings", "step", "condition", "phrase"), SITUATIONS)
def test_the_first_stopping_step_its_outcome_and_remediation(
    obs, settings, step, condition, phrase
):
    lines = _lines(obs, settings)
    assert _stop_line(lines) == step
    order = list(STEPS)
    assert _passed(lines) == order[: order.index(step)]
    text = "\n".join(lines)
    assert f"STOP  {step:<4} {STEPS[step]}" in text
    assert f"outcome: {condition}" in text
    remedy = next(line for line in lines if line.startswith("remediation: "))
    assert phrase in remedy
    assert CANARY not in text


@pytest.mark.parametrize(
    ("attempt", "condition", "phrase"),
    [
        pytest.param(
            delivery((dk("DATABASE_URL", None), dk("LOG_LEVEL", "info", "config"))),
            "Delivery=False/UndeliveredSecrets",
            "hikyo project-settings machine-reveal set --enabled true",
            id="undelivered",
        ),
        pytest.param(
            FetchAttempt(result=FetchResult(FetchOutcome.NOT_MATERIALIZED, 409)),
            "Synced=False/NotMaterialized",
            "publish the environment",
            id="not-materialized",
        ),
        pytest.param(
            FetchAttempt(result=FetchResult(FetchOutcome.FAILED, 503, detail="status 503")),
            "Synced=False/FetchFailed",
            "hikyo.dev/force-sync=",
            id="fetch-failed-503",
        ),
    ],
)
def test_after_the_fetch_r16_stops_with_the_answer(attempt, condition, phrase):
    lines = _lines(observed(), attempt=attempt)
    assert _stop_line(lines) == "R16"
    assert _passed(lines) == steps_before("R16")
    text = "\n".join(lines)
    assert f"outcome: {condition}" in text
    assert phrase in next(line for line in lines if line.startswith("remediation: "))
    assert CANARY not in text


def test_all_keys_loader_refusal_lists_what_to_acknowledge_after_the_fetch():
    obs = observed(cr(allKeys=True, mapping=None, acknowledgedLoaderKeys=["PATH"]))
    attempt = delivery((dk("A_KEY", VALUE), dk("LD_PRELOAD", VALUE)))
    lines = _lines(obs, attempt=attempt)
    remedy = next(line for line in lines if line.startswith("remediation: "))
    assert 'acknowledgedLoaderKeys: ["LD_PRELOAD", "PATH"]' in remedy
    assert CANARY not in "\n".join(lines)


def test_a_gated_fetch_stops_at_r15():
    lines = _lines(observed(), attempt=FetchAttempt(gate=Gate.PAUSED, wait=3.0))
    assert _stop_line(lines) == "R15"
    assert "not fetched (paused" in "\n".join(lines)


def test_a_stale_blocker_the_run_does_not_reach_still_shows_in_ready():
    """S5.4: conditions a stopping run does not reach keep their values; Ready says so."""
    stale = {
        "type": "Delivery",
        "status": "False",
        "reason": "UndeliveredSecrets",
        "message": "old",
    }
    obs = observed(with_status(cr(), {"conditions": [stale]}), instance=None)
    text = "\n".join(_lines(obs))
    assert "Ready would be: False/Blocked (not ready: Delivery/UndeliveredSecrets)" in text


def test_r0_and_r2_stops_explain_without_a_condition():
    deleting = observed(
        cr(metadata={"deletionTimestamp": "2025-01-01T00:00:00Z", "finalizers": []})
    )
    assert _stop_line(_lines(deleting)) == "R1"
    orphan = observed(cr(target={"creationPolicy": "Orphan"}))
    lines = _lines(orphan)
    assert _stop_line(lines) == "R2"
    assert "outcome: FinalizerAdded (sets no condition)" in "\n".join(lines)
    assert "the HikyoSecret's finalizers" in "\n".join(lines)


def test_no_value_token_cursor_or_stamp_in_any_line():
    target = controlled_target()
    obs = observed(
        with_status(
            cr(),
            {
                "cursor": "CANARY-cursor-x",
                "stamp": "v1:CANARY",
                "operatorNamespace": "hikyo-system",
            },
        ),
        target=target,
    )
    assert planned(obs) is not None
    for attempt in (None, delivery(), delivery(current=True)):
        assert CANARY not in "\n".join(_lines(obs, attempt=attempt))


def test_owner_reference_check_is_named_when_passed():
    obs = observed(target=controlled_target())
    text = "\n".join(_lines(obs))
    assert "Secret app-env exists and is controlled by this HikyoSecret" in text
    assert "type Opaque as wanted" in text


# -- blocking_condition: the Ready rule's first blocker ---------------------------------------

_CHOICES = {
    "Unreconciled": [None, ("True", "NamespaceNotBound")],
    "Designation": [None, ("False", "SecretNotDesignated")],
    "Conflict": [None, ("True", "TargetClaimed")],
    "Scrubbed": [None, ("True", "AuthorizationWithdrawn")],
    "Delivery": [None, ("False", "UndeliveredSecrets"), ("False", "KeysMissing")],
    "Synced": [None, ("True", "Delivered"), ("False", "FetchFailed")],
}


def _statuses():
    types = list(_CHOICES)
    for combo in itertools.product(*_CHOICES.values()):
        for lifecycle in ("Synced", "Refused", "Retained", None):
            conditions = [
                {"type": t, "status": c[0], "reason": c[1], "message": f"{t} message"}
                for t, c in zip(types, combo, strict=True)
                if c is not None
            ]
            yield {"conditions": conditions, "lifecycle": lifecycle}


def test_blocking_condition_is_what_ready_names():
    for status in _statuses():
        by_type = {c["type"]: c for c in status["conditions"]}
        ready = ready_condition(by_type, status["lifecycle"])
        blocker = blocking_condition(status)
        if ready.status == "True":
            assert blocker is None
        else:
            assert blocker is not None
            assert ready.message == f"not ready: {blocker.name}"
            if blocker.condition is not None:
                assert blocker.message == f"{blocker.condition['type']} message"


def test_status_remediation_of_a_never_reconciled_cr():
    blocker = blocking_condition({})
    assert blocker is not None and blocker.name == "Synced/absent"
    assert "operator.namespaces" in status_remediation(cr(), blocker)
    healthy = {
        "conditions": [
            {"type": "Synced", "status": "True", "reason": "Delivered", "message": "m"},
        ],
        "lifecycle": "Synced",
    }
    assert blocking_condition(healthy) is None
    assert status_remediation(cr(), None).startswith("Nothing to do")


def test_after_the_fetch_each_template_entry_is_rendered_or_names_the_sources_it_lacks():
    from tests.unit.decide_fixtures import TARGET, cr, dk

    template = {"data": {"url": "{{ DATABASE_URL }}", "level": "{{ values['log-level'] }}"}}
    obs = observed(cr(target={"name": TARGET, "template": template}))
    lines = _lines(obs, attempt=delivery((dk("DATABASE_URL", "CANARY-v"),)))
    text = "\n".join(lines)
    assert "destination url: rendered" in text
    assert "destination level: lacks LOG_LEVEL" in text
    assert "CANARY" not in text


def test_a_merge_delivery_says_it_applies_only_this_hikyosecrets_keys():
    from tests.unit.decide_fixtures import TARGET, cr
    from workers.engine.merge import MERGE_FINALIZER

    merging = cr(
        target={"name": TARGET, "creationPolicy": "Merge"},
        metadata={"finalizers": [MERGE_FINALIZER]},
    )
    other = SecretObject("team-a", TARGET, data={"x": b"y"}, uid="u", resource_version="1")
    text = "\n".join(_lines(observed(merging, target=other), attempt=delivery()))
    assert "apply this HikyoSecret's 2 keys to Secret app-env" in text


@pytest.mark.parametrize(
    ("target", "found", "attempt", "step", "reason"),
    [
        pytest.param(
            {"template": {"data": {"url": "{{ NOPE }}"}}},
            None,
            None,
            "R11a",
            "Delivery=False/InvalidTemplate",
            id="invalid-template",
        ),
        pytest.param(
            {"creationPolicy": "Merge"},
            None,
            None,
            "R8",
            "Conflict=True/MergeTargetMissing",
            id="merge-target-missing",
        ),
        pytest.param(
            {"creationPolicy": "Merge"},
            {"log-level"},
            delivery(),
            "R16",
            "Conflict=True/KeyOwnedElsewhere",
            id="key-owned-elsewhere",
        ),
    ],
)
def test_explain_shows_the_step_of_each_s11_5_reason(target, found, attempt, step, reason):
    from tests.unit.decide_fixtures import TARGET, cr
    from workers.engine.merge import MERGE_FINALIZER

    merging = target.get("creationPolicy") == "Merge"
    finalizers = [MERGE_FINALIZER] if merging else []
    the_cr = cr(target={"name": TARGET, **target}, metadata={"finalizers": finalizers})
    existing = None
    if found is not None:
        existing = SecretObject(
            "team-a",
            TARGET,
            data=dict.fromkeys(found, b"x"),
            uid="u",
            resource_version="1",
            data_managers={"helm": frozenset(found)},
        )
    lines = _lines(observed(the_cr, target=existing), attempt=attempt)
    assert _stop_line(lines) == step
    assert f"outcome: {reason}" in "\n".join(lines)


@pytest.mark.parametrize(
    ("template", "kind"),
    [
        ("{{ " + "(" * 200 + "DATABASE_URL" + ")" * 200 + " }}", "nested too deep"),
        ("{% if 1 %}" * 300 + "x" + "{% endif %}" * 300, "nested too deep"),
        ("{{ values }}", "renders an object"),
    ],
)
def test_explain_shows_a_template_the_parser_refuses_at_r11a_with_its_kind(template, kind):
    """S11.2 rev 4: RecursionError in the parser and an object the parser sees are the
    entry's InvalidTemplate before the fetch, and explain says so instead of raising."""
    from tests.unit.decide_fixtures import TARGET, cr

    the_cr = cr(target={"name": TARGET, "template": {"data": {"url": template}}})
    lines = _lines(observed(the_cr))
    assert _stop_line(lines) == "R11a"
    text = "\n".join(lines)
    assert "outcome: Delivery=False/InvalidTemplate" in text
    assert f"the template of data key url is invalid: {kind}" in text
