"""The ``sklearn-micro`` command line."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from . import __version__
from .datasets._presets import PRESETS
from .experiment._commands import METHODS, CommandError

# TwitterFaveGraph at 1/600 (users, items, engagements) in 16 chunks with 100 interests, so
# that each interest's chunk holds the paper's 295 engagements and 13.5 new items (K = 5,000,
# 192 chunks); the shape from the paper's figures: docs/datasets.md
DEFAULT_LOG = dict(n_users=11167, n_items=21667, n_chunks=16, n_interests=100,
                   n_engagements=471667, interests_per_user=8.0, item_lifetime=2.5,
                   item_appeal=1.7, random_state=0)
DEFAULT_SCALE = 0.01  # of a --preset's log

DESCRIPTION = """\
Run the MiCRO paper's experiment: train on the first chunks of an engagement log, then
retrieve candidates for each later chunk with the state after the one before (the rolling
protocol), and compare MiCRO with the ANN and Popularity baselines. MiCRO is reported
twice: "MiCRO (paper)" is the paper's exact model (MiCRO(personal=0, popularity=0,
phi_decay=0)), "MiCRO" the estimator's defaults (the user's recent items and the chunk's
popularity blended in with weights chosen on held-out training chunks, phi carried across
chunks where the training log says it helps).

With no --data, the log is generated from the paper's generative model with ephemeral
items, trending items of skewed appeal and users of several interests: TwitterFaveGraph at
1/600 (11,167 users, 21,667 items, 471,667 engagements) in 16 chunks with 100 planted
interests, sized to finish in well under a minute.
"""

EPILOG = """\
data files:
  CSV (plain, .gz, .zip) or Parquet with a header and columns user, item, chunk (other names
  with --user/--item/--chunk, or unix seconds with --time and --chunk-length); the paper's
  TwitterFaveGraph (user_index, tweet_index, time_chunk) and TwitterFollowGraph
  (user_index, author_index, time_chunk) files as published; and the raw SNAP Higgs
  activity file (higgs-activity_time.txt.gz, 6-hour chunks unless --chunk-length) and
  MovieLens ratings.csv (30-day chunks unless --chunk-length) as they come.

examples:
  sklearn-micro reproduce
  sklearn-micro reproduce --preset fave --scale 0.05 --dim 128
  sklearn-micro reproduce --data ../shared/data/higgs-twitter/higgs-activity_time.txt.gz \\
      --train-chunks 19 --k 200
  sklearn-micro reproduce --data fave.csv.zip --k 5000 --train-chunks 169 --out results
  sklearn-micro reproduce --data fave.csv.zip --k 5000 --train-chunks 169 --out results \\
      --resume        # after a run that was stopped: carry on from its checkpoints

With --preset, the log is the paper's fave (192 chunks, the last 23 tested) or follow (25
chunks, the last 7 tested) drawn at --scale, with K the paper's 5,000 times the scale; the
draw is written once to OUT/logs (a file per preset, scale, seed and package version) and
read from there by later runs. --k and --train-chunks override the preset's.

