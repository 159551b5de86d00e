"""A comparison said as a claim (reports.claims): never a ratio without its interval or the reason it has none, and
"no clear difference" when the interval holds 1 (issue 30, item 2)."""

from __future__ import annotations

import pytest

from reports.claims import includes_one, interval_of, ratio_claim

FEW = "no interval: too few requests for one"


@pytest.mark.parametrize("base, other, lower_is_better, why, said", [
    # other / base = 0.5 with an interval [0.4, 0.625] that excludes 1: the factor and the interval, inverted
    ((0.2, [0.16, 0.25]), (0.1, [0.1, 0.1]), True, FEW, "2.0x lower (interval [1.6x, 2.5x])"),
    ((0.1, [0.09, 0.11]), (0.3, [0.25, 0.33]), True, FEW, "3.0x higher (interval [2.3x, 3.7x])"),
    # an interval holding 1: no higher, no lower
    ((0.1, [0.08, 0.14]), (0.12, [0.09, 0.15]), True, FEW, "no clear difference (ratio 1.2x, interval [0.64x, 1.9x])"),
    # no interval on one side: the factor, and why there is none
    ((0.2, None), (0.1, [0.09, 0.11]), True, FEW, f"2.0x lower ({FEW})"),
    ((0.2, None), (0.05, None), True, "no interval: a mean has none", "4.0x lower (no interval: a mean has none)"),
    ((0.2, None), (0.201, None), True, FEW, f"within 5% ({FEW})"),
    # a rate: more or less
    ((10.0, None), (5.0, None), False, "no interval", "2.0x less (no interval)"),
    # nothing to claim: a value missing, zero or infinite
    ((None, None), (0.1, None), True, FEW, ""),
    ((0.0, None), (0.1, None), True, FEW, ""),
    ((0.1, None), ("inf", None), True, FEW, ""),
])
def test_a_ratio_is_claimed_with_its_interval_or_why_it_has_none(base, other, lower_is_better, why, said):
    assert ratio_claim(base, other, "", lower_is_better, why) == said


def test_the_words_name_what_is_compared():
    assert ratio_claim((0.2, None), (0.1, None), "p99", True, FEW) == f"2.0x lower p99 ({FEW})"
    assert ratio_claim((0.1, [0.08, 0.14]), (0.12, [0.09, 0.15]), "p99").startswith("no clear difference in p99 (")


def test_an_interval_with_too_few_samples_is_none_and_one_is_held_or_not():
    assert interval_of([0.1, 0.2], True) is None and interval_of([0.1, 0.2], False) == [0.1, 0.2]
    assert interval_of(None, False) is None
    assert includes_one([0.5, 1.5]) and includes_one([1.0, 2.0]) and not includes_one([1.1, 2.0])
    assert not includes_one([0.2, 0.9]) and includes_one([0.9, "inf"])
