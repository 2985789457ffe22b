"""MiCRO's state as arrays: the training items' interests, the users' supports, the latest
chunk's ``phi`` and popularity, the users' recent items, and the chunk being sampled.

`sklearn_micro.micro.MiCRO` keeps its fitted state in plain arrays (CSRs over users or
interests); the functions here build, grow and read them, and take nothing but arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .._kernels import sampler
from .._kernels.neighbours import Neighbours, walk_neighbours
from .._kernels.selection import fill_remainder
from .._kernels.threshold import RankedLists, ranked_lists
from .._kernels.topm import Chunk, group_by_interest, retrieval_phi
from .._kernels.vocabulary import present_values
from .._log import EmbeddedLog, Vocabulary, check_log, distinct, index_dtype, sorted_find
from ..base import append_to_rows, csr_rows, unique_pairs

__all__ = ["COENGAGED_NEIGHBOURS", "COENGAGED_PER_USER", "MAX_INTERESTS", "MIN_MASS",
           "ChunkEngagements", "ChunkSupports", "LatestChunk", "as_index", "carried_chunks",
           "chunk_item_mixtures", "coengaged_neighbours", "counts_csr",
           "fill_by_popularity", "grouped_chunk", "grown_supports", "interest_weights",
           "latest_chunk", "local_indices", "main_interests", "merge_recent",
           "recent_distributions", "recent_items", "stable_order", "training_interests",
           "user_mixtures"]

# carried phi counts below this mass are dropped
MIN_MASS = 0.01

# interests are numbered below this (arrays of size K are kept per chunk)
MAX_INTERESTS = 2**24

#: The co-engaged items each item keeps (`coengaged_neighbours`): MiCRO's co-engagement
#: term spreads a recent item's weight to these.
COENGAGED_NEIGHBOURS = 20

#: The co-engaged items a user's row keeps beside the user's own recent items: those of
#: most weight (`spread_to_neighbours`' ``cap``).
COENGAGED_PER_USER = 100


def training_interests(X, item_interest):
    """The training log, the vocabulary of the items that have an interest, and their
    interests (int64), from the `EmbeddedLog` that `SphericalKMeans` hands on or from a
    plain log with ``item_interest=(item_ids, interests)``; checked."""
    if isinstance(X, EmbeddedLog):
        if X.item_interest is None:
            raise ValueError(
                "MiCRO needs the interest of each training item: put SphericalKMeans "
                "between GraphEmbedder and MiCRO, or pass item_interest."
            )
        return check_log(X), X.item_ids, np.asarray(X.item_interest, np.int64)
    log = check_log(X)
    if item_interest is None:
        raise ValueError(
            "MiCRO.fit on a plain engagement log needs item_interest=(item_ids, "
            "interests); in a Pipeline, SphericalKMeans provides it."
        )
    try:
        ids, labels = item_interest
    except (TypeError, ValueError):
        raise ValueError(
            "item_interest must be a pair (item_ids, interests) of equal length; got "
            f"{type(item_interest).__name__}."
        ) from None
    ids = np.asarray(ids)
    labels = np.asarray(labels)
    if ids.shape != labels.shape or ids.ndim != 1:
        raise ValueError(
            "item_interest must be a pair (item_ids, interests) of equal length; got "
            f"shapes {ids.shape} and {labels.shape}."
        )
    if labels.dtype.kind not in "iu" or (labels.size and labels.min() < 0):
        raise ValueError(
            "item_interest: interests must be non-negative integers; got "
            f"dtype {labels.dtype}" + (f", min {labels.min()}." if labels.size else ".")
        )
    if labels.size and labels.max() >= MAX_INTERESTS:
        raise ValueError(
            f"item_interest: interests must be below {MAX_INTERESTS:,} (K is the largest "
            f"interest plus one); got {labels.max()}."
        )
    return log, Vocabulary(ids), labels.astype(np.int64)


def carried_chunks(decay: float) -> int:
    """How many chunks back a count of one keeps at least ``MIN_MASS`` under ``decay``."""
    return 0 if decay <= 0 else int(np.floor(np.log(MIN_MASS) / np.log(decay)))


def as_index(values: np.ndarray, n: int | None = None) -> np.ndarray:
    """``values``, indices below ``n`` (or sorted, when ``n`` is None), as `index_dtype`."""
    if n is None:
        n = int(values[-1]) + 1 if values.shape[0] else 0
    return values.astype(index_dtype(n), copy=False)


def counts_csr(rows: np.ndarray, cols: np.ndarray, n_rows: int, n_cols: int,
               weights: np.ndarray | None = None):
    """Distinct (row, col) pairs with summed weights, sorted by row then col, as a CSR
    ``(indptr, cols as int32, sums as float64)``."""
    weights = np.empty(0) if weights is None else np.asarray(weights, np.float64)
    return sampler.pair_counts(as_index(rows, n_rows), as_index(cols, n_cols), weights,
                               n_rows, n_cols)


def recent_items(user, item, chunk, weight, n_users):
    """The users' recent items as a CSR over users: ``(indptr, item as int32, chunk as
    int32, weight as float32)``, one entry per (user, item, chunk) with the summed
    ``weight``, sorted by user, item and chunk."""
    order = stable_order(user, item, chunk)
    user, item, chunk = user[order], item[order], chunk[order]
    weight = np.asarray(weight, np.float32)[order]
    indptr = np.zeros(n_users + 1, np.int64)
    if user.shape[0] == 0:
        return indptr, item.astype(np.int32), chunk.astype(np.int32), weight
    start = np.flatnonzero(np.concatenate([[True], (user[1:] != user[:-1])
                                           | (item[1:] != item[:-1])
                                           | (chunk[1:] != chunk[:-1])]))
    user = user[start]
    np.cumsum(np.bincount(user, minlength=n_users), out=indptr[1:])
    return (indptr, item[start].astype(np.int32), chunk[start].astype(np.int32),
            np.add.reduceat(weight, start).astype(np.float32))


def coengaged_neighbours(recent_indptr, recent_item, recent_weight, n_items: int,
                         n_threads: int = 1, k: int = COENGAGED_NEIGHBOURS) -> Neighbours:
    """Each item's ``k`` most co-engaged other items over the users' recent items (the
    CSR `recent_items` makes, its decayed weights summed per user and item): P3's walk
    item -> user -> item, each step the row's share of the weights (`walk_neighbours`
    with alpha 1, beta 0), as a `Neighbours` list over ``n_items`` items. Memory: at most
    ``k`` entries (16 bytes each) per item of the window."""
    n_users = recent_indptr.shape[0] - 1
    row = np.repeat(np.arange(n_users), np.diff(recent_indptr))
    counts = sp.csr_matrix((np.asarray(recent_weight, np.float64),
                            (row, np.asarray(recent_item, np.int64))),
                           shape=(n_users, n_items))
    return walk_neighbours(counts, 1.0, 0.0, k, n_threads)


def stable_order(*columns):
    """``np.lexsort(columns[::-1])``, the stable order by the first column, then the
    next, of integer columns: a counting sort by each column from the last, faster than
    the lexsort on a log's ranges of values."""
    order = np.arange(columns[0].shape[0])
    for column in columns[::-1]:
        if order.shape[0] == 0:
            break
        lo = int(column.min())
        order = order[sampler.group_order(column[order] - lo, int(column.max()) - lo + 1)]
    return order


