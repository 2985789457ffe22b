import math
import pickle

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, cross_validate
from sklearn.pipeline import Pipeline

import sklearn_micro.model_selection._chunk_scores as _chunk_scores
import sklearn_micro.model_selection._rolling_report as _rolling_report
from sklearn_micro._log import check_log, iter_chunks
from sklearn_micro.baselines import (
    ANNRecommender,
    PopularityRecommender,
    RecentItemsRecommender,
)
from sklearn_micro.metrics import ranking_metrics
from sklearn_micro.model_selection import (
    ChunkSplit,
    RollingEvaluation,
    RollingReport,
    make_rolling_scorer,
    rolling_evaluate,
)
from sklearn_micro.utils.estimator_checks import FixedEmbedder, make_log


def frame(rows):
    return pd.DataFrame(rows, columns=["user", "item", "chunk"])


# -- ChunkSplit ----------------------------------------------------------------------------


def chunk_log(chunks, seed=0):
    rng = np.random.default_rng(seed)
    chunk = rng.permutation(np.repeat(chunks, 3))
    return np.column_stack([rng.integers(0, 5, chunk.size), rng.integers(0, 5, chunk.size),
                            chunk])


@pytest.mark.parametrize("kind", ["array", "frame"])
@pytest.mark.parametrize(
    "params",
    [{}, {"n_splits": 2, "test_chunks": 2}, {"test_chunks": None}, {"gap": 1},
     {"n_splits": 1, "min_train_chunks": 5}],
)
def test_chunk_split_moves_forward_in_time(kind, params):
    X = chunk_log([0, 1, 2, 3, 4, 7, 9, 10])
    if kind == "frame":
        X = frame(X)
    chunk = np.asarray(X)[:, 2]
    cv = ChunkSplit(**params)
    folds = list(cv.split(X))
    assert len(folds) == cv.get_n_splits() == cv.get_n_splits(X)
    previous_test_start = -np.inf
    test_chunks = params.get("test_chunks", 1)
    for train, test in folds:
        assert train.size and test.size
        assert chunk[train].max() < chunk[test].min()
        assert previous_test_start < chunk[test].min()
        previous_test_start = chunk[test].min()
        if test_chunks is not None:
            assert np.unique(chunk[test]).size == test_chunks
        # the training set is every row up to its last chunk
        assert_array_equal(train, np.flatnonzero(chunk <= chunk[train].max()))
    last_train, last_test = folds[-1]
    assert chunk[last_test].max() == chunk.max()


def test_chunk_split_known_folds():
    X = chunk_log([0, 1, 2, 3, 4, 5])
    chunk = X[:, 2]
    # test chunks 2-3, then 4-5; one chunk of gap before each
    folds = list(ChunkSplit(n_splits=2, test_chunks=2, gap=1).split(X))
    assert [np.unique(chunk[te]).tolist() for _, te in folds] == [[2, 3], [4, 5]]
    assert [np.unique(chunk[tr]).tolist() for tr, _ in folds] == [[0], [0, 1, 2]]
    folds = list(ChunkSplit(n_splits=2, test_chunks=None, min_train_chunks=2).split(X))
    assert [np.unique(chunk[te]).tolist() for _, te in folds] == [[2, 3], [4, 5]]
    assert [np.unique(chunk[tr]).tolist() for tr, _ in folds] == [[0, 1], [0, 1, 2, 3]]
    folds = list(ChunkSplit(n_splits=3).split(X))
    assert [np.unique(chunk[te]).tolist() for _, te in folds] == [[3], [4], [5]]


def test_chunk_split_errors():
    X = chunk_log([0, 1, 2])
    with pytest.raises(ValueError, match="needs at least 4 distinct chunks; X has 3"):
        list(ChunkSplit(n_splits=3).split(X))
    with pytest.raises(ValueError, match="n_splits"):
        ChunkSplit(n_splits=0).get_n_splits()
    with pytest.raises(ValueError, match="test_chunks"):
        list(ChunkSplit(test_chunks=0).split(X))
    with pytest.raises(ValueError, match="chunk"):
        list(ChunkSplit().split(np.zeros((4, 2))))


def test_chunk_split_repr_and_log_input():
    assert "ChunkSplit(gap=0, min_train_chunks=1, n_splits=3, test_chunks=1)" == repr(
        ChunkSplit()
    )
    X = chunk_log([0, 1, 2, 3])
    a = [t.tolist() for _, t in ChunkSplit().split(X)]
    b = [t.tolist() for _, t in ChunkSplit().split(check_log(X))]
    assert a == b


