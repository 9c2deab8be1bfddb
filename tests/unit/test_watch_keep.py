"""A shard leader's watches (S4.1.8): objects of other shards never reach its handlers or its
memory, and a relist does not report them deleted."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

from k8s.watch import Resource, Watcher
from workers.shards import ShardLayout


def listed(*namespaces: str):
    items = [
        {
            "metadata": {
                "name": f"app-{n}",
                "namespace": n,
                "uid": f"uid-{n}",
                "resourceVersion": "1",
            }
        }
        for n in namespaces
    ]
    body = {"kind": "HikyoSecretList", "items": items, "metadata": {"resourceVersion": "7"}}
    return lambda *args, **kwargs: SimpleNamespace(data=json.dumps(body).encode())


def test_a_relist_keeps_only_the_shards_own_objects():
    layout = ShardLayout(0, 2)
    namespaces = ("default", "team-a", "team-b", "payments", "kube-system")
    mine = {n for n in namespaces if layout.owns(n)}
    assert mine and mine != set(namespaces)  # the table puts them in both shards
    seen: list[tuple[str, str]] = []
    resource = Resource("hikyosecrets", listed(*namespaces), keep=layout.owns_object)
    watcher = Watcher(
        None, resource, lambda kind, obj, _: seen.append((kind, obj["metadata"]["namespace"])),
        threading.Event(),
    )  # fmt: skip

    assert watcher._relist() == "7"
    assert sorted(seen) == sorted(("ADDED", n) for n in mine)
    assert {t.namespace for t in watcher.known.values()} == mine

    seen.clear()
    watcher.resource = Resource("hikyosecrets", listed(*namespaces[:1]), keep=layout.owns_object)
    watcher._relist()  # every other object is gone: only this shard's are reported deleted
    gone = {n for kind, n in seen if kind == "DELETED"}
    assert gone == mine - {namespaces[0]}
