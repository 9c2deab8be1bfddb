"""The values an admin fits the chart to a cluster with (issue 35 item 7): each renders what it
says, the schema types each (and stays strict), and the defaults render none of it, so the
seed's values render as before. The server-side dry run of the PodDisruptionBudget and the
NetworkPolicy is tests/integration/test_chart_install.py's MATRIX."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.support.helm import CHART, container_env, helm, objects, one, operator_values
from tests.support.helm import template as helm_template

from .test_chart_render import FULLNAME, pods, render, scaled

SPREAD = {
    "maxSkew": 1,
    "topologyKey": "topology.kubernetes.io/zone",
    "whenUnsatisfiable": "DoNotSchedule",
}
NEW_KINDS = ("PodDisruptionBudget", "NetworkPolicy")


def _fitted(base: dict[str, Any] | None = None, **operator: Any) -> dict[str, Any]:
    values = base or operator_values()
    values["operator"].update(operator)
    return values


def _containers(rendered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for pod in pods(rendered) for c in pod["spec"]["containers"]]


def _operator_containers(rendered):
    return [c for c in _containers(rendered) if c["name"] in ("operator", "worker")]


def test_priority_class_and_topology_spread_reach_every_pod(tmp_path):
    rendered = render(
        tmp_path,
        _fitted(scaled(), priorityClassName="system-critical", topologySpreadConstraints=[SPREAD]),
    )
    assert len(pods(rendered)) == 3  # operator, worker, bundled Redis
    for pod in pods(rendered):
        spec = pod["spec"]
        assert spec["priorityClassName"] == "system-critical"
        (constraint,) = spec["topologySpreadConstraints"]
        # No labelSelector given: each pod spreads against its own Deployment's pods.
        own = {
            k: v
            for k, v in pod["metadata"]["labels"].items()
            if k.startswith("app.kubernetes.io/")
            and k not in ("app.kubernetes.io/version", "app.kubernetes.io/managed-by")
        }
        assert constraint == {**SPREAD, "labelSelector": {"matchLabels": own}}


def test_a_topology_spread_labelselector_given_is_kept(tmp_path):
    given = {**SPREAD, "labelSelector": {"matchLabels": {"tier": "ops"}}}
    rendered = render(tmp_path, _fitted(topologySpreadConstraints=[given]))
    assert pods(rendered)[0]["spec"]["topologySpreadConstraints"] == [given]


def test_extra_env_volumes_and_mounts_reach_the_operator_and_worker_containers(tmp_path):
    rendered = render(
        tmp_path,
        _fitted(
            scaled(),
            extraEnv=[{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
            extraVolumes=[{"name": "ca", "configMap": {"name": "corporate-ca"}}],
            extraVolumeMounts=[{"name": "ca", "mountPath": "/etc/ssl/corporate", "readOnly": True}],
        ),
    )
    containers = _operator_containers(rendered)
    assert {c["name"] for c in containers} == {"operator", "worker"}
    for container in containers:
        assert container_env(container)["HTTPS_PROXY"] == "http://proxy:3128"
        assert {"name": "ca", "mountPath": "/etc/ssl/corporate", "readOnly": True} in container[
            "volumeMounts"
        ]
    for deployment in objects(rendered, "Deployment"):
        volumes = deployment["spec"]["template"]["spec"]["volumes"]
        has_ca = {"name": "ca", "configMap": {"name": "corporate-ca"}} in volumes
        assert has_ca == (deployment["metadata"]["name"] != f"{FULLNAME}-redis")


def test_service_account_annotations(tmp_path):
    annotations = {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/hikyo"}
    rendered = render(tmp_path, _fitted(serviceAccount={"annotations": annotations}))
    assert one(rendered, "ServiceAccount", FULLNAME)["metadata"]["annotations"] == annotations


def test_name_overrides_rename_every_object_and_keep_selectors_matching(tmp_path):
    rendered = render(tmp_path, _fitted(scaled(), nameOverride="secrets-sync"))
    names = {d["metadata"]["name"] for d in rendered if d["kind"] != "ClusterRole"}
    assert "hikyo-secrets-sync" in names and f"{FULLNAME}" not in names
    for deployment in objects(rendered, "Deployment"):
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selector["app.kubernetes.io/name"] == "secrets-sync"
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items()
    full = render(tmp_path, _fitted(fullnameOverride="vault-bridge"))
    assert one(full, "Deployment", "vault-bridge")
    assert one(full, "Service", "vault-bridge")
    assert one(full, "Secret", "vault-bridge-dashboard")


def test_common_labels_are_on_every_object_and_in_no_selector(tmp_path):
    rendered = render(tmp_path, _fitted(scaled(), commonLabels={"cost-center": "platform"}))
    for document in rendered:
        assert document["metadata"]["labels"]["cost-center"] == "platform", document["kind"]
    for deployment in objects(rendered, "Deployment"):
        assert "cost-center" not in deployment["spec"]["selector"]["matchLabels"]


@pytest.mark.parametrize("limit", [0, 3])
def test_revision_history_limit_on_every_deployment(tmp_path, limit):
    rendered = render(tmp_path, _fitted(scaled(), revisionHistoryLimit=limit))
    assert [d["spec"]["revisionHistoryLimit"] for d in objects(rendered, "Deployment")] == [
        limit
    ] * 3


def test_service_monitor_namespace_scrape_timeout_and_relabelings(tmp_path):
    relabel = [
        {
            "action": "replace",
            "sourceLabels": ["__meta_kubernetes_pod_node_name"],
            "targetLabel": "node",
        }
    ]
    rendered = render(
        tmp_path,
        operator_values(
            metrics={
                "serviceMonitor": {
                    "enabled": True,
                    "namespace": "monitoring",
                    "scrapeTimeout": "10s",
                    "relabelings": relabel,
                }
            }
        ),
    )
    monitor = one(rendered, "ServiceMonitor", FULLNAME)
    assert monitor["metadata"]["namespace"] == "monitoring"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["hikyo"]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["scrapeTimeout"] == "10s" and endpoint["relabelings"] == relabel
    assert "metricRelabelings" not in endpoint


def test_service_monitor_honours_the_metrics_labels_by_default(tmp_path):
    """Issue 50: hikyo_operator_namespace_forbidden's `namespace` (the refused namespace) would
    otherwise be stored as exported_namespace; both settings are the user's to change."""
    drop = [{"action": "drop", "sourceLabels": ["__name__"], "regex": "python_gc_.*"}]
    monitor = {"enabled": True}
    (endpoint,) = one(
        render(tmp_path, operator_values(metrics={"serviceMonitor": monitor})),
        "ServiceMonitor",
        FULLNAME,
    )["spec"]["endpoints"]
    assert endpoint["honorLabels"] is True and "metricRelabelings" not in endpoint
    monitor.update(honorLabels=False, metricRelabelings=drop)
    (endpoint,) = one(
        render(tmp_path, operator_values(metrics={"serviceMonitor": monitor})),
        "ServiceMonitor",
        FULLNAME,
    )["spec"]["endpoints"]
    assert endpoint["honorLabels"] is False and endpoint["metricRelabelings"] == drop


