"""Fixtures for the devserver's own tests: a fresh server per test, plain ``requests``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from devserver import DevServer, new_id
from tests.devserver.helpers import CONFIG_VALUE, SECRET_VALUE, TOKEN, Scope, client


@pytest.fixture
def devserver() -> Iterator[DevServer]:
    with DevServer() as server:
        yield server


@pytest.fixture
def scope() -> Scope:
    return Scope(new_id("org"), new_id("prj"), new_id("env"))


@pytest.fixture
def http(devserver: DevServer) -> Iterator[requests.Session]:
    """A client like the operator's: trusts only the devserver CA, no ambient config."""
    with client(devserver) as session:
        yield session


@pytest.fixture
def published(devserver: DevServer, scope: Scope) -> Scope:
    """A config key and a secret key published; ``TOKEN`` holds read + reveal."""
    devserver.publish(
        *scope.args(),
        [
            {"name": "APP_MODE", "classification": "config", "value": CONFIG_VALUE},
            {"name": "DB_PASSWORD", "classification": "secret", "value": SECRET_VALUE},
        ],
    )
    devserver.add_credential(TOKEN, *scope.args(), grants={"read", "reveal"})
    return scope
