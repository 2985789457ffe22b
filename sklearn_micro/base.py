"""The recommender protocol shared by MiCRO and the baselines.

Every recommender is a scikit-learn estimator with three verbs:

- ``fit(X)``: learn from a training engagement log (or the `EmbeddedLog` a `GraphEmbedder`
  hands on in a Pipeline);
- ``partial_fit(X)``: take the engagements of one or more new time chunks, in order. Every
  chunk must be newer than the latest chunk taken so far (a chunk equal to it is refused
  too), on a fitted recommender (an unfitted one raises ``NotFittedError``); a call that
  fails leaves the recommender as it was;
- ``recommend(users, m)``: for each user, the ``m`` best items for the latest chunk, best
  first, as ``(items, scores)`` arrays of shape (n_users, m) in external ids.

A subclass keeps its id vocabularies in ``user_ids_`` and ``item_ids_`` and implements
``_recommend(user_index, m, seen, history=None)`` on internal indices (-1 for users it has
never seen; ``seen`` the CSR ``(indptr, items)`` of items to leave out, sorted per user;
``history`` the request's `ItemLists` or None), returning internal item indices padded with
-1 and scores padded with -inf. ``_recommend_allowed`` ranks within allow lists; by default
from a deeper ranking of ``_recommend``.
"""

from __future__ import annotations

from numbers import Integral

import numpy as np
from sklearn.pipeline import Pipeline
from sklearn.utils.validation import check_is_fitted

from ._dask import recommend_parsed_on_cluster
from ._kernels import csr
from ._log import as_ids, check_log, distinct
from ._parallel import active_client
from ._request import Request, allowed_top_m, parse_request, removed_items
from .persistence import unversioned_state, versioned_state

__all__ = ["RecommenderMixin", "SeenItems", "append_to_rows", "csr_rows", "final_step",
           "key_ranges", "open_chunk_log", "partial_fit_through", "ranges_csr",
           "unique_pairs"]

# m may exceed the number of items known (the rows are padded) up to this many slots
MAX_PADDED_M = 10_000

# a published state's answers with the open chunk, and, in those answers' state, the
# published state they were made from (`RecommenderMixin._published`)
_LIVE_CACHE = "_live_cache"
_CLOSED = "_closed_state"


