"""bench/soak.py's slope and its table rows (pure, no cluster; the readings are made up)."""

from __future__ import annotations

import pytest

from bench import report
from bench.__main__ import parse
from bench.soak import slope_percent_per_period

PERIOD = 60.0


def test_a_flat_series_after_the_settling_periods_has_no_slope_whatever_came_before():
    # Growth in the first two periods (the first resync waves) is not the steady state.
    samples = [(60.0, 90.0), (120.0, 100.0), (180.0, 100.0), (240.0, 100.0), (300.0, 100.0)]
    assert slope_percent_per_period(samples, PERIOD) == 0.0


def test_the_slope_is_per_period_and_relative_to_the_first_reading_in_the_window():
    # +1 MiB a minute from 100 MiB with a 2-minute period: +2 % per period.
    samples = [(240.0 + 60.0 * k, 100.0 + k) for k in range(5)]
    assert slope_percent_per_period(samples, 120.0) == 2.0
    assert slope_percent_per_period(samples, 60.0) == 1.0


def test_a_least_squares_fit_does_not_follow_one_outlier_at_the_end():
    samples = [(120.0 + 60.0 * k, 100.0) for k in range(9)] + [(660.0, 104.0)]
    slope = slope_percent_per_period(samples, PERIOD)
    assert 0.0 < slope < 4.0 / 9  # the last two points alone would say +4 % per period


@pytest.mark.parametrize(
    "samples", [[], [(30.0, 100.0), (60.0, 101.0), (119.0, 102.0)], [(300.0, 100.0)]]
)
def test_fewer_than_two_readings_after_the_settling_periods_give_no_slope(samples):
    assert slope_percent_per_period(samples, PERIOD) is None


def test_the_rows_say_met_or_not_against_the_bound():
    soak = {
        "n": 5000,
        "bound_percent_per_period": 2.0,
        "runs": [
            {
                "mode": "embedded",
                "resync_seconds": 60,
                "processes": [
                    {
                        "process": "operator",
                        "rss_mib": [104.0, 106.0, 105.0],
                        "slope_percent_per_period": 0.4,
                    },
                    {
                        "process": "worker-1",
                        "rss_mib": [110.0, 120.0],
                        "slope_percent_per_period": 2.5,
                    },
                ],
            }
        ],
    }
    rows = report.soak_rows(soak)
    assert [row[-1] for row in rows] == ["met", "NOT met"]
    assert rows[0][2] == "104 / 105 / 106; +0.4 %"
    assert "3 minutes" in rows[0][0] and "5,000" in rows[0][0]


def test_the_soak_runs_only_when_named_and_refuses_bad_counts(capsys):
    options = parse(["soak", "--soak-workers", "0,2", "--soak-minutes", "5"])
    assert options.soak_workers == (0, 2) and options.soak_minutes == 5
    for bad in (["--soak-workers", "x"], ["--soak-workers", "-1"], ["--soak-minutes", "0"]):
        with pytest.raises(SystemExit):
            parse(["soak", *bad])
    assert "--soak-minutes is at least 1" in capsys.readouterr().err


def test_p1_s_cold_starts_default_to_embedded_two_and_four_workers_or_the_list_given(capsys):
    assert parse(["p1"]).p1_workers == (0, 2, 4)
    assert parse(["p1", "--p1-workers", "0,2"]).p1_workers == (0, 2)
    with pytest.raises(SystemExit):
        parse(["p1", "--p1-workers", "two"])
    assert "--p1-workers is a comma-separated list of worker counts" in capsys.readouterr().err
