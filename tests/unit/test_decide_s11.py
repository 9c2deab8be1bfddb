"""S11 in the pure decision: templates and file formats before and after the fetch, and
creationPolicy Merge at R1, R2, R8 and the write. Plain data only (decide_fixtures)."""

from __future__ import annotations

import json
from dataclasses import replace

from tests.unit.decide_fixtures import (
    CANARY,
    CR_UID,
    NATIVE,
    NOT_FOUND,
    NS,
    TARGET,
    VALUE,
    answered,
    cr,
    delivery,
    dk,
    observed,
    owner_ref,
    planned,
    scrubbed_condition,
    stopped,
)
from workers.engine.binding import CredentialIdentity, binding_digest
from workers.engine.merge import MERGE_FINALIZER
from workers.engine.ports import FIELD_MANAGER, SecretObject
from workers.engine.spec import SpecInvalid, parse_spec

MERGE = {"name": TARGET, "creationPolicy": "Merge"}
URL_TEMPLATE = {"data": {"url": "postgres://{{ DATABASE_URL }}/{{ values['log-level'] }}"}}


def merge_target(data=None, managers=None, **fields) -> SecretObject:
    """A Secret someone else made: helm owns ``helm-key``; ``managers`` adds owners."""
    return SecretObject(
        NS,
        TARGET,
        data={"helm-key": b"h"} if data is None else data,
        uid="target-uid",
        resource_version="11",
        data_managers={"helm": frozenset({"helm-key"}), **(managers or {})},
        **fields,
    )


def merging_cr(deleting: bool = False, **spec):
    metadata = {"finalizers": [MERGE_FINALIZER]}
    if deleting:
        metadata["deletionTimestamp"] = "2025-06-01T11:00:00Z"
    return cr(target=MERGE, metadata=metadata, **spec)


# -- templates and formats -----------------------------------------------------------------------


def test_a_template_renders_the_assembled_keys_and_replaces_them():
    plan = answered(observed(cr(target={"name": TARGET, "template": URL_TEMPLATE})), delivery())
    assert plan.outcome.reason == "Delivered"
    assert plan.secret.data == {"url": f"postgres://{VALUE}/info".encode()}
    assert plan.outcome.status["keyCount"] == 1


def test_merge_policy_keeps_the_assembled_keys_no_entry_names():
    template = {"mergePolicy": "Merge", "data": {"log-level": "{{ values['log-level'] | upper }}"}}
    plan = answered(observed(cr(target={"name": TARGET, "template": template})), delivery())
    assert plan.secret.data == {"DATABASE_URL": VALUE.encode(), "log-level": b"INFO"}


def test_an_unknown_variable_is_invalid_before_the_fetch_and_names_only_the_key():
    template = {"data": {"url": "{{ NOT_MAPPED }}"}}
    plan = stopped(observed(cr(target={"name": TARGET, "template": template})))
    assert plan.step == "R11a"
    delivery_condition = plan.outcome.conditions["Delivery"]
    assert (delivery_condition.status, delivery_condition.reason) == ("False", "InvalidTemplate")
    assert "data key url" in delivery_condition.message
    assert plan.outcome.lifecycle == "Refused" and plan.outcome.status["cursor"] is None


def test_a_render_error_on_a_value_never_quotes_it():
    template = {"data": {"n": "{{ DATABASE_URL | int(base=2) + (1 / 0) }}"}}
    plan = answered(observed(cr(target={"name": TARGET, "template": template})), delivery())
    condition = plan.outcome.conditions["Delivery"]
    assert condition.reason == "InvalidTemplate" and plan.secret is None
    assert CANARY not in condition.message and CANARY not in repr(plan.outcome)


