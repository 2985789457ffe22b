"""MiCRO on a Dask cluster of 2 local workers against the threaded path, in the same run.

``--part sampler``: one chunk drawn from the paper's generative model (the planted stream
of ``benchmarks/_harness.py``: 1-10 interests per user, all items new in the chunk) is
sampled by ``MiCRO.partial_fit`` with the same K and the same number of sweeps
(``tol=0``) on one thread, on 2 threads (two partitions merged after every sweep), and on a
``LocalCluster`` of 2 single-threaded worker processes inside
``joblib.parallel_config(backend="dask")`` with ``n_jobs=2`` (the same two partitions) and
``n_jobs=4``. Table 1: seconds per sweep and the bytes shipped per sweep; table 2: the
memory a worker needs for its partitions, projected to a TwitterFaveGraph chunk (283M
engagements in 192 chunks, K = 5,000).

``--part evaluation``: MiCRO (its defaults, ``n_jobs=2``) fitted on the training chunk
scores the test chunk's users with the rolling evaluation's step
(``RollingEvaluation.step(..., learn=False)``, top-100, cut-offs 10, 25, 50, 100) and with
``recommend``, on 2 threads and by blocks of users on the cluster; then
``SphericalKMeans(max_fit_samples=None)`` on unit vectors around planted directions, with
its assignment step on the cluster. The answers must be the same as on threads.

Bytes shipped come from the DEBUG records of ``sklearn_micro._dask``. Tables go to stdout
as markdown; progress goes to stderr.

    python benchmarks/dask_cluster.py                 # both parts, a 1.5M-engagement chunk
    python benchmarks/dask_cluster.py --quick         # 300k engagements, a few minutes
    python benchmarks/dask_cluster.py --part sampler --quick
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

import joblib
import numpy as np
from distributed import Client, LocalCluster
from threadpoolctl import threadpool_limits

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from _harness import fmt, header, load_average, log, planted_stream, table, warm_up  # noqa: E402

from sklearn_micro import MiCRO, SphericalKMeans  # noqa: E402
from sklearn_micro import cluster as cluster_module  # noqa: E402
from sklearn_micro import micro as micro_module  # noqa: E402
from sklearn_micro._dask import recommend_on_cluster  # noqa: E402
from sklearn_micro._log import check_log  # noqa: E402
from sklearn_micro.micro._gibbs import partition_layout  # noqa: E402
from sklearn_micro.model_selection import RollingEvaluation  # noqa: E402

FULL = dict(users=200_000, train=3_000_000, test=1_500_000, items=68_000, interests=5000,
            sweeps=10, rows=200_000, dims=128, clusters=1000, iterations=10, repeats=3)
QUICK = dict(users=50_000, train=600_000, test=300_000, items=20_000, interests=5000,
             sweeps=5, rows=50_000, dims=128, clusters=500, iterations=10, repeats=2)
FAVE = dict(engagements=283_000_000, chunks=192, interests=5000)
M_VALUES = (10, 25, 50, 100)
CLUSTER = ("- cluster: `LocalCluster(n_workers=2, threads_per_worker=1, processes=True)` on "
           "the same machine, the client in this process; threads: `n_jobs` in this process")


def mb(x: float) -> str:
    return fmt(x / 1e6)


def new_cluster():
    return LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                        dashboard_address=None)


# ------------------------------------------------------------------------ the sampler

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
    # this chunk's supports are small (about 3M support entries a sweep), below the work
    # from which a chunk is split by default: split it anyway (min_partition_work=0), n_jobs
    # partitions, to compare the threads' and the cluster's partitions
    model = MiCRO(tol=0.0, max_sweeps=sweeps, random_state=seed, n_jobs=n_jobs,
                  min_partition_work=0).fit(train, item_interest=interests)
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



# ------------------------------------------------------- retrieval, evaluation, k-means

class DaskBytes(logging.Handler):
    """The DEBUG records of ``sklearn_micro._dask`` that count bytes, by kind of work."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: dict[str, list] = {}

    def emit(self, record):
        work = getattr(record, "dask_work", None)
        if work is not None:
            self.records.setdefault(work, []).append(record)

    def take(self, work: str) -> list:
        return self.records.pop(work, [])


