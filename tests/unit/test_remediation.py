"""Remediation texts (issue 9): one per S5.1 reason, quoting the user's exact action.

The reasons come from the spec's S5.1 table (and S11.5's additions) itself, so a reason added
there without a text fails here. The facts the context is read from are made by the engine's
own functions (``Condition.facts``); no text is read back out of a message.
"""

from __future__ import annotations

import pytest

from tests.support.factories import make_hikyosecret
from tests.support.spec_tables import spec_reasons
from workers.engine.conditions import REASONS
from workers.engine.content import assemble
from workers.engine.credentials import designation_problem
from workers.engine.decide import not_owned
from workers.engine.facts import Cause, fetch_failure_cause
from workers.engine.fetched import TLS_VERIFICATION_FAILED, DeliveredKey
from workers.engine.remediation import (
    GENERIC,
    OUTCOME_TEXTS,
    TEXTS,
    UNKNOWN,
    known,
    remediation,
    remediation_parts,
)
from workers.engine.remediation_context import spec_context
from workers.engine.spec import parse_spec

S5_1 = sorted(spec_reasons())
GENERIC_HEAD = GENERIC.split("{", 1)[0]

CONTEXT = {
    "namespace": "payments",
    "name": "payments-config",
    "instance": "primary",
    "target": "payments-env",
    "target_type": "kubernetes.io/tls",
    "credential": "hikyo-payments-credential",
    "credential_kind": "Secret",
    "credential_resource": "secret",
    "environment": "env_01900000-0000-7000-8000-000000000003",
}


def test_the_engine_knows_exactly_the_spec_reasons():
    engine = {reason for by_status in REASONS.values() for r in by_status.values() for reason in r}
    assert engine == set(S5_1)


@pytest.mark.parametrize("reason", S5_1)
def test_every_s5_1_reason_has_its_own_text(reason):
    assert reason in TEXTS and known(reason)
    text = remediation(reason, CONTEXT)
    assert not text.startswith(GENERIC_HEAD)
    assert "{" not in text.replace("{{", "")  # every placeholder filled or named
    assert len(text) < 700  # short


@pytest.mark.parametrize("reason", sorted(TEXTS) + sorted(OUTCOME_TEXTS))
def test_missing_names_show_as_placeholders(reason):
    text = remediation(reason, {})
    assert "{" not in text and "}" not in text.replace("}}", "")


def test_a_missing_spec_name_shows_as_its_placeholder_never_as_nothing():
    text = remediation("MergeTargetMissing", {"target": "payments-env"})
    assert "does not exist in namespace <namespace>" in text
    assert "HikyoSecret <name>'s keys" in text


def test_a_fact_an_older_operator_did_not_store_is_named_as_unknown_in_plain_words():
    # A condition without facts (stored before facts existed): the text says where to look.
    text = remediation("KeysMissing", CONTEXT)
    assert text.startswith(f"Mapped keys {UNKNOWN['keys']} are missing")
    assert "<keys>" not in text
    assert "(the instance the message names)" in remediation("InstanceMismatch", CONTEXT)


def test_unknown_reason_points_to_kubectl_describe():
    text = remediation("SomethingNew", {"namespace": "ns", "name": "app"})
    assert "SomethingNew" in text
    assert "kubectl -n ns describe hksec app" in text
    assert not known("SomethingNew")


# -- the texts the issue names, with their exact strings --------------------------------------


def test_undelivered_secrets_quotes_the_machine_reveal_opt_in_and_the_reveal_grant():
    text = remediation("UndeliveredSecrets", CONTEXT | {"keys": "DATABASE_URL"})
    assert "hikyo project-settings machine-reveal set --enabled true" in text
    assert (
        "hikyo access grant add --principal MCH_ID --capability reveal "
        "--env env_01900000-0000-7000-8000-000000000003"
    ) in text
    assert "Machine access" in text and "Members → New grant" in text
    assert "DATABASE_URL" in text
    assert "projection: config-only" in text


