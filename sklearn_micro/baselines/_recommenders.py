"""The four baseline recommenders, on `WindowRecommender` (the package's docstring gives
their shared rule for ties and empty slots)."""

from __future__ import annotations

import copy
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from threadpoolctl import threadpool_limits

from .._kernels.ranking import place_neighbours, top_m_sparse
from .._kernels.selection import fill_remainder
from .._log import EmbeddedLog, Vocabulary, distinct, sorted_find
from .._parallel import resolve_n_jobs
from ..base import key_ranges, unique_pairs
from ..embedding import blocked_als
from ._exact_search import exact_top_m_of_rows, nonzero_rows, seen_of_rows
from ._window import WindowRecommender

__all__ = ["ALSRecommender", "ANNRecommender", "PopularityRecommender",
           "RecentItemsRecommender"]

# "auto" searches exactly below this many candidate items: up to here the exact search costs
# about as much as NNDescent's index and queries together, or less, and it finds every item
# NNDescent misses
_EXACT_MAX_ITEMS = 50_000


def _with_history(indptr, items, scores, history):
    """`RecentItemsRecommender`'s candidates (a CSR of distinct items per row with their
    scores) with each row's history items scored as engaged in the chunk after the latest:
    ``1 + n / (n + 1)``, ``n`` counting the window's engagements and the history's."""
    n_rows = indptr.shape[0] - 1
    row = np.repeat(np.arange(n_rows), np.diff(indptr))
    h_row, h_item = history.pairs()
    width = int(max(items.max(initial=0), h_item.max(initial=0))) + 1
    h_key, h_count = np.unique(h_row * width + h_item, return_counts=True)
    key = row * width + items
    # a window score (c - latest) + n / (n + 1), c <= latest, holds n in its fraction
    frac = scores - np.ceil(scores) + 1.0
    both = np.isin(key, h_key)
    n = h_count.astype(np.float64)
    n[np.searchsorted(h_key, key[both])] += np.rint(frac[both] / (1.0 - frac[both]))
    all_key = np.concatenate([key[~both], h_key])
    all_scores = np.concatenate([scores[~both], 1.0 + n / (n + 1.0)])
    all_row = all_key // width
    order = np.argsort(all_row, kind="stable")
    out = np.zeros(n_rows + 1, np.int64)
    np.cumsum(np.bincount(all_row, minlength=n_rows), out=out[1:])
    return out, (all_key % width)[order], all_scores[order]


class PopularityRecommender(WindowRecommender):
    """The most engaged items of the recent window, the same for every user.

    An item's score is its number of engagements in the last ``window`` chunks; ties go to
    the item more engaged in the latest chunk, then to the lower internal index. Only items
    engaged in the window are ranked, so rows are padded (-1, -inf) beyond them.

    Parameters
    ----------
    window : int, default=1
        Number of latest chunks whose engagements are counted.

    Attributes
    ----------
    user_ids_, item_ids_ : Vocabulary
        External ids of the users and items seen, by internal index.
    seen_items_ : SeenItems
        The items each user has engaged with.
    latest_chunk_ : int
        The chunk recommendations are for.
    window_user_, window_item_, window_chunk_ : ndarray of shape (n_window,)
        The window's engagements (internal indices).
    popular_items_, popular_counts_ : ndarray
        The latest chunk's items by engagement count, and the counts.
    item_rank_ : ndarray of shape (n_items,)
        Each item's place in the latest chunk's popularity order, which breaks ties.
    ranking_items_, ranking_counts_ : ndarray
        The window's items in recommendation order, and their window counts.

    See Also
    --------
    RecentItemsRecommender : The user's own recent items first, then this ranking.
    MiCRO : Ranks the latest chunk's items within each user's interests.

    Notes
    -----
    Request-time arguments of `recommend`: ``exclude`` and ``allow`` filter the ranking,
    with exactly ``m`` eligible items wherever they exist. The ranking is the same for
    every user, so ``history`` changes nothing in it; with ``exclude_seen`` its items
    count as seen.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_micro.baselines import PopularityRecommender
    >>> X = np.array([[1, 10, 0], [2, 10, 0], [2, 11, 1], [3, 12, 1], [1, 12, 1]])
    >>> rec = PopularityRecommender(window=1).fit(X)
    >>> items, scores = rec.recommend([1, 99], m=3)
    >>> items
    array([[12, 11, -1],
           [12, 11, -1]])
    >>> scores[0]
    array([  2.,   1., -inf])
    """

    def _derive(self, state):
        counts = np.bincount(state["window_item_"], minlength=len(state["item_ids_"]))
        ranked = np.flatnonzero(counts)
        ranked = ranked[np.lexsort((state["item_rank_"][ranked], -counts[ranked]))]
        state["ranking_items_"] = ranked.astype(np.int64)
        state["ranking_counts_"] = counts[ranked].astype(np.int64)

    def _recommend(self, user_index, m, seen, history=None):
        n = user_index.shape[0]
        items = np.full((n, m), -1, np.int64)
        scores = np.full((n, m), -np.inf)
        seen_indptr, seen_items = seen
        fill_remainder(
            items, scores, np.zeros(n, np.int64), self.ranking_items_,
            self.ranking_counts_.astype(np.float64), np.zeros(n), seen_indptr, seen_items,
        )
        return items, scores


