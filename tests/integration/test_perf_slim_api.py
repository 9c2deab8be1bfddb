"""k8s.slim_api answers as the generated CoreV1Api, AppsV1Api, CustomObjectsApi,
CoordinationV1Api, AuthorizationV1Api and ApiextensionsV1Api do (issue 13: the operator no
longer imports those classes), and k8s.watch lists in pages and keeps only tombstones, on a
real kube-apiserver: same models, same errors, same requests (URL, query, content types)."""

from __future__ import annotations

import base64
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from k8s import gateway
from k8s.errors import Invalid
from k8s.gateway import KubeCluster
from k8s.slim_api import (
    ApiextensionsV1,
    AppsV1,
    AuthorizationV1,
    CoordinationV1,
    CoreV1,
    CustomObjects,
)
from k8s.watch import Resource, Watcher
from tests.support.factories import GROUP, VERSION, make_hikyoinstance, make_hikyosecret
from tests.support.waiting import wait_for
from workers.engine.stamp_root import stamped_in_reach


def _secret(name: str, value: bytes) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "labels": {"probe": "slim"}},
        "data": {"k": base64.b64encode(value).decode()},
    }


def _deployment(name: str) -> dict:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "annotations": {"hikyo.dev/secrets": "app-env"}},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "registry.invalid/none:1"}]},
            },
        },
    }


def test_core_calls_return_the_generated_clients_models_and_errors(api_client, namespace):
    slim, full = CoreV1(api_client), client.CoreV1Api(api_client)
    created = slim.create_namespaced_secret(namespace, _secret("one", b"first"))
    assert isinstance(created, client.V1Secret)
    assert created.metadata.labels == {"probe": "slim"}
    read_slim = slim.read_namespaced_secret("one", namespace)
    read_full = full.read_namespaced_secret("one", namespace)
    assert api_client.sanitize_for_serialization(read_slim) == (
        api_client.sanitize_for_serialization(read_full)
    )
    body = _secret("one", b"second")
    body["metadata"]["resourceVersion"] = read_slim.metadata.resource_version
    replaced = slim.replace_namespaced_secret("one", namespace, body)
    assert base64.b64decode(replaced.data["k"]) == b"second"
    body["metadata"]["resourceVersion"] = read_slim.metadata.resource_version  # stale now
    with pytest.raises(ApiException) as conflict:
        slim.replace_namespaced_secret("one", namespace, body)
    assert conflict.value.status == 409
    with pytest.raises(ApiException) as missing:
        slim.read_namespaced_secret("absent", namespace)
    assert missing.value.status == 404 and missing.value.reason == "Not Found"
    options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="not-its-uid"))
    with pytest.raises(ApiException) as precondition:
        slim.delete_namespaced_secret("one", namespace, body=options)
    assert precondition.value.status == 409
    status = slim.delete_namespaced_secret("one", namespace)
    assert isinstance(status, client.V1Status)
    with pytest.raises(ApiException):
        full.read_namespaced_secret("one", namespace)
    assert (
        slim.read_namespace(namespace).metadata.uid == full.read_namespace(namespace).metadata.uid
    )
    # The controller-manager creates the namespace's default ServiceAccount a moment after the
    # namespace (later still on a loaded machine): wait for it rather than race it.
    wait_for(
        lambda: KubeCluster(api_client).get_service_account(namespace, "default") is not None,
        timeout=30,
        interval=0.2,
        what="the default ServiceAccount",
    )
    account = slim.read_namespaced_service_account("default", namespace)
    assert isinstance(account, client.V1ServiceAccount)


