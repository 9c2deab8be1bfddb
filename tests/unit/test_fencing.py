"""S4.1.4 fencing: every Kubernetes write of a run asks the fence first and, given a reason,
aborts without writing; reads never ask. The fenced set is the engine port's ``ClusterWrites``,
and the real gateway has no public method outside the port, so no write slips past unlisted."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from k8s.errors import FenceLost, KubeError
from k8s.gateway import KubeCluster
from workers.engine.ports import ClusterReads, ClusterWrites, write_methods
from workers.fencing import READS, WRITES, FencedCluster

# Public names on KubeCluster that are not port methods: each entry must be a helper that
# cannot write, or a write the engine never makes (the fence is bypassed through it).
# select_hikyosecrets / annotate_hikyosecret: manage.py resync only (hikyo.dev/force-sync).
KUBE_CLUSTER_HELPERS: frozenset[str] = frozenset({"select_hikyosecrets", "annotate_hikyosecret"})


def _methods(protocol: type) -> dict[str, Any]:
    """The protocol's own public methods, read independently of ``write_methods``."""
    return {
        name: member
        for name, member in vars(protocol).items()
        if not name.startswith("_") and inspect.isfunction(member)
    }


WRITE_METHODS = _methods(ClusterWrites)
READ_METHODS = _methods(ClusterReads)


def _call_args(method: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """One distinct sentinel per parameter, positional or keyword as the signature says."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for parameter in list(inspect.signature(method).parameters.values())[1:]:  # not self
        sentinel = object()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
            kwargs[parameter.name] = sentinel
        else:
            args.append(sentinel)
    return tuple(args), kwargs


class RecordingCluster:
    """Answers every port method with a per-name sentinel and records each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.returns = {name: object() for name in (*WRITE_METHODS, *READ_METHODS)}

    def __getattr__(self, name: str) -> Any:
        if name not in self.returns:
            raise AttributeError(name)

        def method(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args, kwargs))
            return self.returns[name]

        return method


def test_the_port_has_writes_and_reads_to_check():
    """Guards the parametrisations below against an empty (vacuous) protocol reading."""
    assert len(WRITE_METHODS) >= 7 and len(READ_METHODS) >= 10


@pytest.mark.parametrize("name", sorted(WRITE_METHODS))
def test_a_write_with_a_lost_fence_raises_and_never_reaches_the_cluster(name):
    """S4.1.4: a reason from the fence aborts the write unwritten, naming call and reason."""
    cluster = RecordingCluster()
    asked: list[str] = []

    def fence() -> str:
        asked.append(name)
        return "per-key lock no longer held"

    args, kwargs = _call_args(WRITE_METHODS[name])
    with pytest.raises(FenceLost) as raised:
        getattr(FencedCluster(cluster, fence), name)(*args, **kwargs)
    assert cluster.calls == []
    assert asked == [name]  # asked once, at the call
    assert isinstance(raised.value, KubeError)  # the engine's KubeError handling applies
    assert raised.value.action == name
    assert raised.value.reason == "per-key lock no longer held"
    assert "per-key lock no longer held" in str(raised.value)


@pytest.mark.parametrize("name", sorted(WRITE_METHODS))
def test_a_write_with_the_fence_held_passes_through_unchanged(name):
    cluster = RecordingCluster()
    asked: list[str] = []

    def fence() -> None:
        asked.append(name)

    args, kwargs = _call_args(WRITE_METHODS[name])
    returned = getattr(FencedCluster(cluster, fence), name)(*args, **kwargs)
    assert returned is cluster.returns[name]
    assert cluster.calls == [(name, args, kwargs)]
    assert asked == [name]


def test_the_fence_is_asked_at_each_write_not_once_per_proxy():
    """A run that loses its lock between two writes makes the second abort (S4.1.4: "before
    each Kubernetes write")."""
    cluster = RecordingCluster()
    reasons: list[str | None] = [None, "reconcile deadline of 90 s passed"]
    fenced = FencedCluster(cluster, lambda: reasons.pop(0))
    create = fenced.create_secret  # the bound attribute is taken once, as a caller might
    create(object())
    with pytest.raises(FenceLost, match="deadline"):
        create(object())
    assert [name for name, _, _ in cluster.calls] == ["create_secret"]


@pytest.mark.parametrize("name", sorted(READ_METHODS))
def test_a_read_passes_through_without_asking_the_fence(name):
    """Reads are never fenced: a run past its deadline may still look (S4.1.4 fences writes)."""
    cluster = RecordingCluster()

    def fence() -> str:
        pytest.fail(f"the fence was consulted for the read {name}")

    args, kwargs = _call_args(READ_METHODS[name])
    returned = getattr(FencedCluster(cluster, fence), name)(*args, **kwargs)
    assert returned is cluster.returns[name]
    assert cluster.calls == [(name, args, kwargs)]


def test_fenced_writes_are_exactly_the_ports_writes():
    assert frozenset(WRITE_METHODS) == WRITES == write_methods()
    assert not WRITES & frozenset(READ_METHODS)
    assert frozenset(READ_METHODS) == READS


def test_attributes_off_the_port_are_refused_not_passed_through_unfenced():
    """The wrapped cluster's raw API clients (``core``, ``apps``...) could write around the
    fence; the proxy offers only the port."""

    class WithClient(RecordingCluster):
        core = object()

    fenced = FencedCluster(WithClient(), lambda: pytest.fail("no fence for a refused name"))
    for name in ("core", "api_client", "_cluster_helper", "create_namespaced_secret"):
        with pytest.raises(AttributeError):
            getattr(fenced, name)


def test_every_public_method_of_the_gateway_is_on_the_port():
    """A write added to ``KubeCluster`` but not to ``ClusterWrites`` would run unfenced (or, with
    the strict proxy, be unreachable): it must be named on the port, or listed here as a
    helper that cannot write."""
    public = {
        name
        for name, member in inspect.getmembers(KubeCluster)
        if not name.startswith("_") and callable(member)
    }
    unlisted = public - frozenset(WRITE_METHODS) - frozenset(READ_METHODS) - KUBE_CLUSTER_HELPERS
    assert unlisted == set()
    # and the gateway implements the whole port
    assert frozenset(WRITE_METHODS) | frozenset(READ_METHODS) <= public
    assert not KUBE_CLUSTER_HELPERS & (frozenset(WRITE_METHODS) | frozenset(READ_METHODS))