def test_secret_not_designated_names_both_labels_with_their_exact_values():
    text = remediation("SecretNotDesignated", CONTEXT)
    assert 'hikyo.dev/delivery="true"' in text
    assert "hikyo.dev/instance=primary" in text
    assert "kubectl -n payments label secret hikyo-payments-credential" in text
    assert "hikyo-token" in text


def test_service_account_not_designated_names_labels_and_the_helm_list():
    context = CONTEXT | {
        "credential": "payments-api",
        "credential_kind": "ServiceAccount",
        "credential_resource": "serviceaccount",
    }
    text = remediation("ServiceAccountNotDesignated", context)
    assert 'hikyo.dev/delivery="true"' in text and "hikyo.dev/instance=primary" in text
    assert "label serviceaccount payments-api" in text
    assert "operator.designatedServiceAccounts.payments" in text


def test_instance_mismatch_says_relabel_or_point_instance_ref():
    condition = designation_problem(
        "Secret",
        "hikyo-payments-credential",
        {"hikyo.dev/delivery": "true", "hikyo.dev/instance": "staging"},
        "primary",
        "SecretNotDesignated",
    )
    assert condition is not None and condition.reason == "InstanceMismatch"
    assert condition.facts == {"labelled_instance": "staging"}
    context = CONTEXT | condition.facts
    text = remediation("InstanceMismatch", context)
    assert "--overwrite hikyo.dev/instance=primary" in text
    assert "point spec.instanceRef.name at staging" in text


def test_loader_control_gives_the_exact_acknowledgement_list():
    cr = make_hikyosecret(
        "app",
        namespace="payments",
        mapping=[
            {"key": "PATH"},
            {"key": "LOG_LEVEL"},
            {"key": "PRELOAD", "secretKey": "LD_PRELOAD"},
        ],
        acknowledgedLoaderKeys=["PATH", "NODE_OPTIONS"],
    )
    text = remediation("LoaderControlUnacknowledged", spec_context(cr))
    assert 'acknowledgedLoaderKeys: ["LD_PRELOAD", "PATH"]' in text
    assert (
        "kubectl -n payments patch hksec app --type merge -p "
        """'{"spec":{"acknowledgedLoaderKeys":["LD_PRELOAD","PATH"]}}'"""
    ) in text


def test_loader_control_in_all_keys_mode_keeps_the_valid_acknowledgements():
    cr = make_hikyosecret(
        "app", allKeys=True, mapping=None, acknowledgedLoaderKeys=["PATH", "LD_*", "HOME"]
    )
    context = spec_context(cr)
    assert context["acknowledged"] == '["PATH"]'


def test_namespace_not_bound_names_the_helm_value():
    text = remediation("NamespaceNotBound", CONTEXT | {"verb": "get", "resource": "secrets"})
    assert "operator.namespaces" in text
    assert "payments" in text and "get secrets" in text


def test_target_claimed_says_choose_another_target_name():
    text = remediation("TargetClaimed", CONTEXT | {"winner": "first"})
    assert "HikyoSecret first" in text
    assert "choose another spec.target.name" in text


def test_managed_secret_not_owned_never_suggests_adoption():
    condition = not_owned("payments-env").conditions["Conflict"]
    assert condition is not None
    text = remediation(condition.reason, CONTEXT)
    assert "never adopts" in text and "choose another spec.target.name" in text


def test_native_types_disabled_names_the_helm_value():
    text = remediation("NativeSecretTypesDisabled", CONTEXT)
    assert "operator.nativeSecretTypes=true" in text
    assert "kubernetes.io/tls" in text


def test_target_type_immutable_names_both_types():
    text = remediation("TargetTypeImmutable", CONTEXT | {"existing_type": "Opaque"})
    assert "type Opaque" in text and "asks for kubernetes.io/tls" in text


# -- FetchFailed and KeysMissing by cause -------------------------------------------------------


