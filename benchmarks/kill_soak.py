"""``kill -9`` of `sklearn-micro serve` at random moments, and what it keeps.

Fits a small MiCRO on a generated log, starts ``sklearn-micro serve`` on 127.0.0.1 with
``--chunk-seconds`` short (chunks close while engagements arrive) and runs a client that
posts engagements one request after another (1 to 8 a request, ``--rate`` requests a
second at most), each a (user, item) pair of the model's ids that the model has never
seen and that no other request sends, and records every acknowledged request (a 200).
The server is killed with SIGKILL ``--kills`` times, at moments drawn from ``--seed``,
aimed in turn at three phases:

- ingest: no close queued or being applied;
- a close: a close being applied (its chunk file handed to the update process, or the new
  model being loaded), its snapshot not renamed into place yet;
- between a snapshot's rename and its swap: the newest snapshot is of a chunk after the
  served one. The service runs with ``SKLEARN_MICRO_FAILPOINT=after-snapshot-rename:S``
  (``--window``), which holds every close there S seconds (requests are answered
  meanwhile), so that kills can land there.

Each kill is classified by what was observed just before it (``/health`` and the state
folder) and what is found after it (the snapshot on disk, the server's log); the server is
started again at once (restart seconds: from the start of the new process to its first
``/health``). After each restart ``/health`` must show, in its open chunk, at least the
engagements acknowledged there before the kill, and as many observed when no close is due
(when one is, they are observed once it is swapped in). The update process's pid is taken
before each kill; it must be gone within 5 s of it.

At the end the client stops, the open chunk is closed and applied, and the service is
stopped (SIGTERM); the check of "the model holds it" is then made on the served snapshot
itself, loaded here: an acknowledged engagement is held when its (user, item) pair is in
the model's ``seen_items_`` (every engagement a ``partial_fit`` takes is; no pair of the
soak was in the training log). Requests whose answer the kill cut off may be held too
(committed before the kill): counted apart. Acknowledged offsets must never overlap.

    python benchmarks/kill_soak.py                      # 20 kills, seed 0
    python benchmarks/kill_soak.py --kills 5 --seed 3

Bounded in time (``--max-seconds``): when it is up, no more kills are made and the check
runs on what was done.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from _harness import header, log, table  # noqa: E402

from sklearn_micro import MiCRO, datasets  # noqa: E402
from sklearn_micro.persistence import dump, load  # noqa: E402
from sklearn_micro.serving import worker  # noqa: E402

HOST = "127.0.0.1"
PHASES = ("ingest", "close", "rename-swap")
PHASE_NAMES = {"ingest": "at ingest", "close": "in a close",
               "rename-swap": "between rename and swap"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def call(port, path, body=None, timeout=10.0):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://{HOST}:{port}{path}", data=data,
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


class Server:
    """One ``sklearn-micro serve`` process after another, on one port and state folder."""

    def __init__(self, model_path: Path, state: Path, port: int, args, log_path: Path):
        self.command = [sys.executable, "-m", "sklearn_micro.cli", "serve", str(model_path),
                        "--port", str(port), "--state-dir", str(state),
                        "--chunk-seconds", str(args.chunk_seconds), "--log-level", "info"]
        self.env = {**os.environ,
                    "SKLEARN_MICRO_FAILPOINT": f"after-snapshot-rename:{args.window}"}
        self.port = port
        self.log_path = log_path
        self.proc = None

    def start(self) -> float:
        """Start it and return the seconds until its first ``/health``."""
        start = time.monotonic()
        with open(self.log_path, "ab") as f:
            self.proc = subprocess.Popen(self.command, stdout=f, stderr=subprocess.STDOUT,
                                         env=self.env)
        while time.monotonic() < start + 600:
            if self.proc.poll() is not None:
                raise SystemExit(f"the server stopped; see {self.log_path}")
            try:
                if call(self.port, "/health", timeout=2)[0] == 200:
                    return time.monotonic() - start
            except OSError:
                pass
            time.sleep(0.05)
        raise SystemExit("the server did not start within 600 s")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


class Client(threading.Thread):
    """Posts engagements one request after another; keeps every acknowledgement."""

    def __init__(self, port: int, pairs: np.ndarray, seed: int, rate: float):
        super().__init__(daemon=True)
        self.pause = 1 / rate
        self.port = port
        self.pairs = pairs
        self.rng = np.random.default_rng(seed)
        self.next = 0
        self.acked = []     # (first row of pairs, n, chunk, last offset)
        self.cut_off = []   # (first row, n): sent, the answer cut off by a kill
        self.refused = 0    # answered, not 200
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        while not self.stop.wait(self.pause):
            n = int(self.rng.integers(1, 9))
            if self.next + n > len(self.pairs):
                log("the client used every pair; it stops")
                return
            rows = self.pairs[self.next:self.next + n]
            first, self.next = self.next, self.next + n
            body = {"user": rows[:, 0].tolist(), "item": rows[:, 1].tolist()}
            try:
                status, answer = call(self.port, "/engagements", body)
            except (OSError, ValueError) as exc:
                if isinstance(getattr(exc, "reason", None), ConnectionRefusedError):
                    self.next = first  # not sent: no server listening; sent again later
                else:
                    with self.lock:
                        self.cut_off.append((first, n))
                time.sleep(0.02)
                continue
            with self.lock:
                if status == 200 and answer["acknowledged"] == n:
                    self.acked.append((first, n, answer["chunk"], answer["offset"]))
                else:
                    self.refused += 1

    def acknowledged_in(self, chunk: int) -> int:
        with self.lock:
            return sum(n for _, n, c, _ in self.acked if c == chunk)


def observe_phase(port: int, state: Path) -> tuple[str, int] | None:
    """The phase now and the served chunk: the state folder read first, then ``/health``
    (so a snapshot seen newer than the served chunk was renamed before a moment when the
    swap had not happened)."""
    names = os.listdir(state)
    snapshots = [int(n[len("chunk-"):-len(".skops")]) for n in names
                 if n.startswith("chunk-") and n.endswith(".skops")]
    handed = any(n.startswith(".tmp-chunk-") for n in names)
    try:
        status, health = call(port, "/health", timeout=2)
    except OSError:
        return None
    served = health["chunk"]
    if snapshots and max(snapshots) > served:
        return "rename-swap", served
    if health["queued"] or handed:
        return "close", served
    return "ingest", served


def phase_of_kill(seen: str, served: int, state: Path, log_text: str) -> str:
    """The phase a kill came in, from what was ``seen`` just before it and the evidence
    after it: the snapshot of the chunk after ``served`` on disk (renamed before the
    kill) and the server's log since the look (``chunk c is live``: swapped before it)."""
    if seen == "ingest":
        return "ingest"
    if f"chunk {served + 1} is live" in log_text:
        return "ingest"  # the close was over when the kill came
    if (state / f"chunk-{served + 1}.skops").exists():
        return "rename-swap"
    return "close"


