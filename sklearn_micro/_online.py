"""MiCRO at request time: users' mixtures and recent items with a history, items' own
mixtures, ranking within allow lists, and explanations of scores. Arrays in, arrays out;
`MiCRO` calls these with its state."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from sklearn.utils.validation import check_is_fitted

from ._kernels import numba_threads
from ._kernels.candidates import candidate_topm
from ._kernels.csr import keep_entries
from ._kernels.selection import ItemRows
from ._kernels.topm import Queries, Recent
from ._log import as_ids, sorted_find
from ._micro_state import (
    LatestChunk,
    chunk_arrays,
    chunk_item_mixtures,
    interest_weights,
    popularity_weights,
    user_mixtures,
)
from ._parallel import resolve_n_jobs
from ._request import ItemLists, own_items, parse_request, removed_items, single_list
from .base import csr_rows

__all__ = ["Explanation", "MiCROOnline", "item_mixtures", "mixtures_with_history",
           "recent_with_history"]


@dataclass(frozen=True, eq=False)
class Explanation:
    """A user's scores of some items, split into the terms they are the sum of.

    ``MiCRO`` scores item ``i`` for user ``u`` as ``(1 - lam_u) * (p_t(i|u) + w *
    pi_t(i)) + lam_u * r_u(i)``, with ``p_t(i|u) = sum_k theta_u[k] * phi[k, t][i]`` and
    ``pi_t(i)`` the item's share of the latest chunk's engagements. Each interest ``k`` of
    the user's mixture contributes ``(1 - lam_u) * theta_u[k] * phi[k, t][i]``;
    ``popularity`` is ``(1 - lam_u) * w * pi_t(i)`` (``w`` is 1 for a user without
    interests, who is scored by popularity alone); ``personal`` is ``lam_u * r_u(i)``.
    For every item, ``contributions[j].sum() + popularity[j] + personal[j]`` equals
    ``scores[j]`` (to rounding), the score `MiCRO.recommend` gives the item for this user
    with the same ``history``. `MiCRO.explain` returns one.

    Parameters
    ----------
    user : int or str
        The user id.
    items : ndarray of shape (n_items,)
        The item ids, in the order given.
    scores : ndarray of shape (n_items,)
        Each item's score; -inf for an item the model does not rank for the user (unknown,
        or neither in the latest chunk nor among the user's recent items), whose terms
        are all 0.
    interests : ndarray of shape (n_interests,)
        The interests of the user's mixture (its support, with the history's interests).
    weights : ndarray of shape (n_interests,)
        ``theta_u`` on them: the user's weight of each interest, summing to 1.
    contributions : ndarray of shape (n_items, n_interests)
        Each interest's term in each item's score.
    popularity : ndarray of shape (n_items,)
        The popularity term ``(1 - lam_u) * w * pi_t(i)``.
    personal : ndarray of shape (n_items,)
        The personal term ``lam_u * r_u(i)``.
    personal_weight : float
        ``lam_u``: the model's personal weight for a user with recent items, else 0.

    See Also
    --------
    MiCRO.explain : Makes an explanation.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_micro import MiCRO
    >>> train = np.array([[0, 10, 0], [0, 11, 0], [0, 12, 0], [1, 12, 0], [1, 13, 0]])
    >>> model = MiCRO(personal=0, popularity=0, random_state=0).fit(
    ...     train, item_interest=([10, 11, 12, 13], [0, 0, 1, 1]))
    >>> why = model.explain(0, [12])
    >>> [(k, round(w, 3), round(c, 4)) for k, w, c in why.terms(0)]
    [(1, 0.4, 0.2645), (0, 0.6, 0.0029)]
    """

    user: object
    items: np.ndarray
    scores: np.ndarray
    interests: np.ndarray
    weights: np.ndarray
    contributions: np.ndarray
    popularity: np.ndarray
    personal: np.ndarray
    personal_weight: float

    def terms(self, j: int) -> list[tuple[int, float, float]]:
        """The interest terms of the ``j``-th item, the largest contribution first.

        Parameters
        ----------
        j : int
            Position of the item in ``items``.

        Returns
        -------
        terms : list of tuple (int, float, float)
            ``(interest, weight, contribution)`` for each interest of the user.
        """
        order = np.argsort(-self.contributions[j], kind="stable")
        return [(int(self.interests[q]), float(self.weights[q]),
                 float(self.contributions[j, q])) for q in order]


def mixtures_with_history(support_indptr, support_interest, support_count, item_interest,
                          user_index, history: ItemLists | None, alpha, live=None):
    """CSR ``(indptr, interests, theta)`` of the users' mixtures, each history engagement
    counting one more for its item's interest (``item_interest``; -1 counts nowhere), and
    each of the ``live = (rows, interests)`` pairs (the open chunk's engagements with their
    drawn interests) one more for its interest.

    ``theta_u[k]`` is proportional to ``alpha + N[u, k]`` over the user's support, as the
    sampler's prior sees it; a history engagement adds 1 to ``N[u, k_i]``, and an interest
    outside the support joins it, as the sampler gives a user new in a chunk the interests
    of its items. A row with no history keeps its entries as they are, in their order.
    """
    indptr, pos = csr_rows(support_indptr, user_index)
    n = user_index.shape[0]
    row = np.repeat(np.arange(n), np.diff(indptr))
    k = support_interest[pos].astype(np.int64)
    count = support_count[pos].astype(np.float64)
    h_row = h_k = np.empty(0, np.int64)
    if history is not None and history.items.size:
        h_row, h_item = history.pairs()
        h_k = item_interest[h_item].astype(np.int64)
    if live is not None:
        h_row = np.concatenate([live[0], h_row]).astype(np.int64)
        h_k = np.concatenate([live[1], h_k]).astype(np.int64)
    if h_row.size:
        h_row, h_k = h_row[h_k >= 0], h_k[h_k >= 0]
        touched = np.zeros(n, bool)
        touched[h_row] = True
        if touched.any():
            mine = touched[row]
            # the touched rows' entries and the history's, one per interest, by interest
            n_k = int(max(k.max(initial=0), h_k.max(initial=0))) + 1
            key = np.concatenate([row[mine] * n_k + k[mine], h_row * n_k + h_k])
            weight = np.concatenate([count[mine], np.ones(h_row.shape[0])])
            key, inverse = np.unique(key, return_inverse=True)
            merged = np.bincount(inverse.ravel(), weights=weight)
            # the untouched rows' entries keep their order
            rows = np.concatenate([row[~mine], key // n_k])
            order = np.argsort(rows, kind="stable")
            row = rows[order]
            k = np.concatenate([k[~mine], key % n_k])[order]
            count = np.concatenate([count[~mine], merged])[order]
            indptr = np.zeros(n + 1, np.int64)
            np.cumsum(np.bincount(row, minlength=n), out=indptr[1:])
    weight = alpha + count
    sums = np.bincount(row, weights=weight, minlength=n)
    return indptr, k.astype(np.int32), weight / sums[row]


def recent_with_history(recent_indptr, recent_item, recent_weight, user_index,
                        history: ItemLists | None, history_weight: float, distributions,
                        live=None):
    """CSR ``(indptr, items, r_u)`` of the users' recent items, with each history
    engagement, and each of the ``live = (rows, items)`` pairs (the open chunk's
    engagements), added at ``history_weight`` before ``r_u`` is normalized
    (``distributions``: `MiCRO`'s normalization of the recent-items CSR)."""
    no_history = history is None or history.items.size == 0
    if no_history and (live is None or live[0].size == 0):
        return distributions(recent_indptr, recent_item, recent_weight, user_index)
    indptr, pos = csr_rows(recent_indptr, user_index)
    n = user_index.shape[0]
    h_row, h_item = (np.empty(0, np.int64),) * 2 if no_history else history.pairs()
    if live is not None:
        h_row = np.concatenate([live[0], h_row]).astype(np.int64)
        h_item = np.concatenate([live[1], h_item]).astype(np.int64)
    rows = np.concatenate([np.repeat(np.arange(n), np.diff(indptr)), h_row])
    items = np.concatenate([recent_item[pos].astype(np.int64), h_item])
    weights = np.concatenate([recent_weight[pos].astype(np.float64),
                              np.full(h_row.shape[0], float(history_weight))])
    order = np.lexsort((items, rows))
    out = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=out[1:])
    return distributions(out, items[order], weights[order], np.arange(n))


