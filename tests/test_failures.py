"""Failures injected in the middle of a multi-chunk partial_fit leave the model as it was.

`partial_fit` is all or nothing: when anything fails while it takes several chunks, after a
chunk has been sampled and committed, inside the compiled sampler (which changes its counts
in place), or halfway through the commit of a chunk, the model is left exactly as it was,
attribute by attribute, and carries on as an untouched model would.

Failures are injected by monkeypatching the few points named below. They name the steps of
``partial_fit`` as it is written today; a rewrite of those steps re-points them here.
"""

import pickle

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import sklearn_micro.baselines as baselines
from sklearn_micro import MiCRO
from sklearn_micro._kernels import sampler
from sklearn_micro.utils.estimator_checks import make_log, state_differences

# -- injection points ------------------------------------------------------------------------
# MiCRO: a method called once per chunk, before the chunk is sampled.
MICRO_CHUNK_STEP = (MiCRO, "_sample_chunk")
# MiCRO: the compiled Gibbs sweep, called once per sweep, of a chunk sampled as one chain;
# it changes the counts in place.
MICRO_KERNEL = (sampler, "sweep_partition")
# MiCRO: the same, of a chunk sampled in partitions on threads (one call a sweep for all).
MICRO_PARTITIONS_KERNEL = (sampler, "sweep_copies")
# MiCRO: a method called in the commit of each chunk, after the supports have been replaced.
MICRO_COMMIT = (MiCRO, "_set_chunk")
# Baselines: the hook that takes one new chunk, once per chunk.
BASELINE_CHUNK_STEP = "_update_chunk"
# Baselines: what recomputes the model from the window (ALS's fold-in, ANN's item vectors,
# the neighbour lists).
BASELINE_KERNEL = {"ALSRecommender": "_fold", "ANNRecommender": "_derive",
                   "PopularityRecommender": "_derive", "RecentItemsRecommender": "_derive",
                   "ItemKNNRecommender": "_neighbours", "RP3betaRecommender": "_neighbours"}
# Baselines: the commit publishes the new state in one swap of ``__dict__``; it fails there.
BASELINE_COMMIT_ATTRIBUTE = "__dict__"
# ---------------------------------------------------------------------------------------------

X_TRAIN, X_NEXT = make_log(5, n_chunks=8, n_train=4, as_frame=True)
USERS = np.concatenate([X_TRAIN.user.unique()[:15], X_NEXT.user.unique()[-5:], [-1]])


class Injected(Exception):
    """The failure the tests inject."""


