"""The graph embedding's ALS with each solver: `implicit`'s and the blocked kernel.

Reads an engagement log as ``reproduce`` does (``--data``: a Parquet or CSV file, for
example one written by ``benchmarks/paper_scale.py --generate-only``), keeps its first
``--train-chunks`` chunks and fits `GraphEmbedder` (ALS, ``--dim`` dimensions,
``--epochs`` epochs, every core) with ``solver="implicit"`` and ``solver="blocked"`` in
turn, ``--repeat`` rounds, each fit in a fresh process so that its peak memory is its own
(VmHWM, reset once the log is loaded). Prints per fit: wall and cpu seconds, seconds per
epoch (the fit's time less the matrix's), the peak above the loaded log, and implicit's
training loss of the vectors (`implicit.cpu._als.calculate_loss`, the objective both
solvers lower; ``--no-loss`` skips it, a pass as long as half an epoch); then the ratio of
the solvers' least times.

    python benchmarks/als_solvers.py --data /work/data-scale/fave-plain-1-20.parquet \\
        --train-chunks 169 --epochs 3 --repeat 2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SOLVERS = ("implicit", "blocked")


def _worker(args) -> None:
    import numpy as np
    from threadpoolctl import threadpool_limits

    from sklearn_micro import embedding
    from sklearn_micro._stages import peak_bytes as _peak_bytes
    from sklearn_micro._stages import reset_peak as _reset_peak
    from sklearn_micro.cli import _load, _parser
    from sklearn_micro.experiment import compact_log, split_chunks

    # the log read as reproduce reads it
    cli = _parser().parse_args(["reproduce", "--data", args.data])
    log, _ = _load(cli)
    train, _ = split_chunks(compact_log(log), args.train_chunks)
    del log
    _reset_peak()
    base = _peak_bytes()
    built = {}
    make = embedding.engagement_matrix

    def timed_matrix(*a, **k):
        w0 = time.perf_counter()
        matrix = make(*a, **k)
        built["seconds"] = time.perf_counter() - w0
        built["pairs"] = int(matrix.nnz)
        return matrix

    embedding.engagement_matrix = timed_matrix
    embedder = embedding.GraphEmbedder(args.dim, solver=args.worker, iterations=args.epochs,
                                       random_state=0, n_jobs=-1)
    c0, w0 = time.process_time(), time.perf_counter()
    embedder.fit(train)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    peak = _peak_bytes() - base
    loss = None
    if not args.no_loss:
        from implicit.cpu import _als

        matrix = make(train, embedder.user_ids_, embedder.item_ids_)
        with threadpool_limits(1, user_api="blas"):
            loss = float(_als.calculate_loss(matrix, embedder.user_vectors_,
                                             embedder.item_vectors_, embedder.regularization,
                                             num_threads=0))
    print(json.dumps({"solver": args.worker, "wall": wall, "cpu": cpu, "peak": peak,
                      "matrix": built["seconds"], "pairs": built["pairs"],
                      "users": len(embedder.user_ids_), "items": len(embedder.item_ids_),
                      "engagements": len(train), "loss": loss,
                      "finite": bool(np.isfinite(embedder.user_vectors_).all()
                                     and np.isfinite(embedder.item_vectors_).all())}))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--train-chunks", type=int, default=169)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--no-loss", action="store_true")
    parser.add_argument("--worker", choices=SOLVERS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args)
        return 0
    rows = []
    for round_ in range(args.repeat):
        for solver in SOLVERS:
            command = [sys.executable, __file__, "--worker", solver, "--data", args.data,
                       "--train-chunks", str(args.train_chunks), "--dim", str(args.dim),
                       "--epochs", str(args.epochs)] + (["--no-loss"] if args.no_loss else [])
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode:
                print(done.stderr, file=sys.stderr)
                return done.returncode
            row = json.loads(done.stdout.strip().splitlines()[-1])
            row["round"] = round_ + 1
            rows.append(row)
            print(f"round {round_ + 1}, {solver}: {row['wall']:.1f} s", flush=True)
    first = rows[0]
    print(f"\n{args.data}: {first['engagements']:,} training engagements, {first['pairs']:,} "
          f"distinct pairs, {first['users']:,} users, {first['items']:,} items; d = "
          f"{args.dim}, {args.epochs} epochs, every core\n")
    print("| round | solver | fit s (cpu s) | matrix s | s per epoch | peak MiB above the "
          "log | training loss |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for row in rows:
        epoch = (row["wall"] - row["matrix"]) / args.epochs
        loss = "" if row["loss"] is None else f"{row['loss']:.6g}"
        print(f"| {row['round']} | {row['solver']} | {row['wall']:.1f} ({row['cpu']:.1f}) | "
              f"{row['matrix']:.1f} | {epoch:.1f} | {row['peak'] / 2**20:,.0f} | {loss} |")
    least = {s: min((r["wall"] - r["matrix"]) / args.epochs for r in rows
                    if r["solver"] == s) for s in SOLVERS}
    print(f"\nleast seconds per epoch: implicit {least['implicit']:.1f}, blocked "
          f"{least['blocked']:.1f}: {least['implicit'] / least['blocked']:.2f} times")
    return 0


if __name__ == "__main__":
    sys.exit(main())
