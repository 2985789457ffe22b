"""MiCRO's learned blend (``personal``, ``popularity``) and ``phi_decay="auto"``.

- The parameters are validated with errors that name them.
- ``personal=0``, ``popularity=0`` and ``phi_decay=0`` are the paper's model (the defaults
  are "learned", "learned" and "auto"): users without a recent item get exactly the
  paper's answer with ``popularity=0``, and "learned" on a log without repeats is the
  paper's model.
- ``recommend`` against a dense computation of ``s(i) = (1 - lam_u) (p_t(i|u) + w
  pi_t(i)) + lam_u r_u(i)`` over the latest chunk's items and the users' recent items, on
  logs drawn by hypothesis: equal up to ties.
- The learned weights equal a brute-force selection that fits a model per pair of weights.
- The recent items are a recount of the log's last ``personal_window`` chunks after every
  chunk, replaced and never modified in place; ``partial_fit`` stays all or nothing;
  pickle and skops files round-trip the state.
- "auto" equals a slow reference computation of its choice.
- The shared recommender checks pass with the personal component on.
"""

import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.pipeline import Pipeline
from test_exactness import dense_scores, logs
from test_micro import CHUNK, TRAIN, fitted

from sklearn_micro import MiCRO, SphericalKMeans
from sklearn_micro._kernels.csr import keep_entries
from sklearn_micro._kernels.selection import CUT_SAMPLE, ItemRows
from sklearn_micro._kernels.threshold import (
    _threshold_rows,
    ranked_lists,
    rows_by_main_interest,
    threshold_topm,
)
from sklearn_micro._kernels.topm import (
    RANGE_ITEMS,
    RANGE_ROWS,
    Chunk,
    Queries,
    Recent,
    blend_ranks,
    group_by_interest,
    mixture_topm,
    personal_ranks,
    personal_topm,
)
from sklearn_micro._log import check_log
from sklearn_micro.datasets import make_engagements
from sklearn_micro.micro import _held_out
from sklearn_micro.micro import _state as _micro_state
from sklearn_micro.utils.estimator_checks import (
    FixedEmbedder,
    make_log,
    recommender_checks,
    state_differences,
)


@pytest.mark.parametrize("params, message", [
    ({"personal": -0.1}, "'personal' parameter"),
    ({"personal": 1.5}, "'personal' parameter"),
    ({"personal": "always"}, "'personal' parameter"),
    ({"popularity": -0.5}, "'popularity' parameter"),
    ({"coengagement": 1.5}, "'coengagement' parameter"),
    ({"coengagement": "chosen"}, "'coengagement' parameter"),
    ({"popularity": "chosen"}, "'popularity' parameter"),
    ({"learned_by": "ndcg"}, "'learned_by' parameter"),
    ({"personal_window": 0}, "'personal_window' parameter"),
    ({"personal_window": 2.5}, "'personal_window' parameter"),
    ({"personal_decay": 0.0}, "'personal_decay' parameter"),
    ({"personal_decay": 1.5}, "'personal_decay' parameter"),
    ({"phi_decay": 1.0}, "'phi_decay' parameter"),
    ({"phi_decay": "chosen"}, "'phi_decay' parameter"),
    ({"phi_min_count": -1}, "'phi_min_count' parameter"),
    ({"phi_min_count": "2"}, "'phi_min_count' parameter"),
])
def test_bad_parameters_are_named(params, message):
    with pytest.raises(ValueError, match=message):
        fitted(**params)


def test_fitted_values_of_the_settings():
    model = fitted(personal=0.3, phi_decay=0.5)
    assert model.personal_weight_ == 0.3 and model.phi_decay_ == 0.5
    model = fitted(personal=0, popularity=0, phi_decay=0)
    assert model.personal_weight_ == 0.0 and model.phi_decay_ == 0.0
    assert model.recent_item_.shape == (0,)
    model.partial_fit(CHUNK)
    assert model.recent_item_.shape == (0,)
    assert model.recent_indptr_.shape == (len(model.user_ids_) + 1,)


def recent_recount(log, users, latest, window, decay):
    """r_u over the model's items from the log, as dicts {external item: r_u(i)}."""
    out = []
    for user in users:
        mine = log[(log[:, 0] == user) & (log[:, 2] > latest - window)]
        weight = {}
        for _, item, chunk in mine:
            weight[item] = weight.get(item, 0.0) + decay ** (latest - chunk)
        total = sum(weight.values())
        out.append({i: w / total for i, w in weight.items()})
    return out


def dense_coengaged(model, given_logs):
    """P3's ``s(j, i)`` over internal item indices, every pair (the logs are too small for
    the kept neighbours to cut any): the walk item -> user -> item over every user's
    engagements of the last ``personal_window`` chunks, each weighed ``personal_decay **
    age``, the diagonal 0."""
    n_items = len(model.item_ids_)
    assert n_items <= _micro_state.COENGAGED_NEIGHBOURS + 1, "no neighbour list is cut"
    latest = model.latest_chunk_
    counts = np.zeros((len(model.user_ids_), n_items))
    for user, item, chunk in given_logs:
        if chunk > latest - model.personal_window:
            counts[model.user_ids_.lookup([user])[0], model.item_ids_.lookup([item])[0]] += (
                model.personal_decay ** (latest - chunk))
    by_user = counts.sum(axis=1, keepdims=True)
    by_item = counts.sum(axis=0, keepdims=True)
    to_item = np.divide(counts, by_user, out=np.zeros_like(counts), where=by_user > 0)
    to_user = np.divide(counts, by_item, out=np.zeros_like(counts), where=by_item > 0)
    walk = to_user.T @ to_item
    np.fill_diagonal(walk, 0.0)
    return walk


def dense_personal_scores(model, users, given_logs, lam, coengagement=0.0):
    """``s(i)`` for every item of the latest chunk and every recent item of each user, -inf
    elsewhere: the paper's ``p_t(i|u)`` from the dense scan plus the model's popularity
    weight times the chunk's share (the share alone for users without interests), the
    recent items recounted from the log, a share ``coengagement`` of each spread over the
    dense P3 walk (`dense_coengaged`)."""
    p, chunk_ids = dense_scores(model, users)
    index = model.user_ids_.lookup(users)
    no_support = np.diff(model.support_indptr_)[np.maximum(index, 0)] == 0
    share = model.chunk_item_count_ / model.chunk_item_count_.sum()
    p += model.popularity_weight_ * share
    p[(index < 0) | no_support] = share
    all_ids = model.item_ids_.ids
    in_chunk = model.item_ids_.lookup(chunk_ids)
    dense = np.full((len(users), all_ids.shape[0]), -np.inf)
    recent = recent_recount(given_logs, users, model.latest_chunk_, model.personal_window,
                            model.personal_decay)
    g = coengagement
    walk = dense_coengaged(model, given_logs) if g > 0 and lam > 0 else None
    for row, r_u in enumerate(recent):
        own = np.zeros(all_ids.shape[0])
        for item, r in r_u.items():
            own[model.item_ids_.lookup([item])[0]] = r
        spread = own if walk is None else (1 - g) * own + g * (own @ walk)
        # no weight on any item (own items without co-engaged ones, at g = 1): no term
        lam_u = lam if (spread > 0).any() else 0.0
        dense[row, in_chunk] = (1 - lam_u) * p[row]
        for pos in np.flatnonzero(spread > 0):
            base = dense[row, pos] if np.isfinite(dense[row, pos]) else 0.0
            dense[row, pos] = base + lam_u * spread[pos]
    return dense, all_ids


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs(), st.integers(1, 16), st.sampled_from([0.25, 0.5, 1.0]), st.integers(1, 3),
       st.sampled_from([0.5, 1.0]), st.sampled_from([0.0, 0.5]), st.booleans(),
       st.booleans(), st.integers(0, 3), st.sampled_from([0, 0, 1.5, 2]),
       st.sampled_from([0, 0.5, 20.0]), st.sampled_from([0.0, 0.5, 1.0]))
