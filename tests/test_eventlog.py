"""The event log on its own: durable settings, offsets, chunks, retention, rollback, and
its recovery after ``kill -9`` (a torn write-ahead log tail included)."""

import logging
import os
import sqlite3
import subprocess
import sys

import pytest

from sklearn_micro.serving.eventlog import EventLog, wal_frames


def test_settings_are_wal_and_full_sync(tmp_path):
    log = EventLog(tmp_path / "events.sqlite3")
    try:
        assert log._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert log._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    finally:
        log.close()


def test_offsets_increase_by_engagement_and_survive_reopening(tmp_path):
    path = tmp_path / "events.sqlite3"
    log = EventLog(path)
    assert log.last_offset == -1
    assert log.append([(4, [1, 2, 3], [10, 11, 12]), (4, ["a"], ["b"])]) == [0, 3]
    assert log.append([(5, [7], [8])], closed=[4]) == [4]
    log.close()
    log = EventLog(path)
    try:
        assert log.last_offset == 4
        assert log.chunk(4) == ([1, 2, 3, "a"], [10, 11, 12, "b"])
        pending = log.after(3)
        assert pending.offsets == [0, 3, 4] and pending.chunks == [4, 4, 5]
        assert pending.closed == [4] and pending.n_engagements == 5
        # retention forgets what a snapshot holds; offsets are never reused
        assert log.forget_through(4) == 4
        assert log.chunk(4) == ([], []) and log.after(3).closed == []
        assert log.forget_through(5) == 1
        assert log.append([(6, [1], [2])]) == [5]
    finally:
        log.close()


def test_a_failed_commit_leaves_nothing(tmp_path):
    log = EventLog(tmp_path / "events.sqlite3")
    try:
        log.append([(4, [1], [2])])
        with pytest.raises(sqlite3.Error):
            # the second row's offset collides with the first's primary key
            log.next_offset = 0
            log.append([(4, [3], [4])])
        log.next_offset = 1
        assert log.chunk(4) == ([1], [2]) and log.last_offset == 0
    finally:
        log.close()


# a writer in a process of its own: one request of 5 engagements a commit, each offset
# printed once its commit returned (acknowledged), then "done" and a wait to be killed
_WRITER = """
import sys, time
from sklearn_micro.serving.eventlog import EventLog
log = EventLog(sys.argv[1])
for k in range(int(sys.argv[2])):
    print(log.append([(3, list(range(k, k + 5)), list(range(5)))])[0] + 4, flush=True)
print("done", flush=True)
time.sleep(120)
"""


def _write_then_kill(path, n, *, kill_after=None):
    """Run the writer on ``path`` for ``n`` commits, ``kill -9`` it (after ``kill_after``
    acknowledgements, or once done) and return the acknowledged last offsets."""
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(n)],
                            stdout=subprocess.PIPE, text=True)
    acked = []
    try:
        for line in proc.stdout:
            if line.strip() == "done" or (kill_after is not None and len(acked) >= kill_after):
                break
            acked.append(int(line))
    finally:
        proc.kill()
        proc.wait(30)
        proc.stdout.close()
    return acked


def test_kill_while_writing_keeps_every_acknowledged_commit(tmp_path, caplog):
    path = tmp_path / "events.sqlite3"
    acked = _write_then_kill(path, 100_000, kill_after=60)
    assert len(acked) >= 60 and (tmp_path / "events.sqlite3-wal").stat().st_size > 0
    with caplog.at_level(logging.INFO, logger="sklearn_micro.serving"):
        log = EventLog(path)
    try:
        # the commit in flight at the kill may be there too, nothing acknowledged is missing
        assert log.last_offset >= acked[-1]
        assert log.after(-1).offsets == list(range(0, log.next_offset, 5))
        assert f"next offset {log.next_offset}" in caplog.text
    finally:
        log.close()


def test_a_torn_write_ahead_log_tail_is_dropped_and_logged(tmp_path, caplog):
    """The ``-wal`` file cut in the middle of its last frame after a ``kill -9``: the log
    opens with every commit before the torn one and says what it dropped. (A kill or a
    power cut cannot tear a frame that was synced; cutting one here stands for a disk that
    loses a synced write, which loses that commit.)"""
    path = tmp_path / "events.sqlite3"
    wal = tmp_path / "events.sqlite3-wal"
    acked = _write_then_kill(path, 30)
    assert len(acked) == 30
    frames, torn = wal_frames(wal)
    assert frames > 0 and torn == 0
    os.truncate(wal, wal.stat().st_size - 1000)
    assert wal_frames(wal) == (frames - 1, 4096 + 24 - 1000)
    with caplog.at_level(logging.INFO, logger="sklearn_micro.serving"):
        log = EventLog(path)
    try:
        assert "the write-ahead log's tail was dropped" in caplog.text
        assert f"{4096 + 24 - 1000} bytes of a torn frame" in caplog.text
        # what is kept is whole commits, in order: every one before the torn one
        assert log.last_offset == acked[-2]
        assert log.after(-1).offsets == list(range(0, log.next_offset, 5))
        assert log.append([(3, [1], [2])]) == [acked[-2] + 1]
    finally:
        log.close()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="sklearn_micro.serving"):
        EventLog(path).close()  # closed cleanly: nothing to recover
    assert "no write-ahead log to recover" in caplog.text
