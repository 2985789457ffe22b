"""MiCRO's `recommend` with the top-m kernels of another checkout, on a run's state.

Loads a method's fitted model from a ``reproduce --out DIR`` folder (its rolling
evaluation's checkpoint if there is one, else its fit checkpoint sampled on the first
``--chunks`` test chunks with ``partial_fit``), draws ``--users`` users with a support
(with ``--active``, among the users of the next chunk, as the rolling evaluation ranks
them), and times ``recommend(users, 100)`` (with and without the seen items left out) with
this checkout's `mixture_topm` and `personal_topm` and with those of ``--before``, a
checkout of an earlier commit (``git worktree add /tmp/before COMMIT``), loaded beside them
in the same process: the least cpu time (all threads) of ``--repeat`` interleaved calls,
and whether both give the same lists. A model whose paper's model ranks from its own
latest chunk (`MiCRO._ranks_with_paper`, the defaults) is also timed as its paper's model
ranks alone (`mixture_topm`) and as ``reproduce`` ranks its two rows, from one scatter a
user (`MiCRO._recommend_with_paper`). With
``--ranges``, that ranking is also timed with this checkout's `personal_topm` for each
(rows, items) of a block and range of its scatter (``range_rows``, ``range_items``; a
range of the chunk's items or more is no ranges), against its defaults. docs/scale_history.md
quotes it ("Keeping a row's top m", "Large chunks scattered range by range").

    python benchmarks/kernels_against.py OUT --before /tmp/before --method "MiCRO (paper)"
    python benchmarks/kernels_against.py OUT --before /tmp/before --method MiCRO \
        --chunks 2 --active
    python benchmarks/kernels_against.py OUT --before /tmp/before --method MiCRO \
        --active --n-jobs 1 --ranges 1:1048576 8:32768 8:65536 32:65536
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import pickle
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from sklearn_micro import micro as micro_module  # noqa: E402
from sklearn_micro.model_selection import _final_recommender  # noqa: E402


def kernels_of(checkout: Path, folder: Path):
    """``mixture_topm, personal_topm`` of ``checkout``'s ``_kernels/topm.py``, compiled as
    a module of its own (its relative imports taken from this checkout's package)."""
    source = (checkout / "sklearn_micro" / "_kernels" / "topm.py").read_text()
    source = source.replace("from .", "from sklearn_micro._kernels.")
    path = folder / "topm_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("topm_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.mixture_topm, module.personal_topm


def fitted_model(out: Path, method: str, chunks: int = 1):
    """The method's model and the run's log (None when the rolling checkpoint served)."""
    checkpoints = out / "checkpoints"
    rolling = [checkpoints / f"{method} rolling.pkl"]
    if method == "MiCRO":  # reproduce's shared evaluation of both MiCRO rows
        rolling.append(checkpoints / "MiCRO and MiCRO (paper) rolling.pkl")
    for path in rolling:
        if path.is_file():
            with open(path, "rb") as f:
                evaluation = pickle.load(f)
            evaluation = getattr(evaluation, "micro", evaluation)
            return _final_recommender(evaluation.estimator), None
    import pandas as pd

    with open(checkpoints / f"{method} fit.pkl", "rb") as f:
        model = pickle.load(f)
    with open(checkpoints / "load.pkl", "rb") as f:
        log = pickle.load(f)[0]
    for _ in range(chunks):
        sel = log.chunk == model.latest_chunk_ + 1
        model.partial_fit(pd.DataFrame(
            {"user": log.user[sel], "item": log.item[sel], "chunk": log.chunk[sel]}))
    return model, log


def drawn_users(out: Path, model, log, n_users: int, active: bool) -> np.ndarray:
    """``n_users`` model indices: users with a support, or with ``active`` the users of
    the chunk after the model's latest (-1 for those the model has not met)."""
    rng = np.random.default_rng(0)
    if active:
        if log is None:
            with open(out / "checkpoints" / "load.pkl", "rb") as f:
                log = pickle.load(f)[0]
        users = model.user_ids_.lookup(np.unique(log.user[log.chunk == model.latest_chunk_
                                                          + 1]))
    else:
        users = np.flatnonzero(np.diff(model.support_indptr_) > 0)
    return np.sort(rng.choice(users, min(n_users, users.size), replace=False))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="a reproduce --out folder")
    parser.add_argument("--before", type=Path, required=True,
                        help="a checkout of the commit to compare with")
    parser.add_argument("--method", default="MiCRO (paper)")
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--chunks", type=int, default=1,
                        help="test chunks the fit checkpoint takes with partial_fit first")
    parser.add_argument("--active", action="store_true",
                        help="draw the users among those of the next chunk")
    parser.add_argument("--ranges", nargs="*", default=[], metavar="ROWS:ITEMS",
                        help="blocks of rows and ranges of items to time the scatter with")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        before = kernels_of(args.before, Path(folder))
        after = micro_module.mixture_topm, micro_module.personal_topm
        model, log = fitted_model(args.out, args.method, args.chunks)
        model.n_jobs = args.n_jobs
        users = drawn_users(args.out, model, log, args.users, args.active)
        del log
        print(f"{args.out.name}, {args.method}: chunk {model.latest_chunk_}, personal "
              f"weight {model.personal_weight_:g}, {users.size:,} users, m = 100, "
              f"{args.n_jobs} threads; cpu us per user")
        print("| ranking | seen items left out | before | after | before / after | "
              "same lists |")
        print("|---|---|---:|---:|---:|---|")
        ways = {"`recommend`": lambda seen: model._recommend(users, 100, seen)}
        if model._ranks_with_paper():
            paper = model.paper_model()
            ways["the paper's model's `recommend`"] = lambda seen: paper._recommend(users, 100,
                                                                                    seen)
            ways["both rows, one scatter"] = lambda seen: paired(model, users, seen)
        for way, rank in ways.items():
            for exclude in (False, True):
                if exclude:
                    seen = model.seen_items_.csr(users)
                else:
                    seen = np.zeros(users.size + 1, np.int64), np.empty(0, np.int64)
                best, lists = {}, {}
                for _ in range(args.repeat):
                    for name, kernels in (("before", before), ("after", after)):
                        micro_module.mixture_topm, micro_module.personal_topm = kernels
                        start = time.process_time()
                        lists[name] = rank(seen)
                        best[name] = min(best.get(name, np.inf), time.process_time() - start)
                micro_module.mixture_topm, micro_module.personal_topm = after
                same = all(np.array_equal(a, b)
                           for a, b in zip(*lists.values(), strict=True))
                us = {name: seconds / users.size * 1e6 for name, seconds in best.items()}
                print(f"| {way} | {'yes' if exclude else 'no'} | {us['before']:.1f} | "
                      f"{us['after']:.1f} | {us['before'] / us['after']:.2f} | {same} |",
                      flush=True)
        if args.ranges and model._ranks_with_paper():
            ranges(model, users, args.ranges, args.repeat)


