"""Item-item neighbourhoods: RP3beta's random walk, kept to the top neighbours of each
item, and the scoring of a user's items through a neighbour list.

A neighbour list is a `Neighbours` CSR over items: row ``i`` holds at most ``k`` other
items with a positive score, best first. Each kernel holds one dense scratch row of
``n_items`` per thread, never an item x item matrix.
"""

from typing import NamedTuple

import numpy as np
from numba import njit, prange

from .ranking import _push
from .selection import is_seen

__all__ = ["Neighbours", "Walk", "rp3beta_rows", "score_profiles"]


class Neighbours(NamedTuple):
    """A CSR over items: row ``i``'s neighbours ``items[indptr[i]:indptr[i + 1]]`` and
    their ``scores``. Items past the last row have none."""

    indptr: np.ndarray
    items: np.ndarray
    scores: np.ndarray


class Walk(NamedTuple):
    """One step of a random walk as a CSR: from row ``r`` to ``index[j]`` with
    probability ``prob[j]`` for ``j`` in ``indptr[r]:indptr[r + 1]``."""

    indptr: np.ndarray
    index: np.ndarray
    prob: np.ndarray


@njit(cache=True, nogil=True)
def _keep(best_items, best_scores, n, item, score):
    """Insert ``item`` into the ``n`` best kept (higher score first, then lower item);
    return the new count."""
    k = best_items.shape[0]
    if n == k:
        worst = best_scores[k - 1]
        if score < worst or (score == worst and item > best_items[k - 1]):
            return n
        pos = k - 1
    else:
        pos = n
        n += 1
    while pos > 0:
        prev = best_scores[pos - 1]
        if prev > score or (prev == score and best_items[pos - 1] < item):
            break
        best_scores[pos] = prev
        best_items[pos] = best_items[pos - 1]
        pos -= 1
    best_scores[pos] = score
    best_items[pos] = item
    return n


@njit(cache=True, nogil=True)
def _accumulate(lo, hi, index, weight, step, acc, mark, touched, n_touched):
    """Add ``weight[a] * step.prob[c]`` to ``acc`` at ``step.index[c]`` for every entry
    ``a`` in ``lo:hi`` and every entry ``c`` of the `Walk` row ``index[a]`` (rows out of
    the walk's range have none), marking the items reached first in ``touched``; return
    the number marked."""
    n_rows = step.indptr.shape[0] - 1
    for a in range(lo, hi):
        i = index[a]
        if i < 0 or i >= n_rows:
            continue
        w = weight[a]
        for c in range(step.indptr[i], step.indptr[i + 1]):
            j = step.index[c]
            if not mark[j]:
                mark[j] = True
                touched[n_touched] = j
                n_touched += 1
            acc[j] += w * step.prob[c]
    return n_touched


@njit(cache=True, parallel=True)
def rp3beta_rows(rows, item_user, user_item, penalty, n_blocks, out_items, out_scores,
                 out_n):
    """The top neighbours of the items ``rows`` by RP3beta's walk item -> user -> item.

    IN ``rows``: the items; ``item_user``: the first step, its row ``t`` from item
    ``rows[t]``; ``user_item``: the second step (transition probabilities already raised
    to alpha); ``penalty[j]``: the factor of arriving at item ``j`` (its popularity to the
    power -beta); ``n_blocks``: the threads, each with a scratch row of ``n_items``.
    OUT ``out_items[t, :out_n[t]]``, ``out_scores[t, :out_n[t]]``: item ``rows[t]``'s best
    ``k = out_items.shape[1]`` other items of positive score, best first (ties to the lower
    item).
    """
    n_items = penalty.shape[0]
    k = out_items.shape[1]
    for b in prange(n_blocks):
        acc = np.zeros(n_items)
        mark = np.zeros(n_items, np.bool_)
        touched = np.empty(n_items, np.int64)
        best_items = np.empty(k, np.int64)
        best_scores = np.empty(k)
        for t in range(b, rows.shape[0], n_blocks):
            i = rows[t]
            n_touched = _accumulate(item_user.indptr[t], item_user.indptr[t + 1],
                                    item_user.index, item_user.prob, user_item, acc, mark,
                                    touched, 0)
            n = 0
            for s in range(n_touched):
                j = touched[s]
                score = acc[j] * penalty[j]
                acc[j] = 0.0
                mark[j] = False
                if j != i and score > 0.0:
                    n = _keep(best_items, best_scores, n, j, score)
            for s in range(n):
                out_items[t, s] = best_items[s]
                out_scores[t, s] = best_scores[s]
            out_n[t] = n


@njit(cache=True, nogil=True)
def score_profiles(indptr, items, weights, neighbours, tie_key, seen, out_items, out_scores,
                   out_n):
    """Rank each row's items by the weighted sum of its items' neighbour scores.

    IN row ``r``'s items ``items[indptr[r]:indptr[r + 1]]`` with ``weights``;
    ``neighbours``: a `Neighbours` list; ``tie_key``: the ranking's tie-break (lower first);
    ``seen``: an `ItemRows` of the items each row leaves out. OUT ``out_items[r]``,
    ``out_scores[r]``: item ``j`` scores ``sum_i w_i * s(i, j)`` over the row's items
    ``i`` of which ``j`` is a neighbour, the best ``m`` kept; ``out_n[r]``: how many.
    """
    n_items = tie_key.shape[0]
    acc = np.zeros(n_items)
    mark = np.zeros(n_items, np.bool_)
    touched = np.empty(n_items, np.int64)
    step = Walk(neighbours.indptr, neighbours.items, neighbours.scores)
    for r in range(indptr.shape[0] - 1):
        n_touched = _accumulate(indptr[r], indptr[r + 1], items, weights, step, acc, mark,
                                touched, 0)
        lo = seen.indptr[r]
        hi = seen.indptr[r + 1]
        n = out_n[r]
        for t in range(n_touched):
            j = touched[t]
            score = acc[j]
            acc[j] = 0.0
            mark[j] = False
            if score <= 0.0 or (hi > lo and is_seen(seen.items, lo, hi, j)):
                continue
            n = _push(out_items, out_scores, r, n, j, score, tie_key)
        out_n[r] = n
