"""MiCRO's held-out choice of ``phi_decay="auto"`` and of the blend's weights
(``personal="learned"``, ``popularity="learned"``) at `fit`.

These settings act on retrieval alone. Each is chosen from a grid by ranking the last
training chunks from what the chunks before them leave: `select_phi_decay` by the recall of
decayed popularity, `select_blend_weights` by ranking as `MiCRO.recommend` does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from .._kernels import numba_threads
from .._kernels.csr import keep_entries
from .._kernels.neighbours import CoengagedRows, coengaged_rows
from .._kernels.selection import ItemRows
from .._kernels.topm import Chunk, Queries, Recent, blend_ranks, retrieval_phi
from .._log import distinct, iter_chunks
from .._parallel import resolve_n_jobs
from ..base import csr_rows, unique_pairs
from ._state import (
    COENGAGED_PER_USER,
    as_index,
    carried_chunks,
    coengaged_neighbours,
    counts_csr,
    interest_weights,
    latest_chunk,
    popularity_weights,
    recent_distributions,
    recent_items,
    user_mixtures,
)

__all__ = [
    "COENGAGEMENT_GRID",
    "LIVE_WEIGHT_FALLBACK",
    "LIVE_WEIGHT_GRID",
    "PERSONAL_GRID",
    "PHI_DECAY_GRID",
    "POPULARITY_GRID",
    "RECALL_KEPT",
    "TrainingLog",
    "live_weight_points",
    "paired_choice",
    "phi_decay_recalls",
    "select_blend_weights",
    "select_phi_decay",
    "top_m_mask",
]

#: The values that ``MiCRO(phi_decay="auto")`` chooses from at `fit`.
PHI_DECAY_GRID = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9)

#: The weights that ``MiCRO(personal="learned")`` chooses from at `fit`.
PERSONAL_GRID = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75)

#: The weights that ``MiCRO(popularity="learned")`` chooses from at `fit`.
POPULARITY_GRID = (0.0, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 100.0)

#: The shares that ``MiCRO(coengagement="learned")`` chooses from at `fit`.
COENGAGEMENT_GRID = (0.0, 0.5, 1.0)

#: The share of the mixture's held-out recall@100 that "learned" weights keep at least.
RECALL_KEPT = 0.99

#: The weights that ``MiCRO(live_weight="auto")`` chooses from at `fit`.
LIVE_WEIGHT_GRID = (0.0, 1.0, 4.0, 16.0)

#: ``MiCRO(live_weight="auto")``'s weight on a training log of one chunk (nothing to hold
#: out).
LIVE_WEIGHT_FALLBACK = 16.0

# the held-out replay of the last training chunk: its engagements in this many batches,
# each scoring at most this many of its users
LIVE_BATCHES = 4
LIVE_USERS = 300


@dataclass(frozen=True, eq=False)
class TrainingLog:
    """The training log in model indices, as `fit` has it: engagements (``user``,
    ``item``, ``chunk``) with their interest ``z``, and the users' supports over the whole
    log as a CSR."""

    user: np.ndarray
    item: np.ndarray
    chunk: np.ndarray
    z: np.ndarray
    support_indptr: np.ndarray
    support_interest: np.ndarray
    support_count: np.ndarray
    n_items: int
    n_interests: int


class HeldOutChunk(NamedTuple):
    """A held-out chunk as the blend's rankers take it (`held_out_chunk`): the users
    ranked (``queries``, their ``share_weight`` not set), their recent items
    (``recent``, ``lam`` not set), their relevant items in the chunk (``relevant``), the
    chunk before it as `fit` leaves it (``chunk``, its items in their own numbering) and
    the recent items with the items co-engaged with them then (``coengaged``,
    `CoengagedRows`; None when not asked for)."""

    queries: Queries
    recent: Recent
    relevant: ItemRows
    chunk: Chunk
    coengaged: CoengagedRows | None = None

    def recent_spread(self, share: float) -> Recent:
        """``recent`` with a ``share`` of each item's weight spread to its co-engaged
        items, as `MiCRO` spreads it (``share`` 0: ``recent`` itself)."""
        if share == 0:
            return self.recent
        return Recent(self.recent.lam, *self.coengaged.spread(share))


def held_out_chunk(log: TrainingLog, c, previous, *, ranks_popularity, alpha, beta,
                   phi_decay, window, decay, min_count, max_users, coengaged=False,
                   n_threads=1):
    """Chunk ``c`` held out from the state `fit` leaves on the chunks up to ``previous``,
    the one before ``c`` (``log`` holds at least the chunks that state reads, and ``c``),
    as a `HeldOutChunk`, or None when no user of ``c`` is ranked. With ``coengaged``, the
    ranked users' recent items with their co-engaged items too (`coengaged_rows` through
    that state's `coengaged_neighbours` over every user's recent items, on ``n_threads``
    threads).

    Only the users of chunk ``c`` whose score a weight changes are ranked: those with a
    recent item (an engagement in the ``window`` chunks up to ``previous``), and, with
    ``ranks_popularity`` (a popularity weight not 0), those with an engagement before
    ``c``; at most ``max_users`` of them, evenly spread over their indices.
    """
    now = log.chunk == c
    before = (log.chunk <= previous) & (log.chunk > previous - window)
    n_users = log.support_indptr.shape[0] - 1
    has_recent = np.zeros(n_users, bool)
    has_recent[log.user[before]] = True
    if ranks_popularity:
        # a support left before c: the whole log's counts less those of c and after
        total = np.bincount(np.repeat(np.arange(n_users), np.diff(log.support_indptr)),
                            weights=log.support_count, minlength=n_users)
        later = np.bincount(log.user[log.chunk >= c], minlength=n_users)
        has_recent |= total > later
    pair_user, pair_item = unique_pairs(log.user[now], log.item[now])
    keep = has_recent[pair_user]
    pair_user, pair_item = pair_user[keep], pair_item[keep]
    if pair_user.shape[0] == 0:
        return None
    users = distinct(pair_user)
    if users.shape[0] > max_users:
        # an even spread over the users' indices: deterministic and blind to behaviour
        users = users[np.linspace(0, users.shape[0] - 1, max_users).round().astype(np.int64)]
        keep = np.isin(pair_user, users)
        pair_user, pair_item = pair_user[keep], pair_item[keep]
    row = np.searchsorted(users, pair_user)
    rel_ptr = np.zeros(users.shape[0] + 1, np.int64)
    np.cumsum(np.bincount(row, minlength=users.shape[0]), out=rel_ptr[1:])
    # supports on the chunks before c: the whole log's, less the counts of c and after
    rank = np.full(n_users, -1, np.int64)
    rank[users] = np.arange(users.shape[0])
    later = (log.chunk >= c) & (rank[log.user] >= 0)
    indptr, pos = csr_rows(log.support_indptr, users)
    k = log.support_interest[pos].astype(np.int64)
    count = log.support_count[pos].astype(np.int64)
    entry_row = np.repeat(np.arange(users.shape[0]), np.diff(indptr))
    late_ptr, late_k, late_count = counts_csr(rank[log.user[later]], log.z[later],
                                              users.shape[0], log.n_interests)
    late_row = np.repeat(np.arange(users.shape[0]), np.diff(late_ptr))
    key = entry_row * log.n_interests + k
    count[np.searchsorted(key, late_row * log.n_interests + late_k)] -= \
        late_count.astype(np.int64)
    alive = count > 0
    indptr, k, theta = user_mixtures(keep_entries(indptr, alive), k[alive], count[alive],
                                     np.arange(users.shape[0]), alpha)
    # phi of chunk c - 1, carrying the decayed chunks before it, as fit leaves it
    carried = (log.chunk <= previous) & (log.chunk >= previous - carried_chunks(phi_decay))
    latest = None
    for chunk, rows in iter_chunks(log.chunk[carried]):
        rows = np.flatnonzero(carried)[rows]
        latest = latest_chunk(chunk, log.item[rows], log.item[rows], log.z[rows],
                              np.ones(rows.shape[0]), log.n_interests, phi_decay, latest)
    weight, base = interest_weights(indptr, k, theta, beta, latest)
    # the users' recent items, as fit leaves them
    # (every user's, for the co-engaged items; the ranked users' alone otherwise)
    mine = before & (coengaged | (rank[log.user] >= 0))
    rows_of = np.arange(n_users) if coengaged else rank
    recent = recent_items(rows_of[log.user[mine]], log.item[mine], log.chunk[mine],
                          decay ** (latest.chunk - log.chunk[mine]),
                          n_users if coengaged else users.shape[0])
    r_ptr, r_item, r_u = recent_distributions(
        recent[0], recent[1], recent[3], users if coengaged else np.arange(users.shape[0]))
    with_coengaged = None
    if coengaged:
        neighbours = coengaged_neighbours(recent[0], recent[1], recent[3], log.n_items,
                                          n_threads)
        with_coengaged = coengaged_rows(r_ptr, r_item, r_u, neighbours, n_threads,
                                        COENGAGED_PER_USER)
    share = latest.item_count / latest.item_count.sum()
    phi_indptr, phi_item, phi_count = retrieval_phi(latest.phi_indptr, latest.phi_item,
                                                    latest.phi_count, min_count)
    # the chunk's items in their own numbering, sorted: the rankers' chunk
    chunk = Chunk(phi_indptr, phi_item, phi_count, latest.item_count, share, latest.items,
                  latest.items, np.arange(latest.items.shape[0], dtype=np.int32),
                  latest.popular_order)
    queries = Queries(indptr, as_index(k, log.n_interests), weight, base,
                      np.zeros(users.shape[0]))
    return HeldOutChunk(queries, Recent(np.zeros(users.shape[0]), r_ptr, r_item, r_u),
                        ItemRows(rel_ptr, pair_item), chunk, with_coengaged)


def blend_share_weights(queries: Queries, popularity_grid) -> np.ndarray:
    """Each row's weight of the chunk's popularity share under each weight of
    ``popularity_grid`` (`popularity_weights`), of shape (weights, rows)."""
    return np.stack([popularity_weights(queries.indptr, w) for w in popularity_grid])


def _held_out_blend_ranks(held_out: HeldOutChunk, grid, popularity_grid, shares, *, m,
                          n_threads):
    """The ranks `recommend` would give the relevant items of ``held_out`` (a
    `HeldOutChunk`) with each personal weight of ``grid``, popularity weight of
    ``popularity_grid`` and co-engagement share of ``shares``: the rows' numbers of
    relevant items and `blend_ranks`' hits and ranks, of shape (users, shares, popularity
    weights, personal weights), every share ranked from one scatter of a row's
    interests."""
    variants = [held_out.recent_spread(float(share)) for share in shares]
    recent = _interleaved(variants)
    hits, ranks = blend_ranks(held_out.queries, np.asarray(grid, np.float64),
                              blend_share_weights(held_out.queries, popularity_grid), recent,
                              held_out.relevant, held_out.chunk, m, n_threads, len(variants))
    return np.diff(held_out.relevant.indptr), hits, ranks


def _interleaved(variants: list[Recent]) -> Recent:
    """One `Recent` of the rows of ``variants`` (each of the same rows) interleaved: row
    ``r`` of variant ``s`` is its row ``r * len(variants) + s``."""
    if len(variants) == 1:
        return variants[0]
    n_rows = variants[0].indptr.shape[0] - 1
    sizes = np.stack([np.diff(v.indptr) for v in variants], axis=1).ravel()
    indptr = np.zeros(sizes.shape[0] + 1, np.int64)
    np.cumsum(sizes, out=indptr[1:])
    # each entry's place: its variant's rows before it, then its own position
    item = np.empty(indptr[-1], np.int64)
    score = np.empty(indptr[-1])
    for s, v in enumerate(variants):
        row = np.repeat(np.arange(n_rows), np.diff(v.indptr))
        at = indptr[row * len(variants) + s] + (np.arange(v.item.shape[0]) - v.indptr[row])
        item[at], score[at] = v.item, v.score
    return Recent(np.zeros(sizes.shape[0]), indptr, item, score)


def select_blend_weights(log: TrainingLog, grid=PERSONAL_GRID,
                         popularity_grid=POPULARITY_GRID, coengagement_grid=(0.0,), *, alpha,
                         beta, phi_decay, window, decay, min_count=0.0, metric="recall",
                         last_chunks=4, m=100, max_users=2000, n_jobs=None):
    """The personal weight of ``grid``, popularity weight of ``popularity_grid`` and
    co-engagement share of ``coengagement_grid`` with the best held-out ``metric``
    (``"mrr"`` or ``"recall"``, at ``m``) among those that keep the recall of the grids'
    first values.

    Each of the last ``last_chunks`` chunks ``c`` of the training log (those with a chunk
    before them) is held out: the state `fit` leaves on the chunks before it (supports,
    ``phi`` of the chunk before under ``phi_decay``, recent items and their co-engaged
    items) ranks ``m`` items for the users of chunk ``c`` whose score a weight changes (at
    most ``max_users``, evenly spread; `held_out_chunk`), with every triple of weights, as
    `recommend` does. A triple scores the mean recall@``m`` and MRR@``m`` over those
    (user, chunk) points; among the triples that keep at least ``RECALL_KEPT`` of the
    recall of the grids' first values (the mixture alone when they start at 0), the one
    with the best ``metric`` wins (with ``"recall"``, equal recalls go to the better
    MRR), then the smaller share, then the smaller popularity weight, then the smaller
    personal weight. The personal weights must be below 1. Returns the triple
    ``(personal, popularity, share)`` and ``{(personal, popularity, share): (recall,
    mrr)}``; the grids' first values and an empty dict when no chunk has such a point.
    """
    first = (float(grid[0]), float(popularity_grid[0]), float(coengagement_grid[0]))
    present = distinct(log.chunk)
    held_out = present[1:][-last_chunks:]
    previous = present[np.searchsorted(present, held_out) - 1]
    shape = (len(coengagement_grid), len(popularity_grid), len(grid))
    recall, mrr = np.zeros(shape), np.zeros(shape)
    n_points = 0
    if held_out.shape[0] == 0:
        return first, {}
    # only the chunks the held-out states read (and every later one)
    reach = max(window - 1, carried_chunks(phi_decay))
    rows = log.chunk >= previous.min() - reach
    log = replace(log, user=log.user[rows], item=log.item[rows], chunk=log.chunk[rows],
                  z=log.z[rows])
    coengaged = any(g > 0 for g in coengagement_grid) and any(lam > 0 for lam in grid)
    if not coengaged:  # every share ranks as the first
        coengagement_grid = tuple(coengagement_grid[:1])
        shape = (1, *shape[1:])
        recall, mrr = np.zeros(shape), np.zeros(shape)
    with numba_threads(resolve_n_jobs(n_jobs)) as threads:
        for c, before in zip(held_out, previous, strict=True):
            held_out = held_out_chunk(
                log, int(c), int(before), ranks_popularity=any(w > 0 for w in popularity_grid),
                alpha=alpha, beta=beta, phi_decay=phi_decay, window=window, decay=decay,
                min_count=min_count, max_users=max_users, coengaged=coengaged,
                n_threads=threads)
            if held_out is None:
                continue
            n_relevant, hits, ranks = _held_out_blend_ranks(
                held_out, grid, popularity_grid,
                coengagement_grid if coengaged else (0.0,), m=m, n_threads=threads)
            recall += (hits / n_relevant[:, None, None, None]).sum(axis=0)
            mrr += np.divide(1.0, ranks, out=np.zeros(ranks.shape), where=ranks > 0).sum(axis=0)
            n_points += n_relevant.shape[0]
    if n_points == 0:
        return first, {}
    recall, mrr = recall / n_points, mrr / n_points
    scores = {(float(lam), float(w), float(g)): (float(recall[s, j, i]), float(mrr[s, j, i]))
              for s, g in enumerate(coengagement_grid) for j, w in enumerate(popularity_grid)
              for i, lam in enumerate(grid)}
    floor = RECALL_KEPT * scores[first][0]
    best, best_score = first, (-np.inf,)
    for triple in sorted(scores, key=lambda t: (t[2], t[1], t[0])):
        r, q = scores[triple]
        score = (q,) if metric == "mrr" else (r, q)
        if r >= floor and score > best_score:
            best, best_score = triple, score
    return best, scores


def select_phi_decay(user, item, chunk, n_items, grid=PHI_DECAY_GRID, *, last_chunks=8,
                     m=100):
    """The ``phi_decay`` of ``grid`` whose decayed popularity best predicts the next chunk.

    For each of the last ``last_chunks`` chunks ``c`` of the log (with a chunk ``c - 1``),
    items are ranked by ``sum_{j < c} decay ** (c - 1 - j) * n_j(i)`` (counts below the
    carried mass MiCRO keeps dropped); a decay scores the mean recall@``m`` of that ranking
    over the (user, chunk) points of those chunks (`phi_decay_recalls`). Ties go to the
    smaller decay; 0 when the log has no chunk to score.
    """
    recalls = phi_decay_recalls(user, item, chunk, n_items, grid, last_chunks=last_chunks,
                                m=m)
    best, best_score = 0.0, -np.inf
    for decay, score in zip(grid, recalls, strict=True):
        if score > best_score:
            best, best_score = float(decay), score
    return best


def phi_decay_recalls(user, item, chunk, n_items, grid, *, last_chunks=8, m=100):
    """`select_phi_decay`'s mean recall@``m`` of each decay of ``grid`` (NaN for every
    decay when no chunk can be scored).

    One pass over the chunks in increasing order: each chunk's item counts are kept (its
    distinct items and their engagements), and a chunk to be scored is scored when it comes,
    from the counts of the chunks before it; its (user, item) pairs are made once for every
    decay.
    """
    last = int(chunk.max())
    # only the chunks that the largest decay of the grid can reach are read
    first = last - last_chunks - max(carried_chunks(d) for d in grid)
    rows = np.flatnonzero(chunk >= first)
    user, item, chunk = np.asarray(user)[rows], np.asarray(item)[rows], np.asarray(chunk)[rows]
    counts = {}  # chunk -> (its items, their engagements)
    total = np.zeros(len(grid))
    n_points = 0
    for c, at in iter_chunks(chunk):
        if c > last - last_chunks and c - 1 in counts:
            pair_user, pair_item = unique_pairs(user[at], item[at])
            point = np.searchsorted(distinct(pair_user), pair_user)
            size = np.bincount(point)
            n_points += size.shape[0]
            for g, decay in enumerate(grid):
                popularity = np.zeros(n_items)
                for j in range(c - 1 - carried_chunks(decay), c):
                    if j in counts:
                        items, n = counts[j]
                        popularity[items] += float(decay) ** (c - 1 - j) * n
                hit = top_m_mask(popularity, m)[pair_item]
                total[g] += (np.bincount(point, weights=hit) / size).sum()
        per_item = np.bincount(item[at], minlength=n_items)
        items = np.flatnonzero(per_item)
        counts[c] = (items, per_item[items].astype(np.float64))
    return total / n_points if n_points else np.full(len(grid), np.nan)


def top_m_mask(score: np.ndarray, m: int) -> np.ndarray:
    """Which entries are among the ``m`` highest of ``score`` (ties to the lower index) and
    above 0: the set of ``np.argsort(-score, kind="stable")[:m]`` with a positive score,
    found by a partition instead of a sort."""
    n = score.shape[0]
    if n <= m:
        return score > 0
    cut = np.partition(score, n - m)[n - m]
    mask = score > cut
    ties = np.flatnonzero(score == cut)[:m - int(mask.sum())]
    mask[ties] = True
    return mask & (score > 0)


def live_weight_points(model, user, item, chunk: int, grid=LIVE_WEIGHT_GRID, *,
                       metric: str = "recall", m: int = 100, n_batches: int = LIVE_BATCHES,
                       max_users: int = LIVE_USERS, random_state=0):
    """The prequential replay of one held-out chunk from ``model`` (a `MiCRO` fitted on
    the chunks before it): ``metric``@``m`` of each (user, batch) point under each weight
    of ``grid``, as ``(users, values)`` of shapes (n_points,) and (n_points, len(grid)).

    The chunk's engagements ``(user, item)``, in a shuffle seeded by ``random_state``, are
    cut into ``n_batches`` batches. From the second on, up to ``max_users`` of a batch's
    users (a seeded sample) are ranked under each weight before the batch is observed,
    against their own items of the batch; then the batch is observed. The first batch is
    only observed (with nothing observed every weight answers alike), the last only
    scored.
    """
    rng = np.random.default_rng(random_state)
    order = rng.permutation(user.shape[0])
    user, item = user[order], item[order]
    n_codes = int(item.max()) + 1
    point_users, values = [], []
    for b, rows in enumerate(np.array_split(np.arange(user.shape[0]), n_batches)):
        if b > 0 and rows.size:
            users = np.unique(user[rows])
            if users.size > max_users:
                users = np.sort(rng.choice(users, max_users, replace=False))
            pairs = np.unique(user[rows] * n_codes + item[rows])
            scores = np.empty((users.size, len(grid)))
            for j, weight in enumerate(grid):
                model.set_params(live_weight=float(weight))
                scores[:, j] = _batch_metric(model.recommend(users, m)[0], users, pairs,
                                             n_codes, metric)
            point_users.append(users)
            values.append(scores)
        if rows.size and b < n_batches - 1:  # the last batch is scored, nothing after it
            model.observe(np.column_stack([user[rows], item[rows],
                                           np.full(rows.size, chunk)]))
    if not values:
        return np.empty(0, np.int64), np.empty((0, len(grid)))
    return np.concatenate(point_users), np.concatenate(values)


def paired_choice(users, values, grid, *, z: float = 1.96) -> float:
    """The weight of ``grid`` (its first entry the plainest, 0) that the replay's points
    back: among the weights whose mean gain over the first is above 0 with its lower
    95% bound (``z``) too, paired by user and with users as the unit (the linearized
    standard error of `RollingReport.intervals`), the one of the largest mean (ties to
    the smaller); the first weight when none is, or when fewer than two users give
    points (one user's points are one draw)."""
    _, user_of = np.unique(users, return_inverse=True)
    if user_of.size == 0 or user_of.max() < 1:
        return float(grid[0])
    n_u = np.bincount(user_of).astype(float)
    best, best_gain = 0, 0.0
    for j in range(1, len(grid)):
        gain = values[:, j] - values[:, 0]
        sums = np.bincount(user_of, weights=gain, minlength=n_u.size)
        mean = sums.sum() / n_u.sum()
        n_users = n_u.size
        spread = ((sums - mean * n_u) ** 2).sum() * n_users / (n_users - 1)
        low = mean - z * np.sqrt(spread) / n_u.sum()
        if low > 0 and mean > best_gain:
            best, best_gain = j, mean
    return float(grid[best])


def _batch_metric(found, users, pairs, n_codes, metric: str) -> np.ndarray:
    """Recall (or the reciprocal rank of the first hit) of each of ``users``' ranked
    ``found`` items against their (user, item) ``pairs``, coded ``user * n_codes + item``."""
    valid = found >= 0
    codes = np.where(valid, users[:, None] * n_codes + np.where(valid, found, 0), -1)
    hit = np.isin(codes, pairs) & valid
    if metric == "mrr":
        first = np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, np.inf)
        return 1.0 / first
    lo = np.searchsorted(pairs, users * n_codes)
    hi = np.searchsorted(pairs, (users + 1) * n_codes)
    return hit.sum(axis=1) / np.maximum(hi - lo, 1)
