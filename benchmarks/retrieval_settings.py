"""Settings of MiCRO on the fave preset: ``tol``, ``phi_min_count`` and ``coengagement``.

Draws the fave preset at ``--scale`` (`write_preset`, seed 0) and fits MiCRO as
``sklearn-micro reproduce --preset fave`` does (a 64-dimensional `GraphEmbedder` with the
preset's ``negative_weight``, `SphericalKMeans` with the preset's K, `MiCRO` with the
preset's ``beta``, seed 0, all cores), keeping the log and the fitted model in
``--cache``'s folder of the scale.
Then, the kernels compiled (`warm_up`), it carries a copy of the model over the 23 test
chunks, each chunk scored (recall@100, MRR@100) for the defaults ("MiCRO") and for their
`MiCRO.paper_model` ("MiCRO (paper)") from the state after the chunk before, then taken
by ``partial_fit``:

- ``--part tol``: one copy per value of ``--tols``: the sweeps a test chunk (mean, min,
  max), ``partial_fit``'s cpu seconds over the test chunks (all threads) and their ratio
  to the first value's, and both rows' recall@100 and MRR@100 against the first value's,
  paired by user (`RollingReport.compare`);
- ``--part phi``: one copy; every chunk is scored once per value of ``--counts`` (the
  sampler does not read ``phi_min_count``, so every count is scored on the same states):
  the share of the ``phi`` entries that retrieval reads (summed over the chunks), the
  scoring's cpu seconds (ranking and metrics) as a ratio to the first count's, and
  recall@100 and MRR@100 against the first count's, paired by user;
- ``--part coengagement``: one copy per value of ``--shares``, its ``coengagement_`` set
  to it (and its co-engaged items built, above 0): ``partial_fit``'s and the scoring's cpu
  seconds over the test chunks and their ratios to the first share's (0: no lists), the
  co-engaged items' entries after the last chunk, and recall@100 and MRR@100 against the
  first share's, paired by user (the sampler reads no share: the chains are the same).

The fit and each finished setting are checkpoints of that folder (`experiment.Stages`,
as ``reproduce --resume`` keeps them), so a stopped run carries on from the next.
docs/model.md ("Convergence", "Pruning phi for retrieval", the blend) quotes it.

    python benchmarks/retrieval_settings.py --scale 0.01     # about 5 minutes on 2 cores
    python benchmarks/retrieval_settings.py --scale 0.05 --part tol
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from _harness import Timer, header, log, table, warm_up  # noqa: E402

from sklearn_micro import GraphEmbedder, MiCRO, SphericalKMeans  # noqa: E402
from sklearn_micro._kernels.topm import retrieval_phi  # noqa: E402
from sklearn_micro._log import iter_chunks  # noqa: E402
from sklearn_micro.datasets import preset_parameters, read_log, write_preset  # noqa: E402
from sklearn_micro.experiment import Stages, compact_log, split_chunks  # noqa: E402
from sklearn_micro.model_selection import RollingEvaluation  # noqa: E402

ROWS = ("MiCRO", "MiCRO (paper)")
METRICS = ("recall@100", "mrr@100")


def fitted_and_test(scale: float, stages: Stages):
    """The fitted model (the checkpoint ``fit`` of ``stages``) and the test chunks of the
    fave preset at ``scale``."""
    p = preset_parameters("fave", scale)
    data = stages.dir / f"fave-{scale:g}.parquet"
    if not data.is_file():
        log(f"drawing the fave preset at {scale:g} to {data}")
        write_preset(data, "fave", scale, random_state=0)
    train, test = split_chunks(compact_log(read_log(data)), p.train_chunks)

    def fit():
        with Timer() as t:
            embedded = GraphEmbedder(64, negative_weight=p.negative_weight, random_state=0,
                                     n_jobs=-1).fit_transform(train)
            clustered = SphericalKMeans(p.n_interests, random_state=0,
                                        n_jobs=-1).fit_transform(embedded)
            model = MiCRO(beta=p.beta, random_state=0, n_jobs=-1).fit(clustered)
        log(f"embedding, clustering and fit: {t.wall:.0f} s")
        return model

    model = stages.run("fit", fit)
    chunks = [test.take(rows) for _, rows in iter_chunks(test.chunk)]
    log(f"{len(train):,} training and {len(test):,} test engagements in {len(chunks)} test "
        f"chunks; K = {p.n_interests:,}, beta {p.beta:g}; personal_weight_ "
        f"{model.personal_weight_:.3g}, popularity_weight_ {model.popularity_weight_:.3g}, "
        f"phi_decay_ {model.phi_decay_:g}")
    return model, chunks, p


def score(model, chunk, evaluations) -> dict:
    """Score ``chunk`` for both rows from ``model``'s state; each row's cpu seconds."""
    evaluations["MiCRO (paper)"].estimator = model.paper_model()
    cpu = {}
    for row in ROWS:
        with Timer() as t:
            evaluations[row].step(chunk, learn=False)
        cpu[row] = t.cpu
    return cpu


def run_tol(fitted, chunks, tol):
    model = copy.deepcopy(fitted).set_params(tol=tol)
    evaluations = {row: RollingEvaluation(model, m_values=(100,)) for row in ROWS}
    cpu = 0.0
    for pos, chunk in enumerate(chunks):
        score(model, chunk, evaluations)
        with Timer() as t:
            model.partial_fit(chunk)
        cpu += t.cpu
        log(f"tol {tol:g}: test chunk {pos + 1}/{len(chunks)}, partial_fit cpu s {cpu:.1f}")
    sweeps = [model.n_sweeps_[int(c.chunk[0])] for c in chunks]
    return {"sweeps": sweeps, "cpu": cpu,
            "reports": {row: e.report() for row, e in evaluations.items()}}


def run_phi(fitted, chunks, counts):
    model = copy.deepcopy(fitted)
    evaluations = {c: {row: RollingEvaluation(model, m_values=(100,)) for row in ROWS}
                   for c in counts}
    cpu = {(c, row): 0.0 for c in counts for row in ROWS}
    kept = {(c, row): 0 for c in counts for row in ROWS}
    total = dict.fromkeys(ROWS, 0)
    users = np.unique(chunks[0].user)[:100]
    for c in counts:  # compile each count's ranking before timing it
        model.set_params(phi_min_count=c)
        model.recommend(users, 100)
        model.paper_model().recommend(users, 100)
    for pos, chunk in enumerate(chunks):
        for c in counts:
            model.set_params(phi_min_count=c)
            for row, seconds in score(model, chunk, evaluations[c]).items():
                cpu[c, row] += seconds
        for row, state in zip(ROWS, (model, model.paper_model()), strict=True):
            total[row] += state.phi_count_.shape[0]
            for c in counts:
                kept[c, row] += retrieval_phi(state.phi_indptr_, state.phi_item_,
                                              state.phi_count_, float(c))[1].shape[0]
        model.partial_fit(chunk)
        log(f"phi_min_count: test chunk {pos + 1}/{len(chunks)}, scoring cpu s "
            + ", ".join(f"{c:g}: {cpu[c, 'MiCRO'] + cpu[c, 'MiCRO (paper)']:.1f}"
                        for c in counts))
    return {"cpu": cpu, "kept": kept, "total": total,
            "reports": {c: {row: e.report() for row, e in ev.items()}
                        for c, ev in evaluations.items()}}


def run_share(fitted, chunks, share):
    model = copy.deepcopy(fitted)
    model.coengagement_ = float(share)
    model._set_coengaged()
    evaluations = {row: RollingEvaluation(model, m_values=(100,)) for row in ROWS}
    fit_cpu = score_cpu = 0.0
    for pos, chunk in enumerate(chunks):
        score_cpu += score(model, chunk, evaluations)["MiCRO"]
        with Timer() as t:
            model.partial_fit(chunk)
        fit_cpu += t.cpu
        log(f"coengagement {share:g}: test chunk {pos + 1}/{len(chunks)}, partial_fit cpu s "
            f"{fit_cpu:.1f}, scoring cpu s {score_cpu:.1f}")
    return {"fit_cpu": fit_cpu, "score_cpu": score_cpu,
            "entries": int(model.coengaged_item_.shape[0]),
            "reports": {row: e.report() for row, e in evaluations.items()}}


def paired(report, base) -> list[str]:
    compared = report.compare(base)
    return [f"{100 * compared.loc[m, 'relative']:+.2f}% "
            f"[{100 * compared.loc[m, 'relative_low']:+.2f}, "
            f"{100 * compared.loc[m, 'relative_high']:+.2f}]" for m in METRICS]


def against(report, base) -> list[str]:
    """The metrics of ``report``: its means for the peer row (``base`` None), else
    `paired` with ``base``."""
    return means(report) if base is None else paired(report, base)


def means(report) -> list[str]:
    intervals = report.intervals()
    return [f"{intervals.loc[m, 'mean']:.4f}" for m in METRICS]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.01)
    parser.add_argument("--part", choices=["tol", "phi", "coengagement", "all"],
                        default="all")
    parser.add_argument("--tols", type=float, nargs="+", default=[1e-3, 3e-3, 1e-2, 3e-2],
                        help="the first (default: MiCRO's, 1e-3) is the peer")
    parser.add_argument("--counts", type=float, nargs="+", default=[0, 0.5, 2],
                        help="phi_min_count values; the first (0: the exact top m) is the "
                        "peer")
    parser.add_argument("--shares", type=float, nargs="+", default=[0, 0.5, 1],
                        help="coengagement shares; the first (0: no co-engaged items) is "
                        "the peer")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/micro-retrieval-settings"))
    args = parser.parse_args(argv)
    # one checkpoint folder a scale, resumed whenever it holds a run of that scale
    stages = Stages(args.cache / f"fave-{args.scale:g}", resume=True,
                    config={"scale": args.scale}, say=log)
    stages.dir.mkdir(parents=True, exist_ok=True)
    fitted, chunks, p = fitted_and_test(args.scale, stages)
    log(f"kernels compiled or loaded in {warm_up():.1f} s")
    header("MiCRO's tol, phi_min_count and coengagement on the fave preset",
           "retrieval_settings.py", argv)
    print(f"fave preset at {args.scale:g}: K = {p.n_interests:,}, {len(chunks)} test chunks "
          f"of {sum(len(c) for c in chunks):,} engagements; MiCRO's defaults chose "
          f"personal_weight_ {fitted.personal_weight_:.3g}, coengagement_ "
          f"{fitted.coengagement_:g}, popularity_weight_ "
          f"{fitted.popularity_weight_:.3g}, phi_decay_ {fitted.phi_decay_:g}.\n")
    if args.part in ("tol", "all"):
        done = {tol: stages.run(f"tol-{tol:g}", lambda tol=tol: run_tol(fitted, chunks, tol))
                for tol in args.tols}
        first = done[args.tols[0]]
        rows = []
        for tol, d in done.items():
            cells = [f"{tol:g}", f"{np.mean(d['sweeps']):.1f} ({min(d['sweeps'])}, "
                     f"{max(d['sweeps'])})", f"{d['cpu']:.1f}", f"{d['cpu'] / first['cpu']:.2f}"]
            for row in ROWS:
                cells += against(d["reports"][row],
                                 None if tol == args.tols[0] else first["reports"][row])
            rows.append(cells)
        print(f"## tol: `partial_fit` over the test chunks, against tol {args.tols[0]:g}\n")
        print("The first row's metrics are its means; the others', the relative difference "
              "of the mean over all points from the first row's [95% interval, paired by "
              "user].\n")
        print(table(["tol", "sweeps a chunk (min, max)", "partial_fit cpu s", "cpu ratio",
                     *(f"{row} {m}" for row in ROWS for m in METRICS)], rows) + "\n",
              flush=True)
    if args.part in ("phi", "all"):
        key = "-".join(f"{c:g}" for c in args.counts)
        d = stages.run(f"phi-{key}", lambda: run_phi(fitted, chunks, args.counts))
        c0 = args.counts[0]
        rows = []
        for c in args.counts:
            cells = [f"{c:g}"]
            for row in ROWS:
                cells += [f"{d['kept'][c, row] / d['total'][row]:.2f}",
                          f"{d['cpu'][c, row]:.1f}",
                          f"{d['cpu'][c0, row] / d['cpu'][c, row]:.2f}"]
            for row in ROWS:
                cells += against(d["reports"][c][row],
                                 None if c == c0 else d["reports"][c0][row])
            rows.append(cells)
        print(f"## phi_min_count: retrieval against phi_min_count={c0:g}\n")
        print("Per row: the share of the latest chunk's phi entries that retrieval reads "
              "(summed over the test chunks), the cpu seconds of its ranking and metrics over "
              "the test chunks, and their speed-up over the first count's; then the metrics, "
              "as in the table above.\n")
        print(table(["phi_min_count", *(f"{row} {what}" for row in ROWS for what in (
                         "entries read", "scoring cpu s", "speed-up")),
                     *(f"{row} {m}" for row in ROWS for m in METRICS)], rows) + "\n",
              flush=True)
    if args.part in ("coengagement", "all"):
        done = {g: stages.run(f"share-{g:g}", lambda g=g: run_share(fitted, chunks, g))
                for g in args.shares}
        first = done[args.shares[0]]
        rows = []
        for g, d in done.items():
            cells = [f"{g:g}", f"{d['fit_cpu']:.1f}", f"{d['fit_cpu'] / first['fit_cpu']:.2f}",
                     f"{d['score_cpu']:.1f}", f"{d['score_cpu'] / first['score_cpu']:.2f}",
                     f"{d['entries']:,}"]
            cells += against(d["reports"]["MiCRO"],
                             None if g == args.shares[0] else first["reports"]["MiCRO"])
            rows.append(cells)
        print(f"## coengagement: MiCRO's share against {args.shares[0]:g}\n")
        print("The cpu seconds of partial_fit and of MiCRO's scoring over the test chunks and "
              "their ratios to the first share's, the co-engaged items' entries after the "
              "last chunk, and the metrics, as in the tables above.\n")
        print(table(["coengagement", "partial_fit cpu s", "ratio", "scoring cpu s", "ratio",
                     "co-engaged entries", *(f"MiCRO {m}" for m in METRICS)], rows) + "\n",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
