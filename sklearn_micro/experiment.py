"""The paper's experiment: MiCRO and baselines under the rolling protocol, side by side.

`run_experiment` fits each method on the training chunks (sharing one graph embedding),
evaluates it chunk by chunk on the test chunks, and returns one `RollingReport` per method;
`results_table` and `plot_per_chunk` turn those into the paper's table and figures.

A long run is a sequence of named stages (`Stages`): each is timed, its peak memory read,
and, given a checkpoint folder, its result saved atomically, so a run killed in the middle
carries on from the last finished stage, or the last saved test chunk, with the same result.
"""

from __future__ import annotations

import copy
import json
import os
import pickle
import sys
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ._kernels import threading_layer
from ._log import COLUMNS, EmbeddedLog, EngagementLog, Vocabulary, check_log, iter_chunks
from ._parallel import active_client, resolve_n_jobs
from .baselines import (
    ALSRecommender,
    ANNRecommender,
    PopularityRecommender,
    RecentItemsRecommender,
)
from .cluster import SphericalKMeans
from .embedding import GraphEmbedder
from .micro import MiCRO
from .model_selection import (
    RollingEvaluation,
    RollingReport,
    _chunk_points,
    _paired_chunk_points,
    _partial_fit,
)

__all__ = ["BASELINES", "METHODS", "Stages", "compact_chunks", "compact_log", "comparison_table",
           "load_checkpoint", "plot_per_chunk", "results_table", "run_experiment",
           "split_chunks"]

METHODS = ("MiCRO", "MiCRO (paper)", "ANN", "Popularity", "RecentItems", "ALS")
BASELINES = ("ANN", "Popularity", "RecentItems", "ALS")
# the checkpoint of MiCRO's and the paper's model's evaluation with one sampler
_SHARED = "MiCRO and MiCRO (paper) rolling"
# the array the embedding's and ANN's checkpoints share, saved once
_USER_VECTORS = "user vectors"

# a test chunk's state is saved when the work since the last save is at least this many
# times what the last save cost, which keeps checkpoints under 1/20 of the evaluation
_CHECKPOINT_RATIO = 20.0


# ------------------------------------------------------------------------------- the log


def compact_log(log) -> EngagementLog:
    """The log sorted by chunk, with ids and chunks as int32 where they fit.

    One copy is made column by column, so the peak is the log plus one column. String ids
    are kept as they are. A log already sorted by chunk (the paper's files are) keeps its
    row order.
    """
    log = check_log(log)
    chunk = log.chunk
    order = None
    if chunk.shape[0] > 1 and np.any(chunk[1:] < chunk[:-1]):
        order = np.argsort(chunk, kind="stable")

    def narrow(values):
        if values.size and _fits_int32(values):
            values = values.astype(np.int32, copy=False)
        return values if order is None else values[order]

    user = narrow(log.user)
    item = narrow(log.item)
    return EngagementLog(user, item, narrow(chunk))


def _fits_int32(values: np.ndarray) -> bool:
    return values.dtype.kind in "iu" and (not values.size or (
        values.min() >= np.iinfo(np.int32).min and values.max() <= np.iinfo(np.int32).max))


def compact_chunks(chunks, n_rows: int | None = None) -> EngagementLog:
    """A log from its chunks, ``(chunk, EngagementLog)`` in increasing order, held once.

    Columns are int32 while every value fits (a column widens to int64 when one does not).
    With ``n_rows`` (a Parquet file's metadata has it) the columns are allocated once and
    filled, so memory holds the log plus one chunk; otherwise the chunks are joined at the
    end, which holds the log twice for a moment.
    """
    columns = None
    parts: list[EngagementLog] = []
    filled = 0
    for _, part in chunks:
        part = check_log(part)
        if n_rows is None:
            parts.append(compact_log(part))
            continue
        if columns is None:
            columns = [np.empty(n_rows, np.int32) for _ in range(3)]
        end = filled + len(part)
        if end > n_rows:
            raise ValueError(f"n_rows: the chunks hold more than {n_rows} rows.")
        for j, values in enumerate((part.user, part.item, part.chunk)):
            if columns[j].dtype == np.int32 and not _fits_int32(values):
                columns[j] = columns[j].astype(np.int64)
            columns[j][filled:end] = values
        filled = end
    if n_rows is None:
        if not parts:
            return check_log(np.empty((0, 3), np.int64), allow_empty=True)
        joined = [np.concatenate([getattr(p, c) for p in parts]) for c in COLUMNS]
        return EngagementLog(*joined)
    if columns is None or filled != n_rows:
        raise ValueError(f"n_rows: the chunks hold {filled} rows, not {n_rows}.")
    return EngagementLog(*columns)


