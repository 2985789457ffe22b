"""How fast is MiCRO's `recommend` on a fave-shaped log: the paper's ranking and the
defaults' (the user's recent items beside the interests), at each m.

Fits MiCRO on the training chunks of a log (interests from `GraphEmbedder` and
`SphericalKMeans`, cached with ``--interests``), samples the first test chunk, then times
`recommend` for ``--users`` users (those of the next test chunks, as the rolling protocol
ranks them), with ``phi_decay`` 0 and "auto", at each ``-m``:

- "paper": the paper's ranking (``personal_weight_ = 0``);
- "personal": the defaults' ranking with the user's recent items (weight ``--personal``).

Each figure is the least cpu time (all threads) of ``--repeat`` calls, the calls
interleaved, and the microseconds per user it makes. For the paper's model against a
dense scan of ``theta @ phi``, see ``benchmarks/sampler.py`` (part 2).

    python benchmarks/recommend.py --data fave-plain-1-20.parquet --interests CACHE.npz \\
        --repeat 3 -m 10 25 50 100
    python benchmarks/recommend.py --data LOG.parquet --train-chunks 12 --k 50 --users 2000

``--data`` is a Parquet or CSV file in TwitterFaveGraph's columns (as
``benchmarks/paper_scale.py --generate-only`` writes them) or with user, item and chunk
columns.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from _harness import Timer, header, log, table  # noqa: E402

from sklearn_micro import GraphEmbedder, MiCRO, SphericalKMeans  # noqa: E402
from sklearn_micro.datasets import read_log, read_twitter_fave  # noqa: E402
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


def read(path):
    """A fave-shaped file, else a log with user, item and chunk columns."""
    try:
        return read_twitter_fave(path)
    except ValueError:
        return read_log(path, chunk="chunk")


def active_users(test, n):
    """The users the rolling protocol ranks after the first test chunk: those of the next
    test chunks, in order, up to ``n`` distinct ones."""
    order = np.argsort(test.chunk, kind="stable")
    later = order[test.chunk[order] > test.chunk.min()]
    _, first = np.unique(test.user[later], return_index=True)
    return np.sort(test.user[later][np.sort(first)[:n]])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="a Parquet or CSV log")
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
    header("MiCRO's recommend", "recommend.py", argv)
    engagements = read(args.data)
    train, test = split_chunks(engagements, args.train_chunks)
    ids, labels = interests(train, args.interests, args.k, args.dim, log)
    first_test = test.take(np.flatnonzero(test.chunk == test.chunk.min()))
    users = active_users(test, args.users)
    rows = []
    for phi_decay in (0.0, "auto"):
        model = MiCRO(personal=args.personal, phi_decay=phi_decay, random_state=0, n_jobs=-1)
        model.fit(train, item_interest=(ids, labels)).partial_fit(first_test)
        paper = copy.copy(model)
        paper.personal_weight_ = 0.0
        index = model.user_ids_.lookup(users)
        with_recent = float((np.diff(model.recent_indptr_)[index] > 0).mean())
        label = f"{model.phi_decay_:g}" + (" (auto)" if phi_decay == "auto" else "")
        for m in args.m:
            calls = {name: (lambda est=est, m=m: est.recommend(users, m))
                     for name, est in (("paper", paper), ("personal", model))}
            for call in calls.values():
                call()  # compiled and warm
            best = dict.fromkeys(calls, np.inf)
            for _ in range(args.repeat):
                for name, call in calls.items():
                    with Timer() as t:
                        call()
                    best[name] = min(best[name], t.cpu)
            rows.append([label, f"{len(model.chunk_items_):,}", f"{with_recent:.0%}", m]
                        + [f"{best[name]:.2f} ({1e6 * best[name] / len(users):.1f})"
                           for name in calls])
    print(f"{len(users):,} users of the test chunks of {Path(args.data).name}, K = {args.k}, "
          f"personal weight {args.personal:g}, the least of {args.repeat} calls; cpu "
          "seconds of the call, and in brackets cpu microseconds per user\n")
    print(table(["phi_decay", "items ranked", "users with recent items", "m", "paper",
                 "personal"], rows))


if __name__ == "__main__":
    main()
