"""``manage.py explain NAMESPACE/NAME [--fetch]`` against the real apiserver and devserver
(issue 9): the first S4.2 step that stops and its remediation for the S5.1 reasons a real
cluster reaches, and **no write at all**, proved from the apiserver's own
``apiserver_request_total`` counters read before and after. Canary values never show."""

from __future__ import annotations

import base64
import datetime as dt
import re
from collections.abc import Callable
from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from kubernetes import client

from controlplane.observations.management.commands.explain import ReadOnlyCluster
from devserver import Fault, new_id
from tests.support.kube import settle, unreachable_kubeconfig, write_counters
from tests.support.waiting import wait_for
from tests.support.world import CANARIES, canary
from workers.engine.explain import STEPS
from workers.engine.ports import write_methods
from workers.engine.settings import OperatorSettings

OPERATOR_NAMESPACE = "hikyo-system"


def settings_for(kubeconfig, **options):
    operator = OperatorSettings(operator_namespace=OPERATOR_NAMESPACE, **options)
    return override_settings(HIKYO_OPERATOR=operator, KUBECONFIG=str(kubeconfig))


def explain(target: str, *args: str) -> str:
    out = StringIO()
    call_command("explain", target, *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def stopping_step(text: str) -> str:
    found = re.findall(r"^  (?:STOP|done)  (R\d+a?)\s", text, flags=re.MULTILINE)
    assert len(found) == 1, text
    return found[0]


def remedy(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("remediation: "))


def assert_no_canary(text: str) -> None:
    leaked = [c for c in CANARIES if c in text]
    assert not leaked, leaked


def _secret(world, name: str, labels: dict[str, str] | None, token: str) -> None:
    world.core.create_namespaced_secret(
        world.namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name=name, labels=labels),
            data={"hikyo-token": base64.b64encode(token.encode() + b"\n").decode()},
        ),
    )


def _account(world, name: str, labels: dict[str, str] | None) -> None:
    world.core.create_namespaced_service_account(
        world.namespace,
        client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name, labels=labels)),
    )


def _next_second(created: str) -> None:
    wait_for(
        lambda: dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ") > created,
        timeout=5,
        what="the next second",
    )


TLS = "kubernetes.io/tls"
TLS_MAPPING = [
    {"key": "DATABASE_URL", "secretKey": "tls.crt"},
    {"key": "LOG_LEVEL", "secretKey": "tls.key"},
]

# name, native types on?, the stopping step, the condition, a phrase of the remediation
BEFORE_THE_FETCH = [
    ("no-instance", True, "R5", "Synced=False/FetchFailed", "absent-inst does not exist"),
    ("undesignated", True, "R6", "Designation=False/SecretNotDesignated",
     'hikyo.dev/delivery="true"'),
    ("mismatch", True, "R6", "Designation=False/InstanceMismatch",
     "point spec.instanceRef.name at staging"),
    ("sa-unlabelled", True, "R6", "Designation=False/ServiceAccountNotDesignated",
     "label serviceaccount unlabelled-sa"),
    ("sa-no-audience", True, "R6", "Designation=False/AudienceMissing", "spec.audience"),
    ("claim-b", True, "R7", "Conflict=True/TargetClaimed", "HikyoSecret claim-a (created"),
    ("foreign", True, "R8", "Conflict=True/ManagedSecretNotOwned", "never adopts"),
    ("retyped", True, "R9", "Conflict=True/TargetTypeImmutable", "has type Opaque"),
    ("tls-partial", True, "R10", "Delivery=False/KeysMissing", "needs destinations tls.key"),
    ("loader", True, "R11", "Delivery=False/LoaderControlUnacknowledged",
     'acknowledgedLoaderKeys: ["LD_PRELOAD", "PATH"]'),
    ("tls-full", False, "R4", "Delivery=False/NativeSecretTypesDisabled",
     "operator.nativeSecretTypes=true"),
]  # fmt: skip


