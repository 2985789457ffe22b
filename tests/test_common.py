"""scikit-learn's estimator checks, on every estimator of the package.

`SphericalKMeans` passes all of them. `GraphEmbedder` and the recommenders (MiCRO and the
baselines) pass those that give them no numeric matrix (cloning, parameters and their
defaults, nothing set in ``__init__``, tags, repr, errors before fit, refusing complex and
sparse input). The others fit on a float matrix of arbitrary width (blobs, 1 or 10
features, NaN), which these estimators refuse: their X is an engagement log, integer (user,
item, chunk) ids. Each of those is listed below with its one-line reason, as
imbalanced-learn lists its own, and with the test of the same property on a log where the
property makes sense for one (the checks of `sklearn_micro.utils.estimator_checks` for the
recommenders, tests/test_embedding.py for GraphEmbedder).

scikit-learn's list of expected failures cannot say which exception a check must fail
with, so those checks are not marked as expected failures: each runs and must fail with
the log's own refusal, a ValueError that names X and the integer (n, 3) array it expects
(or scikit-learn's AssertionError about the wording of that ValueError). Anything else, a
break in cloning, parameters or pickling before the fit is reached, an error of another
type or message, fails the test.
"""

import re

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from sklearn_micro import MiCRO
from sklearn_micro.baselines import (
    ALSRecommender,
    ANNRecommender,
    ItemKNNRecommender,
    PopularityRecommender,
    RecentItemsRecommender,
    RP3betaRecommender,
)
from sklearn_micro.cluster import SphericalKMeans
from sklearn_micro.embedding import GraphEmbedder

_NOT_A_LOG = "fits on a float matrix, not an engagement log of integer ids"

# the refusal of a float matrix, and of an integer one whose width is not 3
_FLOATS = re.escape("X must be an integer array of shape (n, 3); got dtype float64.")
_WIDTH = (re.escape("X must be an integer array of shape (n, 3) with columns ['user', "
                    "'item', 'chunk']; got shape (") + r"\d+, (?!3\))\d+\)\.")

# check name -> (one-line reason, the refusal it ends in), for every recommender
RECOMMENDER_REFUSED: dict[str, tuple[str, str]] = {
    "check_fit_score_takes_y": (f"{_NOT_A_LOG}; a recommender has no score method", _FLOATS),
    "check_estimators_overwrite_params":
        (f"{_NOT_A_LOG}; check_fit_returns_self_and_keeps_params tests it on a log", _WIDTH),
    "check_dont_overwrite_parameters":
        (f"{_NOT_A_LOG}; check_fit_returns_self_and_keeps_params tests it on a log", _FLOATS),
    "check_estimators_fit_returns_self":
        (f"{_NOT_A_LOG}; check_fit_returns_self_and_keeps_params tests it on a log", _WIDTH),
    "check_readonly_memmap_input":
        (f"{_NOT_A_LOG}; check_fit_idempotent reads a read-only log", _WIDTH),
    "check_n_features_in_after_fitting":
        ("a log has no features: its three columns are ids, n_features_in_ means nothing",
         _WIDTH),
    "check_n_features_in":
        ("a log has no features: its three columns are ids, n_features_in_ means nothing",
         _WIDTH),
    "check_positive_only_tag_during_fit":
        (f"{_NOT_A_LOG}; negative ids are welcome (any int64, tweet ids are 64-bit)", _WIDTH),
    "check_estimators_dtypes":
        (f"{_NOT_A_LOG} (float32, int32 and int64 of 5 columns); integer logs of any width "
         "other than 3 are refused by check_refuses_what_is_not_a_log", _WIDTH),
    "check_dtype_object":
        (f"{_NOT_A_LOG}; string ids come in a DataFrame (check_string_ids)", _WIDTH),
    "check_estimators_empty_data_messages":
        ("a log of shape (n, 0) is refused by its shape, with a message that names X, the "
         "expected (n, 3) and the given shape, not scikit-learn's '0 feature(s)' wording",
         _WIDTH),
    "check_pipeline_consistency":
        (f"{_NOT_A_LOG}; check_batch_equals_single and check_fit_resets_and_clone test "
         "determinism on a log", _FLOATS),
    "check_estimators_nan_inf":
        (f"{_NOT_A_LOG}; NaN and inf in a log are refused by "
         "check_refuses_what_is_not_a_log", _FLOATS),
    "check_estimators_pickle":
        (f"{_NOT_A_LOG}; check_pickle_round_trip tests it on a log", _FLOATS),
    "check_f_contiguous_array_estimator": (_NOT_A_LOG, _FLOATS),
    "check_methods_sample_order_invariance":
        (f"{_NOT_A_LOG}; a recommender has no per-sample method (recommend is per user)",
         _FLOATS),
    "check_methods_subset_invariance":
        (f"{_NOT_A_LOG}; check_batch_equals_single tests subsets of users", _FLOATS),
    "check_fit2d_1sample":
        ("a one-row float matrix of 10 columns is refused by its width, not as 'one sample'",
         _WIDTH),
    "check_fit2d_1feature":
        ("a one-column matrix is refused by its width, not as '1 feature(s)'; "
         "check_refuses_what_is_not_a_log", _WIDTH),
    "check_dict_unchanged":
        (f"{_NOT_A_LOG}; check_recommend_leaves_state tests it on a log", _FLOATS),
    "check_fit_idempotent": (f"{_NOT_A_LOG}; check_fit_idempotent tests it on a log", _WIDTH),
    "check_fit_check_is_fitted":
        (f"{_NOT_A_LOG}; check_not_fitted and check_partial_fit_before_fit test fitted-ness "
         "on a log", _WIDTH),
    "check_fit2d_predict1d": (f"{_NOT_A_LOG}; a recommender has no predict", _FLOATS),
}

