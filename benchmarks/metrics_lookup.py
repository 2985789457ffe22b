"""The rolling evaluation's lookup of recommended items, before the metrics: two ways.

Each (user, chunk) point's top m must be matched against the user's relevant items of the
chunk. ``search the chunk``: every recommended id is searched among the chunk's sorted items
(``np.searchsorted``, the way for ids of any kind, strings included); ``relevant ids``: each
is searched among the user's own few relevant ids (`relevant_codes`, numeric ids). Both give
the same metrics, which the script checks. The chunk is shaped like a full-scale fave test
chunk (189,000 items, about 1.5 items per user), the top 100 drawn from the chunk's items by
popularity; cpu microseconds per user, the least of ``--repeat`` runs.

    python benchmarks/metrics_lookup.py
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from sklearn_micro._kernels.metrics import relevant_codes  # noqa: E402
from sklearn_micro.metrics import _metrics_of_codes  # noqa: E402


def search_chunk(items, rec_items, rec_scores, indptr, relevant):
    pos = np.minimum(np.searchsorted(items, rec_items), items.shape[0] - 1)
    found = (items[pos] == rec_items) & np.isfinite(rec_scores)
    return np.where(found, pos, -1).astype(np.int64)


def relevant_ids(items, rec_items, rec_scores, indptr, relevant):
    codes = np.empty(rec_items.shape, np.int64)
    relevant_codes(rec_items, rec_scores, indptr, items[relevant], relevant, codes)
    return codes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=189_000)
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--m", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    items = np.sort(rng.choice(13_000_000, args.items, replace=False))
    weight = rng.pareto(1.2, args.items) + 1.0
    weight /= weight.sum()
    n_rel = np.clip(rng.geometric(0.65, args.users), 1, 50)
    drawn = rng.choice(args.items, n_rel.sum(), p=weight)
    # each user's relevant items, sorted and distinct
    pairs = np.unique(np.column_stack([np.repeat(np.arange(args.users), n_rel), drawn]), axis=0)
    indptr = np.concatenate(([0], np.cumsum(np.bincount(pairs[:, 0], minlength=args.users))))
    relevant = pairs[:, 1].copy()
    rec_items = items[rng.choice(args.items, (args.users, args.m), p=weight)]
    rec_scores = np.where(rng.random(rec_items.shape) < 0.01, -np.inf, 1.0)
    ks = np.array([50, args.m])
    relevant_ids(items, rec_items[:10], rec_scores[:10], indptr[:11], relevant)  # compile
    results, seconds = {}, {}
    for name, way in (("search the chunk", search_chunk), ("relevant ids", relevant_ids)):
        best = np.inf
        for _ in range(args.repeat):
            start = time.process_time()
            codes = way(items, rec_items, rec_scores, indptr, relevant)
            best = min(best, time.process_time() - start)
        seconds[name] = best
        results[name] = _metrics_of_codes(codes, indptr, relevant, ks)
    for key in results["search the chunk"]:
        np.testing.assert_array_equal(results["search the chunk"][key],
                                      results["relevant ids"][key])
    print(f"{args.users:,} users, top {args.m}, {args.items:,} items in the chunk, "
          f"{indptr[-1] / args.users:.2f} relevant items per user; the same metrics both ways\n")
    print("| lookup | cpu us per user | ratio |")
    print("|---|---:|---:|")
    base = seconds["search the chunk"]
    for name, value in seconds.items():
        print(f"| {name} | {value / args.users * 1e6:.2f} | {base / value:.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
