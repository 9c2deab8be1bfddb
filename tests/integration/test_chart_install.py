"""The chart in the real control plane (issue 11, S8.2, S9): every values combination passes a
server-side dry run; an installed release's ServiceAccount is all the operator needs to deliver,
refuse, scrub, roll out, federate and report; the audit log shows it asked for nothing else."""

from __future__ import annotations

import base64
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.support.audit import AuditedRequest
from tests.support.chart_release import Release, chart_values
from tests.support.factories import GROUP, VERSION
from tests.support.helm import template
from tests.support.waiting import wait_for
from tests.support.world import World, canary
from workers.engine.force_sync import FORCE_SYNC_ANNOTATION

from .test_federation import SA, audience_for, bind, cluster_issuer, federated_world, trusted
from .test_rollouts import _deployment

__all__ = ["cluster_issuer", "trusted"]  # fixtures, used by name

REPORTING = ("read", "reveal", "report-delivery-status")
STAMP_ROOT = "hikyo-operator-stamp-root"
WORKLOADS = {"deployments", "statefulsets", "daemonsets"}


@pytest.fixture
def namespaces(api_client) -> Iterator[callable]:
    """make(label) creates a fresh namespace; all are deleted afterwards."""
    core = client.CoreV1Api(api_client)
    made: list[str] = []

    def make(label: str) -> str:
        name = f"c{label}-{uuid.uuid4().hex[:8]}"
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        made.append(name)
        return name

    yield make
    for name in made:
        try:
            core.delete_namespace(name)
        except ApiException as error:
            if error.status != 404:
                raise


@pytest.fixture
def releases(kubeconfig, tmp_path, namespaces) -> Iterator[callable]:
    """make(name) -> a Release in a fresh namespace; every installed one is uninstalled after."""
    made: list[Release] = []

    def make(name: str) -> Release:
        release = Release(f"{name}-{uuid.uuid4().hex[:6]}", namespaces("rel"), kubeconfig, tmp_path)
        made.append(release)
        return release

    yield make
    for release in made:
        if release.installed:
            result = release.uninstall()
            assert result.returncode == 0, result.stderr


def _world(api_client, devserver, engine, namespace: str) -> World:
    return World(api_client, devserver, engine, namespace)


def _ready(world: World, name: str = "app") -> bool:
    try:
        return world.conditions(name).get("Ready") == ("True", "Reconciled")
    except ApiException:
        return False


def _target_data(world: World, name: str = "app-env") -> dict[str, str] | None:
    secret = world.target(name)
    if secret is None:
        return None
    return {
        k: base64.b64decode(v).decode() if isinstance(v, str) else v.decode()
        for k, v in secret.data.items()
    }


def _force_sync(world: World, name: str) -> None:
    world.custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        world.namespace,
        "hikyosecrets",
        name,
        {"metadata": {"annotations": {FORCE_SYNC_ANNOTATION: uuid.uuid4().hex}}},
    )


def _not_allowed(requests: list[AuditedRequest]) -> list[str]:
    return [str(r) for r in requests if r.decision != "allow"]


def _secret_requests(requests: list[AuditedRequest]) -> list[AuditedRequest]:
    return [r for r in requests if r.group == "" and r.resource == "secrets"]


# -- server-side dry runs ----------------------------------------------------------------------