def test_recommend_equals_a_dense_computation_of_s(log, m, personal, window, decay,
                                                   phi_decay, after_fit, exclude_seen, seed,
                                                   phi_min_count, popularity, coengagement):
    train, interests, chunk = log
    model = MiCRO(personal=personal, popularity=popularity, coengagement=coengagement,
                  personal_window=window, personal_decay=decay, phi_decay=phi_decay,
                  phi_min_count=phi_min_count, random_state=seed).fit(
                      train, item_interest=interests)
    given_logs = train if after_fit else np.vstack([train, chunk])
    if not after_fit:
        model.partial_fit(chunk)
    users = np.append(model.user_ids_.ids, 99)
    items, scores = model.recommend(users, m, exclude_seen=exclude_seen)
    dense, all_ids = dense_personal_scores(model, users, given_logs, personal, coengagement)
    if exclude_seen:
        for row, user in enumerate(users):
            seen = np.isin(all_ids, given_logs[given_logs[:, 0] == user, 1])
            dense[row, seen] = -np.inf
    for row in range(users.shape[0]):
        n_ranked = min(m, int(np.isfinite(dense[row]).sum()))
        got_items, got_scores = items[row, :n_ranked], scores[row, :n_ranked]
        # every slot holds a distinct item, scored as the dense computation
        assert np.unique(got_items).shape[0] == n_ranked
        position = model.item_ids_.lookup(got_items)
        assert (position >= 0).all()
        np.testing.assert_allclose(got_scores, dense[row, position], rtol=1e-6, atol=1e-12)
        # and they are its best n_ranked, best first: the same answer up to ties
        best = np.sort(dense[row])[::-1][:n_ranked]
        np.testing.assert_allclose(got_scores, best, rtol=1e-6, atol=1e-12)
        assert (items[row, n_ranked:] == -1).all() and np.isneginf(scores[row, n_ranked:]).all()


def wide_interests_log(n_interests=130, n_users=300, n_items=60, seed=0):
    """A log of K = ``n_interests`` > 64 interests, where interests ``k`` and ``k + 64``
    share a bit of the threshold kernel's masks: user u's support is ``{a, a + 64}`` (and
    ``a + 128`` when below K) for ``a = u % 66``, from one training item per interest;
    in the chunk after, every user engages 5 of ``n_items`` new items, so each new item
    holds counts in many interests, pairs sharing a bit among them. Returns the training
    log, the training items' interests and the chunk."""
    rng = np.random.default_rng(seed)
    train = []
    for u in range(n_users):
        a = u % 66
        for k in (a, a + 64, a + 128):
            if k < n_interests:
                train.append((u, 10_000 + k, 0))
    chunk = [(u, 20_000 + int(i), 1) for u in range(n_users)
             for i in rng.choice(n_items, 5, replace=False)]
    train_items = 10_000 + np.arange(n_interests)
    return np.array(train), (train_items, np.arange(n_interests)), np.array(chunk)


@pytest.mark.parametrize("personal, popularity", [(0, 0), (0.3, 0), (0.3, 2.0)])
def test_recommend_over_more_than_64_interests_equals_a_dense_computation(personal,
                                                                          popularity):
    """Through `recommend`, K = 130: items in interests ``k`` and ``k + 64`` (the same
    mask bit), for users of both, are scored as the dense computation of ``s(i)``."""
    train, interests, chunk = wide_interests_log()
    model = MiCRO(personal=personal, popularity=popularity, phi_decay=0,
                  random_state=0).fit(train, item_interest=interests).partial_fit(chunk)
    k = np.repeat(np.arange(model.n_interests_), np.diff(model.phi_indptr_))
    pairs = set(zip(model.phi_item_.tolist(), k.tolist(), strict=True))
    assert any((i, kk + 64) in pairs for i, kk in pairs), "items of k and k + 64"
    users = np.append(np.arange(0, 300, 7), 10**6)
    m = 12
    items, scores = model.recommend(users, m)
    dense, _ = dense_personal_scores(model, users, np.vstack([train, chunk]), personal)
    for row in range(users.shape[0]):
        position = model.item_ids_.lookup(items[row])
        assert (position >= 0).all() and np.unique(items[row]).shape[0] == m
        np.testing.assert_allclose(scores[row], dense[row, position], rtol=1e-6, atol=1e-12)
        np.testing.assert_allclose(scores[row], np.sort(dense[row])[::-1][:m], rtol=1e-6,
                                   atol=1e-12)


def unlucky_sample_log(n_items=CUT_SAMPLE * 10):
    """A log whose latest chunk gives the top-m kernels' sampled cut too high: one interest,
    every user's support; ``n_items`` items, every tenth engaged 10 to 19 times and the
    others 1 to 9 times, numbered so that the strided sample of `CUT_SAMPLE` scores reads
    the tenths only. User 1000 has recent items of the training chunk (outside the latest
    one). Returns the log and the training items' interests."""
    item = np.arange(n_items)
    count = np.where(item % 10 == 0, 10 + (item // 10) % 10, 1 + item % 9)
    engaged = np.repeat(item, count)
    chunk = np.column_stack([np.arange(engaged.shape[0]) % 200, engaged,
                             np.ones_like(engaged)])
    train = [(u, 10**6, 0) for u in range(200)]
    train += [(1000, 10**6 + j, 0) for j in range(6)] + [(1000, 10**6 + 1, 0)]
    train_items = np.arange(10**6, 10**6 + 6)
    return np.array(train), (train_items, np.zeros(6, np.int64)), chunk


@pytest.mark.parametrize("personal", [0, 0.5])
@pytest.mark.parametrize("m", [100, 300])
def test_recommend_past_the_sampled_cut_equals_a_dense_computation(personal, m):
    """Through `recommend`, a chunk of 5,120 candidates (more than twice `CUT_SAMPLE`, and
    16 times m) is ranked with a sampled cut; the sample reads only the best tenth of the
    items, so fewer than m reach the cut and the rest must come from the second pass below
    it. The answer is the dense computation's best m, scored as it scores them."""
    train, interests, chunk = unlucky_sample_log()
    model = MiCRO(personal=personal, phi_decay=0, random_state=0).fit(
        train, item_interest=interests).partial_fit(chunk)
    users = np.array([1000, 0, 7])
    items, scores = model.recommend(users, m)
    dense, _ = dense_personal_scores(model, users, np.vstack([train, chunk]), personal)
    for row in range(users.shape[0]):
        position = model.item_ids_.lookup(items[row])
        assert (position >= 0).all() and np.unique(items[row]).shape[0] == m
        np.testing.assert_allclose(scores[row], dense[row, position], rtol=1e-6, atol=1e-12)
        np.testing.assert_allclose(scores[row], np.sort(dense[row])[::-1][:m], rtol=1e-6,
                                   atol=1e-12)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs(), st.integers(1, 12), st.sampled_from([0.0, 0.5]), st.booleans(),
       st.integers(0, 3))
def test_users_without_a_recent_item_get_the_papers_answer(log, m, phi_decay, exclude_seen,
                                                          seed):
    train, interests, chunk = log
    paper = MiCRO(personal=0, popularity=0, phi_decay=phi_decay, random_state=seed).fit(
        train, item_interest=interests)
    personal = MiCRO(personal=0.5, popularity=0, personal_window=1, phi_decay=phi_decay,
                     random_state=seed).fit(train, item_interest=interests)
    paper.partial_fit(chunk)
    personal.partial_fit(chunk)
    # with a window of one chunk, only the latest chunk's users have recent items
    users = np.append(np.setdiff1d(paper.user_ids_.ids, chunk[chunk[:, 2] == chunk[:, 2].max(),
                                                                 0]), 99)
    a = paper.recommend(users, m, exclude_seen=exclude_seen)
    b = personal.recommend(users, m, exclude_seen=exclude_seen)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_the_papers_model_is_one_setting_away_and_learned_zero():
    # no (user, item) pair of TRAIN's last chunk repeats one of the chunk before
    learned = fitted()
    assert (learned.personal, learned.popularity, learned.phi_decay) == (
        "learned", "learned", "auto")
    assert learned.personal_weight_ == 0.0 and learned.phi_decay_ == 0.0
    assert learned.popularity_weight_ == 0.0
    paper = fitted(personal=0, popularity=0, phi_decay=0)
    for model in (learned, paper):
        model.partial_fit(CHUNK)
    assert state_differences(learned, paper,
                             ignore=("personal", "popularity", "phi_decay")) == []
    users = [0, 1, 2, 3, 99]
    for exclude_seen in (False, True):
        a = learned.recommend(users, 6, exclude_seen=exclude_seen)
        b = paper.recommend(users, 6, exclude_seen=exclude_seen)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(1, 15), st.integers(0, 80), st.integers(0, 40),
       st.integers(-1, 3), st.integers(0, 2**32 - 1))