# -- rolling_evaluate ----------------------------------------------------------------------

TRAIN = frame([(1, 10, 0), (2, 10, 0), (2, 11, 0)])
TEST = frame([(1, 10, 1), (3, 12, 1), (1, 12, 2), (2, 12, 2), (2, 12, 2)])


def test_rolling_evaluate_known_answer():
    rec = PopularityRecommender().fit(TRAIN)
    report = rolling_evaluate(rec, TEST, m_values=(1, 2))
    points = report.points
    assert list(points.columns[:4]) == ["chunk", "user", "warm", "n_relevant"]
    assert_array_equal(points.chunk, [1, 1, 2, 2])
    assert_array_equal(points.user, [1, 3, 1, 2])
    assert_array_equal(points.warm, [True, False, True, True])
    assert_array_equal(points.n_relevant, [1, 1, 1, 1])
    # chunk 1 is scored with chunk 0's popularity [10, 11]; chunk 2 with chunk 1's [10, 12]
    assert_allclose(points["recall@1"], [1, 0, 0, 0])
    assert_allclose(points["recall@2"], [1, 0, 1, 1])
    assert_allclose(points["mrr@2"], [1, 0, 0.5, 0.5])
    assert_allclose(points["ndcg@2"], [1, 0, 1 / math.log2(3), 1 / math.log2(3)])
    overall = report.overall()
    assert_allclose(overall["recall@2"], 0.75)
    assert_allclose(overall["recall@1"], 0.25)
    by_warm = report.overall(by_warm=True)
    assert_allclose(by_warm.loc["warm", "recall@2"], 1)
    assert_allclose(by_warm.loc["cold", "recall@2"], 0)
    assert_array_equal(by_warm["n_points"], [4, 3, 1])
    per_chunk = report.per_chunk()
    assert_allclose(per_chunk["recall@2"], [0.5, 1])
    assert_array_equal(per_chunk.index, [1, 2])
    assert_allclose(report.per_user()["recall@2"], 2 / 3)
    assert_allclose(report.per_user(by_user=True)["recall@2"], [1, 1, 0])
    table = report.to_frame()
    assert list(table.index) == ["overall", "overall (warm)", "overall (cold)", "per-user"]
    assert_allclose(table.loc["per-user", "recall@2"], 2 / 3)
    text = report.summary()
    assert "recall@2" in text and "0.7500" in text and "4 (user, chunk) points" in text
    assert "RollingReport" in repr(report)
    assert len(report) == 4


def test_rolling_evaluate_copies_unless_told():
    rec = PopularityRecommender().fit(TRAIN)
    before = pickle.dumps(rec)
    rolling_evaluate(rec, TEST)
    assert pickle.dumps(rec) == before
    rolling_evaluate(rec, TEST, copy=False)
    assert rec.latest_chunk_ == 2
    assert pickle.dumps(rec) == pickle.dumps(PopularityRecommender().fit(TRAIN).partial_fit(TEST))


def test_rolling_evaluate_is_recommend_then_partial_fit():
    X_train, X_test = make_log(as_frame=True)
    rec = RecentItemsRecommender(window=2).fit(X_train)
    report = rolling_evaluate(rec, X_test, m_values=(5, 20), exclude_seen=True)
    manual = clone(rec).fit(X_train)
    expected = []
    for c in sorted(X_test.chunk.unique()):
        rows = X_test[X_test.chunk == c]
        users = np.unique(rows.user)
        items, _ = manual.recommend(users, 20, exclude_seen=True)
        relevant = [set(rows.item[rows.user == u]) for u in users]
        expected.append(ranking_metrics(items, relevant, ks=(5, 20)))
        manual.partial_fit(rows)
    for name in report.metric_names:
        assert_allclose(report.points[name], np.concatenate([e[name] for e in expected]))


def test_rolling_evaluate_blocks_users(monkeypatch):
    X_train, X_test = make_log(as_frame=True)
    rec = PopularityRecommender(window=2).fit(X_train)
    expected = rolling_evaluate(rec, X_test).points
    monkeypatch.setattr(_chunk_scores, "USER_BLOCK", 3)
    pd.testing.assert_frame_equal(rolling_evaluate(rec, X_test).points, expected)


