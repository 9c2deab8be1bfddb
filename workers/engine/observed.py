"""What one reconcile saw: the CR and every object a step asked for, as one frozen record.

``observe`` fills it read by read, in S4.2 order, asking ``decide_before_fetch`` which read a
step needs next; a field still ``UNREAD`` was not needed, because an earlier step stops. The
bearer token and Secret data stay out of ``repr`` (S0.4).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from .ports import HikyoServer, LeaseRecord, SecretObject, Workload


class _Unread:
    """Marks a field no step asked for."""

    _instance: _Unread | None = None

    def __new__(cls) -> _Unread:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNREAD"

    def __bool__(self) -> bool:
        return False


UNREAD: Final = _Unread()


@dataclass(frozen=True)
class ForbiddenRead:
    """S4.15: a read answered 403. ``allowed``: a SelfSubjectAccessReview says the operator's
    RBAC permits the call, so admission or quota refused it, not a missing binding."""

    verb: str
    resource: str  # with "/subresource" when there is one
    namespace_terminating: bool = False
    allowed: bool = False


@dataclass(frozen=True)
class Observed:
    namespace: str
    name: str
    forced_full: bool = False
    # None: gone, or replaced since it was queued (R0). Out of repr: its status holds the cursor.
    cr: dict[str, Any] | None = field(default=None, repr=False)
    lease: LeaseRecord | _Unread | None = UNREAD  # S4.1.7
    lease_readable: bool = True
    instance: dict[str, Any] | _Unread | None = UNREAD  # R5
    credential_secret: SecretObject | _Unread | None = UNREAD  # R6
    service_account: dict[str, Any] | _Unread | None = UNREAD  # R6
    token: str | _Unread | None = field(default=UNREAD, repr=False)  # R6 TokenRequest
    token_error: str = ""
    # R6 not minted: seconds left of the 429 pause of the CR's (instance, org) (S4.1.6 rev 4)
    token_deferred: float = 0.0
    claimants: list[dict[str, Any]] | _Unread = field(default=UNREAD, repr=False)  # R7 (CRs)
    target: SecretObject | _Unread | None = UNREAD  # R8
    stamp_root: SecretObject | _Unread | None = UNREAD  # R12
    fresh_root: bytes = field(default=b"", repr=False)  # R12: the root to create if allowed
    reach: list[dict[str, Any]] | _Unread = field(default=UNREAD, repr=False)  # R12, S6.3
    not_found: tuple[str, float] | _Unread | None = UNREAD  # R13, S4.10.0
    server: HikyoServer | _Unread | None = field(default=UNREAD, repr=False, compare=False)
    server_error: str = ""  # R14
    workloads: list[Workload] | _Unread | None = UNREAD  # S6.5; None: the list failed
    stall_first_seen: dict[str, float] = field(default_factory=dict)
    forbidden: ForbiddenRead | None = None  # the last read answered 403 (S4.15)

    @property
    def status(self) -> dict[str, Any]:
        return ((self.cr or {}).get("status")) or {}

    @property
    def metadata(self) -> dict[str, Any]:
        return ((self.cr or {}).get("metadata")) or {}