class RecentItemsRecommender(WindowRecommender):
    """A user's own items of the recent window: repeat engagement, then popularity.

    The items a user engaged with in the last ``window`` chunks come first, the most recently
    engaged first and, within a chunk, the most often engaged first. An item's score is
    ``(c - latest_chunk_) + n / (n + 1)``, where ``c`` is the last chunk in which the user
    engaged with it and ``n`` the number of those engagements in the window. The remaining
    slots hold the latest chunk's most engaged items, as for every recommender of the
    package; a user without engagements in the window gets that popularity ranking.

    Parameters
    ----------
    window : int, default=8
        Number of latest chunks a user's items are taken from.

    Attributes
    ----------
    user_ids_, item_ids_ : Vocabulary
        External ids of the users and items seen, by internal index.
    seen_items_ : SeenItems
        The items each user has engaged with.
    latest_chunk_ : int
        The chunk recommendations are for.
    window_user_, window_item_, window_chunk_ : ndarray of shape (n_window,)
        The window's engagements (internal indices).
    popular_items_, popular_counts_, item_rank_ : ndarray
        The latest chunk's popularity, as for `PopularityRecommender`.
    recent_user_, recent_item_, recent_score_ : ndarray
        Each (user, item) pair of the window with its score, sorted by user.

    See Also
    --------
    PopularityRecommender : The same ranking for every user.
    MiCRO : Ranks the latest chunk's items within each user's interests.

    Notes
    -----
    Request-time arguments of `recommend`: ``history`` items are the user's newest
    recent items, as if engaged in the chunk after the latest: each scores ``1 + n /
    (n + 1)``, ``n`` counting its engagements in the window and the history, above every
    item of the window (a user never seen is ranked from the history alone). ``exclude``
    and ``allow`` filter the ranking, with exactly ``m`` eligible items wherever they
    exist.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_micro.baselines import RecentItemsRecommender
    >>> X = np.array([[1, 10, 0], [1, 11, 1], [1, 11, 1], [2, 12, 1], [3, 12, 1]])
    >>> rec = RecentItemsRecommender(window=2).fit(X)
    >>> rec.recommend([1], m=3)[0]
    array([[11, 10, 12]])
    """

    def __init__(self, window: int = 8):
        super().__init__(window=window)

    def _derive(self, state):
        user, item = state["window_user_"], state["window_item_"]
        chunk = state["window_chunk_"]
        if user.size == 0:
            pairs_user = pairs_item = np.empty(0, np.int64)
            score = np.empty(0)
        else:
            order = np.lexsort((chunk, item, user))
            user, item, chunk = user[order], item[order], chunk[order]
            last = np.ones(user.shape[0], bool)
            last[:-1] = (user[1:] != user[:-1]) | (item[1:] != item[:-1])
            ends = np.flatnonzero(last)
            counts = np.diff(np.concatenate([[-1], ends]))
            pairs_user, pairs_item = user[ends], item[ends]
            score = (chunk[ends] - state["latest_chunk_"]) + counts / (counts + 1.0)
        state["recent_user_"] = pairs_user
        state["recent_item_"] = pairs_item
        state["recent_score_"] = score

    def _rank(self, user_index, items, scores, n_filled, seen_indptr, seen_items,
              history=None):
        indptr, positions = key_ranges(self.recent_user_, user_index)
        own_items = self.recent_item_[positions]
        own_scores = self.recent_score_[positions]
        if history is not None and history.items.size:
            indptr, own_items, own_scores = _with_history(indptr, own_items, own_scores,
                                                          history)
        top_m_sparse(
            indptr, own_items, own_scores,
            self.item_rank_, seen_indptr, seen_items, items, scores, n_filled,
        )


