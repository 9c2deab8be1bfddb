"""S4.8.4 rev 3: the write's answer is the verify read; a separate GET only when the answer
carries no resourceVersion. Plain data, through a recording stand-in for the Cluster port."""

from __future__ import annotations

from dataclasses import replace

from tests.unit.decide_fixtures import cr
from workers.engine.ports import SecretObject
from workers.engine.secret_writes import SecretWriter, WriteFailed, Written, owner_reference
from workers.engine.spec import parse_spec

SPEC = parse_spec(cr())
DATA = {"DATABASE_URL": b"postgres://x", "log-level": b"info"}


class _Cluster:
    """Answers a create with what ``stored`` makes of the object; counts the GETs."""

    def __init__(self, stored=lambda secret: secret) -> None:
        self.stored = stored
        self.gets = 0
        self.kept: SecretObject | None = None

    def create_secret(self, secret: SecretObject) -> SecretObject:
        self.kept = self.stored(replace(secret, uid="uid-1", resource_version="7"))
        return self.kept

    def get_secret(self, namespace: str, name: str) -> SecretObject | None:
        self.gets += 1
        return self.kept


def test_a_write_is_verified_by_its_own_answer_without_a_get():
    cluster = _Cluster()
    result = SecretWriter(cluster).converge(SPEC, None, DATA)
    assert isinstance(result, Written) and result.secret.uid == "uid-1"
    assert cluster.gets == 0


def test_an_answer_that_admission_changed_fails_the_verify():
    cluster = _Cluster(lambda s: replace(s, data={**s.data, "log-level": b"debug"}))
    result = SecretWriter(cluster).converge(SPEC, None, DATA)
    assert isinstance(result, WriteFailed) and "verification failed" in result.cause


def test_an_answer_that_lost_our_owner_reference_fails_the_verify():
    cluster = _Cluster(lambda s: replace(s, owner_references=[]))
    assert isinstance(SecretWriter(cluster).converge(SPEC, None, DATA), WriteFailed)


def test_an_answer_without_a_resource_version_is_checked_by_a_get():
    cluster = _Cluster(lambda s: replace(s, resource_version=""))
    result = SecretWriter(cluster).converge(SPEC, None, DATA)
    assert isinstance(result, Written) and cluster.gets == 1
    assert cluster.kept.owner_references == [owner_reference(SPEC)]