def test_merging_a_chunk_into_the_recent_items_equals_sorting_them_all(
        n_users, n_items, n_old, n_new, oldest, seed):
    # partial_fit merges a chunk's entries into the kept ones (`merge_recent`) instead of
    # sorting them all again (`recent_items`): the same arrays, bit for bit
    rng = np.random.default_rng(seed)
    old = _micro_state.recent_items(
        rng.integers(0, n_users, n_old), rng.integers(0, n_items, n_old),
        rng.integers(0, 5, n_old), rng.random(n_old).astype(np.float32), n_users)
    user = np.repeat(np.arange(n_users), np.diff(old[0]))
    keep = old[2] > oldest
    kept = (user[keep], old[1][keep], old[2][keep], old[3][keep] * np.float32(0.7))
    new_user = rng.integers(0, n_users + 2, n_new)  # users first seen in the chunk too
    new_item = rng.integers(0, n_items + 3, n_new)
    ones = np.ones(n_new, np.float32)
    want = _micro_state.recent_items(
        *(np.concatenate([a, b]) for a, b in
          zip(kept, (new_user, new_item, np.full(n_new, 5), ones), strict=True)),
        n_users + 2)
    got = _micro_state.merge_recent(*kept, _micro_state.recent_items(
        new_user, new_item, np.full(n_new, 5), ones, n_users + 2))
    for a, b in zip(want, got, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def test_recent_items_are_a_recount_of_the_window_after_every_chunk():
    log = np.vstack([TRAIN, CHUNK, [[0, 30, 4], [0, 10, 4], [4, 30, 4]],
                     [[1, 31, 5], [0, 30, 5]]])
    model = fitted(personal=0.5, personal_window=2, personal_decay=0.25)
    for chunk in (None, 2, 4, 5):
        if chunk is not None:
            before = {name: getattr(model, name).copy() for name in
                      ("recent_indptr_", "recent_item_", "recent_chunk_", "recent_weight_")}
            kept = {name: getattr(model, name) for name in before}
            model.partial_fit(log[log[:, 2] == chunk])
            # replaced, not modified in place
            for name in before:
                np.testing.assert_array_equal(kept[name], before[name])
        given = log[log[:, 2] <= model.latest_chunk_]
        users = model.user_ids_.ids
        indptr = model.recent_indptr_
        assert indptr.shape == (len(users) + 1,)
        assert model.recent_item_.dtype == np.int32 and model.recent_weight_.dtype == np.float32
        for row, user in enumerate(users):
            span = slice(indptr[row], indptr[row + 1])
            got = {}
            for item, c, w in zip(model.item_ids_.ids[model.recent_item_[span]],
                                  model.recent_chunk_[span], model.recent_weight_[span],
                                  strict=True):
                got[(int(item), int(c))] = float(w)
            want = {}
            mine = given[(given[:, 0] == user) & (given[:, 2] > model.latest_chunk_ - 2)]
            for _, item, c in mine:
                want[(item, c)] = want.get((item, c), 0.0) + 0.25 ** (model.latest_chunk_ - c)
            assert got.keys() == want.keys()
            np.testing.assert_allclose([got[k] for k in want], list(want.values()), rtol=1e-6)


def test_recent_items_not_in_the_latest_chunk_are_recommended():
    model = fitted(personal=0.5)
    model.partial_fit(CHUNK)
    # user 0 engaged 11 and 12 in training; neither is in chunk 2
    items, scores = model.recommend([0], 6)
    assert {11, 12} <= set(items[0].tolist())
    paper = fitted().partial_fit(CHUNK)
    assert not {11, 12} & set(paper.recommend([0], 6)[0][0].tolist())


class Injected(Exception):
    """The failure the test injects."""


@pytest.mark.parametrize("n_call", [1, 2])
def test_partial_fit_is_all_or_nothing_with_recent_items(monkeypatch, n_call):
    X_train, X_next = make_log(5, n_chunks=8, n_train=4, as_frame=True)
    model = Pipeline([("embed", FixedEmbedder()),
                      ("interests", SphericalKMeans(n_clusters=3, random_state=0)),
                      ("micro", MiCRO(personal=0.5, phi_decay="auto", random_state=0))])
    model.fit(X_train)
    micro = model[-1]
    assert micro.recent_item_.shape[0] > 0
    untouched = pickle.loads(pickle.dumps(micro))
    original = MiCRO._set_chunk
    calls = {"n": 0}

    def failing(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == n_call:
            raise Injected
        return original(self, *args, **kwargs)

    monkeypatch.setattr(MiCRO, "_set_chunk", failing)
    with pytest.raises(Injected):
        micro.partial_fit(X_next)
    assert state_differences(micro, untouched) == []
    monkeypatch.undo()
    micro.partial_fit(X_next)
    untouched.partial_fit(X_next)
    assert state_differences(micro, untouched) == []
    users = np.append(X_next.user.unique(), -1)
    for exclude_seen in (False, True):
        a = micro.recommend(users, 15, exclude_seen=exclude_seen)
        b = untouched.recommend(users, 15, exclude_seen=exclude_seen)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


def test_pickle_round_trip_with_recent_items():
    model = fitted(personal=0.4, phi_decay="auto").partial_fit(CHUNK)
    back = pickle.loads(pickle.dumps(model))
    assert state_differences(model, back) == []
    for exclude_seen in (False, True):
        a = model.recommend([0, 1, 2, 3, 99], 7, exclude_seen=exclude_seen)
        b = back.recommend([0, 1, 2, 3, 99], 7, exclude_seen=exclude_seen)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
    back.partial_fit(np.array([[0, 11, 3], [5, 20, 3]]))
    model.partial_fit(np.array([[0, 11, 3], [5, 20, 3]]))
    assert state_differences(model, back) == []


def _reference_phi_decay(log, grid, *, m=100, last_chunks=8, min_mass=0.01):
    """The choice of ``phi_decay="auto"`` computed the slow way: for each of the last
    ``last_chunks`` chunks ``c``, items ranked by their counts in the chunks before, each
    weighted ``decay ** age`` (counts below ``min_mass`` dropped); a decay's score is the
    mean recall@m of that ranking over the (user, chunk) points of those chunks."""
    item = np.unique(log.item, return_inverse=True)[1].ravel().astype(np.int64)
    user = np.unique(log.user, return_inverse=True)[1].ravel().astype(np.int64)
    chunk = np.asarray(log.chunk).astype(np.int64)
    n_items = int(item.max()) + 1
    last = int(chunk.max())
    chunks = [c for c in range(last - last_chunks + 1, last + 1) if (chunk == c - 1).any()]
    scores = {}
    for decay in grid:
        back = 0 if decay <= 0 else int(np.floor(np.log(min_mass) / np.log(decay)))
        recalls = []
        for c in chunks:
            before = (chunk < c) & (chunk >= c - 1 - back)
            weight = float(decay) ** (c - 1 - chunk[before]).astype(np.float64)
            count = np.bincount(item[before], weights=weight, minlength=n_items)
            top = np.argsort(-count, kind="stable")[:m]
            top = top[count[top] > 0]
            now = chunk == c
            pair = np.unique(user[now] * n_items + item[now])
            hit = np.isin(pair % n_items, top)
            u = np.unique(pair // n_items, return_inverse=True)[1].ravel()
            recalls.append(np.bincount(u, weights=hit) / np.bincount(u))
        scores[float(decay)] = float(np.concatenate(recalls).mean())
    return max(scores, key=scores.get), scores


def _interests_of(log, n_interests=8):
    items = np.unique(log.item)
    return items, items % n_interests


@pytest.mark.parametrize("seed", [0, 1])
def test_auto_equals_the_reference(seed):
    log = make_engagements(n_users=300, n_items=900, n_chunks=12, n_interests=8,
                           n_engagements=6000, random_state=seed)
    model = MiCRO(personal="learned", phi_decay="auto", personal_window=4, random_state=0)
    model.fit(log, item_interest=_interests_of(log))
    assert model.phi_decay_ == _reference_phi_decay(log, (0.0, 0.1, 0.25, 0.5, 0.75, 0.9))[0]


@pytest.mark.parametrize(("seed", "m", "shuffle"), [(0, 100, False), (1, 5, True),
                                                     (2, 1, False)])
def test_auto_scores_equal_the_reference(seed, m, shuffle):
    """Every decay's mean recall, counted once per chunk, equals the reference's, which
    counts the log again for each decay and chunk (a small m makes ties at the cut)."""
    log = make_engagements(n_users=300, n_items=900, n_chunks=12, n_interests=8,
                           n_engagements=6000, random_state=seed)
    if shuffle:  # rows in any order
        log = log.take(np.random.default_rng(seed).permutation(len(log)))
    grid = _held_out.PHI_DECAY_GRID
    _, expected = _reference_phi_decay(log, grid, m=m)
    item = np.unique(log.item, return_inverse=True)[1].ravel()
    user = np.unique(log.user, return_inverse=True)[1].ravel()
    found = _held_out.phi_decay_recalls(user, item, np.asarray(log.chunk),
                                            int(item.max()) + 1, grid, m=m)
    np.testing.assert_allclose(found, [expected[d] for d in grid], rtol=1e-12)


@given(st.lists(st.integers(0, 4), max_size=40), st.integers(1, 12))
def test_top_m_mask_is_the_stable_argsorts_top_m(counts, m):
    score = np.asarray(counts, np.float64)
    top = np.argsort(-score, kind="stable")[:m]
    expected = np.zeros(score.shape[0], bool)
    expected[top[score[top] > 0]] = True
    np.testing.assert_array_equal(_held_out.top_m_mask(score, m), expected)


def test_fit_says_what_it_chose_when_verbose(capsys):
    log = make_engagements(n_users=100, n_items=300, n_chunks=8, n_interests=4,
                           n_engagements=2000, random_state=0)
    model = MiCRO(random_state=0, verbose=1).fit(log, item_interest=_interests_of(log, 4))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"[MiCRO] fit: phi_decay {model.phi_decay_} chosen in ")
    assert lines[1].startswith(
        f"[MiCRO] fit: personal weight {model.personal_weight_}, popularity weight "
        f"{model.popularity_weight_}, co-engagement {model.coengagement_} chosen in ")
    assert lines[2].startswith(f"[MiCRO] fit: live weight {model.live_weight_} chosen in ")
    MiCRO(personal=0, popularity=0, coengagement=0, phi_decay=0, live_weight=0,
          random_state=0, verbose=1).fit(log, item_interest=_interests_of(log, 4))
    assert capsys.readouterr().out == ""


@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 5), st.integers(7, 9)),
                max_size=40))
