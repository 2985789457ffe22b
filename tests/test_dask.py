"""MiCRO on a Dask cluster of worker processes, through joblib's Dask backend: the sampler,
retrieval and the rolling evaluation, and the assignment step of spherical k-means.

One `LocalCluster` of two single-threaded worker processes serves the whole module (made
again if a killed worker's replacement never joins; the tests that kill one run last). A chain
on the cluster equals the chain on threads with as many partitions, bit for bit, so the
tests compare whole model states, and recall@100 besides; retrieval, the evaluation's
metrics and k-means' labels on the cluster equal the local ones exactly.
"""

import logging
import os
import re
import signal
import time

import joblib
import numpy as np
import pytest

pytest.importorskip("distributed", reason="dask.distributed is not installed; the tests "
                    "of the Dask backend need the extra: pip install 'sklearn-micro[dask]'")

import dask.config  # noqa: E402
from distributed import (  # noqa: E402
    Client,
    Event,
    LocalCluster,
    WorkerPlugin,
    get_task_stream,
    wait,
)
from sklearn.model_selection import GridSearchCV  # noqa: E402
from sklearn.pipeline import Pipeline  # noqa: E402
from test_micro import _canonical, _generated, _layout_of, _recount, state  # noqa: E402

from sklearn_micro import (  # noqa: E402
    GraphEmbedder,
    MiCRO,
    PopularityRecommender,
    SphericalKMeans,
)
from sklearn_micro._dask import recommend_on_cluster  # noqa: E402
from sklearn_micro._log import check_log  # noqa: E402
from sklearn_micro._parallel import resolve_n_jobs  # noqa: E402
from sklearn_micro.datasets import make_engagements  # noqa: E402
from sklearn_micro.metrics import ranking_metrics  # noqa: E402
from sklearn_micro.micro._gibbs import run_chain  # noqa: E402
from sklearn_micro.model_selection import (  # noqa: E402
    ChunkSplit,
    make_rolling_scorer,
    rolling_evaluate,
)
from sklearn_micro.utils.estimator_checks import FixedEmbedder  # noqa: E402


class _Cluster:
    """The module's `LocalCluster` of two single-threaded worker processes and its client,
    made again when a worker is lost for good."""

    def __init__(self):
        self.cluster = self.client = None

    def start(self):
        self.cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                    dashboard_address=None)
        self.client = Client(self.cluster)

    def close(self):
        self.client.close()
        self.cluster.close()


@pytest.fixture(scope="module")
def cluster():
    made = _Cluster()
    made.start()
    yield made
    made.close()


@pytest.fixture
def client(cluster):
    """The module's client once both its workers answer. A test before may have killed
    one: its nanny starts another, which may still be starting, or which the scheduler
    may refuse while it still lists the dead one under the same name (the nanny then
    closes); the cluster is then made again."""
    try:
        wait_for_two_workers(cluster.client, timeout=30)
    except TimeoutError:
        cluster.close()
        cluster.start()
        wait_for_two_workers(cluster.client)
    return cluster.client


def wait_for_two_workers(client, timeout=60):
    """Return once the cluster's two workers answer and the scheduler lists no other.
    Just after a worker is killed the scheduler may still list it (a task bound to it
    never runs; `client.run` fails on it), or list only the other."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            pids = client.run(os.getpid)
            if len(pids) == 2 and set(pids) == set(client.ncores()):
                return
        except OSError:  # CommClosedError: a worker gone
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the cluster's two workers did not answer within {timeout} s")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def generated():
    return _generated()


class SweepLog(logging.Handler):
    """The bytes each sweep, evaluated chunk and k-means iteration shipped, from the
    DEBUG records of `sklearn_micro._dask`."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.sweeps, self.blocks, self.kmeans = [], [], []

    def emit(self, record):
        if hasattr(record, "bytes_received"):
            self.sweeps.append((record.bytes_sent, record.bytes_received))
        work = getattr(record, "dask_work", None)
        if work == "score":
            self.blocks.append((record.sent_bytes, record.received_bytes))
        elif work == "kmeans-assign":
            self.kmeans.append((record.sent_bytes, record.received_bytes))