def _fail_on_call(original, n_call, error=Injected):
    """``original``, raising ``error`` on its ``n_call``-th call instead of running."""
    calls = {"n": 0}

    def wrapper(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == n_call:
            raise error(f"injected on call {n_call}")
        return original(*args, **kwargs)

    wrapper.calls = calls
    return wrapper


def _copy(model):
    return pickle.loads(pickle.dumps(model))


def _assert_rolled_back_and_carries_on(model, untouched, rest, monkeypatch):
    """``model`` failed a partial_fit of ``rest``: it equals ``untouched`` attribute by
    attribute, and once the injection is gone takes ``rest`` to the same state and answers."""
    assert state_differences(model, untouched) == []
    monkeypatch.undo()
    model.partial_fit(rest)
    untouched.partial_fit(rest)
    assert state_differences(model, untouched) == []
    for exclude_seen in (False, True):
        a = model.recommend(USERS, 15, exclude_seen=exclude_seen)
        b = untouched.recommend(USERS, 15, exclude_seen=exclude_seen)
        assert_array_equal(a[0], b[0])
        assert_array_equal(a[1], b[1])


# -- MiCRO -------------------------------------------------------------------------------------


def _micro():
    items = np.unique(X_TRAIN.item)
    model = MiCRO(random_state=0).fit(X_TRAIN, item_interest=(items, items % 4))
    return model.partial_fit(X_NEXT[X_NEXT.chunk == X_NEXT.chunk.min()])


def test_micro_takes_several_chunks_here():
    assert X_NEXT.chunk.nunique() >= 4  # one taken before, three at once in the tests


@pytest.mark.parametrize("error", [Injected, MemoryError, KeyboardInterrupt])
def test_micro_failure_after_a_sampled_chunk(monkeypatch, error):
    model = _micro()
    rest = X_NEXT[X_NEXT.chunk > X_NEXT.chunk.min()]
    untouched = _copy(model)
    owner, name = MICRO_CHUNK_STEP
    wrapper = _fail_on_call(getattr(owner, name), 2, error)
    monkeypatch.setattr(owner, name, wrapper)
    with pytest.raises(error, match="injected"):
        model.partial_fit(rest)
    assert wrapper.calls["n"] == 2  # the first chunk was sampled and committed
    _assert_rolled_back_and_carries_on(model, untouched, rest, monkeypatch)


@pytest.mark.parametrize("n_jobs", [None, 2])
def test_micro_failure_inside_the_kernel(monkeypatch, n_jobs):
    model = _micro().set_params(n_jobs=n_jobs, min_partition_work=0)
    rest = X_NEXT[X_NEXT.chunk > X_NEXT.chunk.min()]
    untouched = _copy(model)
    owner, name = MICRO_KERNEL if n_jobs is None else MICRO_PARTITIONS_KERNEL
    # the kernel calls the first chunk of `rest` takes, from a run without failure
    counting = _fail_on_call(getattr(owner, name), 0)
    monkeypatch.setattr(owner, name, counting)
    _copy(model).partial_fit(rest[rest.chunk == rest.chunk.min()])
    calls = counting.calls["n"]
    monkeypatch.undo()
    # fail on the second call of the second chunk: its counts have been changed in place
    wrapper = _fail_on_call(getattr(owner, name), calls + 2)
    monkeypatch.setattr(owner, name, wrapper)
    with pytest.raises(Injected):
        model.partial_fit(rest)
    assert wrapper.calls["n"] == calls + 2
    _assert_rolled_back_and_carries_on(model, untouched, rest, monkeypatch)


@pytest.mark.parametrize("n_call", [1, 2])
def test_micro_failure_in_the_commit(monkeypatch, n_call):
    model = _micro()
    rest = X_NEXT[X_NEXT.chunk > X_NEXT.chunk.min()]
    untouched = _copy(model)
    owner, name = MICRO_COMMIT
    wrapper = _fail_on_call(getattr(owner, name), n_call)
    monkeypatch.setattr(owner, name, wrapper)
    with pytest.raises(Injected):
        model.partial_fit(rest)
    _assert_rolled_back_and_carries_on(model, untouched, rest, monkeypatch)


def test_micro_failure_leaves_recommend_and_the_random_stream_as_they_were(monkeypatch):
    model = _micro()
    before = model.recommend(USERS, 10)
    draw = _copy(model).random_state_.random_sample()
    owner, name = MICRO_KERNEL
    monkeypatch.setattr(owner, name, _fail_on_call(getattr(owner, name), 3))
    with pytest.raises(Injected):
        model.partial_fit(X_NEXT[X_NEXT.chunk > X_NEXT.chunk.min()])
    assert_array_equal(model.recommend(USERS, 10)[0], before[0])
    assert model.random_state_.random_sample() == draw


# -- baselines ---------------------------------------------------------------------------------


def _ann_log(X):
    """X as the EmbeddedLog that GraphEmbedder hands ANNRecommender: fixed random vectors."""
    from sklearn_micro._log import EmbeddedLog, Vocabulary, check_log

    log = check_log(X)
    users = Vocabulary.from_ids(np.concatenate([X_TRAIN.user, X_NEXT.user]))
    items = Vocabulary.from_ids(np.concatenate([X_TRAIN.item, X_NEXT.item]))
    rng = np.random.default_rng(0)
    return EmbeddedLog(log, users, items, rng.normal(size=(len(users), 6)),
                       rng.normal(size=(len(items), 6)))


BASELINES = {
    "PopularityRecommender": (lambda: baselines.PopularityRecommender(window=2), None),
    "RecentItemsRecommender": (lambda: baselines.RecentItemsRecommender(window=3), None),
    "ANNRecommender": (lambda: baselines.ANNRecommender(window=2, method="exact"), _ann_log),
    "ALSRecommender": (lambda: baselines.ALSRecommender(n_components=3, iterations=2,
                                                        window=2, random_state=0), None),
    "ItemKNNRecommender": (lambda: baselines.ItemKNNRecommender(window=2), None),
    "RP3betaRecommender": (lambda: baselines.RP3betaRecommender(window=2), None),
}


class _Baseline:
    """A fitted baseline that took X_NEXT's first chunk, and the log of the rest."""

    def __init__(self, name):
        factory, wrap = BASELINES[name]
        self.wrap = wrap or (lambda X: X)
        first = X_NEXT[X_NEXT.chunk == X_NEXT.chunk.min()]
        self.model = factory().fit(self.wrap(X_TRAIN)).partial_fit(self.wrap(first))
        self.rest = self.wrap(X_NEXT[X_NEXT.chunk > X_NEXT.chunk.min()])

    def check(self, untouched, monkeypatch):
        assert state_differences(self.model, untouched) == []
        monkeypatch.undo()
        self.model.partial_fit(self.rest)
        untouched.partial_fit(self.rest)
        assert state_differences(self.model, untouched) == []
        for exclude_seen in (False, True):
            a = self.model.recommend(USERS, 15, exclude_seen=exclude_seen)
            b = untouched.recommend(USERS, 15, exclude_seen=exclude_seen)
            assert_array_equal(a[0], b[0])
            assert_array_equal(a[1], b[1])


@pytest.mark.parametrize("name", list(BASELINES))
@pytest.mark.parametrize("error", [Injected, KeyboardInterrupt])
def test_baseline_failure_after_a_chunk(monkeypatch, name, error):
    case = _Baseline(name)
    untouched = _copy(case.model)
    owner = type(case.model)
    wrapper = _fail_on_call(getattr(owner, BASELINE_CHUNK_STEP), 2, error)
    monkeypatch.setattr(owner, BASELINE_CHUNK_STEP, wrapper)
    with pytest.raises(error, match="injected"):
        case.model.partial_fit(case.rest)
    assert wrapper.calls["n"] == 2
    case.check(untouched, monkeypatch)


@pytest.mark.parametrize("name", list(BASELINES))
def test_baseline_failure_inside_the_model_update(monkeypatch, name):
    case = _Baseline(name)
    untouched = _copy(case.model)
    owner = type(case.model)
    wrapper = _fail_on_call(getattr(owner, BASELINE_KERNEL[name]), 1)
    monkeypatch.setattr(owner, BASELINE_KERNEL[name], wrapper)
    with pytest.raises(Injected):
        case.model.partial_fit(case.rest)
    assert wrapper.calls["n"] == 1
    case.check(untouched, monkeypatch)


@pytest.mark.parametrize("name", list(BASELINES))
def test_baseline_failure_in_the_commit(monkeypatch, name):
    case = _Baseline(name)
    untouched = _copy(case.model)
    owner = type(case.model)
    written = []

    def failing_setattr(self, attribute, value):
        if attribute == BASELINE_COMMIT_ATTRIBUTE:
            raise Injected(f"injected while writing {attribute}")
        written.append(attribute)
        object.__setattr__(self, attribute, value)

    monkeypatch.setattr(owner, "__setattr__", failing_setattr)
    with pytest.raises(Injected):
        case.model.partial_fit(case.rest)
    assert not written, "the commit wrote attributes one by one, not in one swap"
    case.check(untouched, monkeypatch)