def item_mixtures(by_item_indptr, by_item_interest, by_item_count, chunk_items,
                  item_interest, item_index):
    """CSR ``(indptr, interests, theta)`` of items' distributions over interests: an
    item's share of engagements per interest in the latest chunk (``by_item_*``, the
    chunk's ``N[i, k, t]`` as a CSR from positions in ``chunk_items`` to interests), or,
    for an item without any there, its main interest; an empty row for an item with
    neither (or unknown, -1)."""
    n = item_index.shape[0]
    rows = np.full(n, -1, np.int64)
    pos, present = sorted_find(chunk_items, item_index)
    present &= item_index >= 0
    rows[present] = pos[present]
    indptr, at = csr_rows(by_item_indptr, rows)
    k = by_item_interest[at].astype(np.int64)
    count = by_item_count[at].astype(np.float64)
    main = np.where(item_index >= 0, item_interest[np.maximum(item_index, 0)], -1)
    fallback = (np.diff(indptr) == 0) & (main >= 0)
    if fallback.any():
        row = np.concatenate([np.repeat(np.arange(n), np.diff(indptr)),
                              np.flatnonzero(fallback)])
        order = np.argsort(row, kind="stable")
        k = np.concatenate([k, main[fallback]])[order]
        count = np.concatenate([count, np.ones(int(fallback.sum()))])[order]
        indptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(row, minlength=n), out=indptr[1:])
    row = np.repeat(np.arange(n), np.diff(indptr))
    sums = np.bincount(row, weights=count, minlength=n)
    return indptr, k.astype(np.int32), count / sums[row]


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