def test_stable_order_is_the_lexsort(rows):
    columns = list(np.asarray(rows, np.int64).reshape(-1, 3).T)
    np.testing.assert_array_equal(_micro_state.stable_order(*columns),
                                  np.lexsort(columns[::-1]))


# small grids for the brute force: each pair is a fit per held-out chunk
SMALL_GRID = (0.0, 0.2, 0.5)
SMALL_POPULARITY_GRID = (0.0, 0.3, 10.0)


def _selection(model, log, grid=_held_out.PERSONAL_GRID,
               popularity_grid=_held_out.POPULARITY_GRID, metric="recall", max_users=10**9,
               coengagement_grid=(0.0,)):
    """`select_blend_weights` on ``log`` with ``model``'s settings, every user ranked
    (or ``max_users`` of them per held-out chunk)."""
    u = model.user_ids_.lookup(log.user)
    i = model.item_ids_.lookup(log.item)
    z = model.item_interest_[i]
    indptr, k, count = _micro_state.counts_csr(u, z, len(model.user_ids_), model.n_interests_)
    training = _held_out.TrainingLog(u, i, np.asarray(log.chunk), z, indptr, k, count,
                                         len(model.item_ids_), model.n_interests_)
    return _held_out.select_blend_weights(
        training, grid, popularity_grid, coengagement_grid, alpha=model.alpha, beta=model.beta,
        phi_decay=model.phi_decay_, window=model.personal_window,
        decay=model.personal_decay, min_count=model.phi_min_count, metric=metric,
        max_users=max_users)


