"""The dashboard admin (controlplane/observations/admin.py, issue 10): who sees what (the groups
of migration 0005), the overview, the HikyoSecrets list (filters, search, query count at 10,000
rows), the detail page (conditions, timeline, events, reports, remediation), force resync
(action and button; LogEntry; a cluster error is one line) and no value in any page.

Django test client over the real (test) database; the only fake is the cluster behind
forcing.py's seam (``forcing.use_cluster``), and it holds canaries a careless change could leak.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from controlplane.observations import forcing
from controlplane.observations.models import (
    ConditionChange,
    EventRecord,
    ReconcileRun,
    StatusReport,
    TrackedObject,
)
from controlplane.observations.recording import forget_unchecked, record_report, record_run
from k8s.errors import Forbidden
from workers.engine.force_sync import FORCE_SYNC_ANNOTATION
from workers.engine.outcome import Outcome, Requeue
from workers.engine.ports import Event
from workers.engine.reconcile import RunResult
from workers.keys import ObjectKey
from workers.reporting import ReportAttempt

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CANARY_VALUE = "canary-value-7d3f1e"
CANARY_CURSOR = "canary-cursor-a91b02"
CANARY_STAMP = "canary-stamp-55c0de"
CANARY_TOKEN = "canary-token-e4e4aa"
CANARIES = (CANARY_VALUE, CANARY_CURSOR, CANARY_STAMP, CANARY_TOKEN)

CHANGELIST = "/admin/observations/trackedobject/"
OVERVIEW = "/admin/observations/trackedobject/overview/"
UNDELIVERED = (
    "the server delivered only the presence of secret keys API_KEY, DB_PASSWORD: nothing was "
    "written. Enable the project's machine-reveal opt-in and grant this credential reveal, or "
    "set projection: config-only to deliver config keys only"
)


@pytest.fixture(autouse=True)
def _plain_static_files(settings):
    """Pages render {% static %}; a manifest storage (production) would need collectstatic."""
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


class FakeCluster:
    """The cluster side of a force resync; it holds canaries (a Secret's data, a token) that
    no page may ever show."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.annotated: list[tuple[str, str, dict[str, Any], str]] = []
        self.secret_data = {"DB_PASSWORD": CANARY_VALUE}
        self.token = CANARY_TOKEN

    def annotate_hikyosecret(
        self, namespace: str, name: str, annotations: dict[str, Any], *, uid: str = ""
    ) -> None:
        if self.error is not None:
            raise self.error
        self.annotated.append((namespace, name, dict(annotations), uid))


def _cond(type_: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": 2,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


READY = [_cond("Ready", "True", "Ready"), _cond("Synced", "True", "Delivered")]
UNDELIVERED_CONDITIONS = [
    _cond("Ready", "False", "Blocked", "not ready: Delivery/UndeliveredSecrets"),
    _cond("Synced", "True", "Delivered"),
    _cond("Delivery", "False", "UndeliveredSecrets", UNDELIVERED)
    | {"facts": {"keys": "API_KEY, DB_PASSWORD"}},  # as the engine stores them beside it
]


def _run(
    name: str,
    uid: str,
    *,
    after: list[dict[str, Any]],
    reason: str,
    lifecycle: str,
    at: datetime = T0,
    namespace: str = "payments",
    forced: str | None = None,
    wrote: bool = False,
    status_patch: dict[str, Any] | None = None,
) -> None:
    """One recorded run, with canaries where values, cursors and stamps travel."""
    outcome = Outcome(
        reason=reason,
        requeue=Requeue.RESYNC,
        message=UNDELIVERED if reason == "UndeliveredSecrets" else "",
        lifecycle=lifecycle,
        status={"cursor": CANARY_CURSOR, "stamp": CANARY_STAMP, **(status_patch or {})},
        fetched=True,
        wrote_secret=wrote,
        forced_sync=forced,
    )
    result = RunResult(
        outcome=outcome,
        namespace=namespace,
        name=name,
        uid=uid,
        generation=2,
        conditions_before=[],
        conditions_after=after,
        status_written=True,
        events_emitted=[Event("Warning" if reason != "Delivered" else "Normal", reason, "msg")],
        instance="prod",
        fetch_seconds=0.05,
        fetch_status=200,
    )
    record_run(result, at, 0.12)


@pytest.fixture
def objects() -> dict[str, TrackedObject]:
    _run(
        "payments-env",
        "uid-ok",
        after=READY,
        reason="Delivered",
        lifecycle="Synced",
        wrote=True,
        status_patch={"keyCount": 3, "lastDelivery": "2026-01-01T00:00:00Z"},
    )
    _run(
        "ledger-env",
        "uid-bad",
        after=UNDELIVERED_CONDITIONS,
        reason="UndeliveredSecrets",
        lifecycle="Refused",
    )
    record_report(
        _attempt("payments", "ledger-env", "uid-bad", T0 + timedelta(seconds=1)),
    )
    return {t.name: t for t in TrackedObject.objects.all()}


def _attempt(namespace: str, name: str, uid: str, at: datetime) -> ReportAttempt:
    conditions = [{"type": "Ready", "status": "False", "reason": "Blocked"}]
    return ReportAttempt(ObjectKey(namespace, name, uid), at, 503, "ServerError", conditions)


def _user(username: str, group: str | None = None, *, staff: bool = True) -> User:
    user = User.objects.create_user(username, password="pw-not-a-canary", is_staff=staff)
    if group:
        user.groups.add(Group.objects.get(name=group))
    return user


def _client(user: User | None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


@pytest.fixture
def viewer() -> Client:
    return _client(_user("viewer", "hikyo-viewers"))


@pytest.fixture
def operator() -> Client:
    return _client(_user("operator", "hikyo-operators"))


def _detail(tracked: TrackedObject) -> str:
    return reverse("admin:observations_trackedobject_change", args=[tracked.pk])


def _force_url(tracked: TrackedObject) -> str:
    return reverse("admin:observations_trackedobject_force_resync", args=[tracked.pk])


def _text(response: Any) -> str:
    return response.content.decode()


# -- access ---------------------------------------------------------------------------------


def test_the_groups_hold_view_permissions_and_operators_the_force_resync_one():
    viewers = {p.codename for p in Group.objects.get(name="hikyo-viewers").permissions.all()}
    operators = {p.codename for p in Group.objects.get(name="hikyo-operators").permissions.all()}
    models = ("trackedobject", "reconcilerun", "conditionchange", "eventrecord", "statusreport")
    assert viewers == {f"view_{m}" for m in models}
    assert operators == viewers | {"force_resync"}


def test_logged_out_access_redirects_to_the_login(objects):
    for url in (CHANGELIST, OVERVIEW, _detail(objects["ledger-env"])):
        response = Client().get(url)
        assert response.status_code == 302 and "/admin/login/" in response["Location"], url


def test_a_user_in_neither_group_sees_nothing(objects):
    client = _client(_user("outsider"))
    index = client.get("/admin/")
    assert index.status_code == 200
    assert "HikyoSecrets" not in _text(index) and "overview-link" not in _text(index)
    tracked = objects["ledger-env"]
    for url in (CHANGELIST, OVERVIEW, _detail(tracked), "/admin/observations/reconcilerun/"):
        assert client.get(url).status_code == 403, url
    assert client.post(_force_url(tracked)).status_code == 403
    response = client.post(CHANGELIST, {"action": "force_resync", "_selected_action": [tracked.pk]})
    assert response.status_code == 403


def test_a_viewer_sees_every_page_but_may_not_force(objects, viewer):
    tracked = objects["ledger-env"]
    index = _text(viewer.get("/admin/"))
    assert 'id="overview-link"' in index and "HikyoSecrets" in index
    for url in (
        CHANGELIST,
        OVERVIEW,
        _detail(tracked),
        "/admin/observations/reconcilerun/",
        "/admin/observations/conditionchange/",
        "/admin/observations/eventrecord/",
        "/admin/observations/statusreport/",
    ):
        assert viewer.get(url).status_code == 200, url
    assert 'id="force-resync"' not in _text(viewer.get(_detail(tracked)))
    assert "force_resync" not in _text(viewer.get(CHANGELIST))  # the action is not offered
    cluster = FakeCluster()
    with forcing.use_cluster(cluster):
        assert viewer.post(_force_url(tracked)).status_code == 403
        response = viewer.post(
            CHANGELIST, {"action": "force_resync", "_selected_action": [tracked.pk]}
        )
        assert response.status_code == 403
    assert cluster.annotated == [] and not LogEntry.objects.exists()


def test_every_observation_admin_is_view_only(objects, operator):
    tracked = objects["ledger-env"]
    assert operator.get("/admin/observations/trackedobject/add/").status_code == 403
    assert (
        operator.get(f"/admin/observations/trackedobject/{tracked.pk}/delete/").status_code == 403
    )
    changelist = _text(operator.get(CHANGELIST))
    assert "delete_selected" not in changelist
    for model in ("reconcilerun", "conditionchange", "eventrecord", "statusreport"):
        assert operator.get(f"/admin/observations/{model}/add/").status_code == 403
    assert operator.post(_detail(tracked), {"name": "renamed"}).status_code in (200, 403)
    assert TrackedObject.objects.get(pk=tracked.pk).name == "ledger-env"


# -- the pages ---------------------------------------------------------------------------------


def test_the_overview_counts_and_lists_the_not_ready_first(objects, viewer):
    html = _text(viewer.get(OVERVIEW))
    overall = re.search(r'<table id="tally-overall">.*?</table>', html, re.S).group(0)
    assert '<td class="count-total">2</td>' in overall
    assert '<td class="ready-ratio">1/2 (50 %)</td>' in overall
    not_ready = re.search(r'<table id="not-ready-table">.*?</table>', html, re.S).group(0)
    assert "payments/ledger-env" in not_ready and "payments/payments-env" not in not_ready
    assert "Delivery/UndeliveredSecrets" in not_ready
    assert 'data-group="prod"' in html and 'data-group="payments"' in html
    assert 'id="operator-leader">unknown<' in html  # no operator runs in the test process
    assert 'id="operator-queue-depth">unknown<' in html
    instances = re.search(r'<table id="instances-table">.*?</table>', html, re.S).group(0)
    assert 'data-instance="prod"' in instances and '<td class="paused">no</td>' in instances


def test_an_empty_overview_does_not_claim_every_hikyosecret_is_ready(viewer):
    all_ready = re.search(r'id="all-ready">(.*?)<', _text(viewer.get(OVERVIEW)), re.S)
    assert all_ready and all_ready.group(1).startswith("No HikyoSecret is recorded yet")


def test_a_ready_overview_says_so(objects, viewer):
    TrackedObject.objects.filter(ready=False).update(ready=True)
    all_ready = re.search(r'id="all-ready">(.*?)<', _text(viewer.get(OVERVIEW)), re.S)
    assert all_ready and all_ready.group(1) == "Every HikyoSecret is Ready."


def test_the_overview_shows_an_instance_paused_by_a_429_with_its_org_and_end(objects, viewer):
    until = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=4)
    TrackedObject.objects.filter(name="ledger-env").update(
        paused_until=until, names={"instance": "prod", "org": "org_payments"}
    )
    html = _text(viewer.get(OVERVIEW))
    paused = re.search(r'<td class="paused">(.*?)</td>', html, re.S).group(1)
    assert "org org_payments until" in paused
    assert f'<time datetime="{until:%Y-%m-%dT%H:%M:%SZ}">' in paused
    TrackedObject.objects.filter(name="ledger-env").update(
        paused_until=datetime.now(UTC) - timedelta(seconds=1)
    )
    assert '<td class="paused">no</td>' in _text(viewer.get(OVERVIEW))  # a pause that ended


def test_the_list_shows_the_columns_and_filters(objects, viewer):
    html = _text(viewer.get(CHANGELIST))
    for text in ("payments-env", "ledger-env", "prod", "Refused", "Delivery/UndeliveredSecrets"):
        assert text in html
    assert "<title>Select HikyoSecret to view" in html

    def names(query: str) -> set[str]:
        response = viewer.get(CHANGELIST + query)
        assert response.status_code == 200, query
        return {o.name for o in response.context["cl"].result_list}

    assert names("?ready=not") == {"ledger-env"}
    assert names("?ready=True") == {"payments-env"}
    assert names("?lifecycle=Refused") == {"ledger-env"}
    assert names("?lifecycle=Unreconciled") == set()
    assert names("?blocking=Delivery%2FUndeliveredSecrets") == {"ledger-env"}
    assert names("?instance=prod") == {"payments-env", "ledger-env"}
    assert names("?namespace=payments&ready=False") == {"ledger-env"}
    assert names("?q=ledger") == {"ledger-env"}
    assert names("?o=-2") and names("?o=5.1")  # sortable columns


def test_the_detail_page_shows_conditions_timeline_events_reports_and_remediation(objects, viewer):
    html = _text(viewer.get(_detail(objects["ledger-env"])))
    conditions = re.search(r'<table id="conditions-table">.*?</table>', html, re.S).group(0)
    assert 'data-type="Delivery"' in conditions and "UndeliveredSecrets" in conditions
    assert "2026-01-01T00:00:00Z" in conditions  # last transition
    assert re.search(r'id="blocking">Delivery/UndeliveredSecrets<', html)
    remediation = re.search(r'<div id="remediation">(.*?)</div>', html, re.S).group(1)
    assert "machine-reveal" in remediation and "API_KEY, DB_PASSWORD" in remediation
    assert 'value="kubectl describe hksec -n payments ledger-env"' in html
    timeline = re.search(r'<table id="timeline-table">.*?</table>', html, re.S).group(0)
    assert "run: UndeliveredSecrets" in timeline and "120 ms" in timeline
    assert "Delivery: -/- → False/UndeliveredSecrets" in timeline
    events = re.search(r'<table id="events-table">.*?</table>', html, re.S).group(0)
    assert "UndeliveredSecrets" in events
    reports = re.search(r'<table id="reports-table">.*?</table>', html, re.S).group(0)
    assert "No status reports recorded." not in reports


# -- force resync ------------------------------------------------------------------------------


def test_an_operator_forces_a_resync_from_the_detail_page(objects, operator):
    tracked = objects["ledger-env"]
    page = _text(operator.get(_detail(tracked)))
    assert 'id="force-resync"' in page and "csrfmiddlewaretoken" in page
    cluster = FakeCluster()
    with forcing.use_cluster(cluster):
        assert operator.get(_force_url(tracked)).status_code == 405  # POST only
        response = operator.post(_force_url(tracked), follow=True)
    assert response.status_code == 200
    ((namespace, name, annotations, uid),) = cluster.annotated
    value = annotations[FORCE_SYNC_ANNOTATION]
    assert (namespace, name, uid) == ("payments", "ledger-env", "uid-bad")
    assert value.startswith("resync-")
    (entry,) = LogEntry.objects.all()
    assert entry.user.username == "operator" and entry.object_id == str(tracked.pk)
    assert value in entry.get_change_message()
    html = _text(response)
    assert f"{FORCE_SYNC_ANNOTATION}={value}" in html  # the success message
    timeline = re.search(r'<table id="timeline-table">.*?</table>', html, re.S).group(0)
    assert "requested by operator" in timeline and "not handled yet" in timeline

    # The leader runs it; the run that handled the value shows in the timeline.
    _run(
        "ledger-env",
        "uid-bad",
        after=READY,
        reason="Delivered",
        lifecycle="Synced",
        at=T0 + timedelta(minutes=1),
        forced=value,
        wrote=True,
    )
    html = _text(operator.get(_detail(tracked)))
    timeline = re.search(r'<table id="timeline-table">.*?</table>', html, re.S).group(0)
    assert f"(handled {FORCE_SYNC_ANNOTATION}={value})" in timeline
    assert "not handled yet" not in timeline
    assert re.search(r'id="ready">True<', html)


def test_an_operator_forces_selected_rows_with_the_action(objects, operator):
    cluster = FakeCluster()
    pks = [t.pk for t in objects.values()]
    with forcing.use_cluster(cluster):
        response = operator.post(
            CHANGELIST, {"action": "force_resync", "_selected_action": pks}, follow=True
        )
    assert response.status_code == 200
    assert sorted(n for _, n, _, _ in cluster.annotated) == ["ledger-env", "payments-env"]
    values = {a[FORCE_SYNC_ANNOTATION] for _, _, a, _ in cluster.annotated}
    assert len(values) == 1  # one request, one value
    assert LogEntry.objects.count() == 2
    assert "for 2 HikyoSecret(s)" in _text(response)


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        (Forbidden("patch hikyosecrets payments/ledger-env", 403, "Forbidden"), "HTTP 403"),
        (OSError(f"connection reset while sending {CANARY_TOKEN}"), "OSError"),
    ],
)
def test_a_cluster_error_is_one_admin_error_line(objects, operator, error, shown):
    tracked = objects["ledger-env"]
    with forcing.use_cluster(FakeCluster(error)):
        response = operator.post(_force_url(tracked), follow=True)
    html = _text(response)
    (line,) = [m.message for m in response.context["messages"]]
    assert "\n" not in line and "Traceback" not in html
    assert line.startswith("Force resync not requested for 1 HikyoSecret(s): payments/ledger-env")
    assert shown in line and CANARY_TOKEN not in html
    assert not LogEntry.objects.exists()