def _refusal_world(world) -> None:
    world.publish(DATABASE_URL=canary("value"), LOG_LEVEL=canary("value"))
    world.grant()
    world.create_instance()
    world.create_credential()
    _secret(world, "plain-cred", None, canary("token"))
    _secret(
        world,
        "other-cred",
        {"hikyo.dev/delivery": "true", "hikyo.dev/instance": "staging"},
        canary("token"),
    )
    _account(world, "unlabelled-sa", None)
    _account(
        world,
        "designated-sa",
        {"hikyo.dev/delivery": "true", "hikyo.dev/instance": world.instance},
    )
    world.create_cr("no-instance", instanceRef={"name": "absent-inst"}, target={"name": "t1"})
    world.create_cr(
        "undesignated", auth={"secretRef": {"name": "plain-cred"}}, target={"name": "t2"}
    )
    world.create_cr("mismatch", auth={"secretRef": {"name": "other-cred"}}, target={"name": "t3"})
    for name, account in (("sa-unlabelled", "unlabelled-sa"), ("sa-no-audience", "designated-sa")):
        world.create_cr(
            name,
            auth={"secretRef": None, "serviceAccountRef": {"name": account}},
            target={"name": f"{name}-env"},
        )
    created = world.create_cr("claim-a", target={"name": "shared"})["metadata"]["creationTimestamp"]
    world.core.create_namespaced_secret(
        world.namespace,
        client.V1Secret(metadata=client.V1ObjectMeta(name="foreign-env"), string_data={"a": "b"}),
    )
    world.create_cr("foreign", target={"name": "foreign-env"})
    world.create_cr("retyped", target={"name": "retyped-env"})
    assert world.reconcile("retyped").outcome.reason == "Delivered"
    world.patch_cr("retyped", {"target": {"type": TLS}, "mapping": TLS_MAPPING})
    world.create_cr(
        "tls-partial", target={"name": "tls-partial", "type": TLS}, mapping=TLS_MAPPING[:1]
    )
    world.create_cr(
        "loader",
        target={"name": "loader-env"},
        mapping=[{"key": "PATH"}, {"key": "DATABASE_URL", "secretKey": "LD_PRELOAD"}],
    )
    world.create_cr("tls-full", target={"name": "tls-full", "type": TLS}, mapping=TLS_MAPPING)
    _next_second(created)
    world.create_cr("claim-b", target={"name": "shared"})


def test_explain_names_the_first_stopping_step_and_writes_nothing(world, kubeconfig):
    _refusal_world(world)
    requests_before = len(world.requests())
    settle(world.api_client, world.namespace)
    before = write_counters(world.api_client)
    # the parsing sees writes: the setup's delivery created Secrets and patched a status
    assert before.get("POST secrets/", 0) >= 1 and before.get("PATCH hikyosecrets/status", 0) >= 1
    outputs = {}
    for name, native, *_ in BEFORE_THE_FETCH:
        with settings_for(kubeconfig, native_secret_types=native):
            outputs[name] = explain(f"{world.namespace}/{name}")
    after = write_counters(world.api_client)
    assert after == before, {k: after.get(k, 0) - before.get(k, 0) for k in after}
    assert len(world.requests()) == requests_before  # nothing fetched: every step stops first

    order = list(STEPS)
    for name, _, step, condition, phrase in BEFORE_THE_FETCH:
        text = outputs[name]
        assert stopping_step(text) == step, (name, text)
        passed = re.findall(r"^  ok    (R\d+a?)\s", text, flags=re.MULTILINE)
        assert passed == order[: order.index(step)], (name, text)
        assert f"outcome: {condition}" in text, (name, text)
        assert phrase in remedy(text), (name, text)
        assert "(explain wrote nothing)" in text
        assert_no_canary(text)
    world.reconcile("no-instance")  # a reconcile writes (status, event): the counters see it
    assert write_counters(world.api_client) != after
    # nothing of explain landed anywhere: no status, no Secret for the refused ones
    untouched = [name for name, *_ in BEFORE_THE_FETCH if name not in ("retyped", "no-instance")]
    assert all("status" not in world.cr(name) for name in untouched)
    assert world.target("t2") is None and world.target("tls-partial") is None


def test_explain_with_one_fetch_evaluates_the_answer_and_writes_nothing(
    world, kubeconfig, devserver
):
    # One scope: LOG_LEVEL is config, DATABASE_URL a secret the credential only sees the
    # presence of (no machine-reveal opt-in).
    world.publish_keys(
        [
            {"name": "DATABASE_URL", "classification": "secret", "value": canary("value")},
            {"name": "LOG_LEVEL", "classification": "config", "value": canary("value")},
        ]
    )
    world.grant()
    world.create_instance()
    world.create_credential()
    failing, unpublished = canary("token"), canary("token")
    devserver.add_credential(failing, *world.scope)
    devserver.set_fault(failing, Fault.status(503))
    unpublished_env = new_id("env")
    devserver.add_credential(unpublished, world.org, world.project, unpublished_env)
    designated = {"hikyo.dev/delivery": "true", "hikyo.dev/instance": world.instance}
    _secret(world, "failing-cred", designated, failing)
    _secret(world, "unpublished-cred", designated, unpublished)
    world.create_cr("healthy", target={"name": "healthy"}, mapping=[{"key": "LOG_LEVEL"}])
    try:
        _fetch_case(world, kubeconfig, devserver, unpublished_env)
    finally:
        devserver.clear_fault(failing)