def _brute_force_selection(log, interests, model, grid, popularity_grid, metric,
                           max_users=None, coengagement_grid=(0.0,)):
    """Each of the last 4 chunks held out: MiCRO fitted on the chunks before it with each
    triple of weights (the paper's model for (0, 0, 0)), its recommend scored on the users
    with a recent item or, with a popularity weight in the grid, any engagement before,
    the triple chosen by the documented rule. With ``max_users``, only that many of those
    users are scored per chunk, evenly spread over their indices in ``model`` (each chunk
    must hold more)."""
    from sklearn_micro.metrics import mrr_at, recall_at

    pairs = [(lam, w, g) for g in coengagement_grid for w in popularity_grid for lam in grid]
    chunks = np.unique(log.chunk)
    sums = np.zeros((len(pairs), 2))
    n_points = 0
    for c, before in zip(chunks[1:][-4:], chunks[:-1][-4:], strict=True):
        train = log.take(np.flatnonzero(log.chunk <= before))
        now = log.take(np.flatnonzero(log.chunk == c))
        window = (train.chunk > before - model.personal_window)
        ranked = train.user if max(popularity_grid) > 0 else train.user[window]
        users = np.intersect1d(np.unique(now.user), np.unique(ranked))
        if max_users is not None:
            assert users.shape[0] > max_users, "the sample must run"
            by_index = users[np.argsort(model.user_ids_.lookup(users))]
            users = by_index[[round(j * (users.shape[0] - 1) / (max_users - 1))
                              for j in range(max_users)]]
        relevant = [set(now.item[now.user == user].tolist()) for user in users]
        for g, (lam, w, share) in enumerate(pairs):
            fitted_before = MiCRO(personal=lam, popularity=w, coengagement=share,
                                  personal_window=model.personal_window,
                                  personal_decay=model.personal_decay,
                                  phi_decay=model.phi_decay_,
                                  phi_min_count=model.phi_min_count,
                                  ).fit(train, item_interest=interests)
            items = fitted_before.recommend(users, 100)[0]
            sums[g] += [recall_at(items, relevant, 100).sum(), mrr_at(items, relevant, 100).sum()]
        n_points += users.shape[0]
    scores = {pair: tuple(sums[g] / n_points) for g, pair in enumerate(pairs)}
    allowed = [pair for pair in scores
               if scores[pair][0] >= _held_out.RECALL_KEPT * scores[pairs[0]][0]]
    if metric == "mrr":
        best = max(allowed, key=lambda t: (scores[t][1], -t[2], -t[1], -t[0]))
    else:
        best = max(allowed, key=lambda t: (*scores[t], -t[2], -t[1], -t[0]))
    return best, scores


@pytest.mark.parametrize("seed, n_interests, phi_min_count, metric, coengagement_grid",
                         [(0, 8, 0, "mrr", (0.0,)), (1, 40, 0, "recall", (0.0,)),
                          (2, 8, 0, "mrr", (0.0,)), (0, 8, 2, "recall", (0.0,)),
                          (1, 40, 3, "mrr", (0.0,)), (5, 8, 0, "recall", (0.0, 0.5, 1.0)),
                          (6, 8, 2, "mrr", (0.0, 1.0))])