def test_no_cluster_configured_is_one_admin_error_line(objects, operator):
    def unavailable() -> Any:
        raise forcing.ClusterUnavailable("no cluster configured: Invalid kube-config file")

    with forcing.use_cluster(unavailable):
        response = operator.post(_force_url(objects["ledger-env"]), follow=True)
    (line,) = [m.message for m in response.context["messages"]]
    assert line == "Force resync failed: no cluster configured: Invalid kube-config file"


# -- deleted objects -----------------------------------------------------------------------------


def test_a_cr_found_gone_is_shown_as_deleted_then_pruned(objects, viewer):
    gone = RunResult(Outcome("Gone", Requeue.NONE), "payments", "ledger-env")
    record_run(gone, T0 + timedelta(minutes=5), 0.01)
    tracked = TrackedObject.objects.get(name="ledger-env")
    assert tracked.deleted_at == T0 + timedelta(minutes=5)
    assert TrackedObject.objects.get(name="payments-env").deleted_at is None
    html = _text(viewer.get(_detail(tracked)))
    assert 'id="deleted-note"' in html
    assert {
        o.name for o in viewer.get(CHANGELIST + "?state=deleted").context["cl"].result_list
    } == {"ledger-env"}
    overview = _text(viewer.get(OVERVIEW))
    assert "payments/ledger-env" not in overview  # not counted among the live ones
    # A week later the sweep forgets it with its history; the live one stays.
    later = T0 + timedelta(days=8)
    _run("payments-env", "uid-ok", after=READY, reason="Delivered", lifecycle="Synced", at=later)
    assert forget_unchecked(T0 + timedelta(days=8)) == 1
    assert set(TrackedObject.objects.values_list("name", flat=True)) == {"payments-env"}
    for model in (ReconcileRun, ConditionChange, EventRecord, StatusReport):
        assert not model.objects.filter(uid="uid-bad").exists(), model.__name__


