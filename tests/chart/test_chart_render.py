"""The chart as rendered by Helm (no cluster): S9.1 values, S9.2 rendering, S9.3 modes, S9.4
refusals, S8.2 RBAC and S8.3 pod security. Installing it is tests/integration/test_chart_*."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from tests.support.helm import (
    CHART,
    DIGEST,
    container_env,
    helm,
    objects,
    one,
    operator_values,
    seed_values,
    seed_values_text,
    template,
)
from workers.runner import DEADLINE_SECONDS, WRITE_GRACE_SECONDS

FULLNAME = "hikyo-hikyo-operator"  # release "hikyo"
S92_ENV = (
    "HIKYO_OPERATOR_NAMESPACES",
    "HIKYO_OPERATOR_TRIGGER_ROLLOUTS",
    "HIKYO_OPERATOR_NATIVE_SECRET_TYPES",
    "HIKYO_OPERATOR_STATUS_REPORTING",
    "HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS",
    "HIKYO_OPERATOR_FETCH_QPS",
    "HIKYO_OPERATOR_FETCH_BURST",
    "HIKYO_OPERATOR_ALLOW_STAMP_ROOT_RESET",
    "HIKYO_OPERATOR_NAMESPACE",
    "POD_NAMESPACE",
)


def render(tmp_path, values: dict[str, Any], *extra: str) -> list[dict[str, Any]]:
    return template(values, tmp_path, *extra).manifests()


def scaled(**scaled_values: Any) -> dict[str, Any]:
    section = {"enabled": True, "database": {"existingSecret": "observations-dsn"}}
    section.update(scaled_values)
    return operator_values(scaled=section)


def rules_of(role: dict[str, Any]) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(group, resource, verb, resourceNames) for every verb of every rule."""
    return [
        (group, resource, verb, tuple(rule.get("resourceNames", ())))
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    ]


def grants(role: dict[str, Any], group: str, resource: str) -> set[str]:
    return {verb for g, r, verb, _ in rules_of(role) if (g, r) == (group, resource)}


def pods(rendered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d["spec"]["template"] for d in objects(rendered, "Deployment")]


# -- S9.6 / S9.1: the seed's values file ---------------------------------------------------


def test_the_seeds_values_file_unchanged_renders_embedded_mode(tmp_path):
    """S9.6: only --set operator.image.digest; the server keys are accepted and ignored."""
    values_file = tmp_path / "hikyo-values.yaml"
    values_file.write_text(seed_values_text())
    assert set(seed_values()) >= {"database", "rootKey", "upgrade", "externalOrigin", "tls"}
    rendered = helm(
        "template",
        "hikyo",
        str(CHART),
        "--namespace",
        "hikyo",
        "--values",
        str(values_file),
        "--set",
        f"operator.image.digest={DIGEST}",
        tmp=tmp_path,
    ).manifests()
    deployments = objects(rendered, "Deployment")
    assert [d["metadata"]["name"] for d in deployments] == [FULLNAME]
    spec = deployments[0]["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    container = spec["template"]["spec"]["containers"][0]
    env = container_env(container)
    assert "HIKYO_OPERATOR_REDIS_URL" not in env and "HIKYO_OPERATOR_DATABASE_URL" not in env
    assert env["HIKYO_OPERATOR_NAMESPACES"] == "payments"
    assert json.loads(env["HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS"]) == {
        "payments": ["payments-api"]
    }
    assert container["resources"] == seed_values()["operator"]["resources"]
    assert container["image"] == f"ghcr.io/hikyo-org/hikyo-operator@{DIGEST}"
    # Nothing of the server's: no Secret named by the server keys, no server image.
    text = yaml.safe_dump_all(rendered)
    for server_name in ("hikyo-database", "hikyo-root-key", "hikyo-server-tls", "hikyo-upgrade"):
        assert server_name not in text


def test_helm_lint_is_clean(tmp_path):
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(operator_values()))
    linted = helm("lint", "--strict", str(CHART), "--values", str(values_file), tmp=tmp_path)
    assert linted.returncode == 0, linted.stdout + linted.stderr
    assert "[WARNING]" not in linted.stdout and "[ERROR]" not in linted.stdout


def test_disabled_operator_renders_nothing(tmp_path):
    assert render(tmp_path, {"operator": {"enabled": False}}) == []


# -- S9.4 refusals ---------------------------------------------------------------------------


def _without(path: str) -> dict[str, Any]:
    values = operator_values()
    *parents, last = path.split(".")
    node = values
    for key in parents:
        node = node[key]
    del node[last]
    return values


def _with(**overrides: Any) -> dict[str, Any]:
    return operator_values(**overrides)


