"""MiCRO: multi-interest candidate retrieval online."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, replace
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, _fit_context, clone
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._gibbs import build_layout, partitions_for, run_chain
from ._kernels import numba_threads, sampler
from ._kernels.csr import keep_entries
from ._kernels.request import candidate_topm
from ._kernels.topm import (
    fill_remainder,
    group_by_interest,
    mixture_topm,
    personal_ranks,
    personal_topm,
    retrieval_phi,
)
from ._kernels.vocabulary import present_values
from ._log import (
    EmbeddedLog,
    EngagementLog,
    Vocabulary,
    as_ids,
    check_log,
    distinct,
    index_dtype,
    iter_chunks,
)
from ._online import (
    Explanation,
    item_mixtures,
    mixtures_with_history,
    recent_with_history,
)
from ._parallel import resolve_n_jobs
from ._request import ItemLists, own_items, parse_request, removed_items, single_list
from .base import RecommenderMixin, SeenItems, append_to_rows, csr_rows, unique_pairs

__all__ = ["MiCRO"]

# interests are numbered below this (arrays of size K are kept per chunk)
MAX_INTERESTS = 2**24

# carried phi counts below this mass are dropped
_MIN_MASS = 0.01

# the values phi_decay="auto" chooses from
PHI_DECAY_GRID = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9)

# the weights personal="learned" chooses from, and the share of the held-out recall of
# weight 0 that the chosen one keeps at least
PERSONAL_GRID = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75)
RECALL_KEPT = 0.99


def _numba_threads(n_jobs):
    """numba's threads set to ``n_jobs`` (scikit-learn's meaning) inside the block."""
    return numba_threads(resolve_n_jobs(n_jobs))


def _carried_chunks(decay: float) -> int:
    """How many chunks back a count of one keeps at least ``_MIN_MASS`` under ``decay``."""
    return 0 if decay <= 0 else int(np.floor(np.log(_MIN_MASS) / np.log(decay)))


def _as_index(values: np.ndarray, n: int | None = None) -> np.ndarray:
    """``values``, indices below ``n`` (or sorted, when ``n`` is None), as `index_dtype`."""
    if n is None:
        n = int(values[-1]) + 1 if values.shape[0] else 0
    return values.astype(index_dtype(n), copy=False)


def _counts_csr(rows: np.ndarray, cols: np.ndarray, n_rows: int, n_cols: int,
                weights: np.ndarray | None = None):
    """Distinct (row, col) pairs with summed weights, sorted by row then col, as a CSR
    ``(indptr, cols as int32, sums as float64)``."""
    weights = np.empty(0) if weights is None else np.asarray(weights, np.float64)
    return sampler.pair_counts(_as_index(rows, n_rows), _as_index(cols, n_cols), weights,
                               n_rows, n_cols)


class MiCRO(RecommenderMixin, BaseEstimator):
    """Multi-interest candidate retrieval that adapts online to new items and trends.

    Each user is a mixture ``theta_u`` over a sparse set of interests (the support, taken
    from the interests of the items the user engaged with in training); each interest is a
    distribution ``phi[k, t]`` over the items of time chunk ``t``. `fit` starts from the
    interest clusters of the training items, `partial_fit` runs a collapsed Gibbs sampler on
    each new chunk (new items welcome), and `recommend` returns the items with the highest
    ``p_t(i|u) = sum_k theta_u[k] * phi[k, t][i]`` for the latest chunk.

    Parameters
    ----------
    alpha : float, default=1.0
        Dirichlet prior of ``theta_u`` on each interest of the user's support (zero
        elsewhere).
    beta : float, default=0.01
        Symmetric Dirichlet prior of ``phi[k, t]`` over the ``I_t`` distinct items of chunk
        ``t``.
    personal : float in [0, 1] or "learned", default="learned"
        Weight ``lam`` of the user's own recent items as one more component of the
        mixture: items are ranked by ``s(i) = (1 - lam_u) * p_t(i|u) + lam_u * r_u(i)``,
        where ``r_u`` is the user's engagements of the last ``personal_window`` chunks,
        each weighted ``personal_decay ** age`` (age in chunks), normalized over the
        user's items, and ``lam_u = lam`` for a user with such an engagement, else 0.
        Recent items that left the latest chunk are candidates too. "learned" chooses
        ``lam`` at `fit` from (0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75) by
        held-out ranking: each of the last 4 training chunks is ranked, as `recommend`
        does, from the state `fit` leaves on the chunks before it, for up to 4,000 of its
        users with recent items; the weight with the best mean MRR@100 wins among those
        keeping 99% of the recall@100 of 0 (ties to the smaller). 0 is the paper's model.
    personal_window : int, default=8
        Chunks of a user's history that make up ``r_u``.
    personal_decay : float in (0, 1], default=0.5
        Weight of an engagement in ``r_u`` per chunk of age.
    phi_decay : float in [0, 1) or "auto", default="auto"
        Weight of the previous ``phi`` counts carried into each new chunk's, for
        retrieval: ``phi`` after chunk ``t`` comes from ``N[i, k, t] + phi_decay *
        N'[i, k, t - 1]`` (and popularity likewise), so items engaged in recent chunks
        stay candidates with a decaying weight. 0 is the paper's model (``phi[k, t]`` from
        chunk ``t`` alone); logs whose items live long (authors, movies) gain from 0.5 or
        more. "auto" chooses it at `fit` from the training log: the value of (0, 0.1,
        0.25, 0.5, 0.75, 0.9) whose decayed popularity best predicts the next chunk's
        items over the last 8 training chunks (mean recall@100). The sampler always uses
        chunk ``t``'s counts only.
    phi_min_count : float >= 0, default=0
        Retrieval's pruning of ``phi``: `recommend` scores an item from an interest only
        where the item holds at least this many of the interest's engagements in the
        latest chunk (``N[i, k, t]``, decayed counts included); a smaller count is taken
        as 0, so ``phi[k, t][i]`` is at its floor ``beta / (I_t * beta + N[k, t])``, as
        for an item outside the interest. The paper retrieves so, "only evaluating
        candidate items i such that phi_{k,t}(i) is not small"; 0 scores every count, the
        exact top m. 2 leaves out the entries of a single engagement (about two thirds of
        them on fave-shaped logs): the rolling evaluation's ranking step is 1.4 (1/20 of
        fave's scale) and 1.7 (1/4) times faster than the exact top m for 2.8% and 1.2%
        of recall@100 (at full scale, measured before the exact top m became faster, 1.9
        times for 0.6%). With ``phi_decay``, 0.5 drops only carried counts under half an
        engagement, for 0.1% of recall@100 (docs/scale_history.md, "Pruning phi for
        retrieval"). The held-out
        choice of ``personal="learned"`` ranks as `recommend` does; the sampler and
        `item_interests` use every count.
    max_sweeps : int, default=100
        Cap on Gibbs sweeps per chunk.
    tol : float, default=1e-3
        Convergence criterion. After each sweep the chunk's collapsed log-likelihood is
        computed; the chain is taken as converged when the mean of the last ``window``
        sweeps' log-likelihoods improves on the mean of the ``window`` sweeps before by
        less than ``tol`` relative to its magnitude (it has stopped rising and only
        fluctuates), with ``window = 3``. ``tol=0`` runs ``max_sweeps`` sweeps.
    random_state : int, RandomState instance or None, default=None
        Seeds the sampler. The stream carries on across `partial_fit` calls.
    n_jobs : int or None, default=None
        Parallel work. The sampler splits a chunk's users into ``n_jobs`` partitions of
        about equal work and samples them at once on threads, each against its own copy
        of the (item, interest) counts it touches; the copies' changes are merged after
        every sweep (AD-LDA, Newman et al. 2009). A chunk gets fewer partitions when each
        would visit fewer than 2**22 (about 4.2 million) support entries a sweep, where a
        second thread costs more than it saves: a small chunk is sampled as one chain
        whatever ``n_jobs`` (for users of 25 interests, below about 170,000
        engagements). `recommend` ranks users on ``n_jobs`` threads. None means 1 unless
        in a `joblib.parallel_config` context; -1 means all processors. Results are
        deterministic for a given ``random_state`` and ``n_jobs``; different ``n_jobs``
        give different chains of the same quality.
        Inside ``joblib.parallel_config(backend="dask")`` the partitions are sampled on
        the cluster's workers, with the same results as on threads; None or -1 then means
        the cluster's worker threads (see docs/dask.md).
    verbose : int, default=0
        Print one line per chunk (sweeps, changed assignments, log-likelihood), and in
        `fit` one line per setting chosen from the training log ("auto", "learned") with
        the seconds it took.

    Attributes
    ----------
    user_ids_, item_ids_ : Vocabulary
        External ids of every user and item seen so far; the internal index of an id is its
        position.
    n_interests_ : int
        Number of interests K.
    phi_decay_ : float
        The ``phi_decay`` in use: the one given, or the one "auto" chose.
    personal_weight_ : float
        The weight ``lam`` of the personal component: the one given, or the one
        "learned" chose.
    recent_indptr_, recent_item_, recent_chunk_, recent_weight_ : ndarray
        The users' recent items as a CSR over users, one entry per (user, item, chunk) of
        the last ``personal_window`` chunks: the item (int32), the chunk (int32) and
        ``personal_decay ** age`` times the engagements (float32). Empty when
        ``personal_weight_`` is 0.
    support_indptr_, support_interest_, support_count_ : ndarray
        Users' supports as a CSR: the interests of user ``u`` are
        ``support_interest_[support_indptr_[u]:support_indptr_[u + 1]]`` with counts
        ``N[u, k]`` (training plus every chunk sampled so far) in ``support_count_``.
    item_interest_ : ndarray of shape (n_items,)
        Each item's main interest: its cluster for training items, then the interest that
        holds most of its engagements in the latest chunk it appeared in; -1 if none.
    latest_chunk_ : int
        The chunk that `recommend` ranks items for.
    chunk_items_ : ndarray
        Internal indices of the ``I_t`` distinct items of the latest chunk.
    chunk_item_count_ : ndarray
        Engagements per item of ``chunk_items_`` in the latest chunk (their popularity).
    phi_indptr_, phi_item_, phi_count_ : ndarray
        ``N[i, k, t]`` of the latest chunk as a CSR from interest to positions in
        ``chunk_items_``.
    interest_count_ : ndarray of shape (n_interests,)
        ``N[k, t]`` of the latest chunk.
    popular_order_ : ndarray
        Positions in ``chunk_items_`` from the most to the least engaged item (ties to the
        lower index): the order that fills slots and breaks ties.
    chunk_alone_ : dict or None
        With ``phi_decay_ > 0``, the latest chunk's popularity and ``phi`` from its own
        counts alone (what the paper's model ranks from; see `paper_model`), under the
        keys ``chunk``, ``items``, ``item_count``, ``phi_indptr``, ``phi_item``,
        ``phi_count``, ``interest_count`` and ``popular_order`` (the attributes above).
        None when the latest chunk's state is its own already.
    seen_items_ : SeenItems
        The (user, item) pairs of every log given so far, for ``exclude_seen``.
    n_sweeps_ : dict
        Sweeps the sampler ran, per chunk.
    log_likelihood_ : dict
        The per-sweep log-likelihood trace of each sampled chunk.
    n_unassigned_ : dict
        Engagements per chunk that no interest could be given to (see Notes).

    See Also
    --------
    SphericalKMeans : Clusters the item vectors into the interests MiCRO starts from.
    sklearn_micro.baselines.ANNRecommender : The nearest-neighbour baseline.
    sklearn_micro.model_selection.rolling_evaluate : Scores a recommender over time.

    Notes
    -----
    Defaults where the paper leaves a choice:

    - ``I_t`` is the number of distinct items in chunk ``t``; ``phi[k, t]`` uses chunk
      ``t``'s counts only, while a user's counts carry training and all earlier chunks.
    - In the sampler a user's counts are the carried counts plus the chunk's other
      engagements; ``z`` starts uniform over the user's support.
    - Right after `fit`, ``phi`` comes from the last training chunk with ``z`` the item's
      interest.
    - A user with no support yet (not in training) takes, for a chunk, the main interests
      of the items it engages with there as its support. If all its items are new, it gets
      a second chance once the chain has converged: the interests the chain gave those
      items, then the chain runs again. After the chunk its support is the interests its
      engagements were given. Engagements still without an interest stay unassigned: they
      count in ``I_t`` and in popularity but not in ``phi``.
    - ``recommend`` scores the latest chunk's items; with ``phi_decay > 0`` also the items
      of earlier chunks still carrying mass.
    - `recommend` scores only items with ``phi`` mass. Items outside the user's interests
      all have the same model score, so ties and the slots that the user's interests cannot
      fill are given by the latest chunk's popularity, scored with the model value of an
      item outside those interests. A user never seen gets the latest chunk's popularity
      ranking, scored by its share of the chunk's engagements. Fewer than ``m`` items in
      the chunk: the rest is padded with -1 and -inf.
    - With ``personal_weight_ > 0`` a user with recent items is scored ``s(i)`` over the
      latest chunk's items and its recent items (``p_t`` is 0 for an item outside the
      chunk), with the same ties, and the top ``m`` of ``s`` is exact.
    - The paper's exact model is ``MiCRO(personal=0, phi_decay=0)``; the defaults are
      "learned" and "auto".

    At request time (docs: "Online use"), ``recommend(..., history=...)`` answers from the
    state and a user's engagements since the latest chunk, without changing the model:
    each history engagement adds one to ``N[u, k]`` for its item's main interest
    (``item_interest_``; an interest outside the support joins it, as the sampler gives a
    user new in a chunk the interests of its items), and with ``personal_weight_ > 0``
    joins the user's recent items, weighing what an engagement of the next chunk would
    (``1 / personal_decay`` against the latest chunk's 1). An item without an interest
    counts for the personal component and ``exclude_seen`` only. `similar_items` ranks
    from an item's own mixture over interests; `explain` splits scores into their terms.

    `partial_fit` samples on a copy of the state and publishes the new one in one swap,
    so `recommend`, `similar_items` and `explain` on other threads see the state before a
    chunk or after it, never a mix.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_micro import MiCRO
    >>> train = np.array([[0, 10, 0], [0, 11, 0], [1, 12, 0], [1, 13, 0]])
    >>> model = MiCRO(random_state=0).fit(
    ...     train, item_interest=([10, 11, 12, 13], [0, 0, 1, 1]))
    >>> model = model.partial_fit(np.array([[0, 20, 1], [1, 21, 1], [2, 20, 1]]))
    >>> items, scores = model.recommend([0, 1], m=2)
    >>> items
    array([[20, 21],
           [21, 20]])
    """

    _parameter_constraints: dict = {
        "alpha": [Interval(Real, 0, None, closed="neither")],
        "beta": [Interval(Real, 0, None, closed="neither")],
        "personal": [Interval(Real, 0, 1, closed="both"), StrOptions({"learned"})],
        "personal_window": [Interval(Integral, 1, None, closed="left")],
        "personal_decay": [Interval(Real, 0, 1, closed="right")],
        "phi_decay": [Interval(Real, 0, 1, closed="left"), StrOptions({"auto"})],
        "phi_min_count": [Interval(Real, 0, None, closed="left")],
        "max_sweeps": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "random_state": ["random_state"],
        "n_jobs": [Integral, None],
        "verbose": ["verbose"],
    }

    def __init__(self, alpha=1.0, *, beta=0.01, personal="learned", personal_window=8,
                 personal_decay=0.5, phi_decay="auto", phi_min_count=0, max_sweeps=100,
                 tol=1e-3, random_state=None, n_jobs=None, verbose=0):
        self.alpha = alpha
        self.beta = beta
        self.personal = personal
        self.personal_window = personal_window
        self.personal_decay = personal_decay
        self.phi_decay = phi_decay
        self.phi_min_count = phi_min_count
        self.max_sweeps = max_sweeps
        self.tol = tol
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose

    # ------------------------------------------------------------------ fit

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, *, item_interest=None):
        """Initialize from the interests of the training items.

        Parameters
        ----------
        X : EmbeddedLog or engagement log
            In a Pipeline, the `EmbeddedLog` that `SphericalKMeans` hands on, which carries
            each training item's interest. A plain log (DataFrame with ``user``, ``item``,
            ``chunk`` or an int array (n, 3)) needs ``item_interest``.
        y : None
            Ignored.
        item_interest : tuple (item_ids, interests), optional
            The interest of each training item, for a plain log.

        Returns
        -------
        self : MiCRO
            The fitted model.
        """
        log, vocab, interest = self._training_interests(X, item_interest)
        K = int(interest.max()) + 1
        user_ids = Vocabulary.from_ids(log.user)
        item_ids = Vocabulary.from_ids(log.item)
        u = user_ids.lookup(log.user, dtype=np.int32)
        i = item_ids.lookup(log.item, dtype=np.int32)
        k_item = np.full(len(item_ids), -1, np.int32)
        pos = vocab.lookup(item_ids.ids)
        known = pos >= 0
        k_item[known] = interest[pos[known]]
        if not known.all():
            missing = item_ids.ids[~known][:5]
            raise ValueError(
                f"every training item needs an interest; {int((~known).sum())} have none, "
                f"e.g. {missing.tolist()}."
            )
        z = k_item[i]
        indptr, sup_k, sup_cnt = _counts_csr(u, z, len(user_ids), K)

        self.random_state_ = check_random_state(self.random_state)
        log_chunk = log.chunk
        if self.phi_decay == "auto":
            start = time.perf_counter()
            self.phi_decay_ = _select_phi_decay(u, i, log_chunk, len(item_ids))
            self._say(f"phi_decay {self.phi_decay_} chosen", start)
        else:
            self.phi_decay_ = float(self.phi_decay)
        if self.personal == "learned":
            start = time.perf_counter()
            self.personal_weight_ = _select_personal_weight(
                _TrainingLog(u, i, log_chunk, z, indptr, sup_k, sup_cnt, len(item_ids), K),
                alpha=float(self.alpha), beta=float(self.beta), phi_decay=self.phi_decay_,
                window=self.personal_window, decay=self.personal_decay,
                min_count=float(self.phi_min_count), n_jobs=self.n_jobs)[0]
            self._say(f"personal weight {self.personal_weight_} chosen", start)
        else:
            self.personal_weight_ = float(self.personal)
        self.user_ids_ = user_ids
        self.item_ids_ = item_ids
        self.n_interests_ = K
        self.support_indptr_ = indptr
        self.support_interest_ = sup_k.astype(np.int32)
        self.support_count_ = sup_cnt.astype(np.int32)
        self.item_interest_ = k_item
        self.seen_items_ = SeenItems().add(u, i)
        # phi of the last training chunk, with the decayed earlier ones when phi_decay > 0
        last = int(log.chunk.max())
        carried = log.chunk >= last - _carried_chunks(self.phi_decay_)
        for pos, (chunk, rows) in enumerate(iter_chunks(log.chunk[carried])):
            rows = np.flatnonzero(carried)[rows]
            self._set_chunk(chunk, i[rows], i[rows], z[rows], np.ones(rows.shape[0]),
                            carry=pos > 0)
        recent = (log_chunk > last - self.personal_window) & (self.personal_weight_ > 0)
        self.recent_indptr_, self.recent_item_, self.recent_chunk_, self.recent_weight_ = (
            _recent_items(u[recent], i[recent], log_chunk[recent],
                          self.personal_decay ** (last - log_chunk[recent]), len(user_ids)))
        self.n_sweeps_ = {}
        self.log_likelihood_ = {}
        self.n_unassigned_ = {}
        return self

    def _say(self, what, start):
        """With ``verbose``, one line: what `fit` has done and the seconds since ``start``."""
        if self.verbose:
            print(f"[MiCRO] fit: {what} in {time.perf_counter() - start:.1f} s", flush=True)

    def _training_interests(self, X, item_interest):
        if isinstance(X, EmbeddedLog):
            if X.item_interest is None:
                raise ValueError(
                    "MiCRO needs the interest of each training item: put SphericalKMeans "
                    "between GraphEmbedder and MiCRO, or pass item_interest."
                )
            return check_log(X), X.item_ids, np.asarray(X.item_interest, np.int64)
        log = check_log(X)
        if item_interest is None:
            raise ValueError(
                "MiCRO.fit on a plain engagement log needs item_interest=(item_ids, "
                "interests); in a Pipeline, SphericalKMeans provides it."
            )
        try:
            ids, labels = item_interest
        except (TypeError, ValueError):
            raise ValueError(
                "item_interest must be a pair (item_ids, interests) of equal length; got "
                f"{type(item_interest).__name__}."
            ) from None
        ids = np.asarray(ids)
        labels = np.asarray(labels)
        if ids.shape != labels.shape or ids.ndim != 1:
            raise ValueError(
                "item_interest must be a pair (item_ids, interests) of equal length; got "
                f"shapes {ids.shape} and {labels.shape}."
            )
        if labels.dtype.kind not in "iu" or (labels.size and labels.min() < 0):
            raise ValueError(
                "item_interest: interests must be non-negative integers; got "
                f"dtype {labels.dtype}" + (f", min {labels.min()}." if labels.size else ".")
            )
        if labels.size and labels.max() >= MAX_INTERESTS:
            raise ValueError(
                f"item_interest: interests must be below {MAX_INTERESTS:,} (K is the largest "
                f"interest plus one); got {labels.max()}."
            )
        vocab = Vocabulary(ids)
        return log, vocab, labels.astype(np.int64)

    def _set_chunk(self, chunk, items, phi_items, phi_k, phi_w, *, carry=False):
        """Make ``chunk`` the latest: popularity from its engagements' ``items``, ``phi``
        from the counts ``phi_w`` of (``phi_items``, ``phi_k``) pairs, plus, with ``carry``
        and ``phi_decay_ > 0``, the decayed counts of the previous chunk."""
        alone = _latest_chunk(chunk, items, phi_items, phi_k, phi_w, self.n_interests_, 0.0)
        if carry and self.phi_decay_ > 0:
            _latest_chunk(chunk, items, phi_items, phi_k, phi_w, self.n_interests_,
                          self.phi_decay_, _LatestChunk.of(self)).set_on(self)
            # what the paper's model (phi_decay=0) ranks from, for `paper_model`
            self.chunk_alone_ = alone.as_dict()
        else:
            alone.set_on(self)
            self.chunk_alone_ = None

    # ---------------------------------------------------------- partial_fit

    def partial_fit(self, X, y=None):
        """Run the Gibbs sampler on the engagements of one or more new chunks, in order.

        Items never seen before are welcome. Every chunk must be newer than the latest chunk
        seen so far. The call is all or nothing: if it fails, the model is left as it was.

        Parameters
        ----------
        X : engagement log or EmbeddedLog
            The engagements (``user``, ``item``, ``chunk``) of the new chunk(s).
        y : None
            Ignored.

        Returns
        -------
        self : MiCRO
            The model, moved to the latest chunk of ``X``.
        """
        check_is_fitted(self, "support_indptr_", msg=(
            "MiCRO.partial_fit needs a fitted model: call fit on the training log (or the "
            "Pipeline) first."))
        self._validate_params()
        log = check_log(X)
        first = int(log.chunk.min())
        if first <= self.latest_chunk_:
            raise ValueError(
                f"partial_fit takes chunks newer than the latest chunk {self.latest_chunk_}; "
                f"got chunk {first}."
            )
        # the chunks are sampled on a copy (its own random stream) and the new state is
        # published in one swap: readers on other threads see the state before or after
        work = self._published()
        work.__dict__ = dict(self.__dict__, random_state_=copy.deepcopy(self.random_state_))
        for chunk, rows in iter_chunks(log.chunk):
            work._sample_chunk(chunk, log.take(rows))
        self._publish(work.__dict__)
        return self

    def _sample_chunk(self, chunk: int, log: EngagementLog) -> None:
        """Sample one chunk and move the model's state to it: lay the chunk out, run the
        chain, commit the counts. Attributes are replaced, never modified in place, so a
        snapshot of ``__dict__`` restores the previous state."""
        engagements = self._chunk_engagements(log)
        supports = self._carried_supports(engagements)
        item_interest = np.concatenate([
            self.item_interest_,
            np.full(len(engagements.item_ids) - len(self.item_ids_), -1, np.int32)])
        z = np.full(engagements.n_engagements, -1, np.int32)
        rng = self.random_state_
        chunk_seed = int(rng.randint(np.iinfo(np.int32).max))
        n_jobs = resolve_n_jobs(self.n_jobs)
        trace: list[float] = []
        # Pass 1 gives users without a support the interests of their items; pass 2 does the
        # same, with the interests pass 1 gave new items, for users still without one.
        for pass_ in range(2):
            supports, added = supports.adopt_item_interests(engagements, item_interest)
            if pass_ > 0 and not added:
                break
            size = np.diff(supports.ptr)[engagements.local_user]
            assignable = size > 0
            start = assignable & (z < 0)
            z[start] = (rng.random_sample(int(start.sum())) * size[start]).astype(np.int32)
            layout, counts = build_layout(
                engagements.local_user[assignable], engagements.local_item[assignable],
                supports.ptr, supports.interest, self.alpha + supports.carried,
                z[assignable], n_interests=self.n_interests_, n_items=engagements.n_items)
            z_assignable = z[assignable]
            if not assignable.any():
                break
            with _numba_threads(self.n_jobs):
                trace += run_chain(layout, counts, z_assignable, beta=float(self.beta),
                                   max_sweeps=self.max_sweeps, tol=self.tol,
                                   chunk_seed=chunk_seed, pass_=pass_, n_jobs=n_jobs)
            z[assignable] = z_assignable
            item_interest = _main_interests(item_interest, engagements.items, layout,
                                            counts.entry_count)
        if self.verbose:
            print(f"[MiCRO] chunk {chunk}: {int(assignable.sum())} engagements, {len(trace)} "
                  "sweeps" + (f", log-likelihood {trace[-1]:.6g}" if trace else ""))
        self._commit_chunk(chunk, engagements, supports, layout, counts, item_interest)
        self.n_sweeps_ = {**self.n_sweeps_, chunk: len(trace)}
        self.log_likelihood_ = {**self.log_likelihood_, chunk: np.array(trace)}
        self.n_unassigned_ = {**self.n_unassigned_, chunk: int((~assignable).sum())}

    def _chain_threads(self, log: EngagementLog) -> int:
        """About how many threads `partial_fit` samples the chunk ``log`` on: the
        partitions (`_gibbs.n_partitions`) of the support entries a sweep visits, counted
        from the supports the chunk's users carry (a user new to the model, whose support
        the chunk makes, counts none)."""
        user = self.user_ids_.lookup(log.user, name="users")
        size = np.diff(self.support_indptr_)
        known = user[(user >= 0) & (user < size.shape[0])]
        return partitions_for(int(size[known].sum()), resolve_n_jobs(self.n_jobs))

    def _chunk_engagements(self, log: EngagementLog) -> _ChunkEngagements:
        """A chunk's engagements in internal indices, sorted by user."""
        user_ids, user = self.user_ids_.extend(log.user, name="users")
        item_ids, item = self.item_ids_.extend(log.item, name="items")
        users, local_user = _local_indices(user, len(user_ids))
        items, local_item = _local_indices(item, len(item_ids))
        order = sampler.group_order(local_user, users.shape[0])
        return _ChunkEngagements(user_ids, item_ids, user[order], item[order], users,
                                 local_user[order], items, local_item[order])

    def _carried_supports(self, engagements: _ChunkEngagements) -> _ChunkSupports:
        """The supports the chunk's users carry from training and earlier chunks."""
        rows = np.where(engagements.users < len(self.user_ids_), engagements.users, -1)
        ptr, position = csr_rows(self.support_indptr_, rows)
        return _ChunkSupports(ptr, self.support_interest_[position],
                              self.support_count_[position], position)

    def _commit_chunk(self, chunk, engagements, supports, layout, counts, item_interest):
        """Move the model to ``chunk``: users' counts, the supports of users that had none,
        item interests, seen items, users' recent items and ``phi``."""
        carried = supports.model_position >= 0
        # users without a support take the interests their engagements were given
        new = ~carried & (counts.user_count > 0)
        local = np.repeat(np.arange(engagements.users.shape[0]), np.diff(supports.ptr))[new]
        self.support_indptr_, self.support_interest_, self.support_count_ = _grown_supports(
            self.support_indptr_, self.support_interest_, self.support_count_,
            len(engagements.user_ids), supports.model_position[carried],
            counts.user_count[carried], engagements.users[local], supports.interest[new],
            counts.user_count[new])
        self.user_ids_ = engagements.user_ids
        self.item_ids_ = engagements.item_ids
        self.item_interest_ = item_interest
        self.seen_items_ = self.seen_items_.add(engagements.user, engagements.item)
        self._add_recent(chunk, engagements.user, engagements.item, len(engagements.user_ids))
        hit = counts.entry_count > 0
        self._set_chunk(chunk, engagements.item, engagements.items[layout.entry_item[hit]],
                        layout.entry_interest[hit], counts.entry_count[hit].astype(np.float64),
                        carry=True)

    def _add_recent(self, chunk, user, item, n_users):
        """Move the users' recent items to ``chunk``: weights times ``personal_decay`` per
        chunk of age, entries older than ``personal_window`` chunks dropped, the chunk's
        engagements (``user``, ``item``: model indices) added with weight 1."""
        if self.personal_weight_ <= 0:
            self.recent_indptr_ = np.zeros(n_users + 1, np.int64)
            return
        keep = self.recent_chunk_ > chunk - self.personal_window
        old_user = np.repeat(np.arange(self.recent_indptr_.shape[0] - 1),
                             np.diff(self.recent_indptr_))[keep]
        age = chunk - self.latest_chunk_
        new = _recent_items(user, item, np.full(user.shape[0], chunk),
                            np.ones(user.shape[0], np.float32), n_users)
        self.recent_indptr_, self.recent_item_, self.recent_chunk_, self.recent_weight_ = (
            _merge_recent(old_user, self.recent_item_[keep], self.recent_chunk_[keep],
                          self.recent_weight_[keep] * np.float32(self.personal_decay ** age),
                          new))

    def _recent_scores(self, user_index, history=None):
        """CSR (indptr, items, r_u) of the users' recent items, ``r_u`` normalized per user
        (distinct items per row, sorted); empty rows for unknown users. A ``history``
        engagement weighs what an engagement of the next chunk would (``1 /
        personal_decay``, the latest chunk's weighing 1)."""
        return recent_with_history(self.recent_indptr_, self.recent_item_,
                                   self.recent_weight_, user_index, history,
                                   1.0 / self.personal_decay, _recent_distributions)

    def paper_model(self) -> MiCRO:
        """The paper's exact model in the state this one's sampler reached.

        ``personal`` and ``phi_decay`` act on retrieval alone: the sampler, the users'
        supports and every chunk's counts are the same whatever their values. This returns
        the `MiCRO` that ``MiCRO(personal=0, phi_decay=0)``, with this model's other
        parameters (an int ``random_state`` among them), would be after the same `fit` and
        `partial_fit` calls: ``phi`` of the latest chunk from its own counts, no recent
        items, the random stream where this model's is. Nothing is sampled again, and the
        two models share their arrays (each call of `partial_fit` replaces a model's
        arrays, never changes them, so either model can go on alone). Comparing the
        defaults with the paper's model over the rolling protocol so costs one sampler
        instead of two (`sklearn_micro.experiment.run_experiment` does so).

        Returns
        -------
        model : MiCRO
            A fitted ``MiCRO`` with ``personal=0`` and ``phi_decay=0``.

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn_micro import MiCRO
        >>> train = np.array([[0, 10, 0], [0, 11, 0], [1, 12, 0], [1, 13, 1]])
        >>> model = MiCRO(personal=0.5, phi_decay=0.5, random_state=0).fit(
        ...     train, item_interest=([10, 11, 12, 13], [0, 0, 1, 1]))
        >>> paper = model.paper_model()
        >>> paper.get_params()["phi_decay"], paper.phi_decay_, paper.personal_weight_
        (0, 0.0, 0.0)
        """
        check_is_fitted(self, "support_indptr_")
        if "chunk_alone_" not in self.__dict__ and self.phi_decay_ > 0:
            raise ValueError(
                "paper_model needs the latest chunk's own counts (chunk_alone_), which "
                "this model, saved before they were kept, lacks: fit it again, or call "
                "partial_fit with a new chunk first.")
        model = clone(self).set_params(personal=0, phi_decay=0)
        params = set(self._get_param_names())
        model.__dict__.update({name: value for name, value in self.__dict__.items()
                               if name not in params and name != "_grouped"})
        if self.__dict__.get("chunk_alone_") is not None:
            _LatestChunk(**self.chunk_alone_).set_on(model)
        model.chunk_alone_ = None
        model.phi_decay_ = 0.0
        model.personal_weight_ = 0.0
        # no recent items, as `fit` keeps them without the personal component
        none = np.empty(0, np.int64)
        model.recent_indptr_, model.recent_item_, model.recent_chunk_, model.recent_weight_ = (
            _recent_items(none, none, none, none, len(self.user_ids_)))
        model.random_state_ = copy.deepcopy(self.random_state_)
        return model

    # ------------------------------------------------------------ retrieval

    def _theta(self, user_index: np.ndarray):
        """CSR (indptr, interests, theta) of the users' mixtures; empty rows for unknown."""
        return _user_mixtures(self.support_indptr_, self.support_interest_,
                              self.support_count_, user_index, self.alpha)

    def _mixtures(self, user_index, history=None):
        """CSR (indptr, interests, theta) of the users' mixtures, with ``history`` (the
        request's `ItemLists`) counted in (`mixtures_with_history`)."""
        if history is None:
            return self._theta(user_index)
        return mixtures_with_history(self.support_indptr_, self.support_interest_,
                                     self.support_count_, self.item_interest_, user_index,
                                     history, self.alpha)

    def _recommend(self, user_index, m, seen, history=None):
        indptr, k, theta = self._mixtures(user_index, history)
        if self.personal_weight_ > 0:
            weight, base = _interest_weights(indptr, k, theta, self.beta,
                                             _LatestChunk.of(self))
            return self._recommend_personal(user_index, m, seen, indptr, k, weight, base,
                                            history=history)[:2]
        return self._rank_mixtures(indptr, k, theta, m, seen)

    def _fill_by_popularity(self, items, scores, n_filled, indptr, base, seen):
        """Fill the slots `mixture_topm` left (`fill_remainder`) with the latest chunk's
        items by popularity: scored by their share for users without interests, by
        ``base`` alone for the others."""
        pop = self.popular_order_
        pop_order = self.chunk_items_[pop]
        unseen = np.diff(indptr) == 0
        share = self.chunk_item_count_[pop] / self.chunk_item_count_.sum()
        for rows, pop_score in ((~unseen, np.zeros_like(share)), (unseen, share)):
            if rows.any():
                sub_i, sub_s = items[rows], scores[rows]
                sub_ptr, pos = csr_rows(seen[0], np.flatnonzero(rows))
                fill_remainder(sub_i, sub_s, n_filled[rows], pop_order, pop_score, base[rows],
                               sub_ptr, seen[1][pos])
                items[rows], scores[rows] = sub_i, sub_s
        return items, scores

    def _ranks_with_paper(self) -> bool:
        """Whether `_recommend_with_paper` can rank for this model and its `paper_model`
        in one pass: a personal component, and the paper's model ranking from this
        model's own latest chunk (no counts carried into it: ``phi_decay_`` 0, or a
        model fitted on one chunk)."""
        state = self.__dict__
        return (self.personal_weight_ > 0 and state.get("chunk_alone_") is None
                and ("chunk_alone_" in state or self.phi_decay_ == 0))

    def _recommend_with_paper(self, users, m: int, *, exclude_seen: bool = False):
        """`recommend` of this model and of its `paper_model`, each user's candidates
        scattered once for both.

        When `_ranks_with_paper` holds, the paper's model's scores are the interests'
        part of this model's (the same mixtures, ``phi`` and weights), so `personal_topm`
        with ``paper=True`` ranks both from one scatter a user, which is most of a user's
        cost on a large chunk. The lists and scores are those of the two `recommend`
        calls (the tests compare them bit for bit).

        Returns
        -------
        (items, scores), (paper_items, paper_scores) : tuple of tuples of ndarray
        """
        users = self._check_recommend(users, m, exclude_seen)
        if not self._ranks_with_paper():
            raise ValueError(
                "_recommend_with_paper needs a model with a personal component whose "
                "paper's model ranks from its own latest chunk; this one has "
                f"personal_weight_={self.personal_weight_} and phi_decay_={self.phi_decay_}.")
        user_index, seen = self._users_and_seen(users, exclude_seen)
        indptr, k, theta = self._theta(user_index)
        weight, base = _interest_weights(indptr, k, theta, self.beta, _LatestChunk.of(self))
        items, scores, p_items, p_scores, p_filled = self._recommend_personal(
            user_index, int(m), seen, indptr, k, weight, base, paper=True)
        p_items, p_scores = self._fill_by_popularity(p_items, p_scores, p_filled, indptr, base,
                                                     seen)
        return ((self._external_items(items), scores),
                (self._external_items(p_items), p_scores))

    def _grouped_chunk(self) -> dict:
        """The latest chunk as the top-m kernels take it: ``phi`` pruned to
        ``phi_min_count`` (`retrieval_phi`) and the items numbered interest by interest
        (`group_by_interest`); made once per chunk and setting, not saved."""
        cache = self.__dict__.get("_grouped")
        min_count = float(self.phi_min_count)
        if cache is None or cache["of"] is not self.phi_item_ or cache["min_count"] != min_count:
            phi_indptr, phi_item, phi_count = retrieval_phi(
                self.phi_indptr_, self.phi_item_, self.phi_count_, min_count)
            order, local_of, phi_item, phi_count = group_by_interest(
                phi_indptr, phi_item, phi_count, self.chunk_items_.shape[0])
            item_count = self.chunk_item_count_[order]
            cache = {"of": self.phi_item_, "min_count": min_count, "phi_indptr": phi_indptr,
                     "phi_item": phi_item, "phi_count": phi_count,
                     "item_count": item_count,
                     "share": item_count / self.chunk_item_count_.sum(),
                     "items": self.chunk_items_[order], "local_of": local_of,
                     "popular_order": local_of[self.popular_order_]}
            self._grouped = cache
        return cache

    def _items_by_interest(self) -> dict:
        """The latest chunk's ``N[i, k, t]`` as a CSR from positions in ``chunk_items_``
        to interests (every count), kept with `_grouped_chunk`'s arrays."""
        cache = self._grouped_chunk()
        found = cache.get("by_item")
        if found is None:
            k = np.repeat(np.arange(self.n_interests_, dtype=np.int32),
                          np.diff(self.phi_indptr_))
            order = np.argsort(self.phi_item_, kind="stable")
            indptr = np.zeros(self.chunk_items_.shape[0] + 1, np.int64)
            np.cumsum(np.bincount(self.phi_item_, minlength=self.chunk_items_.shape[0]),
                      out=indptr[1:])
            found = (indptr, k[order], self.phi_count_[order])
            cache["by_item"] = found
        return found

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("_grouped", None)
        return state

    def __setstate__(self, state):
        # a model pickled before ``phi_min_count`` existed scored every count
        state.setdefault("phi_min_count", 0)
        super().__setstate__(state)

    def _recommend_personal(self, user_index, m, seen, indptr, k, weight, base, *,
                            paper=False, history=None):
        """Top-m of ``(1 - lam_u) * p_t(i|u) + lam_u * r_u(i)`` over the latest chunk's
        items and the users' recent items (`personal_topm`'s five arrays; the last three,
        the paper's ranking from the same scatter, are empty without ``paper``)."""
        r_ptr, r_item, r_u = self._recent_scores(user_index, history)
        lam = np.where(np.diff(r_ptr) > 0, self.personal_weight_, 0.0)
        # users without interests are scored by popularity share, as in the paper's path
        share_weight = (np.diff(indptr) == 0).astype(np.float64)
        chunk = self._grouped_chunk()
        with _numba_threads(self.n_jobs) as threads:
            return personal_topm(
                indptr, k, weight, base, share_weight, lam, r_ptr, r_item, r_u,
                chunk["phi_indptr"], chunk["phi_item"], chunk["phi_count"], chunk["item_count"],
                chunk["share"], chunk["items"], self.chunk_items_, chunk["local_of"],
                chunk["popular_order"], seen[0], seen[1], m, threads, paper=paper)

    def _recommend_allowed(self, user_index, m, seen, allow, history):
        indptr, k, theta = self._mixtures(user_index, history)
        recent = (self._recent_scores(user_index, history) if self.personal_weight_ > 0
                  else None)
        return self._rank_candidates(indptr, k, theta, recent, m, seen, allow)

    def _rank_candidates(self, indptr, k, theta, recent, m, seen, candidates: ItemLists):
        """Top-m of each row's ``candidates`` by the score `recommend` gives them
        (`candidate_topm`): the rows' mixtures ``(indptr, k, theta)`` and recent items
        (`_recent_scores`, or None without the personal component)."""
        n = indptr.shape[0] - 1
        weight, base = _interest_weights(indptr, k, theta, self.beta, _LatestChunk.of(self))
        if recent is None:
            recent = np.zeros(n + 1, np.int64), np.empty(0, np.int64), np.empty(0)
        r_ptr, r_item, r_u = recent
        lam = np.where(np.diff(r_ptr) > 0, self.personal_weight_, 0.0)
        share_weight = (np.diff(indptr) == 0).astype(np.float64)
        chunk = self._grouped_chunk()
        with _numba_threads(self.n_jobs) as threads:
            return candidate_topm(
                indptr, k, weight, base, share_weight, lam, r_ptr, r_item.astype(np.int64),
                r_u, chunk["phi_indptr"], chunk["phi_item"], chunk["phi_count"],
                chunk["item_count"], chunk["share"], self.chunk_items_, chunk["local_of"],
                candidates.lo, candidates.hi, candidates.items, seen[0], seen[1], int(m),
                threads)

    def similar_items(self, items, m: int = 100, *, exclude=None, allow=None):
        """The items most likely engaged next by someone who engaged with each item.

        An item ``i`` is taken as a user whose mixture is the item's own distribution over
        interests in the latest chunk, ``N[i, k, t] / sum_k N[i, k, t]`` (so an item
        first engaged in the latest chunk has one), or its main interest for an item
        without engagements there; items are then ranked by ``sum_k p(k|i) *
        phi[k, t][j]``, as `recommend` ranks for a user with that mixture and no personal
        component, the item itself left out. An unknown item, or one with no interest,
        gets the latest chunk's popularity ranking, scored by each item's share of the
        chunk's engagements.

        Parameters
        ----------
        items : array-like of shape (n_items,)
            External item ids.
        m : int, default=100
            Number of items per row, as in `recommend`.
        exclude, allow : list of item ids, or list of lists of item ids, optional
            As in `recommend`, flat or aligned with ``items``.

        Returns
        -------
        similar : ndarray of shape (n_items, m)
            External item ids, best first, padded with -1 (or "").
        scores : ndarray of shape (n_items, m)
            ``p(j | i)``; -inf where padded.

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn_micro import MiCRO
        >>> train = np.array([[0, 10, 0], [0, 11, 0], [1, 12, 0], [1, 13, 0]])
        >>> model = MiCRO(random_state=0).fit(
        ...     train, item_interest=([10, 11, 12, 13], [0, 0, 1, 1]))
        >>> model.similar_items([10], m=2)[0]
        array([[11, 12]])
        """
        model = self._published()
        check_is_fitted(model, "support_indptr_")
        items = model._check_recommend(items, m, False, name="items")
        request = parse_request(model.item_ids_, items.shape[0], exclude=exclude,
                                allow=allow, rows_name="items")
        index = model.item_ids_.lookup(items, name="items")
        indptr, k, theta = item_mixtures(*model._items_by_interest(), model.chunk_items_,
                                         model.item_interest_, index)
        no_seen = np.zeros(items.shape[0] + 1, np.int64), np.empty(0, np.int64)
        seen = removed_items(no_seen, own_items(index), request.exclude)
        m = int(m)
        if request.allow is not None:
            found, scores = model._rank_candidates(indptr, k, theta, None, m, seen,
                                                   request.allow)
        else:
            found, scores = model._rank_mixtures(indptr, k, theta, m, seen)
        return model._external_items(found), scores

    def _rank_mixtures(self, indptr, k, theta, m, seen):
        """Top-m of ``p_t(i|.)`` for rows given by their mixtures (no personal
        component), the remaining slots filled by popularity."""
        weight, base = _interest_weights(indptr, k, theta, self.beta, _LatestChunk.of(self))
        with _numba_threads(self.n_jobs) as threads:
            chunk = self._grouped_chunk()
            items, scores, n_filled = mixture_topm(
                indptr, k, weight, base, chunk["phi_indptr"], chunk["phi_item"],
                chunk["phi_count"], chunk["item_count"], chunk["items"], seen[0], seen[1], m,
                threads)
        return self._fill_by_popularity(items, scores, n_filled, indptr, base, seen)

    def explain(self, user, items, *, history=None) -> Explanation:
        """Each item's score for a user, split into its interests' and personal terms.

        Parameters
        ----------
        user : int or str
            One external user id (unknown users are scored as `recommend` scores them).
        items : array-like of shape (n_items,)
            External item ids.
        history : list of item ids, optional
            The user's engagements since the latest chunk, as one row of `recommend`'s
            ``history``.

        Returns
        -------
        explanation : Explanation
            ``scores`` (the scores `recommend` gives these items for this user and
            history), ``interests`` and ``weights`` (the user's mixture), the per-interest
            ``contributions`` of each item, the ``popularity`` and ``personal`` terms;
            each item's terms sum to its score.

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn_micro import MiCRO
        >>> train = np.array([[0, 10, 0], [0, 11, 0], [1, 12, 0], [1, 13, 0]])
        >>> model = MiCRO(personal=0, random_state=0).fit(
        ...     train, item_interest=([10, 11, 12, 13], [0, 0, 1, 1]))
        >>> why = model.explain(0, [10, 12])
        >>> why.interests, why.weights
        (array([0]), array([1.]))
        >>> why.scores.round(4)
        array([0.4951, 0.0049])
        >>> bool(np.allclose(why.contributions.sum(axis=1), why.scores))
        True
        """
        model = self._published()
        check_is_fitted(model, "support_indptr_")
        one = as_ids(user, name="user")
        if one.ndim != 0:
            raise ValueError(f"user must be one user id; got {type(user).__name__} of shape "
                             f"{one.shape}.")
        items = as_ids(items, name="items")
        if items.ndim != 1:
            raise ValueError(f"items must be a 1-D list of item ids; got shape {items.shape}.")
        hist = None if history is None else single_list(model.item_ids_, history, "history")
        user_index = model.user_ids_.lookup(one.reshape(1), name="user")
        index = (model.item_ids_.lookup(items, name="items") if items.size
                 else np.empty(0, np.int64))
        indptr, k, theta = model._mixtures(user_index, hist)
        recent = (model._recent_scores(user_index, hist) if model.personal_weight_ > 0
                  else None)
        # the scores, as `recommend` computes them
        cand = np.unique(index[index >= 0])
        candidates = ItemLists(np.zeros(1, np.int64), np.full(1, cand.shape[0]), cand)
        no_seen = np.zeros(2, np.int64), np.empty(0, np.int64)
        got, got_scores = model._rank_candidates(indptr, k, theta, recent,
                                                 max(cand.shape[0], 1), no_seen, candidates)
        score_of = dict(zip(got[0][got[0] >= 0].tolist(), got_scores[0][got[0] >= 0], strict=True))
        scores = np.array([score_of.get(int(i), -np.inf) for i in index], np.float64)
        # the terms
        weight, base = _interest_weights(indptr, k, theta, model.beta, _LatestChunk.of(model))
        lam = 0.0
        r_u_of = {}
        if recent is not None and recent[0][1] > 0:
            lam = model.personal_weight_
            r_u_of = dict(zip(recent[1].tolist(), recent[2], strict=True))
        chunk = model._grouped_chunk()
        n_local = model.chunk_items_.shape[0]
        pos = np.minimum(np.searchsorted(model.chunk_items_, index), max(n_local - 1, 0))
        in_chunk = (index >= 0) & (n_local > 0)
        if n_local:
            in_chunk &= model.chunk_items_[pos] == index
        local = np.where(in_chunk, chunk["local_of"][pos] if n_local else 0, -1)
        count = np.zeros((index.shape[0], k.shape[0]))
        phi_ptr, phi_item, phi_cnt = chunk["phi_indptr"], chunk["phi_item"], chunk["phi_count"]
        for q, kq in enumerate(k):
            entries = phi_item[phi_ptr[kq]:phi_ptr[kq + 1]]
            at = np.minimum(np.searchsorted(entries, local), max(entries.shape[0] - 1, 0))
            hit = in_chunk & (entries.shape[0] > 0)
            if entries.shape[0]:
                hit &= entries[at] == local
            count[hit, q] = phi_cnt[phi_ptr[kq] + at[hit]]
        keep = 1.0 - lam
        ranked = scores > -np.inf
        contributions = np.where((in_chunk & ranked)[:, None],
                                 keep * weight[None, :] * (model.beta + count), 0.0)
        popularity = np.where(in_chunk & ranked & (k.shape[0] == 0),
                              keep * chunk["share"][np.maximum(local, 0)] if n_local else 0.0,
                              0.0)
        personal = np.array([lam * r_u_of.get(int(i), 0.0) for i in index], np.float64)
        personal[~ranked] = 0.0
        return Explanation(user=one.item() if one.dtype.kind != "U" else str(one),
                           items=items, scores=scores, interests=k.astype(np.int64),
                           weights=theta, contributions=contributions, popularity=popularity,
                           personal=personal, personal_weight=float(lam))

    # ---------------------------------------------------------- mixtures

    def user_interests(self, users) -> sp.csr_matrix:
        """Each user's interest mixture ``theta_u`` as a sparse (n_users, K) matrix.

        Users never seen, or seen only with items of no interest, get an empty row.

        Parameters
        ----------
        users : array-like of shape (n_users,)
            External user ids.

        Returns
        -------
        theta : scipy.sparse.csr_matrix of shape (n_users, K)
            Row ``r`` holds ``theta_u[k]`` on the interests of user ``users[r]``'s support.
        """
        check_is_fitted(self, "support_indptr_")
        index = self.user_ids_.lookup(np.atleast_1d(as_ids(users, name="users")), name="users")
        indptr, k, theta = self._theta(index)
        return sp.csr_matrix((theta, k, indptr), shape=(index.shape[0], self.n_interests_))

    def item_interests(self, items) -> sp.csr_matrix:
        """Each item's mixture over interests in the latest chunk, as a sparse (n, K) matrix.

        Row ``r`` is ``N[i, k, t] / sum_k N[i, k, t]`` for the latest chunk ``t`` (new items
        included; with ``phi_decay`` the carried counts too); items with no mass there get
        an empty row.

        Parameters
        ----------
        items : array-like of shape (n_items,)
            External item ids.

        Returns
        -------
        mixtures : scipy.sparse.csr_matrix of shape (n_items, K)
            Each item's share of engagements per interest in the latest chunk.
        """
        check_is_fitted(self, "support_indptr_")
        index = self.item_ids_.lookup(np.atleast_1d(as_ids(items, name="items")), name="items")
        K = self.n_interests_
        k = np.repeat(np.arange(K), np.diff(self.phi_indptr_))
        by_item = sp.csr_matrix(
            (self.phi_count_, (self.phi_item_, k)), shape=(self.chunk_items_.shape[0], K))
        local = np.searchsorted(self.chunk_items_, index)
        local = np.minimum(local, max(self.chunk_items_.shape[0] - 1, 0))
        present = (index >= 0) & (self.chunk_items_[local] == index)
        select = sp.csr_matrix(
            (np.ones(int(present.sum())), (np.flatnonzero(present), local[present])),
            shape=(index.shape[0], self.chunk_items_.shape[0]))
        out = (select @ by_item).tocsr()
        sums = np.asarray(out.sum(axis=1)).ravel()
        scale = np.divide(1.0, sums, out=np.zeros_like(sums), where=sums > 0)
        return sp.csr_matrix(sp.diags(scale) @ out)


