import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.pipeline import Pipeline

from sklearn_micro import MiCRO, SphericalKMeans
from sklearn_micro.micro._gibbs import build_layout, partition_cuts, partition_layout, run_chain
from sklearn_micro.utils.estimator_checks import FixedEmbedder, make_log, recommender_checks

TRAIN = np.array([
    [0, 10, 0], [0, 11, 0], [0, 12, 1],
    [1, 12, 0], [1, 13, 1], [1, 13, 1],
    [2, 10, 1], [2, 13, 1],
])
INTERESTS = ([10, 11, 12, 13], [0, 0, 1, 1])
CHUNK = np.array([[0, 20, 2], [0, 10, 2], [1, 21, 2], [1, 13, 2], [2, 20, 2], [2, 21, 2],
                  [3, 10, 2]])


def fitted(**params):
    params.setdefault("random_state", 0)
    return MiCRO(**params).fit(TRAIN, item_interest=INTERESTS)


def _canonical(value):
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, dict):
        return tuple((k, _canonical(v)) for k, v in sorted(value.items()))
    if isinstance(value, (tuple, list)):
        return tuple(_canonical(v) for v in value)
    if isinstance(value, np.random.RandomState):
        return _canonical(value.get_state())
    if hasattr(value, "__dict__"):
        return _canonical(vars(value))
    return value


def state(model):
    """Everything the model holds, comparable with ==."""
    return _canonical(vars(model))


def test_fit_counts_follow_item_interests():
    model = fitted()
    theta = model.user_interests([0, 1, 2]).toarray()
    # user 0: items 10, 11 (interest 0) and 12 (interest 1); alpha = 1 on each
    np.testing.assert_allclose(theta[0], [(1 + 2) / 5, (1 + 1) / 5])
    np.testing.assert_allclose(theta[1], [0, 1])
    assert model.latest_chunk_ == 1
    # phi after fit comes from the last training chunk with z = the item's interest
    assert model.interest_count_.tolist() == [1, 4]
    assert sorted(model.item_ids_.ids[model.chunk_items_].tolist()) == [10, 12, 13]


def test_fit_in_a_pipeline_needs_interests():
    from sklearn_micro import EmbeddedLog, Vocabulary, check_log
    log = EmbeddedLog(log=check_log(TRAIN),
                      user_ids=Vocabulary.from_ids(TRAIN[:, 0]),
                      item_ids=Vocabulary.from_ids(TRAIN[:, 1]),
                      user_vectors=np.ones((3, 2)), item_vectors=np.ones((4, 2)))
    with pytest.raises(ValueError, match="SphericalKMeans"):
        MiCRO().fit(log)
    model = MiCRO(random_state=0).fit(log.with_interests([0, 0, 1, 1]))
    np.testing.assert_array_equal(model.recommend([0], 2)[0], fitted().recommend([0], 2)[0])


@pytest.mark.parametrize("params, message", [
    ({"alpha": 0}, "alpha"), ({"beta": -1.0}, "beta"), ({"max_sweeps": 0}, "max_sweeps"),
])
def test_bad_parameters_are_named(params, message):
    with pytest.raises(ValueError, match=message):
        MiCRO(**params).fit(TRAIN, item_interest=INTERESTS)


def test_fit_refuses_items_without_interest_and_bad_pairs():
    with pytest.raises(ValueError, match="needs item_interest"):
        MiCRO().fit(TRAIN)
    with pytest.raises(ValueError, match="every training item needs an interest"):
        MiCRO().fit(TRAIN, item_interest=([10, 11], [0, 1]))
    with pytest.raises(ValueError, match="non-negative"):
        MiCRO().fit(TRAIN, item_interest=([10, 11, 12, 13], [0, -1, 1, 1]))


def test_partial_fit_takes_new_items_and_users():
    model = fitted().partial_fit(CHUNK)
    assert model.latest_chunk_ == 2
    assert model.n_sweeps_[2] >= 1
    # 7 engagements, user 3 is new but engages training item 10 (interest 0)
    assert model.phi_count_.sum() == 7
    assert model.n_unassigned_[2] == 0
    np.testing.assert_allclose(model.user_interests([3]).toarray(), [[1.0, 0.0]])
    mix = model.item_interests([20, 21, 99]).toarray()
    np.testing.assert_allclose(mix[:2].sum(axis=1), 1.0)
    assert mix[2].sum() == 0
    # counts carry: training + this chunk's engagements
    assert model.support_count_.sum() == len(TRAIN) + len(CHUNK)


def test_new_users_of_new_items_get_a_support_in_a_second_pass():
    # user 1 (interest 1 only) brings new item 40; new user 7 engages only item 40
    model = fitted().partial_fit(np.array([[1, 40, 2], [1, 40, 2], [7, 40, 2], [8, 41, 2]]))
    assert model.n_unassigned_[2] == 1  # user 8's item 41 is engaged by nobody with a support
    np.testing.assert_allclose(model.user_interests([7, 8]).toarray(), [[0, 1], [0, 0]])
    assert model.item_interest_[model.item_ids_.lookup([40, 41])].tolist() == [1, -1]


