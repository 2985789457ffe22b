"""The event log on its own: durable settings, offsets, chunks, retention, rollback."""

import sqlite3

import pytest

from sklearn_micro.serving.eventlog import EventLog


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