CA_VOLUME = {"name": "ca", "configMap": {"name": "corporate-ca"}}
CA_MOUNT = {"name": "ca", "mountPath": "/etc/ssl/corporate", "readOnly": True}

# Issue 50: what passed `helm template` and failed only at the apiserver (or prometheus-operator),
# and what extraEnv could redefine behind the chart's back.
FITTING_REFUSALS: list[tuple[str, dict[str, Any], str]] = [
    (
        "a CIDR without its prefix length",
        _with(networkPolicy={"apiServer": {"cidrs": ["10.0.0.1"]}}),
        'operator.networkPolicy.apiServer.cidrs[0] "10.0.0.1" is not a CIDR',
    ),
    (
        "a CIDR out of range",
        _with(networkPolicy={"hikyoInstances": {"cidrs": ["10.0.0.0/8", "300.1.2.3/32"]}}),
        'operator.networkPolicy.hikyoInstances.cidrs[1] "300.1.2.3/32" is not a CIDR',
    ),
    (
        "priorityClassName not a name",
        _with(priorityClassName="High_Priority"),
        'operator.priorityClassName "High_Priority" is not a PriorityClass name',
    ),
    (
        "topology spread whenUnsatisfiable unknown",
        _with(
            topologySpreadConstraints=[
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "Never"}
            ]
        ),
        "operator.topologySpreadConstraints[0].whenUnsatisfiable must be DoNotSchedule or "
        "ScheduleAnyway, got Never",
    ),
    (
        "topology spread maxSkew 0",
        _with(
            topologySpreadConstraints=[
                {"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
            ]
        ),
        "operator.topologySpreadConstraints[0].maxSkew must be an integer of at least 1, got 0",
    ),
    (
        "a volume name twice",
        _with(extraVolumes=[CA_VOLUME, {"name": "ca", "emptyDir": {}}]),
        'operator.extraVolumes[1]: the volume name "ca" is used twice',
    ),
    (
        "a volume named as the chart's",
        _with(extraVolumes=[{"name": "tmp", "emptyDir": {}}]),
        'operator.extraVolumes[0]: the volume name "tmp" is used twice',
    ),
    (
        "a mountPath twice",
        _with(
            extraVolumes=[CA_VOLUME],
            extraVolumeMounts=[CA_MOUNT, {"name": "ca", "mountPath": "/etc/ssl/corporate/"}],
        ),
        'operator.extraVolumeMounts[1]: mountPath "/etc/ssl/corporate/" is mounted twice',
    ),
    (
        "a mount over the chart's /tmp",
        _with(extraVolumes=[CA_VOLUME], extraVolumeMounts=[{"name": "ca", "mountPath": "/tmp"}]),
        'operator.extraVolumeMounts[0]: mountPath "/tmp" is mounted twice',
    ),
    (
        "a mount without its volume",
        _with(extraVolumeMounts=[CA_MOUNT]),
        'operator.extraVolumeMounts[0] mounts volume "ca", which neither operator.extraVolumes',
    ),
    (
        "ServiceMonitor interval not a duration",
        _with(metrics={"serviceMonitor": {"enabled": True, "interval": "30 seconds"}}),
        'operator.metrics.serviceMonitor.interval "30 seconds" is not a Prometheus duration',
    ),
    (
        "ServiceMonitor scrapeTimeout not a duration",
        _with(metrics={"serviceMonitor": {"scrapeTimeout": "10"}}),
        'operator.metrics.serviceMonitor.scrapeTimeout "10" is not a Prometheus duration',
    ),
    *(
        (
            f"extraEnv redefines {name}",
            _with(extraEnv=[{"name": "TZ", "value": "UTC"}, {"name": name, "value": value}]),
            f"operator.extraEnv[1] sets {name}, which the chart sets itself",
        )
        for name, value in [
            ("HIKYO_OPERATOR_LEADER_ELECTION", "false"),
            ("HIKYO_OPERATOR_NAMESPACES", "kube-system"),
            ("HIKYO_OPERATOR_DATA_DIR", "/data"),
            ("HIKYO_OPERATOR_SHARD", "0"),
        ]
    ),
]


def test_the_removed_ingress_from_is_refused_with_its_replacement(tmp_path):
    """One peer list for the dashboard and /metrics let any pod it named reach both."""
    values = _with(networkPolicy={"enabled": True, "ingressFrom": [{"podSelector": {}}]})
    assert "ingressFrom" in template(values, tmp_path).stderr  # the schema: not a key
    rendered = template(values, tmp_path, "--skip-schema-validation")
    assert rendered.returncode != 0
    assert (
        "hikyo-operator: operator.networkPolicy.ingressFrom is replaced by networkPolicy.metrics"
        in rendered.stderr
    )