def test_phi_decay_keeps_recent_items_as_candidates():
    plain = fitted().partial_fit(CHUNK)
    decayed = fitted(phi_decay=0.5).partial_fit(CHUNK)
    plain_items = set(plain.item_ids_.ids[plain.chunk_items_].tolist())
    decayed_items = set(decayed.item_ids_.ids[decayed.chunk_items_].tolist())
    assert plain_items == {10, 13, 20, 21}
    assert decayed_items == plain_items | {11, 12}  # training items of chunks 0 and 1
    items, scores = decayed.recommend([0, 1], m=6)
    np.testing.assert_allclose(scores.sum(axis=1), 1.0)
    # the carried mass halves per chunk: 11 once in chunk 0, 12 in chunks 0 and 1, 10 in
    # chunks 0 and 1 and twice in chunk 2
    counts = dict(zip(decayed.item_ids_.ids[decayed.chunk_items_].tolist(),
                      decayed.chunk_item_count_.tolist(), strict=True))
    assert (counts[11], counts[12], counts[10]) == (0.25, 0.25 + 0.5, 0.25 + 0.5 + 2)


@pytest.mark.parametrize("bad, error, message", [
    (np.array([[0, 10, 1]]), ValueError, "newer than the latest chunk 2; got chunk 1"),
    (np.array([[0, 10, 5], [1, 10, 0]]), ValueError, "got chunk 0"),
    (np.empty((0, 3), np.int64), ValueError, "empty"),
    (np.array([[0.5, 10, 3]]), ValueError, "integer"),
    (np.array([[np.nan, 10, 3]]), ValueError, "NaN"),
    (np.array([[1, 2]]), ValueError, r"shape \(n, 3\)"),
    ("log.csv", TypeError, "DataFrame"),
])
def test_partial_fit_refuses_bad_input_and_keeps_state(bad, error, message):
    model = fitted().partial_fit(CHUNK)
    before = state(model)
    with pytest.raises(error, match=message):
        model.partial_fit(bad)
    assert state(model) == before


def test_partial_fit_is_all_or_nothing_over_several_chunks():
    pd = pytest.importorskip("pandas")
    model = fitted()
    before = state(model)
    # the second chunk has string ids, refused after the first chunk was sampled
    frame = pd.DataFrame({"user": [0, 1], "item": [10, 13], "chunk": [2, 3]})
    good = fitted().partial_fit(frame)
    assert good.latest_chunk_ == 3 and set(good.n_sweeps_) == {2, 3}
    mixed = pd.DataFrame({"user": ["a", "b"], "item": ["x", "y"], "chunk": [2, 3]})
    with pytest.raises(ValueError, match="int64 ids"):
        model.partial_fit(mixed)
    assert state(model) == before


def test_partial_fit_before_fit():
    from sklearn.exceptions import NotFittedError
    with pytest.raises(NotFittedError, match="call fit"):
        MiCRO().partial_fit(CHUNK)


def test_recommend_answers_and_edges():
    model = fitted().partial_fit(CHUNK)
    items, scores = model.recommend([0, 1, 2, 3, 99], m=6)
    assert items.shape == scores.shape == (5, 6)
    n_chunk_items = 4  # 20, 10, 21, 13
    assert (items[:, n_chunk_items:] == -1).all()
    assert np.isneginf(scores[:, n_chunk_items:]).all()
    # p_t(.|u) is a distribution over the chunk's items
    np.testing.assert_allclose(scores[:, :n_chunk_items].sum(axis=1), 1.0)
    # the unseen user 99 gets the chunk's popularity, scored by share
    np.testing.assert_allclose(scores[4, :n_chunk_items], np.sort([2, 2, 2, 1])[::-1] / 7)
    seen_items, _ = model.recommend([0], m=4, exclude_seen=True)
    assert not {10, 20} & set(seen_items[0].tolist())
    assert set(seen_items[0].tolist()) == {21, 13, -1}


def test_recommend_validates_m_and_users():
    model = fitted()
    with pytest.raises(ValueError, match="m must be an integer >= 1; got 0"):
        model.recommend([0], m=0)
    with pytest.raises(ValueError, match="1-D"):
        model.recommend([[0]], m=1)
    with pytest.raises(ValueError, match="int64 ids"):
        model.recommend(["a"], m=1)
    items, scores = model.recommend([], m=3)
    assert items.shape == (0, 3)


def test_string_ids():
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(TRAIN, columns=["user", "item", "chunk"]).astype(
        {"user": str, "item": str})
    model = MiCRO(random_state=0).fit(frame, item_interest=(["10", "11", "12", "13"],
                                                            [0, 0, 1, 1]))
    chunk = pd.DataFrame(CHUNK, columns=["user", "item", "chunk"]).astype(
        {"user": str, "item": str})
    model.partial_fit(chunk)
    items, _ = model.recommend(["0", "zz"], m=5)
    assert items.dtype.kind == "U"
    assert items[0, -1] == ""
    ref = fitted().partial_fit(CHUNK).recommend([0, 99], m=5)[0]
    np.testing.assert_array_equal(items, np.where(ref == -1, "", ref.astype(str)))


def test_pickle_round_trip_and_seeded_determinism():
    model = fitted().partial_fit(CHUNK)
    clone = pickle.loads(pickle.dumps(model))
    for a, b in zip(model.recommend([0, 1, 2, 3], 4), clone.recommend([0, 1, 2, 3], 4),
                    strict=True):
        np.testing.assert_array_equal(a, b)
    nxt = np.array([[0, 30, 3], [1, 30, 3], [1, 21, 3]])
    model.partial_fit(nxt)
    clone.partial_fit(nxt)
    assert state(model) == state(clone)


