"""Checks that every recommender of the package passes: the recommender protocol.

A check takes ``(factory, X_train, X_next)``: ``factory()`` returns an unfitted recommender
(or a Pipeline whose last step is one) with its randomness fixed, ``X_train`` is a training
log and ``X_next`` holds two or more later chunks, both DataFrames with int64 ids. Run them
all with `check_recommender`, or parametrize a test over `recommender_checks()`::

    @pytest.mark.parametrize("check", recommender_checks(), ids=lambda c: c.__name__)
    def test_protocol(check):
        X_train, X_next = make_log()
        check(lambda: MyRecommender(random_state=0), X_train, X_next)

What is compared exactly and what to a tolerance: a recommender asked the same thing twice
in the same way (a pickled copy, a refit, a clone, a read-only log) answers the same arrays
to the last bit. Asked the same thing composed differently (users in one batch or one at a
time, chunks in one partial_fit or in turn), it may round differently wherever its
arithmetic goes through BLAS on floats: BLAS sums in an order that depends on the shapes
and on the CPU's kernel. Those two checks compare scores to `SCORE_RTOL` of the row's
largest absolute score and items exactly, except for swaps among items whose scores tie
within that tolerance; ``recommender_checks(score_rtol=0)`` asks for equal arrays there too.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from functools import partial, update_wrapper

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_array_equal
from sklearn.base import BaseEstimator, TransformerMixin, clone
from sklearn.exceptions import NotFittedError

from sklearn_micro._log import EmbeddedLog, Vocabulary, check_log
from sklearn_micro.base import SeenItems
from sklearn_micro.model_selection import _final_recommender, _partial_fit

__all__ = ["CHECKS", "SCORE_RTOL", "FixedEmbedder", "check_recommender", "make_log",
           "recommender_checks", "state_differences"]

# the tolerance of scores computed in different compositions, relative to the row's largest
# absolute score: about 100 times float32's rounding unit, room for float32 sums in any order
# and for a few least-squares steps taken from them
SCORE_RTOL = 1e-5


def make_log(seed: int = 0, *, n_chunks: int = 6, n_train: int = 4, per_chunk: int = 40):
    """A small log with ephemeral items, repeat engagements and users arriving over time.

    Chunk ``c`` draws its items from a pool that shifts by six new items per chunk, and its
    users from a pool that grows by three per chunk. Ids are offset so that external ids
    differ from internal indices. Returns ``(X_train, X_next)``: the first ``n_train``
    chunks and the rest.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(n_chunks):
        pool = np.arange(6 * c, 6 * c + 12)
        weights = 1.0 / np.arange(1, pool.size + 1)
        for _ in range(per_chunk):
            user = rng.integers(0, 20 + 3 * c)
            item = rng.choice(pool, p=weights / weights.sum())
            rows.append((1000 + user, 5000 + item, c))
            if rng.random() < 0.2:
                rows.append((1000 + user, 5000 + item, c))
    X = pd.DataFrame(rows, columns=["user", "item", "chunk"]).astype(np.int64)
    return (
        X[X.chunk < n_train].reset_index(drop=True),
        X[X.chunk >= n_train].reset_index(drop=True),
    )


class FixedEmbedder(TransformerMixin, BaseEstimator):
    """A stand-in for GraphEmbedder in tests: fixed random vectors for the log's ids."""

    def __init__(self, n_components: int = 8, random_state: int = 0):
        self.n_components = n_components
        self.random_state = random_state

    def fit(self, X, y=None):
        log = check_log(X)
        rng = np.random.default_rng(self.random_state)
        self.user_ids_ = Vocabulary.from_ids(log.user)
        self.item_ids_ = Vocabulary.from_ids(log.item)
        self.user_vectors_ = rng.normal(size=(len(self.user_ids_), self.n_components))
        self.item_vectors_ = rng.normal(size=(len(self.item_ids_), self.n_components))
        return self

    def transform(self, X):
        return EmbeddedLog(
            check_log(X), self.user_ids_, self.item_ids_, self.user_vectors_,
            self.item_vectors_,
        )


# -- helpers ---------------------------------------------------------------------------------


def _chunks(X):
    return [X[X.chunk == c] for c in sorted(X.chunk.unique())]


def _fitted(factory, X_train, X_next=None):
    est = factory().fit(X_train)
    if X_next is not None:
        _partial_fit(est, X_next)
    return est


def _recommend(est, users, m, exclude_seen=False):
    return _final_recommender(est).recommend(users, m, exclude_seen=exclude_seen)


