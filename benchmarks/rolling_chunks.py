"""A run's fitted method carried over its first test chunks: scoring and learning per chunk.

Loads ``DIR/checkpoints/<method> fit.pkl`` (any of the run's methods; MiCRO (paper) by
default) and the log of a ``reproduce --out DIR`` and takes the run's rolling protocol
over the first ``--chunks`` test chunks: each chunk is
scored for its active users (`RollingEvaluation.step` without learning: ``recommend``,
the metrics at 50 and 100 and the chunk's lookups), then learnt (``partial_fit``). Prints
wall and cpu seconds of each, per chunk, so that the evaluation's cost at a scale can be
read without running all of it. docs/scale_history.md quotes it ("A test chunk at full scale").

With ``--shared`` (``--method MiCRO``), each chunk is taken as ``reproduce`` takes its two
MiCRO rows: scored by the model's `MiCRO.paper_model` and by the model, then learnt by
the model alone. The paper's model is then also sampled on the chunk by itself (what
evaluating the two rows apart costs more), and its counts are compared with the model's:
the same chain, or the script fails.

With ``--paired`` (``--method MiCRO``, a model whose paper's model shares its ``phi``:
`MiCRO._ranks_with_paper`), each chunk's two MiCRO rows are scored both ways in turn: apart
(the paper's model's `recommend`, then the model's) and from one scatter a user
(`MiCRO._recommend_with_paper`, what ``reproduce`` does then), the order alternating from
chunk to chunk, after the model's chunk has been laid out for ranking (timed apart: both
ways need it; scored apart, the paper's model lays out its own, which is timed). The
points must be the same, or the script fails. The model then learns the chunk.

    python benchmarks/rolling_chunks.py OUT_FULL --chunks 3 --method MiCRO
    python benchmarks/rolling_chunks.py OUT_FULL --chunks 3 --method ANN
    python benchmarks/rolling_chunks.py OUT_FULL --chunks 3 --method MiCRO --shared
With ``--beside`` (``--method MiCRO``), each chunk is taken as ``reproduce``'s shared
evaluation takes it (`experiment._SharedSampler.step`) by two copies of the model in
turn, the order alternating: one samples the chunk after scoring it, the other while it
is scored when it may (`experiment._learning_beside`: a chunk of one chain, two cores,
numba's omp or tbb layer). The reports and the models' counts must be the same, or the
script fails.

    python benchmarks/rolling_chunks.py OUT_FULL --chunks 3 --method MiCRO --paired
    python benchmarks/rolling_chunks.py OUT_1_20 --chunks 8 --method MiCRO --beside

With ``--steps`` (``--method MiCRO``), each chunk is taken by the shared evaluation's
step alone, as ``reproduce`` takes it (both rows scored, the chunk sampled), and timed:
run from two checkouts one after the other (the script copied into the earlier one), it
compares their whole evaluation step on the same chunks.

    python benchmarks/rolling_chunks.py OUT_FULL --chunks 3 --method MiCRO --steps
"""

from __future__ import annotations

import argparse
import copy
import pickle
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from sklearn_micro import experiment  # noqa: E402
from sklearn_micro._log import iter_chunks  # noqa: E402
from sklearn_micro.experiment import load_checkpoint, split_chunks  # noqa: E402
from sklearn_micro.model_selection import (  # noqa: E402
    RollingEvaluation,
    _check_m_values,
    _chunk_points,
    _paired_chunk_points,
)


