"""Why ANN's recall falls with the log's size: its search against its own vectors.

For each ``reproduce --out DIR`` given, loads ANN's fitted state (``DIR/checkpoints/ANN
fit.pkl``) and the log, draws users of the first test chunk and prints one row:

- recall@100 of ``recommend`` with the exact search and with NNDescent on the same fitted
  state (95% confidence intervals over users), and how many of the two top-100 lists agree;
  with ``--wider N EPS``, also with NNDescent on a graph of degree N queried with
  ``epsilon`` EPS;
- where a user's next-chunk items that are candidates rank among all candidates by exact
  cosine: the share of them in the top 100 and in the top 1%, averaged over 1,000 of the
  users (those with such an item);
- for a log of `paper_scale.py`'s plain draw (named ``fave-plain-<scale>.parquet`` in the
  run's config), the share of a user's 10 nearest users (cosine of the user vectors, exact)
  in the user's own community, against chance.

docs/scale_history.md quotes it ("ANN at scale").

    python benchmarks/ann_at_scale.py OUT_1_100 OUT_1_20 OUT_1_4 OUT_FULL
    python benchmarks/ann_at_scale.py OUT_1_4 --wider 60 0.3
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).parent)]

from paper_scale import FAVE, FOLLOW, SCALES, plain_users  # noqa: E402

from sklearn_micro.experiment import load_checkpoint  # noqa: E402


def _mean_ci(values: np.ndarray) -> str:
    half = 1.96 * values.std(ddof=1) / np.sqrt(values.size)
    return f"{values.mean():.4f} ± {half:.4f}"


def _recall(items: np.ndarray, users: np.ndarray, relevant: dict) -> np.ndarray:
    return np.array([len(relevant[u] & set(row.tolist())) / len(relevant[u])
                     for u, row in zip(users.tolist(), items, strict=True)])


def plain_communities(out: Path, seed: int = 0):
    """The user communities of a plain-draw log, from the run's config, or None."""
    stem = Path(json.loads((out / "checkpoints" / "config.json").read_text())["data"]).stem
    shape, draw, tag = stem.split("-", 2) if stem.count("-") >= 2 else ("", "", "")
    scale = {name.replace("/", "-"): s for s, name in SCALES.items()}.get(tag)
    if draw != "plain" or scale is None or shape not in ("fave", "follow"):
        return None
    spec = FAVE if shape == "fave" else FOLLOW
    n_users = round(spec["users"] * scale)
    _, community, n_communities = plain_users(
        np.random.default_rng(seed), n_users, round(spec["engagements"] * scale))
    return community, n_communities


def neighbour_purity(vectors: np.ndarray, ids: np.ndarray, community: np.ndarray,
                     n: int = 1000, k: int = 10, block: int = 200_000) -> float:
    """Share of the k nearest users (exact cosine) of n random users in their community."""
    norms = np.linalg.norm(vectors, axis=1)
    keep = np.flatnonzero(norms > 0)
    sample = np.random.default_rng(1).choice(keep, min(n, keep.size), replace=False)
    queries = vectors[sample] / norms[sample, None]
    best = np.full((sample.size, k + 1), -np.inf, np.float32)
    best_row = np.zeros(best.shape, np.int64)
    for lo in range(0, keep.size, block):
        rows = keep[lo : lo + block]
        scores = queries @ (vectors[rows] / norms[rows, None]).T
        scores[sample[:, None] == rows[None, :]] = -np.inf  # not oneself
        both = np.concatenate([best, scores], axis=1)
        both_rows = np.concatenate([best_row, np.broadcast_to(rows, scores.shape)], axis=1)
        top = np.argpartition(-both, k, axis=1)[:, : k + 1]
        best = np.take_along_axis(both, top, 1)
        best_row = np.take_along_axis(both_rows, top, 1)
    order = np.argsort(-best, axis=1)[:, :k]
    nearest = np.take_along_axis(best_row, order, 1)
    return float(np.mean(community[ids[nearest]] == community[ids[sample]][:, None]))