def split_chunks(log, train_chunks: int | None = None) -> tuple[EngagementLog, EngagementLog]:
    """Split a log into its first ``train_chunks`` chunks and the rest.

    Chunks are counted by number from the first one, so empty chunks count. By default the
    last quarter of the chunks (at least one) is the test part. A log sorted by chunk (as
    `compact_log` leaves it) is split into two views, without a copy.
    """
    log = check_log(log)
    first, last = int(log.chunk.min()), int(log.chunk.max())
    n_chunks = last - first + 1
    if train_chunks is None:
        train_chunks = n_chunks - max(1, n_chunks // 4)
    if not 1 <= train_chunks < n_chunks:
        raise ValueError(
            f"train_chunks must be between 1 and {n_chunks - 1} (the log has {n_chunks} "
            f"chunks, {first}..{last}); got {train_chunks}."
        )
    chunk = log.chunk
    if chunk.shape[0] < 2 or np.all(chunk[1:] >= chunk[:-1]):
        cut = int(np.searchsorted(chunk, first + train_chunks))
        return log.take(slice(0, cut)), log.take(slice(cut, None))
    train = chunk < first + train_chunks
    return log.take(train), log.take(~train)


# ---------------------------------------------------------------------------- the stages


def _reset_peak() -> bool:
    """Reset the process's resident high-water mark (Linux); False where it cannot be."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_bytes() -> int:
    """The resident high-water mark: VmHWM since the last reset, else ru_maxrss."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


@dataclass
class Stage:
    """One stage of a run: its time, peak memory and the work it did."""

    name: str
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    peak: int = 0
    work: int = 0
    unit: str = "engagements"
    resumed: bool = False
    note: str = ""
    checkpoint_seconds: float = 0.0
    n_checkpoints: int = 0
    continued: bool = False


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


_LEDGER = "stages.json"


class _SharingPickler(pickle.Pickler):
    """A pickler that writes a shared array as a reference to its name."""

    def __init__(self, file, shared_name: Callable):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._shared_name = shared_name

    def persistent_id(self, obj):
        name = self._shared_name(obj)
        return None if name is None else ("shared array", name)


class _SharingUnpickler(pickle.Unpickler):
    """An unpickler that resolves references to shared arrays with ``shared_array``."""

    def __init__(self, file, shared_array: Callable):
        super().__init__(file)
        self._shared_array = shared_array

    def persistent_load(self, pid):
        kind, name = pid
        if kind != "shared array":
            raise pickle.UnpicklingError(f"unknown reference {pid!r} in a checkpoint")
        return self._shared_array(name)


def _read_shared(folder: Path, name: str) -> np.ndarray:
    path = folder / f"{name}.npy"
    if not path.is_file():
        raise FileNotFoundError(
            f"a checkpoint in {str(folder)!r} refers to the shared array {name!r}, whose file "
            f"{path.name!r} is missing; run again without --resume")
    return np.load(path, allow_pickle=False)


def _same_array(path: Path, array: np.ndarray, block_bytes: int = 1 << 26) -> bool:
    """Whether the ``.npy`` file at ``path`` holds ``array``'s values, read a block of rows
    at a time."""
    try:
        saved = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError):
        return False
    if saved.shape != array.shape or saved.dtype != array.dtype:
        return False
    saved, array = np.atleast_1d(saved), np.atleast_1d(array)
    rows = max(1, block_bytes // max(1, array[:1].nbytes))
    return all(np.array_equal(saved[start:start + rows], array[start:start + rows])
               for start in range(0, len(array), rows))


def load_checkpoint(path):
    """The object a `Stages` checkpoint (``<folder>/<name>.pkl``) holds, with the arrays
    it shares with other checkpoints read from their files beside it.

    Parameters
    ----------
    path : path
        A checkpoint of ``reproduce --out DIR`` (``DIR/checkpoints/<stage>.pkl``).

    Returns
    -------
    object
        What the stage saved. Arrays shared by several checkpoints are read anew for each
        call: load them through one `Stages` (``Stages(folder, resume=True).load(name)``)
        to get one array for all.
    """
    path = Path(path)
    return Stages(path.parent, say=None)._unpickle(path)


def _with_earlier(figures: dict, stage: Stage, earlier: dict | None) -> dict:
    """A stage's figures, plus those of the runs that began it (up to their last
    checkpoint) when it carries on from one; its work is then the whole stage's, as the
    first of them planned it."""
    if stage.continued and earlier is not None and earlier.get("partial"):
        for key in ("seconds", "cpu_seconds", "checkpoint_seconds", "n_checkpoints"):
            figures[key] += earlier[key]
        figures["peak"] = max(figures["peak"], earlier["peak"])
        figures["work"] = earlier["work"]
    return figures


class Stages:
    """Named stages of a run, timed and measured, with atomic checkpoints.

    Parameters
    ----------
    checkpoint_dir : path or None, default=None
        Where the result of each finished stage is saved (a pickle per stage, written to a
        temporary file, flushed to disk and renamed over the old one). None saves nothing.
    resume : bool, default=False
        Take the result of a stage from its checkpoint when there is one.
    config : dict, optional
        What the run depends on (data, parameters). Saved beside the checkpoints; resuming
        with a different one is refused, since the checkpoints would not belong to it.
    may_differ : sequence of str, default=()
        Keys of ``config`` that choose what a run does rather than what its checkpoints
        hold (``reproduce``'s baselines: each method's checkpoints are its own). Resuming
        with other values is allowed, and ``config.json`` then records the new ones.
    say : callable or None, default=print
        Receives one line per finished stage.
    after_save : callable, optional
        Called with the name of each checkpoint once it is on disk (tests stop a run there).

    Notes
    -----
    With a checkpoint folder, the figures of every finished stage are kept beside the
    checkpoints (``stages.json``), and those of a stage in progress each time it saves a
    checkpoint. A resumed run reports the whole job: a stage taken from its checkpoint
    keeps the figures of the run that computed it, a stage carried on from its last
    checkpoint adds its own to those saved with it (the work done after that checkpoint by
    the killed run is lost, and not counted), and a stage the resumed run did not need
    (a fit whose evaluation was under way) keeps its row.

    An array that several checkpoints hold (the user vectors: the embedding's, which ANN
    queries with) is saved once, as ``<name>.npy``, once `share` names it; the checkpoints
    saved after that refer to it by name instead of holding a copy, and loading them
    gives one array, shared as it was when they were saved. Read such checkpoints with
    `load` or `load_checkpoint`, not with ``pickle.load``.

    A checkpoint that cannot be written (a full disk) is a `RuntimeWarning`, not an error:
    its temporary file is removed, the checkpoint before it stays, and the run goes on.
    """

    def __init__(self, checkpoint_dir=None, *, resume: bool = False, config=None,
                 may_differ: Sequence[str] = (), say: Callable | None = print,
                 after_save: Callable | None = None):
        self.dir = None if checkpoint_dir is None else Path(checkpoint_dir)
        self.resume = resume
        self.say = say or (lambda *_: None)
        self.after_save = after_save
        self.stages: list[Stage] = []
        self._config = dict(config or {})
        self._may_differ = frozenset(may_differ)
        self._started = False
        # the whole job's stages across resumed runs, by name, in the order they began
        self._ledger: dict[str, dict] = {}
        self._open: dict[int, tuple[float, float, dict | None]] = {}
        # arrays saved once and referred to by name (`share`): weak references, so that a
        # run that drops them frees them
        self._shared: dict[str, weakref.ref] = {}
        if self.dir is not None and self.resume:
            self._check_config()

    def _check_config(self) -> None:
        """Refuse checkpoints of a run with other settings; note whether there are any."""
        path = self.dir / "config.json"
        if not path.is_file():
            return
        saved = json.loads(path.read_text())
        differ = sorted(k for k in set(saved) | set(self._config)
                        if saved.get(k) != self._config.get(k))
        changed = [k for k in differ if k not in self._may_differ]
        if changed:
            name = changed[0]
            raise ValueError(
                f"--resume: the checkpoints in {str(self.dir)!r} belong to a run with "
                f"{name}={saved.get(name)!r}; this run has {name}={self._config.get(name)!r}. "
                "Run with the same settings, or without --resume to start over."
            )
        if differ:  # only choices of what runs: the folder now records this run's
            self._write_config()
        self._started = True
        ledger = self.dir / _LEDGER
        if ledger.is_file():
            self._ledger = {s["name"]: s for s in json.loads(ledger.read_text())["stages"]}

    def _start(self) -> None:
        """Before the first checkpoint of a new run: clear the folder, record the config."""
        self.dir.mkdir(parents=True, exist_ok=True)
        # the old run's files; the ledger in memory holds this run's stages only
        for old in [*self.dir.glob("*.pkl"), *self.dir.glob("*.npy"), *self.dir.glob("*.tmp"),
                    self.dir / _LEDGER]:
            old.unlink(missing_ok=True)
        self._write_config()
        self._started = True

    def _write_config(self) -> None:
        self._write(self.dir / "config.json",
                    json.dumps(self._config, indent=1, sort_keys=True).encode())

    # -- checkpoints --------------------------------------------------------------------

    def _write(self, path: Path, data: bytes | None = None, obj=None,
               array: np.ndarray | None = None) -> None:
        tmp = path.with_name(path.name + ".tmp")
        try:
            with open(tmp, "wb") as f:
                if data is not None:
                    f.write(data)
                elif array is not None:
                    np.save(f, array, allow_pickle=False)
                else:
                    _SharingPickler(f, self._shared_name).dump(obj)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)  # a half-written file is no checkpoint
            raise
        os.replace(tmp, path)
        _fsync_dir(path.parent)

    def path(self, name: str) -> Path | None:
        return None if self.dir is None else self.dir / f"{name}.pkl"

    def has(self, name: str) -> bool:
        path = self.path(name)
        return self.resume and self._started and path is not None and path.is_file()

    def load(self, name: str):
        return self._unpickle(self.path(name))

    def _unpickle(self, path: Path):
        with open(path, "rb") as f:
            return _SharingUnpickler(f, self._shared_array).load()

    def _try_write(self, what: str, path: Path, **content) -> bool:
        """`_write`, or a warning that ``what`` could not be written (a full disk): the
        run goes on without it. Whether it was written."""
        try:
            self._write(path, **content)
        except OSError as exc:
            warnings.warn(
                f"{what} could not be saved in {str(self.dir)!r} ({exc}); the run goes on "
                "without it, and --resume would carry on from the checkpoints saved before "
                "it", RuntimeWarning, stacklevel=3)
            return False
        return True

    def share(self, name: str, array: np.ndarray) -> None:
        """Save ``array`` once, as ``<name>.npy``, for the checkpoints saved from now on to
        refer to instead of copying it (nothing without a folder). A no-op for the array
        that is already shared under ``name``, for example one loaded from its file.

        A file of the same bytes already there (a checkpoint saved before sharing was
        resumed) is taken as it is. Another array under a name whose file the earlier
        checkpoints refer to (an embedding computed again after its checkpoint was lost)
        goes to a file of its own, ``<name> (2).npy`` and on, so that those checkpoints
        keep reading what they were saved with."""
        if self.dir is None:
            return
        if not self._started:
            self._start()
        # the files of the name's versions: one of them may hold the array already
        stem, version = name, 1
        while (path := self.dir / f"{stem}.npy").is_file():
            ref = self._shared.get(stem)
            if (ref is not None and ref() is array) or _same_array(path, array):
                self._shared[stem] = weakref.ref(array)
                return
            version += 1
            stem = f"{name} ({version})"
        # not saved, it is not shared: the checkpoints then hold copies of it
        if self._try_write(f"the shared array {name!r}", path, array=array):
            self._shared[stem] = weakref.ref(array)

    def _shared_name(self, obj) -> str | None:
        """The name ``obj`` is shared under, if it is a shared array or a view of all of
        it (``np.asarray(a, dtype=...)`` of an unpickled array is one: its dtype is not
        numpy's own instance)."""
        if type(obj) is not np.ndarray:
            return None
        for name, ref in self._shared.items():
            array = ref()
            if array is obj or (
                    array is not None and obj.shape == array.shape
                    and obj.strides == array.strides and obj.dtype == array.dtype
                    and obj.__array_interface__["data"][0]
                    == array.__array_interface__["data"][0]):
                return name
        return None

    def _shared_array(self, name: str) -> np.ndarray:
        """The array shared under ``name``: the one in memory, or else read from its file."""
        ref = self._shared.get(name)
        array = None if ref is None else ref()
        if array is None:
            array = _read_shared(self.dir, name)
            self._shared[name] = weakref.ref(array)
        return array

    def save(self, name: str, obj, stage: Stage | None = None) -> bool:
        """Save ``obj`` as the checkpoint ``name`` (nothing without a folder); whether it
        was written."""
        if self.dir is None:
            return False
        if not self._started:
            self._start()
        start = time.perf_counter()
        if not self._try_write(f"checkpoint {name!r}", self.path(name), obj=obj):
            return False  # the checkpoint before it, if any, stays
        if stage is not None:
            stage.checkpoint_seconds += time.perf_counter() - start
            stage.n_checkpoints += 1
            if id(stage) in self._open:  # in progress: its figures up to this checkpoint
                begun, cpu, earlier = self._open[id(stage)]
                self._keep(_with_earlier(dict(
                    asdict(stage), seconds=time.perf_counter() - begun,
                    cpu_seconds=time.process_time() - cpu, peak=_peak_bytes(),
                    partial=True), stage, earlier))
        if self.after_save is not None:
            self.after_save(name)
        return True

    def measured(self, name: str) -> bool:
        """Whether the ledger holds the figures of the stage ``name`` (resuming only)."""
        return self.resume and name in self._ledger

    def drop(self, name: str) -> None:
        path = self.path(name)
        if path is not None and path.is_file():
            path.unlink()

    # -- measuring ----------------------------------------------------------------------

    @contextmanager
    def measure(self, name: str, *, work: int = 0, unit: str = "engagements"):
        """Time the block and read its peak memory into a new `Stage`, which it yields.

        Set ``stage.resumed`` in the block when its result came from a checkpoint, and
        ``stage.continued`` when it carries on from the stage's last checkpoint.
        """
        stage = Stage(name, work=int(work), unit=unit)
        _reset_peak()
        start, cpu = time.perf_counter(), time.process_time()
        self._open[id(stage)] = (start, cpu, self._ledger.get(name))
        try:
            yield stage
        finally:
            _, _, earlier = self._open.pop(id(stage))
        stage.seconds = time.perf_counter() - start
        stage.cpu_seconds = time.process_time() - cpu
        stage.peak = _peak_bytes()
        self.stages.append(stage)
        how = " (from its checkpoint)" if stage.resumed else ""
        how += f" ({stage.note})" if stage.note else ""
        saved = (f", {stage.n_checkpoints} checkpoints {stage.checkpoint_seconds:.1f} s"
                 if stage.n_checkpoints else "")
        self.say(f"{name}{how}: {stage.seconds:.1f} s, peak {stage.peak / 2**20:,.0f} MiB"
                 f"{saved}")
        if self.dir is None:
            return
        if stage.resumed and earlier is not None and not earlier.get("partial"):
            self._keep(dict(earlier, resumed=True))
        else:
            self._keep(_with_earlier(asdict(stage), stage, earlier))

    def _keep(self, figures: dict) -> None:
        """Put a stage's figures in the ledger and write it."""
        if self.dir is None:
            return
        self._ledger[figures["name"]] = figures
        if self._started:
            self._try_write(f"the stages' figures ({_LEDGER})", self.dir / _LEDGER,
                            data=json.dumps({"stages": list(self._ledger.values())},
                                            indent=1).encode())

    def run(self, name: str, compute: Callable, *, work: int = 0,
            unit: str = "engagements"):
        """The result of ``compute()``, or of its checkpoint when resuming, measured."""
        with self.measure(name, work=work, unit=unit) as stage:
            if self.has(name):
                stage.resumed = True
                return self.load(name)
            result = compute()
            self.save(name, result, stage)
        return result

    def _rows(self) -> list[Stage]:
        """The whole job's stages: the ledger's with a checkpoint folder, else this run's."""
        if self.dir is None or not self._ledger:
            return self.stages
        fields = Stage.__dataclass_fields__
        return [Stage(**{k: v for k, v in row.items() if k in fields})
                for row in self._ledger.values() if not row.get("partial")]

    def table(self) -> str:
        """The stages as a markdown table: seconds, peak memory, throughput.

        With a checkpoint folder these are the whole job's, across resumed runs: a stage
        taken from its checkpoint shows the figures of the run that computed it ("from
        checkpoint"), a stage carried on from its last checkpoint the sum of its runs.
        """
        lines = ["| stage | seconds | cpu seconds | peak MiB | throughput | checkpoints |",
                 "|---|---:|---:|---:|---:|---:|"]
        rows = self._rows()
        for s in rows:
            rate = f"{s.work / s.seconds:,.0f} {s.unit}/s" if s.work and s.seconds > 0 else ""
            if s.resumed:
                rate = f"{rate}, from checkpoint" if rate else "from checkpoint"
            elif s.note:
                rate = f"{rate}, {s.note}" if rate else s.note
            saved = (f"{s.n_checkpoints} in {s.checkpoint_seconds:.1f} s"
                     if s.n_checkpoints else "")
            lines.append(f"| {s.name} | {s.seconds:.1f} | {s.cpu_seconds:.1f} | "
                         f"{s.peak / 2**20:,.0f} | {rate} | {saved} |")
        total = sum(s.seconds for s in rows)
        cpu = sum(s.cpu_seconds for s in rows)
        peak = max((s.peak for s in rows), default=0)
        lines.append(f"| all stages | {total:.1f} | {cpu:.1f} | {peak / 2**20:,.0f} | | |")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"stages": [asdict(s) for s in self._rows()]}


