"""S4.16: resyncInterval parsing."""

import pytest

from workers.engine.durations import InvalidDuration, parse_go_duration, resync_seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("5m", 300, id="minutes"),
        pytest.param("1h30m", 5400, id="compound"),
        pytest.param("1.5h", 5400, id="fraction"),
        pytest.param("10000ms", 10, id="milliseconds"),
        pytest.param("10000000us", 10, id="us"),
        pytest.param("10000000µs", 10, id="micro-sign"),
        pytest.param("10000000000ns", 10, id="ns"),
        pytest.param("2562047h", 2562047 * 3600, id="near-max"),
    ],
)
def test_parses(text, seconds):
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text", ["", "5", "m", "5 m", "-5m", "5M", "1h-5m", "2562048h", "1e3s", ".5s"]
)
def test_rejects(text):
    with pytest.raises(InvalidDuration):
        parse_go_duration(text)


def test_resync_default_and_floor():
    assert resync_seconds(None) == 300
    assert resync_seconds("") == 300
    assert resync_seconds("10s") == 10
    with pytest.raises(InvalidDuration, match="10s minimum"):
        resync_seconds("9.9s")
    with pytest.raises(InvalidDuration):
        resync_seconds("0s")
