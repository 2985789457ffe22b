"""The recommender protocol's checks, for the package's recommenders and for yours.

Every recommender of sklearn-micro (`MiCRO` and the baselines) follows one protocol, and
these checks are how the package tests it; run them on a recommender of your own to see
whether it can stand beside them (in a Pipeline, in `rolling_evaluate`, in
`GridSearchCV` with the rolling scorers).

What a recommender must do
--------------------------
- ``fit(X)`` on an engagement log (rows ``user, item, chunk``: a DataFrame with those
  columns or an integer array of shape (n, 3)) returns the recommender, changes none of
  its parameters, sets only attributes whose names end with an underscore, among them
  ``latest_chunk_``, the latest chunk taken; and refuses what is not a log (NaN, floats,
  sparse matrices, the wrong width, an empty log) with a ValueError or TypeError that
  names ``X``.
- ``partial_fit(X)`` takes one or more chunks newer than ``latest_chunk_``; an older or
  equal chunk is refused with a ValueError that names the chunks, and any refusal leaves
  the state as it was. Before ``fit`` it raises scikit-learn's ``NotFittedError``.
  Chunks taken in one call give what taking them in turn gives.
- ``recommend(users, m, exclude_seen=False)`` returns ``(items, scores)`` of shape
  (n_users, m): int64 items (str for string ids) and float64 scores, best first, no item
  twice in a row; a row is padded at its end with -1 ("" for string ids) and -inf when
  fewer candidates exist, and runs through every item of the latest chunk before
  padding. Users never seen get an answer, the same for all of them; ``exclude_seen``
  leaves out every item the user engaged with in the logs taken; ``m < 1`` is a
  ValueError naming ``m``. A batch of users gets what each gets alone, and
  ``recommend`` changes no fitted attribute. Before ``fit`` it raises
  ``NotFittedError``.
- Items first engaged after ``fit`` are ranked by the model once ``partial_fit`` has
  taken them, not only reached by a popularity fill. Pickling round-trips, and the copy
  carries on like the original. Refitting, or fitting a clone, gives the first fit's
  answers.

Attributes whose names start with an underscore are taken as caches rebuilt on demand:
the checks that compare states leave them out.

Equal answers
-------------
The same computation must give the same bits: a pickled copy, a refit, a clone, a
read-only log. The same question composed differently (users in one batch or one at a
time, chunks in one ``partial_fit`` or in turn) must give the same ranking: scores within
`SCORE_RTOL` of the row's largest absolute score, and the same items except where two
swap places among scores tied within that tolerance, because BLAS sums floats in an order
that depends on the shapes of the arrays and on the CPU. ``score_rtol=0`` asks for equal
arrays there too, for a recommender whose arithmetic does not go through BLAS.

Running them
------------
A check is ``check(factory, X_train, X_next)``: ``factory()`` returns a new unfitted
recommender (or a Pipeline whose last step is one) with its randomness fixed, ``X_train``
is a training log and ``X_next`` holds two or more later chunks, both with int64 ids, as
DataFrames or arrays; `make_log` draws a small one. Run every check with
`check_recommender`, skipping those that do not apply to your model with a reason::

    from sklearn_micro.utils.estimator_checks import check_recommender

    check_recommender(lambda: MyRecommender(random_state=0))

or give each its own test with pytest::

    import pytest
    from sklearn_micro.utils.estimator_checks import make_log, recommender_checks

    X_TRAIN, X_NEXT = make_log()

    @pytest.mark.parametrize("check", recommender_checks(), ids=lambda c: c.__name__)
    def test_protocol(check):
        check(lambda: MyRecommender(random_state=0), X_TRAIN, X_NEXT)

A failed check raises an AssertionError that says what differs. The checks need numpy,
scipy and scikit-learn; `check_string_ids` needs pandas, and raises
``unittest.SkipTest`` without it.
"""

from __future__ import annotations

import pickle
import re
import unittest
from collections.abc import Callable
from functools import partial, update_wrapper

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, clone
from sklearn.exceptions import NotFittedError

