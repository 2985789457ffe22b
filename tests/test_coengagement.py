"""MiCRO's co-engagement term (``coengagement``): a share of each recent item's weight
spread to the items co-engaged with it.

- The neighbour lists equal a dense P3 walk cut to each item's best ``k`` (ties to the
  lower item), and the spreading equals a dense product, on inputs drawn by hypothesis.
- A fitted model's lists are those of its recent items after every chunk; the paper's
  model and ``coengagement=0`` keep none, and answer as before the term.
- `explain`'s co-engagement term is the part of the score the spread adds, with
  ``history`` too; the recommender checks pass with the term on.
- The dense check of `recommend` with the term is in test_personal.py.
"""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal
from test_micro import CHUNK, fitted
from test_personal import _personal_pipeline

from sklearn_micro import MiCRO
from sklearn_micro._kernels.neighbours import (
    Neighbours,
    spread_to_neighbours,
    walk_neighbours,
)
from sklearn_micro.datasets import make_engagements
from sklearn_micro.micro import _state
from sklearn_micro.utils.estimator_checks import make_log, recommender_checks


def _dense_walk(counts: np.ndarray, alpha: float = 1.0, beta: float = 0.0) -> np.ndarray:
    """RP3beta's item -> user -> item scores of a dense users x items ``counts``."""
    by_user = counts.sum(axis=1, keepdims=True)
    by_item = counts.sum(axis=0, keepdims=True)
    to_item = np.divide(counts, by_user, out=np.zeros_like(counts), where=by_user > 0)
    to_user = np.divide(counts, by_item, out=np.zeros_like(counts), where=by_item > 0)
    walk = (to_user ** alpha).T @ (to_item ** alpha)
    penalty = np.where(by_item[0] > 0, by_item[0], 1.0) ** -beta
    return walk * penalty[None, :]


@st.composite
def small_counts(draw):
    n_users = draw(st.integers(1, 6))
    n_items = draw(st.integers(1, 9))
    cells = draw(st.lists(st.tuples(st.integers(0, n_users - 1), st.integers(0, n_items - 1),
                                    st.sampled_from([0.25, 0.5, 1.0, 2.0])), max_size=25))
    counts = np.zeros((n_users, n_items))
    for u, i, w in cells:
        counts[u, i] += w
    return counts


@settings(max_examples=80, deadline=None)
@given(small_counts(), st.integers(1, 4))
def test_walk_neighbours_are_the_dense_walks_best_k(counts, k):
    found = walk_neighbours(sp.csr_matrix(counts), 1.0, 0.0, k, 1)
    walk = _dense_walk(counts)
    for i in range(counts.shape[1]):
        lo, hi = found.indptr[i], found.indptr[i + 1]
        others = [j for j in range(counts.shape[1]) if j != i and walk[i, j] > 1e-12]
        want = sorted(others, key=lambda j: (-walk[i, j], j))
        got = found.items[lo:hi].tolist()
        assert len(got) == min(k, len(want))
        # the best k scores, best first (equal scores may swap within float rounding)
        assert_allclose(found.scores[lo:hi], [walk[i, j] for j in want[:len(got)]],
                        rtol=1e-9)
        assert_allclose(found.scores[lo:hi], walk[i, got], rtol=1e-9)


@st.composite
def rows_and_neighbours(draw):
    n_items = draw(st.integers(1, 8))
    lists = []
    for i in range(n_items):
        others = draw(st.lists(st.integers(0, n_items - 1).filter(lambda j, i=i: j != i),
                               unique=True, max_size=3))
        lists.append([(j, draw(st.sampled_from([0.125, 0.25, 0.5]))) for j in others])
    n_rows = draw(st.integers(1, 4))
    # rows may name items past the lists (new items: no neighbours)
    rows = [sorted(draw(st.lists(st.integers(0, n_items + 1), unique=True, max_size=4)))
            for _ in range(n_rows)]
    weights = [[draw(st.sampled_from([0.25, 0.5, 1.0])) for _ in row] for row in rows]
    return lists, rows, weights, n_items


@settings(max_examples=120, deadline=None)
@given(rows_and_neighbours(), st.sampled_from([0.0, 0.3, 0.5, 1.0]), st.integers(1, 3),
       st.sampled_from([None, 0, 1, 2, 5]))
