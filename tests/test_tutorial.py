"""docs/tutorial.md's commands, run in order on a small log of the Higgs file's form: its
``bash`` and ``python`` blocks as written, but for the log's path, the port and K."""

import gzip
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from sklearn_micro.datasets import make_engagements
from sklearn_micro.persistence import load

pytest.importorskip("pyarrow")
pytest.importorskip("skops")
pytest.importorskip("uvicorn")

PAGE = Path(__file__).resolve().parents[1] / "docs" / "tutorial.md"
HIGGS = "../shared/data/higgs-twitter/higgs-activity_time.txt.gz"
ORIGIN = 1341100800  # the page's --origin: 2012-07-01 00:00 UTC
SIX_HOURS = 21600


def blocks(text: str) -> list[tuple[str, str]]:
    """The page's ``bash`` and ``python`` blocks, in order, as (language, code)."""
    return re.findall(r"^```(bash|python)\n(.*?)^```", text, flags=re.S | re.M)


def commands(code: str) -> list[str]:
    """A bash block's commands, one a line once the continuations are joined."""
    return [line.strip() for line in code.replace("\\\n", " ").splitlines() if line.strip()]


def write_small_higgs(path: Path) -> None:
    """A log of 28 six-hour chunks from ORIGIN in the raw Higgs file's form."""
    log = make_engagements(n_users=400, n_items=600, n_chunks=28, n_interests=6,
                           n_engagements=9000, random_state=0)
    rng = np.random.default_rng(0)
    times = ORIGIN + log.chunk * SIX_HOURS + rng.integers(0, SIX_HOURS, len(log))
    kinds = rng.choice(["RT", "MT", "RE"], len(log))
    with gzip.open(path, "wt") as f:
        for row in zip(log.user, log.item, times, kinds, strict=True):
            f.write("{} {} {} {}\n".format(*row))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def curl(command: str, port: int, cwd: Path) -> dict:
    """A ``curl -s URL [--data-binary @FILE | -d BODY]`` line, sent with urllib."""
    words = shlex.split(command)[1:]
    data = url = None
    while words:
        word = words.pop(0)
        if word in ("-d", "--data-binary"):
            data = words.pop(0)
            data = (cwd / data[1:]).read_bytes() if data.startswith("@") else data.encode()
        elif not word.startswith("-"):
            url = word
    url = "http://" + url.replace("localhost:8000", f"127.0.0.1:{port}")
    with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=60) as r:
        body = r.read().decode()
    return json.loads(body) if body.startswith("{") else {"text": body}


def wait_for(port: int, ready, seconds: float = 180) -> dict:
    deadline = time.monotonic() + seconds
    while True:
        try:
            health = curl("curl -s localhost:8000/health", port, Path("."))
            if ready(health):
                return health
        except OSError:
            pass
        assert time.monotonic() < deadline, "the service did not get there in time"
        time.sleep(0.5)


def test_the_tutorials_commands_run(tmp_path):
    write_small_higgs(tmp_path / "higgs.txt.gz")
    port = free_port()
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    server = None
    try:
        for language, code in blocks(PAGE.read_text()):
            code = code.replace(HIGGS, "higgs.txt.gz").replace("--k 100", "--k 8")
            if language == "python":
                subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True,
                               timeout=300)
                continue
            for command in commands(code):
                if command.startswith("curl"):
                    answer = curl(command, port, tmp_path)
                    if "/chunks" in command:  # applied before the next step reads it
                        health = wait_for(port, lambda h: not h["queued"])
                        assert health["last_error"] is None, health["last_error"]
                        assert health["chunk"] == answer["chunk"]
                elif command.startswith("sklearn-micro serve"):
                    argv = shlex.split(command.rstrip("&").replace("8000", str(port)))
                    server = subprocess.Popen([str(bin_dir / argv[0]), *argv[1:]],
                                              cwd=tmp_path, env=env,
                                              stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL)
                    wait_for(port, lambda h: h["status"] == "ok")
                else:
                    subprocess.run(["bash", "-e", "-o", "pipefail", "-c", command],
                                   cwd=tmp_path, env=env, check=True, timeout=600)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    # what the page says each step leaves
    assert load(tmp_path / "model.skops")[-1].chunking_ == {
        "time": "timestamp", "chunk_length": SIX_HOURS, "origin": ORIGIN}
    assert sorted(p.name for p in tmp_path.glob("chunk-*.json")) == [
        f"chunk-{c}.json" for c in (24, 25, 26, 27)]
    assert (tmp_path / "model.skops.d" / "chunk-24.skops").is_file()
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "candidates.parquet")
    assert table.column_names == ["user", "rank", "item", "score"] and table.num_rows
    assert load(tmp_path / "model-27.skops")[-1].latest_chunk_ == 27
    assert (tmp_path / "evaluation" / "results.md").is_file()
