"""Request-time retrieval: exclude and allow lists, a user's history, similar items and
explanations, on MiCRO and the baselines."""

import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.pipeline import Pipeline

from sklearn_micro import MiCRO
from sklearn_micro.baselines import (
    ALSRecommender,
    ANNRecommender,
    ItemKNNRecommender,
    PopularityRecommender,
    RecentItemsRecommender,
    RP3betaRecommender,
)
from sklearn_micro.utils.estimator_checks import FixedEmbedder, make_log, state_differences

X_TRAIN, X_NEXT = make_log(seed=3, n_chunks=7, n_train=5, per_chunk=60, as_frame=True)
TRAIN_ITEMS = np.unique(X_TRAIN.item)
INTERESTS = (TRAIN_ITEMS, (TRAIN_ITEMS // 4) % 3)

MICRO_PARAMS = {
    "paper": {"personal": 0, "popularity": 0, "phi_decay": 0},
    "personal": {"personal": 0.3, "coengagement": 0, "phi_decay": 0.5},
    "pruned": {"personal": 0, "popularity": 0, "phi_decay": 0.5, "phi_min_count": 0.6},
    "popularity": {"personal": 0, "popularity": 3.0, "phi_decay": 0},
    "blend": {"personal": 0.3, "coengagement": 0, "popularity": 3.0, "phi_decay": 0.5},
    "coengaged": {"personal": 0.5, "coengagement": 0.5, "popularity": 1.0, "phi_decay": 0.5},
}


def _micro(params, *, then=True):
    model = MiCRO(random_state=0, **params).fit(X_TRAIN, item_interest=INTERESTS)
    return model.partial_fit(X_NEXT) if then else model


MODELS = {name: _micro(params) for name, params in MICRO_PARAMS.items()}


def _baseline(name):
    factory = {
        "popularity": lambda: PopularityRecommender(window=2),
        "recent-items": lambda: RecentItemsRecommender(window=2),
        "ann-exact": lambda: Pipeline([("embed", FixedEmbedder()),
                                       ("ann", ANNRecommender(window=2, method="exact"))]),
        "als": lambda: ALSRecommender(n_components=4, iterations=3, window=2,
                                      random_state=0),
        "item-knn": lambda: ItemKNNRecommender(window=2),
        "rp3beta": lambda: RP3betaRecommender(window=2),
    }[name]
    est = factory().fit(X_TRAIN)
    if isinstance(est, Pipeline):
        est = est[-1]
    return est.partial_fit(X_NEXT)


BASELINES = {name: _baseline(name) for name in ("popularity", "recent-items", "ann-exact",
                                                "als", "item-knn", "rp3beta")}
ALL = {**MODELS, **BASELINES}
USERS = np.concatenate([np.unique(X_TRAIN.user)[:8],
                        np.setdiff1d(np.unique(X_NEXT.user), X_TRAIN.user)[:2],
                        [10**12]]).astype(np.int64)
ITEMS = np.unique(np.concatenate([X_TRAIN.item, X_NEXT.item]))


def _brute_force(model, users, m, *, exclude=None, allow=None, history=None,
                 exclude_seen=False):
    """The full ranking (every item), filtered, cut to m."""
    n_items = len(model.item_ids_)
    full, full_scores = model.recommend(users, n_items, history=history,
                                        exclude_seen=exclude_seen)
    items = np.full((len(users), m), -1, np.int64)
    scores = np.full((len(users), m), -np.inf)
    for r in range(len(users)):
        ex = set(_row(exclude, r) or ())
        al = _row(allow, r)
        keep = [(i, s) for i, s in zip(full[r], full_scores[r], strict=True)
                if i != -1 and i not in ex and (al is None or i in set(al))][:m]
        for j, (i, s) in enumerate(keep):
            items[r, j], scores[r, j] = i, s
    return items, scores


def _row(lists, r):
    if lists is None:
        return None
    if len(lists) and isinstance(lists[0], list):
        return lists[r]
    return lists


def _history(rng, users):
    return [list(rng.choice(ITEMS, size=rng.integers(0, 4))) + ([123456789] if r == 1 else [])
            for r in range(len(users))]


@pytest.mark.parametrize("name", list(ALL))
@pytest.mark.parametrize("with_history", [False, True])
def test_filters_equal_a_brute_force_filter_of_the_full_ranking(name, with_history):
    model = ALL[name]
    rng = np.random.default_rng(0)
    history = _history(rng, USERS) if with_history else None
    m = 5
    cases = [
        {"exclude": list(rng.choice(ITEMS, 10, replace=False))},
        {"exclude": [list(rng.choice(ITEMS, int(rng.integers(0, 15)), replace=False))
                     for _ in USERS]},
        {"allow": list(rng.choice(ITEMS, 12, replace=False))},
        {"allow": [list(rng.choice(ITEMS, int(rng.integers(0, 20))))  # with repeats
                   for _ in USERS],
         "exclude": list(rng.choice(ITEMS, 5, replace=False))},
        {"allow": list(ITEMS[:3]) + [987654321]},
        {"allow": list(rng.choice(ITEMS, 25, replace=False)),
         "exclude": [list(rng.choice(ITEMS, int(rng.integers(0, 15)), replace=False))
                     for _ in USERS]},
    ]
    for case in cases:
        for exclude_seen in (False, True):
            got = model.recommend(USERS, m, exclude_seen=exclude_seen, history=history,
                                  **case)
            want = _brute_force(model, USERS, m, exclude_seen=exclude_seen,
                                history=history, **case)
            assert_array_equal(got[0], want[0], err_msg=f"{name} {case}")
            if name in MODELS:
                # MiCRO's scores do not depend on what is left out
                assert_array_equal(got[1], want[1])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), m=st.integers(1, 30), name=st.sampled_from(sorted(MODELS)))