def test_a_run_of_a_live_object_clears_deleted():
    _run("a", "uid-a", after=READY, reason="Delivered", lifecycle="Synced")
    record_run(RunResult(Outcome("Gone", Requeue.NONE), "payments", "a"), T0 + timedelta(1), 0)
    assert TrackedObject.objects.get(uid="uid-a").deleted_at is not None
    _run("a", "uid-a", after=READY, reason="Delivered", lifecycle="Synced", at=T0 + timedelta(2))
    assert TrackedObject.objects.get(uid="uid-a").deleted_at is None


# -- bounded and fast: 10,000 rows -----------------------------------------------------------------


@pytest.fixture
def ten_thousand() -> None:
    lifecycles = ("Synced", "Retained", "Refused", "Scrubbed", "")
    TrackedObject.objects.bulk_create(
        [
            TrackedObject(
                uid=f"uid-{i}",
                namespace=f"ns-{i % 40}",
                name=f"secret-{i:05d}",
                target=f"target-{i:05d}",
                instance=f"instance-{i % 3}",
                lifecycle=lifecycles[i % 5],
                ready=(i % 5 == 0),
                blocking="" if i % 5 == 0 else "Synced/FetchFailed",
                conditions=[] if i % 5 == 0 else UNDELIVERED_CONDITIONS[2:],
                key_count=i % 9,
                last_checked_at=T0,
                runs_total=i,
            )
            for i in range(10_000)
        ],
        batch_size=1000,
    )