def test_rolling_evaluate_pipeline_and_string_ids():
    X_train, X_test = make_log(as_frame=True)

    def to_str(X):
        return X.assign(user="u" + X.user.astype(str), item="i" + X.item.astype(str))

    pipe = Pipeline([("embed", FixedEmbedder()), ("ann", ANNRecommender(method="exact"))])
    pipe.fit(to_str(X_train))
    before = pickle.dumps(pipe)
    report = rolling_evaluate(pipe, to_str(X_test), progress=True)
    assert pickle.dumps(pipe) == before
    assert report.points.user.iloc[0].startswith("u")
    values = report.points[report.metric_names].to_numpy()
    assert ((values >= 0) & (values <= 1)).all()
    assert report.points.warm.any() and not report.points.warm.all()


def test_rolling_evaluate_padding_is_never_a_hit_and_ids_of_any_kind_agree():
    # numeric ids are looked up among each user's relevant ids, other ids among the chunk's
    # items; padding (-1 with score -inf) must not count for an item whose id is -1
    train = frame([[1, 10, 0], [2, 11, 0], [2, 10, 0]])
    test = frame([[1, -1, 1], [2, 10, 1], [2, -1, 1], [3, 11, 1]])
    rec = PopularityRecommender().fit(train)
    assert_array_equal(rec.recommend([1], 4)[0], [[10, 11, -1, -1]])
    points = rolling_evaluate(rec, test, m_values=(4,)).points
    assert_allclose(points["recall@4"], [0, 0.5, 1])
    assert_allclose(points["mrr@4"], [0, 1, 0.5])

    X_train, X_test = make_log(as_frame=True)

    def to_str(X):
        return X.assign(item="i" + X.item.astype(str))

    rec = RecentItemsRecommender(window=2).fit(X_train)
    numeric = rolling_evaluate(rec, X_test, m_values=(5, 20)).points
    strings = rolling_evaluate(clone(rec).fit(to_str(X_train)), to_str(X_test),
                               m_values=(5, 20)).points
    assert numeric["recall@20"].sum() > 0
    pd.testing.assert_frame_equal(numeric, strings)


def _random_log(seed, n=20_000):
    rng = np.random.default_rng(seed)
    log = np.column_stack([rng.integers(0, 300, n), rng.zipf(1.3, n) % 200,
                           rng.integers(0, 10, n)])
    return log[log[:, 2] < 6], log[log[:, 2] >= 6]


def test_intervals_match_the_textbook_formulas():
    train, test = _random_log(0)
    report = rolling_evaluate(PopularityRecommender().fit(train), test, m_values=(10,))
    z = 1.959963984540054
    # per user: the normal interval of a mean of the users' means
    by_user = report.per_user(by_user=True)["recall@10"].to_numpy()
    table = report.intervals(aggregate="per_user", level=0.95)
    half = z * by_user.std(ddof=1) / np.sqrt(by_user.size)
    assert_allclose(table.loc["recall@10", "mean"], by_user.mean())
    assert_allclose(table.loc["recall@10", ["low", "high"]],
                    [by_user.mean() - half, by_user.mean() + half])
    # overall: the ratio's linearized error, close to a bootstrap of the users
    points = report.points
    table = report.intervals()
    assert_allclose(table["mean"], report.overall()[report.metric_names])
    sums = points.groupby("user")["mrr@10"].sum().to_numpy()
    counts = points.groupby("user").size().to_numpy()
    rng = np.random.default_rng(1)
    draws = rng.integers(0, sums.size, (2000, sums.size))
    boot = sums[draws].sum(axis=1) / counts[draws].sum(axis=1)
    half = (table.loc["mrr@10", "high"] - table.loc["mrr@10", "low"]) / 2
    assert half == pytest.approx(z * boot.std(), rel=0.1)
    assert table.loc["mrr@10", "low"] < table.loc["mrr@10", "mean"] < table.loc["mrr@10", "high"]
    # one point per user: the interval of a mean of independent points
    once = points.drop_duplicates("user")
    single = RollingReport({c: once[c].to_numpy() for c in once.columns}, report.metric_names)
    values = once["recall@10"].to_numpy()
    wide = single.intervals(level=0.9)
    z90 = 1.6448536269514722
    assert_allclose(wide.loc["recall@10", "high"] - wide.loc["recall@10", "mean"],
                    z90 * values.std(ddof=1) / np.sqrt(values.size))


