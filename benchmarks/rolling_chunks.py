"""A run's fitted method carried over its first test chunks: scoring and learning per chunk.

Loads ``DIR/checkpoints/<method> fit.pkl`` (any of the run's methods; MiCRO (paper) by
default) and the log of a ``reproduce --out DIR`` and takes the run's rolling protocol
over the first ``--chunks`` test chunks: each chunk is
scored for its active users (`RollingEvaluation.step` without learning: ``recommend``,
the metrics at 50 and 100 and the chunk's lookups), then learnt (``partial_fit``). Prints
wall and cpu seconds of each, per chunk, so that the evaluation's cost at a scale can be
read without running all of it. docs/scale.md quotes it ("A test chunk at full scale").

    python benchmarks/rolling_chunks.py OUT_FULL --chunks 3 --method MiCRO
    python benchmarks/rolling_chunks.py OUT_FULL --chunks 3 --method ANN
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from sklearn_micro._log import iter_chunks  # noqa: E402
from sklearn_micro.experiment import split_chunks  # noqa: E402
from sklearn_micro.model_selection import RollingEvaluation  # noqa: E402


def run_arguments(description: str, chunks: int, argv=None) -> argparse.Namespace:
    """The arguments of this script and of partial_fit_parts.py."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("out", type=Path, help="a reproduce --out folder")
    parser.add_argument("--method", default="MiCRO (paper)")
    parser.add_argument("--chunks", type=int, default=chunks)
    parser.add_argument("--train-chunks", type=int, default=169)
    return parser.parse_args(argv)


def fitted_and_test(out: Path, method: str, train_chunks: int):
    """The run's fitted ``method`` and its log's test chunks."""
    checkpoints = out / "checkpoints"
    with open(checkpoints / "load.pkl", "rb") as f:
        log = pickle.load(f)[0]
    _, test = split_chunks(log, train_chunks)
    del log
    with open(checkpoints / f"{method} fit.pkl", "rb") as f:
        return pickle.load(f), test


def main(argv=None) -> int:
    args = run_arguments(__doc__.splitlines()[0], 3, argv)
    model, test = fitted_and_test(args.out, args.method, args.train_chunks)
    evaluation = RollingEvaluation(model, m_values=(50, 100))
    print(f"{args.out}, {args.method}\n")
    print("| chunk | engagements | users scored | scoring s | cpu s | partial_fit s | cpu s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for pos, (chunk, rows) in enumerate(iter_chunks(test.chunk)):
        if pos == args.chunks:
            break
        part = test.take(rows)
        c0, w0 = time.process_time(), time.perf_counter()
        n_users = evaluation.step(part, learn=False)
        c1, w1 = time.process_time(), time.perf_counter()
        model.partial_fit(part)
        c2, w2 = time.process_time(), time.perf_counter()
        print(f"| {chunk} | {len(rows):,} | {n_users:,} | {w1 - w0:.1f} | {c1 - c0:.1f} "
              f"| {w2 - w1:.1f} | {c2 - c1:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
