"""The Kubernetes error tree (workers/engine/errors.py): the port raises a 403 as Forbidden, and
every other failed call is one callers record and go past (FAILED_CALLS), so none of them has to
let Forbidden through by hand (issue 34: translated once, at the port)."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from k8s.gateway import translate
from workers.engine import errors


def _subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub, *_subclasses(sub)}
    return found


def test_every_kube_error_but_forbidden_is_a_failed_call():
    for kind in _subclasses(errors.KubeError):
        assert issubclass(kind, errors.FAILED_CALLS) != (kind is errors.Forbidden), kind


@pytest.mark.parametrize(
    ("status", "reason", "kind"),
    [
        (403, "Forbidden", errors.Forbidden),
        (404, "NotFound", errors.NotFound),
        (409, "AlreadyExists", errors.AlreadyExists),
        (409, "Conflict", errors.Conflict),
        (422, "Invalid", errors.Invalid),
        (500, "InternalError", errors.ServerError),
        (429, "TooManyRequests", errors.ServerError),
    ],
)
def test_the_port_translates_each_status_once(status, reason, kind):
    error = ApiException(status=status, reason=reason)
    error.body = json.dumps({"reason": reason})
    translated = translate(error, "patch secrets ns/x", verb="patch", group="", resource="secrets")
    assert type(translated) is kind
    assert isinstance(translated, errors.FAILED_CALLS) == (kind is not errors.Forbidden)


def test_a_409_naming_data_keys_another_manager_owns_keeps_their_names_only():
    """S11.4: a server-side apply's conflict names each field another manager owns; the data
    keys among them are kept (sorted), the causes' messages (which name the other manager)
    are not."""
    error = ApiException(status=409, reason="Conflict")
    causes = [
        {"reason": "FieldManagerConflict", "message": 'conflict with "helm"', "field": field}
        for field in (".data.log-level", ".data.DATABASE_URL", ".metadata.labels.team")
    ]
    error.body = json.dumps({"reason": "Conflict", "details": {"causes": causes}})
    translated = translate(error, "apply secrets ns/x", verb="patch", group="", resource="secrets")
    assert type(translated) is errors.FieldsOwnedElsewhere
    assert translated.keys == ("DATABASE_URL", "log-level")
    assert "helm" not in str(translated)
