"""The dashboard (issue 10): a read-only Django admin over the observation records.

- ``/admin/observations/trackedobject/overview/``: counts per lifecycle and Ready, overall, per
  HikyoInstance and per namespace; the not-Ready objects first; the operator process's facts.
- ``/admin/observations/trackedobject/``: the HikyoSecrets list (filters, search, sorting).
- ``/admin/observations/trackedobject/<id>/change/``: one HikyoSecret (conditions, timeline,
  events, reports, remediation, a ``kubectl describe`` line, the force-resync button).
- ``/admin/observations/trackedobject/<id>/force-resync/``: POST only, the button's target.

Every observation admin is view-only (no add, change or delete); the only write is the
force-resync request (an annotation on the CR, not a database change), which needs the
``observations.force_resync`` permission and is recorded in LogEntry. Kubernetes is the truth:
nothing here reads a value, token, cursor or stamp (S0.4).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotModified,
    HttpResponseRedirect,
    JsonResponse,
)
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse, reverse_lazy
from django.utils import timezone
from django.views.decorators.http import require_POST

from workers.engine.conditions import (
    TYPE_ORDER,
)

from . import dashboard, forcing, instances, live, presenting, process, timeline, why
from .models import (
    ConditionChange,
    EventRecord,
    ReconcileRun,
    ResyncRequest,
    StatusReport,
    TrackedObject,
)
from .templatetags.observing import age

FORCE_PERMISSION = "observations.force_resync"
TIMELINE_ROWS = 100  # per kind; the tables keep up to 300 per object (managers.py)
EVENTS_SHOWN = 100
REPORTS_SHOWN = 50
FAILURES_NAMED = 5  # a failed request names this many objects in its one-line message


class ReadOnlyAdmin(admin.ModelAdmin):
    """Observation rows are written by the recorder only (design.md principle 3)."""

    show_full_result_count = False  # one COUNT per page, not two
    list_per_page = 100

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class LifecycleFilter(admin.SimpleListFilter):
    title = "lifecycle"
    parameter_name = "lifecycle"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in dashboard.LIFECYCLES]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if value == dashboard.UNRECONCILED:
            return queryset.exclude(lifecycle__in=dashboard.LIFECYCLES[:-1])
        if value in dashboard.LIFECYCLES:
            return queryset.filter(lifecycle=value)
        return queryset


class ReadyFilter(admin.SimpleListFilter):
    title = "Ready"
    parameter_name = "ready"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("True", "True"),
            ("False", "False"),
            ("Unknown", "Unknown"),
            ("not", "not Ready (False or Unknown)"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if value == "True":
            return queryset.filter(ready=True)
        if value == "False":
            return queryset.filter(ready=False)
        if value == "Unknown":
            return queryset.filter(ready__isnull=True)
        if value == "not":
            return queryset.exclude(ready=True)
        return queryset


class StateFilter(admin.SimpleListFilter):
    title = "in the cluster"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("present", "present"), ("deleted", "deleted")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "present":
            return queryset.filter(deleted_at__isnull=True)
        if self.value() == "deleted":
            return queryset.filter(deleted_at__isnull=False)
        return queryset


class BlockingFilter(admin.AllValuesFieldListFilter):
    title = "blocking reason"


class WarningFilter(admin.SimpleListFilter):
    """Informational problems (KeysMissing, EnvFromSkip, Rollout Stalled, expiry), Ready or not."""

    title = "warnings"
    parameter_name = "warnings"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "with warnings"), ("no", "without")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "yes":
            return queryset.exclude(warnings="")
        if self.value() == "no":
            return queryset.filter(warnings="")
        return queryset


# "View site" goes to the overview: the dashboard has no other site (issue 35 item 3). No
# navigation sidebar: the list's why and what-to-do columns need the width at 1,280 px.
admin.site.site_url = reverse_lazy("admin:observations_overview")
admin.site.enable_nav_sidebar = False


def fixed_filter(field: str, title: str, choices: tuple[str, ...]) -> type[admin.SimpleListFilter]:
    """A filter with fixed choices: no DISTINCT scan over a history table of millions of rows
    (AllValuesFieldListFilter's query)."""

    class Fixed(admin.SimpleListFilter):
        parameter_name = field

        def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
            return [(choice, choice) for choice in choices]

        def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
            value = self.value()
            return queryset.filter(**{field: value}) if value in choices else queryset

    Fixed.title = title
    Fixed.__name__ = f"{field.title()}Filter"
    return Fixed


CONDITION_TYPES = TYPE_ORDER


@admin.register(TrackedObject)
class TrackedObjectAdmin(ReadOnlyAdmin):
    # One line per row (issue 49 item 4): the state, whose object, the first problem's reason
    # and message, and when it was last checked; a click on the line opens the rest and what to
    # do. The target Secret and the lifecycle are on the object's page (and are filters).
    list_display = (
        "ready_shown",
        "namespace_shown",
        "name",
        "instance_shown",
        "why_shown",
        "last_checked_shown",
    )
    list_display_links = ("name",)
    list_filter = (
        "namespace",
        "instance",
        LifecycleFilter,
        ReadyFilter,
        ("blocking", BlockingFilter),
        WarningFilter,
        StateFilter,
    )
    # Issue 35: namespace/name (see get_search_results), instance, target, reason, message.
    search_fields = (
        "namespace",
        "name",
        "instance",
        "target",
        "blocking",
        "blocking_message",
        "warnings",
        "last_outcome",
        "rolled",
    )
    search_help_text = (
        "namespace/name, name, namespace, instance, target Secret, reason, message or a "
        "restarted workload (Kind/name)"
    )
    actions = ["force_resync"]
    # The list reads one table, one page: no related rows, so no N+1 (tests count the queries).
    list_select_related = False

    @admin.display(description="namespace", ordering="namespace")
    def namespace_shown(self, obj: TrackedObject) -> str:
        return presenting.namespace_link(obj.namespace)

    @admin.display(description="instance", ordering="instance")
    def instance_shown(self, obj: TrackedObject) -> str:
        return presenting.instance_link(obj.instance, self._why(obj).instance_missing)

    @admin.display(description="state", ordering="ready")
    def ready_shown(self, obj: TrackedObject) -> str:
        """Ready, Blocked, Warning or Paused (why.state); Ready and the lifecycle (a deleted
        object says so) as its tooltip, and as filters."""
        lifecycle = dashboard.lifecycle_of(obj.lifecycle)
        return render_to_string(
            "observations/_state.html",
            {
                "why": self._why(obj),
                "ready": dashboard.ready_label(obj.ready),
                "lifecycle": f"{lifecycle} (deleted)" if obj.deleted_at else lifecycle,
            },
        )

    @admin.display(description="why, and what to do (click)", ordering="blocking")
    def why_shown(self, obj: TrackedObject) -> str:
        return render_to_string("observations/_why_row.html", {"why": self._why(obj)})

    @admin.display(description="checked", ordering="last_checked_at")
    def last_checked_shown(self, obj: TrackedObject) -> str:
        return age(obj.last_checked_at)

    @staticmethod
    def _why(obj: TrackedObject) -> why.Why:
        """Computed once per row and page (each column above asks)."""
        found = getattr(obj, "_why", None)
        if found is None:
            found = obj._why = why.of(obj, timezone.now())  # type: ignore[attr-defined]
        return found

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        """The fields above, and ``namespace/name`` (as kubectl and ``explain`` write it)."""
        found, duplicates = super().get_search_results(request, queryset, search_term)
        namespace, slash, name = search_term.strip().partition("/")
        if slash and namespace and " " not in search_term.strip():
            found = found | queryset.filter(namespace=namespace, name__startswith=name)
        return found, duplicates

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        # The target column links to the objects naming one Secret (?namespace=&target=).
        return lookup == "target" or super().lookup_allowed(lookup, value, request)

    # -- permissions -------------------------------------------------------------------------

    def has_force_resync_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm(FORCE_PERMISSION)

    # -- force resync ------------------------------------------------------------------------

    @admin.action(permissions=["force_resync"], description="Force resync selected HikyoSecrets")
    def force_resync(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._force(request, list(queryset))

    def _force(self, request: HttpRequest, objects: list[TrackedObject]) -> forcing.Requested:
        done = forcing.request_resync(objects)
        if done.error:
            self.message_user(request, f"Force resync failed: {done.error}", messages.ERROR)
            return done
        message = forcing.log_message(done.value)
        asked_at, by = timezone.now(), str(request.user)[:150]
        for tracked in done.asked:
            self.log_change(request, tracked, message)  # the admin's audit trail
        ResyncRequest.objects.bulk_create(
            ResyncRequest(
                uid=t.uid,
                namespace=t.namespace,
                name=t.name,
                at=asked_at,
                value=done.value,
                requested_by=by,
            )
            for t in done.asked
        )
        ResyncRequest.objects.prune(*sorted({t.uid for t in done.asked}))
        if done.asked:
            names = ", ".join(str(t) for t in done.asked[:FAILURES_NAMED])
            more = f" and {len(done.asked) - FAILURES_NAMED} more" if len(done.asked) > 5 else ""
            self.message_user(
                request,
                f"{message} for {len(done.asked)} HikyoSecret(s): {names}{more}.",
                messages.SUCCESS,
            )
        problems = done.failed + done.skipped
        if problems:
            named = "; ".join(f"{t}: {why}" for t, why in problems[:FAILURES_NAMED])
            more = f"; and {len(problems) - FAILURES_NAMED} more" if len(problems) > 5 else ""
            self.message_user(
                request,
                f"Force resync not requested for {len(problems)} HikyoSecret(s): {named}{more}",
                messages.ERROR,
            )
        return done

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # Without the permission the action is not offered; posting it anyway is refused
        # outright (403) rather than answered with "no action selected".
        if (
            request.method == "POST"
            and request.POST.get("action") == "force_resync"
            and not self.has_force_resync_permission(request)
        ):
            raise PermissionDenied
        live_context = self._live_context(["result_list"], live.overall_stamp())
        return super().changelist_view(request, {**live_context, **(extra_context or {})})

    def force_resync_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        tracked = self.get_object(request, unquote(object_id))
        if tracked is None:
            raise Http404("no such HikyoSecret")
        if not self.has_view_permission(request, tracked) or not (
            self.has_force_resync_permission(request, tracked)
        ):
            raise PermissionDenied
        self._force(request, [tracked])
        return HttpResponseRedirect(
            reverse("admin:observations_trackedobject_change", args=[tracked.pk])
        )

    # -- pages -------------------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path("overview/", wrap(self.overview_view), name="observations_overview"),
            path("live/", wrap(self.live_view), name="observations_live"),
            path(
                "instances/<str:name>/",
                wrap(self.instance_view),
                name="observations_instance",
            ),
            path(
                "<path:object_id>/force-resync/",
                wrap(require_POST(self.force_resync_view)),
                name="observations_trackedobject_force_resync",
            ),
            *super().get_urls(),
        ]

    def _live_context(self, regions: list[str], stamp: str, pk: Any = None) -> dict[str, Any]:
        url = reverse("admin:observations_live")
        return {
            "live_url": f"{url}?object={pk}" if pk is not None else url,
            "live_stamp": stamp,
            "live_regions": " ".join(regions),
            "live_poll": live.POLL_MILLISECONDS,
        }

    def _page_context(self, request: HttpRequest, title: str) -> dict[str, Any]:
        return {
            **self.admin_site.each_context(request),
            "title": title,
            "opts": self.model._meta,
            "changelist_url": reverse("admin:observations_trackedobject_changelist"),
            "overview_url": reverse("admin:observations_overview"),
        }

    def overview_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        now = timezone.now()
        summary = dashboard.summary()
        regions = ["operator", "shards", "overall", "not-ready", "warnings", "instances"]
        regions += ["per-instance", "per-namespace"]
        context = {
            **self._page_context(request, "Overview"),
            **self._live_context(regions, live.overall_stamp()),
            "summary": summary,
            "overall_list": [summary.overall],
            "lifecycles": dashboard.LIFECYCLES,
            "not_ready": dashboard.not_ready(now),
            "with_warnings": dashboard.with_warnings(now),
            "not_ready_shown": dashboard.NOT_READY_SHOWN,
            "deleted": TrackedObject.objects.filter(deleted_at__isnull=False).count(),
            "instances": dashboard.instance_facts(now),
            "operator": dashboard.operator_facts(
                process.current, scaled_by_settings=bool(getattr(settings, "REDIS_URL", None))
            ),
            "shards": dashboard.shard_facts(settings.HIKYO_OPERATOR.shards, now),
        }
        return TemplateResponse(request, "observations/overview.html", context)

    def instance_view(self, request: HttpRequest, name: str) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        found = instances.page(dashboard.live(), name, timezone.now())
        context = {
            **self._page_context(request, f"HikyoInstance {name}"),
            **self._live_context(["instance-summary", "instance-objects"], live.overall_stamp()),
            "subtitle": name,
            "instance": found,
        }
        return TemplateResponse(request, "observations/instance.html", context)

    def live_view(self, request: HttpRequest) -> HttpResponse:
        """The stamp a live page polls (``live.py``): the whole store's, or one object's."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        pk = request.GET.get("object")
        if pk is None:
            stamp = live.overall_stamp()
        else:
            tracked = TrackedObject.objects.filter(pk=pk).first() if pk.isdigit() else None
            if tracked is None:
                raise Http404("no such HikyoSecret")
            stamp = live.object_stamp(tracked)
        etag = f'"{stamp}"'
        # The page still shows this stamp: "unchanged", with no body to build or parse.
        answer = (
            HttpResponseNotModified()
            if request.headers.get("If-None-Match") == etag
            else JsonResponse({"stamp": stamp})
        )
        answer["ETag"] = etag
        return answer

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The detail page (read-only: a page of its own rather than a disabled form)."""
        tracked = self.get_object(request, unquote(object_id))
        if tracked is None:
            raise Http404("no such HikyoSecret")
        if not self.has_view_permission(request, tracked):
            raise PermissionDenied
        regions = ["summary", "remediation-module", "conditions", "timeline", "events", "reports"]
        context = {
            **self._page_context(request, f"HikyoSecret {tracked}"),
            **self._live_context(regions, live.object_stamp(tracked), tracked.pk),
            "subtitle": str(tracked),
            "original": tracked,
            "tracked": tracked,
            "lifecycle": dashboard.lifecycle_of(tracked.lifecycle),
            "ready": dashboard.ready_label(tracked.ready),
            "conditions": [_condition_row(c) for c in tracked.conditions or []],
            "why": self._why(tracked),
            "kubectl": dashboard.kubectl_describe(tracked),
            "timeline": timeline.collapse(_timeline(tracked)),
            "events": list(EventRecord.objects.filter(uid=tracked.uid)[:EVENTS_SHOWN]),
            "reports": [
                _report_row(r) for r in StatusReport.objects.filter(uid=tracked.uid)[:REPORTS_SHOWN]
            ],
            "can_force": self.has_force_resync_permission(request, tracked),
            "force_url": reverse(
                "admin:observations_trackedobject_force_resync", args=[tracked.pk]
            ),
        }
        return TemplateResponse(request, "observations/detail.html", context)


def _condition_row(condition: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": condition.get("type") or "",
        "status": condition.get("status") or "",
        "reason": condition.get("reason") or "",
        "message": condition.get("message") or "",
        "observed_generation": condition.get("observedGeneration"),
        "last_transition": condition.get("lastTransitionTime") or "",
    }


def _report_row(report: StatusReport) -> dict[str, Any]:
    sent = []
    for condition in report.conditions or []:
        if isinstance(condition, dict):
            type_, status = condition.get("type", "?"), condition.get("status", "?")
            sent.append(f"{type_}={status}/{condition.get('reason', '')}")
    return {"report": report, "sent": ", ".join(sent) or "-"}


def _timeline(tracked: TrackedObject) -> list[dict[str, Any]]:
    """The rows the detail page's timeline is built from (timeline.entries), newest first."""
    uid = tracked.uid
    return timeline.entries(
        list(ReconcileRun.objects.filter(uid=uid)[:TIMELINE_ROWS]),
        list(ConditionChange.objects.filter(uid=uid)[:TIMELINE_ROWS]),
        list(ResyncRequest.objects.filter(uid=uid)[:TIMELINE_ROWS]),
        tracked.last_forced_sync,
    )


@admin.register(ReconcileRun)
class ReconcileRunAdmin(ReadOnlyAdmin):
    list_display = (
        "started_at",
        "namespace",
        "name",
        "reason",
        "lifecycle",
        "duration_ms",
        "fetched",
        "wrote_secret",
        "status_written",
        "forced_sync",
    )
    list_filter = ("fetched", "wrote_secret", "started_at")
    search_fields = ("=namespace", "name")


@admin.register(ConditionChange)
class ConditionChangeAdmin(ReadOnlyAdmin):
    list_display = (
        "at",
        "namespace",
        "name",
        "type",
        "old_status",
        "old_reason",
        "new_status",
        "new_reason",
    )
    list_filter = (
        fixed_filter("type", "type", CONDITION_TYPES),
        fixed_filter("new_status", "new status", ("True", "False", "Unknown")),
        "at",
    )
    search_fields = ("=namespace", "name")


@admin.register(EventRecord)
class EventRecordAdmin(ReadOnlyAdmin):
    list_display = ("at", "namespace", "name", "type", "reason", "message")
    list_filter = (fixed_filter("type", "type", ("Normal", "Warning")), "at")
    search_fields = ("=namespace", "name")


@admin.register(StatusReport)
class StatusReportAdmin(ReadOnlyAdmin):
    list_display = ("at", "namespace", "name", "http_status", "outcome")
    list_filter = ("at",)
    search_fields = ("=namespace", "name")
