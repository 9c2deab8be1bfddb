"""The leader's watched reads, published in Redis for scaled workers (workers.published_reads).

A *part* (``instances``, ``workloads``) is one hash of field -> text. A pointer key names the
hash a reader may trust, by a token the leader chose when it wrote the whole hash; both expire
on the server unless the leader refreshes them, so a leader that dies or cannot reach Redis
stops vouching within ``ttl``. Every write checks the pointer first: an event written into a
hash nobody points at any more, or into another leader's, is refused and the leader writes
the whole part again under a new token.

A token starts with its leader's *term* (``<term>.<random>``), a number each publisher takes
once as its term of leadership begins: the leader Lease's ``leaseTransitions``, which every
new holder counts one higher (k8s.leader), or, for a publisher without an elector, a counter
here. A whole part is never written over a newer term's pointer, so during a Lease handover
the leader that has not yet seen its term end cannot take the part back from its successor
(it is refused until it steps down), even after Redis restarted empty. Only a Lease deleted
by hand (its count starts again) or Redis's counter lost can hand a new leader a lower term;
then the old one keeps the part until it steps down, as both would without terms.

Keys: ``<prefix>:view:<part>`` (the token), ``<prefix>:view:<part>:<token>`` (the hash) and
``<prefix>:view:term`` (the counter).
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

# ARGV: prefix, part, token, ttl ms, then field, value, ... -> 1 when written (the hash, then
# the pointer to it); 0 when the pointer names a newer term's token, and nothing was written
_REPLACE = """
local function term(token) return tonumber(string.match(token, '^(%d+)%.')) or 0 end
local current = redis.call('GET', pointer)
if current and term(current) > term(ARGV[3]) then return 0 end
local hash = pointer .. ':' .. ARGV[3]
redis.call('DEL', hash)
for i = 5, #ARGV, 2 do redis.call('HSET', hash, ARGV[i], ARGV[i + 1]) end
if #ARGV > 4 then redis.call('PEXPIRE', hash, ARGV[4]) end
redis.call('SET', pointer, ARGV[3], 'PX', ARGV[4])
return 1
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
        self._replace = script(_PRELUDE + _REPLACE)
        self._refresh = script(_PRELUDE + _REFRESH)
        self._put = script(_PRELUDE + _PUT)
        self._withdraw = script(_PRELUDE + _WITHDRAW)
        self._read = script(_PRELUDE + _READ)

    @classmethod
    def beside(cls, queue: RedisQueue) -> PublishedStore:
        """The store in the same Redis, under the same prefix, as ``queue``."""
        return cls(queue.client, queue.prefix)

    # -- the leader ----------------------------------------------------------------------

    def next_term(self) -> int:
        """A number higher than any publisher took before (as long as Redis keeps it)."""
        return int(self._redis.incr(f"{self._prefix}:view:term"))

    def replace(self, part: str, token: str, fields: Mapping[str, str], ttl: float) -> bool:
        """The whole part under ``token``, then the pointer to it, in one step; False when the
        pointer names a newer term's token (``<term>.<random>``; a token without a term counts
        as term 0), and nothing was written."""
        millis = max(1, int(ttl * 1000))
        pairs = [text for field, value in fields.items() for text in (field, value)]
        return bool(self._replace(args=[self._prefix, part, token, millis, *pairs]))

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