@pytest.mark.parametrize("mode", ["embedded", "scaled"])
def test_pod_disruption_budgets_select_each_deployments_pods(tmp_path, mode):
    base = scaled() if mode == "scaled" else operator_values()
    rendered = render(tmp_path, _fitted(base, podDisruptionBudget={"enabled": True}))
    budgets = objects(rendered, "PodDisruptionBudget")
    operators = [
        d for d in objects(rendered, "Deployment") if not d["metadata"]["name"].endswith("-redis")
    ]
    assert len(budgets) == len(operators) == (2 if mode == "scaled" else 1)
    for budget, deployment in zip(budgets, operators, strict=True):
        assert budget["spec"]["maxUnavailable"] == 1 and "minAvailable" not in budget["spec"]
        assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    with_min = render(
        tmp_path,
        _fitted(
            scaled(), replicaCount=2, podDisruptionBudget={"enabled": True, "minAvailable": "50%"}
        ),
    )
    for budget in objects(with_min, "PodDisruptionBudget"):
        assert budget["spec"]["minAvailable"] == "50%" and "maxUnavailable" not in budget["spec"]


@pytest.mark.parametrize("mode", ["embedded", "scaled"])
def test_a_pod_disruption_budget_of_max_unavailable_zero_renders_zero(tmp_path, mode):
    """sprig's `default` takes 0 for empty: it rendered 1, letting drains evict."""
    base = scaled() if mode == "scaled" else operator_values()
    rendered = render(
        tmp_path, _fitted(base, podDisruptionBudget={"enabled": True, "maxUnavailable": 0})
    )
    budgets = objects(rendered, "PodDisruptionBudget")
    assert budgets and [b["spec"]["maxUnavailable"] for b in budgets] == [0] * len(budgets)