def test_exactly_m_eligible_answers(data, m, name):
    """Every row holds min(m, eligible) items, all eligible, best first, no repeats."""
    model = MODELS[name]
    items = list(ITEMS)
    exclude = data.draw(st.lists(st.sampled_from(items), max_size=20))
    allow = data.draw(st.none() | st.lists(st.sampled_from(items), max_size=25))
    got, scores = model.recommend(USERS, m, exclude=exclude, allow=allow)
    full, _ = model.recommend(USERS, len(model.item_ids_))
    for r in range(len(USERS)):
        eligible = [i for i in full[r] if i != -1 and i not in exclude
                    and (allow is None or i in allow)]
        row = got[r][got[r] != -1]
        assert len(row) == min(m, len(eligible))
        assert_array_equal(row, eligible[:len(row)])
        assert (np.diff(scores[r][:len(row)]) <= 0).all()


@pytest.mark.parametrize("name", list(ALL))
def test_history_leaves_the_model_as_it_was(name):
    model = ALL[name]
    before = copy.deepcopy(model)
    rng = np.random.default_rng(1)
    model.recommend(USERS, 10, history=_history(rng, USERS), exclude_seen=True)
    model.recommend(USERS, 10, history=_history(rng, USERS), allow=list(ITEMS[:20]))
    assert state_differences(before, model, ignore=("_index", "_grouped")) == []


def test_new_user_with_history_gets_a_personal_answer():
    model = MODELS["paper"]
    popular = model.recommend([10**12], 10)[0][0]
    # three items of one interest: the answer is that interest's, not popularity's
    k = model.item_interest_[model.item_ids_.lookup(ITEMS)]
    items = ITEMS[k == k[k >= 0][0]][:3]
    got = model.recommend([10**12], 10, history=[list(items)])[0][0]
    assert not np.array_equal(got, popular)
    mixture = model.user_interests([10**12]).toarray()
    assert mixture.sum() == 0
    # the same answer as a user whose support is that interest alone: both mixtures are
    # that interest's, all of it
    k0 = int(k[k >= 0][0])
    owner = [u for u in np.unique(X_TRAIN.user)
             if set(model.user_interests([u]).indices) == {k0}]
    assert owner, "the log must hold a user of that interest alone"
    assert_allclose(model.explain(10**12, [], history=list(items)).weights, [1.0])
    want = model.recommend(owner[:1], 10)
    got_new = model.recommend([10**12], 10, history=[list(items)])
    assert_array_equal(got_new[0], want[0])
    assert_allclose(got_new[1], want[1], rtol=1e-12)


