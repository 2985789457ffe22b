import math

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.metrics import ndcg_score

from sklearn_micro.metrics import mrr_at, ndcg_at, ranking_metrics, recall_at


def reference(recommended, relevant, k):
    """The definitions, one query at a time."""
    relevant = set(relevant)
    if not relevant:
        return math.nan, math.nan, math.nan
    hits, first, dcg, counted = 0, 0, 0.0, set()
    for rank, item in enumerate(list(recommended)[:k], start=1):
        if item in relevant and item not in counted and item >= 0:
            counted.add(item)
            hits += 1
            first = first or rank
            dcg += 1 / math.log2(rank + 1)
    ideal = sum(1 / math.log2(r + 1) for r in range(1, min(len(relevant), k) + 1))
    return hits / len(relevant), (1 / first if first else 0.0), dcg / ideal


def test_hand_computed_case():
    rec = [[1, 2, 3, 4]]
    rel = [{2, 4, 9}]
    scores = ranking_metrics(rec, rel, ks=(1, 2, 4))
    assert_allclose(scores["recall@1"], [0])
    assert_allclose(scores["recall@2"], [1 / 3])
    assert_allclose(scores["recall@4"], [2 / 3])
    assert_allclose(scores["mrr@1"], [0])
    assert_allclose(scores["mrr@2"], [1 / 2])
    assert_allclose(scores["mrr@4"], [1 / 2])
    ideal2 = 1 + 1 / math.log2(3)
    ideal4 = 1 + 1 / math.log2(3) + 1 / 2
    assert_allclose(scores["ndcg@2"], [(1 / math.log2(3)) / ideal2])
    assert_allclose(scores["ndcg@4"], [(1 / math.log2(3) + 1 / math.log2(5)) / ideal4])
    assert list(scores) == [f"{m}@{k}" for m in ("recall", "mrr", "ndcg") for k in (1, 2, 4)]


def test_perfect_and_empty_rankings():
    scores = ranking_metrics([[7, 8, -1], [-1, -1, -1]], [{7, 8}, {7}], ks=3)
    assert_allclose(scores["recall@3"], [1, 0])
    assert_allclose(scores["mrr@3"], [1, 0])
    assert_allclose(scores["ndcg@3"], [1, 0])


def test_single_metric_functions():
    rec, rel = [[3, 1, 2], [4, 5, 6]], [{1, 2, 8, 9}, {6}]
    assert_allclose(recall_at(rec, rel, 2), [0.25, 0])
    assert_allclose(mrr_at(rec, rel, 3), [0.5, 1 / 3])
    assert_allclose(ndcg_at(rec, rel, 1), [0, 0])


def test_padding_never_hits():
    scores = ranking_metrics([[-1, 5]], [np.array([-1, 5])], ks=(1, 2))
    assert_allclose(scores["recall@1"], [0])
    assert_allclose(scores["recall@2"], [0.5])
    assert_allclose(scores["mrr@2"], [0.5])


def test_repeated_recommendation_counts_once():
    scores = ranking_metrics([[5, 5, 6]], [{5}], ks=3)
    assert_allclose(scores["recall@3"], [1])
    assert_allclose(scores["ndcg@3"], [1])


def test_repeated_relevant_items_count_once():
    a = ranking_metrics([[5, 6]], [np.array([5, 5, 7])], ks=2)
    b = ranking_metrics([[5, 6]], [{5, 7}], ks=2)
    for name in a:
        assert_allclose(a[name], b[name])


def test_queries_without_relevant_items_are_nan():
    scores = ranking_metrics([[1, 2], [1, 2]], [set(), {2}], ks=2)
    assert np.isnan(scores["recall@2"][0])
    assert np.isnan(scores["mrr@2"][0])
    assert np.isnan(scores["ndcg@2"][0])
    assert_allclose(scores["recall@2"][1], 1)


def test_cutoff_beyond_the_recommended_items():
    scores = ranking_metrics([[1, 2]], [{1, 2, 3, 4}], ks=(2, 10))
    assert_allclose(scores["recall@10"], [0.5])
    ideal = sum(1 / math.log2(r + 1) for r in range(1, 5))
    assert_allclose(scores["ndcg@10"], [(1 + 1 / math.log2(3)) / ideal])