MATRIX = {
    "cluster-wide": {},
    "namespaced": {"namespaces": ["{a}", "{b}"]},
    "rollouts-off": {"triggerRollouts": False},
    "reporting-off": {"statusReporting": False},
    "native-types": {"nativeSecretTypes": True},
    "stamp-root-reset": {"allowStampRootReset": True},
    "designated": {"designatedServiceAccounts": {"{a}": ["builder", "deployer"]}},
    "namespaced-designated": {
        "namespaces": ["{a}"],
        "designatedServiceAccounts": {"{a}": ["builder"]},
    },
    "service-monitor": {"metrics": {"serviceMonitor": {"enabled": True}}},
    # Issue 35 item 6: the PrometheusRule and the Grafana board's ConfigMap.
    "alerts-and-board": {
        "prometheusRule": {"enabled": True},
        "grafanaDashboard": {"enabled": True},
    },
    "scaled": {
        "scaled": {"enabled": True, "workers": 3, "database": {"existingSecret": "pg"}},
        "replicaCount": 2,
    },
    # Issue 35 item 7: the PodDisruptionBudgets and NetworkPolicies, with every fitting value.
    "fitted": {
        "podDisruptionBudget": {"enabled": True},
        "networkPolicy": {
            "enabled": True,
            "metrics": {"from": [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}]},
            "dashboard": {"from": [{"podSelector": {"matchLabels": {"app": "ingress"}}}]},
            "apiServer": {"cidrs": ["10.96.0.1/32"]},
        },
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
            }
        ],
        "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
        "extraVolumes": [{"name": "ca", "emptyDir": {}}],
        "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/ssl/extra"}],
        "serviceAccount": {"annotations": {"example.com/role": "hikyo"}},
        "commonLabels": {"cost-center": "platform"},
        "fullnameOverride": "fitted-operator",
        "revisionHistoryLimit": 2,
    },
    "fitted-scaled": {  # issue 50: with shard leaders, each gets its policy and budget
        "scaled": {"enabled": True, "shards": 2, "database": {"existingSecret": "pg"}},
        "replicaCount": 2,
        "podDisruptionBudget": {"enabled": True, "minAvailable": 1},
        "networkPolicy": {"enabled": True},
    },
    "scaled-existing-redis": {
        "scaled": {
            "enabled": True,
            "redis": {"existingSecret": "redis"},
            "database": {"existingSecret": "pg"},
        },
    },
}


def _fill(value, names: dict[str, str]):
    if isinstance(value, str):
        return value.format(**names)
    if isinstance(value, list):
        return [_fill(v, names) for v in value]
    if isinstance(value, dict):
        return {_fill(k, names): _fill(v, names) for k, v in value.items()}
    return value


