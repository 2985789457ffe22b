"""ANN's search at a run's scale: the exact search, NNDescent, and an inverted file.

For each ``reproduce --out DIR`` given, loads ANN's fitted state (``DIR/checkpoints/ANN
fit.pkl``, the state the first test chunk is scored from) and draws ``--users`` users of
that chunk with a vector. Prints, for the exact search (`exact_top_m`, what
``ANNRecommender(method="exact")`` runs) and NNDescent (pynndescent, the package's
settings), the cpu (and wall) seconds of the index, pynndescent's compilation left out,
and the cpu (and wall) microseconds per user of the queries (both cores), and how many of
a user's top 100 agree with the exact search's, and the sampled users' recall@100 on
their distinct items of that chunk (nothing excluded: near the run's ANN row, not its
protocol). With ``--cells C:P ...`` it also tries an
inverted file: spherical k-means cells of the item vectors (`SphericalKMeans(C)`), each
user's top 100 among the items of the P cells whose centroids are nearest to it; only the
agreement is printed (the search is a plain numpy loop, not timed). With ``--quantization
Q ...`` NNDescent is also built with pynndescent's ``quantization=Q`` (a compressed copy
searched, the best candidates reranked by the exact distance). With ``--nndescent N:EPS
...`` NNDescent is also built of degree N (once per N) and queried with ``epsilon=EPS``,
the trade-off of `ANNRecommender`'s ``n_neighbors`` and ``epsilon``. With ``--hnsw M:EF ...``
it also builds the HNSW graphs of faiss (``IndexHNSWFlat``, inner product on the unit
vectors) and usearch (``metric="ip"``, float32) of degree M on the same vectors and
queries them with a search breadth of EF, where those packages are installed (neither is
a dependency of the package). docs/benchmarks.md quotes it.

    python benchmarks/ann_search.py OUT_1_20 --cells 100:8 100:32 100:50 400:64
    python benchmarks/ann_search.py OUT_FULL --quantization int8
    python benchmarks/ann_search.py OUT --nndescent 15:0.1 15:0 30:0 30:0.05 60:0.1
    python benchmarks/ann_search.py OUT_FULL --users 3000 --hnsw 16:100 16:150 16:250 32:150
"""

from __future__ import annotations

import argparse
import importlib
import pickle
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from _harness import header  # noqa: E402

from sklearn_micro.baselines._exact_search import exact_top_m  # noqa: E402
from sklearn_micro.cluster import SphericalKMeans  # noqa: E402
from sklearn_micro.experiment import load_checkpoint  # noqa: E402
from sklearn_micro.metrics import recall_at  # noqa: E402

M = 100


def _agree(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean([len(set(x.tolist()) & set(y.tolist()))
                          for x, y in zip(a, b, strict=True)]))


def _engaged(ann, users, chunk_user, chunk_item, positions) -> list[set]:
    """Each user's items engaged in the chunk, as positions among the candidates (items
    outside them as distinct negative numbers, which no search returns)."""
    order = np.argsort(chunk_user, kind="stable")
    chunk_user, chunk_item = chunk_user[order], chunk_item[order]
    codes = ann.item_ids_.lookup(chunk_item)
    known = (codes >= 0) & (codes < positions.size)
    at = np.where(known, positions[np.where(known, codes, 0)], -1)
    at = np.where(at >= 0, at, -2 - np.arange(at.size))
    lo = np.searchsorted(chunk_user, users, "left")
    hi = np.searchsorted(chunk_user, users, "right")
    return [set(at[a:b].tolist()) for a, b in zip(lo, hi, strict=True)]


def _cells(vectors, queries, n_cells, n_probe):
    """Each query's top M by float32 cosine among the items of its n_probe nearest cells
    (positions in ``vectors``)."""
    kmeans = SphericalKMeans(n_cells, init="random", max_iter=10, random_state=0).fit(vectors)
    labels = kmeans.labels_
    members = [np.flatnonzero(labels == c) for c in range(n_cells)]
    near = np.argsort(-(queries @ kmeans.cluster_centers_.T.astype(np.float32)), axis=1)
    out = np.empty((queries.shape[0], M), np.int64)
    for r, q in enumerate(queries):
        items = np.concatenate([members[c] for c in near[r, :n_probe]])
        scores = vectors[items] @ q
        top = items[np.argsort(-scores, kind="stable")[:M]]
        out[r, : top.size] = top
        out[r, top.size:] = -1
    return out