@pytest.mark.parametrize(
    ("base", "fitting", "message"),
    [
        (
            operator_values,
            {"minAvailable": 1},
            "operator.podDisruptionBudget.minAvailable 1 keeps all 1 run_operator pod(s) up",
        ),
        (
            operator_values,
            {"minAvailable": "50%"},
            "operator.podDisruptionBudget.minAvailable 50% keeps all 1 run_operator pod(s) up",
        ),
        (
            lambda: _fitted(scaled(), replicaCount=3),  # 2 of 3 leaders is fine, of 2 workers not
            {"minAvailable": 2},
            "operator.podDisruptionBudget.minAvailable 2 keeps all 2 worker pod(s) up",
        ),
    ],
)
def test_a_min_available_that_blocks_every_drain_is_refused(tmp_path, base, fitting, message):
    values = _fitted(base(), podDisruptionBudget={"enabled": True, **fitting})
    for extra in ((), ("--skip-schema-validation",)):
        rendered = helm_template(values, tmp_path, *extra)
        assert rendered.returncode != 0
        assert f"hikyo-operator: {message}" in rendered.stderr, rendered.stderr
        assert "every drain would be blocked" in rendered.stderr


def _egress_ports(policy: dict[str, Any]) -> list[set[int]]:
    return [{p["port"] for p in rule["ports"]} for rule in policy["spec"]["egress"]]


def _from(policy: dict[str, Any], port: int) -> list[list[dict[str, Any]]]:
    """The peers of each ingress rule that opens ``port``."""
    return [
        rule["from"]
        for rule in policy["spec"]["ingress"]
        if port in {p["port"] for p in rule["ports"]}
    ]


PROMETHEUS = [
    {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }
]


def test_network_policy_of_the_embedded_operator(tmp_path):
    ingress = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress"}}}]
    rendered = render(
        tmp_path,
        _fitted(
            networkPolicy={
                "enabled": True,
                "dashboard": {"from": ingress},
                "apiServer": {"ports": [6443], "cidrs": ["10.0.0.1/32"]},
                "hikyoInstances": {"ports": [443, 8443]},
            }
        ),
    )
    (policy,) = objects(rendered, "NetworkPolicy")
    deployment = one(rendered, "Deployment", FULLNAME)
    assert policy["spec"]["podSelector"] == deployment["spec"]["selector"]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert _from(policy, 8080) == [PROMETHEUS] and _from(policy, 8081) == [ingress]
    assert _egress_ports(policy) == [{53}, {6443}, {443, 8443}]  # DNS, apiserver, instances
    assert policy["spec"]["egress"][1]["to"] == [{"ipBlock": {"cidr": "10.0.0.1/32"}}]
    assert "to" not in policy["spec"]["egress"][2]  # instances anywhere on their ports


