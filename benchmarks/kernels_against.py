"""MiCRO's `recommend` with the top-m kernels of another checkout, on a run's state.

Loads a method's fitted model from a ``reproduce --out DIR`` folder (its rolling
evaluation's checkpoint if there is one, else its fit checkpoint sampled on the first test
chunk with ``partial_fit``), draws ``--users`` users with a support, and times
``recommend(users, 100)`` (with and without the seen items left out) with this checkout's
`mixture_topm` and `personal_topm` and with those of ``--before``, a checkout of an earlier
commit (``git worktree add /tmp/before COMMIT``), loaded beside them in the same process:
the least cpu time (all threads) of ``--repeat`` interleaved calls, and whether both give
the same lists. docs/scale.md quotes it ("Keeping a row's top m").

    python benchmarks/kernels_against.py OUT --before /tmp/before --method "MiCRO (paper)"
"""

from __future__ import annotations

import argparse
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


def fitted_model(out: Path, method: str):
    checkpoints = out / "checkpoints"
    rolling = checkpoints / f"{method} rolling.pkl"
    if rolling.is_file():
        with open(rolling, "rb") as f:
            return _final_recommender(pickle.load(f).estimator)
    import pandas as pd

    with open(checkpoints / f"{method} fit.pkl", "rb") as f:
        model = pickle.load(f)
    with open(checkpoints / "load.pkl", "rb") as f:
        log = pickle.load(f)[0]
    sel = log.chunk == model.latest_chunk_ + 1
    return model.partial_fit(pd.DataFrame(
        {"user": log.user[sel], "item": log.item[sel], "chunk": log.chunk[sel]}))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="a reproduce --out folder")
    parser.add_argument("--before", type=Path, required=True,
                        help="a checkout of the commit to compare with")
    parser.add_argument("--method", default="MiCRO (paper)")
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--n-jobs", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        before = kernels_of(args.before, Path(folder))
        after = micro_module.mixture_topm, micro_module.personal_topm
        model = fitted_model(args.out, args.method)
        model.n_jobs = args.n_jobs
        support = np.diff(model.support_indptr_)
        rng = np.random.default_rng(0)
        with_support = np.flatnonzero(support > 0)
        users = np.sort(rng.choice(with_support, min(args.users, with_support.size),
                                   replace=False))
        print(f"{args.out.name}, {args.method}: chunk {model.latest_chunk_}, personal "
              f"weight {model.personal_weight_:g}, {users.size:,} users, m = 100, "
              f"{args.n_jobs} threads; cpu us per user")
        print("| seen items left out | before | after | before / after | same lists |")
        print("|---|---:|---:|---:|---|")
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
                    lists[name] = model._recommend(users, 100, seen)
                    best[name] = min(best.get(name, np.inf), time.process_time() - start)
            micro_module.mixture_topm, micro_module.personal_topm = after
            same = all(np.array_equal(a, b) for a, b in zip(*lists.values(), strict=True))
            us = {name: seconds / users.size * 1e6 for name, seconds in best.items()}
            print(f"| {'yes' if exclude else 'no'} | {us['before']:.1f} | {us['after']:.1f} | "
                  f"{us['before'] / us['after']:.2f} | {same} |", flush=True)


if __name__ == "__main__":
    main()
