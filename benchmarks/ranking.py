"""How fast MiCRO ranks a test chunk's users at a run's scale, threshold against scatter.

Each interest's list read from the highest count down (`threshold_topm`, what `recommend`
runs) against a scatter of every entry of the users' interests (`personal_topm` and
`mixture_topm`).

Loads MiCRO's fitted state and the log of a ``sklearn-micro reproduce --out DIR`` run
(``DIR/checkpoints``), takes the first test chunk into the model as the rolling evaluation
does, and ranks ``--users`` users of the next test chunk for both of the evaluation's rows
(`MiCRO.recommend_with_paper`'s two lists, m = 100) with each method, on the arrays
`recommend_with_paper` hands the ranking; then the paper's ranking alone (what the
paper's model, ``MiCRO(personal=0, popularity=0)``, runs), `threshold_topm` without its
blended list against `mixture_topm`; and the threshold with the users in the call's order
instead of by their main interest (`rows_by_main_interest`). Prints the least cpu and wall
seconds of ``--repeat`` calls of each (interleaved), microseconds of cpu per user, the
ratios, and checks that the lists and scores agree to the last bit. A model that carries
``phi`` across chunks ranks the paper's row in a second call, over its paper model's own
chunk; both rows are then ranked here over the model's chunk (the output says so).

    sklearn-micro reproduce --preset follow --scale 0.05 --dim 128 --out follow-0.05
    python benchmarks/ranking.py follow-0.05 --users 50000
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from _harness import header  # noqa: E402

import sklearn_micro.micro as micro_module  # noqa: E402
from sklearn_micro._kernels.threshold import ROW_RUN, _threshold_rows  # noqa: E402
from sklearn_micro._kernels.topm import mixture_topm, personal_topm  # noqa: E402
from sklearn_micro._log import iter_chunks  # noqa: E402
from sklearn_micro.experiment import load_checkpoint, split_chunks  # noqa: E402

M = 100


def captured_arguments(out: Path, n_users: int, seed: int):
    """The model after the first test chunk, and the arguments `threshold_topm` gets for
    ``n_users`` users of the next test chunk (one `recommend_with_paper` call)."""
    checkpoints = out / "checkpoints"
    log = load_checkpoint(checkpoints / "load.pkl")[0]
    train_chunks = json.loads((checkpoints / "config.json").read_text())["train_chunks"]
    _, test = split_chunks(log, int(train_chunks))
    model = load_checkpoint(checkpoints / "MiCRO fit.pkl")
    chunks = [rows for _, rows in iter_chunks(test.chunk)]
    model.partial_fit(test.take(chunks[0]))
    users = np.unique(test.take(chunks[1]).user)
    users = np.random.default_rng(seed).choice(users, min(n_users, users.size), replace=False)
    seen = {}
    original = micro_module.threshold_topm

    def spy(*args, **kwargs):
        # the first call, the model's own (a model that carries phi across chunks ranks
        # the paper's row in a second call, over its paper model's chunk)
        seen.setdefault("args", args)
        seen.setdefault("kwargs", kwargs)
        seen["calls"] = seen.get("calls", 0) + 1
        return original(*args, **kwargs)

    micro_module.threshold_topm = spy
    try:
        model.recommend_with_paper(users, M)
    finally:
        micro_module.threshold_topm = original
    return model, seen["args"], seen["kwargs"], seen["calls"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="a reproduce run's --out directory")
    parser.add_argument("--users", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    header("MiCRO's ranking: threshold against scatter", "ranking.py", argv)
    model, call, kwargs, n_calls = captured_arguments(args.out, args.users, args.seed)
    chunk = model._grouped_chunk()
    queries, recent, kernel_chunk, lists, seen, m, threads = call
    if chunk["ranked"].desc_item is not lists.desc_item:
        raise SystemExit("the first ranking call was not over the model's own chunk: the "
                         "scatters would read another chunk's entries")
    q_ptr, q_k = queries.indptr, queries.interest
    phi_ptr, phi_item, items = kernel_chunk.phi_indptr, kernel_chunk.phi_item, kernel_chunk.items
    entries = np.diff(phi_ptr)[q_k]
    print(f"{q_ptr.size - 1:,} users, {np.diff(q_ptr).mean():.1f} interests and "
          f"{entries.sum() / (q_ptr.size - 1):,.0f} entries of them a user; chunk of "
          f"{items.size:,} items, {phi_item.size:,} entries, K = {phi_ptr.size - 1:,}; "
          f"{threads} threads")

    def threshold():
        return micro_module.threshold_topm(*call, paper=True)

    def threshold_as_given():
        # the users in the call's order instead of by their main interest
        order = np.arange(q_ptr.size - 1)
        return _threshold_rows(order, *call, True, True, ROW_RUN)[:5]

    def paper_scatter():
        return mixture_topm(queries, kernel_chunk, seen, m, threads)

    def scatter():
        blended = personal_topm(queries, recent, kernel_chunk, seen, m, threads)
        return (*blended, *paper_scatter())

    def paper_threshold():
        return micro_module.threshold_topm(*call, paper=True, blended=False)[2:]

    nbytes = sum(array.nbytes for array in lists)
    print(f"the lists: {nbytes / 2**20:.0f} MiB, {nbytes / phi_item.size:.0f} bytes an entry "
          f"(made once a chunk, on its first ranking)")
    runs = {"threshold": threshold, "threshold, users in the call's order": threshold_as_given,
            "scatter": scatter,
            "paper's alone: threshold": paper_threshold, "paper's alone: scatter": paper_scatter}
    got = {name: run() for name, run in runs.items()}  # compiled, and checked
    for first, second in (("threshold", "scatter"),
                          ("threshold", "threshold, users in the call's order"),
                          ("paper's alone: threshold", "paper's alone: scatter")):
        for a, b in zip(got[first], got[second], strict=True):
            np.testing.assert_array_equal(a, b)
    best = {name: (np.inf, np.inf) for name in got}
    for _ in range(args.repeat):
        for name, run in runs.items():
            cpu, wall = time.process_time(), time.perf_counter()
            run()
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            best[name] = (min(best[name][0], cpu), min(best[name][1], wall))
    n = q_ptr.size - 1
    if n_calls > 1:
        print("\nthis model carries phi across chunks: its evaluation ranks the paper's row "
              "in a second call, over its paper model's own chunk; both rows are ranked "
              "here over the model's chunk")
    if not kwargs.get("blended", True):
        print("\nthis model's blend weights are 0 (MiCRO is its paper's model here): its "
              "evaluation ranks the paper's list alone, the last two rows; the first two "
              "rank the blended list on the same arrays as well")
    print("\n| method | cpu s | wall s | cpu us a user |\n|---|---:|---:|---:|")
    for name, (cpu, wall) in best.items():
        print(f"| {name} | {cpu:.2f} | {wall:.2f} | {cpu / n * 1e6:.0f} |")
    alone = best["paper's alone: scatter"][0] / best["paper's alone: threshold"][0]
    given = best["threshold, users in the call's order"][0] / best["threshold"][0]
    print(f"\nthe scatter takes {best['scatter'][0] / best['threshold'][0]:.2f}x the "
          f"threshold's cpu time for both rows, {alone:.2f}x for the paper's alone; the "
          f"users in the call's order take {given:.2f}x the threshold's by main interest; "
          "the lists and scores are the same to the last bit")


if __name__ == "__main__":
    main()
