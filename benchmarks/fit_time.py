"""The seconds of `MiCRO.fit` on the shared logs, by what it chooses on held-out chunks.

For Higgs, MovieLens and the README's generated log (``benchmarks/quality.py``'s chunks
and K), the training chunks are embedded and clustered once, then each fit below runs
``--repeats`` times after one that compiles the kernels, in this order each round, on the
same cores:

- the paper's model (``personal=0, popularity=0, phi_decay=0, live_weight=0``): the
  initialization from the items' interests alone (``fit`` runs no sampler), the peer every
  other row is divided by;
- the blend's held-out choice without the co-engagement term (``personal`` and
  ``popularity`` learned, ``coengagement=0``, the rest fixed);
- the blend's held-out choice (``personal``, ``popularity`` and ``coengagement`` learned);
- the blend and ``phi_decay`` (``live_weight=0``);
- ``MiCRO()``: the blend, ``phi_decay`` and ``live_weight`` chosen.

It prints the median seconds and the ratio to the paper's model of the same round (median
over rounds), and the weights each fit chose::

    python benchmarks/fit_time.py                   # the three logs, 3 rounds (about 4 min)
    python benchmarks/fit_time.py --log movielens --repeats 5

The figures are quoted in docs/quality.md.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from _harness import header, load_average, table  # noqa: E402
from quality import LOGS, embed_and_cluster  # noqa: E402

from sklearn_micro import MiCRO  # noqa: E402
from sklearn_micro._log import check_log  # noqa: E402
from sklearn_micro.experiment import split_chunks  # noqa: E402

FITS = {
    "the paper's model": dict(personal=0, popularity=0, phi_decay=0, live_weight=0),
    "the blend without co-engagement": dict(coengagement=0, phi_decay=0, live_weight=0),
    "the blend": dict(phi_decay=0, live_weight=0),
    "the blend, phi_decay": dict(live_weight=0),
    "MiCRO()": {},
}


def chosen(model) -> str:
    return (f"personal {model.personal_weight_:.3g}, popularity "
            f"{model.popularity_weight_:.3g}, co-engagement {model.coengagement_:g}, "
            f"phi_decay {model.phi_decay_:g}, "
            f"live_weight {model.live_weight_:g}")


def time_log(name: str, repeats: int, say) -> list:
    spec = LOGS[name]
    log = check_log(spec.load())
    train, _ = split_chunks(log, spec.train_chunks)
    _, clustered = embed_and_cluster(train, (spec.k,), say)
    base = clustered[spec.k]
    seconds = {fit: [] for fit in FITS}
    weights = {}
    for round_ in range(repeats + 1):
        for fit, params in FITS.items():
            start = time.perf_counter()
            model = MiCRO(random_state=0, n_jobs=-1, **params).fit(base)
            elapsed = time.perf_counter() - start
            if round_:  # the first round compiles
                seconds[fit].append(elapsed)
            weights[fit] = chosen(model)
            say(f"  round {round_} {fit}: {elapsed:.2f} s")
    paper = np.asarray(seconds["the paper's model"])
    return [[f"{name} ({len(train):,} engagements, K = {spec.k})" if i == 0 else "", fit,
             f"{np.median(seconds[fit]):.2f}",
             f"{np.median(np.asarray(seconds[fit]) / paper):.2f}", weights[fit]]
            for i, fit in enumerate(FITS)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", action="append", choices=("higgs", "movielens", "generated"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)

    def say(msg):
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    header("MiCRO.fit: seconds after compilation", "fit_time.py", argv)
    rows = []
    for name in args.log or ("higgs", "movielens", "generated"):
        rows += time_log(name, args.repeats, say)
    print(table(["log", "fit", "s (median)", "/ the paper's model", "chosen"], rows))
    print(f"\nload average at the end: {load_average()}")


if __name__ == "__main__":
    main()
