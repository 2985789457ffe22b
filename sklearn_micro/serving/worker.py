"""The process that applies updates: load the served file, take one chunk, save.

``python -m sklearn_micro.serving.worker PARENT_PID`` reads one `UpdateJob` a line on its
standard input, as JSON (`UpdateJob.to_json`): it loads the model at ``base``, runs
``partial_fit`` on the chunk, writes the result to ``tmp`` and renames it to ``final`` (and,
for a skops snapshot, pickles the model to ``handoff``, which loads ten times faster than
the skops file: the service loads it, and the next update starts from it), then answers
one `UpdateReply` a line, as JSON, ``{"ok": true, "path": ..., "seconds": {...}}`` or
``{"ok": false, "error": "..."}``. It runs at a lower priority than the service, and dies
with it: a worker whose service is gone publishes nothing. With
``SKLEARN_MICRO_FAILPOINT=during-update`` (for tests only) it waits after ``partial_fit``,
before saving (`failpoint_seconds`).

The service keeps one such process, so that the sampler's compiled kernels (which hold the
GIL, on numba's threads) never run inside the process that answers requests, while the
interpreter's start, the imports and the loading of compiled kernels are paid once.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..base import partial_fit_through

__all__ = ["UpdateJob", "UpdateReply", "failpoint_seconds", "running", "update",
           "update_processes"]

UPDATE_NICENESS = 10
FAILPOINT = "SKLEARN_MICRO_FAILPOINT"


@dataclass(frozen=True)
class UpdateJob:
    """One chunk to apply: what the service asks of the update process.

    Attributes
    ----------
    base : Path
        The file of the model being served.
    base_format : {"skops", "pickle"}
        Its format.
    chunk_file : Path
        An ``.npz`` of the chunk's ``user``, ``item`` and ``chunk`` columns.
    tmp : Path
        Where the updated model is written first.
    final : Path
        The chunk's snapshot, which ``tmp`` is renamed to.
    format : {"skops", "pickle"}
        The snapshot's format.
    handoff : Path or None
        Where a skops snapshot's model is also pickled, for the service to load fast.
    """

    base: Path
    base_format: str
    chunk_file: Path
    tmp: Path
    final: Path
    format: str
    handoff: Path | None = None

    def to_json(self) -> str:
        """The job as one line of JSON (paths as strings)."""
        return json.dumps({name: None if value is None else str(value)
                           for name, value in asdict(self).items()})

    @classmethod
    def from_json(cls, line: str | bytes) -> UpdateJob:
        """The job that `to_json` wrote."""
        fields = json.loads(line)
        paths = {"base", "chunk_file", "tmp", "final", "handoff"}
        return cls(**{name: Path(value) if name in paths and value is not None else value
                      for name, value in fields.items()})


@dataclass(frozen=True)
class UpdateReply:
    """What the update process answers to an `UpdateJob`.

    Attributes
    ----------
    ok : bool
        Whether the snapshot was published.
    error : str or None
        Why not, when not (the exception's type and message).
    path : str or None
        The snapshot published.
    handoff : str or None
        The pickled handoff written beside it, if any.
    seconds : dict
        Seconds of each step (``load``, ``partial_fit``, ``save``, ``handoff``).
    """

    ok: bool
    error: str | None = None
    path: str | None = None
    handoff: str | None = None
    seconds: dict = field(default_factory=dict)

    def to_json(self) -> str:
        """The reply as one line of JSON, without the fields that are None."""
        return json.dumps({name: value for name, value in asdict(self).items()
                           if value is not None})

    @classmethod
    def from_json(cls, line: str | bytes) -> UpdateReply:
        """The reply that `to_json` wrote."""
        return cls(**json.loads(line))


def failpoint_seconds(name: str) -> float:
    """How long to wait at the moment ``name``: the seconds of
    ``SKLEARN_MICRO_FAILPOINT=NAME[:SECONDS]`` in the environment when it names ``name``
    (3600 without SECONDS), else 0. For tests of durability only: a deterministic moment to
    kill the service at (``during-update`` here; ``after-snapshot-rename`` in the
    service)."""
    value = os.environ.get(FAILPOINT, "")
    point, _, seconds = value.partition(":")
    if point != name:
        return 0.0
    try:
        return float(seconds) if seconds else 3600.0
    except ValueError:
        raise ValueError(f"{FAILPOINT} must be NAME or NAME:SECONDS; got {value!r}.") from None


def _die_with_parent() -> None:
    """Ask Linux to kill this process when the service's process ends (``kill -9`` too)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _processes() -> list[tuple[int, int, str]]:
    """``(pid, parent pid, state)`` of every process (Linux's ``/proc``)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out.append((int(entry), int(fields[1]), fields[0]))
    return out


def running(pids) -> list[int]:
    """Those of ``pids`` still running (Linux; a zombie, dead but not reaped, is not)."""
    pids = set(pids)
    return [pid for pid, _, state in _processes() if pid in pids and state != "Z"]


def update_processes(service_pid: int) -> list[int]:
    """The pids of the running update processes of the service ``service_pid`` (Linux)."""
    found = []
    for pid, parent, state in _processes():
        if parent == service_pid and state != "Z":
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"sklearn_micro.serving.worker" in f.read():
                        found.append(pid)
            except OSError:
                pass
    return found


# the update step; a name of this module, so that tests can slow it down or make it fail
partial_fit = partial_fit_through


def update(job: UpdateJob, parent: int) -> UpdateReply:
    """Apply ``job``: load ``job.base``, take the chunk, save to ``job.tmp`` and rename it
    to ``job.final``. With ``job.handoff``, a skops snapshot is also pickled there, for the
    service to load fast (a file of this process's own, in the state folder's temporary
    space: a restart never reads it). Nothing is published once the process whose pid is
    ``parent`` is no longer this one's parent."""
    from sklearn_micro import EngagementLog
    from sklearn_micro.persistence import dump, load

    from .snapshots import publish

    seconds = {}
    start = time.perf_counter()
    model = load(job.base, format=job.base_format)
    seconds["load"] = time.perf_counter() - start
    with np.load(job.chunk_file) as data:
        log = EngagementLog(data["user"], data["item"], data["chunk"])
    start = time.perf_counter()
    partial_fit(model, log)
    seconds["partial_fit"] = time.perf_counter() - start
    wait = failpoint_seconds("during-update")
    if wait:
        print(f"failpoint during-update: waiting {wait:.1f} s", file=sys.stderr, flush=True)
        time.sleep(wait)
    start = time.perf_counter()
    dump(model, job.tmp, format=job.format)
    seconds["save"] = time.perf_counter() - start
    if os.getppid() != parent:
        job.tmp.unlink(missing_ok=True)
        raise RuntimeError("the service stopped during the update; nothing was published")
    publish(job.tmp, job.final)
    if job.handoff is not None and job.format == "skops":
        start = time.perf_counter()
        dump(model, job.handoff, format="pickle")
        seconds["handoff"] = time.perf_counter() - start
        return UpdateReply(True, path=str(job.final), handoff=str(job.handoff),
                           seconds=seconds)
    return UpdateReply(True, path=str(job.final), seconds=seconds)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parent = int(argv[0])
    _die_with_parent()
    if os.getppid() != parent:
        return 3
    try:
        os.nice(UPDATE_NICENESS)
    except OSError:
        pass
    import sklearn_micro.persistence  # noqa: F401  (the imports, before the first job)

    for line in sys.stdin:
        job = UpdateJob.from_json(line)
        try:
            reply = update(job, parent)
        except Exception as exc:  # reported to the service, which keeps serving
            job.tmp.unlink(missing_ok=True)
            reply = UpdateReply(False, error=f"{type(exc).__name__}: {exc}")
        sys.stdout.write(reply.to_json() + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