# GraphEmbedder: the same refusals, with the tests of tests/test_embedding.py, and those of
# the transformer checks
_EMBEDDER_TESTS = {
    "check_estimators_pickle": "test_pickle_round_trip",
    "check_fit_idempotent": "test_seeded_determinism",
    "check_pipeline_consistency": "test_seeded_determinism",
    "check_transformer_general": "test_transform_hands_on_an_embedded_log",
    "check_dtype_object": "test_string_ids_from_a_dataframe",
}
EMBEDDER_REFUSED: dict[str, tuple[str, str]] = {
    **{name: (_NOT_A_LOG + (f"; {_EMBEDDER_TESTS[name]} tests it on a log"
                            if name in _EMBEDDER_TESTS else ""), match)
       for name, (_, match) in RECOMMENDER_REFUSED.items()},
    "check_transformer_general":
        (f"{_NOT_A_LOG}; test_transform_hands_on_an_embedded_log tests it on a log", _FLOATS),
    "check_transformer_data_not_an_array": (_NOT_A_LOG, _FLOATS),
    "check_transformer_preserve_dtypes":
        (f"{_NOT_A_LOG}; its vectors are float32 whatever the log's integer dtype", _FLOATS),
}

RECOMMENDERS = [
    MiCRO(),
    PopularityRecommender(),
    RecentItemsRecommender(),
    ANNRecommender(),
    ALSRecommender(n_components=2, iterations=2),
    ItemKNNRecommender(),
    RP3betaRecommender(),
]
EMBEDDERS = [GraphEmbedder(n_components=2, iterations=2)]


def _refused(estimator) -> dict[str, tuple[str, str]]:
    if isinstance(estimator, GraphEmbedder):
        return EMBEDDER_REFUSED
    if hasattr(estimator, "recommend"):
        return RECOMMENDER_REFUSED
    return {}


def _check_name(check) -> str:
    return getattr(check, "func", check).__name__


def assert_refuses_the_matrix(check, estimator, match: str) -> None:
    """``check(estimator)`` fails with the log's refusal of scikit-learn's matrix: a
    ValueError whose message matches ``match``, raised as it is or as the cause of the
    AssertionError in which scikit-learn's check wraps it (a wrong wording)."""
    with pytest.raises((ValueError, AssertionError)) as info:
        check(estimator)
    error = info.value
    if type(error) is AssertionError:
        assert isinstance(error.__cause__, ValueError), (
            f"{_check_name(check)} failed on an assertion of its own, not on the log's "
            f"refusal: {error}")
        error = error.__cause__
    assert type(error) is ValueError, f"{_check_name(check)} raised {error!r}"
    assert re.search(match, str(error)), (
        f"{_check_name(check)} raised another ValueError than the log's refusal: {error}")


@parametrize_with_checks([
    SphericalKMeans(),
    SphericalKMeans(init="random", n_init=2, block_size=3, tol=0.0),
    *EMBEDDERS,
    *RECOMMENDERS,
])
def test_sklearn_compatible_estimator(estimator, check):
    refused = _refused(estimator).get(_check_name(check))
    if refused is None:
        check(estimator)
    else:
        assert_refuses_the_matrix(check, estimator, refused[1])


@pytest.mark.parametrize("estimator", RECOMMENDERS + EMBEDDERS, ids=lambda e: type(e).__name__)
def test_refused_checks_are_checks_scikit_learn_runs(estimator):
    """Every listed check is one scikit-learn runs on the estimator (no stale names)."""
    from sklearn.utils.estimator_checks import _yield_all_checks

    names = {_check_name(c) for c in _yield_all_checks(estimator, legacy=True)}
    assert set(_refused(estimator)) <= names


def test_a_check_failing_otherwise_is_caught():
    """The wrapper fails a check that breaks in another way than the log's refusal."""
    def breaks_pickling(name, estimator):
        raise TypeError("cannot pickle 'Vocabulary'")

    def passes(name, estimator):
        pass

    def other_value_error(name, estimator):
        raise ValueError("The 'alpha' parameter of MiCRO must be a float")

    def own_assertion(name, estimator):
        raise AssertionError("Estimator changes public attribute(s) during the fit method")

    for check in (breaks_pickling, passes, other_value_error, own_assertion):
        with pytest.raises((AssertionError, TypeError, pytest.fail.Exception)):
            assert_refuses_the_matrix(lambda est, c=check: c("MiCRO", est), MiCRO(),
                                      _FLOATS)