from .. import Vocabulary
from ..base import SeenItems, final_step, partial_fit_through
from ._check_logs import FixedEmbedder, make_log
from ._check_logs import as_array as _as_array
from ._check_logs import chunks as _chunks
from ._check_logs import column as _column
from ._check_logs import concat as _concat
from ._check_logs import like as _like
from ._check_logs import rows as _rows
from ._check_logs import with_chunk as _with_chunk

__all__ = ["SCORE_RTOL", "FixedEmbedder", "check_recommender", "make_log",
           "recommender_checks", "state_differences"]

#: The tolerance of scores computed in different compositions (users batched otherwise,
#: chunks grouped otherwise), relative to the row's largest absolute score: about 100
#: times float32's rounding unit, room for float32 sums in any order and for a few
#: least-squares steps taken from them.
SCORE_RTOL = 1e-5


# -- the recommender under test --------------------------------------------------------------


_recommender = final_step
_partial_fit = partial_fit_through


def _fitted(factory, X_train, X_next=None):
    est = factory().fit(X_train)
    if X_next is not None:
        _partial_fit(est, X_next)
    return est


def _recommend(est, users, m, exclude_seen=False):
    return _recommender(est).recommend(users, m, exclude_seen=exclude_seen)


def _query_users(X_train, X_next):
    """Users of the training log, users new in X_next and two never seen."""
    train = np.unique(_column(X_train, "user"))
    new = np.setdiff1d(np.unique(_column(X_next, "user")), train)
    return np.concatenate([train[:12], new[:3], [-5, 10**12]]).astype(np.int64)


class _Raises:
    """``with _Raises(errors, match):`` asserts that the block raises one of ``errors``
    with a message matching ``match`` (searched); the error is kept in ``value``."""

    def __init__(self, errors, match: str | None = None):
        self.errors = errors
        self.match = match
        self.value = None

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        if kind is None:
            raise AssertionError(f"did not raise {self.errors}")
        if not issubclass(kind, self.errors):
            return False
        if self.match is not None and not re.search(self.match, str(value)):
            raise AssertionError(f"raised {kind.__name__}({str(value)!r}), whose message does "
                                 f"not match {self.match!r}") from value
        self.value = value
        return True


def _assert_same(a, b):
    for x, y, what in ((a[0], b[0], "items"), (a[1], b[1], "scores")):
        assert x.shape == y.shape and x.dtype == y.dtype, (
            f"{what}: {x.dtype}{x.shape} against {y.dtype}{y.shape}")
        assert np.array_equal(x, y), f"{what} differ:\n{x}\nagainst\n{y}"


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
    assert np.array_equal(np.isneginf(scores_a), np.isneginf(scores_b)), (
        "the answers are padded differently")
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
    padded = np.isneginf(scores)
    assert np.array_equal(padded, items == _padding(items)), (
        "padding items and -inf scores are not in the same places")
    assert not np.isnan(scores).any(), "NaN scores"
    for row, row_pad in zip(items, padded, strict=True):
        if row_pad.any():
            assert row_pad[np.argmax(row_pad):].all(), f"padding before the end of {row}"
        ids = row[~row_pad]
        assert np.unique(ids).shape[0] == ids.shape[0], f"repeated ids in a row: {row}"
        assert np.isin(ids, known_items).all(), f"unknown items in {row}"
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