@pytest.mark.parametrize("params", [{}, {"personal": 0, "popularity": 0, "phi_decay": 0}])
def test_the_chunks_ranking_layout_is_remade_per_chunk_and_not_saved(params):
    # recommend numbers the latest chunk's items interest by interest once per chunk
    users = [0, 1, 2, 3]
    model = fitted(**params)
    model.recommend(users, 4)
    assert "_grouped" not in vars(pickle.loads(pickle.dumps(model)))
    model.partial_fit(CHUNK)
    after = model.recommend(users, 4)
    assert model._grouped["of"] is model.phi_item_
    fresh = pickle.loads(pickle.dumps(model))
    for a, b in zip(after, fresh.recommend(users, 4), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("params", [{}, {"personal": 0, "popularity": 0, "phi_decay": 0}])
def test_phi_min_count_set_after_fit_takes_effect(params):
    users = [0, 1, 2, 3]
    model = fitted(**params).partial_fit(CHUNK)
    exact = model.recommend(users, 4)
    # a count no entry reaches: the users' interests hold no candidate, popularity ranks
    model.set_params(phi_min_count=10)
    items, scores = model.recommend(users, 4)
    pop = model.item_ids_.ids[model.chunk_items_[model.popular_order_]]
    np.testing.assert_array_equal(items[:3, :pop.shape[0]], np.tile(pop, (3, 1)))
    assert not np.array_equal(scores, exact[1])
    model.set_params(phi_min_count=0)
    for a, b in zip(exact, model.recommend(users, 4), strict=True):
        np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------ properties

@st.composite
def chunks(draw):
    n_interests = draw(st.integers(1, 6))
    n_users = draw(st.integers(1, 8))
    n_items = draw(st.integers(1, 10))
    supports = [sorted(draw(st.sets(st.integers(0, n_interests - 1), min_size=1,
                                    max_size=n_interests))) for _ in range(n_users)]
    n_e = draw(st.integers(1, 40))
    users = np.array(draw(st.lists(st.integers(0, n_users - 1), min_size=n_e, max_size=n_e)))
    items = np.array(draw(st.lists(st.integers(0, n_items - 1), min_size=n_e, max_size=n_e)))
    seed = draw(st.integers(0, 2**31 - 1))
    return n_interests, supports, np.sort(users), items, seed


def _layout_of(case):
    K, supports, users, items, seed = case
    sup_ptr = np.concatenate([[0], np.cumsum([len(s) for s in supports])]).astype(np.int64)
    sup_k = np.concatenate(supports).astype(np.int64)
    prior = np.full(sup_k.shape[0], 0.5) + np.arange(sup_k.shape[0]) % 3
    rng = np.random.default_rng(seed)
    size = sup_ptr[users + 1] - sup_ptr[users]
    z = (rng.random(users.shape[0]) * size).astype(np.int32)
    n_items = int(items.max()) + 1
    layout, counts = build_layout(users, items, sup_ptr, sup_k, prior, z, n_interests=K,
                                  n_items=n_items)
    return layout, counts, z, size


def _recount(layout, z):
    _, counts = build_layout(layout.engagement_user, layout.engagement_item,
                             layout.support_ptr, layout.support_interest,
                             layout.support_prior, z, n_interests=layout.n_interests,
                             n_items=layout.n_items)
    return counts


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunks(), st.integers(1, 4))
def test_counts_equal_a_recount_after_every_sweep(case, n_jobs):
    K, supports, users, items, seed = case
    layout, counts, z, size = _layout_of(case)
    # each (item, interest) pair of a user's support has one entry, and maps point to it
    pairs = set(zip(layout.entry_item.tolist(), layout.entry_interest.tolist(), strict=True))
    assert len(pairs) == layout.n_entries
    for e in range(users.shape[0]):
        for j in range(layout.entry_ptr[e + 1] - layout.entry_ptr[e]):
            entry = layout.entry_of[layout.entry_ptr[e] + j]
            assert layout.entry_item[entry] == items[e]
            assert layout.entry_interest[entry] == supports[users[e]][j]
    # numbered item by item, in the order of the item's engagements and their supports
    order = [(int(items[e]), k) for e in np.argsort(items, kind="stable")
             for k in supports[users[e]]]
    numbered = list(dict.fromkeys(order))
    assert numbered == list(zip(layout.entry_item.tolist(), layout.entry_interest.tolist(),
                                strict=True))
    for sweep in range(3):
        run_chain(layout, counts, z, beta=0.1, max_sweeps=1, tol=0, chunk_seed=seed,
                  pass_=sweep, n_jobs=n_jobs, min_partition_work=0)
        assert ((z >= 0) & (z < size)).all()
        recount = _recount(layout, z)
        np.testing.assert_array_equal(recount.user_count, counts.user_count)
        np.testing.assert_array_equal(recount.entry_count, counts.entry_count)
        np.testing.assert_array_equal(recount.interest_count, counts.interest_count)
        assert counts.user_count.sum() == counts.entry_count.sum() == users.shape[0]
        assert counts.interest_count.sum() == users.shape[0]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunks())
