"""The `MiCRO` estimator and its public methods."""

from __future__ import annotations

import copy
import warnings
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, _fit_context, clone
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from .._log import (
    Vocabulary,
    as_ids,
    check_log,
    iter_chunks,
)
from .._request import ItemLists, own_items, parse_request, removed_items, single_list
from ..base import RecommenderMixin, SeenItems, open_chunk_log
from ._gibbs import MIN_PARTITION_WORK
from ._held_out import (
    TrainingLog,
)
from ._live import LiveLayer, observe_batch
from ._online import Explanation, item_mixtures
from ._retrieval import MiCRORetrieval, _interest_counts, _Within
from ._sampling import MiCROSampling
from ._state import (
    LatestChunk,
    carried_chunks,
    chunk_item_mixtures,
    counts_csr,
    interest_weights,
    popularity_weights,
    recent_items,
    training_interests,
)

__all__ = ["MiCRO"]


class MiCRO(MiCROSampling, MiCRORetrieval, RecommenderMixin, BaseEstimator):
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
        ``sklearn_micro.micro.PERSONAL_GRID`` by held-out ranking: the last training
        chunks are ranked, as `recommend` does, from the state `fit` leaves on the chunks
        before each; among the weights (with ``popularity``'s, when it is "learned" too)
        that keep ``sklearn_micro.micro.RECALL_KEPT`` of the recall@100 of the mixture
        alone, those with the best mean ``learned_by`` win (ties to the smaller). 0 is the
        paper's model.
    coengagement : float in [0, 1] or "learned", default="learned"
        Share ``g`` of the personal term spread from the user's recent items to the items
        engaged with them: ``r_u`` becomes ``(1 - g) * r_u(i) + g * sum_j r_u(j) *
        s(j, i)``, where ``s(j, i)`` is the walk item ``j`` -> user -> item ``i`` over
        every user's recent items (P3: each step the row's share of the decayed
        engagements), kept to each item's ``sklearn_micro.micro.COENGAGED_NEIGHBOURS``
        best other items (bounded memory, no item x item matrix). Co-engaged items
        outside the latest chunk are candidates too. It acts only where the personal
        weight is above 0; at ``g = 1`` a user whose recent items have no co-engaged
        item has an empty ``r_u``, so ``lam_u = 0``. "learned" chooses it at `fit` from
        ``sklearn_micro.micro.COENGAGEMENT_GRID`` with the blend's weights, by the same
        held-out ranking. 0 leaves ``r_u`` as the user's own items.
    popularity : float >= 0 or "learned", default="learned"
        Weight ``w`` of the latest chunk's popularity ``pi_t(i)`` (an item's share of the
        chunk's engagements) beside the interests' mixture, in ``s(i)`` above: it orders
        the items of a user's interests by their popularity too and lets the chunk's most
        popular items outside them in; as ``w`` grows, the ranking tends to the chunk's
        popularity. "learned" chooses it at `fit` from
        ``sklearn_micro.micro.POPULARITY_GRID``, with ``personal``'s weight, by the same
        held-out ranking. 0 is the paper's model. Users without interests are scored by
        ``pi_t`` whatever ``w``.
    learned_by : {"recall", "mrr"}, default="recall"
        The held-out metric at 100 that "learned" weights maximize: "recall" fills the 100
        slots with the most of a user's next items; "mrr" puts the first of them highest,
        among weights that keep ``sklearn_micro.micro.RECALL_KEPT`` of the mixture's recall.
    personal_window : int, default=16
        Chunks of a user's history that make up ``r_u`` and the co-engagement walk.
    personal_decay : float in (0, 1], default=0.5
        Weight of an engagement in ``r_u`` per chunk of age.
    phi_decay : float in [0, 1) or "auto", default="auto"
        Weight of the previous ``phi`` counts carried into each new chunk's, for
        retrieval: ``phi`` after chunk ``t`` comes from ``N[i, k, t] + phi_decay *
        N'[i, k, t - 1]`` (and popularity likewise), so items engaged in recent chunks
        stay candidates with a decaying weight. 0 is the paper's model (``phi[k, t]`` from
        chunk ``t`` alone); logs whose items live long (authors, movies) gain from 0.5 or
        more. "auto" chooses it at `fit` from the training log: the value of
        ``sklearn_micro.micro.PHI_DECAY_GRID`` whose decayed popularity best predicts the
        next chunk's items over the last training chunks (mean recall@100). The sampler always uses
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
    live_weight : float >= 0 or "auto", default="auto"
        Weight of the open chunk's observed engagements (`observe`) in the latest chunk's
        counts: answers rank from ``N[i, k, t] + live_weight * N_open[i, k]`` (popularity
        likewise), so the open chunk's share of the ranking grows with its size so far;
        each observed engagement also counts in its user's mixture and recent items. 0
        answers from the closed chunks alone, as the paper's model does. "auto" chooses
        it at `fit` from ``sklearn_micro.micro.LIVE_WEIGHT_GRID`` by a held-out replay of
        the last training chunk, leaving 0 only on a gain sure at 95% (docs: "Live
        retrieval"). A number acts at once.
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
        partitions' moves (AD-LDA, Newman et al. 2009); a chunk gets fewer partitions
        when each would visit fewer than ``min_partition_work`` support entries a sweep.
        `recommend` ranks users on ``n_jobs`` threads. None means 1 unless in a
        `joblib.parallel_config` context; -1 means all processors; inside
        ``joblib.parallel_config(backend="dask")`` the partitions are sampled on the
        cluster's workers (docs: "Dask"). Results are deterministic for a given
        ``random_state``, ``n_jobs`` and ``min_partition_work``; different numbers of
        partitions give different chains of the same quality (docs: "The model").
    min_partition_work : int >= 0, default=4194304
        The fewest support entries (an engagement times its user's interests) that each
        partition of a chunk visits a sweep: below ``n_jobs`` times this, a chunk is
        split into fewer partitions, at least one, so a small chunk is sampled as one
        chain whatever ``n_jobs``. A lower value samples faster on threads and draws
        another chain of the same quality (docs: "Benchmarks" has the trade-off). 0 splits
        every chunk into ``n_jobs`` partitions.
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
    live_weight_ : float
        The ``live_weight`` that `fit` took: the one given, or the one "auto" chose.
    personal_weight_ : float
        The weight ``lam`` of the personal component: the one given, or the one
        "learned" chose.
    popularity_weight_ : float
        The weight ``w`` of the latest chunk's popularity: the one given, or the one
        "learned" chose.
    coengagement_ : float
        The co-engagement share ``g`` in use: the one given, or the one "learned" chose.
    coengaged_indptr_, coengaged_item_, coengaged_score_ : ndarray
        Each item's co-engaged items as a CSR over items (at most
        ``COENGAGED_NEIGHBOURS`` per item, best first, with their walk's ``s(j, i)``),
        built from ``recent_*`` whenever a chunk closes. Empty when ``coengagement_`` or
        ``personal_weight_`` is 0.
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
    The defaults where the paper leaves a choice (``I_t``, the sampler's start, users new
    in a chunk, unassigned engagements) are in the docs' "The model" and "Equations".

    - `recommend` ranks the latest chunk's items (with ``phi_decay > 0`` also earlier
      items still carrying mass, and with the personal term the user's recent items) and
      its top ``m`` is exact. Ties, and slots the user's interests cannot fill, go by the
      latest chunk's popularity. A user never seen gets that popularity ranking. Fewer
      than ``m`` items: the rest is padded with -1 and -inf.
    - ``recommend(..., history=...)`` answers from the state and a user's engagements
      since the latest chunk without changing the model (docs: "Online use"); `observe`
      keeps them (docs: "Live retrieval").
    - The paper's exact model is ``MiCRO(personal=0, popularity=0, phi_decay=0,
      live_weight=0)`` (`paper_model`).
    - `partial_fit` and `observe` work on a copy of the state and publish the new one in
      one swap, so readers on other threads see the state before or after, never a mix.

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
        "coengagement": [Interval(Real, 0, 1, closed="both"), StrOptions({"learned"})],
        "popularity": [Interval(Real, 0, None, closed="left"), StrOptions({"learned"})],
        "learned_by": [StrOptions({"mrr", "recall"})],
        "personal_window": [Interval(Integral, 1, None, closed="left")],
        "personal_decay": [Interval(Real, 0, 1, closed="right")],
        "phi_decay": [Interval(Real, 0, 1, closed="left"), StrOptions({"auto"})],
        "phi_min_count": [Interval(Real, 0, None, closed="left")],
        "live_weight": [Interval(Real, 0, None, closed="left"), StrOptions({"auto"})],
        "max_sweeps": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "random_state": ["random_state"],
        "n_jobs": [Integral, None],
        "min_partition_work": [Interval(Integral, 0, None, closed="left")],
        "verbose": ["verbose"],
    }

    def __init__(self, alpha=1.0, *, beta=0.01, personal="learned", coengagement="learned",
                 popularity="learned", learned_by="recall", personal_window=16,
                 personal_decay=0.5, phi_decay="auto", phi_min_count=0, live_weight="auto",
                 max_sweeps=100, tol=1e-3, random_state=None, n_jobs=None,
                 min_partition_work=MIN_PARTITION_WORK, verbose=0):
        self.alpha = alpha
        self.beta = beta
        self.personal = personal
        self.coengagement = coengagement
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
        self._choose_settings(TrainingLog(u, i, log_chunk, z, indptr, sup_k, sup_cnt,
                                          len(item_ids), K))
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
        self._set_coengaged()
        self.n_sweeps_ = {}
        self.log_likelihood_ = {}
        self.n_unassigned_ = {}
        self.live_ = None
        self.n_observed_ = 0
        return self

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
        if request.allow is not None and not request.allow.is_flat:
            found, scores = model._rank_candidates(indptr, k, theta, None, m, seen,
                                                   request.allow, popularity=0.0)
        else:
            chunk = None if request.allow is None else model._chunk_within(
                _Within(request.allow.flat_items(), None))
            found, scores = model._rank_mixtures(indptr, k, theta, m, seen, chunk=chunk)
        return model._external_items(found), scores

    def explain(self, user, items, *, history=None) -> Explanation:
        """Each item's score for a user, split into the terms of the blend.

        The terms are the interests' (one per interest of the user's mixture), the
        popularity term, the personal term and the co-engagement term.

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
            ``contributions`` of each item, the ``popularity``, ``personal`` and
            ``coengagement`` terms; each item's terms sum to its score.

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn_micro import MiCRO
        >>> train = np.array([[0, 10, 0], [0, 11, 0], [1, 12, 0], [1, 13, 0]])
        >>> model = MiCRO(personal=0, popularity=0, random_state=0).fit(
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
        found = got[0] >= 0
        score_of = dict(zip(got[0][found].tolist(), got_scores[0][found], strict=True))
        scores = np.array([score_of.get(int(i), -np.inf) for i in index], np.float64)
        # the terms
        weight, base = interest_weights(indptr, k, theta, model.beta, LatestChunk.of(model))
        lam = 0.0
        r_u_of, own_of = {}, {}
        if recent is not None and recent[0][1] > 0:
            lam = model.personal_weight_
            r_u_of = dict(zip(recent[1].tolist(), recent[2], strict=True))
            own = model._recent_scores(user_index, hist, spread=False)
            own_of = dict(zip(own[1].tolist(), (1.0 - model.coengagement_) * own[2],
                              strict=True))
        chunk = model._grouped_chunk()
        local = np.where(index >= 0, model._item_local()[np.maximum(index, 0)], -1)
        in_chunk = (local >= 0) & (scores > -np.inf)
        count = _interest_counts(chunk["phi_indptr"], chunk["phi_item"], chunk["phi_count"],
                                 local, k)
        keep = 1.0 - lam
        ranked = scores > -np.inf
        contributions = np.where(in_chunk[:, None],
                                 keep * weight[None, :] * (model.beta + count), 0.0)
        popularity = np.zeros(index.shape[0])
        share_weight = popularity_weights(indptr, model.popularity_weight_)[0]
        popularity[in_chunk] = keep * share_weight * chunk["share"][local[in_chunk]]
        personal = np.array([lam * own_of.get(int(i), 0.0) for i in index], np.float64)
        coengagement = np.array([lam * (r_u_of.get(int(i), 0.0) - own_of.get(int(i), 0.0))
                                 for i in index], np.float64)
        personal[~ranked] = 0.0
        coengagement[~ranked] = 0.0
        return Explanation(user=one.item() if one.dtype.kind != "U" else str(one),
                           items=items, scores=scores, interests=k.astype(np.int64),
                           weights=theta, contributions=contributions, popularity=popularity,
                           personal=personal, personal_weight=float(lam),
                           coengagement=coengagement)

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
        model = self._published()
        index = model.user_ids_.lookup(np.atleast_1d(as_ids(users, name="users")),
                                       name="users")
        indptr, k, theta = model._theta(index)
        return sp.csr_matrix((theta, k, indptr), shape=(index.shape[0], model.n_interests_))

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
        model = self._published()
        index = model.item_ids_.lookup(np.atleast_1d(as_ids(items, name="items")),
                                       name="items")
        return chunk_item_mixtures(model.phi_indptr_, model.phi_item_, model.phi_count_,
                                   model.chunk_items_, index, model.n_interests_)

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
        model.live_weight_ = 0.0
        model.personal_weight_ = 0.0
        model.popularity_weight_ = 0.0
        # no recent items, as `fit` keeps them without the personal component
        none = np.empty(0, np.int64)
        model.recent_indptr_, model.recent_item_, model.recent_chunk_, model.recent_weight_ = (
            recent_items(none, none, none, none, len(self.user_ids_)))
        model.coengagement_ = 0.0
        model._set_coengaged()
        model.random_state_ = copy.deepcopy(self.random_state_)
        return model

    # ------------------------------------------------------------ retrieval

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

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("_grouped", None)
        return state

