"""Work on a Dask cluster, through joblib's Dask backend: the chunk sampler's partitions,
retrieval and the rolling evaluation by blocks of users, and the assignment step of
spherical k-means by blocks of rows.

Inside ``joblib.parallel_config(backend="dask")`` with a ``dask.distributed.Client``
active, `sklearn_micro.micro._gibbs.run_chain` sweeps its partitions here instead of on threads,
`sklearn_micro.model_selection` scores each test chunk's users here
(`score_chunk_on_cluster`; `recommend_on_cluster` is the same for ``recommend``), and
`sklearn_micro.cluster` runs its assignment steps here (`ClusterAssignment`,
`assign_all_on_cluster`). Each runs on the workers the very function the threads run, so
its results equal theirs.

The sampler. The work of a partition is the same function, `sample_partition`, on the
same arrays with the same seed, so a chain on the cluster equals the chain on threads with
as many partitions, bit for bit.

What travels, and when:

- once per chain, a task per partition holds the partition's arrays (its users'
  engagements, supports and the map to the (item, interest) entries they touch) on a
  worker. The arrays travel inside the task, so the scheduler keeps them and can run the
  task again elsewhere: nothing is scattered, and a lost worker takes nothing that cannot
  be recomputed;
- every sweep, a task per partition takes its held arrays and, inside the task, the
  partition's assignments ``z``, the counts of the entries it touches and ``N[k, t]``;
  it returns the new ``z`` and the change of ``N[k, t]``. Integers travel in the smallest
  dtype that holds them. The whole (item, interest) table stays with the client, which
  merges the changes (AD-LDA: the (item, interest) counts of the engagements whose ``z``
  moved, as for threads) and is never broadcast.

A sweep's seed depends on (chunk seed, pass, sweep, partition) only, and its inputs
travel inside its task, so a sweep lost with its worker runs again on another worker with
the same result. Every wait has a limit, ``sklearn_micro.sweep_timeout`` in Dask's
configuration (default 10 minutes per sweep), after which the call fails with an error
that says so.

Retrieval and the evaluation. The recommender travels once per call (per test chunk), in
a task of its own that every block takes as an input; a block carries its users and their
relevant items and returns its users' metrics (or, for ``recommend``, their top-m lists).

K-means. The rows of a run are held on the workers by blocks, each inside its task; every
iteration ships the centroids once, in a task the blocks take as an input, and each block
the positions of its rows to reassign.

Every wait of these has the same limit. The bytes of each sweep, evaluated chunk and k-means
iteration are logged at DEBUG level on this module's logger.
"""

from __future__ import annotations

import copy
import logging
import pickle
from contextlib import contextmanager
from uuid import uuid4

import numpy as np

from ._parallel import active_client
from ._request import parse_request

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = "10 minutes"


def sweep_timeout() -> float:
    """Seconds a sweep may take on the cluster: ``sklearn_micro.sweep_timeout`` in Dask's
    configuration, 10 minutes by default."""
    import dask.config
    from dask.utils import parse_timedelta

    return parse_timedelta(dask.config.get("sklearn_micro.sweep_timeout", DEFAULT_TIMEOUT))


@contextmanager
def _off_worker_thread():
    """Inside a task (a scorer of a search run by the backend), leave the worker's thread
    to other tasks while this one waits on the tasks it submits."""
    from distributed import get_worker, rejoin, secede

    try:
        get_worker()
        nested = True
    except ValueError:
        nested = False
    if nested:
        secede()
    try:
        yield
    finally:
        if nested:
            rejoin()


@contextmanager
def on_cluster(client, layout, partitions, sample_partition):
    """Hold each partition's arrays on a worker inside the block; yields
    ``sweep(seeds, counts, z, beta, i_beta)``, which returns what ``sample_partition``
    (the sampler's sweep of one partition, run on the workers) returns for each
    partition, in order."""
    sweeps = ClusterSweeps(client, layout, partitions, sample_partition)
    try:
        with _off_worker_thread():
            yield sweeps
    finally:
        sweeps.release()


