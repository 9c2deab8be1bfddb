"""``apply``'s Secret writes through the Cluster port: the managed Secret (S4.8), emptying it
(S4.10.1), deleting a typed one (S4.10.2) and releasing it on Orphan deletion (S4.14.3). Each
write is verified by its own answer, or an uncached read where that has none (S4.8.4).

Never adopt: only absent names are created, only controlled Secrets updated or deleted.
What a write reveals is a value (``WriteResult``); a 403 still rises from the port, for
``apply`` to turn into S4.15.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .errors import FAILED_CALLS, AlreadyExists, Conflict, NotFound
from .ports import HIKYO_API_VERSION, Cluster, SecretObject
from .spec import SecretSpec


@dataclass(frozen=True)
class Written:
    """The write held (or was not needed): the verified Secret, None when it is absent."""

    secret: SecretObject | None = None


@dataclass(frozen=True)
class WriteFailed:
    """A write or its verification failed; the cause names the Secret, never its data."""

    cause: str


@dataclass(frozen=True)
class NotOwned:
    """The target exists but is not controlled by this CR (S4.8.3)."""

    name: str


WriteResult = Written | WriteFailed | NotOwned


def owner_reference(spec: SecretSpec) -> dict[str, object]:
    """S4.8.1: the one controller reference, for both creation policies."""
    return {
        "apiVersion": HIKYO_API_VERSION,
        "kind": "HikyoSecret",
        "name": spec.name,
        "uid": spec.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


class SecretWriter:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def converge(
        self, spec: SecretSpec, target: SecretObject | None, data: dict[str, bytes]
    ) -> Written | WriteFailed:
        """Creates or updates the target to exactly ``data``, verified.

        Byte-identical data skips the write (S4.8.2, S4.17).
        """
        if target is not None and target.data == data:
            return Written(target)
        try:
            if target is None:
                written = self.cluster.create_secret(
                    SecretObject(
                        namespace=spec.namespace,
                        name=spec.target_name,
                        type=spec.target_type,
                        data=data,
                        owner_references=[owner_reference(spec)],
                    )
                )
            else:
                written = self.cluster.replace_secret(replace(target, data=data))
        except AlreadyExists:
            return WriteFailed(
                f"Secret {spec.target_name} appeared while it was being created; it is never "
                "adopted"
            )
        except Conflict:
            return WriteFailed(
                f"Secret {spec.target_name} changed while it was being written "
                "(resourceVersion conflict)"
            )
        except FAILED_CALLS as error:
            return WriteFailed(f"writing Secret {spec.target_name} failed: {error}")
        return self._verify(spec, written, data)

    def _verify(
        self, spec: SecretSpec, written: SecretObject, data: dict[str, bytes]
    ) -> Written | WriteFailed:
        """S4.8.4: controlled, same UID, desired type, byte-identical data. The write's answer
        (the object as stored, after admission) is that read when it carries a resourceVersion
        (rev 3); only an answer without one costs a GET."""
        current = (
            written
            if written.resource_version
            else self.cluster.get_secret(spec.namespace, spec.target_name)
        )
        if (
            current is None
            or current.uid != written.uid
            or not current.controlled_by(spec.uid)
            or current.type != spec.target_type
            or current.data != data
        ):
            return WriteFailed(
                f"Secret {spec.target_name} did not read back as written (verification failed)"
            )
        return Written(written)

    def empty(self, spec: SecretSpec) -> WriteResult:
        """S4.10.1: the Opaque target with no data; ``Written(None)`` when it stays absent."""
        current = self.cluster.get_secret(spec.namespace, spec.target_name)
        if current is None:
            return Written(None)
        if not current.controlled_by(spec.uid):
            return NotOwned(spec.target_name)
        return self.converge(spec, current, {})

    def delete_typed(self, spec: SecretSpec) -> WriteResult:
        """S4.10.2 steps 1-3: delete with UID and resourceVersion preconditions, prove absence."""
        current = self.cluster.get_secret(spec.namespace, spec.target_name)
        if current is None:
            return Written(None)
        if not current.controlled_by(spec.uid):
            return NotOwned(spec.target_name)
        try:
            self.cluster.delete_secret(
                spec.namespace, spec.target_name, current.uid, current.resource_version
            )
        except NotFound:
            pass
        except Conflict:
            return WriteFailed(
                f"Secret {spec.target_name} changed before it could be deleted "
                "(UID/resourceVersion precondition failed)"
            )
        after = self.cluster.get_secret(spec.namespace, spec.target_name)
        if after is None:
            return Written(None)
        if after.uid == current.uid:
            return WriteFailed(f"deletion of Secret {spec.target_name} is still pending")
        return WriteFailed(
            f"a replacement Secret {spec.target_name} (new UID) appeared; it is never deleted"
        )

    def release(self, namespace: str, target_name: str, cr_uid: str) -> Written | WriteFailed:
        """S4.14.3: drop only this CR's ownerReference, then verify it no longer controls it."""
        current = self.cluster.get_secret(namespace, target_name)
        if current is None or current.deleting or not current.controlled_by(cr_uid):
            return Written(current)
        kept = [r for r in current.owner_references if r.get("uid") != cr_uid]
        try:
            self.cluster.replace_secret(replace(current, owner_references=kept))
        except FAILED_CALLS as error:
            return WriteFailed(f"releasing Secret {target_name} failed: {error}")
        after = self.cluster.get_secret(namespace, target_name)
        if after is not None and after.controlled_by(cr_uid):
            return WriteFailed(f"Secret {target_name} is still controlled after release")
        return Written(after)
