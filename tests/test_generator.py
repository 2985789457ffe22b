"""The synthetic generator of sklearn_micro.datasets: the paper's generative model with
ephemeral items, items of lasting and skewed appeal, and users of several interests."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import spearmanr

from sklearn_micro._log import EngagementLog
from sklearn_micro.cli import DEFAULT_LOG
from sklearn_micro.datasets import iter_engagements, make_engagements

SMALL = dict(n_users=300, n_items=300, n_chunks=12, n_interests=6, n_engagements=4500)


@pytest.fixture(scope="module")
def drawn():
    return make_engagements(**SMALL, random_state=3, return_truth=True)


def _assert_same(a, b):
    for c in ("user", "item", "chunk"):
        np.testing.assert_array_equal(getattr(a, c), getattr(b, c))


def test_generator_seeded(drawn):
    log, _ = drawn
    _assert_same(log, make_engagements(**SMALL, random_state=3))
    other = make_engagements(**SMALL, random_state=4)
    assert len(other) != len(log) or not np.array_equal(other.item, log.item)


def test_generator_ids_and_degrees(drawn):
    log, truth = drawn
    assert all(a.dtype == np.int64 for a in (log.user, log.item, log.chunk))
    assert np.all(np.diff(log.chunk) >= 0)
    user_degree = np.bincount(log.user, minlength=SMALL["n_users"])
    item_degree = np.bincount(log.item, minlength=SMALL["n_items"])
    assert user_degree.shape[0] == SMALL["n_users"] and item_degree.shape[0] == SMALL["n_items"]
    assert user_degree.min() >= 1 and user_degree.max() <= 100
    np.testing.assert_array_equal(user_degree, truth.user_degree)
    assert item_degree.min() >= 5
    assert abs(len(log) / SMALL["n_engagements"] - 1) < 0.15
    # users are active in several chunks
    chunks_per_user = np.bincount(np.unique(log.user * 100 + log.chunk) // 100)
    assert np.median(chunks_per_user[user_degree >= 10]) >= 5


def test_generator_items_are_ephemeral(drawn):
    log, truth = drawn
    life = truth.item_death - truth.item_birth + 1
    assert life.min() >= 1 and truth.item_death.max() <= SMALL["n_chunks"] - 1
    early = truth.item_birth < SMALL["n_chunks"] // 2
    assert 1.8 < life[early].mean() < 3.3  # geometric, mean 2.5
    # every engagement's item is alive at its chunk, and is engaged first when it is born
    assert np.all(truth.item_birth[log.item] <= log.chunk)
    assert np.all(log.chunk <= truth.item_death[log.item])
    first = np.full(SMALL["n_items"], SMALL["n_chunks"])
    np.minimum.at(first, log.item, log.chunk)
    np.testing.assert_array_equal(first, truth.item_birth)
    np.testing.assert_array_equal(np.sort(truth.item_birth), truth.item_birth)


def test_generator_truth_is_the_model(drawn):
    log, truth = drawn
    theta = truth.user_interests
    assert theta.format == "csr" and theta.shape == (SMALL["n_users"], SMALL["n_interests"])
    np.testing.assert_allclose(np.asarray(theta.sum(axis=1)).ravel(), 1.0)
    assert set(np.diff(theta.indptr)) <= {1, 2, 3}
    assert truth.item_interest.min() >= 0 and truth.item_interest.max() < SMALL["n_interests"]
    # the interest of each engagement's item is in the user's support
    in_support = np.asarray(theta[log.user, truth.item_interest[log.item]]).ravel() > 0
    assert in_support.mean() > 0.99


def test_iter_engagements_concatenates_to_make_engagements(drawn):
    log, _ = drawn
    chunks = list(iter_engagements(**SMALL, random_state=3))
    assert all(isinstance(c, EngagementLog) and len(np.unique(c.chunk)) == 1 for c in chunks)
    joined = EngagementLog(*(np.concatenate([getattr(c, f) for c in chunks])
                             for f in ("user", "item", "chunk")))
    _assert_same(joined, log)


def test_generator_interest_mean_and_generator_seed():
    log, truth = make_engagements(200, 100, 5, 8, interests_per_user=2.5, item_lifetime=1,
                                  random_state=np.random.default_rng(0), return_truth=True)
    # items live one chunk; in the last chunk an interest's latest item may live on to it
    lived_on = truth.item_death != truth.item_birth
    assert np.all(truth.item_death[lived_on] == 4) and lived_on.mean() < 0.1
    assert np.diff(truth.user_interests.indptr).max() <= 8


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_users": 0}, "'n_users' parameter"),
        ({"beta": 0.0}, "'beta' parameter"),
        ({"user_degree": (5, 2)}, "user_degree must be a range"),
        ({"interests_per_user": (4, 2)}, "interests_per_user must be a range"),
        ({"interests_per_user": (20, 30)}, "at most n_interests=10"),
        ({"n_engagements": 10**9}, "strictly within user_degree"),
        ({"n_items": 5000}, "n_items \\* min_item_degree = 25000"),
    ],
)
def test_generator_parameter_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_engagements(**{"random_state": 0, **kwargs})
    with pytest.raises(ValueError, match=match):
        iter_engagements(**{"random_state": 0, **kwargs})


def test_a_draw_whose_interests_have_no_items_says_so():
    # 5 items for 12 interests: most interests never have an item, and their users'
    # engagements go elsewhere
    with pytest.warns(UserWarning, match="outside their user's support"):
        log = make_engagements(100, 5, 3, 12, n_engagements=1500, random_state=0)
    assert log.item.max() < 5


# a draw whose interests never had an item warns (above); the invariants hold
@pytest.mark.filterwarnings("ignore:.*outside their user's support:UserWarning")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n_users=st.integers(60, 400),
    n_chunks=st.integers(1, 15),
    n_interests=st.integers(1, 12),
    lifetime=st.floats(1, 6),
    min_item_degree=st.integers(1, 6),
    seed=st.integers(0, 2**16),
)
def test_generator_invariants(n_users, n_chunks, n_interests, lifetime, min_item_degree, seed):
    n_engagements = 15 * n_users
    n_items = max(1, n_engagements // (3 * min_item_degree))
    log, truth = make_engagements(
        n_users, n_items, n_chunks, n_interests, item_lifetime=lifetime,
        user_degree=(1, 60), n_engagements=n_engagements, min_item_degree=min_item_degree,
        random_state=seed, return_truth=True,
    )
    np.testing.assert_array_equal(np.bincount(log.user, minlength=n_users), truth.user_degree)
    assert np.bincount(log.item, minlength=n_items).min() >= min_item_degree
    assert np.bincount(log.item).shape[0] == n_items
    assert np.all(truth.item_birth[log.item] <= log.chunk)
    assert np.all(log.chunk <= truth.item_death[log.item])
    assert log.chunk.min() >= 0 and log.chunk.max() < n_chunks


# --------------------------------------------------------------------------------------------
# Users of several interests, items of lasting and skewed appeal
# --------------------------------------------------------------------------------------------

MEDIUM = dict(n_users=2000, n_items=3000, n_chunks=8, n_interests=30, n_engagements=60000)


def _draw(**kwargs):
    return make_engagements(**MEDIUM, random_state=0, return_truth=True, **kwargs)


def _top_share_next_chunk(log, n_items, top=20):
    """The share of each chunk's engagements that go to the previous chunk's ``top`` most
    engaged items (what a popularity baseline retrieves), averaged over chunks."""
    shares = []
    for t in range(1, log.chunk.max() + 1):
        before = np.bincount(log.item[log.chunk == t - 1], minlength=n_items)
        now = np.bincount(log.item[log.chunk == t], minlength=n_items)
        shares.append(now[np.argsort(-before, kind="stable")[:top]].sum() / now.sum())
    return float(np.mean(shares))


def _top_decile_share_within_interest(log, truth, n_items):
    """The share of an (interest, chunk)'s engagements that its top tenth of items takes."""
    shares = []
    for t in range(log.chunk.max() + 1):
        count = np.bincount(log.item[log.chunk == t], minlength=n_items)
        for k in np.unique(truth.item_interest):
            x = np.sort(count[(truth.item_interest == k) & (count > 0)])[::-1]
            if x.size >= 10:
                shares.append(x[: x.size // 10].sum() / x.sum())
    return float(np.mean(shares))


@pytest.mark.parametrize("mean", [2.0, 6.0])
def test_generator_users_have_the_interests_asked(mean):
    log, truth = _draw(interests_per_user=mean)
    size = np.diff(truth.user_interests.indptr)
    assert np.all(size <= truth.user_degree) and size.min() >= 1
    heavy = truth.user_degree >= 30
    assert abs(size[heavy].mean() - mean) < 0.3 * mean  # 1 + Poisson(mean - 1)
    # the interests show in the engagements: heavy users engage with several of them
    pairs = np.unique(log.user * MEDIUM["n_interests"] + truth.item_interest[log.item])
    engaged = np.bincount(pairs // MEDIUM["n_interests"], minlength=MEDIUM["n_users"])
    assert np.median(engaged[heavy]) >= mean - 1


def test_generator_appeal_skews_items_within_an_interest():
    flat_log, flat = _draw()
    log, truth = _draw(item_appeal=1.7)
    np.testing.assert_array_equal(flat.item_appeal, 1.0)
    assert truth.item_appeal.shape == (MEDIUM["n_items"],)
    assert 0.8 < np.median(truth.item_appeal) < 1.25 and truth.item_appeal.max() > 20
    degree = np.bincount(log.item, minlength=MEDIUM["n_items"])
    # an item's appeal sets its degree, beyond its interest's demand
    assert spearmanr(truth.item_appeal, degree).statistic > 0.5
    skew = _top_decile_share_within_interest(log, truth, MEDIUM["n_items"])
    flat_skew = _top_decile_share_within_interest(flat_log, flat, MEDIUM["n_items"])
    assert skew > flat_skew + 0.05
    assert degree.max() > 2 * np.bincount(flat_log.item).max()


def test_generator_appeal_lasts_from_chunk_to_chunk():
    """A chunk's most engaged items stay the most engaged in the next chunk when their
    appeal lasts, as popularity on the paper's logs does; with equal appeal they don't."""
    flat_log, _ = _draw()
    log, _ = _draw(item_appeal=1.7)
    lasting = _top_share_next_chunk(log, MEDIUM["n_items"])
    assert lasting > 0.04
    assert lasting > 3 * _top_share_next_chunk(flat_log, MEDIUM["n_items"])


@pytest.mark.parametrize("lifetime", [1.0, 5.0])
def test_generator_lifetimes_show_in_the_engagements(lifetime):
    log, truth = _draw(item_lifetime=lifetime, item_appeal=1.7)
    planted = truth.item_death - truth.item_birth + 1
    early = truth.item_birth < MEDIUM["n_chunks"] // 2
    first = np.full(MEDIUM["n_items"], MEDIUM["n_chunks"])
    last = np.full(MEDIUM["n_items"], -1)
    np.minimum.at(first, log.item, log.chunk)
    np.maximum.at(last, log.item, log.chunk)
    engaged = last - first + 1
    if lifetime == 1.0:
        assert np.mean(engaged[early] == 1) > 0.95
    else:
        assert 3.5 < planted[early].mean() < 6.5
        assert engaged[early].mean() > 2.0 and np.mean(engaged[early] >= 3) > 0.2
    assert np.all(engaged <= planted)


def test_reproduce_log_has_the_papers_degrees_and_shape():
    """The log of `sklearn-micro reproduce`: TwitterFaveGraph's degrees at 1/600, each
    interest's chunk as the paper's at K = 5,000, users of several interests."""
    log, truth = make_engagements(**DEFAULT_LOG, return_truth=True)
    user_degree = np.bincount(log.user)
    item_degree = np.bincount(log.item)
    assert user_degree.min() == 1 and user_degree.max() == 100
    assert abs(user_degree.mean() - 42.2) < 1.0
    assert item_degree.min() == 5 and abs(item_degree.mean() - 21.8) < 0.5
    per_chunk = len(log) / DEFAULT_LOG["n_chunks"] / DEFAULT_LOG["n_interests"]
    assert abs(per_chunk - 295) < 10  # 283M / 192 chunks / 5,000 interests
    size = np.diff(truth.user_interests.indptr)
    assert 6 < size.mean() < 8 and np.mean(size >= 3) > 0.8
    assert _top_share_next_chunk(log, DEFAULT_LOG["n_items"], top=100) > 0.08
