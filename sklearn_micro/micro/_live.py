"""MiCRO's open chunk, live: the engagements observed since the latest closed chunk, each
with the interest drawn for it, and the state that answers with them.

`MiCRO.observe` adds a batch to a new `LiveLayer` (the closed state is never touched, so
`partial_fit` of the open chunk samples exactly as if nothing had been observed);
`live_state` makes the attributes a reader answers from: the closed state with the grown
vocabularies, the live counts blended into the latest chunk's, and the users' open-chunk
engagements, merged into their mixtures and recent items at request time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._kernels.live import draw_live
from .._log import EngagementLog, Vocabulary, sorted_find
from ._state import LatestChunk, latest_chunk

__all__ = ["LiveLayer", "live_state", "observe_batch"]


@dataclass(frozen=True, eq=False)
class LiveLayer:
    """The open chunk's observed engagements and their counts; never changed once made.

    Attributes
    ----------
    chunk : int
        The open chunk.
    user_ids, item_ids : Vocabulary
        The closed state's vocabularies, grown by the open chunk's new ids.
    user, item : ndarray of int64
        Every observed engagement, in the order observed (indices of the vocabularies).
    interest : ndarray of int32
        The interest drawn for each (-1: its user had none to give).
    user_keys, user_counts : ndarray
        ``N[u, k]`` of the open chunk, keys ``u * K + k`` sorted; a user without a carried
        support has a key for each interest it adopted (the main interest of an item it
        engaged), with a count of 0 where no engagement was given it.
    item_keys, item_counts : ndarray
        ``N[i, k]`` of the open chunk, keys ``i * K + k`` sorted.
    interest_total : ndarray of shape (K,)
        ``N[k]`` of the open chunk.
    items : ndarray of int64
        The open chunk's distinct items, sorted.
    seed : int
        Seeds the draws: each batch's from (seed, chunk, engagements before it).
    """

    chunk: int
    user_ids: Vocabulary
    item_ids: Vocabulary
    user: np.ndarray
    item: np.ndarray
    interest: np.ndarray
    user_keys: np.ndarray
    user_counts: np.ndarray
    item_keys: np.ndarray
    item_counts: np.ndarray
    interest_total: np.ndarray
    items: np.ndarray
    seed: int

    @classmethod
    def empty(cls, chunk: int, user_ids: Vocabulary, item_ids: Vocabulary, n_interests: int,
              seed: int) -> LiveLayer:
        none = np.empty(0, np.int64)
        return cls(int(chunk), user_ids, item_ids, none, none, np.empty(0, np.int32), none,
                   np.empty(0), none, np.empty(0), np.zeros(n_interests), none, int(seed))

    def __len__(self) -> int:
        return int(self.user.shape[0])


def _add_counts(keys, counts, new_keys, weight=1):
    """Sorted ``keys`` with their ``counts``, each of ``new_keys`` adding ``weight``."""
    new_keys, add = np.unique(new_keys, return_counts=True)
    add = add * weight
    at = np.searchsorted(keys, new_keys)
    hit = at < keys.shape[0]
    hit[hit] = keys[at[hit]] == new_keys[hit]
    counts = counts.copy()
    counts[at[hit]] += add[hit]
    miss = ~hit
    return (np.insert(keys, at[miss], new_keys[miss]),
            np.insert(counts, at[miss], add[miss].astype(np.float64)))


def observe_batch(live: LiveLayer, log: EngagementLog, *, support, item_interest,
                  alpha: float, beta: float, n_interests: int) -> LiveLayer:
    """``live`` with the engagements of ``log`` (all of the open chunk) added, each one's
    interest drawn in order (`draw_live`); ``support = (indptr, interest, count)`` and
    ``item_interest`` are the closed state's."""
    user_ids, user = live.user_ids.extend(log.user, name="users")
    item_ids, item = live.item_ids.extend(log.item, name="items")
    users, user_row = np.unique(user, return_inverse=True)
    items, item_row = np.unique(item, return_inverse=True)
    # an engagement is its item's first in the open chunk if the item is new to it and no
    # earlier engagement of the batch has it
    first = np.zeros(item.shape[0], bool)
    first[np.unique(item_row, return_index=True)[1]] = True
    first &= ~sorted_find(live.items, items)[1][item_row]
    rng = np.random.default_rng([live.seed, live.chunk, len(live)])
    total = live.interest_total.copy()
    z = np.full(item.shape[0], -1, np.int32)
    adopted = np.full(item.shape[0], -1, np.int32)
    draw_live((user_row.astype(np.int64), item_row.astype(np.int64), first,
               rng.random(item.shape[0])),
              (users, np.bincount(user_row, minlength=users.shape[0]).astype(np.int64)),
              (items, np.bincount(item_row, minlength=items.shape[0]).astype(np.int64)),
              support, item_interest,
              (live.user_keys, live.user_counts, live.item_keys, live.item_counts, total,
               live.items.shape[0]),
              (float(alpha), float(beta), int(n_interests)), z, adopted)
    given = z >= 0
    K = np.int64(n_interests)
    user_keys, user_counts = _add_counts(live.user_keys, live.user_counts,
                                         user[given] * K + z[given])
    # a user without a carried support keeps the interests it adopted, counted or not
    new = adopted >= 0
    user_keys, user_counts = _add_counts(user_keys, user_counts,
                                         user[new] * K + adopted[new], weight=0)
    item_keys, item_counts = _add_counts(live.item_keys, live.item_counts,
                                         item[given] * K + z[given])
    return LiveLayer(live.chunk, user_ids, item_ids, np.concatenate([live.user, user]),
                     np.concatenate([live.item, item]), np.concatenate([live.interest, z]),
                     user_keys, user_counts, item_keys, item_counts, total,
                     np.union1d(live.items, items), live.seed)


