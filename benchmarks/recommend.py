"""Speed of MiCRO's `recommend`: the personal component's ranking against the paper's.

Fits MiCRO on the training chunks of a fave-shaped log (interests from `GraphEmbedder` and
`SphericalKMeans`, cached with ``--interests``), samples the first test chunk, then times
`recommend` for ``--users`` users (those of the next test chunks, as the rolling protocol
ranks them), in the same run:

- "paper": the paper's ranking (``personal_weight_ = 0``, `mixture_topm` and the fill by
  popularity);
- "personal, before": the personal component's ranking with the kernel it had before
  (`personal_topm_before`, kept below as it was);
- "personal": with the kernel of `sklearn_micro._kernels.topm`.

Both personal rows must return the same items and scores; the script checks it. Each
figure is the best of ``--repeat`` calls, the calls interleaved.

    python benchmarks/recommend.py                      # 1/20 of fave's scale, K = 1,000
    python benchmarks/recommend.py --data /work/data-scale/fave-plain-1-100.parquet
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit, prange

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from sklearn_micro import GraphEmbedder, MiCRO, SphericalKMeans  # noqa: E402
from sklearn_micro import micro as micro_module  # noqa: E402
from sklearn_micro._kernels.topm import (  # noqa: E402
    _is_seen,
    _offer,
    _sift_down,
    lower_bound,
)
from sklearn_micro.datasets import read_twitter_fave  # noqa: E402
from sklearn_micro.experiment import split_chunks  # noqa: E402


@njit(cache=True, parallel=True)
def personal_topm_before(q_ptr, q_k, q_w, q_base, q_share, lam, r_ptr, r_item, r_w,
                  phi_ptr, phi_item, phi_cnt, item_pop, item_share, chunk_items, pop_order,
                  seen_indptr, seen_items, m, n_threads):
    """Exact top-m of ``s(i) = (1 - lam[r]) * p(i) + lam[r] * r_w(i)`` for each query row r.

    ``p(i) = q_base[r] + q_share[r] * item_share[li] + sum_k q_w[k] * phi_cnt[k, li]`` for
    an item of the latest chunk (local index ``li``, global ``chunk_items[li]``, sorted) and
    0 for any other item; ``q_*`` is a CSR of each query's interests and weights, ``phi_*``
    a CSR from interest to (local item, count). ``r_*`` is a CSR of each query's recent
    items (global indices, distinct) with their weights ``r_w``. Every item of the latest
    chunk and every recent item of the row is ranked: the candidates of the row's
    interests and its recent items are scored one by one, the other items of the chunk,
    which differ only by ``item_share``, are taken in ``pop_order`` (positions from the most
    to the least popular, ties to the lower index) as long as they can enter the top m.
    Seen items (``seen_items[seen_indptr[r]:seen_indptr[r+1]]``, sorted global indices) are
    left out. Ties go to the more popular item (``item_pop``; 0 outside the chunk), then the
    lower index. Returns global item indices and scores, padded with -1 and -inf.
    """
    n = q_ptr.shape[0] - 1
    n_local = chunk_items.shape[0]
    items = np.full((n, m), -1, np.int64)
    scores = np.full((n, m), -np.inf)
    n_blocks = max(1, min(n, n_threads))
    for b in prange(n_blocks):
        acc = np.zeros(n_local)
        rec = np.zeros(n_local)
        mark = np.zeros(n_local, np.bool_)
        touched = np.empty(n_local, np.int64)
        hs = np.empty(m)
        hp = np.empty(m)
        hi = np.empty(m, np.int64)
        for r in range(b * n // n_blocks, (b + 1) * n // n_blocks):
            lo = seen_indptr[r]
            hi_seen = seen_indptr[r + 1]
            keep = 1.0 - lam[r]
            size = 0
            nt = 0
            for q in range(q_ptr[r], q_ptr[r + 1]):
                k = q_k[q]
                w = q_w[q]
                for p in range(phi_ptr[k], phi_ptr[k + 1]):
                    li = phi_item[p]
                    if not mark[li]:
                        mark[li] = True
                        touched[nt] = li
                        nt += 1
                    acc[li] += w * phi_cnt[p]
            for p in range(r_ptr[r], r_ptr[r + 1]):
                item = r_item[p]
                li = lower_bound(chunk_items, 0, n_local, item)
                if li < n_local and chunk_items[li] == item:
                    if not mark[li]:
                        mark[li] = True
                        touched[nt] = li
                        nt += 1
                    rec[li] = r_w[p]
                elif not (hi_seen > lo and _is_seen(seen_items, lo, hi_seen, item)):
                    size, _ = _offer(hs, hp, hi, size, m, lam[r] * r_w[p], 0.0, item)
            for t in range(nt):
                li = touched[t]
                item = chunk_items[li]
                if hi_seen > lo and _is_seen(seen_items, lo, hi_seen, item):
                    continue
                s = keep * (q_base[r] + q_share[r] * item_share[li] + acc[li]) \
                    + lam[r] * rec[li]
                size, _ = _offer(hs, hp, hi, size, m, s, item_pop[li], item)
            for j in range(pop_order.shape[0]):
                li = pop_order[j]
                item = chunk_items[li]
                if mark[li] or (hi_seen > lo and _is_seen(seen_items, lo, hi_seen, item)):
                    continue
                s = keep * (q_base[r] + q_share[r] * item_share[li])
                size, kept = _offer(hs, hp, hi, size, m, s, item_pop[li], item)
                if not kept:
                    break
            for t in range(nt):
                li = touched[t]
                acc[li] = 0.0
                rec[li] = 0.0
                mark[li] = False
            for j in range(size - 1, -1, -1):
                items[r, j] = hi[0]
                scores[r, j] = hs[0]
                last = j
                hs[0] = hs[last]
                hp[0] = hp[last]
                hi[0] = hi[last]
                _sift_down(hs, hp, hi, 0, last)
    return items, scores


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


def timed(call, repeat):
    best, out = np.inf, None
    for _ in range(repeat):
        start = time.perf_counter()
        out = call()
        best = min(best, time.perf_counter() - start)
    return best, out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="/work/data-scale/fave-plain-1-20.parquet")
    parser.add_argument("--train-chunks", type=int, default=169)
    parser.add_argument("--k", type=int, default=1000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--interests", default=None,
                        help="an .npz file caching the training items' interests")
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("-m", type=int, default=100)
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
        start = time.perf_counter()
        model = MiCRO(personal=args.personal, phi_decay=phi_decay, random_state=0, n_jobs=-1)
        model.fit(train, item_interest=(ids, labels)).partial_fit(first_test)
        fit_seconds = time.perf_counter() - start
        paper = copy.copy(model)
        paper.personal_weight_ = 0.0
        users = active_users(test, args.users)
        index = model.user_ids_.lookup(users)
        with_recent = float((np.diff(model.recent_indptr_)[index] > 0).mean())

        def before(model=model, users=users):
            kernel = micro_module.personal_topm
            micro_module.personal_topm = personal_topm_before
            try:
                return model.recommend(users, args.m)
            finally:
                micro_module.personal_topm = kernel

        calls = {"paper": lambda paper=paper, users=users: paper.recommend(users, args.m),
                 "personal, before": before,
                 "personal": lambda model=model, users=users: model.recommend(users, args.m)}
        for call in calls.values():
            call()  # compiled and warm
        best = {name: np.inf for name in calls}
        out = {}
        for _ in range(args.repeat):
            for name, call in calls.items():
                seconds, out[name] = timed(call, 1)
                best[name] = min(best[name], seconds)
        for a, b in zip(out["personal, before"], out["personal"], strict=True):
            np.testing.assert_array_equal(a, b)
        rows.append((phi_decay, model.phi_decay_, len(model.chunk_items_), with_recent,
                     fit_seconds, best))
    say(f"\n{len(users):,} users of the test chunks of {Path(args.data).name}, m = {args.m}, "
        f"K = {args.k}, "
        f"personal weight {args.personal:g}, best of {args.repeat}; the personal rows return "
        "the same items and scores\n")
    say("| phi_decay | items ranked | users with recent items | paper (s) | personal, before "
        "(s) | personal (s) | before / paper | personal / paper |")
    say("|---|---:|---:|---:|---:|---:|---:|---:|")
    for phi_decay, used, n_items, with_recent, _, best in rows:
        label = f"{used:g}" + (" (auto)" if phi_decay == "auto" else "")
        say(f"| {label} | {n_items:,} | {with_recent:.0%} | {best['paper']:.2f} | "
            f"{best['personal, before']:.2f} | {best['personal']:.2f} | "
            f"{best['personal, before'] / best['paper']:.2f} | "
            f"{best['personal'] / best['paper']:.2f} |")


if __name__ == "__main__":
    main()