def grown_supports(indptr, interest, count, n_users, position, add, rows, new_interest,
                   new_count):
    """The supports' CSR (``indptr``, ``interest``, ``count``) with ``add`` added to the
    counts at ``position`` and the entries (``new_interest``, ``new_count``) appended to
    the ``rows`` (in any order; a row's after its old ones, in their given order), over
    ``n_users`` rows: new arrays, the given ones left as they were.

    The rows that gain entries are those of users first seen in the chunk, past the old
    ones, as a rule: the old entries then keep their positions, and the counts are added
    into the appended copy (one copy, not two). A known user without a support moves the
    entries after it, so the counts are added before.
    """
    n_old = indptr.shape[0] - 1
    rows = np.asarray(rows, np.int64)
    moves = rows.shape[0] > 0 and rows.min() < n_old
    if moves:
        count = count.copy()
        count[position] += add
    indptr = np.concatenate([indptr, np.full(n_users - n_old, indptr[-1])])
    indptr, (interest, count) = append_to_rows(indptr, (interest, count), rows,
                                               (new_interest, new_count))
    if not moves:
        count[position] += add
    return indptr, interest, count


def merge_recent(user, item, chunk, weight, new):
    """The recent items (``user``, ``item``, ``chunk``, ``weight``: distinct triples sorted
    by user, item and chunk) with a newer chunk's, ``new`` (a CSR of `recent_items` over
    every user), merged in: `recent_items` of them all, without sorting the old entries
    again (a chunk adds few entries to the many kept)."""
    new_indptr, new_item, new_chunk, new_weight = new
    n_users = new_indptr.shape[0] - 1
    new_user = np.repeat(np.arange(n_users), np.diff(new_indptr))
    width = int(max(item.max(initial=0), new_item.max(initial=0))) + 1
    old_key = user.astype(np.int64) * width + item
    new_key = new_user.astype(np.int64) * width + new_item
    # a (user, item)'s newer chunk comes after its older ones
    at = np.searchsorted(old_key, new_key, side="right") + np.arange(new_key.shape[0])
    is_new = np.zeros(old_key.shape[0] + new_key.shape[0], bool)
    is_new[at] = True

    def merged(old, new_values, dtype):
        out = np.empty(is_new.shape[0], dtype)
        out[at] = new_values
        out[~is_new] = old
        return out

    indptr = new_indptr.copy()
    indptr[1:] += np.cumsum(np.bincount(user, minlength=n_users))
    return (indptr, merged(item, new_item, np.int32), merged(chunk, new_chunk, np.int32),
            merged(weight, new_weight, np.float32))


