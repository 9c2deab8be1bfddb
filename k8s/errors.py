"""Our Kubernetes error tree, as the engine's Cluster port defines it (``workers.engine.errors``);
messages name the call, never a request or response body. ``gateway.translate`` maps the
client's ApiException onto it.
"""

from __future__ import annotations

from workers.engine.errors import (
    AlreadyExists,
    Conflict,
    FenceLost,
    FieldsOwnedElsewhere,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    ServerError,
)

__all__ = [
    "AlreadyExists",
    "Conflict",
    "FenceLost",
    "FieldsOwnedElsewhere",
    "Forbidden",
    "Gone",
    "Invalid",
    "KubeError",
    "NotFound",
    "ServerError",
    "describe",
]


def describe(error: BaseException) -> str:
    """An API or store error in one line without bodies (they may echo a request): our error
    tree's own text is value-free (action and status); anything else is named by its type."""
    return str(error) if isinstance(error, KubeError) else type(error).__name__
