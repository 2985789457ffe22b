"""The chunk sampler's partitions on a Dask cluster, through joblib's Dask backend.

Inside ``joblib.parallel_config(backend="dask")`` with a ``dask.distributed.Client``
active, `sklearn_micro._gibbs.run_chain` sweeps its partitions here instead of on threads.
The work of a partition is the same function, `sample_partition`, on the same arrays with
the same seed, so a chain on the cluster equals the chain on threads with as many
partitions, bit for bit.

What travels, and when:

- once per chain, a task per partition holds the partition's arrays (its users'
  engagements, supports and the map to the (item, interest) entries they touch) on a
  worker. The arrays travel inside the task, so the scheduler keeps them and can run the
  task again elsewhere: nothing is scattered, and a lost worker takes nothing that cannot
  be recomputed;
- every sweep, a task per partition takes its held arrays and, inside the task, the
  partition's assignments ``z``, the counts of the entries it touches and ``N[k, t]``;
  it returns the new ``z``, the entries whose counts changed with their changes, and the
  change of ``N[k, t]``. Integers travel in the smallest dtype that holds them. The
  whole (item, interest) table stays with the client, which merges the changes
  (AD-LDA) and is never broadcast.

A sweep's seed depends on (chunk seed, pass, sweep, partition) only, and its inputs
travel inside its task, so a sweep lost with its worker runs again on another worker with
the same result. Every wait has a limit, ``sklearn_micro.sweep_timeout`` in Dask's
configuration (default 10 minutes per sweep), after which the call fails with an error
that says so.

The bytes of each sweep are logged at DEBUG level on this module's logger.
"""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager
from uuid import uuid4

import numpy as np
from joblib import effective_n_jobs
from joblib.parallel import get_active_backend

from ._gibbs import sample_partition

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = "10 minutes"


def active_client():
    """The Dask client of joblib's active Dask backend, or None outside one."""
    module = sys.modules.get("joblib._dask")  # imported when the backend is chosen
    if module is None:
        return None
    backend, _ = get_active_backend()
    return backend.client if isinstance(backend, module.DaskDistributedBackend) else None


def resolve_n_jobs(n_jobs: int | None) -> int:
    """``n_jobs`` as a number: the partitions of a chunk's users, and the threads of the
    numba kernels that run where the estimator is.

    Outside joblib's Dask backend, joblib's effective ``n_jobs``. Inside it, ``n_jobs``
    (or the ``n_jobs`` of ``parallel_config``) when it is a positive integer, so that a
    chain depends neither on the cluster's size nor on workers lost on the way; None or a
    negative value means the cluster's worker threads at the time of the call (joblib's
    meaning there).
    """
    if active_client() is None:
        return effective_n_jobs(n_jobs)
    if n_jobs is None:
        n_jobs = get_active_backend()[1]
    if n_jobs is not None and n_jobs > 0:
        return int(n_jobs)
    return effective_n_jobs(-1)


def sweep_timeout() -> float:
    """Seconds a sweep may take on the cluster: ``sklearn_micro.sweep_timeout`` in Dask's
    configuration, 10 minutes by default."""
    import dask.config
    from dask.utils import parse_timedelta

    return parse_timedelta(dask.config.get("sklearn_micro.sweep_timeout", DEFAULT_TIMEOUT))


@contextmanager
def on_cluster(client, layout, partitions):
    """Hold each partition's arrays on a worker inside the block; yields
    ``sweep(seeds, counts, z, beta, i_beta)``, which returns what `sample_partition`
    returns for each partition, in order."""
    from distributed import get_worker, rejoin, secede

    try:
        get_worker()
        nested = True  # a task that waits on other tasks leaves its thread to them
    except ValueError:
        nested = False
    sweeps = ClusterSweeps(client, layout, partitions)
    try:
        if nested:
            secede()
        yield sweeps
    finally:
        sweeps.release()
        if nested:
            rejoin()


class ClusterSweeps:
    """A chain's partitions held on a cluster's workers; calling it runs one sweep.

    Parameters
    ----------
    client : distributed.Client
    layout : ChunkLayout
    partitions : list of Partition
        Of ``layout``; partition ``p`` is held first on the ``p % n``-th of the cluster's
        ``n`` workers (by address), and may move if that worker is lost.
    """

    def __init__(self, client, layout, partitions):
        import dask.config

        self.client = client
        self.partitions = partitions
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
        futures = [self.client.submit(_sweep_held, held, seed, z_p, entry_count,
                                      interest_count, beta, i_beta,
                                      key=f"micro-sweep-{self.tag}-s{s}-p{p}")
                   for p, (held, seed, (z_p, entry_count)) in enumerate(zip(
                       self.held, seeds, inputs, strict=True))]
        try:
            results = _gather(self.client, futures, self.timeout, s)
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


def _gather(client, futures, timeout, sweep):
    """The futures' results, or a TimeoutError after ``timeout`` seconds."""
    from distributed import wait

    try:
        wait(futures, timeout=timeout)
    except TimeoutError:
        done = sum(f.done() for f in futures)
        raise TimeoutError(
            f"MiCRO's sampler waited {timeout:g} s for sweep {sweep} on the Dask cluster; "
            f"{done} of {len(futures)} partitions were done. The workers may be lost or "
            "overloaded; raise the limit with dask.config.set({'sklearn_micro.sweep_timeout': "
            "'30 minutes'}) if a sweep needs longer."
        ) from None
    return client.gather(futures)


def _hold_partition(engagement_user, entry_ptr, entry_of, support_ptr, support_interest,
                    support_prior):
    """A partition's arrays on a worker, in the dtypes of the kernels."""
    return (engagement_user.astype(np.int32), entry_ptr.astype(np.int64),
            entry_of.astype(np.int32), support_ptr.astype(np.int64),
            support_interest.astype(np.int32), support_prior)


def _sweep_held(held, seed, z, entry_count, interest_count, beta, i_beta):
    """One sweep of a held partition (on a worker): the new ``z``, the entries whose
    counts changed and their changes, the change of ``N[k, t]`` and how many ``z``
    changed."""
    engagement_user, entry_ptr, entry_of, support_ptr, support_interest, support_prior = held
    z = z.astype(np.int32)
    z, _, entry_delta, interest_delta, changed = sample_partition(
        seed, engagement_user, entry_ptr, entry_of, support_ptr, support_interest,
        support_prior, _user_count(support_ptr, engagement_user, z), z,
        entry_count.astype(np.int32), interest_count.astype(np.int32), beta, i_beta)
    moved = np.flatnonzero(entry_delta)
    return (_narrow(z), _narrow(moved), _narrow(entry_delta[moved]), _narrow(interest_delta),
            changed)


def _unpack(part, result, counts):
    """A sweep's result from the cluster in the form `sample_partition` returns."""
    z, moved, delta, interest_delta, changed = result
    z = z.astype(np.int32)
    entry_delta = np.zeros(part.entries.shape[0], counts.entry_count.dtype)
    entry_delta[moved] = delta
    return (z, _user_count(part.support_ptr, part.engagement_user, z), entry_delta,
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
