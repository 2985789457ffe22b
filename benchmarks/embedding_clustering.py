"""Graph embedding and spherical k-means at fractions of TwitterFaveGraph's scale.

TwitterFaveGraph has 283M engagements of 6.7M users with 13M Tweets in 192 chunks; the paper
trains on the first 169. This script draws fave-shaped logs with `make_engagements` at each
``--scales`` (1/100 and 1/20 by default: 650k items at 1/20) and prints markdown tables:

1. `GraphEmbedder` at 128 dimensions on the training chunks: seconds to build the matrix,
   seconds per epoch (wall and CPU), and peak memory above the log, for ALS with each
   solver of ``--solvers`` (``blocked``, the default, and ``implicit``'s) and for BPR.
2. `SphericalKMeans` on the ALS item vectors of (1) at each ``--ks``: the fit on a sample
   (``max_fit_samples="auto"``) and, where ``n_items * K`` is at most ``--exact-limit``,
   the exact fit on every item; time by step (seeding, iterations, assignment of every
   item), objective (mean cosine of an item to its centroid) and peak memory, with the time
   projected to the full 13M items. From K = 20,000 the runs seed with random rows and
   time 3 iterations (k-means++ and 25 iterations there take too long for a benchmark).
3. With ``--quality``, on the Higgs log (6-hour chunks, trained on chunks 0-18) and on a
   generated log, over seeds: the objective and MiCRO's downstream recall@100 under the
   rolling protocol after 5 to 20 ALS epochs, then the fit on samples of several sizes
   against the exact fit.

Each measurement runs in a fresh process, so that its peak memory (VmHWM, reset after the
inputs are loaded) is its own. The machine is shared: compare rows of one run.

    python benchmarks/embedding_clustering.py [--scales 0.01 0.05] [--epochs 3]
        [--solvers blocked implicit] [--ks 1000 5000 25000] [--n-jobs -1]
        [--exact-limit 1.5e9] [--save-vectors DIR]
    python benchmarks/embedding_clustering.py --vectors-dir DIR --scales 0.05  # k-means only
    python benchmarks/embedding_clustering.py --skip-embedding --quality [--seeds 3]
    farm-bench --vs "python benchmarks/embedding_clustering.py --fit LOG --epochs 4
        --solver implicit" -- python benchmarks/embedding_clustering.py --fit LOG --epochs 4
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import header, reset_peak, resident_bytes  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAPER = {"engagements": 283_000_000, "users": 6_700_000, "items": 13_000_000, "chunks": 192,
         "train_chunks": 169}


def _reset_peak() -> int:
    """Reset the process's peak resident memory; returns the current one (bytes)."""
    reset_peak()
    return resident_bytes("VmRSS")


def _worker_embed(args) -> dict:
    from sklearn_micro._log import Vocabulary, check_log
    from sklearn_micro.embedding import GraphEmbedder, engagement_matrix

    log = check_log(np.load(args.log))
    base = _reset_peak()
    start = time.perf_counter()
    cpu = time.process_time()
    matrix = engagement_matrix(log, Vocabulary.from_ids(log.user),
                               Vocabulary.from_ids(log.item))
    build, build_cpu = time.perf_counter() - start, time.process_time() - cpu
    build_peak = resident_bytes() - base
    pairs = matrix.nnz
    del matrix

    base = _reset_peak()
    start = time.perf_counter()
    cpu = time.process_time()
    embedder = GraphEmbedder(128, method=args.method, solver=args.solver,
                             iterations=args.epochs, n_jobs=args.n_jobs,
                             random_state=0).fit(log)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    peak = resident_bytes() - base
    vectors = embedder.user_vectors_.nbytes + embedder.item_vectors_.nbytes
    if args.save:
        np.save(args.save, embedder.item_vectors_)
    return {
        "engagements": len(log), "users": len(embedder.user_ids_),
        "items": len(embedder.item_ids_), "pairs": pairs,
        "build": build, "build_peak": build_peak,
        "epoch": (seconds - build) / args.epochs,
        "epoch_cpu": (cpu_seconds - build_cpu) / args.epochs,
        "peak": peak, "vectors": vectors,
    }


def _timed(function, seconds: list):
    """``function``, adding the CPU seconds of the process during each call to
    ``seconds[0]`` (all threads: on a busy machine, wall seconds mostly measure the others).
    """

    def wrapper(*args, **kwargs):
        start = time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            seconds[0] += time.process_time() - start

    return wrapper