def test_compare_is_paired_by_user():
    train, test = _random_log(2)
    a = rolling_evaluate(PopularityRecommender().fit(train), test, m_values=(5, 10))
    b = rolling_evaluate(PopularityRecommender(window=3).fit(train), test, m_values=(10,))
    table = a.compare(b)
    assert list(table.index) == ["recall@10", "mrr@10", "ndcg@10"]  # the shared metrics
    for name in table.index:
        diff = a.overall()[name] - b.overall()[name]
        assert_allclose(table.loc[name, "difference"], diff)
        assert_allclose(table.loc[name, "relative"], diff / b.overall()[name])
        assert table.loc[name, "low"] <= diff <= table.loc[name, "high"]
        # pairing removes the users' shared noise: narrower than the two intervals apart
        ia, ib = a.intervals().loc[name], b.intervals().loc[name]
        unpaired = np.hypot(ia.high - ia["mean"], ib.high - ib["mean"])
        assert table.loc[name, "high"] - table.loc[name, "difference"] < unpaired
    # the relative difference's interval counts the uncertainty of both means: as wide as
    # a bootstrap of the users, against a method far from a's (where the difference's
    # interval over the other's mean would be much too narrow)
    points_a = a.points
    far_points = {c: points_a[c].to_numpy() for c in ("chunk", "user", "warm", "n_relevant")}
    far_points["recall@10"] = np.random.default_rng(5).uniform(0, 0.2, len(points_a))
    far = RollingReport(far_points, ["recall@10"])
    row = a.compare(far).loc["recall@10"]
    sums_a = points_a.groupby("user")["recall@10"].sum().to_numpy()
    sums_far = far.points.groupby("user")["recall@10"].sum().to_numpy()
    draws = np.random.default_rng(4).integers(0, sums_a.size, (2000, sums_a.size))
    boot = sums_a[draws].sum(axis=1) / sums_far[draws].sum(axis=1) - 1
    assert_allclose(row["relative"], sums_a.sum() / sums_far.sum() - 1)
    half = (row["relative_high"] - row["relative_low"]) / 2
    assert half == pytest.approx(1.959963984540054 * boot.std(), rel=0.1)
    assert half > 1.2 * (row["high"] - row["difference"]) / far.overall()["recall@10"]
    per_user = a.compare(b, aggregate="per_user")
    assert_allclose(per_user.loc["recall@10", "difference"],
                    a.per_user()["recall@10"] - b.per_user()["recall@10"])
    same = a.compare(a)
    assert_allclose(same[["difference", "low", "high"]].to_numpy(), 0)


def test_intervals_and_compare_errors():
    train, test = _random_log(3)
    a = rolling_evaluate(PopularityRecommender().fit(train), test, m_values=(10,))
    other = rolling_evaluate(PopularityRecommender().fit(train), test[test[:, 2] < 9],
                             m_values=(10,))
    with pytest.raises(ValueError, match="same .user, chunk. points"):
        a.compare(other)
    with pytest.raises(ValueError, match="share no metric"):
        a.compare(rolling_evaluate(PopularityRecommender().fit(train), test, m_values=(5,)))
    with pytest.raises(TypeError, match="RollingReport"):
        a.compare(a.points)
    for level in (0, 1, 1.5, "high", True):
        with pytest.raises(ValueError, match="level must be a number in .0, 1.; got"):
            a.intervals(level=level)
    with pytest.raises(ValueError, match="aggregate must be"):
        a.intervals(aggregate="mean")
    assert_allclose(a.intervals(level=np.float32(0.9))["low"], a.intervals(level=0.9)["low"])
    lonely = RollingReport({"chunk": np.array([1]), "user": np.array([4]),
                            "warm": np.array([True]), "n_relevant": np.array([1]),
                            "recall@1": np.array([1.0])}, ["recall@1"])
    assert np.isnan(lonely.intervals().loc["recall@1", "low"])


def test_rolling_evaluate_without_pandas(monkeypatch):
    monkeypatch.setattr(_rolling_report, "_pandas", lambda: None)
    report = rolling_evaluate(PopularityRecommender().fit(TRAIN), TEST.to_numpy(),
                              m_values=2)
    assert isinstance(report.points, dict)
    assert_array_equal(report.points["user"], [1, 3, 1, 2])
    assert_allclose(report.overall()["recall@2"], 0.75)
    assert_allclose(report.per_chunk()["recall@2"], [0.5, 1])
    assert_allclose(report.per_user()["recall@2"], 2 / 3)
    assert_allclose(report.overall(by_warm=True)["recall@2"], [0.75, 1, 0])
    table = report.to_frame()
    assert_allclose(table["recall@2"], [0.75, 1, 0, 2 / 3])
    assert "per-user" in report.summary()
    intervals = report.intervals()
    assert list(intervals["metric"]) == report.metric_names
    assert_allclose(intervals["mean"], list(report.overall().values()))
    compared = report.compare(report)
    assert_allclose(compared["difference"], 0)
    from sklearn_micro.experiment import comparison_table, results_table

    reports = {"a": report, "b": report}
    assert "| a | 0.750 ± " in results_table(reports, (2,), intervals=True)
    assert "| b | +0.0% [+0.0%, +0.0%] |" in comparison_table(reports, "a", ["recall@2"])
    points = report.points
    zero = RollingReport({**{c: points[c] for c in ("chunk", "user", "warm", "n_relevant")},
                          "recall@2": np.zeros(4)}, ["recall@2"])
    assert "| zero | n/a (a mean of 0) |" in comparison_table({"a": report, "zero": zero}, "a",
                                                                ["recall@2"])