REFUSALS: list[tuple[str, dict[str, Any], str]] = [
    ("operator missing", {}, "operator.enabled is required"),
    ("enabled missing", _without("operator.enabled"), "operator.enabled is required"),
    ("enabled not a boolean", _with(enabled="yes"), "operator.enabled must be true or false"),
    ("namespaces missing", _without("operator.namespaces"), "operator.namespaces is required"),
    ("namespaces not a list", _with(namespaces="payments"), "operator.namespaces must be a list"),
    ("empty namespace", _with(namespaces=["payments", " "]), "operator.namespaces[1] is empty"),
    ("duplicate namespace", _with(namespaces=["a", "a"]), 'operator.namespaces lists "a" twice'),
    (
        "namespace not a DNS label",
        _with(namespaces=["Payments"]),
        'operator.namespaces[0] "Payments" is not a namespace name',
    ),
    (
        "triggerRollouts missing",
        _without("operator.triggerRollouts"),
        "operator.triggerRollouts is required",
    ),
    (
        "designatedServiceAccounts missing",
        _without("operator.designatedServiceAccounts"),
        "operator.designatedServiceAccounts is required",
    ),
    (
        "designatedServiceAccounts not a map",
        _with(designatedServiceAccounts=["payments-api"]),
        "operator.designatedServiceAccounts must be a map",
    ),
    (
        "designated value not a list",
        _with(designatedServiceAccounts={"payments": "payments-api"}),
        "operator.designatedServiceAccounts.payments must be a list",
    ),
    (
        "designated empty name",
        _with(designatedServiceAccounts={"payments": [""]}),
        "operator.designatedServiceAccounts.payments[0] is empty",
    ),
    (
        "designated namespace outside namespaces",
        _with(designatedServiceAccounts={"billing": ["api"]}),
        'operator.designatedServiceAccounts names namespace "billing", which operator.namespaces'
        " does not list",
    ),
    *[
        (
            f"resources.{kind}.{what} missing",
            _without(f"operator.resources.{kind}.{what}"),
            f"operator.resources.{kind}.{what} is required",
        )
        for kind in ("requests", "limits")
        for what in ("cpu", "memory")
    ],
    *[
        (f"{key} not a boolean", _with(**{key: "no"}), f"operator.{key} must be true or false")
        for key in ("statusReporting", "nativeSecretTypes", "allowStampRootReset")
    ],
    ("replicaCount zero", _with(replicaCount=0), "operator.replicaCount must be a positive"),
    (
        "replicaCount not whole",
        _with(replicaCount=1.5),
        "operator.replicaCount must be a positive integer",
    ),
    ("fetchQPS negative", _with(fetchQPS=-1), "operator.fetchQPS must be a positive number"),
    ("fetchQPS a word", _with(fetchQPS="fast"), "operator.fetchQPS must be a positive number"),
    ("fetchQPS too high", _with(fetchQPS=10001), "operator.fetchQPS must be from 0.01 to 10000"),
    ("fetchQPS too low", _with(fetchQPS=0.001), "operator.fetchQPS must be from 0.01 to 10000"),
    (
        "fetchBurst too high",
        _with(fetchBurst=100001),
        "operator.fetchBurst must be from 1 to 100000",
    ),
    (
        "fetchBurst not whole",
        _with(fetchBurst=2.5),
        "operator.fetchBurst must be a positive integer",
    ),
    (
        "scaled.workers zero",
        scaled(workers=0),
        "operator.scaled.workers must be a positive",
    ),
    (
        "scaled.workerPool unknown",
        scaled(workerPool="gevent"),
        "operator.scaled.workerPool must be threads or prefork, got gevent",
    ),
    ("leaderElection false", _with(leaderElection=False), "operator.leaderElection must be true"),
    (
        "embedded with 2 replicas",
        _with(replicaCount=2),
        "operator.replicaCount must be 1 in embedded mode",
    ),
    (
        "digest missing",
        {"operator": {**seed_values()["operator"]}},
        "operator.image.digest must be sha256:<64 hex>",
    ),
    (
        "digest a tag",
        _with(image={"digest": "latest"}),
        "operator.image.digest must be sha256:<64 hex>",
    ),
    (
        "digest too short",
        _with(image={"digest": "sha256:abc"}),
        "operator.image.digest must be sha256:<64 hex>",
    ),
    (
        "shards in embedded mode",
        _with(scaled={"enabled": False, "shards": 2}),
        "operator.scaled.shards must be 1 in embedded mode (got 2)",
    ),
    (
        "too many shards",
        scaled(shards=65),
        "operator.scaled.shards must be from 1 to 64, got 65",
    ),
    (
        "scaled without a database",
        _with(scaled={"enabled": True}),
        "operator.scaled.database.existingSecret is required in scaled mode",
    ),
    (
        "redis Secret is the server's database Secret",
        scaled(redis={"existingSecret": "hikyo-database"}),
        'operator.scaled.redis.existingSecret names "hikyo-database", a Hikyo server Secret',
    ),
    (
        "database Secret is the server's root key",
        scaled(database={"existingSecret": "hikyo-root-key"}),
        'operator.scaled.database.existingSecret names "hikyo-root-key", a Hikyo server Secret',
    ),
    (
        "dashboard Secret is the one database.existingSecret names",
        {**_with(dashboard={"existingSecret": "pg-dsn"}), "database": {"existingSecret": "pg-dsn"}},
        'operator.dashboard.existingSecret names "pg-dsn", a Hikyo server Secret',
    ),
    *FITTING_REFUSALS,
]