def test_entry_map_numbers_alike_in_any_number_of_item_ranges(case):
    """The entries are numbered in ranges of items on threads, each moved past the ranges
    before it: the map is that of one range whatever the number of ranges (more ranges
    than items included)."""
    from sklearn_micro._kernels import sampler

    layout, _, _, _ = _layout_of(case)
    args = (layout.engagement_user, layout.engagement_item, layout.entry_ptr,
            layout.support_ptr, layout.support_interest, layout.n_items,
            layout.n_interests)
    one = sampler.entry_map(*args, 1)
    for n_ranges in (2, 3, 7, 50):
        for got, want in zip(sampler.entry_map(*args, n_ranges), one, strict=True):
            np.testing.assert_array_equal(got, want)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunks())
def test_an_items_main_interest_holds_most_of_its_engagements(case):
    """After a sweep, each item of the chunk takes the interest of most of its assigned
    engagements, the lower interest on a tie (ties are common in small chunks)."""
    from sklearn_micro.micro._state import main_interests

    K, supports, users, items, seed = case
    layout, counts, z, _ = _layout_of(case)
    run_chain(layout, counts, z, beta=0.1, max_sweeps=1, tol=0, chunk_seed=seed)
    model_items = np.arange(layout.n_items) + 3  # local item i is model item i + 3
    got = main_interests(np.full(layout.n_items + 5, -2, np.int32), model_items, layout,
                         counts.entry_count)
    assert (got[:3] == -2).all() and (got[layout.n_items + 3:] == -2).all()
    for item in range(layout.n_items):
        given = [supports[users[e]][z[e]] for e in range(users.shape[0]) if items[e] == item]
        if not given:
            assert got[item + 3] == -2
            continue
        tally = np.bincount(given, minlength=K)
        assert got[item + 3] == int(np.flatnonzero(tally == tally.max())[0])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunks(), st.integers(2, 4))
def test_partitions_cover_the_chunk_once(case, n_jobs):
    layout, _, _, _ = _layout_of(case)
    parts = partition_layout(layout, n_jobs)
    assert 1 <= len(parts) <= n_jobs
    covered = np.concatenate([np.arange(layout.n_engagements)[p.engagements] for p in parts])
    np.testing.assert_array_equal(covered, np.arange(layout.n_engagements))
    for p in parts:
        # a partition's users are its own, and its map points at the entries it touches
        users = layout.engagement_user[p.engagements]
        others = [layout.engagement_user[q.engagements] for q in parts if q is not p]
        assert not np.isin(users, np.concatenate([[-1], *others])).any()
        lo, hi = layout.entry_ptr[p.engagements.start], layout.entry_ptr[p.engagements.stop]
        np.testing.assert_array_equal(p.entries[p.entry_of], layout.entry_of[lo:hi])
    # the cuts the whole copies are sampled in are the same ranges
    cuts = partition_cuts(layout, n_jobs)
    assert [slice(c[2], c[3]) for c in cuts] == [p.engagements for p in parts]
    for u_lo, u_hi, e_lo, e_hi, p_lo, p_hi in cuts:
        assert (p_lo, p_hi) == (layout.entry_ptr[e_lo], layout.entry_ptr[e_hi])
        assert (layout.engagement_user[e_lo:e_hi] >= u_lo).all()
        assert (layout.engagement_user[e_lo:e_hi] < u_hi).all()


@st.composite
def logs(draw):
    n = draw(st.integers(4, 40))
    users = draw(st.lists(st.integers(0, 6), min_size=n, max_size=n))
    items = draw(st.lists(st.integers(0, 12), min_size=n, max_size=n))
    chunk = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    n_interests = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 1000))
    return np.column_stack([users, items, chunk]), n_interests, seed


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs(), st.integers(1, 15))
def test_recommend_properties(case, m):
    log, K, seed = case
    train = log[log[:, 2] <= 1]
    test = log[log[:, 2] > 1]
    if len(train) == 0:
        train, test = log, log[:0]
    train_items = np.unique(train[:, 1])
    model = MiCRO(personal=0, popularity=0, phi_decay=0, random_state=seed).fit(
        train, item_interest=(train_items, train_items % K))
    if len(test):
        model.partial_fit(test)
    theta = model.user_interests(np.arange(8))
    sums = np.asarray(theta.sum(axis=1)).ravel()
    assert np.allclose(sums[sums > 0], 1.0)
    mix = model.item_interests(np.arange(14))
    item_sums = np.asarray(mix.sum(axis=1)).ravel()
    assert np.allclose(item_sums[item_sums > 0], 1.0)

    users = np.arange(8)
    for exclude in (False, True):
        items, scores = model.recommend(users, m, exclude_seen=exclude)
        for r in range(len(users)):
            valid = items[r] >= 0
            assert valid.tolist() == sorted(valid.tolist(), reverse=True)
            assert len(set(items[r][valid].tolist())) == valid.sum()
            assert (np.diff(scores[r][valid]) <= 1e-15).all()
            assert np.isneginf(scores[r][~valid]).all()
            one_items, one_scores = model.recommend(users[r:r + 1], m, exclude_seen=exclude)
            np.testing.assert_array_equal(one_items[0], items[r])
            np.testing.assert_array_equal(one_scores[0], scores[r])
    n_chunk = model.chunk_items_.shape[0]
    items, scores = model.recommend(users, n_chunk)
    np.testing.assert_allclose(scores.sum(axis=1), 1.0)
    assert set(items[0].tolist()) == set(model.item_ids_.ids[model.chunk_items_].tolist())


# ---------------------------------------------------------------- known answer