def test_custom_object_calls_answer_as_the_generated_client(api_client, crds, namespace):
    """The gateway's HikyoSecret GET/LIST/PATCH go through k8s.slim_api.CustomObjects: the
    same JSON back, the same merge-patch semantics, the same errors; no pydantic wrapper."""
    slim, full = CustomObjects(api_client), client.CustomObjectsApi(api_client)
    plural = "hikyosecrets"
    for name, target in (("one", "app-env"), ("two", "other-env")):
        full.create_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, make_hikyosecret(name, target={"name": target})
        )
    read_slim = slim.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, "one")
    read_full = full.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, "one")
    assert read_slim == read_full
    listed = slim.list_namespaced_custom_object(
        GROUP, VERSION, namespace, plural, field_selector="spec.target.name=app-env"
    )
    assert [item["metadata"]["name"] for item in listed["items"]] == ["one"]
    assert listed == full.list_namespaced_custom_object(
        GROUP, VERSION, namespace, plural, field_selector="spec.target.name=app-env"
    )
    version = read_slim["metadata"]["resourceVersion"]
    patch = {"metadata": {"resourceVersion": version}, "status": {"lifecycle": "Synced"}}
    slim.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, plural, "one", patch)
    removal = {"status": {"lifecycle": None, "keyCount": 2}}  # merge patch: None removes
    patched = slim.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, plural, "one", removal
    )
    assert patched["status"] == {"keyCount": 2}
    with pytest.raises(ApiException) as stale:  # the first patch moved the resourceVersion
        slim.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, plural, "one", patch)
    assert stale.value.status == 409
    finalizers = {"metadata": {"finalizers": ["hikyo.dev/orphan"]}}
    slim.patch_namespaced_custom_object(GROUP, VERSION, namespace, plural, "two", finalizers)
    two = full.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, "two")
    assert two["metadata"]["finalizers"] == ["hikyo.dev/orphan"]
    slim.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, plural, "two", {"metadata": {"finalizers": None}}
    )
    with pytest.raises(ApiException) as missing:
        slim.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, "absent")
    assert missing.value.status == 404
    everywhere = slim.list_cluster_custom_object(GROUP, VERSION, plural, limit=1)
    assert len(everywhere["items"]) == 1 and everywhere["metadata"].get("continue")


def test_a_service_account_token_and_events_through_the_gateway(api_client, namespace):
    cluster = KubeCluster(api_client)
    assert isinstance(cluster.core, CoreV1)
    wait_for(
        lambda: cluster.get_service_account(namespace, "default") is not None,
        timeout=30,
        interval=0.2,
        what="the default ServiceAccount",
    )
    token = cluster.request_token(namespace, "default", "hikyo.example", 600)
    assert token.count(".") == 2  # a JWT, kept in memory only
    core = CoreV1(api_client)
    name = f"probe.{uuid.uuid4().hex[:8]}"
    event = client.CoreV1Event(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace),
        involved_object=client.V1ObjectReference(kind="Secret", name="x", namespace=namespace),
        reason="Probe",
        message="first",
        type="Normal",
        count=1,
    )
    assert core.create_namespaced_event(namespace, event).count == 1
    patched = core.patch_namespaced_event(name, namespace, {"count": 2, "message": "again"})
    assert isinstance(patched, client.CoreV1Event) and patched.count == 2


def test_workload_lists_watches_and_the_stamp_patch(api_client, namespace):
    apps, full = AppsV1(api_client), client.AppsV1Api(api_client)
    full.create_namespaced_deployment(namespace, _deployment("web"))

    def listed_names() -> list[str]:
        listed = apps.list_namespaced_deployment(
            namespace, resource_version="0", _preload_content=False
        )
        return [d["metadata"]["name"] for d in json.loads(listed.data)["items"]]

    # resourceVersion=0 is answered from the apiserver's watch cache, which may not hold the
    # Deployment yet right after its create
    assert wait_for(listed_names, timeout=30, interval=0.1, what="the Deployment listed") == ["web"]
    cluster = KubeCluster(api_client)
    assert [w.name for w in cluster.list_workloads(namespace)] == ["web"]
    uid = full.read_namespaced_deployment("web", namespace).metadata.uid
    cluster.patch_workload_stamp("Deployment", namespace, "web", "app-env", "s1", uid=uid)
    template = full.read_namespaced_deployment("web", namespace).spec.template
    assert template.metadata.annotations == {"stamp.hikyo.dev/app-env": "s1"}
    with pytest.raises(Invalid):  # another uid (422): the object is never touched
        cluster.patch_workload_stamp("Deployment", namespace, "web", "app-env", "s2", uid="x")
    template = full.read_namespaced_deployment("web", namespace).spec.template
    assert template.metadata.annotations == {"stamp.hikyo.dev/app-env": "s1"}

    events: list[tuple[str, str]] = []
    stop = threading.Event()
    watcher = Watcher(
        api_client,
        Resource("deployments", apps.list_deployment_for_all_namespaces),
        lambda kind, obj, initial: events.append((kind, obj["metadata"]["name"])),
        stop,
    )
    watcher.start()
    try:
        wait_for(watcher.synced.is_set, timeout=30, interval=0.1, what="the first list")
        assert ("ADDED", "web") in events
        full.create_namespaced_deployment(namespace, _deployment("api"))
        wait_for(lambda: ("ADDED", "api") in events, timeout=30, interval=0.1, what="the event")
        full.delete_namespaced_deployment("api", namespace)
        wait_for(lambda: ("DELETED", "api") in events, timeout=30, interval=0.1, what="DELETED")
    finally:
        stop.set()
        watcher.join(timeout=90)