class ClusterSweeps:
    """A chain's partitions held on a cluster's workers; calling it runs one sweep.

    Parameters
    ----------
    client : distributed.Client
    layout : ChunkLayout
    partitions : list of Partition
        Of ``layout``; partition ``p`` is held first on the ``p % n``-th of the cluster's
        ``n`` workers (by address), and may move if that worker is lost.
    sample_partition : callable
        ``sklearn_micro.micro._gibbs.sample_partition``, run on each partition.
    """

    def __init__(self, client, layout, partitions, sample_partition):
        import dask.config

        self.client = client
        self.partitions = partitions
        self.sample_partition = sample_partition
        self.timeout = sweep_timeout()
        self.tag = uuid4().hex[:10]
        self.n_sweeps = 0
        workers = sorted(client.ncores()) or [None]
        self.held, shipped = [], 0
        # the arrays go inside the tasks on purpose, so that the scheduler can run them again
        with dask.config.set({"distributed.admin.large-graph-warning-threshold": "1TB"}):
            for p, part in enumerate(partitions):
                arrays = [_narrow(part.engagement_user), _narrow(part.entry_ptr),
                          _narrow(part.entry_of), _narrow(part.support_ptr),
                          _narrow(layout.support_interest[part.supports]),
                          layout.support_prior[part.supports]]
                shipped += sum(a.nbytes for a in arrays)
                worker = workers[p % len(workers)]
                self.held.append(client.submit(
                    _hold_partition, *arrays, key=f"micro-partition-{self.tag}-p{p}",
                    workers=None if worker is None else [worker], allow_other_workers=True))
        logger.debug("%d partitions held on the cluster: %d bytes", len(partitions), shipped,
                     extra={"bytes_sent": shipped})

    def __call__(self, seeds, counts, z, beta, i_beta):
        """One sweep of every partition from the chain's ``counts`` and ``z``."""
        s = self.n_sweeps
        self.n_sweeps += 1
        interest_count = _narrow(counts.interest_count)
        inputs = [(_narrow(z[part.engagements]), _narrow(counts.entry_count[part.entries]))
                  for part in self.partitions]
        futures = [self.client.submit(_sweep_held, self.sample_partition, held, seed, z_p,
                                      entry_count, interest_count, beta, i_beta,
                                      key=f"micro-sweep-{self.tag}-s{s}-p{p}")
                   for p, (held, seed, (z_p, entry_count)) in enumerate(zip(
                       self.held, seeds, inputs, strict=True))]
        try:
            results = _gather(self.client, futures, self.timeout, "MiCRO's sampler",
                              f"sweep {s}")
        finally:
            self.client.cancel(futures)
        sent = sum(z_p.nbytes + c.nbytes + interest_count.nbytes for z_p, c in inputs)
        received = sum(sum(a.nbytes for a in r[:-1]) for r in results)
        logger.debug("sweep %d: %d partitions, %d bytes to the workers, %d bytes back", s,
                     len(self.partitions), sent, received,
                     extra={"bytes_sent": sent, "bytes_received": received})
        return [_unpack(part, r, counts)
                for part, r in zip(self.partitions, results, strict=True)]

    def release(self) -> None:
        """Let the workers drop the partitions."""
        self.client.cancel(self.held)


def _gather(client, futures, timeout, who, what, parts="partitions"):
    """The futures' results, or a TimeoutError after ``timeout`` seconds that says who
    waited for what."""
    from distributed import wait

    try:
        wait(futures, timeout=timeout)
    except TimeoutError:
        done = sum(f.done() for f in futures)
        raise TimeoutError(
            f"{who} waited {timeout:g} s for {what} on the Dask cluster; {done} of "
            f"{len(futures)} {parts} were done. The workers may be lost or overloaded; raise "
            "the limit with dask.config.set({'sklearn_micro.sweep_timeout': '30 minutes'}) "
            "if the work needs longer."
        ) from None
    return client.gather(futures)


def _hold_partition(engagement_user, entry_ptr, entry_of, support_ptr, support_interest,
                    support_prior):
    """A partition's arrays on a worker, in the dtypes of the kernels."""
    return (engagement_user.astype(np.int32), entry_ptr.astype(np.int64),
            entry_of.astype(np.int32), support_ptr.astype(np.int64),
            support_interest.astype(np.int32), support_prior)


def _sweep_held(sample_partition, held, seed, z, entry_count, interest_count, beta,
                i_beta):
    """One sweep of a held partition (on a worker): the new ``z``, the change of
    ``N[k, t]`` and how many ``z`` changed. The (item, interest) counts' changes are the
    moves of ``z``, which the client merges."""
    engagement_user, entry_ptr, entry_of, support_ptr, support_interest, support_prior = held
    z = z.astype(np.int32)
    z, _, interest_delta, changed = sample_partition(
        seed, engagement_user, entry_ptr, entry_of, support_ptr, support_interest,
        support_prior, _user_count(support_ptr, engagement_user, z), z,
        entry_count.astype(np.int32), interest_count.astype(np.int32), beta, i_beta,
        in_place=True)
    return _narrow(z), _narrow(interest_delta), changed