def warm_up_all() -> None:
    """Compile (or load from numba's cache) the sampler's, retrieval's, the metrics' and
    k-means' kernels."""
    warm_up()
    train, interests, test, _ = planted_stream(200, 8, 2000, 2000, 100, seed=1)
    model = MiCRO(random_state=0, max_sweeps=2).fit(train, item_interest=interests)
    RollingEvaluation(model, m_values=M_VALUES).step(check_log(test), learn=False)
    SphericalKMeans(n_clusters=8, random_state=0).fit(planted_vectors(500, 16, 8, 0))


def score_chunk(model, chunk):
    """Seconds of the rolling evaluation's step on one chunk (scoring only), and its
    metrics."""
    evaluation = RollingEvaluation(model, m_values=M_VALUES)
    start = time.perf_counter()
    evaluation.step(chunk, learn=False)
    seconds = time.perf_counter() - start
    return seconds, evaluation.sums


def timed_assignment(spent: dict):
    """``cluster._assignment`` wrapped to time the assignment steps, and separately the
    holding of the rows on the cluster."""
    original = cluster_module._assignment

    def assignment(X):
        start = time.perf_counter()
        assign = original(X)
        spent["hold"] += time.perf_counter() - start

        def step(*args):
            start = time.perf_counter()
            changed = assign(*args)
            spent["steps"].append(time.perf_counter() - start)
            return changed

        return step

    return original, assignment


def fit_kmeans(X, args, spent):
    original, assignment = timed_assignment(spent)
    cluster_module._assignment = assignment
    try:
        start = time.perf_counter()
        model = SphericalKMeans(n_clusters=args.clusters, max_iter=args.iterations, tol=0.0,
                                max_fit_samples=None, random_state=args.seed,
                                n_jobs=2).fit(X)
        seconds = time.perf_counter() - start
    finally:
        cluster_module._assignment = original
    start = time.perf_counter()
    labels = model.predict(X)
    return model, seconds, labels, time.perf_counter() - start


def planted_vectors(n_rows, dims, n_clusters, seed):
    rng = np.random.default_rng(seed)
    directions = rng.standard_normal((n_clusters, dims))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    X = directions[rng.integers(0, n_clusters, n_rows)] + 0.08 * rng.standard_normal(
        (n_rows, dims))
    return X.astype(np.float32)


def run_sampler(args, stream) -> None:
    print(f"- sampler: K = {args.interests:,}, {args.sweeps} sweeps (`tol=0`)\n")
    handler = SweepBytes()
    logger = logging.getLogger("sklearn_micro._dask")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    train, interests, test, _ = stream
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
        with new_cluster() as cluster, Client(cluster) as client:
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
    print("## The sampler: seconds and bytes per sweep\n")
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
    print("\n## The sampler: memory per worker, one partition per worker thread\n")
    print(f"Counted from the arrays of this chunk's largest partition, then scaled by "
          f"{scale:.2f} to a TwitterFaveGraph chunk ({per_chunk:,.0f} engagements: 283M in "
          "192 chunks), "
          f"with this stream's support sizes and K = {FAVE['interests']:,}. A worker "
          f"process with the package imported takes {mb(rss)} MB before any task "
          "(measured), counted in the last column.\n")
    print(table(["workers (1 thread each)", "held, this chunk (MB)",
                 "one sweep, this chunk (MB)", "held, fave chunk (MB)",
                 "one sweep, fave chunk (MB)", "worker total, fave chunk (MB)"], mem_rows))
    logger.removeHandler(handler)