def _hnsw_rows(vectors, queries, exact, specs) -> None:
    """Print a row per HNSW graph of degree M searched with breadth EF (``specs``: (M, EF)
    pairs), for each of faiss and usearch that imports."""
    n = queries.shape[0]
    for name in ("faiss", "usearch.index"):
        label = name.split(".")[0]
        try:
            library = importlib.import_module(name)
        except ImportError:
            print(f"| HNSW ({label}) | not installed | | |", flush=True)
            continue
        for degree in sorted({d for d, _ in specs}):
            start, wall = time.process_time(), time.perf_counter()
            if name == "faiss":
                library.omp_set_num_threads(2)
                index = library.IndexHNSWFlat(vectors.shape[1], degree,
                                              library.METRIC_INNER_PRODUCT)
                index.hnsw.efConstruction = 100
                index.add(vectors)
            else:
                index = library.Index(ndim=vectors.shape[1], metric="ip", dtype="f32",
                                      connectivity=degree, expansion_add=128)
                index.add(np.arange(vectors.shape[0]), vectors, threads=2)
            built, built_wall = time.process_time() - start, time.perf_counter() - wall
            for breadth in [b for d, b in specs if d == degree]:
                start, wall = time.process_time(), time.perf_counter()
                if name == "faiss":
                    index.hnsw.efSearch = breadth
                    found = index.search(queries, M)[1]
                else:
                    index.expansion_search = breadth
                    found = index.search(queries, M, threads=2).keys
                query, query_wall = time.process_time() - start, time.perf_counter() - wall
                print(f"| HNSW ({label}, M={degree}, ef={breadth}) | {built:.1f} "
                      f"({built_wall:.1f} wall) | {query / n * 1e6:.0f} "
                      f"({query_wall / n * 1e6:.0f} wall) | {_agree(exact, found):.1f} |",
                      flush=True)


