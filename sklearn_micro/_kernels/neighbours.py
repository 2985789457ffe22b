"""Item-item neighbourhoods: RP3beta's random walk, kept to the top neighbours of each
item, the scoring of a user's items through a neighbour list, and the spreading of a
user's item weights to their neighbours (MiCRO's co-engagement term).

A neighbour list is a `Neighbours` CSR over items: row ``i`` holds at most ``k`` other
items with a positive score, best first. The walk's and the scoring's kernels hold one
dense scratch row of ``n_items`` per thread, never an item x item matrix; the spreading
holds none.
"""

from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from numba import njit, prange

from . import numba_threads
from .csr import keep_entries
from .ranking import _push
from .selection import is_seen

__all__ = ["CoengagedRows", "Neighbours", "Walk", "coengaged_rows", "rp3beta_rows",
           "score_profiles", "spread_to_neighbours", "walk_neighbours"]


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


def walk_neighbours(counts: sp.csr_matrix, alpha: float, beta: float, k: int,
                    n_threads: int) -> Neighbours:
    """The top ``k`` neighbours of each item by RP3beta's walk over ``counts`` (users x
    items, non-negative weights): item ``i``'s score for ``j`` is ``sum_u p(i -> u)^alpha
    p(u -> j)^alpha / pop_j ** beta``, each step's probability its row's share of the
    counts, ``pop_j`` the column sum; `rp3beta_rows` on ``n_threads`` threads. Items with
    no count have no neighbours."""
    n_items = counts.shape[1]
    user_item = _walk(counts, alpha)
    item_user = _walk(counts.T.tocsr(), alpha)
    popularity = np.asarray(counts.sum(axis=0)).ravel()
    active = np.flatnonzero(popularity)
    penalty = np.zeros(n_items)
    penalty[active] = popularity[active] ** -float(beta)
    # the walks of the window's items only: rows of other items stay empty
    sub = _rows_of(item_user, active)
    out_items = np.empty((active.shape[0], k), np.int64)
    out_scores = np.empty((active.shape[0], k))
    out_n = np.zeros(active.shape[0], np.int64)
    with numba_threads(n_threads) as threads:
        rp3beta_rows(active.astype(np.int64), sub, user_item, penalty,
                     max(1, min(threads, active.shape[0])), out_items, out_scores, out_n)
    keep = np.arange(k) < out_n[:, None]
    indptr = np.zeros(n_items + 1, np.int64)
    per_item = np.zeros(n_items, np.int64)
    per_item[active] = out_n
    np.cumsum(per_item, out=indptr[1:])
    return Neighbours(indptr, out_items[keep], out_scores[keep])


def _walk(counts: sp.csr_matrix, alpha: float) -> Walk:
    """The row-normalised ``counts`` as a `Walk`, each probability raised to ``alpha``."""
    counts = counts.tocsr()
    counts.sum_duplicates()
    counts.sort_indices()
    totals = np.asarray(counts.sum(axis=1)).ravel()
    row = np.repeat(np.arange(counts.shape[0]), np.diff(counts.indptr))
    prob = (counts.data / totals[row]) ** float(alpha)
    return Walk(counts.indptr.astype(np.int64), counts.indices.astype(np.int64), prob)


def _rows_of(walk: Walk, rows: np.ndarray) -> Walk:
    """The `Walk` of ``rows`` only, row ``t`` being ``rows[t]``."""
    lo, hi = walk.indptr[rows], walk.indptr[rows + 1]
    indptr = np.zeros(rows.shape[0] + 1, np.int64)
    np.cumsum(hi - lo, out=indptr[1:])
    take = np.repeat(lo - indptr[:-1], hi - lo) + np.arange(indptr[-1])
    return Walk(indptr, walk.index[take], walk.prob[take])


@njit(cache=True, nogil=True)
def _coengaged_row(lo, hi, items, weights, neighbours, cap, at, out_items, out_own, out_co):
    """Row ``lo:hi``'s items with their neighbours (`coengaged_rows`) into ``out_*[at:]``;
    returns its length."""
    n_rows = neighbours.indptr.shape[0] - 1
    n = 0
    for p in range(lo, hi):
        i = items[p]
        w = weights[p]
        out_items[at + n] = i
        out_own[at + n] = w
        out_co[at + n] = 0.0
        n += 1
        if i < 0 or i >= n_rows:
            continue
        for c in range(neighbours.indptr[i], neighbours.indptr[i + 1]):
            out_items[at + n] = neighbours.items[c]
            out_own[at + n] = 0.0
            out_co[at + n] = w * neighbours.scores[c]
            n += 1
    order = np.argsort(out_items[at:at + n])
    row_items = out_items[at:at + n][order]
    row_own = out_own[at:at + n][order]
    row_co = out_co[at:at + n][order]
    # equal items summed (in the sort's order, the same for the same row)
    size = 0
    for t in range(n):
        if size > 0 and row_items[t] == out_items[at + size - 1]:
            out_own[at + size - 1] += row_own[t]
            out_co[at + size - 1] += row_co[t]
            continue
        out_items[at + size] = row_items[t]
        out_own[at + size] = row_own[t]
        out_co[at + size] = row_co[t]
        size += 1
    # the row's own items stay; of the others, the cap of most co-engaged weight
    n_other = 0
    for t in range(size):
        if out_own[at + t] == 0.0 and out_co[at + t] > 0.0:
            n_other += 1
    cut, n_at_cut = 0.0, n_other
    if n_other > cap and cap == 0:
        cut, n_at_cut = np.inf, 0
    elif n_other > cap:
        others = np.empty(n_other)
        k = 0
        for t in range(size):
            if out_own[at + t] == 0.0 and out_co[at + t] > 0.0:
                others[k] = out_co[at + t]
                k += 1
        others.sort()
        cut = others[n_other - cap]
        n_at_cut = cap
        for k in range(n_other):
            if others[k] > cut:
                n_at_cut -= 1
    kept = 0
    for t in range(size):
        own, co = out_own[at + t], out_co[at + t]
        if own == 0.0:
            if co <= 0.0 or co < cut:
                continue
            if co == cut and n_other > cap:  # ties at the cut: the lower items
                if n_at_cut == 0:
                    continue
                n_at_cut -= 1
        out_items[at + kept] = out_items[at + t]
        out_own[at + kept] = own
        out_co[at + kept] = co
        kept += 1
    return kept


