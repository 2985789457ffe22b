import pickle
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.metrics import adjusted_rand_score
from sklearn.pipeline import Pipeline
from sklearn.utils._param_validation import InvalidParameterError

from sklearn_micro._log import EmbeddedLog, EngagementLog, Vocabulary, check_log
from sklearn_micro.cluster import SphericalKMeans
from sklearn_micro.embedding import GraphEmbedder, engagement_matrix


def grouped_log(n_groups=3, users_per_group=40, items_per_group=30, per_user=12, seed=0):
    """Users of each group engage only with items of their group; returns (log, item group)."""
    rng = np.random.default_rng(seed)
    rows = []
    for g in range(n_groups):
        items = 500 + g * items_per_group + np.arange(items_per_group)
        for u in range(users_per_group):
            user = 10_000 + g * users_per_group + u
            for item in rng.choice(items, per_user, replace=False):
                rows.append((user, item, rng.integers(3)))
    log = np.array(rows, dtype=np.int64)
    item_group = {500 + g * items_per_group + j: g
                  for g in range(n_groups) for j in range(items_per_group)}
    return log[rng.permutation(len(log))], item_group


# How far ALS's blocked kernel may be from `implicit`'s own fit after a few iterations,
# relative to the largest factor: both sum in float32, in different orders, and implicit's
# order depends on the CPU's BLAS kernel; three iterations of conjugate-gradient steps carry
# those roundings to 1.2e-4 of the largest factor (measured with OPENBLAS_CORETYPE=SkylakeX,
# Haswell and Prescott). A step taken otherwise is far beyond: regularization 0.02 for 0.01,
# alpha 2.2 for 2 or a fourth iteration move the factors by 7e-2 to 8e-1 of the largest.
IMPLICIT_ATOL = 1e-3


def implicit_als_factors(counts, factors, *, alpha, iterations, random_state,
                         regularization=0.01):
    """User and item factors of `implicit`'s own ALS fit (one thread) on ``counts``, seeded
    as sklearn-micro's estimators seed it from ``random_state``."""
    from implicit.cpu.als import AlternatingLeastSquares
    from sklearn.utils import check_random_state
    from threadpoolctl import threadpool_limits

    seed = int(check_random_state(random_state).randint(np.iinfo(np.int32).max))
    with threadpool_limits(1, user_api="blas"):
        model = AlternatingLeastSquares(factors=factors, regularization=regularization,
                                        alpha=alpha,
                                        iterations=iterations, num_threads=1,
                                        random_state=seed)
        model.fit(counts, show_progress=False)
    return model.user_factors, model.item_factors


@pytest.fixture(scope="module")
def log_and_groups():
    return grouped_log()


@pytest.mark.parametrize("method, iterations", [("als", 15), ("bpr", 300)])
def test_item_groups_recovered(log_and_groups, method, iterations):
    log, item_group = log_and_groups
    embedder = GraphEmbedder(
        n_components=8, method=method, iterations=iterations, learning_rate=0.05,
        random_state=0,
    ).fit(log)
    km = SphericalKMeans(3, n_init=3, random_state=0).fit(embedder.item_vectors_)
    truth = [item_group[i] for i in embedder.item_ids_.ids]
    assert adjusted_rand_score(truth, km.labels_) > 0.9


def test_fitted_state(log_and_groups):
    log, _ = log_and_groups
    embedder = GraphEmbedder(n_components=6, random_state=0).fit(log)
    np.testing.assert_array_equal(embedder.user_ids_.ids, np.unique(log[:, 0]))
    np.testing.assert_array_equal(embedder.item_ids_.ids, np.unique(log[:, 1]))
    for name, n in [("user_vectors_", 120), ("item_vectors_", 90)]:
        vectors = getattr(embedder, name)
        assert type(vectors) is np.ndarray
        assert vectors.shape == (n, 6) and vectors.dtype == np.float32
        assert np.all(np.isfinite(vectors))
    assert not any("implicit" in type(v).__module__ for v in vars(embedder).values())


def test_bpr_leaves_out_the_item_bias(log_and_groups):
    log, _ = log_and_groups
    embedder = GraphEmbedder(n_components=5, method="bpr", iterations=3, random_state=0)
    embedder.fit(log)
    assert embedder.user_vectors_.shape == (120, 5)
    assert embedder.item_vectors_.shape == (90, 5)
    assert not np.all(embedder.user_vectors_[:, -1] == 1)


