"""What numba's compilation costs a first run: `reproduce` cold and warm, per kernel.

A fresh install compiles every kernel it calls once (``cache=True`` keeps the machine
code beside the sources afterwards), so the first `sklearn-micro reproduce` on a machine,
and every CI run, pays for it. This script runs the command in a child process with an
empty ``NUMBA_CACHE_DIR`` (cold), then again with the cache it left (warm), and prints the
wall and cpu seconds of both, and, for the cold run, the seconds each kernel's compilation
took at the top level (a kernel compiled from inside another counts in its caller) and
how many type signatures each of the package's kernels was compiled for.

Several checkouts (``--checkout DIR``, e.g. a ``git worktree`` of another revision) are
measured in turn, ``--repeat`` rounds in alternating order, so that their figures are
paired on the same machine state; the least of each is printed.

    python benchmarks/compile_time.py                      # the built-in demo log
    python benchmarks/compile_time.py --checkout . --checkout ../other --repeat 2
    python benchmarks/compile_time.py -- --data fave-plain-1-20.parquet --k 1000 \\
        --train-chunks 169 --dim 128
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import header, table  # noqa: E402

# run in the child: the command with numba's compilation events recorded
CHILD = r"""
import collections, importlib, json, pkgutil, sys
from numba.core import event

top = collections.Counter()
with event.install_recorder("numba:compile") as recorder:
    from sklearn_micro import cli
    cli.main(sys.argv[2:])

# compilations nest (a kernel compiles its callees): count the outermost ones
open_events = {}
depth = 0
for ts, ev in recorder.buffer:
    key = (id(ev.data["dispatcher"]), str(ev.data["args"]))
    if ev.is_start:
        open_events.setdefault(key, []).append((ts, depth))
        depth += 1
    else:
        depth -= 1
        start, level = open_events[key].pop()
        if level == 0:
            func = ev.data["dispatcher"].py_func
            top[f"{func.__module__}.{func.__qualname__}"] += ts - start

import sklearn_micro._kernels as kernels
signatures = {}
for info in pkgutil.iter_modules(kernels.__path__):
    module = importlib.import_module(f"sklearn_micro._kernels.{info.name}")
    for name, obj in vars(module).items():
        if getattr(obj, "__module__", None) == module.__name__ and hasattr(obj, "signatures"):
            if obj.signatures:
                signatures[f"{info.name}.{name}"] = len(obj.signatures)
json.dump({"top": top, "signatures": signatures}, open(sys.argv[1], "w"))
"""


def run(checkout: Path, cache: Path, args: list[str], out: Path) -> dict:
    """One run of the command from ``checkout`` with ``cache`` as numba's cache."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(checkout)}
    report = out / "events.json"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", CHILD, str(report), "reproduce", "--quiet",
                    "--no-checkpoints", "--out", str(out / "run"), *args],
                   env=env, check=True, stdout=subprocess.DEVNULL, cwd=out)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, **json.loads(report.read_text())}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", action="append", type=Path,
                        help="a checkout of the project (default: this one); repeatable")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--top", type=int, default=12, help="kernels listed")
    parser.add_argument("command", nargs="*", help="arguments of reproduce, after --")
    options = parser.parse_args()
    header("numba's compilation in a first run", "compile_time.py")
    checkouts = options.checkout or [Path(__file__).resolve().parents[1]]
    results = {str(c): [] for c in checkouts}
    for round_ in range(options.repeat):
        order = checkouts if round_ % 2 == 0 else checkouts[::-1]
        for checkout in order:
            with tempfile.TemporaryDirectory() as folder:
                folder = Path(folder)
                cold = run(checkout.resolve(), folder / "cache", options.command, folder)
                warm = run(checkout.resolve(), folder / "cache", options.command, folder)
            results[str(checkout)].append((cold, warm))
            print(f"round {round_ + 1}, {checkout}: cold {cold['wall']:.1f} s "
                  f"({cold['cpu']:.1f} cpu s), warm {warm['wall']:.1f} s "
                  f"({warm['cpu']:.1f} cpu s)", flush=True)

    rows = []
    for checkout, pairs in results.items():
        cold = min(pairs, key=lambda p: p[0]["cpu"])[0]
        warm = min(pairs, key=lambda p: p[1]["cpu"])[1]
        least = min(pairs, key=lambda p: sum(p[0]["top"].values()))[0]
        rows.append([checkout, f"{cold['wall']:.1f} ({cold['cpu']:.1f})",
                     f"{warm['wall']:.1f} ({warm['cpu']:.1f})",
                     f"{cold['cpu'] - warm['cpu']:.1f}", f"{sum(least['top'].values()):.1f}",
                     len(least["signatures"]), sum(least["signatures"].values())])
    print()
    print(table(["checkout", "cold s (cpu)", "warm s (cpu)", "cold - warm, cpu s",
                 "compiling at the top level, s", "kernels", "signatures"], rows))
    for checkout, pairs in results.items():
        least = min(pairs, key=lambda p: sum(p[0]["top"].values()))[0]
        print(f"\n{checkout}: the kernels whose compilation took longest (top level, s; "
              "signatures of the package's kernels)\n")
        ranked = sorted(least["top"].items(), key=lambda kv: -kv[1])[:options.top]
        short = [(name.replace("sklearn_micro._kernels.", ""), sec) for name, sec in ranked]
        print(table(["kernel", "seconds", "signatures"],
                    [[k, f"{sec:.2f}", least["signatures"].get(k, "")] for k, sec in short]))
        several = {k: v for k, v in least["signatures"].items() if v > 1}
        print(f"\nkernels compiled for more than one signature: "
              f"{', '.join(f'{k} ({v})' for k, v in sorted(several.items())) or 'none'}")


if __name__ == "__main__":
    main()
