"""The folder of saved updates beside the served model: one file per chunk.

A snapshot is written under a temporary name in the folder, synced, and renamed to
``chunk-<c><suffix>``: a name of that form is always a complete file, whatever stopped the
writer (``kill -9`` included). Temporary files left by a writer that was stopped are
removed when a service starts. One service at a time owns a folder (an exclusive lock on
``.lock`` inside it).
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from pathlib import Path

__all__ = ["Snapshots", "StateDirLocked"]

_NAME = re.compile(r"^chunk-(-?\d+)(\.skops|\.pkl|\.pickle)$")
TMP_PREFIX = ".tmp-"
logger = logging.getLogger("sklearn_micro.serving")


class StateDirLocked(RuntimeError):
    """Another service holds the folder."""


class Snapshots:
    """The snapshots of one served model.

    Parameters
    ----------
    folder : path
        Where they live (created if missing).
    suffix : str
        ``.skops``, ``.pkl`` or ``.pickle``: the format of MODEL, kept by its updates.
    keep : int
        How many of the newest are kept.
    """

    def __init__(self, folder, suffix: str, keep: int = 3):
        self.folder = Path(folder)
        self.suffix = suffix
        self.keep = keep
        self._lock = None

    def open(self) -> Snapshots:
        """Create the folder, take its lock and remove what stopped writers left."""
        self.folder.mkdir(parents=True, exist_ok=True)
        import fcntl

        lock = open(self.folder / ".lock", "a")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            raise StateDirLocked(
                f"{str(self.folder)!r} is in use by another sklearn-micro serve; give each "
                f"service its own --state-dir.") from None
        self._lock = lock
        for path in self.folder.glob(TMP_PREFIX + "*"):
            path.unlink(missing_ok=True)
        return self

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def list(self) -> list[tuple[int, Path]]:
        """``(chunk, path)`` of the complete snapshots, oldest first."""
        found = []
        if not self.folder.is_dir():
            return found
        for path in self.folder.iterdir():
            match = _NAME.match(path.name)
            if match and path.is_file():
                found.append((int(match.group(1)), path))
        return sorted(found)

    def path(self, chunk: int) -> Path:
        return self.folder / f"chunk-{chunk}{self.suffix}"

    def temporary(self, what: str = "") -> Path:
        """A fresh temporary path in the folder (removed at the next start if left)."""
        return self.folder / f"{TMP_PREFIX}{what}{os.getpid()}-{uuid.uuid4().hex[:8]}"

    def prune(self) -> None:
        """Remove all but the newest ``keep`` snapshots."""
        for _, path in self.list()[:-self.keep or None]:
            path.unlink(missing_ok=True)


def publish(tmp: Path, final: Path) -> None:
    """Sync ``tmp`` and rename it to ``final`` (atomic on one file system), then sync the
    folder so that the rename survives a power cut."""
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, final)
    try:
        fd = os.open(final.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
