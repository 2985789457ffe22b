"""The open chunk, live: `MiCRO.observe` against independent oracles: the draws against
the sampler's conditional computed by hand, the answers against a brute-force ranking of
the documented blend, `live_weight=0` and `partial_fit` against models that observed
nothing."""

import copy
import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from sklearn_micro import MiCRO
from sklearn_micro.micro import _retrieval
from sklearn_micro.utils.estimator_checks import make_log, state_differences

X_TRAIN, X_NEXT = make_log(seed=3, n_chunks=7, n_train=5, per_chunk=60, as_frame=True)
TRAIN_ITEMS = np.unique(X_TRAIN.item)
INTERESTS = (TRAIN_ITEMS, (TRAIN_ITEMS // 4) % 3)
CLOSED = X_NEXT[X_NEXT.chunk == X_NEXT.chunk.min()]
OPEN = X_NEXT[X_NEXT.chunk == X_NEXT.chunk.max()]
OPEN_CHUNK = int(OPEN.chunk.iloc[0])

PARAMS = {
    "paper": {"personal": 0, "popularity": 0, "phi_decay": 0},
    "blend": {"personal": 0.3, "popularity": 3.0, "phi_decay": 0.5},
    "coengaged": {"personal": 0.5, "coengagement": 0.5, "popularity": 1.0, "phi_decay": 0.5},
}


def _closed(params, **extra):
    model = MiCRO(random_state=0, **params, **extra).fit(X_TRAIN, item_interest=INTERESTS)
    return model.partial_fit(CLOSED)


def _rows(frame, *, users=(), items=()):
    """``frame``'s rows plus engagements of ``users`` x ``items`` in the open chunk."""
    extra = np.array([[u, i, OPEN_CHUNK] for u in users for i in items], np.int64)
    rows = frame[["user", "item", "chunk"]].to_numpy(np.int64)
    return np.concatenate([rows, extra.reshape(-1, 3)])


def _oracle_draws(model, batches):
    """The interests `observe` should draw, recomputed in plain Python: for each
    engagement in order, ``p(k) ∝ (alpha + N[u, k]) (beta + N[i, k]) / (I beta + N[k])``
    over the user's support with the counts so far, with the same uniforms."""
    K = model.n_interests_
    alpha, beta = model.alpha, model.beta
    closed_users = model.user_ids_
    support = {}
    for u in range(len(closed_users)):
        lo, hi = model.support_indptr_[u], model.support_indptr_[u + 1]
        if hi > lo:
            support[closed_users.ids[u]] = dict(zip(model.support_interest_[lo:hi].tolist(),
                                                    model.support_count_[lo:hi].tolist(),
                                                    strict=True))
    main = dict(zip(model.item_ids_.ids.tolist(), model.item_interest_.tolist(),
                    strict=True))
    seed = int(copy.deepcopy(model.random_state_).randint(np.iinfo(np.int32).max))
    live_user, live_item, live_k = {}, {}, np.zeros(K)
    items_so_far, out, n_before = set(), [], 0
    for batch in batches:
        uniform = np.random.default_rng([seed, OPEN_CHUNK, n_before]).random(len(batch))
        for (u, i, _), x in zip(batch.tolist(), uniform, strict=True):
            items_so_far.add(i)
            own = live_user.setdefault(u, {})
            if u in support:
                cands = {k: n + own.get(k, 0) for k, n in support[u].items()}
            else:
                k_main = main.get(i, -1)
                if k_main < 0 and live_item.get(i):
                    counts = live_item[i]
                    k_main = min(counts, key=lambda k: (-counts[k], k))
                if k_main >= 0:
                    own.setdefault(k_main, 0)
                cands = dict(own)
            if not cands:
                out.append(-1)
                continue
            ks = list(cands)
            # the kernel visits carried interests first in support order, then live ones
            w = np.array([(alpha + cands[k]) * (beta + live_item.get(i, {}).get(k, 0))
                          / (len(items_so_far) * beta + live_k[k]) for k in ks])
            pick = int(np.searchsorted(np.cumsum(w), x * w.sum(), side="right"))
            k = ks[min(pick, len(ks) - 1)]
            out.append(k)
            own[k] = own.get(k, 0) + 1
            live_item.setdefault(i, {})
            live_item[i][k] = live_item[i].get(k, 0) + 1
            live_k[k] += 1
        n_before += len(batch)
    return np.array(out)


def test_draws_follow_the_sampler_conditional():
    model = _closed(PARAMS["paper"])
    rows = _rows(OPEN, users=[10_001, 10_002], items=[TRAIN_ITEMS[0], 90_001, 90_001])
    batches = [rows[:7], rows[7:8], rows[8:]]
    expected = _oracle_draws(model, batches)
    for batch in batches:
        model.observe(batch)
    assert model.n_observed_ == rows.shape[0]
    # the open chunk's users and items in the model's numbering, in the order observed
    assert_array_equal(model.live_.user_ids.ids[model.live_.user], rows[:, 0])
    assert_array_equal(model.live_.item_ids.ids[model.live_.item], rows[:, 1])
    assert_array_equal(model.live_.interest, expected)
    assert (expected >= 0).mean() > 0.9


def _brute_force(model, users, m):
    """The documented paper-model score over the blended chunk, dense, for a model with
    personal and popularity weights 0: ``theta_u[k] ∝ alpha + N[u, k] + N_open[u, k]``,
    ``phi[k][i] = (beta + N[i, k, t] + w N_open[i, k]) / (I beta + N[k, t] + w N_open[k])``
    over the items of either chunk."""
    w = model.live_weight
    live = model.live_
    K = model.n_interests_
    n_items = len(live.item_ids)
    counts = np.zeros((n_items, K))
    k_of = np.repeat(np.arange(K), np.diff(model.phi_indptr_))
    np.add.at(counts, (model.chunk_items_[model.phi_item_], k_of), model.phi_count_)
    given = live.interest >= 0
    np.add.at(counts, (live.item[given], live.interest[given]), w)
    in_chunk = np.zeros(n_items, bool)
    in_chunk[model.chunk_items_] = True
    in_chunk[live.item] = True
    phi = (model.beta + counts) / (in_chunk.sum() * model.beta + counts.sum(axis=0))
    pop = np.zeros(n_items)
    pop[model.chunk_items_] += model.chunk_item_count_
    np.add.at(pop, live.item, w)
    out = []
    for user in users:
        u = live.user_ids.lookup(np.array([user]))[0]
        theta = np.zeros(K)
        support = np.zeros(K, bool)
        if u < model.support_indptr_.shape[0] - 1:
            lo, hi = model.support_indptr_[u], model.support_indptr_[u + 1]
            theta[model.support_interest_[lo:hi]] = model.support_count_[lo:hi]
            support[model.support_interest_[lo:hi]] = True
        mine = (live.user == u) & given
        np.add.at(theta, live.interest[mine], 1.0)
        support[live.interest[mine]] = True
        if not support.any():  # a user without interests: the chunk's popularity
            out.append(np.lexsort((np.arange(n_items), -pop))[:m])
            continue
        theta = np.where(support, model.alpha + theta, 0.0)
        theta /= theta.sum()
        score = np.where(in_chunk, phi @ theta, -np.inf)
        # the items outside the user's interests tie; the blended popularity orders them
        order = np.lexsort((np.arange(n_items), -pop, -np.round(score, 12)))
        out.append(order[:m])
    return live.item_ids.ids[np.array(out)]


def test_answers_are_the_blended_model_exactly():
    model = _closed(PARAMS["paper"], live_weight=2.0)
    model.observe(_rows(OPEN, users=[20_001], items=[91_000, 91_001]))
    users = np.concatenate([np.unique(OPEN.user)[:15], [20_001, 30_000]])
    items, scores = model.recommend(users, m=12)
    assert_array_equal(items, _brute_force(model, users, 12))
    assert np.all(np.diff(scores, axis=1) <= 0)


@pytest.mark.parametrize("name", sorted(PARAMS))
@pytest.mark.parametrize("observed", [False, True])
def test_lists_and_scores_are_the_same_whichever_kernel_ranks_a_row(monkeypatch, name,
                                                                    observed):
    """`recommend` ranks a row of short lists by a scatter of every entry and the others
    by reading the lists' heads (`SCATTER_ENTRIES`): every row read, every row scattered,
    and the rows split between the two give the same lists and scores to the bit, with a
    history and the seen items left out."""
    model = _closed(PARAMS[name], live_weight=2.0)
    if observed:
        model.observe(_rows(OPEN, users=[20_001], items=[91_000, 91_001]))
    users = np.concatenate([np.unique(X_TRAIN.user)[:40], [20_001, 30_000]])
    rng = np.random.default_rng(0)
    known = np.unique(X_TRAIN.item)
    history = [rng.choice(known, 2).tolist() if j % 3 == 0 else [] for j in range(len(users))]
    m = 5
    view = model._published()
    indptr, k, _ = view._mixtures(view.user_ids_.lookup(users))
    phi_indptr = view._grouped_chunk()["phi_indptr"]
    entries = np.bincount(np.repeat(np.arange(len(users)), np.diff(indptr)),
                          weights=np.diff(phi_indptr)[k], minlength=len(users))
    split = (0, float(np.median(entries[entries > 0])) / m)
    shares = [_retrieval.scattered_rows(indptr, k, phi_indptr, m, bounds).mean()
              for bounds in [(0, 0), split, (0, np.inf)]]
    assert shares[0] == 0 and 0 < shares[1] < 1 and shares[2] > 0.9
    answers = []
    for bounds in [(0, 0), split, (0, np.inf)]:
        monkeypatch.setattr(_retrieval, "SCATTER_ENTRIES", bounds)
        answers.append(model.recommend(users, m, exclude_seen=True, history=history))
    for items, scores in answers[1:]:
        assert_array_equal(items, answers[0][0])
        assert_array_equal(scores, answers[0][1])


def test_new_item_is_retrieved_for_users_of_its_interest():
    model = _closed(PARAMS["paper"])
    users = np.unique(CLOSED.user)
    theta = model.user_interests(users).toarray()
    main = theta.argmax(axis=1)
    k = np.bincount(main).argmax()
    fans = users[main == k]
    engagers, others = fans[:3], fans[3:]
    new_item = 99_999
    before = model.recommend(others, m=20)[0]
    assert not (before == new_item).any()
    model.observe(_rows(OPEN.iloc[:0], users=engagers, items=[new_item]))
    after = model.recommend(others, m=20)[0]
    assert (after == new_item).any(axis=1).mean() > 0.5
    mixture = model.item_interests([new_item]).toarray()[0]
    assert mixture.argmax() == k or mixture[k] > 0


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_weight_zero_answers_as_without_observe(name):
    plain = _closed(PARAMS[name])
    live = _closed(PARAMS[name], live_weight=0.0)
    live.observe(_rows(OPEN, users=[40_001], items=[92_000]))
    users = np.concatenate([np.unique(OPEN.user), [40_001]])
    for a, b in zip(plain.recommend(users, m=15, exclude_seen=True),
                    live.recommend(users, m=15, exclude_seen=True), strict=True):
        assert_array_equal(a, b)
    item = int(OPEN.item.iloc[0])
    for a, b in zip(plain.similar_items([item], m=10), live.similar_items([item], m=10),
                    strict=True):
        assert_array_equal(a, b)
    why_a, why_b = plain.explain(users[0], [item]), live.explain(users[0], [item])
    assert_array_equal(why_a.scores, why_b.scores)


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_partial_fit_after_observe_equals_partial_fit_alone(name):
    plain = _closed(PARAMS[name])
    live = _closed(PARAMS[name])
    live.observe(_rows(OPEN.iloc[:30]))
    live.observe(_rows(OPEN.iloc[30:]))
    plain.partial_fit(OPEN)
    live.partial_fit(OPEN)
    assert state_differences(plain, live) == []
    assert live.live_ is None and live.n_observed_ == 0
    users = np.unique(OPEN.user)
    assert_array_equal(plain.recommend(users, m=10)[0], live.recommend(users, m=10)[0])


def test_observed_chunk_not_given_to_partial_fit_is_dropped_with_a_warning():
    model = _closed(PARAMS["paper"])
    model.observe(_rows(OPEN.iloc[:10]))
    later = OPEN.assign(chunk=OPEN_CHUNK + 1)
    with pytest.warns(UserWarning, match=f"observed in chunk {OPEN_CHUNK} are dropped"):
        model.partial_fit(later)
    assert model.live_ is None and model.latest_chunk_ == OPEN_CHUNK + 1


@pytest.mark.parametrize("bad, match", [
    (lambda: OPEN.assign(chunk=OPEN_CHUNK - 1), "open chunk"),
    (lambda: OPEN.assign(chunk=OPEN_CHUNK + 1), "open chunk"),
    (lambda: _rows(OPEN).tolist() + [[1, 2, OPEN_CHUNK + 1]], "open chunk"),
    (lambda: OPEN.assign(user=OPEN.user.astype(str)), "kind|users"),
    (lambda: OPEN.assign(item=np.where(np.arange(len(OPEN)) == 0, np.nan, OPEN.item)),
     "NaN|float"),
    (lambda: OPEN.iloc[:0], "empty|no rows"),
])
def test_bad_input_is_refused_with_the_model_unchanged(bad, match):
    model = _closed(PARAMS["blend"])
    model.observe(_rows(OPEN.iloc[:5]))
    before = copy.deepcopy(model)
    with pytest.raises(ValueError, match=match):
        model.observe(bad())
    assert state_differences(before, model) == []


@pytest.mark.parametrize("name", ["blend", "coengaged"])
def test_explain_terms_sum_to_the_live_scores(name):
    model = _closed(PARAMS[name])
    model.observe(_rows(OPEN, users=[50_001], items=[93_000]))
    users = np.concatenate([np.unique(OPEN.user)[:5], [50_001]])
    items, scores = model.recommend(users, m=8)
    for user, row, row_scores in zip(users, items, scores, strict=True):
        why = model.explain(user, row)
        assert_allclose(why.scores, row_scores, rtol=1e-12)
        total = (why.contributions.sum(axis=1) + why.popularity + why.personal
                 + why.coengagement)
        assert_allclose(total, why.scores, rtol=1e-9)


def test_observed_engagements_count_as_history_does():
    """An observed engagement moves the user's answer as a ``history`` engagement on the
    same item with the same interest would: the recent-items term identically."""
    model = _closed({"personal": 0.5, "popularity": 0, "phi_decay": 0}, live_weight=1e-9)
    user = int(CLOSED.user.iloc[0])
    item = int(CLOSED.item.iloc[0])
    by_history = model.recommend([user], m=10, history=[[item]])
    model.observe(np.array([[user, item, OPEN_CHUNK]]))
    why = model.explain(user, [item])
    assert why.personal[0] > 0
    got = model.recommend([user], m=10)
    assert got[0][0, 0] == by_history[0][0, 0]


def test_readers_see_one_state_and_saving_keeps_the_layer(tmp_path):
    import pickle

    model = _closed(PARAMS["paper"])
    view = model._published()
    model.observe(_rows(OPEN))
    assert view.__dict__.get("live_") is None
    again = pickle.loads(pickle.dumps(model))
    users = np.unique(OPEN.user)
    assert_array_equal(again.recommend(users, m=10)[0], model.recommend(users, m=10)[0])
    pytest.importorskip("skops")
    from sklearn_micro.persistence import dump, load

    path = tmp_path / "live.skops"
    dump(model, path)
    loaded = load(path)
    assert loaded.n_observed_ == model.n_observed_
    assert_array_equal(loaded.recommend(users, m=10)[0], model.recommend(users, m=10)[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert again.partial_fit(OPEN).live_ is None


def _baselines():
    from sklearn.pipeline import Pipeline

    from sklearn_micro.baselines import (
        ALSRecommender,
        ANNRecommender,
        ItemKNNRecommender,
        PopularityRecommender,
        RecentItemsRecommender,
        RP3betaRecommender,
    )
    from sklearn_micro.utils.estimator_checks import FixedEmbedder

    made = {
        "popularity": PopularityRecommender(window=2).fit(X_TRAIN),
        "recent-items": RecentItemsRecommender(window=2).fit(X_TRAIN),
        "ann-exact": Pipeline([("embed", FixedEmbedder()),
                               ("ann", ANNRecommender(window=2, method="exact"))]
                              ).fit(X_TRAIN)[-1],
        "als": ALSRecommender(n_components=4, iterations=3, window=2,
                              random_state=0).fit(X_TRAIN),
        "item-knn": ItemKNNRecommender(window=2).fit(X_TRAIN),
        "rp3beta": RP3betaRecommender(window=2).fit(X_TRAIN),
    }
    return {name: rec.partial_fit(CLOSED) for name, rec in made.items()}


@pytest.mark.parametrize("name", ["popularity", "recent-items", "ann-exact", "als",
                                  "item-knn", "rp3beta"])
def test_baselines_observe_the_open_chunk(name):
    rec = _baselines()[name]
    plain = copy.deepcopy(rec)
    user = int(CLOSED.user.iloc[0])
    new_item = 97_000
    rows = _rows(OPEN.iloc[:0], users=np.unique(CLOSED.user), items=[new_item] * 4)
    assert not (plain.recommend([user], m=10)[0] == new_item).any()
    rec.observe(rows)
    assert rec.n_observed_ == rows.shape[0]
    items = rec.recommend([user], m=10)[0]
    if name in ("item-knn", "rp3beta"):
        # the neighbour lists stay the closed window's: the new item comes with the fill,
        # first for a user without items of the window
        assert rec.recommend([-1], m=1)[0][0, 0] == new_item
    else:
        # the window's most engaged item, the user's own newest, a vector from its engagers
        assert (items == new_item).any()
    if name in ("popularity", "recent-items"):
        assert items[0, 0] == new_item
    # partial_fit of the open chunk: as if nothing had been observed
    whole = np.concatenate([_rows(OPEN), rows])
    assert state_differences(plain.partial_fit(whole), rec.partial_fit(whole)) == []


def test_baseline_observe_refuses_other_chunks_with_the_state_unchanged():
    rec = _baselines()["popularity"]
    before = copy.deepcopy(rec)
    with pytest.raises(ValueError, match="open chunk"):
        rec.observe(OPEN.assign(chunk=OPEN_CHUNK + 3))
    assert state_differences(before, rec) == []


# ---------------------------------------------------------------- live_weight="auto"


def _replayed_metric(model, user, item, chunk, weight, *, n_batches, seed):
    """The documented held-out replay, through the public API and computed apart: the
    chunk's engagements shuffled (``default_rng(seed).permutation``) and cut into
    ``n_batches``; from the second batch on, each batch's users ranked at ``weight``
    before the batch is observed, recall@100 against their own items of the batch."""
    from sklearn_micro.metrics import recall_at

    rng = np.random.default_rng(seed)
    order = rng.permutation(user.shape[0])
    user, item = user[order], item[order]
    total, n = 0.0, 0
    for b, rows in enumerate(np.array_split(np.arange(user.shape[0]), n_batches)):
        if b > 0:
            users = np.unique(user[rows])
            model.set_params(live_weight=weight)
            found = model.recommend(users, 100)[0]
            relevant = [set(item[rows][user[rows] == u].tolist()) for u in users]
            total += float(recall_at(found, relevant, 100).sum())
            n += users.size
        model.observe(np.column_stack([user[rows], item[rows], np.full(rows.size, chunk)]))
    return total / n


def test_live_weight_scores_are_the_replay_computed_apart():
    from sklearn_micro.micro._held_out import live_weight_points

    model = _closed(PARAMS["blend"], live_weight=0.0)
    user, item = OPEN.user.to_numpy(), OPEN.item.to_numpy()
    _, values = live_weight_points(copy.deepcopy(model), user, item, OPEN_CHUNK, (0.0, 4.0),
                                   n_batches=4, max_users=10**9, random_state=5)
    scores = values.mean(axis=0)
    expected = [_replayed_metric(copy.deepcopy(model), user, item, OPEN_CHUNK, w,
                                 n_batches=4, seed=5) for w in (0.0, 4.0)]
    assert_allclose(scores, expected)


def test_auto_live_weight_is_held_out_and_leaves_the_rest_of_fit_alone():
    from sklearn_micro.micro import LIVE_WEIGHT_GRID

    auto = MiCRO(random_state=0, **PARAMS["blend"]).fit(X_TRAIN, item_interest=INTERESTS)
    assert auto.get_params()["live_weight"] == "auto"
    assert auto.live_weight_ in LIVE_WEIGHT_GRID
    given = MiCRO(random_state=0, **PARAMS["blend"], live_weight=auto.live_weight_).fit(
        X_TRAIN, item_interest=INTERESTS)
    # the replay draws from streams of its own: the sampler's carries on as without it
    assert not state_differences(auto.partial_fit(CLOSED), given.partial_fit(CLOSED),
                                 ignore=("live_weight",))
    auto.observe(OPEN.iloc[:30]), given.observe(OPEN.iloc[:30])
    users = OPEN.user.unique()
    assert_array_equal(auto.recommend(users, 10)[0], given.recommend(users, 10)[0])
    # a number set after fit acts on the next answer, "auto" goes back to fit's choice
    other = 0.0 if auto.live_weight_ > 0 else 16.0
    assert not np.array_equal(auto.set_params(live_weight=other).recommend(users, 10)[0],
                              given.recommend(users, 10)[0])
    assert_array_equal(auto.set_params(live_weight="auto").recommend(users, 10)[0],
                       given.recommend(users, 10)[0])


def test_auto_live_weight_on_one_training_chunk_is_the_fallback():
    from sklearn_micro.micro._held_out import LIVE_WEIGHT_FALLBACK

    one = X_TRAIN[X_TRAIN.chunk == X_TRAIN.chunk.max()]
    items = np.unique(one.item)
    model = MiCRO(random_state=0, **PARAMS["paper"]).fit(one, item_interest=(
        items, items % 3))
    assert model.live_weight_ == LIVE_WEIGHT_FALLBACK


def test_paired_choice_leaves_the_plain_weight_only_on_a_sure_gain():
    from sklearn_micro.micro._held_out import paired_choice

    rng = np.random.default_rng(0)
    users = np.repeat(np.arange(200), 3)
    base = rng.uniform(size=users.size)
    grid = (0.0, 1.0, 4.0)
    # 4 gains most, 1 gains surely but less: 4
    values = np.column_stack([base, base + 0.05, base + 0.1 + rng.normal(0, 0.01, users.size)])
    assert paired_choice(users, values, grid) == 4.0
    # gains in noise around 0 (the held-out chunk of a log whose items live long): 0
    noisy = np.column_stack([base, base + rng.normal(0, 0.3, users.size),
                             base + rng.normal(0.001, 0.3, users.size)])
    assert paired_choice(users, noisy, grid) == 0.0
    # a single user's points are one draw: even a large mean gain is not sure of itself
    one = np.zeros(6, np.int64)
    assert paired_choice(one, np.column_stack([np.zeros(6), np.ones(6), np.ones(6)]),
                         grid) == 0.0
