"""MiCRO's sampler on a Dask cluster of 2 local workers against the threaded sampler.

One chunk drawn from the paper's generative model (``planted_stream`` of
`benchmarks/sampler.py`: planted interests, 1-10 interests per user, all items new in the
chunk) is sampled by ``MiCRO.partial_fit`` with the same K and the same number of sweeps
(``tol=0``):

- on one thread (``n_jobs=1``, one partition sampled in place);
- on 2 threads (``n_jobs=2``: two partitions merged after every sweep);
- on a ``LocalCluster`` of 2 worker processes of one thread each, inside
  ``joblib.parallel_config(backend="dask")`` with ``n_jobs=2`` (the same two partitions);
  and with ``n_jobs=4`` (four partitions on the two workers).

Table 1: seconds per sweep (the chain's time over its sweeps, the merge and the
log-likelihood on the client included; on the cluster also the one-time shipping of the
partitions) and the bytes shipped to and from the workers per sweep, from the DEBUG
records of ``sklearn_micro._dask``. Table 2: the memory a worker needs for its
partitions, counted from the arrays' sizes on this chunk and projected to the paper's
TwitterFaveGraph (283M engagements in 192 chunks: about 1.5M engagements per chunk,
K = 5,000).

Tables go to stdout as markdown; progress goes to stderr. Run from the repository's root::

    PYTHONPATH=. python benchmarks/dask_sampler.py            # 1.5M-engagement chunk
    PYTHONPATH=. python benchmarks/dask_sampler.py --quick    # 300k, about 2 minutes
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

import joblib
import numpy as np
from distributed import Client, LocalCluster
from sampler import fmt, log, machine, planted_stream, table, warm_up
from threadpoolctl import threadpool_limits

from sklearn_micro import MiCRO, _gibbs
from sklearn_micro import micro as micro_module
from sklearn_micro._gibbs import partition_layout

FULL = dict(users=200_000, train=3_000_000, test=1_500_000, items=68_000, interests=5000,
            sweeps=10)
QUICK = dict(users=50_000, train=600_000, test=300_000, items=20_000, interests=5000,
             sweeps=5)
FAVE = dict(engagements=283_000_000, chunks=192, interests=5000)


class SweepBytes(logging.Handler):
    """The bytes shipped per sweep and per chain, from ``sklearn_micro._dask``'s records."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.held, self.sent, self.received = [], [], []

    def emit(self, record):
        if hasattr(record, "bytes_received"):
            self.sent.append(record.bytes_sent)
            self.received.append(record.bytes_received)
        elif hasattr(record, "bytes_sent"):
            self.held.append(record.bytes_sent)


def sample(train, interests, test, *, sweeps, seed, n_jobs):
    """Fit, then time ``partial_fit``'s chains; returns the model, the chains' seconds,
    their sweeps and the first chain's layout."""
    model = MiCRO(tol=0.0, max_sweeps=sweeps, random_state=seed, n_jobs=n_jobs).fit(
        train, item_interest=interests)
    spent = {"seconds": 0.0, "sweeps": 0, "layout": None}
    original = micro_module.run_chain

    def chain(layout, *args, **kwargs):
        start = time.perf_counter()
        trace = original(layout, *args, **kwargs)
        spent["seconds"] += time.perf_counter() - start
        spent["sweeps"] += len(trace)
        spent["layout"] = spent["layout"] or layout
        return trace

    micro_module.run_chain = chain
    try:
        model.partial_fit(test)
    finally:
        micro_module.run_chain = original
    return model, spent["seconds"], spent["sweeps"], spent["layout"]


def worker_bytes(layout, n_partitions: int) -> tuple[float, float]:
    """Bytes a worker holds for a partition between sweeps, and the most one sweep task
    adds while it runs, for the largest of ``n_partitions`` partitions of ``layout``.

    Held: the users' engagements (int32), their entry pointers (int64) and map to entries
    (int32), support pointers (int64), interests (int32) and priors (float64). A sweep:
    ``z`` as shipped, in int32 and its copy; the users' counts and their copy; the
    touched entries' counts as shipped, in int32, their copy and the change; ``N[k, t]``
    likewise; the results.
    """
    K = layout.n_interests
    held = sweep = 0.0
    for part in partition_layout(layout, n_partitions):
        n_e = part.engagement_user.shape[0]
        n_users = part.support_ptr.shape[0] - 1
        n_sup = int(part.support_ptr[-1])
        n_entries = part.entries.shape[0]
        held = max(held, 4 * n_e + 8 * (n_e + 1) + 4 * part.entry_of.shape[0]
                   + 8 * (n_users + 1) + 12 * n_sup)
        sweep = max(sweep, 4 * 3 * n_e + 4 * 2 * n_sup + 4 * 4 * n_entries + 4 * 5 * K
                    + 4 * (n_e + 2 * n_entries + K))
    return held, sweep


def idle_worker_rss(client) -> float:
    """Resident memory of a worker process with the package imported, in bytes."""
    def rss():
        import psutil

        import sklearn_micro._dask  # noqa: F401
        return psutil.Process().memory_info().rss

    return float(np.mean(list(client.run(rss).values())))


def mb(x: float) -> str:
    return fmt(x / 1e6)


