"""Our Kubernetes error tree; messages name the call, never a request or response body.

    KubeError
    ├── NotFound          404
    ├── Conflict          409 (resourceVersion/UID precondition failed)
    │   └── AlreadyExists 409 AlreadyExists
    ├── Forbidden         403 (namespace_terminating tells S4.15's quiet stop)
    ├── Gone              410 (watch expiry)
    └── Invalid           422

This module imports nothing from the kubernetes client, so the pure engine may catch these.
"""

from __future__ import annotations


class KubeError(Exception):
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


class Gone(KubeError):
    pass


class Invalid(KubeError):
    pass


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


def describe(error: BaseException) -> str:
    """An API or store error in one line without bodies (they may echo a request): our error
    tree's own text is value-free (action and status); anything else is named by its type."""
    return str(error) if isinstance(error, KubeError) else type(error).__name__
