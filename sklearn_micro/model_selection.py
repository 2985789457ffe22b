"""Evaluation over time: a chunk splitter, the rolling protocol and its scorers.

The rolling protocol (paper 4.2): a recommender fitted on the chunks up to t retrieves for
each user of chunk t+1, is scored against that user's engagements in t+1, then takes chunk
t+1 with ``partial_fit``, and so on to the end of the test log.
"""

from __future__ import annotations

import copy as copy_module
from collections.abc import Iterator, Sequence
from numbers import Integral, Real

import numpy as np
from sklearn.model_selection import BaseCrossValidator
from sklearn.pipeline import Pipeline
from sklearn.utils.validation import check_is_fitted

from ._dask import score_chunk_on_cluster
from ._kernels.metrics import relevant_codes
from ._log import EmbeddedLog, EngagementLog, check_log, iter_chunks
from ._parallel import active_client
from .base import unique_pairs
from .metrics import METRICS, _metrics_of_codes

__all__ = ["ChunkSplit", "RollingEvaluation", "RollingReport", "RollingScorer",
           "make_rolling_scorer", "rolling_evaluate"]

# users per recommend call during the rolling evaluation
_USER_BLOCK = 1 << 14


def _chunk_column(X) -> np.ndarray:
    """The ``chunk`` column of a log, without validating the id columns."""
    if isinstance(X, EmbeddedLog):
        X = X.log
    if isinstance(X, EngagementLog):
        chunk = X.chunk
    elif hasattr(X, "columns"):
        if "chunk" not in X.columns:
            raise ValueError(f"X must have a 'chunk' column; got columns {list(X.columns)}.")
        chunk = X["chunk"].to_numpy()
    else:
        arr = np.asarray(X)
        if arr.ndim != 2 or arr.shape[1] != 3:
            raise ValueError(
                "X must be a DataFrame with columns user, item, chunk or an integer array "
                f"of shape (n, 3); got shape {arr.shape}."
            )
        chunk = arr[:, 2]
    if chunk.dtype.kind not in "iu":
        raise ValueError(f"X's chunk column must hold integers; got dtype {chunk.dtype}.")
    return chunk.astype(np.int64, copy=False)