def _oracle_scores(model, user, history):
    """``s(i)`` of every item `recommend` ranks for ``user``, computed from the fitted
    arrays by the documented formula, with ``history`` counted in by hand: each engagement
    adds 1 to ``N[u, k_i]`` (its item's main interest) and joins the recent items at
    ``1 / personal_decay``. Returns ``({k: theta_u[k]}, {i: r_u(i)}, lam, {i: s(i)})``
    over model indices."""
    u = model.user_ids_.lookup(np.array([user]))[0]
    counts = {}
    if u >= 0:
        lo, hi = model.support_indptr_[u], model.support_indptr_[u + 1]
        for k, c in zip(model.support_interest_[lo:hi], model.support_count_[lo:hi],
                        strict=True):
            counts[int(k)] = float(c)
    known = [int(i) for i in model.item_ids_.lookup(np.array(history, np.int64)) if i >= 0]
    for i in known:
        k = int(model.item_interest_[i])
        if k >= 0:
            counts[k] = counts.get(k, 0.0) + 1.0
    total = sum(model.alpha + c for c in counts.values())
    theta = {k: (model.alpha + c) / total for k, c in counts.items()}
    recent = {}
    if model.personal_weight_ > 0:
        if u >= 0:
            lo, hi = model.recent_indptr_[u], model.recent_indptr_[u + 1]
            for i, w in zip(model.recent_item_[lo:hi], model.recent_weight_[lo:hi],
                            strict=True):
                recent[int(i)] = recent.get(int(i), 0.0) + float(w)
        for i in known:
            recent[i] = recent.get(i, 0.0) + 1.0 / model.personal_decay
    r_total = sum(recent.values())
    r_u = {i: w / r_total for i, w in recent.items()}
    lam = model.personal_weight_ if r_u else 0.0
    # phi over the latest chunk's items, N[i, k, t] per (item, interest)
    n_items = model.chunk_items_.shape[0]
    n_it = {}
    for k in range(model.n_interests_):
        lo, hi = model.phi_indptr_[k], model.phi_indptr_[k + 1]
        for pos, c in zip(model.phi_item_[lo:hi], model.phi_count_[lo:hi], strict=True):
            n_it[int(pos), k] = float(c)
    share = model.chunk_item_count_ / model.chunk_item_count_.sum()
    w = model.popularity_weight_ if theta else 1.0
    scores = {}
    for pos, i in enumerate(model.chunk_items_.tolist()):
        p = sum(t * (model.beta + n_it.get((pos, k), 0.0))
                / (n_items * model.beta + model.interest_count_[k]) for k, t in theta.items())
        scores[i] = (1 - lam) * (p + w * share[pos]) + lam * r_u.get(i, 0.0)
    for i, r in r_u.items():
        scores.setdefault(i, lam * r)
    return theta, r_u, lam, scores


