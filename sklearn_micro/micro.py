"""MiCRO: multi-interest candidate retrieval online."""

from __future__ import annotations

import copy
import time
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, _fit_context, clone
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._gibbs import MIN_PARTITION_WORK, build_layout, run_chain
from ._held_out import (
    PERSONAL_GRID,
    POPULARITY_GRID,
    TrainingLog,
    select_blend_weights,
    select_phi_decay,
)
from ._kernels import numba_threads
from ._kernels.csr import keep_entries
from ._kernels.selection import ItemRows
from ._kernels.threshold import threshold_topm
from ._kernels.topm import Queries, Recent, mixture_topm, personal_topm
from ._live import LiveLayer, live_state, observe_batch
from ._log import (
    EngagementLog,
    Vocabulary,
    check_log,
    iter_chunks,
)
from ._micro_state import (
    ChunkEngagements,
    ChunkSupports,
    LatestChunk,
    carried_chunks,
    chunk_arrays,
    counts_csr,
    fill_by_popularity,
    grouped_chunk,
    grown_supports,
    interest_weights,
    latest_chunk,
    main_interests,
    merge_recent,
    popularity_weights,
    ranked_chunk,
    recent_distributions,
    recent_items,
    training_interests,
)
from ._online import MiCROOnline, recent_with_history
from ._parallel import resolve_n_jobs
from .base import RecommenderMixin, SeenItems, open_chunk_log

__all__ = ["MiCRO"]


def _numba_threads(n_jobs):
    """numba's threads set to ``n_jobs`` (scikit-learn's meaning) inside the block."""
    return numba_threads(resolve_n_jobs(n_jobs))


