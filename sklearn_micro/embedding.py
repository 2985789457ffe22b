"""Co-embedding users and items of an engagement log (paper section 2.1.1)."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from joblib import effective_n_jobs
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted
from threadpoolctl import threadpool_limits

from ._log import EmbeddedLog, EngagementLog, Vocabulary, check_log

__all__ = ["GraphEmbedder"]


def engagement_matrix(
    log: EngagementLog, user_ids: Vocabulary, item_ids: Vocabulary
) -> sp.csr_matrix:
    """Users x items CSR matrix (float32) of engagement counts; unknown ids are dropped."""
    user = user_ids.lookup(log.user, name="user")
    item = item_ids.lookup(log.item, name="item")
    known = (user >= 0) & (item >= 0)
    counts = np.ones(int(known.sum()), dtype=np.float32)
    matrix = sp.csr_matrix(
        (counts, (user[known], item[known])), shape=(len(user_ids), len(item_ids))
    )
    matrix.sum_duplicates()
    return matrix


class GraphEmbedder(TransformerMixin, BaseEstimator):
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
        Factorization: `implicit.cpu.als.AlternatingLeastSquares` or
        `implicit.cpu.bpr.BayesianPersonalizedRanking`.
    regularization : float, default=0.01
        L2 penalty on the vectors.
    iterations : int, default=15
        ALS sweeps, or BPR epochs.
    alpha : float, default=1.0
        ALS only: confidence weight of an engagement count ``c`` is ``1 + alpha * c``.
    learning_rate : float, default=0.01
        BPR only: step size of the stochastic gradient.
    random_state : int, RandomState instance or None, default=None
        Seeds the initial vectors (and BPR's sampling). Pass an int for reproducible
        results; with ``method="bpr"`` they also need ``n_jobs=None`` or 1, since its
        threads update the vectors concurrently.
    n_jobs : int or None, default=None
        Threads of the factorization. None means 1 unless in a `joblib.parallel_backend`
        context; -1 means all processors. BLAS is held to one thread meanwhile.
    verbose : int, default=0
        Show `implicit`'s progress bar when positive.

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
        "regularization": [Interval(Real, 0, None, closed="left")],
        "iterations": [Interval(Integral, 1, None, closed="left")],
        "alpha": [Interval(Real, 0, None, closed="left")],
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
        regularization: float = 0.01,
        iterations: int = 15,
        alpha: float = 1.0,
        learning_rate: float = 0.01,
        random_state: int | np.random.RandomState | None = None,
        n_jobs: int | None = None,
        verbose: int = 0,
    ):
        self.n_components = n_components
        self.method = method
        self.regularization = regularization
        self.iterations = iterations
        self.alpha = alpha
        self.learning_rate = learning_rate
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose

    def _model(self):
        seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        threads = effective_n_jobs(self.n_jobs)
        if self.method == "als":
            from implicit.cpu.als import AlternatingLeastSquares

            return AlternatingLeastSquares(
                factors=self.n_components,
                regularization=self.regularization,
                alpha=self.alpha,
                iterations=self.iterations,
                num_threads=threads,
                random_state=seed,
            )
        from implicit.cpu.bpr import BayesianPersonalizedRanking

        return BayesianPersonalizedRanking(
            factors=self.n_components,
            learning_rate=self.learning_rate,
            regularization=self.regularization,
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
        log = check_log(X)
        self.user_ids_ = Vocabulary.from_ids(log.user)
        self.item_ids_ = Vocabulary.from_ids(log.item)
        with threadpool_limits(1, user_api="blas"):
            model = self._model()
            model.fit(
                engagement_matrix(log, self.user_ids_, self.item_ids_),
                show_progress=bool(self.verbose),
            )
        user_vectors = _as_numpy(model.user_factors)
        item_vectors = _as_numpy(model.item_factors)
        if self.method == "bpr":
            user_vectors = user_vectors[:, : self.n_components]
            item_vectors = item_vectors[:, : self.n_components]
        self.user_vectors_ = np.ascontiguousarray(user_vectors, dtype=np.float32)
        self.item_vectors_ = np.ascontiguousarray(item_vectors, dtype=np.float32)
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


def _as_numpy(factors) -> np.ndarray:
    """Factors as a NumPy array (GPU matrices of `implicit` have ``to_numpy``)."""
    return factors.to_numpy() if hasattr(factors, "to_numpy") else np.asarray(factors)