def test_a_presence_only_source_refuses_the_delivery_though_no_template_reads_it():
    template = {"data": {"level": "{{ values['log-level'] }}"}}
    keys = (dk("DATABASE_URL", None), dk("LOG_LEVEL", "info", "config"))
    plan = answered(observed(cr(target={"name": TARGET, "template": template})), delivery(keys))
    assert plan.outcome.conditions["Delivery"].reason == "UndeliveredSecrets"
    assert plan.secret is None


def test_an_entry_reading_a_missing_source_is_left_out_and_keys_missing_names_the_source():
    template = {
        "data": {"url": "{{ DATABASE_URL }}", "level": "{{ values['log-level'] }}"},
    }
    keys = (dk("DATABASE_URL", VALUE),)
    plan = answered(observed(cr(target={"name": TARGET, "template": template})), delivery(keys))
    assert plan.secret.data == {"url": VALUE.encode()}
    condition = plan.outcome.conditions["Delivery"]
    assert condition.reason == "KeysMissing" and "LOG_LEVEL" in condition.message


def test_a_typed_target_is_checked_after_its_template_renders():
    template = {"data": {".dockerconfigjson": "{{ dockerconfigjson('r.io', U, P) }}"}}
    the_cr = cr(
        target={"name": TARGET, "type": "kubernetes.io/dockerconfigjson", "template": template},
        mapping=[{"key": "U"}, {"key": "P"}],
    )
    plan = answered(observed(the_cr), delivery((dk("U", "me"), dk("P", VALUE))), NATIVE)
    written = json.loads(plan.secret.data[".dockerconfigjson"])
    assert written["auths"]["r.io"]["password"] == VALUE

    # S4.7.3 over the rendered bytes: a template that renders no JSON object is refused.
    not_json = {"data": {".dockerconfigjson": "{{ U }}:{{ P }}"}}
    refused_cr = cr(
        target={"name": TARGET, "type": "kubernetes.io/dockerconfigjson", "template": not_json},
        mapping=[{"key": "U"}, {"key": "P"}],
    )
    refused = answered(observed(refused_cr), delivery((dk("U", "me"), dk("P", VALUE))), NATIVE)
    condition = refused.outcome.conditions["Delivery"]
    assert (condition.status, condition.reason) == ("False", "InvalidSecretData")
    assert refused.secret is None and VALUE not in condition.message


def test_a_dotenv_file_holds_every_assembled_key_in_one_data_key():
    the_cr = cr(
        target={"name": TARGET, "format": "dotenv", "formatKey": ".env"},
        mapping=[{"key": "DATABASE_URL"}, {"key": "LOG_LEVEL"}],
    )
    plan = answered(observed(the_cr), delivery())
    assert plan.secret.data == {".env": f"DATABASE_URL='{VALUE}'\nLOG_LEVEL='info'\n".encode()}


def test_a_dotenv_destination_that_is_no_variable_name_is_refused_before_the_fetch():
    the_cr = cr(target={"name": TARGET, "format": "dotenv", "formatKey": ".env"})
    plan = stopped(observed(the_cr))  # the default mapping delivers LOG_LEVEL as log-level
    assert plan.step == "R11a"
    assert plan.outcome.conditions["Delivery"].reason == "InvalidTemplate"
    assert "log-level" in plan.outcome.conditions["Delivery"].message


def test_a_template_edit_changes_the_binding_so_no_cursor_answers_current():
    identity = CredentialIdentity("u", "1")
    first = parse_spec(cr(target={"name": TARGET, "template": URL_TEMPLATE}))
    edited = parse_spec(cr(target={"name": TARGET, "template": {"data": {"url": "x"}}}))
    plain = parse_spec(cr())
    assert binding_digest(first, identity, "i") != binding_digest(edited, identity, "i")
    assert binding_digest(plain, identity, "i") == binding_digest(
        replace(plain, templates=()), identity, "i"
    )


