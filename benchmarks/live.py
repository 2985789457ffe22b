"""`sklearn-micro serve` live: ingest beside `/recommend` load, freshness, closes, restarts.

On the default generated model (`reproduce`'s default log, K = 100) and on the fave preset
at 1/20 (``--preset fave --scale 0.05``, K = 250), each fitted once and cached in ``--work``
(as `benchmarks/serve.py` fits them), the script starts ``sklearn-micro serve`` on
127.0.0.1 and runs its own clients in this process:

1. **ingest**: for ``--seconds``, 16 `/recommend` connections (single users, ``m = 100``,
   each sending its next request when the last is answered) beside 64 `/engagements`
   connections posting 1, 100 or 10,000 engagements a request as fast as they are
   answered, or 100 a request paced at ``--rate`` engagements/s; a row without ingest is
   the peer of the others. Each row has a fresh server (an empty open chunk); the rows
   are run ``--rounds`` times in turn, each row's ratio taken to its round's peer.
2. **freshness**: trials, one after another, with the 16 `/recommend` connections running
   (and, in a second row, the paced ingest): (a) a user's top item is posted as engaged, and
   the user's ``exclude_seen`` answer is polled until that item is gone from it; (b) a
   brand-new item is posted as engaged by ``--burst`` users whose main interest is one
   interest, and 20 other users of that main interest are polled (``m = 100``) until it is
   in their answer. Both are timed from the 200 of the `/engagements` request to the end of
   the first answer that shows it; ``--cap`` seconds at most.
   **reach**, in this process: the share of such users with the new item in their top 100
   as the open chunk fills (what the ranking gives, whatever the latency).
3. **close**: engagements of the test chunks (1,000 first, for the update process's first
   close; then one test chunk; then five together) posted in requests of 10,000, then
   ``POST /chunks/close`` timed until `/health` serves the closed chunk.
4. **restart**: 0, 100,000 and 1,000,000 engagements (of the open chunk) posted, the
   server killed with SIGKILL and started again on its state folder, timed from the start
   of the process to the first `/health` answer (which the service gives only once the log
   is replayed), whose offsets are checked.

Every phase is bounded (``--seconds``, ``--trials``, ``--cap`` and fixed counts), servers
are killed in ``finally``. Markdown tables on stdout, progress on stderr.

    python benchmarks/live.py                  # both models, every phase (about 25 min)
    python benchmarks/live.py --quick          # the default model, small counts (< 2 min)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from _harness import fmt, header, log, table  # noqa: E402
from serve import (  # noqa: E402
    HOST,
    bodies_of,
    exchange,
    fit_model,
    free_port,
    get,
    load_phase,
    start_server,
)

CLIENTS = 16
INGEST_CONNECTIONS = 64
FULL_SCALE_CHUNK = 1_500_000


# ------------------------------------------------------------------ helpers


def metrics(port) -> dict:
    """The service's Prometheus sums and counts (``name_sum``, ``name_count``) by name."""
    with urllib.request.urlopen(f"http://{HOST}:{port}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("micro_") and ("_sum " in line or "_count " in line):
            name, value = line.rsplit(" ", 1)
            out[name] = out.get(name, 0.0) + float(value)
    return out


def pct(values, q) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def ms(x: float) -> str:
    return "n/a" if not np.isfinite(x) else fmt(x * 1000)


class Server:
    """``sklearn-micro serve`` of ``model_path`` on a free port; killed on exit."""

    def __init__(self, model_path, state, log_file, *, fresh=True):
        self.model_path, self.state, self.log_file = model_path, state, log_file
        self.port = free_port()
        start = time.perf_counter()
        self.proc = start_server(model_path, state, self.port, "process", log_file,
                                 fresh=fresh)
        self.start_seconds = time.perf_counter() - start

    def kill(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(60)
            except Exception:  # noqa: BLE001
                self.proc.kill()
                self.proc.wait(30)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill(signal.SIGKILL if exc[0] is not None else signal.SIGTERM)
        return False


def settle(pid: int, timeout: float = 60.0) -> None:
    """Wait until the children of ``pid`` (the update process, which loads the model after
    the service starts) have used no cpu for half a second (Linux's /proc)."""
    def cpu():
        total = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                total += int(fields[11]) + int(fields[12])
        return total

    end, last = time.monotonic() + timeout, -1
    while time.monotonic() < end:
        now = cpu()
        if now == last:
            return
        last = now
        time.sleep(0.5)


def engagement_bodies(pairs, size, count) -> list[bytes]:
    """``count`` bodies of ``size`` consecutive (cyclic) pairs of ``pairs``."""
    n = pairs.shape[0]
    out = []
    for j in range(count):
        rows = np.arange(j * size, (j + 1) * size) % n
        out.append(json.dumps({"user": pairs[rows, 0].tolist(),
                               "item": pairs[rows, 1].tolist()}).encode())
    return out


def posting(port, bodies, size, n_connections, stop, acks, errors, rate=None):
    """Tasks of ``n_connections`` connections posting ``bodies`` to `/engagements` until
    ``stop``: as fast as answered, or paced to ``rate`` engagements/s in all. Each 200 is
    recorded in ``acks`` as (start, seconds, engagements)."""
    async def one(c):
        reader, writer = await asyncio.open_connection(HOST, port)
        j = c
        interval = None if rate is None else n_connections * size / rate
        due = time.perf_counter() + (0 if interval is None else c * interval / n_connections)
        try:
            while not stop.is_set():
                if interval is not None:
                    wait = due - time.perf_counter()
                    due += interval
                    if wait > 0:
                        await asyncio.sleep(wait)
                        if stop.is_set():
                            break
                body = bodies[j % len(bodies)]
                j += n_connections
                start = time.perf_counter()
                status, _ = await exchange(reader, writer, b"/engagements", body)
                if status == 200:
                    acks.append((start, time.perf_counter() - start, size))
                else:
                    errors.append(status)
        finally:
            writer.close()

    return [asyncio.create_task(one(c)) for c in range(n_connections)]


async def post_json(reader, writer, path: bytes, value) -> tuple[int, dict]:
    status, body = await exchange(reader, writer, path, json.dumps(value).encode())
    return status, json.loads(body)


async def fill(port, pairs, n, size=10_000, n_connections=2) -> float:
    """Post ``n`` engagements of ``pairs`` (cyclic) in requests of ``size``; seconds."""
    bodies = engagement_bodies(pairs, size, -(-n // size))
    queue = list(range(len(bodies)))
    start = time.perf_counter()

    async def one():
        reader, writer = await asyncio.open_connection(HOST, port)
        try:
            while queue:
                status, body = await exchange(reader, writer, b"/engagements",
                                              bodies[queue.pop(0)])
                if status != 200:
                    raise SystemExit(f"/engagements answered {status}: {body[:200]}")
        finally:
            writer.close()

    await asyncio.gather(*(one() for _ in range(n_connections)))
    return time.perf_counter() - start


def wait_observed(port, n, timeout=600) -> dict:
    """`/health` once the open chunk holds ``n`` engagements, all observed."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        health = get(port, "/health")
        if health["engagements"] >= n and health["observed"] >= health["engagements"]:
            return health
        time.sleep(0.1)
    raise SystemExit(f"the service did not observe {n} engagements in {timeout} s")


# ------------------------------------------------------------------- phases


async def ingest_row(port, rec_bodies, bodies, size, rate, args):
    """One ingest row: the clients' latencies, the acknowledged requests within the row's
    seconds (seconds, engagements), the ingest errors and the service's metrics' change."""
    await load_phase(port, rec_bodies, 4, 1.0)  # warm the connections
    before = metrics(port)
    stop = asyncio.Event()
    acks, errors = [], []
    tasks = posting(port, bodies, size, INGEST_CONNECTIONS, stop, acks, errors,
                    rate) if size else []
    begin = time.perf_counter()
    rec = await load_phase(port, rec_bodies, CLIENTS, args.seconds)
    stop.set()
    await asyncio.gather(*tasks)
    after = metrics(port)
    span = [(lat, n) for start, lat, n in acks if start - begin <= args.seconds]
    return rec, span, errors, {k: after.get(k, 0) - before.get(k, 0) for k in after}


def ingest_phase(model_path, state, log_file, users, pairs, args) -> tuple[list, list]:
    """Table rows: ingest beside 16 `/recommend` clients, and where the service's time
    went (from its metrics)."""
    rec_bodies = bodies_of(users, 1, 100, 2000, 0)
    kinds = [("none", 0, None)] + [(f"{s:,} a request", s, None) for s in args.sizes]
    if args.rate:
        kinds.append((f"100 a request, paced at {args.rate:,.0f}/s", 100, args.rate))
    results = []
    for round_, (name, size, rate) in [(r, kind) for r in range(args.rounds)
                                       for kind in kinds]:
        load = os.getloadavg()[0]
        with Server(model_path, state, log_file) as server:
            port = server.port
            bodies = engagement_bodies(pairs, size, max(8, min(4000, 400_000 // size))) \
                if size else []

            rec, span, errors, m = asyncio.run(ingest_row(port, rec_bodies, bodies, size,
                                                          rate, args))
        lat = [s for s, _ in span]
        row = dict(name=name, round=round_ + 1, load=load,
                   rate=sum(n for _, n in span) / args.seconds,
                   ingest_p50=pct(lat, 50), ingest_p99=pct(lat, 99), errors=len(errors),
                   rec=rec, m=m)
        results.append(row)
        log(f"ingest {name}: {row['rate']:,.0f}/s, recommend {rec['per_second']:,.0f}/s p50 "
            f"{rec['p50']:.1f} p99 {rec['p99']:.1f} ms, errors {rec['errors']} + "
            f"{len(errors)}")
    base = {r["round"]: r["rec"]["p99"] for r in results if r["name"] == "none"}
    rows = [[r["round"], r["name"], "-" if r["name"] == "none" else f"{r['rate']:,.0f}",
             ms(r["ingest_p50"]), ms(r["ingest_p99"]), f"{r['rec']['per_second']:,.0f}",
             f"{r['rec']['p50']:.1f}", f"{r['rec']['p99']:.1f}",
             f"{r['rec']['p99'] / base[r['round']]:.2f}",
             f"{r['rec']['errors']} + {r['errors']}", f"{r['load']:.1f}"]
            for r in results]
    where = []
    for r in results:
        m = r["m"]
        commits = m.get("micro_event_log_sync_seconds_count", 0)
        observes = m.get("micro_observe_seconds_count", 0)
        batches = m.get("micro_batch_rows_count", 0)
        where.append([
            r["round"], r["name"], f"{commits / args.seconds:,.0f}",
            fmt(m.get("micro_event_log_commit_requests_sum", 0) / commits) if commits else "-",
            ms(m.get("micro_event_log_sync_seconds_sum", 0) / commits) if commits else "-",
            f"{observes / args.seconds:,.0f}",
            ms(m.get("micro_observe_seconds_sum", 0) / observes) if observes else "-",
            f"{m.get('micro_observe_seconds_sum', 0) / args.seconds:.0%}",
            fmt(m.get("micro_batch_rows_sum", 0) / batches) if batches else "-"])
    return rows, where


def main_interests(model) -> tuple[np.ndarray, np.ndarray]:
    """Each user's interest of most carried counts (-1: none), and the interests by how
    many users have them as main, most first."""
    indptr = model.support_indptr_
    size = np.diff(indptr)
    owner = np.repeat(np.arange(size.shape[0]), size)
    order = np.lexsort((-model.support_count_, owner))
    main = np.full(size.shape[0], -1, np.int64)
    first = indptr[:-1][size > 0]
    main[size > 0] = model.support_interest_[order][first]
    counts = np.bincount(main[main >= 0])
    return main, np.argsort(-counts, kind="stable")


async def freshness_trials(port, model, args, seed) -> dict:
    """(a) and (b) trials (module docstring), one after another; seconds from the 200."""
    rng = np.random.default_rng(seed)
    users = np.asarray(model.user_ids_.ids)
    main, top = main_interests(model)
    next_item = int(np.max(model.item_ids_.ids)) + 1 + 1_000_000 * seed
    reader, writer = await asyncio.open_connection(HOST, port)
    own, others, acks, missed, sizes = [], [], [], 0, []
    try:
        for t in range(args.trials):
            sizes.append(get(port, "/health")["engagements"])
            # (a) the user's top item, engaged: gone from its exclude_seen answer
            u = int(rng.choice(users))
            _, answer = await post_json(reader, writer, b"/recommend",
                                        {"users": [u], "m": 100, "exclude_seen": True})
            item = answer["items"][0][0]
            start = time.perf_counter()
            status, _ = await post_json(reader, writer, b"/engagements",
                                        {"user": [u], "item": [item]})
            acked = time.perf_counter()
            assert status == 200, status
            acks.append(acked - start)
            while time.perf_counter() - acked < args.cap:
                _, answer = await post_json(reader, writer, b"/recommend",
                                            {"users": [u], "m": 100, "exclude_seen": True})
                if item not in answer["items"][0]:
                    own.append(time.perf_counter() - acked)
                    break
            # (b) a new item engaged by --burst users of one main interest
            k = top[t % min(20, len(top))]
            of_k = users[main == k]
            pick = rng.choice(of_k, min(len(of_k), args.burst + 20), replace=False).tolist()
            engagers, watchers = pick[:args.burst], pick[args.burst:]
            new = next_item + t
            start = time.perf_counter()
            status, _ = await post_json(reader, writer, b"/engagements",
                                        {"user": engagers, "item": [new] * len(engagers)})
            acked = time.perf_counter()
            assert status == 200, status
            acks.append(acked - start)
            waiting = set(range(len(watchers)))
            while waiting and time.perf_counter() - acked < args.cap:
                _, answer = await post_json(reader, writer, b"/recommend",
                                            {"users": watchers, "m": 100})
                now = time.perf_counter()
                for j in list(waiting):
                    if new in answer["items"][j]:
                        others.append(now - acked)
                        waiting.discard(j)
            missed += len(waiting)
    finally:
        writer.close()
    return dict(own=own, others=others, acks=acks, missed=missed, sizes=sizes,
                own_missed=args.trials - len(own), watched=len(others) + missed)


async def freshness_row(port, rec_bodies, bodies, rate, model, args, seed) -> dict:
    """The freshness trials with 16 `/recommend` clients (and the ingest paced at ``rate``,
    if given) running beside them."""
    await load_phase(port, rec_bodies, 4, 1.0)
    stop = asyncio.Event()
    acks, errors = [], []
    tasks = posting(port, bodies, 100, INGEST_CONNECTIONS, stop, acks, errors,
                    rate) if rate else []
    clients = asyncio.create_task(load_phase(
        port, rec_bodies, CLIENTS, args.trials * 2 * (args.cap + 1) + 30))
    await asyncio.sleep(0.5)
    try:
        return await asyncio.wait_for(freshness_trials(port, model, args, seed),
                                      args.trials * 2 * (args.cap + 1) + 30)
    finally:
        stop.set()
        clients.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def freshness_phase(model_path, state, log_file, model, pairs, args) -> list:
    users = np.asarray(model.user_ids_.ids)
    rec_bodies = bodies_of(users, 1, 100, 2000, 0)
    rows = []
    backgrounds = [("16 /recommend clients", None)]
    if args.rate:
        backgrounds.append((f"16 clients + {args.rate:,.0f} engagements/s (100 a request)",
                            args.rate))
    for s, (name, rate) in enumerate(backgrounds):
        with Server(model_path, state, log_file) as server:
            port = server.port
            bodies = engagement_bodies(pairs, 100, 4000)
            r = asyncio.run(freshness_row(port, rec_bodies, bodies, rate, model, args, s))
        rows.append([name, args.trials, ms(pct(r["acks"], 50)), ms(pct(r["acks"], 99)),
                     ms(pct(r["own"], 50)), ms(pct(r["own"], 99)), r["own_missed"],
                     ms(pct(r["others"], 50)), ms(pct(r["others"], 99)),
                     f"{len(r['others'])} of {r['watched']}",
                     f"{min(r['sizes']):,} to {max(r['sizes']):,}"])
        log(f"freshness {name}: {rows[-1]}")
    return rows


def reach_by_open_chunk(model, pairs, args, sizes=(0, 10_000, 30_000, 100_000, 300_000),
                        trials=5) -> list:
    """In this process, no service: the share of 20 users of one main interest with a new
    item (engaged by ``--burst`` others of it) in their top 100, as the open chunk holds
    ``sizes`` engagements of the test chunks; ``model`` is left as it was."""
    import copy

    import pandas as pd

    rng = np.random.default_rng(0)
    users = np.asarray(model.user_ids_.ids)
    main, top = main_interests(model)
    chunk = model.latest_chunk_ + 1
    live, done, new = copy.copy(model), 0, int(np.max(model.item_ids_.ids)) + 10_000_000
    rows = []
    for size in sizes:
        if size > done:
            take = np.arange(done, size) % pairs.shape[0]
            live.observe(pd.DataFrame({"user": pairs[take, 0], "item": pairs[take, 1],
                                       "chunk": chunk}))
            done = size
        reached = 0
        for t in range(trials):
            pick = rng.choice(users[main == top[t]], args.burst + 20, replace=False)
            new += 1
            twin = copy.copy(live).observe(pd.DataFrame(
                {"user": pick[:args.burst], "item": new, "chunk": chunk}))
            items, _ = twin.recommend(pick[args.burst:], 100)
            reached += int((items == new).any(axis=1).sum())
        rows.append([f"{size:,}", f"{reached / (20 * trials):.0%}"])
    return rows


def close_phase(model_path, state, log_file, chunks, counts, args) -> list:
    """Rows and seconds: ``counts`` engagements of the test chunks posted into the open
    chunk, then closed, one after another on one server."""
    rows, times = [], []
    with Server(model_path, state, log_file) as server:
        port = server.port
        for name, n in counts:
            pairs = np.column_stack([np.concatenate([c.user for c in chunks]),
                                     np.concatenate([c.item for c in chunks])])[:n]
            served = get(port, "/health")["chunk"]
            ingest = asyncio.run(fill(port, pairs, n))
            wait_observed(port, n)
            start = time.perf_counter()
            with urllib.request.urlopen(urllib.request.Request(
                    f"http://{HOST}:{port}/chunks/close", data=b"{}",
                    headers={"content-type": "application/json"}), timeout=60) as answer:
                assert answer.status == 202, answer.status
            end = time.monotonic() + args.close_timeout
            while time.monotonic() < end:
                health = get(port, "/health")
                if health["chunk"] > served:
                    break
                if health["status"] != "ok":
                    raise SystemExit(f"the close failed: {health['last_error']}")
                time.sleep(0.05)
            else:
                raise SystemExit(f"the close took over {args.close_timeout} s")
            seconds = time.perf_counter() - start
            times.append(seconds)
            first = not rows  # the update process's first close: not per engagement
            rows.append([name, f"{n:,}", fmt(n / ingest), fmt(seconds),
                         "-" if first else fmt(seconds / n * 1e6),
                         "-" if first else fmt(seconds / n * FULL_SCALE_CHUNK)])
            log(f"close {name}: {rows[-1]}")
    return rows, times


def restart_phase(model_path, state, log_file, pairs, counts, args) -> list:
    """Rows: a server filled with ``n`` engagements, killed with SIGKILL and started
    again, twice (once with ``--quick``); the restarts' seconds and the replay's observe
    seconds."""
    rows = []
    for n in counts:
        server = Server(model_path, state, log_file)
        restarts, observe = [], []
        try:
            if n:
                asyncio.run(fill(server.port, pairs, n))
                health = wait_observed(server.port, n)
            else:
                health = get(server.port, "/health")
            for _ in range(1 if args.quick else 2):
                # a service killed as it starts leaves its update process loading
                settle(server.proc.pid)
                server.kill(signal.SIGKILL)
                server = Server(model_path, state, log_file, fresh=False)
                after = get(server.port, "/health")
                if not (after["offset"] == health["offset"] and after["engagements"] == n
                        and after["observed"] == n):
                    raise SystemExit(f"the restart replayed {after}, not {health}")
                restarts.append(server.start_seconds)
                observe.append(metrics(server.port).get("micro_observe_seconds_sum", 0.0))
        finally:
            server.kill(signal.SIGKILL)
        rows.append([f"{n:,}", ", ".join(fmt(s) for s in restarts),
                     ", ".join(fmt(s) for s in observe), f"{n:,}"])
        log(f"restart {n:,}: {rows[-1]}")
    return rows


# --------------------------------------------------------------------- main


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="the default model only, short phases (under 2 minutes)")
    parser.add_argument("--models", nargs="+", choices=["default", "fave"],
                        default=None, help="default: both (--quick: default)")
    parser.add_argument("--phases", nargs="+",
                        choices=["ingest", "freshness", "reach", "close", "restart"],
                        default=["ingest", "freshness", "reach", "close", "restart"])
    parser.add_argument("--seconds", type=float, default=None,
                        help="seconds per ingest row (default 10; --quick 2)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 100, 10_000],
                        help="engagements a request of the unpaced ingest rows")
    parser.add_argument("--rate", type=float, default=20_000.0,
                        help="engagements/s of the paced rows (0: none)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="times the ingest rows are run, in turn (default 2; --quick 1)")
    parser.add_argument("--trials", type=int, default=None,
                        help="freshness trials per row (default 30; --quick 5)")
    parser.add_argument("--burst", type=int, default=10,
                        help="users engaging each new item in a freshness trial")
    parser.add_argument("--cap", type=float, default=1.0,
                        help="seconds a freshness trial waits at most")
    parser.add_argument("--close-timeout", type=float, default=900.0)
    parser.add_argument("--work", default="/tmp/micro-live-bench",
                        help="folder of the cached models and the servers' state and logs")
    args = parser.parse_args(argv)
    if args.seconds is None:
        args.seconds = 2.0 if args.quick else 10.0
    if args.rounds is None:
        args.rounds = 1 if args.quick else 2
    if args.trials is None:
        args.trials = 5 if args.quick else 30
    models = args.models or (["default"] if args.quick else ["default", "fave"])
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    header("sklearn-micro serve, live", "live.py", argv)
    for name in models:
        spec = argparse.Namespace(data=None, train_chunks=None, dim=64, preset=None,
                                  scale=None, k=100)
        if name == "fave":
            spec.preset, spec.scale, spec.k = "fave", 0.05, 250
        model_path = work / ("default-k100.skops" if name == "default"
                             else "fave-s0.05-k250.skops")
        model, chunks = fit_model(spec, model_path)
        pairs = np.column_stack([np.concatenate([c.user for c in chunks]),
                                 np.concatenate([c.item for c in chunks])])
        users = np.asarray(model.user_ids_.ids)
        title = ("the default generated model" if name == "default"
                 else "the fave preset at 1/20")
        print(f"## {title}\n\n{len(users):,} users, {len(model.item_ids_):,} items, K = "
              f"{model.n_interests_}, chunk {model.latest_chunk_}; test chunks of "
              f"{int(np.mean([len(c) for c in chunks])):,} engagements on average\n",
              flush=True)
        state = work / f"state-{name}"
        with open(work / f"server-{name}.log", "ab") as log_file:
            if "ingest" in args.phases:
                rows, where = ingest_phase(model_path, state, log_file, users, pairs, args)
                print(f"Ingest beside {CLIENTS} `/recommend` connections (1 user, m = 100), "
                      f"{INGEST_CONNECTIONS} `/engagements` connections, {args.seconds:g} s "
                      f"a row:\n")
                print(table(["round", "ingest", "engagements/s", "ingest p50 ms",
                             "ingest p99 ms", "/recommend req/s", "p50 ms", "p99 ms",
                             "p99 / no ingest", "errors (rec + ingest)", "load average"],
                            rows) + "\n", flush=True)
                print("Where the service's time went (its metrics over the row):\n")
                print(table(["round", "ingest", "commits/s", "requests a commit", "ms a commit",
                             "observes/s", "ms an observe", "observer thread busy",
                             "users a /recommend batch"], where) + "\n", flush=True)
            if "freshness" in args.phases:
                rows = freshness_phase(model_path, state, log_file, model, pairs, args)
                print(f"Freshness, from the 200 of `/engagements` (a: the user's top item "
                      f"gone from its `exclude_seen` answer; b: a new item engaged by "
                      f"{args.burst} users of one main interest in the top 100 of 20 others; "
                      f"at most {args.cap:g} s):\n")
                print(table(["running beside", "trials", "post to 200 p50 ms", "p99 ms",
                             "(a) p50 ms", "(a) p99 ms", "(a) not seen",
                             "(b) p50 ms", "(b) p99 ms", "(b) users reached",
                             "open chunk at the trials"], rows) + "\n",
                      flush=True)
            if "reach" in args.phases:
                print(f"In this process (no service), users of one main interest with a new "
                      f"item engaged by {args.burst} others of it in their top 100, by the "
                      f"open chunk's engagements so far (5 interests, 20 users each):\n")
                print(table(["open chunk", "users reached"],
                            reach_by_open_chunk(model, pairs, args)) + "\n", flush=True)
            if "close" in args.phases:
                n1 = len(chunks[0])
                counts = [("the first after the start", 1000), ("one test chunk", n1),
                          ("five test chunks", 5 * n1)]
                rows, seconds = close_phase(model_path, state, log_file, chunks, counts,
                                            args)
                print("A close (`POST /chunks/close` until `/health` serves the chunk), "
                      "after posting the chunk in requests of 10,000:\n")
                print(table(["chunk", "engagements", "ingest engagements/s", "close s",
                             "us an engagement", f"implied s at {FULL_SCALE_CHUNK:,}"],
                            rows) + "\n", flush=True)
                slope = (seconds[2] - seconds[1]) / (4 * n1)
                print(f"From one test chunk to five, {slope * 1e6:.2f} us a further "
                      f"engagement: {fmt(seconds[1] + slope * (FULL_SCALE_CHUNK - n1))} s at "
                      f"{FULL_SCALE_CHUNK:,} on this model.\n", flush=True)
            if "restart" in args.phases:
                counts = [0, 100_000] if args.quick else [0, 100_000, 1_000_000]
                rows = restart_phase(model_path, state, log_file, pairs, counts, args)
                print("A restart after `kill -9`, to the first `/health` answer, the open "
                      "chunk's engagements (posted in requests of 10,000) replayed:\n")
                print(table(["engagements to replay", "restart s",
                             "of which observing them, s", "observed after"], rows) + "\n",
                      flush=True)


if __name__ == "__main__":
    main()
