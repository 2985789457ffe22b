"""Speed of MiCRO's Gibbs sampler against tomotopy, and of `recommend` against a dense scan.

Part 1 samples one large chunk drawn from the paper's generative model (planted interests)
with ``MiCRO.partial_fit`` and trains tomotopy's ``LDAModel`` on the same engagements (users
as documents, items as words), with the same number of interests K, the same number of
sweeps and the same number of threads (``--threads``, all cores by default): MiCRO's
sampler with the chunk as one chain, and again in ``n_jobs`` partitions of its users
(``min_partition_work=0``) merged after every sweep (AD-LDA); tomotopy with as many
``workers`` and its default parallel scheme. ``--support 6 12`` draws users of several
interests, as in the paper's logs.

Part 2 times ``MiCRO.recommend`` (exact top-m, numba threads = all cores) on the model of
part 1 with the largest K, against a dense scan on a subset of the users: each user's
``theta_u`` as a dense row times a dense ``phi`` (K x I_t) with numpy BLAS (same number of
threads), top-m with ``argpartition``. Both answers are compared on that subset.

Tables go to stdout as markdown; progress goes to stderr.

Usage::

    python benchmarks/sampler.py                 # 3 to 5 minutes on 2 cores, 7 GB of memory
    python benchmarks/sampler.py --support 6 12  # users of 6 to 12 interests
    python benchmarks/sampler.py --quick         # under a minute, 2 GB
"""

from __future__ import annotations

import argparse
import copy
import os
import time
from contextlib import contextmanager

import numba
import numpy as np
import tomotopy as tp
from _harness import fmt, header, load_average, log, planted_stream, table, warm_up
from threadpoolctl import threadpool_limits

from sklearn_micro import MiCRO
from sklearn_micro import micro as micro_module
from sklearn_micro._kernels import sampler
from sklearn_micro.micro import _gibbs
from sklearn_micro.micro._gibbs import chain_threads

FULL = dict(users=200_000, train=3_000_000, test=1_500_000, items=68_000,
            interests=[1000, 5000], sweeps=10, rec_users=200_000, dense_users=300)
QUICK = dict(users=50_000, train=600_000, test=300_000, items=20_000,
             interests=[1000, 5000], sweeps=5, rec_users=50_000, dense_users=200)
# a min_partition_work no chunk reaches: the chunk is sampled as one chain
ONE_CHAIN = 1 << 62


# ------------------------------------------------------------------------- timing


@contextmanager
def timed_kernels():
    """Time the chain and its log-likelihood evaluations inside the block.

    Also notes when the first chain starts and the last ends: the numpy work of
    ``partial_fit`` before the first is the chunk's layout, after the last the commit.
    """
    spent = {"chain": 0.0, "chunk_log_likelihood": 0.0, "sweeps": 0,
             "first_start": None, "last_end": None}
    original_chain = micro_module.run_chain
    original_ll = sampler.chunk_log_likelihood

    def chain(*args, **kwargs):
        start = time.perf_counter()
        trace = original_chain(*args, **kwargs)
        end = time.perf_counter()
        spent["chain"] += end - start
        spent["sweeps"] += len(trace)
        if spent["first_start"] is None:
            spent["first_start"] = start
        spent["last_end"] = end
        return trace

    def log_likelihood(*args):
        start = time.perf_counter()
        out = original_ll(*args)
        spent["chunk_log_likelihood"] += time.perf_counter() - start
        return out

    micro_module.run_chain = chain
    sampler.chunk_log_likelihood = log_likelihood
    try:
        yield spent
    finally:
        micro_module.run_chain = original_chain
        sampler.chunk_log_likelihood = original_ll


# ------------------------------------------------------------------- part 1: sampler


def run_micro(fitted, test, min_partition_work):
    """``partial_fit`` of a copy of the fitted model on the test chunk, with
    ``min_partition_work`` (None: the default): the model, the sweeps and the profile."""
    model = copy.deepcopy(fitted)
    if min_partition_work is not None:
        model.min_partition_work = min_partition_work
    with timed_kernels() as spent:
        cpu = time.process_time()
        start = time.perf_counter()
        model.partial_fit(test)
        end = time.perf_counter()
        cpu = time.process_time() - cpu
    prepare = spent["first_start"] - start
    commit = end - spent["last_end"]
    profile = {
        "total": end - start,
        "cpu": cpu,
        "prepare": prepare,
        "gibbs_sweep": spent["chain"] - spent["chunk_log_likelihood"],
        "chunk_log_likelihood": spent["chunk_log_likelihood"],
        "between": end - start - prepare - commit - spent["chain"],
        "commit": commit,
    }
    return model, spent["sweeps"], profile