def measure(out: Path, n_users: int, cells, quantizations=(None,), hnsw=(),
            nndescent=()) -> None:
    checkpoints = out / "checkpoints"
    ann = load_checkpoint(checkpoints / "ANN fit.pkl")  # its user vectors are shared
    with open(checkpoints / "load.pkl", "rb") as f:
        log = pickle.load(f)[0]
    in_chunk = log.chunk == ann.latest_chunk_ + 1
    chunk_user, chunk_item = log.user[in_chunk], log.item[in_chunk]
    del log, in_chunk
    users = np.random.default_rng(0).choice(np.unique(chunk_user), n_users, replace=False)
    queries = ann.user_vectors_[ann.user_ids_.lookup(users)]
    norms = np.linalg.norm(queries, axis=1)
    queries = np.ascontiguousarray(queries[norms > 0] / norms[norms > 0, None], np.float32)
    users = users[norms > 0]
    n = queries.shape[0]
    vectors, candidates = ann.item_vectors_, ann.candidate_items_
    positions = np.full(int(candidates.max()) + 1, -1)
    positions[candidates] = np.arange(candidates.size)
    engaged = _engaged(ann, users, chunk_user, chunk_item, positions)
    del chunk_user, chunk_item
    print(f"\n{out}: {candidates.size:,} candidate items, {n:,} users with a vector\n")
    print("| search | index cpu s | query cpu us per user | top 100 as the exact search's "
          "| recall@100 in the chunk |")
    print("|---|---:|---:|---:|---:|")

    exact = np.full((n, M), -1, np.int64)
    # a first call compiles the kernels; the timed one answers every user
    exact_top_m(queries[:2], vectors, candidates, ann.item_rank_, np.zeros(3, np.int64),
                 np.zeros(0, np.int64), exact[:2].copy(), np.zeros((2, M), np.float32),
                 np.zeros(2, np.int64), 2)
    start = time.process_time()
    exact_top_m(queries, vectors, candidates, ann.item_rank_, np.zeros(n + 1, np.int64),
                 np.zeros(0, np.int64), exact, np.zeros((n, M), np.float32),
                 np.zeros(n, np.int64), 2)
    query = time.process_time() - start
    exact = np.where(exact >= 0, positions[exact], -1)
    print(f"| exact | | {query / n * 1e6:.0f} | 100.0 "
          f"| {recall_at(exact, engaged, M).mean():.3f} |")

    from pynndescent import NNDescent

    # a first index compiles pynndescent's kernels: built on a few items, not timed
    NNDescent(vectors[:2000], metric="cosine", n_neighbors=ann.n_neighbors, random_state=0,
              parallel_batch_queries=True).query(queries[:10], k=M)
    # the package's setting (with each quantization), then each (n_neighbors, epsilon)
    settings = [(ann.n_neighbors, float(ann.epsilon), q) for q in quantizations]
    settings += [(k, eps, None) for k, eps in nndescent]
    built_for = {}
    for n_neighbors, epsilon, quantization in settings:
        name = "" if quantization is None else f", quantization={quantization}"
        key = (n_neighbors, quantization)
        try:
            if key not in built_for:
                start, wall = time.process_time(), time.perf_counter()
                index = NNDescent(vectors, metric="cosine", n_neighbors=n_neighbors,
                                  random_state=ann.index_seed_, parallel_batch_queries=True,
                                  quantization=quantization)
                index.prepare()
                built_for[key] = (index, time.process_time() - start,
                                  time.perf_counter() - wall)
            index, built, built_wall = built_for[key]
            start, wall = time.process_time(), time.perf_counter()
            found, _ = index.query(queries, k=M, epsilon=epsilon)
        except Exception as error:  # pynndescent 0.7.0's int8 search fails to compile
            print(f"| NNDescent{name} | fails: {type(error).__name__} | | |", flush=True)
            continue
        query, query_wall = time.process_time() - start, time.perf_counter() - wall
        print(f"| NNDescent (n_neighbors={n_neighbors}, epsilon={epsilon:g}{name}) "
              f"| {built:.1f} ({built_wall:.1f} wall) | {query / n * 1e6:.0f} "
              f"({query_wall / n * 1e6:.0f} wall) | {_agree(exact, found):.1f} "
              f"| {recall_at(found, engaged, M).mean():.3f} |", flush=True)
    del built_for
    if hnsw:
        _hnsw_rows(vectors, queries, exact, hnsw)
    for n_cells, n_probe in cells:
        found = _cells(vectors, queries, n_cells, n_probe)
        print(f"| inverted file, {n_probe} of {n_cells} cells | | | {_agree(exact, found):.1f} |",
              flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="+", type=Path, help="reproduce --out folders")
    parser.add_argument("--users", type=int, default=20000)
    parser.add_argument("--cells", nargs="*", default=[], metavar="C:P",
                        help="inverted files of C cells searched in P of them")
    parser.add_argument("--quantization", nargs="*", default=[], metavar="Q",
                        help="also NNDescent with pynndescent's quantization Q (int8, ...)")
    parser.add_argument("--nndescent", nargs="*", default=[], metavar="N:EPS",
                        help="also NNDescent of degree N queried with epsilon EPS")
    parser.add_argument("--hnsw", nargs="*", default=[], metavar="M:EF",
                        help="also faiss's and usearch's HNSW of degree M searched at EF")
    args = parser.parse_args(argv)
    cells = [tuple(int(v) for v in c.split(":")) for c in args.cells]
    hnsw = [tuple(int(v) for v in c.split(":")) for c in args.hnsw]
    nndescent = [(int(c.split(":")[0]), float(c.split(":")[1])) for c in args.nndescent]
    header("ANN's search on a run's fitted state", "ann_search.py", argv)
    for out in args.out:
        measure(out, args.users, cells, [None, *args.quantization], hnsw, nndescent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
