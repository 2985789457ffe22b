"""The sampler and retrieval against exact answers.

- One Gibbs step on a tiny chunk, drawn many times, against the exact conditional
  ``p(z = k) ∝ (alpha_u[k] + N[u,k]) (beta + N[i,k,t]) / (I_t beta + N[k,t])`` enumerated
  by hand, with a chi-square test, from the kernel and through `partial_fit`; the same
  draws reject a wrong conditional (the denominator left out, or the engagement's own
  assignment left in it).
- ``recommend`` against a dense scan of ``theta @ phi`` over the latest chunk's items, on
  logs drawn by hypothesis: equal up to ties; with ``phi_min_count``, the scan of the
  counts below it taken as 0.
"""

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from sklearn_micro import MiCRO


def gibbs_step_draws(e_user, e_item, supports, carried, *, alpha, beta, n_draws, seed):
    """Draws of the first engagement's interest from repeated sweeps of the sampler kernel.

    The one place this file reaches into the sampler: it lays a chunk out with
    `sklearn_micro.micro._gibbs.build_layout` and calls the sweep kernel on it. ``e_user`` /
    ``e_item`` are the engagements (local users sorted, local items ``0..I_t-1``),
    ``supports[u]`` the interests of user ``u`` and ``carried[u]`` their counts from before
    the chunk. When only the first engagement has more than one interest, each sweep is one
    Gibbs step for it, drawn from its conditional given the others, whatever its current
    value.
    """
    from sklearn_micro._kernels import sampler
    from sklearn_micro.micro._gibbs import build_layout

    sizes = np.array([len(s) for s in supports])
    support_ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    z = np.zeros(len(e_user), np.int32)
    layout, counts = build_layout(
        np.asarray(e_user), np.asarray(e_item), support_ptr, np.concatenate(supports),
        alpha + np.concatenate(carried).astype(np.float64), z,
        n_interests=int(np.concatenate(supports).max()) + 1, n_items=int(max(e_item)) + 1)
    i_beta = layout.n_items * beta
    first = layout.support_ptr[layout.engagement_user[0]]
    draws = np.empty(n_draws, np.int64)
    for d, sweep_seed in enumerate(np.random.SeedSequence(seed).generate_state(n_draws)):
        sampler.sweep_partition(int(sweep_seed), layout.sweep_layout(),
                                counts.sweep_counts(z), beta, i_beta)
        draws[d] = layout.support_interest[first + z[0]]
    return draws


# -- tiny chunks --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TinyChunk:
    """User A (interests 0, 1, 2 with training counts ``carried``) engages local item 0
    once, first; users of one interest each (``only``) fix the item and interest counts
    around it, so a sweep is one Gibbs step for A's engagement."""

    alpha: float
    beta: float
    carried: dict
    engagements: list  # (user, local item), A's first
    only: dict

    def conditional(self, *, with_denominator=True, own=None):
        """p(z = k) of A's engagement given the others, enumerated from the counts; with
        ``own``, the wrong one that leaves A's own assignment ``own`` in ``N[k,t]``."""
        others = self.engagements[1:]
        n_items = len({i for _, i in self.engagements})
        item_k = {k: sum(1 for u, i in others if i == 0 and self.only[u] == k)
                  for k in range(3)}
        k_total = {k: sum(1 for u, _ in others if self.only[u] == k) for k in range(3)}
        weight = np.array([
            (self.alpha + self.carried[k]) * (self.beta + item_k[k])
            / ((n_items * self.beta + k_total[k] + (k == own)) if with_denominator else 1.0)
            for k in range(3)
        ])
        return weight / weight.sum()

    def own_left_in_after_one_sweep(self):
        """The law of A's draw under that wrong conditional, from a uniform start."""
        return np.mean([self.conditional(own=k) for k in range(3)], axis=0)

    def own_left_in_chain(self):
        """The stationary law of repeated steps under that wrong conditional."""
        steps = np.array([self.conditional(own=k) for k in range(3)])
        values, vectors = np.linalg.eig(steps.T)
        law = np.real(vectors[:, np.argmin(np.abs(values - 1))])
        return law / law.sum()