class ANNRecommender(WindowRecommender):
    """Cosine nearest items to each user's vector, items being averages of user vectors.

    Sits after `GraphEmbedder` in a Pipeline: ``fit`` takes the `EmbeddedLog` it hands on and
    keeps its user vectors. An item's vector is the mean of the vectors of the distinct users
    who engaged with it in the last ``window`` chunks, so new items get one as soon as a user
    with a vector engages with them; ``partial_fit`` recomputes the item vectors from the new
    window. A user is queried by their own vector and gets the items of highest cosine
    similarity (the score). Users without a vector get the latest chunk's popularity ranking.

    Parameters
    ----------
    window : int, default=1
        Number of latest chunks whose engagements define the item vectors.
    method : {"auto", "exact", "nndescent"}, default="auto"
        "exact" scores every item in blocks of bounded size; "nndescent" queries a
        `pynndescent.NNDescent` index (metric cosine) built on the item vectors; "auto" is
        exact below 50000 items, where the exact search costs about as much as building
        and querying the index, or less. With fewer items than ``n_neighbors + 1`` the
        search is exact.
    n_neighbors : int, default=30
        Degree of the NNDescent graph.
    epsilon : float, default=0.1
        How far beyond the best candidates an NNDescent query searches
        (`pynndescent.NNDescent.query`'s ``epsilon``, whose default it is): larger finds
        more of the exact neighbours for more time; with ``n_neighbors``, the trade-off
        between the lists' agreement with the exact search and the query time (the docs'
        "ANN at scale" measures it).
    random_state : int, RandomState instance or None, default=None
        Seeds the NNDescent index; fixed for the fitted state, so a pickled and restored
        recommender builds the same index.
    n_jobs : int or None, default=None
        Threads answering ``recommend``: users are queried in parallel, against one index
        built once per chunk (the index itself is the same for a given ``random_state``).
        None means 1, -1 all cores. The exact search answers the same for any ``n_jobs``.
        NNDescent's queries draw random starting points from one stream per call: on one
        thread a user's answer depends on the users queried before it in the same call
        (the same call answers the same), on several threads also on their timing, so a
        few of a user's items can differ between calls.

    Attributes
    ----------
    user_ids_, item_ids_ : Vocabulary
        External ids of the users (those with a vector, then those of the logs) and items.
    user_vectors_ : ndarray of shape (n_users_with_vectors, n_dims)
        The user vectors of the first users of ``user_ids_``, as given (shared with the
        `EmbeddedLog`, not copied); zero for users without one. Users beyond its rows, first
        seen in a log with no vector for them, have none.
    candidate_items_ : ndarray of shape (n_candidates,)
        Internal indices of the window's items that have a vector.
    item_vectors_ : ndarray of shape (n_candidates, n_dims)
        Their unit-normalized mean user vectors.
    index_seed_ : int
        Seed of the NNDescent index of the current window.
    random_state_ : RandomState
        The random stream, carried across chunks.
    seen_items_, latest_chunk_, window_user_, window_item_, window_chunk_, popular_items_,
    popular_counts_, item_rank_ :
        As for `PopularityRecommender`.

    See Also
    --------
    GraphEmbedder : Provides the user vectors this recommender queries with.
    ALSRecommender : Factorizes the engagements itself and folds new items in.

    Notes
    -----
    Request-time arguments of `recommend`: with a ``history``, a user is queried by their
    unit vector plus the mean of the vectors of the history's items that have one (items
    of the window), normalized; a user without a vector by that mean alone. ``exclude``
    and ``allow`` filter the ranking, with exactly ``m`` eligible items wherever they
    exist (with NNDescent, of the items its search finds). `similar_items` queries an
    item's own vector.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_micro._log import EmbeddedLog, Vocabulary, check_log
    >>> from sklearn_micro.baselines import ANNRecommender
    >>> log = check_log(np.array([[1, 10, 0], [2, 11, 0], [3, 10, 0], [3, 11, 0]]))
    >>> users = Vocabulary(np.array([1, 2, 3]))
    >>> vectors = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    >>> X = EmbeddedLog(log, users, Vocabulary(np.array([10, 11])), vectors, np.zeros((2, 2)))
    >>> ANNRecommender(method="exact").fit(X).recommend([1, 2], m=2)[0]
    array([[10, 11],
           [11, 10]])
    """

    _parameter_constraints: dict = {
        **WindowRecommender._parameter_constraints,
        "method": [StrOptions({"auto", "exact", "nndescent"})],
        "n_neighbors": [Interval(Integral, 2, None, closed="left")],
        "epsilon": [Interval(Real, 0, None, closed="left")],
        "random_state": ["random_state"],
        "n_jobs": [Integral, None],
    }

    def __init__(
        self,
        window: int = 1,
        *,
        method: str = "auto",
        n_neighbors: int = 30,
        epsilon: float = 0.1,
        random_state=None,
        n_jobs: int | None = None,
    ):
        super().__init__(window=window)
        self.method = method
        self.n_neighbors = n_neighbors
        self.epsilon = epsilon
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _threads(self) -> int:
        return resolve_n_jobs(self.n_jobs)

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("_index", None)
        return state

    def _start(self, X, log):
        if not isinstance(X, EmbeddedLog):
            raise TypeError(
                "ANNRecommender.fit needs user vectors: the EmbeddedLog that "
                "GraphEmbedder.transform returns, for example as the step after GraphEmbedder "
                f"in a Pipeline. Got {type(X).__name__}; fit GraphEmbedder first."
            )
        vectors = np.asarray(X.user_vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(X.user_ids):
            raise ValueError(
                f"X.user_vectors must have one row per id of X.user_ids ({len(X.user_ids)}); "
                f"got shape {vectors.shape}."
            )
        user_ids, _ = X.user_ids.extend(distinct(log.user), name="X user ids")
        rng = check_random_state(self.random_state)
        return {
            "user_ids_": user_ids,
            "item_ids_": Vocabulary.from_ids(log.item),
            "user_vectors_": vectors,
            "random_state_": rng,
        }

    def _extend_state(self, state, X):
        vectors = state["user_vectors_"]
        if isinstance(X, EmbeddedLog):
            given = np.asarray(X.user_vectors, dtype=np.float32)
            if given.ndim != 2 or given.shape[1] != vectors.shape[1]:
                raise ValueError(
                    f"X.user_vectors must have {vectors.shape[1]} columns like the vectors "
                    f"given to fit; got shape {given.shape}."
                )
            if given.shape[0] != len(X.user_ids):
                raise ValueError(
                    f"X.user_vectors must have one row per id of X.user_ids "
                    f"({len(X.user_ids)}); got shape {given.shape}."
                )
            rows = X.user_ids.lookup(np.unique(X.log.user), name="X user ids")
            rows = rows[rows >= 0]
            if rows.size:
                target = state["user_ids_"].lookup(X.user_ids.ids[rows], name="X user ids")
                # users beyond the rows held had no vector: the rows grow to take them
                grown = np.zeros((max(vectors.shape[0], int(target.max()) + 1),
                                  vectors.shape[1]), np.float32)
                grown[: vectors.shape[0]] = vectors
                vectors = grown
                vectors[target] = given[rows]
        state["user_vectors_"] = vectors

    def _derive(self, state):
        vectors = state["user_vectors_"]
        item, user = unique_pairs(state["window_item_"], state["window_user_"])
        users = np.unique(user)
        users = users[users < vectors.shape[0]]
        with_vector = users[nonzero_rows(vectors, users)]
        has_vector = np.isin(user, with_vector, assume_unique=False)
        item, user = item[has_vector], user[has_vector]
        candidates, local = np.unique(item, return_inverse=True)
        engaged = sp.csr_array(
            (np.ones(user.shape[0], np.float32), (local.ravel(), user)),
            shape=(candidates.shape[0], vectors.shape[0]),
        )
        sums = np.asarray(engaged @ vectors, dtype=np.float32)
        norms = np.linalg.norm(sums, axis=1)
        keep = norms > 0
        state["candidate_items_"] = candidates[keep].astype(np.int64)
        state["item_vectors_"] = sums[keep] / norms[keep, None]
        rng = copy.deepcopy(state["random_state_"])
        state["random_state_"] = rng
        state["index_seed_"] = int(rng.randint(np.iinfo(np.int32).max))
        state["_index"] = None

    def _uses_index(self) -> bool:
        n = self.candidate_items_.shape[0]
        if n <= self.n_neighbors:
            return False
        return self.method == "nndescent" or (self.method == "auto" and n >= _EXACT_MAX_ITEMS)

    def _get_index(self):
        if getattr(self, "_index", None) is None:
            from pynndescent import NNDescent

            self._index = NNDescent(
                self.item_vectors_, metric="cosine", n_neighbors=self.n_neighbors,
                random_state=self.index_seed_, parallel_batch_queries=self._threads() > 1,
            )
        return self._index

    def _queries(self, user_index, history=None):
        """The unit query vectors of the users that have one, and their rows: a user's own
        vector, and with a ``history``, the user's unit vector plus the mean of the vectors
        of the history's items that have one (a user without a vector: that mean alone)."""
        known = np.flatnonzero((user_index >= 0) & (user_index < self.user_vectors_.shape[0]))
        queries = np.zeros((user_index.shape[0], self.user_vectors_.shape[1]), np.float32)
        mine = self.user_vectors_[user_index[known]]
        norms = np.linalg.norm(mine, axis=1)
        queries[known[norms > 0]] = mine[norms > 0] / norms[norms > 0, None]
        if history is not None and history.items.size and self.candidate_items_.size:
            row, item = history.pairs()
            pos, has = sorted_find(self.candidate_items_, item)
            row, pos = row[has], pos[has]
            sums = np.zeros_like(queries)
            np.add.at(sums, row, self.item_vectors_[pos])
            n = np.bincount(row, minlength=queries.shape[0])
            mixed = np.flatnonzero(n)
            queries[mixed] += sums[mixed] / n[mixed, None]
            norms = np.linalg.norm(queries[mixed], axis=1)
            queries[mixed] /= np.where(norms > 0, norms, 1)[:, None]
        rows = np.flatnonzero(nonzero_rows(queries, np.arange(queries.shape[0])))
        return queries[rows], rows

    def _rank(self, user_index, items, scores, n_filled, seen_indptr, seen_items,
              history=None):
        queries, rows = self._queries(user_index, history)
        self._rank_queries(queries, rows, items, scores, n_filled, seen_indptr, seen_items)

    def _rank_queries(self, queries, rows, items, scores, n_filled, seen_indptr, seen_items):
        """The nearest items to unit ``queries``, into the slots of ``rows``."""
        if not self._uses_index():
            exact_top_m_of_rows(queries, rows, self.item_vectors_, self.candidate_items_,
                                self.item_rank_, items, scores, n_filled, seen_indptr,
                                seen_items, self._threads())
        elif rows.size:
            self._query_index(queries, rows, items, scores, n_filled, seen_indptr, seen_items)

    def similar_items(self, items, m: int = 100, *, exclude=None, allow=None):
        """The items nearest to each item's vector, by cosine similarity.

        An item of the window with a vector is queried by it, among the window's other
        items, as `recommend` queries a user; an item without one (unknown, or not engaged
        by a user with a vector in the window) gets the latest chunk's popularity ranking.

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
        similar, scores : ndarray of shape (n_items, m)
            External item ids, best first, and their cosine similarity; padded with -1 (or
            "") and -inf.
        """
        return self._similar_by_vectors(items, m, exclude, allow)

    def _item_queries(self, index):
        """The unit vector of each item (``index``: model indices) with one, and which
        have one."""
        pos, has = sorted_find(self.candidate_items_, index)
        queries = np.zeros((index.shape[0], self.item_vectors_.shape[1]), np.float32)
        queries[has] = self.item_vectors_[pos[has]]
        return queries, has

    def _query_index(self, queries, rows, items, scores, n_filled, seen_indptr, seen_items):
        """The NNDescent index's nearest items to unit ``queries``, into the slots of
        ``rows``."""
        seen_indptr, seen_items = seen_of_rows(seen_indptr, seen_items, rows)
        out_items, out_scores, out_n = items[rows], scores[rows], n_filled[rows]
        m, index = items.shape[1], self._get_index()
        n_cand = self.candidate_items_.shape[0]
        # only seen items among the candidates can come back: m more than those (rounded
        # up to a power of two, so that few distinct k are asked) leave m eligible
        inside = np.zeros(seen_items.shape[0] + 1, np.int64)
        np.cumsum(sorted_find(self.candidate_items_, seen_items)[1], out=inside[1:])
        n_seen = inside[seen_indptr[1:]] - inside[seen_indptr[:-1]]
        extra = np.where(n_seen > 0, 2 ** np.ceil(np.log2(np.maximum(n_seen, 1))), 0)
        k_rows = np.minimum(n_cand, m + extra.astype(np.int64))
        indptr = np.zeros(queries.shape[0] + 1, np.int64)
        np.cumsum(k_rows, out=indptr[1:])
        cand = np.full(indptr[-1], -1, np.int64)
        cand_scores = np.full(indptr[-1], np.nan, np.float32)
        for k in np.unique(k_rows):
            with_k = np.flatnonzero(k_rows == k)
            neighbours, distances = index.query(queries[with_k], k=int(k),
                                                epsilon=float(self.epsilon))
            place_neighbours(indptr, with_k, neighbours,
                             distances.astype(np.float32, copy=False), self.candidate_items_,
                             cand, cand_scores)
        top_m_sparse(indptr, cand, cand_scores, self.item_rank_, seen_indptr, seen_items,
                     out_items, out_scores, out_n)
        items[rows], scores[rows], n_filled[rows] = out_items, out_scores, out_n


class ALSRecommender(WindowRecommender):
    """Implicit-feedback ALS (``implicit``), with new items and users folded in per chunk.

    ``fit`` factorizes the training log's engagement counts (confidence ``alpha * count``)
    by `implicit`'s alternating least squares, on the blocked kernel of `GraphEmbedder`
    (``solver="blocked"``: the same steps and initial vectors, to float32 rounding), on
    ``n_jobs`` threads. ``partial_fit`` keeps the fitted factors and folds in what is new,
    chunk by chunk: each item first engaged after ``fit`` that is engaged in the chunk gets
    the closed-form ALS item step (`implicit`'s ``recalculate_item``) from the users who
    engaged with it in the window, then each user first seen after ``fit`` who engages in
    the chunk gets the user step from their window items. Training users and items keep
    their fitted vectors. ``recommend`` scores the window's items that have a vector by
    ``user_vector @ item_vector``, exactly, in bounded blocks. Users without a vector get
    the latest chunk's popularity ranking. The fitted state is plain arrays.

    Parameters
    ----------
    n_components : int, default=64
        Number of latent factors.
    regularization : float, default=0.01
        L2 regularization of the least-squares steps.
    alpha : float, default=1.0
        Confidence per engagement.
    iterations : int, default=15
        ALS sweeps in ``fit``.
    window : int, default=1
        Number of latest chunks whose items are recommended and whose engagements fold in
        new items and users.
    random_state : int, RandomState instance or None, default=None
        Seeds the initial factors.
    n_jobs : int or None, default=None
        Threads of the least-squares steps of ``fit`` and of ``recommend``'s exact search.
        None means 1 unless in a `joblib.parallel_config` context; -1 means all
        processors.

    Attributes
    ----------
    user_factors_ : ndarray of shape (n_users, n_components)
        User vectors, zero for users without one.
    item_factors_ : ndarray of shape (n_items, n_components)
        Item vectors, zero for items without one.
    n_fit_users_, n_fit_items_ : int
        Users and items of the training log; those after them are folded in.
    candidate_items_ : ndarray
        The window's items that have a vector.
    user_ids_, item_ids_, seen_items_, latest_chunk_, window_user_, window_item_,
    window_chunk_, popular_items_, popular_counts_, item_rank_ :
        As for `PopularityRecommender`.

    See Also
    --------
    ANNRecommender : Nearest items to a user's vector of a `GraphEmbedder`.
    MiCRO : Multi-interest retrieval over the latest chunk's items.

    Notes
    -----
    Request-time arguments of `recommend`: with a ``history``, a user's vector for the
    call is the ALS user step (`implicit`'s ``recalculate_user``) solved from their
    engagements of the window and the history, as ``partial_fit`` folds in a new user;
    for a training user it stands in for the fitted vector in that call only. ``exclude``
    and ``allow`` filter the ranking, with exactly ``m`` eligible items wherever they
    exist. `similar_items` ranks by the cosine similarity of the item vectors.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_micro.baselines import ALSRecommender
    >>> X = np.array([[1, 10, 0], [1, 11, 0], [2, 10, 0], [2, 11, 0], [3, 12, 0]])
    >>> rec = ALSRecommender(n_components=2, random_state=0).fit(X)
    >>> rec.recommend([1], m=3)[0].shape
    (1, 3)
    """

    _parameter_constraints: dict = {
        **WindowRecommender._parameter_constraints,
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "regularization": [Interval(Real, 0, None, closed="left")],
        "alpha": [Interval(Real, 0, None, closed="neither")],
        "iterations": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        "n_jobs": [Integral, None],
    }

    def __init__(
        self,
        n_components: int = 64,
        *,
        regularization: float = 0.01,
        alpha: float = 1.0,
        iterations: int = 15,
        window: int = 1,
        random_state=None,
        n_jobs: int | None = None,
    ):
        super().__init__(window=window)
        self.n_components = n_components
        self.regularization = regularization
        self.alpha = alpha
        self.iterations = iterations
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _als(self, user_factors, item_factors):
        """`implicit`'s model around the fitted factors, for its fold-in steps."""
        from implicit.cpu.als import AlternatingLeastSquares

        with threadpool_limits(1, "blas"):
            model = AlternatingLeastSquares(
                factors=self.n_components, regularization=self.regularization,
                alpha=self.alpha, iterations=self.iterations,
            )
        model.user_factors = user_factors
        model.item_factors = item_factors
        return model

    def _fit_model(self, state, log, user, item):
        n_users, n_items = len(state["user_ids_"]), len(state["item_ids_"])
        counts = sp.csr_matrix(
            (np.ones(user.shape[0], np.float32), (user, item)), shape=(n_users, n_items)
        )
        counts.sum_duplicates()
        counts.data *= np.float32(self.alpha)
        seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        # implicit's ALS steps and initial vectors, on GraphEmbedder's blocked kernel
        user_factors, item_factors = blocked_als(
            counts, self.n_components, self.regularization, self.iterations, seed,
            resolve_n_jobs(self.n_jobs))
        state.update(
            user_factors_=user_factors,
            item_factors_=item_factors,
            n_fit_users_=n_users,
            n_fit_items_=n_items,
        )

    def _extend_state(self, state, X):
        for name, ids in (("user_factors_", "user_ids_"), ("item_factors_", "item_ids_")):
            factors, n = state[name], len(state[ids])
            if factors.shape[0] < n:
                grown = np.zeros((n, factors.shape[1]), np.float32)
                grown[: factors.shape[0]] = factors
                state[name] = grown

    def _update_chunk(self, state, user, item):
        if state["user_factors_"] is self.user_factors_:
            state["user_factors_"] = state["user_factors_"].copy()
        if state["item_factors_"] is self.item_factors_:
            state["item_factors_"] = state["item_factors_"].copy()
        users_f, items_f = state["user_factors_"], state["item_factors_"]
        w_user, w_item = state["window_user_"], state["window_item_"]
        model = self._als(users_f, items_f)
        with threadpool_limits(1, "blas"):
            new_items = np.unique(item[item >= state["n_fit_items_"]])
            if new_items.size:
                items_f[new_items] = self._fold(
                    model.recalculate_item, new_items, w_item, w_user, users_f.shape[0]
                )
            new_users = np.unique(user[user >= state["n_fit_users_"]])
            if new_users.size:
                model = self._als(users_f, items_f)
                users_f[new_users] = self._fold(
                    model.recalculate_user, new_users, w_user, w_item, items_f.shape[0]
                )

    @staticmethod
    def _fold(solve, targets, owner, other, n_other):
        """Solve the factors of ``targets`` from their window engagements with ``other``."""
        local = np.searchsorted(targets, owner)
        local = np.minimum(local, targets.shape[0] - 1)
        mine = targets[local] == owner
        counts = sp.csr_matrix(
            (np.ones(int(mine.sum()), np.float32), (local[mine], other[mine])),
            shape=(targets.shape[0], n_other),
        )
        return solve(targets, counts)

    def _derive(self, state):
        window_items = np.unique(state["window_item_"])
        has_vector = nonzero_rows(state["item_factors_"], window_items)
        state["candidate_items_"] = window_items[has_vector].astype(np.int64)

    def similar_items(self, items, m: int = 100, *, exclude=None, allow=None):
        """The items whose ALS vectors are nearest to each item's, by cosine similarity.

        An item with a vector is queried by its unit vector among the window's items that
        have one; an item without one gets the latest chunk's popularity ranking.

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
        similar, scores : ndarray of shape (n_items, m)
            External item ids, best first, and their cosine similarity; padded with -1 (or
            "") and -inf.
        """
        return self._similar_by_vectors(items, m, exclude, allow)

    def _item_queries(self, index):
        """The unit vector of each item (``index``: model indices) with one, and which
        have one."""
        known = index >= 0
        queries = np.zeros((index.shape[0], self.item_factors_.shape[1]), np.float32)
        queries[known] = self.item_factors_[index[known]]
        norms = np.linalg.norm(queries, axis=1)
        has = norms > 0
        queries[has] /= norms[has, None]
        return queries, has

    def _rank_queries(self, queries, rows, items, scores, n_filled, seen_indptr, seen_items):
        """The candidates of highest cosine similarity to unit ``queries``, into the slots
        of ``rows``."""
        vectors = self.item_factors_[self.candidate_items_]
        vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        exact_top_m_of_rows(queries, rows, vectors, self.candidate_items_, self.item_rank_,
                            items, scores, n_filled, seen_indptr, seen_items)

    def _folded_in(self, user_index, history):
        """The user vectors of rows with a history: the ALS user step (`implicit`'s
        ``recalculate_user``) from their engagements of the window and the history, as
        ``partial_fit`` folds in a new user. Returns the vectors and their rows."""
        h_row, h_item = history.pairs()
        rows = np.unique(h_row)
        local = np.full(user_index.shape[0], -1, np.int64)
        local[rows] = np.arange(rows.shape[0])
        # the rows' window engagements (a user may be in several rows)
        order = np.argsort(user_index[rows], kind="stable")
        by_user = user_index[rows][order]
        w_ptr, w_pos = key_ranges(by_user, self.window_user_)
        w_row = rows[order][w_pos]
        w_item = np.repeat(self.window_item_, np.diff(w_ptr))
        counts = sp.csr_matrix(
            (np.ones(w_row.shape[0] + h_row.shape[0], np.float32),
             (local[np.concatenate([w_row, h_row])], np.concatenate([w_item, h_item]))),
            shape=(rows.shape[0], self.item_factors_.shape[0]))
        counts.sum_duplicates()
        with threadpool_limits(1, "blas"):
            vectors = self._als(self.user_factors_, self.item_factors_).recalculate_user(
                np.arange(rows.shape[0]), counts)
        return np.asarray(vectors, np.float32), rows

    def _rank(self, user_index, items, scores, n_filled, seen_indptr, seen_items,
              history=None):
        known = np.flatnonzero(user_index >= 0)
        queries = np.zeros((user_index.shape[0], self.user_factors_.shape[1]), np.float32)
        queries[known] = self.user_factors_[user_index[known]]
        if history is not None and history.items.size:
            folded, folded_rows = self._folded_in(user_index, history)
            queries[folded_rows] = folded
        has_vector = nonzero_rows(queries, np.arange(queries.shape[0]))
        exact_top_m_of_rows(
            queries[has_vector], np.flatnonzero(has_vector),
            self.item_factors_[self.candidate_items_], self.candidate_items_, self.item_rank_,
            items, scores, n_filled, seen_indptr, seen_items, resolve_n_jobs(self.n_jobs),
        )