@pytest.mark.parametrize("name", ["paper", "personal", "blend"])
@pytest.mark.parametrize("which", ["trained", "new"])
def test_history_counts_as_the_documented_formula_says(name, which):
    """A history engagement adds 1 to ``N[u, k_i]`` in ``theta_u`` and weighs ``1 /
    personal_decay`` in ``r_u``: `explain`'s terms and `recommend`'s scores equal those
    computed by hand from the fitted arrays."""
    model = MODELS[name]
    user = 10**12
    if which == "trained":  # a user with interests outside its support
        user = next(int(u) for u in np.unique(X_TRAIN.user)
                    if 0 < model.user_interests([u]).nnz < model.n_interests_)
    k = model.item_interest_[model.item_ids_.lookup(ITEMS)]
    support = set(model.user_interests([user]).indices.tolist())
    outside = [int(i) for i in ITEMS[(k >= 0) & ~np.isin(k, list(support))]][:1]
    inside = [int(i) for i in ITEMS[np.isin(k, list(support))]][:1]
    # twice the same item, one of an interest outside the support, an unknown id
    history = inside * 2 + outside + [int(ITEMS[-1]), 123456789]
    theta, r_u, lam, want = _oracle_scores(model, user, history)
    assert len(theta) > len(support)
    why = model.explain(user, ITEMS, history=history)
    assert_allclose(why.weights, [theta[k] for k in why.interests.tolist()], rtol=1e-12)
    assert set(why.interests.tolist()) == set(theta)
    assert why.personal_weight == lam
    index = model.item_ids_.lookup(ITEMS)
    assert_allclose(why.personal, [lam * r_u.get(int(i), 0.0) if int(i) in want else 0.0
                                   for i in index], rtol=1e-6, atol=1e-15)
    assert_allclose(why.scores, [want.get(int(i), -np.inf) for i in index], rtol=1e-6)
    # recommend ranks by those scores: the best items first, each with its score
    m = 8
    items, scores = model.recommend([user], m, history=[history])
    got = model.item_ids_.lookup(items[0])
    assert_allclose(scores[0], [want[int(i)] for i in got], rtol=1e-6)
    best = np.sort(np.fromiter(want.values(), float))[::-1][:m]
    assert_allclose(scores[0], best, rtol=1e-6)


def test_personal_off_uses_history_for_interest_weights_only():
    model = MODELS["paper"]
    user = int(np.unique(X_TRAIN.user)[1])
    item = int(ITEMS[0])
    why = model.explain(user, [item], history=[item])
    assert why.personal_weight == 0.0 and why.personal[0] == 0.0


def test_exclude_seen_counts_history_as_seen():
    for model in ALL.values():
        history = [[int(i) for i in ITEMS[:5]] for _ in USERS]
        got = model.recommend(USERS, 20, history=history, exclude_seen=True)[0]
        assert not np.isin(got, ITEMS[:5]).any()


def test_recent_items_ranks_history_first():
    model = BASELINES["recent-items"]
    new = [int(i) for i in ITEMS[:2]]
    got = model.recommend([USERS[0], 10**12], 5, history=[new, new[::-1]])[0]
    assert set(got[0][:2]) == set(new) and set(got[1][:2]) == set(new)


@pytest.mark.parametrize("name", ["ann-exact", "als"])
def test_vector_baselines_answer_a_new_user_from_history(name):
    model = BASELINES[name]
    popular = model.recommend([10**12], 10)[0][0]
    got = model.recommend([10**12], 10, history=[[int(i) for i in X_NEXT.item[-3:]]])[0][0]
    assert not np.array_equal(got, popular)


@pytest.mark.parametrize("name", list(MODELS))
def test_explain_sums_to_the_score_recommend_gives(name):
    model = MODELS[name]
    rng = np.random.default_rng(2)
    for user in list(USERS[:4]) + [10**12]:
        for history in (None, [int(i) for i in rng.choice(ITEMS, 3)]):
            items, scores = model.recommend([user], 8,
                                            history=None if history is None else [history])
            asked = list(items[0][items[0] != -1]) + [123456789, int(ITEMS[0])]
            why = model.explain(user, asked, history=history)
            total = (why.contributions.sum(axis=1) + why.popularity + why.personal
                     + why.coengagement)
            ranked = why.scores > -np.inf
            assert_allclose(total[ranked], why.scores[ranked], rtol=1e-12)
            n = (items[0] != -1).sum()
            assert_array_equal(why.scores[:n], scores[0][:n])
            assert why.scores[n] == -np.inf and (why.contributions[n] == 0).all()
            assert_allclose(why.weights.sum() if why.weights.size else 1.0, 1.0)
            if why.interests.size:
                assert why.terms(0)[0][2] == why.contributions[0].max()


