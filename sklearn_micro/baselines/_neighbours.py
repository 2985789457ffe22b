"""Item-item neighbourhood recommenders over the recent window: item-kNN on `implicit`'s
item-item similarities, and RP3beta's random walk (Paudel et al., 2016).

Both keep the top ``n_neighbors`` other items of each item as a CSR (bounded memory, never
an item x item matrix), rebuilt from the window's engagements whenever a chunk closes, and
score a user's items of the window through it.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.utils._param_validation import Interval, StrOptions

from .._kernels.neighbours import Neighbours, score_profiles, walk_neighbours
from .._kernels.selection import ItemRows
from .._parallel import resolve_n_jobs
from ..base import key_ranges
from ._window import WindowRecommender

__all__ = ["ItemKNNRecommender", "RP3betaRecommender"]


def window_counts(state: dict, closed_only: bool = True) -> sp.csr_matrix:
    """The window's engagement counts as a users x items CSR (float64)."""
    user, item = state["window_user_"], state["window_item_"]
    if closed_only:
        keep = state["window_chunk_"] <= state["latest_chunk_"]
        user, item = user[keep], item[keep]
    counts = sp.csr_matrix((np.ones(user.shape[0]), (user, item)),
                           shape=(len(state["user_ids_"]), len(state["item_ids_"])))
    counts.sum_duplicates()
    return counts