LIST_QUERIES = 10  # session, user, permissions, COUNT, the page, three filters' DISTINCTs
LIST_PAGES = (
    "",
    "?p=50",
    "?ready=not",
    "?q=secret-012",
    "?o=-5.2",
    "?namespace=ns-3&lifecycle=Scrubbed",
)


def test_the_pages_at_ten_thousand_rows_take_a_fixed_number_of_queries(
    ten_thousand, viewer, django_assert_max_num_queries
):
    """No N+1: a page of 100 HikyoSecrets costs the same few queries as a page of 1."""
    viewer.get(CHANGELIST)  # warm the content-type cache
    for query in LIST_PAGES:
        with django_assert_max_num_queries(LIST_QUERIES):
            response = viewer.get(CHANGELIST + query)
        assert response.status_code == 200, query
        assert 0 < len(response.context["cl"].result_list) <= 100, query
    # Session, user, the counts, the not-Ready page, the warnings page, the deleted count, the
    # instances (fetch times, pauses, missing ones), the live stamp: none per row.
    with django_assert_max_num_queries(12):
        assert viewer.get(OVERVIEW).status_code == 200
    tracked = TrackedObject.objects.get(name="secret-00001")
    with django_assert_max_num_queries(10):
        assert viewer.get(_detail(tracked)).status_code == 200