def test_rolling_evaluate_errors():
    rec = PopularityRecommender().fit(TEST)
    with pytest.raises(ValueError, match="X_test starts at chunk 1, not after chunk 2"):
        rolling_evaluate(rec, TEST)
    with pytest.raises(ValueError, match="empty"):
        rolling_evaluate(rec, TEST.iloc[:0])
    with pytest.raises(ValueError, match="m_values"):
        rolling_evaluate(PopularityRecommender().fit(TRAIN), TEST, m_values=0)
    with pytest.raises(TypeError, match="recommender"):
        rolling_evaluate(Pipeline([("embed", FixedEmbedder())]).fit(TRAIN), TEST)


def test_report_is_constructible():
    report = RollingReport(
        {"chunk": np.array([3]), "user": np.array([7]), "warm": np.array([True]),
         "n_relevant": np.array([2]), "recall@5": np.array([0.5])},
        ["recall@5"],
    )
    assert report.overall()["recall@5"] == 0.5


# -- scorers and GridSearchCV ------------------------------------------------------------


def test_scorer_returns_means_and_leaves_the_estimator_alone():
    rec = PopularityRecommender().fit(TRAIN)
    before = pickle.dumps(rec)
    scorer = make_rolling_scorer(m_values=(1, 2))
    scores = scorer(rec, TEST)
    assert pickle.dumps(rec) == before
    assert list(scores) == [f"{m}@{k}" for m in ("recall", "mrr", "ndcg") for k in (1, 2)]
    assert all(isinstance(v, float) for v in scores.values())
    assert_allclose(scores["recall@2"], 0.75)
    per_user = make_rolling_scorer(m_values=2, metrics="recall", aggregate="per_user")
    assert per_user(rec, TEST) == {"recall@2": pytest.approx(2 / 3)}
    assert "aggregate='per_user'" in repr(per_user)


@pytest.mark.parametrize(
    "kwargs, match",
    [({"metrics": ["map"]}, "metrics"), ({"aggregate": "mean"}, "aggregate"),
     ({"m_values": [0]}, "m_values")],
)
def test_make_rolling_scorer_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_rolling_scorer(**kwargs)


def test_grid_search_over_the_window():
    X, _ = make_log(n_chunks=8, n_train=8, as_frame=True)
    scorer = make_rolling_scorer()
    search = GridSearchCV(
        PopularityRecommender(), {"window": [1, 2, 4]}, cv=ChunkSplit(n_splits=2,
                                                                        test_chunks=2,
                                                                        min_train_chunks=3),
        scoring=scorer, refit="recall@100",
    )
    search.fit(X)
    results = search.cv_results_
    assert "mean_test_recall@100" in results and "mean_test_ndcg@10" in results
    # the scores are those of the rolling protocol on each fold, by hand
    cv = ChunkSplit(n_splits=2, test_chunks=2, min_train_chunks=3)
    for j, params in enumerate(results["params"]):
        by_hand = []
        for train, test in cv.split(X):
            est = PopularityRecommender(**params).fit(X.iloc[train])
            by_hand.append(rolling_evaluate(est, X.iloc[test]).overall()["recall@100"])
        assert_allclose(results["mean_test_recall@100"][j], np.mean(by_hand))
    best = np.argmax(results["mean_test_recall@100"])
    assert search.best_params_ == results["params"][best]
    # best_estimator_ is refitted on all of X and untouched by scoring
    expected = PopularityRecommender(**search.best_params_).fit(X)
    assert pickle.dumps(search.best_estimator_) == pickle.dumps(expected)
    before = pickle.dumps(search.best_estimator_)
    score = search.score(X[X.chunk == 7].assign(chunk=100))
    assert 0 <= score <= 1
    assert pickle.dumps(search.best_estimator_) == before