class MiCROOnline:
    """`MiCRO`'s request-time verbs: `recommend`'s filters and history, `similar_items`
    and `explain`, over the state a `MiCRO` holds (mixed into the class)."""

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

    def similar_items(self, items, m: int = 100, *, exclude=None, allow=None):
        """The items most likely engaged next by someone who engaged with each item.

        An item ``i`` is taken as a user whose mixture is the item's own distribution over
        interests in the latest chunk, ``N[i, k, t] / sum_k N[i, k, t]`` (so an item
        first engaged in the latest chunk has one), or its main interest for an item
        without engagements there; items are then ranked by ``sum_k p(k|i) *
        phi[k, t][j]``, as `recommend` ranks for a user with that mixture and no personal
        component, the item itself left out. An unknown item, or one with no interest,
        gets the latest chunk's popularity ranking, scored by each item's share of the
        chunk's engagements.

        Parameters
        ----------
        items : array-like of shape (n_items,)
            External item ids.
        m : int, default=100
            Number of items per row, as in `recommend`.
        exclude, allow : list of item ids, or list of lists of item ids, optional
            As in `recommend`, flat or aligned with ``items``.

        Returns
        -------
        similar : ndarray of shape (n_items, m)
            External item ids, best first, padded with -1 (or "").
        scores : ndarray of shape (n_items, m)
            ``p(j | i)``; -inf where padded.

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn_micro import MiCRO
        >>> train = np.array([[0, 10, 0], [0, 11, 0], [1, 12, 0], [1, 13, 0]])
        >>> model = MiCRO(random_state=0).fit(
        ...     train, item_interest=([10, 11, 12, 13], [0, 0, 1, 1]))
        >>> model.similar_items([10], m=2)[0]
        array([[11, 12]])
        """
        model = self._published()
        check_is_fitted(model, "support_indptr_")
        items = model._check_recommend(items, m, False, name="items")
        request = parse_request(model.item_ids_, items.shape[0], exclude=exclude,
                                allow=allow, rows_name="items")
        index = model.item_ids_.lookup(items, name="items")
        indptr, k, theta = item_mixtures(*model._items_by_interest(), model.chunk_items_,
                                         model.item_interest_, index)
        no_seen = np.zeros(items.shape[0] + 1, np.int64), np.empty(0, np.int64)
        seen = removed_items(no_seen, own_items(index), request.exclude)
        m = int(m)
        if request.allow is not None and not request.allow.is_flat:
            found, scores = model._rank_candidates(indptr, k, theta, None, m, seen,
                                                   request.allow, popularity=0.0)
        else:
            chunk = None if request.allow is None else model._chunk_within(
                _Within(request.allow.flat_items(), None))
            found, scores = model._rank_mixtures(indptr, k, theta, m, seen, chunk=chunk)
        return model._external_items(found), scores

    def explain(self, user, items, *, history=None) -> Explanation:
        """Each item's score for a user, split into the terms of the blend.

        The terms are the interests' (one per interest of the user's mixture), the
        popularity term and the personal term.

        Parameters
        ----------
        user : int or str
            One external user id (unknown users are scored as `recommend` scores them).
        items : array-like of shape (n_items,)
            External item ids.
        history : list of item ids, optional
            The user's engagements since the latest chunk, as one row of `recommend`'s
            ``history``.

        Returns
        -------
        explanation : Explanation
            ``scores`` (the scores `recommend` gives these items for this user and
            history), ``interests`` and ``weights`` (the user's mixture), the per-interest
            ``contributions`` of each item, the ``popularity`` and ``personal`` terms;
            each item's terms sum to its score.

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn_micro import MiCRO
        >>> train = np.array([[0, 10, 0], [0, 11, 0], [1, 12, 0], [1, 13, 0]])
        >>> model = MiCRO(personal=0, popularity=0, random_state=0).fit(
        ...     train, item_interest=([10, 11, 12, 13], [0, 0, 1, 1]))
        >>> why = model.explain(0, [10, 12])
        >>> why.interests, why.weights
        (array([0]), array([1.]))
        >>> why.scores.round(4)
        array([0.4951, 0.0049])
        >>> bool(np.allclose(why.contributions.sum(axis=1), why.scores))
        True
        """
        model = self._published()
        check_is_fitted(model, "support_indptr_")
        one = as_ids(user, name="user")
        if one.ndim != 0:
            raise ValueError(f"user must be one user id; got {type(user).__name__} of shape "
                             f"{one.shape}.")
        items = as_ids(items, name="items")
        if items.ndim != 1:
            raise ValueError(f"items must be a 1-D list of item ids; got shape {items.shape}.")
        hist = None if history is None else single_list(model.item_ids_, history, "history")
        user_index = model.user_ids_.lookup(one.reshape(1), name="user")
        index = (model.item_ids_.lookup(items, name="items") if items.size
                 else np.empty(0, np.int64))
        indptr, k, theta = model._mixtures(user_index, hist)
        recent = (model._recent_scores(user_index, hist) if model.personal_weight_ > 0
                  else None)
        # the scores, as `recommend` computes them
        cand = np.unique(index[index >= 0])
        candidates = ItemLists(np.zeros(1, np.int64), np.full(1, cand.shape[0]), cand)
        no_seen = np.zeros(2, np.int64), np.empty(0, np.int64)
        got, got_scores = model._rank_candidates(indptr, k, theta, recent,
                                                 max(cand.shape[0], 1), no_seen, candidates)
        found = got[0] >= 0
        score_of = dict(zip(got[0][found].tolist(), got_scores[0][found], strict=True))
        scores = np.array([score_of.get(int(i), -np.inf) for i in index], np.float64)
        # the terms
        weight, base = interest_weights(indptr, k, theta, model.beta, LatestChunk.of(model))
        lam = 0.0
        r_u_of = {}
        if recent is not None and recent[0][1] > 0:
            lam = model.personal_weight_
            r_u_of = dict(zip(recent[1].tolist(), recent[2], strict=True))
        chunk = model._grouped_chunk()
        local = np.where(index >= 0, model._item_local()[np.maximum(index, 0)], -1)
        in_chunk = (local >= 0) & (scores > -np.inf)
        count = _interest_counts(chunk["phi_indptr"], chunk["phi_item"], chunk["phi_count"],
                                 local, k)
        keep = 1.0 - lam
        ranked = scores > -np.inf
        contributions = np.where(in_chunk[:, None],
                                 keep * weight[None, :] * (model.beta + count), 0.0)
        popularity = np.zeros(index.shape[0])
        share_weight = popularity_weights(indptr, model.popularity_weight_)[0]
        popularity[in_chunk] = keep * share_weight * chunk["share"][local[in_chunk]]
        personal = np.array([lam * r_u_of.get(int(i), 0.0) for i in index], np.float64)
        personal[~ranked] = 0.0
        return Explanation(user=one.item() if one.dtype.kind != "U" else str(one),
                           items=items, scores=scores, interests=k.astype(np.int64),
                           weights=theta, contributions=contributions, popularity=popularity,
                           personal=personal, personal_weight=float(lam))

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

    def user_interests(self, users) -> sp.csr_matrix:
        """Each user's interest mixture ``theta_u`` as a sparse (n_users, K) matrix.

        Users never seen, or seen only with items of no interest, get an empty row.

        Parameters
        ----------
        users : array-like of shape (n_users,)
            External user ids.

        Returns
        -------
        theta : scipy.sparse.csr_matrix of shape (n_users, K)
            Row ``r`` holds ``theta_u[k]`` on the interests of user ``users[r]``'s support.
        """
        check_is_fitted(self, "support_indptr_")
        model = self._published()
        index = model.user_ids_.lookup(np.atleast_1d(as_ids(users, name="users")),
                                       name="users")
        indptr, k, theta = model._theta(index)
        return sp.csr_matrix((theta, k, indptr), shape=(index.shape[0], model.n_interests_))

    def item_interests(self, items) -> sp.csr_matrix:
        """Each item's mixture over interests in the latest chunk, as a sparse (n, K) matrix.

        Row ``r`` is ``N[i, k, t] / sum_k N[i, k, t]`` for the latest chunk ``t`` (new items
        included; with ``phi_decay`` the carried counts too); items with no mass there get
        an empty row.

        Parameters
        ----------
        items : array-like of shape (n_items,)
            External item ids.

        Returns
        -------
        mixtures : scipy.sparse.csr_matrix of shape (n_items, K)
            Each item's share of engagements per interest in the latest chunk.
        """
        check_is_fitted(self, "support_indptr_")
        model = self._published()
        index = model.item_ids_.lookup(np.atleast_1d(as_ids(items, name="items")),
                                       name="items")
        return chunk_item_mixtures(model.phi_indptr_, model.phi_item_, model.phi_count_,
                                   model.chunk_items_, index, model.n_interests_)
