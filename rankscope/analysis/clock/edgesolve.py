"""Weighted least squares on a graph of pairwise differences, in memory linear in the edges.

Clock alignment measures, for many pairs of ranks, ``x[i] - x[j] ≈ d`` with weight ``w`` (samples).
The least-squares offsets solve the graph Laplacian system ``L x = b``. A dense edges × ranks design
matrix (what ``np.linalg.lstsq`` needs) is 400 MB and an SVD of minutes at 4,096 ranks, and the SVD
can fail to converge on ill-conditioned inputs (seen on Ascend runs: ``LinAlgError``). Here the
Laplacian is applied matrix-free (two ``np.bincount`` per product) and solved by Jacobi-
preconditioned conjugate gradients: O(edges + ranks) memory, no factorisation that can fail.

The result equals the minimum-norm least-squares solution of the system with one extra equation
``x[0] = 0``: node 0's component is pinned at node 0, and every component that no edge connects to
node 0 comes out with zero mean (its offsets are defined only up to a constant).
"""
from __future__ import annotations

from typing import Callable

import numpy as np


def components(n: int, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Connected-component label (the smallest node index in it) of every node, by min-label
    propagation along the edges (a handful of vectorised passes for the star-shaped groups here)."""
    label = np.arange(n)
    if not len(i):
        return label
    while True:
        low = np.minimum(label[i], label[j])
        new = label.copy()
        np.minimum.at(new, i, low)
        np.minimum.at(new, j, low)
        new = new[new]  # pointer jumping: follow labels to their own labels
        if np.array_equal(new, label):
            return label
        label = new


def solve(n: int, i: np.ndarray, j: np.ndarray, d: np.ndarray, w: np.ndarray,
          *, tol: float = 1e-28, max_iter: int | None = None) -> np.ndarray:
    """``x`` (length ``n``) minimising ``sum w * (x[i] - x[j] - d)**2`` with ``x[0] = 0``.

    >>> solve(3, np.array([1, 2]), np.array([0, 1]), np.array([5.0, 2.0]), np.ones(2)).round(6)
    array([0., 5., 7.])
    """
    i, j = np.asarray(i, dtype=np.int64), np.asarray(j, dtype=np.int64)
    d, w = np.asarray(d, dtype=float), np.asarray(w, dtype=float)
    x = np.zeros(n)
    if n == 0 or not len(i):
        return x
    label = components(n, i, j)
    free = label != np.arange(n)  # every component's smallest node is pinned at 0

    def lap(v: np.ndarray) -> np.ndarray:
        t = w * (v[i] - v[j])
        return np.bincount(i, t, n) - np.bincount(j, t, n)

    b = np.where(free, np.bincount(i, w * d, n) - np.bincount(j, w * d, n), 0.0)
    diag = np.bincount(i, w, n) + np.bincount(j, w, n)
    inv = np.where(free & (diag > 0), 1.0 / np.where(diag > 0, diag, 1.0), 0.0)
    # Iterative refinement: offsets are ~1e9 ns and the wanted precision < 1 ns, beyond what one
    # conjugate-gradient pass reaches in float64; each pass solves for the remaining residual.
    for _ in range(6):
        r = b - np.where(free, lap(x), 0.0)
        if float(r @ r) <= tol * max(float(b @ b), 1e-300):
            break
        x += _cg(lambda v: np.where(free, lap(v), 0.0), r, inv, max_iter or 10 * n + 100)
    # Components away from node 0: zero mean, as the minimum-norm least-squares solution has.
    other = label != label[0]
    if other.any():
        sums = np.bincount(label[other], x[other], n)
        counts = np.bincount(label[other], minlength=n)
        x[other] -= sums[label[other]] / counts[label[other]]
    return x


def _cg(apply: Callable[[np.ndarray], np.ndarray], b: np.ndarray, inv: np.ndarray, max_iter: int,
        rel: float = 1e-20) -> np.ndarray:
    """Jacobi-preconditioned conjugate gradients for ``apply(x) = b`` (symmetric positive definite
    on the free nodes); stops at ``|r|^2 <= rel * |b|^2``."""
    x = np.zeros_like(b)
    r = b.copy()
    z = inv * r
    p = z.copy()
    rz = float(r @ z)
    stop = rel * float(b @ b)
    for _ in range(max_iter):
        if float(r @ r) <= stop or rz == 0.0:
            break
        q = apply(p)
        alpha = rz / float(p @ q)
        x += alpha * p
        r -= alpha * q
        z = inv * r
        rz, old = float(r @ z), rz
        p = z + (rz / old) * p
    return x