def ranges_csr(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR ``(indptr, positions)`` whose row ``r`` holds the positions ``lo[r]:hi[r]``."""
    lo = np.asarray(lo, np.int64)
    hi = np.asarray(hi, np.int64)
    indptr = np.zeros(lo.shape[0] + 1, np.int64)
    np.cumsum(hi - lo, out=indptr[1:])
    positions = np.empty(indptr[-1], np.int64)
    csr.fill_ranges(lo, hi, indptr, positions)
    return indptr, positions


def key_ranges(sorted_keys: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR ``(indptr, positions)`` of the entries of ``sorted_keys`` equal to each key (none
    for a negative key)."""
    lo = np.searchsorted(sorted_keys, keys, side="left")
    hi = np.searchsorted(sorted_keys, keys, side="right")
    return ranges_csr(lo, np.where(keys < 0, lo, hi))


def csr_rows(indptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For a CSR ``indptr``: the indptr of ``rows`` (-1 gives an empty row) and the
    positions of their entries."""
    rows = np.asarray(rows, np.int64)
    known = rows >= 0
    lo = np.zeros(rows.shape[0], np.int64)
    hi = np.zeros(rows.shape[0], np.int64)
    # the -1 rows are not read: a CSR of no rows has no row 0
    lo[known] = indptr[rows[known]]
    hi[known] = indptr[rows[known] + 1]
    return ranges_csr(lo, hi)


class SeenItems:
    """Which items each user has engaged with: distinct (user, item) pairs.

    Used by ``recommend(..., exclude_seen=True)`` and to tell warm users from cold ones. A
    pair is one int64 key, ``user << 32 | item`` (internal indices below 2**31 and 2**32),
    8 bytes a pair. The keys are kept in sorted runs of distinct keys, the oldest and
    largest first, each run smaller than half the one before it (so at most about
    ``log2(n_pairs)`` runs). `add` returns a new object that shares the runs it keeps with
    this one, which is left as it was: the new pairs become a run of their own, merged with
    the newest runs while a run is at least half the one before it. A run is copied only
    when it is merged, so adding test chunks one at a time to the pairs of a large training
    log copies little more than the chunks' own pairs, where one sorted array would copy
    every pair held at each chunk.
    """

    def __init__(self, keys=None):
        self.runs = [] if keys is None or len(keys) == 0 else [keys]

    @property
    def keys(self) -> np.ndarray:
        """All the keys, sorted (a new array when there are several runs)."""
        if not self.runs:
            return np.empty(0, np.int64)
        keys = self.runs[0]
        for run in self.runs[1:]:
            keys = csr.merge_distinct(keys, run)
        return keys

    def __len__(self) -> int:
        return sum(run.shape[0] for run in self.runs)

    @property
    def user(self) -> np.ndarray:
        return self.keys >> 32

    @property
    def item(self) -> np.ndarray:
        return self.keys & 0xFFFFFFFF

    def add(self, user: np.ndarray, item: np.ndarray) -> SeenItems:
        user, item = np.asarray(user), np.asarray(item)
        if user.size and (user.max() >= 2**31 or item.max() >= 2**32):
            raise ValueError(
                "seen items are kept for up to 2**31 users and 2**32 items; got "
                f"{user.max() + 1} users and {item.max() + 1} items."
            )
        new = user.astype(np.int64)
        new <<= 32
        new |= item
        new.sort(kind="stable")  # a chunk's pairs come mostly sorted: a merge sort is quick
        if new.size:
            new = new[np.concatenate(([True], new[1:] != new[:-1]))]
        for run in self.runs:
            if new.size:
                new = new[~csr.sorted_contains(run, new)]
        runs = self.runs + [new] if new.size else list(self.runs)
        while len(runs) > 1 and 2 * runs[-1].shape[0] >= runs[-2].shape[0]:
            runs[-2:] = [csr.merge_distinct(runs[-2], runs[-1])]
        grown = SeenItems()
        grown.runs = runs
        return grown

    def has_user(self, users: np.ndarray) -> np.ndarray:
        """Whether each user (internal index, -1 for unknown) has any pair."""
        users = np.asarray(users, np.int64)
        found = np.zeros(users.shape[0], bool)
        for run in self.runs:
            found |= np.searchsorted(run, (users + 1) << 32) > np.searchsorted(run, users << 32)
        return (users >= 0) & found

    def csr(self, users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(indptr, items)`` of the seen items of ``users`` (internal, -1 for unknown),
        sorted within each user."""
        users = np.asarray(users, np.int64)
        parts = []
        for run in self.runs:
            lo = np.searchsorted(run, users << 32)
            hi = np.where(users < 0, lo, np.searchsorted(run, (users + 1) << 32))
            parts.append((lo, hi, run))
        if len(parts) <= 1:
            lo, hi, run = parts[0] if parts else (np.zeros_like(users), np.zeros_like(users),
                                                  np.empty(0, np.int64))
            indptr, positions = ranges_csr(lo, hi)
            return indptr, run[positions] & 0xFFFFFFFF
        counts = sum(hi - lo for lo, hi, _ in parts)
        indptr = np.zeros(users.shape[0] + 1, np.int64)
        np.cumsum(counts, out=indptr[1:])
        # each user's pairs from every run, keyed by (row, item) and sorted
        keyed = []
        rows = np.arange(users.shape[0], dtype=np.int64) << 32
        for lo, hi, run in parts:
            _, positions = ranges_csr(lo, hi)
            keys = run[positions] & 0xFFFFFFFF
            keys |= np.repeat(rows, hi - lo)
            keyed.append(keys)
        keys = np.concatenate(keyed)
        keys.sort()
        return indptr, keys & 0xFFFFFFFF


class RecommenderMixin:
    """Mixin giving a fitted recommender its public ``recommend`` verb.

    ``recommend`` maps external user ids to internal ones, calls the subclass's
    ``_recommend`` and maps the answer back to external item ids. The pickled state carries
    the version of sklearn-micro that saved it, checked on loading (see
    `sklearn_micro.persistence`).
    """

    def __getstate__(self):
        state = super().__getstate__()
        state.pop(_LIVE_CACHE, None)
        return versioned_state(state)

    def __setstate__(self, state):
        super().__setstate__(unversioned_state(state, type(self).__name__))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.estimator_type = "recommender"
        tags.target_tags.required = False
        return tags

    def recommend(self, users, m: int = 100, *, exclude_seen: bool = False, exclude=None,
                  allow=None, history=None):
        """The ``m`` best items of the latest chunk for each user, best first.

        Parameters
        ----------
        users : array-like of shape (n_users,)
            External user ids. Users never seen in any log get the documented answer for
            unseen users of each recommender.
        m : int, default=100
            Number of items per user: at least 1, and at most the number of items known
            or 10,000, whichever is larger (beyond the items known a row is padding).
        exclude_seen : bool, default=False
            Leave out items the user has already engaged with (in any log given to ``fit``
            or ``partial_fit``, and in ``history``).
        exclude : list of item ids, or list of lists of item ids, optional
            Items never returned: a flat list for every user, or one list per user
            (aligned with ``users``). Unknown ids are ignored.
        allow : list of item ids, or list of lists of item ids, optional
            Candidates restricted to these items, given as ``exclude`` is. Unknown ids are
            ignored.
        history : list of lists of item ids, optional
            Per user (aligned with ``users``), the items engaged with since the latest
            chunk, one id per engagement; unknown ids are ignored. The model answers from
            its state and the history without changing; each recommender's docstring says
            what it does with it.

        Returns
        -------
        items : ndarray of shape (n_users, m)
            External item ids, best first; padded with -1 (or "" for string ids) where
            fewer than ``m`` items can be ranked.
        scores : ndarray of shape (n_users, m)
            The score of each item; -inf where padded.

        Raises
        ------
        NotFittedError
            Before ``fit``.
        ValueError
            If ``m`` is out of range, ``users`` is not 1-D, or holds ids of another kind
            than those seen in ``fit`` (or of mixed kinds); if ``exclude``, ``allow`` or
            ``history`` is not a list of the kinds above, or holds ids of another kind.

        Notes
        -----
        A user's eligible items are those the recommender ranks for the user without
        filters, less ``exclude`` (and the seen items with ``exclude_seen``), within
        ``allow``. Each row holds exactly ``m`` of them, in the order of the unfiltered
        ranking, wherever at least ``m`` exist, and is padded only beyond them.

        Thread safety: ``recommend`` reads the state that ``fit`` or ``partial_fit`` last
        published, whole; ``partial_fit`` on another thread publishes its new state with
        one reference swap, so a call sees the state before a chunk or after it, never a
        mix.

        Inside ``joblib.parallel_config(backend="dask")`` with a ``distributed`` client,
        the users are ranked by blocks on the cluster's workers, with the same answer
        (`sklearn_micro._dask.recommend_on_cluster`).
        """
        model = self._published()
        users = model._check_recommend(users, m, exclude_seen)
        request = parse_request(model.item_ids_, users.shape[0], exclude=exclude,
                                allow=allow, history=history)
        if users.size == 0:
            return model._external_items(np.empty((0, int(m)), np.int64)), np.empty((0, int(m)))
        client = active_client()
        if client is not None:
            return recommend_parsed_on_cluster(model, users, m, exclude_seen, request,
                                               client)
        user_index, seen = model._users_and_seen(users, exclude_seen)
        items, scores = model._answer(user_index, int(m), seen, request, exclude_seen)
        return model._external_items(items), scores

    def _answer(self, user_index, m, seen, request: Request, exclude_seen: bool):
        """`recommend` on internal indices: ``seen`` with ``exclude`` (and the history,
        with ``exclude_seen``) left out, within ``allow``."""
        seen = removed_items(seen, request.exclude,
                             request.history if exclude_seen else None)
        if request.allow is None:
            return self._recommend(user_index, m, seen, history=request.history)
        return self._recommend_allowed(user_index, m, seen, request.allow, request.history)

    def _recommend_allowed(self, user_index, m, seen, allow, history):
        """`_recommend` within ``allow``: the allowed items of the full ranking, by ranking
        deeper where a row's top ``m`` holds too few of them (`allowed_top_m`)."""
        def rank(rows, depth, sub_seen):
            return self._recommend(user_index[rows], depth, sub_seen,
                                   history=None if history is None else history.rows(rows))

        return allowed_top_m(rank, user_index.shape[0], m, seen, allow, len(self.item_ids_))

    def _published(self):
        """This recommender as ``partial_fit`` or ``observe`` last published it: a view
        of the state's attributes, read once, so that a reader holding it sees one state
        whole while the next one is built on another thread. With an observed open chunk
        (`_live_key` not None) the view is `_live_state`'s, made once per published
        state and key and kept in it."""
        state = self.__dict__
        key = None if _CLOSED in state else self._live_key(state)
        view = object.__new__(type(self))
        if key is None:
            view.__dict__ = state
            return view
        cache = state.get(_LIVE_CACHE)
        if cache is None or cache[0] != key:
            live = self._live_state(state)
            cache = (key, {**{name: value for name, value in live.items()
                              if name != _LIVE_CACHE}, _CLOSED: state})
            state[_LIVE_CACHE] = cache
        view.__dict__ = cache[1]
        return view

    def _live_key(self, state: dict):
        """What the answers with the open chunk depend on beyond the published state
        (compared with ``==``), or None when the state answers without it: no
        engagements observed. Recommenders with ``observe`` override it."""
        return None

    def _live_state(self, state: dict) -> dict:
        """The attributes that answer with the open chunk, for `_published`; called only
        where `_live_key` is not None, so a recommender with ``observe`` defines both."""
        raise NotImplementedError(
            f"{type(self).__name__} overrides _live_key and must define _live_state too")

    def _closed(self):
        """A view of the published state without the open chunk (for a view with it, of
        the state it was made from): what ``partial_fit`` builds on."""
        view = object.__new__(type(self))
        view.__dict__ = self.__dict__.get(_CLOSED, self.__dict__)
        return view

    def _publish_observed(self, state: dict, **attributes) -> None:
        """Publish ``state`` with ``attributes`` (the new open chunk) in one swap, its
        answers' cache left behind."""
        new = {key: value for key, value in state.items() if key != _LIVE_CACHE}
        self._publish({**new, **attributes}, replacing=state)

    def _publish(self, state: dict, *, replacing: dict | None = None) -> None:
        """Make ``state`` (a new dict of attributes) this recommender's, in one swap;
        refused if the state is no longer ``replacing``, the one the new state was built
        from (another ``partial_fit`` published meanwhile: its chunks would be lost)."""
        if replacing is not None and self.__dict__ is not replacing:
            raise RuntimeError(
                f"{type(self).__name__}.partial_fit: another call published a new state "
                "while this one ran, so this call's chunks were not taken; call "
                "partial_fit from one thread at a time.")
        self.__dict__ = state

    def _check_recommend(self, users, m, exclude_seen, *, name: str = "users") -> np.ndarray:
        """`recommend`'s checks of its arguments; returns ``users`` (named ``name`` in
        errors) as a 1-D array."""
        check_is_fitted(self, "item_ids_")
        if not isinstance(m, Integral) or isinstance(m, bool) or m < 1:
            raise ValueError(f"m must be an integer >= 1; got {m!r}.")
        limit = max(len(self.item_ids_), MAX_PADDED_M)
        if m > limit:
            raise ValueError(
                f"m must be at most {limit}, the larger of the {len(self.item_ids_)} items "
                f"known and {MAX_PADDED_M} (slots beyond the items known only hold padding); "
                f"got {m!r}."
            )
        if not isinstance(exclude_seen, (bool, np.bool_)):
            raise TypeError(f"exclude_seen must be True or False; got {exclude_seen!r}.")
        users = as_ids(users, name=name)
        if users.ndim == 0:
            users = users.reshape(1)
        if users.ndim != 1:
            raise ValueError(
                f"{name} must be a 1-D array of {name[:-1]} ids; got shape {users.shape}.")
        return users

    def _users_and_seen(self, users: np.ndarray, exclude_seen: bool):
        """The users' indices and the CSR of the items to leave out (none unless
        ``exclude_seen``)."""
        user_index = self.user_ids_.lookup(users, name="users")
        if exclude_seen:
            return user_index, self.seen_items_.csr(user_index)
        return user_index, (np.zeros(users.shape[0] + 1, np.int64), np.empty(0, np.int64))

    def _external_items(self, items: np.ndarray) -> np.ndarray:
        ids = self.item_ids_.ids
        if ids.dtype.kind == "U":
            out = np.full(items.shape, "", dtype=ids.dtype)
        else:
            out = np.full(items.shape, -1, dtype=np.int64)
        valid = items >= 0
        out[valid] = ids[items[valid]]
        return out



def open_chunk_log(X, latest_chunk: int):
    """``X`` checked as a log of the open chunk, the one after ``latest_chunk``: the log
    and the open chunk, or a ValueError naming it."""
    log = check_log(X)
    open_chunk = int(latest_chunk) + 1
    chunks = np.unique(log.chunk)
    if chunks.shape[0] != 1 or int(chunks[0]) != open_chunk:
        raise ValueError(
            f"observe takes engagements of the open chunk {open_chunk} (the one after the "
            f"latest chunk {open_chunk - 1}); got chunk(s) {chunks[:5].tolist()}.")
    return log, open_chunk


def final_step(estimator):
    """The estimator that answers for ``estimator``: itself, or a Pipeline's last step."""
    return estimator[-1] if isinstance(estimator, Pipeline) else estimator


def partial_fit_through(estimator, X) -> None:
    """``partial_fit`` of a recommender, or of a Pipeline ending in one: ``X`` transformed
    by every other step (``None`` and ``"passthrough"`` steps skipped), then taken by the
    last step's ``partial_fit``."""
    if not isinstance(estimator, Pipeline):
        estimator.partial_fit(X)
        return
    for _, step in estimator.steps[:-1]:
        if step is not None and not (isinstance(step, str) and step == "passthrough"):
            X = step.transform(X)
    estimator[-1].partial_fit(X)


def unique_pairs(rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``(row, col)`` pairs of integers, sorted by row then col.

    The one place the package sorts and de-duplicates pairs. Pairs whose ranges make a
    single int64 key (``(row - min) * n_cols + (col - min)``) are sorted as that key; others
    (ids spread over the whole int64 range) by a lexsort.
    """
    rows = np.asarray(rows, np.int64)
    cols = np.asarray(cols, np.int64)
    if rows.size == 0:
        return rows, cols
    row_lo, col_lo = int(rows.min()), int(cols.min())
    n_cols = int(cols.max()) - col_lo + 1
    if (int(rows.max()) - row_lo + 1) * n_cols < 2**62:
        key = distinct((rows - row_lo) * n_cols + (cols - col_lo))
        return key // n_cols + row_lo, key % n_cols + col_lo
    order = np.lexsort((cols, rows))
    rows, cols = rows[order], cols[order]
    keep = np.ones(rows.shape[0], bool)
    keep[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
    return rows[keep], cols[keep]


def append_to_rows(indptr: np.ndarray, columns, rows: np.ndarray, values):
    """A CSR with new entries appended to rows: one pass of copying, no sort.

    ``columns`` are the CSR's aligned entry arrays, ``values`` the new entries of each and
    ``rows`` the row of every new entry, in any order; a row's new entries come after its
    old ones, in their given order. Returns the new indptr and the new columns (new arrays
    always). Where every row that gains entries comes after the last old entry, the old
    entries keep their positions.
    """
    rows = np.asarray(rows, np.int64)
    order = np.argsort(rows, kind="stable")
    add_indptr = np.zeros(indptr.shape[0], np.int64)
    np.cumsum(np.bincount(rows, minlength=indptr.shape[0] - 1), out=add_indptr[1:])
    # rows past every old entry (new users, say): the old entries keep their positions
    tail = rows.shape[0] == 0 or indptr[rows.min()] == indptr[-1]
    return indptr + add_indptr, tuple(
        np.concatenate([c, np.asarray(v)[order].astype(c.dtype)]) if tail else
        csr.append_to_rows(indptr, c, add_indptr, np.asarray(v)[order].astype(c.dtype))
        for c, v in zip(columns, values, strict=True))
