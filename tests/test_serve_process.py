"""One real ``sklearn-micro serve`` process on 127.0.0.1: start, answer, take a chunk, be
killed (``kill -9``) in the middle of an update, of ingest, inside the update process or
between a snapshot's rename and its swap (at a failpoint), restart, and answer as the
in-process model does at every step, with every acknowledged engagement kept and no
update process left behind. ``benchmarks/kill_soak.py`` does the same at random moments."""

import copy
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pandas as pd
import pytest

from sklearn_micro import MiCRO
from sklearn_micro.persistence import dump
from sklearn_micro.serving import worker
from sklearn_micro.utils.estimator_checks import make_log

for _name in ("starlette", "uvicorn", "prometheus_client", "orjson", "skops"):
    pytest.importorskip(_name)

X_TRAIN, X_NEXT = make_log(5, as_frame=True)
CHUNKS = [X_NEXT[X_NEXT.chunk == c] for c in sorted(X_NEXT.chunk.unique())]
# the chunk whose update is killed: its engagements many times over, so that its sampling
# lasts well beyond the moment of the kill
LONG = pd.concat([CHUNKS[1]] * 3000, ignore_index=True)
USERS = [*X_TRAIN.user.unique()[:8].tolist(), *X_NEXT.user.unique()[-2:].tolist(), 7]
START_TIMEOUT = 240.0
UPDATE_TIMEOUT = 240.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, model_path, log_path, failpoint=None):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        env = {k: v for k, v in os.environ.items() if k != "SKLEARN_MICRO_FAILPOINT"}
        if failpoint is not None:
            env["SKLEARN_MICRO_FAILPOINT"] = failpoint
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sklearn_micro.cli", "serve", str(model_path),
                 "--port", str(self.port), "--log-level", "warning"],
                stdout=log, stderr=subprocess.STDOUT, env=env)

    def wait_log(self, text, timeout=UPDATE_TIMEOUT):
        """Wait until the server's log says ``text`` (its failpoints log when reached)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            log = self.log_path.read_text()
            if text in log:
                return
            assert self.proc.poll() is None and " failed (" not in log, log
            time.sleep(0.05)
        raise AssertionError(f"{text!r} not in the log after {timeout} s")


    def call(self, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data,
                                         headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def wait_healthy(self):
        end = time.monotonic() + START_TIMEOUT
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server stopped: {self.log_path.read_text()}")
            try:
                status, health = self.call("/health")
                if status == 200:
                    return health
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        raise AssertionError(f"not healthy after {START_TIMEOUT} s: {self.log_path.read_text()}")

    def wait_chunk(self, chunk):
        end = time.monotonic() + UPDATE_TIMEOUT
        while time.monotonic() < end:
            _, health = self.call("/health")
            if health["chunk"] == chunk:
                return health
            assert health["last_error"] is None, health
            time.sleep(0.2)
        raise AssertionError(f"chunk {chunk} not live after {UPDATE_TIMEOUT} s")

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


def _chunk_body(chunk):
    return {"chunk": int(chunk.chunk.iloc[0]), "user": chunk.user.tolist(),
            "item": chunk.item.tolist()}


def _assert_answers(server, model):
    for m, exclude_seen in ((5, False), (12, True)):
        status, got = server.call("/recommend", {"users": USERS, "m": m,
                                                 "exclude_seen": exclude_seen})
        items, scores = model.recommend(USERS, m, exclude_seen=exclude_seen)
        assert status == 200
        assert got["items"] == items.tolist()
        assert got["scores"] == [[None if np.isinf(s) else float(s) for s in row]
                                 for row in scores]


def test_serve_update_kill_restart(tmp_path):
    items = np.unique(X_TRAIN.item)
    model = MiCRO(random_state=0).fit(X_TRAIN, item_interest=(items, items % 4))
    model_path = dump(model, tmp_path / "model.skops")
    state = tmp_path / "model.skops.d"
    log_path = tmp_path / "server.log"
    server = Server(model_path, log_path)
    try:
        assert server.wait_healthy()["chunk"] == model.latest_chunk_
        _assert_answers(server, model)

        first, second = (int(c.chunk.iloc[0]) for c in CHUNKS[:2])
        assert server.call("/chunks", _chunk_body(CHUNKS[0]))[0] == 202
        server.wait_chunk(first)
        after_first = copy.deepcopy(model).partial_fit(CHUNKS[0])
        _assert_answers(server, after_first)

        # kill -9 once the second update is under way (its chunk file is written and handed
        # to the update process), before it is live
        assert server.call("/chunks", _chunk_body(LONG))[0] == 202
        end = time.monotonic() + 60
        while not list(state.glob(".tmp-chunk-*")) and time.monotonic() < end:
            time.sleep(0.01)
        server.stop(signal.SIGKILL)
        time.sleep(1.0)
        assert not (state / f"chunk-{second}.skops").exists()

        server = Server(model_path, log_path)
        health = server.wait_healthy()
        assert health["chunk"] == first and health["path"] == str(state / f"chunk-{first}.skops")
        _assert_answers(server, after_first)

        # the chunk was acknowledged, so it is in the event log: replayed, it takes
        assert server.call("/chunks", _chunk_body(LONG))[0] == 409
        server.wait_chunk(second)
        _assert_answers(server, after_first.partial_fit(LONG))
    finally:
        server.stop()


def test_kill_during_ingest_keeps_every_acknowledged_engagement(tmp_path):
    """Engagements posted in a loop, ``kill -9`` in the middle: after a restart the model
    holds every acknowledged engagement (and at most the one request in flight), and its
    close equals partial_fit on them."""
    items = np.unique(X_TRAIN.item)
    model = MiCRO(random_state=0).fit(X_TRAIN, item_interest=(items, items % 4))
    model_path = dump(model, tmp_path / "model.skops")
    log_path = tmp_path / "server.log"
    chunk = pd.concat([CHUNKS[0]] * 40, ignore_index=True)
    size = 7
    server = Server(model_path, log_path)
    acked = []
    try:
        server.wait_healthy()
        stop = threading.Event()

        def post():
            for start in range(0, len(chunk), size):
                if stop.is_set():
                    return
                rows = chunk.iloc[start:start + size]
                try:
                    status, answer = server.call("/engagements", {
                        "user": rows.user.tolist(), "item": rows.item.tolist()})
                except (urllib.error.URLError, ConnectionError, OSError):
                    return
                assert status == 200, answer
                acked.append(answer)

        client = threading.Thread(target=post)
        client.start()
        end = time.monotonic() + 60
        while len(acked) < 20 and time.monotonic() < end:
            time.sleep(0.01)
        server.stop(signal.SIGKILL)
        stop.set()
        client.join(60)
        n_acked = sum(a["acknowledged"] for a in acked)
        assert n_acked >= 20 * size and acked[-1]["offset"] == n_acked - 1

        server = Server(model_path, log_path)
        health = server.wait_healthy()
        held = health["engagements"]
        assert n_acked <= held <= n_acked + size
        assert health["observed"] == held and health["offset"] == held - 1
        assert server.call("/chunks/close", {})[0] == 202
        server.wait_chunk(int(chunk.chunk.iloc[0]))
        _assert_answers(server, copy.deepcopy(model).partial_fit(chunk.iloc[:held]))
    finally:
        server.stop()


def _close_until_failpoint(tmp_path, name, failpoint):
    """A fitted model saved at ``tmp_path / name``, a server of it with ``failpoint``, and
    the close of ``CHUNKS[0]`` there, held at the failpoint: ``(model, its path, the state
    folder, the server's log, the server, the chunk closing)``."""
    items = np.unique(X_TRAIN.item)
    model = MiCRO(random_state=0).fit(X_TRAIN, item_interest=(items, items % 4))
    model_path = dump(model, tmp_path / name)
    log_path = tmp_path / "server.log"
    server = Server(model_path, log_path, failpoint=failpoint)
    try:
        server.wait_healthy()
        assert server.call("/chunks", _chunk_body(CHUNKS[0]))[0] == 202
        server.wait_log(f"failpoint {failpoint}")
    except BaseException:
        server.stop()
        raise
    return (model, model_path, tmp_path / f"{name}.d", log_path, server,
            int(CHUNKS[0].chunk.iloc[0]))


def test_kill_during_a_close_ends_the_update_process_and_applies_the_queue_in_order(
        tmp_path):
    """``kill -9`` while the update process is inside a close (a failpoint holds it there),
    with the next chunk queued behind: the update process dies with the server, and after
    a restart both chunks are applied, in order, none skipped."""
    model, model_path, state, log_path, server, first = _close_until_failpoint(
        tmp_path, "model.skops", "during-update")
    behind = CHUNKS[1].assign(chunk=first + 1)
    try:
        assert server.call("/chunks", _chunk_body(behind))[0] == 202
        workers = worker.update_processes(server.proc.pid)
        assert len(workers) == 1
        assert server.call("/health")[1]["queued"] == [first, first + 1]
        server.stop(signal.SIGKILL)
        end = time.monotonic() + 10
        while worker.running(workers) and time.monotonic() < end:
            time.sleep(0.05)
        assert worker.running(workers) == [], "the update process outlived the server"
        assert not (state / f"chunk-{first}.skops").exists()

        server = Server(model_path, log_path)
        health = server.wait_healthy()
        assert health["chunk"] == model.latest_chunk_ and health["open_chunk"] == first + 2
        server.wait_chunk(first + 1)
        _assert_answers(server, copy.deepcopy(model).partial_fit(CHUNKS[0]).partial_fit(behind))
        # each applied on the one before: a snapshot of each, no failure on the way
        assert [p.name for p in sorted(state.glob("chunk-*"))] == [
            f"chunk-{first}.skops", f"chunk-{first + 1}.skops"]
        assert "failed" not in log_path.read_text()
    finally:
        server.stop()


def test_kill_between_snapshot_rename_and_swap_of_a_pickle_model(tmp_path):
    """A ``.pkl`` model through the update process: ``kill -9`` while a close waits between
    its snapshot's rename and its swap (a failpoint), with engagements of the next chunk
    acknowledged meanwhile. The restart serves the snapshot and holds every acknowledged
    engagement; their close equals ``partial_fit`` on them."""
    model, model_path, state, log_path, server, first = _close_until_failpoint(
        tmp_path, "model.pkl", "after-snapshot-rename")
    following = CHUNKS[1].assign(chunk=first + 1)
    try:
        assert (state / f"chunk-{first}.pkl").is_file()
        acked = 0
        for start in range(0, len(following), 10):
            rows = following.iloc[start:start + 10]
            status, answer = server.call("/engagements", {
                "user": rows.user.tolist(), "item": rows.item.tolist(), "chunk": first + 1})
            assert status == 200 and answer["chunk"] == first + 1, answer
            acked += answer["acknowledged"]
        health = server.call("/health")[1]
        assert health["chunk"] == model.latest_chunk_ and health["queued"] == [first]
        assert health["engagements"] == acked == len(following) and health["observed"] == 0
        server.stop(signal.SIGKILL)

        server = Server(model_path, log_path)
        health = server.wait_healthy()
        assert health["chunk"] == first and health["path"] == str(state / f"chunk-{first}.pkl")
        assert health["queued"] == [] and health["open_chunk"] == first + 1
        assert health["engagements"] == health["observed"] == acked
        after = copy.deepcopy(model).partial_fit(CHUNKS[0])
        assert server.call("/chunks/close", {})[0] == 202
        server.wait_chunk(first + 1)
        assert (state / f"chunk-{first + 1}.pkl").is_file()
        _assert_answers(server, after.partial_fit(following))
    finally:
        server.stop()
