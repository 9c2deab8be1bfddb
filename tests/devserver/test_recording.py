"""The request log and server logs hold no token and no cursor (S0.4.1, S0.4.2)."""

from __future__ import annotations

import logging

from devserver import Fault
from tests.devserver.helpers import TOKEN, fetch


def test_requests_record_shape_without_secrets(devserver, http, published):
    cursor = fetch(http, devserver, published).json()["cursor"]
    fetch(
        http,
        devserver,
        published,
        cursor=cursor,
        projection="full",
        acknowledged_keys="HIKYO_LOADER",
    )
    fetch(http, devserver, published, token=None)

    first, second, third = devserver.requests
    assert (first.cursor_present, second.cursor_present) == (False, True)
    assert second.query == {"projection": "full", "acknowledged_keys": "HIKYO_LOADER"}
    assert second.credential_id == first.credential_id is not None
    assert (second.method, second.status, second.origin) == ("GET", 200, "main")
    assert (third.authorization_present, third.credential_id, third.status) == (False, None, 401)
    assert cursor not in repr(devserver.requests)
    assert TOKEN not in repr(devserver.requests)


def test_unknown_token_records_no_credential(devserver, http, published):
    fetch(http, devserver, published, token="hik_unknown")

    recorded = devserver.requests[-1]
    assert recorded.authorization_present is True
    assert recorded.credential_id is None


def test_clear_requests(devserver, http, published):
    fetch(http, devserver, published)

    devserver.clear_requests()

    assert devserver.requests == []


def test_server_logs_hold_no_cursor_token_or_value(devserver, http, published, caplog):
    devserver.set_machine_reveal(published.org, published.project, True)
    caplog.set_level(logging.DEBUG, logger="devserver")
    cursor = fetch(http, devserver, published).json()["cursor"]
    fetch(http, devserver, published, cursor=cursor)
    devserver.set_fault(TOKEN, Fault.status(500), times=1)
    fetch(http, devserver, published, cursor=cursor)
    http.get(devserver.url + "/?cursor=" + cursor, timeout=10)

    text = caplog.text
    assert "delivery" in text  # requests are logged, by path
    for secret in (cursor, TOKEN, "canary-config-4f1c", "canary-secret-9b7e", "cursor="):
        assert secret not in text
