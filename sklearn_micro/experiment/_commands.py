"""The command line's journey from a log to served candidates: ``fit``, ``update`` and
``recommend``, the log files they read, and the files they write.

`read_engagements` reads a log file as ``reproduce --data`` does (CSV, zipped CSV or
Parquet; chunk or unix-time columns; the paper's files and the raw Higgs and MovieLens
files), and says how timestamps became chunks (`Chunking`). `fit_command`,
`update_command` and `recommend_command` take the parsed arguments of ``sklearn-micro
fit``, ``update`` and ``recommend``. Every file is written under a temporary name in its
folder and renamed when complete (`atomic_path`), so a reader never sees half of one.
"""

from __future__ import annotations

import copy
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from . import Stages

__all__ = ["CHUNKING_ATTRIBUTE", "METHODS", "Chunking", "CommandError", "LogColumns",
           "SavingStages", "atomic_path", "fit_command", "read_engagements", "recommend_command",
           "update_command"]

#: Where a saved model records its `Chunking`: an attribute of its recommender (the
#: Pipeline's last step), a dict of `Chunking`'s fields.
CHUNKING_ATTRIBUTE = "chunking_"

#: ``fit --method``: the estimator's defaults, the paper's exact model and the baselines.
METHODS = ("MiCRO", "MiCRO (paper)", "ANN", "Popularity", "RecentItems", "ALS", "ItemKNN",
           "RP3beta")

# users ranked by one recommend call of `recommend_command`
_BLOCK_USERS = 4096


class CommandError(Exception):
    """An error the command line reports in one line."""


# ------------------------------------------------------------------------ the log files


@dataclass(frozen=True)
class Chunking:
    """How unix times became chunk numbers: chunk ``c`` holds the times in
    ``[origin + c * chunk_length, origin + (c + 1) * chunk_length)``.

    Parameters
    ----------
    time : str
        The timestamp column (unix seconds) of the file the model was fitted on.
    chunk_length : float or int
        Seconds per chunk.
    origin : int
        The unix time where chunk 0 starts.
    """

    time: str
    chunk_length: float | int
    origin: int

    def chunks(self, times: np.ndarray) -> np.ndarray:
        """The chunk number of each unix time."""
        from ..datasets._readers import _to_chunks

        return _to_chunks(np.asarray(times, np.int64), self.origin, self.chunk_length)

    def describe(self) -> str:
        return (f"column {self.time!r} cut into chunks of {self.chunk_length:g} s from unix "
                f"time {self.origin}")

    @classmethod
    def of(cls, model) -> Chunking | None:
        """The chunking a saved model records, or None."""
        from ..base import final_step

        found = getattr(final_step(model), CHUNKING_ATTRIBUTE, None)
        return None if found is None else cls(**found)

    def record(self, model) -> None:
        """Record this chunking in ``model`` (its recommender), to be saved with it."""
        from ..base import final_step

        setattr(final_step(model), CHUNKING_ATTRIBUTE, asdict(self))


@dataclass(frozen=True)
class LogColumns:
    """Which columns of a log file make the log, as ``--user``, ``--item``, ``--chunk``,
    ``--time``, ``--chunk-length`` and ``--origin`` name them."""

    user: str = "user"
    item: str = "item"
    chunk: str | None = None
    time: str | None = None
    chunk_length: float | None = None
    origin: int | None = None

    @classmethod
    def of(cls, args) -> LogColumns:
        return cls(args.user, args.item, args.chunk, args.time, args.chunk_length,
                   getattr(args, "origin", None))

    def given(self) -> list[str]:
        """The options given, by their flags."""
        default = LogColumns()
        return [f"--{name.replace('_', '-')}" for name in asdict(self)
                if getattr(self, name) != getattr(default, name)]

    def check(self) -> None:
        if self.chunk is not None and self.time is not None:
            raise CommandError("give --chunk (a chunk column) or --time (a unix-seconds "
                               "column), not both")
        if self.chunk_length is not None and not 0 < self.chunk_length < float("inf"):
            raise CommandError(f"--chunk-length must be a positive number of seconds; got "
                               f"{self.chunk_length:g}")
        if self.time is not None and self.chunk_length is None:
            raise CommandError("--time needs --chunk-length (seconds per chunk)")
        if self.origin is not None and self.time is None:
            raise CommandError("--origin applies to --time only")


