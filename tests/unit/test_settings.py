"""S8.1: the operator's environment, read once; anything invalid stops the process."""

import pytest

from workers.engine.settings import SettingsInvalid, operator_settings_from


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
        ("HIKYO_OPERATOR_FETCH_QPS", "0", "positive number"),
        ("HIKYO_OPERATOR_FETCH_QPS", "fast", "positive number"),
        ("HIKYO_OPERATOR_FETCH_BURST", "2.5", "positive integer"),
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
