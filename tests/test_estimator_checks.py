"""The recommender protocol's checks fail the recommenders that break the protocol, as
scikit-learn's ``test_estimator_checks.py`` does for its own checks."""

import numpy as np
import pytest

from sklearn_micro import PopularityRecommender, RecentItemsRecommender
from sklearn_micro.utils.estimator_checks import (
    SCORE_RTOL,
    _assert_same_ranking,
    check_batch_equals_single,
    check_chunks_at_once_equal_in_turn,
    check_fit_returns_self_and_keeps_params,
    check_recommend_leaves_state,
    check_recommender,
    check_refuses_older_chunk,
    check_rows_valid,
    make_log,
    recommender_checks,
)

X_TRAIN, X_NEXT = make_log()


def _answer(items, scores):
    return np.array([items]), np.array([scores], dtype=float)


def test_same_ranking_allows_swaps_among_ties_only():
    a = _answer([1, 2, 3, 4], [1.0, 0.5, 0.5, 0.1])
    tied = _answer([1, 3, 2, 4], [1.0, 0.5 + 1e-7, 0.5, 0.1])
    _assert_same_ranking(a, tied, SCORE_RTOL)
    apart = _answer([1, 3, 2, 4], [1.0, 0.5, 0.4, 0.1])
    for b in (apart, _answer([1, 2, 3, 4], [1.0, 0.5, 0.5, 0.2])):
        with pytest.raises(AssertionError):
            _assert_same_ranking(a, b, SCORE_RTOL)
    # a tie at the end of a full row may let another item in
    _assert_same_ranking(a, _answer([1, 2, 3, 5], [1.0, 0.5, 0.5, 0.1 + 1e-7]), SCORE_RTOL)
    with pytest.raises(AssertionError):
        _assert_same_ranking(a, _answer([1, 2, 5, 4], [1.0, 0.5, 0.5, 0.1]), SCORE_RTOL)
    # padding must agree, and 0 asks for equal arrays
    with pytest.raises(AssertionError, match="padded"):
        _assert_same_ranking(a, _answer([1, 2, 3, -1], [1.0, 0.5, 0.5, -np.inf]), SCORE_RTOL)
    with pytest.raises(AssertionError):
        _assert_same_ranking(a, tied, 0)


class _RecommendChangesState(PopularityRecommender):
    def recommend(self, users, m, *, exclude_seen=False):
        self.popular_counts_ = self.popular_counts_ + 1
        return super().recommend(users, m, exclude_seen=exclude_seen)


class _ScoresDependOnTheBatch(PopularityRecommender):
    def recommend(self, users, m, *, exclude_seen=False):
        items, scores = super().recommend(users, m, exclude_seen=exclude_seen)
        return items, scores + 1e-3 * len(users)


class _RepeatsItems(PopularityRecommender):
    def recommend(self, users, m, *, exclude_seen=False):
        items, scores = super().recommend(users, m, exclude_seen=exclude_seen)
        if m > 1:
            items[:, 1] = items[:, 0]
        return items, scores


class _TakesOlderChunks(PopularityRecommender):
    def partial_fit(self, X, y=None):
        self.latest_chunk_ = -1
        return super().partial_fit(X, y)


class _ForgetsAllButTheLastChunk(RecentItemsRecommender):
    def partial_fit(self, X, y=None):
        chunk = np.asarray(X)[:, 2]
        return super().partial_fit(np.asarray(X)[chunk == chunk.max()], y)


class _SetsAPublicAttribute(PopularityRecommender):
    def fit(self, X, y=None):
        self.fitted = True
        return super().fit(X, y)


@pytest.mark.parametrize("recommender, check", [
    (_RecommendChangesState, check_recommend_leaves_state),
    (_ScoresDependOnTheBatch, check_batch_equals_single),
    (_RepeatsItems, check_rows_valid),
    (_TakesOlderChunks, check_refuses_older_chunk),
    (_ForgetsAllButTheLastChunk, check_chunks_at_once_equal_in_turn),
    (_SetsAPublicAttribute, check_fit_returns_self_and_keeps_params),
], ids=lambda x: x.__name__)
def test_a_check_fails_a_recommender_that_breaks_it(recommender, check):
    with pytest.raises(AssertionError):
        check(recommender, X_TRAIN, X_NEXT)
    # the recommender it derives from passes
    check(recommender.__mro__[1], X_TRAIN, X_NEXT)


def test_check_recommender_takes_arrays_and_frames_and_known_names_only():
    X_train, X_next = make_log(seed=2, as_frame=True)
    check_recommender(lambda: RecentItemsRecommender(window=2), X_train, X_next)
    with pytest.raises(AssertionError):
        check_recommender(_RepeatsItems, *make_log(seed=2))
    with pytest.raises(ValueError, match="check_no_such_thing"):
        check_recommender(PopularityRecommender, expected_failed={"check_no_such_thing": ""})


def test_checks_are_named_and_bound_to_the_tolerance():
    names = [check.__name__ for check in recommender_checks()]
    assert len(names) == len(set(names)) == 21
    composed = {check.__name__: check for check in recommender_checks(score_rtol=0)
                if hasattr(check, "keywords")}
    assert set(composed) == {"check_batch_equals_single",
                             "check_chunks_at_once_equal_in_turn"}
    assert all(check.keywords == {"score_rtol": 0} for check in composed.values())