class ChunkSplit(BaseCrossValidator):
    """Forward-in-time folds over the chunks of an engagement log.

    With the distinct chunks ``c_0 < c_1 < ... < c_{K-1}`` of ``X``, the folds are the last
    ``n_splits`` windows of ``test_chunks`` chunks: fold j tests on the rows of chunks
    ``c_s .. c_{s + test_chunks - 1}`` with ``s = K - (n_splits - j) * test_chunks``, and
    trains on the rows of chunks up to ``c_{s - gap - 1}``. Folds come in time order, every
    test row is later than every train row, and training sets grow. ``X`` may be a DataFrame
    with a ``chunk`` column or an array of shape (n, 3), so the splitter serves as ``cv=`` in
    `~sklearn.model_selection.GridSearchCV`.

    Parameters
    ----------
    n_splits : int, default=3
        Number of folds.
    test_chunks : int or None, default=1
        Chunks per test fold. None divides the chunks after the first ``min_train_chunks +
        gap`` evenly among the folds (the largest size that fits).
    min_train_chunks : int, default=1
        Fewest chunks the first fold trains on; a log too short for it is refused.
    gap : int, default=0
        Chunks left out between the training chunks and the test chunks of each fold.

    See Also
    --------
    make_rolling_scorer : Scores each fold's test chunks with the rolling protocol.
    sklearn.model_selection.TimeSeriesSplit : The same idea over rows instead of chunks.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_micro.model_selection import ChunkSplit
    >>> X = np.array([[1, 1, 0], [1, 2, 1], [2, 2, 2], [3, 1, 3]])
    >>> for train, test in ChunkSplit(n_splits=2).split(X):
    ...     print(train, test)
    [0 1] [2]
    [0 1 2] [3]
    """

    def __init__(self, n_splits: int = 3, *, test_chunks: int | None = 1,
                 min_train_chunks: int = 1, gap: int = 0):
        self.n_splits = n_splits
        self.test_chunks = test_chunks
        self.min_train_chunks = min_train_chunks
        self.gap = gap

    def _check_params(self) -> None:
        for name, low in (("n_splits", 1), ("min_train_chunks", 1), ("gap", 0)):
            value = getattr(self, name)
            if not isinstance(value, Integral) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}; got {value!r}.")
        t = self.test_chunks
        if t is not None and (not isinstance(t, Integral) or isinstance(t, bool) or t < 1):
            raise ValueError(f"test_chunks must be an integer >= 1 or None; got {t!r}.")

    def _folds(self, chunk: np.ndarray):
        """``(train_last, test_first, test_last)`` chunk values of each fold."""
        self._check_params()
        values = np.unique(chunk)
        n_chunks = values.shape[0]
        lead = self.min_train_chunks + self.gap
        size = self.test_chunks
        if size is None:
            size = (n_chunks - lead) // self.n_splits
        if size < 1 or lead + self.n_splits * size > n_chunks:
            need = lead + self.n_splits * max(size, 1)
            raise ValueError(
                f"ChunkSplit(n_splits={self.n_splits}, test_chunks={self.test_chunks}, "
                f"min_train_chunks={self.min_train_chunks}, gap={self.gap}) needs at least "
                f"{need} distinct chunks; X has {n_chunks}."
            )
        folds = []
        for j in range(self.n_splits):
            start = n_chunks - (self.n_splits - j) * size
            folds.append(
                (values[start - self.gap - 1], values[start], values[start + size - 1])
            )
        return folds

    def split(self, X, y=None, groups=None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield ``(train_rows, test_rows)`` of each fold, in time order.

        Parameters
        ----------
        X : DataFrame with a ``chunk`` column, or array of shape (n, 3)
            The engagement log.
        y, groups : None
            Ignored.

        Yields
        ------
        train : ndarray
            Row indices of the training chunks.
        test : ndarray
            Row indices of the test chunks.
        """
        chunk = _chunk_column(X)
        for train_last, test_first, test_last in self._folds(chunk):
            yield (
                np.flatnonzero(chunk <= train_last),
                np.flatnonzero((chunk >= test_first) & (chunk <= test_last)),
            )

    def _iter_test_indices(self, X=None, y=None, groups=None):
        for _, test in self.split(X, y, groups):
            yield test

    def get_n_splits(self, X=None, y=None, groups=None) -> int:
        """Return the number of folds, ``n_splits``.

        Parameters
        ----------
        X, y, groups : object
            Ignored.

        Returns
        -------
        n_splits : int
            The number of folds.
        """
        self._check_params()
        return self.n_splits


def _final_recommender(estimator):
    """The recommender answering for ``estimator``: itself or a Pipeline's last step."""
    rec = estimator[-1] if isinstance(estimator, Pipeline) else estimator
    if not hasattr(rec, "recommend"):
        raise TypeError(
            "estimator must be a recommender (with recommend and partial_fit) or a Pipeline "
            f"whose last step is one; got {type(rec).__name__}."
        )
    check_is_fitted(rec, "item_ids_")
    return rec


def _partial_fit(estimator, X) -> None:
    """``partial_fit`` of a recommender, or of a Pipeline: transform by all but its last step."""
    if not isinstance(estimator, Pipeline):
        estimator.partial_fit(X)
        return
    Xt = X
    for _, step in estimator.steps[:-1]:
        if step is None or (isinstance(step, str) and step == "passthrough"):
            continue
        Xt = step.transform(Xt)
    estimator[-1].partial_fit(Xt)


def _take_rows(X, rows: np.ndarray):
    """Rows of a log, in the form it came in."""
    if isinstance(X, EngagementLog):
        return X.take(rows)
    if hasattr(X, "iloc"):
        return X.iloc[rows]
    return np.asarray(X)[rows]


def _check_m_values(m_values) -> np.ndarray:
    values = np.unique(np.atleast_1d(np.asarray(m_values)))
    if values.size == 0 or values.dtype.kind not in "iu" or values[0] < 1:
        raise ValueError(f"m_values must be integers >= 1; got {m_values!r}.")
    return values.astype(np.int64)


def _is_warm(recommender, users: np.ndarray) -> np.ndarray:
    """Whether each user has engagements the recommender has taken."""
    index = recommender.user_ids_.lookup(users, name="users")
    return recommender.seen_items_.has_user(index)


def _chunk_points(recommender, log: EngagementLog, ks: np.ndarray, exclude_seen: bool):
    """Users, warmth, relevant counts and metrics of one test chunk; the users are scored
    by blocks on the workers inside joblib's Dask backend (`sklearn_micro._dask`)."""
    users, items, n_relevant, indptr, i = _chunk_relevant(log)
    warm = _is_warm(recommender, users)
    client = active_client()
    if client is not None:
        scores = score_chunk_on_cluster(client, recommender, users, items, indptr, i, ks,
                                        exclude_seen, _block_scores, chunk=int(log.chunk[0]),
                                        max_users=_USER_BLOCK)
        return users, warm, n_relevant, scores
    (scores,) = _scores_by_blocks(
        users, items, indptr, i, ks,
        lambda block: (recommender.recommend(block, int(ks[-1]), exclude_seen=exclude_seen),))
    return users, warm, n_relevant, scores


def _chunk_relevant(log: EngagementLog):
    """A chunk's users and items (sorted), each user's number of relevant items, and the
    CSR (``indptr``, ``i``) of their positions among the items."""
    users, user_code = np.unique(log.user, return_inverse=True)
    items, item_code = np.unique(log.item, return_inverse=True)
    u, i = unique_pairs(user_code.ravel(), item_code.ravel())
    n_relevant = np.bincount(u, minlength=users.shape[0])
    indptr = np.zeros(users.shape[0] + 1, np.int64)
    np.cumsum(n_relevant, out=indptr[1:])
    return users, items, n_relevant, indptr, i


def _paired_chunk_points(recommender, log: EngagementLog, ks: np.ndarray,
                         exclude_seen: bool):
    """`_chunk_points` of a `MiCRO` and of its paper's model together, each block of users
    ranked for both by `MiCRO._recommend_with_paper`; returns the model's points, then
    the paper's model's (the same users and warmth: the two share their state)."""
    users, items, n_relevant, indptr, i = _chunk_relevant(log)
    warm = _is_warm(recommender, users)
    both = _scores_by_blocks(
        users, items, indptr, i, ks,
        lambda block: recommender._recommend_with_paper(block, int(ks[-1]),
                                                        exclude_seen=exclude_seen))
    return tuple((users, warm, n_relevant, scores) for scores in both)


def _scores_by_blocks(users, items, indptr, i, ks, rank) -> tuple[dict, ...]:
    """The metrics of each of the lists ``rank(block)`` gives for the ``users`` (a tuple
    of ``(items, scores)``, one per recommender), ranked `_USER_BLOCK` users at a time
    against their relevant items (`_chunk_relevant`); one dict of metric arrays per list."""
    parts: list[dict[str, list]] = []
    for lo in range(0, users.shape[0], _USER_BLOCK):
        hi = min(users.shape[0], lo + _USER_BLOCK)
        lists = rank(users[lo:hi])
        parts = parts or [{} for _ in lists]
        for part, (rec_items, rec_scores) in zip(parts, lists, strict=True):
            block = _list_scores(rec_items, rec_scores, items, indptr[lo : hi + 1] - indptr[lo],
                                 i[indptr[lo] : indptr[hi]].astype(np.int64), ks)
            for name, value in block.items():
                part.setdefault(name, []).append(value)
    return tuple({name: np.concatenate(values) for name, values in part.items()}
                 for part in parts)


def _block_scores(recommender, users, items, relevant_indptr, relevant, ks, exclude_seen):
    """The metrics of a block of users: their top ``max(ks)`` against their relevant items,
    given as positions in the sorted ``items``."""
    rec_items, rec_scores = recommender.recommend(users, int(ks[-1]), exclude_seen=exclude_seen)
    return _list_scores(rec_items, rec_scores, items, relevant_indptr, relevant, ks)


def _list_scores(rec_items, rec_scores, items, relevant_indptr, relevant, ks):
    """The metrics of top-m lists against the users' relevant items (`_block_scores`)."""
    if rec_items.dtype.kind in "iu" and items.dtype.kind in "iu":
        # numeric ids: each recommended item is looked up among its user's few relevant ones
        codes = np.empty(rec_items.shape, np.int64)
        relevant_codes(rec_items.astype(np.int64, copy=False), rec_scores, relevant_indptr,
                       items[relevant].astype(np.int64, copy=False), relevant, codes)
    else:
        pos = np.minimum(np.searchsorted(items, rec_items), items.shape[0] - 1)
        found = (items[pos] == rec_items) & np.isfinite(rec_scores)
        codes = np.where(found, pos, -1).astype(np.int64)
    return _metrics_of_codes(codes, relevant_indptr, relevant, ks)


def rolling_evaluate(
    estimator,
    X_test,
    *,
    m_values: int | Sequence[int] = (10, 25, 50, 100),
    exclude_seen: bool = False,
    copy: bool = True,
    progress: bool = False,
    keep_points: bool = True,
) -> RollingReport:
    """Score a fitted recommender over the test chunks with the rolling protocol.

    For each chunk of ``X_test`` in increasing order: every user engaging in it gets
    ``recommend(users, max(m_values))`` from the recommender's state before that chunk (for
    the first test chunk, the state right after ``fit``); the user's distinct items of the
    chunk are the relevant set; then the recommender takes the chunk with ``partial_fit``.

    Parameters
    ----------
    estimator : recommender or Pipeline whose last step is a recommender
        Fitted on the chunks before ``X_test``. A Pipeline takes each chunk through the
        ``transform`` of its other steps, then its last step's ``partial_fit``.
    X_test : DataFrame with columns user, item, chunk, int array of shape (n, 3) or
        EngagementLog
        The test engagements; every chunk must be later than the recommender's latest.
    m_values : int or sequence of int, default=(10, 25, 50, 100)
        Cut-offs M of the metrics.
    exclude_seen : bool, default=False
        Passed to ``recommend``.
    copy : bool, default=True
        Evaluate a deep copy, leaving ``estimator`` as it was. With False the estimator
        takes every test chunk and is left in the state after the last.
    progress : bool, default=False
        Show a progress bar over the chunks (tqdm).
    keep_points : bool, default=True
        Keep the metrics of every (user, chunk) point for `RollingReport.points`. With
        False the report keeps only sums per chunk and per user, which is all its
        aggregates need: memory grows with the users, not with the points.

    Returns
    -------
    report : RollingReport
        The aggregates of the (user, chunk) points, and the points themselves with
        ``keep_points``.

    See Also
    --------
    RollingEvaluation : The same protocol one chunk at a time, for checkpoints.
    make_rolling_scorer : The same protocol as a scorer for `GridSearchCV`.
    sklearn_micro.metrics.ranking_metrics : The metrics of each point.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_micro.baselines import PopularityRecommender
    >>> from sklearn_micro.model_selection import rolling_evaluate
    >>> train = np.array([[1, 10, 0], [2, 10, 0], [2, 11, 0]])
    >>> test = np.array([[1, 10, 1], [3, 12, 1], [1, 12, 2], [2, 12, 2]])
    >>> report = rolling_evaluate(PopularityRecommender().fit(train), test, m_values=(1, 2))
    >>> report.overall()["recall@2"]
    np.float64(0.75)
    """
    log = check_log(X_test, input_name="X_test")
    evaluation = RollingEvaluation(
        copy_module.deepcopy(estimator) if copy else estimator, m_values=m_values,
        exclude_seen=exclude_seen, keep_points=keep_points,
    )
    evaluation.check_chunk(int(log.chunk.min()), what="X_test starts at chunk")
    chunks = list(iter_chunks(log.chunk))
    steps = chunks
    if progress:
        from tqdm.auto import tqdm

        steps = tqdm(chunks, desc="chunks", unit="chunk")
    for pos, (_, rows) in enumerate(steps):
        learn = not copy or pos < len(chunks) - 1
        evaluation.step(log.take(rows), _take_rows(X_test, rows) if learn else None,
                        learn=learn)
    return evaluation.report()


class RollingEvaluation:
    """The rolling protocol one test chunk at a time, with its metrics accumulated.

    `rolling_evaluate` is a loop over `step`. The object holds the recommender and the sums
    of the metrics so far and pickles as plain arrays, so a long evaluation can be saved
    after any chunk and carried on from there with the same result.

    Parameters
    ----------
    estimator : fitted recommender or Pipeline whose last step is a recommender
        Evaluated in place: it takes every chunk given to `step`.
    m_values : int or sequence of int, default=(10, 25, 50, 100)
        Cut-offs M of the metrics.
    exclude_seen : bool, default=False
        Passed to ``recommend``.
    keep_points : bool, default=False
        Keep every (user, chunk) point, as `rolling_evaluate` does by default.

    Attributes
    ----------
    estimator : object
        The recommender, in the state after the last chunk it took.
    chunks_done : list of int
        The chunks evaluated so far, in order.

    See Also
    --------
    rolling_evaluate : The whole protocol in one call.
    RollingReport : What `report` returns.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_micro import PopularityRecommender
    >>> from sklearn_micro._log import check_log
    >>> from sklearn_micro.model_selection import RollingEvaluation
    >>> train = np.array([[1, 10, 0], [2, 10, 0], [2, 11, 0]])
    >>> test = check_log(np.array([[1, 10, 1], [3, 12, 1], [1, 12, 2], [2, 12, 2]]))
    >>> evaluation = RollingEvaluation(PopularityRecommender().fit(train), m_values=(1, 2))
    >>> for chunk in (1, 2):
    ...     _ = evaluation.step(test.take(test.chunk == chunk))
    >>> evaluation.report().overall()["recall@2"]
    np.float64(0.75)
    """

    def __init__(self, estimator, *, m_values=(10, 25, 50, 100), exclude_seen=False,
                 keep_points=False):
        self.estimator = estimator
        self.ks = _check_m_values(m_values)
        self.exclude_seen = exclude_seen
        self.metric_names = [f"{name}@{k}" for name in METRICS for k in self.ks.tolist()]
        self.sums = _MetricSums(self.metric_names)
        self.points: dict[str, list] | None = (
            {name: [] for name in ("chunk", "user", "warm", "n_relevant",
                                   *self.metric_names)} if keep_points else None)
        self.chunks_done: list[int] = []
        _final_recommender(estimator)

    def check_chunk(self, chunk: int, *, what: str = "got chunk") -> None:
        """Refuse a chunk that is not after every chunk the recommender has taken.

        Parameters
        ----------
        chunk : int
            The chunk about to be evaluated.
        what : str, default="got chunk"
            How the error message names it.
        """
        latest = getattr(_final_recommender(self.estimator), "latest_chunk_", None)
        if self.chunks_done:
            latest = self.chunks_done[-1] if latest is None else max(latest,
                                                                     self.chunks_done[-1])
        if latest is not None and chunk <= latest:
            raise ValueError(
                f"{what} {chunk}, not after chunk {latest}, the latest the estimator has "
                "taken; the rolling protocol needs test chunks after training, in order."
            )

    def step(self, log: EngagementLog, X=None, *, learn: bool = True) -> int:
        """Score the recommender on one chunk, then let it take the chunk.

        Parameters
        ----------
        log : EngagementLog
            The engagements of one chunk.
        X : object, optional
            The same rows in the form ``partial_fit`` should see them (a DataFrame, an
            array); by default ``log``.
        learn : bool, default=True
            Call ``partial_fit`` with the chunk after scoring it.

        Returns
        -------
        n_points : int
            The (user, chunk) points of the chunk.
        """
        chunk = self._chunk_of(log)
        recommender = _final_recommender(self.estimator)
        points = _chunk_points(recommender, log, self.ks, self.exclude_seen)
        return self._take(chunk, points, log if X is None else X, learn=learn)

    def _chunk_of(self, log: EngagementLog) -> int:
        """The one chunk of ``log``, checked to come after those taken."""
        chunk = int(log.chunk[0])
        if log.chunk.min() != log.chunk.max():
            raise ValueError(
                f"step takes one chunk; got chunks {log.chunk.min()} to {log.chunk.max()}.")
        self.check_chunk(chunk)
        return chunk

    def _take(self, chunk: int, points, X, *, learn: bool) -> int:
        """Add a chunk's points (users, warmth, relevant counts, metrics) to the sums, then
        let the estimator take the chunk ``X`` if ``learn``."""
        users, warm, n_relevant, scores = points
        values = np.column_stack([scores[name] for name in self.metric_names])
        self.sums.add(chunk, users, warm, values)
        if self.points is not None:
            self.points["chunk"].append(np.full(users.shape[0], chunk, np.int64))
            self.points["user"].append(users)
            self.points["warm"].append(warm)
            self.points["n_relevant"].append(n_relevant.astype(np.int64))
            for name in self.metric_names:
                self.points[name].append(scores[name])
        if learn:
            _partial_fit(self.estimator, X)
        self.chunks_done.append(chunk)
        return users.shape[0]

    def report(self) -> RollingReport:
        """The `RollingReport` of the chunks evaluated so far.

        Returns
        -------
        report : RollingReport
            The aggregates, and the points with ``keep_points``.
        """
        points = None
        if self.points is not None and self.chunks_done:
            points = {name: np.concatenate(parts) for name, parts in self.points.items()}
        return RollingReport(points, self.metric_names, sums=self.sums)


def _pandas():
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is optional
        return None
    return pd


class _MetricSums:
    """Sums of the metrics of (user, chunk) points: per chunk (all and warm) and per user.

    Enough for every aggregate of `RollingReport` in memory that grows with the chunks and
    the users, not with the points. Users are kept sorted, so a chunk merges in
    O(n_users + n_chunk_users log n_chunk_users).
    """

    def __init__(self, metric_names):
        n = len(metric_names)
        self.metric_names = list(metric_names)
        self.chunk = np.empty(0, np.int64)
        self.chunk_n = np.empty(0, np.int64)
        self.chunk_warm_n = np.empty(0, np.int64)
        self.chunk_sums = np.empty((0, n))
        self.chunk_warm_sums = np.empty((0, n))
        self.user = None
        self.user_n = np.empty(0, np.int64)
        self.user_sums = np.empty((0, n))

    @classmethod
    def from_points(cls, points, metric_names) -> _MetricSums:
        sums = cls(metric_names)
        chunk = np.asarray(points["chunk"])
        values = np.column_stack([np.asarray(points[name], np.float64)
                                  for name in metric_names]) if len(metric_names) else \
            np.empty((chunk.shape[0], 0))
        for value, rows in iter_chunks(chunk):
            sums.add(value, np.asarray(points["user"])[rows],
                     np.asarray(points["warm"], bool)[rows], values[rows])
        return sums

    def add(self, chunk: int, users: np.ndarray, warm: np.ndarray, values: np.ndarray):
        """Add the points of one chunk: their users, warmth and metrics (n, n_metrics)."""
        n_metrics = len(self.metric_names)
        pos = np.searchsorted(self.chunk, chunk)
        if pos == self.chunk.shape[0] or self.chunk[pos] != chunk:
            self.chunk = np.insert(self.chunk, pos, chunk)
            self.chunk_n = np.insert(self.chunk_n, pos, 0)
            self.chunk_warm_n = np.insert(self.chunk_warm_n, pos, 0)
            self.chunk_sums = np.insert(self.chunk_sums, pos, np.zeros(n_metrics), axis=0)
            self.chunk_warm_sums = np.insert(self.chunk_warm_sums, pos, np.zeros(n_metrics),
                                             axis=0)
        self.chunk_n[pos] += users.shape[0]
        self.chunk_warm_n[pos] += int(warm.sum())
        self.chunk_sums[pos] += values.sum(axis=0)
        self.chunk_warm_sums[pos] += values[warm].sum(axis=0)

        ids, inverse = np.unique(users, return_inverse=True)
        inverse = inverse.ravel()
        counts = np.bincount(inverse, minlength=ids.shape[0])
        sums = np.zeros((ids.shape[0], n_metrics))
        for j in range(n_metrics):
            sums[:, j] = np.bincount(inverse, weights=values[:, j], minlength=ids.shape[0])
        if self.user is None:
            self.user, self.user_n, self.user_sums = ids, counts.astype(np.int64), sums
            return
        if ids.dtype.kind == "U" or self.user.dtype.kind == "U":
            dtype = np.result_type(self.user, ids)
            self.user, ids = self.user.astype(dtype, copy=False), ids.astype(dtype, copy=False)
        at = np.searchsorted(self.user, ids)
        found = np.zeros(ids.shape[0], bool)
        inside = at < self.user.shape[0]
        found[inside] = self.user[at[inside]] == ids[inside]
        self.user_n[at[found]] += counts[found]
        self.user_sums[at[found]] += sums[found]
        new = ~found
        if new.any():
            self.user = np.insert(self.user, at[new], ids[new])
            self.user_n = np.insert(self.user_n, at[new], counts[new])
            self.user_sums = np.insert(self.user_sums, at[new], sums[new], axis=0)

    @property
    def n_points(self) -> int:
        return int(self.chunk_n.sum())

    @property
    def n_users(self) -> int:
        return 0 if self.user is None else self.user.shape[0]


def _check_aggregate(aggregate) -> str:
    if aggregate not in ("overall", "per_user"):
        raise ValueError(f"aggregate must be 'overall' or 'per_user'; got {aggregate!r}.")
    return aggregate


def _z_of(level) -> float:
    if not isinstance(level, Real) or isinstance(level, bool) or not 0 < level < 1:
        raise ValueError(f"level must be a number in (0, 1); got {level!r}.")
    from scipy.stats import norm

    return float(norm.ppf(0.5 + level / 2))


def _user_values(user_n, user_sums, aggregate):
    """Each user's ``(a_u, b_u)`` whose ratio ``sum a / sum b`` is the aggregate: the sums
    over the user's points and their number for ``"overall"``, the user's means and 1 for
    ``"per_user"``."""
    n = user_n.astype(np.float64)[:, None]
    if aggregate == "per_user":
        return user_sums / n, np.ones_like(n)
    return user_sums, n


def _ratio_interval(a, b, z):
    """Per column, the ratio ``R = sum_u a_u / sum_u b_u`` of users' values and the half
    width of its normal interval, the error linearized with users as the unit:
    ``z * sqrt(U / (U - 1) * sum_u (a_u - R b_u)**2) / |sum_u b_u|``. With every b_u = 1
    it is a mean of independent values and its usual interval. NaN where the ratio is not
    finite or with fewer than two users."""
    n_users = a.shape[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        total_b = b.sum(axis=0)
        ratio = a.sum(axis=0) / total_b
        if n_users < 2:
            return ratio, np.full(ratio.shape, np.nan)
        finite = np.isfinite(ratio)
        residual = a - np.where(finite, ratio, 0.0)[None, :] * b
        half = z * np.sqrt(n_users / (n_users - 1) * (residual**2).sum(axis=0)) / np.abs(
            total_b)
    return ratio, np.where(finite, half, np.nan)


class RollingReport:
    """The metrics of the (user, chunk) points of a rolling evaluation, and aggregates.

    Aggregates come from sums per chunk and per user; the points themselves are kept only
    when asked for (``rolling_evaluate(..., keep_points=True)``, the default there). Tables
    come as pandas objects when pandas is installed, otherwise as dicts of arrays (or of
    floats for a single row).

    Parameters
    ----------
    points : dict of str to ndarray or None
        Columns ``chunk``, ``user``, ``warm``, ``n_relevant`` and one per metric.
    metric_names : list of str
        The metric columns, like ``"recall@100"``.
    sums : object, optional
        The accumulated sums a `RollingEvaluation` keeps; computed from ``points`` when
        not given.

    Attributes
    ----------
    metric_names : list of str
        The metric columns, like ``"recall@100"``.

    See Also
    --------
    rolling_evaluate : Runs the rolling protocol and returns a `RollingReport`.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_micro import PopularityRecommender
    >>> from sklearn_micro.model_selection import rolling_evaluate
    >>> train = np.array([[1, 10, 0], [2, 10, 0], [2, 11, 0]])
    >>> test = np.array([[1, 10, 1], [3, 12, 1], [1, 12, 2], [2, 12, 2]])
    >>> report = rolling_evaluate(PopularityRecommender().fit(train), test, m_values=1)
    >>> report.points
       chunk  user   warm  n_relevant  recall@1  mrr@1  ndcg@1
    0      1     1   True           1       1.0    1.0     1.0
    1      1     3  False           1       0.0    0.0     0.0
    2      2     1   True           1       0.0    0.0     0.0
    3      2     2   True           1       0.0    0.0     0.0
    >>> report.per_chunk()["recall@1"]
    chunk
    1    0.5
    2    0.0
    Name: recall@1, dtype: float64
    """

    def __init__(self, points: dict[str, np.ndarray] | None, metric_names: list[str], *,
                 sums: _MetricSums | None = None):
        self._points = points
        self.metric_names = list(metric_names)
        if sums is None:
            if points is None:
                raise ValueError("RollingReport needs points or sums; got neither.")
            sums = _MetricSums.from_points(points, self.metric_names)
        self._sums = sums

    def __len__(self) -> int:
        return self._sums.n_points

    @property
    def points(self):
        """Every (user, chunk) point: chunk, user, warm, n_relevant and each metric.

        ``warm`` tells whether the user had engagements the recommender had taken before
        that chunk. Only kept with ``rolling_evaluate(..., keep_points=True)``.
        """
        if self._points is None:
            raise ValueError(
                "this report kept no points, only their sums; evaluate with "
                "keep_points=True to have them.")
        pd = _pandas()
        if pd is None:
            return {name: value.copy() for name, value in self._points.items()}
        return pd.DataFrame(self._points)

    def _means(self, which: str = "all") -> dict[str, float]:
        sums = self._sums
        if which == "all":
            n, total = sums.chunk_n.sum(), sums.chunk_sums.sum(axis=0)
        elif which == "warm":
            n, total = sums.chunk_warm_n.sum(), sums.chunk_warm_sums.sum(axis=0)
        else:
            n = sums.chunk_n.sum() - sums.chunk_warm_n.sum()
            total = sums.chunk_sums.sum(axis=0) - sums.chunk_warm_sums.sum(axis=0)
        return {name: float(total[j] / n) if n else float("nan")
                for j, name in enumerate(self.metric_names)}

    @staticmethod
    def _frame(table: dict, index_name: str):
        pd = _pandas()
        if pd is None:
            return table
        return pd.DataFrame(table).set_index(index_name)

    @staticmethod
    def _series(row: dict, name: str):
        pd = _pandas()
        if pd is None:
            return row
        return pd.Series(row, name=name)

    def overall(self, *, by_warm: bool = False):
        """Mean of each metric over all (user, chunk) points.

        Parameters
        ----------
        by_warm : bool, default=False
            Also give the means over warm points (the user had engagements before the
            chunk) and cold ones, as rows ``all``, ``warm`` and ``cold``.

        Returns
        -------
        means : Series or DataFrame
            The mean of each metric (a dict without pandas); with ``by_warm``, a table with
            rows ``all``, ``warm`` and ``cold`` and a column ``n_points`` (a dict of
            columns without pandas).
        """
        if not by_warm:
            return self._series(self._means(), "overall")
        rows = ("all", "warm", "cold")
        n_warm = int(self._sums.chunk_warm_n.sum())
        table = {"points": np.array(rows),
                 "n_points": np.array([len(self), n_warm, len(self) - n_warm])}
        means = [self._means(row) for row in rows]
        for name in self.metric_names:
            table[name] = np.array([row[name] for row in means])
        return self._frame(table, "points")

    def per_chunk(self):
        """Mean of each metric over the users of each chunk: a curve over time.

        Returns
        -------
        table : DataFrame
            Indexed by chunk, with a column ``n_points`` and one per metric (a dict of
            columns without pandas).
        """
        sums = self._sums
        table = {"chunk": sums.chunk.copy(), "n_points": sums.chunk_n.copy()}
        for j, name in enumerate(self.metric_names):
            table[name] = sums.chunk_sums[:, j] / sums.chunk_n
        return self._frame(table, "chunk")

    def per_user(self, *, by_user: bool = False):
        """The per-user aggregate over all chunks: each user's mean, then the mean over users.

        A user counts once however many chunks they engaged in, unlike `overall`, where each
        (user, chunk) point counts once.

        Parameters
        ----------
        by_user : bool, default=False
            Return each user's means instead (a table indexed by user, with ``n_points``).

        Returns
        -------
        means : Series or DataFrame
            The mean over users of each metric (a dict without pandas); with ``by_user``,
            a table indexed by user with a column ``n_points`` (a dict of columns without
            pandas).
        """
        sums = self._sums
        users = sums.user if sums.user is not None else np.empty(0, np.int64)
        means = sums.user_sums / np.maximum(sums.user_n, 1)[:, None]
        if by_user:
            table = {"user": users.copy(), "n_points": sums.user_n.copy()}
            for j, name in enumerate(self.metric_names):
                table[name] = means[:, j]
            return self._frame(table, "user")
        return self._series(
            {name: float(means[:, j].mean()) if users.size else float("nan")
             for j, name in enumerate(self.metric_names)}, "per_user")

    def intervals(self, *, aggregate: str = "overall", level: float = 0.95):
        """Confidence intervals of each metric's mean, with users as the independent unit.

        The points of one user are not independent, so the intervals treat each user as one
        draw. For ``"per_user"`` the mean is over users' means and the interval the
        normal one of a mean of independent values. For ``"overall"`` the mean is a ratio,
        the sum of the points' metrics over their number, and its standard error the
        linearized (cluster-robust) one: ``sqrt(U / (U - 1) * sum_u (S_u - R n_u)**2) /
        sum_u n_u`` for U users with n_u points summing to S_u and R the mean. Both are
        normal approximations, good for the many users of a retrieval log, and cheap
        (computed from the per-user sums, never from the points). They count the
        variation between users for these test chunks, not between chunks: what all users
        share in a chunk (a trend) is held fixed.

        Parameters
        ----------
        aggregate : {"overall", "per_user"}, default="overall"
            The mean of `overall` or of `per_user`.
        level : float, default=0.95
            Coverage of the intervals, in (0, 1).

        Returns
        -------
        table : DataFrame
            Indexed by metric, with columns ``mean``, ``low``, ``high`` (a dict of columns
            without pandas); ``low`` and ``high`` are NaN with fewer than two users.

        See Also
        --------
        compare : The difference from another report on the same points, paired by user.
        """
        mean, half = _ratio_interval(
            *_user_values(self._sums.user_n, self._sums.user_sums, _check_aggregate(aggregate)),
            _z_of(level))
        return self._frame({"metric": np.array(self.metric_names), "mean": mean,
                            "low": mean - half, "high": mean + half}, "metric")

    def compare(self, other: RollingReport, *, aggregate: str = "overall",
                level: float = 0.95):
        """Each metric's mean minus ``other``'s, with a confidence interval paired by user.

        Both reports must score the same (user, chunk) points: two recommenders evaluated on
        the same test log. A user's difference is the difference of their sums (or of
        their means for ``"per_user"``), which removes what the users share from the
        noise: the interval is much narrower than the two `intervals` would suggest. The
        estimators are those of `intervals`.

        Parameters
        ----------
        other : RollingReport
            The report to compare against, on the same points.
        aggregate : {"overall", "per_user"}, default="overall"
            The mean of `overall` or of `per_user`.
        level : float, default=0.95
            Coverage of the intervals, in (0, 1).

        Returns
        -------
        table : DataFrame
            Indexed by the metrics the reports share, with columns ``difference``, ``low``,
            ``high``, ``relative`` (the ratio of the means less one) and its interval
            ``relative_low``, ``relative_high`` (the ratio's error linearized, the
            uncertainty of both means counted) (a dict of columns without pandas).
            ``relative`` is infinite or NaN where ``other``'s mean is 0.

        Raises
        ------
        ValueError
            When the reports do not cover the same users with the same number of points
            each, or share no metric.
        """
        if not isinstance(other, RollingReport):
            raise TypeError(f"other must be a RollingReport; got {type(other).__name__}.")
        aggregate, z = _check_aggregate(aggregate), _z_of(level)
        mine, theirs = self._sums, other._sums
        same = (mine.user is not None and theirs.user is not None
                and np.array_equal(mine.user, theirs.user)
                and np.array_equal(mine.user_n, theirs.user_n))
        if not same:
            raise ValueError(
                "compare needs two reports of the same (user, chunk) points, as from two "
                f"recommenders evaluated on one test log; got {mine.n_users} users with "
                f"{len(self)} points against {theirs.n_users} users with {len(other)}.")
        names = [name for name in self.metric_names if name in other.metric_names]
        if not names:
            raise ValueError(f"the reports share no metric: {self.metric_names} against "
                             f"{other.metric_names}.")
        a = mine.user_sums[:, [self.metric_names.index(n) for n in names]]
        b = theirs.user_sums[:, [other.metric_names.index(n) for n in names]]
        diff, half = _ratio_interval(*_user_values(mine.user_n, a - b, aggregate), z)
        ratio, relative_half = _ratio_interval(_user_values(mine.user_n, a, aggregate)[0],
                                               _user_values(mine.user_n, b, aggregate)[0], z)
        relative = ratio - 1.0
        return self._frame({"metric": np.array(names), "difference": diff,
                            "low": diff - half, "high": diff + half, "relative": relative,
                            "relative_low": relative - relative_half,
                            "relative_high": relative + relative_half}, "metric")

    def to_frame(self):
        """The summary table: overall (all, warm, cold points) and per-user means.

        Returns
        -------
        table : DataFrame
            Rows ``overall``, ``overall (warm)``, ``overall (cold)`` and ``per-user``, the
            metrics as columns (a dict of columns without pandas).
        """
        by_warm = self.overall(by_warm=True)
        per_user = self.per_user()
        if _pandas() is None:
            rows = ["overall", "overall (warm)", "overall (cold)", "per-user"]
            table = {"aggregate": np.array(rows)}
            for name in self.metric_names:
                table[name] = np.append(by_warm[name], per_user[name])
            return table
        frame = by_warm[self.metric_names].copy()
        frame.index = ["overall", "overall (warm)", "overall (cold)"]
        frame.loc["per-user"] = per_user
        frame.index.name = "aggregate"
        return frame

    def summary(self, *, digits: int = 4) -> str:
        """Format the summary table as text.

        Parameters
        ----------
        digits : int, default=4
            Digits after the decimal point.

        Returns
        -------
        text : str
            The table of `to_frame`, then a line counting points, users and chunks.
        """
        by_warm = self.overall(by_warm=True)
        per_user = self.per_user()
        rows = ["overall", "overall (warm)", "overall (cold)", "per-user"]
        values = [[np.asarray(by_warm[name])[j] for name in self.metric_names]
                  for j in range(3)]
        values.append([per_user[name] for name in self.metric_names])
        width = max(len(r) for r in rows)
        cells = [[f"{v:.{digits}f}" for v in row] for row in values]
        col = [max(len(name), digits + 2) for name in self.metric_names]
        lines = [" " * width + "  " + "  ".join(n.rjust(w) for n, w in
                                                  zip(self.metric_names, col, strict=True))]
        for label, row in zip(rows, cells, strict=True):
            lines.append(label.ljust(width) + "  " + "  ".join(
                c.rjust(w) for c, w in zip(row, col, strict=True)))
        n_warm = int(self._sums.chunk_warm_n.sum())
        lines.append(
            f"{len(self)} (user, chunk) points, {n_warm} warm; "
            f"{self._sums.n_users} users, {self._sums.chunk.shape[0]} chunks"
        )
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"RollingReport(\n{self.summary()}\n)"


class RollingScorer:
    """Scorer running `rolling_evaluate` on a deep copy: ``scorer(estimator, X) -> dict``.

    Made by `make_rolling_scorer`, which validates the parameters; see there.

    Parameters
    ----------
    m_values : int or sequence of int, default=(10, 25, 50, 100)
        Cut-offs M.
    metrics : sequence of {"recall", "mrr", "ndcg"}, default=("recall", "mrr", "ndcg")
        Metrics to report.
    exclude_seen : bool, default=False
        Passed to ``recommend``.
    aggregate : {"overall", "per_user"}, default="overall"
        "overall" averages over all (user, chunk) points; "per_user" averages each user's
        mean over the users.

    See Also
    --------
    make_rolling_scorer : Makes a `RollingScorer`.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_micro import PopularityRecommender
    >>> from sklearn_micro.model_selection import make_rolling_scorer
    >>> train = np.array([[1, 10, 0], [2, 10, 0], [2, 11, 0]])
    >>> test = np.array([[1, 10, 1], [3, 12, 1], [1, 12, 2], [2, 12, 2]])
    >>> scorer = make_rolling_scorer(m_values=2, metrics="recall")
    >>> scorer(PopularityRecommender().fit(train), test)
    {'recall@2': 0.75}
    """

    def __init__(self, m_values=(10, 25, 50, 100), metrics=METRICS, *,
                 exclude_seen: bool = False, aggregate: str = "overall"):
        self.m_values = m_values
        self.metrics = metrics
        self.exclude_seen = exclude_seen
        self.aggregate = aggregate

    def __call__(self, estimator, X, y=None) -> dict[str, float]:
        report = rolling_evaluate(
            estimator, X, m_values=self.m_values, exclude_seen=self.exclude_seen, copy=True,
            keep_points=False,
        )
        means = report._means() if self.aggregate == "overall" else report.per_user()
        names = [f"{name}@{k}" for name in self.metrics for k in _check_m_values(self.m_values)]
        return {name: float(means[name]) for name in names}

    def __repr__(self) -> str:
        return (
            f"make_rolling_scorer(m_values={self.m_values!r}, metrics={self.metrics!r}, "
            f"exclude_seen={self.exclude_seen!r}, aggregate={self.aggregate!r})"
        )


def make_rolling_scorer(
    m_values: int | Sequence[int] = (10, 25, 50, 100),
    metrics: str | Sequence[str] = METRICS,
    *,
    exclude_seen: bool = False,
    aggregate: str = "overall",
) -> RollingScorer:
    """A multi-metric scorer for `GridSearchCV` and `cross_validate`.

    The scorer takes ``(estimator, X, y=None)``, runs `rolling_evaluate` on a deep copy of
    the fitted estimator over the test rows ``X`` (so the estimator it is given is left as it
    was, and one fold's ``partial_fit`` never reaches another), and returns a dict of floats
    with keys like ``"recall@100"``. Pass it as ``scoring=`` with ``refit="recall@100"``
    and ``cv=ChunkSplit(...)``.

    Parameters
    ----------
    m_values : int or sequence of int, default=(10, 25, 50, 100)
        Cut-offs M.
    metrics : str or sequence of {"recall", "mrr", "ndcg"}, default=all three
        Metrics to report.
    exclude_seen : bool, default=False
        Passed to ``recommend``.
    aggregate : {"overall", "per_user"}, default="overall"
        "overall" averages over all (user, chunk) points; "per_user" averages each user's
        mean over the users.

    Returns
    -------
    scorer : RollingScorer
        A callable ``scorer(estimator, X, y=None)`` returning a dict of floats.

    See Also
    --------
    ChunkSplit : Forward-in-time folds over chunks, for ``cv=``.
    rolling_evaluate : The protocol the scorer runs.

    Examples
    --------
    >>> import pandas as pd
    >>> from sklearn.model_selection import GridSearchCV
    >>> from sklearn_micro.baselines import PopularityRecommender
    >>> from sklearn_micro.model_selection import ChunkSplit, make_rolling_scorer
    >>> X = pd.DataFrame({"user": [1, 2, 1, 2, 3, 1, 3], "item": [5, 5, 5, 5, 6, 5, 5],
    ...                   "chunk": [0, 0, 1, 1, 2, 3, 3]})
    >>> search = GridSearchCV(
    ...     PopularityRecommender(), {"window": [1, 2]}, cv=ChunkSplit(n_splits=2),
    ...     scoring=make_rolling_scorer(m_values=1, metrics="recall"), refit="recall@1",
    ... ).fit(X)
    >>> search.best_params_
    {'window': 2}
    """
    names = (metrics,) if isinstance(metrics, str) else tuple(metrics)
    unknown = [name for name in names if name not in METRICS]
    if unknown or not names:
        raise ValueError(f"metrics must be among {list(METRICS)}; got {list(names)}.")
    if aggregate not in ("overall", "per_user"):
        raise ValueError(f"aggregate must be 'overall' or 'per_user'; got {aggregate!r}.")
    _check_m_values(m_values)
    return RollingScorer(m_values, names, exclude_seen=exclude_seen, aggregate=aggregate)