def _worker_kmeans(args) -> dict:
    from sklearn_micro import cluster

    # time the three steps of a fit: seeding, the iterations, the assignment of every row
    init, iterations, assign = [0.0], [0.0], [0.0]
    cluster._init_centroids = _timed(cluster._init_centroids, init)
    cluster._spherical_kmeans_single = _timed(cluster._spherical_kmeans_single, iterations)
    cluster.SphericalKMeans._labels = _timed(cluster.SphericalKMeans._labels, assign)

    X = np.load(args.vectors)
    base = _reset_peak()
    limit = None if args.max_fit_samples == "none" else (
        "auto" if args.max_fit_samples == "auto" else int(args.max_fit_samples))
    km = cluster.SphericalKMeans(args.k, max_fit_samples=limit, init=args.init,
                                 max_iter=args.max_iter, n_jobs=args.n_jobs, random_state=0)
    start = time.perf_counter()
    cpu = time.process_time()
    km.fit(X)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    peak = resident_bytes() - base
    if km.n_fit_samples_ == X.shape[0]:
        km.predict(X)  # what one assignment of every row costs, for the projection
    return {
        "n": X.shape[0], "fit": seconds, "cpu": cpu_seconds, "init": init[0],
        "iterations": iterations[0], "assign": assign[0], "n_iter": km.n_iter_,
        "n_fit": km.n_fit_samples_, "objective": 1 - km.inertia_ / X.shape[0],
        "peak": peak, "vectors": X.nbytes,
    }