# -- never a value ----------------------------------------------------------------------


def test_no_page_shows_a_canary(objects, operator):
    tracked = objects["ledger-env"]
    with forcing.use_cluster(FakeCluster()):
        operator.post(_force_url(tracked))
    pages = [
        "/admin/",
        OVERVIEW,
        CHANGELIST,
        CHANGELIST + "?ready=not",
        _detail(tracked),
        _detail(objects["payments-env"]),
        f"/admin/observations/trackedobject/{tracked.pk}/history/",
        "/admin/observations/reconcilerun/",
        "/admin/observations/conditionchange/",
        "/admin/observations/eventrecord/",
        "/admin/observations/statusreport/",
    ]
    for url in pages:
        response = operator.get(url)
        assert response.status_code == 200, url
        html = _text(response)
        for canary in CANARIES:
            assert canary not in html, (url, canary)


# -- issue 35: the instance page, the live stamps, "View site" ---------------------------------


class InstanceCluster:
    """The operator's cluster as the instance page reads it; the URL holds a password."""

    def get_instance(self, name: str) -> dict[str, Any] | None:
        if name != "prod":
            return None
        url = f"https://ops:{CANARY_TOKEN}@hikyo.example:8443"
        return {"spec": {"url": url, "caBundle": "LS0tLS1C", "audience": "hikyo-prod"}}


