"""Spherical k-means steps on unit-norm rows: best centroids, centroid sums and bounds.

Similarities ``X @ C.T`` come from BLAS in the caller; these kernels do the per-row work
around them, in parallel over rows (``prange``; the caller sets the number of threads and
holds BLAS to the same number, so that the two never run at once). Every row's result is
computed by one thread in a fixed order, so results do not depend on the number of threads.

The bounds follow Yinyang k-means (Ding et al., 2015) with cosine similarity: ``lower[i]``
bounds from below the similarity of row ``i`` to its own centroid, and ``upper[i, g]``
bounds from above its similarity to the other centroids of group ``g``. When a unit
centroid moves by ``shift[k]`` (Euclidean norm of the move), the similarity of a unit row to
it moves by at most ``shift[k]``.
"""

import numpy as np
from numba import njit, prange

# Rows handed to one thread at a time by the row-parallel kernels.
_ROWS_PER_TASK = 64


@njit(cache=True, parallel=True)
def best_rows(S, labels, best):
    """Per row of ``S``: index and value of the largest entry (ties to the lowest index)."""
    n, K = S.shape
    for i in prange(n):
        b = 0
        v = S[i, 0]
        for k in range(1, K):
            if S[i, k] > v:
                v = S[i, k]
                b = k
        labels[i] = b
        best[i] = v


@njit(cache=True, parallel=True, fastmath={"nnan"})
def best_rows_grouped(S, order, group_start, labels, best, group_best):
    """`best_rows` on columns sorted by group, and each group's best other than the best.

    Column ``k`` of ``S`` is centroid ``order[k]``; group ``g`` holds the columns
    ``group_start[g]:group_start[g + 1]``. ``labels`` are centroid indices (ties to the
    lowest), and ``group_best[i, g]`` is the largest entry of group ``g`` in row ``i`` other
    than the best (``-inf`` when there is none).
    """
    n = S.shape[0]
    n_groups = group_start.shape[0] - 1
    n_tasks = (n + _ROWS_PER_TASK - 1) // _ROWS_PER_TASK
    for task in prange(n_tasks):
        group_max = np.empty(n_groups, S.dtype)
        for i in range(task * _ROWS_PER_TASK, min(n, (task + 1) * _ROWS_PER_TASK)):
            v = -np.inf
            for g in range(n_groups):
                m = -np.inf
                for k in range(group_start[g], group_start[g + 1]):
                    m = max(m, S[i, k])
                group_max[g] = m
                v = max(v, m)
            b = -1
            bk = -1
            bg = -1
            for g in range(n_groups):
                if group_max[g] == v:
                    for k in range(group_start[g], group_start[g + 1]):
                        if S[i, k] == v and (b < 0 or order[k] < b):
                            b = order[k]
                            bk = k
                            bg = g
            labels[i] = b
            best[i] = v
            for g in range(n_groups):
                group_best[i, g] = group_max[g]
            m = -np.inf
            for k in range(group_start[bg], group_start[bg + 1]):
                if k != bk:
                    m = max(m, S[i, k])
            group_best[i, bg] = m


@njit(cache=True, parallel=True)
def centroid_sums(X, labels, n_clusters):
    """Sum (float64) and number of the rows of ``X`` in each cluster.

    Rows are bucketed by cluster (a counting sort), then each cluster sums its rows in
    increasing row order, clusters in parallel.
    """
    n, d = X.shape
    counts = np.zeros(n_clusters, np.int64)
    for i in range(n):
        counts[labels[i]] += 1
    start = np.zeros(n_clusters + 1, np.int64)
    for k in range(n_clusters):
        start[k + 1] = start[k] + counts[k]
    cursor = start[:-1].copy()
    members = np.empty(n, np.int64)
    for i in range(n):
        k = labels[i]
        members[cursor[k]] = i
        cursor[k] += 1
    sums = np.zeros((n_clusters, d), np.float64)
    for k in prange(n_clusters):
        for p in range(start[k], start[k + 1]):
            i = members[p]
            for j in range(d):
                sums[k, j] += X[i, j]
    return sums, counts


@njit(cache=True, parallel=True)
def own_similarity(X, C, labels, out):
    """``out[i] = X[i] . C[labels[i]]``, accumulated in float64."""
    n, d = X.shape
    for i in prange(n):
        k = labels[i]
        s = 0.0
        for j in range(d):
            s += X[i, j] * C[k, j]
        out[i] = s


@njit(cache=True, parallel=True)
def update_bounds(X, C, labels, lower, upper, shift, group, stale):
    """Loosen the bounds by the centroid shifts and list the rows that need all centroids.

    ``upper[i, g]`` bounds the similarity of row ``i`` to the centroids of group ``g`` other
    than its own; it grows by the largest shift in the group. A row keeps its centroid when
    ``lower`` exceeds every ``upper``; otherwise ``lower`` is tightened to the exact
    similarity to its own centroid and, if that still does not settle it, the row is written
    to ``stale`` (in increasing order). Returns the number of stale rows.
    """
    n, d = X.shape
    n_groups = upper.shape[1]
    group_shift = np.zeros(n_groups)
    for k in range(shift.shape[0]):
        group_shift[group[k]] = max(group_shift[group[k]], shift[k])
    unsettled = np.zeros(n, np.bool_)
    for i in prange(n):
        a = labels[i]
        lower[i] -= shift[a]
        top = -np.inf
        for g in range(n_groups):
            upper[i, g] += group_shift[g]
            top = max(top, upper[i, g])
        if lower[i] > top:
            continue
        s = 0.0
        for j in range(d):
            s += X[i, j] * C[a, j]
        lower[i] = s
        unsettled[i] = s <= top
    m = 0
    for i in range(n):
        if unsettled[i]:
            stale[m] = i
            m += 1
    return m

