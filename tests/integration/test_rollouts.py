"""Rollout triggering against the real apiserver and the real workload controllers (S6, S4.9,
S4.10). There is no kubelet or scheduler: pods stay Pending, which S6.5 sees as unavailable."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from kubernetes import client

from k8s.gateway import KubeCluster
from tests.support.clocks import ShiftedClock, on_clock
from tests.support.waiting import wait_for
from tests.support.world import canary
from workers.engine.outcome import Requeue
from workers.engine.reconcile import evaluate_rollout
from workers.engine.stamp import empty_content_stamp, target_key
from workers.engine.stamp_root import STAMP_ROOT_KEY, STAMP_ROOT_SECRET

from .conftest import OPERATOR_NAMESPACE, make_engine

TARGET = "app-env"
STAMP_KEY = f"stamp.hikyo.dev/{TARGET}"


class _RecordingCluster(KubeCluster):
    """Counts the workload calls the engine makes; everything still goes to the apiserver."""

    def __init__(self, api_client: client.ApiClient) -> None:
        super().__init__(api_client)
        self.lists = 0
        self.patches: list[str] = []

    def list_workloads(self, namespace):
        self.lists += 1
        return super().list_workloads(namespace)

    def patch_workload_stamp(self, kind, namespace, name, target, stamp, *, uid=""):
        self.patches.append(f"{kind}/{name}")
        super().patch_workload_stamp(kind, namespace, name, target, stamp, uid=uid)


class _ReplacingCluster(KubeCluster):
    """Replaces the Deployment with one that never opted in just before the stamp patch lands
    (a real race, replayed): the patch must fail rather than touch the replacement."""

    def patch_workload_stamp(self, kind, namespace, name, target, stamp, *, uid=""):
        apps = client.AppsV1Api(self.api_client)
        apps.delete_namespaced_deployment(name, namespace)
        wait_for(lambda: _absent(apps, namespace, name), what=f"Deployment {name} gone")
        apps.create_namespaced_deployment(namespace, _deployment(name, opt_in=None))
        super().patch_workload_stamp(kind, namespace, name, target, stamp, uid=uid)


def _absent(apps: client.AppsV1Api, namespace: str, name: str) -> bool:
    try:
        apps.read_namespaced_deployment(name, namespace)
    except client.exceptions.ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


# --- builders ----------------------------------------------------------------------------------


def _pod_template(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"labels": {"app": name}}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "metadata": metadata,
        "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1"}]},
    }


def _metadata(name: str, opt_in: str | None, annotations: dict[str, str] | None) -> dict:
    merged = dict(annotations or {})
    if opt_in is not None:
        merged["hikyo.dev/secrets"] = opt_in
    return {"name": name, "labels": {"app": name}, "annotations": merged}


def _deployment(
    name: str = "web",
    *,
    opt_in: str | None = TARGET,
    replicas: int = 1,
    paused: bool = False,
    annotations: dict[str, str] | None = None,
    template_annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(name, opt_in, annotations),
        "spec": {
            "replicas": replicas,
            "paused": paused,
            "selector": {"matchLabels": {"app": name}},
            "template": _pod_template(name, template_annotations),
        },
    }


def _stateful_set(name: str = "db") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _metadata(name, TARGET, None),
        "spec": {
            "replicas": 1,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": name}},
            "template": _pod_template(name),
        },
    }


def _daemon_set(name: str = "agent") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _metadata(name, TARGET, None),
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": _pod_template(name)},
    }


# --- readers -----------------------------------------------------------------------------------


def _apps(world) -> client.AppsV1Api:
    return client.AppsV1Api(world.api_client)


def _read(world, kind: str, name: str) -> dict[str, Any]:
    reader = {
        "Deployment": _apps(world).read_namespaced_deployment,
        "StatefulSet": _apps(world).read_namespaced_stateful_set,
        "DaemonSet": _apps(world).read_namespaced_daemon_set,
    }[kind]
    return world.api_client.sanitize_for_serialization(reader(name, world.namespace))


def _template_annotations(obj: dict[str, Any]) -> dict[str, str]:
    return ((obj["spec"]["template"].get("metadata") or {}).get("annotations")) or {}


def _stamp_on(world, kind: str, name: str) -> str | None:
    return _template_annotations(_read(world, kind, name)).get(STAMP_KEY)


def _replica_set_stamps(world, deployment: str) -> set[str | None]:
    """The target stamp in the pod template of each ReplicaSet the Deployment owns."""
    stamps = set()
    for rs in _apps(world).list_namespaced_replica_set(world.namespace).items:
        owners = rs.metadata.owner_references or []
        if any(o.kind == "Deployment" and o.name == deployment for o in owners):
            stamps.add((rs.spec.template.metadata.annotations or {}).get(STAMP_KEY))
    return stamps


def _settled(world, kind: str, name: str) -> dict[str, Any]:
    """Waits until the controller has observed the latest generation and stopped writing."""

    def probe() -> dict[str, Any] | None:
        first = _read(world, kind, name)
        observed = (first.get("status") or {}).get("observedGeneration")
        if observed != first["metadata"]["generation"]:
            return None
        time.sleep(1.0)
        second = _read(world, kind, name)
        same = second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        return second if same else None

    return wait_for(probe, what=f"{kind} {name} settled")


def _recording(world) -> _RecordingCluster:
    recording = _RecordingCluster(world.api_client)
    world.engine = replace(world.engine, cluster=recording)
    return recording


# --- S6.4 patching -----------------------------------------------------------------------------


def test_changed_delivery_creates_a_new_replica_set(world):
    """S6.4: the stamp patch asks the Deployment controller for a rollout; a new ReplicaSet
    carries the new stamp."""
    _apps(world).create_namespaced_deployment(world.namespace, _deployment())
    world.ready()
    first = world.status()["stamp"]
    assert _stamp_on(world, "Deployment", "web") == first
    wait_for(lambda: first in _replica_set_stamps(world, "web"), what="first ReplicaSet")

    world.publish(DATABASE_URL=canary("value"), LOG_LEVEL="debug")
    result = world.reconcile()

    assert result.outcome.reason == "Delivered"
    assert result.rolled == ["Deployment/web"]  # for the dashboard's links (issue 35)
    second = world.status()["stamp"]
    assert second != first
    assert _stamp_on(world, "Deployment", "web") == second
    wait_for(lambda: second in _replica_set_stamps(world, "web"), what="a new ReplicaSet")
    assert {first, second} <= _replica_set_stamps(world, "web")
    assert "Rollout" not in world.conditions()  # the patched workload is judged next time


def test_unchanged_resync_and_forced_full_fetch_patch_nothing(world):
    """S6.4, S4.17: an equal stamp means no patch, so unchanged content restarts nothing."""
    _apps(world).create_namespaced_deployment(world.namespace, _deployment())
    world.ready()
    before = _settled(world, "Deployment", "web")
    replica_sets = _replica_set_stamps(world, "web")
    recording = _recording(world)

    assert world.reconcile().outcome.reason == "Current"
    forced = world.reconcile(forced_full=True)

    assert forced.outcome.reason == "Delivered" and forced.outcome.wrote_secret is False
    assert recording.patches == [] and forced.rolled == []
    assert recording.lists == 2  # read-only S6.5 on the current path, S6.4 on the full one
    after = _read(world, "Deployment", "web")
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert _replica_set_stamps(world, "web") == replica_sets


def test_workloads_that_did_not_opt_in_are_never_touched(world):
    """S6.1, S6.4: no annotation, or a list naming other targets only, means no patch."""
    apps = _apps(world)
    apps.create_namespaced_deployment(world.namespace, _deployment("plain", opt_in=None))
    apps.create_namespaced_deployment(world.namespace, _deployment("other", opt_in="app-env-2"))
    apps.create_namespaced_deployment(world.namespace, _deployment("web", opt_in=" db, app-env "))
    recording = _recording(world)

    world.ready()
    world.publish(DATABASE_URL=canary("value"), LOG_LEVEL="debug")
    assert world.reconcile().outcome.reason == "Delivered"

    assert recording.patches == ["Deployment/web", "Deployment/web"]
    for name in ("plain", "other"):
        untouched = _read(world, "Deployment", name)
        assert untouched["metadata"]["generation"] == 1
        assert _template_annotations(untouched) == {}
    assert _stamp_on(world, "Deployment", "web") == world.status()["stamp"]


def test_only_the_target_stamp_annotation_changes(world):
    """S6.4: just `stamp.hikyo.dev/<target>` in the pod template; other annotations, other
    targets' stamps, labels and the rest of the spec stay as they were."""
    template_annotations = {"stamp.hikyo.dev/db": "v1:other-target", "prometheus.io/port": "9"}
    _apps(world).create_namespaced_deployment(
        world.namespace,
        _deployment(
            opt_in="app-env, db",
            annotations={"team": "payments"},
            template_annotations=template_annotations,
        ),
    )
    before = _read(world, "Deployment", "web")

    world.ready()

    after = _read(world, "Deployment", "web")
    assert _template_annotations(after) == {
        **template_annotations,
        STAMP_KEY: world.status()["stamp"],
    }
    del before["spec"]["template"]["metadata"]["annotations"]
    del after["spec"]["template"]["metadata"]["annotations"]
    assert after["spec"] == before["spec"]
    controller_annotation = "deployment.kubernetes.io/revision"
    assert {
        k: v for k, v in after["metadata"]["annotations"].items() if k != controller_annotation
    } == {"team": "payments", "hikyo.dev/secrets": "app-env, db"}
    assert after["metadata"]["labels"] == before["metadata"]["labels"]


