"""Co-embedding users and items of an engagement log (paper section 2.1.1)."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted
from threadpoolctl import threadpool_limits
from tqdm.auto import tqdm

from ._kernels import numba_threads
from ._kernels.als import solve_rows
from ._log import EmbeddedLog, EngagementLog, Vocabulary, check_log, lookup_in_blocks
from ._parallel import resolve_n_jobs

__all__ = ["GraphEmbedder"]


def engagement_matrix(
    log: EngagementLog, user_ids: Vocabulary, item_ids: Vocabulary, *, weight: float = 1.0
) -> sp.csr_matrix:
    """Users x items CSR matrix (float32) of engagement counts times ``weight``.

    Unknown ids are dropped. Indices are int32 where the sizes allow, and the ids are looked
    up in blocks, so that the largest temporaries are the int32 (user, item) pairs of the
    log and scipy's counting conversion to CSR, never an int64 copy of the whole log.
    """
    user = lookup_in_blocks(user_ids, log.user, "user")
    item = lookup_in_blocks(item_ids, log.item, "item")
    known = (user >= 0) & (item >= 0)
    if not known.all():
        user, item = user[known], item[known]
    del known
    pairs = sp.coo_matrix(
        (np.full(user.shape[0], weight, dtype=np.float32), (user, item)),
        shape=(len(user_ids), len(item_ids)),
    )
    del user, item
    matrix = pairs.tocsr()  # a counting sort; duplicates are summed
    del pairs
    matrix.sum_duplicates()
    return matrix


class GraphEmbedder(TransformerMixin, BaseEstimator, auto_wrap_output_keys=None):
    """Co-embed the users and items of an engagement log by matrix factorization.

    The log becomes a users x items matrix of engagement counts (the bipartite engagement
    graph), factorized with `implicit` on the CPU: alternating least squares for implicit
    feedback (Hu, Koren and Volinsky, 2008) or Bayesian personalized ranking (Rendle et al.,
    2009). `transform` hands on the log together with the vectors and their id vocabularies
    as an `EmbeddedLog`, for `SphericalKMeans` and the recommenders downstream.

    Parameters
    ----------
    n_components : int, default=128
        Dimension of the user and item vectors.
    method : {"als", "bpr"}, default="als"
        Factorization: alternating least squares (`implicit`'s conjugate-gradient ALS, see
        ``solver``) or `implicit.cpu.bpr.BayesianPersonalizedRanking`.
    solver : {"blocked", "implicit"}, default="blocked"
        ALS only: who runs the conjugate-gradient steps. ``"blocked"``: this package's
        kernel, `implicit`'s updates (3 steps a row from its current vector, the same
        initial vectors) with the rows taken 32 at a time, so that their products with
        the Gram matrix are BLAS matrix products; the vectors agree with `implicit`'s to
        float32 rounding. ``"implicit"``: `implicit.cpu.als.AlternatingLeastSquares`
        itself, one row at a time (bit for bit its vectors). ``docs/scale_embedding_clustering.md``
        measures both.
    regularization : float, default=0.01
        L2 penalty on the vectors.
    iterations : int, default=10
        ALS sweeps (users, then items), or BPR epochs. The paper trains for 20 epochs
        (``iterations=20``); ``docs/scale_embedding_clustering.md`` compares MiCRO's
        recall after 10, 15 and 20. See Notes for the cost of one.
    alpha : float, default=10.0
        ALS only: a (user, item) pair engaged ``c`` times weighs ``alpha * c`` in the loss,
        every other pair 1 (`implicit`'s convention). With ``alpha=1`` (`implicit`'s
        default) the unengaged pairs outweigh the engaged ones and the factorization
        spends its dimensions on them: when a log has many more interests than
        ``n_components``, items of different interests share vectors and the clusters
        lose them (``docs/scale.md`` measures it on the paper's logs).
    negative_weight : float or None, default=None
        ALS only: the total weight of a user's unengaged pairs, spread evenly over the
        items (each weighs ``negative_weight / n_items``, the uniform missing-data weight
        of eALS, He et al. 2016), against ``alpha`` per engagement. With None each
        unengaged pair weighs 1, `implicit`'s convention: a user's unengaged pairs then
        weigh as much as the log has items, so the same ``alpha`` gives a larger log's
        engaged pairs less say, and at the paper's scale the vectors barely tell a user's
        items from others (``docs/scale.md``). A float keeps the balance as the log grows
        with users' degrees unchanged. ``regularization`` keeps its meaning either way.
    learning_rate : float, default=0.01
        BPR only: step size of the stochastic gradient.
    random_state : int, RandomState instance or None, default=None
        Seeds the initial vectors (and BPR's sampling). Pass an int for reproducible
        results; with ``method="bpr"`` they also need ``n_jobs=None`` or 1, since its
        threads update the vectors concurrently.
    n_jobs : int or None, default=None
        Threads of the factorization. None means 1 unless in a `joblib.parallel_config`
        context; -1 means all processors, -2 all but one, as in scikit-learn. BLAS is held
        to one thread meanwhile (`implicit` parallelizes over rows itself).
    verbose : int, default=0
        When positive, show a progress bar on stderr with one tick per epoch.

    Attributes
    ----------
    user_ids_ : Vocabulary
        External user ids; row ``j`` of ``user_vectors_`` belongs to ``user_ids_.ids[j]``.
    item_ids_ : Vocabulary
        External item ids; row ``j`` of ``item_vectors_`` belongs to ``item_ids_.ids[j]``.
    user_vectors_ : ndarray of shape (n_users, n_components), dtype float32
        User vectors.
    item_vectors_ : ndarray of shape (n_items, n_components), dtype float32
        Item vectors.

    See Also
    --------
    SphericalKMeans : Clusters the item vectors into interests.

    Notes
    -----
    With BPR, `implicit` adds an item bias as one more dimension (and a constant 1 to the
    users); it is left out here, so that both methods give ``n_components`` dimensions and
    the item vectors carry direction only.

    `transform` does not embed new users or items: the `EmbeddedLog` it returns holds the
    given log with the vocabularies and vectors learnt in `fit`.

    Cost. One ALS epoch solves every user and every item by conjugate gradient (3 steps),
    about ``(n_users + n_items) * n_components**2`` plus ``n_pairs * n_components``
    multiply-adds per step; at 128 dimensions the first term dominates, which the
    ``"blocked"`` solver runs as matrix products. One BPR epoch draws as many (user,
    engaged item, other item) triples as there are engaged pairs. Memory: the users x items
    matrix is built from int32 indices (about 8 bytes per distinct pair, twice while ALS
    holds its transpose), then the float32 vectors, ``4 * n_components * (n_users +
    n_items)`` bytes, are all that is kept.
    ``docs/scale_embedding_clustering.md`` has measured seconds per epoch and peak memory.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_micro.embedding import GraphEmbedder
    >>> log = np.array([[0, 10, 0], [0, 11, 0], [1, 10, 0], [2, 12, 1], [2, 13, 1]])
    >>> embedder = GraphEmbedder(n_components=4, random_state=0).fit(log)
    >>> embedder.item_vectors_.shape, embedder.item_vectors_.dtype
    ((4, 4), dtype('float32'))
    >>> embedder.item_ids_.ids
    array([10, 11, 12, 13])
    >>> embedded = embedder.transform(log)
    >>> embedded.user_vectors.shape, len(embedded)
    ((3, 4), 5)
    """

    _parameter_constraints: dict = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "method": [StrOptions({"als", "bpr"})],
        "solver": [StrOptions({"blocked", "implicit"})],
        "regularization": [Interval(Real, 0, None, closed="left")],
        "iterations": [Interval(Integral, 1, None, closed="left")],
        "alpha": [Interval(Real, 0, None, closed="left")],
        "negative_weight": [Interval(Real, 0, None, closed="neither"), None],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "random_state": ["random_state"],
        "n_jobs": [Integral, None],
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        n_components: int = 128,
        *,
        method: str = "als",
        solver: str = "blocked",
        regularization: float = 0.01,
        iterations: int = 10,
        alpha: float = 10.0,
        negative_weight: float | None = None,
        learning_rate: float = 0.01,
        random_state: int | np.random.RandomState | None = None,
        n_jobs: int | None = None,
        verbose: int = 0,
    ):
        self.n_components = n_components
        self.method = method
        self.solver = solver
        self.regularization = regularization
        self.iterations = iterations
        self.alpha = alpha
        self.negative_weight = negative_weight
        self.learning_rate = learning_rate
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose

    def _seed(self) -> int:
        return int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))

    def _model(self, threads: int, regularization: float):
        seed = self._seed()
        if self.method == "als":
            from implicit.cpu.als import AlternatingLeastSquares

            # the matrix comes weighted by alpha already (no scaled copy inside implicit)
            return AlternatingLeastSquares(
                factors=self.n_components,
                regularization=regularization,
                alpha=1.0,
                iterations=self.iterations,
                num_threads=threads,
                random_state=seed,
            )
        from implicit.cpu.bpr import BayesianPersonalizedRanking

        return BayesianPersonalizedRanking(
            factors=self.n_components,
            learning_rate=self.learning_rate,
            regularization=regularization,
            iterations=self.iterations,
            num_threads=threads,
            random_state=seed,
        )

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None) -> GraphEmbedder:
        """Embed the users and items of an engagement log.

        Parameters
        ----------
        X : DataFrame with columns ``user``, ``item``, ``chunk``, int array of shape (n, 3) \
                or EngagementLog
            The engagement log, one engagement per row.
        y : None
            Ignored.

        Returns
        -------
        self : GraphEmbedder
            The fitted estimator.
        """
        if self.n_jobs == 0:
            raise ValueError(
                "n_jobs must be a positive number of threads, -1 for all processors, or "
                "None; got 0."
            )
        threads = resolve_n_jobs(self.n_jobs)
        log = check_log(X)
        self.user_ids_ = Vocabulary.from_ids(log.user)
        self.item_ids_ = Vocabulary.from_ids(log.item)
        # the loss divided by an unengaged pair's weight: implicit's form, where it is 1
        scale = 1.0
        if self.method == "als" and self.negative_weight is not None:
            scale = len(self.item_ids_) / self.negative_weight
        weight = self.alpha * scale if self.method == "als" else 1.0
        regularization = self.regularization * scale
        matrix = engagement_matrix(log, self.user_ids_, self.item_ids_, weight=weight)
        progress = tqdm(
            total=self.iterations,
            desc=f"graph embedding ({self.method.upper()})",
            unit="epoch",
            disable=not self.verbose,
        )
        if self.method == "als" and self.solver == "blocked":
            with progress:
                self.user_vectors_, self.item_vectors_ = blocked_als(
                    matrix, self.n_components, regularization, self.iterations,
                    self._seed(), threads, progress)
            return self
        with threadpool_limits(1, user_api="blas"), progress:
            model = self._model(threads, regularization)  # implicit checks the BLAS threads here
            if self.method == "als":
                model.user_factors, model.item_factors = _initial_factors(
                    model.random_state, *matrix.shape, model.factors)
            model.fit(matrix, show_progress=False, callback=lambda *_: progress.update(1))
        del matrix
        # one factor matrix at a time, so that a trimmed copy never meets both originals
        self.user_vectors_ = _vectors(model, "user_factors", self.n_components)
        self.item_vectors_ = _vectors(model, "item_factors", self.n_components)
        return self

    def transform(self, X) -> EmbeddedLog:
        """The log with the fitted vocabularies and vectors, for the next pipeline step.

        Parameters
        ----------
        X : DataFrame with columns ``user``, ``item``, ``chunk``, int array of shape (n, 3) \
                or EngagementLog
            An engagement log; its ids need not have been seen in `fit`.

        Returns
        -------
        embedded : EmbeddedLog
            ``X`` validated, with ``user_ids_``, ``item_ids_``, ``user_vectors_`` and
            ``item_vectors_``.
        """
        check_is_fitted(self)
        return EmbeddedLog(
            log=check_log(X),
            user_ids=self.user_ids_,
            item_ids=self.item_ids_,
            user_vectors=self.user_vectors_,
            item_vectors=self.item_vectors_,
        )


def _initial_factors(seed: int, n_users: int, n_items: int, factors: int):
    """The initial user and item vectors `implicit`'s ALS would draw from ``seed``.

    `implicit` draws ``random(shape) * 0.01``, which holds a second copy of each factor
    matrix for a moment (at 128 dimensions, the largest temporary of the whole fit); the
    same values are drawn here and scaled without a copy.
    """
    rng = np.random.default_rng(seed)
    drawn = []
    for n in (n_users, n_items):
        vectors = rng.random((n, factors), dtype=np.float32)
        vectors *= np.float32(0.01)
        drawn.append(vectors)
    return tuple(drawn)


def blocked_als(matrix: sp.csr_matrix, factors: int, regularization: float,
                iterations: int, seed: int, threads: int, progress=None):
    """`implicit`'s conjugate-gradient ALS (3 steps a row, the same initial vectors as its
    ``random_state=seed``) on the users x items ``matrix`` of confidences, with
    `solve_rows`' blocked kernel on ``threads`` threads; one ``progress.update(1)`` per
    epoch. Returns the user and item vectors (float32, C order)."""
    by_user = _kernel_csr(matrix)
    by_item = _kernel_csr(matrix.T.tocsr())  # as implicit: both orientations at once
    del matrix
    users, items = _initial_factors(seed, by_user[0].shape[0] - 1, by_item[0].shape[0] - 1,
                                    factors)
    eye = np.float32(regularization) * np.eye(factors, dtype=np.float32)
    with numba_threads(threads):
        for _ in range(iterations):
            for solved, other, csr in ((users, items, by_user), (items, users, by_item)):
                with threadpool_limits(threads, user_api="blas"):
                    gram = other.T @ other
                # implicit reads the upper triangle (symv "U"): so do both halves here
                gram = np.triu(gram) + np.triu(gram, 1).T + eye
                # each block of rows calls BLAS from a thread of its own
                with threadpool_limits(1, user_api="blas"):
                    solve_rows(*csr, solved, other, gram, 3)
            if progress is not None:
                progress.update(1)
    return users, items


def _kernel_csr(matrix: sp.csr_matrix):
    """(indptr as int64, indices, data as float32) of a CSR matrix, for the kernel."""
    return (matrix.indptr.astype(np.int64, copy=False), matrix.indices,
            matrix.data.astype(np.float32, copy=False))


def _vectors(model, name: str, n_components: int) -> np.ndarray:
    """A factor matrix of ``model`` as C-contiguous float32 of ``n_components`` columns.

    BPR's last column (the item bias, and the users' constant 1) is dropped. The model's
    reference is cleared, so the original is freed as soon as a copy was needed.
    """
    factors = getattr(model, name)
    setattr(model, name, None)
    if hasattr(factors, "to_numpy"):  # GPU matrices of implicit
        factors = factors.to_numpy()
    return np.ascontiguousarray(np.asarray(factors)[:, :n_components], dtype=np.float32)