def test_a_paged_relist_sees_every_object_and_reports_the_vanished_with_their_metadata(
    api_client, crds, namespace
):
    custom = client.CustomObjectsApi(api_client)
    for index in range(7):
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, "hikyosecrets", make_hikyosecret(f"app-{index}")
        )
    events: list[tuple[str, dict, bool]] = []
    resource = Resource(
        "hikyosecrets",
        custom.list_namespaced_custom_object,
        (GROUP, VERSION, namespace, "hikyosecrets"),
    )
    watcher = Watcher(
        api_client,
        resource,
        lambda k, o, i: events.append((k, o, i)),
        threading.Event(),
        page_size=3,
    )
    version = watcher._relist()  # three pages
    assert sorted(o["metadata"]["name"] for k, o, i in events) == [f"app-{n}" for n in range(7)]
    assert all(
        k == "ADDED" and i and o["kind"] == "HikyoSecret" and o["spec"] for k, o, i in events
    )
    assert int(version) > 0
    gone = next(o for _, o, _ in events if o["metadata"]["name"] == "app-4")
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "hikyosecrets", "app-4")
    events.clear()
    watcher._relist()
    deleted = [(o, i) for k, o, i in events if k == "DELETED"]
    assert len(deleted) == 1 and deleted[0][1] is True
    tombstone = deleted[0][0]
    assert tombstone["metadata"]["uid"] == gone["metadata"]["uid"]
    assert tombstone["metadata"]["name"] == "app-4"
    assert tombstone["metadata"]["namespace"] == namespace
    assert tombstone["kind"] == "HikyoSecret"
    assert "spec" not in tombstone and "managedFields" not in tombstone["metadata"]
    assert len([k for k, _, _ in events if k == "ADDED"]) == 6


def test_the_reach_list_is_paged_and_keeps_what_s6_3_reads(
    api_client, crds, namespace, monkeypatch
):
    custom = client.CustomObjectsApi(api_client)
    for index in range(5):
        created = custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, "hikyosecrets", make_hikyosecret(f"app-{index}")
        )
        if index % 2 == 0:
            custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                "hikyosecrets",
                f"app-{index}",
                {"status": {"stamp": f"stamp-{index}", "lifecycle": "Synced"}},
            )
    monkeypatch.setattr(gateway, "REACH_PAGE_SIZE", 2)
    reach = KubeCluster(api_client).list_hikyosecrets_in([namespace])
    assert sorted(cr["metadata"]["name"] for cr in reach) == [f"app-{n}" for n in range(5)]
    assert all(set(cr) == {"metadata", "status"} for cr in reach)
    assert {cr["metadata"]["name"]: cr["status"].get("stamp") for cr in reach} == {
        "app-0": "stamp-0",
        "app-1": None,
        "app-2": "stamp-2",
        "app-3": None,
        "app-4": "stamp-4",
    }
    assert created["metadata"]["uid"] in {cr["metadata"]["uid"] for cr in reach}
    assert stamped_in_reach(reach, "hikyo-system") == [
        f"{namespace}/app-0",
        f"{namespace}/app-2",
        f"{namespace}/app-4",
    ]