def _recent_items(user, item, chunk, weight, n_users):
    """The users' recent items as a CSR over users: ``(indptr, item as int32, chunk as
    int32, weight as float32)``, one entry per (user, item, chunk) with the summed
    ``weight``, sorted by user, item and chunk."""
    order = _stable_order(user, item, chunk)
    user, item, chunk = user[order], item[order], chunk[order]
    weight = np.asarray(weight, np.float32)[order]
    indptr = np.zeros(n_users + 1, np.int64)
    if user.shape[0] == 0:
        return indptr, item.astype(np.int32), chunk.astype(np.int32), weight
    start = np.flatnonzero(np.concatenate([[True], (user[1:] != user[:-1])
                                           | (item[1:] != item[:-1])
                                           | (chunk[1:] != chunk[:-1])]))
    user = user[start]
    np.cumsum(np.bincount(user, minlength=n_users), out=indptr[1:])
    return (indptr, item[start].astype(np.int32), chunk[start].astype(np.int32),
            np.add.reduceat(weight, start).astype(np.float32))


def _stable_order(*columns):
    """``np.lexsort(columns[::-1])``, the stable order by the first column, then the
    next, of integer columns: a counting sort by each column from the last (1.8 times
    as fast as the lexsort on 20M rows of a full-scale log's ranges)."""
    order = np.arange(columns[0].shape[0])
    for column in columns[::-1]:
        if order.shape[0] == 0:
            break
        lo = int(column.min())
        order = order[sampler.group_order(column[order] - lo, int(column.max()) - lo + 1)]
    return order


