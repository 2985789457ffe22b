import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import adjusted_rand_score
from sklearn.utils._param_validation import InvalidParameterError

from sklearn_micro._log import EmbeddedLog, Vocabulary, check_log
from sklearn_micro.cluster import SphericalKMeans


def planted(n_per=60, n_clusters=4, n_features=16, noise=0.3, seed=0, dtype=np.float64):
    """Points around ``n_clusters`` random directions, with random positive scales."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((n_clusters, n_features))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    y = np.repeat(np.arange(n_clusters), n_per)
    X = centers[y] + noise * rng.standard_normal((y.size, n_features)) / np.sqrt(n_features)
    X *= rng.uniform(0.5, 5.0, size=(y.size, 1))
    order = rng.permutation(y.size)
    return X[order].astype(dtype), y[order]


def plain_spherical_kmeans(X, centers, n_iter):
    """The textbook algorithm, for comparison: full assignment at every step."""
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    for _ in range(n_iter):
        labels = np.argmax(X @ centers.T, axis=1)
        sums = np.zeros(centers.shape)
        np.add.at(sums, labels, X)
        assert (np.bincount(labels, minlength=len(centers)) > 0).all()
        centers = sums / np.linalg.norm(sums, axis=1, keepdims=True)
    return np.argmax(X @ centers.T, axis=1), centers


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("init", ["k-means++", "random"])
def test_recovers_planted_clusters(dtype, init):
    X, y = planted(dtype=dtype)
    km = SphericalKMeans(4, init=init, n_init=3, random_state=0).fit(X)
    assert adjusted_rand_score(y, km.labels_) > 0.9
    assert km.cluster_centers_.dtype == dtype
    assert km.labels_.shape == (X.shape[0],)
    assert km.n_features_in_ == X.shape[1]
    assert 1 <= km.n_iter_ <= km.max_iter


def test_centroids_unit_norm_and_inertia():
    X, _ = planted(noise=1.0)
    km = SphericalKMeans(6, random_state=0).fit(X)
    np.testing.assert_allclose(np.linalg.norm(km.cluster_centers_, axis=1), 1.0)
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    sim = np.sum(Xn * km.cluster_centers_[km.labels_], axis=1)
    np.testing.assert_allclose(km.inertia_, np.sum(1 - sim))
    np.testing.assert_allclose(km.score(X), -km.inertia_)


def test_inertia_non_increasing_over_iterations():
    X, _ = planted(n_per=50, n_clusters=8, noise=2.0, seed=1)
    inertia = [
        SphericalKMeans(8, init="random", max_iter=m, tol=0, random_state=3).fit(X).inertia_
        for m in range(1, 15)
    ]
    assert np.all(np.diff(inertia) <= 1e-9 * inertia[0])
    assert inertia[-1] < inertia[0]


@pytest.mark.parametrize("n_clusters, n_iter", [(5, 1), (5, 4), (40, 8), (40, 30)])
def test_same_result_as_plain_algorithm(n_clusters, n_iter):
    # bounds skip rows, but must not change the answer
    rng = np.random.default_rng(n_clusters)
    X = rng.standard_normal((800, 12))
    init = X[rng.choice(800, n_clusters, replace=False)]
    init = init / np.linalg.norm(init, axis=1, keepdims=True)
    km = SphericalKMeans(n_clusters, init=init, max_iter=n_iter, tol=0).fit(X)
    labels, centers = plain_spherical_kmeans(X, init, km.n_iter_)
    np.testing.assert_array_equal(km.labels_, labels)
    np.testing.assert_allclose(km.cluster_centers_, centers, atol=1e-12)


def test_predict_transform_consistent_with_fit():
    X, _ = planted(noise=1.5)
    km = SphericalKMeans(5, random_state=0).fit(X)
    np.testing.assert_array_equal(km.predict(X), km.labels_)
    D = km.transform(X)
    assert D.shape == (X.shape[0], 5)
    assert D.min() >= 0 and D.max() <= 2
    np.testing.assert_array_equal(np.argmin(D, axis=1), km.labels_)
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    np.testing.assert_allclose(D, 1 - Xn @ km.cluster_centers_.T, atol=1e-12)
    fresh = SphericalKMeans(5, random_state=0)
    np.testing.assert_allclose(fresh.fit_transform(X), D)
    np.testing.assert_array_equal(SphericalKMeans(5, random_state=0).fit_predict(X), km.labels_)


def test_block_size_does_not_change_result():
    X, _ = planted(noise=1.5)
    a = SphericalKMeans(7, random_state=0).fit(X)
    b = SphericalKMeans(7, random_state=0, block_size=13).fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_)
    np.testing.assert_allclose(a.transform(X), b.transform(X))


def test_seeded_determinism():
    X, _ = planted(noise=2.0, n_clusters=6)
    a = SphericalKMeans(6, random_state=42).fit(X)
    b = SphericalKMeans(6, random_state=42).fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    assert a.inertia_ == b.inertia_


def test_n_init_keeps_the_best_run():
    X, _ = planted(noise=2.0, n_clusters=6)
    one = SphericalKMeans(6, n_init=1, random_state=5).fit(X)
    many = SphericalKMeans(6, n_init=5, random_state=5).fit(X)
    assert many.inertia_ <= one.inertia_


def test_empty_cluster_is_reseeded():
    X, _ = planted(n_clusters=3, noise=0.2)
    # the last centroid points away from every row: nobody joins it at first
    init = np.vstack([X[:2], -X.sum(axis=0)])
    km = SphericalKMeans(3, init=init, max_iter=10).fit(X)
    assert np.bincount(km.labels_, minlength=3).min() > 0
    np.testing.assert_allclose(np.linalg.norm(km.cluster_centers_, axis=1), 1.0)


def test_zero_rows():
    X, _ = planted(n_clusters=3)
    X[:5] = 0
    km = SphericalKMeans(3, random_state=0).fit(X)
    np.testing.assert_array_equal(km.labels_[:5], 0)
    np.testing.assert_allclose(km.transform(X[:5]), 1.0)
    assert np.all(np.isfinite(km.cluster_centers_))
    np.testing.assert_allclose(np.linalg.norm(km.cluster_centers_, axis=1), 1.0)

    zeros = SphericalKMeans(2, random_state=0).fit(np.zeros((4, 3)))
    np.testing.assert_allclose(np.linalg.norm(zeros.cluster_centers_, axis=1), 1.0)
    assert zeros.inertia_ == pytest.approx(4.0)


def test_errors_name_the_parameter():
    X, _ = planted()
    with pytest.raises(InvalidParameterError, match="n_clusters.*>= 1|n_clusters.*Got 0"):
        SphericalKMeans(0).fit(X)
    with pytest.raises(InvalidParameterError, match="'init'"):
        SphericalKMeans(2, init="best").fit(X)
    with pytest.raises(ValueError, match=r"n_samples=3 should be >= n_clusters=4"):
        SphericalKMeans(4).fit(X[:3])
    with pytest.raises(ValueError, match=r"init must have shape .*\(3, 16\); got \(2, 16\)"):
        SphericalKMeans(3, init=X[:2]).fit(X)
    with pytest.raises(ValueError, match="16 features"):
        SphericalKMeans(3).fit(X).predict(X[:, :4])


def test_explicit_init_runs_once():
    X, _ = planted()
    with pytest.warns(RuntimeWarning, match="n_init=3"):
        SphericalKMeans(4, init=X[:4], n_init=3).fit(X)


def _embedded_log(n_items=120, n_features=8, seed=0):
    X, y = planted(n_per=n_items // 3, n_clusters=3, n_features=n_features, seed=seed,
                   dtype=np.float32)
    items = np.arange(1000, 1000 + n_items) * 7
    rng = np.random.default_rng(seed)
    log = check_log(np.c_[rng.integers(20, size=300), rng.choice(items, 300), np.zeros(300, int)])
    users = Vocabulary.from_ids(log.user)
    embedded = EmbeddedLog(
        log=log,
        user_ids=users,
        item_ids=Vocabulary(items),
        user_vectors=rng.standard_normal((len(users), n_features)).astype(np.float32),
        item_vectors=X,
    )
    return embedded, y


def test_embedded_log_gives_one_interest_per_item():
    embedded, y = _embedded_log()
    km = SphericalKMeans(3, random_state=0)
    out = km.fit_transform(embedded)
    assert isinstance(out, EmbeddedLog)
    assert out.log is embedded.log and out.item_ids is embedded.item_ids
    assert out.item_interest.shape == (len(embedded.item_ids),)
    assert out.item_interest.dtype == np.int64
    np.testing.assert_array_equal(out.item_interest, km.labels_)
    assert adjusted_rand_score(y, out.item_interest) > 0.9
    assert km.n_features_in_ == embedded.item_vectors.shape[1]
    np.testing.assert_array_equal(km.transform(embedded).item_interest, km.labels_)
    np.testing.assert_array_equal(km.predict(embedded), km.labels_)
    np.testing.assert_array_equal(SphericalKMeans(3, random_state=0).fit_predict(embedded),
                                  km.labels_)
    assert km.score(embedded) == pytest.approx(-km.inertia_, rel=1e-5)


def test_embedded_log_too_many_clusters():
    embedded, _ = _embedded_log(n_items=12)
    with pytest.raises(ValueError, match=r"n_clusters=20 .*at most the number of items.*12"):
        SphericalKMeans(20).fit(embedded)


def test_pickle_round_trip():
    X, _ = planted()
    km = SphericalKMeans(4, random_state=0).fit(X)
    again = pickle.loads(pickle.dumps(km))
    np.testing.assert_array_equal(again.predict(X), km.predict(X))
    np.testing.assert_array_equal(again.cluster_centers_, km.cluster_centers_)
    assert again.inertia_ == km.inertia_


def test_verbose_shows_progress(capsys):
    X, _ = planted()
    km = SphericalKMeans(4, random_state=0, verbose=1).fit(X)
    captured = capsys.readouterr()
    assert "spherical k-means (K=4, 240 rows)" in captured.err
    assert f"{km.n_iter_}/25" in captured.err
    assert captured.out == ""

    SphericalKMeans(4, random_state=0, verbose=2).fit(X)
    out = capsys.readouterr().out
    assert "Iteration 0, inertia" in out
    assert "Converged" in out

    SphericalKMeans(4, random_state=0, verbose=1, max_fit_samples=40).fit(X)
    err = capsys.readouterr().err
    assert "(K=4, 40 rows)" in err
    assert "assigning 240 rows to 4 centroids" in err


def test_max_fit_samples_and_n_jobs_validated():
    X, _ = planted()
    with pytest.raises(InvalidParameterError, match=r"'max_fit_samples'.*Got 0"):
        SphericalKMeans(4, max_fit_samples=0).fit(X)
    with pytest.raises(InvalidParameterError, match=r"'max_fit_samples'.*Got 'all'"):
        SphericalKMeans(4, max_fit_samples="all").fit(X)
    with pytest.raises(ValueError, match=r"max_fit_samples must be at least n_clusters=4 .*got 3"):
        SphericalKMeans(4, max_fit_samples=3).fit(X)
    with pytest.raises(InvalidParameterError, match=r"'n_jobs'.*Got 'all'"):
        SphericalKMeans(4, n_jobs="all").fit(X)


@pytest.mark.parametrize("limit", [240, 1000, "auto"])
def test_sample_of_every_row_is_the_exact_fit(limit):
    X, _ = planted(noise=1.5)
    exact = SphericalKMeans(5, random_state=3, max_fit_samples=None).fit(X)
    same = SphericalKMeans(5, random_state=3, max_fit_samples=limit).fit(X)
    assert exact.n_fit_samples_ == same.n_fit_samples_ == X.shape[0]
    np.testing.assert_array_equal(same.labels_, exact.labels_)
    np.testing.assert_array_equal(same.cluster_centers_, exact.cluster_centers_)
    assert same.inertia_ == exact.inertia_ and same.n_iter_ == exact.n_iter_


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fit_on_a_sample_assigns_every_row(dtype):
    X, y = planted(n_per=300, noise=0.5, dtype=dtype)
    km = SphericalKMeans(4, max_fit_samples=100, n_init=2, random_state=0).fit(X)
    assert km.n_fit_samples_ == 100
    assert km.labels_.shape == (X.shape[0],)
    assert km.cluster_centers_.dtype == dtype
    assert adjusted_rand_score(y, km.labels_) > 0.9
    np.testing.assert_array_equal(km.predict(X), km.labels_)
    D = km.transform(X)
    np.testing.assert_array_equal(np.argmin(D, axis=1), km.labels_)
    np.testing.assert_allclose(km.inertia_, D.min(axis=1).sum(), rtol=1e-5)
    assert km.score(X) == pytest.approx(-km.inertia_, rel=1e-6)


def test_fit_on_a_sample_is_seeded():
    X, _ = planted(n_per=200, noise=2.0, n_clusters=6)
    a = SphericalKMeans(6, max_fit_samples=150, random_state=1).fit(X)
    b = SphericalKMeans(6, max_fit_samples=150, random_state=1).fit(X)
    c = SphericalKMeans(6, max_fit_samples=150, random_state=2).fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    assert a.inertia_ == b.inertia_
    assert not np.array_equal(a.cluster_centers_, c.cluster_centers_)


@pytest.mark.parametrize("limit", [None, 300])
def test_threads_do_not_change_the_result(limit):
    X, _ = planted(n_per=200, noise=2.0, n_clusters=8, n_features=24)
    one = SphericalKMeans(8, max_fit_samples=limit, random_state=0, n_jobs=1).fit(X)
    two = SphericalKMeans(8, max_fit_samples=limit, random_state=0, n_jobs=2).fit(X)
    every = SphericalKMeans(8, max_fit_samples=limit, random_state=0, n_jobs=-1).fit(X)
    for other in (two, every):
        np.testing.assert_array_equal(other.labels_, one.labels_)
        np.testing.assert_allclose(other.cluster_centers_, one.cluster_centers_, atol=1e-12)
        np.testing.assert_array_equal(other.predict(X), one.labels_)


def test_kmeans_plusplus_seeds_are_distinct_rows():
    from sklearn_micro.cluster import _init_centroids, _normalize_rows

    X, _ = planted(noise=2.0, dtype=np.float32)
    Xn, nonzero = _normalize_rows(X)
    seeds = _init_centroids(Xn, nonzero, 10, "k-means++", None, np.random.RandomState(0))
    assert seeds.dtype == np.float32 and seeds.shape == (10, 16)
    rows = [np.flatnonzero((Xn == seed).all(axis=1)) for seed in seeds]
    assert all(r.size == 1 for r in rows)
    assert len({int(r[0]) for r in rows}) == 10


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 40),
    d=st.integers(1, 5),
    k=st.integers(1, 6),
    seed=st.integers(0, 2**16),
    integer=st.booleans(),
)
def test_invariants(n, d, k, seed, integer):
    # integer-valued data brings zero rows, duplicates and exact ties
    k = min(k, n)
    rng = np.random.default_rng(seed)
    X = rng.integers(-2, 3, size=(n, d)).astype(float) if integer else rng.normal(size=(n, d))
    km = SphericalKMeans(k, init="random", random_state=seed, max_iter=10).fit(X)
    np.testing.assert_allclose(np.linalg.norm(km.cluster_centers_, axis=1), 1.0)
    assert km.labels_.min() >= 0 and km.labels_.max() < k
    D = km.transform(X)
    # whatever the tie-breaking, every row sits at its nearest centroid
    np.testing.assert_allclose(D[np.arange(n), km.labels_], D.min(axis=1), atol=1e-9)
    np.testing.assert_allclose(km.inertia_, D.min(axis=1).sum(), atol=1e-8)
    if not integer:
        np.testing.assert_array_equal(km.predict(X), km.labels_)


@pytest.mark.parametrize("n_samples", [1, 7, 200, 1301])
def test_auto_n_clusters_is_the_rule_of_thumb(n_samples):
    X = np.random.default_rng(0).standard_normal((n_samples, 4))
    km = SphericalKMeans(n_clusters="auto", random_state=0, max_iter=5).fit(X)
    want = max(1, round(np.sqrt(n_samples / 2)))
    assert km.n_clusters_ == want == km.cluster_centers_.shape[0]
    assert km.transform(X).shape == (n_samples, want)
    assert km.get_params()["n_clusters"] == "auto"
    fixed = SphericalKMeans(n_clusters=1, random_state=0, max_iter=5).fit(X)
    assert fixed.n_clusters_ == 1
    with pytest.raises(InvalidParameterError, match="'n_clusters' parameter"):
        SphericalKMeans(n_clusters="sqrt").fit(X)