@pytest.fixture
def sweep_log():
    handler = SweepLog()
    logger = logging.getLogger("sklearn_micro._dask")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def assert_same_state(a, b):
    """``a`` and ``b`` hold the same attributes, bit for bit; names those that differ."""
    assert vars(a).keys() == vars(b).keys()
    differ = [name for name in vars(a) if _canonical(vars(a)[name]) != _canonical(vars(b)[name])]
    assert not differ, f"attributes differ: {differ}"


def _recall(model, chunk):
    users, inverse = np.unique(chunk.user, return_inverse=True)
    relevant = [set(chunk.item[inverse == j].tolist()) for j in range(users.shape[0])]
    items, _ = model.recommend(users, 100)
    return ranking_metrics(items, relevant, ks=(100,))["recall@100"].mean()


def _micro(train, interests, chunk, **params):
    params = {"random_state": 3, "n_jobs": 2, "max_sweeps": 12, "min_partition_work": 0,
              **params}
    return MiCRO(**params).fit(train, item_interest=interests).partial_fit(chunk)


def test_partitions_follow_n_jobs_on_the_cluster(client):
    assert resolve_n_jobs(3) == 3 and resolve_n_jobs(None) == 1
    with joblib.parallel_config(backend="dask"):
        assert resolve_n_jobs(3) == 3
        assert resolve_n_jobs(None) == resolve_n_jobs(-1) == 2  # the cluster's worker threads
    with joblib.parallel_config(backend="dask", n_jobs=5):
        assert resolve_n_jobs(None) == 5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_counts_equal_a_recount_after_every_sweep_on_the_cluster(client, seed):
    rng = np.random.default_rng(seed)
    n_users, K = 30, 6
    supports = [sorted(rng.choice(K, rng.integers(1, K + 1), replace=False).tolist())
                for _ in range(n_users)]
    users = np.sort(rng.integers(0, n_users, 400))
    items = rng.integers(0, 50, 400)
    case = (K, supports, users, items, seed)
    layout, counts, z, size = _layout_of(case)
    _, counts_threads, z_threads, _ = _layout_of(case)
    for sweep in range(3):
        with joblib.parallel_config(backend="dask"):
            run_chain(layout, counts, z, beta=0.1, max_sweeps=1, tol=0, chunk_seed=seed,
                      pass_=sweep, n_jobs=3, min_partition_work=0)
        run_chain(layout, counts_threads, z_threads, beta=0.1, max_sweeps=1, tol=0,
                  chunk_seed=seed, pass_=sweep, n_jobs=3, min_partition_work=0)
        assert ((z >= 0) & (z < size)).all()
        recount = _recount(layout, z)
        for name in ("user_count", "entry_count", "interest_count"):
            np.testing.assert_array_equal(getattr(recount, name), getattr(counts, name))
            np.testing.assert_array_equal(getattr(counts_threads, name), getattr(counts, name))
        assert counts.entry_count.sum() == counts.interest_count.sum() == users.shape[0]
        np.testing.assert_array_equal(z, z_threads)


def test_cluster_equals_threads_and_is_deterministic(client, generated, sweep_log):
    train, interests, chunk, nxt = generated
    threads = _micro(train, interests, chunk)
    with joblib.parallel_config(backend="dask"):
        cluster = [_micro(train, interests, chunk) for _ in range(2)]
        default = _micro(train, interests, chunk, n_jobs=None)  # the cluster's 2 threads
    assert sweep_log.sweeps, "the sweeps did not run on the cluster"
    assert_same_state(cluster[0], cluster[1])
    assert_same_state(cluster[0], threads)
    np.testing.assert_array_equal(default.phi_count_, threads.phi_count_)
    assert abs(_recall(cluster[0], nxt) - _recall(threads, nxt)) <= 0.01
    # what travels per sweep is the partitions' z and touched entries, not the table
    n_engagements = chunk.user.shape[0]
    assert max(sent for sent, _ in sweep_log.sweeps) < 16 * n_engagements


class KillOnce(WorkerPlugin):
    """Kills its worker's process when the task of a given key pattern starts, once per
    cluster (the first worker to create ``marker`` does it)."""

    def __init__(self, pattern, marker):
        self.pattern = pattern
        self.marker = marker

    def setup(self, worker):
        self.worker = worker

    def transition(self, key, start, finish, **kwargs):
        if finish != "executing" or not re.search(self.pattern, str(key)):
            return
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return
        os.kill(os.getpid(), signal.SIGKILL)


