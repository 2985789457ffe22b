"""Speed of MiCRO's `recommend`: the paper's ranking and the personal component's, each with
its top m kept by a heap fed one candidate at a time, with the chunk's items in their stored
order, and as the kernels run by default.

Fits MiCRO on the training chunks of a fave-shaped log (interests from `GraphEmbedder` and
`SphericalKMeans`, cached with ``--interests``), samples the first test chunk, then times
`recommend` for ``--users`` users (those of the next test chunks, as the rolling protocol
ranks them), in the same run, at each ``-m``:

- "paper": the paper's ranking (``personal_weight_ = 0``: `mixture_topm` and the fill by
  popularity);
- "personal": the defaults' ranking with the user's recent items (`personal_topm`);

each three ways: "one by one" (``sample=0``: every candidate offered to a heap of m),
"as stored" (the chunk's items numbered in their sorted order, not interest by interest:
`group_by_interest` left out) and as the kernels run by default (a row of up to 16
candidates a slot first finds its m-th best score by selection, a row of more offers them
to the heap, and from 1,024 candidates on only those above a cut read from 512 of their
scores; the items numbered interest by interest, once per chunk). Every way must return the
same items and scores; the script checks it. Each figure is the least cpu time (all
threads) of ``--repeat`` calls, the calls interleaved.

    python benchmarks/recommend.py                      # 1/20 of fave's scale, K = 1,000
    python benchmarks/recommend.py --data /work/data-scale/fave-plain-1-100.parquet
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from sklearn_micro import GraphEmbedder, MiCRO, SphericalKMeans  # noqa: E402
from sklearn_micro import micro as micro_module  # noqa: E402
from sklearn_micro.datasets import read_twitter_fave  # noqa: E402
from sklearn_micro.experiment import split_chunks  # noqa: E402


def interests(train, path, k, dim, say):
    """The training items' interests: read from ``path`` if it exists, else computed (and
    saved there when given)."""
    if path is not None and Path(path).exists():
        saved = np.load(path)
        return saved["item_ids"], saved["item_interest"]
    start = time.perf_counter()
    embedded = GraphEmbedder(dim, random_state=0, n_jobs=-1).fit_transform(train)
    labels = SphericalKMeans(k, random_state=0, n_jobs=-1).fit_transform(embedded).item_interest
    ids = np.asarray(embedded.item_ids.ids)
    say(f"embedding and clustering: {time.perf_counter() - start:.0f} s")
    if path is not None:
        np.savez(path, item_ids=ids, item_interest=np.asarray(labels))
    return ids, np.asarray(labels)


def active_users(test, n):
    """The users the rolling protocol ranks after the first test chunk: those of the next
    test chunks, in order, up to ``n`` distinct ones."""
    order = np.argsort(test.chunk, kind="stable")
    later = order[test.chunk[order] > test.chunk.min()]
    _, first = np.unique(test.user[later], return_index=True)
    return np.sort(test.user[later][np.sort(first)[:n]])


WAYS = ("one by one", "as stored", "default")


def timed(call, repeat):
    """The least cpu time (all threads) of ``repeat`` calls, and the last call's output: cpu
    time, unlike wall time, does not count the time the calls wait for a core on a shared
    machine."""
    best, out = np.inf, None
    for _ in range(repeat):
        start = time.process_time()
        out = call()
        best = min(best, time.process_time() - start)
    return best, out


def one_by_one(call):
    """``call`` with both top-m kernels given ``sample=0``."""
    kernels = micro_module.mixture_topm, micro_module.personal_topm
    micro_module.mixture_topm = lambda *a: kernels[0](*a, 0)
    micro_module.personal_topm = lambda *a: kernels[1](*a, 0)
    try:
        return call()
    finally:
        micro_module.mixture_topm, micro_module.personal_topm = kernels


def uncached(model):
    """A shallow copy of ``model`` without its cached numbering of the chunk."""
    model = copy.copy(model)
    model.__dict__.pop("_grouped", None)
    return model


def as_stored(call):
    """``call`` with the chunk's items in their stored (sorted) numbering: ``call`` must use
    a model of its own, whose cached numbering then stays the stored one."""
    grouping = micro_module.group_by_interest

    def stored(phi_ptr, phi_item, phi_cnt, n_local):
        return np.arange(n_local), np.arange(n_local), phi_item, phi_cnt

    micro_module.group_by_interest = stored
    try:
        return call()
    finally:
        micro_module.group_by_interest = grouping


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="/work/data-scale/fave-plain-1-20.parquet")
    parser.add_argument("--train-chunks", type=int, default=169)
    parser.add_argument("--k", type=int, default=1000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--interests", default=None,
                        help="an .npz file caching the training items' interests")
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("-m", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--personal", type=float, default=0.05,
                        help="the personal weight timed (default: about the training repeat "
                             "rate of a fave-shaped log)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    say = print
    log = read_twitter_fave(args.data)
    train, test = split_chunks(log, args.train_chunks)
    ids, labels = interests(train, args.interests, args.k, args.dim, say)
    first_test = test.take(np.flatnonzero(test.chunk == test.chunk.min()))
    rows = []
    for phi_decay in (0.0, "auto"):
        model = MiCRO(personal=args.personal, phi_decay=phi_decay, random_state=0, n_jobs=-1)
        model.fit(train, item_interest=(ids, labels)).partial_fit(first_test)
        paper = copy.copy(model)
        paper.personal_weight_ = 0.0
        users = active_users(test, args.users)
        index = model.user_ids_.lookup(users)
        with_recent = float((np.diff(model.recent_indptr_)[index] > 0).mean())
        for m in args.m:
            calls = {}
            for name, est in (("paper", paper), ("personal", model)):
                stored = uncached(est)

                def call(est=est, users=users, m=m):
                    return est.recommend(users, m)

                def call_stored(est=stored, users=users, m=m):
                    return as_stored(lambda: est.recommend(users, m))
                calls[name, "one by one"] = lambda call=call: one_by_one(call)
                calls[name, "as stored"] = call_stored
                calls[name, "default"] = call
            for call in calls.values():
                call()  # compiled and warm
            best = {name: np.inf for name in calls}
            out = {}
            for _ in range(args.repeat):
                for name, call in calls.items():
                    seconds, out[name] = timed(call, 1)
                    best[name] = min(best[name], seconds)
            for name in ("paper", "personal"):
                for way in WAYS[:-1]:
                    for a, b in zip(out[name, way], out[name, "default"], strict=True):
                        np.testing.assert_array_equal(a, b)
            rows.append((phi_decay, model.phi_decay_, len(model.chunk_items_), with_recent,
                         m, best))
    say(f"\n{len(users):,} users of the test chunks of {Path(args.data).name}, "
        f"K = {args.k}, personal weight {args.personal:g}, best of {args.repeat}, load "
        f"{os.getloadavg()[0]:.1f}; every way returns the same items and scores; cpu "
        "seconds, and in brackets each way's time over the default's\n")
    head = " | ".join(f"{name}, {way}" for name in ("paper", "personal") for way in WAYS)
    say(f"| phi_decay | items ranked | users with recent items | m | {head} |")
    say("|---|---:|---:|---:|" + "---:|" * 2 * len(WAYS))
    for phi_decay, used, n_items, with_recent, m, best in rows:
        label = f"{used:g}" + (" (auto)" if phi_decay == "auto" else "")
        cells = []
        for name in ("paper", "personal"):
            default = best[name, "default"]
            cells += [f"{best[name, way]:.2f} ({best[name, way] / default:.2f}x)"
                      for way in WAYS[:-1]] + [f"{default:.2f}"]
        say(f"| {label} | {n_items:,} | {with_recent:.0%} | {m} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
