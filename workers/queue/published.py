"""The leader's watched reads, published in Redis for scaled workers (workers.published_reads).

A *part* (``instances``, ``workloads``) is one hash of field -> text. A pointer key names the
hash a reader may trust, by a token the leader chose when it wrote the whole hash; both expire
on the server unless the leader refreshes them, so a leader that dies or cannot reach Redis
stops vouching within ``ttl``. Every write checks the pointer first: an event written into a
hash nobody points at any more, or into another leader's, is refused and the leader writes
the whole part again under a new token.

Keys: ``<prefix>:view:<part>`` (the token) and ``<prefix>:view:<part>:<token>`` (the hash).
Only what the watches may cache goes here (k8s.watch_cache): instance objects, which hold no
credential (S1.1.2), and per-namespace counts of opted-in workloads. Never a value, token,
cursor or stamp.
"""

from __future__ import annotations

from collections.abc import Mapping

import redis

from .redis import RedisQueue, bounded

_PRELUDE = """
local pointer = ARGV[1] .. ':view:' .. ARGV[2]
"""

# ARGV: prefix, part, token, ttl ms -> 1 when the pointer still named token (both renewed)
_REFRESH = """
if redis.call('GET', pointer) ~= ARGV[3] then return 0 end
redis.call('PEXPIRE', pointer, ARGV[4])
redis.call('PEXPIRE', pointer .. ':' .. ARGV[3], ARGV[4])
return 1
"""

# ARGV: prefix, part, token, field, value or "" with ARGV[6] = "0" to delete -> 1 when written
_PUT = """
if redis.call('GET', pointer) ~= ARGV[3] then return 0 end
local hash = pointer .. ':' .. ARGV[3]
if ARGV[6] == '1' then
  redis.call('HSET', hash, ARGV[4], ARGV[5])
  local left = redis.call('PTTL', pointer)
  if left > 0 then redis.call('PEXPIRE', hash, left) end  -- as long as the pointer lives
else
  redis.call('HDEL', hash, ARGV[4])
end
return 1
"""

# ARGV: prefix, part, token -> the pointer goes only if it is still this token's
_WITHDRAW = """
if redis.call('GET', pointer) == ARGV[3] then redis.call('DEL', pointer) end
redis.call('DEL', pointer .. ':' .. ARGV[3])
return 1
"""

# ARGV: prefix, part, field -> {0} when nothing is vouched for; {1, value or nil}
_READ = """
local token = redis.call('GET', pointer)
if not token then return {0} end
return {1, redis.call('HGET', pointer .. ':' .. token, ARGV[3])}
"""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class PublishedStore:
    """The Redis side of the published reads; every call bounded (``bounded``)."""

    def __init__(self, client: redis.Redis, prefix: str = "hikyo") -> None:
        self._redis = bounded(client)
        self._prefix = prefix
        script = client.register_script
        self._refresh = script(_PRELUDE + _REFRESH)
        self._put = script(_PRELUDE + _PUT)
        self._withdraw = script(_PRELUDE + _WITHDRAW)
        self._read = script(_PRELUDE + _READ)

    @classmethod
    def beside(cls, queue: RedisQueue) -> PublishedStore:
        """The store in the same Redis, under the same prefix, as ``queue``."""
        return cls(queue.client, queue.prefix)

    def _pointer(self, part: str) -> str:
        return f"{self._prefix}:view:{part}"

    # -- the leader ----------------------------------------------------------------------

    def replace(self, part: str, token: str, fields: Mapping[str, str], ttl: float) -> None:
        """The whole part under ``token``, then the pointer to it, in one transaction."""
        pointer, millis = self._pointer(part), max(1, int(ttl * 1000))
        hash_key = f"{pointer}:{token}"
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(hash_key)
            if fields:
                pipe.hset(hash_key, mapping=dict(fields))
                pipe.pexpire(hash_key, millis)
            pipe.set(pointer, token, px=millis)
            pipe.execute()

    def put(self, part: str, token: str, field: str, value: str | None) -> bool:
        """One field set (or deleted when ``value`` is None); False when ``token`` is no longer
        the one the pointer names, and nothing was written."""
        present = "0" if value is None else "1"
        args = [self._prefix, part, token, field, value or "", present]
        return bool(self._put(args=args))

    def refresh(self, part: str, token: str, ttl: float) -> bool:
        """Both keys' lives renewed; False when the pointer no longer names ``token``."""
        millis = max(1, int(ttl * 1000))
        return bool(self._refresh(args=[self._prefix, part, token, millis]))

    def withdraw(self, part: str, token: str) -> None:
        """Readers stop trusting ``token``'s hash (unless another token took over)."""
        self._withdraw(args=[self._prefix, part, token])

    # -- a worker ------------------------------------------------------------------------

    def read(self, part: str, field: str) -> tuple[bool, str | None]:
        """(vouched for, the field's text or None when absent); (False, None) when no leader
        vouches for the part right now."""
        answer = self._read(args=[self._prefix, part, field])
        if not answer or int(answer[0]) == 0:
            return False, None
        value = answer[1] if len(answer) > 1 else None
        return True, None if value is None else _text(value)