# ------------------------------------------------------------------------ the experiment


@dataclass
class _Embedding:
    """What the embedding stage saves: the vocabularies and the vectors."""

    user_ids: Vocabulary
    item_ids: Vocabulary
    user_vectors: np.ndarray
    item_vectors: np.ndarray


def run_experiment(
    train,
    test,
    *,
    n_interests: int = 100,
    methods: Sequence[str] = ("MiCRO", "ANN", "Popularity"),
    n_components: int = 64,
    m_values: Sequence[int] = (10, 25, 50, 100),
    random_state: int | None = 0,
    progress: bool = False,
    log=print,
    n_jobs: int | None = -1,
    stages: Stages | None = None,
    keep_points: bool = False,
    micro_params: dict | None = None,
    embedding_params: dict | None = None,
) -> dict[str, RollingReport]:
    """Fit each method on ``train`` and evaluate it on ``test`` with the rolling protocol.

    One `GraphEmbedder` is fitted on ``train`` and shared: MiCRO clusters its item vectors
    with `SphericalKMeans(n_interests)`, ANN queries with its user vectors. Methods run one
    after the other, and each is dropped once evaluated, so memory holds one at a time; ANN
    runs first, and the vectors are dropped after it (the item vectors after the
    clustering). "MiCRO" and "MiCRO (paper)" sample the same chain, so together they are
    fitted and sampled once, each test chunk scored by both (`MiCRO.paper_model`): the
    stages "MiCRO fit" and "MiCRO and MiCRO (paper) rolling evaluation", with the reports
    of evaluating them apart.

    Parameters
    ----------
    train, test : engagement logs
        Test chunks must come after every training chunk.
    n_interests : int, default=100
        K, the number of interests of MiCRO.
    methods : sequence of str, default=("MiCRO", "ANN", "Popularity")
        Any of ``METHODS``. "MiCRO" is `MiCRO` with its defaults; "MiCRO (paper)" is the
        paper's exact model (``personal=0, phi_decay=0``), on the same interests.
    n_components : int, default=64
        Dimensions of the graph embedding.
    m_values : sequence of int
        Cut-offs of the metrics.
    random_state : int or None, default=0
    progress : bool, default=False
        Progress bars and messages of the embedding, the clustering and the test chunks.
    log : callable, default=print
        Receives one line per step with its time; None for silence.
    n_jobs : int or None, default=-1
        Threads of every estimator (-1: all cores).
    stages : Stages, optional
        Records each stage's time and peak memory, and saves and resumes checkpoints.
        By default the stages are recorded without checkpoints.
    keep_points : bool, default=False
        Keep every (user, chunk) point in the reports (memory grows with the points).
    micro_params : dict, optional
        More parameters of both MiCRO rows, for example ``{"phi_min_count": 2}``; the
        paper's row keeps ``personal=0, phi_decay=0``, and ``random_state``, ``n_jobs``
        and ``verbose`` are the ones above. Checked before any stage runs.
    embedding_params : dict, optional
        More parameters of the shared `GraphEmbedder`, for example ``{"iterations": 20}``
        (the paper's epochs); ``n_components``, ``random_state``, ``n_jobs`` and
        ``verbose`` are the ones above. Checked before any stage runs.

    Returns
    -------
    reports : dict of str to RollingReport
        In the order of ``methods``.
    """
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"methods must be among {list(METHODS)}; got {unknown}.")
    if stages is None:
        stages = Stages(say=log)
    micro_settings = dict(micro_params or {})
    # a wrong name or value fails now, not after the embedding
    MiCRO(**micro_settings)._validate_params()
    embedding_settings = dict(embedding_params or {})
    GraphEmbedder(**embedding_settings)._validate_params()
    train, test = check_log(train, input_name="train"), check_log(test, input_name="test")
    verbose = int(bool(progress))
    embedded = None
    # MiCRO's two rows sample the same chain: one sampler serves both (MiCRO.paper_model),
    # unless a run that evaluated them apart is resumed
    pair = ("MiCRO", "MiCRO (paper)")
    shared = set(pair) <= set(methods) and (stages.has(_SHARED) or not any(
        stages.has(f"{name} {what}") for name in pair for what in ("report", "rolling")))

    def rolling_of(name):
        return _SHARED if shared and name == "MiCRO" else f"{name} rolling"

    # the embedding and the clusters serve only the methods still to be fitted
    to_fit = {name for name in methods
              if name in (*pair, "ANN") and not (shared and name == "MiCRO (paper)")
              and not stages.has(f"{name} report") and not stages.has(rolling_of(name))
              and not stages.has(f"{name} fit")}
    micro = set(pair) & to_fit
    if micro or "ANN" in to_fit:
        def embed():
            embedder = GraphEmbedder(n_components, **{
                **embedding_settings, "random_state": random_state, "n_jobs": n_jobs,
                "verbose": verbose}).fit(train)
            # saved once: ANN's checkpoints hold the same array
            stages.share(_USER_VECTORS, embedder.user_vectors_)
            return _Embedding(embedder.user_ids_, embedder.item_ids_,
                              embedder.user_vectors_, embedder.item_vectors_)

        found = stages.run("graph embedding", embed, work=len(train))
        stages.share(_USER_VECTORS, found.user_vectors)  # from a checkpoint without it
        embedded = EmbeddedLog(train, found.user_ids, found.item_ids, found.user_vectors,
                               found.item_vectors)
        del found
    if micro:
        def cluster():
            clusters = SphericalKMeans(n_interests, random_state=random_state,
                                       n_jobs=n_jobs, verbose=verbose)
            return clusters.fit_transform(embedded).item_interest

        labels = stages.run("clustering", cluster, work=len(embedded.item_ids), unit="items")
        embedded = embedded.with_interests(labels)
    if embedded is not None:
        # the item vectors are only clustered: the rest of the run reads the user vectors
        embedded = EmbeddedLog(embedded.log, embedded.user_ids, embedded.item_ids,
                               embedded.user_vectors,
                               np.empty((0, embedded.user_vectors.shape[1]), np.float32),
                               embedded.item_interest)
    reports = {}
    # ANN first: the only method that reads the user vectors, which are dropped after it
    for name in sorted(methods, key=lambda name: name != "ANN"):
        if shared and name == "MiCRO (paper)":
            continue
        if name != "ANN" and embedded is not None and embedded.user_vectors.shape[0]:
            embedded = EmbeddedLog(embedded.log, embedded.user_ids, embedded.item_ids,
                                   # a new empty array: a view would keep them alive
                                   np.empty((0, embedded.user_vectors.shape[1]), np.float32),
                                   embedded.item_vectors,
                                   embedded.item_interest)
        if name in pair and all(stages.has(f"{done} report") for done in pair) and \
                stages.measured(f"{_SHARED} evaluation"):
            # both reports of a shared evaluation: one stage, as the run that made them
            if name not in reports:
                with stages.measure(f"{_SHARED} evaluation", work=len(test)) as stage:
                    stage.resumed = True
                    reports.update({done: stages.load(f"{done} report") for done in pair})
            continue
        if stages.has(f"{name} report") and not (shared and name == "MiCRO"):
            with stages.measure(f"{name} rolling evaluation", work=len(test)) as stage:
                stage.resumed = True
                reports[name] = stages.load(f"{name} report")
            continue
        rolling = rolling_of(name)
        evaluation = None
        if stages.has(rolling):
            evaluation = stages.load(rolling)
        else:
            def fit(name=name, embedded=embedded):
                if name == "MiCRO":
                    return MiCRO(**{**micro_settings, "random_state": random_state,
                                    "n_jobs": n_jobs, "verbose": verbose}).fit(embedded)
                if name == "MiCRO (paper)":
                    return MiCRO(**{**micro_settings, "personal": 0, "phi_decay": 0,
                                    "random_state": random_state, "n_jobs": n_jobs,
                                    "verbose": verbose}).fit(embedded)
                if name == "ANN":
                    return ANNRecommender(random_state=random_state,
                                          n_jobs=n_jobs).fit(embedded)
                if name == "Popularity":
                    return PopularityRecommender().fit(train)
                if name == "RecentItems":
                    return RecentItemsRecommender().fit(train)
                return ALSRecommender(n_components, random_state=random_state,
                                      n_jobs=n_jobs).fit(train)

            model = stages.run(f"{name} fit", fit, work=len(train))
            fit = None  # its default argument holds the vectors, which ANN alone reads
            kind = _SharedSampler if rolling == _SHARED else RollingEvaluation
            evaluation = kind(model, m_values=m_values, keep_points=keep_points)
            del model
        _evaluate(evaluation, test, rolling, stages, progress)
        found = (evaluation.reports() if rolling == _SHARED
                 else {name: evaluation.report()})
        del evaluation
        saved = True
        for done, report in found.items():
            reports[done] = report
            saved = stages.save(f"{done} report", report) and saved
        if saved:  # else the evaluation's last state stays, for --resume
            stages.drop(rolling)
    return {name: reports[name] for name in methods}