Each stage (drawing a preset, load, graph embedding, clustering, each method's fit and
rolling evaluation) is timed and its peak memory read; the table is printed at the end and
written to OUT/stages.json. Checkpoints go to OUT/checkpoints (written atomically); --resume takes
every finished stage, and the rolling evaluation's last saved test chunk, from there.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sklearn-micro", description="MiCRO: multi-interest candidate retrieval online.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="command")
    rep = sub.add_parser(
        "reproduce", help="run the paper's experiment (a generated log by default)",
        description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    rep.add_argument("--data", metavar="PATH", help="an engagement log file (see below); "
                     "default: a generated log")
    rep.add_argument("--preset", choices=sorted(PRESETS), default=None,
                     help="draw the paper's fave or follow log at --scale (cached in --out) "
                          "and run with its K and its train/test split")
    rep.add_argument("--scale", type=float, default=None, metavar="S",
                     help="the fraction of the paper's log a --preset draws, from 0.01 to 1 "
                          f"(default: {DEFAULT_SCALE})")
    rep.add_argument("--k", type=int, default=None, metavar="K",
                     help="number of interests of MiCRO (default: the preset's, else 100)")
    rep.add_argument("--train-chunks", type=int, default=None, metavar="N",
                     help="train on the first N chunks, test on the rest (default: the "
                          "preset's split, else all but the last quarter)")
    rep.add_argument("-m", type=int, default=100, metavar="M",
                     help="candidates retrieved per user and chunk (default: 100)")
    rep.add_argument("--out", default="micro-results", metavar="DIR",
                     help="folder for the table, the per-chunk plots, the per-stage "
                          "figures (stages.json) and the checkpoints (default: ./micro-results)")
    rep.add_argument("--baselines", default="ANN,Popularity", metavar="LIST",
                     help="comma-separated baselines among ANN, Popularity, RecentItems, ALS, "
                          "ItemKNN, RP3beta (default: ANN,Popularity); --resume may name "
                          "others than the stopped run did, to add a baseline to a finished "
                          "run")
    rep.add_argument("--dim", type=int, default=64, metavar="D",
                     help="dimensions of the graph embedding (default: 64)")
    rep.add_argument("--epochs", type=int, default=None, metavar="E",
                     help="ALS epochs of the graph embedding (default: GraphEmbedder's, "
                          "10; the paper's: 20)")
    rep.add_argument("--negative-weight", default=None, metavar="W",
                     help="the graph embedding's total weight of a user's unengaged pairs, "
                          "spread over the items (GraphEmbedder's negative_weight), or none "
                          "for 1 a pair (default: the preset's, else none)")
    rep.add_argument("--beta", type=float, default=None, metavar="B",
                     help="both MiCRO rows' Dirichlet prior of phi over a chunk's items "
                          "(MiCRO's beta; default: the preset's, 0.0001 / scale, else "
                          "MiCRO's 0.01)")
    _add_columns(rep, "--data")
    rep.add_argument("--phi-min-count", type=float, default=0.0, metavar="C",
                     help="both MiCRO rows score an item from an interest only where it has "
                          "at least C of the interest's engagements in the latest chunk "
                          "(default: 0, every count: the exact top M)")
    rep.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    rep.add_argument("--n-jobs", type=int, default=-1, metavar="N",
                     help="threads of every estimator (default: -1, all cores)")
    rep.add_argument("--resume", action="store_true",
                     help="carry on a run that was stopped, from the checkpoints in --out "
                          "(the last finished stage or test chunk)")
    rep.add_argument("--no-checkpoints", action="store_true",
                     help="save no checkpoints in --out (a stopped run starts over)")
    rep.add_argument("--save-model", default=None, metavar="DIR",
                     help="save each method's fitted model in DIR (METHOD.skops, with "
                          "persistence.dump) after its evaluation, having taken every test "
                          "chunk: models to serve or inspect")
    rep.add_argument("--live", action="store_true",
                     help="also replay the test chunks engagement by engagement from each "
                          "method's fitted model (the prequential protocol, docs: Live "
                          "retrieval) and print MiCRO live beside chunk-only MiCRO and the "
                          "baselines live")
    rep.add_argument("--quiet", action="store_true", help="no progress bars")
    _add_serve(sub)
    _add_journey(sub)
    return parser


def _add_columns(parser, what: str) -> None:
    """The options naming the columns of a log file, shared by every command that reads one."""
    parser.add_argument("--user", default="user", help=f"user column of {what} (default: user)")
    parser.add_argument("--item", default="item", help=f"item column of {what} (default: item)")
    parser.add_argument("--chunk", default=None,
                        help=f"chunk column of {what} (default: chunk)")
    parser.add_argument("--time", default=None, metavar="COLUMN",
                        help=f"a unix-seconds column of {what} to cut into chunks instead")
    parser.add_argument("--chunk-length", type=float, default=None, metavar="SECONDS",
                        help="chunk length for --time or the raw Higgs/MovieLens files")
    parser.add_argument("--origin", type=int, default=None, metavar="UNIX_SECONDS",
                        help="with --time: where chunk 0 starts (default: the earliest time "
                             "of the file)")


FIT_DESCRIPTION = """\
Fit a model on an engagement log and save it (sklearn_micro.persistence.dump; .skops or
.pkl). By default a Pipeline of GraphEmbedder, SphericalKMeans(--k) and MiCRO, whose
blend weights are chosen on held-out training chunks; --method fits the paper's exact
model or a baseline instead. With --train-chunks N, the pipeline is fitted on the first N
chunks and takes each later chunk with partial_fit, so the model is at the log's latest
chunk either way. With --time, the model records how times became chunks (the column, the
chunk length and the origin): `update` numbers the chunks of a later file the same way.
"""

FIT_EPILOG = """\
examples:
  sklearn-micro fit engagements.csv --time timestamp --chunk-length 21600 --out model.skops
  sklearn-micro fit ratings.csv --user userId --item movieId --time timestamp \\
      --chunk-length 2592000 --k 25 --out movielens.skops
  sklearn-micro fit log.parquet --method Popularity --out popularity.skops
"""


def _add_journey(sub) -> None:
    from .experiment._commands import _BLOCK_USERS

    fit = sub.add_parser("fit", help="fit a model on a log file and save it",
                         description=FIT_DESCRIPTION, epilog=FIT_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    fit.add_argument("log", metavar="LOG", help="an engagement log file, as reproduce --data")
    fit.add_argument("--out", required=True, metavar="MODEL",
                     help="the model file to write (.skops or .pkl)")
    fit.add_argument("--method", default="MiCRO", metavar="NAME",
                     help=f"one of {', '.join(METHODS)} (default: MiCRO)")
    fit.add_argument("--k", default="auto", metavar="K",
                     help="MiCRO's number of interests, or auto: round(sqrt(items / 2)) "
                          "(default: auto)")
    fit.add_argument("--dim", type=int, default=64, metavar="D",
                     help="dimensions of the graph embedding (default: 64)")
    fit.add_argument("--train-chunks", type=int, default=None, metavar="N",
                     help="fit on the first N chunks, then take the later ones with "
                          "partial_fit (default: fit on the whole log)")
    _add_columns(fit, "LOG")
    fit.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    fit.add_argument("--n-jobs", type=int, default=-1, metavar="N",
                     help="threads of every estimator (default: -1, all cores)")
    fit.add_argument("--quiet", action="store_true", help="no progress bars")

    upd = sub.add_parser(
        "update", help="apply later chunks from a file to a saved model",
        description="Apply the chunks of CHUNKS_FILE, in order, to a saved model with "
                    "partial_fit, and save it in place (or to --out) atomically: a chunk "
                    "refused leaves MODEL as it was. A model fitted with --time numbers the "
                    "file's times with its own chunking unless --chunk names a chunk column.")
    upd.add_argument("model", metavar="MODEL", help="a saved model (.skops or .pkl)")
    upd.add_argument("chunks", metavar="CHUNKS_FILE",
                     help="one or more chunks later than the model's latest, as a log file")
    upd.add_argument("--out", default=None, metavar="PATH",
                     help="write the updated model here instead of replacing MODEL")
    _add_columns(upd, "CHUNKS_FILE")
    upd.add_argument("--quiet", action="store_true", help="no progress bars")

    rec = sub.add_parser(
        "recommend", help="write batch candidates for many users",
        description="Write the m best candidates of the model's latest chunk for each user, "
                    "one row per (user, rank, item, score), rank from 1, to a Parquet or CSV "
                    "file. Users are ranked --block at a time, each block written as it "
                    "comes: memory holds one block.")
    rec.add_argument("model", metavar="MODEL", help="a saved model (.skops or .pkl)")
    who = rec.add_mutually_exclusive_group()
    who.add_argument("--users", default=None, metavar="FILE",
                     help="the users: one id a line, or a CSV with a user column")
    who.add_argument("--all", action="store_true", help="every user the model knows")
    rec.add_argument("-m", type=int, default=100, metavar="M",
                     help="candidates per user (default: 100)")
    rec.add_argument("--out", required=True, metavar="FILE",
                     help="the candidates file to write (.parquet or .csv)")
    rec.add_argument("--exclude-seen", action="store_true",
                     help="leave out items the user has engaged with")
    rec.add_argument("--block", type=int, default=_BLOCK_USERS, metavar="N",
                     help=f"users ranked at a time (default: {_BLOCK_USERS})")
    rec.add_argument("--quiet", action="store_true", help="no progress bar")


SERVE_DESCRIPTION = """\
Serve a fitted model (a MiCRO, a baseline, or a Pipeline ending in one, saved by
sklearn_micro.persistence.dump) as JSON over HTTP: /health, /recommend, /similar, /explain,
/engagements, /chunks, /chunks/close, /metrics and /openapi.json. Engagements are synced
to an event log in the state folder before they are acknowledged, then observed into the
model; each closed chunk is applied with partial_fit in a separate process, saved to the
state folder, then swapped in; a restart serves the newest complete snapshot newer than
MODEL, else MODEL, and replays the event log after it. Needs the serve extra:
pip install "sklearn-micro[serve]". See the Serving page of the documentation.
"""


def _add_serve(sub) -> None:
    srv = sub.add_parser("serve", help="serve a fitted model over HTTP (extra: serve)",
                         description=SERVE_DESCRIPTION,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    srv.add_argument("model", metavar="MODEL",
                     help="a model saved by sklearn_micro.persistence.dump (.skops or .pkl)")
    srv.add_argument("--host", default="127.0.0.1", help="address to listen on "
                     "(default: 127.0.0.1)")
    srv.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    srv.add_argument("--state-dir", default=None, metavar="DIR",
                     help="folder of the saved updates (default: MODEL.d beside MODEL)")
    srv.add_argument("--keep", type=int, default=3, metavar="N",
                     help="saved updates kept (default: 3)")
    srv.add_argument("--queue", type=int, default=4, metavar="N",
                     help="chunks queued or being applied, at most (default: 4)")
    srv.add_argument("--max-users", type=int, default=1000, metavar="N",
                     help="users (or items) in one request, at most (default: 1000)")
    srv.add_argument("--max-m", type=int, default=1000, metavar="M",
                     help="largest m of a request (default: 1000)")
    srv.add_argument("--max-batch", type=int, default=256, metavar="N",
                     help="users (or items) answered by one model call (default: 256)")
    srv.add_argument("--batch-wait-ms", type=float, default=0.0, metavar="MS",
                     help="milliseconds a batch waits for more requests when the model is "
                          "free (default: 0: batches are what arrived while it was busy)")
    srv.add_argument("--chunk-seconds", type=float, default=None, metavar="S",
                     help="close the open chunk S seconds after it opened, if it holds "
                          "engagements (default: closed by POST /chunks/close or by an "
                          "engagement of the next chunk)")
    srv.add_argument("--log-level", default="info",
                     choices=["critical", "error", "warning", "info", "debug"])
    srv.add_argument("--access-log", action="store_true", help="log every request")


def serve(args) -> int:
    for value, flag in ((args.keep, "--keep"), (args.queue, "--queue"),
                        (args.max_users, "--max-users"), (args.max_m, "--max-m"),
                        (args.max_batch, "--max-batch")):
        if value < 1:
            raise CommandError(f"{flag} must be a positive integer; got {value}")
    if args.chunk_seconds is not None and not args.chunk_seconds > 0:
        raise CommandError(f"--chunk-seconds must be positive; got {args.chunk_seconds:g}")
    if not 0 <= args.batch_wait_ms <= 1000:
        raise CommandError(f"--batch-wait-ms must be between 0 and 1000; got "
                           f"{args.batch_wait_ms:g}")
    try:
        from . import serving
        from .serving.validation import Limits
    except ImportError as exc:
        raise CommandError(f"serving needs the serve extra ({exc}): pip install "
                           f'"sklearn-micro[serve]"') from None
    from .serving.snapshots import StateDirLocked

    try:
        serving.run(args.model, host=args.host, port=args.port, log_level=args.log_level,
                    access_log=args.access_log, state_dir=args.state_dir, keep=args.keep,
                    queue_size=args.queue, max_batch=args.max_batch,
                    batch_wait=args.batch_wait_ms / 1000, chunk_seconds=args.chunk_seconds,
                    limits=Limits(max_users=args.max_users, max_m=args.max_m))
    except (StateDirLocked, TypeError) as exc:
        raise CommandError(str(exc)) from None
    return 0


def _preset_path(args) -> Path:
    """Where a preset's draw is cached: one file per preset, scale, seed and version (and
    the generator's parameters, which a development version may change)."""
    import hashlib

    from .datasets import preset_parameters

    params = preset_parameters(args.preset, args.scale).generator
    digest = hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:8]
    return (Path(args.out) / "logs" / f"{args.preset}-scale{args.scale:g}-seed{args.seed}-"
            f"{__version__}-{digest}.parquet")


def _draw(args, stages) -> Path:
    """The drawing stage: the preset's log written to its cache, or found there."""
    from .datasets import write_preset
    from .datasets._files import import_pyarrow

    path = _preset_path(args)
    with stages.measure("drawing") as stage:
        if path.is_file():
            # resuming, the figures of the run that drew it; else this run's read
            stage.resumed = stages.measured("drawing")
            stage.note = "" if stage.resumed else f"cached in {path.parent}"
            stage.work = import_pyarrow().parquet.ParquetFile(path).metadata.num_rows
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            stage.work = write_preset(path, args.preset, args.scale, random_state=args.seed)
    return path


def _load(args, drawn: Path | None = None):
    """The run's log, what it is, and how times became chunks (None but with --time)."""
    from . import datasets
    from .experiment._commands import LogColumns, _read_compact, read_engagements

    if drawn is not None:
        return (_read_compact(drawn, user="user", item="item", chunk="chunk"),
                f"the {args.preset} preset at scale {args.scale:g}, seed {args.seed} "
                f"({drawn})", None)
    if args.data is None:
        return datasets.make_engagements(**{**DEFAULT_LOG, "random_state": args.seed}), \
            "a generated log " + ", ".join(f"{k}={v}" for k, v in DEFAULT_LOG.items()
                                           if k != "random_state"), None
    return read_engagements(args.data, LogColumns.of(args), option="--data")


def _config(args) -> dict:
    """What a run's checkpoints depend on: the data file and every setting of the run."""
    config = {name: getattr(args, name) for name in (
        "data", "k", "train_chunks", "m", "baselines", "dim", "user", "item", "chunk", "time",
        "chunk_length", "seed")}
    if args.data is not None and Path(args.data).is_file():
        stat = Path(args.data).stat()
        config["data"] = str(Path(args.data).resolve())
        config["data_size"] = stat.st_size
        config["data_mtime"] = int(stat.st_mtime)
    if args.preset is not None:  # likewise, runs on a --data file or the default log
        config.update(preset=args.preset, scale=args.scale, version=__version__)
    if args.phi_min_count:  # runs from before the option resume as they were
        config["phi_min_count"] = args.phi_min_count
    if args.epochs is not None:  # likewise
        config["epochs"] = args.epochs
    if args.negative_weight is not None:  # likewise
        config["negative_weight"] = args.negative_weight
    if args.beta is not None:  # --data runs without it likewise; a preset always sets it
        config["beta"] = args.beta
    if args.origin is not None:  # likewise
        config["origin"] = args.origin
    return config


def _negative_weight(value):
    """``--negative-weight``: None (not given, or "none") or a positive finite float."""
    if value is None or (isinstance(value, str) and value.lower() == "none"):
        return None
    try:
        weight = float(value)
    except ValueError:
        weight = float("nan")
    if not 0 < weight < float("inf"):
        raise CommandError(f"--negative-weight must be a positive number or none; got "
                           f"{value}")
    return weight


def reproduce(args) -> int:
    from functools import partial

    from ._log import distinct
    from .experiment import (
        BASELINES,
        compact_log,
        comparison_table,
        plot_per_chunk,
        prequential_table,
        results_table,
        run_experiment,
        split_chunks,
    )
    from .experiment._commands import KeepingStages, SavingStages, live_reports, save_models

    baselines = [b.strip() for b in args.baselines.split(",") if b.strip()]
    unknown = [b for b in baselines if b not in BASELINES]
    if unknown:
        raise CommandError(f"--baselines must be among {', '.join(BASELINES)}; got "
                           f"{', '.join(unknown)}")
    if args.scale is not None and args.preset is None:
        raise CommandError("--scale applies to --preset only; name the log to draw, "
                           f"--preset {' or '.join(sorted(PRESETS))}")
    if args.preset is not None:
        if args.data is not None:
            raise CommandError("--preset draws its own log; give --data or --preset, not "
                               "both")
        if args.scale is None:
            args.scale = DEFAULT_SCALE
        if not 0.01 <= args.scale <= 1:
            raise CommandError(f"--scale must be a fraction of the paper's log from 0.01 "
                               f"to 1; got {args.scale:g}")
        from .datasets import preset_parameters

        preset = preset_parameters(args.preset, args.scale)
        args.k = preset.n_interests if args.k is None else args.k
        if args.negative_weight is None:
            args.negative_weight = preset.negative_weight
        if args.beta is None:
            args.beta = preset.beta
        if args.train_chunks is None:
            args.train_chunks = preset.train_chunks
    elif args.k is None:
        args.k = 100
    if args.data is None:
        given = [flag for flag, value, default in (
            ("--user", args.user, "user"), ("--item", args.item, "item"),
            ("--chunk", args.chunk, None), ("--time", args.time, None),
            ("--chunk-length", args.chunk_length, None), ("--origin", args.origin, None))
            if value != default]
        if given:
            raise CommandError(f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} "
                               "to --data only; the generated log has no columns to choose")
    for value, flag in ((args.k, "--k"), (args.m, "-m"), (args.dim, "--dim"),
                        (args.epochs, "--epochs")):
        if value is not None and value < 1:
            raise CommandError(f"{flag} must be a positive integer; got {value}")
    args.negative_weight = _negative_weight(args.negative_weight)
    if args.beta is not None and not 0 < args.beta < float("inf"):
        raise CommandError(f"--beta must be a positive number; got {args.beta:g}")
    if not 0 <= args.phi_min_count < float("inf"):
        raise CommandError(f"--phi-min-count must be a finite count of at least 0; got "
                           f"{args.phi_min_count:g}")
    if args.chunk_length is not None and not 0 < args.chunk_length < float("inf"):
        raise CommandError(f"--chunk-length must be a positive number of seconds; got "
                           f"{args.chunk_length:g}")
    if args.resume and args.no_checkpoints:
        raise CommandError("--resume needs the checkpoints that --no-checkpoints leaves out")
    started = time.perf_counter()
    out = Path(args.out)
    checkpoints = None if args.no_checkpoints else out / "checkpoints"
    if args.resume and not (checkpoints / "config.json").is_file():
        raise CommandError(f"--resume: no checkpoints in {str(checkpoints)!r} (--out)")
    saved_models = {}
    if args.save_model is not None:
        from .persistence import _import_skops

        try:
            _import_skops()
        except ImportError as exc:
            raise CommandError(f"--save-model: {exc}") from None

        def save(method, model, paired):
            saved_models.update(save_models(method, model, test, Path(args.save_model),
                                            chunking, paired=paired))
    try:
        stages = (KeepingStages if args.save_model is None else partial(SavingStages, save=save))(
            checkpoints, resume=args.resume, config=_config(args), may_differ=("baselines",),
            keep=args.live)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    drawn = None if args.preset is None else _draw(args, stages)

    def load():
        log, source, chunking = _load(args, drawn)
        if len(log) == 0:
            raise CommandError(f"{source} holds no engagements")
        return compact_log(log), source, chunking

    # a checkpoint of a run from before the chunking was kept holds (log, source)
    log, source, chunking = (*stages.run("load", load, work=0), None)[:3]
    stages.stages[-1].work = len(log)
    if log.chunk.min() == log.chunk.max():
        raise CommandError(f"{source} holds one chunk ({log.chunk.min()}); the experiment "
                           "needs at least two: it trains on the first and tests on the next")
    train, test = split_chunks(log, args.train_chunks)
    n_train_items = len(distinct(train.item))
    if args.k > n_train_items:
        raise CommandError(f"--k must be at most the {n_train_items:,} distinct items of the "
                           f"training chunks; got {args.k:,}")
    print(f"data: {source}")
    print(f"{len(log):,} engagements, {len(distinct(log.user)):,} users, "
          f"{len(distinct(log.item)):,} items, chunks {log.chunk.min()}..{log.chunk.max()}; "
          f"train on chunks up to {train.chunk.max()} ({len(train):,} engagements), "
          f"test on {len(distinct(test.chunk))} chunks ({len(test):,} engagements)",
          flush=True)
    del log
    m_values = sorted({min(50, args.m), args.m})
    reports = run_experiment(train, test, n_interests=args.k,
                             methods=["MiCRO (paper)", "MiCRO", *baselines],
                             n_components=args.dim, m_values=m_values,
                             random_state=args.seed, progress=not args.quiet,
                             n_jobs=args.n_jobs, stages=stages,
                             micro_params={"phi_min_count": args.phi_min_count,
                                           **({} if args.beta is None
                                              else {"beta": args.beta})},
                             embedding_params={
                                 **({} if args.epochs is None
                                    else {"iterations": args.epochs}),
                                 **({} if args.negative_weight is None
                                    else {"negative_weight": args.negative_weight})})
    overall = results_table(reports, m_values, intervals=True)
    per_user = results_table(reports, m_values, aggregate="per_user", intervals=True)
    against = comparison_table(reports, "MiCRO", [f"recall@{args.m}", f"mrr@{args.m}"])
    text = (f"Mean over all (user, chunk) points (± the half width of a 95% interval, users "
            f"as the unit):\n\n{overall}\n\n"
            f"Per-user aggregate over all test chunks (the paper's table):\n\n{per_user}\n\n"
            f"MiCRO against each method: relative difference of the mean over all points "
            f"[95% interval, paired by user]:\n\n{against}\n")
    if args.live:
        started_live = time.perf_counter()
        live = live_reports(stages.kept, test, args.m, random_state=args.seed)
        missed = [name for name in reports if name not in stages.kept
                  and name != "MiCRO (paper)"]  # the paper's model is MiCRO chunk-only
        text += (f"\nLive (the prequential protocol: each test chunk replayed in a seeded "
                 f"shuffle, in batches of a 50th of a chunk; each batch's users scored "
                 f"before the batch is seen, against their items of the batch; a 95% "
                 f"interval, users as the unit):\n\n"
                 f"{prequential_table(live, 'MiCRO chunk-only', args.m)}\n"
                 if "MiCRO chunk-only" in live else "\nLive: MiCRO's model was not fitted "
                 "in this run (its report came from the checkpoints), nothing replayed\n")
        if missed and "MiCRO chunk-only" in live:
            text += (f"\nnot replayed (their reports came from the checkpoints of an earlier "
                     f"run): {', '.join(missed)}\n")
        text += f"\n(the live replay took {time.perf_counter() - started_live:.0f} s)\n"
    print()
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(f"data: {source}\n\n{text}")
    try:
        paths = plot_per_chunk(reports, out, m=args.m)
        print("plots: " + ", ".join(str(p) for p in paths))
    except ImportError as exc:
        print(f"no plots: {exc}")
    print(f"\nPer stage (peak: the process's resident memory during the stage):\n\n"
          f"{stages.table()}\n")
    (out / "stages.json").write_text(json.dumps(
        {**stages.to_dict(), "seconds": time.perf_counter() - started}, indent=1))
    if args.save_model is not None:
        missed = [name for name in reports if name not in saved_models]
        print("models: " + ", ".join(f"{name} {path}" for name, path in saved_models.items())
              + (f"; not saved (their reports came from the checkpoints of an earlier "
                 f"run): {', '.join(missed)}" if missed else ""))
    print(f"table: {out / 'results.md'}; {time.perf_counter() - started:.0f} s in all")
    return 0


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    from .experiment._commands import fit_command, recommend_command, update_command

    command = {"serve": serve, "reproduce": reproduce, "fit": fit_command,
               "update": update_command, "recommend": recommend_command}[args.command]
    try:
        return command(args)
    except CommandError as exc:
        print(f"sklearn-micro: error: {exc}", file=sys.stderr)
    except (OSError, ValueError, ImportError) as exc:
        print(f"sklearn-micro: error: {exc}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