def run_tomotopy(test, n_interests, sweeps, beta, seed, workers):
    start = time.perf_counter()
    model = tp.LDAModel(k=n_interests, alpha=0.1, eta=beta, seed=seed)
    model.optim_interval = 0  # MiCRO does not tune its priors either
    items = np.unique(test[:, 1])
    words = np.array([str(i) for i in items], dtype=object)[np.searchsorted(items, test[:, 1])]
    bounds = np.flatnonzero(np.diff(test[:, 0])) + 1  # test is sorted by user
    for doc in np.split(words, bounds):
        model.add_doc(doc.tolist())
    add_time = time.perf_counter() - start
    start = time.perf_counter()
    scheme = tp.ParallelScheme.NONE if workers == 1 else tp.ParallelScheme.DEFAULT
    model.train(0, workers=workers, parallel=scheme)  # random initial topics
    init_time = time.perf_counter() - start
    cpu = time.process_time()
    start = time.perf_counter()
    model.train(sweeps, workers=workers, parallel=scheme)
    train_time = time.perf_counter() - start
    cpu = time.process_time() - cpu
    n_words = model.num_words
    del model
    return add_time, init_time, train_time, cpu, n_words


def _median(runs: list[dict], key: str) -> dict:
    """The run of median ``key`` (the upper one of an even number)."""
    return sorted(runs, key=lambda run: run[key])[len(runs) // 2]


# ----------------------------------------------------------------- part 2: recommend


def dense_phi(model: MiCRO) -> np.ndarray:
    """``phi[k, t]`` of the latest chunk as a dense (K, I_t) array."""
    K = model.n_interests_
    n_items = model.chunk_items_.shape[0]
    beta = float(model.beta)
    phi = np.full((K, n_items), beta)
    rows = np.repeat(np.arange(K), np.diff(model.phi_indptr_))
    phi[rows, model.phi_item_] += model.phi_count_
    phi /= (n_items * beta + model.interest_count_)[:, None]
    return phi


def dense_scan(model, phi, users, m, batch):
    """Top-m of ``theta_u @ phi`` for each user: (local items, scores), the time of the
    scan, and the score rows of each batch (kept untimed, for the agreement check)."""
    spent = 0.0
    local = np.empty((users.shape[0], m), np.int64)
    scores = np.empty((users.shape[0], m))
    full = []
    for lo in range(0, users.shape[0], batch):
        hi = min(lo + batch, users.shape[0])
        start = time.perf_counter()
        theta = model.user_interests(users[lo:hi]).toarray()
        s = theta @ phi
        top = np.argpartition(-s, m - 1, axis=1)[:, :m]
        top_s = np.take_along_axis(s, top, axis=1)
        order = np.argsort(-top_s, axis=1, kind="stable")
        local[lo:hi] = np.take_along_axis(top, order, axis=1)
        scores[lo:hi] = np.take_along_axis(top_s, order, axis=1)
        spent += time.perf_counter() - start
        full.append(s)
    return local, scores, spent, full


def agreement(model, users, m, dense_local, dense_scores, full, batch):
    """Users whose top-m item sets are identical, and those identical up to ties."""
    items, scores = model.recommend(users, m=m)
    index = model.item_ids_.lookup(items.ravel()).reshape(items.shape)
    micro_local = np.searchsorted(model.chunk_items_, index)
    same_set = np.array([set(a) == set(b) for a, b in zip(micro_local, dense_local, strict=True)])
    up_to_ties = np.empty(users.shape[0], bool)
    for b, s in enumerate(full):
        rows = np.arange(b * batch, b * batch + s.shape[0])
        own = np.take_along_axis(s, micro_local[rows], axis=1)
        up_to_ties[rows] = (np.isclose(own, scores[rows], rtol=1e-9, atol=0).all(axis=1)
                            & np.isclose(scores[rows], dense_scores[rows], rtol=1e-9,
                                         atol=0).all(axis=1))
    return same_set.mean(), up_to_ties.mean()


# ------------------------------------------------------------------------------ main


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smaller stream and fewer sweeps (under a minute)")
    parser.add_argument("--users", type=int, help="users in the stream")
    parser.add_argument("--train", type=int, help="engagements in the training chunk")
    parser.add_argument("--test", type=int, help="engagements in the sampled test chunk")
    parser.add_argument("--items", type=int, help="items drawn per chunk (about I_t)")
    parser.add_argument("--interests", type=int, nargs="+", help="values of K")
    parser.add_argument("--sweeps", type=int, help="Gibbs sweeps, for both samplers")
    parser.add_argument("--support", type=int, nargs=2, default=(1, 10),
                        metavar=("MIN", "MAX"),
                        help="interests per user, drawn from MIN to MAX (default 1 10; the "
                             "paper's regime of users of several interests: 6 12)")
    parser.add_argument("--rec-users", type=int, help="users given to MiCRO.recommend")
    parser.add_argument("--dense-users", type=int, help="users given to the dense scan")
    parser.add_argument("--m", type=int, default=100, help="items per user")
    parser.add_argument("--batch", type=int, default=10_000, help="users per recommend call")
    parser.add_argument("--dense-batch", type=int, default=100,
                        help="users per matrix product of the dense scan")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="numba and BLAS threads of part 2 (default: all cores)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="passes over the users in part 2 (the best one is reported)")
    parser.add_argument("--whole-copy-entries", type=int,
                        default=_gibbs.WHOLE_COPY_ENTRIES,
                        help="partitions on threads keep whole copies of the chunk's (item, "
                             "interest) counts while (partitions - 1) x entries stay below "
                             "this, and gather their own through local maps above (0: always "
                             "local maps; default %(default)s)")
    parser.add_argument("--runs", type=int, default=3,
                        help="times each sampler runs in part 1; the median run is reported "
                             "(default %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    _gibbs.WHOLE_COPY_ENTRIES = args.whole_copy_entries
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    numba.set_num_threads(args.threads)
    beta = MiCRO().beta

    header("MiCRO sampler and retrieval benchmark", "sampler.py", argv, tp)
    print(f"- stream: {args.users:,} users, a training chunk of {args.train:,} engagements "
          f"and a test chunk of {args.test:,}, about {args.items:,} items per chunk (all "
          f"new in the test chunk), {args.support[0]}-{args.support[1]} interests per user, "
          "drawn from the generative model")
    print(f"- part 1: K in {args.interests}, {args.sweeps} sweeps, {args.threads} threads "
          f"each (MiCRO `n_jobs={args.threads}`; tomotopy `workers={args.threads}`, "
          "`ParallelScheme.DEFAULT` (`NONE` for one thread), "
          f"`optim_interval=0`, alpha 0.1, eta {beta}); MiCRO alpha 1.0, beta {beta}, "
          f"`tol=0, max_sweeps={args.sweeps}` (exactly that many sweeps; tomotopy runs the "
          "number of sweeps MiCRO ran); MiCRO's chunk sampled as one chain, in the "
          "partitions of the default `min_partition_work=2**22` and in `n_jobs` partitions "
          "(`min_partition_work=0`), each number of partitions once; each sampler run "
          f"{args.runs} times, the median run reported; partitions keep whole "
          f"copies of the counts below {args.whole_copy_entries:,} (partitions - 1) x "
          "entries")
    print(f"- part 2: K = {max(args.interests)}, m = {args.m}, {args.threads} numba threads "
          f"for `recommend` (all {os.cpu_count()} cores), {args.threads} BLAS threads for "
          "the dense scan\n")

    with threadpool_limits(1, user_api="blas"):
        log("warming up numba kernels")
        warm = warm_up()
        speed_rows, profile_rows, setup_rows = [], [], []
        for K in args.interests:
            log(f"K={K}: drawing the stream")
            train, interests, test, support = planted_stream(
                args.users, K, args.train, args.test, args.items, min_support=args.support[0],
                max_support=args.support[1], seed=args.seed)
            n_e = test.shape[0]
            log(f"K={K}: MiCRO fit and partial_fit")
            start = time.perf_counter()
            fitted = MiCRO(tol=0.0, max_sweeps=args.sweeps, random_state=args.seed,
                           n_jobs=args.threads).fit(train, item_interest=interests)
            fit_time = time.perf_counter() - start
            test_users = fitted.user_ids_.lookup(test[:, 0])
            e_support = np.diff(fitted.support_indptr_)[test_users]
            # one chain, the default's partitions and n_jobs partitions, each count once
            default_parts = chain_threads(fitted.support_indptr_, test_users, args.threads)
            runs = {}
            for work in (ONE_CHAIN, None, 0):
                parts = (default_parts if work is None else
                         chain_threads(fitted.support_indptr_, test_users, args.threads, work))
                if parts not in runs:
                    # the same chain each time (the same seed): one model kept
                    model, run_sweeps, profile = run_micro(fitted, test, work)
                    profiles = [profile] + [run_micro(fitted, test, work)[2]
                                            for _ in range(args.runs - 1)]
                    runs[parts] = (model, run_sweeps, _median(profiles, "total"))
            model, ran, _ = runs[default_parts]
            n_assigned = n_e - model.n_unassigned_[1]
            log(f"K={K}: tomotopy ({ran} sweeps)")
            tomotopy = [dict(zip(("add", "init", "train", "cpu", "words"),
                                 run_tomotopy(test, K, ran, beta, args.seed, args.threads),
                                 strict=True)) for _ in range(args.runs)]
            add_time, init_time, tt_words = (tomotopy[0][key] for key in ("add", "init", "words"))
            tt_time, tt_cpu = (_median(tomotopy, "train")[key] for key in ("train", "cpu"))
            if tt_words != n_e:
                log(f"warning: tomotopy holds {tt_words} words, the chunk {n_e}")
            tt_rate = n_e * ran / tt_time
            rows = []
            for parts, (_, run_sweeps, prof) in runs.items():
                label = (f"MiCRO `partial_fit` (whole call), {parts} partition"
                         + "s" * (parts > 1) + " (the default here)" * (parts == default_parts))
                rows.append((label, prof["total"], prof["cpu"], run_sweeps))
                profile_rows.append([
                    f"{K:,}", f"{parts}", fmt(prof["total"]), fmt(prof["prepare"]),
                    fmt(prof["gibbs_sweep"]), fmt(prof["chunk_log_likelihood"]),
                    fmt(prof["between"]), fmt(prof["commit"]),
                    f"{1e3 * prof['gibbs_sweep'] / run_sweeps:.0f}",
                    f"{1e3 * prof['chunk_log_likelihood'] / run_sweeps:.0f}"])
            prof = runs[default_parts][2]
            rows.insert(1, ("MiCRO Gibbs sweeps only", prof["gibbs_sweep"], None, ran))
            rows.append(("tomotopy `LDAModel.train`", tt_time, tt_cpu, ran))
            tt_cpu_rate = n_e * ran / tt_cpu
            for name, t, cpu, n_sweeps in rows:
                rate = n_e * n_sweeps / t
                speed_rows.append([
                    f"{K:,}", name, f"{n_e:,}", n_sweeps, fmt(t), fmt(n_sweeps / t),
                    f"{rate:,.0f}", f"{rate / tt_rate:.1f}x",
                    "" if cpu is None else fmt(cpu),
                    "" if cpu is None else f"{n_e * n_sweeps / cpu / tt_cpu_rate:.1f}x"])
            setup_rows.append([
                f"{K:,}", f"{np.mean(support):.2f}", f"{np.mean(e_support):.2f}",
                f"{100 * np.mean(e_support == 1):.0f}%",
                f"{model.chunk_items_.shape[0]:,}", f"{n_assigned:,}", fmt(fit_time),
                fmt(add_time), fmt(init_time)])
            if K == max(args.interests):
                rec_model = model
            del model, fitted, runs, train, interests, test

    print(f"## 1. Gibbs sampling speed, {args.threads} threads each\n")
    print("Engagements/s = engagements x sweeps / time. The ratios are to tomotopy at the "
          "same K, in wall seconds and in cpu seconds (the process's, all threads: on "
          "shared cores the cpu ratio moves less with the other jobs than the wall one).\n")
    print(table(["K", "sampler", "engagements", "sweeps", "time (s)", "sweeps/s",
                 "engagements/s", "vs tomotopy", "cpu (s)", "vs tomotopy, cpu"],
                speed_rows))
    print("\nWhere `partial_fit`'s time goes (seconds): the chain's sweeps (with the "
          "partitions' copies and merges) and log-likelihoods, and the work before the "
          "first sweep (laying the chunk out), between kernel calls and after the last "
          "(committing).\n")
    print(table(["K", "partitions", "partial_fit", "prepare chunk", "Gibbs sweeps",
                 "log-likelihood",
                 "between kernels", "commit", "ms per sweep", "ms per log-likelihood"],
                profile_rows))
    print(f"\nNot timed above (seconds): numba warm-up (compile or cache load) {fmt(warm)}; "
          "per K:\n")
    print(table(["K", "planted interests per user", "MiCRO support per engagement",
                 "engagements with one interest", "I_t",
                 "engagements MiCRO assigns", "MiCRO fit", "tomotopy add_doc",
                 "tomotopy init"], setup_rows))
    print("\nMiCRO's support is the set of interests of a user's training items; a sweep "
          "passes over an engagement whose user has a single interest without sampling.")

    log("part 2: recommend")
    model = rec_model
    rng = np.random.default_rng(args.seed)
    users = model.user_ids_.ids[rng.permutation(len(model.user_ids_))[:args.rec_users]]
    model.recommend(users[:100], m=args.m)
    rec_times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        for lo in range(0, users.shape[0], args.batch):
            model.recommend(users[lo:lo + args.batch], m=args.m)
        rec_times.append(time.perf_counter() - start)

    log("part 2: dense scan")
    start = time.perf_counter()
    phi = dense_phi(model)
    phi_time = time.perf_counter() - start
    sub = users[:args.dense_users]
    with threadpool_limits(args.threads, user_api="blas"):
        dense_scan(model, phi, sub[:args.dense_batch], args.m, args.dense_batch)
        dense_times = []
        for _ in range(args.repeat):
            full = None
            dense_local, dense_scores, spent, full = dense_scan(
                model, phi, sub, args.m, args.dense_batch)
            dense_times.append(spent)
    same_set, up_to_ties = agreement(model, sub, args.m, dense_local, dense_scores, full,
                                     args.dense_batch)
    del full, phi
    rec_rate = users.shape[0] / min(rec_times)
    dense_rate = sub.shape[0] / min(dense_times)
    K = max(args.interests)
    print(f"\n## 2. `recommend` speed, K = {K:,}, m = {args.m}, exact\n")
    print(f"I_t = {model.chunk_items_.shape[0]:,} items in the latest chunk. "
          f"{args.threads} threads each. Each method passes over its users {args.repeat} "
          "times: the best pass gives users/s, the median pass is beside it.\n")
    print(table(["method", "users", "batch", "best pass (s)", "users/s",
                 "users/s, median pass", "vs dense scan"], [
        ["MiCRO `recommend`", f"{users.shape[0]:,}", f"{args.batch:,}",
         fmt(min(rec_times)), f"{rec_rate:,.0f}",
         f"{users.shape[0] / np.median(rec_times):,.0f}", f"{rec_rate / dense_rate:.0f}x"],
        ["dense scan (theta @ phi, argpartition)", f"{sub.shape[0]:,}",
         f"{args.dense_batch:,}", fmt(min(dense_times)), f"{dense_rate:,.0f}",
         f"{sub.shape[0] / np.median(dense_times):,.0f}", "1x"],
    ]))
    print(f"\nAgreement on the {sub.shape[0]:,} users of the dense scan: identical top-"
          f"{args.m} item sets for {100 * same_set:.1f}%, identical up to ties (MiCRO's "
          f"scores equal the dense scores of its items, and the sorted top-{args.m} scores "
          f"are equal, to 1e-9) for {100 * up_to_ties:.1f}%. Building the dense phi "
          f"({K:,} x {model.chunk_items_.shape[0]:,}) took {fmt(phi_time)} s, not counted.")
    print(f"\nLoad average at the end (1, 5, 15 min): {load_average()}.")


if __name__ == "__main__":
    main()