def _grown_supports(indptr, interest, count, n_users, position, add, rows, new_interest,
                    new_count):
    """The supports' CSR (``indptr``, ``interest``, ``count``) with ``add`` added to the
    counts at ``position`` and the entries (``new_interest``, ``new_count``) appended to
    the ``rows`` (in any order; a row's after its old ones, in their given order), over
    ``n_users`` rows: new arrays, the given ones left as they were.

    The rows that gain entries are those of users first seen in the chunk, past the old
    ones, as a rule: the old entries then keep their positions, and the counts are added
    into the appended copy (one copy, not two). A known user without a support moves the
    entries after it, so the counts are added before.
    """
    n_old = indptr.shape[0] - 1
    rows = np.asarray(rows, np.int64)
    moves = rows.shape[0] > 0 and rows.min() < n_old
    if moves:
        count = count.copy()
        count[position] += add
    indptr = np.concatenate([indptr, np.full(n_users - n_old, indptr[-1])])
    indptr, (interest, count) = append_to_rows(indptr, (interest, count), rows,
                                               (new_interest, new_count))
    if not moves:
        count[position] += add
    return indptr, interest, count


def _merge_recent(user, item, chunk, weight, new):
    """The recent items (``user``, ``item``, ``chunk``, ``weight``: distinct triples sorted
    by user, item and chunk) with a newer chunk's, ``new`` (a CSR of `_recent_items` over
    every user), merged in: `_recent_items` of them all, without sorting the old entries
    again (a test chunk of fave's log at full scale adds 1.5M entries to about 12M)."""
    new_indptr, new_item, new_chunk, new_weight = new
    n_users = new_indptr.shape[0] - 1
    new_user = np.repeat(np.arange(n_users), np.diff(new_indptr))
    width = int(max(item.max(initial=0), new_item.max(initial=0))) + 1
    old_key = user.astype(np.int64) * width + item
    new_key = new_user.astype(np.int64) * width + new_item
    # a (user, item)'s newer chunk comes after its older ones
    at = np.searchsorted(old_key, new_key, side="right") + np.arange(new_key.shape[0])
    is_new = np.zeros(old_key.shape[0] + new_key.shape[0], bool)
    is_new[at] = True

    def merged(old, new_values, dtype):
        out = np.empty(is_new.shape[0], dtype)
        out[at] = new_values
        out[~is_new] = old
        return out

    indptr = new_indptr.copy()
    indptr[1:] += np.cumsum(np.bincount(user, minlength=n_users))
    return (indptr, merged(item, new_item, np.int32), merged(chunk, new_chunk, np.int32),
            merged(weight, new_weight, np.float32))


