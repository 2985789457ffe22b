"""Prequential evaluation: each test chunk replayed in time order, each batch's users scored
before the batch is observed, the chunk closed with ``partial_fit`` at its end.

It measures what the live layer (`MiCRO.observe`, the baselines' ``observe``) is worth,
beside the chunk-level rolling protocol of `sklearn_micro.model_selection.rolling_evaluate`.
"""

from __future__ import annotations

import copy as copy_module
from dataclasses import dataclass
from numbers import Integral

import numpy as np

from .._log import EngagementLog, check_log, iter_chunks
from ..base import final_step, partial_fit_through
from ..metrics import METRICS
from ._chunk_scores import check_m_values, chunk_relevant, is_warm, list_scores
from ._rolling_report import MetricSums, RollingReport

__all__ = ["MODES", "PrequentialReport", "PrequentialScorer", "make_prequential_scorer",
           "prequential_evaluate"]

# what a batch's users are ranked from
MODES = ("chunk", "users", "live")


@dataclass(frozen=True)
class PrequentialReport:
    """The reports of a prequential evaluation, one `RollingReport` per kind of item.

    Each report holds (user, batch) points: a user of a batch, scored before the batch was
    observed, against the user's items of the batch.

    Parameters
    ----------
    all : RollingReport
        Against all the user's items of the batch.
    new_items : RollingReport
        Against those of its items the model had not seen before the chunk (points with
        none left out).
    old_items : RollingReport
        Against the others.

    See Also
    --------
    prequential_evaluate : Makes one.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_micro.baselines import PopularityRecommender
    >>> from sklearn_micro.model_selection import prequential_evaluate
    >>> train = np.array([[1, 10, 0], [2, 10, 0], [2, 11, 0]])
    >>> test = np.array([[1, 12, 1], [3, 12, 1], [4, 10, 1]])
    >>> report = prequential_evaluate(PopularityRecommender().fit(train), test,
    ...                               batch_size=1, time=[0, 1, 2], m_values=1)
    >>> len(report.all), len(report.new_items), len(report.old_items)
    (3, 2, 1)
    """

    all: RollingReport
    new_items: RollingReport
    old_items: RollingReport


def _check(batch_size, mode, m_values):
    if not isinstance(batch_size, Integral) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1; got {batch_size!r}.")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}; got {mode!r}.")
    return check_m_values(m_values)


def _replay_order(log: EngagementLog, rows: np.ndarray, time, rng) -> np.ndarray:
    """A chunk's rows in the order they happened: by ``time`` (ties in log order), or a
    shuffle drawn from ``rng`` where the log has no times."""
    if time is None:
        return rows[rng.permutation(rows.shape[0])]
    return rows[np.argsort(time[rows], kind="stable")]


def _histories(user, seen_user, seen_item):
    """Each of ``user``'s items among the engagements (``seen_user``, ``seen_item``) so far
    in the chunk, as `recommend`'s ``history`` lists."""
    order = np.argsort(seen_user, kind="stable")
    lo = np.searchsorted(seen_user[order], user, side="left")
    hi = np.searchsorted(seen_user[order], user, side="right")
    items = seen_item[order]
    return [items[a:b].tolist() for a, b in zip(lo, hi, strict=True)]