@njit(cache=True, parallel=True)
def coengaged_rows_kernel(indptr, items, weights, neighbours, cap, out_ptr, n_blocks,
                          out_items, out_own, out_co, out_n):
    """Each row's items with the items co-engaged with them.

    IN row ``r``'s items ``items[indptr[r]:indptr[r + 1]]`` (distinct) with positive
    ``weights``; ``neighbours``: a `Neighbours` list (items past its rows have none);
    ``cap``: the other items a row keeps; ``out_ptr``: where row ``r``'s output starts,
    room for its items and all their neighbours; ``n_blocks``: the threads. OUT
    ``out_items[out_ptr[r]:][:out_n[r]]`` (distinct, sorted) with ``out_own`` (the row's
    weight of the item, 0 for another) and ``out_co`` (``sum_i w_i * s(i, j)`` over the
    row's items ``i``): every item of the row, and of the others the ``cap`` of most
    ``out_co`` (ties to the lower item). No scratch of the items: a row's entries are
    sorted and summed in place.
    """
    n = indptr.shape[0] - 1
    for b in prange(n_blocks):
        for r in range(b * n // n_blocks, (b + 1) * n // n_blocks):
            out_n[r] = _coengaged_row(indptr[r], indptr[r + 1], items, weights, neighbours,
                                      cap, out_ptr[r], out_items, out_own, out_co)


class CoengagedRows(NamedTuple):
    """Rows of items (a CSR ``indptr``, ``items``, distinct and sorted per row) with each
    item's own weight in the row (``own``, 0 for a co-engaged item) and its co-engaged
    weight (``co``): `coengaged_rows`."""

    indptr: np.ndarray
    items: np.ndarray
    own: np.ndarray
    co: np.ndarray

    def spread(self, share: float):
        """The CSR ``(indptr, items, weights)`` of ``(1 - share) * own + share * co``,
        items of weight 0 left out."""
        weight = (1.0 - share) * self.own + share * self.co
        keep = weight > 0
        return keep_entries(self.indptr, keep), self.items[keep], weight[keep]


def coengaged_rows(indptr, items, weights, neighbours: Neighbours, n_threads: int = 1,
                   cap: int | None = None) -> CoengagedRows:
    """Each row's items (a CSR, distinct items of positive ``weights``) with their
    neighbours' items (`coengaged_rows_kernel`), keeping ``cap`` (None: every one) of the
    latter a row, on ``n_threads`` threads."""
    items = np.asarray(items, np.int64)
    n_rows = neighbours.indptr.shape[0] - 1
    inside = (items >= 0) & (items < n_rows)
    degree = np.zeros(items.shape[0], np.int64)
    degree[inside] = np.diff(neighbours.indptr)[items[inside]]
    row = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
    room = np.bincount(row, weights=1 + degree, minlength=indptr.shape[0] - 1).astype(np.int64)
    out_ptr = np.zeros(indptr.shape[0], np.int64)
    np.cumsum(room, out=out_ptr[1:])
    out_items = np.empty(out_ptr[-1], np.int64)
    out_own, out_co = np.empty(out_ptr[-1]), np.empty(out_ptr[-1])
    out_n = np.zeros(indptr.shape[0] - 1, np.int64)
    with numba_threads(n_threads) as threads:
        coengaged_rows_kernel(np.asarray(indptr, np.int64), items,
                              np.asarray(weights, np.float64), neighbours,
                              int(out_ptr[-1]) if cap is None else int(cap), out_ptr,
                              max(1, min(threads, indptr.shape[0] - 1)), out_items, out_own,
                              out_co, out_n)
    keep = np.arange(out_ptr[-1]) - np.repeat(out_ptr[:-1], room) < np.repeat(out_n, room)
    new_ptr = np.zeros(indptr.shape[0], np.int64)
    np.cumsum(out_n, out=new_ptr[1:])
    return CoengagedRows(new_ptr, out_items[keep], out_own[keep], out_co[keep])


def spread_to_neighbours(indptr, items, weights, neighbours: Neighbours, share: float,
                         n_threads: int = 1, cap: int | None = None):
    """Each row's weights (a CSR ``(indptr, items, weights)``, distinct items) with a
    ``share`` of each spread to the item's neighbours: item ``j`` weighs ``(1 - share) *
    w_j + share * sum_i w_i * s(i, j)`` over the row's items ``i``; each row keeps its own
    items and the ``cap`` others (None: all) of most co-engaged weight
    (`coengaged_rows`). ``share`` 0 returns the rows as given."""
    if share == 0 or items.shape[0] == 0:
        return indptr, items, weights
    return coengaged_rows(indptr, items, weights, neighbours, n_threads, cap).spread(share)
