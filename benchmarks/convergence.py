"""The chain's convergence tolerance: sweeps, time and recall for each ``tol``.

Loads a ``reproduce --out DIR`` run's fitted MiCRO (``DIR/checkpoints/MiCRO fit.pkl``) and
its log, and carries a copy of the model over every test chunk once per ``--tols`` value,
as ``reproduce`` evaluates its two MiCRO rows (one sampler, each chunk scored by the
model's `MiCRO.paper_model` and by the model, then sampled). Prints, for each ``tol``, the
sweeps a chunk, the evaluation's wall and cpu seconds, and recall@100 and MRR@100 of both
rows with their 95% intervals; then each ``tol`` against the first, paired by user
(`RollingReport.compare`). With ``--sampler``, it then times ``partial_fit`` alone over
the same chunks for each ``tol`` (two rounds, the order reversed in the second).
docs/model.md ("Convergence") quotes it.

    python benchmarks/convergence.py OUT_1_20 --tols 1e-3 3e-3 1e-2 3e-2 --sampler
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from sklearn_micro import experiment  # noqa: E402
from sklearn_micro._log import iter_chunks  # noqa: E402

ROWS = ("MiCRO", "MiCRO (paper)")


def _test_chunks(out: Path, train_chunks: int):
    checkpoints = out / "checkpoints"
    log = experiment.load_checkpoint(checkpoints / "load.pkl")[0]
    _, test = experiment.split_chunks(log, train_chunks)
    fitted = experiment.load_checkpoint(checkpoints / "MiCRO fit.pkl")
    return fitted, [(chunk, test.take(rows)) for chunk, rows in iter_chunks(test.chunk)]


def _with_tol(fitted, tol: float):
    model = copy.deepcopy(fitted)
    model.set_params(tol=tol)
    return model


def evaluate(fitted, chunks, tols) -> None:
    print("| tol | sweeps a chunk (min, max) | evaluation s (cpu) | "
          + " | ".join(f"{row} recall@100 | {row} MRR@100" for row in ROWS) + " |")
    print("|---|---:|---:|" + "---:|---:|" * len(ROWS))
    reports = {}
    for tol in tols:
        model = _with_tol(fitted, tol)
        evaluation = experiment._SharedSampler(model, m_values=(100,))
        wall, cpu = time.perf_counter(), time.process_time()
        for pos, (_, part) in enumerate(chunks):  # the last chunk is scored, not sampled
            evaluation.step(part, learn=pos < len(chunks) - 1)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        sweeps = list(model.n_sweeps_.values())
        reports[tol] = evaluation.reports()
        cells = []
        for row in ROWS:
            intervals = reports[tol][row].intervals()
            for metric in ("recall@100", "mrr@100"):
                mean, low, high = (intervals.loc[metric, c] for c in ("mean", "low", "high"))
                cells.append(f"{mean:.4f} [{low:.4f}, {high:.4f}]")
        print(f"| {tol:g} | {np.mean(sweeps):.1f} ({min(sweeps)}, {max(sweeps)}) | "
              f"{wall:.1f} ({cpu:.1f}) | " + " | ".join(cells) + " |", flush=True)
    print()
    print(f"Against tol {tols[0]:g}, relative difference of the mean over all points "
          "[95% interval, paired by user]:")
    print()
    print("| tol | " + " | ".join(f"{row} recall@100 | {row} MRR@100" for row in ROWS) + " |")
    print("|---|" + "---:|---:|" * len(ROWS))
    for tol in tols[1:]:
        cells = []
        for row in ROWS:
            compared = reports[tol][row].compare(reports[tols[0]][row])
            for metric in ("recall@100", "mrr@100"):
                rel, low, high = (100 * compared.loc[metric, c]
                                  for c in ("relative", "relative_low", "relative_high"))
                cells.append(f"{rel:+.2f}% [{low:+.2f}%, {high:+.2f}%]")
        print(f"| {tol:g} | " + " | ".join(cells) + " |", flush=True)


def sampler_time(fitted, chunks, tols) -> None:
    print()
    print("`partial_fit` alone over the test chunks (wall s, cpu s), two rounds:")
    print()
    print("| round | tol | sweeps | wall s | cpu s |")
    print("|---:|---|---:|---:|---:|")
    for round_ in (1, 2):
        for tol in (tols if round_ == 1 else tols[::-1]):
            model = _with_tol(fitted, tol)
            wall, cpu = time.perf_counter(), time.process_time()
            for _, part in chunks:
                model.partial_fit(part)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            print(f"| {round_} | {tol:g} | {sum(model.n_sweeps_.values())} | {wall:.1f} | "
                  f"{cpu:.1f} |", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="a reproduce --out folder")
    parser.add_argument("--train-chunks", type=int, default=169)
    parser.add_argument("--tols", type=float, nargs="+", default=[1e-3, 3e-3, 1e-2, 3e-2])
    parser.add_argument("--sampler", action="store_true",
                        help="also time partial_fit alone for each tol")
    args = parser.parse_args(argv)
    fitted, chunks = _test_chunks(args.out, args.train_chunks)
    evaluate(fitted, chunks, args.tols)
    if args.sampler:
        sampler_time(fitted, chunks, args.tols)
    return 0


if __name__ == "__main__":
    sys.exit(main())
