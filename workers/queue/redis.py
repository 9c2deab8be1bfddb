"""The scaled mode's keyed queue: all state in Redis, shared by the leader and every worker (S8.4).

Nothing lives in process memory, so a worker crash or a leader failover loses no due time,
failure count or mark. Every read-modify-write is one Lua script (atomic on the server); plain
multi-key writes use MULTI. Layout under ``<prefix>:`` (a member is ``namespace/name/uid``):

=========================  ======  ==============================================================
``due:<priority>``         zset    waiting members, score = absolute due time (injected clock)
``dispatched``             zset    members handed out by ``take_due``, score = when
``state:<member>``         hash    prio/forced (waiting), dprio/dforced (dispatched), failures,
                                   dirty/dirty_forced, pdue/pprio/pforced (timer set mid-run),
                                   run (sharded: the lock value of this layout's run)
``lock:<member>``          string  ``<fencing number> <owner>``, PX = lock ttl (S4.1.4)
``fence``                  string  counter behind the fencing numbers
``generation``             string  the S8.4 marker (time it was written)
``notfound:<cr uid>``      hash    binding (a digest), at, seen; PX 1 h (S4.10.0)
``stall:<cr uid>``         hash    ``Kind/name`` of a workload -> time first seen stalled (S6.5)
``workers``                zset    Celery workers advertising their slots, score = expiry;
                                   kept 1 h past it (a worker gone, workers/queue/orphans.py)
``worker-slots``           hash    worker -> how many tasks it runs at once
=========================  ======  ==============================================================

A shard of a sharded install (workers/shards.py) keeps ``due``, ``dispatched``, ``state`` and
``generation`` under its own ``<prefix>:s<k>of<N>:``; everything else stays shared.

Only references, digests, counts and times: never values, tokens, cursors or stamps (S0.4.1).
Scripts name keys from the prefix at run time, so this needs a single Redis (not Cluster).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import redis

from workers.keys import ObjectKey

from .base import (
    DEFAULT_LOCK_TTL,
    GONE_KEPT_SECONDS,
    NOT_FOUND_TTL_SECONDS,
    Clock,
    DispatchedRun,
    KeyedQueue,
    Lock,
    Priority,
    QueueObserver,
    Requeue,
    Ticket,
    Unobserved,
    check_requeue,
    next_timer,
)

# Shared Lua helpers, prepended to each script. ARGV[1] is always the prefix a shard schedules
# under (P); KEYS[1], when given, the prefix every shard shares (G) for locks and fencing. They
# are one prefix in an unsharded install (workers/shards.py).
_PRELUDE = """
local P = ARGV[1]
local G = KEYS[1] or P
local function state_key(m) return P .. ':state:' .. m end
local function lock_key(m) return G .. ':lock:' .. m end
local function due_key(p) return P .. ':due:' .. p end

-- Dedupe (patterns 1, 5): merge into the waiting entry; earlier due, higher priority, forced OR.
-- Returns 1 when the member was not waiting before (an add, for workqueue_adds_total), else 0.
local function enqueue(m, due, prio, forced)
  local s = state_key(m)
  local cur = redis.call('HGET', s, 'prio')
  local added = 1
  if cur then
    added = 0
    cur = tonumber(cur)
    local cur_due = tonumber(redis.call('ZSCORE', due_key(cur), m))
    if cur_due and cur_due < due then due = cur_due end
    if cur < prio then prio = cur end
    if cur ~= prio then redis.call('ZREM', due_key(cur), m) end
    if redis.call('HGET', s, 'forced') == '1' then forced = 1 end
  end
  redis.call('ZADD', due_key(prio), due, m)
  redis.call('HSET', s, 'prio', prio, 'forced', forced)
  return added
end