@pytest.fixture
def in_operator(monkeypatch):
    from controlplane.observations import process

    operator = type("Operator", (), {"runtime": type("Runtime", (), {})()})()
    operator.runtime.cluster = InstanceCluster()
    monkeypatch.setattr(process, "current", operator)


def test_the_instance_page_shows_the_instance_redacted_and_its_objects_by_state(
    objects, viewer, in_operator
):
    html = _text(viewer.get(reverse("admin:observations_instance", args=["prod"])))
    assert CANARY_TOKEN not in html
    assert 'id="instance-url">https://redacted@hikyo.example:8443<' in html
    assert 'id="instance-ca">present<' in html and 'id="instance-audience">hikyo-prod<' in html
    assert 'id="instance-found">yes<' in html
    table = re.search(r'<table id="instance-objects-table">.*?</table>', html, re.S).group(0)
    assert re.search(r'data-object="payments/ledger-env" data-state="blocked"', table)
    assert re.search(r'data-object="payments/payments-env" data-state="ready"', table)
    missing = _text(viewer.get(reverse("admin:observations_instance", args=["old"])))
    assert 'class="missing">missing<' in missing and "No HikyoSecret names this instance" in missing


def test_the_live_stamps_move_with_a_run(objects, viewer):
    live_url = reverse("admin:observations_live")
    tracked = objects["ledger-env"]
    overall = viewer.get(live_url).json()["stamp"]
    one = viewer.get(f"{live_url}?object={tracked.pk}").json()["stamp"]
    _run(
        "ledger-env",
        "uid-bad",
        after=UNDELIVERED_CONDITIONS,
        reason="UndeliveredSecrets",
        lifecycle="Refused",
        at=T0 + timedelta(minutes=5),
    )
    assert viewer.get(live_url).json()["stamp"] != overall
    assert viewer.get(f"{live_url}?object={tracked.pk}").json()["stamp"] != one
    assert viewer.get(f"{live_url}?object=x").status_code == 404
    assert Client().get(live_url).status_code == 302  # logged out: to the login page


def test_view_site_leads_to_the_overview(viewer):
    assert f'<a href="{OVERVIEW}">View site</a>' in _text(viewer.get(CHANGELIST))