def test_similar_items_of_a_new_item_follow_its_interests():
    model = MODELS["paper"]
    new_items = np.setdiff1d(X_NEXT.item[X_NEXT.chunk == X_NEXT.chunk.max()], X_TRAIN.item)
    similar, scores = model.similar_items(new_items[:3], 5)
    popular = model.similar_items([123456789], 5)[0][0]
    for r, item in enumerate(new_items[:3]):
        assert item not in similar[r]
        assert (similar[r] != -1).all() and (np.diff(scores[r]) <= 0).all()
    assert any(not np.array_equal(row, popular) for row in similar)


@pytest.mark.parametrize("name", ["paper", "personal"])
def test_similar_items_scores_are_the_items_mixture_times_phi(name):
    """``p(j | i) = sum_k p(k|i) * phi[k, t][j]``, with ``p(k|i) = N[i, k, t] / sum_k
    N[i, k, t]`` (or the main interest for an item without counts in the latest chunk)
    and ``phi[k, t][j] = (beta + N[j, k, t]) / (I_t * beta + N[k, t])``, computed by hand
    from the fitted arrays."""
    model = MODELS[name]
    n_items = model.chunk_items_.shape[0]
    count = np.zeros((n_items, model.n_interests_))
    for k in range(model.n_interests_):
        lo, hi = model.phi_indptr_[k], model.phi_indptr_[k + 1]
        count[model.phi_item_[lo:hi], k] = model.phi_count_[lo:hi]
    phi = (model.beta + count) / (n_items * model.beta + model.interest_count_)[None, :]
    in_chunk = model.item_ids_.ids[model.chunk_items_]
    trained = [int(i) for i in np.setdiff1d(ITEMS, in_chunk)[:3]]
    asked = [int(i) for i in in_chunk[::4]] + trained
    m = 6
    similar, scores = model.similar_items(asked, m)
    for r, item in enumerate(asked):
        index = model.item_ids_.lookup(np.array([item]))[0]
        pos = np.flatnonzero(model.chunk_items_ == index)
        row = count[pos[0]] if pos.size and count[pos[0]].sum() > 0 else None
        if row is None:
            row = np.zeros(model.n_interests_)
            row[model.item_interest_[index]] = 1.0
        want = phi @ (row / row.sum())
        want[model.chunk_items_ == index] = -np.inf  # the item itself left out
        got = model.item_ids_.lookup(similar[r])
        local = [int(np.flatnonzero(model.chunk_items_ == i)[0]) for i in got]
        assert_allclose(scores[r], want[local], rtol=1e-12)
        assert_allclose(scores[r], np.sort(want)[::-1][:m], rtol=1e-12)


def test_similar_items_filters_equal_a_brute_force_filter():
    model = MODELS["personal"]
    items = ITEMS[::5]
    full, full_scores = model.similar_items(items, len(model.item_ids_))
    allow = [int(i) for i in ITEMS[::2]]
    exclude = [int(i) for i in ITEMS[::7]]
    got, scores = model.similar_items(items, 4, allow=allow, exclude=exclude)
    for r in range(len(items)):
        keep = [(i, s) for i, s in zip(full[r], full_scores[r], strict=True)
                if i != -1 and i in allow and i not in exclude][:4]
        assert_array_equal(got[r][:len(keep)], [i for i, _ in keep])
        assert_array_equal(scores[r][:len(keep)], [s for _, s in keep])


def test_ann_similar_items_by_vector():
    model = BASELINES["ann-exact"]
    item = int(model.item_ids_.ids[model.candidate_items_[0]])
    similar, scores = model.similar_items([item, 123456789], 5)
    assert item not in similar[0]
    vec = model.item_vectors_
    best = np.argsort(-(vec[1:] @ vec[0]), kind="stable")[0] + 1
    assert similar[0][0] == model.item_ids_.ids[model.candidate_items_[best]]
    assert_allclose(scores[0][0], vec[best] @ vec[0], rtol=1e-5)
    assert_array_equal(similar[1], model.recommend([10**12], 5)[0][0])