def test_statefulset_and_daemonset_are_patched_too(world):
    """S6.1: all three workload kinds opt in the same way; their controllers see the change."""
    apps = _apps(world)
    apps.create_namespaced_stateful_set(world.namespace, _stateful_set())
    apps.create_namespaced_daemon_set(world.namespace, _daemon_set())

    world.ready()
    world.publish(DATABASE_URL=canary("value"), LOG_LEVEL="debug")
    assert world.reconcile().outcome.reason == "Delivered"

    stamp = world.status()["stamp"]
    for kind, name in (("StatefulSet", "db"), ("DaemonSet", "agent")):
        assert _stamp_on(world, kind, name) == stamp
        settled = _settled(world, kind, name)  # its controller observed the patch
        assert settled["metadata"]["generation"] == 3  # created, first stamp, second stamp


def test_trigger_rollouts_false_lists_patches_and_reports_nothing(world, api_client):
    """S6.6: no workload list or patch, no Rollout condition; the stamp is still recorded."""
    _apps(world).create_namespaced_deployment(world.namespace, _deployment(paused=True))
    recording = _RecordingCluster(api_client)
    world.engine = replace(make_engine(api_client, trigger_rollouts=False), cluster=recording)

    world.ready()
    world.publish(DATABASE_URL=canary("value"), LOG_LEVEL="debug")
    assert world.reconcile().outcome.reason == "Delivered"
    assert world.reconcile().outcome.reason == "Current"

    assert recording.lists == 0 and recording.patches == []
    deployment = _read(world, "Deployment", "web")
    assert deployment["metadata"]["generation"] == 1
    assert STAMP_KEY not in _template_annotations(deployment)
    assert "Rollout" not in world.conditions()
    assert world.status()["stamp"].startswith("v1:")


