"""The resync service both the command and the dashboard use (issue 34 item 3): one value per
request, each CR annotated under its UID, and every CR it could not ask named with why."""

from __future__ import annotations

from typing import Any

from controlplane.observations import resync_requests
from controlplane.observations.resync_requests import in_reach, request_resync
from k8s.errors import Conflict, Forbidden, NotFound
from workers.engine.force_sync import FORCE_SYNC_ANNOTATION
from workers.engine.settings import OperatorSettings
from workers.keys import ObjectKey


class Annotating:
    def __init__(self, refusals: dict[str, BaseException]) -> None:
        self.refusals = refusals
        self.patches: list[tuple[str, str, dict[str, Any], str]] = []

    def annotate_hikyosecret(
        self, namespace: str, name: str, annotations: dict[str, Any], *, uid: str = ""
    ) -> None:
        if name in self.refusals:
            raise self.refusals[name]
        self.patches.append((namespace, name, dict(annotations), uid))


def test_one_value_each_cr_under_its_uid_and_each_refusal_with_why():
    cluster = Annotating(
        {
            "gone": NotFound("patch", 404, "NotFound"),
            "new": Conflict("patch", 409, "Conflict"),
            "denied": Forbidden("patch hikyosecrets t/denied", 403, "Forbidden"),
            "silent": TimeoutError("read timed out"),
        }
    )
    keys = [
        ObjectKey("t", name, f"uid-{name}") for name in ("a", "gone", "new", "denied", "silent")
    ]
    done = request_resync(cluster, keys, value="resync-1")
    assert done.value == "resync-1" and done.asked == [keys[0]]
    assert cluster.patches == [("t", "a", {FORCE_SYNC_ANNOTATION: "resync-1"}, "uid-a")]
    assert done.failed == [
        (keys[1], "it was deleted meanwhile"),
        (keys[2], "it was replaced meanwhile"),
        (keys[3], "patch hikyosecrets t/denied: HTTP 403 Forbidden"),
        (keys[4], "TimeoutError"),  # its type, never its text
    ]


def test_a_new_request_has_a_new_value():
    cluster = Annotating({})
    key = ObjectKey("t", "a", "u")
    assert request_resync(cluster, [key]).value != request_resync(cluster, [key]).value


def test_in_reach_skips_the_operators_namespace_and_unwatched_ones():
    keys = [ObjectKey("ops", "x", "1"), ObjectKey("team", "y", "2"), ObjectKey("other", "z", "3")]
    settings = OperatorSettings(operator_namespace="ops", namespaces=("team", "ops"))
    kept, skipped = in_reach(keys, settings)
    assert kept == [keys[1]]
    assert skipped == [
        (keys[0], "the operator ignores HikyoSecrets in its own namespace"),
        (keys[2], "namespace other is not in HIKYO_OPERATOR_NAMESPACES"),
    ]


class Handling:
    """A CR that records the request on its third read."""

    def __init__(self, value: str) -> None:
        self.value, self.reads = value, 0

    def get_hikyosecret(self, namespace: str, name: str) -> dict[str, Any]:
        self.reads += 1
        status = {"lastForcedSync": {"value": self.value, "outcome": "Delivered"}}
        return {"metadata": {"uid": "u1"}, "status": status if self.reads >= 3 else {}}


def test_a_wait_says_once_what_holds_a_cr_back(monkeypatch):
    """Issue 49: `resync --wait` waited out a 429 pause without saying so."""
    monkeypatch.setattr(resync_requests.time, "sleep", lambda seconds: None)
    target = ObjectKey("team", "app", "u1")
    said: list[str] = []
    waited = resync_requests.wait_for_outcomes(
        Handling("v1"), [target], "v1", 60.0, said.append, lambda t: "waits for the pause"
    )
    assert said[0] == "team/app: waits for the pause"
    assert sum("waits for the pause" in line for line in said) == 1 and len(said) == 2
    assert waited.unhandled == 0