def test_learned_weights_equal_a_brute_force_selection(seed, n_interests, phi_min_count,
                                                       metric, coengagement_grid):
    log = make_engagements(n_users=200, n_items=600, n_chunks=10, n_interests=8,
                           n_engagements=4000, random_state=seed)
    interests = _interests_of(log, n_interests)
    model = MiCRO(personal="learned", phi_decay="auto", personal_window=3,
                  phi_min_count=phi_min_count, random_state=0)
    model.fit(log, item_interest=interests)
    best, scores = _selection(model, log, SMALL_GRID, SMALL_POPULARITY_GRID, metric,
                              coengagement_grid=coengagement_grid)
    want_best, want_scores = _brute_force_selection(log, interests, model, SMALL_GRID,
                                                    SMALL_POPULARITY_GRID, metric,
                                                    coengagement_grid=coengagement_grid)
    assert best == want_best
    assert scores.keys() == want_scores.keys()
    for pair in scores:
        np.testing.assert_allclose(scores[pair], want_scores[pair], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed, metric", [(3, "recall"), (4, "mrr")])
def test_learned_weights_on_a_sample_of_users_equal_a_brute_force_on_it(seed, metric):
    """Held-out chunks of more users than ``max_users``: the choice scores the sample
    (evenly spread over the users' indices) as the brute force does on the same users."""
    log = make_engagements(n_users=300, n_items=600, n_chunks=8, n_interests=8,
                           n_engagements=4000, random_state=seed)
    interests = _interests_of(log, 8)
    model = MiCRO(personal="learned", phi_decay="auto", personal_window=3, random_state=0)
    model.fit(log, item_interest=interests)
    best, scores = _selection(model, log, SMALL_GRID, SMALL_POPULARITY_GRID, metric,
                              max_users=40)
    want_best, want_scores = _brute_force_selection(log, interests, model, SMALL_GRID,
                                                    SMALL_POPULARITY_GRID, metric,
                                                    max_users=40)
    assert best == want_best
    assert scores.keys() == want_scores.keys()
    for pair in scores:
        np.testing.assert_allclose(scores[pair], want_scores[pair], rtol=1e-12, atol=1e-12)
    everyone = _selection(model, log, SMALL_GRID, SMALL_POPULARITY_GRID, metric)[1]
    assert everyone != scores


def test_learned_weight_is_zero_without_repeats_and_positive_with_only_repeats():
    rng = np.random.default_rng(0)
    users = np.repeat(np.arange(60), 4)
    # every engagement a new item: nothing to come back to
    fresh = np.column_stack([np.tile(users, 8), np.arange(8 * 240),
                             np.repeat(np.arange(8), 240)])
    model = MiCRO(random_state=0).fit(fresh, item_interest=(np.arange(8 * 240),
                                                            rng.integers(0, 5, 8 * 240)))
    assert model.personal_weight_ == 0.0
    # every user engages the same four items of its own in every chunk
    own = np.column_stack([np.tile(users, 8), np.tile(np.arange(240), 8),
                           np.repeat(np.arange(8), 240)])
    model = MiCRO(random_state=0).fit(own, item_interest=(np.arange(240),
                                                          rng.integers(0, 5, 240)))
    assert model.personal_weight_ > 0.0
    best, scores = _selection(model, check_log(own),
                              coengagement_grid=_held_out.COENGAGEMENT_GRID)
    assert best == (model.personal_weight_, model.popularity_weight_, model.coengagement_)
    assert scores[best][0] == 1.0 and scores[best][1] > scores[0.0, 0.0, 0.0][1]


def test_selection_is_deterministic_and_independent_of_threads():
    log = make_engagements(n_users=300, n_items=900, n_chunks=12, n_interests=8,
                           n_engagements=6000, random_state=3)
    fits = [MiCRO(n_jobs=n_jobs, random_state=seed).fit(log, item_interest=_interests_of(log))
            for n_jobs, seed in ((1, 0), (2, 1), (-1, 0))]
    assert len({(model.personal_weight_, model.popularity_weight_, model.coengagement_)
                for model in fits}) == 1


def _personal_pipeline(personal):
    return lambda: Pipeline([("embed", FixedEmbedder()),
                             ("interests", SphericalKMeans(n_clusters=3, random_state=0)),
                             ("micro", MiCRO(personal=personal, phi_decay="auto",
                                             random_state=0))])


@pytest.mark.parametrize("personal", ["learned", 0.5])
# MiCRO's arithmetic goes through no BLAS: answers composed differently are equal arrays
@pytest.mark.parametrize("check", recommender_checks(score_rtol=0), ids=lambda c: c.__name__)
def test_recommender_protocol_with_the_personal_component(check, personal):
    check(_personal_pipeline(personal), *make_log(as_frame=True))


def test_skops_round_trip_with_recent_items(tmp_path):
    pytest.importorskip("skops")
    from sklearn_micro.persistence import dump, load

    model = fitted(personal=0.4, phi_decay="auto").partial_fit(CHUNK)
    back = load(dump(model, tmp_path / "model.skops"))
    assert state_differences(model, back) == []
    a = model.recommend([0, 1, 2, 3, 99], 7)
    b = back.recommend([0, 1, 2, 3, 99], 7)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


@st.composite
def ranking_inputs(draw):
    """Random inputs of the personal kernels, with small integer counts and weights so that
    scores tie often."""
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    n_global = draw(st.integers(2, 60))
    chunk_items = np.sort(rng.choice(n_global, rng.integers(1, n_global + 1), replace=False))
    n_local = chunk_items.shape[0]
    item_pop = rng.integers(1, 4, n_local).astype(np.float64)
    n_k = int(rng.integers(1, 5))
    phi_rows = [np.sort(rng.choice(n_local, rng.integers(0, n_local + 1), replace=False))
                for _ in range(n_k)]
    phi_ptr = np.concatenate([[0], np.cumsum([len(r) for r in phi_rows])]).astype(np.int64)
    phi_item = np.concatenate(phi_rows).astype(np.int64)
    phi_cnt = rng.integers(1, 3, phi_item.shape[0]).astype(np.float64)
    n = int(rng.integers(1, 8))
    q_rows = [rng.choice(n_k, rng.integers(0, n_k + 1), replace=False) for _ in range(n)]
    q_ptr = np.concatenate([[0], np.cumsum([len(r) for r in q_rows])]).astype(np.int64)
    q_k = np.concatenate(q_rows).astype(np.int64)
    q_w = rng.choice([0.25, 0.5], q_k.shape[0])
    q_base = rng.choice([0.0, 0.125], n)
    # the popularity term: 1 without interests, the blend's weight (often 0) with them
    q_share = np.where(np.diff(q_ptr) == 0, 1.0, rng.choice([0.0, 0.0, 0.5, 4.0], n))
    r_rows = [np.sort(rng.choice(n_global, rng.integers(0, min(4, n_global + 1)), replace=False))
              for _ in range(n)]
    r_ptr = np.concatenate([[0], np.cumsum([len(r) for r in r_rows])]).astype(np.int64)
    r_item = np.concatenate(r_rows).astype(np.int64)
    r_w = rng.choice([0.25, 0.5, 1.0], r_item.shape[0])
    lam = rng.choice([0.0, 0.25, 0.5], n)
    seen_rows = [np.sort(rng.choice(n_global, rng.integers(0, 3), replace=False))
                 for _ in range(n)]
    seen_ptr = np.concatenate([[0], np.cumsum([len(r) for r in seen_rows])]).astype(np.int64)
    seen_items = np.concatenate(seen_rows).astype(np.int64)
    pop_order = np.lexsort((chunk_items, -item_pop))
    return dict(q_ptr=q_ptr, q_k=q_k, q_w=q_w, q_base=q_base, q_share=q_share, lam=lam,
                r_ptr=r_ptr, r_item=r_item, r_w=r_w, phi_ptr=phi_ptr, phi_item=phi_item,
                phi_cnt=phi_cnt, item_pop=item_pop, item_share=item_pop / item_pop.sum(),
                chunk_items=chunk_items, pop_order=pop_order, seen_ptr=seen_ptr,
                seen_items=seen_items,
                # a small m against many candidates: a cut that few reach
                m=int(rng.integers(1, 3) if rng.random() < 0.3 else rng.integers(1, n_global + 2)))


def sorted_candidates(x, r, lam):
    """Every candidate of row r with its score, best first: the order of ranking, from a
    sort of all of them."""
    acc = np.zeros(x["chunk_items"].shape[0])
    for q in range(x["q_ptr"][r], x["q_ptr"][r + 1]):
        k, w = x["q_k"][q], x["q_w"][q]
        for p in range(x["phi_ptr"][k], x["phi_ptr"][k + 1]):
            acc[x["phi_item"][p]] += w * x["phi_cnt"][p]
    recent = dict(zip(x["r_item"][x["r_ptr"][r]:x["r_ptr"][r + 1]].tolist(),
                      x["r_w"][x["r_ptr"][r]:x["r_ptr"][r + 1]].tolist(), strict=True))
    keep = 1.0 - lam
    rows = []
    for li, item in enumerate(x["chunk_items"].tolist()):
        s = keep * (x["q_base"][r] + x["q_share"][r] * x["item_share"][li] + acc[li]) \
            + lam * recent.pop(item, 0.0)
        rows.append((-s, -x["item_pop"][li], item))
    rows += [(-(lam * w), -0.0, item) for item, w in recent.items()]
    seen = set(x["seen_items"][x["seen_ptr"][r]:x["seen_ptr"][r + 1]].tolist())
    return [(item, -s, -pop) for s, pop, item in sorted(rows) if item not in seen]


# the candidate scores a row samples for its cut: 0 keeps every candidate; 2 and 4 cut
# these small rows hard (the pass is often made again with no cut); 512, the default,
# leaves them uncut
CUT_SAMPLES = st.sampled_from([0, 2, 4, 512])
# rows of a block and items of a range of the top-m kernels' scratch: 1 to 7 items split
# these small chunks into ranges (each block of rows scattered range by range), the
# default does not
RANGES = st.tuples(st.sampled_from([1, 2, RANGE_ROWS]), st.sampled_from([1, 2, 3, 7,
                                                                          RANGE_ITEMS]))


def grouped_chunk(x, grouped):
    """The chunk of ``x`` as the top-m kernels take it: ``phi_item, phi_cnt, item_pop,
    item_share, chunk_items, local_of, pop_order``, its items numbered interest by interest
    with ``grouped`` (`group_by_interest`), else as drawn."""
    n_local = x["chunk_items"].shape[0]
    if not grouped:
        return (x["phi_item"], x["phi_cnt"], x["item_pop"], x["item_share"], x["chunk_items"],
                np.arange(n_local), x["pop_order"])
    order, local_of, phi_item, phi_cnt = group_by_interest(
        x["phi_ptr"], x["phi_item"], x["phi_cnt"], n_local)
    assert sorted(order.tolist()) == list(range(n_local))
    return (phi_item, phi_cnt, x["item_pop"][order], x["item_share"][order],
            x["chunk_items"][order], local_of, local_of[x["pop_order"]])


def kernel_inputs(x, grouped):
    """The rows, recent items, chunk and seen items of ``x`` as the top-m kernels take
    them (`Queries`, `Recent`, `Chunk`, `ItemRows`), the chunk of `grouped_chunk`."""
    phi_item, phi_cnt, pop, share, local_items, local_of, pop_order = grouped_chunk(x, grouped)
    return (Queries(x["q_ptr"], x["q_k"], x["q_w"], x["q_base"], x["q_share"]),
            Recent(x["lam"], x["r_ptr"], x["r_item"], x["r_w"]),
            Chunk(x["phi_ptr"], phi_item, phi_cnt, pop, share, local_items, x["chunk_items"],
                  local_of, pop_order),
            ItemRows(x["seen_ptr"], x["seen_items"]))


def check_personal_topm(x, sample, grouped, ranges=(RANGE_ROWS, RANGE_ITEMS)):
    """`personal_topm` against a sort of every candidate, and `threshold_topm` against
    it (`check_threshold_topm`). ``ranges``, a block's rows and a range's items, scatters
    the chunk range by range (`_block_candidates`) when a range holds fewer items than
    the chunk."""
    queries, recent, chunk, seen = kernel_inputs(x, grouped)
    items, scores = personal_topm(queries, recent, chunk, seen, x["m"], 2, sample, ranges[1],
                                  ranges[0])
    check_threshold_topm(x, grouped, items, scores)
    for r in range(items.shape[0]):
        want = sorted_candidates(x, r, x["lam"][r])[:x["m"]]
        assert items[r, :len(want)].tolist() == [item for item, _, _ in want]
        assert scores[r, :len(want)].tolist() == [s for _, s, _ in want]
        assert (items[r, len(want):] == -1).all()


def threshold_args(x, grouped=False):
    """`threshold_topm`'s arguments for inputs ``x`` but the number of threads, the
    chunk's items numbered interest by interest with ``grouped``."""
    queries, recent, chunk, seen = kernel_inputs(x, grouped)
    lists = ranked_lists(x["phi_ptr"], chunk.phi_item, chunk.phi_count, chunk.items.shape[0])
    return queries, recent, chunk, lists, seen, x["m"]


def check_threshold_topm(x, grouped, items, scores):
    """`threshold_topm` gives `personal_topm`'s ``items`` and ``scores`` to the last bit,
    and with ``paper`` `mixture_topm`'s lists, scores and counts besides (or alone,
    without ``blended``)."""
    args = (*threshold_args(x, grouped), 2)
    queries, _, chunk, seen = kernel_inputs(x, grouped)
    alone = mixture_topm(queries, chunk, seen, x["m"], 2)
    for paper in (False, True):
        got = threshold_topm(*args, paper=paper)
        np.testing.assert_array_equal(got[0], items)
        np.testing.assert_array_equal(got[1], scores)
        if paper:
            for a, b in zip(got[2:], alone, strict=True):
                np.testing.assert_array_equal(a, b)
        else:
            assert [a.shape[0] for a in got[2:]] == [0, 0, 0]
    # the paper's ranking alone
    got = threshold_topm(*args, paper=True, blended=False)
    assert [a.shape[0] for a in got[:2]] == [0, 0]
    for a, b in zip(got[2:], alone, strict=True):
        np.testing.assert_array_equal(a, b)


def check_mixture_topm(x, sample, grouped, ranges=(RANGE_ROWS, RANGE_ITEMS)):
    queries, _, chunk, seen = kernel_inputs(x, grouped)
    items, scores, n_filled = mixture_topm(queries, chunk, seen, x["m"], 2, sample, ranges[1],
                                           ranges[0])
    for r in range(items.shape[0]):
        acc = np.zeros(x["chunk_items"].shape[0])
        for q in range(x["q_ptr"][r], x["q_ptr"][r + 1]):
            k, w = x["q_k"][q], x["q_w"][q]
            for p in range(x["phi_ptr"][k], x["phi_ptr"][k + 1]):
                acc[x["phi_item"][p]] += w * x["phi_cnt"][p]
        seen = set(x["seen_items"][x["seen_ptr"][r]:x["seen_ptr"][r + 1]].tolist())
        want = sorted((-acc[li], -x["item_pop"][li], item)
                      for li, item in enumerate(x["chunk_items"].tolist())
                      if acc[li] > 0 and item not in seen)[:x["m"]]
        assert n_filled[r] == len(want)
        assert items[r, :len(want)].tolist() == [item for _, _, item in want]
        assert scores[r, :len(want)].tolist() == [x["q_base"][r] - s for s, _, _ in want]
        assert (items[r, len(want):] == -1).all()


@settings(max_examples=200, deadline=None)
@given(ranking_inputs(), CUT_SAMPLES, st.booleans(), RANGES)
def test_personal_topm_equals_a_sort_of_every_candidate(x, sample, grouped, ranges):
    check_personal_topm(x, sample, grouped, ranges)


@settings(max_examples=200, deadline=None)
@given(ranking_inputs(), CUT_SAMPLES, st.booleans(), RANGES)
def test_mixture_topm_equals_a_sort_of_the_interests_items(x, sample, grouped, ranges):
    check_mixture_topm(x, sample, grouped, ranges)


def wide_inputs(seed):
    """Inputs of the personal kernels with more interests than a 64-bit mask has bits
    (so that an item's interests share bits, `ranked_lists`), items in one to all of them
    (the widest get a bitmap, the others are found by bisection or through their own
    entries), rows of up to 40 interests in any order, weights of many digits (sums that
    round) and counts that tie."""
    rng = np.random.default_rng(seed)
    n_k, n_local = 150, 400
    chunk_items = np.sort(rng.choice(3 * n_local, n_local, replace=False))
    degree = np.minimum(n_k, np.ceil(rng.pareto(0.8, n_local)).astype(int) + 1)
    pairs = [(k, li) for li in range(n_local) for k in rng.choice(n_k, degree[li], False)]
    k, li = np.array(pairs).T
    order = np.lexsort((li, k))
    phi_ptr = np.concatenate([[0], np.cumsum(np.bincount(k, minlength=n_k))]).astype(np.int64)
    phi_item = li[order].astype(np.int64)
    phi_cnt = rng.integers(1, 6, phi_item.shape[0]).astype(np.float64)
    n = 60
    q_rows = [rng.choice(n_k, rng.integers(0, 41), replace=False) for _ in range(n)]
    q_ptr = np.concatenate([[0], np.cumsum([len(r) for r in q_rows])]).astype(np.int64)
    q_k = np.concatenate(q_rows).astype(np.int64)
    q_w = rng.random(q_k.shape[0]) / 7
    item_pop = rng.integers(1, 4, n_local).astype(np.float64)
    r_rows = [np.sort(rng.choice(3 * n_local, rng.integers(0, 6), replace=False))
              for _ in range(n)]
    r_ptr = np.concatenate([[0], np.cumsum([len(r) for r in r_rows])]).astype(np.int64)
    seen_rows = [np.sort(rng.choice(chunk_items, rng.integers(0, 20), replace=False))
                 for _ in range(n)]
    seen_ptr = np.concatenate([[0], np.cumsum([len(r) for r in seen_rows])]).astype(np.int64)
    return dict(q_ptr=q_ptr, q_k=q_k, q_w=q_w, q_base=rng.random(n) / 100,
                q_share=np.where(np.diff(q_ptr) == 0, 1.0, rng.choice([0.0, 0.3], n)),
                lam=rng.choice([0.0, 0.2], n), r_ptr=r_ptr,
                r_item=np.concatenate(r_rows).astype(np.int64),
                r_w=rng.random(r_ptr[-1]), phi_ptr=phi_ptr, phi_item=phi_item,
                phi_cnt=phi_cnt, item_pop=item_pop, item_share=item_pop / item_pop.sum(),
                chunk_items=chunk_items, pop_order=np.lexsort((chunk_items, -item_pop)),
                seen_ptr=seen_ptr, seen_items=np.concatenate(seen_rows).astype(np.int64),
                m=int(rng.choice([1, 10, 100, 500])))


@pytest.mark.parametrize("seed", range(6))
def test_threshold_topm_on_items_of_many_interests(seed):
    x = wide_inputs(seed)
    lists = ranked_lists(x["phi_ptr"], x["phi_item"], x["phi_cnt"], 400)
    assert lists.item_bits.shape[0] > 0  # some items have a bitmap
    check_personal_topm(x, CUT_SAMPLE, grouped=seed % 2 == 1)


@pytest.mark.parametrize("seed", range(4))
def test_rows_are_ranked_alike_in_any_order_and_runs(seed):
    # the blocks take the rows in runs of `row_run` of ``order``: any order and run length
    # give each row the list it has alone
    x = wide_inputs(seed)
    args = threshold_args(x)
    want = threshold_topm(*args, 2, paper=True)
    rng = np.random.default_rng(seed)
    n = x["q_ptr"].shape[0] - 1
    for order, row_run, threads in ((rng.permutation(n), 1, 2), (rng.permutation(n), 7, 2),
                                    (np.arange(n)[::-1].copy(), 13, 3)):
        *got, repeated = _threshold_rows(order, *args, threads, True, True, row_run)
        assert repeated == -1
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)