def ranges(model, users, settings, repeat):
    """Both rows from one scatter with each block of rows and range of items."""
    kernel = micro_module.personal_topm
    seen = np.zeros(users.size + 1, np.int64), np.empty(0, np.int64)
    print("\n| rows of a block, items of a range | both rows, cpu us per user | the same "
          "lists as the defaults |")
    print("|---|---:|---|")
    want = paired(model, users, seen)
    best = dict.fromkeys(settings, np.inf)
    same = dict.fromkeys(settings, True)
    try:
        for _ in range(repeat):
            for setting in settings:
                rows, items = (int(v) for v in setting.split(":"))
                micro_module.personal_topm = functools.partial(kernel, range_rows=rows,
                                                               range_items=items)
                start = time.process_time()
                got = paired(model, users, seen)
                best[setting] = min(best[setting], time.process_time() - start)
                same[setting] &= all(np.array_equal(a, b)
                                     for a, b in zip(got, want, strict=True))
    finally:
        micro_module.personal_topm = kernel
    for setting in settings:
        rows, items = setting.split(":")
        print(f"| {rows}, {int(items):,} | {best[setting] / users.size * 1e6:.1f} | "
              f"{same[setting]} |", flush=True)


def paired(model, users, seen):
    """`MiCRO._recommend_with_paper`'s five arrays for model indices ``users``."""
    from sklearn_micro._micro_state import LatestChunk, interest_weights

    indptr, k, theta = model._theta(users)
    weight, base = interest_weights(indptr, k, theta, model.beta, LatestChunk.of(model))
    return model._recommend_personal(users, 100, seen, indptr, k, weight, base, paper=True)


if __name__ == "__main__":
    main()
