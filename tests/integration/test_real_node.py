"""Issue 50: the chart's pods on a real node (``python -m localcluster up --node``: containerd,
kubelet, kube-scheduler, kube-proxy), installed with helm as a user would, and a delivered value
reaching a running application through envFrom and a mounted file.

Opt-in (``pytest -m node``, run by CI's image lane once the operator image is built): it needs
root, containerd, runc, the CNI plugins, the node binaries (tools/build-node.sh) and the operator
image archive (HIKYO_IMAGE_ARCHIVE, tools/build-image.sh). A missing part fails the test with
what to do, unless HIKYO_SKIP_NODE=1 says to skip. The figures it measures are printed (the
publish-to-new-pod times), never asserted.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import yaml
from kubernetes import client, watch

from localcluster.node_layout import NODE_NAME
from tests.support.helm import CHART, helm
from tests.support.prometheus import ALERTS, Prometheus, running_prometheus
from tests.support.real_node import (
    APPS,
    NAMESPACE,
    RELEASE,
    TOKEN,
    Node,
    application,
    available,
    deliver,
    force_sync,
    install_embedded,
    lease,
    operator_pods,
    rolled_out,
    running_node,
    serving,
    wait,
)
from tests.support.world import canary

pytestmark = pytest.mark.node


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    with running_node(tmp_path_factory.mktemp("node")) as started:
        yield started


def test_the_chart_runs_as_pods_under_restricted_pod_security(node: Node) -> None:
    """helm install with the seed's values and the local image's digest, into a namespace that
    enforces the restricted Pod Security level: the operator's pod becomes Ready through its
    own probes, as the chart's ServiceAccount, and leads."""
    installed = install_embedded(node)
    assert installed.returncode == 0, installed.stderr[-2000:]
    pods = node.core.list_namespaced_pod(NAMESPACE).items
    assert len(pods) == 1
    pod = pods[0]
    assert pod.status.phase == "Running"
    assert all(c.ready for c in pod.status.container_statuses)
    assert pod.spec.service_account_name == f"{RELEASE}-hikyo-operator"
    assert pod.spec.node_name == "hikyo-node"
    leases = client.CoordinationV1Api(node.api).list_namespaced_lease(NAMESPACE).items
    assert [lease.spec.holder_identity.startswith(pod.metadata.name) for lease in leases] == [True]


def _measure_change(node: Node, value: str, started: float) -> dict[str, float]:
    """Seconds from ``started`` to: the first restarted pod printing ``value`` from its
    environment, the whole rollout done, and the running unrestarted pod's file changing."""
    found: dict[str, float] = {}
    deadline = started + 240
    while len(found) < 3:
        assert time.monotonic() < deadline, f"not all of the change seen: {sorted(found)}"
        # Each time is read when its check has seen it: the checks read the apiserver and pod
        # logs, so one time for the whole pass could put the rollout before its first pod.
        if "first new pod" not in found and serving(node, "app", f"env {value}"):
            found["first new pod"] = time.monotonic() - started
        if "rollout done" not in found and rolled_out(node, "app", f"env {value}"):
            found["rollout done"] = time.monotonic() - started
            found.setdefault("first new pod", found["rollout done"])  # its pods serve it
        if "mounted file" not in found and serving(node, "app-mounted", f"file {value}"):
            found["mounted file"] = time.monotonic() - started
        time.sleep(0.5)
    return {what: found[what] for what in ("first new pod", "rollout done", "mounted file")}


