"""S8.1: the operator's environment, read once; anything invalid stops the process."""

import importlib.util
import sqlite3
from pathlib import Path

import pytest
from django.db import connections, transaction
from django.db.utils import ConnectionHandler

from controlplane import settings as controlplane_settings
from workers.engine.settings import (
    SettingsInvalid,
    operator_settings_from,
    parse_address,
    parse_bool,
    parse_log_level,
)


def test_defaults():
    settings = operator_settings_from({"POD_NAMESPACE": "ops"})
    assert settings.operator_namespace == "ops"
    assert (settings.trigger_rollouts, settings.native_secret_types) == (True, False)
    assert (settings.status_reporting, settings.leader_election) == (True, True)
    assert (settings.fetch_qps, settings.fetch_burst) == (10.0, 20)
    assert settings.namespaces == () and settings.designated_service_accounts is None


@pytest.mark.parametrize(
    "raw, value",
    [
        ("1", True),
        ("T", True),
        ("yes", True),
        ("On", True),
        ("0", False),
        ("f", False),
        ("NO", False),
        ("off", False),
    ],
)
def test_booleans(raw, value):
    assert operator_settings_from({"HIKYO_OPERATOR_TRIGGER_ROLLOUTS": raw}).trigger_rollouts is (
        value
    )


@pytest.mark.parametrize(
    ("variable", "raw", "named"),
    [
        ("HIKYO_OPERATOR_TRIGGER_ROLLOUTS", "maybe", "not a boolean"),
        ("HIKYO_OPERATOR_NAMESPACES", "a,,b", "not a namespace"),
        ("HIKYO_OPERATOR_NAMESPACES", "a,A", "not a namespace"),
        ("HIKYO_OPERATOR_NAMESPACES", "a, a", "twice"),
        ("HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS", "{", "not JSON"),
        ("HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS", '{"ns": "sa"}', "must be"),
        ("HIKYO_OPERATOR_FETCH_QPS", "0", "a number from 0.01 to 10000"),
        ("HIKYO_OPERATOR_FETCH_QPS", "fast", "a number from 0.01 to 10000"),
        ("HIKYO_OPERATOR_FETCH_BURST", "2.5", "an integer from 1 to 100000"),
    ],
)
def test_invalid_values_are_named(variable, raw, named):
    with pytest.raises(SettingsInvalid) as caught:
        operator_settings_from({variable: raw})
    assert variable in str(caught.value) and named in str(caught.value)


def test_lists_are_parsed():
    settings = operator_settings_from(
        {
            "HIKYO_OPERATOR_NAMESPACES": " team-a , team-b",
            "HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS": '{"team-a": ["builder"]}',
            "HIKYO_OPERATOR_FETCH_QPS": "2.5",
        }
    )
    assert settings.namespaces == ("team-a", "team-b")
    assert settings.designated_service_accounts == {"team-a": ("builder",)}
    assert settings.fetch_qps == 2.5


# --- S8.1: values that used to pass or crash (issue 7) ---------------------------------------

DEEP_JSON = "[" * 100_000 + "]" * 100_000
FINITE = "a number from 0.01 to 10000"


@pytest.mark.parametrize(
    ("environ", "variable", "rule"),
    [
        ({"HIKYO_OPERATOR_FETCH_QPS": "nan"}, "HIKYO_OPERATOR_FETCH_QPS", FINITE),
        ({"HIKYO_OPERATOR_FETCH_QPS": "inf"}, "HIKYO_OPERATOR_FETCH_QPS", FINITE),
        ({"HIKYO_OPERATOR_FETCH_QPS": "-inf"}, "HIKYO_OPERATOR_FETCH_QPS", FINITE),
        ({"HIKYO_OPERATOR_FETCH_BURST": "inf"}, "HIKYO_OPERATOR_FETCH_BURST", "an integer from 1"),
        (
            {"HIKYO_OPERATOR_NAMESPACE": "Bad Namespace"},
            "HIKYO_OPERATOR_NAMESPACE",
            "not a namespace name",
        ),
        ({"POD_NAMESPACE": "ns_1"}, "POD_NAMESPACE", "not a namespace name"),
        ({"HIKYO_OPERATOR_NAMESPACE": "n" * 64}, "HIKYO_OPERATOR_NAMESPACE", "at most 63"),
        (
            {"HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS": '{"Bad NS": ["builder"]}'},
            "HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS",
            "not a namespace name",
        ),
        (
            {"HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS": '{"team-a": [""]}'},
            "HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS",
            "not a ServiceAccount name",
        ),
        (
            {"HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS": '{"team-a": ["Builder"]}'},
            "HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS",
            "not a ServiceAccount name",
        ),
        (
            {"HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS": DEEP_JSON},
            "HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS",
            "not JSON",
        ),
    ],
)
def test_values_once_accepted_or_crashing_are_refused_by_name(environ, variable, rule):
    """S8.1: each is a SettingsInvalid naming the variable and the rule, on one short line
    (never a RecursionError or a bare ValueError)."""
    with pytest.raises(SettingsInvalid) as caught:
        operator_settings_from(environ)
    message = str(caught.value)
    assert message.startswith(variable) and rule in message, message
    assert "\n" not in message and len(message) < 200


