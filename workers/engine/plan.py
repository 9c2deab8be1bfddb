"""The plain data that flows between the phases of one reconcile (design.md: observe → decide →
apply): what ``observe`` must still read, what ``decide`` concluded, and what ``apply`` writes.

A ``Plan`` may carry values (the Secret data it writes, the token of a fetch) for the one
reconcile it lives in; those fields are kept out of every ``repr`` (S0.4).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime

from .fetched import FetchResult
from .outcome import Outcome
from .ports import SecretObject, Workload
from .spec import SecretSpec


class Read(enum.Enum):
    """One read ``observe`` makes when a step asks for it, in S4.2 order."""

    LEASE = "lease"  # R0, S4.1.7: the other operator's Lease
    INSTANCE = "instance"  # R5
    CREDENTIAL = "credential"  # R6: the bootstrap Secret or the ServiceAccount
    TOKEN = "token"  # R6: the TokenRequest of a designated ServiceAccount
    CLAIMANTS = "claimants"  # R7
    TARGET = "target"  # R8
    STAMP_ROOT = "stamp root"  # R12
    REACH = "reach"  # R12, S6.3: the CRs whose stamps a new root would invalidate
    NOT_FOUND = "not found"  # R13, S4.10.0: a pending 404 confirmation
    SERVER = "server"  # R14: the instance's client (S3.1, S3.2), no request made
    WORKLOADS = "workloads"  # S6.5: opted-in workloads and their stall records


@dataclass(frozen=True)
class Now:
    """The one clock reading a run decides with: ``at`` for status times, ``wall`` (epoch
    seconds) for the coordination store's records (404 confirmations, stall first-seen)."""

    at: datetime
    wall: float


@dataclass(frozen=True)
class Needs:
    """``decide_before_fetch`` cannot go on without this read (``observe`` makes it)."""

    read: Read


class WriteKind(enum.StrEnum):
    """What a run's one Secret write does (SecretAction.kind)."""

    CONVERGE = "converge"  # create or update the target to exactly the data (S4.8)
    EMPTY = "empty"  # S4.10.1
    DELETE = "delete"  # S4.10.2, with UID and resourceVersion preconditions
    RELEASE = "release"  # S4.14.3: drop this CR's ownerReference
    MERGE = "merge"  # S11.4: apply the data as this CR's keys of an existing Secret
    UNMERGE = "unmerge"  # S11.4: remove them (scrub, deletion)


@dataclass(frozen=True)
class SecretAction:
    """The one Secret write of a run (S4.8, S4.10, S4.14.3), of ``kind`` (WriteKind); a
    converge creates the Secret when ``target`` is None."""

    kind: WriteKind
    namespace: str
    name: str
    cr_uid: str
    spec: SecretSpec | None = None
    target: SecretObject | None = None
    data: dict[str, bytes] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class RolloutPlan:
    """S4.9 step 2 and S6.5: the stamp patches to make, and the judgement of the workloads not
    patched now. The Rollout condition is finished once the patches are known to have held."""

    namespace: str
    cr_name: str
    target_name: str
    stamp: str = field(repr=False)
    patches: tuple[Workload, ...] = ()
    not_progressed: tuple[str, ...] = ()
    warn: bool = False  # a Stalled event, on the delivery path (S5.5)
    unlisted: bool = False  # the workload list failed: nothing could be judged


@dataclass(frozen=True)
class StoreNote:
    """One value-free write to the coordination store (S8.4). ``op`` names the store call."""

    # "record_not_found", "clear_not_found", "stall_first_seen", "capabilities" or "pause"
    op: str
    key: str  # the CR or instance UID, or a 429 pause scope (pacing.pause_scope)
    text: str = ""
    seconds: float = 0.0
    first_seen: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Plan:
    """Everything one run writes, in the S4.9 order ``apply`` follows: the Secret, the workload
    stamps, then the status (cursor last) and events. Frozen, like its Outcome."""

    outcome: Outcome
    finalizers: list[str] | None = None  # R1/R2: the CR's new finalizer list
    secret: SecretAction | None = None
    rollout: RolloutPlan | None = None
    store: tuple[StoreNote, ...] = ()
    passed: tuple[str, ...] = ()  # condition types the passed steps remove (S5.4)
    step: str = ""  # the S4.2 step that decided ("R0" ... "R16")
    full_run: bool = False  # a full reconcile's plan (not a rollout-only evaluation)


@dataclass(frozen=True)
class Stop:
    """A step before the fetch decided the run (S4.2: the first step that stops decides)."""

    plan: Plan


@dataclass(frozen=True)
class FetchPlan:
    """R1-R14 passed: what the fetch presents, and what R16 needs to judge its answer."""

    spec: SecretSpec
    instance_uid: str
    binding: str
    key: bytes = field(repr=False)  # the target's stamp key (S6.2)
    cursor: str | None = field(repr=False)
    target: SecretObject | None  # the controlled target, None when absent
    token: str = field(repr=False)  # the R6 bearer, for this fetch only
    stamp_root: bytes | None = field(default=None, repr=False)  # R12: to create before the fetch
    store: tuple[StoreNote, ...] = ()
    passed: tuple[str, ...] = ()  # condition types the passed steps remove (S5.4)


class Gate(enum.Enum):
    """Why R15 did not fetch (S4.1.6): none of these is a failure of the CR."""

    PAUSED = "paused"  # a 429 paused the instance
    UNRESPONSIVE = "unresponsive"  # another run probes an instance that stopped answering
    # another run probes the instance for this credential, whose requests stopped being answered
    CREDENTIAL_UNANSWERED = "credential unanswered"
    NO_TOKEN = "no token"  # no token within the wait budget


@dataclass(frozen=True)
class FetchAttempt:
    """What R15 did: fetched (``result``), or stood off at a ``gate`` for ``wait`` seconds."""

    result: FetchResult | None = None
    gate: Gate | None = None
    wait: float = 0.0
    seconds: float = 0.0  # how long the fetch took (S8.6 fetch duration)
    answered_at: float = 0.0  # wall time of the answer (S4.10.0 spaces two 404s by it)
