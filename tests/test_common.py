"""scikit-learn's estimator checks, on every estimator of the package where they apply.

`GraphEmbedder` is left out: it takes an engagement log (user, item and chunk ids), not a
numeric matrix, so the checks' inputs mean nothing to it; tests/test_embedding.py tests it.

The recommenders (MiCRO and the baselines) run every check. Those that pass give them no
numeric matrix (cloning, parameters, tags, repr, errors before fit, refusing complex and
sparse input). The others fit on a float matrix of arbitrary width (blobs, 1 or 10 features,
NaN), which a recommender refuses: its X is an engagement log, integer (user, item, chunk)
ids. Each is listed below with the reason, as imbalanced-learn lists its own, and with the
check of tests/recommender_checks.py that tests the same property on an engagement log.
"""

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from sklearn_micro import MiCRO
from sklearn_micro.baselines import (
    ALSRecommender,
    ANNRecommender,
    PopularityRecommender,
    RecentItemsRecommender,
)
from sklearn_micro.cluster import SphericalKMeans

# check name -> one-line reason; SphericalKMeans currently passes every check.
EXPECTED_FAILED_CHECKS: dict[str, str] = {}

_NOT_A_LOG = "fits on a float matrix, not an engagement log of integer ids"

# check name -> one-line reason, for every recommender (the same for all of them)
RECOMMENDER_EXPECTED_FAILED: dict[str, str] = {
    "check_fit_score_takes_y": f"{_NOT_A_LOG}; a recommender has no score method",
    "check_estimators_overwrite_params":
        f"{_NOT_A_LOG}; check_fit_returns_self_and_keeps_params tests it on a log",
    "check_dont_overwrite_parameters":
        f"{_NOT_A_LOG}; check_fit_returns_self_and_keeps_params tests it on a log",
    "check_estimators_fit_returns_self":
        f"{_NOT_A_LOG}; check_fit_returns_self_and_keeps_params tests it on a log",
    "check_readonly_memmap_input": f"{_NOT_A_LOG}; check_fit_idempotent reads a read-only log",
    "check_n_features_in_after_fitting":
        "a log has no features: its three columns are ids, n_features_in_ means nothing",
    "check_n_features_in":
        "a log has no features: its three columns are ids, n_features_in_ means nothing",
    "check_positive_only_tag_during_fit":
        f"{_NOT_A_LOG}; negative ids are welcome (any int64, tweet ids are 64-bit)",
    "check_estimators_dtypes":
        f"{_NOT_A_LOG} (float32, int32 and int64 of 5 columns); integer logs of any width "
        "other than 3 are refused by check_refuses_what_is_not_a_log",
    "check_dtype_object": f"{_NOT_A_LOG}; string ids come in a DataFrame (check_string_ids)",
    "check_estimators_empty_data_messages":
        "a log of shape (n, 0) is refused by its shape, with a message that names X, the "
        "expected (n, 3) and the given shape, not scikit-learn's '0 feature(s)' wording",
    "check_pipeline_consistency":
        f"{_NOT_A_LOG}; check_batch_equals_single and check_fit_resets_and_clone test "
        "determinism on a log",
    "check_estimators_nan_inf":
        f"{_NOT_A_LOG}; NaN and inf in a log are refused by check_refuses_what_is_not_a_log",
    "check_estimators_pickle": f"{_NOT_A_LOG}; check_pickle_round_trip tests it on a log",
    "check_f_contiguous_array_estimator": f"{_NOT_A_LOG}",
    "check_methods_sample_order_invariance":
        f"{_NOT_A_LOG}; a recommender has no per-sample method (recommend is per user)",
    "check_methods_subset_invariance":
        f"{_NOT_A_LOG}; check_batch_equals_single tests subsets of users",
    "check_fit2d_1sample":
        "a one-row float matrix of 10 columns is refused by its width, not as 'one sample'",
    "check_fit2d_1feature":
        "a one-column matrix is refused by its width, not as '1 feature(s)'; "
        "check_refuses_what_is_not_a_log",
    "check_dict_unchanged": f"{_NOT_A_LOG}; check_recommend_leaves_state tests it on a log",
    "check_fit_idempotent": f"{_NOT_A_LOG}; check_fit_idempotent tests it on a log",
    "check_fit_check_is_fitted": f"{_NOT_A_LOG}; check_not_fitted and check_partial_fit_"
                                 "before_fit test fitted-ness on a log",
    "check_fit2d_predict1d": f"{_NOT_A_LOG}; a recommender has no predict",
}

RECOMMENDERS = [
    MiCRO(),
    PopularityRecommender(),
    RecentItemsRecommender(),
    ANNRecommender(),
    ALSRecommender(n_components=2, iterations=2),
]


def _expected_failed(estimator) -> dict[str, str]:
    if hasattr(estimator, "recommend"):
        return RECOMMENDER_EXPECTED_FAILED
    return EXPECTED_FAILED_CHECKS


@parametrize_with_checks(
    [
        SphericalKMeans(),
        SphericalKMeans(init="random", n_init=2, block_size=3, tol=0.0),
        *RECOMMENDERS,
    ],
    expected_failed_checks=_expected_failed,
    xfail_strict=True,
)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


@pytest.mark.parametrize("estimator", RECOMMENDERS, ids=lambda e: type(e).__name__)
def test_expected_failures_are_those_of_a_log(estimator):
    """Every expected failure is a check scikit-learn runs (no stale names)."""
    from sklearn.utils.estimator_checks import _yield_all_checks

    names = {getattr(c, "func", c).__name__ for c in _yield_all_checks(estimator, legacy=True)}
    assert set(RECOMMENDER_EXPECTED_FAILED) <= names