def test_spreading_equals_a_dense_product(drawn, share, n_threads, cap):
    lists, rows, weights, n_items = drawn
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in lists])]).astype(np.int64)
    neighbours = Neighbours(indptr,
                            np.array([j for r in lists for j, _ in r], np.int64),
                            np.array([s for r in lists for _, s in r], np.float64))
    walk = np.zeros((n_items + 2, n_items + 2))
    for i, row in enumerate(lists):
        for j, s in row:
            walk[i, j] = s
    r_ptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    r_item = np.array([i for r in rows for i in r], np.int64)
    r_w = np.array([w for r in weights for w in r], np.float64)
    got_ptr, got_item, got_w = spread_to_neighbours(r_ptr, r_item, r_w, neighbours, share,
                                                    n_threads, cap)
    for r, (row, w) in enumerate(zip(rows, weights, strict=True)):
        own = np.zeros(n_items + 2)
        own[row] = w
        co = own @ walk
        if share > 0 and cap is not None:  # the cap others of most co-engaged weight
            others = [j for j in np.flatnonzero(co > 0) if own[j] == 0]
            dropped = sorted(others, key=lambda j: (-co[j], j))[cap:]
            co[dropped] = 0.0
        want = own if share == 0 else (1 - share) * own + share * co
        lo, hi = got_ptr[r], got_ptr[r + 1]
        assert_array_equal(got_item[lo:hi], np.flatnonzero(want > 0))
        assert_allclose(got_w[lo:hi], want[want > 0], rtol=1e-12)


def _log():
    return make_engagements(n_users=200, n_items=500, n_chunks=8, n_interests=6,
                            n_engagements=4000, random_state=4)


def _interests(log):
    items = np.unique(log.item)
    return items, items % 6


def test_the_lists_are_those_of_the_recent_items_after_every_chunk():
    log = _log()
    first = log.take(np.flatnonzero(log.chunk < 6))
    model = MiCRO(personal=0.5, coengagement=0.5, random_state=0).fit(
        first, item_interest=_interests(log))
    for c in (None, 6, 7):
        if c is not None:
            model.partial_fit(log.take(np.flatnonzero(log.chunk == c)))
        want = _state.coengaged_neighbours(model.recent_indptr_, model.recent_item_,
                                           model.recent_weight_, len(model.item_ids_))
        assert_array_equal(model.coengaged_indptr_, want.indptr)
        assert_array_equal(model.coengaged_item_, want.items)
        assert_array_equal(model.coengaged_score_, want.scores)
        per_item = np.diff(model.coengaged_indptr_)
        assert per_item.max() <= _state.COENGAGED_NEIGHBOURS and per_item.sum() > 0


@pytest.mark.parametrize("params", [{"coengagement": 0}, {"personal": 0}])
def test_no_term_keeps_no_lists_and_answers_as_without_it(params):
    log = _log()
    model = MiCRO(**{"personal": 0.5, "popularity": 1.0, **params}, random_state=0).fit(
        log, item_interest=_interests(log))
    assert model.coengaged_item_.shape == (0,)
    users = np.unique(log.user)[:30]
    with_term = MiCRO(personal=0.5, popularity=1.0, coengagement=0.5, random_state=0).fit(
        log, item_interest=_interests(log))
    # the same state but the term: setting its share to 0 answers as the model without
    with_term.coengagement_ = 0.0
    if params.get("personal") == 0:
        with_term.personal_weight_ = 0.0
    a, b = model.recommend(users, 20), with_term.recommend(users, 20)
    assert_array_equal(a[0], b[0])
    assert_array_equal(a[1], b[1])


def test_the_papers_model_has_no_term():
    model = fitted(personal=0.4, coengagement=0.5, phi_decay=0).partial_fit(CHUNK)
    assert model.coengaged_item_.shape[0] > 0
    paper = model.paper_model()
    # personal=0 leaves the share nothing to act on, whatever it is set to
    assert paper.coengagement_ == 0.0 and paper.coengaged_item_.shape == (0,)
    assert paper.get_params()["personal"] == 0


def test_explain_splits_the_spread_from_the_own_items_with_history():
    log = _log()
    model = MiCRO(personal=0.5, coengagement=0.5, popularity=1.0, random_state=0).fit(
        log, item_interest=_interests(log))
    user = int(log.user[-1])
    # an item co-engaged with the history's item, not the user's own
    history = [int(log.item[0])]
    at = model.item_ids_.lookup(history)[0]
    neighbour = model.item_ids_.ids[model.coengaged_item_[model.coengaged_indptr_[at]]]
    items, scores = model.recommend([user], 50, history=[history])
    asked = np.unique(np.concatenate([items[0][items[0] >= 0], [neighbour]]))
    why = model.explain(user, asked, history=history)
    total = why.contributions.sum(axis=1) + why.popularity + why.personal + why.coengagement
    ranked = why.scores > -np.inf
    assert_allclose(total[ranked], why.scores[ranked], rtol=1e-12)
    assert why.coengagement[asked == neighbour][0] > 0
    without = model.explain(user, asked)
    assert why.coengagement[asked == neighbour][0] > without.coengagement[asked == neighbour][0]
    # the own items' term is (1 - g) lam r_u: the history's item holds its own weight
    hist_at = asked == history[0]
    if hist_at.any():
        assert why.personal[hist_at][0] > 0


@pytest.mark.parametrize("check", recommender_checks(score_rtol=0), ids=lambda c: c.__name__)
def test_recommender_protocol_with_the_term(check):
    factory = _personal_pipeline(0.5)

    def with_term():
        pipe = factory()
        pipe.set_params(micro__coengagement=0.5)
        return pipe

    check(with_term, *make_log(as_frame=True))