def test_valid_designations_and_namespace_are_kept():
    settings = operator_settings_from(
        {
            "HIKYO_OPERATOR_NAMESPACE": " hikyo-system ",
            "HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS": '{"team-a": ["builder", "ci.bot"]}',
        }
    )
    assert settings.operator_namespace == "hikyo-system"
    assert settings.designated_service_accounts == {"team-a": ("builder", "ci.bot")}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, ("0.0.0.0", 8081)),
        ("", ("0.0.0.0", 8081)),
        (":8081", ("0.0.0.0", 8081)),
        ("127.0.0.1:9000", ("127.0.0.1", 9000)),
        ("[::1]:8081", ("::1", 8081)),
        ("localhost:65535", ("localhost", 65535)),
    ],
)
def test_listen_addresses(raw, expected):
    assert parse_address("HIKYO_OPERATOR_HEALTH_ADDR", raw, ":8081") == expected


@pytest.mark.parametrize(
    "raw",
    [
        "notaport",
        "8081",
        "host:",
        "host:http",
        "host:0",
        "host:65536",
        ":-1",
        "a b:80",
        ":" + "9" * 5000,
    ],
)
def test_bad_listen_addresses_are_refused_by_name(raw):
    """S8.1 HIKYO_OPERATOR_HEALTH_ADDR: was a bare ValueError from int() in run_operator."""
    with pytest.raises(SettingsInvalid) as caught:
        parse_address("HIKYO_OPERATOR_HEALTH_ADDR", raw, ":8081")
    assert str(caught.value).startswith("HIKYO_OPERATOR_HEALTH_ADDR=")
    assert "[host]:port" in str(caught.value)


def test_log_levels():
    assert parse_log_level("HIKYO_LOG_LEVEL", " debug ", "INFO") == "DEBUG"
    assert parse_log_level("HIKYO_LOG_LEVEL", None, "INFO") == "INFO"
    with pytest.raises(SettingsInvalid, match="HIKYO_LOG_LEVEL='loud' is not one of"):
        parse_log_level("HIKYO_LOG_LEVEL", "loud", "INFO")


def test_django_debug_is_an_s81_boolean():
    """DJANGO_DEBUG=maybe used to read as False (django-environ); it is refused now."""
    with pytest.raises(SettingsInvalid, match="DJANGO_DEBUG='maybe' is not a boolean"):
        parse_bool("DJANGO_DEBUG", "maybe", False)


# --- S8.1/S8.4: the observation store and the Redis URL ---------------------------------------

SECRET = "s3cr3t-pw"


def _database(environ: dict[str, str], scaled: bool, tmp_path: Path) -> dict:
    return controlplane_settings.database_from(
        environ, tmp_path, scaled=scaled, redis_variable="HIKYO_OPERATOR_REDIS_URL"
    )


def test_embedded_mode_defaults_to_sqlite_in_the_data_dir(tmp_path):
    config = _database({}, False, tmp_path)
    assert config["ENGINE"] == "django.db.backends.sqlite3"
    assert config["NAME"] == str(tmp_path / "hikyo-operator.sqlite3")


