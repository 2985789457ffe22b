"""The process that applies updates: load the served file, take one chunk, save.

``python -m sklearn_micro.serving.worker PARENT_PID`` reads one job a line on its standard
input, a JSON object with ``base`` and ``base_format`` (the file of the model being served),
``chunk_file`` (an ``.npz`` of ``user``, ``item`` and ``chunk``), ``tmp``, ``final``,
``format`` and ``handoff``: it loads the model at ``base``, runs ``partial_fit`` on the
chunk, writes the result to ``tmp`` and renames it to ``final`` (and, for a skops snapshot,
pickles the model to ``handoff``, which loads ten times faster than the skops file: the
service loads it, and the next update starts from it), then answers one JSON line,
``{"ok": true, "seconds": {...}, ...}`` or ``{"ok": false, "error": "..."}``. It runs at a
lower priority than the service, and dies with it: a worker whose service is gone
publishes nothing. With ``SKLEARN_MICRO_FAILPOINT=during-update`` (for tests only) it
waits after ``partial_fit``, before saving (`failpoint_seconds`).

The service keeps one such process, so that the sampler's compiled kernels (which hold the
GIL, on numba's threads) never run inside the process that answers requests, while the
interpreter's start, the imports and the loading of compiled kernels are paid once.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from ..base import partial_fit_through

UPDATE_NICENESS = 10
FAILPOINT = "SKLEARN_MICRO_FAILPOINT"


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


def update(base: Path, chunk_file: Path, tmp: Path, final: Path, fmt: str, parent: int,
           handoff: Path | None = None, base_format: str | None = None) -> dict:
    """Load ``base``, take the chunk, save to ``tmp`` and rename it to ``final``. With
    ``handoff``, a skops snapshot is also pickled there, for the service to load fast (a
    file of this process's own, in the state folder's temporary space: a restart never
    reads it)."""
    from sklearn_micro import EngagementLog
    from sklearn_micro.persistence import dump, load

    from .snapshots import publish

    seconds = {}
    start = time.perf_counter()
    model = load(base, format=base_format or fmt)
    seconds["load"] = time.perf_counter() - start
    with np.load(chunk_file) as data:
        log = EngagementLog(data["user"], data["item"], data["chunk"])
    start = time.perf_counter()
    partial_fit(model, log)
    seconds["partial_fit"] = time.perf_counter() - start
    wait = failpoint_seconds("during-update")
    if wait:
        print(f"failpoint during-update: waiting {wait:.1f} s", file=sys.stderr, flush=True)
        time.sleep(wait)
    start = time.perf_counter()
    dump(model, tmp, format=fmt)
    seconds["save"] = time.perf_counter() - start
    if os.getppid() != parent:
        tmp.unlink(missing_ok=True)
        raise RuntimeError("the service stopped during the update; nothing was published")
    publish(tmp, final)
    if handoff is not None and fmt == "skops":
        start = time.perf_counter()
        dump(model, handoff, format="pickle")
        seconds["handoff"] = time.perf_counter() - start
        return {"path": str(final), "handoff": str(handoff), "seconds": seconds}
    return {"path": str(final), "seconds": seconds}


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
        job = json.loads(line)
        try:
            answer = {"ok": True, **update(
                Path(job["base"]), Path(job["chunk_file"]), Path(job["tmp"]),
                Path(job["final"]), job["format"], parent, Path(job["handoff"]),
                job["base_format"])}
        except Exception as exc:  # reported to the service, which keeps serving
            Path(job["tmp"]).unlink(missing_ok=True)
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