def run_arguments(description: str, chunks: int, argv=None, *, shared: bool = False,
                  memory: bool = False) -> argparse.Namespace:
    """The arguments of this script (``shared``) and of partial_fit_parts.py
    (``memory``)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("out", type=Path, help="a reproduce --out folder")
    parser.add_argument("--method", default="MiCRO (paper)")
    parser.add_argument("--chunks", type=int, default=chunks)
    parser.add_argument("--train-chunks", type=int, default=169)
    if memory:
        parser.add_argument("--memory", action="store_true",
                            help="each part's resident peak above the memory at the call")
    if shared:
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--shared", action="store_true",
                          help="score with the model and its paper_model, sample once, "
                               "and time the paper's model's own sampling")
        mode.add_argument("--paired", action="store_true",
                          help="score the two MiCRO rows apart and from one scatter a user, "
                               "in turn, and compare")
        mode.add_argument("--beside", action="store_true",
                          help="take each chunk as the shared evaluation does, sampling it "
                               "after scoring and while scoring, in turn, and compare")
        mode.add_argument("--steps", action="store_true",
                          help="take each chunk as the shared evaluation does, and time it")
    return parser.parse_args(argv)


def fitted_and_test(out: Path, method: str, train_chunks: int):
    """The run's fitted ``method`` and its log's test chunks."""
    checkpoints = out / "checkpoints"
    with open(checkpoints / "load.pkl", "rb") as f:
        log = pickle.load(f)[0]
    _, test = split_chunks(log, train_chunks)
    del log
    return load_checkpoint(checkpoints / f"{method} fit.pkl"), test  # ANN's shares arrays


def _timed(call, *args, **kwargs):
    """``call(*args, **kwargs)`` and its "wall (cpu)" seconds."""
    c0, w0 = time.process_time(), time.perf_counter()
    result = call(*args, **kwargs)
    return result, f"{time.perf_counter() - w0:.1f} ({time.process_time() - c0:.1f})"


def _first_chunks(test, n_chunks: int):
    """The first ``n_chunks`` test chunks: each chunk, its rows and its log."""
    for pos, (chunk, rows) in enumerate(iter_chunks(test.chunk)):
        if pos == n_chunks:
            break
        yield chunk, rows, test.take(rows)


def shared(model, test, n_chunks: int) -> None:
    """The two MiCRO rows with one sampler, and what a second sampler would cost."""
    ours = RollingEvaluation(model, m_values=(50, 100))
    paper = RollingEvaluation(model.paper_model(), m_values=(50, 100))
    print("| chunk | engagements | users scored | paper's scoring s (cpu) | MiCRO's scoring "
          "| `partial_fit` | the paper's own `partial_fit` (saved) | sweeps |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for chunk, rows, part in _first_chunks(test, n_chunks):
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


def paired(model, test, n_chunks: int) -> None:
    """The two MiCRO rows' scoring apart and from one scatter, each chunk both ways."""
    if not model._ranks_with_paper():
        raise SystemExit("--paired needs a model with a personal component whose paper's "
                         f"model shares its phi; this one has phi_decay_={model.phi_decay_} "
                         f"and personal_weight_={model.personal_weight_}.")
    ks = _check_m_values((50, 100))

    def apart(part):
        return _chunk_points(model, part, ks, False), _chunk_points(model.paper_model(), part,
                                                                    ks, False)

    def one_scatter(part):
        return _paired_chunk_points(model, part, ks, False)

    print("| chunk | engagements | users scored | the model's chunk for ranking s (cpu) "
          "| apart s (cpu) | one scatter s (cpu) | apart / one scatter (cpu) "
          "| `partial_fit` s (cpu) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for pos, (chunk, rows, part) in enumerate(_first_chunks(test, n_chunks)):
        # both ways rank from the model's chunk as the kernels take it: made first, for
        # neither (the paper's model makes its own when scored apart: that is timed)
        _, grouped_s = _timed(model._grouped_chunk)
        ways = [("apart", apart), ("one", one_scatter)]
        timed, cpu, points = {}, {}, {}
        for name, way in ways if pos % 2 == 0 else ways[::-1]:
            c0 = time.process_time()
            points[name], timed[name] = _timed(way, part)
            cpu[name] = time.process_time() - c0
        for a, b in zip(points["apart"], points["one"], strict=True):
            if any(not np.array_equal(a[3][name], b[3][name]) for name in a[3]):
                raise SystemExit(f"chunk {chunk}: the two ways scored differently")
        _, fit_s = _timed(model.partial_fit, part)
        print(f"| {chunk} | {len(rows):,} | {points['one'][0][0].shape[0]:,} | {grouped_s} | "
              f"{timed['apart']} | {timed['one']} | {cpu['apart'] / cpu['one']:.2f} | "
              f"{fit_s} |", flush=True)


def beside(model, test, n_chunks: int) -> None:
    """The shared evaluation's step with the chunk sampled after it is scored, and while."""
    evaluations = {"after": experiment._SharedSampler(copy.deepcopy(model), m_values=(50, 100)),
                   "beside": experiment._SharedSampler(model, m_values=(50, 100))}
    can = experiment._can_learn_beside
    print("| chunk | engagements | sampled beside | after s (cpu) | beside s (cpu) "
          "| after / beside (wall) |")
    print("|---|---:|---|---:|---:|---:|")
    try:
        for pos, (chunk, rows, part) in enumerate(_first_chunks(test, n_chunks)):
            taken = can(model, part)
            timed, wall = {}, {}
            for name in ("after", "beside") if pos % 2 == 0 else ("beside", "after"):
                experiment._can_learn_beside = can if name == "beside" else (
                    lambda model, log: False)
                w0 = time.perf_counter()
                _, timed[name] = _timed(evaluations[name].step, part)
                wall[name] = time.perf_counter() - w0
            experiment._can_learn_beside = can
            a, b = (evaluations[name] for name in ("after", "beside"))
            if not (np.array_equal(a.micro.estimator.support_count_, model.support_count_)
                    and all(np.array_equal(np.asarray(x.overall()), np.asarray(y.overall()))
                            for x, y in zip(a.reports().values(), b.reports().values(),
                                            strict=True))):
                raise SystemExit(f"chunk {chunk}: the two ways differ")
            print(f"| {chunk} | {len(rows):,} | {'yes' if taken else 'no'} | {timed['after']} "
                  f"| {timed['beside']} | {wall['after'] / wall['beside']:.2f} |", flush=True)
    finally:
        experiment._can_learn_beside = can


def steps(model, test, n_chunks: int) -> None:
    """The shared evaluation's step (`experiment._SharedSampler.step`) on each chunk."""
    evaluation = experiment._SharedSampler(model, m_values=(50, 100))
    print("| chunk | engagements | users scored | step s (cpu) | sweeps |")
    print("|---|---:|---:|---:|---:|")
    for chunk, rows, part in _first_chunks(test, n_chunks):
        n_users, step_s = _timed(evaluation.step, part)
        print(f"| {chunk} | {len(rows):,} | {n_users:,} | {step_s} | "
              f"{model.n_sweeps_[chunk]} |", flush=True)


def main(argv=None) -> int:
    args = run_arguments(__doc__.splitlines()[0], 3, argv, shared=True)
    model, test = fitted_and_test(args.out, args.method, args.train_chunks)
    if args.shared:
        print(f"{args.out}, {args.method} and its paper_model, one sampler\n")
        shared(model, test, args.chunks)
        return 0
    if args.paired:
        print(f"{args.out}, {args.method} and its paper_model, scored apart and from one "
              "scatter\n")
        paired(model, test, args.chunks)
        return 0
    if args.beside:
        print(f"{args.out}, {args.method}: the shared evaluation, each chunk sampled after "
              "it is scored and while it is scored\n")
        beside(model, test, args.chunks)
        return 0
    if args.steps:
        print(f"{args.out}, {args.method}: the shared evaluation's steps\n")
        steps(model, test, args.chunks)
        return 0
    evaluation = RollingEvaluation(model, m_values=(50, 100))
    print(f"{args.out}, {args.method}\n")
    print("| chunk | engagements | users scored | scoring s | cpu s | partial_fit s | cpu s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for chunk, rows, part in _first_chunks(test, args.chunks):
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
