"""MiCRO's ranking: the private steps behind `recommend`, `similar_items` and `explain`,
over the state a `MiCRO` holds."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._kernels import numba_threads
from .._kernels.candidates import candidate_topm
from .._kernels.csr import keep_entries
from .._kernels.neighbours import Neighbours, spread_to_neighbours
from .._kernels.selection import ItemRows
from .._kernels.threshold import threshold_topm
from .._kernels.topm import Queries, Recent, mixture_topm, personal_topm
from .._parallel import resolve_n_jobs
from .._request import ItemLists, removed_items
from ..base import csr_rows
from ._live import live_state
from ._online import mixtures_with_history, recent_with_history
from ._state import (
    COENGAGED_PER_USER,
    LatestChunk,
    chunk_arrays,
    fill_by_popularity,
    grouped_chunk,
    interest_weights,
    popularity_weights,
    ranked_chunk,
    recent_distributions,
    user_mixtures,
)

__all__ = ["MiCRORetrieval", "live_weight_in_use"]


def live_weight_in_use(state: dict) -> float:
    """The weight answers give the open chunk: ``live_weight`` where it is a number (set
    before or after `fit`), the one `fit` chose (``live_weight_``) where it is "auto"."""
    weight = state.get("live_weight", 0.0)
    return float(state.get("live_weight_", 0.0)) if weight == "auto" else float(weight)


#: A row whose interests' lists hold more than ``SCATTER_ENTRIES[0]`` and at most
#: ``SCATTER_ENTRIES[1]`` entries a slot of m is ranked by a scatter of every entry
#: (`personal_topm`, `mixture_topm`), the others by `threshold_topm`, which reads each
#: list's head: the same lists and scores, and the cost measured by
#: ``benchmarks/observe.py``. The threshold pays per entry it reads, and more for an item
#: in several of the row's lists (an open chunk's items are), the scatter little per entry
#: and a fixed part per row; (0, 0) reads the lists for every row.
SCATTER_ENTRIES = (2, 32)


def scattered_rows(indptr, k, phi_indptr, m, bounds=None) -> np.ndarray:
    """Which rows of the mixtures' CSR ``(indptr, k)`` `MiCRO` ranks by a scatter: those
    whose interests hold, in the interest-major ``phi_indptr``, more than
    ``bounds[0] * m`` and at most ``bounds[1] * m`` entries (`SCATTER_ENTRIES`)."""
    low, high = SCATTER_ENTRIES if bounds is None else bounds
    n = indptr.shape[0] - 1
    row = np.repeat(np.arange(n), np.diff(indptr))
    entries = np.bincount(row, weights=np.diff(phi_indptr)[k], minlength=n)
    return (entries > low * m) & (entries <= high * m)


def _row_subset(rows, queries: Queries, recent: Recent, seen: ItemRows):
    """``queries``, ``recent`` and ``seen`` of the rows ``rows`` only (None: all)."""
    if rows is None:
        return queries, recent, seen
    q_ptr, q_pos = csr_rows(queries.indptr, rows)
    r_ptr, r_pos = csr_rows(recent.indptr, rows)
    s_ptr, s_pos = csr_rows(seen.indptr, rows)
    return (Queries(q_ptr, queries.interest[q_pos], queries.weight[q_pos],
                    queries.base[rows], queries.share_weight[rows]),
            Recent(recent.lam[rows], r_ptr, recent.item[r_pos], recent.score[r_pos]),
            ItemRows(s_ptr, seen.items[s_pos]))


def _merged_rows(rows, parts, n):
    """The arrays of ``parts`` (tuples of arrays alike, each over its ``rows``), row by
    row into arrays of ``n`` rows; an array empty in every part stays empty."""
    out = []
    for arrays in zip(*parts, strict=True):
        if all(a.shape[0] == 0 for a in arrays):
            out.append(arrays[0])
            continue
        merged = np.empty((n, *arrays[0].shape[1:]), arrays[0].dtype)
        for at, a in zip(rows, arrays, strict=True):
            merged[at] = a
        out.append(merged)
    return tuple(out)


def _numba_threads(n_jobs):
    """numba's threads set to ``n_jobs`` (scikit-learn's meaning) inside the block."""
    return numba_threads(resolve_n_jobs(n_jobs))


@dataclass(frozen=True, eq=False)
class _Within:
    """The items a request may return, the same for every row: those of ``allowed``
    (None: any) not in ``excluded`` (None: none); sorted model indices."""

    allowed: np.ndarray | None
    excluded: np.ndarray | None

    def holds(self, items: np.ndarray) -> np.ndarray:
        """Whether each of ``items`` (model indices) may be returned."""
        keep = np.ones(items.shape[0], bool)
        if self.allowed is not None:
            keep &= np.isin(items, self.allowed)
        if self.excluded is not None:
            keep &= ~np.isin(items, self.excluded)
        return keep


def _interest_counts(phi_ptr, phi_item, phi_cnt, local, interests):
    """``N[i, k, t]`` of each item (``local``: its local index in the chunk, -1 outside)
    in each of ``interests``, from the interest-major CSR ``phi_*`` (each interest's local
    items sorted): an array of shape (n_items, n_interests)."""
    count = np.zeros((local.shape[0], interests.shape[0]))
    for q, k in enumerate(interests):
        lo, hi = phi_ptr[k], phi_ptr[k + 1]
        at = lo + np.searchsorted(phi_item[lo:hi], local)
        hit = (local >= 0) & (at < hi)
        hit[hit] = phi_item[at[hit]] == local[hit]
        count[hit, q] = phi_cnt[at[hit]]
    return count


class MiCRORetrieval:
    """`MiCRO`'s private ranking steps: mixtures with a request's history, the latest
    chunk as the kernels take it, and the top-m over it (mixed into `MiCRO`)."""

    def _answer(self, user_index, m, seen, request, exclude_seen):
        """`recommend` on internal indices. Flat ``exclude`` and ``allow`` lists (the same
        for every user) restrict the latest chunk the top-m kernels rank from
        (`_chunk_within`); lists per user join the seen items, and rank within
        ``allow`` by `candidate_topm`."""
        allow, exclude = request.allow, request.exclude
        if allow is not None and not allow.is_flat:
            return super()._answer(user_index, m, seen, request, exclude_seen)
        within = None
        if allow is not None or (exclude is not None and exclude.is_flat):
            within = _Within(None if allow is None else allow.flat_items(),
                             exclude.flat_items() if exclude is not None and exclude.is_flat
                             else None)
            if exclude is not None and exclude.is_flat:
                exclude = None
        seen = removed_items(seen, exclude, request.history if exclude_seen else None)
        return self._recommend(user_index, m, seen, request.history, within=within)

    def _mixtures(self, user_index, history=None):
        """CSR (indptr, interests, theta) of the users' mixtures, with ``history`` (the
        request's `ItemLists`) counted in (`mixtures_with_history`)."""
        live = self._live_pairs(user_index)
        if history is None and live is None:
            return user_mixtures(self.support_indptr_, self.support_interest_,
                                 self.support_count_, user_index, self.alpha)
        return mixtures_with_history(self.support_indptr_, self.support_interest_,
                                     self.support_count_, self.item_interest_, user_index,
                                     history, self.alpha,
                                     live=None if live is None else (live[0], live[2]))

    def _live_pairs(self, user_index):
        """The open chunk's engagements of the users ``user_index`` as ``(rows, items,
        interests)``, or None when the state answers without them (`MiCRO.observe`)."""
        live = self.__dict__.get("_live_rows")
        if live is None:
            return None
        indptr, pos = csr_rows(live[0], user_index)
        rows = np.repeat(np.arange(user_index.shape[0]), np.diff(indptr))
        return rows, live[1][pos], live[2][pos]

    def _chunk_within(self, within: _Within) -> dict:
        """`_grouped_chunk` with only the items ``within`` holds: ``phi``'s entries and
        the popularity order of the others dropped, the rest (counts, shares, the items'
        numbering) as it is, so the top-m kernels rank the same scores over fewer items."""
        chunk = self._grouped_chunk()
        keep = within.holds(chunk["items"])
        entry = keep[chunk["phi_item"]]
        chunk = {key: value for key, value in chunk.items() if key != "ranked"}
        return {**chunk, "phi_indptr": keep_entries(chunk["phi_indptr"], entry),
                "phi_item": chunk["phi_item"][entry], "phi_count": chunk["phi_count"][entry],
                "popular_order": chunk["popular_order"][keep[chunk["popular_order"]]]}

    def _recommend_allowed(self, user_index, m, seen, allow, history):
        indptr, k, theta = self._mixtures(user_index, history)
        recent = (self._recent_scores(user_index, history) if self.personal_weight_ > 0
                  else None)
        return self._rank_candidates(indptr, k, theta, recent, m, seen, allow)

    def _rank_candidates(self, indptr, k, theta, recent, m, seen, candidates: ItemLists,
                         popularity=None):
        """Top-m of each row's ``candidates`` by the score `recommend` gives them
        (`candidate_topm`): the rows' mixtures ``(indptr, k, theta)`` and recent items
        (`_recent_scores`, or None without the personal component), the popularity term
        weighted ``popularity`` (by default the model's weight)."""
        n = indptr.shape[0] - 1
        weight, base = interest_weights(indptr, k, theta, self.beta, LatestChunk.of(self))
        if recent is None:
            recent = np.zeros(n + 1, np.int64), np.empty(0, np.int64), np.empty(0)
        r_ptr, r_item, r_u = recent
        lam = np.where(np.diff(r_ptr) > 0, self.personal_weight_, 0.0)
        share_weight = popularity_weights(
            indptr, self.popularity_weight_ if popularity is None else popularity)
        chunk = self._grouped_chunk()
        with numba_threads(resolve_n_jobs(self.n_jobs)) as threads:
            return candidate_topm(
                Queries(indptr, k, weight, base, share_weight),
                Recent(lam, r_ptr, r_item.astype(np.int64), r_u),
                chunk_arrays(chunk, self.chunk_items_), candidates.lo, candidates.hi,
                candidates.items, self._item_local(), ItemRows(*seen), int(m), threads)

    def _item_local(self) -> np.ndarray:
        """Each item's local index in `_grouped_chunk`'s numbering (-1 outside the latest
        chunk), over every item known; kept with its arrays."""
        cache = self._grouped_chunk()
        found = cache.get("item_local")
        if found is None or found.shape[0] != len(self.item_ids_):
            found = np.full(len(self.item_ids_), -1, cache["local_of"].dtype)
            found[self.chunk_items_] = cache["local_of"]
            cache["item_local"] = found
        return found

    def _items_by_interest(self) -> dict:
        """The latest chunk's ``N[i, k, t]`` as a CSR from positions in ``chunk_items_``
        to interests (every count), kept with `_grouped_chunk`'s arrays."""
        cache = self._grouped_chunk()
        found = cache.get("by_item")
        if found is None:
            k = np.repeat(np.arange(self.n_interests_, dtype=np.int32),
                          np.diff(self.phi_indptr_))
            order = np.argsort(self.phi_item_, kind="stable")
            indptr = np.zeros(self.chunk_items_.shape[0] + 1, np.int64)
            np.cumsum(np.bincount(self.phi_item_, minlength=self.chunk_items_.shape[0]),
                      out=indptr[1:])
            found = (indptr, k[order], self.phi_count_[order])
            cache["by_item"] = found
        return found

    def _theta(self, user_index: np.ndarray):
        """CSR (indptr, interests, theta) of the users' mixtures; empty rows for unknown."""
        return self._mixtures(user_index)

    def _recommend(self, user_index, m, seen, history=None, *, within=None):
        indptr, k, theta = self._mixtures(user_index, history)
        if self._blended():
            weight, base = interest_weights(indptr, k, theta, self.beta,
                                             LatestChunk.of(self))
            return self._recommend_personal(user_index, m, seen, indptr, k, weight, base,
                                            history=history, within=within)[:2]
        chunk = None if within is None else self._chunk_within(within)
        return self._rank_mixtures(indptr, k, theta, m, seen, chunk=chunk)

    def _ranks_with_paper(self) -> bool:
        """Whether `_recommend_with_paper` can rank for this model and its `paper_model`
        in one pass: a blended score, and the paper's model ranking from this
        model's own latest chunk (no counts carried into it)."""
        return self._blended() and self.chunk_alone_ is None

    def _blended(self) -> bool:
        """Whether scores blend the mixture with the personal or popularity terms
        (`threshold_topm`), or are the mixture alone (`mixture_topm`)."""
        return self.personal_weight_ > 0 or self.popularity_weight_ > 0

    def _recommend_with_paper(self, users, m: int, *, exclude_seen: bool = False):
        """`recommend_with_paper` where `_ranks_with_paper` holds: the paper's model's
        scores are the interests' part of this model's (the same mixtures, ``phi`` and
        weights), so `threshold_topm` with ``paper=True`` ranks both from one reading of a
        user's lists. The lists and scores are those of the two `recommend` calls."""
        users = self._check_recommend(users, m, exclude_seen)
        if not self._ranks_with_paper():
            raise ValueError(
                "_recommend_with_paper needs a model with a blended score (personal or "
                "popularity weight) whose paper's model ranks from its own latest chunk; "
                f"this one has personal_weight_={self.personal_weight_}, popularity_weight_="
                f"{self.popularity_weight_} and phi_decay_={self.phi_decay_}.")
        user_index, seen = self._users_and_seen(users, exclude_seen)
        indptr, k, theta = self._theta(user_index)
        weight, base = interest_weights(indptr, k, theta, self.beta, LatestChunk.of(self))
        items, scores, p_items, p_scores, p_filled = self._recommend_personal(
            user_index, int(m), seen, indptr, k, weight, base, paper=True)
        p_items, p_scores = fill_by_popularity(p_items, p_scores, p_filled, indptr, base, seen,
                                               self._grouped_chunk())
        return ((self._external_items(items), scores),
                (self._external_items(p_items), p_scores))

    def _grouped_chunk(self) -> dict:
        """The latest chunk as the top-m kernels take it (`grouped_chunk`, ``phi`` pruned
        to ``phi_min_count``); made once per chunk and setting, not saved. Under
        ``"paper"`` `recommend_with_paper` keeps the `paper_model` it ranks with, when it
        ranks apart."""
        cache = self.__dict__.get("_grouped")
        min_count = float(self.phi_min_count)
        if cache is None or cache["of"] is not self.phi_item_ or cache["min_count"] != min_count:
            cache = grouped_chunk(self.phi_indptr_, self.phi_item_, self.phi_count_,
                                  self.chunk_items_, self.chunk_item_count_,
                                  self.popular_order_, min_count)
            cache.update({"of": self.phi_item_, "min_count": min_count})
            self._grouped = cache
        return cache

    def _recommend_personal(self, user_index, m, seen, indptr, k, weight, base, *,
                            paper=False, history=None, within=None):
        """Top-m of ``(1 - lam_u) * (p_t(i|u) + w * pi_t(i)) + lam_u * r_u(i)`` over the
        latest chunk's items and the users' recent items (`threshold_topm`'s five arrays;
        the last three, the paper's ranking read from the same lists, are empty without
        ``paper``); with ``within``, over the items it holds (`_chunk_within`, ranked by
        `personal_topm`'s scatter, which needs no lists)."""
        r_ptr, r_item, r_u = self._recent_scores(user_index, history)
        lam = np.where(np.diff(r_ptr) > 0, self.personal_weight_, 0.0)
        if within is not None:
            keep = within.holds(r_item)
            r_ptr, r_item, r_u = keep_entries(r_ptr, keep), r_item[keep], r_u[keep]
        share_weight = popularity_weights(indptr, self.popularity_weight_)
        recent = Recent(lam, r_ptr, r_item, r_u)
        if within is None:
            return self._rank_latest(indptr, k, weight, base, share_weight, recent, seen, m,
                                     paper=paper)
        chunk = self._chunk_within(within)
        with _numba_threads(self.n_jobs) as threads:
            items, scores = personal_topm(
                Queries(indptr, k, weight, base, share_weight), recent,
                chunk_arrays(chunk, self.chunk_items_), ItemRows(*seen), m, threads)
        return items, scores, np.zeros((0, m), np.int64), np.zeros((0, m)), np.zeros(0, np.int64)

    def _rank_latest(self, indptr, k, weight, base, share_weight, recent, seen, m, *,
                     paper: bool, blended: bool = True):
        """The top-m over the latest chunk (`_grouped_chunk`) for rows of interests
        ``(indptr, k, weight, base, share_weight)`` and recent items ``recent`` (a
        `Recent`): `threshold_topm`'s five arrays. A row whose interests' lists are short
        (`scattered_rows`) is ranked by a scatter of every entry, the others by
        `threshold_topm` reading the lists' heads (`ranked_chunk`, made only if a row
        reads them); the lists and scores are the same to the bit either way."""
        chunk = self._grouped_chunk()
        arrays = chunk_arrays(chunk, self.chunk_items_)
        queries = Queries(indptr, k, weight, base, share_weight)
        seen = ItemRows(*seen)
        short = (scattered_rows(indptr, k, chunk["phi_indptr"], m) if paper != blended
                 else np.zeros(indptr.shape[0] - 1, bool))
        with _numba_threads(self.n_jobs) as threads:
            def scatter(rows):
                q, r, s = _row_subset(rows, queries, recent, seen)
                if blended:
                    empty = (np.zeros((0, m), np.int64), np.zeros((0, m)),
                             np.zeros(0, np.int64))
                    return (*personal_topm(q, r, arrays, s, m, threads), *empty)
                return (np.zeros((0, m), np.int64), np.zeros((0, m)),
                        *mixture_topm(q, arrays, s, m, threads))

            def read_lists(rows):
                q, r, s = _row_subset(rows, queries, recent, seen)
                return threshold_topm(q, r, arrays, ranked_chunk(chunk), s, m, threads,
                                      paper=paper, blended=blended)

            if not short.any():
                return read_lists(None)
            if short.all():
                return scatter(None)
            rows = np.flatnonzero(short), np.flatnonzero(~short)
            return _merged_rows(rows, (scatter(rows[0]), read_lists(rows[1])),
                                indptr.shape[0] - 1)

    def _rank_mixtures(self, indptr, k, theta, m, seen, *, chunk=None):
        """Top-m of ``p_t(i|.)`` for rows given by their mixtures (no personal
        component), the remaining slots filled by popularity: over the latest chunk
        (`_grouped_chunk`) by `threshold_topm`'s lists, or over ``chunk`` (`_chunk_within`)
        by `mixture_topm`'s scatter."""
        weight, base = interest_weights(indptr, k, theta, self.beta, LatestChunk.of(self))
        n = indptr.shape[0] - 1
        if chunk is None:
            no_recent = Recent(np.zeros(n), np.zeros(n + 1, np.int64), np.empty(0, np.int64),
                               np.empty(0))
            *_, items, scores, n_filled = self._rank_latest(
                indptr, k, weight, base, np.zeros(n), no_recent, seen, m, paper=True,
                blended=False)
            chunk = self._grouped_chunk()
        else:
            with _numba_threads(self.n_jobs) as threads:
                items, scores, n_filled = mixture_topm(
                    Queries(indptr, k, weight, base, np.zeros(n)),
                    chunk_arrays(chunk, self.chunk_items_), ItemRows(*seen), m, threads)
        return fill_by_popularity(items, scores, n_filled, indptr, base, seen, chunk)

    def _recent_scores(self, user_index, history=None, *, spread=True):
        """CSR (indptr, items, r_u) of the users' recent items, ``r_u`` normalized per user
        (distinct items per row, sorted); empty rows for unknown users. A ``history``
        engagement weighs what an engagement of the next chunk would (``1 /
        personal_decay``, the latest chunk's weighing 1). With ``spread`` and the
        co-engagement term, a share ``coengagement_`` of each item's ``r_u`` goes to its
        co-engaged items (`spread_to_neighbours`), of which the ``COENGAGED_PER_USER`` of
        most weight join the rows."""
        live = self._live_pairs(user_index)
        recent = recent_with_history(self.recent_indptr_, self.recent_item_,
                                     self.recent_weight_, user_index, history,
                                     1.0 / self.personal_decay, recent_distributions,
                                     live=None if live is None else live[:2])
        if not spread or self.coengagement_ == 0 or self.personal_weight_ == 0:
            return recent
        return spread_to_neighbours(*recent, self._coengaged(), self.coengagement_,
                                    resolve_n_jobs(self.n_jobs), COENGAGED_PER_USER)

    def _coengaged(self) -> Neighbours:
        """The items' co-engaged items (``coengaged_*``) as a `Neighbours` list."""
        return Neighbours(self.coengaged_indptr_, self.coengaged_item_,
                          self.coengaged_score_)

    def _live_key(self, state):
        """The open chunk's layer and ``live_weight``, or None without engagements
        observed or at ``live_weight=0``: answers then come from the closed chunks."""
        live = state.get("live_")
        weight = live_weight_in_use(state)
        if live is None or not len(live) or weight == 0:
            return None
        return (id(live), weight)

    def _live_state(self, state):
        """The state with the open chunk blended in (`live_state`)."""
        return live_state(state, state["live_"], live_weight_in_use(state),
                          self.n_interests_)