@contextmanager
def _requests(api_client: client.ApiClient) -> Iterator[list[tuple[Any, ...]]]:
    """What reaches the REST layer: method, URL, Accept, Content-Type, body."""
    seen: list[tuple[Any, ...]] = []
    rest = api_client.rest_client
    send = rest.request

    def recording(method: str, url: str, headers: Any = None, body: Any = None, **kw: Any) -> Any:
        headers = headers or {}
        seen.append((method, url, headers.get("Accept"), headers.get("Content-Type"), body))
        return send(method, url, headers=headers, body=body, **kw)

    rest.request = recording
    try:
        yield seen
    finally:
        rest.request = send


def _read(raw: Any) -> Any:
    """A raw (``_preload_content=False``) answer's JSON; its connection goes back to the pool."""
    try:
        return json.loads(raw.data)
    finally:
        raw.release_conn()


def _same_call(api_client: client.ApiClient, slim: Callable[[], Any], full: Callable[[], Any]):
    """Both answers, after asserting both calls sent the same request."""
    with _requests(api_client) as slim_sent:
        slim_answer = slim()
    with _requests(api_client) as full_sent:
        full_answer = full()
    assert slim_sent == full_sent
    return slim_answer, full_answer


def test_custom_object_calls_send_and_answer_as_the_generated_client(api_client, crds, namespace):
    slim, full = CustomObjects(api_client), client.CustomObjectsApi(api_client)
    full.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "hikyosecrets", make_hikyosecret("app-0")
    )
    instance = f"slim-{uuid.uuid4().hex[:8]}"
    full.create_cluster_custom_object(
        GROUP, VERSION, "hikyoinstances", make_hikyoinstance(instance)
    )
    try:
        got, expected = _same_call(
            api_client,
            lambda: slim.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "hikyosecrets", "app-0"
            ),
            lambda: full.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "hikyosecrets", "app-0"
            ),
        )
        assert isinstance(got, dict) and got == expected
        got, expected = _same_call(
            api_client,
            lambda: slim.get_cluster_custom_object(GROUP, VERSION, "hikyoinstances", instance),
            lambda: full.get_cluster_custom_object(GROUP, VERSION, "hikyoinstances", instance),
        )
        assert got == expected and got["metadata"]["name"] == instance
        selector = {"field_selector": "spec.target.name=app-env", "limit": 5}
        got, expected = _same_call(
            api_client,
            lambda: slim.list_namespaced_custom_object(
                GROUP, VERSION, namespace, "hikyosecrets", **selector
            ),
            lambda: full.list_namespaced_custom_object(
                GROUP, VERSION, namespace, "hikyosecrets", **selector
            ),
        )
        assert [i["metadata"]["name"] for i in got["items"]] == ["app-0"]
        assert got["items"] == expected["items"]
        raw, raw_full = _same_call(
            api_client,
            lambda: slim.list_cluster_custom_object(
                GROUP, VERSION, "hikyoinstances", limit=1, _preload_content=False
            ),
            lambda: full.list_cluster_custom_object(
                GROUP, VERSION, "hikyoinstances", limit=1, _preload_content=False
            ),
        )
        assert len(_read(raw)["items"]) == 1 == len(_read(raw_full)["items"])
        patch = {"metadata": {"annotations": {"probe": "slim"}}}
        got, expected = _same_call(
            api_client,
            lambda: slim.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, "hikyosecrets", "app-0", patch
            ),
            lambda: full.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, "hikyosecrets", "app-0", patch
            ),
        )
        assert got["metadata"]["annotations"] == {"probe": "slim"}
        status = {"status": {"lifecycle": "Synced"}}
        got, expected = _same_call(
            api_client,
            lambda: slim.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, "hikyosecrets", "app-0", status
            ),
            lambda: full.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, "hikyosecrets", "app-0", status
            ),
        )
        assert got["status"] == expected["status"] == {"lifecycle": "Synced"}
        with pytest.raises(ApiException) as missing:
            slim.get_namespaced_custom_object(GROUP, VERSION, namespace, "hikyosecrets", "gone")
        assert missing.value.status == 404
        stale = {"metadata": {"resourceVersion": "1"}, "status": {"lifecycle": "Failed"}}
        with pytest.raises(ApiException) as conflict:
            slim.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, "hikyosecrets", "app-0", stale
            )
        assert conflict.value.status == 409
    finally:
        full.delete_cluster_custom_object(GROUP, VERSION, "hikyoinstances", instance)


