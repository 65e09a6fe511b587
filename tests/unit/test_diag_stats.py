"""Statistical outlier rules on hand-made numbers, including cases with no outlier."""
from __future__ import annotations

import numpy as np

from rankscope.analysis.stats import DIXON_Q95, dixon_high, high_outliers, mad_high, mad_scores


def test_dixon_finds_the_high_value():
    v = np.array([10.0, 10.2, 10.1, 9.9, 13.0])
    idx, q, crit = dixon_high(v)
    assert idx == 4 and abs(q - 2.8 / 3.1) < 1e-9 and crit == DIXON_Q95[5]


def test_dixon_no_outlier():
    assert dixon_high(np.array([10.0, 10.2, 10.1, 9.9, 10.3])) is None
    assert dixon_high(np.array([5.0, 5.0, 5.0])) is None  # zero spread
    assert dixon_high(np.arange(11.0)) is None  # outside the table: not this test's job


def test_mad_rule_large_group():
    rng = np.random.default_rng(1)
    v = rng.normal(100.0, 1.0, 64)
    assert mad_high(v) == []
    v[17] = 130.0
    assert [i for i, _ in mad_high(v)] == [17]
    assert mad_scores(np.array([1.0, 1.0, 1.0, 2.0]))[3] == np.inf


def test_high_outliers_picks_test_by_size_and_needs_relative_excess():
    assert [(o.index, o.test) for o in high_outliers(np.array([10.0, 13.0]), 0.15)] == [(1, "ratio")]
    assert high_outliers(np.array([10.0, 11.0]), 0.15) == []
    small = high_outliers(np.array([10.0, 10.2, 10.1, 9.9, 13.0]), 0.1)
    assert [(o.index, o.test) for o in small] == [(4, "dixon")] and abs(small[0].rel_excess - (13 / 10.05 - 1)) < 1e-9
    # Dixon says outlier, but 1 % slower is not a straggler.
    assert high_outliers(np.array([100.0, 100.1, 100.05, 100.02, 101.0]), 0.1) == []
    rng = np.random.default_rng(2)
    big = rng.normal(100.0, 1.0, 256)
    assert high_outliers(big, 0.1) == []
    big[200] = 125.0
    assert [(o.index, o.test) for o in high_outliers(big, 0.1)] == [(200, "mad")]