class _SharedSampler:
    """The rolling evaluations of a `MiCRO` and of its paper's model, with one sampler.

    ``personal`` and ``phi_decay`` act on retrieval alone, so ``MiCRO()`` and
    ``MiCRO(personal=0, phi_decay=0)`` with the same other parameters and seed sample the
    same chain. Each test chunk is scored by the model's `MiCRO.paper_model` and by the
    model itself, then the model alone takes the chunk: both reports are those of
    evaluating the two models apart, for the cost of one sampler.

    Parameters
    ----------
    estimator : MiCRO
        Fitted; evaluated in place, as by `RollingEvaluation`.
    **kwargs
        `RollingEvaluation`'s (``m_values``, ``exclude_seen``, ``keep_points``).

    Attributes
    ----------
    micro, paper : RollingEvaluation
        The model's evaluation and its paper's model's (whose ``estimator`` is None
        between steps: the paper's model is made from the model's state at each step).
    """

    def __init__(self, estimator, **kwargs):
        self.micro = RollingEvaluation(estimator, **kwargs)
        self.paper = RollingEvaluation(estimator.paper_model(), **kwargs)
        self.paper.estimator = None  # made from the model's state at each step

    @property
    def chunks_done(self) -> list[int]:
        return self.micro.chunks_done

    def step(self, log: EngagementLog, X=None, *, learn: bool = True) -> int:
        """Score both models on one chunk, then let the model take it (as
        `RollingEvaluation.step`).

        When the paper's model ranks from the model's own latest chunk and the model has
        a personal component (`MiCRO._ranks_with_paper`: the defaults once `fit` has
        chosen ``phi_decay_`` 0), each block of users is ranked for both from one scatter
        (`MiCRO._recommend_with_paper`); otherwise, or inside joblib's Dask backend, the
        paper's model is scored first, then the model. When the chunk is sampled as one
        chain, the model samples it while both are scored (`_learning_beside`). The
        reports are the same.
        """
        model = self.micro.estimator
        chunk = self.micro._chunk_of(log)
        X = log if X is None else X
        with _learning_beside(model, log, X, learn) as before:
            if before._ranks_with_paper() and active_client() is None:
                points, paper_points = _paired_chunk_points(before, log, self.micro.ks,
                                                            self.micro.exclude_seen)
            else:
                paper_points = _chunk_points(before.paper_model(), log, self.paper.ks,
                                             self.paper.exclude_seen)
                points = _chunk_points(before, log, self.micro.ks, self.micro.exclude_seen)
        self.paper._take(chunk, paper_points, None, learn=False)
        return self.micro._take(chunk, points, X, learn=False)

    def reports(self) -> dict[str, RollingReport]:
        """The paper's model's report and the model's, as "MiCRO (paper)" and "MiCRO"."""
        return {"MiCRO (paper)": self.paper.report(), "MiCRO": self.micro.report()}


