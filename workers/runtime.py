"""Assembling a reconcile Engine from settings: the one place the edges meet."""

from __future__ import annotations

from k8s.client import api_client
from k8s.gateway import KubeCluster

from .engine.clients import ClientCache
from .engine.ports import MemoryCoordinationStore
from .engine.reconcile import Engine
from .engine.settings import OperatorSettings


def build_engine(settings: OperatorSettings, kubeconfig: str | None = None) -> Engine:
    if not settings.operator_namespace:
        raise ValueError(
            "HIKYO_OPERATOR_NAMESPACE (or POD_NAMESPACE) must name the operator's namespace"
        )
    return Engine(
        cluster=KubeCluster(api_client(kubeconfig)),
        store=MemoryCoordinationStore(),
        settings=settings,
        client_for=ClientCache(),
    )