def test_network_policy_defaults_are_least_privilege(tmp_path):
    """Issue 50: with no peers given, /metrics is open to Prometheus's pods only (in the
    ServiceMonitor's namespace when it has one) and the dashboard to nobody; every ingress rule
    names its peers (a rule without `from` would admit every pod)."""
    rendered = render(tmp_path, _fitted(scaled(shards=2), networkPolicy={"enabled": True}))
    for policy in objects(rendered, "NetworkPolicy"):
        assert all(rule.get("from") for rule in policy["spec"].get("ingress", []))
        assert _from(policy, 8081) == []
        if not policy["metadata"]["name"].endswith("-redis"):
            assert _from(policy, 8080) == [PROMETHEUS]
    elsewhere = render(
        tmp_path,
        _fitted(
            networkPolicy={"enabled": True},
            metrics={"serviceMonitor": {"enabled": True, "namespace": "observability"}},
        ),
    )
    (peer,) = _from(one(elsewhere, "NetworkPolicy", FULLNAME), 8080)[0]
    assert peer["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "observability"
    }
    scrapers = [{"podSelector": {"matchLabels": {"app": "vmagent"}}}]
    given = render(
        tmp_path, _fitted(networkPolicy={"enabled": True, "metrics": {"from": scrapers}})
    )
    assert _from(one(given, "NetworkPolicy", FULLNAME), 8080) == [scrapers]


def test_network_policy_covers_every_shard_leader_both_ways(tmp_path):
    """Issue 50: with shards >= 2 each shard leader's pods are restricted like shard 0's, and
    the bundled Redis admits them (their hikyo:sKofN keys are there)."""
    rendered = render(tmp_path, _fitted(scaled(shards=3), networkPolicy={"enabled": True}))
    policies = {p["metadata"]["name"]: p for p in objects(rendered, "NetworkPolicy")}
    redis = one(rendered, "Deployment", f"{FULLNAME}-redis")
    redis_from = policies[f"{FULLNAME}-redis"]["spec"]["ingress"][0]["from"]
    for deployment in objects(rendered, "Deployment"):
        if deployment is redis:
            continue
        selector = deployment_selector(deployment)
        (policy,) = [p for p in policies.values() if p["spec"]["podSelector"] == selector]
        assert policy["spec"]["egress"][-1]["to"] == [{"podSelector": deployment_selector(redis)}]
        assert {"podSelector": selector} in redis_from, deployment["metadata"]["name"]
    assert len(redis_from) == 4  # shard 0, shards 1 and 2, the workers
    assert set(policies) == {
        FULLNAME,
        f"{FULLNAME}-shard-1",
        f"{FULLNAME}-shard-2",
        f"{FULLNAME}-worker",
        f"{FULLNAME}-redis",
    }


def test_network_policy_of_scaled_mode_adds_redis_and_postgresql(tmp_path):
    rendered = render(tmp_path, _fitted(scaled(), networkPolicy={"enabled": True}))
    policies = {p["metadata"]["name"]: p for p in objects(rendered, "NetworkPolicy")}
    assert set(policies) == {FULLNAME, f"{FULLNAME}-worker", f"{FULLNAME}-redis"}
    for name in (FULLNAME, f"{FULLNAME}-worker"):
        assert _egress_ports(policies[name]) == [{53}, {443, 6443}, {443}, {5432}, {6379}]
    assert {p["port"] for p in policies[f"{FULLNAME}-worker"]["spec"]["ingress"][0]["ports"]} == {
        8080
    }
    redis_rule = policies[FULLNAME]["spec"]["egress"][-1]
    redis = one(rendered, "Deployment", f"{FULLNAME}-redis")
    assert redis_rule["to"] == [{"podSelector": deployment_selector(redis)}]
    redis_policy = policies[f"{FULLNAME}-redis"]["spec"]
    assert redis_policy["egress"] == [] and len(redis_policy["ingress"][0]["from"]) == 2
    existing = render(
        tmp_path,
        _fitted(
            scaled(redis={"existingSecret": "redis"}),
            networkPolicy={"enabled": True, "redis": {"port": 6380, "cidrs": ["10.9.0.0/16"]}},
        ),
    )
    policy = one(existing, "NetworkPolicy", FULLNAME)
    assert policy["spec"]["egress"][-1] == {
        "ports": [{"port": 6380, "protocol": "TCP"}],
        "to": [{"ipBlock": {"cidr": "10.9.0.0/16"}}],
    }
    assert objects(existing, "NetworkPolicy") and not [
        p for p in objects(existing, "NetworkPolicy") if p["metadata"]["name"].endswith("-redis")
    ]


