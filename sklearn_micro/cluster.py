"""Spherical k-means: interests as clusters of unit-normalized item vectors."""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from numbers import Integral, Real

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    ClusterMixin,
    TransformerMixin,
    _fit_context,
)
from sklearn.cluster import kmeans_plusplus
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils._set_output import _wrap_data_with_container
from sklearn.utils.validation import check_array, check_is_fitted, validate_data
from threadpoolctl import threadpool_limits
from tqdm.auto import tqdm

from ._dask import ClusterAssignment, assign_all_on_cluster
from ._kernels import numba_threads
from ._kernels.kmeans import (
    best_rows,
    best_rows_grouped,
    centroid_sums,
    own_similarity,
    update_bounds,
)
from ._log import EmbeddedLog
from ._parallel import active_client, resolve_n_jobs

__all__ = ["SphericalKMeans"]

# Bytes of one block of similarities (rows x n_clusters) under block_size="auto".
_BLOCK_BYTES = 16 * 2**20
# Bytes of the per-row upper bounds (rows x centroid groups) kept during fit.
_BOUND_BYTES = 64 * 2**20
# max_fit_samples="auto": this many rows per cluster, and at least _AUTO_MIN_SAMPLES.
_AUTO_SAMPLES_PER_CLUSTER = 64
_AUTO_MIN_SAMPLES = 100_000


@contextmanager
def _threads(n_threads: int):
    """Hold BLAS and numba's parallel kernels to ``n_threads`` threads each.

    BLAS products and numba kernels alternate and never run at once, so each may use every
    thread given without oversubscribing the cores.
    """
    with numba_threads(n_threads), threadpool_limits(n_threads, user_api="blas"):
        yield