def test_rows_by_main_interest():
    q_ptr = np.array([0, 2, 2, 5, 6, 8], np.int64)
    q_k = np.array([3, 1, 2, 0, 3, 1, 4, 2], np.int64)
    q_w = np.array([0.1, 0.5, 0.2, 0.2, 0.1, 0.3, 0.4, 0.4])
    # main interests: 1, none, 2 (the first of a tie), 1, 4 (the first of a tie)
    assert rows_by_main_interest(q_ptr, q_k, q_w, 5).tolist() == [1, 0, 3, 2, 4]


def test_a_row_naming_an_interest_twice_is_refused():
    x = wide_inputs(0)
    r = int(np.flatnonzero(np.diff(x["q_ptr"]) >= 2)[0])
    q_k = x["q_k"].copy()
    q_k[x["q_ptr"][r] + 1] = q_k[x["q_ptr"][r]]
    args = list(threshold_args(x))
    args[0] = args[0]._replace(interest=q_k)
    with pytest.raises(ValueError, match=f"row {r} names an interest twice"):
        threshold_topm(*args, 2)


def unlucky_sample_inputs(n_local, m, n_recent):
    """One user of one interest whose items are scored so that the strided sample of
    `CUT_SAMPLE` scores takes the best ones only: every tenth item counts 1,000 and more,
    the others 1 to 9. The sample's cut is then reached by a few dozen items. The user's
    ``n_recent`` recent items are outside the chunk and score below every item of it."""
    li = np.arange(n_local)
    counts = np.where(li % 10 == 0, 1000.0 + li, 1.0 + li % 9)
    item_pop = np.ones(n_local)
    one = np.array([0, 1], np.int64)
    return dict(q_ptr=one, q_k=np.zeros(1, np.int64), q_w=np.array([0.5]),
                q_base=np.array([0.125]), q_share=np.zeros(1),
                lam=np.array([0.5 if n_recent else 0.0]),
                r_ptr=np.array([0, n_recent], np.int64),
                r_item=np.arange(n_recent, dtype=np.int64) * 3 + 1,
                r_w=np.full(n_recent, 0.01), phi_ptr=np.array([0, n_local], np.int64),
                phi_item=li.astype(np.int64), phi_cnt=counts, item_pop=item_pop,
                item_share=item_pop / n_local, chunk_items=li * 3,
                pop_order=np.arange(n_local), seen_ptr=np.zeros(2, np.int64),
                seen_items=np.empty(0, np.int64), m=m)