def test_als_similar_items_by_cosine():
    model = BASELINES["als"]
    item = int(model.item_ids_.ids[model.candidate_items_[0]])
    similar, scores = model.similar_items([item, 123456789], 4, exclude=[[], []])
    vec = model.item_factors_[model.candidate_items_]
    vec = vec / np.linalg.norm(vec, axis=1, keepdims=True)
    cos = vec[1:] @ vec[0]
    assert item not in similar[0]
    assert_allclose(scores[0], np.sort(cos)[::-1][:4], rtol=1e-5)
    assert_array_equal(similar[1], model.recommend([10**12], 4)[0][0])
    allowed = [int(i) for i in model.item_ids_.ids[model.candidate_items_[1::2]]]
    got, _ = model.similar_items([item], 3, allow=allowed)
    full, _ = model.similar_items([item], len(model.item_ids_))
    assert_array_equal(got[0], [i for i in full[0] if i in allowed][:3])


BAD = [
    ({"exclude": 5}, "exclude must be a flat list of item ids .* got int 5"),
    ({"exclude": "abc"}, "exclude must be a flat list .* got str 'abc'"),
    ({"allow": {1, 2}}, "allow must be a flat list .* got set"),
    ({"allow": [[1], [2]]}, "allow must be .* got 2 lists for 3 entries of users"),
    ({"exclude": [1, [2]]}, "exclude must be .* not both; got a mix"),
    ({"history": [1, 2, 3]}, "history must be a list of item-id lists aligned with users"),
    ({"history": [[1], [2]]}, "history must be .* got 2 lists for 3 entries of users"),
    ({"exclude": ["a", "b"]}, "exclude must be int64 ids like those seen in fit; got str"),
    ({"allow": [[1.5], [], []]}, "allow\\[0\\] must hold item ids, int64 or str; got float64"),
    ({"exclude": [True]}, "exclude must hold item ids, int64 or str; got bool"),
    ({"history": [[None], [], []]}, "history\\[0\\]"),
]


@pytest.mark.parametrize("bad, message", BAD)
def test_bad_requests_are_named_and_leave_the_state(bad, message):
    for model in (MODELS["personal"], BASELINES["recent-items"]):
        before = copy.deepcopy(model)
        with pytest.raises((ValueError, TypeError), match=message):
            model.recommend(USERS[:3], 5, **bad)
        assert state_differences(before, model) == []


def test_explain_and_similar_items_refuse_bad_input():
    model = MODELS["personal"]
    with pytest.raises(ValueError, match="user must be one user id"):
        model.explain([1, 2], [1])
    with pytest.raises(ValueError, match="history must be a flat list of item ids"):
        model.explain(int(USERS[0]), [1], history=[[1]])
    with pytest.raises(ValueError, match="exclude must be .* aligned with items"):
        model.similar_items(ITEMS[:2], 3, exclude=[[1]])
    with pytest.raises(ValueError, match="m must be an integer >= 1"):
        model.similar_items(ITEMS[:2], 0)


def test_string_ids():
    frame_train = X_TRAIN.astype({"user": str, "item": str})
    frame_next = X_NEXT.astype({"user": str, "item": str})
    items = np.unique(frame_train.item).astype(str)
    model = MiCRO(personal=0.2, phi_decay=0, random_state=0).fit(
        frame_train, item_interest=(items, np.arange(items.shape[0]) % 3))
    model.partial_fit(frame_next)
    users = [str(u) for u in USERS[:3]]
    got, _ = model.recommend(users, 4, allow=[str(i) for i in items[:6]],
                             history=[[str(items[0])], [], ["nope"]])
    assert set(got[got != ""]) <= set(items[:6])
    with pytest.raises(ValueError, match="allow must be str ids"):
        model.recommend(users, 4, allow=[1, 2])
    similar, _ = model.similar_items([str(items[0])], 3)
    assert similar.dtype.kind == "U"
    assert model.explain(users[0], [str(items[1])]).user == users[0]
