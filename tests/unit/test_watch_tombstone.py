"""k8s/watch.py's tombstones (issue 13): what a DELETED event for a vanished object carries,
kept as one tuple per object."""

from __future__ import annotations

import json

from k8s.watch import Tombstone

OBJECT = {
    "apiVersion": "hikyo.dev/v1alpha1",
    "kind": "HikyoSecret",
    "metadata": {
        "name": "app",
        "namespace": "team",
        "uid": "uid-app",
        "resourceVersion": "41",
        "annotations": {"hikyo.dev/force-sync": "now"},
        "generation": 3,
        "managedFields": [{"manager": "kubectl"}],
    },
    "spec": {"target": {"name": "app-env"}},
    "status": {"lifecycle": "Synced"},
}


def test_the_deleted_object_has_only_kind_apiversion_and_the_routed_metadata():
    assert Tombstone.of(OBJECT).as_object() == {
        "apiVersion": "hikyo.dev/v1alpha1",
        "kind": "HikyoSecret",
        "metadata": {
            "name": "app",
            "namespace": "team",
            "uid": "uid-app",
            "resourceVersion": "41",
            "annotations": {"hikyo.dev/force-sync": "now"},
        },
    }


def test_absent_fields_stay_absent_and_null_ones_stay_null():
    bare = {"metadata": {"name": "x", "uid": "u", "annotations": None}}
    assert Tombstone.of(bare).as_object() == {
        "metadata": {"name": "x", "uid": "u", "annotations": None}
    }


def test_a_new_event_shares_the_previous_tombstones_strings():
    first = Tombstone.of(OBJECT)
    again = json.loads(json.dumps(OBJECT))
    again["metadata"]["resourceVersion"] = "42"
    assert again["metadata"]["uid"] is not first.uid  # a new parse: new strings
    second = Tombstone.of(again, first)
    assert second.uid is first.uid and second.name is first.name
    assert second.namespace is first.namespace and second.resource_version == "42"
    renamed = json.loads(json.dumps(OBJECT))
    renamed["metadata"]["name"] = "other"
    assert Tombstone.of(renamed, first).name == "other"
