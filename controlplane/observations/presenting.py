"""Links between the dashboard's pages (issue 35 item 2): a HikyoSecret's instance, its target
Secret, its namespace and the workloads it restarted. HTML built with ``format_html`` (every
name escaped)."""

from __future__ import annotations

from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString


def instance_link(name: str, missing: bool = False) -> SafeString | str:
    """To the HikyoInstance page; a missing instance says so beside its name."""
    if not name:
        return "-"
    url = reverse("admin:observations_instance", args=[name])
    if missing:
        return format_html('<a href="{}">{}</a> <span class="missing">(missing)</span>', url, name)
    return format_html('<a href="{}">{}</a>', url, name)


def target_link(namespace: str, target: str) -> SafeString | str:
    """To the HikyoSecrets of the namespace naming that Secret (one, or the claimants)."""
    if not target:
        return "-"
    url = reverse("admin:observations_trackedobject_changelist")
    query = urlencode({"namespace": namespace, "target": target})
    return format_html('<a href="{}?{}">{}</a>', url, query, target)


def namespace_link(namespace: str) -> SafeString:
    url = reverse("admin:observations_trackedobject_changelist")
    return format_html(
        '<a href="{}?{}">{}</a>', url, urlencode({"namespace": namespace}), namespace
    )


def workload_links(namespace: str, rolled: str) -> SafeString | str:
    """Each restarted workload (``Kind/name``), to the HikyoSecrets that restarted it."""
    refs = [ref.strip() for ref in rolled.split(",") if ref.strip()]
    if not refs:
        return "-"
    url = reverse("admin:observations_trackedobject_changelist")
    links = [
        format_html(
            '<a href="{}?{}" class="workload">{}</a>',
            url,
            urlencode({"namespace": namespace, "q": ref}),
            ref,
        )
        for ref in refs
    ]
    return format_html_join(", ", "{}", ((link,) for link in links))
