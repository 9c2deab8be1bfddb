"""Sharded leaders (S4.1.8, docs/scaling.md): which shard a HikyoSecret belongs to, and the
names a shard's leader uses (its Lease, its part of the keyed queue, the tag its tasks carry).

Pure: the shard of a namespace must be the same in every process and every release, so it is
a fixed hash (the first 8 bytes of SHA-256, big-endian), never Python's ``hash``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from .engine.ports import LEASE_NAME
from .engine.settings import OperatorSettings

MAX_SHARDS = 64
_TAG = re.compile(r"^s(\d+)of(\d+)$")


def shard_of(namespace: str, shards: int) -> int:
    """The shard of every CR (and opted-in workload) in ``namespace``, of ``shards``."""
    if shards < 1:
        raise ValueError("there is at least one shard")
    digest = hashlib.sha256(namespace.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % shards


@dataclass(frozen=True)
class ShardLayout:
    """Shard ``shard`` of ``shards``; the default is the unsharded install."""

    shard: int = 0
    shards: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.shards <= MAX_SHARDS:
            raise ValueError(f"shards must be 1 to {MAX_SHARDS}")
        if not 0 <= self.shard < self.shards:
            raise ValueError(f"shard {self.shard} is not one of 0 to {self.shards - 1}")

    @property
    def sharded(self) -> bool:
        return self.shards > 1

    @property
    def tag(self) -> str:
        """What a task names its shard by ("" unsharded, so one-shard tasks are unchanged)."""
        return f"s{self.shard}of{self.shards}" if self.sharded else ""

    @property
    def lease_name(self) -> str:
        """Shard 0 keeps the install's Lease (S4.1.7 unchanged); the others have their own."""
        return LEASE_NAME if self.shard == 0 else f"{LEASE_NAME}-shard-{self.shard}"

    def owns(self, namespace: str) -> bool:
        return not self.sharded or shard_of(namespace, self.shards) == self.shard

    def owns_object(self, obj: dict) -> bool:
        """For a watch: whether a namespaced object's events belong to this shard."""
        return self.owns((obj.get("metadata") or {}).get("namespace") or "")

    def schedule_prefix(self, prefix: str) -> str:
        """Where this shard schedules in the keyed queue: due times, dispatched keys, key
        state and the S8.4 marker. Locks, fencing and the per-CR records stay under
        ``prefix``, shared by every shard and layout."""
        return f"{prefix}:{self.tag}" if self.sharded else prefix

    def __str__(self) -> str:
        return f"shard {self.shard} of {self.shards}"


def layout_of(settings: OperatorSettings) -> ShardLayout:
    return ShardLayout(settings.shard, settings.shards)


def layout_of_tag(tag: str) -> ShardLayout:
    """The layout a task's tag names; "" is the unsharded install. A malformed tag is an
    error (a message from a different release), never a guess."""
    if not tag:
        return ShardLayout()
    found = _TAG.match(tag)
    if found is None:
        raise ValueError(f"not a shard tag: {tag[:40]!r}")
    return ShardLayout(int(found[1]), int(found[2]))


_SCHEDULING = frozenset({"due", "dispatched", "state", "generation"})


def of_another_layout(key: str, prefix: str, layout: ShardLayout) -> bool:
    """Whether a Redis key under ``prefix`` is what another shard layout scheduled: what a new
    layout's shard 0 retires once the old leaders are long gone (docs/scaling.md). Locks,
    fencing, records and worker slots are shared by every layout and never match."""
    if not key.startswith(prefix + ":"):
        return False
    head, _, rest = key[len(prefix) + 1 :].partition(":")
    if _TAG.match(head) and rest:
        return head != layout.tag
    # The unsharded layout schedules at the top of the prefix.
    return layout.sharded and head in _SCHEDULING