def test_the_run_time_re_check_refuses_what_admission_would():
    for target, rule in (
        ({"template": URL_TEMPLATE, "format": "json", "formatKey": "f"}, "exclude each other"),
        ({"format": "json"}, "formatKey"),
        ({"formatKey": "f"}, "only with target.format"),
        ({"creationPolicy": "Merge", "type": "kubernetes.io/tls"}, "requires target.type Opaque"),
        ({"template": {"data": {"..x": "y"}}}, "not a data key"),
    ):
        try:
            parse_spec(cr(target={"name": TARGET, **target}))
        except SpecInvalid as error:
            assert rule in str(error)
        else:
            raise AssertionError(f"{target} was accepted")


# -- creationPolicy Merge ------------------------------------------------------------------------


def test_merge_adds_its_finalizer_at_r2():
    plan = stopped(observed(cr(target=MERGE)))
    assert plan.step == "R2" and plan.finalizers == [MERGE_FINALIZER]


def test_a_missing_merge_target_is_refused_at_r8_before_any_fetch():
    plan = stopped(observed(merging_cr(), target=None))
    assert plan.step == "R8"
    condition = plan.outcome.conditions["Conflict"]
    assert (condition.status, condition.reason) == ("True", "MergeTargetMissing")
    assert plan.secret is None


def test_a_merge_target_another_controller_manages_is_not_owned():
    foreign = merge_target(owner_references=[owner_ref(uid="someone-else")])
    plan = stopped(observed(merging_cr(), target=foreign))
    assert plan.outcome.conditions["Conflict"].reason == "ManagedSecretNotOwned"


def test_merge_writes_only_its_keys_and_nothing_when_they_are_current():
    fetch = planned(observed(merging_cr(), target=merge_target()))
    assert fetch.target is not None
    plan = answered(observed(merging_cr(), target=merge_target()), delivery())
    assert plan.secret.kind == "merge"
    assert plan.secret.data == {"DATABASE_URL": VALUE.encode(), "log-level": b"info"}
    assert plan.outcome.status["keyCount"] == 2

    ours = {"DATABASE_URL": VALUE.encode(), "log-level": b"info"}
    current = merge_target(
        data={"helm-key": b"h", **ours}, managers={FIELD_MANAGER: frozenset(ours)}
    )
    unchanged = answered(observed(merging_cr(), target=current), delivery())
    assert unchanged.secret is None and not unchanged.outcome.wrote_secret


def test_a_delivered_key_another_manager_owns_is_refused_by_name():
    owned = merge_target(managers={"helm": frozenset({"helm-key", "log-level"})})
    plan = answered(observed(merging_cr(), target=owned), delivery())
    condition = plan.outcome.conditions["Conflict"]
    assert (condition.status, condition.reason) == ("True", "KeyOwnedElsewhere")
    assert "log-level" in condition.message and CANARY not in condition.message
    assert plan.secret is None and plan.outcome.status["cursor"] is None


def test_a_withdrawn_merge_delivery_removes_only_this_cr_s_keys():
    """S4.10.1 under Merge (S11.4): the server no longer authorizes the delivery, and the
    Secret is another tool's: only this HikyoSecret's keys go (an empty apply), never the
    Secret's other keys (an emptied Secret)."""
    ours = {"DATABASE_URL": VALUE.encode()}
    current = merge_target(
        data={"helm-key": b"h", **ours}, managers={FIELD_MANAGER: frozenset(ours)}
    )
    scrubbed = {"conditions": [scrubbed_condition()]}  # already scrubbed: no confirmation
    plan = answered(observed(merging_cr(status=scrubbed), target=current), NOT_FOUND)
    assert plan.outcome.reason == "AuthorizationWithdrawn"
    assert plan.secret.kind == "unmerge" and plan.secret.data == {}


def test_deleting_a_merge_cr_removes_its_keys_then_its_finalizer():
    plan = stopped(observed(merging_cr(deleting=True)))
    assert plan.step == "R1"
    assert plan.secret.kind == "unmerge" and plan.secret.data == {}
    assert plan.finalizers == []
    assert plan.secret.cr_uid == CR_UID