# --- S6.5 stall detection ----------------------------------------------------------------------


def test_paused_deployment_is_stalled_without_blocking_ready(world):
    """S6.5: a paused Deployment carrying the current stamp is not progressed, at once; Rollout
    does not block Ready (S5.2). Unpaused, it is judged by the held tests instead."""
    _apps(world).create_namespaced_deployment(world.namespace, _deployment(paused=True))
    world.ready()  # patched now, so judged from the next reconcile on
    assert "Rollout" not in world.conditions()

    current = world.reconcile()

    assert current.outcome.reason == "Current"
    conditions = world.conditions()
    assert conditions["Rollout"] == ("False", "Stalled")
    assert "Deployment/web" in world.message("Rollout")
    assert conditions["Ready"] == ("True", "Reconciled")
    assert ("Warning", "Stalled") not in world.events()  # read-only on the current path

    forced = world.reconcile(forced_full=True)
    assert forced.outcome.reason == "Delivered"
    assert forced.outcome.requeue is Requeue.RESYNC  # informational: no backoff
    assert ("Warning", "Stalled") in world.events()  # S5.5: on the delivery path

    _apps(world).patch_namespaced_deployment("web", world.namespace, {"spec": {"paused": False}})
    world.reconcile()
    assert "Rollout" not in world.conditions()  # its held tests must last 5 min first


def test_held_tests_stall_after_five_minutes_on_the_injected_clock(world):
    """S6.5: Pending pods keep `unavailableReplicas > 0`; it counts once held >= 5 min."""
    _apps(world).create_namespaced_deployment(world.namespace, _deployment())
    world.ready()
    _settled(world, "Deployment", "web")
    clock = [time.time()]
    world.engine = replace(world.engine, wall_seconds=lambda: clock[0])

    world.reconcile()
    assert "Rollout" not in world.conditions()  # first seen now
    clock[0] += 299
    world.reconcile()
    assert "Rollout" not in world.conditions()
    clock[0] += 1
    world.reconcile()

    assert world.conditions()["Rollout"] == ("False", "Stalled")
    assert "Deployment/web" in world.message("Rollout")
    assert world.conditions()["Ready"] == ("True", "Reconciled")