def state_differences(a, b, *, ignore=()) -> list[str]:
    """The attributes in which two estimators differ.

    Values are compared exactly: arrays with their dtypes and shapes, vocabularies and
    seen items by their arrays, random states by their state, estimators attribute by
    attribute. Attributes whose names start with an underscore are caches rebuilt on
    demand and are left out. For a Pipeline, the steps are compared in turn.

    Parameters
    ----------
    a, b : estimator
        The two estimators, or two Pipelines of the same steps.
    ignore : iterable of str, default=()
        More attribute names to leave out.

    Returns
    -------
    names : list of str
        The attributes that differ or that only one of them has, sorted (``step.name``
        in a Pipeline); empty when the two are alike.

    See Also
    --------
    check_recommender : Uses it to check that a refused call leaves the state as it was.

    Examples
    --------
    >>> from sklearn_micro import PopularityRecommender
    >>> from sklearn_micro.utils.estimator_checks import make_log, state_differences
    >>> X_train, X_next = make_log()
    >>> a = PopularityRecommender().fit(X_train)
    >>> b = PopularityRecommender().fit(X_train)
    >>> state_differences(a, b)
    []
    >>> "latest_chunk_" in state_differences(a, b.partial_fit(X_next))
    True
    """
    if hasattr(a, "steps"):
        return [f"{name}.{diff}" for (name, x), (_, y) in zip(a.steps, b.steps, strict=True)
                for diff in state_differences(x, y, ignore=ignore)]
    va, vb = vars(a), vars(b)
    names = sorted(n for n in (va.keys() | vb.keys()) - set(ignore) if not n.startswith("_"))
    return [n for n in names
            if n not in va or n not in vb or not _state_values_equal(va[n], vb[n])]


# -- the checks ------------------------------------------------------------------------------


def check_not_fitted(factory, X_train, X_next):
    """recommend before fit raises NotFittedError."""
    with _Raises(NotFittedError):
        _recommender(factory()).recommend([1], 3)


def check_recommend_shapes(factory, X_train, X_next):
    """(n_users, m) answers of int64 items and float64 scores; m must be >= 1."""
    est = _fitted(factory, X_train)
    users = _query_users(X_train, X_next)
    for m in (1, 7):
        items, scores = _recommend(est, users, m)
        assert items.shape == scores.shape == (users.shape[0], m)
        assert items.dtype == np.int64, f"items of dtype {items.dtype}"
        assert scores.dtype == np.float64, f"scores of dtype {scores.dtype}"
    items, scores = _recommend(est, users[:0], 4)
    assert items.shape == scores.shape == (0, 4)
    with _Raises(ValueError, match="m must be"):
        _recommend(est, users, 0)


def check_rows_valid(factory, X_train, X_next):
    """Unique ids per row (ignoring padding), known items, scores non-increasing, padding
    at the end only."""
    known = np.unique(np.concatenate([_column(X_train, "item"), _column(X_next, "item")]))
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
    """A pickled copy answers the same, and carries on with partial_fit like the original."""
    users = _query_users(X_train, X_next)
    first, *rest = _chunks(X_next)
    est = _fitted(factory, X_train, first)
    before = _recommend(est, users, 10), _recommend(est, users, 10, True)
    restored = pickle.loads(pickle.dumps(est))
    _assert_same(_recommend(restored, users, 10), before[0])
    _assert_same(_recommend(restored, users, 10, True), before[1])
    for chunk in rest:
        _partial_fit(est, chunk)
        _partial_fit(restored, chunk)
    _assert_same(_recommend(restored, users, 10), _recommend(est, users, 10))


def check_refuses_older_chunk(factory, X_train, X_next):
    """A chunk older than the latest one is refused with a ValueError naming both, alone or
    among newer rows, and the state is kept."""
    users = _query_users(X_train, X_next)
    first, second, *_ = _chunks(X_next)
    est = _fitted(factory, X_train, second)
    before = _recommend(est, users, 10), _recommend(est, users, 10, True)
    latest = int(_column(second, "chunk")[0])
    older = int(_column(first, "chunk")[0])
    with _Raises(ValueError, match=rf"(?s)(\b{older}\b.*\b{latest}\b)|"
                                   rf"(\b{latest}\b.*\b{older}\b)"):
        _partial_fit(est, first)
    _assert_same(_recommend(est, users, 10), before[0])
    _assert_same(_recommend(est, users, 10, True), before[1])
    # a log mixing new rows with an older one is refused as a whole
    mixed = _concat(_with_chunk(second, latest + 1), _rows(first, slice(0, 1)))
    with _Raises(ValueError):
        _partial_fit(est, mixed)
    _assert_same(_recommend(est, users, 10), before[0])
    _assert_same(_recommend(est, users, 10, True), before[1])