@dataclass(frozen=True, eq=False)
class _LatestChunk:
    """What `recommend` ranks from: the latest chunk's items (``items``, sorted model
    indices) with their engagements (``item_count``, decayed counts included under
    ``phi_decay``), ``phi`` as a CSR from interest to positions in ``items``, ``N[k, t]``,
    and the popularity order of the positions."""

    chunk: int
    items: np.ndarray
    item_count: np.ndarray
    phi_indptr: np.ndarray
    phi_item: np.ndarray
    phi_count: np.ndarray
    interest_count: np.ndarray
    popular_order: np.ndarray

    _ATTRIBUTES = {"chunk": "latest_chunk_", "items": "chunk_items_",
                   "item_count": "chunk_item_count_", "phi_indptr": "phi_indptr_",
                   "phi_item": "phi_item_", "phi_count": "phi_count_",
                   "interest_count": "interest_count_", "popular_order": "popular_order_"}

    @classmethod
    def of(cls, model):
        return cls(**{field: getattr(model, name) for field, name in cls._ATTRIBUTES.items()})

    def set_on(self, model):
        for field, name in self._ATTRIBUTES.items():
            setattr(model, name, getattr(self, field))

    def as_dict(self) -> dict:
        """The fields as a dict of plain values (what a fitted model stores)."""
        return {field: getattr(self, field) for field in self._ATTRIBUTES}


