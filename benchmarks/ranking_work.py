"""The paper's model's ranking work per user after a test chunk, from a run's checkpoints.

For each ``reproduce --out DIR`` given, loads ``DIR/checkpoints/MiCRO (paper) fit.pkl`` and
samples the first test chunk with ``partial_fit`` (or takes the model of ``MiCRO (paper)
rolling.pkl`` as it stands), then prints one table row: users' supports, ``phi`` entries
per item, interest rows (mean and size-biased), candidate entries per user, and
`mixture_topm`'s cpu microseconds per user (20,000 users drawn among those with a support,
m = 100, one thread, nothing seen, the least of 3 calls, interleaved) three ways: with the
chunk's items as stored, numbered interest by interest (`group_by_interest`), and so
numbered with every candidate offered to the heap of m (``sample=0``, no sampled cut).
Every way scatters a row at a time over the whole chunk (no ranges of items, which the
items as stored do not allow), so that the numbering alone is compared. docs/scale_history.md
quotes it ("Why MiCRO's ranking grows faster than the log").

    python benchmarks/ranking_work.py OUT_1_100 OUT_1_20 OUT_1_4
    python benchmarks/ranking_work.py --rolling OUT_FULL
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from sklearn_micro._kernels.selection import CUT_SAMPLE  # noqa: E402
from sklearn_micro._kernels.topm import group_by_interest, mixture_topm  # noqa: E402
from sklearn_micro._micro_state import LatestChunk, interest_weights  # noqa: E402
from sklearn_micro.model_selection import _final_recommender  # noqa: E402


def sampled_model(out: Path, rolling: bool):
    """The paper's model after a sampled test chunk."""
    checkpoints = out / "checkpoints"
    if rolling:
        evaluation = pickle.load(open(checkpoints / "MiCRO (paper) rolling.pkl", "rb"))
        return _final_recommender(evaluation.estimator)
    import pandas as pd

    model = pickle.load(open(checkpoints / "MiCRO (paper) fit.pkl", "rb"))
    log = pickle.load(open(checkpoints / "load.pkl", "rb"))[0]
    sel = log.chunk == model.latest_chunk_ + 1
    return model.partial_fit(pd.DataFrame(
        {"user": log.user[sel], "item": log.item[sel], "chunk": log.chunk[sel]}))


def row(model, n_users=20_000, m=100, repeat=3) -> str:
    support = np.diff(model.support_indptr_)
    rows = np.diff(model.phi_indptr_)
    entries = np.bincount(model.phi_item_, minlength=model.chunk_items_.size)
    rng = np.random.default_rng(0)
    users = np.flatnonzero(support > 0)
    users = np.sort(rng.choice(users, min(n_users, users.size), replace=False))
    ptr, k, theta = model._theta(users)
    w, base = interest_weights(ptr, k, theta, model.beta, LatestChunk.of(model))
    no_seen = np.zeros(users.size + 1, np.int64), np.empty(0, np.int64)
    order, _, phi_item, phi_count = group_by_interest(
        model.phi_indptr_, model.phi_item_, model.phi_count_, model.chunk_items_.size)
    stored = (model.phi_item_, model.phi_count_, model.chunk_item_count_, model.chunk_items_)
    grouped = (phi_item, phi_count, model.chunk_item_count_[order], model.chunk_items_[order])
    ways = {"stored": (stored, CUT_SAMPLE), "grouped": (grouped, CUT_SAMPLE),
            "one by one": (grouped, 0)}
    best = dict.fromkeys(ways, np.inf)
    lists = {}
    for _ in range(repeat):
        for name, (chunk, sample) in ways.items():
            start = time.process_time()
            lists[name] = mixture_topm(ptr, k, w, base, model.phi_indptr_, *chunk, *no_seen,
                                       m, 1, sample, max(1, model.chunk_items_.size))
            best[name] = min(best[name], time.process_time() - start)
    for name in ways:
        for a, b in zip(lists[name], lists["grouped"], strict=True):
            np.testing.assert_array_equal(a, b)
    s = support[support > 0]
    us = {name: seconds / users.size * 1e6 for name, seconds in best.items()}
    return (f"| {rows.size:,} | {model.latest_chunk_} | {s.mean():.1f} "
            f"({np.percentile(s, 90):.0f}) | {model.chunk_items_.size:,} | "
            f"{entries.mean():.2f} | {rows.mean():.0f} "
            f"({(rows.astype(float) ** 2).sum() / rows.sum():.0f}) | "
            f"{rows[k].sum() / users.size:,.0f} | {us['stored']:.1f} | "
            f"{us['one by one']:.1f} | {us['grouped']:.1f} | "
            f"{us['stored'] / us['grouped']:.2f} | {us['one by one'] / us['grouped']:.2f} |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="+", type=Path, help="reproduce --out folders")
    parser.add_argument("--rolling", action="store_true",
                        help="take the model of MiCRO (paper)'s rolling evaluation as it stands")
    args = parser.parse_args(argv)
    print("| K | chunk | support mean (p90) | items of the chunk | phi entries per item | "
          "interest row mean (size-biased) | candidate entries per user | us per user, "
          "as stored | interest by interest, one by one | interest by interest, with the "
          "cut | as stored / default | one by one / default |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for out in args.out:
        print(row(sampled_model(out, args.rolling)), flush=True)


if __name__ == "__main__":
    main()
