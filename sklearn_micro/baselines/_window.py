"""The state and verbs that the baselines share: vocabularies, seen items and the
engagements of the window, `fit` and `partial_fit` around hooks each baseline fills, and
`recommend`'s filling of the slots a baseline leaves with the latest chunk's popularity.

The *window* of a recommender is its last ``window`` chunks: the chunks ``latest_chunk_ -
window + 1`` to ``latest_chunk_``, by chunk number.
"""

from __future__ import annotations

import warnings
from numbers import Integral

import numpy as np
from sklearn.base import BaseEstimator, _fit_context
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from .._kernels.selection import fill_remainder
from .._log import LOOKUP_ROWS, Vocabulary, check_log, iter_chunks
from .._request import allowed_top_m, own_items, parse_request, removed_items
from ..base import RecommenderMixin, SeenItems, open_chunk_log

__all__ = ["WindowRecommender", "seen_of_log"]


def seen_of_log(user_ids: Vocabulary, item_ids: Vocabulary, log) -> SeenItems:
    """The seen items of a whole log, gathered block by block into one sorted key array,
    so memory holds about 8 bytes per engagement beyond the log (not the ids looked up)."""
    n = len(log)
    if len(user_ids) >= 2**31 or len(item_ids) >= 2**32:
        raise ValueError(
            "seen items are kept for up to 2**31 users and 2**32 items; got "
            f"{len(user_ids)} users and {len(item_ids)} items."
        )
    keys = np.empty(n, np.int64)
    for lo in range(0, n, LOOKUP_ROWS):
        hi = min(n, lo + LOOKUP_ROWS)
        user = user_ids.lookup(log.user[lo:hi], name="X user ids")
        item = item_ids.lookup(log.item[lo:hi], name="X item ids")
        np.bitwise_or(user << 32, item, out=keys[lo:hi])
    keys.sort()
    if n > 1:
        keep = np.empty(n, bool)
        keep[0] = True
        np.not_equal(keys[1:], keys[:-1], out=keep[1:])
        keys = keys[keep]
    return SeenItems(keys)


class _OpenChunk:
    """The open chunk's engagements as `_extend_state` takes a plain log (no vectors)."""

    def __init__(self, user, item):
        self.user, self.item = user, item