def test_relevant_given_in_any_form():
    rec = np.array([[0, 3, 2], [4, 1, 0], [2, 2, 2]])
    sets = [{3, 4}, {0}, {1, 2, 4}]
    indptr = np.array([0, 2, 3, 6])
    items = np.array([4, 3, 0, 2, 4, 1])
    matrix = sp.csr_matrix((np.ones(6), items, indptr), shape=(3, 5))
    expected = ranking_metrics(rec, sets, ks=(1, 3))
    for relevant in (
        [np.array(sorted(s)) for s in sets],
        [list(s) for s in sets],
        (indptr, items),
        matrix,
        sp.csr_array(matrix),
    ):
        got = ranking_metrics(rec, relevant, ks=(1, 3))
        for name in expected:
            assert_allclose(got[name], expected[name])


def test_string_ids():
    scores = ranking_metrics(np.array([["a", "b", ""]]), [{"b", "z"}], ks=3)
    assert_allclose(scores["recall@3"], [0.5])
    assert_allclose(scores["mrr@3"], [0.5])


def test_metric_subset():
    scores = ranking_metrics([[1]], [{1}], ks=[5, 1], metrics=["ndcg"])
    assert list(scores) == ["ndcg@1", "ndcg@5"]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"recommended": [1, 2], "relevant": [{1}]}, "2-D"),
        ({"recommended": [[1, 2]], "relevant": [{1}, {2}]}, "match"),
        ({"recommended": [[1]], "relevant": [{1}], "ks": 0}, "ks"),
        ({"recommended": [[1]], "relevant": [{1}], "ks": [1.5]}, "ks"),
        ({"recommended": [[1]], "relevant": [{1}], "metrics": ["map"]}, "metrics"),
        ({"recommended": [[1]], "relevant": (np.array([0, 2]), np.array([1]))}, "indptr"),
    ],
)
def test_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ranking_metrics(**kwargs)


@pytest.mark.parametrize("k", [1, 3, 5, 20])
def test_ndcg_matches_sklearn(k):
    rng = np.random.default_rng(k)
    n, n_items = 40, 20
    y_score = rng.random((n, n_items))
    y_true = (rng.random((n, n_items)) < 0.2).astype(int)
    y_true[y_true.sum(axis=1) == 0, 0] = 1
    recommended = np.argsort(-y_score, axis=1)
    relevant = [np.flatnonzero(row) for row in y_true]
    ours = ndcg_at(recommended, relevant, k)
    assert_allclose(ours.mean(), ndcg_score(y_true, y_score, k=k))
    for q in range(5):
        assert_allclose(ours[q], ndcg_score(y_true[q : q + 1], y_score[q : q + 1], k=k))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(-1, 12), min_size=1, max_size=8),
            st.sets(st.integers(0, 12), max_size=6),
        ),
        min_size=1,
        max_size=6,
    ),
    st.lists(st.integers(1, 10), min_size=1, max_size=3, unique=True),
)
def test_matches_the_definitions(queries, ks):
    width = max(len(r) for r, _ in queries)
    recommended = np.full((len(queries), width), -1, np.int64)
    for q, (row, _) in enumerate(queries):
        recommended[q, : len(row)] = row
    relevant = [rel for _, rel in queries]
    scores = ranking_metrics(recommended, relevant, ks=ks)
    for k in ks:
        expected = np.array([reference(r, rel, k) for r, rel in zip(recommended, relevant,
                                                                     strict=True)])
        assert_allclose(scores[f"recall@{k}"], expected[:, 0])
        assert_allclose(scores[f"mrr@{k}"], expected[:, 1])
        assert_allclose(scores[f"ndcg@{k}"], expected[:, 2])
        finite = ~np.isnan(expected[:, 0])
        for name in ("recall", "mrr", "ndcg"):
            values = scores[f"{name}@{k}"][finite]
            assert ((values >= 0) & (values <= 1 + 1e-12)).all()


def test_recall_grows_with_the_cutoff():
    rng = np.random.default_rng(0)
    rec = rng.integers(0, 50, size=(200, 30))
    rel = [set(rng.integers(0, 50, size=rng.integers(1, 8)).tolist()) for _ in range(200)]
    scores = ranking_metrics(rec, rel, ks=(1, 5, 10, 30))
    for name in ("recall", "mrr"):
        stacked = np.vstack([scores[f"{name}@{k}"] for k in (1, 5, 10, 30)])
        assert (np.diff(stacked, axis=0) >= 0).all()


def test_many_queries_at_once():
    rng = np.random.default_rng(1)
    n = 200_000
    rec = rng.integers(0, 1000, size=(n, 100))
    indptr = np.arange(0, 3 * n + 1, 3)
    items = rng.integers(0, 1000, size=3 * n)
    scores = ranking_metrics(rec, (indptr, items), ks=(10, 100))
    assert scores["recall@100"].shape == (n,)
    assert_array_equal(np.isnan(scores["recall@100"]), False)
