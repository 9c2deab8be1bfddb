"""S11: what the Secret holds when the spec shapes the assembled keys with a template or a file
format. Pure, over the spec and plain data.

``before_fetch`` is the step after R11 (``explain`` names it R11a): templates parse and, in
mapping mode, read only assembled keys; a dotenv file's keys are variable names. ``deliver``
runs after a valid full 200: S4.4/S4.5 exactly as without S11 (a presence-only source refuses
the whole delivery whether or not a template reads it), then the template or the format, then
the content checks over the data the Secret will hold.
"""

from __future__ import annotations

from collections.abc import Sequence

from .content import (
    INVALID_SECRET_DATA,
    KEYS_MISSING,
    Content,
    ContentRefusal,
    assemble_sources,
    checked,
    env_skipped,
)
from .fetched import DeliveredKey
from .file_formats import INVALID_TEMPLATE, dotenv_names_refused, render_file
from .messages import key_list
from .native_types import OPAQUE, required_destinations
from .rendering import parse_templates, render_templates
from .spec import SecretSpec
from .templates import TemplateFault

__all__ = ["INVALID_SECRET_DATA", "INVALID_TEMPLATE", "before_fetch", "deliver"]


def before_fetch(spec: SecretSpec) -> ContentRefusal | None:
    """S11.2, S11.3 before any fetch: ``InvalidTemplate`` naming the destination key and the
    kind of error (never template text beyond a variable's name), or None."""
    mapped = [entry.secret_key for entry in spec.mapping]
    if spec.templates:
        known = None if spec.all_keys else frozenset(mapped)
        fault = parse_templates(dict(spec.templates), known)
        if fault is not None:
            return _fault(fault)
    if spec.file_format == "dotenv" and not spec.all_keys:
        return dotenv_names_refused(mapped)
    return None


def deliver(spec: SecretSpec, keys: Sequence[DeliveredKey]) -> Content | ContentRefusal:
    """The Secret's data after a valid full 200, or the refusal that stops the delivery."""
    assembled = assemble_sources(spec, keys)
    if isinstance(assembled, ContentRefusal):
        return assembled
    shaped = _shaped(spec, assembled)
    return shaped if isinstance(shaped, ContentRefusal) else checked(spec, shaped)


def _shaped(spec: SecretSpec, assembled: Content) -> Content | ContentRefusal:
    if spec.file_format is not None and spec.format_key is not None:
        file = render_file(spec.file_format, assembled.data)
        if isinstance(file, ContentRefusal):
            return file
        return Content({spec.format_key: file}, assembled.missing)  # EnvFromSkip never applies
    if not spec.templates:
        return assembled
    missing = frozenset(e.secret_key for e in spec.mapping if e.key in assembled.missing)
    rendered = render_templates(dict(spec.templates), assembled.data, missing)
    if isinstance(rendered, TemplateFault):
        return _fault(rendered)
    withdrawn = [
        key
        for key in required_destinations(spec.target_type, [k for k, _ in spec.templates])
        if key in rendered.lacking
    ]
    if withdrawn:  # S11.2: a typed target's required destination left out is S4.10.2
        return ContentRefusal(
            KEYS_MISSING,
            f"the server no longer delivers {key_list(_sources(spec, rendered.lacking))}, "
            f"required for {key_list(withdrawn)} of a {spec.target_type} Secret: the Secret "
            "was removed",
            withdraw_typed=True,
            facts={"keys": key_list(_sources(spec, rendered.lacking))},
        )
    data = dict(rendered.data)
    if spec.template_merge:  # the assembled keys no entry names stay
        names = {key for key, _ in spec.templates}
        data = {k: v for k, v in assembled.data.items() if k not in names} | data
    skipped = [k for k in sorted(data) if env_skipped(k)] if spec.target_type == OPAQUE else []
    return Content(data, assembled.missing, tuple(skipped))


def _sources(spec: SecretSpec, lacking: dict[str, tuple[str, ...]]) -> list[str]:
    """The source keys behind the assembled names the left-out entries read."""
    names = {name for reads in lacking.values() for name in reads}
    return sorted({e.key for e in spec.mapping if e.secret_key in names} or names)


def _fault(fault: TemplateFault) -> ContentRefusal:
    return ContentRefusal(INVALID_TEMPLATE, fault.message, facts=fault.facts)