@pytest.mark.parametrize("n_jobs", [1, 2])
def test_known_answer_on_the_generative_model(n_jobs):
    """With one or two partitions of the sampler, on a log drawn from the paper's model
    with planted interests (training items given their true interest), the sampler puts
    each new item in its planted interest (adjusted Rand index of the items' main
    interests) and next-chunk recall@100 beats a global-popularity ranking of the previous
    chunk several times over."""
    from sklearn.metrics import adjusted_rand_score

    from sklearn_micro.datasets import make_engagements
    from sklearn_micro.metrics import ranking_metrics

    log, truth = make_engagements(n_users=2000, n_items=3000, n_chunks=8, n_interests=20,
                                  n_engagements=60000, random_state=0, return_truth=True)
    train = log.take(log.chunk < 4)
    train_items = np.unique(train.item)
    model = MiCRO(random_state=0, n_jobs=n_jobs, min_partition_work=0).fit(
        train, item_interest=(train_items, truth["item_interest"][train_items]))
    for t in range(4, 8):
        nxt = log.take(log.chunk == t)
        users, inverse = np.unique(nxt.user, return_inverse=True)
        relevant = [set(nxt.item[inverse == j].tolist()) for j in range(users.shape[0])]
        recs, _ = model.recommend(users, 100)
        prev = log.take(log.chunk == t - 1)
        values, counts = np.unique(prev.item, return_counts=True)
        popular = np.tile(values[np.argsort(-counts, kind="stable")[:100]], (len(users), 1))
        micro_recall = ranking_metrics(recs, relevant, ks=(100,))["recall@100"].mean()
        pop_recall = ranking_metrics(popular, relevant, ks=(100,))["recall@100"].mean()
        assert micro_recall > 3 * pop_recall, (t, micro_recall, pop_recall)

        model.partial_fit(nxt)
        chunk_items = np.unique(nxt.item)
        new = chunk_items[~np.isin(chunk_items, train_items)]
        main = np.asarray(model.item_interests(new).argmax(axis=1)).ravel()
        assert adjusted_rand_score(truth["item_interest"][new], main) > 0.85
        assert model.n_sweeps_[t] < model.max_sweeps


def _generated(seed=0):
    from sklearn_micro.datasets import make_engagements

    log, truth = make_engagements(n_users=3000, n_items=4000, n_chunks=6, n_interests=30,
                                  n_engagements=90000, random_state=seed, return_truth=True)
    train = log.take(log.chunk < 4)
    items = np.unique(train.item)
    return train, (items, truth["item_interest"][items]), log.take(log.chunk == 4), \
        log.take(log.chunk == 5)


def test_parallel_sampler_is_deterministic_per_seed_and_n_jobs():
    train, interests, chunk, _ = _generated()
    models = [MiCRO(random_state=3, n_jobs=2, max_sweeps=12, min_partition_work=0).fit(
        train, item_interest=interests).partial_fit(chunk) for _ in range(2)]
    assert state(models[0]) == state(models[1])
    one = MiCRO(random_state=3, n_jobs=1, max_sweeps=12, min_partition_work=0).fit(
        train, item_interest=interests).partial_fit(chunk)
    assert not np.array_equal(one.phi_count_, models[0].phi_count_)


@pytest.mark.parametrize("seed", [0, 1])
def test_partitions_on_threads_draw_alike_with_whole_or_local_counts(monkeypatch, seed):
    """Partitions on threads copy all of the chunk's counts below WHOLE_COPY_ENTRIES and
    gather only those they touch above it: the same chain either way, to the last bit."""
    import sklearn_micro.micro._gibbs as gibbs

    rng = np.random.default_rng(seed)
    n_users, K = 40, 6
    supports = [sorted(rng.choice(K, rng.integers(1, K + 1), replace=False).tolist())
                for _ in range(n_users)]
    users = np.sort(rng.integers(0, n_users, 600))
    case = (K, supports, users, rng.integers(0, 60, 600), seed)
    chains, kinds = [], []
    real_cuts, real_layout = gibbs.partition_cuts, gibbs.partitions_of

    def spy_cuts(layout, n):
        cuts = real_cuts(layout, n)
        kinds.append(len(cuts))
        return cuts

    def spy_layout(layout, cuts):
        kinds.append("local maps")
        return real_layout(layout, cuts)

    monkeypatch.setattr(gibbs, "partition_cuts", spy_cuts)
    monkeypatch.setattr(gibbs, "partitions_of", spy_layout)
    for limit in (gibbs.WHOLE_COPY_ENTRIES, 0):
        monkeypatch.setattr(gibbs, "WHOLE_COPY_ENTRIES", limit)
        layout, counts, z, _ = _layout_of(case)
        run_chain(layout, counts, z, beta=0.1, max_sweeps=4, tol=0, chunk_seed=seed,
                  n_jobs=3, min_partition_work=0)
        chains.append((z, counts))
    # whole copies (the cuts alone), then local maps (the partitions' own arrays)
    assert kinds == [3, 3, "local maps"]
    (z_whole, whole), (z_local, local) = chains
    np.testing.assert_array_equal(z_whole, z_local)
    for name in ("user_count", "entry_count", "interest_count"):
        np.testing.assert_array_equal(getattr(whole, name), getattr(local, name))
    np.testing.assert_array_equal(_recount(layout, z_whole).entry_count, whole.entry_count)