def deployment_selector(deployment: dict[str, Any]) -> dict[str, Any]:
    return deployment["spec"]["selector"]


def test_the_bundled_redis_is_pinned_by_digest(tmp_path):
    redis = one(render(tmp_path, scaled()), "Deployment", f"{FULLNAME}-redis")
    image = redis["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.startswith("docker.io/library/redis:") and "@sha256:" in image
    assert len(image.split("@sha256:")[1]) == 64


def test_defaults_render_none_of_the_fitting(tmp_path):
    """The seed's values (and any values file written before these keys) render as before."""
    for values in (operator_values(), scaled()):
        rendered = render(tmp_path, values)
        assert [d for d in rendered if d["kind"] in NEW_KINDS] == []
        assert "annotations" not in one(rendered, "ServiceAccount", FULLNAME)["metadata"]
        for deployment in objects(rendered, "Deployment"):
            assert "revisionHistoryLimit" not in deployment["spec"]
            spec = deployment["spec"]["template"]["spec"]
            assert "priorityClassName" not in spec and "topologySpreadConstraints" not in spec
            assert [v["name"] for v in spec["volumes"]] in (["tmp", "data"], ["data"])


@pytest.mark.parametrize(
    ("operator", "message"),
    [
        ({"priorityClassName": 5}, "priorityClassName"),
        ({"topologySpreadConstraints": [{"maxSkew": 1}]}, "topologySpreadConstraints"),
        ({"extraEnv": [{"value": "x"}]}, "extraEnv"),
        ({"extraVolumeMounts": [{"name": "ca"}]}, "extraVolumeMounts"),
        ({"commonLabels": {"a": 1}}, "commonLabels"),
        ({"nameOverride": "Not_A_Name"}, "nameOverride"),
        ({"revisionHistoryLimit": -1}, "revisionHistoryLimit"),
        ({"serviceAccount": {"name": "x"}}, "serviceAccount"),
        ({"podDisruptionBudget": {"maxUnavailable": "half"}}, "maxUnavailable"),
        ({"networkPolicy": {"egress": []}}, "networkPolicy"),
        ({"networkPolicy": {"apiServer": {"ports": [70000]}}}, "ports"),
        ({"metrics": {"serviceMonitor": {"relabelings": "drop"}}}, "relabelings"),
    ],
)
def test_the_schema_types_each_new_value(tmp_path, operator, message):
    rendered = helm_template(_fitted(**operator), tmp_path)
    assert rendered.returncode != 0
    assert "values don't meet the specifications of the schema" in rendered.stderr
    assert message in rendered.stderr


def test_helm_lint_is_clean_with_every_optional_object(tmp_path):
    values = _fitted(
        scaled(),
        podDisruptionBudget={"enabled": True},
        networkPolicy={"enabled": True},
        grafanaDashboard={"enabled": True},
        prometheusRule={"enabled": True},
        metrics={"serviceMonitor": {"enabled": True, "namespace": "monitoring"}},
    )
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    linted = helm("lint", "--strict", str(CHART), "--values", str(values_file), tmp=tmp_path)
    assert linted.returncode == 0, linted.stdout + linted.stderr
    assert "[WARNING]" not in linted.stdout and "[ERROR]" not in linted.stdout