def prequential_evaluate(estimator, X_test, *, batch_size: int = 1000, mode: str = "live",
                         time=None, m_values=(10, 25, 50, 100), exclude_seen: bool = False,
                         random_state=0, copy: bool = True) -> PrequentialReport:
    """Score a fitted recommender by replaying each test chunk in time order.

    For each chunk of ``X_test`` in increasing order, its engagements are taken in time
    order (by ``time``, or, without it, in a shuffle seeded by ``random_state``: within a
    chunk a log has no order of its own) and cut into batches of ``batch_size``. Each
    batch's users are scored before the batch is seen, against their own distinct items
    of the batch: what each user engages next, at the moment the answer would be served.
    With ``mode="live"`` the batch is then observed (``observe``); at the chunk's end the
    recommender takes the whole chunk with ``partial_fit``.

    Parameters
    ----------
    estimator : recommender or Pipeline whose last step is a recommender
        Fitted on the chunks before ``X_test``.
    X_test : engagement log
        The test engagements; every chunk must be later than the recommender's latest.
    batch_size : int, default=1000
        Engagements per batch.
    mode : {"chunk", "users", "live"}, default="live"
        What a batch is ranked from: "chunk", the closed chunks alone (the rolling
        protocol at the granularity of engagements); "users", the closed chunks and each
        user's own earlier engagements of the chunk, passed as ``history`` (the model
        unchanged); "live", the closed chunks and every earlier engagement of the chunk,
        observed (``observe``: new items reach other users).
    time : array-like of shape (n_engagements,), optional
        When each engagement of ``X_test`` happened (any sortable numbers).
    m_values : int or sequence of int, default=(10, 25, 50, 100)
        Cut-offs M of the metrics.
    exclude_seen : bool, default=False
        Passed to ``recommend``.
    random_state : int, default=0
        Seeds the order within chunks where ``time`` is not given.
    copy : bool, default=True
        Evaluate a deep copy, leaving ``estimator`` as it was.

    Returns
    -------
    report : PrequentialReport
        `RollingReport` s of the (user, batch) points: against all their items, the items
        new in the chunk, and the others; each point carries its chunk, and ``warm`` tells
        users the recommender had taken engagements of before the chunk.

    See Also
    --------
    sklearn_micro.model_selection.rolling_evaluate : The chunk-level protocol.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_micro.baselines import PopularityRecommender
    >>> from sklearn_micro.model_selection import prequential_evaluate
    >>> train = np.array([[1, 10, 0], [2, 10, 0], [2, 11, 0]])
    >>> test = np.array([[1, 12, 1], [3, 12, 1], [4, 12, 1], [2, 12, 1], [5, 12, 1]])
    >>> time = [0, 1, 2, 3, 4]
    >>> live = prequential_evaluate(PopularityRecommender().fit(train), test, batch_size=3,
    ...                             time=time, m_values=1)
    >>> chunk = prequential_evaluate(PopularityRecommender().fit(train), test,
    ...                              batch_size=3, time=time, m_values=1, mode="chunk")
    >>> float(live.all.overall()["recall@1"]), float(chunk.all.overall()["recall@1"])
    (0.4, 0.0)
    """
    ks = _check(batch_size, mode, m_values)
    log = check_log(X_test, input_name="X_test")
    if time is not None:
        time = np.asarray(time)
        if time.shape != (len(log),):
            raise ValueError(f"time must have one value per engagement of X_test "
                             f"({len(log)}); got shape {time.shape}.")
    model = copy_module.deepcopy(estimator) if copy else estimator
    rec = final_step(model)
    if not hasattr(rec, "recommend"):
        raise TypeError("estimator must be a recommender or a Pipeline whose last step is "
                        f"one; got {type(rec).__name__}.")
    if mode == "live" and not hasattr(rec, "observe"):
        raise TypeError(f"mode='live' needs a recommender with observe; "
                        f"{type(rec).__name__} has none.")
    latest = int(rec.latest_chunk_)
    if int(log.chunk.min()) <= latest:
        raise ValueError(f"X_test starts at chunk {int(log.chunk.min())}, not after chunk "
                         f"{latest}, the latest the estimator has taken.")
    names = [f"{name}@{k}" for name in METRICS for k in ks.tolist()]
    sums = {part: MetricSums(names) for part in ("all", "new_items", "old_items")}
    rng = np.random.default_rng(random_state)
    for chunk, rows in iter_chunks(log.chunk):
        rec = final_step(model)
        known_items = rec.item_ids_
        order = _replay_order(log, rows, time, rng)
        for lo in range(0, order.shape[0], batch_size):
            batch = log.take(order[lo:lo + batch_size])
            users, items, _, indptr, i = chunk_relevant(batch)
            warm = is_warm(rec, users)
            history = None
            if mode == "users":
                before = log.take(order[:lo])
                history = _histories(users, before.user, before.item)
            top = rec.recommend(users, int(ks[-1]), exclude_seen=exclude_seen,
                                history=history)
            new = known_items.lookup(items) < 0
            row = np.repeat(np.arange(users.shape[0]), np.diff(indptr))
            for part, keep in (("all", np.ones(i.shape[0], bool)), ("new_items", new[i]),
                               ("old_items", ~new[i])):
                # the rows with relevant items of this kind, and those items
                counts = np.bincount(row[keep], minlength=users.shape[0])
                has = counts > 0
                if not has.any():
                    continue
                p_ptr = np.zeros(int(has.sum()) + 1, np.int64)
                np.cumsum(counts[has], out=p_ptr[1:])
                got = list_scores(top[0][has], top[1][has], items, p_ptr,
                                  i[keep].astype(np.int64), ks)
                sums[part].add(int(chunk), users[has], warm[has],
                               np.column_stack([got[name] for name in names]))
            if mode == "live":
                rec.observe(batch)
        partial_fit_through(model, log.take(rows))
    return PrequentialReport(**{part: RollingReport(None, names, sums=value)
                                for part, value in sums.items()})