def test_a_sweep_that_cannot_finish_times_out_and_keeps_the_model(client, generated):
    train, interests, chunk, _ = generated
    model = MiCRO(random_state=3, n_jobs=2, min_partition_work=0).fit(
        train, item_interest=interests)
    before = state(model)
    busy = Event("test-dask-busy")
    blockers = [client.submit(busy.wait, 60, workers=[worker], pure=False)
                for worker in client.ncores()]
    try:
        with dask.config.set({"sklearn_micro.sweep_timeout": "1s"}), \
                joblib.parallel_config(backend="dask"), \
                pytest.raises(TimeoutError, match="sweep_timeout"):
            model.partial_fit(chunk)
    finally:
        busy.set()
        # each blocker returns within its 60 s once running; a blocker bound to a worker
        # that is gone never runs, and the wait must not hang the suite
        try:
            wait(blockers, timeout=120)
        except TimeoutError:
            client.cancel(blockers)
            raise
    assert state(model) == before


def _search(n_jobs_micro=2):
    log = make_engagements(n_users=600, n_items=800, n_chunks=6, n_interests=6,
                           n_engagements=12000, random_state=0).to_frame()
    pipe = Pipeline([
        ("embed", GraphEmbedder(n_components=16, iterations=5, random_state=0, n_jobs=1)),
        ("interests", SphericalKMeans(random_state=0)),
        ("micro", MiCRO(random_state=0, n_jobs=n_jobs_micro, max_sweeps=20,
                        min_partition_work=0)),
    ])
    return GridSearchCV(pipe, {"interests__n_clusters": [4, 8]},
                        cv=ChunkSplit(n_splits=2, test_chunks=2),
                        scoring=make_rolling_scorer(m_values=(10, 100)),
                        refit="recall@100").fit(log)


def test_grid_search_over_k_on_the_cluster_equals_the_local_search(client):
    """The search's fits and scorers run on the workers, and the samplers of their
    `partial_fit` submit their sweeps to the cluster from there."""
    local = _search()
    # the sweeps are submitted from the workers' processes, where the `submitted` spy does
    # not reach: the task stream shows them (one is enough here, not a count)
    with joblib.parallel_config(backend="dask"), get_task_stream(client) as tasks:
        remote = _search()
    keys = [task["key"] for task in tasks.data]
    assert any(key.startswith("micro-sweep-") for key in keys), "no sweep ran on the cluster"
    for name in ("mean_test_recall@100", "mean_test_ndcg@10", "split0_test_mrr@100"):
        np.testing.assert_array_equal(remote.cv_results_[name], local.cv_results_[name])
    assert remote.best_params_ == local.best_params_
    assert_same_state(remote.best_estimator_[-1], local.best_estimator_[-1])


def test_fixed_embedder_pipeline_runs_on_the_cluster(client, sweep_log):
    """The pipeline's MiCRO fitted on the cluster with n_jobs left to the cluster (its two
    worker threads: two partitions) equals the pipeline fitted on two threads: the same
    state and the same recommendations."""
    from sklearn_micro.utils.estimator_checks import make_log

    X_train, X_next = make_log(as_frame=True)

    def pipeline(n_jobs):
        return Pipeline([("embed", FixedEmbedder()),
                         ("interests", SphericalKMeans(n_clusters=3, random_state=0)),
                         ("micro", MiCRO(random_state=0, n_jobs=n_jobs,
                                         min_partition_work=0))])

    with joblib.parallel_config(backend="dask"):
        remote = pipeline(None).fit(X_train)
        remote[-1].partial_fit(X_next)
    assert sweep_log.sweeps, "the sweeps did not run on the cluster"
    local = pipeline(2).fit(X_train)
    local[-1].partial_fit(X_next)
    users = np.concatenate([X_next.user.unique(), X_train.user.unique(), [-1]])
    items, scores = remote[-1].recommend(users, m=5)
    expected = local[-1].recommend(users, m=5)
    np.testing.assert_array_equal(items, expected[0])
    np.testing.assert_array_equal(scores, expected[1])
    assert (items[:, 0] != -1).all()
    remote[-1].n_jobs = 2
    assert_same_state(remote[-1], local[-1])


