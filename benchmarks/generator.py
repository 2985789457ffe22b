"""The synthetic generator against the paper's TwitterFaveGraph, at a fraction of its scale.

TwitterFaveGraph has 283M engagements of 6.7M users with 13M Tweets in 192 chunks; user
degrees run from 1 to 100, item degrees from 5 to 280k. This script draws a log with the
same proportions at ``--scale`` (1/100 by default: 2.83M engagements, 67k users, 130k items,
192 chunks), prints its degree, lifetime and per-chunk statistics beside the paper's, then
the time and peak memory of `make_engagements` (the whole log) and `iter_engagements` (one
chunk at a time) per million engagements.

    python benchmarks/generator.py [--scale 0.01] [--interests 100] [--seed 0]
"""

from __future__ import annotations

import argparse
import resource
import time
import tracemalloc

import numpy as np

from sklearn_micro.datasets import iter_engagements, make_engagements

PAPER = {"engagements": 283_000_000, "users": 6_700_000, "items": 13_000_000, "chunks": 192}


def _stats(values) -> list[str]:
    values = np.asarray(values)
    return [
        f"{values.min():g}",
        f"{np.median(values):g}",
        f"{values.mean():.1f}",
        f"{np.percentile(values, 90):g}",
        f"{np.percentile(values, 99):g}",
        f"{values.max():g}",
    ]


def _row(name, cells, paper=""):
    print(f"{name:<34}" + "".join(f"{c:>9}" for c in cells) + f"   {paper}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.01)
    parser.add_argument("--interests", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    params = dict(
        n_users=round(PAPER["users"] * args.scale),
        n_items=round(PAPER["items"] * args.scale),
        n_chunks=PAPER["chunks"],
        n_interests=args.interests,
        n_engagements=round(PAPER["engagements"] * args.scale),
        random_state=args.seed,
    )
    print("make_engagements(" + ", ".join(f"{k}={v}" for k, v in params.items()) + ")\n")

    start = time.perf_counter()
    log, truth = make_engagements(**params, return_truth=True)
    make_seconds = time.perf_counter() - start
    n = len(log)

    user_degree = np.bincount(log.user, minlength=params["n_users"])
    item_degree = np.bincount(log.item, minlength=params["n_items"])
    planted_life = truth.item_death - truth.item_birth + 1
    first = np.full(params["n_items"], np.iinfo(np.int64).max)
    last = np.full(params["n_items"], -1)
    np.minimum.at(first, log.item, log.chunk)
    np.maximum.at(last, log.item, log.chunk)
    seen_life = last - first + 1
    per_chunk = np.bincount(log.chunk, minlength=params["n_chunks"])
    active = np.unique(log.user * params["n_chunks"] + log.chunk)
    chunks_per_user = np.bincount(active // params["n_chunks"])
    distinct = np.unique(log.user * params["n_items"] + log.item).size

    print(f"{n:,} engagements, {np.count_nonzero(user_degree):,} users, "
          f"{np.count_nonzero(item_degree):,} items, {np.count_nonzero(per_chunk)} chunks; "
          f"{1 - distinct / n:.1%} repeat a (user, item) pair; "
          f"{np.mean(user_degree == user_degree.max()):.1%} of users at the largest degree\n")
    _row("", ["min", "median", "mean", "p90", "p99", "max"], "paper (TwitterFaveGraph)")
    _row("user degree", _stats(user_degree), "min 1, mean 42.2, max 100")
    _row("item degree", _stats(item_degree), "min 5, mean 21.8, max 280k")
    _row("item lifetime, planted (chunks)", _stats(planted_life), "ephemeral Tweets")
    _row("item lifetime, engaged (chunks)", _stats(seen_life))
    _row("engagements per chunk", _stats(per_chunk), "mean 1.47M (14.7k at 1/100)")
    _row("active chunks per user", _stats(chunks_per_user))
    _row("interests per user", _stats(np.diff(truth.user_interests.indptr)))
    del log, truth, active

    tracemalloc.start()
    make_engagements(**params)
    make_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    iter_seconds = np.inf
    for _ in range(2):
        start = time.perf_counter()
        streamed = sum(len(chunk) for chunk in iter_engagements(**params))
        iter_seconds = min(iter_seconds, time.perf_counter() - start)
    start = time.perf_counter()
    make_engagements(**params)
    make_seconds = min(make_seconds, time.perf_counter() - start)
    tracemalloc.start()
    largest = 0
    for chunk in iter_engagements(**params):
        largest = max(largest, len(chunk))
    iter_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert streamed == n

    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
    per_million = 1e6 / n
    print()
    print(f"{'':<34}{'seconds':>9}{'s / 1M':>9}{'peak MB':>9}{'MB / 1M':>9}")
    print(f"{'make_engagements (whole log)':<34}{make_seconds:>9.2f}"
          f"{make_seconds * per_million:>9.2f}{make_peak / 2**20:>9.0f}"
          f"{make_peak / 2**20 * per_million:>9.1f}")
    print(f"{'iter_engagements (chunk by chunk)':<34}{iter_seconds:>9.2f}"
          f"{iter_seconds * per_million:>9.2f}{iter_peak / 2**20:>9.0f}"
          f"{iter_peak / 2**20 * per_million:>9.1f}")
    print(f"\nseconds: the better of two runs; peak memory: traced by tracemalloc (the process's "
          f"maxrss was {maxrss:.0f} MB); the largest chunk held {largest:,} engagements.")


if __name__ == "__main__":
    main()