@contextmanager
def _learning_beside(model: MiCRO, log: EngagementLog, X, learn: bool):
    """Yield the model as it stands before the chunk ``log`` (``X`` in the form
    ``partial_fit`` takes), to be scored; then, if ``learn``, the model has taken the chunk.

    `MiCRO.partial_fit` replaces the model's attributes and never changes them in place, so
    a shallow copy made before it is the state before the chunk. When the chunk is sampled
    as one chain (`MiCRO._chain_threads`: a chunk of 1/20 of the paper's log is) and the
    model may use two threads or more, ``partial_fit`` runs on a thread of its own while the
    copy is scored, so the core the chain leaves idle ranks users. That needs numba's
    ``omp`` or ``tbb`` threading layer (its ``workqueue`` layer runs one parallel kernel at
    a time) and no Dask client; otherwise the chunk is taken after the block. If scoring
    or sampling fails, or an interrupt comes while either runs, the sampler is let finish
    and the model is put back as it was before the chunk, and the error raised.
    """
    if not learn:
        yield model
        return
    if not _can_learn_beside(model, log):
        yield model
        _partial_fit(model, X)
        return
    before = object.__new__(type(model))
    before.__dict__.update(model.__dict__)
    # the sampler draws from the model's random state: the copy keeps its own
    before.random_state_ = copy.deepcopy(model.random_state_)
    with ThreadPoolExecutor(1, thread_name_prefix="micro-partial-fit") as pool:
        learning = pool.submit(_partial_fit, model, X)
        try:
            yield before
            learning.result()
        except BaseException:  # scoring or sampling failed, or an interrupt
            try:
                futures_wait([learning])  # a thread cannot be stopped: let it finish
            finally:
                model.__dict__ = dict(before.__dict__)
            raise


