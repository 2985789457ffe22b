"""The rolling evaluation, retrieval and k-means' assignment on a Dask cluster of 2 local
workers against the threaded path, in the same run.

Part 1, retrieval and the rolling evaluation. MiCRO (its defaults, ``n_jobs=2``) is fitted
on the training chunk of ``planted_stream`` (`benchmarks/sampler.py`: the paper's
generative model, all items new in the test chunk) and scores the test chunk's users with
the rolling evaluation's per-chunk step (``RollingEvaluation.step(..., learn=False)``,
top-100, cut-offs 10, 25, 50, 100): on 2 numba threads, and by blocks of users on a
``LocalCluster`` of 2 single-threaded worker processes inside
``joblib.parallel_config(backend="dask")``. Then ``recommend`` of the same users, which
must bring the top-100 lists back. Seconds (the median of the repeats) and the bytes
shipped, from the DEBUG records of ``sklearn_micro._dask``.

Part 2, spherical k-means. ``SphericalKMeans(n_clusters=K, max_fit_samples=None)`` on
unit vectors around K planted directions, on 2 threads and with its assignment step by
blocks of rows held on the 2 workers: seconds of the assignment steps (the first assigns
every row, later ones only the rows the bounds do not settle), bytes per iteration, then
``predict`` of all rows.

Tables go to stdout as markdown; progress goes to stderr. Run from the repository's root::

    PYTHONPATH=. python benchmarks/dask_evaluation.py            # 1.5M-engagement chunk
    PYTHONPATH=. python benchmarks/dask_evaluation.py --quick    # about 2 minutes
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time

import joblib
import numpy as np
from distributed import Client, LocalCluster
from sampler import fmt, log, machine, planted_stream, table, warm_up

from sklearn_micro import MiCRO, SphericalKMeans
from sklearn_micro import cluster as cluster_module
from sklearn_micro._dask import recommend_on_cluster
from sklearn_micro._log import check_log
from sklearn_micro.model_selection import RollingEvaluation

FULL = dict(users=200_000, train=3_000_000, test=1_500_000, items=68_000, interests=5000,
            rows=200_000, dims=128, clusters=1000, iterations=10, repeats=3)
QUICK = dict(users=50_000, train=600_000, test=300_000, items=20_000, interests=5000,
             rows=50_000, dims=128, clusters=500, iterations=10, repeats=2)
M_VALUES = (10, 25, 50, 100)


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


def mb(x: float) -> str:
    return fmt(x / 1e6)


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


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 300k-engagement chunk")
    for name in FULL:
        parser.add_argument(f"--{name}", type=int)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)

    command = ("python benchmarks/dask_evaluation.py"
               + (" " + " ".join(argv or sys.argv[1:])).rstrip())
    print(f"# Retrieval, the rolling evaluation and k-means on a Dask cluster\n\n"
          f"`{command}`\n")
    print("\n".join(machine()))
    print("- cluster: `LocalCluster(n_workers=2, threads_per_worker=1, processes=True)` on "
          "the same machine, the client in this process; threads: `n_jobs=2` in this "
          "process\n")

    handler = DaskBytes()
    logger = logging.getLogger("sklearn_micro._dask")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    log("drawing the stream")
    train, interests, test, _ = planted_stream(args.users, args.interests, args.train,
                                               args.test, args.items, seed=args.seed)
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
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
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
    print("## 1. Retrieval and the rolling evaluation, per evaluated chunk\n")
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
    print("## 2. Spherical k-means: the assignment step per iteration\n")
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
    print("\nLoad average at the end (1, 5, 15 min): "
          + ", ".join(f"{x:.2f}" for x in os.getloadavg()) + ".")


if __name__ == "__main__":
    main()