def _run(*argv) -> dict:
    """Run a worker in a fresh process; returns the JSON it prints."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, __file__, *map(str, argv)],
        check=True, capture_output=True, text=True, env=env,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def _fave_log(scale: float, seed: int):
    from sklearn_micro.datasets import make_engagements

    return make_engagements(
        n_users=round(PAPER["users"] * scale),
        n_items=round(PAPER["items"] * scale),
        n_chunks=PAPER["chunks"],
        n_interests=100,
        n_engagements=round(PAPER["engagements"] * scale),
        random_state=seed,
    )


def _fraction(scale: float) -> str:
    return f"1/{round(1 / scale)}" if scale < 1 else "1"


def _mb(nbytes: float) -> str:
    return f"{nbytes / 2**20:,.0f}"


def embedding_table(logs: dict, args, folder: Path) -> dict:
    print(f"\n### Graph embedding: 128 dimensions, n_jobs={args.n_jobs}, "
          f"{args.epochs} epochs timed\n")
    print("| scale | engagements | users | items | method | matrix s | s / epoch | "
          "CPU s / epoch | 20 epochs s | peak MiB | vectors MiB | peak / vectors |")
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    vectors = {}
    for scale, path in logs.items():
        runs = [("als", solver) for solver in args.solvers] + [("bpr", "blocked")]
        for method, solver in runs:
            keep = Path(args.save_vectors or folder)
            keep.mkdir(parents=True, exist_ok=True)
            first_als = method == "als" and solver == args.solvers[0]
            save = keep / f"items_{scale}.npy" if first_als else ""
            r = _run("--worker", "embed", "--log", path, "--method", method,
                     "--solver", solver, "--epochs", args.epochs, "--n-jobs", args.n_jobs,
                     "--save", save)
            if save:
                vectors[scale] = save
            name = f"ALS ({solver})" if method == "als" else "BPR"
            print(f"| {_fraction(scale)} | {r['engagements']:,} | {r['users']:,} | "
                  f"{r['items']:,} | {name} | {r['build']:.1f} | "
                  f"{r['epoch']:.2f} | {r['epoch_cpu']:.2f} | {20 * r['epoch'] + r['build']:.0f} "
                  f"| {_mb(r['peak'])} | {_mb(r['vectors'])} | "
                  f"{r['peak'] / r['vectors']:.2f} |", flush=True)
    return vectors


def kmeans_table(vectors: dict, args) -> None:
    print(f"\n### Spherical k-means on the ALS item vectors (128 dimensions, float32), "
          f"n_jobs={args.n_jobs}; CPU seconds unless marked wall\n")
    print("| scale | items | K | fit | rows fitted | seeding | iterations | per iteration "
          "| assign all | fit | fit, wall s | objective | peak MiB | vectors MiB | "
          "projected at 13M items |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for scale, path in vectors.items():
        n = np.load(path, mmap_mode="r").shape[0]
        for k in args.ks:
            settings = [("auto", "sample")]
            if n * k <= args.exact_limit and _auto_samples(k) < n:
                settings.append(("none", "exact"))
            for limit, name in settings:
                init = "random" if k >= args.random_init_from else "k-means++"
                max_iter = 25 if k < args.few_iterations_from else 3
                r = _run("--worker", "kmeans", "--vectors", path, "--k", k,
                         "--max-fit-samples", limit, "--n-jobs", args.n_jobs,
                         "--init", init, "--max-iter", max_iter)
                per_iteration = r["iterations"] / r["n_iter"]
                # At 13M items: the same seeding, 25 iterations on the sample (as large as
                # here unless capped by the items: then grown with it), one assignment of
                # 13M items; the exact fit grows with the items throughout.
                grow = PAPER["items"] / r["n"]
                n_fit = min(PAPER["items"], _auto_samples(k)) if name == "sample" else (
                    PAPER["items"])
                projected = (r["init"] + 25 * per_iteration * n_fit / r["n_fit"]
                             + grow * r["assign"])
                assign = f"{r['assign']:.1f}" if r["n_fit"] < r["n"] else "—"
                if name == "exact":
                    projected -= grow * r["assign"]
                elif r["n_fit"] == r["n"]:
                    name = "sample = every item"
                label = name + ("" if init == "k-means++" else ", random seeds")
                print(f"| {_fraction(scale)} | {r['n']:,} | {k:,} | {label} | "
                      f"{r['n_fit']:,} | {r['init']:.1f} | {r['n_iter']} | "
                      f"{per_iteration:.2f} | {assign} | {r['cpu']:.1f} | "
                      f"{r['fit']:.1f} | {r['objective']:.4f} | {_mb(r['peak'])} | "
                      f"{_mb(r['vectors'])} | {projected:,.0f} |", flush=True)


def _auto_samples(k: int) -> int:
    from sklearn_micro.cluster import SphericalKMeans

    kmeans = SphericalKMeans(k)
    kmeans.n_clusters_ = k  # what fit resolves an integer n_clusters to
    return kmeans._n_fit_samples(np.iinfo(np.int64).max)


def _micro_recall(embedded, test, k, limit, seed):
    from sklearn_micro.cluster import SphericalKMeans
    from sklearn_micro.micro import MiCRO
    from sklearn_micro.model_selection import rolling_evaluate

    start = time.perf_counter()
    km = SphericalKMeans(k, max_fit_samples=limit, n_jobs=-1, random_state=seed)
    interests = km.fit_transform(embedded)
    seconds = time.perf_counter() - start
    model = MiCRO(random_state=seed).fit(interests)
    report = rolling_evaluate(model, test, m_values=(100,), copy=False)
    n = len(km.labels_)
    return seconds, 1 - km.inertia_ / n, float(report.overall()["recall@100"])


def _embedding_recall(train, test, epochs, k, seeds):
    from sklearn_micro.embedding import GraphEmbedder

    start = time.process_time()
    embedded = GraphEmbedder(128, iterations=epochs, n_jobs=-1, random_state=0)
    embedded = embedded.fit_transform(train)
    seconds = time.process_time() - start
    runs = np.array([_micro_recall(embedded, test, k, "auto", s)[1:] for s in seeds])
    return seconds, runs


def epochs_table(cases, args) -> None:
    print(f"\n### ALS epochs: objective of SphericalKMeans and MiCRO's recall@100 "
          f"(mean ± sd over {args.seeds} seeds)\n")
    print("| log | K | epochs | embedding CPU s | objective | recall@100 |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, (train, test), ks in cases[: args.epochs_logs]:
        for epochs in (5, 10, 15, 20):
            seconds, runs = _embedding_recall(train, test, epochs, ks[-1], range(args.seeds))
            mean, sd = runs.mean(axis=0), runs.std(axis=0)
            print(f"| {name} | {ks[-1]:,} | {epochs} | {seconds:.0f} | "
                  f"{mean[0]:.4f} ± {sd[0]:.4f} | {mean[1]:.4f} ± {sd[1]:.4f} |", flush=True)


def quality_table(args) -> None:
    from sklearn_micro.datasets import data_home, load_higgs
    from sklearn_micro.embedding import GraphEmbedder
    from sklearn_micro.experiment import split_chunks

    cases = []
    try:
        higgs = load_higgs(chunk_hours=6)
        cases.append(("Higgs, 6-hour chunks", split_chunks(higgs, 19), (100, 1000)))
    except FileNotFoundError:
        print(f"\n(Higgs log not found under {data_home()}: its rows are left out.)")
    fave = _fave_log(args.quality_scale, args.seed)
    cases.append((f"fave-shaped, {_fraction(args.quality_scale)}",
                  split_chunks(fave, PAPER["train_chunks"]), (1000,)))

    epochs_table(cases, args)
    seeds = range(args.seeds)
    print(f"\n### Fit on a sample against the exact fit: objective and MiCRO's recall@100 "
          f"(mean ± sd over {args.seeds} seeds)\n")
    print("| log | items | K | rows fitted | fit, wall s | objective | recall@100 |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for name, (train, test), ks in cases:
        embedded = GraphEmbedder(128, n_jobs=-1, random_state=args.seed).fit_transform(train)
        n_items = len(embedded.item_ids)
        for k in ks:
            limits = [per * k for per in (16, 64, 256) if per * k < n_items] + [None]
            for limit in limits:
                runs = np.array([_micro_recall(embedded, test, k, limit, s) for s in seeds])
                mean, sd = runs.mean(axis=0), runs.std(axis=0)
                rows = ("all" if limit is None
                        else f"{limit:,} ({limit // k} per cluster)")
                print(f"| {name} | {n_items:,} | {k:,} | {rows} | {mean[0]:.1f} | "
                      f"{mean[1]:.4f} ± {sd[1]:.4f} | {mean[2]:.4f} ± {sd[2]:.4f} |",
                      flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", type=float, nargs="+", default=[0.01, 0.05])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--solvers", nargs="+", choices=["blocked", "implicit"],
                        default=["blocked"], help="the ALS solvers to time, in turn")
    parser.add_argument("--ks", type=int, nargs="+", default=[1000, 5000, 25000])
    parser.add_argument("--n-jobs", type=int, default=-1)
    parser.add_argument("--exact-limit", type=float, default=1.5e9,
                        help="largest n_items * K given an exact fit")
    parser.add_argument("--random-init-from", type=int, default=20_000,
                        help="K from which the k-means runs seed with random rows")
    parser.add_argument("--few-iterations-from", type=int, default=20_000,
                        help="K from which only 3 iterations are run and timed")
    parser.add_argument("--quality", action="store_true")
    parser.add_argument("--quality-scale", type=float, default=0.01)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs-logs", type=int, default=2,
                        help="on how many logs (Higgs first) to compare the ALS epochs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-embedding", action="store_true",
                        help="only the quality table")
    parser.add_argument("--save-vectors", default="",
                        help="keep the ALS item vectors in this folder (items_<scale>.npy)")
    parser.add_argument("--vectors-dir", default="",
                        help="k-means table only, on the item vectors kept by --save-vectors")
    parser.add_argument("--fit", metavar="LOG",
                        help="only fit GraphEmbedder(iterations=--epochs, solver=--solver) "
                             "on the log file LOG and exit: a command for farm-bench")
    # a measurement in a fresh process
    parser.add_argument("--worker", choices=["embed", "kmeans"])
    parser.add_argument("--log")
    parser.add_argument("--method", default="als")
    parser.add_argument("--solver", default="blocked")
    parser.add_argument("--save", default="")
    parser.add_argument("--vectors")
    parser.add_argument("--k", type=int)
    parser.add_argument("--max-fit-samples", default="auto")
    parser.add_argument("--init", default="k-means++")
    parser.add_argument("--max-iter", type=int, default=25)
    args = parser.parse_args(argv)

    if args.fit:
        from sklearn_micro import GraphEmbedder
        from sklearn_micro.datasets import read_log

        GraphEmbedder(iterations=args.epochs, solver=args.solver, n_jobs=args.n_jobs,
                      random_state=args.seed).fit(read_log(args.fit))
        return
    if args.worker:
        result = (_worker_embed if args.worker == "embed" else _worker_kmeans)(args)
        print(json.dumps(result))
        return

    header("Graph embedding and spherical k-means", "embedding_clustering.py", argv)
    if args.vectors_dir:
        vectors = {scale: Path(args.vectors_dir) / f"items_{scale}.npy" for scale in args.scales}
        kmeans_table(vectors, args)
    elif not args.skip_embedding:
        with tempfile.TemporaryDirectory() as folder:
            folder = Path(folder)
            logs = {}
            for scale in args.scales:
                log = _fave_log(scale, args.seed)
                train = log.chunk < PAPER["train_chunks"]
                path = folder / f"log_{scale}.npy"
                np.save(path, np.c_[log.user[train], log.item[train], log.chunk[train]])
                logs[scale] = path
                del log, train
            vectors = embedding_table(logs, args, folder)
            kmeans_table(vectors, args)
    if args.quality:
        quality_table(args)


if __name__ == "__main__":
    main()
