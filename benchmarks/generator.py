"""The synthetic generator against the paper's TwitterFaveGraph, at a fraction of its scale.

TwitterFaveGraph has 283M engagements of 6.7M users with 13M Tweets in 192 chunks; user
degrees run from 1 to 100, item degrees from 5 to 280k. This script draws a log with the
same proportions at ``--scale`` (1/100 by default: 2.83M engagements, 67k users, 130k items,
192 chunks) and the shape of `sklearn-micro reproduce`'s log (users of several interests,
items of lasting, skewed appeal: ``interests_per_user``, ``item_lifetime`` and
``item_appeal`` of ``sklearn_micro.cli.DEFAULT_LOG``), prints its degree, lifetime, interest
and per-chunk statistics beside the paper's, then the same statistics for the reproduce
log itself, then the time and peak memory of `make_engagements` (the whole log) and
`iter_engagements` (one chunk at a time) per million engagements.

    python benchmarks/generator.py [--scale 0.01] [--interests 100] [--seed 0]

With ``--preset fave`` (or ``follow``) it prints instead, for each of ``--scales``, the
statistics of the preset's log that set the paper's table, drawn one chunk at a time (so
full scale fits): engagements and new items per (interest, chunk), a user's engagements per
active chunk, the share of a chunk's (user, item) pairs on items new in it, on items of the
chunk before and on the chunk before's 100 most engaged items, and the share of a chunk's
engagements in the interests of the user who makes them and on the largest interest:

    python benchmarks/generator.py --preset fave --scales 0.01 0.05 0.25 1

``--trending-share S ...`` draws each scale with each of these trending shares instead of
the preset's (how ``fave``'s share was set to hold the head across scales).

With ``--recovery``, it measures instead how much of the preset's planted interests the
experiment's first two stages find: the graph embedding of the training chunks (each
``--embedding`` setting, keyword arguments of `GraphEmbedder`) clustered into the preset's
K interests, against the interests the generator planted: the clusters' purity (the share
of training engagements on an item whose cluster's most common planted interest is its
own) and the normalized mutual information, both weighted by engagements; and, with
``--ann``, what the vectors give a user: the recall@100 of ``ANNRecommender(method="exact")``
fitted on them, on the first test chunk (the exact search, so the vectors and not the
graph search are measured), with the run's protocol (nothing excluded):

    python benchmarks/generator.py --preset fave --scales 0.05 --recovery \
        --embedding "n_components=32, alpha=1" "n_components=32, alpha=10"
    python benchmarks/generator.py --preset fave --scales 0.05 0.25 --recovery --ann \
        --embedding "alpha=10" "alpha=10, negative_weight=150000"
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from _harness import header  # noqa: E402

from sklearn_micro.cli import DEFAULT_LOG  # noqa: E402
from sklearn_micro.datasets import (  # noqa: E402
    iter_engagements,
    make_engagements,
    preset_parameters,
)
from sklearn_micro.datasets._generator import _generate  # noqa: E402

PAPER = {"engagements": 283_000_000, "users": 6_700_000, "items": 13_000_000, "chunks": 192}
SHAPE = {k: DEFAULT_LOG[k] for k in ("interests_per_user", "item_lifetime", "item_appeal")}


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
    print(f"{name:<42}" + "".join(f"{c:>9}" for c in cells) + f"   {paper}")


def _share(x) -> str:
    return f"{x:.3f}"


def describe(log, truth, params) -> None:
    """Print the log's degree, lifetime, interest and per-chunk statistics beside the
    paper's."""
    print("make_engagements(" + ", ".join(f"{k}={v}" for k, v in params.items()) + ")\n")
    n, n_items, n_chunks = len(log), params["n_items"], params["n_chunks"]
    user_degree = np.bincount(log.user, minlength=params["n_users"])
    item_degree = np.bincount(log.item, minlength=n_items)
    planted_life = truth.item_death - truth.item_birth + 1
    first = np.full(n_items, np.iinfo(np.int64).max)
    last = np.full(n_items, -1)
    np.minimum.at(first, log.item, log.chunk)
    np.maximum.at(last, log.item, log.chunk)
    seen_life = last - first + 1
    per_chunk = np.bincount(log.chunk, minlength=n_chunks)
    active = np.unique(log.user * n_chunks + log.chunk)
    chunks_per_user = np.bincount(active // n_chunks)
    distinct = np.unique(log.user * n_items + log.item).size
    interest_chunk = np.bincount(truth.item_interest[log.item] * n_chunks + log.chunk,
                                 minlength=params["n_interests"] * n_chunks)
    born = np.bincount(truth.item_interest * n_chunks + truth.item_birth,
                       minlength=params["n_interests"] * n_chunks)
    # each later chunk's distinct (user, item) pairs: new items, items of the chunk before,
    # and the previous chunk's 100 most engaged items (what Popularity retrieves)
    new = before = top = pairs = 0
    for t in range(1, n_chunks):
        now = log.chunk == t
        key = np.unique(log.user[now] * n_items + log.item[now])
        item = key % n_items
        previous = np.bincount(log.item[log.chunk == t - 1], minlength=n_items)
        new += np.count_nonzero(first[item] == t)
        before += np.count_nonzero(previous[item] > 0)
        top += np.isin(item, np.argsort(-previous, kind="stable")[:100]).sum()
        pairs += item.shape[0]

    print(f"{n:,} engagements, {np.count_nonzero(user_degree):,} users, "
          f"{np.count_nonzero(item_degree):,} items, {np.count_nonzero(per_chunk)} chunks; "
          f"{1 - distinct / n:.1%} repeat a (user, item) pair; "
          f"{np.mean(user_degree == user_degree.max()):.1%} of users at the largest degree\n")
    _row("", ["min", "median", "mean", "p90", "p99", "max"], "paper (TwitterFaveGraph)")
    _row("user degree", _stats(user_degree), "min 1, mean 42.2, max 100")
    _row("item degree", _stats(item_degree), "min 5, mean 21.8, max 280k")
    _row("item appeal", [f"{v:.3g}" for v in map(float, _stats(truth.item_appeal))],
         "(not published)")
    _row("item lifetime, planted (chunks)", _stats(planted_life), "(not published)")
    _row("item lifetime, engaged (chunks)", _stats(seen_life))
    _row("engagements per chunk", _stats(per_chunk), "mean 1.47M")
    _row("engagements per (interest, chunk)", _stats(interest_chunk), "mean 295 at K = 5,000")
    _row("new items per (interest, chunk)", _stats(born), "mean 13.5 at K = 5,000")
    _row("active chunks per user", _stats(chunks_per_user))
    _row("engagements per active (user, chunk)", _stats(np.bincount(
        np.searchsorted(active, log.user * n_chunks + log.chunk))), "about 1 (34M test points)")
    _row("interests per user", _stats(np.diff(truth.user_interests.indptr)), "(not published)")
    print()
    _row("largest item degree / engagements", [f"{item_degree.max() / n:.5f}"],
         "0.00099 (280k / 283M)")
    _row("pairs of a chunk: item new in it", [_share(new / pairs)], "(not published)")
    _row("pairs of a chunk: item in chunk before", [_share(before / pairs)],
         ">= 0.306 (MiCRO's recall@100)")
    _row("pairs of a chunk: top 100 of chunk before", [_share(top / pairs)],
         "about 0.101 (Popularity's recall@100)")


PRESET_STATISTICS = {
    "engagements per (interest, chunk)": "mean of the chunk's engagements per interest",
    "new items per (interest, chunk)": "mean of the items born per interest",
    "engagements per active (user, chunk)": "",
    "pairs on items new in the chunk": "share of the chunk's distinct (user, item) pairs",
    "pairs on items of the chunk before": "an upper bound of MiCRO's recall",
    "pairs on the chunk before's top 100": "about Popularity's recall@100",
    "engagements in the user's interests": "share of the chunk's, averaged over users",
    "engagements on the largest interest": "share of the chunk's",
}


def preset_statistics(preset: str, scale: float, seed: int = 0,
                      trending_share: float | None = None) -> dict:
    """The statistics of `PRESET_STATISTICS` for a preset's log at a scale: each the mean
    over the chunks after the first, drawn one chunk at a time; ``trending_share`` replaces
    the preset's at that scale."""
    params = preset_parameters(preset, scale).generator  # a new dict each call
    if trending_share is not None:
        params["trending_share"] = trending_share
    n_items, k = params["n_items"], params["n_interests"]
    chunks = _generate(**{name: params[name] for name in (
        "n_users", "n_items", "n_chunks", "n_interests", "interests_per_user",
        "item_lifetime", "item_appeal", "alpha", "beta", "user_degree", "n_engagements",
        "min_item_degree", "trending_share", "n_trending") if name in params},
        random_state=seed)
    users = next(chunks)
    holders = np.bincount(users.interest, minlength=k)  # users with each interest
    item_interest = np.full(n_items, -1, np.int32)
    previous = None
    sums = dict.fromkeys(PRESET_STATISTICS, 0.0)
    n = 0
    for _, who, item, new, _ in chunks:
        item_interest[new["id"]] = new["interest"]
        counts = np.bincount(item, minlength=n_items)
        if previous is not None:
            key = np.unique(who * n_items + item)
            pair_item = key % n_items
            top = np.argsort(-previous, kind="stable")[:100]
            demand = np.bincount(item_interest[item], minlength=k)
            share = demand / demand.sum()
            values = {
                "engagements per (interest, chunk)": who.shape[0] / k,
                "new items per (interest, chunk)": new["id"].shape[0] / k,
                "engagements per active (user, chunk)":
                    who.shape[0] / np.unique(who).shape[0],
                "pairs on items new in the chunk": np.isin(pair_item, new["id"]).mean(),
                "pairs on items of the chunk before": (previous[pair_item] > 0).mean(),
                "pairs on the chunk before's top 100": np.isin(pair_item, top).mean(),
                "engagements in the user's interests":
                    float(holders @ share) / users.degree.shape[0],
                "engagements on the largest interest": share.max(),
            }
            for name, value in values.items():
                sums[name] += value
            n += 1
        previous = counts
    return {name: value / n for name, value in sums.items()}


def print_preset_statistics(preset: str, scales, seed: int = 0, trending_shares=(None,)):
    print(f"The {preset} preset's log (seed {seed}), mean over its chunks after the first\n")
    columns = [(s, t) for t in trending_shares for s in scales]
    header = "| statistic | " + " | ".join(
        f"scale {s:g}" + ("" if t is None else f", trending_share {t:g}")
        for s, t in columns) + " |"
    rows = {name: [] for name in PRESET_STATISTICS}
    for scale, share in columns:
        start = time.perf_counter()
        for name, value in preset_statistics(preset, scale, seed, share).items():
            rows[name].append(value)
        print(f"scale {scale:g}: {time.perf_counter() - start:.0f} s", file=sys.stderr,
              flush=True)
    print(header)
    print("|---|" + "---:|" * len(columns))
    for name, values in rows.items():
        cells = " | ".join(f"{v:.1f}" if v >= 10 else f"{v:.3f}" for v in values)
        print(f"| {name} | {cells} |")


def planted_recovery(preset: str, scale: float, settings, seed: int = 0, ann: bool = False):
    """For each dict of `GraphEmbedder` settings: (purity, NMI, embedding seconds, ANN's
    exact recall@100 on the first test chunk or None) of the preset's training chunks
    embedded and clustered into its K, against the planted interests."""
    from scipy import sparse
    from sklearn.metrics import normalized_mutual_info_score

    from sklearn_micro import ANNRecommender, GraphEmbedder, SphericalKMeans, check_log
    from sklearn_micro.model_selection import RollingEvaluation

    params = preset_parameters(preset, scale)
    chunks = _generate(**params.generator, random_state=seed)
    next(chunks)
    planted = np.full(params.generator["n_items"], -1)
    train, first_test = [], None
    for t, who, item, new, _ in chunks:
        planted[new["id"]] = new["interest"]
        if t < params.train_chunks:
            train.append(np.column_stack([who, item, np.full_like(who, t)]))
        elif t == params.train_chunks:
            first_test = np.column_stack([who, item, np.full_like(who, t)])
            break
    train = np.concatenate(train)
    items = train[:, 1]
    weight_of = np.bincount(items, minlength=planted.shape[0])
    k = params.n_interests
    for setting in settings:
        start = time.perf_counter()
        embedder = GraphEmbedder(**setting, random_state=seed, n_jobs=-1).fit(train)
        seconds = time.perf_counter() - start
        recall = None
        if ann:
            model = ANNRecommender(method="exact", random_state=seed, n_jobs=-1)
            evaluation = RollingEvaluation(model.fit(embedder.transform(train)),
                                           m_values=(100,))
            evaluation.step(check_log(first_test), learn=False)
            recall = float(evaluation.report().overall()["recall@100"])
        found = SphericalKMeans(k, random_state=seed, n_jobs=-1).fit(
            embedder.item_vectors_).labels_
        ids = embedder.item_ids_.ids
        weight, truth = weight_of[ids], planted[ids]
        table = sparse.coo_matrix((weight, (found, truth)), shape=(k, k)).tocsr()
        purity = table.max(axis=1).sum() / weight.sum()
        rows = np.repeat(np.arange(ids.shape[0]), weight)
        nmi = normalized_mutual_info_score(truth[rows], found[rows])
        yield setting, purity, nmi, seconds, recall


def print_planted_recovery(preset: str, scales, settings, seed: int = 0,
                           ann: bool = False) -> None:
    print(f"The {preset} preset's planted interests found by the graph embedding and "
          f"SphericalKMeans(K) of its training chunks (seed {seed}), weighted by "
          f"engagements\n")
    extra = " ANN (exact) recall@100, first test chunk |" if ann else ""
    print(f"| scale | K | GraphEmbedder | purity | NMI | embedding, s |{extra}")
    print("|---|---:|---|---:|---:|---:|" + ("---:|" if ann else ""))
    for scale in scales:
        k = preset_parameters(preset, scale).n_interests
        for setting, purity, nmi, seconds, recall in planted_recovery(
                preset, scale, settings, seed, ann):
            shown = ", ".join(f"{name}={value}" for name, value in setting.items())
            cell = f" {recall:.3f} |" if ann else ""
            print(f"| {scale:g} | {k:,} | {shown} | {purity:.3f} | {nmi:.3f} | "
                  f"{seconds:.0f} |{cell}", flush=True)


def _setting(text: str) -> dict:
    """``"n_components=32, alpha=1"`` -> ``{"n_components": 32, "alpha": 1}``."""
    setting = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.partition("=")
        try:
            setting[name.strip()] = int(value)
        except ValueError:
            try:
                setting[name.strip()] = float(value)
            except ValueError:
                setting[name.strip()] = value.strip().strip("'\"")
    return setting


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.01)
    parser.add_argument("--interests", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preset", choices=["fave", "follow"])
    parser.add_argument("--scales", type=float, nargs="+", default=[0.01, 0.05, 0.25])
    parser.add_argument("--trending-share", type=float, nargs="+", default=[None],
                        metavar="SHARE",
                        help="with --preset: the statistics with each of these trending "
                             "shares in place of the preset's")
    parser.add_argument("--recovery", action="store_true",
                        help="with --preset: the planted interests the embedding finds")
    parser.add_argument("--embedding", nargs="+", type=_setting,
                        default=[{"n_components": 128}], metavar="SETTINGS",
                        help='GraphEmbedder settings for --recovery, e.g. "alpha=1"')
    parser.add_argument("--ann", action="store_true",
                        help="with --recovery: also ANN's exact recall@100 on the first "
                             "test chunk")
    args = parser.parse_args(argv)
    if args.recovery and not args.preset:
        parser.error("--recovery needs --preset")
    if args.ann and not args.recovery:
        parser.error("--ann needs --recovery")
    header("The generator against TwitterFaveGraph", "generator.py", argv)
    if args.recovery:
        print_planted_recovery(args.preset, args.scales, args.embedding, args.seed,
                               args.ann)
        return
    if args.preset:
        print_preset_statistics(args.preset, args.scales, args.seed, args.trending_share)
        return
    params = dict(
        n_users=round(PAPER["users"] * args.scale),
        n_items=round(PAPER["items"] * args.scale),
        n_chunks=PAPER["chunks"],
        n_interests=args.interests,
        n_engagements=round(PAPER["engagements"] * args.scale),
        **SHAPE,
        random_state=args.seed,
    )
    start = time.perf_counter()
    log, truth = make_engagements(**params, return_truth=True)
    make_seconds = time.perf_counter() - start
    n = len(log)
    describe(log, truth, params)
    del log, truth
    print("\nThe log of `sklearn-micro reproduce` (DEFAULT_LOG):\n")
    describe(*make_engagements(**DEFAULT_LOG, return_truth=True), DEFAULT_LOG)

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
    print(f"{'':<42}{'seconds':>9}{'s / 1M':>9}{'peak MB':>9}{'MB / 1M':>9}")
    print(f"{'make_engagements (whole log)':<42}{make_seconds:>9.2f}"
          f"{make_seconds * per_million:>9.2f}{make_peak / 2**20:>9.0f}"
          f"{make_peak / 2**20 * per_million:>9.1f}")
    print(f"{'iter_engagements (chunk by chunk)':<42}{iter_seconds:>9.2f}"
          f"{iter_seconds * per_million:>9.2f}{iter_peak / 2**20:>9.0f}"
          f"{iter_peak / 2**20 * per_million:>9.1f}")
    print(f"\nseconds: the better of two runs; peak memory: traced by tracemalloc (the process's "
          f"maxrss was {maxrss:.0f} MB); the largest chunk held {largest:,} engagements.")


if __name__ == "__main__":
    main()
