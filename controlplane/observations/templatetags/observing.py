"""``{{ time|when }}``: an ISO 8601 time with the zone and seconds and, beside it, how long ago
(``times.iso`` and ``times.relative``); the page's script keeps the relative part current."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from .. import presenting
from ..times import iso, relative

register = template.Library()


_WHEN = '<time datetime="{0}">{0}</time> <span class="relative" data-relative-to="{0}">({1})</span>'
_AGE = (
    '<time datetime="{0}" title="{0}"><span class="relative" data-relative-to="{0}" '
    'data-relative-bare="1">{1}</span></time>'
)


@register.filter
def when(at: datetime | None, empty: str = "never") -> SafeString | str:
    return empty if at is None else format_html(_WHEN, iso(at), relative(at, timezone.now()))


@register.filter
def age(at: datetime | None, empty: str = "never") -> SafeString | str:
    """How long ago alone (the list's narrow column), the ISO time as its tooltip."""
    return empty if at is None else format_html(_AGE, iso(at), relative(at, timezone.now()))


@register.simple_tag
def instance_link(name: str, missing: bool = False) -> SafeString | str:
    return presenting.instance_link(name, missing)


@register.simple_tag
def target_link(namespace: str, target: str) -> SafeString | str:
    return presenting.target_link(namespace, target)


@register.simple_tag
def namespace_link(namespace: str) -> SafeString:
    return presenting.namespace_link(namespace)


@register.simple_tag
def workload_links(namespace: str, rolled: str) -> SafeString | str:
    return presenting.workload_links(namespace, rolled)