def test_a_published_value_reaches_the_running_application(
    node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    """Publish → the operator patches the stamp → Kubernetes rolls the opted-in Deployment →
    its new pod prints the new value from envFrom; the unrestarted pod reads it from its
    mounted file after the kubelet's sync. Then the same after a forced resync."""
    first, second, third = canary("nodefirst"), canary("nodesecond"), canary("nodethird")
    deliver(node, first)
    wait("app prints the first value", lambda: rolled_out(node, "app", f"env {first}"), 180)
    mounted = wait("app-mounted has the first value",
                    lambda: serving(node, "app-mounted", f"file {first}"), 180)  # fmt: skip

    started = time.monotonic()
    node.publish(second)
    by_resync = _measure_change(node, second, started)
    assert serving(node, "app-mounted", f"file {second}") == mounted  # the same pod, no restart

    started = time.monotonic()
    node.publish(third)
    force_sync(node, "after-third")
    by_force = _measure_change(node, third, started)
    for how, figures in (("resyncInterval 30s", by_resync), ("forced resync", by_force)):
        shown = ", ".join(f"{what} {seconds:.1f} s" for what, seconds in figures.items())
        with capsys.disabled():  # the figures, in the lane's output
            print(f"\nreal node, publish → ({how}): {shown}")

    # No value in any pod's output but the applications' own lines the test reads.
    operator_pods = node.core.list_namespaced_pod(NAMESPACE).items
    operator_logs = "".join(node.logs(NAMESPACE, p.metadata.name) for p in operator_pods)
    assert operator_logs
    for value in (first, second, third, TOKEN):
        assert value not in operator_logs
    for pod in node.pods(APPS, "app") + node.pods(APPS, "app-mounted"):
        for line in node.logs(APPS, pod.metadata.name).splitlines():
            assert line.split(" ", 1)[0] in ("env", "file"), "the application prints nothing else"


def _stalled(node: Node) -> str | None:
    """The CR's Rollout condition as "Status/Reason: message", None when it has none."""
    cr = node.custom.get_namespaced_custom_object(
        "hikyo.dev", "v1alpha1", APPS, "hikyosecrets", "app"
    )
    for condition in cr.get("status", {}).get("conditions", []):
        if condition["type"] == "Rollout":
            return f"{condition['status']}/{condition['reason']}: {condition['message']}"
    return None


def test_a_rollout_that_cannot_become_ready_is_stalled_until_it_is_fixed(node: Node) -> None:
    """S6.5 over real ReplicaSets: a value the application cannot start with rolls an
    opted-in Deployment whose new pods exit at once; it misses its progress deadline and the
    CR says Rollout=False/Stalled naming it. A good value rolls it again and the condition
    goes."""
    fragile = application("fragile", opted_in=True)
    # A pod that runs for a moment counts as available unless it must stay ready a while: with
    # none, a crash-looping rollout completes and never misses its deadline.
    fragile.spec.min_ready_seconds = 5
    fragile.spec.progress_deadline_seconds = 15
    fragile.spec.template.spec.containers[0].env.append(
        client.V1EnvVar(name="APP_CRASH_ON", value="CANARYCRASH")
    )
    node.apps.create_namespaced_deployment(APPS, fragile)
    good = canary("nodegood")
    wait("fragile runs", lambda: available(node, "fragile"), 120)

    node.publish(canary("crash"))  # canary() upper-cases its label: CANARYCRASH...
    force_sync(node, "crash")
    stalled = wait("Rollout=False/Stalled", lambda: _stalled(node), 180)
    assert str(stalled).startswith("False/Stalled: ") and "Deployment/fragile" in str(stalled)

    node.publish(good)
    force_sync(node, "good")
    wait("fragile runs the good value", lambda: serving(node, "fragile", f"env {good}"), 180)
    wait("the Rollout condition removed", lambda: _stalled(node) is None, 180)


def _terminating(node: Node, name: str, timeout: float) -> tuple[datetime, int | None]:
    """Follows a deleted pod until it is gone: its first deletionTimestamp (when the kubelet
    would SIGKILL it: the delete's time plus terminationGracePeriodSeconds) and the exit code
    its container reported, when a status update showed one before the pod went. The first:
    once the containers have stopped, the kubelet deletes the pod again with a shorter grace,
    which moves the timestamp to about that moment (CI once read that one, 3 s after a delete
    with 130 s of grace, and took it for the grace's end)."""
    deadline, grace_end, exit_code = time.monotonic() + timeout, None, None
    while time.monotonic() < deadline:
        try:
            pod = node.core.read_namespaced_pod(name, NAMESPACE, _request_timeout=10)
        except client.ApiException as error:
            assert error.status == 404, error
            assert grace_end is not None, "the pod went before it was seen terminating"
            return grace_end, exit_code
        grace_end = grace_end or pod.metadata.deletion_timestamp
        for status in pod.status.container_statuses or []:
            if status.state and status.state.terminated:
                exit_code = status.state.terminated.exit_code
        time.sleep(0.1)
    raise AssertionError(f"pod {name} still there after {timeout:.0f} s")


def test_a_deleted_leader_releases_its_lease_and_its_replacement_leads(node: Node) -> None:
    """kubectl delete pod: SIGTERM, the Lease is released and the process exits by itself
    (exit code 0, before terminationGracePeriodSeconds ends, when the kubelet would SIGKILL
    it); in the Lease's own history the release (holder cleared, its term cut to 1 s) comes
    before the Deployment's new pod takes it."""
    (old,) = operator_pods(node)
    before = lease(node)
    assert before.spec.holder_identity.startswith(old.metadata.name)
    node.core.delete_namespaced_pod(old.metadata.name, NAMESPACE)
    grace_end, exit_code = _terminating(node, old.metadata.name, 150)
    assert datetime.now(UTC) < grace_end  # gone by itself, not killed at the grace's end
    assert exit_code in (None, 0)

    def new_holder() -> client.V1Lease | None:
        current = lease(node)
        holder = current.spec.holder_identity or ""
        return current if holder and not holder.startswith(old.metadata.name) else None

    after = wait("a new holder of the Lease", new_holder, 120)
    assert isinstance(after, client.V1Lease)
    (new,) = operator_pods(node)
    assert after.spec.holder_identity.startswith(new.metadata.name)
    assert (after.spec.lease_transitions or 0) > (before.spec.lease_transitions or 0)
    # Every write to the Lease since `before`, replayed by a watch from its resourceVersion:
    # not when the new pod got it (its start-up time), but that the old one let go first.
    history = [
        (lease.spec.holder_identity or "", lease.spec.lease_duration_seconds)
        for lease in _lease_writes(node, before.metadata.resource_version)
    ]
    released = history.index(("", 1))
    taken = next(i for i, (holder, _) in enumerate(history) if holder.startswith(new.metadata.name))
    assert released < taken, history


def _lease_writes(node: Node, since: str) -> list[client.V1Lease]:
    """The Lease as each write since resourceVersion ``since`` left it, oldest first."""
    stream = watch.Watch().stream(
        client.CoordinationV1Api(node.api).list_namespaced_lease,
        NAMESPACE,
        resource_version=since,
        timeout_seconds=3,  # the replay comes at once; the server then ends the watch
        _request_timeout=30,
    )
    return [event["object"] for event in stream if event["type"] in ("ADDED", "MODIFIED")]


def _drain(node: Node, timeout: str) -> subprocess.CompletedProcess[str]:
    """kubectl drain of the node, for the operator's pod only (the applications stay); its
    emptyDir (the embedded store) goes with it, as in any drain of it."""
    kubectl = str(node.cluster.binaries.kubectl)
    return subprocess.run(
        [kubectl, "--kubeconfig", str(node.cluster.kubeconfig), "drain", NODE_NAME,
         "--pod-selector", "app.kubernetes.io/component=hikyo-operator",
         "--ignore-daemonsets", "--delete-emptydir-data", "--timeout", timeout],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip


def test_a_drain_respects_the_pod_disruption_budget(node: Node) -> None:
    """The chart's PodDisruptionBudget with maxUnavailable 0 keeps the operator's pod through
    a drain (the eviction is refused until the drain gives up); with 1, the drain evicts it,
    and once the node is schedulable again a new pod leads."""
    (pod,) = operator_pods(node)
    upgrade = ["upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "--reuse-values"]
    held = helm(*upgrade, "--set", "operator.podDisruptionBudget.enabled=true",
                "--set", "operator.podDisruptionBudget.maxUnavailable=0",
                kubeconfig=node.cluster.kubeconfig, tmp=node.tmp)  # fmt: skip
    assert held.returncode == 0, held.stderr[-2000:]
    try:
        refused = _drain(node, "15s")
        assert refused.returncode != 0
        assert "disruption budget" in refused.stderr
        assert [p.metadata.name for p in operator_pods(node)] == [pod.metadata.name]

        allowed = helm(*upgrade, "--set", "operator.podDisruptionBudget.maxUnavailable=1",
                       kubeconfig=node.cluster.kubeconfig, tmp=node.tmp)  # fmt: skip
        assert allowed.returncode == 0, allowed.stderr[-2000:]
        drained = _drain(node, "150s")
        assert drained.returncode == 0, drained.stderr[-2000:]
        assert pod.metadata.name not in [p.metadata.name for p in operator_pods(node)]
    finally:
        node.core.patch_node(NODE_NAME, {"spec": {"unschedulable": False}})

    def leading_pod() -> bool:
        pods = operator_pods(node)
        holder = lease(node).spec.holder_identity or ""
        return len(pods) == 1 and holder.startswith(pods[0].metadata.name)

    wait("a new operator pod leads", leading_pod, 180)


@pytest.fixture
def prometheus(node: Node) -> Iterator[Prometheus]:
    # a hand-written scrape config: Prometheus' own instance and job labels win
    with running_prometheus(node.tmp / "prometheus", ALERTS, honor_labels=False) as started:
        yield started


def _alert(name: str) -> str:
    rules = yaml.safe_load(ALERTS.read_text())
    return next(r["expr"] for g in rules["groups"] for r in g["rules"] if r["alert"] == name)


def test_a_real_prometheus_reads_the_operator_as_the_alerts_expect(
    node: Node, prometheus: Prometheus
) -> None:
    """The chart's alert rules on a live scrape of the operator's pod, by a scrape config that
    does not honour labels: the Hikyo instance arrives as `hikyo_instance` beside the pod's
    `instance`, nothing is renamed `exported_*`, HikyoOperatorNoLeader is quiet while the pod
    leads, and with no operator left it is pending for the page."""
    (pod,) = operator_pods(node)
    address = f"{pod.status.pod_ip}:8080"
    prometheus.scrape(address)
    fetches = 'hikyo_operator_fetch_duration_seconds_count{hikyo_instance="primary"}'
    (fetched,) = wait("the operator scraped, after a fetch", lambda: prometheus.query(fetches), 120)
    assert fetched["metric"]["instance"] == address
    assert fetched["metric"]["job"] == "hikyo-operator"
    renamed = 'count({exported_instance=~".+"}) or count({exported_job=~".+"})'
    assert prometheus.query(renamed) == []
    assert prometheus.query("hikyo_operator_leader == 1")
    no_leader = _alert("HikyoOperatorNoLeader")
    assert prometheus.query(no_leader) == []

    node.apps.patch_namespaced_deployment_scale(
        f"{RELEASE}-hikyo-operator", NAMESPACE, {"spec": {"replicas": 0}}
    )
    try:
        wait("the operator gone", lambda: not node.core.list_namespaced_pod(NAMESPACE).items, 150)
        prometheus.scrape()  # its pod left the Service's endpoints
        pending = 'ALERTS{alertname="HikyoOperatorNoLeader", alertstate="pending"}'
        wait("HikyoOperatorNoLeader pending", lambda: prometheus.query(pending), 60)
        assert prometheus.query(no_leader)
    finally:
        node.apps.patch_namespaced_deployment_scale(
            f"{RELEASE}-hikyo-operator", NAMESPACE, {"spec": {"replicas": 1}}
        )