def _latest_chunk(chunk, items, phi_items, phi_k, phi_w, n_interests, phi_decay,
                  previous=None) -> _LatestChunk:
    """``chunk`` as the latest: popularity from its engagements' ``items``, ``phi`` from the
    counts ``phi_w`` of (``phi_items``, ``phi_k``) pairs, plus the ``previous`` latest
    chunk's counts times ``phi_decay`` (those of at least ``_MIN_MASS``)."""
    pop_items, pop_w = items, np.ones(items.shape[0])
    if previous is not None and phi_decay > 0:
        old_w = previous.phi_count * phi_decay
        keep = old_w >= _MIN_MASS
        old_k = np.repeat(np.arange(n_interests), np.diff(previous.phi_indptr))
        phi_k = np.concatenate([phi_k, old_k[keep]])
        phi_items = np.concatenate([phi_items, previous.items[previous.phi_item][keep]])
        phi_w = np.concatenate([phi_w, old_w[keep]])
        old_pop = previous.item_count * phi_decay
        keep = old_pop >= _MIN_MASS
        pop_items = np.concatenate([pop_items, previous.items[keep]])
        pop_w = np.concatenate([pop_w, old_pop[keep]])
    chunk_items = _as_index(distinct(pop_items))
    pop_local = np.searchsorted(chunk_items, pop_items)
    item_count = np.bincount(pop_local, weights=pop_w, minlength=chunk_items.shape[0])
    phi_indptr, phi_item, phi_count = _counts_csr(
        phi_k, np.searchsorted(chunk_items, phi_items), n_interests, chunk_items.shape[0],
        weights=phi_w)
    popular_order = _as_index(np.lexsort((chunk_items, -item_count)), chunk_items.shape[0])
    return _LatestChunk(int(chunk), chunk_items, item_count, phi_indptr, phi_item, phi_count,
                        np.bincount(phi_k, weights=phi_w, minlength=n_interests),
                        popular_order)