@dataclass(frozen=True, eq=False)
class LatestChunk:
    """What `recommend` ranks from: the latest chunk's items (``items``, sorted model
    indices) with their engagements (``item_count``, decayed counts included under
    ``phi_decay``), ``phi`` as a CSR from interest to positions in ``items``, ``N[k, t]``,
    and the popularity order of the positions."""

    chunk: int
    items: np.ndarray
    item_count: np.ndarray
    phi_indptr: np.ndarray
    phi_item: np.ndarray
    phi_count: np.ndarray
    interest_count: np.ndarray
    popular_order: np.ndarray

    _ATTRIBUTES = {"chunk": "latest_chunk_", "items": "chunk_items_",
                   "item_count": "chunk_item_count_", "phi_indptr": "phi_indptr_",
                   "phi_item": "phi_item_", "phi_count": "phi_count_",
                   "interest_count": "interest_count_", "popular_order": "popular_order_"}

    @classmethod
    def of(cls, model):
        return cls(**{field: getattr(model, name) for field, name in cls._ATTRIBUTES.items()})

    def set_on(self, model):
        for field, name in self._ATTRIBUTES.items():
            setattr(model, name, getattr(self, field))

    def as_dict(self) -> dict:
        """The fields as a dict of plain values (what a fitted model stores)."""
        return {field: getattr(self, field) for field in self._ATTRIBUTES}