def test_small_chunks_are_sampled_as_one_chain(monkeypatch):
    """Below min_partition_work support entries per partition a chunk gets fewer partitions:
    by default one for this small chunk, which then samples exactly the n_jobs=1 chain."""
    import sklearn_micro.micro._gibbs as gibbs

    train, interests, chunk, _ = _generated()
    layout_work = {}
    real = gibbs.partition_cuts

    def spy(layout, n):
        layout_work[n] = int(layout.entry_ptr[-1])
        return real(layout, n)

    monkeypatch.setattr(gibbs, "partition_cuts", spy)
    assert MiCRO().min_partition_work == 1 << 22
    models = [MiCRO(random_state=3, n_jobs=n_jobs, max_sweeps=12).fit(
        train, item_interest=interests).partial_fit(chunk) for n_jobs in (1, 2)]
    assert list(layout_work) == [1] and 0 < layout_work[1] < 1 << 22
    models[1].n_jobs = 1
    assert state(models[0]) == state(models[1])  # the same chain, to the last bit
    # a threshold of half the chunk's work gives it two partitions, not n_jobs = 3
    work = layout_work[1]
    layout_work.clear()
    MiCRO(random_state=3, n_jobs=3, max_sweeps=2, min_partition_work=work // 2).fit(
        train, item_interest=interests).partial_fit(chunk)
    assert max(layout_work) == 2  # the chunk's passes, each by its own work
    # and 0 gives every chunk n_jobs partitions
    layout_work.clear()
    MiCRO(random_state=3, n_jobs=3, max_sweeps=2, min_partition_work=0).fit(
        train, item_interest=interests).partial_fit(chunk)
    assert set(layout_work) == {3}
    with pytest.raises(ValueError, match="min_partition_work"):
        MiCRO(min_partition_work=-1).fit(train, item_interest=interests)


def _mirrored_groups(n_users=30, seed=0):
    """Users 0.. and 100.. that mirror each other: the same training engagements on items
    0-9 (interests 0, 1) and 100-109 (interests 2, 3), and the same chunk engagements on
    new items 1000.. and 2000..; the two groups share no item and no interest."""
    rng = np.random.default_rng(seed)
    train, chunk = [], []
    for j in range(n_users):
        for _ in range(rng.integers(2, 6)):
            item = int(rng.integers(0, 10))
            train += [(j, item, 0), (100 + j, 100 + item, 0)]
        for _ in range(rng.integers(4, 9)):
            item = int(rng.integers(0, 20))
            chunk += [(j, 1000 + item, 1), (100 + j, 2000 + item, 1)]
    items = np.r_[np.arange(10), 100 + np.arange(10)]
    interests = np.r_[np.arange(10) // 5, 2 + np.arange(10) // 5]
    return np.array(train), (items, interests), np.array(chunk)


def test_partitions_draw_independent_streams(monkeypatch):
    """A chunk of two mirrored groups of users, split into one partition each: each
    partition's chain is a Gibbs chain of its own group alone. Were the partitions to draw
    the same random stream, the two chains would be coupled (the same uniforms through the
    same conditionals) and meet within a few sweeps: every mirrored user would end with
    the same mixture. Independent streams leave most mirrored pairs apart."""
    import sklearn_micro.micro._gibbs as gibbs

    train, interests, chunk = _mirrored_groups()
    cuts = []
    real = gibbs.partition_cuts

    def spy(layout, n):
        ranges = real(layout, n)
        cuts.append([slice(r[2], r[3]) for r in ranges])
        return ranges

    monkeypatch.setattr(gibbs, "partition_cuts", spy)
    model = MiCRO(alpha=0.5, beta=0.1, personal=0, popularity=0, phi_decay=0, max_sweeps=40, tol=0,
                  n_jobs=2, min_partition_work=0, random_state=0)
    model.fit(train, item_interest=interests).partial_fit(chunk)
    half = chunk.shape[0] // 2
    assert cuts == [[slice(0, half), slice(half, 2 * half)]]  # one partition per group
    a = model.user_interests(np.arange(30)).toarray()
    b = model.user_interests(100 + np.arange(30)).toarray()
    assert not a[:, 2:].any() and not b[:, :2].any()
    same = np.all(a[:, :2] == b[:, 2:], axis=1)
    assert same.mean() < 0.9, f"{same.sum()} of 30 mirrored users have the same mixture"


def test_parallel_sampler_agrees_with_the_sequential_chain():
    """Two partitions merged after every sweep (AD-LDA) reach the sequential chain's
    log-likelihood and next-chunk recall@100 within the spread between seeds."""
    from sklearn_micro.metrics import ranking_metrics

    train, interests, chunk, nxt = _generated()
    users, inverse = np.unique(nxt.user, return_inverse=True)
    relevant = [set(nxt.item[inverse == j].tolist()) for j in range(users.shape[0])]
    result = {}
    for n_jobs in (1, 2):
        ll, recall = [], []
        for seed in range(4):
            model = MiCRO(random_state=seed, n_jobs=n_jobs, min_partition_work=0).fit(
                train, item_interest=interests).partial_fit(chunk)
            ll.append(model.log_likelihood_[4][-1])
            recs, _ = model.recommend(users, 100)
            recall.append(ranking_metrics(recs, relevant, ks=(100,))["recall@100"].mean())
        result[n_jobs] = np.array(ll), np.array(recall)
    for j, name in ((0, "log-likelihood"), (1, "recall@100")):
        seq, par = result[1][j], result[2][j]
        spread = max(seq.max() - seq.min(), par.max() - par.min(), 1e-3 * abs(seq.mean()))
        assert abs(seq.mean() - par.mean()) <= 2 * spread, (name, seq, par)


# ------------------------------------------------------- the recommender protocol

def _micro_pipeline():
    return Pipeline([("embed", FixedEmbedder()),
                     ("interests", SphericalKMeans(n_clusters=3, random_state=0)),
                     ("micro", MiCRO(random_state=0))])


# MiCRO's arithmetic goes through no BLAS: answers composed differently are equal arrays
@pytest.mark.parametrize("check", recommender_checks(score_rtol=0), ids=lambda c: c.__name__)
def test_recommender_protocol(check):
    check(_micro_pipeline, *make_log(as_frame=True))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 500), st.integers(0, 60)), min_size=1, max_size=50),
       st.lists(st.integers(0, 60), min_size=1, max_size=50),
       st.lists(st.integers(0, 3000), min_size=1, max_size=10),
       st.floats(0.001, 2), st.integers(1, 5000))
