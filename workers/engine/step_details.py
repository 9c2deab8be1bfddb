"""The one line of detail ``explain`` prints for each S4.2 step a run passed: what was read,
names only (never a value, token, cursor or stamp)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .native_types import OPAQUE
from .observed import UNREAD, Observed
from .plan import FetchAttempt, FetchPlan
from .ports import SecretObject
from .rendering import template_variables
from .spec import SpecInvalid, parse_spec


@dataclass
class StepDetails:
    """One line of detail per passed step, from what was read (names only)."""

    observed: Observed
    fetch: FetchPlan | None
    attempt: FetchAttempt | None = None

    def of(self, step: str) -> str:
        return getattr(self, f"_{step.lower()}")()

    def _spec(self) -> Any:
        try:
            return parse_spec(self.observed.cr or {})
        except SpecInvalid:
            return None

    def _r0(self) -> str:
        return "found; not in the operator namespace; no other live operator owns it"

    def _r1(self) -> str:
        return "not being deleted"

    def _r2(self) -> str:
        spec = ((self.observed.cr or {}).get("spec")) or {}
        policy = (spec.get("target") or {}).get("creationPolicy") or "Owner"
        return f"creationPolicy {policy}; the finalizers fit it"

    def _r3(self) -> str:
        spec = ((self.observed.cr or {}).get("spec")) or {}
        interval = spec.get("resyncInterval") or "5m (default)"
        return f"spec valid; resyncInterval {interval}"

    def _r4(self) -> str:
        spec = self._spec()
        kind = spec.target_type if spec else OPAQUE
        if kind == OPAQUE:
            return "target type Opaque"
        return f"target type {kind}; native Secret types are enabled"

    def _r5(self) -> str:
        instance = self.observed.instance
        name = ((instance or {}).get("metadata") or {}).get("name", "") if instance else ""
        return f"HikyoInstance {name} found"

    def _r6(self) -> str:
        spec = self._spec()
        if spec is None:
            return "designated"
        if spec.credential_secret:
            return (
                f"Secret {spec.credential_secret} is designated for instance "
                f"{spec.instance_name}; its hikyo-token is well-formed"
            )
        return (
            f"ServiceAccount {spec.credential_service_account} is designated for instance "
            f"{spec.instance_name}; its TokenRequest succeeded"
        )

    def _r7(self) -> str:
        spec = self._spec()
        target = spec.target_name if spec else ""
        claimants = self.observed.claimants
        others = (
            len([c for c in claimants if c["metadata"].get("uid") != (spec.uid if spec else "")])
            if claimants is not UNREAD
            else 0
        )
        if not others:
            return f"no other HikyoSecret names target {target}"
        return f"this is the earliest of {others + 1} HikyoSecrets naming target {target}"

    def _r8(self) -> str:
        spec = self._spec()
        target = spec.target_name if spec else ""
        if isinstance(self.observed.target, SecretObject):
            return f"Secret {target} exists and is controlled by this HikyoSecret"
        return f"Secret {target} does not exist yet: a delivery creates it"

    def _r9(self) -> str:
        if isinstance(self.observed.target, SecretObject):
            return f"type {self.observed.target.type} as wanted"
        return "no target yet"

    def _r10(self) -> str:
        spec = self._spec()
        if spec is None or spec.target_type == OPAQUE:
            return "an Opaque target needs no particular destinations"
        return f"the mapping holds every destination a {spec.target_type} Secret needs"

    def _r11(self) -> str:
        spec = self._spec()
        if spec is not None and spec.all_keys:
            return (
                "acknowledgedLoaderKeys is well-formed; delivered names are checked after the "
                "fetch (all-keys mode)"
            )
        if spec is None or not spec.acknowledged:
            return "no loader-control keys mapped, none acknowledged"
        names = ", ".join(spec.acknowledged)
        return f"acknowledgedLoaderKeys matches the mapped loader-control keys: {names}"

    def _r11a(self) -> str:
        spec = self._spec()
        if spec is None or (not spec.templates and spec.file_format is None):
            return "no template or file format"
        if spec.file_format is not None:
            return f"every assembled key goes into data key {spec.format_key} as {spec.file_format}"
        reads = template_variables(dict(spec.templates))
        policy = "Merge" if spec.template_merge else "Replace"
        entries = "; ".join(
            f"{key} reads {', '.join(sorted(reads[key])) or 'no key'}" for key in sorted(reads)
        )
        return f"templates parse (mergePolicy {policy}): {entries}"

    def _r12(self) -> str:
        if self.observed.stamp_root is None:
            return "absent; the first write creates it (no stamp in reach)"
        return "present"

    def _r13(self) -> str:
        if self.fetch is None:
            return "evaluated"
        if self.fetch.cursor is not None:
            return "the stored cursor is eligible: the fetch is conditional"
        if self.observed.forced_full:
            return "cursor withheld (--fetch makes a cursor-less fetch)"
        return "no eligible cursor: the fetch is a full one"

    def _r14(self) -> str:
        instance = self.observed.instance
        name = ((instance or {}).get("metadata") or {}).get("name", "") if instance else ""
        return f"client for HikyoInstance {name} built (URL and trust valid; no request yet)"

    def _r15(self) -> str:
        attempt = self.attempt
        if attempt is None:
            return "not made"
        if attempt.gate is not None:  # S4.1.6
            return f"not fetched ({attempt.gate.value}; {attempt.wait:.1f} s to wait)"
        result = attempt.result
        assert result is not None
        how = "cursor-less" if self.fetch is None or self.fetch.cursor is None else "with cursor"
        answer = f"HTTP {result.status}" if result.status is not None else "no answer"
        return f"fetched {how}: {answer} ({result.outcome.value.replace('_', ' ')})"


# -- manage.py status ---------------------------------------------------------------------------
