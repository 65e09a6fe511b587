"""The sparse clock-offset solver against numpy's dense least squares (the solver it replaced)."""
from __future__ import annotations

import numpy as np
import pytest

from rankscope.analysis.clock.edgesolve import components, solve


def dense(n: int, i: np.ndarray, j: np.ndarray, d: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The previous formulation: rows sqrt(w) * (e_i - e_j) plus the row x[0] = 0, solved by lstsq."""
    m = len(i)
    a = np.zeros((m + 1, n))
    sw = np.sqrt(w)
    a[np.arange(m), i] = sw
    a[np.arange(m), j] = -sw
    a[m, 0] = 1.0
    return np.linalg.lstsq(a, np.append(d * sw, 0.0), rcond=None)[0]


@pytest.mark.parametrize("seed", range(6))
def test_same_solution_as_dense_least_squares(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(50):
        n, m = int(rng.integers(2, 40)), int(rng.integers(0, 90))
        i, j = rng.integers(0, n, m), rng.integers(0, n, m)
        i, j = i[i != j], j[i != j]
        true = rng.normal(0, 1e9, n)  # offsets of up to seconds, in ns
        d = true[i] - true[j] + rng.normal(0, 1e4, len(i))
        w = rng.integers(1, 50, len(i)).astype(float)
        # disconnected components included: both give them zero mean (minimum norm)
        assert np.abs(solve(n, i, j, d, w) - dense(n, i, j, d, w)).max() < 0.05


def test_components_and_isolated_nodes() -> None:
    lab = components(6, np.array([1, 3, 4]), np.array([0, 4, 5]))
    assert lab.tolist() == [0, 0, 2, 3, 3, 3]
    x = solve(6, np.array([1, 4]), np.array([0, 3]), np.array([10.0, 4.0]), np.ones(2))
    assert x[1] - x[0] == pytest.approx(10.0) and x[0] == 0
    assert x[2] == 0 and x[3] + x[4] == pytest.approx(0) and x[4] - x[3] == pytest.approx(4.0)


def test_4096_ranks_recovers_offsets() -> None:
    """World group, tp groups of 8 and dp groups across them: offsets back within the noise."""
    n = 4096
    rng = np.random.default_rng(7)
    groups = [range(n)] + [range(k, k + 8) for k in range(0, n, 8)] + [range(k, n, 8) for k in range(8)]
    i = np.array([r for g in groups for r in list(g)[1:]])
    j = np.array([list(g)[0] for g in groups for _ in list(g)[1:]])
    true = rng.normal(0, 5e8, n)
    true -= true[0]
    d = true[i] - true[j] + rng.normal(0, 1e3, len(i))
    x = solve(n, i, j, d, np.full(len(i), 16.0))
    assert np.median(np.abs(x - true)) < 1e3