@pytest.mark.parametrize("dsn", [False, True], ids=["default", "sqlite-dsn"])
def test_an_embedded_store_transaction_holds_the_write_lock_from_its_start(
    tmp_path, django_db_blocker, dsn
):
    """A recorder's transaction reads, then writes. Begun deferred, it held no lock until its
    first write and failed at once ("database is locked", whatever the busy timeout) when
    another connection had committed meanwhile (CI: a fault-matrix operator's log). Begun
    IMMEDIATE, another writer cannot start inside it and waits out the busy timeout instead."""
    path = tmp_path / "hikyo-operator.sqlite3"
    environ = {"HIKYO_OPERATOR_DATABASE_URL": f"sqlite:///{path}"} if dsn else {}
    store = ConnectionHandler({"default": _database(environ, False, tmp_path)})["default"]
    assert store.settings_dict["NAME"] == str(path)
    connections["store-probe"] = store
    try:
        with django_db_blocker.unblock():
            with store.cursor() as cursor:
                cursor.execute("CREATE TABLE observed (n INTEGER)")
            with transaction.atomic(using="store-probe"):
                with store.cursor() as cursor:
                    cursor.execute("SELECT count(*) FROM observed")  # a read only, so far
                other = sqlite3.connect(path, timeout=0)
                try:
                    with pytest.raises(sqlite3.OperationalError, match="database is locked"):
                        other.execute("BEGIN IMMEDIATE")
                finally:
                    other.close()
                with store.cursor() as cursor:
                    cursor.execute("INSERT INTO observed VALUES (1)")
    finally:
        store.close()
        del connections["store-probe"]


@pytest.mark.parametrize(
    "environ",
    [
        pytest.param({}, id="unset"),
        pytest.param({"HIKYO_OPERATOR_DATABASE_URL": "sqlite:////tmp/x.sqlite3"}, id="sqlite"),
        pytest.param({"DATABASE_URL": f"mysql://hikyo:{SECRET}@db/hikyo"}, id="mysql"),
    ],
)
def test_scaled_mode_requires_postgresql(environ, tmp_path):
    """S8.1: a Redis URL (scaled mode) without a PostgreSQL DSN refuses to start."""
    with pytest.raises(SettingsInvalid) as caught:
        _database(environ, True, tmp_path)
    message = str(caught.value)
    assert "DATABASE_URL" in message and "PostgreSQL" in message and "scaled mode" in message
    assert SECRET not in message


def test_scaled_mode_takes_a_postgresql_dsn(tmp_path, monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: name == "psycopg" or None)
    config = _database(
        {"HIKYO_OPERATOR_DATABASE_URL": f"postgresql://hikyo:{SECRET}@db:5432/hikyo"},
        True,
        tmp_path,
    )
    assert config["ENGINE"] == "django.db.backends.postgresql"
    assert (config["HOST"], config["NAME"]) == ("db", "hikyo")


@pytest.mark.parametrize(
    ("environ", "rule"),
    [
        ({"DATABASE_URL": f"oracle://hikyo:{SECRET}@db/x"}, "must be a PostgreSQL DSN"),
        ({"DATABASE_URL": f"nonsense://hikyo:{SECRET}@db/x"}, "must be a PostgreSQL DSN"),
        ({"DATABASE_URL": f"hikyo:{SECRET}"}, "must be a PostgreSQL DSN"),
    ],
)
def test_bad_database_urls_are_named_never_echoed(environ, rule, tmp_path):
    with pytest.raises(SettingsInvalid) as caught:
        _database(environ, False, tmp_path)
    assert str(caught.value).startswith("DATABASE_URL ") and rule in str(caught.value)
    assert SECRET not in str(caught.value)


def test_a_postgresql_dsn_without_a_driver_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SettingsInvalid, match="no PostgreSQL driver") as caught:
        _database({"DATABASE_URL": f"postgres://hikyo:{SECRET}@db/hikyo"}, False, tmp_path)
    assert SECRET not in str(caught.value)


def test_redis_urls():
    assert controlplane_settings.redis_url_from({}) is None
    assert controlplane_settings.redis_url_from({"REDIS_URL": "redis://r:6379/0"}) == (
        "REDIS_URL",
        "redis://r:6379/0",
    )
    with pytest.raises(SettingsInvalid) as caught:
        controlplane_settings.redis_url_from(
            {"HIKYO_OPERATOR_REDIS_URL": f"http://user:{SECRET}@r:6379"}
        )
    assert str(caught.value).startswith("HIKYO_OPERATOR_REDIS_URL is not a Redis URL")
    assert SECRET not in str(caught.value)