def check_refuses_latest_chunk_again(factory, X_train, X_next):
    """A chunk equal to the latest one is refused like an older one, the state kept."""
    users = _query_users(X_train, X_next)
    first, *_ = _chunks(X_next)
    est = _fitted(factory, X_train, first)
    before = _recommend(est, users, 10), _recommend(est, users, 10, True)
    latest = int(_column(first, "chunk")[0])
    with _Raises(ValueError, match=rf"\b{latest}\b"):
        _partial_fit(est, _rows(first, slice(0, 3)))
    assert _recommender(est).latest_chunk_ == latest
    _assert_same(_recommend(est, users, 10), before[0])
    _assert_same(_recommend(est, users, 10, True), before[1])


def check_partial_fit_before_fit(factory, X_train, X_next):
    """partial_fit on an unfitted recommender raises NotFittedError and sets nothing."""
    rec = _recommender(factory())
    with _Raises(NotFittedError, match="fit"):
        rec.partial_fit(X_train)
    assert not hasattr(rec, "latest_chunk_")


def check_refuses_empty_log(factory, X_train, X_next):
    """fit and partial_fit refuse a log without rows with a ValueError saying so; the state
    is kept."""
    empty = _rows(X_train, slice(0, 0))
    with _Raises(ValueError, match="empty"):
        factory().fit(empty)
    users = _query_users(X_train, X_next)
    est = _fitted(factory, X_train)
    before = _recommend(est, users, 10)
    with _Raises(ValueError, match="empty"):
        _partial_fit(est, empty)
    _assert_same(_recommend(est, users, 10), before)


def check_unseen_users(factory, X_train, X_next):
    """Users never seen get an answer, the same for all of them."""
    for est in (_fitted(factory, X_train), _fitted(factory, X_train, X_next)):
        items, _ = _recommend(est, [-5, 10**12, 77777], 10)
        assert (items[:, 0] != -1).all(), "no answer for users never seen"
        assert np.array_equal(items[0], items[1]) and np.array_equal(items[0], items[2]), (
            f"users never seen get different answers:\n{items}")


def check_exclude_seen(factory, X_train, X_next):
    """exclude_seen leaves out every item the user engaged with in the logs taken."""
    users = _query_users(X_train, X_next)
    for log, est in ((X_train, _fitted(factory, X_train)),
                     (_concat(X_train, X_next), _fitted(factory, X_train, X_next))):
        items, _ = _recommend(est, users, 30, exclude_seen=True)
        for user, row in zip(users, items, strict=True):
            seen = _column(log, "item")[_column(log, "user") == user]
            assert not np.isin(row, seen).any(), f"user {user} got seen items"


def check_pads_when_few_candidates(factory, X_train, X_next):
    """With ``m`` as large as the number of items known, more than the latest chunk holds,
    every row gives every item of the latest chunk (the fill runs to its end) and then pads,
    at the end only; some row pads (a row may instead fill every slot from items outside
    the latest chunk, as a user's co-engaged items can)."""
    known = np.unique(np.concatenate([_column(X_train, "item"), _column(X_next, "item")]))
    users = _query_users(X_train, X_next)
    for log, est in ((X_train, _fitted(factory, X_train)),
                     (X_next, _fitted(factory, X_train, X_next))):
        chunk = _column(log, "chunk")
        latest = np.unique(_column(log, "item")[chunk == chunk.max()])
        assert latest.shape[0] < known.shape[0]
        items, scores = _recommend(est, users, known.shape[0])
        _assert_valid_rows(items, scores, known)
        assert (items[:, -1] == -1).any(), "no row is padded"
        for row in items:
            missing = np.setdiff1d(latest, row)
            assert missing.size == 0, f"padded before the latest chunk's items {missing}"


