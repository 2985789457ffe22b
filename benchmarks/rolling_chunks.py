"""A run's fitted method carried over its first test chunks: scoring and learning per chunk.

Loads ``DIR/checkpoints/<method> fit.pkl`` (any of the run's methods; MiCRO (paper) by
default) and the log of a ``reproduce --out DIR`` and takes the run's rolling protocol
over the first ``--chunks`` test chunks: each chunk is
scored for its active users (`RollingEvaluation.step` without learning: ``recommend``,
the metrics at 50 and 100 and the chunk's lookups), then learnt (``partial_fit``). Prints
wall and cpu seconds of each, per chunk, so that the evaluation's cost at a scale can be
read without running all of it. docs/scale.md quotes it ("A test chunk at full scale").

With ``--shared`` (``--method MiCRO``), each chunk is taken as ``reproduce`` takes its two
MiCRO rows: scored by the model's `MiCRO.paper_model` and by the model, then learnt by
the model alone. The paper's model is then also sampled on the chunk by itself (what
evaluating the two rows apart costs more), and its counts are compared with the model's:
the same chain, or the script fails.

    python benchmarks/rolling_chunks.py OUT_FULL --chunks 3 --method MiCRO
    python benchmarks/rolling_chunks.py OUT_FULL --chunks 3 --method ANN
    python benchmarks/rolling_chunks.py OUT_FULL --chunks 3 --method MiCRO --shared
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from sklearn_micro._log import iter_chunks  # noqa: E402
from sklearn_micro.experiment import split_chunks  # noqa: E402
from sklearn_micro.model_selection import RollingEvaluation  # noqa: E402


def run_arguments(description: str, chunks: int, argv=None, *,
                  shared: bool = False) -> argparse.Namespace:
    """The arguments of this script (``shared``) and of partial_fit_parts.py."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("out", type=Path, help="a reproduce --out folder")
    parser.add_argument("--method", default="MiCRO (paper)")
    parser.add_argument("--chunks", type=int, default=chunks)
    parser.add_argument("--train-chunks", type=int, default=169)
    if shared:
        parser.add_argument("--shared", action="store_true",
                            help="score with the model and its paper_model, sample once, "
                                 "and time the paper's model's own sampling")
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


def _timed(call, *args, **kwargs):
    """``call(*args, **kwargs)`` and its "wall (cpu)" seconds."""
    c0, w0 = time.process_time(), time.perf_counter()
    result = call(*args, **kwargs)
    return result, f"{time.perf_counter() - w0:.1f} ({time.process_time() - c0:.1f})"


def shared(model, test, n_chunks: int) -> None:
    """The two MiCRO rows with one sampler, and what a second sampler would cost."""
    ours = RollingEvaluation(model, m_values=(50, 100))
    paper = RollingEvaluation(model.paper_model(), m_values=(50, 100))
    print("| chunk | engagements | users scored | paper's scoring s (cpu) | MiCRO's scoring "
          "| `partial_fit` | the paper's own `partial_fit` (saved) | sweeps |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for pos, (chunk, rows) in enumerate(iter_chunks(test.chunk)):
        if pos == n_chunks:
            break
        part = test.take(rows)
        paper.estimator = view = model.paper_model()
        n_users, paper_s = _timed(paper.step, part, learn=False)
        _, ours_s = _timed(ours.step, part, learn=False)
        _, fit_s = _timed(model.partial_fit, part)
        paper.estimator = None
        _, again_s = _timed(view.partial_fit, part)
        same = (view.n_sweeps_ == model.n_sweeps_
                and np.array_equal(view.support_count_, model.support_count_)
                and np.array_equal(view.phi_count_, model.paper_model().phi_count_))
        if not same:
            raise SystemExit(f"chunk {chunk}: the paper's model sampled another chain")
        del view
        print(f"| {chunk} | {len(rows):,} | {n_users:,} | {paper_s} | {ours_s} | {fit_s} | "
              f"{again_s} | {model.n_sweeps_[chunk]} |", flush=True)


def main(argv=None) -> int:
    args = run_arguments(__doc__.splitlines()[0], 3, argv, shared=True)
    model, test = fitted_and_test(args.out, args.method, args.train_chunks)
    if args.shared:
        print(f"{args.out}, {args.method} and its paper_model, one sampler\n")
        shared(model, test, args.chunks)
        return 0
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
