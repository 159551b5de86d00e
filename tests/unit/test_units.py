"""Units, one definition each: durations, rates, percentages, milliseconds on display, floats as JSON carries them."""

import math

import pytest

from loadgen.units import fmt_ms, json_num, parse_duration, parse_percent, parse_rate


@pytest.mark.parametrize("text, seconds", [
    ("500ms", 0.5), ("30s", 30.0), ("2m", 120.0), ("1.5min", 90.0), ("1h", 3600.0), ("250us", 250e-6),
    ("250µs", 250e-6), (" 7 s ", 7.0), (3, 3.0), (0.25, 0.25), ("1e-3s", 1e-3), ("0", 0.0),
])
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["fast", "10 parsecs", "-1s", "", None, True, [1], "inf", float("nan"), float("inf")])
def test_bad_durations_are_refused(bad):
    with pytest.raises(ValueError):
        parse_duration(bad)


@pytest.mark.parametrize("value, expected_qps, rate", [
    (10, None, 10.0), ("12.5", None, 12.5), ("120%", 100, 120.0), ("50%", 8, 4.0), (0, None, 0.0),
])
def test_rates(value, expected_qps, rate):
    assert parse_rate(value, expected_qps) == pytest.approx(rate)


@pytest.mark.parametrize("value, expected_qps, message", [
    ("120%", None, "needs load.expected_qps"), ("fast", 10, "expected a number or a percentage"),
    (-1, None, "non-negative"), (True, None, "expected a number"), ("x%", 10, "expected a number"),
])
def test_bad_rates_say_why(value, expected_qps, message):
    with pytest.raises(ValueError, match=message):
        parse_rate(value, expected_qps)


@pytest.mark.parametrize("text, fraction", [("10%", 0.10), ("0.1", 0.1), ("0.5 %", 0.005), (" 150% ", 1.5), ("0", 0.0)])
def test_percentages(text, fraction):
    assert parse_percent(text) == pytest.approx(fraction)


@pytest.mark.parametrize("bad", ["ten", "nan%", "inf", "%"])
def test_bad_percentages(bad):
    with pytest.raises(ValueError):
        parse_percent(bad)


@pytest.mark.parametrize("seconds, text", [(0.0123, "12.3 ms"), (1.0, "1000.0 ms"), (None, "-"), (math.nan, "-"),
                                           (math.inf, "inf"), (0.00004, "0.0 ms")])
def test_milliseconds_on_display(seconds, text):
    assert fmt_ms(seconds) == text


@pytest.mark.parametrize("value, carried", [(1.5, 1.5), (math.nan, None), (None, None), (math.inf, "inf"),
                                            (-math.inf, "-inf"), (0, 0.0)])
def test_json_numbers(value, carried):
    assert json_num(value) == carried
