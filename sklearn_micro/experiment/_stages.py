"""Named stages of a long run: each timed and measured, its result saved as an atomic
checkpoint, the figures of every stage kept in a ledger beside the checkpoints, and the
arrays that several checkpoints hold saved once.

`sklearn_micro.experiment.run_experiment` runs as `Stages`, so that a run killed in the
middle carries on from its last checkpoint with the same result.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

__all__ = ["Stage", "Stages", "load_checkpoint", "peak_bytes", "reset_peak"]


def reset_peak() -> bool:
    """Reset the process's resident high-water mark (Linux); False where it cannot be."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_bytes() -> int:
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
                self._record_figures(_with_earlier(dict(
                    asdict(stage), seconds=time.perf_counter() - begun,
                    cpu_seconds=time.process_time() - cpu, peak=peak_bytes(),
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
        reset_peak()
        start, cpu = time.perf_counter(), time.process_time()
        self._open[id(stage)] = (start, cpu, self._ledger.get(name))
        try:
            yield stage
        finally:
            _, _, earlier = self._open.pop(id(stage))
        stage.seconds = time.perf_counter() - start
        stage.cpu_seconds = time.process_time() - cpu
        stage.peak = peak_bytes()
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
            self._record_figures(dict(earlier, resumed=True))
        else:
            self._record_figures(_with_earlier(asdict(stage), stage, earlier))

    def _record_figures(self, figures: dict) -> None:
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