# ------------------------------------------------ retrieval and the rolling evaluation

@pytest.fixture(scope="module")
def fitted(generated):
    """MiCRO fitted on the training chunks, and the two chunks after them as one test log."""
    train, interests, chunk, nxt = generated
    model = MiCRO(random_state=3, n_jobs=2, max_sweeps=8, min_partition_work=0).fit(
        train, item_interest=interests)
    test = check_log(np.column_stack([np.concatenate([c.user, c.item, c.chunk])
                                      .reshape(3, -1) for c in (chunk, nxt)]).T)
    return model, test


def _evaluate(model, test, **kwargs):
    return rolling_evaluate(model, test, m_values=(10, 100), **kwargs)


@pytest.fixture
def submitted(monkeypatch):
    """The keys of the tasks the client submits to the cluster by blocks, recorded as
    they are submitted (the task stream once missed a task that ran)."""
    from sklearn_micro import _dask

    keys = []
    submit_blocks = _dask._submit_blocks

    def recorded(client, function, blocks, *, key, **kwargs):
        futures = submit_blocks(client, function, blocks, key=key, **kwargs)
        keys.extend(str(future.key) for future in futures)
        return futures

    monkeypatch.setattr(_dask, "_submit_blocks", recorded)
    return keys


@pytest.mark.parametrize("exclude_seen", [False, True])
def test_recommend_by_blocks_on_the_cluster_equals_local(client, fitted, exclude_seen,
                                                         submitted):
    model, test = fitted
    users = np.unique(test.user)[::-1]  # any order, unseen users included
    local = model.recommend(users, 100, exclude_seen=exclude_seen)
    with joblib.parallel_config(backend="dask"):
        remote = model.recommend(users, 100, exclude_seen=exclude_seen)
    assert sum(key.startswith("micro-recommend-") for key in submitted) == 2
    np.testing.assert_array_equal(remote[0], local[0])
    np.testing.assert_array_equal(remote[1], local[1])


def test_recommend_on_the_cluster_checks_its_arguments_on_the_client(client, fitted):
    model, _ = fitted
    with pytest.raises(ValueError, match="m must be an integer >= 1"):
        recommend_on_cluster(model, [1, 2], 0, client=client)
    with pytest.raises(ValueError, match="needs a Dask client"):
        recommend_on_cluster(model, [1, 2], 5)
    items, scores = recommend_on_cluster(model, [], 5, client=client)
    assert items.shape == scores.shape == (0, 5)


def test_baseline_recommends_by_blocks_on_the_cluster(client, generated):
    train, _, chunk, _ = generated
    model = PopularityRecommender(window=2).fit(train)
    users = np.unique(chunk.user)
    local = model.recommend(users, 50, exclude_seen=True)
    remote = recommend_on_cluster(model, users, 50, exclude_seen=True, client=client)
    np.testing.assert_array_equal(remote[0], local[0])
    np.testing.assert_array_equal(remote[1], local[1])


def test_rolling_evaluation_on_the_cluster_equals_local(client, fitted, sweep_log,
                                                        submitted):
    """Each chunk's users are scored by blocks on the workers, which return metrics, not
    top-m lists: every (user, chunk) point equals the threaded evaluation's."""
    model, test = fitted
    local = _evaluate(model, test)
    with joblib.parallel_config(backend="dask"):
        remote = _evaluate(model, test)
    assert sum(key.startswith("micro-score-") for key in submitted) == 4  # 2 chunks x 2
    assert sum(key.startswith("micro-recommender-") for key in submitted) == 2  # per chunk
    assert remote.points.equals(local.points)
    assert remote.per_user().equals(local.per_user())
    assert remote.per_chunk().equals(local.per_chunk())
    n_points = len(local)
    assert len(sweep_log.blocks) == 2
    assert sum(received for _, received in sweep_log.blocks) <= 8 * 6 * n_points * 1.1


