"""scikit-learn's estimator checks.

`GraphEmbedder` is left out: it takes an engagement log (user, item and chunk ids), not a
numeric matrix, so the checks' inputs mean nothing to it; tests/test_embedding.py tests it.
"""

from sklearn.utils.estimator_checks import parametrize_with_checks

from sklearn_micro.cluster import SphericalKMeans

# check name -> one-line reason; SphericalKMeans currently passes every check.
EXPECTED_FAILED_CHECKS: dict[str, str] = {}


@parametrize_with_checks(
    [
        SphericalKMeans(),
        SphericalKMeans(init="random", n_init=2, block_size=3, tol=0.0),
    ],
    expected_failed_checks=lambda estimator: EXPECTED_FAILED_CHECKS,
)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)