-- A timer set while the key is in flight; the run's finish merges it.
local function pend(m, due, prio, forced)
  local s = state_key(m)
  local f = redis.call('HMGET', s, 'pdue', 'pprio')
  if f[1] then
    due = math.min(due, tonumber(f[1]))
    prio = math.min(prio, tonumber(f[2]))
  end
  redis.call('HSET', s, 'pdue', due, 'pprio', prio)
  if forced == 1 then redis.call('HSET', s, 'pforced', 1) end
end

-- A handed-out key whose run will not finish: due now, with every trigger that arrived meanwhile.
local function hand_out_again(m, now)
  local s = state_key(m)
  local f = redis.call('HMGET', s, 'dprio', 'dforced', 'dirty', 'dirty_forced', 'pforced')
  local prio = tonumber(f[1]) or 1
  local forced = 0
  if f[2] == '1' or f[4] == '1' or f[5] == '1' then forced = 1 end
  if f[3] == '1' then prio = 0 end
  redis.call('ZREM', P .. ':dispatched', m)
  redis.call('HDEL', s, 'dprio', 'dforced', 'dirty', 'dirty_forced', 'pdue', 'pprio', 'pforced',
    'run')
  enqueue(m, now, prio, forced)
end

-- In flight here. Another layout's run holding the shared lock is not: a trigger marked dirty
-- here would wait for a finish that never comes here, so the key waits due, and its dispatch
-- meets the lock in begin.
local function in_flight(m)
  return redis.call('HEXISTS', state_key(m), 'dprio') == 1
    or (G == P and redis.call('EXISTS', lock_key(m)) == 1)
end
"""

# ARGV: prefix, member, now, due, priority, forced, delay
_ADD = """
local m, now, due = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local prio, forced, delay = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
if in_flight(m) then
  if delay <= 0 then
    local s = state_key(m)
    redis.call('HSET', s, 'dirty', 1)
    if forced == 1 then redis.call('HSET', s, 'dirty_forced', 1) end
  else
    pend(m, due, prio, forced)
  end
  return 0
end
return enqueue(m, due, prio, forced)
"""

# ARGV: prefix, member, due, priority, only_if_unscheduled
_SCHEDULE = """
local m, due, prio, only = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5] == '1'
if in_flight(m) then
  if not only then pend(m, due, prio, 0) end
  return 0
