"""The exact top-m search of ANNRecommender and ALSRecommender: float32 products with an
exact rescoring of the few items near each user's m-th best, against float64 products of
every pair (the search before), in the same run.

    PYTHONPATH=. python benchmarks/exact_search.py [--users 16384] [--items 10000]

Prints a markdown table: seconds per call (best of ``--repeat``), users scored per second,
the ratio, and whether the two answers agree (items and scores).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from threadpoolctl import threadpool_limits

from sklearn_micro._kernels.selection import is_seen as _is_seen
from sklearn_micro.baselines import _exact_top_m


def _float64_search(queries, vectors, candidates, tie_key, seen_indptr, seen_items,
                    out_items, out_scores, out_n, n_threads=1):
    """The search as it was: float64 products of every pair, ranked block by block."""
    from concurrent.futures import ThreadPoolExecutor

    n_q, n_c = queries.shape[0], vectors.shape[0]
    item_block = min(n_c, 8192)
    user_block = max(1, (1 << 21) // item_block)
    rank_block = _dense_kernel()

    def rank(u0):
        u1 = min(n_q, u0 + user_block)
        q = queries[u0:u1].astype(np.float64)
        for i0 in range(0, n_c, item_block):
            i1 = min(n_c, i0 + item_block)
            block = (q @ vectors[i0:i1].astype(np.float64).T).astype(np.float32)
            rank_block(block, candidates[i0:i1], tie_key, seen_indptr[u0 : u1 + 1],
                       seen_items, out_items[u0:u1], out_scores[u0:u1], out_n[u0:u1])

    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(n_threads) as pool:
        list(pool.map(rank, range(0, n_q, user_block)))


def _dense_kernel():
    from numba import njit

    from sklearn_micro._kernels.ranking import _push

    @njit(nogil=True)
    def rank_block(block, items, tie_key, seen_indptr, seen_items, out_items, out_scores,
                   out_n):
        for r in range(block.shape[0]):
            lo, hi, n = seen_indptr[r], seen_indptr[r + 1], out_n[r]
            for j in range(items.shape[0]):
                s = block[r, j]
                it = items[j]
                if n == out_items.shape[1]:
                    worst = out_scores[r, n - 1]
                    if s < worst or (s == worst and tie_key[it] > tie_key[out_items[r, n - 1]]):
                        continue
                if hi > lo and _is_seen(seen_items, lo, hi, it):
                    continue
                n = _push(out_items, out_scores, r, n, it, s, tie_key)
            out_n[r] = n

    return rank_block


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=16384)
    parser.add_argument("--items", type=int, default=10000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("-m", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    unit = lambda a: (a / np.linalg.norm(a, axis=1, keepdims=True)).astype(np.float32)  # noqa: E731
    queries = unit(rng.normal(size=(args.users, args.dim)))
    vectors = unit(rng.normal(size=(args.items, args.dim)) + rng.normal(size=args.dim))
    candidates = np.arange(args.items, dtype=np.int64)
    tie_key = rng.permutation(args.items).astype(np.int64)
    seen_indptr = np.zeros(args.users + 1, np.int64)
    seen_items = np.empty(0, np.int64)
    rows = []
    answers = {}
    for name, search in [("float64 products of every pair", _float64_search),
                         ("float32 products, exact rescoring", _exact_top_m)]:
        times = []
        for _ in range(args.repeat + 1):
            out = (np.full((args.users, args.m), -1, np.int64),
                   np.full((args.users, args.m), -np.inf, np.float32),
                   np.zeros(args.users, np.int64))
            start = time.perf_counter()
            search(queries, vectors, candidates, tie_key, seen_indptr, seen_items, *out,
                   n_threads=args.threads)
            times.append(time.perf_counter() - start)
        best = min(times[1:])  # the first call compiles
        answers[name] = out
        rows.append((name, best))
    (a_items, a_scores, _), (b_items, b_scores, _) = answers.values()
    same_items = float(np.mean(a_items == b_items))
    max_diff = float(np.max(np.abs(a_scores - b_scores)))
    print(f"{args.users:,} users x {args.items:,} items, d = {args.dim}, m = {args.m}, "
          f"{args.threads} threads, load average {os.getloadavg()[0]:.1f}\n")
    print("| search | seconds | users per second | vs float64 |")
    print("|---|---:|---:|---:|")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.3f} | {args.users / seconds:,.0f} | "
              f"{rows[0][1] / seconds:.2f}x |")
    print(f"\nsame item in {same_items:.4%} of the slots; largest score difference "
          f"{max_diff:.2e}")


if __name__ == "__main__":
    main()
