"""The service's event log: every acknowledged engagement, on disk before it is answered.

A SQLite database (the standard library's ``sqlite3``) in WAL mode with
``synchronous=FULL``: a commit returns once its pages are in the write-ahead log and that
file is synced (``fsync``), so a committed write survives ``kill -9`` and a power cut. One
commit holds every request that arrived together (a group commit: one sync for all).

What it holds:

- ``batches``: one row per acknowledged request, ``(offset, chunk, n, user, item)``, the
  request's ``n`` engagements at offsets ``offset .. offset + n - 1`` (offsets increase by
  one per engagement and are never reused), its ids as JSON lists;
- ``closed``: the chunks whose close was acknowledged (an engagement of chunk ``c + 1``
  closes chunk ``c`` too, without a row here);
- ``meta``: the next offset.

A transaction that was not committed when the process stopped (a torn tail) is rolled back
by SQLite when the file is next opened: its frames in the write-ahead log end without a
valid commit frame (a frame is checksummed, so a torn one is seen), and SQLite keeps the
log up to the last complete commit. Such a transaction was never acknowledged: a commit is
answered only after its frames, commit frame included, were written and synced (on a disk
that keeps what it synced, only a commit not yet answered can be torn). Opening
the log logs what it holds and how much of the write-ahead log it kept and dropped. Rows
of chunks that every kept snapshot holds are deleted (`EventLog.forget_through`, called
with the oldest kept snapshot's chunk): the log keeps what the oldest snapshot lacks, so
a restart that finds the newest snapshots damaged serves an older one and loses nothing.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

__all__ = ["EventLog", "Pending", "wal_frames"]

logger = logging.getLogger("sklearn_micro.serving")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS batches (
    offset INTEGER PRIMARY KEY, chunk INTEGER NOT NULL, n INTEGER NOT NULL,
    user BLOB NOT NULL, item BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS batches_chunk ON batches (chunk);
CREATE TABLE IF NOT EXISTS closed (chunk INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


_WAL_MAGIC = (0x377F0682, 0x377F0683)


def wal_frames(wal: Path) -> tuple[int, int] | None:
    """What a write-ahead log holds before SQLite opens it: ``(frames, torn)``, the whole
    frames of its current generation (those with the header's salts) and the bytes of a
    torn frame after them (0 if none); None when there is no such file (the log was closed
    cleanly). Its checksums are left to SQLite."""
    try:
        f = open(wal, "rb")
    except FileNotFoundError:
        return None
    with f:
        size = f.seek(0, 2)
        if size == 0:
            return None
        f.seek(0)
        header = f.read(32)
        if len(header) < 32:
            return 0, size
        magic, _, page_size = struct.unpack(">3I", header[:12])
        if magic not in _WAL_MAGIC or page_size < 512:
            return 0, size - 32
        salts = header[16:24]
        frame = 24 + page_size
        frames, position = 0, 32
        while position + frame <= size:
            f.seek(position)
            if f.read(24)[8:16] != salts:
                return frames, 0  # a frame of an earlier generation: not part of the log
            frames += 1
            position += frame
        if position < size:
            f.seek(position)
            head = f.read(24)
            if len(head) < 16 or head[8:16] == salts:
                return frames, size - position
        return frames, 0


@dataclass(frozen=True)
class Pending:
    """What the log holds beyond a chunk: the engagements of later chunks, in offset order,
    and the later chunks whose close was acknowledged."""

    offsets: list[int]
    chunks: list[int]
    users: list[list]
    items: list[list]
    closed: list[int]

    @property
    def n_engagements(self) -> int:
        return sum(len(u) for u in self.users)


class EventLog:
    """The event log at ``path`` (created if missing).

    Writes go through one connection, one at a time (`append`); reads (`chunk`, `after`)
    open their own, so a close reading a large chunk never holds up a commit.

    Parameters
    ----------
    path : path
        The database file; SQLite keeps ``-wal`` and ``-shm`` files beside it.
    """

    def __init__(self, path):
        self.path = Path(path)
        self._lock = threading.Lock()
        wal = wal_frames(self.path.with_name(self.path.name + "-wal"))
        self._db = self._connect()
        with self._db:
            self._db.executescript(_SCHEMA)
        row = self._db.execute("SELECT value FROM meta WHERE key = 'next_offset'").fetchone()
        self.next_offset = 0 if row is None else int(row[0])
        self._log_opened(wal)

    def _log_opened(self, wal: tuple[int, int] | None) -> None:
        """Log what the log holds, and what SQLite kept and dropped of the write-ahead log a
        stopped process left (``wal``: its frames and the bytes of a torn last frame)."""
        requests, engagements, first, last = self._db.execute(
            "SELECT COUNT(*), COALESCE(SUM(n), 0), MIN(chunk), MAX(chunk) FROM batches"
        ).fetchone()
        held = (f"{engagements} engagements in {requests} requests (chunks {first} to "
                f"{last})" if requests else "no engagements") + (
                f", next offset {self.next_offset}")
        if wal is None:
            logger.info("event log %s: %s; no write-ahead log to recover", self.path, held)
            return
        # the frames SQLite kept: those up to the last complete commit
        kept = self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]
        frames, torn = wal
        dropped = max(0, frames - kept)
        if dropped or torn:
            logger.warning("event log %s: %s; the write-ahead log's tail was dropped: %d whole "
                        "frames and %d bytes of a torn frame after the last complete commit "
                        "(%d frames kept): a commit not whole on disk, so not acknowledged "
                        "unless the disk lost a write it had synced", self.path, held,
                        dropped, torn, kept)
        else:
            logger.info("event log %s: %s; write-ahead log recovered whole (%d frames)",
                     self.path, held, kept)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        return db

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @property
    def last_offset(self) -> int:
        """The offset of the last durable engagement (-1 when none ever was)."""
        return self.next_offset - 1

    def append(self, batches: list[tuple[int, list, list]], closed: list[int] = ()) -> list[int]:
        """Write ``batches``, each ``(chunk, user, item)``, and the ``closed`` chunks in one
        transaction, and return once it is synced: the first offset of each batch. On an
        error nothing of it is written."""
        with self._lock:
            first = []
            offset = self.next_offset
            rows = []
            for chunk, user, item in batches:
                first.append(offset)
                rows.append((offset, chunk, len(user), orjson.dumps(user), orjson.dumps(item)))
                offset += len(user)
            with self._transaction() as db:
                db.executemany("INSERT INTO batches VALUES (?, ?, ?, ?, ?)", rows)
                db.executemany("INSERT OR IGNORE INTO closed VALUES (?)",
                               [(c,) for c in closed])
                db.execute("INSERT OR REPLACE INTO meta VALUES ('next_offset', ?)", (offset,))
            self.next_offset = offset
            return first

    def forget_through(self, chunk: int) -> int:
        """Delete the rows of chunks up to ``chunk`` (held by a snapshot now); returns the
        engagements deleted."""
        with self._lock:
            with self._transaction() as db:
                n = db.execute("SELECT COALESCE(SUM(n), 0) FROM batches WHERE chunk <= ?",
                               (chunk,)).fetchone()[0]
                db.execute("DELETE FROM batches WHERE chunk <= ?", (chunk,))
                db.execute("DELETE FROM closed WHERE chunk <= ?", (chunk,))
            return int(n)

    @contextlib.contextmanager
    def _transaction(self):
        """One write transaction on the writing connection: committed (and synced) at the
        end, rolled back on an error."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def _read(self, sql: str, args: tuple):
        db = self._connect()
        try:
            return db.execute(sql, args).fetchall()
        finally:
            db.close()

    def chunk(self, chunk: int) -> tuple[list, list]:
        """``(user, item)`` of every engagement of ``chunk``, in offset order."""
        users, items = [], []
        for user, item in self._read("SELECT user, item FROM batches WHERE chunk = ? "
                                     "ORDER BY offset", (chunk,)):
            users.extend(orjson.loads(user))
            items.extend(orjson.loads(item))
        return users, items

    def after(self, chunk: int) -> Pending:
        """What the log holds of the chunks after ``chunk``."""
        start = time.perf_counter()
        rows = self._read("SELECT offset, chunk, user, item FROM batches WHERE chunk > ? "
                          "ORDER BY offset", (chunk,))
        closed = [c for (c,) in self._read("SELECT chunk FROM closed WHERE chunk > ? "
                                           "ORDER BY chunk", (chunk,))]
        pending = Pending([r[0] for r in rows], [r[1] for r in rows],
                          [orjson.loads(r[2]) for r in rows],
                          [orjson.loads(r[3]) for r in rows], closed)
        logger.info("event log: %d engagements after chunk %d, read in %.2f s",
                 pending.n_engagements, chunk, time.perf_counter() - start)
        return pending

    def size_bytes(self) -> int:
        """The database's files on disk, together."""
        return sum(p.stat().st_size for p in (self.path, self.path.with_name(
            self.path.name + "-wal")) if p.exists())