def test_cross_validate_with_a_pipeline():
    X_train, _ = make_log(n_chunks=6, n_train=6, as_frame=True)
    pipe = Pipeline([("embed", FixedEmbedder()), ("ann", ANNRecommender(method="exact"))])
    result = cross_validate(pipe, X_train, cv=ChunkSplit(n_splits=2),
                            scoring=make_rolling_scorer(m_values=(10,), metrics="recall"))
    assert result["test_recall@10"].shape == (2,)
    assert ((result["test_recall@10"] >= 0) & (result["test_recall@10"] <= 1)).all()


# -- aggregates without points, and the evaluation one chunk at a time ----------------------


def test_report_without_points_has_the_same_aggregates():
    X_train, X_test = make_log(as_frame=True)
    rec = RecentItemsRecommender(window=2).fit(X_train)
    full = rolling_evaluate(rec, X_test, m_values=(5, 20))
    sums = rolling_evaluate(rec, X_test, m_values=(5, 20), keep_points=False)
    assert len(sums) == len(full)
    points = full.points
    for name in full.metric_names:
        assert_allclose(sums.overall()[name], points[name].mean())
        assert_allclose(sums.per_chunk()[name], points.groupby("chunk")[name].mean())
        by_user = points.groupby("user")[name].mean()
        assert_allclose(sums.per_user(by_user=True)[name], by_user)
        assert_allclose(sums.per_user()[name], by_user.mean())
        warm = points[points.warm][name].mean()
        assert_allclose(sums.overall(by_warm=True).loc["warm", name], warm)
    assert_array_equal(sums.per_user(by_user=True)["n_points"],
                       points.groupby("user").size())
    assert sums.summary() == full.summary()
    with pytest.raises(ValueError, match="keep_points=True"):
        _ = sums.points


def test_rolling_evaluation_pickled_midway_gives_the_same_report():
    X_train, X_test = make_log(as_frame=True)
    log = check_log(X_test)
    chunks = [log.take(rows) for _, rows in iter_chunks(log.chunk)]
    whole = RollingEvaluation(RecentItemsRecommender(window=2).fit(X_train), m_values=(5, 20))
    for part in chunks:
        whole.step(part)
    halves = RollingEvaluation(RecentItemsRecommender(window=2).fit(X_train),
                               m_values=(5, 20))
    for part in chunks[:2]:
        halves.step(part)
    halves = pickle.loads(pickle.dumps(halves))
    assert halves.chunks_done == [int(c.chunk[0]) for c in chunks[:2]]
    with pytest.raises(ValueError, match="not after chunk"):
        halves.step(chunks[1])
    for part in chunks[2:]:
        halves.step(part)
    assert halves.report().summary() == whole.report().summary()
    pd.testing.assert_frame_equal(halves.report().per_user(by_user=True),
                                  whole.report().per_user(by_user=True))
    with pytest.raises(ValueError, match="one chunk"):
        whole.step(log)


def test_report_per_user_with_string_ids_of_growing_length():
    report = RollingReport(
        {"chunk": np.array([1, 2, 2]), "user": np.array(["b", "aa", "b"]),
         "warm": np.array([True, False, True]), "n_relevant": np.array([1, 1, 1]),
         "recall@5": np.array([1.0, 0.0, 0.5])},
        ["recall@5"],
    )
    table = report.per_user(by_user=True)
    assert list(table.index) == ["aa", "b"]
    assert_allclose(table["recall@5"], [0.0, 0.75])


# NNDescent compiles for about a minute on first use: with -m slow only (tests/conftest.py)
@pytest.mark.parametrize("method", ["exact", pytest.param("nndescent", marks=pytest.mark.slow)])
def test_ann_in_parallel_gives_the_same_report(method, monkeypatch):
    # small user blocks, so the exact search spreads blocks over threads
    import sklearn_micro.baselines._exact_search as exact_search

    monkeypatch.setattr(exact_search, "BLOCK_SCORES", 64)
    X_train, X_test = make_log(as_frame=True)
    reports = []
    for n_jobs in (1, 2):
        pipe = Pipeline([("embed", FixedEmbedder()),
                         ("ann", ANNRecommender(method=method, n_neighbors=5, random_state=0,
                                                n_jobs=n_jobs))]).fit(X_train)
        reports.append(rolling_evaluate(pipe, X_test, m_values=(5, 20)).points)
    pd.testing.assert_frame_equal(reports[0], reports[1])
