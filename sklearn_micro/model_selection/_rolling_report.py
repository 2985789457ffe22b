"""The report of a rolling evaluation: the metrics of its (user, chunk) points, their
aggregates over all points, per chunk and per user, and confidence intervals with users as
the independent unit.

`RollingReport` keeps sums per chunk and per user (`MetricSums`), which is all its
aggregates and intervals need; the points themselves only when asked for.
"""

from __future__ import annotations

from numbers import Real

import numpy as np

from .._log import iter_chunks

__all__ = ["MetricSums", "RollingReport"]


def _pandas():
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is optional
        return None
    return pd


class MetricSums:
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
    def from_points(cls, points, metric_names) -> MetricSums:
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
                 sums: MetricSums | None = None):
        self._points = points
        self.metric_names = list(metric_names)
        if sums is None:
            if points is None:
                raise ValueError("RollingReport needs points or sums; got neither.")
            sums = MetricSums.from_points(points, self.metric_names)
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