@pytest.mark.parametrize("case", list(MATRIX))
def test_every_values_combination_passes_a_server_side_dry_run(
    case, kubeconfig, binaries, namespaces, crds, tmp_path
):
    """helm template, then kubectl apply --dry-run=server: the apiserver validates every object
    (schemas, RBAC escalation checks for the roles the chart grants)."""
    if case == "service-monitor":
        _install_monitoring_crd(kubeconfig, binaries, "ServiceMonitor")
    if case == "alerts-and-board":
        _install_monitoring_crd(kubeconfig, binaries, "PrometheusRule")
    names = {"a": namespaces("a"), "b": namespaces("b")}
    release_namespace = namespaces("rel")
    rendered = template(
        chart_values(**_fill(MATRIX[case], names)),
        tmp_path,
        release="dry",
        namespace=release_namespace,
    )
    assert rendered.returncode == 0, rendered.stderr
    applied = subprocess.run(
        # Every namespaced object names its namespace (the release's or a watched one).
        [
            str(binaries.kubectl),
            "--kubeconfig",
            str(kubeconfig),
            "apply",
            "--dry-run=server",
            "-f",
            "-",
        ],
        input=rendered.stdout,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert applied.returncode == 0, applied.stderr
    kinds = {line.split("/", 1)[0] for line in applied.stdout.splitlines()}
    assert {"clusterrole.rbac.authorization.k8s.io", "deployment.apps"} <= kinds, applied.stdout
    if case == "alerts-and-board":
        assert {"prometheusrule.monitoring.coreos.com", "configmap"} <= kinds, applied.stdout
    if case.startswith("fitted"):
        assert {
            "poddisruptionbudget.policy",
            "networkpolicy.networking.k8s.io",
        } <= kinds, applied.stdout


MONITORING_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: {plural}.monitoring.coreos.com}}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {{kind: {kind}, plural: {plural}, singular: {singular}}}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"""


def _install_monitoring_crd(kubeconfig: Path, binaries, kind: str) -> None:
    """A stand-in for one of prometheus-operator's CRDs (ServiceMonitor, PrometheusRule), so
    the chart's object has a kind to dry-run as."""
    plural = kind.lower() + "s"
    subprocess.run(
        [str(binaries.kubectl), "--kubeconfig", str(kubeconfig), "apply", "-f", "-"],
        input=MONITORING_CRD.format(kind=kind, plural=plural, singular=kind.lower()),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    subprocess.run(
        [
            str(binaries.kubectl),
            "--kubeconfig",
            str(kubeconfig),
            "wait",
            "--for",
            "condition=Established",
            f"crd/{plural}.monitoring.coreos.com",
            "--timeout=60s",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=True,
    )


# -- the operator as the chart's ServiceAccount -------------------------------------------------


def test_cluster_wide_release_runs_the_operator_with_exactly_its_rbac(
    api_client, devserver, engine, releases, namespaces, trusted, audit_log, crds
):
    """Delivery, refusal, scrub, rollout, federation and status reports through run_operator
    as the release's ServiceAccount; the audit log: every request allowed, Secrets never listed
    or watched, and in its own namespace no Secret but the stamp root."""
    apps_ns, scrub_ns, fed_ns = namespaces("app"), namespaces("scrub"), namespaces("fed")
    release = releases("wide")
    installed = release.install(
        chart_values(
            designatedServiceAccounts={fed_ns: [SA]},
            nativeSecretTypes=True,
            statusReporting=True,
        )
    )
    assert installed.returncode == 0, installed.stderr

    delivered = _world(api_client, devserver, engine, apps_ns)
    values = delivered.publish(DATABASE_URL=canary("value"), LOG_LEVEL=canary("value"))
    delivered.grant(REPORTING)
    delivered.create_instance()
    delivered.create_credential()
    delivered.create_cr("app")
    delivered.create_cr(
        "unlabelled", auth={"secretRef": {"name": "plain"}}, target={"name": "unlabelled-env"}
    )
    delivered.create_credential(name="plain", labels={})
    apps = client.AppsV1Api(api_client)
    apps.create_namespaced_deployment(apps_ns, _deployment("web", opt_in="app-env"))

    scrubbed = _world(api_client, devserver, engine, scrub_ns)
    scrubbed.publish(DATABASE_URL=canary("value"), LOG_LEVEL=canary("value"))
    scrubbed.grant()
    scrubbed.create_instance()
    scrubbed.create_credential()
    scrubbed.create_cr("app")

    federated = _world(api_client, devserver, engine, fed_ns)
    fed_values = federated_world(federated, audience_for(federated))
    bind(federated, trusted, audience_for(federated))

    operator = release.operator(api_client)
    try:
        operator.start_leader()
        wait_for(lambda: _ready(delivered), timeout=120, what="the delivered CR Ready")
        assert _target_data(delivered) == {
            "DATABASE_URL": values["DATABASE_URL"],
            "log-level": values["LOG_LEVEL"],
        }
        wait_for(
            lambda: (
                delivered.conditions("unlabelled").get("Designation")
                == ("False", "SecretNotDesignated")
            ),
            timeout=60,
            what="the undesignated credential refused",
        )
        assert delivered.target("unlabelled-env") is None
        wait_for(lambda: _ready(federated), timeout=120, what="the federated CR Ready")
        assert _target_data(federated)["DATABASE_URL"] == fed_values["DATABASE_URL"]
        wait_for(
            lambda: (
                apps.read_namespaced_deployment("web", apps_ns).spec.template.metadata.annotations
                or {}
            ),
            timeout=60,
            what="the opted-in Deployment stamped",
        )
        wait_for(
            lambda: any(
                r["namespace"] == apps_ns and r["name"] == "app" for r in devserver.status_reports
            ),
            timeout=120,
            what="a status report for the delivered CR",
        )

        wait_for(lambda: _ready(scrubbed), timeout=120, what="the CR to scrub Ready")
        devserver.set_grants(scrubbed.token, ())  # read withdrawn: the uniform 404 (S4.10)
        _force_sync(scrubbed, "app")
        wait_for(
            lambda: scrubbed.conditions().get("Scrubbed") == ("True", "AuthorizationWithdrawn"),
            timeout=120,
            what="the target scrubbed after the confirmed 404",
        )
        assert _target_data(scrubbed) == {}
    finally:
        operator.stop()

    requests = release.requests(audit_log)
    assert requests, f"no request by {release.user} in the audit log"
    assert _not_allowed(requests) == []
    secret_requests = _secret_requests(requests)
    assert not [str(r) for r in secret_requests if r.verb in {"list", "watch"}]
    own = [r for r in secret_requests if r.namespace == release.namespace]
    assert own and {r.name for r in own} == {STAMP_ROOT}, [str(r) for r in own]
    verbs = {(r.group, r.resource, r.verb) for r in requests}
    assert ("", "serviceaccounts/token", "create") in verbs  # federation went through RBAC
    assert ("apps", "deployments", "patch") in verbs  # so did the rollout


def test_scaled_release_runs_leader_and_workers_with_the_same_rbac(
    api_client, devserver, engine, releases, namespaces, redis_server, audit_log, crds
):
    """S9.3 scaled mode: run_operator and two Celery workers, all as the release's
    ServiceAccount, with the Redis URL and PostgreSQL DSN from the Secrets the chart names."""
    import redis

    from tests.support.operator_harness import scaled_database_url

    redis.Redis.from_url(redis_server.url).flushall()
    ns = namespaces("scaled")
    release = releases("scaled")
    core = client.CoreV1Api(api_client)
    for name, key, value in (
        ("harness-redis", "redis-url", redis_server.url),
        ("harness-pg", "database-url", scaled_database_url()),
    ):
        core.create_namespaced_secret(
            release.namespace,
            client.V1Secret(metadata=client.V1ObjectMeta(name=name), string_data={key: value}),
        )
    installed = release.install(
        chart_values(
            namespaces=[ns],
            scaled={
                "enabled": True,
                "workers": 2,
                "redis": {"existingSecret": "harness-redis"},
                "database": {"existingSecret": "harness-pg"},
            },
        )
    )
    assert installed.returncode == 0, installed.stderr

    world = _world(api_client, devserver, engine, ns)
    world.publish(DATABASE_URL=canary("value"), LOG_LEVEL=canary("value"))
    world.grant()
    world.create_instance()
    world.create_credential()
    for index in range(3):
        world.create_cr(f"app-{index}", target={"name": f"app-env-{index}"})
    apps = client.AppsV1Api(api_client)
    apps.create_namespaced_deployment(ns, _deployment("web", opt_in="app-env-0"))

    operator = release.operator(api_client, redis_url=redis_server.url)
    assert operator.env["HIKYO_OPERATOR_REDIS_URL"] == redis_server.url  # from the chart's env
    worker_deployment = apps.read_namespaced_deployment(
        f"{release.fullname}-worker", release.namespace
    )
    (container,) = worker_deployment.spec.template.spec.containers
    pool = container.args[container.args.index("--pool") + 1]
    assert pool == "threads"  # the chart's default: one process per worker pod (issue 13, P4)
    try:
        operator.start_leader()
        operator.start_worker("w1", pool=pool)
        operator.start_worker("w2", pool=pool)
        for index in range(3):
            wait_for(
                lambda index=index: _ready(world, f"app-{index}"),
                timeout=120,
                what=f"app-{index} Ready",
            )
        wait_for(
            lambda: apps.read_namespaced_deployment("web", ns).spec.template.metadata.annotations,
            timeout=60,
            what="the opted-in Deployment stamped",
        )
    finally:
        operator.stop()
    assert {uid for uid, *_ in operator.runs()}, "the workers ran the reconciles"

    requests = release.requests(audit_log)
    assert requests and _not_allowed(requests) == []
    touched = {r.namespace for r in requests}
    assert touched <= {ns, release.namespace, "kube-system", ""}, sorted(touched)
    secret_requests = _secret_requests(requests)
    assert not [str(r) for r in secret_requests if r.verb in {"list", "watch"}]
    assert {r.name for r in secret_requests if r.namespace == release.namespace} == {STAMP_ROOT}


def test_namespaced_releases_side_by_side_deliver_only_their_own_namespaces(
    api_client, devserver, engine, releases, namespaces, audit_log, crds
):
    """Two releases with disjoint operator.namespaces and triggerRollouts=false: each delivers
    its namespace; neither sends a request into the other's, into an unlisted namespace, or on
    a workload; a third release overlapping one of them is refused (S9.4 lookup)."""
    first_ns, second_ns, unlisted_ns = namespaces("one"), namespaces("two"), namespaces("none")
    first, second = releases("first"), releases("second")
    for release, ns in ((first, first_ns), (second, second_ns)):
        installed = release.install(chart_values(namespaces=[ns], triggerRollouts=False))
        assert installed.returncode == 0, installed.stderr

    worlds = {
        ns: _world(api_client, devserver, engine, ns) for ns in (first_ns, second_ns, unlisted_ns)
    }
    apps = client.AppsV1Api(api_client)
    for ns, world in worlds.items():
        world.publish(DATABASE_URL=canary("value"), LOG_LEVEL=canary("value"))
        world.grant()
        world.create_instance()
        world.create_credential()
        world.create_cr("app")
        apps.create_namespaced_deployment(ns, _deployment("web", opt_in="app-env"))

    operators = [first.operator(api_client), second.operator(api_client)]
    try:
        for operator in operators:
            operator.start_leader()
        for ns in (first_ns, second_ns):
            wait_for(lambda ns=ns: _ready(worlds[ns]), timeout=120, what=f"Ready in {ns}")
    finally:
        for operator in operators:
            operator.stop()

    for release, ns, other in ((first, first_ns, second_ns), (second, second_ns, first_ns)):
        requests = release.requests(audit_log)
        assert requests and _not_allowed(requests) == []
        touched = {r.namespace for r in requests}
        assert other not in touched and unlisted_ns not in touched, sorted(touched)
        # kube-system: the cluster id of status reports (S7), the one Namespace it may get.
        assert touched <= {ns, release.namespace, "kube-system", ""}, sorted(touched)
        assert [str(r) for r in requests if r.resource in WORKLOADS] == []
        secret_requests = _secret_requests(requests)
        assert not [str(r) for r in secret_requests if r.verb in {"list", "watch"}]
        own = {r.name for r in secret_requests if r.namespace == release.namespace}
        assert own == {STAMP_ROOT}, own
    assert worlds[unlisted_ns].status() == {}
    for ns in (first_ns, second_ns):  # the opted-in Deployment was left alone: no grant, no patch
        template_annotations = apps.read_namespaced_deployment("web", ns).spec.template.metadata
        assert not (template_annotations.annotations or {})

    # An upgrade keeps the chart-created dashboard key (lookup), so logins survive it.
    def dashboard_key() -> bytes:
        secret = client.CoreV1Api(api_client).read_namespaced_secret(
            f"{first.fullname}-dashboard", first.namespace
        )
        return secret.data["secret-key"]

    before = dashboard_key()
    upgraded = first.upgrade(chart_values(namespaces=[first_ns], triggerRollouts=False))
    assert upgraded.returncode == 0, upgraded.stderr  # its own ClusterRole is no overlap
    assert dashboard_key() == before

    overlapping = releases("third")
    refused = overlapping.install(chart_values(namespaces=[unlisted_ns, second_ns]))
    assert refused.returncode != 0
    assert f'overlaps the operator of release "{second.name}"' in refused.stderr, refused.stderr
    wide = releases("wide")
    refused = wide.install(chart_values())
    assert refused.returncode != 0 and "overlaps the operator of release" in refused.stderr


def test_cluster_wide_release_refuses_a_designated_namespace_that_does_not_exist(releases, crds):
    release = releases("missing")
    refused = release.install(chart_values(designatedServiceAccounts={"no-such-ns-x1": ["a"]}))
    assert refused.returncode != 0
    assert 'names namespace "no-such-ns-x1", which does not exist in the cluster' in refused.stderr


def test_uninstall_per_the_notes_leaves_what_s4_14_5_says(
    api_client, devserver, engine, kubeconfig, binaries, releases, namespaces, crds, tmp_path
):
    """NOTES (S9.5): delete the HikyoSecrets while the operator runs, then helm uninstall; an
    Orphan CR's Secret survives, unowned and intact. A CR left behind after the operator is gone
    hangs on hikyo.dev/orphan until the NOTES one-liner removes that finalizer (and no other)."""
    ns = namespaces("un")
    release = releases("gone")
    installed = release.install(chart_values(namespaces=[ns]))
    assert installed.returncode == 0, installed.stderr
    notes = installed.stdout
    for phrase in (
        "--secrets-encryption",
        "secretbox",
        "AES-CBC",
        "hikyo.dev/orphan",
        "helm uninstall",
        "kubectl delete crd",
        "Own namespace (S8.5)",
    ):
        assert phrase in notes, phrase
    one_liner = next(
        line.strip() for line in notes.splitlines() if "kubectl get hikyosecrets -A" in line
    )

    world = _world(api_client, devserver, engine, ns)
    values = world.publish(DATABASE_URL=canary("value"), LOG_LEVEL=canary("value"))
    world.grant()
    world.create_instance()
    world.create_credential()
    world.create_cr("deleted", target={"name": "deleted-env", "creationPolicy": "Orphan"})
    world.create_cr("left", target={"name": "left-env", "creationPolicy": "Orphan"})
    operator = release.operator(api_client)
    try:
        operator.start_leader()
        for name in ("deleted", "left"):
            wait_for(lambda name=name: _ready(world, name), timeout=120, what=f"{name} Ready")
        world.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "hikyosecrets", "deleted")
        wait_for(lambda: _gone(world, "deleted"), timeout=60, what="the deleted CR finalized")
    finally:
        operator.stop()
    kept = world.core.read_namespaced_secret("deleted-env", ns)
    assert not kept.metadata.owner_references
    assert _target_data(world, "deleted-env") == {
        "DATABASE_URL": values["DATABASE_URL"],
        "log-level": values["LOG_LEVEL"],
    }

    uninstalled = release.uninstall()
    assert uninstalled.returncode == 0, uninstalled.stderr
    rbac = client.RbacAuthorizationV1Api(api_client)
    with pytest.raises(ApiException) as missing:
        rbac.read_cluster_role(release.fullname)
    assert missing.value.status == 404
    crd_api = client.ApiextensionsV1Api(api_client)
    assert crd_api.read_custom_resource_definition("hikyosecrets.hikyo.dev")  # crds/ stay

    # The operator is gone: a CR left behind hangs on its finalizer when deleted.
    world.custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        ns,
        "hikyosecrets",
        "left",
        {"metadata": {"finalizers": ["hikyo.dev/orphan", "example.com/keep"]}},
    )
    world.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "hikyosecrets", "left")
    assert world.cr("left")["metadata"]["deletionTimestamp"]
    kubectl_dir = str(Path(binaries.kubectl).parent)
    ran = subprocess.run(
        ["bash", "-c", one_liner],
        capture_output=True,
        text=True,
        timeout=60,
        # HOME: kubectl keeps its discovery cache under it (relative to the cwd without one).
        env={
            "PATH": f"{kubectl_dir}:/usr/bin:/bin",
            "KUBECONFIG": str(kubeconfig),
            "HOME": str(tmp_path),
        },
    )
    assert ran.returncode == 0, ran.stderr
    assert world.cr("left")["metadata"]["finalizers"] == ["example.com/keep"]
    world.custom.patch_namespaced_custom_object(
        GROUP, VERSION, ns, "hikyosecrets", "left", {"metadata": {"finalizers": []}}
    )
    wait_for(lambda: _gone(world, "left"), timeout=30, what="the left-behind CR deleted")


def _gone(world: World, name: str) -> bool:
    try:
        world.cr(name)
    except ApiException as error:
        if error.status == 404:
            return True
        raise
    return False