def row(out: Path, n_users: int, wider) -> str:
    checkpoints = out / "checkpoints"
    ann = load_checkpoint(checkpoints / "ANN fit.pkl")  # its user vectors are shared
    log = pickle.load(open(checkpoints / "load.pkl", "rb"))[0]
    test = log.chunk == ann.latest_chunk_ + 1
    user, item = log.user[test], log.item[test]
    del log
    users = np.random.default_rng(0).choice(np.unique(user), n_users, replace=False)
    chosen = np.isin(user, users)
    relevant: dict = {}
    for u, i in zip(user[chosen].tolist(), item[chosen].tolist(), strict=True):
        relevant.setdefault(u, set()).add(i)
    found = {}
    for method in ("exact", "nndescent"):
        ann.method, ann._index = method, None
        found[method] = ann.recommend(users, 100)[0]
    wide = "-"
    if wider is not None:
        ann.n_neighbors, ann.epsilon, ann._index = int(wider[0]), wider[1], None
        items = ann.recommend(users, 100)[0]
        overlap = np.mean([len(set(a.tolist()) & set(b.tolist()))
                           for a, b in zip(found["exact"], items, strict=True)])
        wide = f"{_mean_ci(_recall(items, users, relevant))} ({overlap:.1f})"
    agree = np.mean([len(set(a.tolist()) & set(b.tolist()))
                     for a, b in zip(found["exact"], found["nndescent"], strict=True)])

    # where the candidates among the next chunk's items rank, by exact cosine
    n_cand = ann.candidate_items_.size
    position = np.full(len(ann.item_ids_), -1)
    position[ann.candidate_items_] = np.arange(n_cand)
    sample = users[:1000]
    queries = ann.user_vectors_[ann.user_ids_.lookup(sample)]
    queries = queries / np.linalg.norm(queries, axis=1)[:, None]
    top100, top1 = [], []
    for j, scores in enumerate(queries @ ann.item_vectors_.T):
        known = ann.item_ids_.lookup(np.fromiter(relevant[sample[j]], np.int64))
        mine = position[known[known >= 0]]
        ranks = np.array([np.sum(scores > scores[i]) for i in mine[mine >= 0]])
        if ranks.size:
            top100.append(np.mean(ranks < 100))
            top1.append(np.mean(ranks < 0.01 * n_cand))

    purity = "-"
    communities = plain_communities(out)
    if communities is not None:
        community, n_communities = communities
        vectors = ann.user_vectors_
        share = neighbour_purity(vectors, ann.user_ids_.ids[: vectors.shape[0]], community)
        purity = f"{share:.3f} ({n_communities:,}; chance {1 / n_communities:.5f})"
    return (f"| {out.name} | {n_cand:,} | {_mean_ci(_recall(found['exact'], users, relevant))} "
            f"| {_mean_ci(_recall(found['nndescent'], users, relevant))} | {agree:.1f} "
            f"| {wide} "
            f"| {np.mean(top100):.3f} | {np.mean(top1):.3f} | {purity} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="+", type=Path, help="reproduce --out folders")
    parser.add_argument("--users", type=int, default=5000,
                        help="users of the first test chunk drawn (default 5000)")
    parser.add_argument("--wider", nargs=2, type=float, metavar=("N_NEIGHBORS", "EPSILON"),
                        help="also NNDescent with this graph degree and query epsilon")
    args = parser.parse_args(argv)
    wider = ("NNDescent n_neighbors={:g}, epsilon={:g} (lists agree)".format(*args.wider)
             if args.wider else "wider NNDescent")
    print("| run | candidate items | recall@100 exact | recall@100 NNDescent "
          f"| lists agree (of 100) | {wider} "
          "| next items in top 100 | in top 1% | 10 nearest users in own community "
          "(communities) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for out in args.out:
        print(row(out, args.users, args.wider), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