def test_the_list_searches_namespace_slash_name_instance_reason_and_message(objects, viewer):
    def names(query: str) -> set[str]:
        response = viewer.get(CHANGELIST, {"q": query})
        return {o.name for o in response.context["cl"].result_list}

    assert names("payments/ledger") == {"ledger-env"}
    assert names("UndeliveredSecrets") == {"ledger-env"}
    assert names("machine-reveal opt-in") == {"ledger-env"}  # the blocker's message
    assert names("prod") == {"ledger-env", "payments-env"}


def test_the_detail_page_links_the_workloads_a_run_restarted(objects, viewer):
    result = RunResult(
        outcome=Outcome(reason="Delivered", requeue=Requeue.RESYNC, wrote_secret=True),
        namespace="payments",
        name="payments-env",
        uid="uid-ok",
        conditions_after=READY,
        status_written=True,
        rolled=["Deployment/web"],
    )
    record_run(result, T0 + timedelta(minutes=2), 0.01)
    tracked = objects["payments-env"]
    html = _text(viewer.get(_detail(tracked)))
    rolled = re.search(r'<td id="rolled">(.*?)</td>', html, re.S).group(1)
    assert 'class="workload">Deployment/web</a>' in rolled
    assert "namespace=payments&amp;q=Deployment%2Fweb" in rolled
    timeline = re.search(r'<table id="timeline-table">.*?</table>', html, re.S).group(0)
    assert "restarted Deployment/web" in timeline
    response = viewer.get(CHANGELIST, {"namespace": "payments", "q": "Deployment/web"})
    assert {o.name for o in response.context["cl"].result_list} == {"payments-env"}


def test_the_overview_shows_each_shard_leader_and_size(objects, viewer, settings, monkeypatch):
    """S4.1.8: per shard, its Lease's holder and renewal as the leaders recorded them and the
    HikyoSecrets it holds; a stale record shows no live leader, a shard never recorded none.
    Nothing is read from the apiserver (issue 51): any Lease read fails the test."""
    from dataclasses import replace

    from django.utils import timezone

    from controlplane.observations import process
    from controlplane.observations.leases import LeaseFacts, record_lease
    from k8s.slim_api import CoordinationV1
    from workers.shards import ShardLayout, shard_of

    def no_apiserver(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the overview read a Lease from the apiserver")

    monkeypatch.setattr(CoordinationV1, "read_namespaced_lease", no_apiserver)
    monkeypatch.setattr(process, "current", None)  # a dashboard with no operator in-process
    settings.HIKYO_OPERATOR = replace(settings.HIKYO_OPERATOR, shards=3)
    now = datetime(2026, 12, 1, 10, 0, 5, tzinfo=UTC)
    monkeypatch.setattr(timezone, "now", lambda: now)  # the overview's clock
    for shard, holder, renewed in ((0, "leader-a", now), (1, "leader-b", now - timedelta(hours=1))):
        facts = LeaseFacts(
            ShardLayout(shard, 3).lease_name, shard, 3, holder, renewed, renewed, 15, shard
        )
        record_lease(facts, renewed, 14.0)
    html = _text(viewer.get(OVERVIEW))
    table = re.search(r'<table id="shards-table">.*?</table>', html, re.S).group(0)
    rows = dict(re.findall(r'<tr id="shard-(\d)"[^>]*>(.*?)</tr>', table, re.S))
    sizes = {k: re.search(r'class="shard-size">(\d+)<', row).group(1) for k, row in rows.items()}
    expected = [sum(1 for t in objects.values() if shard_of(t.namespace, 3) == k) for k in range(3)]
    assert [int(sizes[str(k)]) for k in range(3)] == expected and sum(expected) == 2
    assert 'class="shard-holder">leader-a<' in rows["0"] and "2026-12-01T10:00:05" in rows["0"]
    assert 'class="shard-leader">live<' in rows["0"]
    assert 'class="shard-holder">leader-b<' in rows["1"] and "no live leader" in rows["1"]
    assert "2026-12-01T09:00:34" in rows["1"]  # its record ran out: renewal + 15 s + 14 s
    assert 'class="shard-holder">none<' in rows["2"] and "never" in rows["2"]
    assert "no live leader" in rows["2"]
    assert re.findall(r'<tr id="shard-\d" data-leader="(\w+)"', table) == ["live", "none", "none"]


def test_one_shard_shows_no_shard_table(objects, viewer):
    assert 'id="shards-table"' not in _text(viewer.get(OVERVIEW))