def _header(path: Path) -> list[str]:
    from ..datasets._files import column_names, file_source

    return column_names(file_source(path))


def read_engagements(path, columns: LogColumns = LogColumns(), *, option: str = "--data"):
    """Read a log file as the command line does.

    Parameters
    ----------
    path : str or Path
        A CSV (plain, .gz, .zip) or Parquet file with a header; the paper's
        TwitterFaveGraph and TwitterFollowGraph files; the raw SNAP Higgs activity file or
        MovieLens ``ratings.csv`` (when no column is named).
    columns : LogColumns
        The columns to read, and with ``time`` how its unix seconds become chunks.
    option : str
        The option or argument that named the file, for the messages.

    Returns
    -------
    log : EngagementLog
        Compact (ids narrowed where they fit, sorted by chunk).
    source : str
        The file, and its kind when recognized.
    chunking : Chunking or None
        How times became chunks, when ``columns.time`` is given.
    """
    from .. import datasets

    columns.check()
    path = Path(path)
    if not path.is_file():
        raise CommandError(f"no file at {str(path)!r} ({option})")
    name = path.name.lower()
    hours = None if columns.chunk_length is None else columns.chunk_length / 3600
    raw = columns.time is None and columns.chunk is None and columns.user == "user" \
        and columns.item == "item"
    if raw and name.startswith("higgs-activity"):
        return _compact(datasets.load_higgs(path, chunk_hours=hours or 6)), \
            f"{path} (Higgs)", None
    if raw and name == "ratings.csv":
        days = None if hours is None else hours / 24
        return _compact(datasets.load_movielens(path, chunk_days=days or 30)), \
            f"{path} (MovieLens)", None
    if columns.chunk_length is not None and columns.time is None:
        raise CommandError("--chunk-length applies to --time, or to the raw Higgs and "
                           "MovieLens files")
    if raw:
        found = set(_header(path))
        for item in ("tweet_index", "author_index"):
            if {"user_index", item, "time_chunk"} <= found:
                kind = "TwitterFaveGraph" if item == "tweet_index" else "TwitterFollowGraph"
                return _read_compact(path, user="user_index", item=item,
                                     chunk="time_chunk"), f"{path} ({kind})", None
    if columns.time is not None:
        return _read_timed(path, columns, option)
    return _read_compact(path, user=columns.user, item=columns.item,
                         chunk=columns.chunk), str(path), None


def _compact(log):
    from . import compact_log

    return compact_log(log)


def _read_compact(path: Path, **names):
    """The file's log in compact arrays, read one chunk at a time when the file is sorted by
    chunk (the paper's files are), else read whole and sorted."""
    from .. import datasets
    from ..datasets._files import import_pyarrow
    from . import compact_chunks

    n_rows = None
    if path.suffix.lower() in (".parquet", ".pq"):
        n_rows = import_pyarrow().parquet.ParquetFile(path).metadata.num_rows
    try:
        return compact_chunks(datasets.iter_log_chunks(path, **names), n_rows=n_rows)
    except ValueError as exc:
        if "sorted by chunk" not in str(exc):
            raise
    return _compact(datasets.read_log(path, **names))