def _query_users(X_train, X_next):
    """Users of the training log, users new in X_next and two never seen."""
    train = np.unique(X_train.user)
    new = np.setdiff1d(np.unique(X_next.user), train)
    return np.concatenate([train[:12], new[:3], [-5, 10**12]]).astype(np.int64)


def _assert_same(a, b):
    assert_array_equal(a[0], b[0])
    assert_array_equal(a[1], b[1])


def _assert_same_ranking(a, b, score_rtol):
    """Two answers ``(items, scores)`` of the same model computed in different compositions
    (other batches, other chunk groupings): the same padding, scores within ``score_rtol``
    of the row's largest absolute score, and the same items except where two swap places
    among scores tied within that tolerance (an item may also leave a full row for one tied
    with the row's last score). ``score_rtol=0`` asks for equal arrays."""
    if score_rtol == 0:
        _assert_same(a, b)
        return
    (items_a, scores_a), (items_b, scores_b) = a, b
    assert items_a.shape == items_b.shape == scores_a.shape == scores_b.shape
    assert_array_equal(np.isneginf(scores_a), np.isneginf(scores_b),
                       err_msg="the answers are padded differently")
    for r in range(items_a.shape[0]):
        kept = ~np.isneginf(scores_a[r])
        ia, ib = items_a[r][kept], items_b[r][kept]
        sa, sb = scores_a[r][kept], scores_b[r][kept]
        if not sa.size:
            continue
        tol = score_rtol * max(np.abs(sa).max(), np.abs(sb).max())
        far = np.abs(sa - sb) > tol
        assert not far.any(), (
            f"row {r}: scores differ by more than {score_rtol:g} of the row's largest "
            f"({tol:.3g}): {sa[far]} against {sb[far]}")
        full = bool(kept.all())
        for j in np.flatnonzero(ia != ib):
            for item, score, other_items, other_scores in ((ia[j], sa[j], ib, sb),
                                                           (ib[j], sb[j], ia, sa)):
                at = np.flatnonzero(other_items == item)
                assert at.size or full, f"row {r}: item {item} is missing from the other"
                there = other_scores[at[0]] if at.size else other_scores[-1]
                assert abs(score - there) <= 2 * tol, (
                    f"row {r}: item {item} moved from a score of {score} to a slot scored "
                    f"{there}, beyond ties within {tol:.3g}")


def _padding(items):
    return "" if items.dtype.kind == "U" else -1


def _assert_valid_rows(items, scores, known_items):
    pad = _padding(items)
    padded = np.isneginf(scores)
    assert_array_equal(padded, items == pad)
    assert not np.isnan(scores).any()
    for row, row_pad in zip(items, padded, strict=True):
        # padding only at the end of a row
        if row_pad.any():
            assert row_pad[np.argmax(row_pad):].all()
        ids = row[~row_pad]
        assert np.unique(ids).shape[0] == ids.shape[0], f"repeated ids in a row: {row}"
        assert np.isin(ids, known_items).all()
    for row, row_pad in zip(scores, padded, strict=True):
        kept = row[~row_pad]
        assert (np.diff(kept) <= 0).all(), f"scores increase along a row: {row}"