def latest_chunk(chunk, items, phi_items, phi_k, phi_w, n_interests, phi_decay,
                 previous=None, *, item_w=None) -> LatestChunk:
    """``chunk`` as the latest: popularity from its engagements' ``items`` (each weighing
    ``item_w``, by default 1), ``phi`` from the counts ``phi_w`` of (``phi_items``,
    ``phi_k``) pairs, plus the ``previous`` latest chunk's counts times ``phi_decay``
    (those of at least ``MIN_MASS``)."""
    pop_items = items
    pop_w = np.ones(items.shape[0]) if item_w is None else np.asarray(item_w, np.float64)
    if previous is not None and phi_decay > 0:
        old_w = previous.phi_count * phi_decay
        keep = old_w >= MIN_MASS
        old_k = np.repeat(np.arange(n_interests), np.diff(previous.phi_indptr))
        phi_k = np.concatenate([phi_k, old_k[keep]])
        phi_items = np.concatenate([phi_items, previous.items[previous.phi_item][keep]])
        phi_w = np.concatenate([phi_w, old_w[keep]])
        old_pop = previous.item_count * phi_decay
        keep = old_pop >= MIN_MASS
        pop_items = np.concatenate([pop_items, previous.items[keep]])
        pop_w = np.concatenate([pop_w, old_pop[keep]])
    chunk_items = as_index(distinct(pop_items))
    position = Vocabulary(chunk_items)
    pop_local = position.lookup(pop_items, dtype=np.int32)
    item_count = np.bincount(pop_local, weights=pop_w, minlength=chunk_items.shape[0])
    phi_indptr, phi_item, phi_count = counts_csr(
        phi_k, position.lookup(phi_items, dtype=np.int32), n_interests,
        chunk_items.shape[0], weights=phi_w)
    popular_order = as_index(np.lexsort((chunk_items, -item_count)), chunk_items.shape[0])
    return LatestChunk(int(chunk), chunk_items, item_count, phi_indptr, phi_item, phi_count,
                       np.bincount(phi_k, weights=phi_w, minlength=n_interests),
                       popular_order)


def user_mixtures(support_indptr, support_interest, support_count, user_index, alpha):
    """CSR (indptr, interests, theta) of the mixtures of the users ``user_index`` (rows of
    the supports; -1 gives an empty row)."""
    indptr, pos = csr_rows(support_indptr, user_index)
    k = support_interest[pos]
    weight = alpha + support_count[pos]
    row = np.repeat(np.arange(user_index.shape[0]), np.diff(indptr))
    sums = np.bincount(row, weights=weight, minlength=user_index.shape[0])
    return indptr, k, weight / sums[row]


def interest_weights(indptr, k, theta, beta, latest: LatestChunk):
    """The weight ``theta_u[k] / (I_t * beta + N[k, t])`` of each entry of the mixtures'
    CSR, and each user's score of an item outside its interests, ``sum_k weight * beta``."""
    denom = float(beta) * latest.items.shape[0] + latest.interest_count[k]
    weight = theta / denom
    row = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
    base = np.bincount(row, weights=weight * beta, minlength=indptr.shape[0] - 1)
    return weight, base


def popularity_weights(indptr, weight: float) -> np.ndarray:
    """Each row's weight of the latest chunk's popularity share in its score: ``weight``
    for a row with interests, 1 for a row without (scored by popularity alone)."""
    return np.where(np.diff(indptr) == 0, 1.0, float(weight))


def grouped_chunk(phi_indptr, phi_item, phi_count, chunk_items, chunk_item_count,
                  popular_order, min_count: float) -> dict:
    """The latest chunk as the top-m kernels take it: ``phi`` pruned to ``min_count``
    (`retrieval_phi`) and the items numbered interest by interest (`group_by_interest`),
    with their counts, shares of the chunk and popularity order in that numbering."""
    phi_indptr, phi_item, phi_count = retrieval_phi(phi_indptr, phi_item, phi_count,
                                                    min_count)
    order, local_of, phi_item, phi_count = group_by_interest(
        phi_indptr, phi_item, phi_count, chunk_items.shape[0])
    item_count = chunk_item_count[order]
    return {"phi_indptr": phi_indptr, "phi_item": phi_item, "phi_count": phi_count,
            "item_count": item_count, "share": item_count / chunk_item_count.sum(),
            "items": chunk_items[order], "local_of": local_of,
            "popular_order": local_of[popular_order]}


