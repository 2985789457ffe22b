"""The live layer's cost: `MiCRO.observe` per batch size, and `recommend` with and without
an observed open chunk, on a preset's state.

Fits the pipeline on a preset's training chunks, then observes the first test chunk's
engagements in batches (1, 100, 10,000 engagements; each size on a fresh copy, the open
chunk filled to the same point first) and times each call; then times `recommend` for a
block of the chunk's users: on the closed state, on the state with the open chunk observed
(the first call, which builds the blended chunk, and the calls after it), each with rows
ranked by the kernel chosen for each (`SCATTER_ENTRIES`, what `recommend` runs) and with
the lists read for every row.

    python benchmarks/observe.py --preset fave --scale 0.05
"""
from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from _harness import header, log, table  # noqa: E402

from sklearn_micro import GraphEmbedder, MiCRO, SphericalKMeans  # noqa: E402
from sklearn_micro._log import EngagementLog  # noqa: E402
from sklearn_micro.datasets import iter_preset, preset_parameters  # noqa: E402
from sklearn_micro.micro import _retrieval  # noqa: E402


def _cpu(fn, repeat=5):
    """Median process cpu seconds and wall seconds of ``fn()`` over ``repeat`` calls."""
    cpu, wall = [], []
    for _ in range(repeat):
        c, w = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return float(np.median(cpu)), float(np.median(wall))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="fave", choices=["fave", "follow"])
    parser.add_argument("--scale", type=float, default=0.05)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--users", type=int, default=10_000)
    args = parser.parse_args(argv)
    header(f"observe and recommend with a live layer ({args.preset}, scale {args.scale})",
           "observe.py", argv)
    p = preset_parameters(args.preset, args.scale)
    train, test = [], None
    for pos, chunk in enumerate(iter_preset(args.preset, args.scale)):
        if pos < p.train_chunks:
            train.append(chunk)
        else:
            test = chunk
            break
    train = EngagementLog(np.concatenate([c.user for c in train]),
                          np.concatenate([c.item for c in train]),
                          np.concatenate([c.chunk for c in train]))
    log(f"{len(train):,} training engagements; test chunk of {len(test):,}")
    embedded = GraphEmbedder(args.dim, random_state=0,
                             negative_weight=p.negative_weight).fit_transform(train)
    clustered = SphericalKMeans(p.n_interests, random_state=0).fit(embedded).transform(
        embedded)
    model = MiCRO(random_state=0, beta=p.beta).fit(clustered)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(test))
    rows = np.column_stack([test.user, test.item, test.chunk])[order]
    out = []
    half = rows.shape[0] // 2
    for size in (1, 100, 10_000):
        live = copy.deepcopy(model).observe(rows[:half])  # an open chunk half observed
        batches = iter(range(half, half + 10 * size, size))

        def one(live=live, batches=batches, size=size):
            # the chunk's rows from the next position on, around to its start if need be
            lo = next(batches)
            live.observe(rows[np.arange(lo, lo + size) % rows.shape[0]])

        cpu, wall = _cpu(one)
        out.append([f"observe {size:,} engagements", f"{cpu * 1e3:.2f}", f"{wall * 1e3:.2f}",
                    f"{cpu / size * 1e6:.2f}"])
    users = np.unique(test.user)[: args.users]
    live = copy.deepcopy(model).observe(rows[:half])
    ratios = {}
    for ranking, bounds in (("by row", _retrieval.SCATTER_ENTRIES),
                            ("lists read for every row", (0, 0))):
        _retrieval.SCATTER_ENTRIES = bounds
        cpu0, wall0 = _cpu(lambda: model.recommend(users, 100))
        fresh = iter([copy.deepcopy(live) for _ in range(3)])  # each without the blend
        first_c, first_w = _cpu(lambda fresh=fresh: next(fresh).recommend(users, 100),
                                repeat=3)
        cpu1, wall1 = _cpu(lambda: live.recommend(users, 100))
        for name, (c, w) in (("closed state", (cpu0, wall0)),
                             ("open chunk half observed (first call)", (first_c, first_w)),
                             ("open chunk half observed", (cpu1, wall1))):
            out.append([f"recommend ({ranking}), {name}, {users.shape[0]:,} users",
                        f"{c * 1e3:.1f}", f"{w * 1e3:.1f}",
                        f"{c / users.shape[0] * 1e6:.2f}"])
        ratios[ranking] = (cpu1 / cpu0, first_c / cpu0, cpu0, cpu1)
    print(table(["call", "cpu ms", "wall ms", "cpu us per engagement or user"], out))
    by_row, lists = ratios["by row"], ratios["lists read for every row"]
    print(f"\nrecommend with the live layer / without: {by_row[0]:.2f}x in cpu (first "
          f"call, blending the chunk: {by_row[1]:.2f}x); with the lists read for every "
          f"row: {lists[0]:.2f}x ({lists[1]:.2f}x). By row / lists for every row: "
          f"{by_row[2] / lists[2]:.2f}x closed, {by_row[3] / lists[3]:.2f}x live; "
          f"{half:,} engagements observed, K = {p.n_interests}.")

if __name__ == "__main__":
    main()