def test_chunk_log_likelihood_equals_the_lgamma_formula(users, entries, interests, beta,
                                                        n_items):
    import math

    from sklearn_micro._kernels.sampler import chunk_log_likelihood

    prior = np.array([p for p, _ in users])
    user_count = np.array([c for _, c in users], np.int32)
    i_beta = n_items * beta
    expected = (sum(math.lgamma(p + c) - math.lgamma(p) for p, c in users)
                + sum(math.lgamma(beta + c) - math.lgamma(beta) for c in entries)
                - sum(math.lgamma(i_beta + c) - math.lgamma(i_beta) for c in interests))
    got = chunk_log_likelihood(prior, user_count, np.array(entries, np.int32),
                               np.array(interests, np.int32), beta, i_beta)
    assert math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-6)


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 8), st.integers(0, 4), st.integers(0, 20), st.booleans(),
       st.integers(0, 2**32 - 1))
def test_grown_supports_add_counts_and_append_rows(n_old, n_more, n_new, known, seed):
    # partial_fit's commit (`grown_supports`): new users' entries after the old rows in
    # one copy, a known user without a support through the general path; both give each
    # row its old entries (counts added) then its new ones in their order
    from sklearn_micro.micro._state import grown_supports

    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 4, n_old)
    sizes[rng.random(n_old) < 0.3] = 0  # users without a support
    indptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    interest = rng.integers(0, 50, indptr[-1]).astype(np.int32)
    count = rng.integers(1, 9, indptr[-1]).astype(np.int64)
    before = interest.copy(), count.copy()
    position = rng.permutation(indptr[-1])[:rng.integers(0, indptr[-1] + 1)]
    add = rng.integers(1, 5, position.shape[0])
    n_users = n_old + n_more
    empty = np.flatnonzero(sizes == 0)
    choices = np.arange(n_old, n_users)
    if known and empty.shape[0]:
        choices = np.concatenate([choices, empty])
    rows = rng.choice(choices, n_new) if choices.shape[0] else np.empty(0, np.int64)
    new_interest = rng.integers(0, 50, rows.shape[0])
    new_count = rng.integers(1, 9, rows.shape[0])
    got_ptr, got_interest, got_count = grown_supports(
        indptr, interest, count, n_users, position, add, rows, new_interest, new_count)
    np.testing.assert_array_equal(interest, before[0])  # the given arrays are left as
    np.testing.assert_array_equal(count, before[1])     # they were
    assert got_interest.dtype == interest.dtype and got_count.dtype == count.dtype
    want_count = count.copy()
    want_count[position] += add
    assert got_ptr.shape == (n_users + 1,)
    for r in range(n_users):
        old = slice(indptr[r], indptr[r + 1]) if r < n_old else slice(0, 0)
        mine = rows == r
        span = slice(got_ptr[r], got_ptr[r + 1])
        np.testing.assert_array_equal(got_interest[span],
                                      np.concatenate([interest[old], new_interest[mine]]))
        np.testing.assert_array_equal(got_count[span],
                                      np.concatenate([want_count[old], new_count[mine]]))


def fitted_state(model):
    """The fitted state, without the ranking's per-chunk cache that `recommend` makes."""
    return _canonical({k: v for k, v in vars(model).items() if k != "_grouped"})


def test_paper_model_is_the_paper_model_fitted_apart():
    train, interests, chunk4, chunk5 = _generated()
    params = dict(random_state=3, n_jobs=2, max_sweeps=12, min_partition_work=0)
    ours = MiCRO(personal=0.3, phi_decay=0.5, **params).fit(train, item_interest=interests)
    apart = MiCRO(personal=0, popularity=0, phi_decay=0, live_weight=0, **params).fit(
        train, item_interest=interests)
    users = np.unique(np.concatenate([chunk4.user, chunk5.user, [-7]]))
    for chunk in (None, chunk4, chunk5):
        if chunk is not None:
            ours.partial_fit(chunk)
            apart.partial_fit(chunk)
        paper = ours.paper_model()
        assert paper.get_params() == apart.get_params()
        assert fitted_state(paper) == fitted_state(apart)
        got, want = paper.recommend(users, 50), apart.recommend(users, 50)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        # the extensions rank otherwise, so the comparison above is not vacuous
        assert not np.array_equal(ours.recommend(users, 50)[0], want[0])
    assert ours.chunk_alone_ is not None and paper.chunk_alone_ is None


