"""Display formatting: seconds inside, milliseconds on display. One function per kind of number.

Every number a report shows goes through :func:`fmt`, so a test can format a summary.json value the
same way and compare it with the text of the report.
"""

from __future__ import annotations

import math

DASH = "—"


def _float(v) -> float | None:
    """A summary.json number as a float: None stays None, 'inf' strings become infinities."""
    if v is None:
        return None
    if isinstance(v, str):
        if v in ("inf", "-inf"):
            return math.inf if v == "inf" else -math.inf
        return None
    v = float(v)
    return None if math.isnan(v) else v


def ms(v) -> str:
    """Seconds -> milliseconds text with about three significant digits ('12.3', '0.512', '1,234', '10,800'): above
    10 s no interval of a latency is narrower than tens of milliseconds, so a five-digit value is rounded to three
    significant digits rather than shown to the millisecond ('10,762 [10,762, 11,145]' ran into the next column)."""
    x = _float(v)
    if x is None:
        return DASH
    if math.isinf(x):
        return "∞"
    m = x * 1e3
    a = abs(m)
    if a >= 10_000:
        return f"{round(m, 2 - int(math.floor(math.log10(a)))):,.0f}"
    if a >= 100:
        return f"{m:,.0f}"
    if a >= 10:
        return f"{m:.1f}"
    if a >= 1:
        return f"{m:.2f}"
    return f"{m:.3f}"


def pct(v) -> str:
    """A fraction as a percentage ('0.12%')."""
    x = _float(v)
    return DASH if x is None else f"{x * 100:.2f}%"


def rate(v) -> str:
    """Requests or tokens per second."""
    x = _float(v)
    return DASH if x is None else f"{x:,.1f}"


def count(v) -> str:
    x = _float(v)
    return DASH if x is None else f"{int(x):,}"


def seconds(v) -> str:
    """A duration in seconds for headers ('12.3 s')."""
    x = _float(v)
    return DASH if x is None else f"{x:,.1f} s"


def count0(v) -> str:
    """A count where absence means zero (an error class not seen in a phase)."""
    return count(0 if v is None else v)


def times(v) -> str:
    """A ratio as a factor ('1.4x', '12x'), as :func:`ratio_text` writes it."""
    x = _float(v)
    if x is None:
        return DASH
    if math.isinf(x):
        return "∞"
    if x < 1:  # a ratio's lower bound: two significant digits ('0.04x', not '0.0x')
        return f"{x:.2g}x"
    return f"{x:.1f}x" if x < 10 else f"{x:,.0f}x"


def share(v) -> str:
    """A fraction as a whole percentage of something ('120%': 120% of the expected rate)."""
    x = _float(v)
    return DASH if x is None else f"{x * 100:.0f}%"


def mb(v) -> str:
    """Bytes as megabytes ('506 MB')."""
    x = _float(v)
    return DASH if x is None else f"{x / 1e6:,.0f} MB"


def num(v) -> str:
    """A plain number with up to three significant digits ('2', '2.5'): a median of counts."""
    x = _float(v)
    return DASH if x is None else f"{x:.3g}"


def setting(v) -> str:
    """A server setting as configured: on/off for a switch, 'unset' for none, a number or a name as it is."""
    if isinstance(v, bool):
        return "on" if v else "off"
    if v is None:
        return "unset"
    if isinstance(v, (int, float)):
        return f"{v:g}"
    return str(v)


def as_float(v) -> float | None:
    """A summary.json number as a float (None, NaN -> None; 'inf' -> infinity)."""
    return _float(v)


FORMATS = {"ms": ms, "pct": pct, "rate": rate, "count": count, "count0": count0, "s": seconds, "x": times,
           "share": share, "mb": mb, "num": num, "setting": setting}


def fmt(v, kind: str) -> str:
    """Format ``v`` (a summary.json value) as ``kind``: ms | pct | rate | count | count0 | s | x | share | mb |
    num."""
    return FORMATS[kind](v)


def ci(pair, kind: str = "ms") -> str:
    """A confidence interval '[lo, hi]', or a dash when there is none."""
    if not pair:
        return DASH
    return f"[{fmt(pair[0], kind)}, {fmt(pair[1], kind)}]"


def slo_kind(stat: str | None, metric: str | None) -> str:
    """The display kind of the value an SLO measured (of ``stat`` of ``metric``, or of a rate)."""
    if stat:
        return "ms"
    if metric in ("error_rate", "aborted_rate", "goodput"):
        return "pct"
    return "rate"


def ratio_text(base, other, what: str, lower_is_better: bool = True) -> str:
    """'4.1x lower p99' / '1.3x higher p99' / 'same p99' comparing ``other`` against ``base``."""
    b, o = _float(base), _float(other)
    if b is None or o is None or b <= 0 or o <= 0 or math.isinf(b) or math.isinf(o):
        return DASH
    r = b / o if o < b else o / b
    if abs(r - 1) < 0.05:
        return f"same {what}"
    word = ("lower" if o < b else "higher") if lower_is_better else ("more" if o > b else "less")
    return f"{r:.1f}x {word} {what}"
