"""Where S11.2's template checks run: the one seam between the engine's pure decisions and the
renderer that executes tenant templates.

The engine calls ``parse_templates``, ``render_templates`` and ``template_variables`` here. By
default they run in this process (templates.py, what unit tests and the renderer child use);
every operator process points them, once at start, at a renderer that runs each call isolated
under an operating-system budget (workers/render_pool.py, S11.2 Containment), so one tenant's
template never holds the interpreter that renews the Lease, answers probes and runs other
reconciles.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from . import templates
from .templates import Rendered, TemplateFault


class Renderer(Protocol):
    def parse(
        self, templates: Mapping[str, str], known_keys: frozenset[str] | None
    ) -> TemplateFault | None: ...

    def render(
        self, templates: Mapping[str, str], assembled: Mapping[str, bytes], missing: frozenset[str]
    ) -> Rendered | TemplateFault: ...

    def variables(self, templates: Mapping[str, str]) -> dict[str, frozenset[str]]: ...


class InProcessRenderer:
    """templates.py in the calling process: no budget beyond the count bounds."""

    def parse(
        self, templates_: Mapping[str, str], known_keys: frozenset[str] | None
    ) -> TemplateFault | None:
        return templates.parse_templates(templates_, known_keys)

    def render(
        self, templates_: Mapping[str, str], assembled: Mapping[str, bytes], missing: frozenset[str]
    ) -> Rendered | TemplateFault:
        return templates.render_templates(templates_, assembled, missing)

    def variables(self, templates_: Mapping[str, str]) -> dict[str, frozenset[str]]:
        return templates.template_variables(templates_)


_active: list[Renderer] = [InProcessRenderer()]


def use_renderer(renderer: Renderer) -> Renderer:
    """Point the engine's template checks at ``renderer``; returns the one it replaces."""
    previous, _active[0] = _active[0], renderer
    return previous


def active_renderer() -> Renderer:
    return _active[0]


def parse_templates(
    templates_: Mapping[str, str], known_keys: frozenset[str] | None
) -> TemplateFault | None:
    return _active[0].parse(templates_, known_keys)


def render_templates(
    templates_: Mapping[str, str],
    assembled: Mapping[str, bytes],
    missing: frozenset[str] = frozenset(),
) -> Rendered | TemplateFault:
    return _active[0].render(templates_, assembled, missing)


def template_variables(templates_: Mapping[str, str]) -> dict[str, frozenset[str]]:
    return _active[0].variables(templates_)