@pytest.mark.parametrize("phi_min_count", [0, 2])
def test_recommend_with_paper_equals_the_two_models_recommend(phi_min_count):
    """One scatter a user ranks for the model and its paper's model when they share phi:
    the lists and scores are those of the two `recommend` calls, bit for bit."""
    import scipy.sparse as sp

    from sklearn_micro._kernels.selection import CUT_SAMPLE, SELECT_RATIO
    from sklearn_micro.datasets import make_engagements

    # two interests, so that users of both have the thousands of candidates that take the
    # kernels' sampled cut at m = 100, and users of one fewer, which take selection
    log = make_engagements(n_users=1500, n_items=8000, n_chunks=5, n_interests=2,
                           n_engagements=50000, random_state=1)
    train = log.take(log.chunk < 3)
    items = np.unique(train.item)
    # no co-engaged items: the recent items alone are what exclude_seen leaves out below
    model = MiCRO(personal=0.3, coengagement=0, popularity=0, phi_decay=0,
                  phi_min_count=phi_min_count, max_sweeps=8, random_state=0).fit(
                      train, item_interest=(items, items % 2))
    users = np.concatenate([np.unique(log.user)[::3], [-7]])  # and an unseen user
    for c in (None, 3, 4):
        if c is not None:
            model.partial_fit(log.take(log.chunk == c))
        assert model._ranks_with_paper()
        paper = model.paper_model()
        for m, exclude_seen in ((10, False), (100, True), (100, False)):
            (got, got_s), (got_p, got_p_s) = model._recommend_with_paper(
                users, m, exclude_seen=exclude_seen)
            want, want_s = model.recommend(users, m, exclude_seen=exclude_seen)
            want_p, want_p_s = paper.recommend(users, m, exclude_seen=exclude_seen)
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(got_s, want_s)
            np.testing.assert_array_equal(got_p, want_p)
            np.testing.assert_array_equal(got_p_s, want_p_s)
            # the recent items make the two rankings differ (they are seen items, so
            # with those left out the two orders agree)
            assert np.array_equal(got, got_p) == exclude_seen
        # both of the kernels' ways of keeping a row's top m were taken at m = 100
        phi = sp.csr_matrix((np.ones(paper.phi_item_.shape[0]), paper.phi_item_,
                             paper.phi_indptr_))
        supports = model.user_interests(users)
        candidates = np.diff(((supports != 0).astype(float) @ phi).tocsr().indptr)
        assert (candidates > max(SELECT_RATIO * 100, 2 * CUT_SAMPLE)).any()
        assert ((candidates > 100) & (candidates <= SELECT_RATIO * 100)).any()
    with pytest.raises(ValueError, match="m must be an integer >= 1"):
        model._recommend_with_paper(users, 0)
    with pytest.raises(ValueError, match="personal_weight_=0.0"):
        paper._recommend_with_paper(users, 10)


def test_recommend_with_paper_ranks_the_popularity_term_from_the_same_scatter():
    model = fitted(personal=0, popularity=3.0, phi_decay=0).partial_fit(CHUNK)
    assert model._ranks_with_paper()
    users = [0, 1, 2, 3, 99]
    (got, got_s), (got_p, got_p_s) = model._recommend_with_paper(users, 6)
    for (items, scores), want in (((got, got_s), model.recommend(users, 6)),
                                  ((got_p, got_p_s), model.paper_model().recommend(users, 6))):
        np.testing.assert_array_equal(items, want[0])
        np.testing.assert_array_equal(scores, want[1])
    # the popularity term changes the scores of users with interests
    assert not np.array_equal(got_s[:4], got_p_s[:4])


def test_recommend_with_paper_refuses_a_model_whose_paper_model_has_its_own_phi():
    assert fitted(personal=0.3, phi_decay=0)._ranks_with_paper()
    # the counts carried into the latest chunk are the model's alone
    model = fitted(personal=0.3, phi_decay=0.5).partial_fit(CHUNK)
    assert model.chunk_alone_ is not None and not model._ranks_with_paper()
    with pytest.raises(ValueError, match="phi_decay_=0.5"):
        model._recommend_with_paper(np.unique(CHUNK[:, 0]), 10)


def test_paper_model_goes_on_alone_and_leaves_the_model_as_it_was():
    train, interests, chunk4, chunk5 = _generated()
    params = dict(random_state=3, max_sweeps=8)
    ours = MiCRO(personal=0.3, phi_decay=0.5, **params).fit(
        train, item_interest=interests).partial_fit(chunk4)
    before = state(ours)
    paper = ours.paper_model().partial_fit(chunk5)
    # the random stream is the model's, copied: sampling the view draws nothing from it
    assert state(ours) == before
    apart = MiCRO(personal=0, popularity=0, phi_decay=0, live_weight=0, **params).fit(
        train, item_interest=interests).partial_fit(chunk4).partial_fit(chunk5)
    assert fitted_state(paper) == fitted_state(apart)
    # and the model goes on as if the view never was
    alone = MiCRO(personal=0.3, phi_decay=0.5, **params).fit(
        train, item_interest=interests).partial_fit(chunk4).partial_fit(chunk5)
    assert state(ours.partial_fit(chunk5)) == state(alone)