def main(argv=None) -> None:
    # this chunk's supports are small (about 3M support entries a sweep), below the work
    # from which run_chain splits a chunk (MIN_PARTITION_WORK): split it anyway, n_jobs
    # partitions, to compare the threads' and the cluster's partitions
    _gibbs.MIN_PARTITION_WORK = 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 300k-engagement chunk")
    parser.add_argument("--users", type=int, help="users in the stream")
    parser.add_argument("--train", type=int, help="engagements in the training chunk")
    parser.add_argument("--test", type=int, help="engagements in the sampled chunk")
    parser.add_argument("--items", type=int, help="items drawn per chunk (about I_t)")
    parser.add_argument("--interests", type=int, help="K")
    parser.add_argument("--sweeps", type=int, help="Gibbs sweeps of every run")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)

    command = ("python benchmarks/dask_sampler.py"
               + (" " + " ".join(argv or sys.argv[1:])).rstrip())
    print(f"# MiCRO's sampler on a Dask cluster\n\n`{command}`\n")
    print("\n".join(machine()))
    print(f"- stream: {args.users:,} users, a training chunk of {args.train:,} engagements "
          f"and a sampled chunk of {args.test:,}, about {args.items:,} items per chunk, "
          f"K = {args.interests:,}, {args.sweeps} sweeps (`tol=0`)")
    print("- cluster: `LocalCluster(n_workers=2, threads_per_worker=1, processes=True)` on "
          "the same machine; the client (the estimator, the merge, the log-likelihood) in "
          "this process\n")

    handler = SweepBytes()
    logger = logging.getLogger("sklearn_micro._dask")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    log("drawing the stream")
    train, interests, test, _ = planted_stream(args.users, args.interests, args.train,
                                               args.test, args.items, seed=args.seed)
    rows, models, per_sweep = [], {}, {}
    with threadpool_limits(1, user_api="blas"):
        log("warming up numba kernels")
        warm_up()
        for n_jobs in (1, 2):
            log(f"threads, n_jobs={n_jobs}")
            model, seconds, sweeps, layout = sample(train, interests, test, sweeps=args.sweeps,
                                                    seed=args.seed, n_jobs=n_jobs)
            models["threads", n_jobs] = model
            per_sweep["threads", n_jobs] = seconds / sweeps
            base = per_sweep["threads", 1]
            rows.append([f"{n_jobs} thread{'s' if n_jobs > 1 else ''}", n_jobs, sweeps,
                         fmt(seconds / sweeps), f"{base / (seconds / sweeps):.2f}x",
                         "-", "-", "-", "-"])
        log("starting the cluster")
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            client.run(warm_up)
            rss = idle_worker_rss(client)
            for n_jobs in (2, 4):
                log(f"cluster, n_jobs={n_jobs}")
                handler.held.clear()
                handler.sent.clear()
                handler.received.clear()
                with joblib.parallel_config(backend="dask"):
                    model, seconds, sweeps, _ = sample(
                        train, interests, test, sweeps=args.sweeps, seed=args.seed,
                        n_jobs=n_jobs)
                models["dask", n_jobs] = model
                sent = np.mean(handler.sent)
                received = np.array(handler.received)
                rows.append(["2 workers x 1 thread", n_jobs, sweeps, fmt(seconds / sweeps),
                             f"{base / (seconds / sweeps):.2f}x", mb(sum(handler.held)),
                             mb(sent), f"{mb(received[0])} / {mb(received[-1])}",
                             f"{(sent + received.mean()) / layout.n_engagements:.2f}"])
    same = np.array_equal(models["threads", 2].phi_count_, models["dask", 2].phi_count_)

    n_e = layout.n_engagements
    print("## 1. Seconds and bytes per sweep\n")
    print(f"One chunk of {n_e:,} engagements ({layout.n_entries:,} (item, interest) "
          f"entries, I_t = {layout.n_items:,}). Speed-up is against one thread, measured in "
          "the same run. \"Held\" is shipped once per chain (the partitions' arrays); "
          "\"to workers\" and \"back\" each sweep (back: first / last sweep, since fewer "
          "counts change as the chain settles).\n")
    print(table(["sampler", "n_jobs (partitions)", "sweeps", "s per sweep", "speed-up",
                 "held (MB, once)", "to workers (MB/sweep)", "back (MB/sweep, first / last)",
                 "bytes per engagement per sweep"], rows))
    print(f"\nThe cluster's chain with 2 partitions equals the 2-thread chain: "
          f"{'yes' if same else 'NO'} (phi counts compared).")

    per_chunk = FAVE["engagements"] / FAVE["chunks"]
    scale = per_chunk / n_e
    mem_rows = []
    for n_workers in (2, 8, 32):
        held, sweep = worker_bytes(layout, n_workers)
        mem_rows.append([n_workers, mb(held), mb(sweep), mb(held * scale),
                         mb(sweep * scale), mb(rss + (held + sweep) * scale)])
    print(f"\n## 2. Memory per worker, one partition per worker thread\n\nCounted from the "
          f"arrays of this chunk's largest partition, then scaled by {scale:.2f} to a "
          f"TwitterFaveGraph chunk ({per_chunk:,.0f} engagements: 283M in 192 chunks), "
          f"with this stream's support sizes and K = {FAVE['interests']:,}. A worker "
          f"process with the package imported takes {mb(rss)} MB before any task "
          "(measured), counted in the last column.\n")
    print(table(["workers (1 thread each)", "held, this chunk (MB)",
                 "one sweep, this chunk (MB)", "held, fave chunk (MB)",
                 "one sweep, fave chunk (MB)", "worker total, fave chunk (MB)"], mem_rows))
    print("\nLoad average at the end (1, 5, 15 min): "
          + ", ".join(f"{x:.2f}" for x in os.getloadavg()) + ".")


if __name__ == "__main__":
    main()
