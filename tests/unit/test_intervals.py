import numpy as np

from rankscope.analysis.intervals import coverage, merge, per_window


def a(*xs):
    return np.array(xs, dtype=np.int64)


def test_merge_overlapping_and_nested():
    s, e = merge(a(0, 5, 2, 20), a(10, 6, 3, 25))
    assert s.tolist() == [0, 20] and e.tolist() == [10, 25]


def test_coverage_priorities_sum_to_window():
    # window [0, 100): compute [10, 40), comm [30, 60), data [70, 80)
    sets = {"c": (a(10), a(40)), "m": (a(30), a(60)), "d": (a(70), a(80))}
    w, ln, cov = coverage(sets, a(0), a(100))
    c, m, d = cov["c"], cov["m"], cov["d"]
    compute = per_window(w, ln, c, 1)[0]
    exposed = per_window(w, ln, m & ~c, 1)[0]
    overlapped = per_window(w, ln, m & c, 1)[0]
    data = per_window(w, ln, d & ~c & ~m, 1)[0]
    assert (compute, exposed, overlapped, data) == (30, 20, 10, 10)
    assert ln.sum() == 100


def test_coverage_two_windows_clip_intervals():
    sets = {"c": (a(5), a(15))}
    w, ln, cov = coverage(sets, a(0, 10), a(10, 20))
    assert per_window(w, ln, cov["c"], 2).tolist() == [5, 5]