def check_string_ids(factory, X_train, X_next):
    """String ids (in a DataFrame) are answered in string ids, padded with ""; int ids are
    then refused."""
    try:
        import pandas as pd
    except ImportError as error:
        raise unittest.SkipTest("check_string_ids needs pandas: string ids come in a "
                                "DataFrame") from error

    def to_str(X):
        arr = _as_array(X)
        return pd.DataFrame({"user": np.char.add("u", arr[:, 0].astype(str)),
                             "item": np.char.add("i", arr[:, 1].astype(str)),
                             "chunk": arr[:, 2]})

    S_train, S_next = to_str(X_train), to_str(X_next)
    known = np.unique(np.concatenate([S_train.item, S_next.item]))
    users = np.concatenate([S_train.user.unique()[:8], S_next.user.unique()[-3:], ["nobody"]])
    est = _fitted(factory, S_train)
    items, scores = _recommend(est, users, 10)
    assert items.dtype.kind == "U", f"string ids answered as {items.dtype}"
    _assert_valid_rows(items, scores, known)
    _partial_fit(est, S_next)
    items, scores = _recommend(est, users, 10, exclude_seen=True)
    _assert_valid_rows(items, scores, known)
    padded, _ = _recommend(est, users[:2], known.shape[0] + 3)
    assert (padded[:, -3:] == "").all(), "string ids are not padded with ''"
    with _Raises(ValueError):
        _recommend(est, [1, 2], 5)


def _with_new_item(X_train, X_next):
    """X_next with one more item, never seen, engaged twice in the last chunk by the
    training user with the fewest distinct training items (the narrowest taste): fewer
    engagements than most items of that chunk. Returns the log, the user and the item."""
    pairs = np.unique(_as_array(X_train)[:, :2], axis=0)
    users, distinct_items = np.unique(pairs[:, 0], return_counts=True)
    user = int(users[distinct_items.argmin()])
    item = int(max(_column(X_train, "item").max(), _column(X_next, "item").max()) + 1000)
    last = int(_column(X_next, "chunk").max())
    return _concat(X_next, _like(X_next, [(user, item, last)] * 2)), user, item


def check_new_items_recommended(factory, X_train, X_next):
    """Items first engaged after fit are ranked by the recommender itself once taken by
    partial_fit, not only reached by the popularity fill: a new item that a user engaged
    with comes, in that user's row, ahead of an item more engaged in the latest chunk."""
    X_next, user, item = _with_new_item(X_train, X_next)
    chunk = _column(X_next, "chunk")
    ids, counts = np.unique(_column(X_next, "item")[chunk == chunk.max()], return_counts=True)
    more_engaged = ids[counts > counts[ids == item][0]]
    assert more_engaged.size >= 3
    est = _fitted(factory, X_train, X_next)
    n_known = np.unique(np.concatenate([_column(X_train, "item"),
                                        _column(X_next, "item")])).shape[0]
    row = _recommend(est, [user], n_known)[0][0]
    assert item in row, f"the new item {item} is not recommended to the user who engaged it"
    behind = np.setdiff1d(more_engaged, row[: np.flatnonzero(row == item)[0]])
    assert behind.size, (f"the new item {item} comes after every item more engaged in the "
                         f"latest chunk: only the popularity fill reached it ({row})")


def check_fit_resets_and_clone(factory, X_train, X_next):
    """fit on a recommender that took chunks starts again; a clone fitted gives the same."""
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


def check_latest_chunk(factory, X_train, X_next):
    """latest_chunk_ is the latest chunk taken, after fit and after partial_fit."""
    est = _fitted(factory, X_train)
    assert _recommender(est).latest_chunk_ == _column(X_train, "chunk").max()
    _partial_fit(est, X_next)
    assert _recommender(est).latest_chunk_ == _column(X_next, "chunk").max()


def check_fit_returns_self_and_keeps_params(factory, X_train, X_next):
    """fit returns the estimator, changes none of its parameters, and sets only attributes
    whose names end with an underscore (scikit-learn's check_estimators_fit_returns_self,
    check_estimators_overwrite_params and check_dont_overwrite_parameters, on a log)."""
    est = factory()
    params = clone(est).get_params(deep=True)
    rec = _recommender(est)
    before = set(vars(rec))
    assert est.fit(X_train) is est, "fit does not return the estimator"
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
    changed = state_differences(est, before)
    assert not changed, f"recommend changed {changed}"