def _user_mixtures(support_indptr, support_interest, support_count, user_index, alpha):
    """CSR (indptr, interests, theta) of the mixtures of the users ``user_index`` (rows of
    the supports; -1 gives an empty row)."""
    indptr, pos = csr_rows(support_indptr, user_index)
    k = support_interest[pos]
    weight = alpha + support_count[pos]
    row = np.repeat(np.arange(user_index.shape[0]), np.diff(indptr))
    sums = np.bincount(row, weights=weight, minlength=user_index.shape[0])
    return indptr, k, weight / sums[row]


def _interest_weights(indptr, k, theta, beta, latest: _LatestChunk):
    """The weight ``theta_u[k] / (I_t * beta + N[k, t])`` of each entry of the mixtures'
    CSR, and each user's score of an item outside its interests, ``sum_k weight * beta``."""
    denom = float(beta) * latest.items.shape[0] + latest.interest_count[k]
    weight = theta / denom
    row = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
    base = np.bincount(row, weights=weight * beta, minlength=indptr.shape[0] - 1)
    return weight, base


def _recent_distributions(recent_indptr, recent_item, recent_weight, user_index):
    """CSR (indptr, items, r_u) of the users' recent items (rows of the recent-items CSR),
    ``r_u`` normalized per user, distinct items per row, sorted; -1 gives an empty row."""
    indptr, pos = csr_rows(recent_indptr, user_index)
    item = recent_item[pos].astype(np.int64)
    weight = recent_weight[pos].astype(np.float64)
    row = np.repeat(np.arange(user_index.shape[0]), np.diff(indptr))
    if item.shape[0] == 0:
        return indptr, item, weight
    start = np.flatnonzero(np.concatenate([[True], (item[1:] != item[:-1])
                                           | (row[1:] != row[:-1])]))
    item, row, weight = item[start], row[start], np.add.reduceat(weight, start)
    total = np.bincount(row, weights=weight, minlength=user_index.shape[0])
    out_ptr = np.zeros(user_index.shape[0] + 1, np.int64)
    np.cumsum(np.bincount(row, minlength=user_index.shape[0]), out=out_ptr[1:])
    return out_ptr, item, weight / total[row]


