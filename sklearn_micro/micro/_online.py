"""MiCRO at request time: users' mixtures and recent items with a history, items' own
mixtures, ranking within allow lists, and explanations of scores. Arrays in, arrays out;
`MiCRO` calls these with its state."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._log import sorted_find
from .._request import ItemLists
from ..base import csr_rows

__all__ = ["Explanation", "item_mixtures", "mixtures_with_history",
           "recent_with_history"]


@dataclass(frozen=True, eq=False)
class Explanation:
    """A user's scores of some items, split into the terms they are the sum of.

    ``MiCRO`` scores item ``i`` for user ``u`` as ``(1 - lam_u) * (p_t(i|u) + w *
    pi_t(i)) + lam_u * r_u(i)``, with ``p_t(i|u) = sum_k theta_u[k] * phi[k, t][i]`` and
    ``pi_t(i)`` the item's share of the latest chunk's engagements. Each interest ``k`` of
    the user's mixture contributes ``(1 - lam_u) * theta_u[k] * phi[k, t][i]``;
    ``popularity`` is ``(1 - lam_u) * w * pi_t(i)`` (``w`` is 1 for a user without
    interests, who is scored by popularity alone); ``personal`` is ``lam_u * (1 - g) *
    r_u(i)`` over the user's own recent items and ``coengagement`` ``lam_u * g * sum_j
    r_u(j) * s(j, i)`` over the items co-engaged with them (``g``: the model's
    ``coengagement_``). For every item, ``contributions[j].sum() + popularity[j] +
    personal[j] + coengagement[j]`` equals ``scores[j]`` (to rounding), the score
    `MiCRO.recommend` gives the item for this user with the same ``history``.
    `MiCRO.explain` returns one.

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
        The personal term ``lam_u * (1 - g) * r_u(i)``.
    personal_weight : float
        ``lam_u``: the model's personal weight for a user with recent items, else 0.
    coengagement : ndarray of shape (n_items,) or None
        The co-engagement term ``lam_u * g * sum_j r_u(j) * s(j, i)`` (None: zeros).

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
    coengagement: np.ndarray | None = None

    def __post_init__(self):
        if self.coengagement is None:
            object.__setattr__(self, "coengagement", np.zeros(np.shape(self.personal)))

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


