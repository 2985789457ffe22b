"""What the live layer is worth: the prequential protocol for MiCRO and the baselines.

Each test chunk is replayed in time order (by timestamp on the real logs, in a seeded
shuffle within the chunk on generated ones) in batches; each batch's users are scored
before the batch is seen, against their own items of the batch; then the chunk is closed
with ``partial_fit``. Rows: MiCRO chunk-only (the closed chunks alone), MiCRO with the
users' own open-chunk engagements (``history``), MiCRO live (``observe``) and each baseline
live. Every figure is a mean over (user, batch) points with a 95% interval (users as the
unit); the ratios to chunk-only MiCRO are paired by user.

    python benchmarks/prequential.py --log generated
    python benchmarks/prequential.py --log fave --scale 0.05 --test-chunks 4
    python benchmarks/prequential.py --log higgs --live-weights 0.5 1 2 4

The tables are quoted in docs/live_results.md.
"""
from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from _harness import header, log  # noqa: E402

from sklearn_micro import GraphEmbedder, MiCRO, SphericalKMeans  # noqa: E402
from sklearn_micro._log import check_log  # noqa: E402
from sklearn_micro.baselines import (  # noqa: E402
    ALSRecommender,
    ANNRecommender,
    PopularityRecommender,
    RecentItemsRecommender,
)
from sklearn_micro.cli import DEFAULT_LOG  # noqa: E402
from sklearn_micro.datasets import (  # noqa: E402
    iter_preset,
    load_higgs,
    load_movielens,
    make_engagements,
    preset_parameters,
)
from sklearn_micro.experiment import prequential_table  # noqa: E402
from sklearn_micro.model_selection import prequential_evaluate  # noqa: E402

M = 100


def _load(args):
    """The log (with a ``timestamp`` column where its rows have times), its training
    chunks, K, and the embedding's and MiCRO's settings."""
    # the real logs come in time order: a row's position is its time
    if args.log == "higgs":
        frame = load_higgs(chunk_hours=6, as_frame=True)
        return frame.assign(timestamp=np.arange(len(frame))), 19, 400, {}, {}
    if args.log == "movielens":
        frame = load_movielens(chunk_days=30, as_frame=True)
        return frame.assign(timestamp=np.arange(len(frame))), 250, 100, {}, {}
    if args.log == "generated":
        import pandas as pd
        log = check_log(make_engagements(**DEFAULT_LOG))
        frame = pd.DataFrame({"user": log.user, "item": log.item, "chunk": log.chunk})
        return frame, 12, 100, {}, {}
    p = preset_parameters(args.log, args.scale)
    chunks = []
    for chunk in iter_preset(args.log, args.scale):
        chunks.append(chunk)
    import pandas as pd
    frame = pd.DataFrame({"user": np.concatenate([c.user for c in chunks]),
                          "item": np.concatenate([c.item for c in chunks]),
                          "chunk": np.concatenate([c.chunk for c in chunks])})
    return (frame, p.train_chunks, p.n_interests,
            {"negative_weight": p.negative_weight}, {"beta": p.beta})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", default="generated",
                        choices=["generated", "higgs", "movielens", "fave", "follow"])
    parser.add_argument("--scale", type=float, default=0.01)
    parser.add_argument("--test-chunks", type=int, default=4,
                        help="the first test chunks replayed (default 4)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="engagements per batch (default: a 50th of a test chunk)")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--live-weights", type=float, nargs="*", default=[],
                        help="fixed live weights to replay beside the default's choice")
    parser.add_argument("--no-baselines", action="store_true")
    args = parser.parse_args(argv)
    header(f"Prequential evaluation on {args.log}", "prequential.py", argv)

    frame, n_train, k, embed_kw, micro_kw = _load(args)
    if "timestamp" in frame:
        frame = frame.sort_values("timestamp", kind="stable")
    chunk = frame["chunk"].to_numpy()
    first = np.unique(chunk)[n_train]
    train = frame[chunk < first]
    test_chunks = np.unique(chunk[chunk >= first])[: args.test_chunks]
    test = frame[np.isin(chunk, test_chunks)]
    times = test["timestamp"].to_numpy() if "timestamp" in test else None
    test = test[["user", "item", "chunk"]]
    batch = args.batch_size or max(1, len(test) // len(test_chunks) // 50)
    log(f"{len(train):,} training engagements, {len(test):,} test in {len(test_chunks)} "
        f"chunks, batches of {batch}, K = {k}")

    start = time.perf_counter()
    embedded = GraphEmbedder(args.dim, random_state=0, **embed_kw).fit_transform(train)
    clustered = SphericalKMeans(k, random_state=0).fit(embedded).transform(embedded)
    log(f"embedding and clustering: {time.perf_counter() - start:.0f} s")
    micro = MiCRO(random_state=0, **micro_kw).fit(clustered)
    rows = {}

    def run(name, rec, mode):
        t = time.perf_counter()
        rows[name] = prequential_evaluate(rec, test, batch_size=batch, mode=mode, time=times,
                                          m_values=M)
        log(f"  {name}: {time.perf_counter() - t:.0f} s")

    run("MiCRO chunk-only", micro, "chunk")
    run("MiCRO users' own live", micro, "users")
    run(f"MiCRO live (auto: live_weight {micro.live_weight_:g})", micro, "live")
    for w in args.live_weights:
        run(f"MiCRO live (live_weight {w:g})", copy.deepcopy(micro).set_params(live_weight=w),
            "live")
    if not args.no_baselines:
        from sklearn.pipeline import Pipeline
        run("Popularity live", PopularityRecommender(window=1).fit(train), "live")
        run("RecentItems live", RecentItemsRecommender().fit(train), "live")
        ann = Pipeline([("embed", GraphEmbedder(args.dim, random_state=0, **embed_kw)),
                        ("ann", ANNRecommender())]).fit(train)
        run("ANN live", ann, "live")
        run("ALS live", ALSRecommender(random_state=0).fit(train), "live")

    print(prequential_table(rows, "MiCRO chunk-only", M))

if __name__ == "__main__":
    main()