def _read_timed(path: Path, columns: LogColumns, option: str):
    """A log whose ``columns.time`` holds unix seconds, cut into chunks from ``origin`` (by
    default the earliest time of the file)."""
    from .._log import EngagementLog
    from ..datasets import read_log

    raw = read_log(path, user=columns.user, item=columns.item, chunk=columns.time)
    if len(raw) == 0:
        raise CommandError(f"{path} holds no engagements ({option})")
    earliest = int(raw.chunk.min())
    origin = earliest if columns.origin is None else columns.origin
    if earliest < origin:
        raise CommandError(f"{path} holds time {earliest}, before --origin {origin}: chunks "
                           "before chunk 0 cannot be numbered")
    chunking = Chunking(columns.time, columns.chunk_length, origin)
    log = EngagementLog(raw.user, raw.item, chunking.chunks(raw.chunk))
    return _compact(log), str(path), chunking


# ------------------------------------------------------------------------ files written


@contextmanager
def atomic_path(path) -> Iterator[Path]:
    """A temporary path beside ``path`` (with its suffix) to write; renamed to ``path`` once
    the block ends without an error (synced first), removed otherwise."""
    from ..serving.snapshots import publish

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".tmp-{path.stem}-{os.getpid()}-{uuid.uuid4().hex[:8]}{path.suffix}"
    try:
        yield tmp
        publish(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def save_model(model, path) -> Path:
    """``persistence.dump`` of ``model`` to ``path``, atomically, with ``verbose=0`` on
    every step: a saved model's ``partial_fit`` (in the service's update process, say)
    prints nothing."""
    from ..persistence import dump

    quiet = {name: 0 for name in model.get_params(deep=True)
             if name == "verbose" or name.endswith("__verbose")}
    model.set_params(**quiet)
    with atomic_path(path) as tmp:
        dump(model, tmp)
    return Path(path)


def _check_model_path(path: Path, option: str) -> None:
    from ..persistence import _FORMATS

    if path.suffix.lower() not in _FORMATS:
        raise CommandError(f"{option} must end in {', '.join(sorted(_FORMATS))} (the format "
                           f"it is saved in); got {str(path)!r}")


def load_model(path) -> object:
    from ..persistence import load

    path = Path(path)
    _check_model_path(path, "MODEL")
    if not path.is_file():
        raise CommandError(f"no model at {str(path)!r} (MODEL)")
    return load(path)


# ------------------------------------------------------------------------ reproduce


class KeepingStages(Stages):
    """`Stages` that, with ``keep``, keep a copy of each method's model as its fit stage
    gives it, before the rolling evaluation moves it on (``reproduce --live`` replays the
    test chunks from it): `kept`, by method."""

    def __init__(self, *args, keep: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self._keep = keep
        self._fitted = {}
        self.kept = {}

    def run(self, name, compute, **kwargs):
        result = super().run(name, compute, **kwargs)
        if name.endswith(" fit"):
            method = name.removesuffix(" fit")
            self._fitted[method] = result
            if self._keep:
                self.kept[method] = copy.deepcopy(result)
        return result


class SavingStages(KeepingStages):
    """`KeepingStages` that hand each method's fitted model to ``save(method, model,
    paired=)`` once its rolling evaluation is over (when its report is saved), then let it
    go; ``paired``: MiCRO's model sampled for its paper's model too (one chain for both)."""

    def __init__(self, *args, save, **kwargs):
        super().__init__(*args, **kwargs)
        self._save = save

    def save(self, name, obj, stage=None) -> bool:
        written = super().save(name, obj, stage)
        method = name.removesuffix(" report")
        if method != name and method in self._fitted:
            paired = method == "MiCRO" and not any(
                stage.name == "MiCRO (paper) fit" for stage in self.stages)
            self._save(method, self._fitted.pop(method), paired=paired)
        return written


def live_reports(models: dict, test, m: int, *, batches_per_chunk: int = 50,
                 random_state=0) -> dict:
    """``reproduce --live``: the prequential replay of the test chunks (each chunk's
    engagements in a seeded shuffle, in ``batches_per_chunk`` batches) from each method's
    model as its fit left it. MiCRO gives three rows: chunk-only (the closed chunks
    alone, the paper's protocol at event granularity), its users' own live engagements
    (``history``) and live (``observe``); each other method one, live. A model that
    cannot observe is replayed chunk-only, and its row says so."""
    from ..model_selection import prequential_evaluate

    n_chunks = len(np.unique(test.chunk))
    batch = max(1, len(test) // n_chunks // batches_per_chunk)

    def replay(model, mode):
        return prequential_evaluate(model, test, batch_size=batch, mode=mode, m_values=m,
                                    random_state=random_state)

    reports = {}
    for method, model in sorted(models.items(), key=lambda item: item[0] != "MiCRO"):
        if method == "MiCRO (paper)":
            continue  # the paper's model answers from the closed chunks: MiCRO chunk-only
        if method == "MiCRO":
            reports["MiCRO chunk-only"] = replay(model, "chunk")
            reports["MiCRO users' own live"] = replay(model, "users")
        can_observe = callable(getattr(model, "observe", None))
        name = f"{method} live" if can_observe else f"{method} chunk-only (cannot observe)"
        reports[name] = replay(model, "live" if can_observe else "chunk")
    return reports


def model_file_name(method: str) -> str:
    """``reproduce --save-model``'s file of a method: ``MiCRO-paper.skops`` and so on."""
    return method.replace(" (paper)", "-paper") + ".skops"


def save_models(method: str, model, test, folder: Path, chunking: Chunking | None, *,
                paired: bool = False) -> dict[str, Path]:
    """Bring ``model``, evaluated on every test chunk but the last, to the last one, and save
    it in ``folder``; with ``paired``, MiCRO's paper's model of the same state beside it."""
    from ..base import partial_fit_through

    partial_fit_through(model, test.take(test.chunk == test.chunk.max()))
    models = {method: model}
    if paired:
        models["MiCRO (paper)"] = model.paper_model()
    saved = {}
    for name, fitted in models.items():
        if chunking is not None:
            chunking.record(fitted)
        saved[name] = save_model(fitted, folder / model_file_name(name))
    return saved


# ------------------------------------------------------------------------ fit


def method_estimator(method: str, *, n_interests, n_components: int, random_state,
                     n_jobs: int, verbose: int):
    """The estimator ``fit --method`` fits on a log: a Pipeline of `GraphEmbedder`,
    `SphericalKMeans` and `MiCRO` (or `ANNRecommender`), or a baseline alone."""
    from sklearn.pipeline import Pipeline

    from ..baselines import (
        ALSRecommender,
        ANNRecommender,
        ItemKNNRecommender,
        PopularityRecommender,
        RecentItemsRecommender,
        RP3betaRecommender,
    )
    from ..cluster import SphericalKMeans
    from ..embedding import GraphEmbedder
    from ..micro import MiCRO

    common = dict(random_state=random_state, n_jobs=n_jobs)
    if method == "Popularity":
        return PopularityRecommender()
    if method == "RecentItems":
        return RecentItemsRecommender()
    if method == "ItemKNN":
        return ItemKNNRecommender(n_jobs=n_jobs)
    if method == "RP3beta":
        return RP3betaRecommender(n_jobs=n_jobs)
    if method == "ALS":
        return ALSRecommender(n_components, **common)
    embed = ("embed", GraphEmbedder(n_components, verbose=verbose, **common))
    if method == "ANN":
        return Pipeline([embed, ("ann", ANNRecommender(**common))])
    paper = {"personal": 0, "popularity": 0, "phi_decay": 0} if method == "MiCRO (paper)" \
        else {}
    return Pipeline([
        embed,
        ("interests", SphericalKMeans(n_interests, verbose=verbose, **common)),
        ("micro", MiCRO(**paper, verbose=verbose, **common)),
    ])


def _n_interests(value: str):
    if value == "auto":
        return "auto"
    try:
        k = int(value)
    except ValueError:
        k = 0
    if k < 1:
        raise CommandError(f"--k must be a positive integer or auto; got {value}")
    return k


def _apply_chunks(model, log, *, progress: bool, what: str) -> list[int]:
    """``partial_fit`` of ``model`` with each chunk of ``log`` in order; the chunks taken."""
    from .._log import iter_chunks
    from ..base import partial_fit_through

    chunks = list(iter_chunks(log.chunk))
    steps = chunks
    if progress and chunks:
        from tqdm.auto import tqdm

        steps = tqdm(chunks, desc=what, unit="chunk")
    for chunk, rows in steps:
        try:
            partial_fit_through(model, log.take(rows))
        except ValueError as exc:
            raise CommandError(f"chunk {chunk}: {exc}") from None
    return [c for c, _ in chunks]


def _summary(model, log, seconds: float) -> list[str]:
    """What a fitted model holds, one line each."""
    from .._log import distinct
    from ..base import final_step

    rec = final_step(model)
    lines = [f"{len(rec.user_ids_):,} users, {len(rec.item_ids_):,} items, "
             f"{len(log):,} engagements in chunks {log.chunk.min()}..{log.chunk.max()} "
             f"({len(distinct(log.chunk))} with engagements); latest chunk "
             f"{rec.latest_chunk_}"]
    if hasattr(rec, "n_interests_"):
        lines.append(f"{rec.n_interests_:,} interests")
    if hasattr(rec, "personal_weight_"):
        lines.append(f"weights chosen on held-out training chunks: personal "
                     f"{rec.personal_weight_:g}, popularity {rec.popularity_weight_:g}, "
                     f"phi_decay {rec.phi_decay_:g}")
    lines.append(f"{seconds:.1f} s")
    return lines


def fit_command(args) -> int:
    """``sklearn-micro fit LOG --out MODEL``."""
    from .._log import distinct, split_chunks

    started = time.perf_counter()
    out = Path(args.out)
    _check_model_path(out, "--out")
    k = _n_interests(args.k)
    for value, flag in ((args.dim, "--dim"), (args.train_chunks, "--train-chunks")):
        if value is not None and value < 1:
            raise CommandError(f"{flag} must be a positive integer; got {value}")
    if args.method not in METHODS:
        raise CommandError(f"--method must be one of {', '.join(METHODS)}; got "
                           f"{args.method}")
    log, source, chunking = read_engagements(args.log, LogColumns.of(args), option="LOG")
    if len(log) == 0:
        raise CommandError(f"{source} holds no engagements (LOG)")
    later = None
    if args.train_chunks is not None:
        n_chunks = int(log.chunk.max()) - int(log.chunk.min()) + 1
        if args.train_chunks > n_chunks:
            raise CommandError(f"--train-chunks must be at most the {n_chunks} chunks of "
                               f"{source}; got {args.train_chunks}")
        if args.train_chunks < n_chunks:
            log, later = split_chunks(log, args.train_chunks)
    if k != "auto" and args.method in ("MiCRO", "MiCRO (paper)"):
        n_items = len(distinct(log.item))
        if k > n_items:
            raise CommandError(f"--k must be at most the {n_items:,} distinct items of the "
                               f"training chunks; got {k:,}")
    print(f"data: {source}")
    if chunking is not None:
        print(f"chunks: {chunking.describe()}")
    print(f"fitting {args.method} on {len(log):,} engagements, chunks "
          f"{log.chunk.min()}..{log.chunk.max()}", flush=True)
    model = method_estimator(args.method, n_interests=k, n_components=args.dim,
                             random_state=args.seed, n_jobs=args.n_jobs,
                             verbose=int(not args.quiet))
    model.fit(log)
    if later is not None:
        taken = _apply_chunks(model, later, progress=not args.quiet, what="later chunks")
        print(f"then took {len(taken)} later chunks with partial_fit "
              f"({taken[0]}..{taken[-1]})")
        log = _joined(log, later)
    if chunking is not None:
        chunking.record(model)
    save_model(model, out)
    for line in _summary(model, log, time.perf_counter() - started):
        print(line)
    print(f"model: {out}")
    return 0


def _joined(first, second):
    from .._log import EngagementLog

    return EngagementLog(*(np.concatenate([getattr(first, c), getattr(second, c)])
                           for c in ("user", "item", "chunk")))


# ------------------------------------------------------------------------ update


def _update_columns(given: LogColumns, recorded: Chunking | None) -> LogColumns:
    """The columns of an update's file: those given, else the model's chunking."""
    if recorded is None or given.chunk is not None:
        if given.time is not None and given.origin is None:
            raise CommandError("--time on a model that records no chunking needs --origin "
                               "(the unix time where the model's chunk 0 starts)")
        return given
    for flag, value, kept in (("--time", given.time, recorded.time),
                              ("--chunk-length", given.chunk_length, recorded.chunk_length),
                              ("--origin", given.origin, recorded.origin)):
        if value is not None and value != kept:
            raise CommandError(f"{flag} {value} differs from the model's chunking "
                               f"({recorded.describe()}); its chunks would not line up")
    return replace(given, time=recorded.time, chunk_length=recorded.chunk_length,
                   origin=recorded.origin)


def update_command(args) -> int:
    """``sklearn-micro update MODEL CHUNKS_FILE [--out PATH]``."""
    from ..base import final_step

    started = time.perf_counter()
    out = Path(args.model if args.out is None else args.out)
    _check_model_path(out, "--out")
    model = load_model(args.model)
    recorded = Chunking.of(model)
    columns = _update_columns(LogColumns.of(args), recorded)
    log, source, _ = read_engagements(args.chunks, columns, option="CHUNKS_FILE")
    if len(log) == 0:
        raise CommandError(f"{source} holds no engagements (CHUNKS_FILE)")
    latest = int(final_step(model).latest_chunk_)
    if int(log.chunk.min()) <= latest:
        raise CommandError(f"CHUNKS_FILE holds chunk {log.chunk.min()}, but the model has "
                           f"taken chunks up to {latest}: give only later chunks")
    print(f"data: {source}")
    taken = _apply_chunks(model, log, progress=not args.quiet, what="chunks")
    save_model(model, out)
    rec = final_step(model)
    print(f"took chunks {', '.join(map(str, taken))} ({len(log):,} engagements); now "
          f"{len(rec.user_ids_):,} users, {len(rec.item_ids_):,} items, latest chunk "
          f"{rec.latest_chunk_}; {time.perf_counter() - started:.1f} s")
    print(f"model: {out}")
    return 0


# ------------------------------------------------------------------------ recommend


def _read_users(path: Path, kind: str) -> np.ndarray:
    """User ids from a file: one a line, or a CSV whose header names a ``user`` column."""
    if not path.is_file():
        raise CommandError(f"no file at {str(path)!r} (--users)")
    with open(path) as f:
        lines = [line.strip() for line in f if line.strip()]
    if lines and "," in lines[0]:
        header = [c.strip() for c in lines[0].split(",")]
        if "user" not in header:
            raise CommandError(f"--users {path}: a CSV needs a user column; its header is "
                               f"{', '.join(header)}")
        col = header.index("user")
        lines = [line.split(",")[col].strip() for line in lines[1:]]
    elif lines and lines[0] == "user":
        lines = lines[1:]
    ids = np.array(lines, dtype=str)
    if kind == "str":
        return ids
    try:
        return ids.astype(np.int64)
    except ValueError:
        bad = next(v for v in ids if not v.lstrip("-").isdigit())
        raise CommandError(f"--users {path}: the model's users are integers; got "
                           f"{bad!r}") from None


class _CandidateWriter:
    """Rows (user, rank, item, score) appended block by block to a Parquet or CSV file."""

    def __init__(self, path: Path):
        self.path = path
        self.parquet = path.suffix.lower() in (".parquet", ".pq")
        self._writer = None
        self._file = None

    def __enter__(self):
        if self.parquet:
            from ..datasets._files import import_pyarrow

            self._pa = import_pyarrow()
        else:
            self._file = open(self.path, "w")
            self._file.write("user,rank,item,score\n")
        return self

    def write(self, user, rank, item, score) -> None:
        if self.parquet:
            pa = self._pa
            table = pa.table({"user": user, "rank": rank.astype(np.int32), "item": item,
                              "score": score.astype(np.float64)})
            if self._writer is None:
                self._writer = pa.parquet.ParquetWriter(self.path, table.schema)
            self._writer.write_table(table)
            return
        for row in zip(user.tolist(), rank.tolist(), item.tolist(), score.tolist(),
                       strict=True):
            self._file.write("{},{},{},{!r}\n".format(*row))

    def __exit__(self, *exc):
        if self.parquet:
            if self._writer is None:  # no rows: an empty file with the columns
                pa = self._pa
                self._writer = pa.parquet.ParquetWriter(self.path, pa.schema(
                    [("user", pa.int64()), ("rank", pa.int32()), ("item", pa.int64()),
                     ("score", pa.float64())]))
            self._writer.close()
        else:
            self._file.close()


def candidate_rows(users: np.ndarray, items: np.ndarray, scores: np.ndarray):
    """``recommend``'s ``(items, scores)`` of ``users`` as rows (user, rank, item, score),
    rank from 1, padding left out."""
    keep = np.isfinite(scores)
    rows, cols = np.nonzero(keep)
    return users[rows], (cols + 1), items[rows, cols], scores[rows, cols]


def recommend_command(args) -> int:
    """``sklearn-micro recommend MODEL (--users FILE | --all) -m M --out FILE``."""
    from ..base import final_step

    started = time.perf_counter()
    out = Path(args.out)
    if out.suffix.lower() not in (".parquet", ".pq", ".csv"):
        raise CommandError(f"--out must end in .parquet, .pq or .csv; got {str(out)!r}")
    for value, flag in ((args.m, "-m"), (args.block, "--block")):
        if value < 1:
            raise CommandError(f"{flag} must be a positive integer; got {value}")
    if (args.users is None) == (not args.all):
        raise CommandError("give --users FILE or --all (every user the model knows), one "
                           "of them")
    model = load_model(args.model)
    rec = final_step(model)
    if args.all:
        users = rec.user_ids_.ids
    else:
        users = _read_users(Path(args.users), "str" if rec.user_ids_.ids.dtype.kind in "US"
                            else "int")
    if users.dtype.kind in "iu":
        users = users.astype(np.int64)
    if len(users):  # compiled on first use: not in the figures
        rec.recommend(users[:1], args.m, exclude_seen=args.exclude_seen)
    blocks = range(0, len(users), args.block)
    if not args.quiet and len(users):
        from tqdm.auto import tqdm

        blocks = tqdm(blocks, desc="recommend", unit="block")
    n_rows = 0
    ranking = 0.0
    with atomic_path(out) as tmp, _CandidateWriter(tmp) as writer:
        for start in blocks:
            block = users[start:start + args.block]
            begun = time.perf_counter()
            try:
                items, scores = rec.recommend(block, args.m, exclude_seen=args.exclude_seen)
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            ranking += time.perf_counter() - begun
            rows = candidate_rows(np.asarray(block), items, scores)
            writer.write(*rows)
            n_rows += len(rows[0])
    seconds = time.perf_counter() - started
    print(f"{len(users):,} users, {n_rows:,} candidates (m = {args.m}"
          f"{', seen items left out' if args.exclude_seen else ''}) from chunk "
          f"{rec.latest_chunk_}; {seconds:.1f} s in all, {ranking:.1f} s ranking: "
          f"{len(users) / max(ranking, 1e-9):,.0f} users/s")
    print(f"candidates: {out}")
    return 0
