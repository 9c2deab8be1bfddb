"""S11.4: write only this CR's keys into a Secret someone else made (``creationPolicy: Merge``).

The decisions are pure (over the target as R8 read it); ``merge_keys`` is the one write, a
server-side apply through the Cluster port, verified from the apply's own answer (S4.8.4 rev 3).
Nothing here creates or takes a Secret: an absent target is refused before any fetch, and the
apply names the UID R8 read, so a Secret deleted meanwhile is not made again (409).
"""

from __future__ import annotations

from dataclasses import dataclass

from .conditions import CONFLICT, Condition
from .errors import FAILED_CALLS, Conflict, FieldsOwnedElsewhere, NotFound
from .messages import key_list
from .native_types import OPAQUE
from .outcome import Outcome, refusal
from .ports import FIELD_MANAGER, Cluster, SecretObject
from .secret_writes import WriteFailed, Written
from .spec import SecretSpec

MERGE = "Merge"
MERGE_FINALIZER = "hikyo.dev/merge"
MERGE_TARGET_MISSING = "MergeTargetMissing"
KEY_OWNED_ELSEWHERE = "KeyOwnedElsewhere"


@dataclass(frozen=True)
class KeysOwnedElsewhere:
    """The apply met keys another field manager owns; nothing was written (names only)."""

    keys: tuple[str, ...]


MergeResult = Written | WriteFailed | KeysOwnedElsewhere


def merge_target_refusal(
    target_name: str, cr_uid: str, target: SecretObject | None
) -> Outcome | None:
    """R8, R9 under Merge: the Secret must exist, have no other controller, and be Opaque."""
    if target is None:
        return refusal(  # requeued at resyncInterval, as every refusal
            Condition(
                CONFLICT,
                "True",
                MERGE_TARGET_MISSING,
                f"Secret {target_name} does not exist; creationPolicy Merge writes keys into an "
                "existing Secret and never creates one: create it (for example with the chart "
                "that owns it), or use creationPolicy Owner",
            )
        )
    controller = target.controller_uid()
    if controller is not None and controller != cr_uid:
        return refusal(
            Condition(
                CONFLICT,
                "True",
                "ManagedSecretNotOwned",
                f"Secret {target_name} is controlled by another owner; creationPolicy Merge "
                "never writes into a Secret another controller manages: choose another "
                "target.name",
            )
        )
    if target.type != OPAQUE:
        return refusal(
            Condition(
                CONFLICT,
                "True",
                "TargetTypeImmutable",
                f"Secret {target_name} has type {target.type}, not {OPAQUE}; creationPolicy "
                "Merge writes into Opaque Secrets only",
            )
        )
    return None


def keys_owned_elsewhere_refusal(target_name: str, keys: tuple[str, ...]) -> Outcome:
    """After the fetch: the cursor goes, so the next run delivers in full again."""
    return refusal(
        Condition(
            CONFLICT,
            "True",
            KEY_OWNED_ELSEWHERE,
            f"Secret {target_name} already has keys {key_list(keys)} that another field manager "
            "owns; nothing was written: deliver them under other names (mapping secretKey), or "
            "remove them from the Secret's other manager",
            {"keys": key_list(keys)},
        ),
        clear_cursor=True,
    )


def delivered_data(spec: SecretSpec, target: SecretObject) -> dict[str, bytes]:
    """What of the target this CR delivered: all of it, or under Merge only its own keys
    (S11.4: stamps and keyCount cover our keys)."""
    if spec.creation_policy != MERGE:
        return target.data
    ours = target.keys_managed_by(FIELD_MANAGER)
    return {key: value for key, value in target.data.items() if key in ours}


def merged(target: SecretObject, data: dict[str, bytes]) -> bool:
    """S4.17 and the S4.8.4 check: our keys hold exactly ``data`` and we own exactly them."""
    ours = frozenset(data)
    return target.keys_managed_by(FIELD_MANAGER) == ours and all(
        target.data.get(key) == value for key, value in data.items()
    )


def foreign_keys(target: SecretObject, data: dict[str, bytes]) -> tuple[str, ...]:
    """Keys we would deliver that another manager owns (the apiserver would refuse them)."""
    return tuple(sorted(frozenset(data) & target.keys_managed_elsewhere(FIELD_MANAGER)))


def merge_keys(
    cluster: Cluster,
    namespace: str,
    name: str,
    data: dict[str, bytes],
    target: SecretObject | None = None,
) -> MergeResult:
    """Apply ``data`` as our keys (an empty ``data`` removes them all: S4.10.1 and deletion),
    verified from the answer. ``target`` is the Secret as read; None reads it now. An absent
    Secret holds none of our keys: ``Written(None)``."""
    current = target if target is not None else cluster.get_secret(namespace, name)
    if current is None:
        return Written(None)
    if merged(current, data):
        return Written(current)
    try:
        applied = cluster.apply_secret_data(
            namespace, name, current.uid, current.resource_version, data
        )
    except FieldsOwnedElsewhere as error:
        return KeysOwnedElsewhere(error.keys)
    except NotFound:
        return Written(None)
    except Conflict:
        return WriteFailed(
            f"Secret {name} changed or was replaced while its keys were being applied "
            "(resourceVersion/UID conflict)"
        )
    except FAILED_CALLS as error:
        return WriteFailed(f"applying keys to Secret {name} failed: {error}")
    if applied.uid != current.uid or not merged(applied, data):
        return WriteFailed(f"Secret {name} did not read back as applied (verification failed)")
    return Written(applied)
