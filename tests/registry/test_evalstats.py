"""Evaluation statistics against known values, and how the interval behaves."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from registry import evalstats
from registry.evalstats import summarize, t_quantile

# Student's t 0.975 quantiles (R: qt(0.975, df)).
T975 = {1: 12.706204736174698, 2: 4.302652729749464, 5: 2.570581835636314, 9: 2.2621571628540993,
        10: 2.2281388519649385, 30: 2.0422724563012373, 100: 1.9839715184496334, 1000: 1.9623390808264078}


@pytest.mark.parametrize(("df", "expected"), T975.items())
def test_t_quantiles(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, rel=1e-9)


def test_a_known_reward_list():
    # R: x <- c(0.1,0.5,0.9,0.3,0.7,0.2,0.8,0.4,0.6,1.0); mean(x); sd(x); t.test(x)$conf.int
    s = summarize([0.1, 0.5, 0.9, 0.3, 0.7, 0.2, 0.8, 0.4, 0.6, 1.0])
    assert s.n == 10 and s.ci_method == "t"
    assert s.mean == pytest.approx(0.55) and s.std == pytest.approx(0.3027650354097492)
    assert s.sem == pytest.approx(0.09574271077563381)
    assert (s.ci_low, s.ci_high) == (pytest.approx(0.3334149410331792), pytest.approx(0.7665850589668208))


def test_few_episodes_use_a_reproducible_bootstrap_and_one_has_no_interval():
    few = summarize([0.0, 1.0, 1.0, 0.5])
    assert few.ci_method == "bootstrap" and 0.0 <= few.ci_low <= few.mean <= few.ci_high <= 1.0
    assert summarize([0.0, 1.0, 1.0, 0.5]) == few  # same rewards, same interval
    one = summarize([0.7])
    assert (one.std, one.sem, one.ci_low, one.ci_high, one.ci_method) == (None, None, None, None, "none")
    constant = summarize([0.25] * 12)
    assert constant.std == 0 and constant.ci_low == constant.ci_high == 0.25


@pytest.mark.parametrize("bad", [[], [float("nan")], [1.0, float("inf")]])
def test_refuses_what_is_not_a_sample(bad):
    with pytest.raises(ValueError):
        summarize(bad)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=-10, max_value=10, allow_nan=False), min_size=2, max_size=8).filter(
    lambda xs: max(xs) - min(xs) > 1e-6))
def test_the_interval_narrows_as_episodes_grow(rewards):
    """The same spread of rewards seen over more episodes gives a narrower t interval of the mean."""
    widths = [summarize(rewards * k).ci_high - summarize(rewards * k).ci_low for k in (5, 10, 20, 40)]
    assert all(later < earlier for earlier, later in zip(widths, widths[1:])), widths
    assert all(summarize(rewards * k).ci_method == "t" for k in (5, 10, 20, 40))


def test_overlap():
    a, b = summarize([0.5, 0.6] * 10), summarize([0.52, 0.62] * 10)
    far = summarize([5.0, 5.1] * 10)
    assert evalstats.overlaps(a, b) and not evalstats.overlaps(a, far)
    assert math.isclose(a.mean, 0.55)