@dataclass(frozen=True, eq=False)
class _TrainingLog:
    """The training log in model indices, as `fit` has it: engagements (``user``,
    ``item``, ``chunk``) with their interest ``z``, and the users' supports over the whole
    log as a CSR."""

    user: np.ndarray
    item: np.ndarray
    chunk: np.ndarray
    z: np.ndarray
    support_indptr: np.ndarray
    support_interest: np.ndarray
    support_count: np.ndarray
    n_items: int
    n_interests: int


def _held_out_personal_ranks(log: _TrainingLog, c, previous, grid, *, alpha, beta, phi_decay,
                             window, decay, min_count, m, max_users, n_threads):
    """The ranks `recommend` would give the items of chunk ``c`` with each personal weight
    of ``grid``, from the state `fit` leaves on the chunks up to ``previous``, the one
    before ``c`` (``log`` holds at least the chunks that state reads, and ``c``).

    Only the users of chunk ``c`` with a recent item (an engagement in the ``window``
    chunks up to ``previous``) are ranked, since the weight changes nothing for the
    others; at most ``max_users`` of them, evenly spread over their indices. Returns their
    numbers of relevant items and `personal_ranks`' hits and ranks, or None if there are
    none.
    """
    now = log.chunk == c
    before = (log.chunk <= previous) & (log.chunk > previous - window)
    n_users = log.support_indptr.shape[0] - 1
    has_recent = np.zeros(n_users, bool)
    has_recent[log.user[before]] = True
    pair_user, pair_item = unique_pairs(log.user[now], log.item[now])
    keep = has_recent[pair_user]
    pair_user, pair_item = pair_user[keep], pair_item[keep]
    if pair_user.shape[0] == 0:
        return None
    users = distinct(pair_user)
    if users.shape[0] > max_users:
        # an even spread over the users' indices: deterministic and blind to behaviour
        users = users[np.linspace(0, users.shape[0] - 1, max_users).round().astype(np.int64)]
        keep = np.isin(pair_user, users)
        pair_user, pair_item = pair_user[keep], pair_item[keep]
    row = np.searchsorted(users, pair_user)
    rel_ptr = np.zeros(users.shape[0] + 1, np.int64)
    np.cumsum(np.bincount(row, minlength=users.shape[0]), out=rel_ptr[1:])
    # supports on the chunks before c: the whole log's, less the counts of c and after
    rank = np.full(n_users, -1, np.int64)
    rank[users] = np.arange(users.shape[0])
    later = (log.chunk >= c) & (rank[log.user] >= 0)
    indptr, pos = csr_rows(log.support_indptr, users)
    k = log.support_interest[pos].astype(np.int64)
    count = log.support_count[pos].astype(np.int64)
    entry_row = np.repeat(np.arange(users.shape[0]), np.diff(indptr))
    late_ptr, late_k, late_count = _counts_csr(rank[log.user[later]], log.z[later],
                                               users.shape[0], log.n_interests)
    late_row = np.repeat(np.arange(users.shape[0]), np.diff(late_ptr))
    key = entry_row * log.n_interests + k
    count[np.searchsorted(key, late_row * log.n_interests + late_k)] -= \
        late_count.astype(np.int64)
    alive = count > 0
    indptr, k, theta = _user_mixtures(keep_entries(indptr, alive), k[alive], count[alive],
                                      np.arange(users.shape[0]), alpha)
    # phi of chunk c - 1, carrying the decayed chunks before it, as fit leaves it
    carried = (log.chunk <= previous) & (log.chunk >= previous - _carried_chunks(phi_decay))
    latest = None
    for chunk, rows in iter_chunks(log.chunk[carried]):
        rows = np.flatnonzero(carried)[rows]
        latest = _latest_chunk(chunk, log.item[rows], log.item[rows], log.z[rows],
                               np.ones(rows.shape[0]), log.n_interests, phi_decay, latest)
    weight, base = _interest_weights(indptr, k, theta, beta, latest)
    # the users' recent items, as fit leaves them
    mine = before & (rank[log.user] >= 0)
    recent = _recent_items(rank[log.user[mine]], log.item[mine], log.chunk[mine],
                           decay ** (latest.chunk - log.chunk[mine]), users.shape[0])
    r_ptr, r_item, r_u = _recent_distributions(recent[0], recent[1], recent[3],
                                               np.arange(users.shape[0]))
    share_weight = (np.diff(indptr) == 0).astype(np.float64)
    share = latest.item_count / latest.item_count.sum()
    phi_indptr, phi_item, phi_count = retrieval_phi(latest.phi_indptr, latest.phi_item,
                                                    latest.phi_count, min_count)
    hits, ranks = personal_ranks(
        indptr, _as_index(k, log.n_interests), weight, base, share_weight,
        np.asarray(grid, np.float64), r_ptr, r_item, r_u, rel_ptr, pair_item, phi_indptr,
        phi_item, phi_count, latest.item_count, share, latest.items, latest.popular_order, m,
        n_threads)
    return np.diff(rel_ptr), hits, ranks