# --- issue 33 item 5: pacing within what a human would set (S4.1.6, S8.1) --------------------

QPS_RULE = "HIKYO_OPERATOR_FETCH_QPS={!r} is not a number from 0.01 to 10000"
BURST_RULE = "HIKYO_OPERATOR_FETCH_BURST={!r} is not an integer from 1 to 100000"


@pytest.mark.parametrize(
    ("variable", "raw", "value"),
    [
        ("HIKYO_OPERATOR_FETCH_QPS", "0.01", 0.01),
        ("HIKYO_OPERATOR_FETCH_QPS", "10000", 10_000.0),
        ("HIKYO_OPERATOR_FETCH_BURST", "1", 1),
        ("HIKYO_OPERATOR_FETCH_BURST", " 100000 ", 100_000),
    ],
)
def test_pacing_bounds_are_inclusive(variable, raw, value):
    settings = operator_settings_from({variable: raw})
    assert {"HIKYO_OPERATOR_FETCH_QPS": settings.fetch_qps}.get(
        variable, settings.fetch_burst
    ) == value


@pytest.mark.parametrize(
    ("variable", "raw", "message"),
    [
        ("HIKYO_OPERATOR_FETCH_QPS", "0.0099", QPS_RULE.format("0.0099")),
        ("HIKYO_OPERATOR_FETCH_QPS", "10000.5", QPS_RULE.format("10000.5")),
        ("HIKYO_OPERATOR_FETCH_QPS", "-1", QPS_RULE.format("-1")),
        ("HIKYO_OPERATOR_FETCH_BURST", "0", BURST_RULE.format("0")),
        ("HIKYO_OPERATOR_FETCH_BURST", "100001", BURST_RULE.format("100001")),
        (
            "HIKYO_OPERATOR_FETCH_BURST",
            "99999999999999999999999",
            BURST_RULE.format("99999999999999999999999"),
        ),
        # past Python's int() digit limit: still the one line, not a ValueError
        ("HIKYO_OPERATOR_FETCH_BURST", "9" * 5000, None),
    ],
)
def test_pacing_outside_its_bounds_is_one_line_naming_the_variable(variable, raw, message):
    with pytest.raises(SettingsInvalid) as caught:
        operator_settings_from({variable: raw})
    text = str(caught.value)
    if message is not None:
        assert text == message
    assert text.startswith(f"{variable}=") and "\n" not in text and len(text) < 200


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"HIKYO_OPERATOR_SHARDS": "0"},
            "HIKYO_OPERATOR_SHARDS='0' is not an integer from 1 to 64",
        ),
        ({"HIKYO_OPERATOR_SHARDS": "65"}, "HIKYO_OPERATOR_SHARDS='65' is not an integer from 1"),
        (
            {"HIKYO_OPERATOR_SHARDS": "2", "HIKYO_OPERATOR_SHARD": "2"},
            "HIKYO_OPERATOR_SHARD='2' is not below HIKYO_OPERATOR_SHARDS=2 (shards are numbered"
            " 0 to 1)",
        ),
        ({"HIKYO_OPERATOR_SHARD": "1"}, "HIKYO_OPERATOR_SHARD='1' is not below"),
        ({"HIKYO_OPERATOR_SHARD": "-1"}, "HIKYO_OPERATOR_SHARD='-1' is not an integer from 0"),
    ],
)
def test_a_shard_outside_the_layout_is_refused_in_one_line(environ, message):
    with pytest.raises(SettingsInvalid) as caught:
        operator_settings_from({"HIKYO_OPERATOR_NAMESPACE": "hikyo-system", **environ})
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_the_shard_settings():
    environ = {"HIKYO_OPERATOR_NAMESPACE": "hikyo-system"}
    assert (operator_settings_from(environ).shard, operator_settings_from(environ).shards) == (0, 1)
    sharded = operator_settings_from(
        {**environ, "HIKYO_OPERATOR_SHARDS": "3", "HIKYO_OPERATOR_SHARD": " 2 "}
    )
    assert (sharded.shard, sharded.shards) == (2, 3)