def live_main_interests(live: LiveLayer, item_interest: np.ndarray, n_interests: int):
    """``item_interest`` over the grown vocabulary: an item without a carried interest
    takes its interest of most open-chunk engagements (ties to the lower), if any."""
    out = np.full(len(live.item_ids), -1, np.int32)
    out[:item_interest.shape[0]] = item_interest
    if live.item_keys.size:
        item = live.item_keys // n_interests
        k = (live.item_keys % n_interests).astype(np.int32)
        # the keys are sorted by item then interest: the last of the order by (item,
        # count, -interest) is each item's interest of most counts, ties to the lower
        order = np.lexsort((-k, live.item_counts, item))
        last = np.flatnonzero(np.r_[item[order][1:] != item[order][:-1], True])
        best_item, best_k = item[order][last], k[order][last]
        free = out[best_item] < 0
        out[best_item[free]] = best_k[free]
    return out


def live_state(state: dict, live: LiveLayer, weight: float, n_interests: int) -> dict:
    """The attributes a reader answers from with the open chunk blended in: vocabularies
    grown, the users' supports and recent items with (empty) rows for new users, the seen
    items with the open chunk's, the latest chunk's counts plus ``weight`` times the open
    chunk's (``N[i, k, t] + weight * N_open[i, k]``, popularity likewise), the latest
    chunk alone kept for the paper's model, and the users' open-chunk engagements as a
    CSR over users (``_live_rows``) for `MiCRO` to merge into their mixtures and recent
    items."""
    view = dict(state)
    view.pop("_grouped", None)
    n_users = len(live.user_ids)
    for name in ("support_indptr_", "recent_indptr_"):
        indptr = state[name]
        view[name] = np.concatenate(
            [indptr, np.full(n_users + 1 - indptr.shape[0], indptr[-1], indptr.dtype)])
    view["user_ids_"] = live.user_ids
    view["item_ids_"] = live.item_ids
    view["item_interest_"] = live_main_interests(live, state["item_interest_"], n_interests)
    view["seen_items_"] = state["seen_items_"].add(live.user, live.item)
    closed = LatestChunk(**{field: state[name]
                            for field, name in LatestChunk._ATTRIBUTES.items()})
    item = live.item_keys // n_interests
    k = live.item_keys % n_interests
    merged = latest_chunk(closed.chunk, live.item, item, k, live.item_counts * weight,
                          n_interests, 1.0, closed, item_w=np.full(len(live), weight))
    for field, name in LatestChunk._ATTRIBUTES.items():
        view[name] = getattr(merged, field)
    if state.get("chunk_alone_") is None:
        view["chunk_alone_"] = closed.as_dict()
    order = np.argsort(live.user, kind="stable")
    rows = np.zeros(n_users + 1, np.int64)
    np.cumsum(np.bincount(live.user, minlength=n_users), out=rows[1:])
    view["_live_rows"] = (rows, live.item[order], live.interest[order])
    return view