def _fetch_case(world, kubeconfig, devserver, unpublished_env: str) -> None:
    world.create_cr("undelivered", target={"name": "undelivered"})
    world.create_cr(
        "failing", target={"name": "failing"}, auth={"secretRef": {"name": "failing-cred"}}
    )
    world.create_cr(
        "unpublished",
        target={"name": "unpublished"},
        auth={"secretRef": {"name": "unpublished-cred"}},
        scope={"org": world.org, "project": world.project, "environment": unpublished_env},
    )
    assert world.reconcile("healthy").outcome.reason == "Delivered"
    assert world.status("healthy")["cursor"]

    settle(world.api_client, world.namespace)
    before = write_counters(world.api_client)
    fetched_before = len(devserver.requests)
    with settings_for(kubeconfig, native_secret_types=True):
        plain = explain(f"{world.namespace}/healthy")
        outputs = {
            name: explain(f"{world.namespace}/{name}", "--fetch")
            for name in ("healthy", "undelivered", "failing", "unpublished")
        }
    after = write_counters(world.api_client)
    assert after == before, {k: after.get(k, 0) - before.get(k, 0) for k in after}

    # Without --fetch: every step before the fetch passes, the fetch is next, none is made.
    assert re.findall(r"^  ok    (R\d+a?)\s", plain, flags=re.MULTILINE) == _before("R15")
    assert "next  R15" in plain and "conditional (cursor) fetch" in plain and "--fetch" in plain
    # With --fetch: exactly one cursor-less fetch per object.
    made = devserver.requests[fetched_before:]
    assert len(made) == 4 and not any(r.cursor_present for r in made)

    healthy = outputs["healthy"]
    assert re.findall(r"^  ok    (R\d+a?)\s", healthy, flags=re.MULTILINE) == _before("R16")
    assert stopping_step(healthy) == "R16" and "done  R16" in healthy
    assert "outcome: Synced=True/Delivered" in healthy
    assert "Ready would be: True/Reconciled" in healthy
    assert "fetched cursor-less: HTTP 200" in healthy
    assert remedy(healthy).startswith("remediation: Nothing to do")

    cases = {
        "undelivered": (
            "Delivery=False/UndeliveredSecrets",
            "hikyo project-settings machine-reveal set --enabled true",
        ),
        "failing": ("Synced=False/FetchFailed", "hikyo.dev/force-sync="),
        "unpublished": ("Synced=False/NotMaterialized", "publish the environment"),
    }
    for name, (condition, phrase) in cases.items():
        text = outputs[name]
        assert stopping_step(text) == "R16", text
        assert f"outcome: {condition}" in text, text
        assert phrase in remedy(text), text
    assert "--capability reveal" in remedy(outputs["undelivered"])
    assert "HTTP 503" in outputs["failing"]
    for text in (plain, *outputs.values()):
        assert_no_canary(text)
    # the refused and failed ones have no status and no Secret, the healthy one is unchanged
    for name in ("undelivered", "failing", "unpublished"):
        assert "status" not in world.cr(name) and world.target(name) is None


