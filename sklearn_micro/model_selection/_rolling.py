"""The chunk splitter, the rolling protocol (paper 4.2) and its scorers."""

from __future__ import annotations

import copy as copy_module
from collections.abc import Iterator, Sequence
from numbers import Integral

import numpy as np
from sklearn.model_selection import BaseCrossValidator
from sklearn.utils.validation import check_is_fitted

from .._log import EngagementLog, check_log, chunk_column, iter_chunks
from ..base import final_step, partial_fit_through
from ..metrics import METRICS
from ._chunk_scores import check_m_values as _check_m_values
from ._chunk_scores import chunk_points
from ._rolling_report import MetricSums, RollingReport

__all__ = ["ChunkSplit", "RollingEvaluation", "RollingScorer", "make_rolling_scorer",
           "rolling_evaluate"]

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
        chunk = chunk_column(X)
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
    rec = final_step(estimator)
    if not hasattr(rec, "recommend"):
        raise TypeError(
            "estimator must be a recommender (with recommend and partial_fit) or a Pipeline "
            f"whose last step is one; got {type(rec).__name__}."
        )
    check_is_fitted(rec, "item_ids_")
    return rec


_partial_fit = partial_fit_through


def _take_rows(X, rows: np.ndarray):
    """Rows of a log, in the form it came in."""
    if isinstance(X, EngagementLog):
        return X.take(rows)
    if hasattr(X, "iloc"):
        return X.iloc[rows]
    return np.asarray(X)[rows]


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
        self.sums = MetricSums(self.metric_names)
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
        _one_chunk(log)
        self.check_chunk(int(log.chunk[0]))
        recommender = _final_recommender(self.estimator)
        points = chunk_points(recommender, log, self.ks, self.exclude_seen)
        return self.record(log, points, log if X is None else X, learn=learn)

    def record(self, log: EngagementLog, points, X=None, *, learn: bool = True) -> int:
        """Add the points of one chunk scored outside `step`, then take the chunk.

        The second half of `step`, for an evaluation that ranks for two models at once
        (`MiCRO.recommend_with_paper`): the recommender takes the chunk if ``learn``.

        Parameters
        ----------
        log : EngagementLog
            The engagements of one chunk, after every chunk recorded so far.
        points : tuple
            The chunk's ``(users, warm, n_relevant, scores)``: its users, whether each had
            engagements the recommender had taken, their numbers of relevant items, and a
            dict of each metric's array of the evaluation's ``metric_names``.
        X : object, optional
            The rows in the form ``partial_fit`` should see them; by default ``log``.
        learn : bool, default=True
            Call ``partial_fit`` with the chunk.

        Returns
        -------
        n_points : int
            The (user, chunk) points of the chunk.
        """
        _one_chunk(log)
        chunk = int(log.chunk[0])
        if self.chunks_done and chunk <= self.chunks_done[-1]:
            raise ValueError(f"record takes chunks in order: chunk {chunk} is not after "
                             f"chunk {self.chunks_done[-1]}, the last recorded.")
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
            _partial_fit(self.estimator, log if X is None else X)
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


def _one_chunk(log: EngagementLog) -> None:
    if log.chunk.min() != log.chunk.max():
        raise ValueError(
            f"step takes one chunk; got chunks {log.chunk.min()} to {log.chunk.max()}.")


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
        means = report.overall() if self.aggregate == "overall" else report.per_user()
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