def test_a_watch_streams_through_the_slim_custom_object_list(api_client, crds, namespace):
    slim, full = CustomObjects(api_client), client.CustomObjectsApi(api_client)
    full.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "hikyosecrets", make_hikyosecret("app-0")
    )
    events: list[tuple[str, str]] = []
    stop = threading.Event()
    watcher = Watcher(
        api_client,
        Resource(
            "hikyosecrets",
            slim.list_namespaced_custom_object,
            (GROUP, VERSION, namespace, "hikyosecrets"),
        ),
        lambda kind, obj, initial: events.append((kind, obj["metadata"]["name"])),
        stop,
    )
    watcher.start()
    try:
        wait_for(watcher.synced.is_set, timeout=30, interval=0.1, what="the first list")
        assert events == [("ADDED", "app-0")]
        full.create_namespaced_custom_object(
            GROUP, VERSION, namespace, "hikyosecrets", make_hikyosecret("app-1")
        )
        wait_for(lambda: ("ADDED", "app-1") in events, timeout=30, interval=0.1, what="ADDED")
        full.delete_namespaced_custom_object(GROUP, VERSION, namespace, "hikyosecrets", "app-1")
        wait_for(lambda: ("DELETED", "app-1") in events, timeout=30, interval=0.1, what="DELETED")
    finally:
        stop.set()
        watcher.join(timeout=90)


def test_lease_access_review_and_crd_calls_send_and_answer_as_the_generated_client(
    api_client, crds, namespace
):
    slim, full = CoordinationV1(api_client), client.CoordinationV1Api(api_client)
    lease = client.V1Lease(
        metadata=client.V1ObjectMeta(name="probe"),
        spec=client.V1LeaseSpec(holder_identity="me", lease_duration_seconds=15),
    )
    created = slim.create_namespaced_lease(namespace, lease)
    assert isinstance(created, client.V1Lease) and created.spec.holder_identity == "me"
    got, expected = _same_call(
        api_client,
        lambda: slim.read_namespaced_lease("probe", namespace),
        lambda: full.read_namespaced_lease("probe", namespace),
    )
    assert api_client.sanitize_for_serialization(got) == (
        api_client.sanitize_for_serialization(expected)
    )
    got.spec.holder_identity = "you"
    replaced = slim.replace_namespaced_lease("probe", namespace, got)
    assert isinstance(replaced, client.V1Lease) and replaced.spec.holder_identity == "you"
    with pytest.raises(ApiException) as conflict:  # got's resourceVersion is stale now
        slim.replace_namespaced_lease("probe", namespace, got)
    assert conflict.value.status == 409
    with pytest.raises(ApiException) as missing:
        slim.read_namespaced_lease("absent", namespace)
    assert missing.value.status == 404

    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                verb="get", group=GROUP, resource="hikyosecrets", namespace=namespace
            )
        )
    )
    got, expected = _same_call(
        api_client,
        lambda: AuthorizationV1(api_client).create_self_subject_access_review(review),
        lambda: client.AuthorizationV1Api(api_client).create_self_subject_access_review(review),
    )
    assert isinstance(got, client.V1SelfSubjectAccessReview)
    assert got.status.allowed is expected.status.allowed is True

    name = "hikyosecrets.hikyo.dev"
    got, expected = _same_call(
        api_client,
        lambda: ApiextensionsV1(api_client).read_custom_resource_definition(
            name, _preload_content=False
        ),
        lambda: client.ApiextensionsV1Api(api_client).read_custom_resource_definition(
            name, _preload_content=False
        ),
    )
    assert _read(got)["metadata"]["uid"] == _read(expected)["metadata"]["uid"]
    with pytest.raises(ApiException) as absent:
        ApiextensionsV1(api_client).read_custom_resource_definition("absent.hikyo.dev")
    assert absent.value.status == 404


def test_the_gateway_and_the_leader_use_the_slim_calls(api_client):
    cluster = KubeCluster(api_client)
    assert isinstance(cluster.custom, CustomObjects)
    assert isinstance(cluster.coordination, CoordinationV1)
    assert isinstance(cluster.authorization, AuthorizationV1)