def _can_learn_beside(model: MiCRO, log: EngagementLog) -> bool:
    """Whether `_learning_beside` samples the chunk while it is scored."""
    if active_client() is not None or not isinstance(model, MiCRO):
        return False
    if resolve_n_jobs(model.n_jobs) < 2 or model._chain_threads(log) > 1:
        return False
    return threading_layer() in ("omp", "tbb")


def _evaluate(evaluation, test: EngagementLog, name: str, stages: Stages,
              progress: bool) -> None:
    """Carry ``evaluation`` (a `RollingEvaluation` or a `_SharedSampler`) over the
    test chunks it has not done, saving its state after a chunk when the work since the
    last save outweighs the save's cost."""
    done = set(evaluation.chunks_done)
    chunks = [(c, rows) for c, rows in iter_chunks(test.chunk) if c not in done]
    with stages.measure(name.replace("rolling", "rolling evaluation"),
                        work=sum(r.shape[0] for _, r in chunks)) as stage:
        if done:
            stage.note = f"resumed after chunk {max(done)}"
            stage.continued = True
        steps = chunks
        if progress:
            from tqdm.auto import tqdm

            steps = tqdm(chunks, desc=name, unit="chunk")
        cost = 0.0
        since = time.perf_counter()
        for pos, (_, rows) in enumerate(steps):
            last = pos == len(chunks) - 1
            evaluation.step(test.take(rows), learn=not last)
            if not last and time.perf_counter() - since >= _CHECKPOINT_RATIO * cost:
                start = time.perf_counter()
                stages.save(name, evaluation, stage)
                cost = time.perf_counter() - start
                since = time.perf_counter()