class MiCRO(MiCROOnline, RecommenderMixin, BaseEstimator):
    """Multi-interest candidate retrieval that adapts online to new items and trends.

    Each user is a mixture ``theta_u`` over a sparse set of interests (the support, taken
    from the interests of the items the user engaged with in training); each interest is a
    distribution ``phi[k, t]`` over the items of time chunk ``t``. `fit` starts from the
    interest clusters of the training items, `partial_fit` runs a collapsed Gibbs sampler on
    each new chunk (new items welcome), and `recommend` returns the items with the highest
    ``p_t(i|u) = sum_k theta_u[k] * phi[k, t][i]`` for the latest chunk, blended by
    default with the latest chunk's popularity and the user's own recent items, with
    weights chosen on held-out training chunks (the paper's exact model is
    ``MiCRO(personal=0, popularity=0, phi_decay=0, live_weight=0)``; ``live_weight`` acts
    only on what `observe` adds).

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
        mixture: items are ranked by ``s(i) = (1 - lam_u) * (p_t(i|u) + w * pi_t(i)) +
        lam_u * r_u(i)`` (``w``: ``popularity``), where ``r_u`` is the user's engagements
        of the last ``personal_window`` chunks, each weighted ``personal_decay ** age``
        (age in chunks), normalized over the user's items, and ``lam_u = lam`` for a user
        with such an engagement, else 0. Recent items that left the latest chunk are
        candidates too. "learned" chooses ``lam`` at `fit` from
        (0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75) by held-out ranking: each of the last 4
        training chunks is ranked, as `recommend` does, from the state `fit` leaves on the
        chunks before it, for up to 4,000 of its users whose score the weights change;
        among the weights (with ``popularity``'s, when it is "learned" too) that keep 99%
        of the recall@100 of the mixture alone, those with the best mean ``learned_by``
        win (ties to the smaller). 0 is the paper's model.
    popularity : float >= 0 or "learned", default="learned"
        Weight ``w`` of the latest chunk's popularity ``pi_t(i)`` (an item's share of the
        chunk's engagements) beside the interests' mixture, in ``s(i)`` above: it orders
        the items of a user's interests by their popularity too and lets the chunk's most
        popular items outside them in; as ``w`` grows, the ranking tends to the chunk's
        popularity. "learned" chooses it at `fit` from
        (0, 0.01, 0.03, 0.1, 0.3, 1, 3, 10, 100), with ``personal``'s weight, by the same
        held-out ranking. 0 is the paper's model. Users without interests are scored by
        ``pi_t`` whatever ``w``.
    learned_by : {"recall", "mrr"}, default="recall"
        The held-out metric at 100 that "learned" weights maximize: "recall" fills the 100
        slots with the most of a user's next items; "mrr" puts the first of them highest,
        among weights that keep 99% of the mixture's recall.
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
        exact top m. 2 leaves out the entries of a single engagement (most of them on
        fave-shaped logs), which makes ranking faster for a little recall (docs/scale.md);
        with ``phi_decay``, 0.5 drops only carried counts under half an engagement. The
        held-out choice of ``personal="learned"`` ranks as `recommend` does; the sampler
        and `item_interests` use every count.
    live_weight : float >= 0, default=16.0
        Weight of the open chunk's observed engagements (`observe`) in the latest chunk's
        counts: answers rank from ``N[i, k, t] + live_weight * N_open[i, k]`` (popularity
        likewise), so the open chunk's share of the ranking grows with its size so far;
        each observed engagement also counts in its user's mixture and recent items. 0
        answers from the closed chunks alone, as the paper's model does; logs whose items
        live long (movies) are served better so (docs: "Live retrieval").
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
        of the (item, interest) counts, and after every sweep each copy takes the other
        partitions' moves (AD-LDA, Newman et al. 2009). On threads the copies are whole
        and kept for the chunk's sweeps (up to 2**26 entries in all, 256 MB); above, and
        on a cluster, a partition gathers the counts it touches at each sweep. A chunk
        gets fewer partitions when each would visit fewer than ``min_partition_work``
        support entries a sweep.
        `recommend` ranks users on ``n_jobs`` threads. None means 1 unless in a
        `joblib.parallel_config` context; -1 means all processors. Results are
        deterministic for a given ``random_state``, ``n_jobs`` and
        ``min_partition_work``; different numbers of partitions give different chains
        of the same quality.
        Inside ``joblib.parallel_config(backend="dask")`` the partitions are sampled on
        the cluster's workers, with the same results as on threads; None or -1 then means
        the cluster's worker threads (see docs/dask.md).
    min_partition_work : int >= 0, default=4194304
        The fewest support entries (an engagement times its user's interests) that each
        partition of a chunk visits a sweep: below ``n_jobs`` times this, a chunk is
        split into fewer partitions, at least one. By default a chunk of fewer than
        2 x 2**22 support entries (for users of 25 interests, about 340,000 engagements)
        is sampled as one chain whatever ``n_jobs``: `sklearn-micro reproduce` then
        samples it on one thread while the chunk is scored on the others, and the
        quality tables were run so. On threads alone two partitions pay from much
        smaller chunks (docs/benchmarks.md): a lower value samples faster, and draws
        another chain of the same quality. 0 splits every chunk into ``n_jobs``
        partitions.
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
    popularity_weight_ : float
        The weight ``w`` of the latest chunk's popularity: the one given, or the one
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
    live_ : LiveLayer or None
        The open chunk's observed engagements and their counts (`observe`); None when
        nothing is observed.
    n_observed_ : int
        Engagements observed in the open chunk.

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
    - With ``personal_weight_ > 0`` or ``popularity_weight_ > 0`` a user is scored
      ``s(i)`` over the latest chunk's items and its recent items (``p_t`` and ``pi_t``
      are 0 for an item outside the chunk), with the same ties, and the top ``m`` of ``s``
      is exact.
    - The paper's exact model is ``MiCRO(personal=0, popularity=0, phi_decay=0,
      live_weight=0)``; the
      defaults are "learned", "learned" and "auto".

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
        "popularity": [Interval(Real, 0, None, closed="left"), StrOptions({"learned"})],
        "learned_by": [StrOptions({"mrr", "recall"})],
        "personal_window": [Interval(Integral, 1, None, closed="left")],
        "personal_decay": [Interval(Real, 0, 1, closed="right")],
        "phi_decay": [Interval(Real, 0, 1, closed="left"), StrOptions({"auto"})],
        "phi_min_count": [Interval(Real, 0, None, closed="left")],
        "live_weight": [Interval(Real, 0, None, closed="left")],
        "max_sweeps": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "random_state": ["random_state"],
        "n_jobs": [Integral, None],
        "min_partition_work": [Interval(Integral, 0, None, closed="left")],
        "verbose": ["verbose"],
    }

    def __init__(self, alpha=1.0, *, beta=0.01, personal="learned", popularity="learned",
                 learned_by="recall", personal_window=8, personal_decay=0.5, phi_decay="auto",
                 phi_min_count=0, live_weight=16.0, max_sweeps=100, tol=1e-3,
                 random_state=None, n_jobs=None, min_partition_work=MIN_PARTITION_WORK,
                 verbose=0):
        self.alpha = alpha
        self.beta = beta
        self.personal = personal
        self.popularity = popularity
        self.learned_by = learned_by
        self.personal_window = personal_window
        self.personal_decay = personal_decay
        self.phi_decay = phi_decay
        self.phi_min_count = phi_min_count
        self.live_weight = live_weight
        self.max_sweeps = max_sweeps
        self.tol = tol
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.min_partition_work = min_partition_work
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
        log, vocab, interest = training_interests(X, item_interest)
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
        indptr, sup_k, sup_cnt = counts_csr(u, z, len(user_ids), K)

        self.random_state_ = check_random_state(self.random_state)
        log_chunk = log.chunk
        if self.phi_decay == "auto":
            start = time.perf_counter()
            self.phi_decay_ = select_phi_decay(u, i, log_chunk, len(item_ids))
            self._print_fit_step(f"phi_decay {self.phi_decay_} chosen", start)
        else:
            self.phi_decay_ = float(self.phi_decay)
        learned = (self.personal == "learned", self.popularity == "learned")
        if any(learned):
            start = time.perf_counter()
            self.personal_weight_, self.popularity_weight_ = select_blend_weights(
                TrainingLog(u, i, log_chunk, z, indptr, sup_k, sup_cnt, len(item_ids), K),
                PERSONAL_GRID if learned[0] else (float(self.personal),),
                POPULARITY_GRID if learned[1] else (float(self.popularity),),
                alpha=float(self.alpha), beta=float(self.beta), phi_decay=self.phi_decay_,
                window=self.personal_window, decay=self.personal_decay,
                min_count=float(self.phi_min_count), metric=self.learned_by,
                n_jobs=self.n_jobs)[0]
            self._print_fit_step(f"personal weight {self.personal_weight_}, popularity "
                                 f"weight {self.popularity_weight_} chosen", start)
        else:
            self.personal_weight_ = float(self.personal)
            self.popularity_weight_ = float(self.popularity)
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
        carried = log.chunk >= last - carried_chunks(self.phi_decay_)
        for pos, (chunk, rows) in enumerate(iter_chunks(log.chunk[carried])):
            rows = np.flatnonzero(carried)[rows]
            self._set_chunk(chunk, i[rows], i[rows], z[rows], np.ones(rows.shape[0]),
                            carry=pos > 0)
        recent = (log_chunk > last - self.personal_window) & (self.personal_weight_ > 0)
        self.recent_indptr_, self.recent_item_, self.recent_chunk_, self.recent_weight_ = (
            recent_items(u[recent], i[recent], log_chunk[recent],
                         self.personal_decay ** (last - log_chunk[recent]), len(user_ids)))
        self.n_sweeps_ = {}
        self.log_likelihood_ = {}
        self.n_unassigned_ = {}
        self.live_ = None
        self.n_observed_ = 0
        return self

    def _print_fit_step(self, what, start):
        """With ``verbose``, one line: what `fit` has done and the seconds since ``start``."""
        if self.verbose:
            print(f"[MiCRO] fit: {what} in {time.perf_counter() - start:.1f} s", flush=True)

    def _set_chunk(self, chunk, items, phi_items, phi_k, phi_w, *, carry=False):
        """Make ``chunk`` the latest: popularity from its engagements' ``items``, ``phi``
        from the counts ``phi_w`` of (``phi_items``, ``phi_k``) pairs, plus, with ``carry``
        and ``phi_decay_ > 0``, the decayed counts of the previous chunk."""
        alone = latest_chunk(chunk, items, phi_items, phi_k, phi_w, self.n_interests_, 0.0)
        if carry and self.phi_decay_ > 0:
            latest_chunk(chunk, items, phi_items, phi_k, phi_w, self.n_interests_,
                         self.phi_decay_, LatestChunk.of(self)).set_on(self)
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
        The new state is built on a copy and published in one swap, so `recommend`,
        `similar_items` and `explain` may run on other threads meanwhile (they answer
        from the state before until the swap); call ``partial_fit`` itself from one thread
        at a time.

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
        # the chunks are sampled on a copy (its own random stream) and the new state is
        # published in one swap: readers on other threads see the state before or after.
        # The closed state is what is sampled from: observed engagements never enter it.
        work = self._closed()
        log = check_log(X)
        first = int(log.chunk.min())
        if first <= work.latest_chunk_:
            raise ValueError(
                f"partial_fit takes chunks newer than the latest chunk {work.latest_chunk_}; "
                f"got chunk {first}."
            )
        base = work.__dict__
        work.__dict__ = dict(base, random_state_=copy.deepcopy(base["random_state_"]))
        live = base.get("live_")
        if live is not None and len(live) and live.chunk != first:
            warnings.warn(
                f"partial_fit was given chunk {first}, not the open chunk {live.chunk}: the "
                f"{len(live)} engagements observed in chunk {live.chunk} are dropped.",
                UserWarning, stacklevel=2)
        for chunk, rows in iter_chunks(log.chunk):
            work._sample_chunk(chunk, log.take(rows))
        work.live_ = None
        work.n_observed_ = 0
        self._publish(work.__dict__, replacing=base)
        return self

    # -------------------------------------------------------------- observe

    def observe(self, X):
        """Add engagements of the open chunk to the model at once, without a refit.

        The open chunk is the one after ``latest_chunk_``. Each engagement's interest is
        drawn once, in order, from the sampler's conditional with the counts so far
        (docs: "Live retrieval"): the user's carried counts plus its observed engagements,
        the item's and the interests' counts in the open chunk. `recommend`,
        `similar_items` and `explain` then answer with the open chunk blended in: each
        observed engagement counts one more in its user's ``N[u, k]`` and joins the
        user's recent items (as a ``history`` engagement does), and the latest chunk's
        counts become ``N[i, k, t] + live_weight * N_open[i, k]`` (popularity likewise),
        so an item first engaged in the open chunk is retrieved for users of its
        interests. ``live_weight=0`` answers as if nothing were observed.

        `partial_fit` of the open chunk closes it: the paper's sampler over the whole
        chunk, with the same result as if nothing had been observed. Engagements
        observed for a chunk that `partial_fit` is not given are dropped with a warning.
        The new state is published in one swap, as `partial_fit` publishes its own.

        Parameters
        ----------
        X : engagement log
            Engagements (``user``, ``item``, ``chunk``), every one of the open chunk; new
            users and items are welcome.

        Returns
        -------
        self : MiCRO
            The model, with the engagements observed.

        Raises
        ------
        ValueError
            If a chunk of ``X`` is not the open chunk, or ``X`` is not a valid log; the
            model is left as it was.

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn_micro import MiCRO
        >>> train = np.array([[0, 10, 0], [0, 11, 0], [1, 12, 0], [1, 13, 0]])
        >>> model = MiCRO(personal=0, popularity=0, random_state=0).fit(
        ...     train, item_interest=([10, 11, 12, 13], [0, 0, 1, 1]))
        >>> model = model.observe(np.array([[0, 30, 1], [0, 30, 1]]))
        >>> model.n_observed_, model.recommend([0], m=1)[0]
        (2, array([[30]]))
        """
        check_is_fitted(self, "support_indptr_", msg=(
            "MiCRO.observe needs a fitted model: call fit on the training log (or the "
            "Pipeline) first."))
        self._validate_params()
        state = self.__dict__
        log, open_chunk = open_chunk_log(X, state["latest_chunk_"])
        live = state.get("live_")
        if live is None:
            seed = int(copy.deepcopy(state["random_state_"]).randint(np.iinfo(np.int32).max))
            live = LiveLayer.empty(open_chunk, state["user_ids_"], state["item_ids_"],
                                   self.n_interests_, seed)
        live = observe_batch(
            live, log, support=(state["support_indptr_"], state["support_interest_"],
                                state["support_count_"]),
            item_interest=state["item_interest_"], alpha=float(self.alpha),
            beta=float(self.beta), n_interests=self.n_interests_)
        self._publish_observed(state, live_=live, n_observed_=len(live))
        return self

    def _live_key(self, state):
        """The open chunk's layer and ``live_weight``, or None without engagements
        observed or at ``live_weight=0``: answers then come from the closed chunks."""
        live = state.get("live_")
        weight = float(state.get("live_weight", 0.0))
        if live is None or not len(live) or weight == 0:
            return None
        return (id(live), weight)

    def _live_state(self, state):
        """The state with the open chunk blended in (`live_state`)."""
        return live_state(state, state["live_"], float(state["live_weight"]),
                          self.n_interests_)

    def _sample_chunk(self, chunk: int, log: EngagementLog) -> None:
        """Sample one chunk and move the model's state to it: lay the chunk out, run the
        chain, commit the counts. Attributes are replaced, never modified in place, so a
        snapshot of ``__dict__`` restores the previous state."""
        engagements = ChunkEngagements.of(log, self.user_ids_, self.item_ids_)
        supports = ChunkSupports.from_model(engagements, self.support_indptr_,
                                            self.support_interest_, self.support_count_)
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
            with _numba_threads(self.n_jobs):
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
                                   chunk_seed=chunk_seed, pass_=pass_, n_jobs=n_jobs,
                                   min_partition_work=self.min_partition_work)
            z[assignable] = z_assignable
            item_interest = main_interests(item_interest, engagements.items, layout,
                                           counts.entry_count)
        if self.verbose:
            print(f"[MiCRO] chunk {chunk}: {int(assignable.sum())} engagements, {len(trace)} "
                  "sweeps" + (f", log-likelihood {trace[-1]:.6g}" if trace else ""))
        self._commit_chunk(chunk, engagements, supports, layout, counts, item_interest)
        self.n_sweeps_ = {**self.n_sweeps_, chunk: len(trace)}
        self.log_likelihood_ = {**self.log_likelihood_, chunk: np.array(trace)}
        self.n_unassigned_ = {**self.n_unassigned_, chunk: int((~assignable).sum())}

    def _commit_chunk(self, chunk, engagements, supports, layout, counts, item_interest):
        """Move the model to ``chunk``: users' counts, the supports of users that had none,
        item interests, seen items, users' recent items and ``phi``."""
        carried = supports.model_position >= 0
        # users without a support take the interests their engagements were given
        new = ~carried & (counts.user_count > 0)
        local = np.repeat(np.arange(engagements.users.shape[0]), np.diff(supports.ptr))[new]
        self.support_indptr_, self.support_interest_, self.support_count_ = grown_supports(
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
        new = recent_items(user, item, np.full(user.shape[0], chunk),
                           np.ones(user.shape[0], np.float32), n_users)
        self.recent_indptr_, self.recent_item_, self.recent_chunk_, self.recent_weight_ = (
            merge_recent(old_user, self.recent_item_[keep], self.recent_chunk_[keep],
                         self.recent_weight_[keep] * np.float32(self.personal_decay ** age),
                         new))

    def _recent_scores(self, user_index, history=None):
        """CSR (indptr, items, r_u) of the users' recent items, ``r_u`` normalized per user
        (distinct items per row, sorted); empty rows for unknown users. A ``history``
        engagement weighs what an engagement of the next chunk would (``1 /
        personal_decay``, the latest chunk's weighing 1)."""
        live = self._live_pairs(user_index)
        return recent_with_history(self.recent_indptr_, self.recent_item_,
                                   self.recent_weight_, user_index, history,
                                   1.0 / self.personal_decay, recent_distributions,
                                   live=None if live is None else live[:2])

    def paper_model(self) -> MiCRO:
        """The paper's exact model in the state this one's sampler reached.

        ``personal``, ``popularity`` and ``phi_decay`` act on retrieval alone: the sampler,
        the users' supports and every chunk's counts are the same whatever their values.
        This returns the `MiCRO` that ``MiCRO(personal=0, popularity=0, phi_decay=0,
        live_weight=0)``,
        with this model's other parameters (an int ``random_state`` among them), would be
        after the same `fit` and `partial_fit` calls: ``phi`` of the latest chunk from its
        own counts, no recent items, the random stream where this model's is. Nothing is
        sampled again, and the two models share their arrays (each call of `partial_fit`
        replaces a model's arrays, never changes them, so either model can go on alone).
        Comparing the defaults with the paper's model over the rolling protocol so costs
        one sampler instead of two (`sklearn_micro.experiment.run_experiment` does so).

        Returns
        -------
        model : MiCRO
            A fitted ``MiCRO`` with ``personal=0``, ``popularity=0`` and ``phi_decay=0``.

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
        model = clone(self).set_params(personal=0, popularity=0, phi_decay=0, live_weight=0)
        params = set(self._get_param_names())
        state = self._closed().__dict__
        model.__dict__.update({name: value for name, value in state.items()
                               if name not in params
                               and name not in ("_grouped", "_live_cache")})
        if self.chunk_alone_ is not None:
            LatestChunk(**self.chunk_alone_).set_on(model)
        model.chunk_alone_ = None
        model.phi_decay_ = 0.0
        model.personal_weight_ = 0.0
        model.popularity_weight_ = 0.0
        # no recent items, as `fit` keeps them without the personal component
        none = np.empty(0, np.int64)
        model.recent_indptr_, model.recent_item_, model.recent_chunk_, model.recent_weight_ = (
            recent_items(none, none, none, none, len(self.user_ids_)))
        model.random_state_ = copy.deepcopy(self.random_state_)
        return model

    # ------------------------------------------------------------ retrieval

    def _theta(self, user_index: np.ndarray):
        """CSR (indptr, interests, theta) of the users' mixtures; empty rows for unknown."""
        return self._mixtures(user_index)

    def _recommend(self, user_index, m, seen, history=None, *, within=None):
        indptr, k, theta = self._mixtures(user_index, history)
        if self._blended():
            weight, base = interest_weights(indptr, k, theta, self.beta,
                                             LatestChunk.of(self))
            return self._recommend_personal(user_index, m, seen, indptr, k, weight, base,
                                            history=history, within=within)[:2]
        chunk = None if within is None else self._chunk_within(within)
        return self._rank_mixtures(indptr, k, theta, m, seen, chunk=chunk)

    def recommend_with_paper(self, users, m: int = 100, *, exclude_seen: bool = False):
        """`recommend` of this model and of its `paper_model`, in one call.

        The two models share their state (see `paper_model`). When this model blends
        its scores (personal or popularity weight) and its paper's model ranks from the
        same latest chunk
        (``phi_decay_`` 0, or no counts carried into the latest chunk), the paper's scores
        are the interests' part of this model's, and each user's candidates are gathered
        once for both, which is most of a user's cost on a large chunk. Otherwise the two
        models rank apart. Either way the answers are those of the two `recommend` calls.
        The rolling evaluation of MiCRO's defaults beside the paper's model, with one
        sampler, ranks this way (`sklearn_micro.experiment.run_experiment`).

        Parameters
        ----------
        users : array-like of shape (n_users,)
            External user ids.
        m : int, default=100
            Number of items per user, as in `recommend`.
        exclude_seen : bool, default=False
            Leave out items the user has already engaged with, as in `recommend`.

        Returns
        -------
        (items, scores) : tuple of ndarray of shape (n_users, m)
            This model's `recommend`.
        (paper_items, paper_scores) : tuple of ndarray of shape (n_users, m)
            Its `paper_model`'s `recommend`.

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn_micro import MiCRO
        >>> train = np.array([[0, 10, 0], [0, 11, 0], [1, 12, 0], [1, 13, 1]])
        >>> model = MiCRO(personal=0.5, phi_decay=0, random_state=0).fit(
        ...     train, item_interest=([10, 11, 12, 13], [0, 0, 1, 1]))
        >>> (items, _), (paper_items, _) = model.recommend_with_paper([0, 1], m=2)
        >>> np.array_equal(paper_items, model.paper_model().recommend([0, 1], m=2)[0])
        True
        """
        users = self._check_recommend(users, m, exclude_seen)
        if users.size and self._ranks_with_paper():
            return self._recommend_with_paper(users, m, exclude_seen=exclude_seen)
        paper = self._grouped_chunk().get("paper")
        if paper is None or paper[0] != self.get_params():
            paper = self._grouped_chunk()["paper"] = (self.get_params(), self.paper_model())
        return (self.recommend(users, m, exclude_seen=exclude_seen),
                paper[1].recommend(users, m, exclude_seen=exclude_seen))

    def _ranks_with_paper(self) -> bool:
        """Whether `_recommend_with_paper` can rank for this model and its `paper_model`
        in one pass: a blended score, and the paper's model ranking from this
        model's own latest chunk (no counts carried into it)."""
        return self._blended() and self.chunk_alone_ is None

    def _blended(self) -> bool:
        """Whether scores blend the mixture with the personal or popularity terms
        (`threshold_topm`), or are the mixture alone (`mixture_topm`)."""
        return self.personal_weight_ > 0 or self.popularity_weight_ > 0

    def _recommend_with_paper(self, users, m: int, *, exclude_seen: bool = False):
        """`recommend_with_paper` where `_ranks_with_paper` holds: the paper's model's
        scores are the interests' part of this model's (the same mixtures, ``phi`` and
        weights), so `threshold_topm` with ``paper=True`` ranks both from one reading of a
        user's lists. The lists and scores are those of the two `recommend` calls."""
        users = self._check_recommend(users, m, exclude_seen)
        if not self._ranks_with_paper():
            raise ValueError(
                "_recommend_with_paper needs a model with a blended score (personal or "
                "popularity weight) whose paper's model ranks from its own latest chunk; "
                f"this one has personal_weight_={self.personal_weight_}, popularity_weight_="
                f"{self.popularity_weight_} and phi_decay_={self.phi_decay_}.")
        user_index, seen = self._users_and_seen(users, exclude_seen)
        indptr, k, theta = self._theta(user_index)
        weight, base = interest_weights(indptr, k, theta, self.beta, LatestChunk.of(self))
        items, scores, p_items, p_scores, p_filled = self._recommend_personal(
            user_index, int(m), seen, indptr, k, weight, base, paper=True)
        p_items, p_scores = fill_by_popularity(p_items, p_scores, p_filled, indptr, base, seen,
                                               self._grouped_chunk())
        return ((self._external_items(items), scores),
                (self._external_items(p_items), p_scores))

    def _grouped_chunk(self) -> dict:
        """The latest chunk as the top-m kernels take it (`grouped_chunk`, ``phi`` pruned
        to ``phi_min_count``); made once per chunk and setting, not saved. Under
        ``"paper"`` `recommend_with_paper` keeps the `paper_model` it ranks with, when it
        ranks apart."""
        cache = self.__dict__.get("_grouped")
        min_count = float(self.phi_min_count)
        if cache is None or cache["of"] is not self.phi_item_ or cache["min_count"] != min_count:
            cache = grouped_chunk(self.phi_indptr_, self.phi_item_, self.phi_count_,
                                  self.chunk_items_, self.chunk_item_count_,
                                  self.popular_order_, min_count)
            cache.update({"of": self.phi_item_, "min_count": min_count})
            self._grouped = cache
        return cache

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("_grouped", None)
        return state

    def _recommend_personal(self, user_index, m, seen, indptr, k, weight, base, *,
                            paper=False, history=None, within=None):
        """Top-m of ``(1 - lam_u) * (p_t(i|u) + w * pi_t(i)) + lam_u * r_u(i)`` over the
        latest chunk's items and the users' recent items (`threshold_topm`'s five arrays;
        the last three, the paper's ranking read from the same lists, are empty without
        ``paper``); with ``within``, over the items it holds (`_chunk_within`, ranked by
        `personal_topm`'s scatter, which needs no lists)."""
        r_ptr, r_item, r_u = self._recent_scores(user_index, history)
        lam = np.where(np.diff(r_ptr) > 0, self.personal_weight_, 0.0)
        if within is not None:
            keep = within.holds(r_item)
            r_ptr, r_item, r_u = keep_entries(r_ptr, keep), r_item[keep], r_u[keep]
        share_weight = popularity_weights(indptr, self.popularity_weight_)
        recent = Recent(lam, r_ptr, r_item, r_u)
        if within is None:
            return self._rank_latest(indptr, k, weight, base, share_weight, recent, seen, m,
                                     paper=paper)
        chunk = self._chunk_within(within)
        with _numba_threads(self.n_jobs) as threads:
            items, scores = personal_topm(
                Queries(indptr, k, weight, base, share_weight), recent,
                chunk_arrays(chunk, self.chunk_items_), ItemRows(*seen), m, threads)
        return items, scores, np.zeros((0, m), np.int64), np.zeros((0, m)), np.zeros(0, np.int64)

    def _rank_latest(self, indptr, k, weight, base, share_weight, recent, seen, m, *,
                     paper: bool, blended: bool = True):
        """`threshold_topm` over the latest chunk (`_grouped_chunk`, and its lists,
        `ranked_chunk`) for rows of interests ``(indptr, k, weight, base, share_weight)``
        and recent items ``recent`` (a `Recent`)."""
        chunk = self._grouped_chunk()
        lists = ranked_chunk(chunk)
        with _numba_threads(self.n_jobs) as threads:
            return threshold_topm(
                Queries(indptr, k, weight, base, share_weight), recent,
                chunk_arrays(chunk, self.chunk_items_), lists, ItemRows(*seen), m, threads,
                paper=paper, blended=blended)

    def _rank_mixtures(self, indptr, k, theta, m, seen, *, chunk=None):
        """Top-m of ``p_t(i|.)`` for rows given by their mixtures (no personal
        component), the remaining slots filled by popularity: over the latest chunk
        (`_grouped_chunk`) by `threshold_topm`'s lists, or over ``chunk`` (`_chunk_within`)
        by `mixture_topm`'s scatter."""
        weight, base = interest_weights(indptr, k, theta, self.beta, LatestChunk.of(self))
        n = indptr.shape[0] - 1
        if chunk is None:
            no_recent = Recent(np.zeros(n), np.zeros(n + 1, np.int64), np.empty(0, np.int64),
                               np.empty(0))
            *_, items, scores, n_filled = self._rank_latest(
                indptr, k, weight, base, np.zeros(n), no_recent, seen, m, paper=True,
                blended=False)
            chunk = self._grouped_chunk()
        else:
            with _numba_threads(self.n_jobs) as threads:
                items, scores, n_filled = mixture_topm(
                    Queries(indptr, k, weight, base, np.zeros(n)),
                    chunk_arrays(chunk, self.chunk_items_), ItemRows(*seen), m, threads)
        return fill_by_popularity(items, scores, n_filled, indptr, base, seen, chunk)