@pytest.mark.parametrize("m, n_recent", [(100, 0), (300, 0), (100, 150)])
def test_a_cut_too_high_is_made_good_by_a_second_pass(m, n_recent):
    # the 512 sampled scores are all of the 1,000s: fewer than m reach the cut (m = 100:
    # 25; m = 300: 65), or, with 150 recent items below every item of the chunk, the
    # heap is full but holds recent items below the cut; either way the items below the
    # cut must be offered in a second pass
    x = unlucky_sample_inputs(CUT_SAMPLE * 10, m, n_recent)
    check_mixture_topm(x, CUT_SAMPLE, grouped=False)
    check_personal_topm(x, CUT_SAMPLE, grouped=False)
    check_mixture_topm(x, CUT_SAMPLE, grouped=False, ranges=(RANGE_ROWS, 1000))
    check_personal_topm(x, CUT_SAMPLE, grouped=False, ranges=(RANGE_ROWS, 1000))


def ranks_inputs(x, data):
    """`personal_ranks`' inputs from ``x`` (`ranking_inputs`): each row's drawn relevant
    items (up to 4, as sorted arrays and an `ItemRows`), the queries, recent items and the
    chunk in its own numbering."""
    n = x["q_ptr"].shape[0] - 1
    n_global = int(max(x["chunk_items"].max(), x["r_item"].max(initial=0))) + 1
    rel_rows = [np.sort(data.draw(st.lists(st.integers(0, n_global), max_size=4, unique=True)))
                for _ in range(n)]
    rel_ptr = np.concatenate([[0], np.cumsum([len(r) for r in rel_rows])]).astype(np.int64)
    relevant = ItemRows(rel_ptr, np.concatenate(rel_rows).astype(np.int64))
    queries, recent, _, _ = kernel_inputs(x, False)
    n_local = x["chunk_items"].shape[0]
    chunk = Chunk(x["phi_ptr"], x["phi_item"], x["phi_cnt"], x["item_pop"], x["item_share"],
                  x["chunk_items"], x["chunk_items"], np.arange(n_local, dtype=np.int32),
                  x["pop_order"])
    return rel_rows, relevant, queries, recent, chunk


@settings(max_examples=200, deadline=None)
@given(ranking_inputs(), st.data(), CUT_SAMPLES)
def test_personal_ranks_equal_the_ranks_of_a_sort(x, data, sample):
    lams = np.array([0.0, 0.25, 0.5, 0.75])
    n = x["q_ptr"].shape[0] - 1
    rel_rows, relevant, queries, recent, chunk = ranks_inputs(x, data)
    hits, rank = personal_ranks(queries, lams, recent, relevant, chunk, x["m"], 2, sample)
    unseen = dict(x, seen_ptr=np.zeros(n + 1, np.int64), seen_items=np.empty(0, np.int64))
    for r in range(n):
        for g, lam in enumerate(lams):
            top = [item for item, _, _ in sorted_candidates(unseen, r, lam)[:x["m"]]]
            found = [j + 1 for j, item in enumerate(top) if item in set(rel_rows[r].tolist())]
            assert hits[r, g] == len(found)
            assert rank[r, g] == (found[0] if found else 0)


@settings(max_examples=200, deadline=None)
@given(ranking_inputs(), st.data())
def test_blend_ranks_equal_personal_ranks_per_popularity_weight_and_a_sort(x, data):
    lams = np.array([0.0, 0.25, 0.5, 0.75])
    n = x["q_ptr"].shape[0] - 1
    rel_rows, relevant, queries, recent, chunk = ranks_inputs(x, data)
    # the rows' own share weights, none, a popularity weight alone and a large one
    share_weights = np.stack([x["q_share"], np.zeros(n), np.full(n, 0.3), np.full(n, 50.0)])
    # a second variant of the recent items, ranked from the same scatter: every other entry,
    # its weights doubled
    keep = np.arange(recent.item.shape[0]) % 2 == 0
    other = Recent(recent.lam, keep_entries(recent.indptr, keep), recent.item[keep],
                   2 * recent.score[keep])
    variants = _held_out._interleaved([recent, other])
    hits, rank = blend_ranks(queries, lams, share_weights, variants, relevant, chunk, x["m"],
                             2, 2)
    for s, rows in enumerate((recent, other)):
        for j, weights in enumerate(share_weights):
            want = personal_ranks(queries._replace(share_weight=weights), lams, rows,
                                  relevant, chunk, x["m"], 2)
            np.testing.assert_array_equal(hits[:, s, j], want[0])
            np.testing.assert_array_equal(rank[:, s, j], want[1])
    hits, rank = hits[:, 0], rank[:, 0]
    unseen = dict(x, seen_ptr=np.zeros(n + 1, np.int64), seen_items=np.empty(0, np.int64))
    for j, weights in enumerate(share_weights):
        for r in range(n):
            for g, lam in enumerate(lams):
                top = [item for item, _, _ in
                       sorted_candidates(dict(unseen, q_share=weights), r, lam)[:x["m"]]]
                found = [t + 1 for t, item in enumerate(top) if item in set(rel_rows[r].tolist())]
                assert hits[r, j, g] == len(found)
                assert rank[r, j, g] == (found[0] if found else 0)