# A with counts 3, 1, 2; B, C and D of interests 0, 1 and 2
TINY = TinyChunk(alpha=0.5, beta=0.1, carried={0: 3, 1: 1, 2: 2},
                 engagements=[("A", 0)] + [("B", 0)] * 2 + [("B", 1)] * 3 + [("C", 0)]
                 + [("D", 2)] * 4,
                 only={"B": 0, "C": 1, "D": 2})
# no engagement but A's in interest 1 and a small beta: A's own assignment, left in N[k,t],
# would weigh I_t beta = 0.03 against 1.03 there, an off-by-one that 1,500 draws see
SHARP = TinyChunk(alpha=0.5, beta=0.01, carried={0: 3, 1: 3, 2: 2},
                  engagements=[("A", 0)] + [("B", 0)] * 2 + [("B", 1)] * 3 + [("D", 0)]
                  + [("D", 2)] * 4,
                  only={"B": 0, "D": 2})


def _chi2_pvalue(draws, p):
    observed = np.bincount(draws, minlength=p.shape[0])
    return chisquare(observed, p * draws.shape[0]).pvalue


def test_exact_conditional_of_the_tiny_chunk():
    # (0.5 + 3)(0.1 + 2)/(0.3 + 5), (0.5 + 1)(0.1 + 1)/(0.3 + 1), (0.5 + 2)(0.1 + 0)/(0.3 + 4)
    weight = np.array([3.5 * 2.1 / 5.3, 1.5 * 1.1 / 1.3, 2.5 * 0.1 / 4.3])
    np.testing.assert_allclose(TINY.conditional(), weight / weight.sum())
    # (0.5 + 3)(0.01 + 2)/(0.03 + 5), (0.5 + 3)(0.01 + 0)/0.03, (0.5 + 2)(0.01 + 1)/(0.03 + 5)
    weight = np.array([3.5 * 2.01 / 5.03, 3.5 * 0.01 / 0.03, 2.5 * 1.01 / 5.03])
    np.testing.assert_allclose(SHARP.conditional(), weight / weight.sum())
    weight[1] = 3.5 * 0.01 / 1.03
    np.testing.assert_allclose(SHARP.conditional(own=1), weight / weight.sum())


def _kernel_draws(tiny, n_draws):
    users = {"A": 0, **{u: j + 1 for j, u in enumerate(tiny.only)}}
    return gibbs_step_draws(
        [users[u] for u, _ in tiny.engagements], [i for _, i in tiny.engagements],
        supports=[[0, 1, 2]] + [[k] for k in tiny.only.values()],
        carried=[[tiny.carried[k] for k in range(3)]] + [[1]] * len(tiny.only),
        alpha=tiny.alpha, beta=tiny.beta, n_draws=n_draws, seed=0)


def test_gibbs_step_matches_the_exact_conditional():
    draws = _kernel_draws(TINY, 60_000)
    assert _chi2_pvalue(draws, TINY.conditional()) > 1e-3
    # the test has the power to see a wrong conditional: the denominator left out, or the
    # engagement's own assignment left in it
    assert _chi2_pvalue(draws, TINY.conditional(with_denominator=False)) < 1e-12
    assert _chi2_pvalue(draws, TINY.own_left_in_chain()) < 1e-6


def _partial_fit_draws(tiny, n_draws):
    """A's interest after one sweep of `partial_fit`, once per seed: fit on a training log
    that gives A its counts, partial_fit the chunk with one sweep, and read A's new count
    from support_count_."""
    ids = {"A": 1, **{u: j + 2 for j, u in enumerate(tiny.only)}}
    train_items = {0: 10, 1: 11, 2: 12}
    train = [(ids["A"], train_items[k], 0) for k, c in tiny.carried.items() for _ in range(c)]
    train += [(ids[u], train_items[k], 0) for u, k in tiny.only.items()]
    chunk = np.array([(ids[u], 100 + i, 1) for u, i in tiny.engagements])
    interests = (list(train_items.values()), list(train_items))
    carried = np.array([tiny.carried[k] for k in range(3)])
    draws = []
    for seed in range(n_draws):
        model = MiCRO(alpha=tiny.alpha, beta=tiny.beta, max_sweeps=1, tol=0,
                      random_state=seed, personal=0, popularity=0,
                      phi_decay=0)
        model.fit(np.array(train), item_interest=interests).partial_fit(chunk)
        a = model.user_ids_.lookup([ids["A"]])[0]
        span = slice(model.support_indptr_[a], model.support_indptr_[a + 1])
        gained = model.support_count_[span] - carried
        assert gained.sum() == 1
        draws.append(model.support_interest_[span][np.argmax(gained)])
    return np.array(draws)