@pytest.mark.parametrize(
    ("values", "message"),
    [pytest.param(v, m, id=name) for name, v, m in REFUSALS],
)
def test_refusal_fails_with_a_message_naming_the_value(tmp_path, values, message):
    """S9.4 in the templates: the message holds under --skip-schema-validation too."""
    rendered = template(values, tmp_path, "--skip-schema-validation")
    assert rendered.returncode != 0
    assert f"hikyo-operator: {message}" in rendered.stderr, rendered.stderr


@pytest.mark.parametrize(
    ("values", "message"),
    [pytest.param(v, m, id=name) for name, v, m in REFUSALS],
)
def test_refusal_is_refused_with_the_schema_too(tmp_path, values, message):
    """With values.schema.json (the default), a type error is caught first and names the key."""
    rendered = template(values, tmp_path)
    assert rendered.returncode != 0
    key = message.split(" ", 1)[0].split("[")[0]
    schema_path = "/" + key.replace(".", "/")
    assert (
        f"hikyo-operator: {message}" in rendered.stderr or f"'{schema_path}" in rendered.stderr
    ), rendered.stderr


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param(v, m, id=name)
        for name, v, m in FITTING_REFUSALS
        # helm lint reports a template's fail() as [INFO] and passes: what only the templates
        # can check (names across lists) fails at template and install, not at lint.
        if not name.startswith(("a volume", "a mount", "extraEnv"))
    ],
)
def test_helm_lint_refuses_what_the_schema_can_say(tmp_path, values, message):
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    linted = helm("lint", "--strict", str(CHART), "--values", str(values_file), tmp=tmp_path)
    assert linted.returncode != 0
    key = message.split(" ", 1)[0].split("[")[0]
    assert "'/" + key.replace(".", "/") in linted.stdout + linted.stderr, linted.stdout


def test_extra_env_of_other_names_still_reaches_every_container(tmp_path):
    rendered = render(tmp_path, _with(extraEnv=[{"name": "HTTPS_PROXY", "value": "http://p:3128"}]))
    for pod in pods(rendered):
        for container in pod["spec"]["containers"]:
            if container["name"] in ("operator", "worker"):
                assert container_env(container)["HTTPS_PROXY"] == "http://p:3128"


def test_a_misspelt_operator_key_is_refused_by_the_schema(tmp_path):
    rendered = template(_with(fetchQps=5), tmp_path)
    assert rendered.returncode != 0
    assert "fetchQps" in rendered.stderr


# -- S8.2 RBAC -------------------------------------------------------------------------------


def test_cluster_wide_rules_are_in_the_cluster_role(tmp_path):
    rendered = render(tmp_path, operator_values(namespaces=[], designatedServiceAccounts={}))
    role = one(rendered, "ClusterRole", FULLNAME)
    assert role["metadata"]["annotations"]["hikyo.dev/reach"] == "*"
    assert role["metadata"]["labels"]["app.kubernetes.io/component"] == "hikyo-operator"
    assert grants(role, "hikyo.dev", "hikyoinstances") == {"get", "list", "watch"}
    assert grants(role, "hikyo.dev", "hikyosecrets") == {"get", "list", "watch", "patch"}
    assert grants(role, "hikyo.dev", "hikyosecrets/status") == {"update", "patch"}
    assert grants(role, "hikyo.dev", "hikyosecrets/finalizers") == {"update"}
    assert grants(role, "", "events") == {"create", "patch"}
    assert grants(role, "", "secrets") == {"get", "create", "update", "patch"}
    assert grants(role, "", "serviceaccounts") == {"get"}
    assert grants(role, "apps", "deployments") == {"get", "list", "watch", "patch"}
    named = {(g, r): names for g, r, _, names in rules_of(role) if names}
    assert named[("apiextensions.k8s.io", "customresourcedefinitions")] == (
        "hikyoinstances.hikyo.dev",
        "hikyosecrets.hikyo.dev",
    )
    assert named[("", "namespaces")] == ("kube-system",)
    assert named[("coordination.k8s.io", "leases")] == ("hikyo-operator.hikyo.dev",)
    assert [r["metadata"]["name"] for r in objects(rendered, "Role")] == [
        f"{FULLNAME}-own-namespace"
    ]
    binding = one(rendered, "ClusterRoleBinding", FULLNAME)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": FULLNAME, "namespace": "hikyo"}
    ]