def _normalize_rows(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows scaled to unit norm (a new array; zero rows stay zero) and the nonzero mask."""
    norms = np.sqrt(np.einsum("ij,ij->i", X, X))
    nonzero = norms > 0
    out = np.zeros_like(X, order="C")
    np.divide(X, norms[:, None], out=out, where=nonzero[:, None])
    return out, nonzero


def _block_rows(block_size, n_clusters: int, itemsize: int) -> int:
    if block_size == "auto":
        return max(1, _BLOCK_BYTES // (n_clusters * itemsize))
    return int(block_size)


def _assign_all(X, centers, block_rows, labels, best, progress=None):
    """Best centroid of every row of ``X`` and its cosine similarity, by blocks with BLAS.

    Each block of rows is scaled to unit norm on its own, so no normalized copy of ``X`` is
    made. ``progress`` (a tqdm bar, or None) ticks once per row.
    """
    n = X.shape[0]
    buf = np.empty((min(block_rows, n), centers.shape[0]), dtype=X.dtype)
    for start in range(0, n, block_rows):
        stop = min(start + block_rows, n)
        S = buf[: stop - start]
        np.matmul(_normalize_rows(X[start:stop])[0], centers.T, out=S)
        best_rows(S, labels[start:stop], best[start:stop])
        if progress is not None:
            progress.update(stop - start)


class _Groups:
    """Centroids grouped by direction, for the per-group bounds of `update_bounds`.

    ``group[k]`` is the group of centroid ``k``; ``order`` lists the centroids group by
    group, group ``g`` being ``order[start[g]:start[g + 1]]``. The grouping only decides
    which rows are recomputed, never the result, so it uses a fixed seed.
    """

    def __init__(self, centers: np.ndarray, n_samples: int):
        n_clusters = centers.shape[0]
        n_groups = min(
            max(1, n_clusters // 10),
            max(1, _BOUND_BYTES // (max(n_samples, 1) * centers.dtype.itemsize)),
        )
        group = np.zeros(n_clusters, np.int64)
        if n_groups > 1:
            with threadpool_limits(1, user_api="blas"):
                seeds, _ = kmeans_plusplus(
                    centers.astype(np.float64), n_groups, random_state=0
                )
            for _ in range(5):
                group = np.argmax(centers @ seeds.T, axis=1)
                sums = np.zeros(seeds.shape)
                np.add.at(sums, group, centers)
                norms = np.linalg.norm(sums, axis=1)
                seeds[norms > 0] = sums[norms > 0] / norms[norms > 0, None]
            group = np.argmax(centers @ seeds.T, axis=1)
        self.n_groups = n_groups
        self.group = group
        self.order = np.argsort(group, kind="stable")
        self.start = np.zeros(n_groups + 1, np.int64)
        np.cumsum(np.bincount(group, minlength=n_groups), out=self.start[1:])


def _assign_bounded(X, rows, centers, groups, block_rows, labels, lower, upper) -> int:
    """Reassign ``rows`` (all rows if None) and reset their bounds; returns how many moved."""
    changed = 0
    m = X.shape[0] if rows is None else rows.shape[0]
    if m == 0:
        return 0
    sorted_centers = centers[groups.order]
    buf = np.empty((min(block_rows, m), centers.shape[0]), dtype=X.dtype)
    for start in range(0, m, block_rows):
        stop = min(start + block_rows, m)
        block = slice(start, stop) if rows is None else rows[start:stop]
        S = buf[: stop - start]
        np.matmul(X[block], sorted_centers.T, out=S)
        new = np.empty(stop - start, np.int32)
        best = np.empty(stop - start)
        group_best = np.empty((stop - start, groups.n_groups), dtype=upper.dtype)
        best_rows_grouped(S, groups.order, groups.start, new, best, group_best)
        changed += int(np.count_nonzero(new != labels[block]))
        labels[block] = new
        lower[block] = best
        upper[block] = group_best
    return changed


def _assignment(X):
    """The assignment step on ``X``: `_assign_bounded` here, or inside joblib's Dask backend
    the same function by blocks of rows held on the cluster's workers (`sklearn_micro._dask`),
    called with the same arguments."""
    client = active_client()
    return _assign_bounded if client is None else ClusterAssignment(client, X, _assign_bounded)


def _inertia(X, centers, labels) -> float:
    own = np.empty(X.shape[0])
    own_similarity(X, centers, labels, own)
    return float(np.sum(1.0 - own))


def _init_centroids(X, nonzero, n_clusters, init, init_size, random_state):
    """Unit-norm initial centroids drawn from the nonzero rows of ``X``."""
    n, d = X.shape
    rows = np.flatnonzero(nonzero)
    if rows.shape[0] == 0:
        centers = random_state.standard_normal((n_clusters, d)).astype(X.dtype)
        return _normalize_rows(centers)[0]
    if init == "random" or rows.shape[0] < n_clusters:
        # (fewer directions than clusters: some rows must seed two clusters)
        pick = random_state.choice(rows, size=n_clusters, replace=rows.shape[0] < n_clusters)
        return X[pick].copy()
    if init_size is None:
        init_size = max(3 * n_clusters, 10_000)
    init_size = max(init_size, n_clusters)
    if init_size < rows.shape[0]:
        rows = np.sort(random_state.choice(rows, size=init_size, replace=False))
    # On unit rows the squared Euclidean distance is 2 * (1 - cos): the same draws as
    # k-means++ with the cosine distance. In float64, since scikit-learn computes float32
    # distances by upcasting small blocks (many times slower), and with one BLAS thread,
    # since the products are small.
    candidates = X[rows].astype(np.float64)
    with threadpool_limits(1, user_api="blas"):
        centers, _ = kmeans_plusplus(
            candidates,
            n_clusters,
            x_squared_norms=np.ones(candidates.shape[0]),
            random_state=random_state,
        )
    return centers.astype(X.dtype)


def _reseed_empty(X, centers, nonzero, empty, labels, lower, upper, sums, counts):
    """Give each empty cluster the row farthest from its centroid (not leaving one empty)."""
    own = np.empty(X.shape[0])
    own_similarity(X, centers, labels, own)
    candidates = np.flatnonzero(nonzero)
    order = candidates[np.argsort(own[candidates], kind="stable")]
    filled = 0
    for j in order:
        if filled == empty.shape[0]:
            break
        old = labels[j]
        if counts[old] <= 1:
            continue
        k = empty[filled]
        sums[old] -= X[j]
        counts[old] -= 1
        sums[k] = X[j]
        counts[k] = 1
        labels[j] = k
        lower[j] = -np.inf
        upper[j] = np.inf
        filled += 1


def _spherical_kmeans_single(X, centers, nonzero, *, max_iter, tol, block_rows, verbose):
    """One run of spherical k-means from ``centers``.

    Returns ``(labels, inertia, centers, n_iter)``; the labels are the best centroids of the
    returned centers. ``verbose`` shows a progress bar with one tick per iteration, and
    from 2 on prints the inertia after each.
    """
    n = X.shape[0]
    n_clusters = centers.shape[0]
    groups = _Groups(centers, n)
    labels = np.empty(n, np.int32)
    lower = np.empty(n)
    upper = np.empty((n, groups.n_groups), dtype=X.dtype)
    stale = np.empty(n, np.int64)
    assign = _assignment(X)
    assign(X, None, centers, groups, block_rows, labels, lower, upper)
    if verbose > 1:
        print("Initialization complete")

    progress = tqdm(
        total=max_iter,
        desc=f"spherical k-means (K={n_clusters:,}, {n:,} rows)",
        unit="iter",
        disable=not verbose,
    )
    n_iter = 0
    for it in range(max_iter):
        sums, counts = centroid_sums(X, labels, n_clusters)
        empty = np.flatnonzero(counts == 0)
        if empty.shape[0]:
            _reseed_empty(X, centers, nonzero, empty, labels, lower, upper, sums, counts)
        norms = np.sqrt(np.einsum("ij,ij->i", sums, sums))
        new_centers = centers.copy()
        moved = norms > 0
        new_centers[moved] = sums[moved] / norms[moved, None]
        shift = np.sqrt(np.sum((new_centers - centers).astype(np.float64) ** 2, axis=1))
        centers = new_centers

        m = update_bounds(X, centers, labels, lower, upper, shift, groups.group, stale)
        changed = assign(X, stale[:m], centers, groups, block_rows, labels, lower, upper)
        n_iter = it + 1
        progress.update(1)
        progress.set_postfix(moved=changed, recomputed=m, refresh=False)
        if verbose > 1:
            print(f"Iteration {it}, inertia {_inertia(X, centers, labels):.6g}.")
        if changed == 0:
            if verbose > 1:
                print(f"Converged at iteration {it}: strict convergence.")
            break
        center_shift = float(np.sum(shift**2))
        if center_shift <= tol:
            if verbose > 1:
                print(
                    f"Converged at iteration {it}: center shift {center_shift:.3g} within "
                    f"tolerance {tol:.3g}."
                )
            break
    progress.close()
    return labels, _inertia(X, centers, labels), centers, n_iter


class SphericalKMeans(ClassNamePrefixFeaturesOutMixin, TransformerMixin, ClusterMixin,
                      BaseEstimator, auto_wrap_output_keys=None):
    """Spherical k-means: k-means with cosine similarity on the unit sphere.

    Rows are scaled to unit norm, each is assigned to the centroid of highest cosine
    similarity, and each centroid becomes the mean of its rows scaled back to unit norm
    (Dhillon and Modha, 2001). The objective is the sum of cosine distances ``1 - cos`` of
    the rows to their centroids.

    On a 2-D array it is an ordinary clusterer. In the MiCRO pipeline it takes the
    `EmbeddedLog` of a `GraphEmbedder`, clusters its item vectors, and hands on the log with
    the interest of each item (``EmbeddedLog.item_interest``).

    Parameters
    ----------
    n_clusters : int or "auto", default=8
        Number of clusters (interests). "auto" takes ``round(sqrt(n_samples / 2))`` (at
        least 1), the rule of thumb for k-means (Mardia, Kent and Bibby, 1979): about 64
        interests for 8,000 items, 141 for 40,000. A `GridSearchCV` over K on held-out
        chunks chooses better where it matters (docs: "Choosing the number of
        interests").
    init : {"k-means++", "random"} or array-like of shape (n_clusters, n_features), \
            default="k-means++"
        Initial centroids. "k-means++" seeds greedily with probability proportional to the
        cosine distance to the nearest chosen centroid (`sklearn.cluster.kmeans_plusplus` on
        the unit rows), on at most ``init_size`` rows drawn at random; "random" takes
        ``n_clusters`` distinct rows at random. An array gives the
        centroids (scaled to unit norm) and runs once.
    n_init : int, default=1
        Number of runs from different seeds; the run of lowest inertia is kept.
    max_iter : int, default=25
        Maximum number of iterations (centroid updates) of a run.
    tol : float, default=1e-4
        A run stops when the summed squared shift of the centroids in one iteration is at
        most ``tol`` times the mean feature variance of the unit rows (as in
        `sklearn.cluster.KMeans`), or when no row changes cluster.
    random_state : int, RandomState instance or None, default=None
        Seeds the initialization and the rows drawn by ``max_fit_samples``. Pass an int for
        reproducible results.
    verbose : int, default=0
        When positive, progress bars on stderr: one tick per iteration, then one for the
        assignment of all rows after a fit on a sample. From 2 on, also print the inertia
        after each iteration.
    block_size : int or "auto", default="auto"
        Rows whose similarities to all centroids are computed at once with BLAS. "auto" keeps
        a block of similarities (rows x ``n_clusters``) at about 16 MB.
    init_size : int or None, default=None
        Number of rows drawn at random for k-means++ seeding (at least ``n_clusters``);
        None means ``max(3 * n_clusters, 10_000)`` (all rows when there are fewer). Seeding
        costs about ``10 * n_clusters * init_size * n_features`` multiply-adds: at
        K = 25,000 it is slower than the iterations, and ``init="random"`` is the choice.
    max_fit_samples : int, "auto" or None, default="auto"
        Fit the centroids on at most this many rows drawn at random without replacement,
        then assign every row to its best centroid once. "auto" means
        ``max(64 * n_clusters, 100_000)`` rows; None fits on every row (the exact
        algorithm, whose cost per iteration grows with ``n_samples * n_clusters``). With
        at most that many rows, the fit is the same as with None.
    n_jobs : int or None, default=None
        Threads of the BLAS products and of the compiled steps (they alternate, never
        overlap). None means 1 unless in a `joblib.parallel_config` context; -1 means all
        processors. Results do not depend on it beyond rounding in BLAS.

    Attributes
    ----------
    n_clusters_ : int
        The number of clusters: ``n_clusters``, or the one "auto" took.
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        Unit-norm centroids.
    labels_ : ndarray of shape (n_samples,)
        Cluster of each row (of each item on an `EmbeddedLog`): its best centroid.
    inertia_ : float
        Sum over all the rows of ``1 - cos`` to their centroid.
    n_iter_ : int
        Number of iterations of the kept run.
    n_fit_samples_ : int
        Number of rows the centroids were fitted on.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during fit, when ``X`` has string column names.

    See Also
    --------
    sklearn.cluster.KMeans : Euclidean k-means.
    GraphEmbedder : Produces the item vectors this estimator clusters in the pipeline.

    Notes
    -----
    A row of zeros has no direction: its similarity to every centroid is 0, so it goes to
    cluster 0 (the first among ties), adds 1 to the inertia, never moves a centroid and is
    never chosen as a seed. When every row is zero the centroids are random unit vectors.

    An empty cluster gets the row farthest from its own centroid (taken from a cluster with
    other rows). Iterations skip the rows whose cluster provably cannot change, using bounds
    on the similarities (as Yinyang k-means, with cosine similarity); the result is that of
    the plain algorithm (up to rounding in exact ties). No matrix of size n_samples x
    n_clusters is held, except the output of `transform` on an array.

    Scale. An iteration costs about ``n * n_clusters * n_features`` multiply-adds for the
    rows whose bounds do not settle them (all rows at first, fewer later). With
    ``max_fit_samples`` the iterations run on the sample, so their cost no longer grows
    with ``n_samples``; the one assignment of all rows costs ``n_samples * n_clusters *
    n_features``. Memory: the sample (normalized), per-row bounds of at most 64 MB, and
    blocks of 16 MB; the rows themselves are not copied when the fit uses a sample (they
    are, normalized, by the exact fit). ``docs/scale_embedding_clustering.md`` compares
    the two fits in time, objective and downstream recall.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_micro.cluster import SphericalKMeans
    >>> X = np.array([[1.0, 0.1], [2.0, 0.0], [0.0, 1.0], [0.1, 3.0]])
    >>> km = SphericalKMeans(n_clusters=2, random_state=0).fit(X)
    >>> km.labels_[0] == km.labels_[1], km.labels_[0] != km.labels_[2]
    (np.True_, np.True_)
    >>> np.linalg.norm(km.cluster_centers_, axis=1).round(6)
    array([1., 1.])
    >>> km.predict([[5.0, 0.2]])[0] == km.labels_[0]
    np.True_
    """

    _parameter_constraints: dict = {
        "n_clusters": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "init": [StrOptions({"k-means++", "random"}), "array-like"],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
        "block_size": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "init_size": [Interval(Integral, 1, None, closed="left"), None],
        "max_fit_samples": [
            Interval(Integral, 1, None, closed="left"), StrOptions({"auto"}), None
        ],
        "n_jobs": [Integral, None],
    }

    def __init__(
        self,
        n_clusters: int | str = 8,
        *,
        init: str | np.ndarray = "k-means++",
        n_init: int = 1,
        max_iter: int = 25,
        tol: float = 1e-4,
        random_state: int | np.random.RandomState | None = None,
        verbose: int = 0,
        block_size: int | str = "auto",
        init_size: int | None = None,
        max_fit_samples: int | str | None = "auto",
        n_jobs: int | None = None,
    ):
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.verbose = verbose
        self.block_size = block_size
        self.init_size = init_size
        self.max_fit_samples = max_fit_samples
        self.n_jobs = n_jobs

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags

    def _vectors(self, X, *, reset: bool) -> np.ndarray:
        """The rows to cluster: ``X`` itself, or the item vectors of an `EmbeddedLog`."""
        if isinstance(X, EmbeddedLog):
            X = X.item_vectors
        return validate_data(
            self, X, dtype=[np.float64, np.float32], order="C", reset=reset
        )

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None) -> SphericalKMeans:
        """Cluster the rows of ``X``, or the item vectors of an `EmbeddedLog`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or EmbeddedLog
            Vectors to cluster (any nonzero norm; they are scaled to unit norm).
        y : None
            Ignored.

        Returns
        -------
        self : SphericalKMeans
            The fitted estimator.
        """
        vectors = self._vectors(X, reset=True)
        n_samples = vectors.shape[0]
        k = (max(1, round(np.sqrt(n_samples / 2))) if self.n_clusters == "auto"
             else self.n_clusters)
        if n_samples < k:
            if isinstance(X, EmbeddedLog):
                raise ValueError(
                    f"n_clusters={k} must be at most the number of items to "
                    f"cluster; the EmbeddedLog has {n_samples} items."
                )
            raise ValueError(f"n_samples={n_samples} should be >= n_clusters={k}.")
        self.n_clusters_ = k

        n_fit = self._n_fit_samples(n_samples)
        random_state = check_random_state(self.random_state)
        init = self.init
        n_init = self.n_init
        if not isinstance(init, str):
            init = check_array(init, dtype=vectors.dtype, copy=True, input_name="init")
            if init.shape != (k, vectors.shape[1]):
                raise ValueError(
                    f"init must have shape (n_clusters, n_features) = "
                    f"({k}, {vectors.shape[1]}); got {init.shape}."
                )
            init, init_nonzero = _normalize_rows(init)
            if not init_nonzero.all():
                raise ValueError("init must have nonzero rows; a zero row has no direction.")
            if n_init != 1:
                warnings.warn(
                    f"Explicit initial centroids given: running once, not n_init={n_init} "
                    "times.",
                    RuntimeWarning,
                    stacklevel=2,
                )
                n_init = 1

        if n_fit < n_samples:
            sample = np.sort(random_state.choice(n_samples, size=n_fit, replace=False))
            Xn, nonzero = _normalize_rows(vectors[sample])
        else:
            Xn, nonzero = _normalize_rows(vectors)
        tol = self.tol * float(np.mean(np.var(Xn, axis=0))) if self.tol else 0.0
        block_rows = _block_rows(self.block_size, k, Xn.dtype.itemsize)
        best = None
        with _threads(resolve_n_jobs(self.n_jobs)):
            for _ in range(n_init):
                if isinstance(init, str):
                    centers = _init_centroids(
                        Xn, nonzero, k, init, self.init_size, random_state
                    )
                else:
                    centers = init
                run = _spherical_kmeans_single(
                    Xn,
                    centers,
                    nonzero,
                    max_iter=self.max_iter,
                    tol=tol,
                    block_rows=block_rows,
                    verbose=self.verbose,
                )
                if best is None or run[1] < best[1]:
                    best = run
            del Xn, nonzero
            labels, inertia, self.cluster_centers_, self.n_iter_ = best
            if n_fit < n_samples:
                labels, similarity = self._labels(vectors, progress=bool(self.verbose))
                inertia = float(np.sum(1.0 - similarity))
        self.labels_, self.inertia_ = labels, inertia
        self.n_fit_samples_ = n_fit
        self._n_features_out = self.cluster_centers_.shape[0]
        return self

    def _n_fit_samples(self, n_samples: int) -> int:
        """The number of rows the centroids are fitted on, ``max_fit_samples`` resolved."""
        limit = self.max_fit_samples
        if limit is None:
            return n_samples
        if limit == "auto":
            limit = max(_AUTO_SAMPLES_PER_CLUSTER * self.n_clusters_, _AUTO_MIN_SAMPLES)
        elif limit < self.n_clusters_:
            raise ValueError(
                f"max_fit_samples must be at least n_clusters={self.n_clusters_} (or 'auto' "
                f"or None); got {limit}."
            )
        return min(limit, n_samples)

    def _labels(self, X: np.ndarray, *, progress: bool = False):
        """Best centroid of each row of ``X`` (any norm) and its cosine similarity."""
        n = X.shape[0]
        labels = np.empty(n, np.int32)
        similarity = np.empty(n)
        block_rows = _block_rows(self.block_size, self.n_clusters_, X.dtype.itemsize)
        bar = tqdm(
            total=n,
            desc=f"assigning {n:,} rows to {self.n_clusters_:,} centroids",
            unit="row",
            unit_scale=True,
            disable=not progress,
        )
        centers = self.cluster_centers_.astype(X.dtype)
        client = active_client()
        with bar:
            if client is not None:
                assign_all_on_cluster(client, X, centers, block_rows, labels, similarity,
                                      _assign_all, bar)
            else:
                _assign_all(X, centers, block_rows, labels, similarity, bar)
        return labels, similarity

    def predict(self, X) -> np.ndarray:
        """Cluster of highest cosine similarity for each row (or each item).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or EmbeddedLog
            Vectors, or an `EmbeddedLog` whose item vectors are labelled.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            Index of the cluster each row belongs to.
        """
        check_is_fitted(self)
        with _threads(resolve_n_jobs(self.n_jobs)):
            return self._labels(self._vectors(X, reset=False))[0]

    def transform(self, X) -> np.ndarray | EmbeddedLog:
        """Cosine distances to the centroids, or the interests of an `EmbeddedLog`'s items.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or EmbeddedLog
            Vectors, or the output of `GraphEmbedder.transform`.

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_clusters) or EmbeddedLog
            ``1 - cos`` of each row to each centroid; for an `EmbeddedLog`, the same log with
            ``item_interest`` set to the predicted cluster of each of its items.
        """
        check_is_fitted(self)
        if isinstance(X, EmbeddedLog):
            return X.with_interests(self.predict(X))
        Xn, _ = _normalize_rows(self._vectors(X, reset=False))
        # wrapped as scikit-learn wraps a transformer's output (set_output); never an
        # EmbeddedLog, which is why the automatic wrapping is off
        return _wrap_data_with_container("transform", self._distances(Xn), X, self)

    def _distances(self, Xn: np.ndarray) -> np.ndarray:
        centers = self.cluster_centers_.astype(Xn.dtype)
        out = np.empty((Xn.shape[0], centers.shape[0]), dtype=Xn.dtype)
        block_rows = _block_rows(self.block_size, self.n_clusters_, Xn.dtype.itemsize)
        for start in range(0, Xn.shape[0], block_rows):
            block = out[start : start + block_rows]
            np.matmul(Xn[start : start + block_rows], centers.T, out=block)
            np.subtract(1.0, block, out=block)
            np.clip(block, 0.0, 2.0, out=block)
        return out

    def fit_transform(self, X, y=None) -> np.ndarray | EmbeddedLog:
        """Fit, then transform ``X`` (see `fit` and `transform`).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or EmbeddedLog
            Vectors, or the output of `GraphEmbedder.transform`.
        y : None
            Ignored.

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_clusters) or EmbeddedLog
            As returned by `transform`; for an `EmbeddedLog`, its items get ``labels_``.
        """
        self.fit(X)
        if isinstance(X, EmbeddedLog):
            return X.with_interests(self.labels_)
        Xn, _ = _normalize_rows(self._vectors(X, reset=False))
        # wrapped as scikit-learn wraps a transformer's output (set_output); never an
        # EmbeddedLog, which is why the automatic wrapping is off
        return _wrap_data_with_container("transform", self._distances(Xn), X, self)

    def score(self, X, y=None) -> float:
        """Opposite of the inertia of ``X`` under the fitted centroids.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or EmbeddedLog
            Vectors, or an `EmbeddedLog` whose item vectors are scored.
        y : None
            Ignored.

        Returns
        -------
        score : float
            ``-sum(1 - cos)`` of the rows to their nearest centroid.
        """
        check_is_fitted(self)
        with _threads(resolve_n_jobs(self.n_jobs)):
            similarity = self._labels(self._vectors(X, reset=False))[1]
        return -float(np.sum(1.0 - similarity))


# transform wraps its array output itself (set_output stays available), never an EmbeddedLog
SphericalKMeans._sklearn_auto_wrap_output_keys = {"transform"}