def test_one_sweep_of_partial_fit_draws_from_the_exact_conditional():
    """The same through the public API, on the chunk where an off-by-one in ``N[k,t]``
    shows: the draws follow the exact conditional and reject the one that leaves the
    engagement's own assignment in the denominator."""
    draws = _partial_fit_draws(SHARP, 1500)
    assert _chi2_pvalue(draws, SHARP.conditional()) > 1e-3
    assert _chi2_pvalue(draws, SHARP.own_left_in_after_one_sweep()) < 1e-6
    assert _chi2_pvalue(draws, SHARP.conditional(with_denominator=False)) < 1e-6


# -- recommend against a dense scan -----------------------------------------------------------


def dense_scores(model, users):
    """``theta @ phi`` over the latest chunk's items, dense, from the model's public state:
    ``theta`` from `user_interests`, ``phi[k, i] = (beta + N[i,k,t]) / (I_t beta + N[k,t])``
    from the phi counts, those below ``model.phi_min_count`` taken as 0 (``N[k,t]`` keeps
    them). Returns the scores (n_users, I_t) and the items' external ids."""
    theta = model.user_interests(users).toarray()
    n_items = model.chunk_items_.shape[0]
    counts = np.zeros((model.n_interests_, n_items))
    k = np.repeat(np.arange(model.n_interests_), np.diff(model.phi_indptr_))
    np.add.at(counts, (k, model.phi_item_), model.phi_count_)
    counts[counts < model.phi_min_count] = 0.0
    phi = (model.beta + counts) / (n_items * model.beta + model.interest_count_[:, None])
    return theta @ phi, model.item_ids_.ids[model.chunk_items_]


@st.composite
def logs(draw):
    n_users = draw(st.integers(1, 7))
    n_items = draw(st.integers(1, 10))
    n_interests = draw(st.integers(1, 4))

    def rows(chunk, n_rows, users, items):
        return [(draw(st.sampled_from(users)), draw(st.sampled_from(items)), chunk)
                for _ in range(n_rows)]

    train = []
    for chunk in range(draw(st.integers(1, 3))):
        train += rows(chunk, draw(st.integers(1, 12)), list(range(n_users)),
                      list(range(n_items)))
    items = sorted({i for _, i, _ in train})
    interest = [draw(st.integers(0, n_interests - 1)) for _ in items]
    chunks = []
    start = max(c for _, _, c in train) + 1
    for chunk in range(start, start + draw(st.integers(1, 2))):
        chunks += rows(chunk, draw(st.integers(1, 15)), list(range(n_users + 3)),
                       list(range(n_items + 4)))
    return np.array(train), (items, interest), np.array(chunks)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs(), st.integers(1, 16), st.sampled_from([0.0, 0.5]), st.booleans(),
       st.booleans(), st.integers(0, 3), st.sampled_from([0, 0, 1.5, 2, 3]))