def _limited_kubeconfig(world, api_client, tmp_path: Path) -> tuple[Path, Callable[[], None]]:
    """A kubeconfig for an identity that may read HikyoSecrets and instances but not Secrets
    (S4.15); returns it and its cleanup."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    name = f"explain-{world.namespace}"
    world.core.create_namespaced_service_account(
        OPERATOR_NAMESPACE, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
    )
    rbac.create_cluster_role(
        client.V1ClusterRole(
            metadata=client.V1ObjectMeta(name=name),
            rules=[
                client.V1PolicyRule(
                    api_groups=["hikyo.dev"],
                    resources=["hikyosecrets", "hikyoinstances"],
                    verbs=["get", "list"],
                )
            ],
        )
    )
    rbac.create_cluster_role_binding(
        client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=name),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=name
            ),
            subjects=[
                client.RbacV1Subject(kind="ServiceAccount", name=name, namespace=OPERATOR_NAMESPACE)
            ],
        )
    )
    token = world.core.create_namespaced_service_account_token(
        name,
        OPERATOR_NAMESPACE,
        client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[])),
    ).status.token
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": api_client.configuration.host,
                    "certificate-authority": api_client.configuration.ssl_ca_cert,
                },
            }
        ],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "limited.kubeconfig"
    path.write_text(yaml.safe_dump(config))

    def cleanup() -> None:
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)

    return path, cleanup


def test_explain_without_rbac_in_the_namespace_says_which_helm_value(world, api_client, tmp_path):
    """S4.15: the credential read is refused and a review confirms it: NamespaceNotBound."""
    world.publish(DATABASE_URL=canary("value"), LOG_LEVEL=canary("value"))
    world.grant()
    world.create_instance()
    world.create_credential()
    world.create_cr()
    path, cleanup = _limited_kubeconfig(world, api_client, tmp_path)
    try:
        with settings_for(path):
            text = explain(f"{world.namespace}/app")
    finally:
        cleanup()
    assert stopping_step(text) == "R6"
    assert "outcome: Unreconciled=True/NamespaceNotBound" in text
    assert "operator.namespaces" in remedy(text) and world.namespace in remedy(text)
    assert "status" not in world.cr()
    assert_no_canary(text)


def test_the_cluster_explain_uses_refuses_every_write_method():
    class Recorder:
        def __getattr__(self, name):
            return lambda *args, **kwargs: name

    cluster = ReadOnlyCluster(Recorder())
    assert cluster.get_secret("ns", "name") == "get_secret"
    for name in write_methods():
        with pytest.raises(AttributeError, match="explain never writes"):
            getattr(cluster, name)


def test_explain_errors_are_one_line(world, kubeconfig, tmp_path):
    with settings_for(kubeconfig):
        with pytest.raises(CommandError, match="NAMESPACE/NAME"):
            explain("no-slash")
        with pytest.raises(CommandError, match="NAMESPACE/NAME"):
            explain("a/b/c")
        with pytest.raises(CommandError, match=f"HikyoSecret {world.namespace}/absent not found"):
            explain(f"{world.namespace}/absent")
    unreachable = unreachable_kubeconfig(kubeconfig, tmp_path)
    with settings_for(unreachable), pytest.raises(CommandError, match="cannot reach the cluster"):
        explain(f"{world.namespace}/app")
    with (
        override_settings(
            HIKYO_OPERATOR=OperatorSettings(operator_namespace=""), KUBECONFIG=str(kubeconfig)
        ),
        pytest.raises(CommandError, match="HIKYO_OPERATOR_NAMESPACE"),
    ):
        explain(f"{world.namespace}/app")


def test_explain_takes_several_hikyosecrets_in_turn_and_names_the_missing_last(world, kubeconfig):
    ns = world.namespace
    world.create_cr("first")  # both stop before the fetch (this world has no instance)
    world.create_cr("second", target={"name": "second-target"})
    with settings_for(kubeconfig):
        alone = {name: explain(f"{ns}/{name}") for name in ("first", "second")}
        out = StringIO()
        with pytest.raises(CommandError, match=f"^HikyoSecret {ns}/absent not found$"):
            call_command("explain", f"{ns}/first", f"{ns}/absent", f"{ns}/second", stdout=out)
        with pytest.raises(CommandError, match=f"^HikyoSecrets {ns}/x, {ns}/y not found$"):
            call_command("explain", f"{ns}/x", f"{ns}/y", stdout=StringIO())
        refused = StringIO()
        with pytest.raises(CommandError, match="NAMESPACE/NAME"):  # checked before any output
            call_command("explain", f"{ns}/first", "no-slash", stdout=refused)
    assert refused.getvalue() == ""
    blocks = re.split(r"\n\n(?=HikyoSecret )", out.getvalue())  # a blank line between two
    assert [block.splitlines()[0] for block in blocks] == [
        f"HikyoSecret {ns}/first",
        f"HikyoSecret {ns}/second",
    ]
    for block, name in zip(blocks, ("first", "second"), strict=True):
        assert stopping_step(block) == stopping_step(alone[name]), block
        assert remedy(block) == remedy(alone[name])


def _before(step: str) -> list[str]:
    """The steps explain lists as passed before ``step``, in the order it runs them."""
    return list(STEPS)[: list(STEPS).index(step)]