def test_namespaced_rules_are_one_role_per_listed_namespace(tmp_path):
    values = operator_values(namespaces=["payments", "billing"], designatedServiceAccounts={})
    rendered = render(tmp_path, values)
    cluster_role = one(rendered, "ClusterRole", FULLNAME)
    assert cluster_role["metadata"]["annotations"]["hikyo.dev/reach"] == "payments,billing"
    assert grants(cluster_role, "", "secrets") == set()
    assert grants(cluster_role, "hikyo.dev", "hikyosecrets") == set()
    roles = {
        r["metadata"]["namespace"]: r
        for r in objects(rendered, "Role")
        if r["metadata"]["name"] == FULLNAME
    }
    assert set(roles) == {"payments", "billing"}
    assert rules_of(roles["payments"]) == rules_of(roles["billing"])  # identical content
    assert grants(roles["payments"], "", "secrets") == {"get", "create", "update", "patch"}
    bindings = {
        b["metadata"]["namespace"]
        for b in objects(rendered, "RoleBinding")
        if b["metadata"]["name"] == FULLNAME
    }
    assert bindings == {"payments", "billing"}
    own = one(rendered, "Role", f"{FULLNAME}-own-namespace")
    assert own["metadata"]["namespace"] == "hikyo"
    assert sorted(rules_of(own)) == sorted(
        [
            ("coordination.k8s.io", "leases", "get", ()),
            ("coordination.k8s.io", "leases", "create", ()),
            ("coordination.k8s.io", "leases", "update", ()),
            ("", "secrets", "get", ("hikyo-operator-stamp-root",)),
            ("", "secrets", "update", ("hikyo-operator-stamp-root",)),
            ("", "secrets", "create", ()),
        ]
    )


@pytest.mark.parametrize("namespaces", [[], ["payments"]], ids=["cluster-wide", "namespaced"])
def test_no_rule_anywhere_lists_or_watches_secrets(tmp_path, namespaces):
    """S8.2: Secrets are never listed or watched, whatever the flags."""
    values = operator_values(namespaces=namespaces, nativeSecretTypes=True)
    for role in objects(render(tmp_path, values), "Role") + objects(
        render(tmp_path, values), "ClusterRole"
    ):
        assert grants(role, "", "secrets") & {"list", "watch", "deletecollection", "*"} == set()
        assert all("*" not in (g, r, v) for g, r, v, _ in rules_of(role))


@pytest.mark.parametrize("namespaces", [[], ["payments"]], ids=["cluster-wide", "namespaced"])
@pytest.mark.parametrize(
    ("flag", "group", "resource", "verbs"),
    [
        ("nativeSecretTypes", "", "secrets", {"delete"}),
        ("triggerRollouts", "apps", "deployments", {"get", "list", "watch", "patch"}),
        ("triggerRollouts", "apps", "statefulsets", {"get", "list", "watch", "patch"}),
        ("triggerRollouts", "apps", "daemonsets", {"get", "list", "watch", "patch"}),
    ],
)
def test_feature_flags_add_exactly_their_grants(tmp_path, namespaces, flag, group, resource, verbs):
    def granted(on: bool) -> set[str]:
        rendered = render(tmp_path, operator_values(namespaces=namespaces, **{flag: on}))
        return set().union(
            *(
                grants(role, group, resource)
                for role in objects(rendered, "Role") + objects(rendered, "ClusterRole")
            )
        )

    assert granted(True) - granted(False) == verbs
    assert not (granted(False) & verbs)


def test_status_reporting_off_drops_the_kube_system_grant(tmp_path):
    def namespace_rules(on: bool) -> list[Any]:
        role = one(render(tmp_path, operator_values(statusReporting=on)), "ClusterRole", FULLNAME)
        return [rule for rule in rules_of(role) if rule[1] == "namespaces"]

    assert namespace_rules(True) == [("", "namespaces", "get", ("kube-system",))]
    assert namespace_rules(False) == []