class PrequentialScorer:
    """Scorer running `prequential_evaluate` on a deep copy: ``scorer(estimator, X)``.

    It returns a dict of the overall means over (user, batch) points, for `GridSearchCV`
    and `cross_validate`. Made by `make_prequential_scorer`, which validates the
    parameters.

    Parameters
    ----------
    m_values : int or sequence of int, default=(10, 25, 50, 100)
        Cut-offs M.
    batch_size : int, default=1000
        Engagements per batch.
    mode : {"chunk", "users", "live"}, default="live"
        What a batch is ranked from, as in `prequential_evaluate`.
    exclude_seen : bool, default=False
        Passed to ``recommend``.
    random_state : int, default=0
        Seeds the order within chunks.

    See Also
    --------
    make_prequential_scorer : Makes a `PrequentialScorer`.

    Examples
    --------
    >>> from sklearn_micro.model_selection import make_prequential_scorer
    >>> make_prequential_scorer(m_values=10, batch_size=100).mode
    'live'
    """

    def __init__(self, m_values=(10, 25, 50, 100), *, batch_size: int = 1000,
                 mode: str = "live", exclude_seen: bool = False, random_state=0):
        self.m_values = m_values
        self.batch_size = batch_size
        self.mode = mode
        self.exclude_seen = exclude_seen
        self.random_state = random_state

    def __call__(self, estimator, X, y=None) -> dict[str, float]:
        report = prequential_evaluate(estimator, X, batch_size=self.batch_size,
                                      mode=self.mode, m_values=self.m_values,
                                      exclude_seen=self.exclude_seen,
                                      random_state=self.random_state, copy=True)
        return {name: float(value) for name, value in report.all.overall().items()}

    def __repr__(self) -> str:
        return (f"make_prequential_scorer(m_values={self.m_values!r}, batch_size="
                f"{self.batch_size!r}, mode={self.mode!r}, exclude_seen="
                f"{self.exclude_seen!r}, random_state={self.random_state!r})")


def make_prequential_scorer(m_values=(10, 25, 50, 100), *, batch_size: int = 1000,
                            mode: str = "live", exclude_seen: bool = False,
                            random_state=0) -> PrequentialScorer:
    """A multi-metric scorer of the prequential protocol, for `GridSearchCV`.

    The scorer returns the overall means (keys like ``"recall@100"``) of a deep copy's
    evaluation over the test rows, so the estimator it is given is left as it was.

    Parameters
    ----------
    m_values : int or sequence of int, default=(10, 25, 50, 100)
        Cut-offs M.
    batch_size : int, default=1000
        Engagements per batch.
    mode : {"chunk", "users", "live"}, default="live"
        What a batch is ranked from, as in `prequential_evaluate`.
    exclude_seen : bool, default=False
        Passed to ``recommend``.
    random_state : int, default=0
        Seeds the order within chunks.

    Returns
    -------
    scorer : PrequentialScorer
        A callable ``scorer(estimator, X, y=None)`` returning a dict of floats.

    See Also
    --------
    prequential_evaluate : The protocol the scorer runs.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_micro.baselines import PopularityRecommender
    >>> from sklearn_micro.model_selection import make_prequential_scorer
    >>> train = np.array([[1, 10, 0], [2, 10, 0], [2, 11, 0]])
    >>> test = np.array([[1, 12, 1], [3, 12, 1], [4, 12, 1], [2, 12, 1], [5, 12, 1]])
    >>> scorer = make_prequential_scorer(m_values=1, batch_size=1)
    >>> scorer(PopularityRecommender().fit(train), test)["recall@1"] > 0
    True
    """
    _check(batch_size, mode, m_values)
    return PrequentialScorer(m_values, batch_size=batch_size, mode=mode,
                             exclude_seen=exclude_seen, random_state=random_state)