def check_fit_idempotent(factory, X_train, X_next):
    """Fitting twice gives the same state as fitting once (check_fit_idempotent), and a
    read-only log is taken as a writable one (check_readonly_memmap_input)."""
    once = _fitted(factory, X_train)
    twice = _fitted(factory, X_train).fit(X_train)
    changed = state_differences(once, twice)
    assert not changed, f"a second fit changed {changed}"
    read_only = []
    for X in (X_train, X_next):
        arr = _as_array(X)
        arr.flags.writeable = False
        read_only.append(arr)
    est = factory().fit(read_only[0])
    _partial_fit(est, read_only[1])
    users = _query_users(X_train, X_next)
    _assert_same(_recommend(est, users, 10),
                 _recommend(_fitted(factory, X_train, X_next), users, 10))


def check_refuses_what_is_not_a_log(factory, X_train, X_next):
    """NaN, floats, complex numbers, sparse matrices, the wrong width and scalars are refused
    by fit and partial_fit with a ValueError or TypeError that names X; partial_fit's
    refusals leave the state as it was (check_estimators_nan_inf, check_complex_data,
    check_estimator_sparse_*, check_fit2d_1feature, check_fit1d)."""
    arr = _as_array(X_next)
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
        with _Raises((ValueError, TypeError), match=r"\bX\b") as refused:
            factory().fit(X)
        assert str(refused.value), what
        with _Raises((ValueError, TypeError), match=r"\bX\b"):
            _partial_fit(est, X)
        changed = state_differences(est, state)
        assert not changed, f"refusing {what} changed {changed}"


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
    """The protocol's checks, each to be called as ``check(factory, X_train, X_next)``.

    Parameters
    ----------
    score_rtol : float, default=SCORE_RTOL
        Tolerance of the checks that compare answers composed differently
        (`check_batch_equals_single`, `check_chunks_at_once_equal_in_turn`), relative to
        a row's largest absolute score; 0 asks for equal arrays.

    Returns
    -------
    checks : list of callable
        Every check, each named as its function (``check.__name__``), those comparing
        answers composed differently bound to ``score_rtol``.

    See Also
    --------
    check_recommender : Runs them all.

    Examples
    --------
    >>> from sklearn_micro.utils.estimator_checks import recommender_checks
    >>> [check.__name__ for check in recommender_checks()][:3]
    ['check_not_fitted', 'check_recommend_shapes', 'check_rows_valid']
    """
    return [update_wrapper(partial(check, score_rtol=score_rtol), check)
            if check in _COMPOSED else check for check in _CHECKS]


def check_recommender(factory, X_train=None, X_next=None, *, score_rtol=SCORE_RTOL,
                      expected_failed=None) -> None:
    """Run every check of the recommender protocol on ``factory``.

    Parameters
    ----------
    factory : callable
        Returns a new unfitted recommender, or a Pipeline ending in one, with its
        randomness fixed.
    X_train, X_next : DataFrame or ndarray of shape (n, 3), optional
        A training log and two or more later chunks, with int64 ids; `make_log` by
        default.
    score_rtol : float, default=SCORE_RTOL
        Tolerance of the checks that compare answers composed differently; 0 asks for
        equal arrays.
    expected_failed : dict of str to str, optional
        Names of checks to skip, each with a one-line reason.

    Raises
    ------
    AssertionError
        From the first check that fails, saying what differs.

    See Also
    --------
    recommender_checks : The checks one by one, for a test each.

    Examples
    --------
    >>> from sklearn_micro.baselines import RecentItemsRecommender
    >>> from sklearn_micro.utils.estimator_checks import check_recommender
    >>> check_recommender(lambda: RecentItemsRecommender(window=2))
    """
    if X_train is None:
        X_train, X_next = make_log()
    expected_failed = expected_failed or {}
    unknown = set(expected_failed) - {check.__name__ for check in _CHECKS}
    if unknown:
        raise ValueError(f"expected_failed names no check of the protocol: {sorted(unknown)}")
    for check in recommender_checks(score_rtol=score_rtol):
        if check.__name__ not in expected_failed:
            check(factory, X_train, X_next)
