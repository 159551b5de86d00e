"""Units, one definition each: durations, rates and percentages as people write them, seconds and fractions
inside, milliseconds on display, and floats as JSON carries them."""

from __future__ import annotations

import math
import re

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(us|µs|ms|s|m|min|h)?\s*$")
_SCALE = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value) -> float:
    """'500ms' -> 0.5, '30s' -> 30.0, '2m' -> 120.0; a bare number is seconds. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration such as '500ms', '30s' or '2m', got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        m = _DURATION.match(value)
        if not m:
            raise ValueError(f"expected a duration such as '500ms', '30s' or '2m', got {value!r}")
        seconds = float(m.group(1)) * _SCALE[m.group(2)]
    else:
        raise ValueError(f"expected a duration such as '500ms', '30s' or '2m', got {value!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"expected a finite, non-negative duration, got {value!r}")
    return seconds


def parse_percent(text: str) -> float:
    """'10%' -> 0.1, '0.1' -> 0.1 (a bare number is already a fraction). Raises ValueError, also for NaN/inf."""
    t = str(text).strip()
    v = float(t[:-1]) / 100.0 if t.endswith("%") else float(t)
    if not math.isfinite(v):
        raise ValueError(f"expected a finite percentage, got {text!r}")
    return v


def parse_rate(value, expected_qps: float | None):
    """A rate in requests per second: a number, or 'N%' of ``expected_qps``. Returns a float."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number or a percentage, got {value!r}")
    if isinstance(value, (int, float)):
        rate = float(value)
    elif isinstance(value, str) and value.strip().endswith("%"):
        try:
            share = parse_percent(value)
        except ValueError:
            raise ValueError(f"expected a number or a percentage, got {value!r}") from None
        if expected_qps is None:
            raise ValueError(f"a percentage rate ({value!r}) needs load.expected_qps")
        rate = expected_qps * share
    elif isinstance(value, str):
        try:
            rate = float(value)
        except ValueError:
            raise ValueError(f"expected a number or a percentage, got {value!r}") from None
    else:
        raise ValueError(f"expected a number or a percentage, got {value!r}")
    if not math.isfinite(rate) or rate < 0:
        raise ValueError(f"expected a finite, non-negative rate, got {value!r}")
    return rate


def fmt_ms(seconds: float | None, digits: int = 1) -> str:
    """Seconds -> '12.3 ms' for display; '-' for None/NaN."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    if math.isinf(seconds):
        return "inf"
    return f"{seconds * 1e3:.{digits}f} ms"


def json_num(v: float | None):
    """A float as JSON carries it: NaN -> None; infinities as the strings 'inf' / '-inf'."""
    if v is None or math.isnan(v):
        return None
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return float(v)
