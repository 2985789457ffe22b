"""The paper's table on the two real logs: MiCRO against four baselines
=======================================================================

For each log, every method is fitted on the training chunks and scored with the rolling
protocol on the test chunks (recommend for chunk t+1 with the state after chunk t, then
``partial_fit`` chunk t+1), by `sklearn_micro.experiment.run_experiment`.

- Higgs Twitter (users engaging with authors): 6-hour chunks, fit on chunks 0..18, test on
  19..27. K = 400 (``--k-higgs``), the choice of ``benchmarks/quality.py --search-k`` on
  chunks 0..18; `grid_search_k.py`'s three folds on the same chunks rank K = 100, 200 and
  400 within .002 of Recall@100 of each other.
- MovieLens ml-latest-small (users rating movies): 30-day chunks, fit on chunks 0..249,
  test on the last 24, 250..273 (2016-10 to 2018-09). K is chosen here among 10, 25, 50,
  100 and 200 by GridSearchCV on the training chunks only, with the paper's model (two
  folds of 12 chunks each at their end), unless ``--k-movielens`` is given.

The methods are those of `sklearn_micro.experiment.METHODS`: "MiCRO" is ``MiCRO()`` with
its defaults, "MiCRO (paper)" the paper's exact model (``personal=0, popularity=0,
phi_decay=0``) on the same interests, then ANN, Popularity, RecentItems and ALS.

Printed per log: Recall, MRR and NDCG at 50 and 100 as the mean over all (user, chunk)
points and as the per-user aggregate (each user's mean, then the mean over users), and the
overall means at 100 split into warm points (the user had engaged before) and cold ones,
and where the relevant items were before: in the chunk before, or in the user's history.
The per-chunk curves at 100 are written as PNGs into ``--out`` (on Higgs, Recall@100 and
MRR@100 per chunk are printed as tables too).

Run it from the project's root (about 2 minutes on the two real logs; the documentation
shows its code without running it)::

    python examples/paper_table.py --out docs/img

The logs are read from ``../shared/data`` (or the folder named by ``SKLEARN_MICRO_DATA``).
"""

import argparse
import sys
import time

import numpy as np
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline

from sklearn_micro import GraphEmbedder, MiCRO, SphericalKMeans
from sklearn_micro.datasets import load_higgs, load_movielens
from sklearn_micro.experiment import METHODS, plot_per_chunk, results_table, run_experiment
from sklearn_micro.model_selection import ChunkSplit, make_rolling_scorer

N_COMPONENTS = 64


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/img",
                        help="folder for the per-chunk PNGs (default: docs/img)")
    parser.add_argument("--datasets", nargs="+", choices=["higgs", "movielens"],
                        default=["higgs", "movielens"], help="logs to run (default: both)")
    parser.add_argument("--k-higgs", type=int, default=400,
                        help="K on Higgs (default: 400, from grid_search_k.py)")
    parser.add_argument("--k-movielens", type=int, default=None,
                        help="K on MovieLens (default: chosen on the training chunks)")
    return parser.parse_args(argv)


def choose_k(train, k_values=(10, 25, 50, 100, 200)) -> int:
    """The K with the best Recall@100 on the last training chunks, by GridSearchCV."""
    pipe = Pipeline([
        ("embed", GraphEmbedder(n_components=N_COMPONENTS, random_state=0)),
        ("interests", SphericalKMeans(random_state=0)),
        # the paper's exact model (MiCRO()'s defaults add the personal component and
        # phi_decay="auto"; docs/quality.md compares them)
        ("micro", MiCRO(personal=0, popularity=0, phi_decay=0, random_state=0)),
    ])
    search = GridSearchCV(pipe, {"interests__n_clusters": list(k_values)},
                          cv=ChunkSplit(n_splits=2, test_chunks=12),
                          scoring=make_rolling_scorer(m_values=100, metrics="recall"),
                          refit="recall@100").fit(train)
    scores = search.cv_results_["mean_test_recall@100"]
    print("K on the training chunks (mean Recall@100 of two folds): " + ", ".join(
        f"{k}: {s:.3f}" for k, s in zip(k_values, scores, strict=True)))
    return search.best_params_["interests__n_clusters"]