def _unpack(part, result, counts):
    """A sweep's result from the cluster in the form `sample_partition` returns."""
    z, interest_delta, changed = result
    z = z.astype(np.int32)
    return (z, _user_count(part.support_ptr, part.engagement_user, z),
            interest_delta.astype(counts.interest_count.dtype), changed)


def _user_count(support_ptr, engagement_user, z):
    """``N[u, k]`` of the chunk aligned with the supports, from the assignments."""
    return np.bincount(support_ptr[engagement_user] + z,
                       minlength=support_ptr[-1]).astype(np.int32)


def _narrow(values: np.ndarray) -> np.ndarray:
    """Integers in the smallest dtype that holds them (to ship fewer bytes)."""
    if values.dtype.kind not in "iu" or values.size == 0:
        return values
    return values.astype(np.result_type(np.min_scalar_type(values.min()),
                                        np.min_scalar_type(values.max())), copy=False)


# ---------------------------------------------------------------- work split in blocks

# Bytes of a block of rows (k-means) a task takes; and the fewest rows or users of a block,
# below which a block's round trip costs more than its work saves.
_BLOCK_BYTES = 64 * 2**20
_MIN_BLOCK_ROWS = 1024
_MIN_BLOCK_USERS = 512


def _blocks(client, n: int, *, smallest: int, largest: int | None = None,
            multiple: int = 1) -> list[tuple[int, int]]:
    """``(lo, hi)`` ranges of about equal size covering ``range(n)``: one per worker thread
    of the cluster when each then has at least ``smallest`` elements, more when blocks would
    exceed ``largest``; sizes are multiples of ``multiple`` (the last block excepted)."""
    threads = sum(client.nthreads().values()) or 1
    n_blocks = max(1, min(threads, n // max(smallest, 1)))
    if largest is not None:
        n_blocks = max(n_blocks, -(-n // largest))
    size = -(-n // n_blocks)
    size = max(multiple, -(-size // multiple) * multiple)
    return [(lo, min(lo + size, n)) for lo in range(0, n, size)]


def _workers(client) -> list:
    """The cluster's worker addresses, in a fixed order (``[None]`` when there are none, so
    that tasks still queue until a worker comes)."""
    return sorted(client.ncores()) or [None]


def _submit_blocks(client, function, blocks, *, key, workers, **kwargs) -> list:
    """``function(*block)`` for each block's arguments, block ``j`` placed first on the
    ``j % n``-th of ``workers`` (so that blocks spread even when they share a held input)
    and free to move if that worker is lost; ``[None]`` leaves the choice to the
    scheduler."""
    import dask.config

    futures = []
    # a block's arrays go inside its task on purpose, so that the scheduler can run it again
    with dask.config.set({"distributed.admin.large-graph-warning-threshold": "1TB"}):
        for j, args in enumerate(blocks):
            worker = workers[j % len(workers)]
            place = {} if worker is None else {"workers": [worker],
                                                "allow_other_workers": True}
            futures.append(client.submit(function, *args, key=f"{key}-b{j}", **place,
                                         **kwargs))
    return futures


def _keep_on_worker(value):
    """``value`` itself: as a task's result, it stays on the worker that ran the task."""
    return value


def _nbytes(value) -> int:
    from dask.sizeof import sizeof

    return int(sizeof(value))


# ------------------------------------------------- retrieval and the rolling evaluation

def _recommender_to_ship(recommender, exclude_seen: bool):
    """The recommender as its blocks need it: without the seen items unless they are
    excluded (they serve only ``exclude_seen``, and take 8 bytes per (user, item) pair)."""
    if exclude_seen or not hasattr(recommender, "seen_items_"):
        return recommender
    shipped = copy.copy(recommender)
    shipped.seen_items_ = type(recommender.seen_items_)()
    return shipped


def _hold_recommender(recommender):
    """A recommender held on a worker: one thread per block, the worker's threads running
    blocks side by side (a copy, since a cluster of threads hands the client's object)."""
    if hasattr(recommender, "n_jobs"):
        recommender = copy.copy(recommender)
        recommender.n_jobs = 1
    return recommender


def _map_recommender(client, recommender, function, blocks, *, exclude_seen: bool,
                     name: str, what: str) -> list:
    """``function(recommender, *block)`` for each block on the cluster, in order.

    The recommender travels once, inside a task of its own that the blocks take as an input
    (the scheduler keeps that task and runs it again if its worker is lost); a worker
    running a block fetches it once from a worker that has it.
    """
    tag = uuid4().hex[:10]
    shipped = _recommender_to_ship(recommender, exclude_seen)
    held = _submit_blocks(client, _hold_recommender, [(shipped,)],
                          key=f"micro-recommender-{tag}", workers=[None])[0]
    futures = _submit_blocks(client, function, [(held, *args) for args in blocks],
                             key=f"micro-{name}-{tag}", workers=_workers(client))
    try:
        with _off_worker_thread():
            results = _gather(client, futures, sweep_timeout(), "The rolling evaluation"
                              if name == "score" else "recommend_on_cluster", what, "blocks")
    finally:
        client.cancel([*futures, held])
    if logger.isEnabledFor(logging.DEBUG):
        held_bytes = len(pickle.dumps(shipped, protocol=5))
        sent = sum(_nbytes(args) for args in blocks)
        received = sum(_nbytes(r) for r in results)
        logger.debug("%s: recommender held: %d bytes; %d blocks: %d bytes to the workers, "
                     "%d bytes back", what, held_bytes, len(blocks), sent, received,
                     extra={"dask_work": name, "held_bytes": held_bytes, "sent_bytes": sent,
                            "received_bytes": received})
    return results


def _recommend_block(recommender, users, m, exclude_seen, request):
    """`recommend` of a block of users on a worker, from the request parsed on the client
    (`Request.block`): the model's own steps after its checks, which the client ran."""
    model = recommender._published()
    user_index, seen = model._users_and_seen(users, exclude_seen)
    items, scores = model._answer(user_index, int(m), seen, request, exclude_seen)
    return model._external_items(items), scores


def recommend_on_cluster(recommender, users, m: int = 100, *, exclude_seen: bool = False,
                         exclude=None, allow=None, history=None, client=None,
                         max_users: int = 1 << 14):
    """``recommender.recommend(users, m)`` by blocks of users on a Dask cluster's workers.

    Parameters
    ----------
    recommender : fitted recommender
        Any recommender of the package (it travels once, pickled, in a task of its own).
    users : array-like of shape (n_users,)
        External user ids.
    m : int, default=100
        Items per user.
    exclude_seen : bool, default=False
        As in ``recommend``; without it the seen items stay with the client.
    exclude, allow, history : optional
        As in ``recommend``: each block of users takes its own lists (a flat list travels
        with every block).
    client : distributed.Client, optional
        By default the client of joblib's active Dask backend.
    max_users : int, default=16384
        The most users of a block.

    Returns
    -------
    items, scores : ndarray of shape (n_users, m)
        What ``recommender.recommend(users, m, exclude_seen=exclude_seen)`` returns.
    """
    client = client if client is not None else active_client()
    if client is None:
        raise ValueError("recommend_on_cluster needs a Dask client: give client= or call it "
                         "inside joblib.parallel_config(backend='dask'); got neither.")
    model = recommender._published()
    users = model._check_recommend(users, m, exclude_seen)
    request = parse_request(model.item_ids_, users.shape[0], exclude=exclude, allow=allow,
                            history=history)
    return recommend_parsed_on_cluster(model, users, m, exclude_seen, request, client,
                                       max_users=max_users)


def recommend_parsed_on_cluster(model, users, m, exclude_seen, request, client, *,
                                max_users: int = 1 << 14):
    """`recommend_on_cluster` once ``users``, ``m`` and the request are checked and parsed
    (``recommend`` does both before it comes here): the blocks carry the parsed request's
    rows (`Request.block`), which the workers use as they are."""
    if users.size == 0:
        return model._external_items(np.empty((0, int(m)), np.int64)), np.empty((0, int(m)))
    blocks = [(users[lo:hi], m, exclude_seen, request.block(lo, hi))
              for lo, hi in _blocks(client, users.shape[0], smallest=_MIN_BLOCK_USERS,
                                    largest=max_users)]
    results = _map_recommender(client, model, _recommend_block, blocks,
                               exclude_seen=exclude_seen, name="recommend",
                               what=f"recommend of {users.shape[0]} users")
    return (np.concatenate([items for items, _ in results]),
            np.concatenate([scores for _, scores in results]))


def _score_block(recommender, users, items, relevant_indptr, relevant, ks, exclude_seen,
                 score_block):
    return score_block(recommender, users, items, relevant_indptr.astype(np.int64),
                       relevant.astype(np.int64), ks, exclude_seen)


def score_chunk_on_cluster(client, recommender, users, items, relevant_indptr, relevant, ks,
                           exclude_seen, score_block, *, chunk, max_users):
    """The metrics of a test chunk's users, scored by blocks of users on the workers.

    ``score_block(recommender, users, items, relevant_indptr, relevant, ks, exclude_seen)``
    is the threaded path's function for one block (`sklearn_micro.model_selection`):
    ``relevant`` are the users' relevant items as positions in the sorted ``items``. A
    block travels with its users, their relevant items renumbered among the block's own
    (so only the block's items travel, not the chunk's) and returns its users' metrics,
    never its top-m lists: the same numbers the threads compute, since the metrics
    compare positions only for equality and order.

    Returns
    -------
    scores : dict of str to ndarray
        Each metric of each user, in the order of ``users``.
    """
    blocks = []
    for lo, hi in _blocks(client, users.shape[0], smallest=_MIN_BLOCK_USERS,
                          largest=max_users):
        rows = relevant[relevant_indptr[lo]:relevant_indptr[hi]]
        used, local = np.unique(rows, return_inverse=True)
        blocks.append((users[lo:hi], items[used],
                       _narrow(relevant_indptr[lo:hi + 1] - relevant_indptr[lo]),
                       _narrow(local.ravel()), ks, exclude_seen, score_block))
    results = _map_recommender(client, recommender, _score_block, blocks,
                               exclude_seen=exclude_seen, name="score",
                               what=f"chunk {chunk}'s {users.shape[0]} users")
    return {name: np.concatenate([r[name] for r in results]) for name in results[0]}


# ------------------------------------------------------ k-means: the assignment step

def _hold_centroids(centers, groups):
    return centers, groups


def _assign_held_rows(X, centroids, rows, block_rows, assign_bounded):
    """The bounded assignment of ``X``'s ``rows`` (all if None) on a worker: their best
    centroids (narrowed), similarities to them and per-group bounds."""
    centers, groups = centroids
    if rows is not None:
        X = X[rows.astype(np.intp)]
    n = X.shape[0]
    labels = np.zeros(n, np.int32)
    lower = np.empty(n)
    upper = np.empty((n, groups.n_groups), X.dtype)
    assign_bounded(X, None, centers, groups, block_rows, labels, lower, upper)
    return _narrow(labels), lower, upper


class ClusterAssignment:
    """The rows of a spherical k-means run held on a cluster's workers by blocks; calling
    it runs one assignment step there, with the arguments of ``assign_bounded``.

    The rows travel once, inside a task per block (nothing is scattered: a lost worker's
    blocks are carried again from the task graph). Every call ships the centroids once,
    in a task the blocks take as an input, and each block the positions of its rows to
    reassign; a block returns their labels, similarities and bounds. The workers drop the
    rows when the object is dropped (Dask releases what no client holds).

    Parameters
    ----------
    client : distributed.Client
    X : ndarray of shape (n_rows, n_features)
        Unit rows.
    assign_bounded : callable
        ``sklearn_micro.cluster._assign_bounded``, run on each block.
    """

    def __init__(self, client, X, assign_bounded):
        self.client = client
        self.assign_bounded = assign_bounded
        self.shape = X.shape
        self.tag = uuid4().hex[:10]
        self.n_calls = 0
        self.workers = _workers(client)
        self.blocks = _blocks(client, X.shape[0], smallest=_MIN_BLOCK_ROWS,
                              largest=max(1, _BLOCK_BYTES // max(X[:1].nbytes, 1)))
        self.held = _submit_blocks(client, _keep_on_worker,
                                   [(X[lo:hi],) for lo, hi in self.blocks],
                                   key=f"micro-kmeans-rows-{self.tag}", workers=self.workers)
        logger.debug("k-means: %d blocks of rows held on the cluster: %d bytes",
                     len(self.blocks), X.nbytes,
                     extra={"dask_work": "kmeans-rows", "sent_bytes": X.nbytes})

    def __call__(self, X, rows, centers, groups, block_rows, labels, lower, upper) -> int:
        """Reassign ``rows`` of ``X`` (all if None) as ``assign_bounded`` does; returns how
        many rows changed cluster."""
        if X.shape != self.shape:
            raise ValueError(f"X must be the {self.shape} rows held on the cluster; got "
                             f"shape {X.shape}.")
        call = self.n_calls
        self.n_calls += 1
        if rows is not None and rows.shape[0] > 1 and (rows[1:] < rows[:-1]).any():
            rows = np.sort(rows)
        bounds = np.array([lo for lo, _ in self.blocks] + [self.shape[0]])
        cut = None if rows is None else np.searchsorted(rows, bounds)
        targets, inputs = [], []
        for b, (lo, hi) in enumerate(self.blocks):
            if rows is None:
                targets.append(slice(lo, hi))
                inputs.append((b, None))
            elif cut[b + 1] > cut[b]:
                targets.append(rows[cut[b]:cut[b + 1]])
                inputs.append((b, _narrow(targets[-1] - lo)))
        if not inputs:
            return 0
        centroids = _submit_blocks(self.client, _hold_centroids, [(centers, groups)],
                                   key=f"micro-kmeans-centroids-{self.tag}-i{call}",
                                   workers=[None])[0]
        futures = _submit_blocks(
            self.client, _assign_held_rows,
            [(self.held[b], centroids, local, block_rows, self.assign_bounded)
             for b, local in inputs], key=f"micro-kmeans-assign-{self.tag}-i{call}",
            workers=[self.workers[b % len(self.workers)] for b, _ in inputs])
        try:
            with _off_worker_thread():
                results = _gather(self.client, futures, sweep_timeout(), "SphericalKMeans",
                                  f"the assignment step of iteration {call}", "blocks")
        finally:
            self.client.cancel([*futures, centroids])
        changed = 0
        for target, (new, best, group_best) in zip(targets, results, strict=True):
            new = new.astype(np.int32)
            changed += int(np.count_nonzero(new != labels[target]))
            labels[target] = new
            lower[target] = best
            upper[target] = group_best
        if logger.isEnabledFor(logging.DEBUG):
            sent = centers.nbytes + _nbytes(groups) + sum(
                0 if local is None else local.nbytes for _, local in inputs)
            received = sum(_nbytes(r) for r in results)
            logger.debug("k-means iteration %d: %d blocks, %d bytes to the workers, %d bytes "
                         "back", call, len(inputs), sent, received,
                         extra={"dask_work": "kmeans-assign", "sent_bytes": sent,
                                "received_bytes": received})
        return changed


def _assign_rows(X, centers, block_rows, assign_all):
    labels = np.empty(X.shape[0], np.int32)
    best = np.empty(X.shape[0])
    assign_all(X, centers, block_rows, labels, best)
    return _narrow(labels), best


def assign_all_on_cluster(client, X, centers, block_rows, labels, best, assign_all,
                          progress=None) -> None:
    """``assign_all(X, centers, block_rows, labels, best)`` by blocks of rows on the
    workers: each block travels inside its task, the centroids once in a task the blocks
    share. Blocks are multiples of ``block_rows`` rows, so each row is computed in the same
    block of ``block_rows`` as on the client."""
    tag = uuid4().hex[:10]
    blocks = _blocks(client, X.shape[0], smallest=_MIN_BLOCK_ROWS,
                     largest=max(1, _BLOCK_BYTES // max(X[:1].nbytes, 1)), multiple=block_rows)
    held = _submit_blocks(client, _keep_on_worker, [(centers,)],
                          key=f"micro-kmeans-centroids-{tag}", workers=[None])[0]
    futures = _submit_blocks(client, _assign_rows,
                             [(X[lo:hi], held, block_rows, assign_all) for lo, hi in blocks],
                             key=f"micro-kmeans-labels-{tag}", workers=_workers(client))
    try:
        with _off_worker_thread():
            results = _gather(client, futures, sweep_timeout(), "SphericalKMeans",
                              f"the labels of {X.shape[0]} rows", "blocks")
    finally:
        client.cancel([*futures, held])
    for (lo, hi), (new, similarity) in zip(blocks, results, strict=True):
        labels[lo:hi] = new
        best[lo:hi] = similarity
        if progress is not None:
            progress.update(hi - lo)
    logger.debug("k-means labels of %d rows: %d blocks, %d bytes to the workers", X.shape[0],
                 len(blocks), X.nbytes + centers.nbytes,
                 extra={"dask_work": "kmeans-labels", "sent_bytes": X.nbytes + centers.nbytes})