class WindowRecommender(RecommenderMixin, BaseEstimator):
    """Shared state of the baselines: vocabularies, seen items and the window's engagements.

    Subclasses add their model through the hooks below, which work on a ``state`` dict of
    fitted attributes that is committed only once a call has succeeded.
    """

    _parameter_constraints: dict = {
        "window": [Interval(Integral, 1, None, closed="left")],
    }

    def __init__(self, window: int = 1):
        self.window = window

    # -- hooks ------------------------------------------------------------------------------

    def _start(self, X, log) -> dict:
        """Vocabularies of a first fit (the log's distinct ids); subclasses may add more."""
        return {
            "user_ids_": Vocabulary.from_ids(log.user),
            "item_ids_": Vocabulary.from_ids(log.item),
        }

    def _fit_model(self, state: dict, log, user: np.ndarray, item: np.ndarray) -> None:
        """Fit the model on the whole training log (internal indices)."""

    def _extend_state(self, state: dict, X) -> None:
        """Grow ``state`` by what a partial_fit input brings besides its engagements (the
        vectors of new users, rows for new ids)."""

    def _update_chunk(self, state: dict, user: np.ndarray, item: np.ndarray) -> None:
        """Take one new chunk's engagements; the window in ``state`` already holds them."""

    def _derive(self, state: dict) -> None:
        """Recompute what recommend reads from the window."""

    def _rank(self, user_index, items, scores, n_filled, seen_indptr, seen_items,
              history=None) -> None:
        """Rank each user's own candidates into the first ``n_filled[r]`` slots
        (``history``: the request's `ItemLists`, or None)."""

    # -- fit and partial_fit ----------------------------------------------------------------

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Fit on a training engagement log.

        Parameters
        ----------
        X : DataFrame with columns user, item, chunk, int array of shape (n, 3),
            EngagementLog or EmbeddedLog
            The training engagements, one per row.
        y : None
            Ignored.

        Returns
        -------
        self : object
            The fitted recommender.
        """
        return self._fit(X)

    def _fit(self, X):
        log = check_log(X)
        state = self._start(X, log)
        latest = int(log.chunk.max())
        in_window = np.flatnonzero(log.chunk > latest - self.window)
        state.update(
            seen_items_=seen_of_log(state["user_ids_"], state["item_ids_"], log),
            latest_chunk_=latest,
            window_user_=state["user_ids_"].lookup(log.user[in_window], name="X user ids"),
            window_item_=state["item_ids_"].lookup(log.item[in_window], name="X item ids"),
            window_chunk_=log.chunk[in_window].astype(np.int64),
        )
        if type(self)._fit_model is not WindowRecommender._fit_model:
            user = state["user_ids_"].lookup(log.user, name="X user ids")
            item = state["item_ids_"].lookup(log.item, name="X item ids")
            self._fit_model(state, log, user, item)
        self._finish(state)
        return self

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y=None):
        """Take the engagements of one or more new chunks.

        Chunks are taken in increasing order, as successive calls would; the latest of them
        becomes the chunk that ``recommend`` answers for. A chunk older than the latest one
        already seen, or equal to it, is refused, and a call that fails leaves the
        recommender as it was. An unfitted recommender raises ``NotFittedError``, as every
        recommender of the package does: call ``fit`` on the training log first.

        Parameters
        ----------
        X : DataFrame with columns user, item, chunk, int array of shape (n, 3),
            EngagementLog or EmbeddedLog
            The new engagements; items and users may be new.
        y : None
            Ignored.

        Returns
        -------
        self : object
            The updated recommender.
        """
        base = self.__dict__
        check_is_fitted(self, "item_ids_", msg=(
            f"{type(self).__name__}.partial_fit needs a fitted recommender: call fit on the "
            "training log (or the Pipeline) first."))
        log = check_log(X)
        oldest = int(log.chunk.min())
        if oldest <= self.latest_chunk_:
            raise ValueError(
                f"partial_fit takes chunks newer than the latest chunk {self.latest_chunk_}; "
                f"X holds chunk {oldest}."
            )
        live = base.get("live_log_")
        if live is not None and oldest != self.latest_chunk_ + 1:
            warnings.warn(
                f"partial_fit was given chunk {oldest}, not the open chunk "
                f"{self.latest_chunk_ + 1}: the {live[0].shape[0]} engagements observed in "
                f"chunk {self.latest_chunk_ + 1} are dropped.", UserWarning, stacklevel=2)
        user_ids, user = self.user_ids_.extend(log.user, name="X user ids")
        item_ids, item = self.item_ids_.extend(log.item, name="X item ids")
        state = {name: getattr(self, name) for name in self._state_names()}
        state.update(
            user_ids_=user_ids,
            item_ids_=item_ids,
            seen_items_=self.seen_items_.add(user, item),
        )
        self._extend_state(state, X)
        for chunk, rows in iter_chunks(log.chunk):
            keep = state["window_chunk_"] > chunk - self.window
            state["window_user_"] = np.concatenate([state["window_user_"][keep], user[rows]])
            state["window_item_"] = np.concatenate([state["window_item_"][keep], item[rows]])
            state["window_chunk_"] = np.concatenate(
                [state["window_chunk_"][keep], np.full(rows.shape[0], chunk, np.int64)]
            )
            state["latest_chunk_"] = chunk
            self._update_chunk(state, user[rows], item[rows])
        self._finish(state, replacing=base)
        return self

    # -- the open chunk, live -----------------------------------------------------------

    def observe(self, X):
        """Add engagements of the open chunk (the one after ``latest_chunk_``) at once.

        The recommender then answers as if its window held the open chunk's engagements
        so far beside the closed chunks, without dropping the oldest of them: the
        popularity that fills the slots counts the latest closed chunk and the open one,
        and each baseline takes them as its docstring says. `partial_fit` of the open
        chunk closes it; observed engagements of a chunk that `partial_fit` is not given
        are dropped with a warning.

        Parameters
        ----------
        X : engagement log
            Engagements (``user``, ``item``, ``chunk``), every one of the open chunk.

        Returns
        -------
        self : object
            The recommender, with the engagements observed.
        """
        check_is_fitted(self, "item_ids_", msg=(
            f"{type(self).__name__}.observe needs a fitted recommender: call fit on the "
            "training log (or the Pipeline) first."))
        state = self.__dict__
        log, open_chunk = open_chunk_log(X, state["latest_chunk_"])
        before = state.get("live_log_")
        user = log.user if before is None else np.concatenate([before[0], log.user])
        item = log.item if before is None else np.concatenate([before[1], log.item])
        # refused here, with the state as it was, if an id is of the wrong kind
        state["user_ids_"].extend(user, name="X user ids")
        state["item_ids_"].extend(item, name="X item ids")
        self._publish_observed(state, live_log_=(user, item), n_observed_=int(user.shape[0]))
        return self

    def _live_key(self, state):
        """The observed open chunk's engagements, or None without any."""
        live = state.get("live_log_")
        return None if live is None else (id(live),)

    def _live_state(self, state: dict) -> dict:
        """The attributes with the open chunk's engagements ``live_log_ = (users, items)``
        (external ids) in the window beside the closed chunks."""
        live = state["live_log_"]
        closed = object.__new__(type(self))
        closed.__dict__ = state
        user_ids, user = state["user_ids_"].extend(live[0], name="X user ids")
        item_ids, item = state["item_ids_"].extend(live[1], name="X item ids")
        work = {name: state[name] for name in closed._state_names()}
        work.update(user_ids_=user_ids, item_ids_=item_ids,
                    seen_items_=state["seen_items_"].add(user, item))
        closed._extend_state(work, _OpenChunk(live[0], live[1]))
        open_chunk = int(state["latest_chunk_"]) + 1
        work["window_user_"] = np.concatenate([work["window_user_"], user])
        work["window_item_"] = np.concatenate([work["window_item_"], item])
        work["window_chunk_"] = np.concatenate(
            [work["window_chunk_"], np.full(user.shape[0], open_chunk, np.int64)])
        closed._update_chunk(work, user, item)
        closed._popularity(work, work["window_chunk_"] >= work["latest_chunk_"])
        closed._derive(work)
        return {**state, **work}

    def _state_names(self):
        return [name for name in vars(self) if name.endswith("_") and not name.startswith("_")]

    def _finish(self, state: dict, *, replacing: dict | None = None) -> None:
        """Derive the latest chunk's popularity and commit ``state`` to ``self``."""
        self._popularity(state, state["window_chunk_"] == state["latest_chunk_"])
        self._derive(state)
        # one swap: readers on other threads see the state before or after, never a mix
        state.update(live_log_=None, n_observed_=0)
        self._publish({**{key: value for key, value in self.__dict__.items()
                          if key != "_live_cache"}, **state}, replacing=replacing)

    def _popularity(self, state: dict, latest: np.ndarray) -> None:
        """The popularity that fills the slots: the window's engagements where ``latest``."""
        n_items = len(state["item_ids_"])
        counts = np.bincount(state["window_item_"][latest], minlength=n_items)
        popular = np.flatnonzero(counts)
        popular = popular[np.argsort(-counts[popular], kind="stable")]
        rank = np.arange(n_items, dtype=np.int64) + popular.shape[0]
        rank[popular] = np.arange(popular.shape[0])
        state.update(
            popular_items_=popular.astype(np.int64),
            popular_counts_=counts[popular].astype(np.int64),
            item_rank_=rank,
        )

    # -- recommend ---------------------------------------------------------------------------

    def _recommend(self, user_index, m, seen, history=None):
        return self._ranked(user_index.shape[0], m, seen, lambda *out: self._rank(
            user_index, *out, history=history))

    def _similar_by_vectors(self, items, m, exclude, allow):
        """`similar_items` of the recommenders with item vectors: each item with a vector
        (`_item_queries`) queries the candidates as a user's vector does (`_rank_queries`),
        the item itself left out; the others get the latest chunk's popularity."""
        model = self._published()
        items = model._check_recommend(items, m, False, name="items")
        request = parse_request(model.item_ids_, items.shape[0], exclude=exclude,
                                allow=allow, rows_name="items")
        index = model.item_ids_.lookup(items, name="items")
        no_seen = np.zeros(items.shape[0] + 1, np.int64), np.empty(0, np.int64)
        seen = removed_items(no_seen, own_items(index), request.exclude)
        queries, has = model._item_queries(index)

        def rank(rows, depth, sub_seen):
            mine = has[rows]
            return model._ranked(rows.shape[0], depth, sub_seen, lambda *out: (
                model._rank_queries(queries[rows[mine]], np.flatnonzero(mine), *out)))

        if request.allow is None:
            found, scores = rank(np.arange(items.shape[0]), int(m), seen)
        else:
            found, scores = allowed_top_m(rank, items.shape[0], int(m), seen, request.allow,
                                          len(model.item_ids_))
        return model._external_items(found), scores

    def _ranked(self, n, m, seen, rank_own):
        """Rows of ``m`` slots: ``rank_own(items, scores, n_filled, seen_indptr,
        seen_items)`` fills each row's first slots with its own candidates, the latest
        chunk's popularity the rest."""
        items = np.full((n, m), -1, np.int64)
        scores = np.full((n, m), -np.inf)
        n_filled = np.zeros(n, np.int64)
        seen_indptr, seen_items = seen
        rank_own(items, scores, n_filled, seen_indptr, seen_items)
        last = scores[np.arange(n), np.maximum(n_filled - 1, 0)]
        fill_base = np.where(n_filled > 0, last, 0.0) - 1.0
        counts = self.popular_counts_
        pop_score = counts / (counts.max() + 1.0) if counts.size else counts.astype(float)
        fill_remainder(
            items, scores, n_filled, self.popular_items_, pop_score, fill_base,
            seen_indptr, seen_items,
        )
        return items, scores
