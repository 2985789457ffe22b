"""MiCRO's retrieval with ``phi`` pruned (``phi_min_count``): the ranking's cost and the
rolling recall, from a run's checkpoints.

For each ``reproduce --out DIR`` given, loads the fitted model of ``--method`` (``MiCRO
(paper) fit.pkl`` by default) and the log, then carries the model over the first
``--chunks`` test chunks: every chunk is scored for every active user once per
``phi_min_count`` of ``--counts`` (the rolling protocol's `RollingEvaluation.step` without
learning), then sampled once with ``partial_fit``. The state is the same for every count:
the sampler does not read the setting and ranking draws nothing from the random stream, so
the counts are compared on the same points, paired by user. For the defaults' row the
personal weight is the one ``fit`` chose with every count.

Prints, per count: the ``phi`` entries retrieval reads (share of all, summed over the
chunks), cpu microseconds per scored user of `step` (ranking and metrics; one process, the
counts in turn on each chunk), recall@100 and MRR@100 over all points with the half width of
a 95% interval, and the relative difference from count 0 with its paired interval
(`RollingReport.compare`). docs/scale_history.md quotes it ("Pruning phi for retrieval"). A line
on stderr after each chunk tells how far a long run got.

    python benchmarks/phi_pruning.py OUT_1_20 OUT_1_4 --chunks 8
    python benchmarks/phi_pruning.py OUT_FULL --chunks 2 --method MiCRO
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).parent)]

from rolling_chunks import fitted_and_test  # noqa: E402

from sklearn_micro._kernels.topm import retrieval_phi  # noqa: E402
from sklearn_micro._log import iter_chunks  # noqa: E402
from sklearn_micro.model_selection import RollingEvaluation  # noqa: E402


def measure(out: Path, method: str, counts, n_chunks: int, train_chunks: int) -> list[str]:
    model, test = fitted_and_test(out, method, train_chunks)
    evaluations = {c: RollingEvaluation(model, m_values=(100,))
                   for c in counts}
    seconds = dict.fromkeys(counts, 0.0)
    kept = dict.fromkeys(counts, 0)
    total = 0
    n_users = 0
    for pos, (_, rows) in enumerate(iter_chunks(test.chunk)):
        if pos == n_chunks:
            break
        chunk = test.take(rows)
        for c in counts:
            model.set_params(phi_min_count=c)
            start = time.process_time()
            n = evaluations[c].step(chunk, learn=False)
            seconds[c] += time.process_time() - start
            kept[c] += retrieval_phi(model.phi_indptr_, model.phi_item_, model.phi_count_,
                                     float(c))[1].shape[0]
        total += model.phi_item_.shape[0]
        n_users += n
        model.partial_fit(chunk)
        print(f"{out.name}: test chunk {pos + 1} done (--chunks {n_chunks}), cpu s so far "
              + ", ".join(f"{c:g}: {seconds[c]:.1f}" for c in counts), file=sys.stderr,
              flush=True)
    reports = {c: evaluations[c].report() for c in counts}
    base = reports[counts[0]]
    lines = []
    for c in counts:
        means = reports[c].intervals()
        row = [f"{c:g}", f"{kept[c] / total:.3f}", f"{seconds[c] / n_users * 1e6:.1f}",
               f"{seconds[counts[0]] / seconds[c]:.2f}"]
        for metric in ("recall@100", "mrr@100"):
            mean = means.loc[metric, "mean"]
            half = (means.loc[metric, "high"] - means.loc[metric, "low"]) / 2
            row.append(f"{mean:.4f} ± {half:.4f}")
        for metric in ("recall@100", "mrr@100"):
            if c == counts[0]:
                row.append("")
                continue
            d = reports[c].compare(base).loc[metric]
            row.append(f"{100 * d['relative']:+.2f}% [{100 * d['relative_low']:+.2f}, "
                       f"{100 * d['relative_high']:+.2f}]")
        lines.append("| " + " | ".join(row) + " |")
    title = (f"{out.name}: {method}, K = {model.n_interests_:,}, {min(n_chunks, pos + 1)} "
             f"test chunks, {n_users:,} points")
    return [title, "", "| phi_min_count | entries read | cpu us per user | speed-up | "
            "recall@100 | MRR@100 | recall vs 0 | MRR vs 0 |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|", *lines, ""]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="reproduce --out folders")
    parser.add_argument("--method", default="MiCRO (paper)", choices=["MiCRO (paper)", "MiCRO"])
    parser.add_argument("--counts", type=float, nargs="+", default=[0, 2, 3])
    parser.add_argument("--chunks", type=int, default=8, help="test chunks (default: 8)")
    parser.add_argument("--train-chunks", type=int, default=169)
    args = parser.parse_args(argv)
    if args.counts[0] != 0:
        parser.error("--counts must start with 0, the exact top m the others are paired with")
    for out in args.runs:
        print("\n".join(measure(out, args.method, args.counts, args.chunks, args.train_chunks)),
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