def test_an_evaluation_that_cannot_finish_times_out(client, fitted):
    model, test = fitted
    busy = Event("test-dask-busy-evaluation")
    blockers = [client.submit(busy.wait, 60, workers=[worker], pure=False)
                for worker in client.ncores()]
    try:
        with dask.config.set({"sklearn_micro.sweep_timeout": "1s"}), \
                joblib.parallel_config(backend="dask"), \
                pytest.raises(TimeoutError, match="rolling evaluation waited .* chunk 4"):
            _evaluate(model, test)
    finally:
        busy.set()
        # each blocker returns within its 60 s once running; a blocker bound to a worker
        # that is gone never runs, and the wait must not hang the suite
        try:
            wait(blockers, timeout=120)
        except TimeoutError:
            client.cancel(blockers)
            raise


# ------------------------------------------------------------------ spherical k-means

def test_kmeans_assignment_on_the_cluster_equals_local(client, sweep_log, submitted):
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((30, 16))
    X = (centers[rng.integers(0, 30, 5000)] + rng.standard_normal((5000, 16))).astype(
        np.float32)
    params = dict(n_clusters=30, random_state=0, max_iter=15)
    local = SphericalKMeans(**params).fit(X)
    sampled = SphericalKMeans(**params, max_fit_samples=2000).fit(X)
    with joblib.parallel_config(backend="dask"):
        remote = SphericalKMeans(**params).fit(X)
        remote_sampled = SphericalKMeans(**params, max_fit_samples=2000).fit(X)
        predicted = remote.predict(X[::-1])
    assert sum(key.startswith("micro-kmeans-rows-") for key in submitted) == 3  # 2 + 1
    assert sum(key.startswith("micro-kmeans-centroids-") for key in submitted) == \
        sum(1 + model.n_iter_ for model in (remote, remote_sampled)) + 2  # + the labels'
    assert any(key.startswith("micro-kmeans-labels-") for key in submitted)
    for a, b in ((remote, local), (remote_sampled, sampled)):
        np.testing.assert_array_equal(a.labels_, b.labels_)
        np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
        assert a.n_iter_ == b.n_iter_
        # after a fit on a sample, the inertia sums the similarities of BLAS's products,
        # whose rounding may differ between a worker's copy of a block and the client's
        # (seen on some machines: 6e-12 relative); the labels and centroids may not differ
        assert a.inertia_ == (b.inertia_ if a.n_fit_samples_ == len(X)
                              else pytest.approx(b.inertia_, rel=1e-9, abs=0))
    np.testing.assert_array_equal(predicted, local.labels_[::-1])
    # per iteration: the centroids and the rows to reassign, never the rows themselves
    assert max(sent for sent, _ in sweep_log.kmeans) < X.nbytes


# ------------------------------------------------------------------ workers killed
# Last in the module: a killed worker's replacement can take a while to join, or be
# refused while the scheduler still lists the dead one (the `client` fixture then makes
# the cluster again), and the tests that keep every worker busy must not run meanwhile.

def test_a_worker_killed_mid_chunk_changes_nothing(client, generated, tmp_path):
    """The worker running partition 1 is killed as its fourth sweep starts: it takes the
    partition's held arrays and the sweep with it; the scheduler runs both again on the
    other worker (or the restarted one) from the task graph, and the chunk ends as an
    uninterrupted run does."""
    train, interests, chunk, _ = generated
    uninterrupted = _micro(train, interests, chunk, tol=0)
    marker = tmp_path / "killed"
    client.register_plugin(KillOnce(r"^micro-sweep-.*-s3-p1$", str(marker)), name="kill-once")
    try:
        with joblib.parallel_config(backend="dask"):
            interrupted = _micro(train, interests, chunk, tol=0)
    finally:
        client.unregister_worker_plugin("kill-once")
    assert marker.exists(), "no worker was killed"
    assert_same_state(interrupted, uninterrupted)


def test_a_worker_killed_during_the_evaluation_changes_nothing(client, fitted, tmp_path):
    """The worker scoring the second block of the first test chunk is killed as it starts:
    the scheduler runs the block (and, if that worker held it, the recommender's task)
    again, and the report equals an uninterrupted one."""
    model, test = fitted
    local = _evaluate(model, test)
    marker = tmp_path / "killed"
    client.register_plugin(KillOnce(r"^micro-score-.*-b1$", str(marker)), name="kill-score")
    try:
        with joblib.parallel_config(backend="dask"):
            remote = _evaluate(model, test)
    finally:
        client.unregister_worker_plugin("kill-score")
    assert marker.exists(), "no worker was killed"
    assert remote.points.equals(local.points)