FETCH_FAILED_PHRASES = {
    Cause.SPEC_INVALID: "spec.resyncInterval",
    Cause.INSTANCE_MISSING: "HikyoInstance primary does not exist",
    Cause.TOKEN_REQUEST: "designatedServiceAccounts",
    Cause.STAMP_ROOT: "ALLOW_STAMP_ROOT_RESET",
    Cause.NO_CLIENT: "spec.url or caBundle",
    Cause.ADMISSION: "ResourceQuota",
    Cause.CONFIRMING: "confirms it",
    Cause.SERVER: "could not be reached",
    Cause.UNAUTHORIZED: "hikyo sa credential mint",
    Cause.TLS: "caBundle",
    Cause.RATE_LIMITED: "answered 429 for org",
}


@pytest.mark.parametrize("cause", sorted(FETCH_FAILED_PHRASES))
def test_fetch_failed_text_follows_the_cause(cause):
    text = remediation("FetchFailed", CONTEXT | {"cause": cause})
    assert FETCH_FAILED_PHRASES[cause] in text
    assert "Read the message" not in text  # not the general text


def test_fetch_failed_without_a_cause_of_its_own_gets_the_general_text():
    assert "Read the message" in remediation("FetchFailed", CONTEXT)


@pytest.mark.parametrize(
    ("status", "detail", "cause"),
    [
        (401, "status 401 (credential rejected)", Cause.UNAUTHORIZED),
        (503, "status 503", Cause.SERVER),
        (500, "status 500", Cause.SERVER),
        (None, "connection failed", Cause.SERVER),
        (None, "timeout", Cause.SERVER),
        (None, TLS_VERIFICATION_FAILED, Cause.TLS),
        (403, "status 403", ""),
        (400, "status 400", ""),
    ],
)
def test_a_failed_fetch_s_cause_is_what_came_back(status, detail, cause):
    assert fetch_failure_cause(status, detail) == cause


def test_keys_missing_before_the_fetch_names_the_required_destinations():
    from workers.engine.decide import _mapping_problem

    cr = make_hikyosecret(
        "app", namespace="payments", mapping=[{"key": "CERT", "secretKey": "tls.crt"}]
    )
    cr["spec"]["target"]["type"] = "kubernetes.io/tls"
    cr["metadata"]["uid"] = "u"
    refused = _mapping_problem(parse_spec(cr))
    assert refused is not None
    condition = refused.conditions["Delivery"]
    assert condition.facts == {"keys": "tls.key", "cause": Cause.UNMAPPED}
    text = remediation("KeysMissing", CONTEXT | condition.facts)
    assert "needs destinations tls.key in spec.mapping" in text


def test_undelivered_keys_are_the_refusal_s_facts():
    cr = make_hikyosecret("app", namespace="ns")
    cr["metadata"]["uid"] = "u"
    refusal = assemble(
        parse_spec(cr),
        [
            DeliveredKey("DATABASE_URL", "secret", "set"),
            DeliveredKey("LOG_LEVEL", "config", "set", "info"),
        ],
    )
    assert refusal.reason == "UndeliveredSecrets"
    assert refusal.facts == {"keys": "DATABASE_URL"}


def test_spec_context_holds_names_only():
    cr = make_hikyosecret(
        "app", namespace="ns", auth={"secretRef": None, "serviceAccountRef": {"name": "sa"}}
    )
    context = spec_context(cr)
    assert context["credential"] == "sa" and context["credential_kind"] == "ServiceAccount"
    assert set(context) <= {
        "namespace",
        "name",
        "instance",
        "target",
        "target_type",
        "environment",
        "org",
        "credential",
        "credential_kind",
        "credential_resource",
        "acknowledged",
        "acknowledged_patch",
    }


def test_key_owned_elsewhere_names_the_keys_of_its_facts():
    from workers.engine.merge import keys_owned_elsewhere_refusal

    refused = keys_owned_elsewhere_refusal("payments-env", ("log-level", "tls.crt"))
    condition = refused.conditions["Conflict"]
    assert condition is not None and condition.facts == {"keys": "log-level, tls.crt"}
    context = CONTEXT | condition.facts
    text = remediation(refused.reason, context)
    assert "log-level, tls.crt" in text and "--show-managed-fields" in text


