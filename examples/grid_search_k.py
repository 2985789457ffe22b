"""Choose MiCRO's number of interests K with GridSearchCV on the Higgs log
=========================================================================

The search runs on the training chunks of the Higgs log only (6-hour chunks 0..18 by
default), so the later chunks stay unseen for `paper_table.py`. Each fold of
``ChunkSplit(n_splits=3, test_chunks=2)`` fits the pipeline on the chunks before its two
test chunks and scores it with the rolling protocol over them: recommend for chunk t+1 with
the state after chunk t, then ``partial_fit`` chunk t+1. The scorer works on a copy, so one
fold's ``partial_fit`` never reaches another. The refit on all training chunks uses the K
with the best mean Recall@100.

The pipeline caches its transformers (``memory=``): the graph embedding of a fold is
computed once and shared by every K.

Run it from the project's root (about 2 minutes on the real log; the documentation shows its code
without running it)::

    python examples/grid_search_k.py
    python examples/grid_search_k.py --k 50 100 200 400

The log is read from ``../shared/data`` (or the folder named by ``SKLEARN_MICRO_DATA``).
"""

import argparse
import sys
import tempfile
import time

from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.utils.validation import check_is_fitted

from sklearn_micro import GraphEmbedder, MiCRO, SphericalKMeans
from sklearn_micro.datasets import load_higgs
from sklearn_micro.model_selection import ChunkSplit, make_rolling_scorer


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, nargs="+", default=[100, 200, 400],
                        help="values of K to try (default: 100 200 400)")
    parser.add_argument("--chunk-hours", type=float, default=6,
                        help="length of a chunk in hours (default: 6)")
    parser.add_argument("--train-chunks", type=int, default=19,
                        help="search on chunks 0..N-1 only (default: 19)")
    parser.add_argument("--dim", type=int, default=64,
                        help="dimensions of the graph embedding (default: 64)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        log = load_higgs(chunk_hours=args.chunk_hours, as_frame=True)
    except FileNotFoundError as exc:
        sys.exit(f"The Higgs log is needed for this example. {exc}")
    X = log[log.chunk < args.train_chunks].reset_index(drop=True)
    cv = ChunkSplit(n_splits=3, test_chunks=2)
    for fold, (train, test) in enumerate(cv.split(X)):
        print(f"fold {fold}: fit on chunks 0..{X.chunk[train].max()} ({len(train):,} rows), "
              f"score on chunks {X.chunk[test].min()}..{X.chunk[test].max()} "
              f"({len(test):,} rows)")

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as cache:
        pipe = Pipeline([
            ("embed", GraphEmbedder(n_components=args.dim, random_state=0)),
            ("interests", SphericalKMeans(random_state=0)),
            ("micro", MiCRO(random_state=0)),
        ], memory=cache)
        search = GridSearchCV(
            pipe,
            {"interests__n_clusters": args.k},
            cv=cv,
            scoring=make_rolling_scorer(m_values=100),
            refit="recall@100",
            n_jobs=1,
        ).fit(X)
    print(f"search and refit: {time.perf_counter() - start:.0f} s\n")

    results = search.cv_results_
    folds = [f"split{j}_test_recall@100" for j in range(cv.get_n_splits())]
    columns = [*folds, "mean_test_recall@100", "std_test_recall@100", "mean_test_mrr@100",
               "mean_test_ndcg@100", "rank_test_recall@100"]
    header = " | ".join(c.replace("_test_", " ") for c in columns)
    print(f"| K (interests__n_clusters) | {header} |")
    print("|---:|" + "---:|" * len(columns))
    for j, params in enumerate(results["params"]):
        cells = [str(results[c][j]) if c.startswith("rank") else f"{results[c][j]:.4f}"
                 for c in columns]
        print(f"| {params['interests__n_clusters']} | " + " | ".join(cells) + " |")

    best = search.best_estimator_
    check_is_fitted(best)  # raises NotFittedError if the refit did not happen
    print(f"\nbest_params_: {search.best_params_}")
    print(f"best_estimator_ is fitted on chunks 0..{best[-1].latest_chunk_}: "
          f"{best[-1].n_interests_} interests, {len(best[-1].item_ids_):,} items")
    return search


if __name__ == "__main__":
    main()
