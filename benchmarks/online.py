"""Request-time retrieval: what a user's history is worth, and what filters and history cost.

``--quality``: the rolling protocol (docs/evaluation.md) with a twist. Each test chunk's
users with at least two engagements in it are answered twice from the state after the
chunk before: without a history, and with the first half of their engagements in the chunk
(in the log's row order, time order on Higgs) as ``history``; both lists are scored
(Recall@100, MRR@100) against the distinct items of the second half, and against those of
them not in the history (a repeat of a history item is easy to get right). Then the
models take the chunk with ``partial_fit``. MiCRO with its defaults (and with the history items
also in ``exclude``), the paper's model (its `paper_model`, the same sampler) and
RecentItems (history as its newest items) run on the
Higgs log (6-hour chunks, fit on 0..18, K = 400) and the generated log of ``sklearn-micro
reproduce`` (fit on 12 of 16 chunks, K = 100). Each figure is the mean over (user, chunk)
points; the differences are paired (the same points with and without history), with a 95%
interval from a per-user bootstrap (1,000 resamples).

``--cost``: the time of ``recommend`` for 10,000 users at m = 100 on a generated log of
K = 1,000 interests (MiCRO fitted on the planted interests of its items), plain and with
each request-time argument; each figure is the median wall time of ``--repeat`` calls
(interleaved) on one thread, and its ratio to the plain call.

    python benchmarks/online.py --quality                 # both logs (about 6 min)
    python benchmarks/online.py --quality --log generated
    python benchmarks/online.py --cost                    # about 2 min
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from sklearn.pipeline import Pipeline  # noqa: E402

from sklearn_micro import (  # noqa: E402
    GraphEmbedder,
    MiCRO,
    RecentItemsRecommender,
    SphericalKMeans,
)
from sklearn_micro._log import check_log, iter_chunks  # noqa: E402
from sklearn_micro.cli import DEFAULT_LOG  # noqa: E402
from sklearn_micro.datasets import load_higgs, make_engagements  # noqa: E402

M = 100
LOGS = {
    "higgs": (lambda: load_higgs(chunk_hours=6), 19, 400),
    "generated": (lambda: make_engagements(**DEFAULT_LOG), 12, 100),
}


# ---------------------------------------------------------------------------- quality

def _split_points(test_rows):
    """The chunk's users with two engagements or more, their first halves (history) and
    the distinct items of their second halves (relevant), in row order; with
    ``fresh``, the relevant items not in the history."""
    user, item = test_rows.user, test_rows.item
    order = np.argsort(user, kind="stable")
    user, item = user[order], item[order]
    users, start, count = np.unique(user, return_index=True, return_counts=True)
    keep = count >= 2
    history, relevant, fresh = [], [], []
    for s, n in zip(start[keep], count[keep], strict=True):
        half = n // 2
        history.append(item[s:s + half].tolist())
        relevant.append(np.unique(item[s + half:s + n]))
        fresh.append(np.setdiff1d(relevant[-1], item[s:s + half]))
    return users[keep], history, relevant, fresh


def _scores(lists, relevant):
    """Recall and MRR of each row (NaN for a row without relevant items)."""
    recall = np.full(len(relevant), np.nan)
    mrr = np.full(len(relevant), np.nan)
    for r, rel in enumerate(relevant):
        if rel.shape[0] == 0:
            continue
        hit = np.isin(lists[r], rel)
        recall[r] = hit.sum() / rel.shape[0]
        mrr[r] = 1.0 / (np.argmax(hit) + 1) if hit.any() else 0.0
    return recall, mrr


def _bootstrap(point_user, values, n_boot=1000, seed=0):
    """The mean of ``values`` over points and its 95% interval, users resampled."""
    users, code = np.unique(point_user, return_inverse=True)
    sums = np.bincount(code, weights=values, minlength=users.shape[0])
    counts = np.bincount(code, minlength=users.shape[0])
    rng = np.random.default_rng(seed)
    reps = np.empty(n_boot)
    for b in range(n_boot):
        w = np.bincount(rng.integers(0, users.shape[0], users.shape[0]),
                        minlength=users.shape[0])
        reps[b] = (w @ sums) / (w @ counts)
    return values.mean(), np.percentile(reps, [2.5, 97.5])


def quality(log_names, say):
    rows = {"the second half": [], "the second half less the history": []}
    for name in log_names:
        load, n_train, k = LOGS[name]
        log = check_log(load())
        start = time.perf_counter()
        train = log.take(log.chunk < n_train)
        test = log.take(log.chunk >= n_train)
        pipe = Pipeline([("embed", GraphEmbedder(random_state=0)),
                         ("interests", SphericalKMeans(n_clusters=k, random_state=0)),
                         ("micro", MiCRO(random_state=0, n_jobs=2))]).fit(train)
        micro = pipe[-1]
        recent = RecentItemsRecommender().fit(train)
        say(f"{name}: fitted in {time.perf_counter() - start:.0f} s "
            f"(personal {micro.personal_weight_}, phi_decay {micro.phi_decay_})")
        records = {}  # model -> lists of (user, new, recall/mrr without, with)
        for chunk, at in iter_chunks(test.chunk):
            users, history, relevant, fresh = _split_points(test.take(at))
            new = micro.user_ids_.lookup(users) < 0
            for label, model, leave_out in (
                    ("MiCRO", micro, False), ("MiCRO, history excluded", micro, True),
                    ("MiCRO paper", micro.paper_model(), False),
                    ("RecentItems", recent, False)):
                plain = model.recommend(users, M)[0]
                told = model.recommend(users, M, history=history,
                                       exclude=history if leave_out else None)[0]
                for target, rel in zip(rows, (relevant, fresh), strict=True):
                    records.setdefault((target, label), []).append(
                        (users, new, *_scores(plain, rel), *_scores(told, rel)))
            micro.partial_fit(test.take(at))
            recent.partial_fit(test.take(at))
            say(f"  chunk {chunk}: {users.shape[0]} points")
        for (target, label), parts in records.items():
            user, new, r0, q0, r1, q1 = (np.concatenate(p) for p in zip(*parts, strict=True))
            scored = ~np.isnan(r0)
            for who, mask in (("all", scored), ("new users", scored & new)):
                if mask.sum() < 100:
                    continue
                row = [name, label, who, int(mask.sum())]
                for before, after in ((r0, r1), (q0, q1)):
                    diff, (lo, hi) = _bootstrap(user[mask], after[mask] - before[mask])
                    row += [f"{before[mask].mean():.3f}", f"{after[mask].mean():.3f}",
                            f"{diff:+.3f} [{lo:+.3f}, {hi:+.3f}]"]
                rows[target].append(row)
    for target, table in rows.items():
        print(f"Relevant: the distinct items of {target}.\n")
        _table(["log", "model", "users", "points", "recall@100", "with history",
                "difference", "MRR@100", "with history", "difference"], table)


# ------------------------------------------------------------------------------- cost

def cost(n_users, repeat, say):
    start = time.perf_counter()
    log, truth = make_engagements(n_users=40_000, n_items=60_000, n_chunks=6,
                                  n_interests=1000, n_engagements=1_200_000,
                                  interests_per_user=8.0, item_lifetime=2.5,
                                  item_appeal=1.7, random_state=0, return_truth=True)
    items = np.arange(truth.item_interest.shape[0])
    model = MiCRO(random_state=0, n_jobs=1).fit(
        log.take(log.chunk < 5), item_interest=(items, truth.item_interest))
    model.partial_fit(log.take(log.chunk == 5))
    say(f"fitted in {time.perf_counter() - start:.0f} s: {len(log):,} engagements, "
        f"K = {model.n_interests_}, {model.chunk_items_.shape[0]:,} items in the latest "
        f"chunk, personal weight {model.personal_weight_}, phi_decay {model.phi_decay_}")
    rng = np.random.default_rng(0)
    known = model.user_ids_.ids
    users = rng.choice(known, n_users, replace=False)
    chunk_items = model.item_ids_.ids[model.chunk_items_]
    popular = model.item_ids_.ids[model.chunk_items_[model.popular_order_[:100]]]
    per_user = [rng.choice(chunk_items, 50).tolist() for _ in range(n_users)]
    allowed = rng.choice(chunk_items, chunk_items.shape[0] // 10, replace=False).tolist()
    allowed_each = [rng.choice(chunk_items, 500).tolist() for _ in range(n_users)]
    history = [rng.choice(chunk_items, 5).tolist() for _ in range(n_users)]
    paper = model.paper_model()
    cases = {
        "plain": {},
        "exclude_seen": {"exclude_seen": True},
        "exclude: 100 items for all": {"exclude": popular.tolist()},
        "exclude: 50 items each": {"exclude": per_user},
        "allow: 10% of the chunk for all": {"allow": allowed},
        "allow: 500 items each": {"allow": allowed_each},
        "history: 5 items each": {"history": history},
        "all of them": {"exclude_seen": True, "exclude": per_user, "allow": allowed,
                        "history": history},
    }
    rows = []
    for label, est in (("defaults", model), ("paper", paper)):
        times = {case: [] for case in cases}
        for kwargs in cases.values():  # compiled and warm
            est.recommend(users[:100], M, **{k: v[:100] if isinstance(v, list) and
                                              isinstance(v[0], list) else v
                                              for k, v in kwargs.items()})
        for _ in range(repeat):
            for case, kwargs in cases.items():
                t = time.perf_counter()
                est.recommend(users, M, **kwargs)
                times[case].append(time.perf_counter() - t)
        plain = np.median(times["plain"])
        for case in cases:
            took = np.median(times[case])
            rows.append([label, case, f"{took * 1000:.0f}", f"{took / plain:.2f}"])
    _table(["model", "recommend(10,000 users, m=100)", "ms", "ratio to plain"], rows)


def _table(header, rows):
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(str(v) for v in row) + " |")
    print(flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quality", action="store_true", help="history against none")
    parser.add_argument("--log", action="append", choices=sorted(LOGS),
                        help="logs of --quality (default: all)")
    parser.add_argument("--cost", action="store_true", help="time of the filters and history")
    parser.add_argument("--users", type=int, default=10_000, help="users of --cost")
    parser.add_argument("--repeat", type=int, default=5, help="calls per figure of --cost")
    args = parser.parse_args(argv)
    if not (args.quality or args.cost):
        parser.error("give --quality, --cost or both")

    def say(text):
        print(text, file=sys.stderr, flush=True)

    if args.cost:
        cost(args.users, args.repeat, say)
    if args.quality:
        quality(args.log or list(LOGS), say)


if __name__ == "__main__":
    main()
