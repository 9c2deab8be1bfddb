"""Remediation texts (issue 9): one per S5.1 reason, quoting the user's exact action.

The reasons come from the spec's S5.1 table (and S11.5's additions) itself, so a reason added
there without a text fails here. The messages the context is read from are made by the engine's
own functions.
"""

from __future__ import annotations

import pytest

from tests.support.factories import make_hikyosecret
from tests.support.spec_tables import spec_reasons
from workers.engine.conditions import REASONS
from workers.engine.content import assemble
from workers.engine.credentials import designation_problem
from workers.engine.decide import not_owned
from workers.engine.fetched import DeliveredKey
from workers.engine.remediation import (
    GENERIC,
    OUTCOME_TEXTS,
    TEXTS,
    known,
    message_context,
    remediation,
    spec_context,
)
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
    context = CONTEXT | message_context(condition.reason, condition.message)
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
    message = "HikyoSecret first already manages Secret payments-env; choose another target.name"
    context = CONTEXT | message_context("TargetClaimed", message)
    text = remediation("TargetClaimed", context)
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
    message = "Secret payments-env has type Opaque, not kubernetes.io/tls; a Secret's type..."
    context = CONTEXT | message_context("TargetTypeImmutable", message)
    text = remediation("TargetTypeImmutable", context)
    assert "type Opaque" in text and "asks for kubernetes.io/tls" in text


# -- FetchFailed and KeysMissing by cause -------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "phrase"),
    [
        ("invalid resyncInterval: below 10s", "spec.resyncInterval"),
        ("HikyoInstance primary not found", "HikyoInstance primary does not exist"),
        ("TokenRequest for ServiceAccount x failed: HTTP 403", "designatedServiceAccounts"),
        ("stamp root missing: restore Secret hikyo-system/...", "ALLOW_STAMP_ROOT_RESET"),
        ("forbidden by admission or quota: secrets create", "ResourceQuota"),
        ("not found; confirming before acting (S4.10.0)", "confirms it"),
        ("fetch failed: status 503", "hikyo.dev/force-sync="),
        ("fetch failed: connection failed", "could not be reached"),
        ("fetch failed: status 401 (credential rejected)", "hikyo sa credential mint"),
        ("fetch failed: TLS verification failed", "caBundle"),
        ("rate limited by the Hikyo server (status 429)", "answered 429"),
        ("fetch failed: status 400", "Read the message"),
    ],
)
def test_fetch_failed_text_follows_the_cause(message, phrase):
    text = remediation("FetchFailed", CONTEXT | message_context("FetchFailed", message))
    assert phrase in text


def test_fetch_failed_by_step_for_an_invalid_client():
    text = remediation("FetchFailed", CONTEXT | {"step": "R14"})
    assert "spec.url or caBundle" in text


def test_keys_missing_before_the_fetch_names_the_required_destinations():
    message = "a kubernetes.io/tls Secret needs tls.key in the mapping"
    context = CONTEXT | message_context("KeysMissing", message)
    assert context["step"] == "R10" and context["keys"] == "tls.key"
    assert "needs destinations tls.key in spec.mapping" in remediation("KeysMissing", context)


def test_undelivered_keys_are_read_from_the_engine_message():
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
    assert message_context(refusal.reason, refusal.message)["keys"] == "DATABASE_URL"


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


def test_key_owned_elsewhere_names_the_keys_the_engine_message_names():
    from workers.engine.merge import keys_owned_elsewhere_refusal

    refused = keys_owned_elsewhere_refusal("payments-env", ("log-level", "tls.crt"))
    context = CONTEXT | message_context(refused.reason, refused.message)
    assert context["keys"] == "log-level, tls.crt"
    text = remediation(refused.reason, context)
    assert "log-level, tls.crt" in text and "--show-managed-fields" in text


def test_invalid_template_names_the_key_and_the_kind_the_engine_message_names():
    from workers.engine.templates import parse_templates

    fault = parse_templates({"url": "{{ DB_HOST | nosuchfilter }}"}, frozenset({"DB_HOST"}))
    assert fault is not None
    context = CONTEXT | message_context("InvalidTemplate", fault.message)
    assert context["key"] == "url" and context["kind"] == "an unknown filter on line 1"
    assert "spec.target.template.data[url]" in remediation("InvalidTemplate", context)


def test_a_dotenv_name_refusal_gets_the_dotenv_text():
    from workers.engine.file_formats import dotenv_names_refused

    refused = dotenv_names_refused(["log-level", "OK_NAME"])
    assert refused is not None
    context = CONTEXT | message_context(refused.reason, refused.message)
    assert context["keys"] == "log-level"
    assert "environment-variable names" in remediation(refused.reason, context)