def run_evaluation(args, stream) -> None:
    handler = DaskBytes()
    logger = logging.getLogger("sklearn_micro._dask")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    train, interests, test, _ = stream
    chunk = check_log(test)
    users = np.unique(chunk.user)
    log("warming up numba kernels")
    warm_up_all()
    log("fitting MiCRO")
    model = MiCRO(random_state=args.seed, n_jobs=2).fit(train, item_interest=interests)
    log("drawing the vectors")
    X = planted_vectors(args.rows, args.dims, args.clusters, args.seed)

    eval_s = {"threads": [], "dask": []}
    rec_s = {"threads": [], "dask": []}
    with new_cluster() as cluster, Client(cluster) as client:
        client.run(warm_up_all)
        for r in range(args.repeats):
            log(f"evaluation, repeat {r + 1} of {args.repeats}")
            seconds, local_sums = score_chunk(model, chunk)
            eval_s["threads"].append(seconds)
            with joblib.parallel_config(backend="dask"):
                seconds, remote_sums = score_chunk(model, chunk)
            eval_s["dask"].append(seconds)
            start = time.perf_counter()
            local_rec = model.recommend(users, 100)
            rec_s["threads"].append(time.perf_counter() - start)
            start = time.perf_counter()
            with joblib.parallel_config(backend="dask"):
                remote_rec = recommend_on_cluster(model, users, 100)
            rec_s["dask"].append(time.perf_counter() - start)
        score_records = handler.take("score")
        rec_records = handler.take("recommend")
        same_metrics = all(np.array_equal(getattr(local_sums, name), getattr(remote_sums, name))
                           for name in ("chunk_sums", "user_sums", "user_n"))
        same_lists = all(np.array_equal(a, b) for a, b in zip(local_rec, remote_rec,
                                                               strict=True))
        top_m_bytes = local_rec[0].nbytes + local_rec[1].nbytes

        log("k-means on threads")
        spent = {"threads": {"hold": 0.0, "steps": []}, "dask": {"hold": 0.0, "steps": []}}
        km_local, km_local_s, labels_local, predict_local_s = fit_kmeans(
            X, args, spent["threads"])
        log("k-means on the cluster")
        with joblib.parallel_config(backend="dask"):
            km_remote, km_remote_s, labels_remote, predict_remote_s = fit_kmeans(
                X, args, spent["dask"])
        assign_records = handler.take("kmeans-assign")
        rows_records = handler.take("kmeans-rows")
        labels_records = handler.take("kmeans-labels")
        same_km = (np.array_equal(km_local.labels_, km_remote.labels_)
                   and np.array_equal(km_local.cluster_centers_, km_remote.cluster_centers_)
                   and np.array_equal(labels_local, labels_remote))

    n_users = users.shape[0]
    held = statistics.median(r.held_bytes for r in score_records)
    sent = statistics.median(r.sent_bytes for r in score_records)
    back = statistics.median(r.received_bytes for r in score_records)
    rec_back = statistics.median(r.received_bytes for r in rec_records)
    rec_sent = statistics.median(r.sent_bytes for r in rec_records)
    t_eval = {k: statistics.median(v) for k, v in eval_s.items()}
    t_rec = {k: statistics.median(v) for k, v in rec_s.items()}
    print("\n## Retrieval and the rolling evaluation, per evaluated chunk\n")
    print(f"One test chunk of {chunk.user.shape[0]:,} engagements and {n_users:,} users "
          f"(MiCRO fitted on {args.train:,} engagements of {args.users:,} users, "
          f"K = {args.interests:,}), top-100 at cut-offs {', '.join(map(str, M_VALUES))}; "
          f"seconds are the median of {args.repeats} repeats. \"Held\" is the recommender, "
          "shipped once per chunk in a task of its own (the workers fetch it from the one "
          "that ran it); \"to workers\" the blocks' users and relevant items; \"back\" what "
          "the blocks return.\n")
    rows = [
        ["evaluation step", "2 threads", fmt(t_eval["threads"]), "1.00x", "-", "-", "-"],
        ["evaluation step", "2 workers x 1 thread", fmt(t_eval["dask"]),
         f"{t_eval['threads'] / t_eval['dask']:.2f}x", mb(held), mb(sent),
         f"{mb(back)} ({back / n_users:.0f} per user)"],
        ["recommend, top-100 back", "2 threads", fmt(t_rec["threads"]), "1.00x", "-", "-",
         "-"],
        ["recommend, top-100 back", "2 workers x 1 thread", fmt(t_rec["dask"]),
         f"{t_rec['threads'] / t_rec['dask']:.2f}x", mb(held), mb(rec_sent),
         f"{mb(rec_back)} ({rec_back / n_users:.0f} per user)"],
    ]
    print(table(["work", "where", "seconds", "speed-up", "held (MB, once per chunk)",
                 "to workers (MB)", "back (MB)"], rows))
    print(f"\nThe cluster's metrics equal the threads' bit for bit (sums per chunk and per "
          f"user): {'yes' if same_metrics else 'NO'}; its top-100 lists too: "
          f"{'yes' if same_lists else 'NO'}. The top-100 lists of the chunk's users take "
          f"{mb(top_m_bytes)} MB; the blocks of the evaluation return "
          f"{len(M_VALUES) * 3} metrics per user instead.\n")

    def steps(name):
        s = spent[name]["steps"]
        return s[0], (statistics.mean(s[1:]) if len(s) > 1 else float("nan")), len(s)

    first_l, later_l, n_l = steps("threads")
    first_r, later_r, n_r = steps("dask")
    a_sent = [r.sent_bytes for r in assign_records]
    a_back = [r.received_bytes for r in assign_records]
    held_rows = sum(r.sent_bytes for r in rows_records)
    labels_sent = sum(r.sent_bytes for r in labels_records)
    print("## Spherical k-means: the assignment step per iteration\n")
    print(f"{args.rows:,} rows of {args.dims} float32 around {args.clusters:,} planted "
          f"directions, K = {args.clusters:,}, {args.iterations} iterations at most "
          f"(`tol=0`, all rows fitted). Assignment steps run: {n_l} on threads, {n_r} on "
          "the cluster (the first assigns every row, the later ones only the rows the "
          "bounds leave unsettled). The rows are held on the workers once per run; every "
          "iteration ships the centroids once and each block the positions of its rows to "
          "reassign, and gets back their labels, similarities and per-group bounds. "
          "`predict` ships every row once, in blocks.\n")
    rows = [
        ["2 threads", fmt(first_l), fmt(later_l), fmt(km_local_s), fmt(predict_local_s),
         "-", "-", "-", "-"],
        ["2 workers x 1 thread", fmt(first_r), fmt(later_r), fmt(km_remote_s),
         fmt(predict_remote_s), mb(held_rows),
         f"{mb(statistics.mean(a_sent))}", f"{mb(a_back[0])} / {mb(statistics.mean(a_back[1:]))}",
         mb(labels_sent)],
    ]
    print(table(["where", "first step (s)", "later steps (s, mean)", "fit (s)",
                 "predict (s)", "rows held (MB, once per run)", "to workers (MB/iter.)",
                 "back (MB/iter., first / later)", "predict: to workers (MB)"], rows))
    print(f"\nSame labels, centroids and predictions as on threads, bit for bit: "
          f"{'yes' if same_km else 'NO'}; iterations {km_local.n_iter_} and "
          f"{km_remote.n_iter_}.")
    logger.removeHandler(handler)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=["sampler", "evaluation", "all"], default="all")
    parser.add_argument("--quick", action="store_true", help="a 300k-engagement chunk")
    for name in FULL:
        parser.add_argument(f"--{name}", type=int)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    header("MiCRO on a Dask cluster", "dask_cluster.py", argv)
    print(CLUSTER + "\n")
    log("drawing the stream")
    stream = planted_stream(args.users, args.interests, args.train, args.test, args.items,
                            seed=args.seed)
    if args.part in ("sampler", "all"):
        run_sampler(args, stream)
    if args.part in ("evaluation", "all"):
        run_evaluation(args, stream)
    print(f"\nLoad average at the end (1, 5, 15 min): {load_average()}.")


if __name__ == "__main__":
    main()