@pytest.mark.parametrize("namespaces", [[], ["payments", "ci"]], ids=["cluster-wide", "namespaced"])
def test_token_request_roles_name_exactly_the_designated_accounts(tmp_path, namespaces):
    """S8.2: per namespace of designatedServiceAccounts, never in the ClusterRole."""
    designated = {"payments": ["payments-api", "payments-worker"], "ci": ["builder"]}
    rendered = render(
        tmp_path, operator_values(namespaces=namespaces, designatedServiceAccounts=designated)
    )
    token_roles = {
        r["metadata"]["namespace"]: rules_of(r)
        for r in objects(rendered, "Role")
        if r["metadata"]["name"] == f"{FULLNAME}-token-request"
    }
    assert token_roles == {
        ns: [("", "serviceaccounts/token", "create", tuple(names))]
        for ns, names in designated.items()
    }
    cluster_role = one(rendered, "ClusterRole", FULLNAME)
    assert grants(cluster_role, "", "serviceaccounts/token") == set()


def test_an_empty_designated_list_renders_no_token_role(tmp_path):
    rendered = render(tmp_path, operator_values(designatedServiceAccounts={"payments": []}))
    assert all("token-request" not in r["metadata"]["name"] for r in objects(rendered, "Role"))


# -- S9.2 rendering, S9.3 modes, S8.3 pod security ---------------------------------------------