@pytest.mark.parametrize("method", ["als", "bpr"])
def test_seeded_determinism(log_and_groups, method):
    log, _ = log_and_groups
    a = GraphEmbedder(n_components=4, method=method, iterations=5, random_state=7).fit(log)
    b = GraphEmbedder(n_components=4, method=method, iterations=5, random_state=7).fit(log)
    c = GraphEmbedder(n_components=4, method=method, iterations=5, random_state=8).fit(log)
    np.testing.assert_array_equal(a.user_vectors_, b.user_vectors_)
    np.testing.assert_array_equal(a.item_vectors_, b.item_vectors_)
    assert not np.array_equal(a.item_vectors_, c.item_vectors_)


def test_transform_hands_on_an_embedded_log(log_and_groups):
    log, _ = log_and_groups
    embedder = GraphEmbedder(n_components=4, random_state=0)
    embedded = embedder.fit_transform(log)
    assert isinstance(embedded, EmbeddedLog)
    assert isinstance(embedded.log, EngagementLog) and len(embedded) == len(log)
    np.testing.assert_array_equal(embedded.log.item, log[:, 1])
    assert embedded.item_ids is embedder.item_ids_ and embedded.user_ids is embedder.user_ids_
    assert embedded.item_vectors is embedder.item_vectors_
    assert embedded.user_vectors is embedder.user_vectors_
    assert embedded.item_interest is None

    later = embedder.transform(log[:10])
    assert len(later) == 10 and later.item_vectors is embedder.item_vectors_
    again = GraphEmbedder(n_components=4, random_state=0).fit(log).transform(log)
    np.testing.assert_array_equal(again.item_vectors, embedded.item_vectors)


def test_string_ids_from_a_dataframe():
    frame = pd.DataFrame({
        "user": ["ann", "bob", "ann", "cy", "cy"],
        "item": ["x", "y", "y", "z", "x"],
        "chunk": [0, 0, 1, 1, 2],
    })
    embedder = GraphEmbedder(n_components=3, random_state=0).fit(frame)
    assert list(embedder.user_ids_.ids) == ["ann", "bob", "cy"]
    assert list(embedder.item_ids_.ids) == ["x", "y", "z"]
    assert embedder.transform(frame).log.item.dtype.kind == "U"


def test_engagement_matrix_counts_repeats():
    log = np.array([[1, 5, 0], [1, 5, 1], [2, 6, 0], [1, 6, 0]])
    embedder = GraphEmbedder(n_components=2, random_state=0).fit(log)
    matrix = engagement_matrix(check_log(log), embedder.user_ids_, embedder.item_ids_)
    np.testing.assert_array_equal(matrix.toarray(), [[2, 1], [0, 1]])
    assert matrix.dtype == np.float32


def test_errors_name_the_parameter(log_and_groups):
    log, _ = log_and_groups
    with pytest.raises(InvalidParameterError, match=r"'n_components'.*range \[1, inf\).*Got 0"):
        GraphEmbedder(n_components=0).fit(log)
    with pytest.raises(InvalidParameterError, match=r"'n_components'.*Got 2.5"):
        GraphEmbedder(n_components=2.5).fit(log)
    with pytest.raises(InvalidParameterError, match=r"'method'.*Got 'svd'"):
        GraphEmbedder(method="svd").fit(log)
    with pytest.raises(ValueError, match=r"shape \(n, 3\)"):
        GraphEmbedder().fit(log[:, :2])


def test_no_blas_warning(log_and_groups):
    log, _ = log_and_groups
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        GraphEmbedder(n_components=4, iterations=2, random_state=0, n_jobs=2).fit(log)


@pytest.mark.parametrize("method", ["als", "bpr"])
def test_verbose_shows_progress(log_and_groups, capsys, method):
    log, _ = log_and_groups
    GraphEmbedder(n_components=4, method=method, iterations=3, random_state=0,
                  verbose=1).fit(log)
    err = capsys.readouterr().err
    assert f"graph embedding ({method.upper()})" in err
    assert "3/3" in err
    GraphEmbedder(n_components=4, iterations=3, random_state=0).fit(log)
    assert capsys.readouterr().err == ""