def results_table(reports: dict[str, RollingReport], m_values: Sequence[int] = (50, 100), *,
                  aggregate: str = "overall", digits: int = 3,
                  intervals: bool = False, level: float = 0.95) -> str:
    """The paper's table as markdown: Recall, MRR and NDCG at each M, one row per method.

    ``aggregate="overall"`` averages over all (user, chunk) points; ``"per_user"`` first
    averages each user's points, then over users (the paper's Table 3). With
    ``intervals``, each cell gives the half width of its confidence interval at ``level``
    (`RollingReport.intervals`, users as the unit) after the mean.
    """
    if aggregate not in ("overall", "per_user"):
        raise ValueError(f"aggregate must be 'overall' or 'per_user'; got {aggregate!r}.")
    columns = [f"{metric}@{m}" for m in m_values for metric in ("recall", "mrr", "ndcg")]
    lines = ["| method | " + " | ".join(columns) + " |",
             "|---|" + "---:|" * len(columns)]
    for name, report in reports.items():
        row = report.overall() if aggregate == "overall" else report.per_user()
        cells = [f"{float(row[c]):.{digits}f}" for c in columns]
        if intervals:
            table = report.intervals(aggregate=aggregate, level=level)
            high, mean = _by_metric(table, "high"), _by_metric(table, "mean")
            cells = [f"{cell} ± {high[c] - mean[c]:.{digits + 1}f}"
                     for cell, c in zip(cells, columns, strict=True)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _by_metric(table, column: str) -> dict[str, float]:
    """A column of `RollingReport.intervals` or `compare` by metric, with or without pandas."""
    if isinstance(table, dict):
        return dict(zip(table["metric"].tolist(), np.asarray(table[column], float).tolist(),
                        strict=True))
    return {name: float(value) for name, value in table[column].items()}


def comparison_table(reports: dict[str, RollingReport], reference: str,
                     metrics: Sequence[str] = ("recall@100", "mrr@100"), *,
                     level: float = 0.95) -> str:
    """``reference`` against every other method as markdown: the relative difference of
    each metric's mean over all points, with its confidence interval paired by user
    (`RollingReport.compare`)."""
    if reference not in reports:
        raise ValueError(f"reference must be one of {list(reports)}; got {reference!r}.")
    metrics = list(metrics)
    lines = [f"| {reference} against | " + " | ".join(metrics) + " |",
             "|---|" + "---:|" * len(metrics)]
    for name, report in reports.items():
        if name == reference:
            continue
        table = reports[reference].compare(report, level=level)
        relative, low, high = (_by_metric(table, c)
                               for c in ("relative", "relative_low", "relative_high"))
        cells = [f"{relative[m]:+.1%} [{low[m]:+.1%}, {high[m]:+.1%}]"
                 if np.isfinite(relative[m]) else "n/a (a mean of 0)" for m in metrics]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_per_chunk(reports: dict[str, RollingReport], out_dir, m: int = 100,
                   prefix: str = "", *, dpi: int = 100) -> list[Path]:
    """One PNG per metric (recall, MRR, NDCG at ``m``): its mean per test chunk per method.

    Needs matplotlib (``pip install "sklearn-micro[plot]"``). Returns the paths written.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError as exc:
        raise ImportError(
            'plots need matplotlib: pip install "sklearn-micro[plot]"') from exc
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for metric, title in (("recall", "Recall"), ("mrr", "MRR"), ("ndcg", "NDCG")):
        fig, ax = plt.subplots(figsize=(6, 3.6))
        for name, report in reports.items():
            table = report.per_chunk()
            chunks = np.asarray(table.index if hasattr(table, "index") else table["chunk"])
            ax.plot(chunks, np.asarray(table[f"{metric}@{m}"]), marker="o", markersize=3,
                    label=name)
        ax.set_xlabel("time chunk")
        ax.set_ylabel(f"mean {title}@{m}")
        ax.set_title(f"{title}@{m} per test chunk")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
        fig.tight_layout()
        path = out_dir / f"{prefix}{metric}_at_{m}_per_chunk.png"
        fig.savefig(path, dpi=dpi)
        plt.close(fig)
        paths.append(path)
    return paths
