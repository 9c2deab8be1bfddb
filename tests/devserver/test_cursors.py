"""Conditional fetch: a cursor is current exactly while nothing it binds has changed (S4.3)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from devserver import DevServer
from tests.devserver.helpers import TOKEN, Scope, fetch

CURSOR = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def _cursor(devserver, http, scope, **params: str) -> str:
    body = fetch(http, devserver, scope, **params).json()
    assert body["current"] is False
    return body["cursor"]


def test_presenting_the_served_cursor_answers_current_without_keys(devserver, http, published):
    cursor = _cursor(devserver, http, published)

    body = fetch(http, devserver, published, cursor=cursor).json()

    assert body["current"] is True
    assert body["keys"] == []
    assert body["cursor"] == cursor
    assert CURSOR.fullmatch(cursor)


def test_current_answer_keeps_the_other_members(devserver, http, published):
    cursor = _cursor(devserver, http, published)

    body = fetch(http, devserver, published, cursor=cursor).json()

    for member in (
        "credential_id",
        "change_token",
        "schema_revision",
        "pin_expired",
        "issued_at",
        "snapshot_expires_at",
        "capabilities",
    ):
        assert member in body


def test_republishing_identical_content_keeps_the_cursor_current(devserver, http, published):
    before = fetch(http, devserver, published).json()
    devserver.publish(
        *published.args(),
        [
            {
                "name": key["name"],
                "classification": key["classification"],
                "value": key.get("value", "canary-secret-9b7e"),
            }
            for key in before["keys"]
        ],
    )

    assert fetch(http, devserver, published, cursor=before["cursor"]).json()["current"] is True


def _publish_other_value(server: DevServer, scope: Scope) -> None:
    server.publish(*scope.args(), [{"name": "APP_MODE", "classification": "config", "value": "2"}])


def _change_secret_value(server: DevServer, scope: Scope) -> None:
    server.publish(
        *scope.args(),
        [
            {"name": "APP_MODE", "classification": "config", "value": "canary-config-4f1c"},
            {"name": "DB_PASSWORD", "classification": "secret", "value": "rotated"},
        ],
    )


CHANGES: list = [
    pytest.param(_publish_other_value, id="content"),
    pytest.param(_change_secret_value, id="presence-only-secret-value"),
    pytest.param(lambda s, c: s.set_grants(TOKEN, {"read"}), id="grant-removed"),
    pytest.param(
        lambda s, c: s.set_grants(TOKEN, {"read", "reveal", "report-delivery-status"}),
        id="grant-added",
    ),
    pytest.param(lambda s, c: s.set_machine_reveal(c.org, c.project, True), id="reveal-opt-in"),
    pytest.param(lambda s, c: s.pin(TOKEN, 1), id="pinned"),
    pytest.param(lambda s, c: s.rotate_cursor_key(), id="key-rotation"),
]


@pytest.mark.parametrize("change", CHANGES)
def test_any_bound_change_yields_a_full_delivery(
    devserver, http, published, change: Callable[[DevServer, Scope], None]
):
    cursor = _cursor(devserver, http, published)
    change(devserver, published)

    body = fetch(http, devserver, published, cursor=cursor).json()

    assert body["current"] is False
    assert body["keys"]
    assert body["cursor"] != cursor


def test_pin_state_change_yields_a_full_delivery(devserver, http, published):
    devserver.pin(TOKEN, 1)
    cursor = _cursor(devserver, http, published)
    devserver.pin(TOKEN, 1, expired=True)

    body = fetch(http, devserver, published, cursor=cursor).json()

    assert body["current"] is False
    assert body["pin_expired"] is True


def test_projection_is_bound_into_the_cursor(devserver, http, published):
    full = _cursor(devserver, http, published, projection="full")

    body = fetch(http, devserver, published, cursor=full, projection="config-only").json()

    assert body["current"] is False
    assert [key["name"] for key in body["keys"]] == ["APP_MODE"]
    assert (
        fetch(http, devserver, published, cursor=body["cursor"], projection="config-only").json()[
            "current"
        ]
        is True
    )


def test_cursor_of_another_credential_is_not_current(devserver, http, published):
    devserver.add_credential("hik_other", *published.args(), grants={"read", "reveal"})
    other = _cursor(devserver, http, published, token="hik_other")

    assert fetch(http, devserver, published, cursor=other).json()["current"] is False


@pytest.mark.parametrize("cursor", ["", "garbage", "c1." + "A" * 43])
def test_unknown_cursor_yields_a_full_delivery(devserver, http, published, cursor):
    body = fetch(http, devserver, published, cursor=cursor).json()

    assert body["current"] is False
    assert body["keys"]


def test_lost_authority_is_the_uniform_404_even_with_a_current_cursor(devserver, http, published):
    cursor = _cursor(devserver, http, published)
    devserver.set_grants(TOKEN, {"reveal"})

    assert fetch(http, devserver, published, cursor=cursor).status_code == 404