def chunk_arrays(chunk: dict, sorted_items) -> Chunk:
    """A `grouped_chunk` (or one narrowed from it) as the top-m kernels take it, a
    `Chunk`; ``sorted_items``, its global items sorted (the model's ``chunk_items_``)."""
    return Chunk(chunk["phi_indptr"], chunk["phi_item"], chunk["phi_count"],
                 chunk["item_count"], chunk["share"], chunk["items"], sorted_items,
                 chunk["local_of"], chunk["popular_order"])


def ranked_chunk(chunk: dict) -> RankedLists:
    """`ranked_lists` of a `grouped_chunk`'s ``phi``, made on its first ranking and kept
    in it (under ``"ranked"``)."""
    lists = chunk.get("ranked")
    if lists is None:
        lists = chunk["ranked"] = ranked_lists(chunk["phi_indptr"], chunk["phi_item"],
                                               chunk["phi_count"], chunk["items"].shape[0])
    return lists


def fill_by_popularity(items, scores, n_filled, indptr, base, seen, chunk: dict):
    """Fill the slots the top-m kernels left (`fill_remainder`) with the latest chunk's
    items by popularity (``chunk``: `grouped_chunk`): scored by their share for users
    without interests (empty rows of ``indptr``), by ``base`` alone for the others."""
    pop_order = chunk["items"][chunk["popular_order"]]
    unseen = np.diff(indptr) == 0
    share = chunk["share"][chunk["popular_order"]]
    for rows, pop_score in ((~unseen, np.zeros_like(share)), (unseen, share)):
        if rows.any():
            sub_i, sub_s = items[rows], scores[rows]
            sub_ptr, pos = csr_rows(seen[0], np.flatnonzero(rows))
            fill_remainder(sub_i, sub_s, n_filled[rows], pop_order, pop_score, base[rows],
                           sub_ptr, seen[1][pos])
            items[rows], scores[rows] = sub_i, sub_s
    return items, scores


def chunk_item_mixtures(phi_indptr, phi_item, phi_count, chunk_items, index,
                        n_interests: int) -> sp.csr_matrix:
    """Sparse (len(index), n_interests) matrix of the items' (``index``: model indices)
    shares of engagements per interest in the latest chunk; empty rows for items with no
    mass there."""
    k = np.repeat(np.arange(n_interests), np.diff(phi_indptr))
    by_item = sp.csr_matrix((phi_count, (phi_item, k)),
                            shape=(chunk_items.shape[0], n_interests))
    local, present = sorted_find(chunk_items, index)
    present &= index >= 0
    select = sp.csr_matrix(
        (np.ones(int(present.sum())), (np.flatnonzero(present), local[present])),
        shape=(index.shape[0], chunk_items.shape[0]))
    out = (select @ by_item).tocsr()
    sums = np.asarray(out.sum(axis=1)).ravel()
    scale = np.divide(1.0, sums, out=np.zeros_like(sums), where=sums > 0)
    return sp.csr_matrix(sp.diags(scale) @ out)


def recent_distributions(recent_indptr, recent_item, recent_weight, user_index):
    """CSR (indptr, items, r_u) of the users' recent items (rows of the recent-items CSR),
    ``r_u`` normalized per user, distinct items per row, sorted; -1 gives an empty row."""
    indptr, pos = csr_rows(recent_indptr, user_index)
    item = recent_item[pos].astype(np.int64)
    weight = recent_weight[pos].astype(np.float64)
    row = np.repeat(np.arange(user_index.shape[0]), np.diff(indptr))
    if item.shape[0] == 0:
        return indptr, item, weight
    start = np.flatnonzero(np.concatenate([[True], (item[1:] != item[:-1])
                                           | (row[1:] != row[:-1])]))
    item, row, weight = item[start], row[start], np.add.reduceat(weight, start)
    total = np.bincount(row, weights=weight, minlength=user_index.shape[0])
    out_ptr = np.zeros(user_index.shape[0] + 1, np.int64)
    np.cumsum(np.bincount(row, minlength=user_index.shape[0]), out=out_ptr[1:])
    return out_ptr, item, weight / total[row]


