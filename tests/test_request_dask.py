"""The Dask path of recommend takes the request-time arguments: each block of users its own
lists, with the in-process answer."""

import joblib
import numpy as np
import pytest
from numpy.testing import assert_array_equal

from sklearn_micro import MiCRO
from sklearn_micro._dask import recommend_on_cluster
from sklearn_micro.utils.estimator_checks import make_log

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        yield client


def test_recommend_on_the_cluster_takes_filters_and_history(client):
    X_train, X_next = make_log(seed=4, as_frame=True)
    items = np.unique(X_train.item)
    model = MiCRO(personal=0.3, phi_decay=0.5, random_state=0).fit(
        X_train, item_interest=(items, items % 3)).partial_fit(X_next)
    users = np.concatenate([np.unique(X_next.user)[:9], [10**12]])
    every = np.unique(np.concatenate([X_train.item, X_next.item]))
    request = {
        "exclude": [int(i) for i in every[::4]],
        "allow": [[int(i) for i in every[r % 3::2]] for r in range(len(users))],
        "history": [[int(every[r])] * (r % 3) for r in range(len(users))],
    }
    want = model.recommend(users, 6, exclude_seen=True, **request)
    with joblib.parallel_config(backend="dask"):
        got = model.recommend(users, 6, exclude_seen=True, **request)
    assert_array_equal(got[0], want[0])
    assert_array_equal(got[1], want[1])
    # several blocks, each with its own slice of the aligned lists
    got = recommend_on_cluster(model, users, 6, exclude_seen=True, client=client,
                               max_users=3, **request)
    assert_array_equal(got[0], want[0])
    assert_array_equal(got[1], want[1])
    with pytest.raises(ValueError, match="history must be a list of item-id lists"):
        recommend_on_cluster(model, users, 6, history=[1, 2], client=client)


def test_recommend_on_the_cluster_answers_with_the_open_chunk(client):
    X_train, X_next = make_log(seed=5, as_frame=True)
    items = np.unique(X_train.item)
    model = MiCRO(personal=0.3, live_weight=4.0, random_state=0).fit(
        X_train, item_interest=(items, items % 3))
    first = X_next[X_next.chunk == X_next.chunk.min()]
    model.observe(first.iloc[: len(first) // 2])
    users = np.concatenate([np.unique(first.user)[:12], [10**12]])
    history = [[int(first.item.iloc[r])] for r in range(len(users))]
    want = model.recommend(users, 8, history=history)
    assert not np.array_equal(want[0], model.set_params(live_weight=0.0).recommend(
        users, 8, history=history)[0])  # the open chunk changes these answers
    model.set_params(live_weight=4.0)
    got = recommend_on_cluster(model, users, 8, history=history, client=client, max_users=4)
    assert_array_equal(got[0], want[0])
    assert_array_equal(got[1], want[1])