def test_recommend_equals_a_dense_scan_up_to_ties(log, m, phi_decay, after_fit, exclude_seen,
                                                  seed, phi_min_count):
    train, interests, chunk = log
    model = MiCRO(personal=0, popularity=0, phi_decay=phi_decay, phi_min_count=phi_min_count,
                  random_state=seed).fit(train, item_interest=interests)
    given_logs = train if after_fit else np.vstack([train, chunk])
    if not after_fit:
        model.partial_fit(chunk)
    users = model.user_ids_.ids
    items, scores = model.recommend(users, m, exclude_seen=exclude_seen)
    dense, chunk_ids = dense_scores(model, users)
    if exclude_seen:
        seen = np.zeros(dense.shape, bool)
        for row, user in enumerate(users):
            seen[row] = np.isin(chunk_ids, given_logs[given_logs[:, 0] == user, 1])
        dense = np.where(seen, -np.inf, dense)
    has_support = np.diff(model.support_indptr_)[model.user_ids_.lookup(users)] > 0
    for row in np.flatnonzero(has_support):
        n_ranked = min(m, int(np.isfinite(dense[row]).sum()))
        got_items, got_scores = items[row, :n_ranked], scores[row, :n_ranked]
        # every slot holds a distinct item of the latest chunk, scored exactly as the scan
        assert np.unique(got_items).shape[0] == n_ranked
        order = np.argsort(chunk_ids)
        found = np.minimum(np.searchsorted(chunk_ids[order], got_items), order.shape[0] - 1)
        position = order[found]
        assert (chunk_ids[position] == got_items).all()
        np.testing.assert_allclose(got_scores, dense[row, position], rtol=1e-9, atol=1e-15)
        # and the scores are the scan's best n_ranked: the same answer up to ties
        best = np.sort(dense[row])[::-1][:n_ranked]
        np.testing.assert_allclose(got_scores, best, rtol=1e-9, atol=1e-15)
        assert (items[row, n_ranked:] == -1).all() and np.isneginf(scores[row, n_ranked:]).all()


@pytest.mark.parametrize("phi_decay", [0.0, 0.5])
def test_users_without_support_get_the_popularity_share(phi_decay):
    train = np.array([[0, 10, 0], [1, 11, 0]])
    model = MiCRO(personal=0, popularity=0, phi_decay=phi_decay, random_state=0).fit(
        train, item_interest=([10, 11], [0, 1]))
    # user 7 is new and engages a new item only: no interest can be given
    model.partial_fit(np.array([[7, 20, 1], [0, 10, 1], [0, 10, 1], [1, 11, 1]]))
    items, scores = model.recommend([7, 99], 5)
    share = model.chunk_item_count_ / model.chunk_item_count_.sum()
    order = model.popular_order_
    n = order.shape[0]
    for row in range(2):
        np.testing.assert_array_equal(items[row, :n], model.item_ids_.ids[
            model.chunk_items_[order]])
        np.testing.assert_allclose(scores[row, :n], share[order])


@pytest.mark.parametrize("bounds", [(0, 0), None])
def test_recommend_with_more_than_64_interests_equals_a_dense_scan(monkeypatch, bounds):
    """K = 130: the threshold kernel's interest bits (``k % 64``) are shared by interests
    k, k + 64 and k + 128, and items of the latest chunk lie in several of a user's
    interests. ``recommend`` with the lists read for every row (``(0, 0)``) and with the
    kernel chosen by row gives each user the dense scan's scores, best first."""
    from sklearn_micro.micro import _retrieval

    if bounds is not None:
        monkeypatch.setattr(_retrieval, "SCATTER_ENTRIES", bounds)
    rng = np.random.default_rng(7)
    n_users, n_items, K = 300, 500, 130
    rows = np.column_stack([rng.integers(0, n_users, 9000), rng.integers(0, n_items, 9000),
                            np.repeat([0, 1, 2], 3000)])
    items = np.unique(rows[:, 1])
    model = MiCRO(personal=0, popularity=0, phi_decay=0, random_state=0).fit(
        rows[rows[:, 2] < 2], item_interest=(items, rng.integers(0, K, items.shape[0])))
    model.partial_fit(rows[rows[:, 2] == 2])
    users = model.user_ids_.ids
    # the case the bits are for: a user with two interests of the same bit, and an item
    # in two of them
    theta = model.user_interests(users).toarray() > 0
    assert model.n_interests_ == K
    assert any((theta[:, b::64].sum(axis=1) > 1).any() for b in range(64))
    assert (np.bincount(model.phi_item_) > 1).any()
    m = 20
    got_items, got_scores = model.recommend(users, m)
    dense, chunk_ids = dense_scores(model, users)
    lookup = {item: j for j, item in enumerate(chunk_ids.tolist())}
    for row in range(users.shape[0]):
        best = np.sort(dense[row])[::-1][:m]
        np.testing.assert_allclose(got_scores[row], best, rtol=1e-9, atol=1e-15)
        position = [lookup[i] for i in got_items[row].tolist()]
        np.testing.assert_allclose(dense[row, position], got_scores[row], rtol=1e-9,
                                   atol=1e-15)