def _state_values_equal(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))
    if isinstance(a, Vocabulary):
        return _state_values_equal(a.ids, b.ids)
    if isinstance(a, SeenItems):
        return _state_values_equal(a.keys, b.keys)
    if isinstance(a, np.random.RandomState):
        return all(_state_values_equal(np.asarray(x), np.asarray(y))
                   for x, y in zip(a.get_state(), b.get_state(), strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_state_values_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(map(_state_values_equal, a, b))
    if isinstance(a, BaseEstimator):
        return a.get_params(deep=False).keys() == b.get_params(deep=False).keys() and \
            not state_differences(a, b)
    if hasattr(a, "__dict__") and not callable(a):  # a dataclass or another small object
        return _state_values_equal(vars(a), vars(b))
    return bool(a == b)


def state_differences(a, b, *, ignore=("_index", "_grouped")) -> list[str]:
    """The attributes in which two estimators differ (values compared exactly, arrays with
    their dtypes, vocabularies and seen items by their arrays, random states by their
    state); ``ignore`` names caches rebuilt on demand."""
    if hasattr(a, "steps"):
        return [f"{name}.{diff}" for (name, x), (_, y) in zip(a.steps, b.steps, strict=True)
                for diff in state_differences(x, y, ignore=ignore)]
    va, vb = vars(a), vars(b)
    names = sorted((va.keys() | vb.keys()) - set(ignore))
    return [n for n in names
            if n not in va or n not in vb or not _state_values_equal(va[n], vb[n])]


def _read_only(X):
    arr = X.to_numpy(dtype=np.int64, copy=True)
    arr.flags.writeable = False
    return arr


# -- the checks ------------------------------------------------------------------------------


def check_not_fitted(factory, X_train, X_next):
    est = factory()
    rec = est[-1] if hasattr(est, "steps") else est
    with pytest.raises(NotFittedError):
        rec.recommend([1], 3)


def check_recommend_shapes(factory, X_train, X_next):
    est = _fitted(factory, X_train)
    users = _query_users(X_train, X_next)
    for m in (1, 7):
        items, scores = _recommend(est, users, m)
        assert items.shape == scores.shape == (users.shape[0], m)
        assert items.dtype == np.int64
        assert scores.dtype == np.float64
    items, scores = _recommend(est, users[:0], 4)
    assert items.shape == scores.shape == (0, 4)
    with pytest.raises(ValueError, match="m must be"):
        _recommend(est, users, 0)


def check_rows_valid(factory, X_train, X_next):
    """Unique ids per row (ignoring padding), known items, scores non-increasing."""
    known = np.unique(np.concatenate([X_train.item, X_next.item]))
    est = _fitted(factory, X_train)
    users = _query_users(X_train, X_next)
    for exclude_seen in (False, True):
        _assert_valid_rows(*_recommend(est, users, 15, exclude_seen), known)
    _partial_fit(est, X_next)
    for exclude_seen in (False, True):
        _assert_valid_rows(*_recommend(est, users, 15, exclude_seen), known)


def check_batch_equals_single(factory, X_train, X_next, *, score_rtol=SCORE_RTOL):
    """Users recommended for in one batch get what they get one by one (to ``score_rtol``,
    see `SCORE_RTOL`)."""
    users = _query_users(X_train, X_next)
    for est in (_fitted(factory, X_train), _fitted(factory, X_train, X_next)):
        for exclude_seen in (False, True):
            batch = _recommend(est, users, 10, exclude_seen)
            single = [_recommend(est, [u], 10, exclude_seen) for u in users]
            _assert_same_ranking(batch, (np.vstack([s[0] for s in single]),
                                         np.vstack([s[1] for s in single])), score_rtol)


def check_pickle_round_trip(factory, X_train, X_next):
    users = _query_users(X_train, X_next)
    first, *rest = _chunks(X_next)
    est = _fitted(factory, X_train, first)
    before = _recommend(est, users, 10), _recommend(est, users, 10, True)
    restored = pickle.loads(pickle.dumps(est))
    _assert_same(_recommend(restored, users, 10), before[0])
    _assert_same(_recommend(restored, users, 10, True), before[1])
    # the restored recommender carries on like the original
    for chunk in rest:
        _partial_fit(est, chunk)
        _partial_fit(restored, chunk)
    _assert_same(_recommend(restored, users, 10), _recommend(est, users, 10))


def check_refuses_older_chunk(factory, X_train, X_next):
    users = _query_users(X_train, X_next)
    first, second, *_ = _chunks(X_next)
    est = _fitted(factory, X_train, second)
    before = _recommend(est, users, 10), _recommend(est, users, 10, True)
    latest = int(second.chunk.iloc[0])
    older = int(first.chunk.iloc[0])
    with pytest.raises(ValueError, match=rf"(?s)(\b{older}\b.*\b{latest}\b)|"
                                         rf"(\b{latest}\b.*\b{older}\b)"):
        _partial_fit(est, first)
    _assert_same(_recommend(est, users, 10), before[0])
    _assert_same(_recommend(est, users, 10, True), before[1])
    # a log mixing new rows with an older one is refused as a whole
    mixed = pd.concat([second.assign(chunk=latest + 1), first.iloc[:1]], ignore_index=True)
    with pytest.raises(ValueError):
        _partial_fit(est, mixed)
    _assert_same(_recommend(est, users, 10), before[0])
    _assert_same(_recommend(est, users, 10, True), before[1])


def check_refuses_latest_chunk_again(factory, X_train, X_next):
    """A chunk equal to the latest one is refused like an older one, the state kept."""
    users = _query_users(X_train, X_next)
    first, *_ = _chunks(X_next)
    est = _fitted(factory, X_train, first)
    before = _recommend(est, users, 10), _recommend(est, users, 10, True)
    latest = int(first.chunk.iloc[0])
    with pytest.raises(ValueError, match=rf"\b{latest}\b"):
        _partial_fit(est, first.iloc[:3])
    assert _final_recommender(est).latest_chunk_ == latest
    _assert_same(_recommend(est, users, 10), before[0])
    _assert_same(_recommend(est, users, 10, True), before[1])


def check_partial_fit_before_fit(factory, X_train, X_next):
    """partial_fit on an unfitted recommender raises NotFittedError, for every recommender."""
    est = factory()
    rec = est[-1] if hasattr(est, "steps") else est
    with pytest.raises(NotFittedError, match="fit"):
        rec.partial_fit(X_train)
    assert not hasattr(rec, "latest_chunk_")


def check_refuses_empty_log(factory, X_train, X_next):
    empty = X_train.iloc[:0]
    with pytest.raises(ValueError, match="empty"):
        factory().fit(empty)
    users = _query_users(X_train, X_next)
    est = _fitted(factory, X_train)
    before = _recommend(est, users, 10)
    with pytest.raises(ValueError, match="empty"):
        _partial_fit(est, empty)
    _assert_same(_recommend(est, users, 10), before)


def check_unseen_users(factory, X_train, X_next):
    """Users never seen get an answer, the same for all of them."""
    for est in (_fitted(factory, X_train), _fitted(factory, X_train, X_next)):
        items, scores = _recommend(est, [-5, 10**12, 77777], 10)
        assert (items[:, 0] != -1).all()
        assert_array_equal(items[0], items[1])
        assert_array_equal(items[0], items[2])


def check_exclude_seen(factory, X_train, X_next):
    users = _query_users(X_train, X_next)
    for log, est in ((X_train, _fitted(factory, X_train)),
                     (pd.concat([X_train, X_next]), _fitted(factory, X_train, X_next))):
        items, _ = _recommend(est, users, 30, exclude_seen=True)
        for user, row in zip(users, items, strict=True):
            seen = log.item[log.user == user].to_numpy()
            assert not np.isin(row, seen).any(), f"user {user} got seen items"


def check_pads_when_few_candidates(factory, X_train, X_next):
    """With ``m`` as large as the number of items known, more than the latest chunk holds,
    every row gives every item of the latest chunk (the fill runs to its end) and then pads,
    at the end only."""
    known = np.unique(np.concatenate([X_train.item, X_next.item]))
    users = _query_users(X_train, X_next)
    for log, est in ((X_train, _fitted(factory, X_train)),
                     (X_next, _fitted(factory, X_train, X_next))):
        latest = np.unique(log.item[log.chunk == log.chunk.max()])
        assert latest.shape[0] < known.shape[0]
        items, scores = _recommend(est, users, known.shape[0])
        _assert_valid_rows(items, scores, known)
        assert (items[:, -1] == -1).all(), "rows are not padded"
        for row in items:
            missing = np.setdiff1d(latest, row)
            assert missing.size == 0, f"padded before the latest chunk's items {missing}"


def check_string_ids(factory, X_train, X_next):
    def to_str(X):
        return X.assign(user="u" + X.user.astype(str), item="i" + X.item.astype(str))

    S_train, S_next = to_str(X_train), to_str(X_next)
    known = np.unique(np.concatenate([S_train.item, S_next.item]))
    users = np.concatenate([S_train.user.unique()[:8], S_next.user.unique()[-3:], ["nobody"]])
    est = _fitted(factory, S_train)
    items, scores = _recommend(est, users, 10)
    assert items.dtype.kind == "U"
    _assert_valid_rows(items, scores, known)
    _partial_fit(est, S_next)
    items, scores = _recommend(est, users, 10, exclude_seen=True)
    _assert_valid_rows(items, scores, known)
    padded, _ = _recommend(est, users[:2], known.shape[0] + 3)
    assert (padded[:, -3:] == "").all()
    with pytest.raises(ValueError):
        _recommend(est, [1, 2], 5)


def _with_new_item(X_train, X_next):
    """X_next with one more item, never seen, engaged twice in the last chunk by the
    training user with the fewest distinct training items (the narrowest taste): fewer
    engagements than most items of that chunk. Returns the log, the user and the item."""
    distinct_items = X_train.groupby("user").item.nunique()
    user = int(distinct_items.index[distinct_items.to_numpy().argmin()])
    item = int(max(X_train.item.max(), X_next.item.max()) + 1000)
    last = int(X_next.chunk.max())
    extra = pd.DataFrame({"user": [user, user], "item": [item, item], "chunk": [last, last]})
    return pd.concat([X_next, extra.astype(X_next.dtypes)], ignore_index=True), user, item


def check_new_items_recommended(factory, X_train, X_next):
    """Items first engaged after fit are ranked by the recommender itself once taken by
    partial_fit, not only reached by the popularity fill: a new item that a user engaged
    with comes, in that user's row, ahead of an item more engaged in the latest chunk."""
    X_next, user, item = _with_new_item(X_train, X_next)
    last = X_next[X_next.chunk == X_next.chunk.max()]
    counts = last.item.value_counts()
    more_engaged = counts.index[counts > counts[item]].to_numpy()
    assert more_engaged.size >= 3
    est = _fitted(factory, X_train, X_next)
    n_known = np.unique(np.concatenate([X_train.item, X_next.item])).shape[0]
    row = _recommend(est, [user], n_known)[0][0]
    assert item in row, f"the new item {item} is not recommended to the user who engaged it"
    behind = np.setdiff1d(more_engaged, row[: np.flatnonzero(row == item)[0]])
    assert behind.size, (f"the new item {item} comes after every item more engaged in the "
                         f"latest chunk: only the popularity fill reached it ({row})")


def check_fit_resets_and_clone(factory, X_train, X_next):
    users = _query_users(X_train, X_next)
    expected = _recommend(_fitted(factory, X_train), users, 10)
    est = _fitted(factory, X_train, X_next)
    est.fit(X_train)
    _assert_same(_recommend(est, users, 10), expected)
    _assert_same(_recommend(clone(est).fit(X_train), users, 10), expected)


def check_chunks_at_once_equal_in_turn(factory, X_train, X_next, *, score_rtol=SCORE_RTOL):
    """Chunks taken by one partial_fit give the state that taking them in turn gives: the
    same recommendations, to ``score_rtol`` (see `SCORE_RTOL`)."""
    users = _query_users(X_train, X_next)
    at_once = _fitted(factory, X_train, X_next)
    in_turn = _fitted(factory, X_train)
    for chunk in _chunks(X_next):
        _partial_fit(in_turn, chunk)
    _assert_same_ranking(_recommend(at_once, users, 10), _recommend(in_turn, users, 10),
                         score_rtol)


def check_fit_returns_self_and_keeps_params(factory, X_train, X_next):
    """fit returns the estimator, changes none of its parameters, and sets only attributes
    whose names end with an underscore (scikit-learn's check_estimators_fit_returns_self,
    check_estimators_overwrite_params and check_dont_overwrite_parameters, on a log)."""
    est = factory()
    params = clone(est).get_params(deep=True)
    rec = est[-1] if hasattr(est, "steps") else est
    before = set(vars(rec))
    assert est.fit(X_train) is est
    after = est.get_params(deep=True)
    assert params.keys() == after.keys()
    for name, value in params.items():
        if not hasattr(value, "get_params"):
            assert repr(after[name]) == repr(value), f"fit changed the parameter {name}"
    added = set(vars(rec)) - before
    public = [a for a in added if not a.startswith("_") and not a.endswith("_")]
    assert not public, f"fit set public attributes without a trailing underscore: {public}"


def check_recommend_leaves_state(factory, X_train, X_next):
    """recommend changes no fitted attribute (scikit-learn's check_dict_unchanged)."""
    est = _fitted(factory, X_train, X_next)
    before = pickle.loads(pickle.dumps(est))
    users = _query_users(X_train, X_next)
    _recommend(est, users, 10)
    _recommend(est, users, 10, exclude_seen=True)
    assert not state_differences(est, before)


def check_fit_idempotent(factory, X_train, X_next):
    """Fitting twice gives the same state as fitting once (check_fit_idempotent), and a
    read-only log is taken as a writable one (check_readonly_memmap_input)."""
    once = _fitted(factory, X_train)
    twice = _fitted(factory, X_train).fit(X_train)
    assert not state_differences(once, twice)
    read_only = factory().fit(_read_only(X_train))
    _partial_fit(read_only, _read_only(X_next))
    users = _query_users(X_train, X_next)
    _assert_same(_recommend(read_only, users, 10),
                 _recommend(_fitted(factory, X_train, X_next), users, 10))


def check_refuses_what_is_not_a_log(factory, X_train, X_next):
    """NaN, floats, complex numbers, sparse matrices, the wrong width and scalars are refused
    by fit and partial_fit with a ValueError or TypeError that names X; partial_fit's
    refusals leave the state as it was (check_estimators_nan_inf, check_complex_data,
    check_estimator_sparse_*, check_fit2d_1feature, check_fit1d)."""
    import scipy.sparse as sp

    arr = X_next.to_numpy(dtype=np.int64)
    with_nan = arr.astype(float)
    with_nan[1, 1] = np.nan
    bad = {
        "NaN": with_nan,
        "inf": np.where(arr == arr[0, 0], np.inf, arr.astype(float)),
        "fractions": arr + 0.5,
        "complex": arr + 1j,
        "sparse": sp.csr_matrix(arr),
        "one column": arr[:, :1],
        "four columns": np.column_stack([arr, arr[:, 0]]),
        "1-D": arr[:, 0],
        "scalar": 3,
        "None": None,
    }
    est = _fitted(factory, X_train, _chunks(X_next)[0])
    state = pickle.loads(pickle.dumps(est))
    for what, X in bad.items():
        with pytest.raises((ValueError, TypeError), match=r"\bX\b") as info:
            factory().fit(X)
        assert str(info.value), what
        with pytest.raises((ValueError, TypeError), match=r"\bX\b"):
            _partial_fit(est, X)
        assert not state_differences(est, state), what


def check_latest_chunk(factory, X_train, X_next):
    est = _fitted(factory, X_train)
    assert _final_recommender(est).latest_chunk_ == X_train.chunk.max()
    _partial_fit(est, X_next)
    assert _final_recommender(est).latest_chunk_ == X_next.chunk.max()


_CHECKS: list[Callable] = [
    check_not_fitted,
    check_recommend_shapes,
    check_rows_valid,
    check_batch_equals_single,
    check_pickle_round_trip,
    check_refuses_older_chunk,
    check_refuses_latest_chunk_again,
    check_partial_fit_before_fit,
    check_refuses_empty_log,
    check_unseen_users,
    check_exclude_seen,
    check_pads_when_few_candidates,
    check_string_ids,
    check_new_items_recommended,
    check_fit_resets_and_clone,
    check_chunks_at_once_equal_in_turn,
    check_latest_chunk,
    check_fit_returns_self_and_keeps_params,
    check_recommend_leaves_state,
    check_fit_idempotent,
    check_refuses_what_is_not_a_log,
]


# the checks that compare answers computed in different compositions
_COMPOSED = (check_batch_equals_single, check_chunks_at_once_equal_in_turn)


def recommender_checks(*, score_rtol: float = SCORE_RTOL) -> list[Callable]:
    """The protocol's checks, each ``check(factory, X_train, X_next)``, those comparing
    answers composed differently bound to ``score_rtol`` (0: equal arrays)."""
    return [update_wrapper(partial(check, score_rtol=score_rtol), check)
            if check in _COMPOSED else check for check in _CHECKS]


CHECKS = recommender_checks()


def check_recommender(factory, X_train=None, X_next=None, *, score_rtol=SCORE_RTOL,
                      expected_failed=None):
    """Run every check of `recommender_checks` on ``factory``.

    Parameters
    ----------
    factory : callable
        Returns a new unfitted recommender, or a Pipeline ending in one.
    X_train, X_next : DataFrame, optional
        Training log and two or more later chunks; `make_log` by default.
    score_rtol : float, default=SCORE_RTOL
        Tolerance of the checks that compare answers composed differently; 0 asks for
        equal arrays.
    expected_failed : dict of str to str, optional
        Names of checks to skip, each with a one-line reason.
    """
    if X_train is None:
        X_train, X_next = make_log()
    expected_failed = expected_failed or {}
    for check in recommender_checks(score_rtol=score_rtol):
        if check.__name__ not in expected_failed:
            check(factory, X_train, X_next)


def implicit_als_factors(counts, factors, *, alpha, iterations, random_state):
    """User and item factors of `implicit`'s own ALS fit (one thread) on ``counts``, seeded
    as sklearn-micro's estimators seed it from ``random_state``."""
    from implicit.cpu.als import AlternatingLeastSquares
    from sklearn.utils import check_random_state
    from threadpoolctl import threadpool_limits

    seed = int(check_random_state(random_state).randint(np.iinfo(np.int32).max))
    with threadpool_limits(1, user_api="blas"):
        model = AlternatingLeastSquares(factors=factors, regularization=0.01, alpha=alpha,
                                        iterations=iterations, num_threads=1,
                                        random_state=seed)
        model.fit(counts, show_progress=False)
    return model.user_factors, model.item_factors