def _select_personal_weight(log: _TrainingLog, grid=PERSONAL_GRID, *, alpha, beta,
                            phi_decay, window, decay, min_count=0.0, last_chunks=4, m=100,
                            max_users=4000, n_jobs=None):
    """The personal weight of ``grid`` with the best held-out MRR@``m`` that costs no
    held-out recall@``m``.

    Each of the last ``last_chunks`` chunks ``c`` of the training log (those with a chunk
    before them) is held out: the state `fit` leaves on the chunks before it (supports,
    ``phi`` of the chunk before under ``phi_decay``, recent items) ranks ``m`` items for
    the users of chunk ``c`` with a recent item (at most ``max_users``, evenly spread),
    with every weight, as `recommend` does. A weight scores the mean recall@``m`` and
    MRR@``m`` over those (user, chunk) points; among the weights that keep at least
    ``RECALL_KEPT`` of the recall of 0, the one with the best MRR wins, ties to the smaller
    weight. The
    weights must be below 1. Returns the weight and ``{weight: (recall, mrr)}``; 0 and
    an empty dict when no chunk has such a point.
    """
    present = distinct(log.chunk)
    held_out = present[1:][-last_chunks:]
    previous = present[np.searchsorted(present, held_out) - 1]
    recall = np.zeros(len(grid))
    mrr = np.zeros(len(grid))
    n_points = 0
    if held_out.shape[0] == 0:
        return 0.0, {}
    # only the chunks the held-out states read
    reach = max(window - 1, _carried_chunks(phi_decay))
    rows = log.chunk >= previous.min() - reach
    log = replace(log, user=log.user[rows], item=log.item[rows], chunk=log.chunk[rows],
                  z=log.z[rows])
    with _numba_threads(n_jobs) as threads:
        for c, before in zip(held_out, previous, strict=True):
            found = _held_out_personal_ranks(
                log, int(c), int(before), grid, alpha=alpha, beta=beta, phi_decay=phi_decay,
                window=window, decay=decay, min_count=min_count, m=m, max_users=max_users,
                n_threads=threads)
            if found is None:
                continue
            n_relevant, hits, ranks = found
            recall += (hits / n_relevant[:, None]).sum(axis=0)
            mrr += np.divide(1.0, ranks, out=np.zeros(ranks.shape), where=ranks > 0).sum(axis=0)
            n_points += n_relevant.shape[0]
    if n_points == 0:
        return 0.0, {}
    recall, mrr = recall / n_points, mrr / n_points
    scores = {float(lam): (float(r), float(q)) for lam, r, q in zip(grid, recall, mrr,
                                                                     strict=True)}
    floor = RECALL_KEPT * scores[0.0][0] if 0.0 in scores else -np.inf
    best, best_mrr = 0.0, -np.inf
    for lam in sorted(scores):
        r, q = scores[lam]
        if r >= floor and q > best_mrr:
            best, best_mrr = lam, q
    return best, scores


def _select_phi_decay(user, item, chunk, n_items, grid=PHI_DECAY_GRID, *, last_chunks=8,
                      m=100):
    """The ``phi_decay`` of ``grid`` whose decayed popularity best predicts the next chunk.

    For each of the last ``last_chunks`` chunks ``c`` of the log (with a chunk ``c - 1``),
    items are ranked by ``sum_{j < c} decay ** (c - 1 - j) * n_j(i)`` (counts below the
    carried mass MiCRO keeps dropped); a decay scores the mean recall@``m`` of that ranking
    over the (user, chunk) points of those chunks (`_phi_decay_recalls`). Ties go to the
    smaller decay; 0 when the log has no chunk to score.
    """
    recalls = _phi_decay_recalls(user, item, chunk, n_items, grid, last_chunks=last_chunks,
                                 m=m)
    best, best_score = 0.0, -np.inf
    for decay, score in zip(grid, recalls, strict=True):
        if score > best_score:
            best, best_score = float(decay), score
    return best


def _phi_decay_recalls(user, item, chunk, n_items, grid, *, last_chunks=8, m=100):
    """`_select_phi_decay`'s mean recall@``m`` of each decay of ``grid`` (NaN for every
    decay when no chunk can be scored).

    One pass over the chunks in increasing order: each chunk's item counts are kept (its
    distinct items and their engagements), and a chunk to be scored is scored when it comes,
    from the counts of the chunks before it; its (user, item) pairs are made once for every
    decay.
    """
    last = int(chunk.max())
    # only the chunks that the largest decay of the grid can reach are read
    first = last - last_chunks - max(_carried_chunks(d) for d in grid)
    rows = np.flatnonzero(chunk >= first)
    user, item, chunk = np.asarray(user)[rows], np.asarray(item)[rows], np.asarray(chunk)[rows]
    counts = {}  # chunk -> (its items, their engagements)
    total = np.zeros(len(grid))
    n_points = 0
    for c, at in iter_chunks(chunk):
        if c > last - last_chunks and c - 1 in counts:
            pair_user, pair_item = unique_pairs(user[at], item[at])
            point = np.searchsorted(distinct(pair_user), pair_user)
            size = np.bincount(point)
            n_points += size.shape[0]
            for g, decay in enumerate(grid):
                popularity = np.zeros(n_items)
                for j in range(c - 1 - _carried_chunks(decay), c):
                    if j in counts:
                        items, n = counts[j]
                        popularity[items] += float(decay) ** (c - 1 - j) * n
                hit = _top_m_mask(popularity, m)[pair_item]
                total[g] += (np.bincount(point, weights=hit) / size).sum()
        per_item = np.bincount(item[at], minlength=n_items)
        items = np.flatnonzero(per_item)
        counts[c] = (items, per_item[items].astype(np.float64))
    return total / n_points if n_points else np.full(len(grid), np.nan)


def _top_m_mask(score: np.ndarray, m: int) -> np.ndarray:
    """Which entries are among the ``m`` highest of ``score`` (ties to the lower index) and
    above 0: the set of ``np.argsort(-score, kind="stable")[:m]`` with a positive score,
    found by a partition instead of a sort."""
    n = score.shape[0]
    if n <= m:
        return score > 0
    cut = np.partition(score, n - m)[n - m]
    mask = score > cut
    ties = np.flatnonzero(score == cut)[:m - int(mask.sum())]
    mask[ties] = True
    return mask & (score > 0)


def _local_indices(index: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct values of ``index`` (model indices below ``n``) and each value's
    position among them, as int32."""
    values = present_values(index, 0, n)
    rank = np.full(n, -1, np.int32)
    rank[values] = np.arange(values.shape[0], dtype=np.int32)
    return values, rank[index]


@dataclass(frozen=True, eq=False)
class _ChunkEngagements:
    """A chunk's engagements, sorted by user, with the vocabularies extended by its new
    users and items: ``user`` and ``item`` are model indices, ``local_user`` a row of
    ``users`` and ``local_item`` a position in ``items`` (the chunk's distinct users and
    items, as model indices)."""

    user_ids: Vocabulary
    item_ids: Vocabulary
    user: np.ndarray
    item: np.ndarray
    users: np.ndarray
    local_user: np.ndarray
    items: np.ndarray
    local_item: np.ndarray

    @property
    def n_engagements(self) -> int:
        return self.user.shape[0]

    @property
    def n_items(self) -> int:
        return self.items.shape[0]


@dataclass(frozen=True, eq=False)
class _ChunkSupports:
    """The supports of a chunk's users (rows of ``_ChunkEngagements.users``) as a CSR:
    interests, the counts ``N[u, k]`` carried into the chunk, and each entry's position in
    the model's supports (-1 for an entry new in this chunk)."""

    ptr: np.ndarray
    interest: np.ndarray
    carried: np.ndarray
    model_position: np.ndarray

    def adopt_item_interests(self, engagements, item_interest):
        """Users without a support take the interests of their items that have one.

        Returns the new supports and whether any user got one.
        """
        empty = np.diff(self.ptr)[engagements.local_user] == 0
        interest = item_interest[engagements.item]
        take = empty & (interest >= 0)
        if not take.any():
            return self, False
        user, k = unique_pairs(engagements.local_user[take], interest[take])
        ptr, (interest, carried, position) = append_to_rows(
            self.ptr, (self.interest, self.carried, self.model_position), user,
            (k, np.zeros(k.shape[0]), np.full(k.shape[0], -1)))
        return _ChunkSupports(ptr, interest, carried, position), True


def _main_interests(item_interest, items, layout, entry_count):
    """``item_interest`` with each item of the chunk that has assigned engagements set to the
    interest holding most of them, ties going to the lower interest (``items`` maps the
    layout's local items to model items)."""
    hit = entry_count > 0
    item = items[layout.entry_item[hit]]
    k = layout.entry_interest[hit]
    cnt = entry_count[hit]
    out = item_interest.copy()
    if item.shape[0] == 0:
        return out
    start = np.flatnonzero(np.concatenate([[True], item[1:] != item[:-1]]))
    group = np.repeat(np.arange(start.shape[0]), np.diff(np.append(start, item.shape[0])))
    best = np.maximum.reduceat(cnt, start)
    candidate = np.where(cnt == best[group], k, np.iinfo(np.int32).max)
    out[item[start]] = np.minimum.reduceat(candidate, start)
    return out