def test_every_s9_2_variable_is_rendered_from_its_value(tmp_path):
    values = operator_values(
        namespaces=["payments", "ci"],
        designatedServiceAccounts={},
        triggerRollouts=False,
        nativeSecretTypes=True,
        statusReporting=False,
        fetchQPS=2.5,
        fetchBurst=7,
        allowStampRootReset=True,
    )
    container = one(render(tmp_path, values), "Deployment", FULLNAME)["spec"]["template"]["spec"][
        "containers"
    ][0]
    env = container_env(container)
    assert set(S92_ENV) <= set(env)
    assert env["HIKYO_OPERATOR_NAMESPACES"] == "payments,ci"
    assert env["HIKYO_OPERATOR_TRIGGER_ROLLOUTS"] == "false"
    assert env["HIKYO_OPERATOR_NATIVE_SECRET_TYPES"] == "true"
    assert env["HIKYO_OPERATOR_STATUS_REPORTING"] == "false"
    assert env["HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS"] == "{}"  # S9.2: `{}` included
    assert env["HIKYO_OPERATOR_FETCH_QPS"] == "2.5"
    assert env["HIKYO_OPERATOR_FETCH_BURST"] == "7"
    assert env["HIKYO_OPERATOR_ALLOW_STAMP_ROOT_RESET"] == "true"
    downward = {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["HIKYO_OPERATOR_NAMESPACE"] == downward and env["POD_NAMESPACE"] == downward
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert container["args"] == ["controlplane", "run_operator"]


def test_rendered_env_is_accepted_by_the_operators_settings(tmp_path):
    """The chart's strings parse under S8.1's rules (what the pod would boot with)."""
    from workers.engine.settings import operator_settings_from

    values = operator_values(namespaces=["payments"], fetchQPS=2.5, fetchBurst=7)
    container = one(render(tmp_path, values), "Deployment", FULLNAME)["spec"]["template"]["spec"][
        "containers"
    ][0]
    env = {k: v for k, v in container_env(container).items() if isinstance(v, str)}
    env["HIKYO_OPERATOR_NAMESPACE"] = "hikyo"
    settings = operator_settings_from(env)
    assert settings.namespaces == ("payments",)
    assert settings.designated_service_accounts == {"payments": ("payments-api",)}
    assert (settings.fetch_qps, settings.fetch_burst) == (2.5, 7)


def test_scaled_mode_renders_replicas_workers_and_a_bundled_redis(tmp_path):
    rendered = render(tmp_path, scaled(workers=3), "--set", "operator.replicaCount=2")
    operator = one(rendered, "Deployment", FULLNAME)
    worker = one(rendered, "Deployment", f"{FULLNAME}-worker")
    redis = one(rendered, "Deployment", f"{FULLNAME}-redis")
    assert operator["spec"]["replicas"] == 2 and "strategy" not in operator["spec"]
    assert worker["spec"]["replicas"] == 3
    for deployment in (operator, worker):
        env = container_env(deployment["spec"]["template"]["spec"]["containers"][0])
        assert env["HIKYO_OPERATOR_REDIS_URL"] == {
            "secretKeyRef": {"name": f"{FULLNAME}-redis", "key": "redis-url"}
        }
        assert env["HIKYO_OPERATOR_DATABASE_URL"] == {
            "secretKeyRef": {"name": "observations-dsn", "key": "database-url"}
        }
        assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == FULLNAME
        # SIGTERM starts a warm stop; SIGKILL must not come before the longest run has ended.
        grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert grace >= DEADLINE_SECONDS + WRITE_GRACE_SECONDS
    args = worker["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:4] == ["celery", "-A", "workers.celery_app", "worker"]
    # One process per pod by default: its reconciles are threads (issue 13, P4).
    assert args[args.index("--pool") + 1] == "threads"
    assert args[args.index("--concurrency") + 1] == "2"
    redis_pod = redis["spec"]["template"]["spec"]
    assert redis_pod["automountServiceAccountToken"] is False
    probes = redis_pod["containers"][0]
    assert "tcpSocket" in probes["readinessProbe"] and "tcpSocket" in probes["livenessProbe"]
    password = one(rendered, "Secret", f"{FULLNAME}-redis")
    assert set(password["data"]) == {"password", "redis-url"}


def test_a_prefork_pool_is_rendered_when_asked_for(tmp_path):
    rendered = render(tmp_path, scaled(workerPool="prefork", workerConcurrency=3))
    worker = one(rendered, "Deployment", f"{FULLNAME}-worker")
    args = worker["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--pool") + 1] == "prefork"
    assert args[args.index("--concurrency") + 1] == "3"


def test_scaled_mode_with_an_existing_redis_secret_bundles_none(tmp_path):
    rendered = render(tmp_path, scaled(redis={"existingSecret": "my-redis", "key": "url"}))
    assert [d["metadata"]["name"] for d in objects(rendered, "Deployment")] == [
        FULLNAME,
        f"{FULLNAME}-worker",
    ]
    env = container_env(
        one(rendered, "Deployment", FULLNAME)["spec"]["template"]["spec"]["containers"][0]
    )
    assert env["HIKYO_OPERATOR_REDIS_URL"] == {"secretKeyRef": {"name": "my-redis", "key": "url"}}


@pytest.mark.parametrize("mode", ["embedded", "scaled"])
def test_every_pod_runs_under_s8_3(tmp_path, mode):
    values = operator_values() if mode == "embedded" else scaled()
    rendered = render(tmp_path, values)
    assert pods(rendered)
    for pod in pods(rendered):
        security = pod["spec"]["securityContext"]
        assert security["runAsNonRoot"] is True
        assert (security["runAsUser"], security["runAsGroup"]) == (65532, 65532)
        assert security["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in pod["spec"]["containers"]:
            assert container["securityContext"] == {
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"]},
            }
            assert container["resources"]["limits"] and container["resources"]["requests"]


@pytest.mark.parametrize("mode", ["embedded", "scaled"])
def test_operator_pods_probe_serve_metrics_and_write_only_to_empty_dirs(tmp_path, mode):
    rendered = render(tmp_path, operator_values() if mode == "embedded" else scaled())
    operator = one(rendered, "Deployment", FULLNAME)["spec"]["template"]["spec"]
    container = operator["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8081, "metrics": 8080}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert set(mounts) == {"/tmp", "/var/lib/hikyo-operator"}
    volumes = {v["name"]: v for v in operator["volumes"]}
    assert all("emptyDir" in volumes[name] for name in mounts.values())
    env = container_env(container)
    assert env["HIKYO_OPERATOR_DATA_DIR"] == "/var/lib/hikyo-operator"


def test_no_operator_object_references_a_server_secret_or_templates_the_stamp_root(tmp_path):
    """S9.2 / S9.3: no hikyo-database, hikyo-root-key or the Secrets the server keys name; and
    no stamp root."""
    values = copy.deepcopy(scaled())
    values.update({k: v for k, v in seed_values().items() if k != "operator"})
    values["database"]["existingSecret"] = "server-dsn"
    values["rootKey"]["existingSecret"] = "server-key"
    rendered = render(tmp_path, values)
    text = yaml.safe_dump_all(rendered)
    for name in ("hikyo-database", "hikyo-root-key", "server-dsn", "server-key"):
        assert name not in text
    assert all(
        s["metadata"]["name"] != "hikyo-operator-stamp-root" for s in objects(rendered, "Secret")
    )


def test_dashboard_service_and_optional_service_monitor(tmp_path):
    rendered = render(tmp_path, operator_values())
    service = one(rendered, "Service", FULLNAME)
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {
        "http": 8081,
        "metrics": 8080,
    }
    assert objects(rendered, "ServiceMonitor") == []
    monitored = render(
        tmp_path,
        operator_values(metrics={"serviceMonitor": {"enabled": True, "labels": {"team": "a"}}}),
    )
    monitor = one(monitored, "ServiceMonitor", FULLNAME)
    assert monitor["metadata"]["labels"]["team"] == "a"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"


def test_allowed_hosts_cover_the_service_and_the_configured_names(tmp_path):
    values = operator_values(dashboard={"hosts": ["hikyo.example.com"], "https": True})
    container = one(render(tmp_path, values), "Deployment", FULLNAME)["spec"]["template"]["spec"][
        "containers"
    ][0]
    env = container_env(container)
    hosts = env["DJANGO_ALLOWED_HOSTS"].split(",")
    assert {FULLNAME, f"{FULLNAME}.hikyo.svc", "localhost", "hikyo.example.com"} <= set(hosts)
    assert env["HIKYO_OPERATOR_HTTPS"] == "true"
    assert env["DJANGO_SECRET_KEY"] == {
        "secretKeyRef": {"name": f"{FULLNAME}-dashboard", "key": "secret-key"}
    }


def test_placement_and_pull_secrets_reach_every_pod(tmp_path):
    values = scaled(workers=1)
    values["operator"].update(
        nodeSelector={"pool": "system"},
        tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        imagePullSecrets=[{"name": "registry"}],
        podLabels={"team": "platform"},
    )
    rendered = render(tmp_path, values)
    assert len(pods(rendered)) == 3  # operator, worker, bundled Redis
    for pod in pods(rendered):
        assert pod["spec"]["nodeSelector"] == {"pool": "system"}
        assert pod["spec"]["tolerations"][0]["key"] == "dedicated"
        assert pod["spec"]["imagePullSecrets"] == [{"name": "registry"}]
    operator_pod = one(rendered, "Deployment", FULLNAME)["spec"]["template"]
    assert operator_pod["metadata"]["labels"]["team"] == "platform"


def test_each_shard_gets_its_own_leader_deployment_lease_and_metrics(tmp_path):
    """S4.1.8: shard 0 keeps the unsharded Deployment (name, selector, Service, Lease); each
    further shard has its own Deployment, PodDisruptionBudget and Lease grant, and its /metrics
    behind a headless Service; every leader is told its shard. Workers are shared."""
    unsharded = render(tmp_path, scaled())
    rendered = render(
        tmp_path, scaled(shards=3), "--set", "operator.podDisruptionBudget.enabled=true"
    )
    leaders = [one(rendered, "Deployment", FULLNAME)] + [
        one(rendered, "Deployment", f"{FULLNAME}-shard-{k}") for k in (1, 2)
    ]
    assert len(objects(rendered, "Deployment")) == len(objects(unsharded, "Deployment")) + 2
    assert (
        leaders[0]["spec"]["selector"] == one(unsharded, "Deployment", FULLNAME)["spec"]["selector"]
    )
    selectors = [json.dumps(d["spec"]["selector"], sort_keys=True) for d in leaders]
    assert len(set(selectors)) == 3  # no two Deployments own one pod
    for k, leader in enumerate(leaders):
        env = container_env(leader["spec"]["template"]["spec"]["containers"][0])
        assert (env["HIKYO_OPERATOR_SHARDS"], env["HIKYO_OPERATOR_SHARD"]) == ("3", str(k))
    worker = one(rendered, "Deployment", f"{FULLNAME}-worker")
    assert "HIKYO_OPERATOR_SHARD" not in container_env(
        worker["spec"]["template"]["spec"]["containers"][0]
    )
    assert "HIKYO_OPERATOR_SHARD" not in container_env(
        one(unsharded, "Deployment", FULLNAME)["spec"]["template"]["spec"]["containers"][0]
    )
    metrics = one(rendered, "Service", f"{FULLNAME}-shard-metrics")
    labels = [d["spec"]["template"]["metadata"]["labels"] for d in leaders]
    chosen = metrics["spec"]["selector"].items()
    assert [chosen <= pod.items() for pod in labels] == [False, True, True]  # 0: the main Service
    budgets = {b["metadata"]["name"] for b in objects(rendered, "PodDisruptionBudget")}
    assert {FULLNAME, f"{FULLNAME}-shard-1", f"{FULLNAME}-shard-2"} <= budgets
    cluster_role = one(rendered, "ClusterRole", FULLNAME)
    lease_names = [n for g, r, _, names in rules_of(cluster_role) if r == "leases" for n in names]
    assert lease_names == [
        "hikyo-operator.hikyo.dev",
        "hikyo-operator.hikyo.dev-shard-1",
        "hikyo-operator.hikyo.dev-shard-2",
    ]