def test_all_threads_give_the_same_als_vectors(log_and_groups):
    # each row's solve reads only the other side's vectors: threads cannot change them
    log, _ = log_and_groups
    one = GraphEmbedder(n_components=6, iterations=4, random_state=0, n_jobs=1).fit(log)
    every = GraphEmbedder(n_components=6, iterations=4, random_state=0, n_jobs=-1).fit(log)
    np.testing.assert_array_equal(every.user_vectors_, one.user_vectors_)
    np.testing.assert_array_equal(every.item_vectors_, one.item_vectors_)


def test_n_jobs_validated(log_and_groups):
    log, _ = log_and_groups
    with pytest.raises(ValueError, match=r"n_jobs must be .*; got 0"):
        GraphEmbedder(n_jobs=0).fit(log)
    with pytest.raises(InvalidParameterError, match=r"'n_jobs'.*Got 'all'"):
        GraphEmbedder(n_jobs="all").fit(log)
    with pytest.raises(InvalidParameterError, match=r"'iterations'.*Got 0"):
        GraphEmbedder(iterations=0).fit(log)


@pytest.mark.parametrize("solver", ["implicit", "blocked"])
def test_same_vectors_as_implicit(log_and_groups, solver):
    # the matrix is weighted by alpha, and the initial vectors drawn, before implicit sees
    # them: the same as implicit's alpha and its own draw; the blocked kernel sums in
    # another order, so it agrees to float32 rounding
    log, _ = log_and_groups
    embedder = GraphEmbedder(n_components=5, alpha=2.0, iterations=3, random_state=4,
                             solver=solver).fit(log)
    counts = engagement_matrix(check_log(log), embedder.user_ids_, embedder.item_ids_)
    users, items = implicit_als_factors(counts, 5, alpha=2.0, iterations=3, random_state=4)
    for ours, theirs in ((embedder.item_vectors_, items), (embedder.user_vectors_, users)):
        if solver == "implicit":
            np.testing.assert_array_equal(ours, theirs)
        else:
            np.testing.assert_allclose(ours, theirs, rtol=0,
                                       atol=IMPLICIT_ATOL * np.abs(theirs).max())
            assert not np.array_equal(ours, theirs)  # the kernel is not implicit's


def test_negative_weight_spreads_a_users_unengaged_weight_over_the_items(log_and_groups):
    # each unengaged pair weighs negative_weight / n_items: implicit's loss divided by
    # that weight, alpha and regularization times n_items / negative_weight
    log, _ = log_and_groups
    embedder = GraphEmbedder(n_components=5, alpha=2.0, negative_weight=8.0, iterations=3,
                             random_state=4, solver="implicit").fit(log)
    ratio = len(embedder.item_ids_) / 8.0
    assert ratio > 2
    counts = engagement_matrix(check_log(log), embedder.user_ids_, embedder.item_ids_)
    users, items = implicit_als_factors(counts, 5, alpha=2.0 * ratio, iterations=3,
                                        random_state=4, regularization=0.01 * ratio)
    np.testing.assert_array_equal(embedder.item_vectors_, items)
    np.testing.assert_array_equal(embedder.user_vectors_, users)
    plain = GraphEmbedder(n_components=5, alpha=2.0, iterations=3, random_state=4,
                          solver="implicit").fit(log)
    assert not np.allclose(plain.user_vectors_, embedder.user_vectors_)
    with pytest.raises(InvalidParameterError, match=r"'negative_weight'.*Got 0"):
        GraphEmbedder(negative_weight=0).fit(log)