def pairs_for(model, seed: int) -> np.ndarray:
    """Every (user, item) pair of the model's ids that it has not seen, shuffled."""
    users, items = model.user_ids_.ids, model.item_ids_.ids
    u, i = np.meshgrid(np.arange(len(users)), np.arange(len(items)), indexing="ij")
    keys = (u.ravel().astype(np.int64) << 32) | i.ravel()
    fresh = keys[~np.isin(keys, model.seen_items_.keys)]
    np.random.default_rng(seed).shuffle(fresh)
    return np.column_stack([users[fresh >> 32], items[fresh & 0xFFFFFFFF]])


def held_pairs(model, pairs: np.ndarray) -> np.ndarray:
    """Whether each (user, item) row of ``pairs`` is in ``model.seen_items_``."""
    u = model.user_ids_.lookup(pairs[:, 0])
    i = model.item_ids_.lookup(pairs[:, 1])
    keys = (u.astype(np.int64) << 32) | i
    return (u >= 0) & (i >= 0) & np.isin(keys, model.seen_items_.keys)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chunk-seconds", type=float, default=1.5)
    parser.add_argument("--rate", type=float, default=50.0,
                        help="requests a second the client sends at most")
    parser.add_argument("--window", type=float, default=0.5,
                        help="seconds each close waits between rename and swap")
    parser.add_argument("--max-seconds", type=float, default=900.0,
                        help="no kill after this long")
    parser.add_argument("--work", default=None, help="folder for the model, state and log "
                        "(default: a temporary one)")
    args = parser.parse_args(argv)
    header("kill -9 soak of sklearn-micro serve", "kill_soak.py", argv)
    began = time.monotonic()
    rng = random.Random(args.seed)
    work = Path(args.work or tempfile.mkdtemp(prefix="kill-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    events = datasets.make_engagements(n_users=500, n_items=600, n_chunks=4, random_state=0)
    items = np.unique(events.item)
    model = MiCRO(random_state=0).fit(events[events.chunk < 3],
                                      item_interest=(items, items % 5))
    model_path = dump(model, work / "model.skops")
    state = work / "state"
    pairs = pairs_for(model, args.seed)
    log(f"work folder {work}; {len(pairs):,} pairs to send")

    port = free_port()
    server = Server(model_path, state, port, args, work / "server.log")
    restarts = [server.start()]
    client = Client(port, pairs, args.seed, args.rate)
    client.start()
    plan = [PHASES[k % 3] for k in range(args.kills)]
    rng.shuffle(plan)
    kills, checks_failed, orphans = [], [], []
    try:
        for k, aim in enumerate(plan):
            if time.monotonic() - began > args.max_seconds:
                log(f"--max-seconds is up after {k} kills")
                break
            time.sleep(rng.uniform(0.2, 1.5))
            deadline = time.monotonic() + 20
            workers = worker.update_processes(server.proc.pid)
            while True:
                workers = worker.update_processes(server.proc.pid) or workers
                seen = observe_phase(port, state)
                if seen is not None and (seen[0] == aim or time.monotonic() > deadline):
                    break
                if time.monotonic() > deadline + 60:
                    raise SystemExit(f"the server stopped answering; see {server.log_path}")
                time.sleep(0.01)
            phase, served = seen
            before = len(server.log_path.read_text())
            server.kill()
            killed_at = time.monotonic()
            phase = phase_of_kill(phase, served, state,
                                  server.log_path.read_text()[before:])
            kills.append((aim, phase))
            # the update process dies with the server
            while worker.running(workers) and time.monotonic() < killed_at + 5:
                time.sleep(0.02)
            orphans.extend(worker.running(workers))
            with client.lock:
                acked_before = list(client.acked)
            restarts.append(server.start())
            _, health = call(port, "/health")
            open_acked = sum(n for _, n, c, _ in acked_before if c == health["open_chunk"])
            # observed at once when the served model is the open chunk's; else when the
            # closes due are swapped in (held in the event log meanwhile)
            observable = health["chunk"] == health["open_chunk"] - 1
            if not (health["engagements"] >= open_acked
                    and (health["observed"] >= open_acked or not observable)):
                checks_failed.append(f"kill {k + 1}: open chunk {health['open_chunk']} holds "
                                     f"{health['engagements']} (observed "
                                     f"{health['observed']}), {open_acked} acknowledged")
            log(f"kill {k + 1:>2}/{len(plan)} aimed at {aim:<11} landed in {phase:<11} "
                f"(served chunk {served}); restart {restarts[-1]:.1f} s; "
                f"{sum(n for _, n, _, _ in acked_before):,} acknowledged so far")
        time.sleep(1.0)
    finally:
        client.stop.set()
        client.join(30)
    # the open chunk closed and applied, then a clean stop; the check runs on the snapshot
    end = time.monotonic() + 120
    while True:
        _, health = call(port, "/health")
        if not health["queued"]:
            if health["engagements"] == 0:
                break
            status, answer = call(port, "/chunks/close", {})
            if status not in (202, 409):  # 409: the clock closed it meanwhile
                checks_failed.append(f"the last close was refused: {answer}")
                break
        if time.monotonic() > end:
            checks_failed.append(f"the last chunks were not applied within 120 s: "
                                 f"{health['queued']} queued, last error "
                                 f"{health['last_error']}")
            break
        time.sleep(0.2)
    workers = worker.update_processes(server.proc.pid)
    server.stop()
    time.sleep(0.5)
    orphans.extend(worker.running(workers))
    served = load(health["path"])
    log(f"served at the end: chunk {health['chunk']}, {health['path']}")

    acked_rows = np.concatenate([np.arange(f, f + n) for f, n, _, _ in client.acked])
    held = held_pairs(served, pairs[acked_rows])
    cut = (np.concatenate([np.arange(f, f + n) for f, n in client.cut_off])
           if client.cut_off else np.empty(0, np.int64))
    cut_held = int(held_pairs(served, pairs[cut]).sum()) if cut.size else 0
    never_sent = held_pairs(served, pairs[client.next:client.next + 10_000]).sum()
    spans = sorted((o - n + 1, o) for _, n, _, o in client.acked)
    overlaps = sum(a <= prev for (_, prev), (a, _) in zip(spans, spans[1:], strict=False))
    if overlaps:
        checks_failed.append(f"{overlaps} acknowledged offset ranges overlap")
    if never_sent:
        checks_failed.append(f"{never_sent} pairs never sent are in the model")
    if client.refused:
        checks_failed.append(f"{client.refused} requests answered, not with a 200")

    by_phase = {p: sum(1 for _, seen in kills if seen == p) for p in PHASES}
    times = np.array(restarts[1:]) if len(restarts) > 1 else np.array(restarts)
    print(table(
        ["kills", *(PHASE_NAMES[p] for p in PHASES), "acknowledged", "held", "lost",
         "cut off (held)", "update processes left", "restart s p50", "restart s max"],
        [[len(kills), *(by_phase[p] for p in PHASES), f"{held.size:,}",
          f"{int(held.sum()):,}", f"{int((~held).sum()):,}",
          f"{cut.size:,} ({cut_held:,})", len(orphans), f"{np.median(times):.2f}",
          f"{times.max():.2f}"]]))
    print(f"\nEngagements acknowledged in {len(client.acked):,} requests of 1 to 8; "
          f"the first start took {restarts[0]:.2f} s; {time.monotonic() - began:.0f} s in "
          f"all; chunks {model.latest_chunk_ + 1} to {health['chunk']} closed (every "
          f"{args.chunk_seconds:g} s, each held {args.window:g} s between rename and swap).")
    print("\nChecks: " + ("all passed." if not checks_failed else "FAILED: "
                          + "; ".join(checks_failed)))
    if checks_failed or (~held).any() or orphans:
        sys.exit(1)


if __name__ == "__main__":
    main()
