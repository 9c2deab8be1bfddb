"""One writer per creation policy (S4.8, S11.4), chosen by one function: what the policy
refuses before any write, whether the target already holds the content, and the write kind
``apply`` carries out, and how ``apply`` carries out each kind.

Owner and Orphan targets are both controlled by the CR and written whole (they differ only at
the CR's deletion, S4.14.3); a Merge CR applies only its own keys into a Secret it does not
control, beside other managers' keys.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .merge import (
    MERGE,
    MergeResult,
    foreign_keys,
    keys_owned_elsewhere_refusal,
    merge_keys,
    merged,
)
from .outcome import Outcome
from .plan import SecretAction, WriteKind
from .ports import Cluster, SecretObject
from .secret_writes import SecretWriter, WriteResult, Written
from .spec import SecretSpec

Data = dict[str, bytes]


@dataclass(frozen=True)
class PolicyWrite:
    kind: WriteKind
    # The refusal the apiserver would answer, said before the write; None: write
    refusal: Callable[[SecretSpec, SecretObject | None, Data], Outcome | None]
    # Whether the target does not hold the content yet (S4.8.2: identical content skips)
    changes: Callable[[SecretObject | None, Data], bool]


def _whole_changes(target: SecretObject | None, data: Data) -> bool:
    return target is None or target.data != data


def _never_refused(spec: SecretSpec, target: SecretObject | None, data: Data) -> Outcome | None:
    return None


def _merge_changes(target: SecretObject | None, data: Data) -> bool:
    return target is None or not merged(target, data)


def _keys_owned_elsewhere(
    spec: SecretSpec, target: SecretObject | None, data: Data
) -> Outcome | None:
    """S11.4: keys another manager owns would be refused by the apiserver; say so first."""
    owned_elsewhere = foreign_keys(target, data) if target is not None else ()
    return (
        keys_owned_elsewhere_refusal(spec.target_name, owned_elsewhere) if owned_elsewhere else None
    )


CONTROLLED = PolicyWrite(WriteKind.CONVERGE, _never_refused, _whole_changes)
MERGED = PolicyWrite(WriteKind.MERGE, _keys_owned_elsewhere, _merge_changes)
WRITES_BY_POLICY = {"Owner": CONTROLLED, "Orphan": CONTROLLED, MERGE: MERGED}


def policy_write(spec: SecretSpec) -> PolicyWrite:
    return WRITES_BY_POLICY[spec.creation_policy]


def _merge(writer: SecretWriter, cluster: Cluster, action: SecretAction) -> MergeResult:
    return merge_keys(cluster, action.namespace, action.name, action.data, action.target)


def _converge(writer: SecretWriter, cluster: Cluster, action: SecretAction) -> WriteResult:
    assert action.spec is not None
    return writer.converge(action.spec, action.target, action.data)


def _empty(writer: SecretWriter, cluster: Cluster, action: SecretAction) -> WriteResult:
    assert action.spec is not None
    return writer.empty(action.spec)


def _delete(writer: SecretWriter, cluster: Cluster, action: SecretAction) -> WriteResult:
    assert action.spec is not None
    deleted = writer.delete_typed(action.spec)
    # settle_secret reads "no Secret" after a deletion, whatever the read-back found
    return Written(None) if isinstance(deleted, Written) else deleted


# ``apply``'s Secret write for each kind of action (RELEASE runs only at the CR's deletion).
WRITES_BY_KIND: dict[
    WriteKind, Callable[[SecretWriter, Cluster, SecretAction], WriteResult | MergeResult]
] = {
    WriteKind.CONVERGE: _converge,
    WriteKind.MERGE: _merge,  # S11.4
    WriteKind.UNMERGE: _merge,
    WriteKind.EMPTY: _empty,  # S4.10.1
    WriteKind.DELETE: _delete,  # S4.10.2
}


def write_secret(
    writer: SecretWriter, cluster: Cluster, action: SecretAction
) -> WriteResult | MergeResult:
    return WRITES_BY_KIND[action.kind](writer, cluster, action)