def local_indices(index: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct values of ``index`` (model indices below ``n``) and each value's
    position among them, as int32."""
    values = present_values(index, 0, n)
    rank = np.full(n, -1, np.int32)
    rank[values] = np.arange(values.shape[0], dtype=np.int32)
    return values, rank[index]


@dataclass(frozen=True, eq=False)
class ChunkEngagements:
    """A chunk's engagements, sorted by user, with the vocabularies extended by its new
    users and items: ``user`` and ``item`` are model indices, ``local_user`` a row of
    ``users`` and ``local_item`` a position in ``items`` (the chunk's distinct users and
    items, as model indices)."""

    user_ids: Vocabulary
    item_ids: Vocabulary
    user: np.ndarray
    item: np.ndarray
    users: np.ndarray
    local_user: np.ndarray
    items: np.ndarray
    local_item: np.ndarray

    @property
    def n_engagements(self) -> int:
        return self.user.shape[0]

    @property
    def n_items(self) -> int:
        return self.items.shape[0]

    @classmethod
    def of(cls, log, user_ids: Vocabulary, item_ids: Vocabulary) -> ChunkEngagements:
        """A chunk's engagements ``log`` in the indices of the vocabularies ``user_ids``
        and ``item_ids`` (extended by the chunk's new ids), sorted by user."""
        user_ids, user = user_ids.extend(log.user, name="users")
        item_ids, item = item_ids.extend(log.item, name="items")
        users, local_user = local_indices(user, len(user_ids))
        items, local_item = local_indices(item, len(item_ids))
        order = sampler.group_order(local_user, users.shape[0])
        return cls(user_ids, item_ids, user[order], item[order], users, local_user[order],
                   items, local_item[order])


@dataclass(frozen=True, eq=False)
class ChunkSupports:
    """The supports of a chunk's users (rows of ``ChunkEngagements.users``) as a CSR:
    interests, the counts ``N[u, k]`` carried into the chunk, and each entry's position in
    the model's supports (-1 for an entry new in this chunk)."""

    ptr: np.ndarray
    interest: np.ndarray
    carried: np.ndarray
    model_position: np.ndarray

    @classmethod
    def from_model(cls, engagements: ChunkEngagements, support_indptr, support_interest,
                   support_count) -> ChunkSupports:
        """The supports the chunk's users carry from training and earlier chunks, out of
        the model's (``support_indptr``, ``support_interest``, ``support_count``)."""
        n_users = support_indptr.shape[0] - 1
        rows = np.where(engagements.users < n_users, engagements.users, -1)
        ptr, position = csr_rows(support_indptr, rows)
        return cls(ptr, support_interest[position], support_count[position], position)

    def adopt_item_interests(self, engagements, item_interest):
        """Users without a support take the interests of their items that have one.

        Returns the new supports and whether any user got one.
        """
        empty = np.diff(self.ptr)[engagements.local_user] == 0
        interest = item_interest[engagements.item]
        take = empty & (interest >= 0)
        if not take.any():
            return self, False
        user, k = unique_pairs(engagements.local_user[take], interest[take])
        ptr, (interest, carried, position) = append_to_rows(
            self.ptr, (self.interest, self.carried, self.model_position), user,
            (k, np.zeros(k.shape[0]), np.full(k.shape[0], -1)))
        return ChunkSupports(ptr, interest, carried, position), True


def main_interests(item_interest, items, layout, entry_count):
    """``item_interest`` with each item of the chunk that has assigned engagements set to the
    interest holding most of them, ties going to the lower interest (``items`` maps the
    layout's local items to model items)."""
    local = sampler.main_interests(layout.entry_item, layout.entry_interest, entry_count,
                                   layout.n_items)
    out = item_interest.copy()
    found = np.flatnonzero(local >= 0)
    out[items[found]] = local[found]
    return out