def where_relevant_items_were(log, first_test) -> tuple[float, float]:
    """Two means over the test points, of the share of the user's items of chunk t+1 that
    anyone engaged with in the latest chunk before it (the most recall a method can reach
    whose candidates are that chunk's items: MiCRO, Popularity and ANN with window 1), and,
    over the warm points, that the user had engaged with in any chunk before."""
    pairs = log[["user", "item", "chunk"]].drop_duplicates()
    in_latest, own = [], []
    for t, rows in pairs[pairs.chunk >= first_test].groupby("chunk"):
        before = pairs[pairs.chunk < t]
        latest = before.item[before.chunk == before.chunk.max()]
        seen = rows.set_index(["user", "item"]).index.isin(
            before.set_index(["user", "item"]).index)
        warm = rows.user.isin(before.user).to_numpy()
        in_latest.append(rows.item.isin(latest).groupby(rows.user).mean().to_numpy())
        own.append(rows[warm].assign(seen=seen[warm]).groupby("user").seen.mean().to_numpy())
    return float(np.concatenate(in_latest).mean()), float(np.concatenate(own).mean())


def warm_cold_table(reports, m=100) -> str:
    """The overall means at ``m`` over all, warm and cold points, one row per method."""
    columns = [f"{metric}@{m}" for metric in ("recall", "mrr", "ndcg")]
    lines = ["| method | points | n_points | " + " | ".join(columns) + " |",
             "|---|---|---:|" + "---:|" * len(columns)]
    for name, report in reports.items():
        for points, row in report.overall(by_warm=True).iterrows():
            lines.append(f"| {name} | {points} | {row['n_points']:.0f} | "
                         + " | ".join(f"{row[c]:.3f}" for c in columns) + " |")
    return "\n".join(lines)


def per_chunk_table(reports, metric) -> str:
    """``metric`` (e.g. "recall@100") per test chunk, one row per chunk, one column per
    method: the figures of the per-chunk plots."""
    frames = {name: report.per_chunk() for name, report in reports.items()}
    first = next(iter(frames.values()))
    lines = ["| chunk | points | " + " | ".join(frames) + " |",
             "|---:|---:|" + "---:|" * len(frames)]
    for chunk, n_points in first["n_points"].items():
        lines.append(f"| {chunk} | {n_points:.0f} | " + " | ".join(
            f"{frame.loc[chunk, metric]:.3f}" for frame in frames.values()) + " |")
    return "\n".join(lines)


def run(name, args):
    try:
        if name == "higgs":
            log, train_chunks, k = load_higgs(chunk_hours=6, as_frame=True), 19, args.k_higgs
        else:
            log, train_chunks, k = load_movielens(chunk_days=30, as_frame=True), 250, \
                args.k_movielens
    except FileNotFoundError as exc:
        sys.exit(f"The real logs are needed for this example. {exc}")
    train = log[log.chunk < train_chunks]
    test = log[log.chunk >= train_chunks]
    print(f"## {name}: {len(log):,} engagements, chunks 0..{log.chunk.max()}; "
          f"fit on 0..{train_chunks - 1} ({len(train):,}), test on "
          f"{train_chunks}..{log.chunk.max()} ({len(test):,})\n")
    if k is None:
        k = choose_k(train)
    print(f"K = {k}")
    reports = run_experiment(train, test, n_interests=k, methods=METHODS,
                             n_components=N_COMPONENTS, m_values=(50, 100), random_state=0)
    print("\nMean over all (user, chunk) points:\n")
    print(results_table(reports))
    print("\nPer-user aggregate (each user's mean over their test chunks, then over users):\n")
    print(results_table(reports, aggregate="per_user"))
    print("\nMean over all, warm and cold (user, chunk) points, at 100:\n")
    print(warm_cold_table(reports))
    in_latest, own = where_relevant_items_were(log, train_chunks)
    print(f"\nA test point's relevant items, mean share engaged with in the chunk before by "
          f"anyone: {in_latest:.3f}; over warm points, by the user in any chunk before: {own:.3f}")
    if name == "higgs":  # MovieLens has 24 test chunks of about a dozen points each
        for metric in ("recall@100", "mrr@100"):
            print(f"\n{metric} per test chunk:\n")
            print(per_chunk_table(reports, metric))
    paths = plot_per_chunk(reports, args.out, m=100, prefix=f"{name}_")
    print("\nplots: " + ", ".join(str(p) for p in paths) + "\n")
    return reports


def main(argv=None):
    args = parse_args(argv)
    start = time.perf_counter()
    reports = {name: run(name, args) for name in args.datasets}
    print(f"{time.perf_counter() - start:.0f} s in all")
    return reports


if __name__ == "__main__":
    main()
