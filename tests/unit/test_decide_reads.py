"""``Needs`` sequencing (S4.2): starting from an ``Observed`` holding only the CR, answering each
requested read gives exactly the S4.2 read order, each read only once the steps before it passed,
and a step that stops never asks for a later read.

The loop below plays ``observe``: it fills the requested field from a ``world`` (a dict of
answers per read) and asks again, as ``workers.engine.observe.observe`` does through the ports.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from tests.unit.decide_fixtures import (
    FRESH_ROOT,
    NOW,
    OP_NS,
    ROLLOUTS,
    SERVER,
    SETTINGS,
    TOKEN,
    claimant,
    controlled_target,
    cr,
    credential_secret,
    decide,
    instance,
    root_secret,
    sa_cr,
    service_account,
    stamped_cr,
)
from workers.engine.observed import ForbiddenRead, Observed
from workers.engine.plan import FetchPlan, Needs, Read, Stop
from workers.engine.ports import LeaseRecord, SecretObject
from workers.engine.settings import OperatorSettings

FORBIDDEN = object()  # a world answer: this read is refused with 403


def healthy_world() -> dict[Read, dict[str, Any]]:
    """What each read answers in a healthy world: the Observed fields it fills."""
    return {
        Read.LEASE: {"lease": None},
        Read.INSTANCE: {"instance": instance()},
        Read.CREDENTIAL: {
            "credential_secret": credential_secret(),
            "service_account": service_account(),
        },
        Read.TOKEN: {"token": TOKEN},
        Read.CLAIMANTS: {"claimants": []},
        Read.TARGET: {"target": None},
        Read.STAMP_ROOT: {"stamp_root": root_secret(), "fresh_root": b""},
        Read.REACH: {"reach": []},
        Read.NOT_FOUND: {"not_found": None},
        Read.SERVER: {"server": SERVER},
        Read.WORKLOADS: {"workloads": [], "stall_first_seen": {}},
    }


def play(
    the_cr: dict[str, Any],
    settings: OperatorSettings = SETTINGS,
    **answers: dict[str, Any] | object,
) -> tuple[list[Read], Stop | FetchPlan]:
    """Runs decide/read until decide stops or plans the fetch; ``answers`` override the world
    per read (by ``Read`` name); FORBIDDEN records a 403 for that read instead."""
    world = healthy_world()
    overrides = {Read[name]: value for name, value in answers.items()}
    obs = Observed("team-a", "app", cr=the_cr)
    reads: list[Read] = []
    for _ in range(2 * len(Read)):
        decision = decide(obs, settings)
        if not isinstance(decision, Needs):
            return reads, decision
        read = decision.read
        assert read not in reads, f"{read} asked for twice: {reads}"
        reads.append(read)
        answer = overrides.get(read, world[read])
        if answer is FORBIDDEN:
            obs = replace(obs, forbidden=ForbiddenRead("get", read.value))
        else:
            assert isinstance(answer, dict)
            obs = replace(obs, **{**world[read], **answer})
    raise AssertionError(f"decide kept asking: {reads}")


SECRET_ORDER = [
    Read.INSTANCE,  # R5
    Read.CREDENTIAL,  # R6
    Read.CLAIMANTS,  # R7
    Read.TARGET,  # R8
    Read.STAMP_ROOT,  # R12
    Read.NOT_FOUND,  # R13
    Read.SERVER,  # R14
]
SA_ORDER = [Read.INSTANCE, Read.CREDENTIAL, Read.TOKEN, *SECRET_ORDER[2:]]


@pytest.mark.parametrize(
    ("the_cr", "order"),
    [
        pytest.param(cr(), SECRET_ORDER, id="secret-credential"),
        pytest.param(sa_cr(), SA_ORDER, id="service-account-credential"),
    ],
)
@pytest.mark.parametrize(
    ("settings", "tail"),
    [
        pytest.param(SETTINGS, [], id="no-rollouts"),
        pytest.param(ROLLOUTS, [Read.WORKLOADS], id="trigger-rollouts"),
    ],
)
def test_S4_2_read_order_up_to_the_fetch(the_cr, order, settings, tail):
    reads, decision = play(the_cr, settings)
    assert reads == [*order, *tail]
    assert isinstance(decision, FetchPlan)


def test_S4_2_R0_lease_first_only_when_another_operators_namespace_is_recorded():
    foreign = cr(status={"operatorNamespace": "other-operator"})
    reads, decision = play(foreign)  # no Lease there: taken over
    assert reads == [Read.LEASE, *SECRET_ORDER]
    assert isinstance(decision, FetchPlan)
    ours = cr(status={"operatorNamespace": OP_NS})
    assert play(ours)[0] == SECRET_ORDER


def test_S4_2_R0_a_live_foreign_owner_reads_nothing_else():
    live = LeaseRecord("other-pod", NOW.at - timedelta(seconds=30))
    reads, decision = play(
        cr(status={"operatorNamespace": "other-operator"}), LEASE={"lease": live}
    )
    assert reads == [Read.LEASE]
    assert isinstance(decision, Stop) and decision.plan.outcome.reason == "ForeignOwner"


@pytest.mark.parametrize(
    ("settings", "reach", "order_after_root"),
    [
        pytest.param(SETTINGS, [], [Read.REACH], id="missing-root-lists-the-reach"),
        pytest.param(
            replace(SETTINGS, allow_stamp_root_reset=True), [], [], id="reset-allowed-no-reach"
        ),
    ],
)
def test_S4_2_R12_reach_only_when_the_root_is_missing_and_reset_not_allowed(
    settings, reach, order_after_root
):
    reads, decision = play(
        cr(), settings, STAMP_ROOT={"stamp_root": None, "fresh_root": FRESH_ROOT}
    )
    assert reads == [*SECRET_ORDER[:5], *order_after_root, *SECRET_ORDER[5:]]
    assert isinstance(decision, FetchPlan) and decision.stamp_root == FRESH_ROOT


def _not_controlled() -> SecretObject:
    return SecretObject("team-a", "app-env", data={"X": b"1"})


STOPS = [
    pytest.param(cr(resyncInterval="1s"), {}, [], "FetchFailed", id="R3-invalid-spec"),
    pytest.param(
        cr(target={"type": "kubernetes.io/tls"}, mapping=[{"key": "C", "secretKey": "tls.crt"}]),
        {},
        [],
        "NativeSecretTypesDisabled",
        id="R4-native-types-disabled",
    ),
    pytest.param(
        cr(metadata={"deletionTimestamp": "2025-05-01T00:00:00Z"}), {}, [], "Deleting", id="R1"
    ),
    pytest.param(
        cr(target={"name": "app-env", "creationPolicy": "Orphan"}),
        {},
        [],
        "FinalizerAdded",
        id="R2",
    ),
    pytest.param(
        cr(), {"INSTANCE": {"instance": None}}, [Read.INSTANCE], "FetchFailed", id="R5-no-instance"
    ),
    pytest.param(
        cr(),
        {"CREDENTIAL": {"credential_secret": None}},
        SECRET_ORDER[:2],
        "SecretNotDesignated",
        id="R6-secret-missing",
    ),
    pytest.param(
        sa_cr(),
        {"CREDENTIAL": {"service_account": service_account(labels={})}},
        SA_ORDER[:2],
        "ServiceAccountNotDesignated",
        id="R6-sa-refused-before-token",
    ),
    pytest.param(
        sa_cr(),
        {"INSTANCE": {"instance": instance(audience=None)}},
        SA_ORDER[:2],
        "AudienceMissing",
        id="R6-no-audience-before-token",
    ),
    pytest.param(
        sa_cr(),
        {"TOKEN": {"token": None, "token_error": "denied"}},
        SA_ORDER[:3],
        "FetchFailed",
        id="R6-token-request-failed",
    ),
    pytest.param(
        cr(),
        {"CLAIMANTS": {"claimants": [claimant("older", "uid-a", "2024-01-01T00:00:00Z")]}},
        SECRET_ORDER[:3],
        "TargetClaimed",
        id="R7-loser",
    ),
    pytest.param(
        cr(),
        {"TARGET": {"target": _not_controlled()}},
        SECRET_ORDER[:4],
        "ManagedSecretNotOwned",
        id="R8-not-owned",
    ),
    pytest.param(
        cr(),
        {"TARGET": {"target": controlled_target(secret_type="kubernetes.io/tls")}},
        SECRET_ORDER[:4],
        "TargetTypeImmutable",
        id="R9-type",
    ),
    pytest.param(
        cr(mapping=[{"key": "PATH"}]),
        {},
        SECRET_ORDER[:4],
        "LoaderControlUnacknowledged",
        id="R11-precheck",
    ),
    pytest.param(
        cr(),
        {"STAMP_ROOT": {"stamp_root": None}, "REACH": {"reach": [stamped_cr()]}},
        [*SECRET_ORDER[:5], Read.REACH],
        "FetchFailed",
        id="R12-root-missing-stamped-reach",
    ),
    pytest.param(
        cr(),
        {"STAMP_ROOT": {"stamp_root": root_secret(b"short")}},
        SECRET_ORDER[:5],
        "FetchFailed",
        id="R12-root-wrong-length",
    ),
    pytest.param(
        cr(),
        {"SERVER": {"server": None, "server_error": "bad trust"}},
        SECRET_ORDER,
        "FetchFailed",
        id="R14-no-client-no-workloads",
    ),
    pytest.param(
        cr(),
        {"CLAIMANTS": FORBIDDEN},
        SECRET_ORDER[:3],
        "NamespaceNotBound",
        id="S4_15-forbidden-list",
    ),
    pytest.param(
        cr(), {"TARGET": FORBIDDEN}, SECRET_ORDER[:4], "NamespaceNotBound", id="S4_15-target"
    ),
]


@pytest.mark.parametrize(("the_cr", "answers", "reads", "reason"), STOPS)
def test_S4_2_a_step_that_stops_never_asks_for_a_later_read(the_cr, answers, reads, reason):
    done, decision = play(the_cr, ROLLOUTS, **answers)
    assert done == reads
    assert isinstance(decision, Stop)
    assert decision.plan.outcome.reason == reason


def test_R10_typed_keys_missing_stops_before_the_stamp_root():
    the_cr = cr(target={"type": "kubernetes.io/ssh-auth"}, mapping=[{"key": "K"}])
    done, decision = play(the_cr, replace(ROLLOUTS, native_secret_types=True))
    assert done == SECRET_ORDER[:4]
    assert isinstance(decision, Stop) and decision.plan.outcome.reason == "KeysMissing"


def test_every_read_is_asked_for_on_some_path():
    seen: set[Read] = set()
    for the_cr, settings, answers in [
        (sa_cr(status={"operatorNamespace": "other-operator"}), ROLLOUTS, {}),
        (cr(), SETTINGS, {"STAMP_ROOT": {"stamp_root": None, "fresh_root": FRESH_ROOT}}),
    ]:
        seen |= set(play(the_cr, settings, **answers)[0])
    assert seen == set(Read)