def top_per_row(row, col, value, k: int, n_rows: int):
    """The ``k`` best entries of each row (higher value, then lower column) among those off
    the diagonal with a positive value, as a CSR ``(indptr, items, scores)``."""
    keep = (col != row) & (value > 0)
    row, col, value = row[keep], col[keep], value[keep]
    order = np.lexsort((col, -value, row))
    row, col, value = row[order], col[order], value[order]
    counts = np.bincount(row, minlength=n_rows)
    starts = np.zeros(n_rows + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    rank = np.arange(row.shape[0]) - starts[row]
    best = rank < k
    indptr = np.zeros(n_rows + 1, np.int64)
    np.cumsum(np.minimum(counts, k), out=indptr[1:])
    return indptr, col[best].astype(np.int64), value[best].astype(np.float64)


def merged_profiles(indptr, items, counts, history):
    """Each row's profile (distinct items with counts) with the ``history`` (`ItemLists`)
    engagements added, one count each, as a CSR ``(indptr, items, counts)``."""
    n_rows = indptr.shape[0] - 1
    row = np.repeat(np.arange(n_rows), np.diff(indptr))
    h_row, h_item = history.pairs()
    known = h_item >= 0
    h_row, h_item = h_row[known], h_item[known]
    width = int(max(items.max(initial=0), h_item.max(initial=0))) + 1
    keys = np.concatenate([row * width + items, h_row * width + h_item])
    key, inverse = np.unique(keys, return_inverse=True)
    total = np.bincount(inverse.ravel(), weights=np.concatenate(
        [counts, np.ones(h_item.shape[0])]), minlength=key.shape[0])
    out = np.zeros(n_rows + 1, np.int64)
    np.cumsum(np.bincount(key // width, minlength=n_rows), out=out[1:])
    return out, (key % width).astype(np.int64), total


class _NeighbourRecommender(WindowRecommender):
    """A user's items of the window scored through a neighbour list of the items.

    Subclasses build the list (`_neighbours`) and weigh a user's items (`_weights`).
    """

    _parameter_constraints: dict = {
        **WindowRecommender._parameter_constraints,
        "n_neighbors": [Interval(Integral, 1, None, closed="left")],
        "n_jobs": [Integral, None],
    }

    def _neighbours(self, counts: sp.csr_matrix):
        """``(indptr, items, scores)``: the top ``n_neighbors`` of each item. Each
        neighbour recommender defines it (`ItemKNNRecommender`, `RP3betaRecommender`)."""
        raise NotImplementedError(
            f"{type(self).__name__} must define _neighbours, the top neighbours of each item")

    def _weights(self, indptr, counts):
        """The weight of each profile entry (its count in the window and the history)."""
        return counts

    def _derive(self, state):
        # the neighbours are those of the closed window: rebuilt once a chunk closes, kept
        # while the open chunk is observed
        if state.get("neighbours_chunk_") != state["latest_chunk_"]:
            indptr, items, scores = self._neighbours(window_counts(state))
            state.update(neighbour_indptr_=indptr, neighbour_items_=items,
                         neighbour_scores_=scores,
                         neighbours_chunk_=int(state["latest_chunk_"]))
        counts = window_counts(state, closed_only=False).tocoo()
        order = np.lexsort((counts.col, counts.row))
        state.update(profile_user_=counts.row[order].astype(np.int64),
                     profile_item_=counts.col[order].astype(np.int64),
                     profile_count_=counts.data[order])

    def _rank(self, user_index, items, scores, n_filled, seen_indptr, seen_items,
              history=None):
        indptr, positions = key_ranges(self.profile_user_, user_index)
        own, counts = self.profile_item_[positions], self.profile_count_[positions]
        if history is not None and history.items.size:
            indptr, own, counts = merged_profiles(indptr, own, counts, history)
        neighbours = Neighbours(self.neighbour_indptr_, self.neighbour_items_,
                                self.neighbour_scores_)
        score_profiles(indptr, own, np.asarray(self._weights(indptr, counts), np.float64),
                       neighbours, self.item_rank_, ItemRows(seen_indptr, seen_items),
                       items, scores, n_filled)


_SHARED_ATTRIBUTES = """
    neighbour_indptr_, neighbour_items_, neighbour_scores_ : ndarray
        The neighbour lists as a CSR over items (internal indices): row ``i`` holds at
        most ``n_neighbors`` other items of positive score, best first.
    neighbours_chunk_ : int
        The chunk whose window the lists were built from.
    profile_user_, profile_item_, profile_count_ : ndarray
        Each (user, item) pair of the window with its number of engagements, sorted by
        user: the users' items.
    user_ids_, item_ids_, seen_items_, latest_chunk_, window_user_, window_item_,
    window_chunk_, popular_items_, popular_counts_, item_rank_ :
        As for `PopularityRecommender`."""

_SHARED_NOTES = """
    Request-time arguments of `recommend`: ``history`` items join the user's items, one
    engagement each (a user never seen is scored from the history alone). ``exclude`` and
    ``allow`` filter the ranking, with exactly ``m`` eligible items wherever they exist.

    `observe`: the open chunk's engagements join their users' items at once, so a user is
    scored through the neighbours of what they engaged with so far; the neighbour lists
    stay those of the closed window until `partial_fit` closes the chunk, and the
    popularity that fills the slots counts the latest closed chunk and the open one.

    Memory: the lists hold at most ``n_neighbors`` entries per item of the window (16
    bytes each); building them holds one dense row of the items per thread."""


class ItemKNNRecommender(_NeighbourRecommender):
    """Item-kNN over the recent window, on `implicit`'s item-item similarities.

    The window's engagement counts (users x items) are weighted as `implicit`'s
    ``CosineRecommender``, ``BM25Recommender`` or ``TFIDFRecommender`` weight them and
    their item-item similarities found by `implicit.nearest_neighbours.all_pairs_knn`;
    each item keeps its ``n_neighbors`` most similar other items. A user's score for an
    item ``j`` is ``sum_i c_i * s(i, j)`` over the user's items ``i`` of the window
    (``c_i`` its engagements there) of which ``j`` is a neighbour, as `implicit`'s
    ``recommend`` scores. ``partial_fit`` rebuilds the lists from the new window, so new
    items are folded in as soon as a chunk holding them closes. The remaining slots hold
    the latest chunk's most engaged items, as for every recommender of the package; a
    user without engagements in the window gets that popularity ranking.

    Parameters
    ----------
    n_neighbors : int, default=10
        Neighbours kept per item.
    similarity : {"cosine", "bm25", "tfidf"}, default="bm25"
        `implicit`'s weighting of the counts before the item-item dot products. TF-IDF
        weighs ``c`` engagements of a user with an item by ``sqrt(c) * log(n_items / (1 +
        n))``, ``n_items`` the items of the window and ``n`` the user's items there, as
        `implicit`'s ``TFIDFRecommender`` does: a user of many items says less of each.
    window : int, default=2
        Number of latest chunks whose engagements define the neighbours and the users'
        items.
    K1, B : float, default=1.2, 0.75
        BM25's parameters (``similarity="bm25"``), `implicit`'s ``BM25Recommender``
        defaults.
    n_jobs : int or None, default=None
        Threads of `implicit`'s similarity search. None means 1, -1 all cores.

    Attributes
    ----------{attributes}

    See Also
    --------
    RP3betaRecommender : Neighbours by a popularity-penalised random walk.
    RecentItemsRecommender : A user's own recent items first.

    Notes
    -----{notes}

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_micro.baselines import ItemKNNRecommender
    >>> X = np.array([[1, 10, 0], [1, 11, 0], [2, 10, 0], [2, 11, 0], [3, 10, 0],
    ...               [3, 12, 0]])
    >>> rec = ItemKNNRecommender(similarity="cosine", window=1).fit(X)
    >>> rec.recommend([1, 3], m=3)[0]
    array([[10, 11, 12],
           [11, 10, 12]])
    """

    _parameter_constraints: dict = {
        **_NeighbourRecommender._parameter_constraints,
        "similarity": [StrOptions({"cosine", "bm25", "tfidf"})],
        "K1": [Interval(Real, 0, None, closed="left")],
        "B": [Interval(Real, 0, 1, closed="both")],
    }

    def __init__(self, n_neighbors: int = 10, *, similarity: str = "bm25",
                 window: int = 2, K1: float = 1.2, B: float = 0.75,
                 n_jobs: int | None = None):
        super().__init__(window=window)
        self.n_neighbors = n_neighbors
        self.similarity = similarity
        self.K1 = K1
        self.B = B
        self.n_jobs = n_jobs

    def _neighbours(self, counts):
        from implicit.nearest_neighbours import all_pairs_knn

        # the window's users and items only, so that the weights count those
        n_items = counts.shape[1]
        items = np.flatnonzero(np.diff(counts.tocsc().indptr))
        users = np.flatnonzero(np.diff(counts.indptr))
        counts = counts[users][:, items].astype(np.float32)
        # implicit's normalisation divides by zero for an item of weight zero: its NaN
        # entries are zeros (no neighbours), not left to the search's comparisons
        with np.errstate(invalid="ignore", divide="ignore"):
            weighted = sp.csr_matrix(self._weighted(counts))
        weighted.data[np.isnan(weighted.data)] = 0.0
        weighted.eliminate_zeros()
        # one more than kept: an item is usually its own nearest
        similar = all_pairs_knn(weighted, self.n_neighbors + 1,
                                num_threads=resolve_n_jobs(self.n_jobs),
                                show_progress=False).tocoo()
        return top_per_row(items[similar.row], items[similar.col],
                           similar.data.astype(np.float64), self.n_neighbors, n_items)

    def _weighted(self, counts):
        """The counts weighted as `implicit`'s item-item recommender of
        ``similarity`` weighs them before its dot products."""
        from implicit.nearest_neighbours import bm25_weight, normalize, tfidf_weight

        if self.similarity == "cosine":
            weighted = normalize(counts.T).T
        elif self.similarity == "bm25":
            weighted = bm25_weight(counts.T, self.K1, self.B).T
        else:
            weighted = normalize(tfidf_weight(counts.T)).T
        return weighted


class RP3betaRecommender(_NeighbourRecommender):
    """RP3beta over the recent window (Paudel et al., 2016): a popularity-penalised walk.

    On the window's engagement counts ``c``, a walk goes from a user to an item with
    probability ``c_ui / sum_i c_ui`` and from an item to a user with ``c_ui / sum_u
    c_ui``, each probability raised to ``alpha``. Item ``i``'s neighbour score for ``j`` is
    the three-step walk item -> user -> item, ``sum_u p(i -> u)^alpha p(u -> j)^alpha``,
    divided by ``pop_j ** beta`` (``pop_j``: ``j``'s engagements in the window); each
    item keeps its ``n_neighbors`` best other items. A user's score for ``j`` is ``sum_i
    p(u -> i)^alpha s(i, j)`` over their items of the window: ``alpha = 1, beta = 0`` is
    P3, and ``beta > 0`` lifts items that fewer users engaged with. ``partial_fit``
    rebuilds the lists from the new window. The remaining slots hold the latest chunk's
    most engaged items, as for every recommender of the package; a user without
    engagements in the window gets that popularity ranking.

    Parameters
    ----------
    n_neighbors : int, default=50
        Neighbours kept per item.
    alpha : float, default=0.25
        Power of the walk's transition probabilities.
    beta : float, default=0.0
        Power of the popularity that divides an item's arrival score.
    window : int, default=2
        Number of latest chunks whose engagements define the walk and the users' items.
    n_jobs : int or None, default=None
        Threads of the neighbour lists' kernel. None means 1, -1 all cores.

    Attributes
    ----------{attributes}

    See Also
    --------
    ItemKNNRecommender : Neighbours by `implicit`'s item-item similarities.

    Notes
    -----{notes}

    The lists come from a numba kernel, one item's walk at a time in a dense row of the
    items per thread: its time is ``sum_u deg(u)^2`` over the window's users, its memory
    that row and the lists. Paudel, B., Christoffel, F., Newell, C., Bernstein, A.
    "Updatable, accurate, diverse, and scalable recommendations for interactive
    applications", ACM TiiS 7(1), 2016.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_micro.baselines import RP3betaRecommender
    >>> X = np.array([[1, 10, 0], [1, 11, 0], [2, 10, 0], [2, 11, 0], [3, 10, 0],
    ...               [3, 12, 0]])
    >>> rec = RP3betaRecommender(window=1).fit(X)
    >>> rec.recommend([1, 3], m=3)[0]
    array([[10, 11, 12],
           [11, 10, 12]])
    """

    _parameter_constraints: dict = {
        **_NeighbourRecommender._parameter_constraints,
        "alpha": [Interval(Real, 0, None, closed="left")],
        "beta": [Interval(Real, 0, None, closed="left")],
    }

    def __init__(self, n_neighbors: int = 50, *, alpha: float = 0.25, beta: float = 0.0,
                 window: int = 2, n_jobs: int | None = None):
        super().__init__(window=window)
        self.n_neighbors = n_neighbors
        self.alpha = alpha
        self.beta = beta
        self.n_jobs = n_jobs

    def _neighbours(self, counts):
        return walk_neighbours(counts, self.alpha, self.beta, self.n_neighbors,
                               resolve_n_jobs(self.n_jobs))

    def _weights(self, indptr, counts):
        row = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
        total = np.bincount(row, weights=counts, minlength=indptr.shape[0] - 1)
        return (counts / total[row]) ** float(self.alpha) if counts.size else counts


for _cls in (ItemKNNRecommender, RP3betaRecommender):
    _cls.__doc__ = _cls.__doc__.replace("{attributes}", _SHARED_ATTRIBUTES).replace(
        "{notes}", _SHARED_NOTES)
del _cls
