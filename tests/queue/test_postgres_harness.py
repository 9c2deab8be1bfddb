"""The scaled-mode tests' PostgreSQL (S8.1): the harness's gate and its session server."""

from __future__ import annotations

import pytest

from tests.support.processes import POSTGRES_TIMEOUTS, locate_postgres


def test_missing_postgres_fails_with_one_clear_line(tmp_path):
    """design.md: a missing service fails; it is never skipped silently."""
    with pytest.raises(pytest.fail.Exception, match="apt-get install postgresql") as failed:
        locate_postgres(skip_integration=False, candidates=[str(tmp_path)])
    assert "\n" not in str(failed.value)


def test_missing_postgres_skips_only_when_told(tmp_path):
    with pytest.raises(pytest.skip.Exception, match="HIKYO_SKIP_INTEGRATION"):
        locate_postgres(skip_integration=True, candidates=[str(tmp_path)])


def test_the_session_server_takes_bounded_connections_to_its_database(postgres_server):
    with postgres_server.connect() as connection:
        database, user = connection.execute("SELECT current_database(), current_user").fetchone()
        timeout = connection.execute("SHOW statement_timeout").fetchone()[0]
    assert (database, user) == ("hikyo", "hikyo")
    assert timeout == "30s" and "statement_timeout=30000" in POSTGRES_TIMEOUTS["options"]
    assert postgres_server.url.startswith("postgres://hikyo:")
    assert postgres_server.alive()