def test_invalid_template_names_the_key_and_the_kind_of_its_facts():
    from workers.engine.templates import parse_templates

    fault = parse_templates({"url": "{{ DB_HOST | nosuchfilter }}"}, frozenset({"DB_HOST"}))
    assert fault is not None
    assert fault.facts == {"key": "url", "kind": "an unknown filter on line 1"}
    context = CONTEXT | fault.facts
    assert "spec.target.template.data[url]" in remediation("InvalidTemplate", context)


def test_a_dotenv_name_refusal_gets_the_dotenv_text():
    from workers.engine.file_formats import dotenv_names_refused

    refused = dotenv_names_refused(["log-level", "OK_NAME"])
    assert refused is not None
    assert refused.facts == {"keys": "log-level", "cause": Cause.DOTENV}
    context = CONTEXT | refused.facts
    assert "environment-variable names" in remediation(refused.reason, context)


# -- commands as pieces of their own (the dashboard's code blocks) ------------------------------


@pytest.mark.parametrize("reason", sorted(TEXTS) + sorted(OUTCOME_TEXTS))
def test_the_pieces_join_into_the_text_explain_prints_with_no_marker_left(reason):
    parts = remediation_parts(reason, CONTEXT)
    assert "".join(p.text for p in parts) == remediation(reason, CONTEXT)
    assert "`" not in remediation(reason, CONTEXT)


def test_each_command_is_a_piece_of_its_own_that_runs_as_it_stands():
    parts = remediation_parts("SecretNotDesignated", CONTEXT)
    commands = [p.text for p in parts if p.command]
    assert commands == [
        "kubectl -n payments create secret generic hikyo-payments-credential "
        "--from-file=hikyo-token=./hikyo-token",
        "kubectl -n payments label secret hikyo-payments-credential --overwrite "
        'hikyo.dev/delivery="true" hikyo.dev/instance=primary',
        "kubectl -n payments annotate hksec payments-config --overwrite "
        "hikyo.dev/force-sync=$(date +%s)",
    ]
    unauthorized = remediation_parts("FetchFailed", CONTEXT | {"cause": Cause.UNAUTHORIZED})
    assert [p.text for p in unauthorized if p.command][-1] == (
        "kubectl -n payments annotate hksec payments-config --overwrite "
        "hikyo.dev/force-sync=$(date +%s)"
    )


def test_a_name_cannot_open_or_close_a_command():
    parts = remediation_parts("MergeTargetMissing", CONTEXT | {"target": "a`b"})
    assert [p.text for p in parts if p.command] == [
        "kubectl -n payments annotate hksec payments-config --overwrite "
        "hikyo.dev/force-sync=$(date +%s)"
    ]
    assert "Secret a`b does not exist" in "".join(p.text for p in parts if not p.command)


@pytest.mark.parametrize(
    ("reason", "cause"),
    [
        ("SecretNotDesignated", ""),
        ("InstanceMismatch", ""),
        ("ManagedSecretNotOwned", ""),
        ("UndeliveredSecrets", ""),
        ("KeysMissing", ""),
        ("Expired", ""),
        ("FetchFailed", Cause.UNAUTHORIZED),
        ("FetchFailed", Cause.SERVER),
        ("FetchFailed", Cause.TOKEN_REQUEST),
    ],
)
def test_a_fix_made_outside_the_cr_ends_with_the_command_that_runs_it_now(reason, cause):
    """The operator watches neither Secrets nor the Hikyo server: without this last command
    the fixed CR waits for its resync or backoff."""
    parts = remediation_parts(reason, CONTEXT | ({"cause": cause} if cause else {}))
    last = [p.text for p in parts if p.command][-1]
    assert last == (
        "kubectl -n payments annotate hksec payments-config --overwrite "
        "hikyo.dev/force-sync=$(date +%s)"
    )