end
if only and redis.call('HEXISTS', state_key(m), 'prio') == 1 then return 0 end
return enqueue(m, due, prio, 0)
"""

# ARGV: prefix, now, limit, lowest priority value. Each row: member, priority, forced, due time
# (the score as Redis wrote it, a string: Lua numbers would come back truncated to integers).
_TAKE_DUE = """
local now, remaining, lowest = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local out = {}
for p = 0, lowest do
  if remaining <= 0 then break end
  local scored = redis.call(
    'ZRANGEBYSCORE', due_key(p), '-inf', now, 'WITHSCORES', 'LIMIT', 0, remaining)
  for i = 1, #scored, 2 do
    local m, due = scored[i], scored[i + 1]
    local s = state_key(m)
    local forced = redis.call('HGET', s, 'forced') or '0'
    redis.call('ZREM', due_key(p), m)
    redis.call('HDEL', s, 'prio', 'forced')
    redis.call('HSET', s, 'dprio', p, 'dforced', forced)
    redis.call('ZADD', P .. ':dispatched', now, m)
    out[#out + 1] = {m, p, forced, due}
    remaining = remaining - 1
  end
end
return out
"""

# ARGV: prefix, now, cutoff
_REDISPATCH = """
local now, cutoff = tonumber(ARGV[2]), ARGV[3]
local count = 0
for _, m in ipairs(redis.call('ZRANGEBYSCORE', P .. ':dispatched', '-inf', cutoff)) do
  if redis.call('EXISTS', lock_key(m)) == 0 then
    hand_out_again(m, now)
    count = count + 1
  end
end
return count
"""

# ARGV: prefix, now, then member and owner pairs (owner '' for a run nobody holds the lock of)
_REDISPATCH_RUNS = """
local now = tonumber(ARGV[2])
local count = 0
for i = 3, #ARGV, 2 do
  local m, expected = ARGV[i], ARGV[i + 1]
  if redis.call('ZSCORE', P .. ':dispatched', m) then
    local held = redis.call('GET', lock_key(m))
    local owner = ''
    if held then owner = string.sub(held, string.find(held, ' ', 1, true) + 1) end
    if owner == expected then
      redis.call('DEL', lock_key(m))
      hand_out_again(m, now)
      count = count + 1
    end
  end
end
return count
"""

# ARGV: prefix, member, owner, ttl ms, dispatched only ('1'), due again at (sharded only),
#       claim the waiting entry ('1'), now
_BEGIN = """
local m, owner, ttl = ARGV[2], ARGV[3], ARGV[4]
local lk = lock_key(m)
if ARGV[5] == '1' then
  if redis.call('EXISTS', lk) == 1 then
    -- Sharded: the lock may be another layout's run (a rolling change of the shard count),
    -- whose finish never settles this layout's dispatch: due again shortly, not when stale.
    -- A second copy of this layout's own message (its run recorded below) changes nothing.
    if G ~= P and redis.call('ZSCORE', P .. ':dispatched', m)
        and redis.call('HGET', state_key(m), 'run') ~= redis.call('GET', lk) then
      hand_out_again(m, tonumber(ARGV[6]))
    end
    return false
  end
  if not redis.call('ZSCORE', P .. ':dispatched', m) then return false end
end
if redis.call('EXISTS', lk) == 1 then
  local s = state_key(m)
  redis.call('HSET', s, 'dirty', 1)
  if redis.call('HGET', s, 'dforced') == '1' then redis.call('HSET', s, 'dirty_forced', 1) end
  return false
end
local token = redis.call('INCR', G .. ':fence')
redis.call('SET', lk, token .. ' ' .. owner, 'PX', ttl)
if G ~= P then redis.call('HSET', state_key(m), 'run', token .. ' ' .. owner) end
if ARGV[7] == '1' then
  -- The run stands for the waiting entry (claim_waiting): taken as take_due takes it.
  local s = state_key(m)
  local cur = redis.call('HGET', s, 'prio')
  if cur then
    local forced = redis.call('HGET', s, 'forced') or '0'
    redis.call('ZREM', due_key(cur), m)
    redis.call('HDEL', s, 'prio', 'forced')
    redis.call('HSET', s, 'dprio', cur, 'dforced', forced)
    redis.call('ZADD', P .. ':dispatched', ARGV[8], m)
  end
end
return tostring(token)
"""

# ARGV: prefix, member, lock value, ttl ms
_RENEW = """
if redis.call('GET', lock_key(ARGV[2])) == ARGV[3] then
  redis.call('PEXPIRE', lock_key(ARGV[2]), ARGV[4])
  return 1
end
return 0
"""

# ARGV: prefix, member, lock value, now, expected failures (-1: not checked), has timer, timer
#       due, timer priority, failures after (-1: kept as they are), forced next
_FINISH = """
local m, value, now = ARGV[2], ARGV[3], tonumber(ARGV[4])
local lk, s = lock_key(m), state_key(m)
local held = redis.call('GET', lk)
if held and held ~= value then return {'fenced'} end
local expected = tonumber(ARGV[5])
if expected >= 0 and tonumber(redis.call('HGET', s, 'failures') or '0') ~= expected then
  return {'retry'}
end
if held then redis.call('DEL', lk) end
redis.call('ZREM', P .. ':dispatched', m)
local f = redis.call('HMGET', s, 'dirty', 'dirty_forced', 'pdue', 'pprio', 'pforced')
redis.call('HDEL', s, 'dprio', 'dforced', 'dirty', 'dirty_forced', 'pdue', 'pprio', 'pforced',
  'run')
if tonumber(ARGV[9]) > 0 then
  redis.call('HSET', s, 'failures', ARGV[9])
elseif tonumber(ARGV[9]) == 0 then
  redis.call('HDEL', s, 'failures')
end
local due, prio = nil, nil
local forced = tonumber(ARGV[10])
local added = 0
local function want(d, p)
  if due == nil then due, prio = d, p else due, prio = math.min(due, d), math.min(prio, p) end
end
if ARGV[6] == '1' then want(tonumber(ARGV[7]), tonumber(ARGV[8])) end
if f[3] then want(tonumber(f[3]), tonumber(f[4])) end
if f[1] == '1' then want(now, 0) end
if f[2] == '1' or f[5] == '1' then forced = 1 end
if due ~= nil then
  added = enqueue(m, due, prio, forced)
elseif forced == 1 and redis.call('HEXISTS', s, 'prio') == 1 then
  redis.call('HSET', s, 'forced', 1)
end
local cur = redis.call('HGET', s, 'prio')
if cur then return {'ok', redis.call('ZSCORE', due_key(cur), m), added} end
return {'ok', false, added}
"""


def _text(value: Any) -> str:
    """The caller's client may or may not decode responses."""
    return value.decode() if isinstance(value, bytes) else str(value)


def member(key: ObjectKey) -> str:
    """``namespace/name/uid``: Kubernetes forbids ``/`` in namespaces and UIDs."""
    if "/" in key.namespace or "/" in key.uid:
        raise ValueError("a namespace or uid cannot contain '/'")
    return f"{key.namespace}/{key.name}/{key.uid}"


def key_of(text: str) -> ObjectKey:
    namespace, rest = text.split("/", 1)
    name, uid = rest.rsplit("/", 1)
    return ObjectKey(namespace, name, uid)


# S4.1.6 token bucket, atomic across every process. KEYS[1] bucket hash; ARGV: now, rate, burst.
# Returns 0 when a token was taken, else the seconds until one will be there (none taken).
_TAKE_TOKEN = """
local now, rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1]) or burst
local at = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local wait = 0
if tokens >= 1 - 1e-6 then tokens = math.max(0, tokens - 1) else wait = (1 - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 60000)
return tostring(wait)
"""

# ARGV: prefix, now. Drops expired advertisements; returns {workers, slots}.
# ARGV: prefix, now, forget-before. An expired advertisement stays (a worker gone, not
# withdrawn) until forget-before passes it.
_LIVE_SLOTS = """
local now, forget = ARGV[2], ARGV[3]
local workers, slots = P .. ':workers', P .. ':worker-slots'
for _, w in ipairs(redis.call('ZRANGEBYSCORE', workers, '-inf', forget)) do
  redis.call('HDEL', slots, w)
end
redis.call('ZREMRANGEBYSCORE', workers, '-inf', forget)
local total = 0
local live = redis.call('ZRANGEBYSCORE', workers, '(' .. now, '+inf')
for _, w in ipairs(live) do
  total = total + (tonumber(redis.call('HGET', slots, w)) or 0)
end
return {#live, total}
"""

# A sharded dispatch that met another layout's run holding the lock is due again this soon.
BUSY_ELSEWHERE_RETRY_SECONDS = 5.0
CALL_TIMEOUT_SECONDS = 5.0  # every script is a few O(log n) steps; 5 s means Redis is gone


def bounded(client: redis.Redis) -> redis.Redis:
    """Every call bounded (issue 7 items 2, 4): a client built without socket timeouts (older
    redis-py defaults to none) gets them, so a Redis that accepts and never answers raises
    ``redis.TimeoutError`` instead of holding a run. A caller's own timeouts stay."""
    options = client.connection_pool.connection_kwargs
    for option in ("socket_timeout", "socket_connect_timeout"):
        if options.get(option) is None:
            options[option] = CALL_TIMEOUT_SECONDS
    return client


class RedisQueue(KeyedQueue):
    """``KeyedQueue`` on Redis. Due times are absolute floats on ``clock``; locks use PX."""

    NOT_FOUND_TTL_SECONDS = NOT_FOUND_TTL_SECONDS
    _FINISH_ATTEMPTS = 8
    observer: QueueObserver = Unobserved()  # metrics (workers/metrics.py) set their own

    def __init__(
        self,
        client: redis.Redis,
        prefix: str = "hikyo",
        clock: Clock = time.time,
        rng: random.Random | None = None,
        *,
        scheduling: str | None = None,
    ) -> None:
        """``scheduling``: a shard's own prefix for due times, dispatched keys, key state and
        the S8.4 marker (workers/shards.py); locks, fencing, records and worker slots stay
        under ``prefix``. None: one prefix for all (an unsharded install)."""
        self._redis = bounded(client)
        self._prefix = prefix
        self._scheduling = scheduling or prefix
        self._shared = [prefix]
        self._clock = clock
        self._rng = rng or random.Random()
        script = client.register_script
        self._add = script(_PRELUDE + _ADD)
        self._schedule = script(_PRELUDE + _SCHEDULE)
        self._take_due = script(_PRELUDE + _TAKE_DUE)
        self._redispatch = script(_PRELUDE + _REDISPATCH)
        self._redispatch_runs = script(_PRELUDE + _REDISPATCH_RUNS)
        self._begin = script(_PRELUDE + _BEGIN)
        self._renew = script(_PRELUDE + _RENEW)
        self._finish = script(_PRELUDE + _FINISH)
        self._take_token = script(_TAKE_TOKEN)
        self._live_slots = script(_PRELUDE + _LIVE_SLOTS)

    @property
    def client(self) -> redis.Redis:
        """The bounded client, for the other stores that share this Redis (queue.published)."""
        return self._redis

    @property
    def prefix(self) -> str:
        return self._prefix

    @property
    def scheduling(self) -> str:
        return self._scheduling

    def in_shard(self, scheduling: str) -> RedisQueue:
        """The same store seen by the shard that schedules under ``scheduling``."""
        if scheduling == self._scheduling:
            return self
        view = RedisQueue(self._redis, self._prefix, self._clock, self._rng, scheduling=scheduling)
        view.observer = self.observer
        return view

    def retire(self, belongs_elsewhere: Callable[[str], bool], batch: int = 1000) -> int:
        """Deletes every key under the prefix ``belongs_elsewhere`` names (another shard
        layout's scheduling, workers/shards.py), by SCAN and UNLINK; how many went."""
        gone = 0
        doomed: list[str] = []
        for raw in self._redis.scan_iter(match=f"{self._prefix}:*", count=batch):
            name = _text(raw)
            if belongs_elsewhere(name):
                doomed.append(name)
            if len(doomed) >= batch:
                gone += int(self._redis.unlink(*doomed))
                doomed = []
        if doomed:
            gone += int(self._redis.unlink(*doomed))
        return gone

    # -- queueing ------------------------------------------------------------------------

    def add(
        self,
        key: ObjectKey,
        *,
        priority: Priority = Priority.NORMAL,
        delay: float = 0.0,
        forced_full: bool = False,
    ) -> None:
        """Pattern 1: dedupe while waiting; a key in flight is marked dirty (S4.1.4)."""
        now = self._clock()
        due = now + max(delay, 0.0)
        added = self._add(
            keys=self._shared,
            args=[
                self._scheduling,
                member(key),
                now,
                due,
                int(Priority(priority)),
                int(forced_full),
                delay,
            ],
        )
        if added == 1:
            self.observer.added()

    def schedule(
        self,
        key: ObjectKey,
        *,
        delay: float,
        priority: Priority = Priority.RESYNC,
        only_if_unscheduled: bool = False,
    ) -> None:
        """S4.1.3 timers; S4.1.2: with ``only_if_unscheduled`` an existing due time stays."""
        due = self._clock() + max(delay, 0.0)
        added = self._schedule(
            keys=self._shared,
            args=[
                self._scheduling,
                member(key),
                due,
                int(Priority(priority)),
                int(only_if_unscheduled),
            ],
        )
        if added == 1:
            self.observer.added()

    def take_due(self, limit: int = 100) -> list[Ticket]:
        """S4.1.5/S4.1.6: due keys, FIRST before NORMAL before RESYNC, earliest first; atomic,
        so even two processes that both believe they lead never take a key twice."""
        if limit <= 0:
            return []
        now = self._clock()
        rows = self._take_due(
            keys=self._shared, args=[self._scheduling, now, limit, int(max(Priority))]
        )
        tickets = []
        for m, p, forced, due in rows:
            tickets.append(Ticket(key_of(_text(m)), _text(forced) == "1", Priority(int(p))))
            self.observer.taken(now - float(_text(due)))
        return tickets

    def redispatch_stale(self, older_than: float) -> int:
        """A lost message or a killed worker must not lose the key: due again, unless locked."""
        now = self._clock()
        count = int(
            self._redispatch(keys=self._shared, args=[self._scheduling, now, now - older_than])
        )
        self.observer.added(count)  # dispatched keys are not waiting: each one enters again
        return count

    def dispatched_runs(self) -> list[DispatchedRun]:
        members = [_text(m) for m in self._redis.zrange(self._scheduled("dispatched"), 0, -1)]
        if not members:
            return []
        held = self._redis.mget([self._key(f"lock:{m}") for m in members])
        return [
            DispatchedRun(key_of(m), None if value is None else _text(value).split(" ", 1)[1])
            for m, value in zip(members, held, strict=True)
        ]

    def redispatch(self, runs: Sequence[DispatchedRun]) -> int:
        if not runs:
            return 0
        pairs = [part for run in runs for part in (member(run.key), run.owner or "")]
        count = int(
            self._redispatch_runs(keys=self._shared, args=[self._scheduling, self._clock(), *pairs])
        )
        self.observer.added(count)
        return count

    # -- per-key lock (S4.1.4) -----------------------------------------------------------

    def begin(
        self,
        key: ObjectKey,
        owner: str,
        ttl: float = DEFAULT_LOCK_TTL,
        *,
        dispatched_only: bool = False,
        claim_waiting: bool = False,
    ) -> Lock | None:
        """SET NX PX: the lock expires on the server even if this process dies mid-run."""
        if ttl <= 0:
            raise ValueError("lock ttl must be positive")
        only = "1" if dispatched_only else "0"
        claim = "1" if claim_waiting else "0"
        now = self._clock()
        again_at = now + BUSY_ELSEWHERE_RETRY_SECONDS
        token = self._begin(
            keys=self._shared,
            args=[self._scheduling, member(key), owner, _millis(ttl), only, again_at, claim, now],
        )
        return None if token is None else Lock(key, owner, _text(token))

    def renew(self, lock: Lock, ttl: float = DEFAULT_LOCK_TTL) -> bool:
        return bool(
            self._renew(
                keys=self._shared,
                args=[self._scheduling, member(lock.key), _lock_value(lock), _millis(ttl)],
            )
        )

    def holds(self, lock: Lock) -> bool:
        """S4.1.4 fencing: True only while this very acquisition is unexpired."""
        value = self._redis.get(self._lock_key(lock.key))
        return value is not None and _text(value) == _lock_value(lock)

    def finish(
        self,
        lock: Lock,
        requeue: Requeue,
        *,
        delay: float | None = None,
        resync_seconds: float = 300.0,
        forced_full_next: bool = False,
        resync_at_least: float | None = None,
    ) -> float | None:
        """S4.1.3: release the lock and set the next due time (see ``base.next_timer``).

        Fencing: when another owner holds the key now, this stale run changes nothing. The
        backoff is computed here (one definition, ``backoff.py``) from the failure count read
        first; the script re-checks that count and we retry if it moved. Only a backoff needs
        the count: a resync or no timer resets it and AFTER keeps it, in the script, so those
        skip the read (issue 13: a round trip less for most runs).
        """
        check_requeue(requeue, delay)
        name = member(lock.key)
        counted = requeue is Requeue.BACKOFF
        for _ in range(self._FINISH_ATTEMPTS):
            failures = self.failures(lock.key) if counted else 0
            now = self._clock()
            timer = next_timer(
                requeue,
                failures,
                delay=delay,
                resync_seconds=resync_seconds,
                rng=self._rng,
                resync_at_least=resync_at_least,
            )
            after = -1 if requeue is Requeue.AFTER else (timer.failures if timer else 0)
            reply = self._finish(
                keys=self._shared,
                args=[
                    self._scheduling,
                    name,
                    _lock_value(lock),
                    now,
                    failures if counted else -1,
                    int(timer is not None),
                    now + timer.delay if timer else 0,
                    int(timer.priority) if timer else 0,
                    after,
                    int(forced_full_next),
                ],
            )
            status = _text(reply[0])
            if status == "fenced":
                return None
            if status == "ok":
                if requeue is Requeue.BACKOFF:
                    self.observer.retried()
                if len(reply) > 2 and reply[2] == 1:
                    self.observer.added()
                return None if reply[1] is None else float(_text(reply[1])) - now
        raise RuntimeError(f"finishing {lock.key}: failure count kept changing")

    def forget(self, key: ObjectKey) -> None:
        """The CR was deleted: timers, failure count, marks and its per-CR records go; a held
        lock stays its run's."""
        name = member(key)
        with self._redis.pipeline(transaction=True) as pipe:
            for priority in Priority:
                pipe.zrem(self._scheduled(f"due:{int(priority)}"), name)
            pipe.zrem(self._scheduled("dispatched"), name)
            pipe.delete(
                self._scheduled(f"state:{name}"),
                self._key(f"notfound:{key.uid}"),
                self._key(f"stall:{key.uid}"),
            )
            pipe.execute()

    # -- reading -------------------------------------------------------------------------

    def failures(self, key: ObjectKey) -> int:
        value = self._redis.hget(self._scheduled(f"state:{member(key)}"), "failures")
        return 0 if value is None else int(_text(value))

    def due_in(self, key: ObjectKey) -> float | None:
        name = member(key)
        with self._redis.pipeline(transaction=True) as pipe:
            for priority in Priority:
                pipe.zscore(self._scheduled(f"due:{int(priority)}"), name)
            scores = [score for score in pipe.execute() if score is not None]
        return min(scores) - self._clock() if scores else None

    def depth(self) -> int:
        with self._redis.pipeline(transaction=True) as pipe:
            for priority in Priority:
                pipe.zcard(self._scheduled(f"due:{int(priority)}"))
            return sum(pipe.execute())

    def due_count(self) -> int:
        now = self._clock()
        with self._redis.pipeline(transaction=True) as pipe:
            for priority in Priority:
                pipe.zcount(self._scheduled(f"due:{int(priority)}"), "-inf", now)
            return sum(pipe.execute())

    def due_at_least(self, count: int) -> bool:
        # ZCOUNT is O(log N) per priority: counting them all costs one round trip.
        return count <= 0 or self.due_count() >= count

    def dispatched_count(self) -> int:
        return int(self._redis.zcard(self._scheduled("dispatched")))

    def advertise_slots(self, worker: str, slots: int, ttl: float) -> None:
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.zadd(self._key("workers"), {worker: self._clock() + ttl})
            pipe.hset(self._key("worker-slots"), worker, slots)
            pipe.execute()

    def withdraw_slots(self, worker: str) -> None:
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.zrem(self._key("workers"), worker)
            pipe.hdel(self._key("worker-slots"), worker)
            pipe.execute()

    def live_slots(self) -> tuple[int, int]:
        now = self._clock()
        forget = repr(now - GONE_KEPT_SECONDS)
        workers, slots = self._live_slots(args=[self._prefix, repr(now), forget])
        return int(workers), int(slots)

    def workers_gone(self) -> frozenset[str]:
        now = self._clock()
        gone = self._redis.zrangebyscore(self._key("workers"), now - GONE_KEPT_SECONDS, now)
        return frozenset(_text(worker) for worker in gone)

    def mark_generation(self) -> bool:
        """S8.4: SET NX; a missing marker means a new or lost store (returns False)."""
        created = self._redis.set(self._scheduled("generation"), repr(self._clock()), nx=True)
        return not created

    # -- CoordinationStore (S4.10.0) -----------------------------------------------------

    def not_found_seen(self, cr_uid: str) -> tuple[str, float] | None:
        """The record expires on the server after 1 h (PX) and on the injected clock."""
        record_key = self._key(f"notfound:{cr_uid}")
        binding, at, seen = self._redis.hmget(record_key, ["binding", "at", "seen"])
        if binding is None or at is None:
            return None
        if seen is not None and self._clock() - float(_text(seen)) >= self.NOT_FOUND_TTL_SECONDS:
            self._redis.delete(record_key)
            return None
        return _text(binding), float(_text(at))

    def record_not_found(self, cr_uid: str, binding: str, at: float) -> None:
        record_key = self._key(f"notfound:{cr_uid}")
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(record_key)
            pipe.hset(
                record_key, mapping={"binding": binding, "at": repr(at), "seen": self._clock()}
            )
            pipe.pexpire(record_key, _millis(self.NOT_FOUND_TTL_SECONDS))
            pipe.execute()

    def clear_not_found(self, cr_uid: str) -> None:
        self._redis.delete(self._key(f"notfound:{cr_uid}"))

    def stall_first_seen(self, cr_uid: str) -> dict[str, float]:
        """S6.5: when each held stall test ("Kind/name") was first seen for this CR."""
        raw = self._redis.hgetall(self._key(f"stall:{cr_uid}"))
        return {_text(ref): float(_text(at)) for ref, at in raw.items()}

    def set_stall_first_seen(self, cr_uid: str, first_seen: Mapping[str, float]) -> None:
        """Replaces the CR's whole map; an empty map removes it. No TTL: a stall may be held
        for days; ``forget`` drops the map with the CR."""
        stall_key = self._key(f"stall:{cr_uid}")
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(stall_key)
            if first_seen:
                pipe.hset(stall_key, mapping={ref: float(at) for ref, at in first_seen.items()})
            pipe.execute()

    # -- internals -----------------------------------------------------------------------

    def take_token(self, bucket: str, rate: float, burst: int) -> float:
        wait = self._take_token(
            keys=[self._key(f"bucket:{bucket}")], args=[repr(self._clock()), repr(rate), burst]
        )
        return float(_text(wait))

    def put_note(self, name: str, value: str, ttl: float) -> None:
        """Expiry on the injected clock (like not-found records), PX as the server's backstop."""
        expires = self._clock() + ttl
        self._redis.set(self._key(f"note:{name}"), f"{expires!r} {value}", px=_millis(ttl))

    def get_note(self, name: str) -> str | None:
        return self._note_value(self._redis.get(self._key(f"note:{name}")))

    def get_notes(self, *names: str) -> list[str | None]:
        """One MGET: a run asks for the notes it needs together (issue 13: ~10 GETs per CR)."""
        if not names:
            return []
        raws = self._redis.mget([self._key(f"note:{name}") for name in names])
        return [self._note_value(raw) for raw in raws]

    def _note_value(self, raw: Any) -> str | None:
        if raw is None:
            return None
        expires, _, value = _text(raw).partition(" ")
        return value if float(expires) > self._clock() else None

    def _key(self, suffix: str) -> str:
        return f"{self._prefix}:{suffix}"

    def _scheduled(self, suffix: str) -> str:
        return f"{self._scheduling}:{suffix}"

    def _lock_key(self, key: ObjectKey) -> str:
        return self._key(f"lock:{member(key)}")


def _lock_value(lock: Lock) -> str:
    return f"{lock.token} {lock.owner}"


def _millis(seconds: float) -> int:
    return max(int(seconds * 1000), 1)
