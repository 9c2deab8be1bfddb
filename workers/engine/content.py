"""Content assembly (S4.4 mapping mode, S4.5 all-keys mode): delivered keys → Secret data.

Pure: takes the spec and the decoded keys, returns either the data to converge to or the
refusal that stops the delivery. Refusal messages name keys (S5.6), never values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .fetched import DeliveredKey
from .loader_control import acknowledgement_facts, unacknowledged_delivered
from .messages import key_list
from .native_types import OPAQUE, invalid_content, required_destinations
from .spec import SecretSpec, is_secret_data_key

MAX_TOTAL_BYTES = 1_048_576

UNDELIVERED_SECRETS = "UndeliveredSecrets"
INVALID_SECRET_DATA = "InvalidSecretData"
LOADER_CONTROL_UNACKNOWLEDGED = "LoaderControlUnacknowledged"
KEYS_MISSING = "KeysMissing"


@dataclass(frozen=True)
class Content:
    """What the target's data becomes, plus the informational findings of S4.4."""

    data: dict[str, bytes] = field(repr=False)
    missing: tuple[str, ...] = ()  # source keys the answer did not carry
    env_skip: tuple[str, ...] = ()  # Opaque destinations envFrom may skip


@dataclass(frozen=True)
class ContentRefusal:
    """A Delivery refusal. ``withdraw_typed`` means S4.10.2: the typed target must go."""

    reason: str
    message: str
    withdraw_typed: bool = False
    facts: Mapping[str, str] = field(default_factory=dict, hash=False)  # Condition.facts


def assemble(spec: SecretSpec, keys: Sequence[DeliveredKey]) -> Content | ContentRefusal:
    """S4.4/S4.5 and the content checks: the data of a spec without template or format."""
    assembled = assemble_sources(spec, keys)
    return assembled if isinstance(assembled, ContentRefusal) else checked(spec, assembled)


def assemble_sources(spec: SecretSpec, keys: Sequence[DeliveredKey]) -> Content | ContentRefusal:
    """S4.4/S4.5 alone: every assembled key by its effective secretKey, before S11 shapes it
    and before the content checks (``checked``) run over what the Secret will hold."""
    if spec.all_keys:
        return _assemble_all_keys(spec, keys)
    return _assemble_mapping(spec, keys)


def destinations(spec: SecretSpec, delivered: Iterable[str] | None = None) -> list[str] | None:
    """S11.1's destination set: what S4.6 (loader control) and S4.7.2 (required keys) check.
    The mapping's destinations, or in all-keys mode the ``delivered`` names (None before the
    fetch); with a template, its keys (Replace) or its keys and those (Merge). Under a format
    the Secret holds one file, but a loader reads the file's keys: those."""
    if spec.all_keys:
        assembled = None if delivered is None else sorted(delivered)
    else:
        assembled = [entry.secret_key for entry in spec.mapping]
    if not spec.templates:
        return assembled
    rendered = [key for key, _ in spec.templates]
    if not spec.template_merge:
        return rendered
    return None if assembled is None else sorted({*rendered, *assembled})


def _undelivered(names: Sequence[str], spec: SecretSpec) -> ContentRefusal:
    return ContentRefusal(
        UNDELIVERED_SECRETS,
        f"the server delivered only the presence of secret keys {key_list(names)}: nothing "
        "was written. Enable the project's machine-reveal opt-in and grant this credential "
        "reveal, or set projection: config-only to deliver config keys only",
        facts={"keys": key_list(names)},
    )


def checked(spec: SecretSpec, content: Content) -> Content | ContentRefusal:
    """S4.7.3 content checks and the S4.4.3 size limit, common to both modes."""
    bad = invalid_content(spec.target_type, content.data)
    if bad is not None:
        return ContentRefusal(
            INVALID_SECRET_DATA, f"{bad} must hold a JSON object for type {spec.target_type}"
        )
    total = sum(len(value) for value in content.data.values())
    if total > MAX_TOTAL_BYTES:
        return ContentRefusal(
            INVALID_SECRET_DATA, f"total value size {total} bytes exceeds {MAX_TOTAL_BYTES}"
        )
    return content


def env_skipped(destination: str) -> bool:
    """S4.4: names that fail IsEnvVarName without relaxed validation (D16)."""
    return destination[:1].isdigit() or destination in (".", "..") or destination.startswith("..")


def _assemble_mapping(spec: SecretSpec, keys: Sequence[DeliveredKey]) -> Content | ContentRefusal:
    carried = {key.name: key for key in keys if key.carried}  # S3.4.5: non-set ⇒ absent
    data: dict[str, bytes] = {}
    missing, presence_only, env_skip = [], [], []
    missing_destinations = []
    for entry in spec.mapping:
        source = carried.get(entry.key)
        if source is None:
            missing.append(entry.key)
            missing_destinations.append(entry.secret_key)
        elif source.value is None:
            presence_only.append(entry.key)
        else:
            data[entry.secret_key] = source.value.encode("utf-8")
            if spec.target_type == OPAQUE and env_skipped(entry.secret_key):
                env_skip.append(entry.secret_key)

    if presence_only:
        return _undelivered(presence_only, spec)
    mapped = [entry.secret_key for entry in spec.mapping]
    withdrawn = [
        d for d in required_destinations(spec.target_type, mapped) if d in missing_destinations
    ]
    if withdrawn:
        sources = [e.key for e in spec.mapping if e.secret_key in withdrawn]
        return ContentRefusal(
            KEYS_MISSING,
            f"the server no longer delivers {key_list(sources)}, required for "
            f"{key_list(withdrawn)} of a {spec.target_type} Secret: the Secret was removed",
            withdraw_typed=True,
            facts={"keys": key_list(sources)},
        )
    return Content(data, tuple(missing), tuple(env_skip))


def _assemble_all_keys(spec: SecretSpec, keys: Sequence[DeliveredKey]) -> Content | ContentRefusal:
    carried = [key for key in keys if key.carried]
    presence_only = [key.name for key in carried if key.value is None]
    if presence_only:
        return _undelivered(presence_only, spec)
    bad_names = [key.name for key in carried if not is_secret_data_key(key.name)]
    if bad_names:
        return ContentRefusal(
            INVALID_SECRET_DATA,
            f"delivered key names are not valid Secret data keys: {key_list(bad_names)}",
        )
    names = destinations(spec, (key.name for key in carried)) or []
    unacknowledged = unacknowledged_delivered(names, spec.acknowledged)
    if unacknowledged:
        return ContentRefusal(
            LOADER_CONTROL_UNACKNOWLEDGED,
            f"the server delivered loader-control keys {key_list(unacknowledged)} that "
            "acknowledgedLoaderKeys does not list: the whole replacement was refused",
            facts={
                "keys": key_list(unacknowledged),
                **acknowledgement_facts([*spec.acknowledged, *unacknowledged]),
            },
        )
    data = {key.name: key.value.encode("utf-8") for key in carried if key.value is not None}
    return Content(data)