def test_rollout_only_evaluation_judges_without_fetching(world):
    """S4.1.1: after a workload event, S6.5 and the Rollout condition only: no fetch, no
    patch, no event; nothing is written when nothing changed (S4.17)."""
    _apps(world).create_namespaced_deployment(world.namespace, _deployment(paused=True))
    world.ready()
    fetches, events = len(world.requests()), world.events()
    recording = _recording(world)

    stalled = evaluate_rollout(world.engine, world.namespace, "app")

    assert stalled.status_written
    assert world.conditions()["Rollout"] == ("False", "Stalled")
    assert "Deployment/web" in world.message("Rollout")
    assert world.conditions()["Synced"] == ("True", "Delivered")  # nothing else evaluated
    again = evaluate_rollout(world.engine, world.namespace, "app")
    assert again.status_written is False

    _apps(world).patch_namespaced_deployment("web", world.namespace, {"spec": {"paused": False}})
    cleared = evaluate_rollout(world.engine, world.namespace, "app")

    assert cleared.status_written
    assert "Rollout" not in world.conditions()
    assert recording.lists == 3 and recording.patches == []
    assert len(world.requests()) == fetches
    assert world.events() == events


def test_rollout_only_evaluation_leaves_an_unreconciled_generation_alone(world):
    """A spec edit not yet reconciled: the full reconcile judges it, not a workload event."""
    _apps(world).create_namespaced_deployment(world.namespace, _deployment(paused=True))
    world.ready()
    world.patch_cr("app", {"mapping": [{"key": "DATABASE_URL"}]})

    result = evaluate_rollout(world.engine, world.namespace, "app")

    assert result.status_written is False
    assert "Rollout" not in world.conditions()


# --- S4.9: a failed patch ----------------------------------------------------------------------


def test_failed_patch_keeps_delivered_clears_the_cursor_and_backs_off(world, api_client):
    """S4.9: Synced=True/Delivered, Rollout=False/Stalled, Warning event, no cursor, backoff;
    the next (full) reconcile retries and finds the replacement, which never opted in."""
    _apps(world).create_namespaced_deployment(world.namespace, _deployment())
    world.ready()
    normal = world.engine
    world.publish(DATABASE_URL=canary("value"), LOG_LEVEL="debug")

    failed = world.reconcile(engine=replace(normal, cluster=_ReplacingCluster(api_client)))

    assert failed.outcome.reason == "Delivered"
    assert failed.outcome.requeue is Requeue.BACKOFF
    conditions = world.conditions()
    assert conditions["Synced"] == ("True", "Delivered")
    assert conditions["Rollout"] == ("False", "Stalled")
    assert "stamp patch failed for Deployment/web" in world.message("Rollout")
    status = world.status()
    assert "cursor" not in status and "cursorBinding" not in status
    assert status["stamp"].startswith("v1:") and status["managedSecretUID"]
    assert ("Warning", "Stalled") in world.events()
    replacement = _read(world, "Deployment", "web")
    assert STAMP_KEY not in _template_annotations(replacement)

    retried = world.reconcile(engine=normal)

    assert world.requests()[-1].cursor_present is False
    assert retried.outcome.reason == "Delivered"
    assert retried.outcome.requeue is Requeue.RESYNC
    assert "Rollout" not in world.conditions()
    assert world.status()["cursor"]
    assert STAMP_KEY not in _template_annotations(_read(world, "Deployment", "web"))


# --- S4.10: scrub ------------------------------------------------------------------------------


def test_scrub_patches_the_empty_content_stamp(world):
    """S4.10.1 (3): opted-in workloads roll with the empty-content stamp (n = 0, S6.2)."""
    _apps(world).create_namespaced_deployment(world.namespace, _deployment())
    world.ready()
    delivered = world.status()["stamp"]
    clock = ShiftedClock()
    world.engine = on_clock(world.engine, clock)
    world.devserver.set_grants(world.token, ())
    world.reconcile()
    clock.advance(world.engine.settings.not_found_confirmation_seconds)  # S4.10.0

    result = world.reconcile()

    assert result.outcome.reason == "AuthorizationWithdrawn"
    root = KubeCluster(world.api_client).get_secret(OPERATOR_NAMESPACE, STAMP_ROOT_SECRET)
    instance = world.custom.get_cluster_custom_object(
        "hikyo.dev", "v1alpha1", "hikyoinstances", world.instance
    )
    key = target_key(
        root.data[STAMP_ROOT_KEY],
        instance["metadata"]["uid"],
        world.cr()["metadata"]["uid"],
        TARGET,
    )
    empty = empty_content_stamp(key)
    assert empty != delivered
    assert world.status()["stamp"] == empty
    assert _stamp_on(world, "Deployment", "web") == empty
    wait_for(lambda: empty in _replica_set_stamps(world, "web"), what="a ReplicaSet for the scrub")

    again = world.reconcile()  # S4.10.2 (5) likewise: an unchanged stamp patches nothing
    assert again.outcome.reason == "AuthorizationWithdrawn"
    assert _read(world, "Deployment", "web")["metadata"]["generation"] == 3  # create, 2 stamps
