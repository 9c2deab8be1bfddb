"""The engine's error tree: what its ports raise, and the few unexpected failures of a run.

Expected outcomes (a refusal, a failed fetch, a pause) are data (``Outcome``), never exceptions.
Every message is value-free: it names a call, a rule or an object, never a body or a value.

    EngineError
    ├── KubeError             a Kubernetes call through the Cluster port failed
    │   ├── NotFound          404
    │   ├── Conflict          409 (resourceVersion/UID precondition failed)
    │   │   ├── AlreadyExists 409 AlreadyExists
    │   │   └── FieldsOwnedElsewhere  409 of a server-side apply: another manager owns keys
    │   ├── Forbidden         403 (namespace_terminating tells S4.15's quiet stop)
    │   ├── Gone              410 (watch expiry)
    │   ├── Invalid           422
    │   ├── ServerError       any other status (5xx, 401, 429, ...)
    │   └── FenceLost         S4.1.4: the run may no longer write
    └── HikyoClientError      the Hikyo adapter (S3.6): fixed texts, no value, no URL query
        ├── InvalidResponse   a 200 body that breaks S3.4
        ├── InvalidBaseUrl    spec.url breaks S3.1; no request is made
        └── InvalidTrust      caBundle breaks S3.2; no request is made
"""

from __future__ import annotations


class EngineError(Exception):
    """Base of every error the engine or its ports raise."""


class KubeError(EngineError):
    def __init__(self, action: str, status: int | None, reason: str = "") -> None:
        self.action = action  # e.g. "create secrets ns/name"
        self.status = status
        self.reason = reason
        super().__init__(f"{action}: HTTP {status}{' ' + reason if reason else ''}")


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    pass


class AlreadyExists(Conflict):
    pass


class FieldsOwnedElsewhere(Conflict):
    """A server-side apply (S11.4) met data keys another field manager owns: their names."""

    def __init__(self, action: str, status: int | None, reason: str, keys: tuple[str, ...]):
        super().__init__(action, status, reason)
        self.keys = keys


class Gone(KubeError):
    pass


class Invalid(KubeError):
    pass


class ServerError(KubeError):
    """A status the tree names no class for: the call failed, for reasons of its own."""


class Forbidden(KubeError):
    def __init__(
        self,
        action: str,
        status: int | None,
        reason: str = "",
        *,
        verb: str = "",
        group: str = "",
        resource: str = "",
        subresource: str = "",
        namespace: str = "",
        namespace_terminating: bool = False,
    ) -> None:
        super().__init__(action, status, reason)
        self.verb = verb
        self.group = group
        self.resource = resource
        self.subresource = subresource
        self.namespace = namespace
        self.namespace_terminating = namespace_terminating


class FenceLost(KubeError):
    """S4.1.4 fencing: the per-key lock (or the deadline) is gone, so no write may happen."""

    def __init__(self, action: str, why: str) -> None:
        super().__init__(action, None, why)


class HikyoClientError(EngineError):
    """Base of every Hikyo client error. Messages are fixed texts: no value, no URL query."""


class InvalidResponse(HikyoClientError):
    """A 200 body that violates S3.4; the message names the rule only."""


class InvalidBaseUrl(HikyoClientError):
    """``spec.url`` breaks S3.1; no request is made."""


class InvalidTrust(HikyoClientError):
    """``caBundle`` breaks S3.2 (bad base64 or no parsable PEM certificate); no request."""


# A call that failed for this run only: the caller records it and goes on. Forbidden is not
# among them: the port raised it once, and S4.15 turns it into the run's outcome in one place
# per phase (observe for reads, apply for writes), so no caller in between handles it.
FAILED_CALLS: tuple[type[KubeError], ...] = (
    NotFound,
    Conflict,
    Gone,
    Invalid,
    ServerError,
    FenceLost,
)
