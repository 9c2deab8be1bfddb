"""What a Hikyo exchange brings back, as plain data: the scope asked for, the decoded delivery
(S3.4) and the meaning of the answer (S3.5). The ``hikyo`` adapter builds these; the engine
decides on them. Values and the cursor stay out of every repr (S0.4).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime

# The detail of a fetch whose server certificate did not verify (the transport sets it).
TLS_VERIFICATION_FAILED = "TLS verification failed"


@dataclass(frozen=True)
class DeliveredKey:
    """One key of a delivery (S3.4.3). ``value`` is None for presence-only keys (S3.4.7)."""

    name: str
    classification: str
    presence: str
    value: str | None = field(default=None, repr=False)

    @property
    def carried(self) -> bool:
        """S3.4.5: only ``presence: set`` keys are in the snapshot; the rest are absent (D11)."""
        return self.presence == "set"

    @property
    def delivered(self) -> bool:
        """S3.4.7: a ``value`` member, even ``""``, means the plaintext was delivered."""
        return self.value is not None


@dataclass(frozen=True)
class Delivery:
    """A decoded, S3.4-valid 200 answer. The cursor stays out of repr (S0.4.2)."""

    current: bool
    cursor: str = field(repr=False)
    schema_revision: int
    pin_expired: bool
    keys: tuple[DeliveredKey, ...]
    credential_expires_at: datetime | None = None
    pinned_revision: int | None = None
    capabilities: frozenset[str] | None = None


@dataclass(frozen=True)
class Scope:
    """The delivery scope (S3.3 path IDs)."""

    org: str
    project: str
    environment: str


class FetchOutcome(enum.Enum):
    """S3.5: what a fetch means for the reconcile."""

    DELIVERY = "delivery"  # valid 200 (current or not; see Delivery.current)
    AUTHORITATIVE_NOT_FOUND = "authoritative_not_found"  # S3.5.1
    NOT_MATERIALIZED = "not_materialized"  # 409 conflict
    RATE_LIMITED = "rate_limited"  # 429: instance pause (S4.1.6)
    FAILED = "failed"  # everything else: FetchFailed, backoff


@dataclass(frozen=True)
class FetchResult:
    """One fetch. ``status`` is the HTTP status when a response arrived, else None.

    ``detail`` is a short value-free text for condition messages (S3.6).
    """

    outcome: FetchOutcome
    status: int | None
    delivery: Delivery | None = None
    retry_after: float | None = None
    detail: str = ""


@dataclass(frozen=True)
class ReportResult:
    """One status report (S7.3). ``status`` None means a transport failure (S7.5: drop).

    ``retry_after`` is set on 429 only: Retry-After clamped to [1 s, 1 h] (S7.5);
    the instance pause takes min(retry_after, 300 s) (S4.1.6).
    """

    status: int | None
    detail: str
    retry_after: float | None = None
