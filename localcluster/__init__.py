"""A real local Kubernetes control plane for tests and demos (no Docker, no kubelet)."""

from .binaries import Binaries, BinariesUnavailable, locate_binaries
from .cluster import ComponentFailed, LocalControlPlane, read_state, stop_from_state

__all__ = [
    "Binaries",
    "BinariesUnavailable",
    "ComponentFailed",
    "LocalControlPlane",
    "locate_binaries",
    "read_state",
    "stop_from_state",
]
