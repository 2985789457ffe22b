"""Readers on threads while partial_fit runs: each sees the state before or after a chunk,
never a mix, and numba's threading layer does not abort the process."""

import copy
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from sklearn_micro import MiCRO
from sklearn_micro.baselines import RecentItemsRecommender
from sklearn_micro.utils.estimator_checks import make_log

X_TRAIN, X_NEXT = make_log(seed=5, n_chunks=6, n_train=4, per_chunk=80, as_frame=True)
FIRST = X_NEXT[X_NEXT.chunk == X_NEXT.chunk.min()]
TRAIN_ITEMS = np.unique(X_TRAIN.item)
INTERESTS = (TRAIN_ITEMS, (TRAIN_ITEMS // 4) % 3)
USERS = np.concatenate([np.unique(X_TRAIN.user), [10**12]])


def _calls(model):
    """The reads a reader makes, each a function of no argument."""
    items = [int(i) for i in TRAIN_ITEMS[:4]]
    # items of the latest chunk before the update and after it
    allow = [int(i) for i in [*X_TRAIN.item[X_TRAIN.chunk == X_TRAIN.chunk.max()][:4],
                              *FIRST.item[:4]]]
    calls = [lambda: model.recommend(USERS, 10),
             lambda: model.recommend(USERS, 10, allow=allow * 2,
                                     history=[items[:2]] * len(USERS))]
    if isinstance(model, MiCRO):
        calls.append(lambda: model.similar_items(TRAIN_ITEMS, 5))

        def explain():
            why = model.explain(int(USERS[0]), allow, history=items[:1])
            return why.scores, why.contributions

        calls.append(explain)
    return calls


def _answers(model):
    return [call() for call in _calls(model)]


def _equal(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


# the first methods each read calls on the state it took (`_published`'s view): slowed
# there, a reader holds the state before while the update publishes the one after
_READ_STEPS = {MiCRO: ("_check_recommend", "_mixtures"),
               RecentItemsRecommender: ("_check_recommend",)}


def _read_during_update(model, update, monkeypatch, slow_step):
    """Readers on threads throughout ``update(model)``, ``slow_step`` (a method of the
    model's class called in the middle of an update) slowed down so that readers land
    inside the update. Reads are slowed between their taking of the published state and
    its use, and each call's first read during the update waits there until the update
    has published (which waits for them): it straddles the swap. Every read must answer
    from the state it took, whole."""
    before = _answers(model)
    after_model = copy.deepcopy(model)
    update(after_model)
    after = _answers(after_model)
    for b, a in zip(before, after, strict=True):
        assert not _equal(b, a), "the chunk must change every answer"

    cls = type(model)
    step = getattr(cls, slow_step)

    def slow(self, *args, **kwargs):
        time.sleep(0.05)
        out = step(self, *args, **kwargs)
        time.sleep(0.05)
        return out

    monkeypatch.setattr(cls, slow_step, slow)
    state_before = model.__dict__
    calls = _calls(model)
    local = threading.local()
    # one reader per call, whose first read of the state before waits for the swap
    reading = [threading.Event() for _ in calls]
    published = threading.Event()

    def held(name):
        read_step = getattr(cls, name)

        def hold(self, *args, **kwargs):
            if getattr(local, "took", "update") is None:
                local.took = self.__dict__
                if (local.during and self.__dict__ is state_before
                        and not reading[local.call].is_set()):
                    reading[local.call].set()  # this read straddles the swap
                    published.wait(30)
                else:
                    time.sleep(0.002)
            return read_step(self, *args, **kwargs)

        return hold

    for name in _READ_STEPS[cls]:
        monkeypatch.setattr(cls, name, held(name))
    publish = cls._publish

    def publish_once_read(self, *args, **kwargs):
        for event in reading:
            event.wait(30)
        publish(self, *args, **kwargs)
        published.set()

    monkeypatch.setattr(cls, "_publish", publish_once_read)
    reads, errors = [], []
    updating = threading.Event()
    done = threading.Event()

    def read(j):
        local.call = j
        try:
            while True:
                last = done.is_set()
                local.took = None
                local.during = updating.is_set() and not published.is_set()
                answer = calls[j]()
                reads.append((j, local.took, local.during, published.is_set(), answer))
                if last:
                    return
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    readers = [threading.Thread(target=read, args=(j,)) for j in range(len(calls))]
    for t in readers:
        t.start()
    try:
        updating.set()
        update(model)
    finally:
        for event in reading:
            event.set()
        done.set()
        for t in readers:
            t.join()
    assert not errors, errors
    assert published.is_set() and model.__dict__ is not state_before
    # each read answers from the state it took, whole: the one before or the one after
    for j, took, _, _, answer in reads:
        assert took is state_before or took is model.__dict__, "a read took no state"
        want = before[j] if took is state_before else after[j]
        assert _equal(answer, want), "a read answered from another state than it took"
    straddled = {j for j, took, _, swapped, _ in reads if took is state_before and swapped}
    assert straddled == set(range(len(calls))), \
        "a read of each call must take the state before and answer after the swap"
    assert sum(during for _, _, during, _, _ in reads) >= len(calls), \
        "reads must answer during the update"
    assert all(_equal(got, want) for got, want in zip(_answers(model), after, strict=True))


@pytest.mark.parametrize("params", [{"personal": 0, "popularity": 0, "phi_decay": 0},
                                    {"personal": 0.3, "phi_decay": 0.5, "n_jobs": 2}])
def test_micro_readers_see_the_state_before_or_after_a_chunk(params, monkeypatch):
    model = MiCRO(random_state=0, **params).fit(X_TRAIN, item_interest=INTERESTS)
    # _add_recent runs between the supports' update and phi's
    _read_during_update(model, lambda m: m.partial_fit(FIRST), monkeypatch, "_add_recent")


def test_baseline_readers_see_the_state_before_or_after_a_chunk(monkeypatch):
    model = RecentItemsRecommender(window=2).fit(X_TRAIN)
    _read_during_update(model, lambda m: m.partial_fit(FIRST), monkeypatch, "_derive")


def test_failed_partial_fit_publishes_nothing():
    model = MiCRO(random_state=0, personal=0.3).fit(X_TRAIN, item_interest=INTERESTS)
    state = model.__dict__
    before = model.recommend(USERS, 10)
    with pytest.raises(ValueError):
        model.partial_fit(X_TRAIN)  # older chunks
    bad = FIRST.copy()
    bad.loc[bad.index[-1], "chunk"] = int(FIRST.chunk.min()) - 10
    with pytest.raises(ValueError):
        model.partial_fit(bad)
    assert model.__dict__ is state
    assert_array_equal(model.recommend(USERS, 10)[0], before[0])


_SCRIPT = textwrap.dedent("""
    import threading
    import numpy as np
    from sklearn_micro import MiCRO
    from sklearn_micro._kernels import threading_layer
    rng = np.random.default_rng(0)
    n = 20000
    user = rng.integers(0, 2000, n)
    item = rng.integers(0, 3000, n)
    chunk = np.repeat(np.arange(4), n // 4)
    X = np.column_stack([user, item, chunk])
    items = np.arange(3000)
    model = MiCRO(personal=0.2, phi_decay=0.5, n_jobs=2, random_state=0).fit(
        X[chunk < 3], item_interest=(items, items % 50))
    users = np.arange(2000)
    errors = []

    def read():
        try:
            for _ in range(15):
                model.recommend(users, 50)
                model.recommend(users[:200], 50, allow=list(range(0, 3000, 3)))
        except BaseException as error:
            errors.append(error)

    readers = [threading.Thread(target=read) for _ in range(3)]
    for t in readers:
        t.start()
    model.partial_fit(X[chunk == 3])
    for t in readers:
        t.join()
    assert not errors, errors
    print(threading_layer(), "ok")
""")


@pytest.mark.parametrize("layer", [None, "workqueue"])
def test_parallel_kernels_from_several_threads_do_not_abort(layer):
    """Several threads in parallel kernels at once, under the layer numba picks here and
    under "workqueue" (which takes turns): the process survives (a subprocess, since an
    abort would end the test run)."""
    env = dict(os.environ)
    env.pop("NUMBA_THREADING_LAYER", None)
    if layer is not None:
        env["NUMBA_THREADING_LAYER"] = layer
    env["NUMBA_NUM_THREADS"] = "2"
    done = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("ok")
    if layer is not None:
        assert done.stdout.split()[0] == layer


def test_partial_fit_refuses_to_publish_over_another_update(monkeypatch):
    """Two writers at once: the one that publishes second would drop the first one's
    chunk, so it is refused and the first one's state stays."""
    model = MiCRO(random_state=0, personal=0).fit(X_TRAIN, item_interest=INTERESTS)
    sample = MiCRO._sample_chunk
    other = {}

    def meanwhile(self, chunk, log):
        if not other:
            other["state"] = dict(model.__dict__, latest_chunk_=chunk + 100)
            model._publish(other["state"])
        return sample(self, chunk, log)

    monkeypatch.setattr(MiCRO, "_sample_chunk", meanwhile)
    with pytest.raises(RuntimeError, match="another call published a new state"):
        model.partial_fit(FIRST)
    assert model.__dict__ is other["state"]
