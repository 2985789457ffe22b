"""MiCRO's retrieval quality against the paper's model and the baselines, with intervals.

Runs the rolling protocol (docs/evaluation.md) on Higgs (6-hour chunks, fit on 0..18),
MovieLens (30-day chunks, fit on 0..249), the README's generated log (fit on 12 of 16
chunks) and, where they are, fave-shaped logs of ``benchmarks/paper_scale.py``'s plain
draw, for ``MiCRO()`` (its defaults; and with ``learned_by="mrr"``), the paper's model
(``personal=0, popularity=0, phi_decay=0``), the learned blend and ``phi_decay`` alone,
ANN, Popularity, RecentItems, ALS, ItemKNN and RP3beta, and prints markdown tables:

- recall@100 and MRR@100 of every method, and their ratios to the paper's model;
- the ratios to the best of the four baselines (chosen per metric) and to each of them;
- the diagnosis: warm and cold users, the size of a warm user's support, the kind of
  relevant item (a repeat of the user's own, new in the chunk, engaged by anyone in the
  chunk before, older), the cut-off M.

Every figure is the mean over (user, chunk) points with a 95% interval from a per-user
bootstrap (users resampled with replacement, the mean recomputed; the same resamples for
every row, so ratios between rows get paired intervals).

    python benchmarks/quality.py                      # Higgs, MovieLens, generated (4 min)
    python benchmarks/quality.py --log movielens      # one log (under a minute)
    python benchmarks/quality.py --log fave-1-100 --fave-dir /work/data-scale
    python benchmarks/quality.py --search-k           # GridSearchCV over K on the training chunks
    python benchmarks/quality.py --search-baselines   # ItemKNN's and RP3beta's grid, likewise

The results and what they mean are in docs/quality.md.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from _harness import header, log, table  # noqa: E402

from sklearn_micro import GraphEmbedder, MiCRO, SphericalKMeans  # noqa: E402
from sklearn_micro._log import check_log, iter_chunks  # noqa: E402
from sklearn_micro.baselines import (  # noqa: E402
    ALSRecommender,
    ANNRecommender,
    ItemKNNRecommender,
    PopularityRecommender,
    RecentItemsRecommender,
    RP3betaRecommender,
)
from sklearn_micro.cli import DEFAULT_LOG  # noqa: E402
from sklearn_micro.datasets import (  # noqa: E402
    load_higgs,
    load_movielens,
    make_engagements,
    read_twitter_fave,
)
from sklearn_micro.experiment import split_chunks  # noqa: E402

M = 100
CUTOFFS = (10, 50, 100)
ITEM_KINDS = ("repeat", "new", "in chunk before", "older")
BASELINES = ("ANN", "Popularity", "RecentItems", "ALS", "ItemKNN", "RP3beta", "ItemKNN tuned",
             "RP3beta tuned")
FAVE_DIR = "/work/data-scale"


@dataclass
class LogSpec:
    name: str
    load: object
    train_chunks: int
    k: int
    ks: tuple
    held_out_chunks: int = 3
    # ItemKNN's and RP3beta's parameters as --search-baselines chooses them on this log's
    # training chunks (the best recall@100 of the grid)
    tuned: dict = field(default_factory=dict)
    out: list = field(default_factory=list)
    costs: list = field(default_factory=list)


LOGS = {
    "higgs": LogSpec("higgs", lambda: load_higgs(chunk_hours=6), 19, 400, (100, 200, 400), 4,
                     {"ItemKNN": dict(n_neighbors=20, similarity="tfidf", window=32),
                      "RP3beta": dict(n_neighbors=50, alpha=1.0, beta=0.0, window=32)}),
    # K as examples/paper_table.py's search on the training chunks chooses it (100 with
    # the current embedding and clustering defaults)
    "movielens": LogSpec("movielens", lambda: load_movielens(chunk_days=30), 250, 100,
                         (10, 25, 100), 24,
                         {"ItemKNN": dict(n_neighbors=10, similarity="cosine", window=2),
                          "RP3beta": dict(n_neighbors=50, alpha=0.25, beta=0.0, window=32)}),
    # fave-shaped logs of ephemeral items (benchmarks/paper_scale.py's plain draw), where
    # they are: --fave-dir
    "fave-1-100": LogSpec("fave-1-100", lambda: read_twitter_fave(
        Path(FAVE_DIR) / "fave-plain-1-100.parquet"), 169, 1000, (1000,)),
    "fave-1-20": LogSpec("fave-1-20", lambda: read_twitter_fave(
        Path(FAVE_DIR) / "fave-plain-1-20.parquet"), 169, 1000, (1000,)),
    "generated": LogSpec("generated", lambda: make_engagements(**DEFAULT_LOG),
                         12, 100, (50, 100, 200), 3,
                         {"RP3beta": dict(n_neighbors=20, alpha=0.25, beta=0.0, window=2)}),
}


# --------------------------------------------------------------------------- protocol

class Relevant:
    """The test log's distinct (user, item) pairs per chunk, with the kind of each item."""

    def __init__(self, train, test):
        full_user = np.concatenate([train.user, test.user])
        full_item = np.concatenate([train.item, test.item])
        full_chunk = np.concatenate([train.chunk, test.chunk]).astype(np.int64)
        _, u = np.unique(full_user, return_inverse=True)
        items, it = np.unique(full_item, return_inverse=True)
        u, it = u.ravel().astype(np.int64), it.ravel().astype(np.int64)
        n_items = items.shape[0]
        first_item = np.full(n_items, np.iinfo(np.int64).max)
        np.minimum.at(first_item, it, full_chunk)
        key = u * n_items + it
        first_pair_key, first_pair = _first_of(key, full_chunk)
        is_test = np.arange(full_chunk.shape[0]) >= len(train)
        # distinct test pairs per chunk
        tkey = np.unique(full_chunk[is_test] * (key.max() + 1) + key[is_test])
        self.chunk = tkey // (key.max() + 1)
        pkey = tkey % (key.max() + 1)
        self.user = np.unique(full_user)[pkey // n_items]
        self.item = items[pkey % n_items]
        item_code = pkey % n_items
        chunk_item = np.unique(full_chunk * n_items + it)
        in_before = np.isin((self.chunk - 1) * n_items + item_code, chunk_item)
        repeat = first_pair[np.searchsorted(first_pair_key, pkey)] < self.chunk
        new = first_item[item_code] == self.chunk
        kind = np.where(repeat, 0, np.where(new, 1, np.where(in_before, 2, 3)))
        self.kind = kind
        self.in_before = in_before
        # warm: any engagement before the chunk
        first_user = np.full(u.max() + 1, np.iinfo(np.int64).max)
        np.minimum.at(first_user, u, full_chunk)
        self.warm_user_first = (np.unique(full_user), first_user)


def _first_of(key, chunk):
    order = np.lexsort((chunk, key))
    k, c = key[order], chunk[order]
    start = np.ones(k.shape[0], bool)
    start[1:] = k[1:] != k[:-1]
    return k[start], c[start]


class Points:
    """Per-point and per-pair records of one rolling run, shared by all methods."""

    def __init__(self, rel: Relevant):
        self.rel = rel
        chunk, user = rel.chunk, rel.user
        pk = np.unique(np.stack([chunk, np.unique(user, return_inverse=True)[1].ravel()]),
                       axis=1, return_inverse=True)[1].ravel()
        # pairs are sorted by chunk then user then item, so points are contiguous
        self.pair_point = pk
        starts = np.flatnonzero(np.r_[True, np.diff(pk) != 0])
        self.point_chunk = chunk[starts]
        self.point_user = user[starts]
        self.n_relevant = np.diff(np.r_[starts, pk.shape[0]])
        users, first = rel.warm_user_first
        self.point_warm = first[np.searchsorted(users, self.point_user)] < self.point_chunk
        self.support = np.zeros(starts.shape[0], np.int64)
        self.ranks: dict[str, np.ndarray] = {}

    def chunk_points(self, chunk):
        sel = np.flatnonzero(self.point_chunk == chunk)
        return sel, self.point_user[sel]

    def record(self, name, chunk, items):
        """Store each relevant pair's rank (0 if not in the list) for the chunk's points."""
        sel, users = self.chunk_points(chunk)
        ranks = self.ranks.setdefault(name, np.zeros(self.pair_point.shape[0], np.int32))
        pairs = np.flatnonzero(self.rel.chunk == chunk)
        # point position of each pair within the chunk's points
        local = np.searchsorted(sel, self.pair_point[pairs])
        row_items = items[local]
        hit = row_items == self.rel.item[pairs][:, None]
        found = hit.any(axis=1)
        ranks[pairs[found]] = hit[found].argmax(axis=1) + 1


def rolling(train, test, runners, points: Points, say):
    test = check_log(test)
    for chunk, rows in iter_chunks(test.chunk):
        start = time.perf_counter()
        sel, users = points.chunk_points(chunk)
        for runner in runners:
            for name, items in runner.rows(users).items():
                points.record(name, chunk, items)
            if runner.support_source:
                points.support[sel] = runner.support_size(users)
        for runner in runners:
            runner.partial_fit(test.take(rows))
        say(f"  chunk {chunk}: {sel.shape[0]} points, {time.perf_counter() - start:.1f} s")


class BaselineRunner:
    """A recommender's own ``recommend``; with ``support_source``, a fitted MiCRO whose
    supports give the points their number of interests."""

    def __init__(self, name, model, *, support_source=False):
        self.name, self.model = name, model
        self.support_source = support_source

    def support_size(self, users):
        idx = self.model.user_ids_.lookup(np.asarray(users))
        size = np.diff(self.model.support_indptr_)
        return np.where(idx >= 0, size[np.maximum(idx, 0)], 0)

    def rows(self, users):
        return {self.name: self.model.recommend(users, M)[0]}

    def partial_fit(self, chunk_log):
        self.model.partial_fit(chunk_log)


# --------------------------------------------------------------------------- statistics

class Bootstrap:
    """Per-user bootstrap of means over points: one weight matrix (resamples x users)."""

    def __init__(self, point_user, n_boot=1000, seed=0):
        self.users, self.point_code = np.unique(point_user, return_inverse=True)
        n = self.users.shape[0]
        rng = np.random.default_rng(seed)
        self.W = np.empty((n_boot, n), np.float32)
        for b in range(n_boot):
            self.W[b] = np.bincount(rng.integers(0, n, n), minlength=n)

    def replicate(self, values, mask=None):
        """The mean and its bootstrap replicates."""
        if mask is None:
            mask = np.ones(values.shape[0], bool)
        code = self.point_code[mask]
        n = self.users.shape[0]
        sums = np.bincount(code, weights=values[mask], minlength=n)
        counts = np.bincount(code, minlength=n).astype(np.float64)
        reps = (self.W @ sums) / np.maximum(self.W @ counts, 1e-12)
        return float(values[mask].mean()) if mask.any() else np.nan, reps


def fmt(mean, reps):
    lo, hi = np.percentile(reps, [2.5, 97.5])
    return f"{mean:.3f} [{lo:.3f}, {hi:.3f}]"


def fmt_ratio(a, b):
    (ma, ra), (mb, rb) = a, b
    r = ra / np.maximum(rb, 1e-12)
    lo, hi = np.percentile(r, [2.5, 97.5])
    return f"{ma / mb:.3f} [{lo:.3f}, {hi:.3f}]"


def point_metrics(points: Points, name, cutoff=M, kind=None):
    """Recall@cutoff and MRR@cutoff per point (restricted to relevant items of ``kind``;
    points without such items get NaN)."""
    ranks = points.ranks[name]
    n_points = points.point_chunk.shape[0]
    pick = np.ones(ranks.shape[0], bool) if kind is None else points.rel.kind == kind
    hit = (ranks > 0) & (ranks <= cutoff) & pick
    n_rel = np.bincount(points.pair_point[pick], minlength=n_points)
    hits = np.bincount(points.pair_point, weights=hit, minlength=n_points)
    recall = np.divide(hits, n_rel, out=np.full(n_points, np.nan), where=n_rel > 0)
    inv = np.where(hit, 1.0 / np.maximum(ranks, 1), 0.0)
    mrr = np.zeros(n_points)
    np.maximum.at(mrr, points.pair_point, inv)
    mrr[n_rel == 0] = np.nan
    return recall, mrr


# --------------------------------------------------------------------------- one log

def embed_and_cluster(train, k_values, say):
    start = time.perf_counter()
    embedded = GraphEmbedder(64, random_state=0, n_jobs=-1).fit_transform(train)
    say(f"graph embedding of {len(embedded.user_ids)} users and {len(embedded.item_ids)} "
        f"items: {time.perf_counter() - start:.1f} s")
    clustered = {}
    for k in k_values:
        start = time.perf_counter()
        kmeans = SphericalKMeans(k, random_state=0)
        clustered[k] = kmeans.fit_transform(embedded)
        say(f"SphericalKMeans(K={k}): {kmeans.n_clusters_} clusters, "
            f"{time.perf_counter() - start:.1f} s")
    return embedded, clustered


def run_log(spec: LogSpec, args, say):
    """MiCRO's defaults (the blend's weights chosen on held-out training chunks,
    phi_decay chosen), each of the two alone and the paper's model, against the
    baselines."""
    log = check_log(spec.load())
    train, test = split_chunks(log, spec.train_chunks)
    print(f"## {spec.name}: {len(log):,} engagements; fit on the first {spec.train_chunks} "
        f"chunks ({len(train):,}), test on the rest ({len(test):,})")
    embedded, clustered = embed_and_cluster(train, (spec.k,), say)
    base = clustered[spec.k]

    def fitted(**params):
        start = time.perf_counter()
        model = MiCRO(random_state=0, n_jobs=-1, **params).fit(base)
        say(f"MiCRO({params}): personal_weight_ {model.personal_weight_:.3g}, "
            f"coengagement_ {model.coengagement_:g}, "
            f"popularity_weight_ {model.popularity_weight_:.3g}, phi_decay_ "
            f"{model.phi_decay_:g}, fit {time.perf_counter() - start:.1f} s")
        return model

    def blend(model):
        return (f"personal {model.personal_weight_:.2g}, co-engagement "
                f"{model.coengagement_:.2g}, popularity {model.popularity_weight_:.2g}")

    paper = fitted(personal=0, popularity=0, phi_decay=0)
    defaults = fitted()
    by_mrr = fitted(learned_by="mrr")
    no_coengagement = fitted(coengagement=0)
    blend_only = fitted(phi_decay=0)
    decay_only = fitted(personal=0, popularity=0)
    decay = defaults.phi_decay_
    runners = [
        BaselineRunner("MiCRO (paper)", paper, support_source=True),
        BaselineRunner(f"MiCRO() defaults: {blend(defaults)}, phi_decay {decay:g}", defaults),
        BaselineRunner(f"learned_by='mrr': {blend(by_mrr)}", by_mrr),
        BaselineRunner(f"coengagement=0 ({blend(no_coengagement)})", no_coengagement),
        BaselineRunner(f"blend ({blend(blend_only)}) only", blend_only),
        BaselineRunner(f"phi_decay auto ({decay:g}) only", decay_only),
        BaselineRunner("ANN", ANNRecommender(random_state=0).fit(embedded)),
        BaselineRunner("Popularity", PopularityRecommender().fit(train)),
        BaselineRunner("RecentItems", RecentItemsRecommender().fit(train)),
        BaselineRunner("ALS", ALSRecommender(64, random_state=0, n_jobs=-1).fit(train)),
    ]
    for name, cls in (("ItemKNN", ItemKNNRecommender), ("RP3beta", RP3betaRecommender)):
        runners.append(BaselineRunner(name, timed_fit(name, cls(n_jobs=-1), train, spec, say)))
        if name in spec.tuned:
            tuned = cls(n_jobs=-1, **spec.tuned[name])
            runners.append(BaselineRunner(f"{name} tuned",
                                          timed_fit(f"{name} tuned", tuned, train, spec, say)))
    points = Points(Relevant(train, test))
    start = time.perf_counter()
    rolling(train, test, runners, points, say)
    say(f"rolling evaluation of {len(points.ranks)} rows: {time.perf_counter() - start:.1f} s")
    report(spec, points, args, say)


def timed_fit(name, model, train, spec, say):
    """``model`` fitted on ``train``; its fit time (after a first fit that compiles the
    kernels) and the bytes of its neighbour lists go to ``spec.costs``."""
    model.fit(train)
    start = time.perf_counter()
    model.fit(train)
    seconds = time.perf_counter() - start
    lists = sum(getattr(model, attr).nbytes for attr in (
        "neighbour_indptr_", "neighbour_items_", "neighbour_scores_"))
    n_items = len(model.item_ids_)
    params = {k: v for k, v in model.get_params().items() if k != "n_jobs"}
    spec.costs.append([name, ", ".join(f"{k}={v}" for k, v in params.items()),
                       f"{seconds:.2f}", f"{lists / n_items:.0f}",
                       f"{model.neighbour_items_.shape[0] / n_items:.1f}"])
    say(f"{name}: fit {seconds:.2f} s, {lists / n_items:.0f} bytes per item")
    return model


#: the held-out grids of the neighbour baselines (--search-baselines)
NEIGHBOUR_GRIDS = {
    "ItemKNN": (ItemKNNRecommender, {"similarity": ["cosine", "bm25", "tfidf"],
                                     "window": [2, 8, 32], "n_neighbors": [10, 20, 50]}),
    "RP3beta": (RP3betaRecommender, {"alpha": [0.25, 0.5, 1.0], "beta": [0.0, 0.25, 0.5],
                                     "window": [2, 8, 32], "n_neighbors": [10, 20, 50]}),
}


def search_baselines(spec: LogSpec, say):
    """ItemKNN's and RP3beta's parameters by GridSearchCV on the training chunks only: one
    fold whose test span is the last ``spec.held_out_chunks`` training chunks, scored by
    the rolling protocol (recall@100, MRR@100)."""
    from sklearn.model_selection import GridSearchCV

    from sklearn_micro.model_selection import ChunkSplit, make_rolling_scorer

    log = check_log(spec.load())
    train, _ = split_chunks(log, spec.train_chunks)
    X = np.column_stack([train.user, train.item, train.chunk])
    for name, (cls, grid) in NEIGHBOUR_GRIDS.items():
        start = time.perf_counter()
        search = GridSearchCV(
            cls(n_jobs=-1), grid, cv=ChunkSplit(n_splits=1, test_chunks=spec.held_out_chunks),
            scoring=make_rolling_scorer(m_values=100, metrics=("recall", "mrr")),
            refit=False).fit(X)
        res = search.cv_results_
        order = np.argsort(-res["mean_test_recall@100"], kind="stable")
        rows = [[", ".join(f"{k}={v}" for k, v in res["params"][j].items()),
                 f"{res['mean_test_recall@100'][j]:.4f}", f"{res['mean_test_mrr@100'][j]:.4f}"]
                for j in order]
        print(f"\n### {spec.name}: {name} by GridSearchCV on the last {spec.held_out_chunks} "
              f"training chunks ({time.perf_counter() - start:.0f} s)\n")
        print(table(["parameters", "recall@100", "mrr@100"], rows), flush=True)


def report(spec, points: Points, args, say):
    boot = Bootstrap(points.point_user, n_boot=args.n_boot)
    names = list(points.ranks)
    metric = {name: point_metrics(points, name) for name in names}
    stats = {name: (boot.replicate(r), boot.replicate(q)) for name, (r, q) in metric.items()}
    out = []
    out.append(f"\n### {spec.name}: ablation (K = {spec.k}), all points\n")
    out.append(f"{points.point_chunk.shape[0]} points, {np.unique(points.point_user).shape[0]} "
               f"users, {int(points.point_warm.sum())} warm points\n")
    ref = "MiCRO (paper)"
    rows = []
    for name in names:
        (r, q) = stats[name]
        rows.append([name, fmt(*r), fmt(*q), fmt_ratio(r, stats[ref][0]),
                     fmt_ratio(q, stats[ref][1])])
    out.append(table(["method", "recall@100", "mrr@100", "recall / paper", "mrr / paper"],
                     rows))
    # targets for each MiCRO row against the baselines
    baselines = [n for n in BASELINES if n in names]
    best_r = max(baselines, key=lambda n: stats[n][0][0])
    best_q = max(baselines, key=lambda n: stats[n][1][0])
    out.append(f"\nRatios to the best baseline of {', '.join(baselines)} on each metric "
               f"(recall: {best_r}, MRR: {best_q}) and to each of them, paired bootstrap:\n")
    rows = []
    for name in names:
        if name in baselines:
            continue
        r, q = stats[name]
        rows.append([name, fmt_ratio(r, stats[best_r][0]), fmt_ratio(q, stats[best_q][1])]
                    + [f"{fmt_ratio(r, stats[b][0])} / {fmt_ratio(q, stats[b][1])}"
                       for b in baselines])
    out.append(table(["method", f"recall / {best_r}", f"mrr / {best_q}"]
                     + [f"/ {b} (recall / mrr)" for b in baselines], rows))
    if spec.costs:
        out.append(f"\n### {spec.name}: cost of the neighbour baselines (fit on the training "
                   "chunks, after compilation; the lists' bytes per item known)\n")
        out.append(table(["method", "parameters", "fit s", "bytes per item",
                          "neighbours per item"], spec.costs))
    # diagnosis
    diag = [ref, *args.diagnose_rows(names), *baselines]
    diag = [d for i, d in enumerate(diag) if d in names and d not in diag[:i]]
    warm = points.point_warm
    out.append(f"\n### {spec.name}: diagnosis, warm and cold points (recall@100 / mrr@100)\n")
    rows = []
    for name in diag:
        r, q = metric[name]
        row = [name]
        for mask in (warm, ~warm):
            row += [fmt(*boot.replicate(r, mask)), fmt(*boot.replicate(q, mask))]
        rows.append(row)
    out.append(table(["method", f"warm recall ({int(warm.sum())})", "warm mrr",
                      f"cold recall ({int((~warm).sum())})", "cold mrr"], rows))
    size = points.support
    buckets = [("1 interest", warm & (size == 1)), ("2-3", warm & (size >= 2) & (size <= 3)),
               ("4-9", warm & (size >= 4) & (size <= 9)), ("10+", warm & (size >= 10)),
               ("no support", warm & (size == 0))]
    buckets = [(b, msk) for b, msk in buckets if msk.any()]
    out.append(f"\n### {spec.name}: warm points by the size of the user's support in "
               "MiCRO (paper) (recall@100 / mrr@100)\n")
    rows = []
    for name in diag:
        r, q = metric[name]
        rows.append([name] + [f"{fmt(*boot.replicate(r, msk))} / "
                              f"{np.nanmean(q[msk]):.3f}" for _, msk in buckets])
    out.append(table(["method"] + [f"{b} ({int(msk.sum())})" for b, msk in buckets], rows))
    kinds = points.rel.kind
    share = [np.mean(kinds == j) for j in range(4)]
    out.append(f"\n### {spec.name}: recall@100 by kind of relevant item (points with at "
               "least one such item)\n")
    out.append("Share of the relevant (user, item) pairs: " + ", ".join(
        f"{ITEM_KINDS[j]} {share[j]:.3f}" for j in range(4))
        + f"; engaged by anyone in the chunk before (any kind): "
        f"{points.rel.in_before.mean():.3f}\n")
    rows = []
    for name in diag:
        row = [name]
        for j in range(4):
            r, _ = point_metrics(points, name, kind=j)
            msk = ~np.isnan(r)
            row.append(fmt(*boot.replicate(r, msk)) if msk.any() else "-")
        rows.append(row)
    counts = [int((~np.isnan(point_metrics(points, ref, kind=j)[0])).sum()) for j in range(4)]
    out.append(table(["method"] + [f"{ITEM_KINDS[j]} ({counts[j]})" for j in range(4)], rows))
    out.append(f"\n### {spec.name}: by cut-off M (recall@M / mrr@M)\n")
    rows = []
    for name in diag:
        row = [name]
        for c in CUTOFFS:
            r, q = point_metrics(points, name, cutoff=c)
            row.append(f"{fmt(*boot.replicate(r))} / {q.mean():.3f}")
        rows.append(row)
    out.append(table(["method"] + [f"M={c}" for c in CUTOFFS], rows))
    text = "\n".join(out)
    print(text, flush=True)
    spec.out.append(text)


def search_k(spec: LogSpec, say):
    """K chosen by GridSearchCV over ``spec.ks`` on the training chunks only, as
    examples/grid_search_k.py does: ChunkSplit(n_splits=2, test_chunks=1), the rolling
    scorer, MiCRO with phi_decay 0 and "auto" (chosen on each fold's training chunks)."""
    import tempfile

    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import Pipeline

    from sklearn_micro.model_selection import ChunkSplit, make_rolling_scorer

    log = check_log(spec.load())
    train, _ = split_chunks(log, spec.train_chunks)
    X = np.column_stack([train.user, train.item, train.chunk])
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as cache:
        pipe = Pipeline([("embed", GraphEmbedder(64, random_state=0, n_jobs=-1)),
                         ("interests", SphericalKMeans(random_state=0)),
                         ("micro", MiCRO(random_state=0, n_jobs=-1))], memory=cache)
        search = GridSearchCV(
            pipe, {"interests__n_clusters": list(spec.ks), "micro__phi_decay": [0.0, "auto"]},
            cv=ChunkSplit(n_splits=2, test_chunks=1), scoring=make_rolling_scorer(m_values=100),
            refit=False).fit(X)
    res = search.cv_results_
    rows = [[p["interests__n_clusters"], p["micro__phi_decay"],
             f"{res['mean_test_recall@100'][j]:.4f}", f"{res['mean_test_mrr@100'][j]:.4f}"]
            for j, p in enumerate(res["params"])]
    print(f"\n### {spec.name}: K by GridSearchCV on the training chunks "
        f"({time.perf_counter() - start:.0f} s)\n")
    print(table(["K", "phi_decay", "mean recall@100", "mean mrr@100"], rows), flush=True)


def main(argv=None):
    global FAVE_DIR
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", action="append", choices=sorted(LOGS))
    parser.add_argument("--n-boot", type=int, default=1000)
    parser.add_argument("--search-k", action="store_true",
                        help="only run GridSearchCV over K on the training chunks")
    parser.add_argument("--search-baselines", action="store_true",
                        help="only run ItemKNN's and RP3beta's grids on the training chunks")
    parser.add_argument("--k", type=lambda v: v if v == "auto" else int(v), default=None,
                        help="K for every log, or 'auto' for SphericalKMeans(n_clusters="
                             "'auto') (default: per log)")
    parser.add_argument("--fave-dir", default=FAVE_DIR,
                        help="folder of the fave-shaped logs fave-plain-1-100.parquet and "
                             "fave-plain-1-20.parquet (--log fave-1-100, --log fave-1-20)")
    args = parser.parse_args(argv)
    FAVE_DIR = args.fave_dir
    args.diagnose_rows = lambda names: [n for n in names if n.startswith("MiCRO() defaults")]
    header("MiCRO's retrieval quality", "quality.py", argv)
    for name in args.log or ["higgs", "movielens", "generated"]:
        spec = LOGS[name]
        if args.k:
            spec.k = args.k
        if args.search_k:
            search_k(spec, log)
            continue
        if args.search_baselines:
            search_baselines(spec, log)
            continue
        run_log(spec, args, log)


if __name__ == "__main__":
    main()