@pytest.mark.parametrize("n_factors", [3, 16])
def test_blocked_kernel_takes_implicits_steps(n_factors):
    # one half-epoch against implicit's least_squares_cg on rows of every kind: engaged
    # (confidence 1 and more), disliked (negative), zero, and rows with no nonzeros, over
    # more rows than a block
    from implicit.cpu import _als
    from threadpoolctl import threadpool_limits

    from sklearn_micro._kernels.als import BLOCK, solve_rows

    rng = np.random.default_rng(n_factors)
    n_rows, n_cols = 2 * BLOCK + 37, 300
    dense = rng.choice([0, 0, 0, 0, 0, 0, 1, 1, 2.5, -3.0, 0.5], size=(n_rows, n_cols))
    empty = [3, BLOCK, n_rows - 1]
    dense[empty] = 0
    rows, cols = np.nonzero(dense)
    zeros = (rng.choice(np.setdiff1d(np.arange(n_rows), empty), size=20),
             rng.integers(n_cols, size=20))
    # explicit zeros: stored, confidence 0 (where they meet a nonzero, it stays)
    matrix = sp.coo_matrix((np.r_[dense[rows, cols], np.zeros(20)].astype(np.float32),
                            (np.r_[rows, zeros[0]], np.r_[cols, zeros[1]])),
                           shape=dense.shape).tocsr()
    assert matrix.nnz > np.count_nonzero(dense)
    X = rng.normal(size=(n_rows, n_factors)).astype(np.float32)
    Y = rng.normal(size=(n_cols, n_factors)).astype(np.float32) / 4
    expected = X.copy()
    with threadpool_limits(1, user_api="blas"):
        _als.least_squares_cg(matrix, expected, Y, 0.1, num_threads=1, cg_steps=3)
    gram = (Y.T @ Y + np.float32(0.1) * np.eye(n_factors, dtype=np.float32))
    gram = np.triu(gram) + np.triu(gram, 1).T
    got = X.copy()
    with threadpool_limits(1, user_api="blas"):
        solve_rows(matrix.indptr.astype(np.int64), matrix.indices, matrix.data, got, Y,
                   gram, 3)
    np.testing.assert_array_equal(got[empty], 0)
    np.testing.assert_allclose(got, expected, rtol=2e-4, atol=2e-4 * np.abs(expected).max())


def test_blocked_solver_is_the_default_and_validated(log_and_groups):
    log, _ = log_and_groups
    assert GraphEmbedder().solver == "blocked"
    with pytest.raises(InvalidParameterError, match=r"'solver'.*Got 'cholesky'"):
        GraphEmbedder(solver="cholesky").fit(log)


def test_engagement_matrix_is_built_in_int32_blocks(monkeypatch):
    from sklearn_micro import _log

    rng = np.random.default_rng(0)
    log = check_log(np.c_[rng.integers(50, size=1000) * 3, rng.integers(40, size=1000),
                          rng.integers(3, size=1000)])
    users, items = Vocabulary.from_ids(log.user), Vocabulary.from_ids(log.item[:900])
    whole = engagement_matrix(log, users, items, weight=0.5)
    monkeypatch.setattr(_log, "LOOKUP_ROWS", 7)
    blocks = engagement_matrix(log, users, items, weight=0.5)
    assert whole.indices.dtype == np.int32 and whole.indptr.dtype == np.int32
    assert whole.has_canonical_format and whole.dtype == np.float32
    np.testing.assert_array_equal(blocks.toarray(), whole.toarray())
    # unknown items are dropped; the rest counted, times the weight
    dense = np.zeros((len(users), len(items)))
    u, i = users.lookup(log.user), items.lookup(log.item)
    np.add.at(dense, (u[i >= 0], i[i >= 0]), 0.5)
    np.testing.assert_array_equal(whole.toarray(), dense)


def test_pickle_round_trip(log_and_groups):
    log, _ = log_and_groups
    embedder = GraphEmbedder(n_components=4, random_state=0).fit(log)
    again = pickle.loads(pickle.dumps(embedder))
    np.testing.assert_array_equal(again.item_vectors_, embedder.item_vectors_)
    np.testing.assert_array_equal(again.user_ids_.lookup([10_005]), [5])
    np.testing.assert_array_equal(again.transform(log).user_vectors, embedder.user_vectors_)


def test_pipeline_gives_each_item_its_interest(log_and_groups):
    log, item_group = log_and_groups
    pipe = Pipeline([
        ("embed", GraphEmbedder(n_components=8, random_state=0)),
        ("interests", SphericalKMeans(n_clusters=3, n_init=3, random_state=0)),
    ])
    out = pipe.fit_transform(log)
    assert isinstance(out, EmbeddedLog)
    truth = [item_group[i] for i in out.item_ids.ids]
    assert adjusted_rand_score(truth, out.item_interest) > 0.9
    np.testing.assert_array_equal(pipe.transform(log[:5]).item_interest, out.item_interest)
    with pytest.raises(ValueError, match="n_clusters=100 .* 90 items"):
        pipe.set_params(interests__n_clusters=100).fit(log)
