"""`sklearn-micro serve` under load: throughput and latency with 1, 16 and 64 connections,
and while a chunk update is applied.

Fits the model (`GraphEmbedder`, `SphericalKMeans`, `MiCRO()` as ``sklearn-micro
reproduce`` does) on the training chunks of a log, saves it (cached in ``--work``), starts
``sklearn-micro serve`` on 127.0.0.1 and runs clients of its own: each connection is kept
alive and sends its next request as soon as the last is answered, for ``--seconds`` seconds,
then stops. Requests are single-user (``m=100``) and 100-user (``m=100``), their users
drawn from the model's users. Then, with 16 connections, a test chunk is posted to
``/chunks`` and the latencies are taken from that moment until the chunk is live (the
update: a worker process samples the chunk, saves the snapshot, the service loads and warms
it and swaps it in). Every answer must be a 200: errors are counted and printed.

    python benchmarks/serve.py                       # the generated log of `reproduce`
    python benchmarks/serve.py --data fave-1-20.parquet --train-chunks 169 --k 1000
    python benchmarks/serve.py --update-in thread    # updates on a thread of the service

Latency is from the request's first byte sent to the answer's last byte read, on the same
machine as the service (the clients share its cores).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from sklearn_micro import GraphEmbedder, MiCRO, SphericalKMeans  # noqa: E402
from sklearn_micro.cli import DEFAULT_LOG  # noqa: E402
from sklearn_micro.experiment import compact_log, split_chunks  # noqa: E402
from sklearn_micro.persistence import dump, load  # noqa: E402

HOST = "127.0.0.1"


def read_log(args):
    """The log a run serves: ``--data``, else ``args.preset`` at ``args.scale`` (when the
    caller has them), else the generated log of `reproduce`; returns it and its number of
    training chunks (None: `split_chunks`' default)."""
    from sklearn_micro import datasets

    preset = getattr(args, "preset", None)
    if preset is not None:
        from sklearn_micro._log import EngagementLog

        chunks = list(datasets.iter_preset(preset, args.scale))
        log = EngagementLog(*(np.concatenate([getattr(c, name) for c in chunks])
                              for name in ("user", "item", "chunk")))
        return compact_log(log), datasets.preset_parameters(preset, args.scale).train_chunks
    if args.data is None:
        return compact_log(datasets.make_engagements(**DEFAULT_LOG)), args.train_chunks
    return compact_log(datasets.read_twitter_fave(args.data)), args.train_chunks


def fit_model(args, path: Path):
    """The served model and the test chunks: fitted as `reproduce` fits MiCRO (with a
    preset's ``negative_weight`` and ``beta``), cached at ``path``."""
    log, train_chunks = read_log(args)
    train, test = split_chunks(log, train_chunks)
    chunks = [test.take(np.flatnonzero(test.chunk == c)) for c in np.unique(test.chunk)]
    if path.exists():
        return load(path), chunks
    embedding, micro = {}, {}
    if getattr(args, "preset", None) is not None:
        from sklearn_micro.datasets import preset_parameters

        p = preset_parameters(args.preset, args.scale)
        embedding, micro = {"negative_weight": p.negative_weight}, {"beta": p.beta}
    start = time.perf_counter()
    embedded = GraphEmbedder(args.dim, random_state=0, n_jobs=-1,
                             **embedding).fit_transform(train)
    clustered = SphericalKMeans(args.k, random_state=0, n_jobs=-1).fit_transform(embedded)
    model = MiCRO(random_state=0, **micro).fit(clustered)
    print(f"fitted in {time.perf_counter() - start:.0f} s: {len(train):,} engagements, "
          f"K = {args.k}", flush=True)
    dump(model, path)
    return model, chunks


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def get(port, path):
    with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=30) as answer:
        return json.loads(answer.read())


def post(port, path, body):
    request = urllib.request.Request(f"http://{HOST}:{port}{path}",
                                     data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return answer.status


def start_server(model_path: Path, state: Path, port: int, update_in: str, log_file, *,
                 fresh: bool = True):
    """``sklearn-micro serve`` on 127.0.0.1 once it answers ``/health``; ``fresh`` empties
    its state folder first."""
    if fresh:
        shutil.rmtree(state, ignore_errors=True)
    if update_in == "process":
        command = [sys.executable, "-m", "sklearn_micro.cli", "serve", str(model_path),
                   "--port", str(port), "--state-dir", str(state), "--log-level", "info"]
    else:
        command = [sys.executable, "-c",
                   "import sys; from sklearn_micro.serving import run; "
                   "run(sys.argv[1], port=int(sys.argv[2]), state_dir=sys.argv[3], "
                   "log_level='info', update_in_process=True)",
                   str(model_path), str(port), str(state)]
    proc = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
    end = time.monotonic() + 600
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit("the server stopped; see its log")
        try:
            get(port, "/health")
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server did not start within 600 s")


async def exchange(reader, writer, path: bytes, body: bytes) -> tuple[int, bytes]:
    """One HTTP/1.1 POST on a kept-alive connection: its status and its answer's body."""
    writer.write(b"POST " + path + b" HTTP/1.1\r\nHost: bench\r\n"
                 b"Content-Type: application/json\r\nContent-Length: "
                 + str(len(body)).encode() + b"\r\n\r\n" + body)
    status = int((await reader.readline()).split()[1])
    length = 0
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            break
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, await reader.readexactly(length)


async def connection(port, bodies, stop, latencies, errors, path=b"/recommend"):
    reader, writer = await asyncio.open_connection(HOST, port)
    j = 0
    try:
        while not stop.is_set():
            body = bodies[j % len(bodies)]
            j += 1
            start = time.perf_counter()
            status, _ = await exchange(reader, writer, path, body)
            latencies.append((start, time.perf_counter() - start))
            if status != 200:
                errors.append(status)
    finally:
        writer.close()


async def load_phase(port, bodies, n_connections, seconds, *, chunk=None):
    """Latencies of ``n_connections`` clients for ``seconds``; with ``chunk``, from the
    moment it is posted until it is live instead."""
    stop = asyncio.Event()
    latencies, errors = [], []
    rng = np.random.default_rng(n_connections)
    tasks = [asyncio.create_task(connection(port, [bodies[i] for i in
                                                   rng.permutation(len(bodies))],
                                            stop, latencies, errors))
             for _ in range(n_connections)]
    loop = asyncio.get_running_loop()
    update = None
    if chunk is None:
        await asyncio.sleep(seconds)
        window = (0.0, np.inf)
    else:
        await asyncio.sleep(1.0)
        begin = time.perf_counter()
        status = await loop.run_in_executor(None, post, port, "/chunks", chunk)
        assert status == 202, status
        while (await loop.run_in_executor(None, get, port, "/health"))["chunk"] != \
                chunk["chunk"]:
            await asyncio.sleep(0.05)
        update = time.perf_counter() - begin
        window = (begin, begin + update)
    stop.set()
    await asyncio.gather(*tasks)
    span = [lat for start, lat in latencies if window[0] <= start <= window[1]]
    trace = np.array([(start - window[0], lat) for start, lat in latencies
                      if window[0] <= start <= window[1]])
    wall = seconds if chunk is None else update
    lat = np.array(span) * 1000
    return {"requests": len(span), "per_second": len(span) / wall,
            "p50": float(np.percentile(lat, 50)) if lat.size else np.nan,
            "p99": float(np.percentile(lat, 99)) if lat.size else np.nan,
            "errors": len(errors), "update_seconds": update, "trace": trace}


def bodies_of(users, n_users, m, count, seed):
    rng = np.random.default_rng(seed)
    return [json.dumps({"users": rng.choice(users, n_users, replace=False).tolist(),
                        "m": m}).encode() for _ in range(count)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help="a TwitterFaveGraph-columned Parquet "
                        "file (default: the generated log of `sklearn-micro reproduce`)")
    parser.add_argument("--train-chunks", type=int, default=None)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("-m", type=int, default=100)
    parser.add_argument("--update-in", choices=["process", "thread"], default="process")
    parser.add_argument("--phases", nargs="+", choices=["load", "update"],
                        default=["load", "update"], help="the rows to run (default: both)")
    parser.add_argument("--trace", default=None, metavar="NPZ",
                        help="save every latency of the update rows (start, seconds) here")
    parser.add_argument("--work", default="/tmp/micro-serve-bench",
                        help="folder of the cached model and the server's state")
    args = parser.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    name = "default" if args.data is None else Path(args.data).stem
    model_path = work / f"{name}-k{args.k}.skops"
    model, chunks = fit_model(args, model_path)
    users = np.asarray(model.user_ids_.ids)
    print(f"model: {len(users):,} users, {len(model.item_ids_):,} items, K = "
          f"{model.n_interests_}, chunk {model.latest_chunk_}; {os.cpu_count()} cores",
          flush=True)
    kinds = {"1 user": bodies_of(users, 1, args.m, 2000, 0),
             "100 users": bodies_of(users, 100, args.m, 200, 1)}
    port = free_port()
    rows = []
    with open(work / "server.log", "ab") as log_file:
        proc = start_server(model_path, work / "state", port, args.update_in, log_file)
        try:
            for kind, bodies in kinds.items():
                asyncio.run(load_phase(port, bodies, 4, 2.0))  # warm the connections
                for n in args.connections if "load" in args.phases else ():
                    rows.append((kind, n, "no", asyncio.run(
                        load_phase(port, bodies, n, args.seconds))))
                    print(rows[-1][:3], {k: v for k, v in rows[-1][3].items()
                                         if k != "trace"}, flush=True)
            for (kind, bodies), chunk in zip(kinds.items() if "update" in args.phases else (),
                                             chunks, strict=False):
                body = {"chunk": int(chunk.chunk[0]), "user": chunk.user.tolist(),
                        "item": chunk.item.tolist()}
                rows.append((kind, 16, "yes", asyncio.run(
                    load_phase(port, bodies, 16, None, chunk=body))))
                print(rows[-1][:3], {k: v for k, v in rows[-1][3].items() if k != "trace"},
                      flush=True)
        finally:
            proc.terminate()
            proc.wait(30)
    if args.trace:
        np.savez(args.trace, **{f"{kind} {n}": r["trace"] for kind, n, during, r in rows
                                if during == "yes"})
    print(f"\nupdates applied in a {args.update_in}; m = {args.m}; {args.seconds:g} s per "
          f"row without an update\n")
    print("| request | connections | during an update | requests/s | p50 ms | p99 ms | "
          "errors |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for kind, n, during, r in rows:
        upd = f"yes ({r['update_seconds']:.1f} s)" if during == "yes" else "no"
        print(f"| {kind} | {n} | {upd} | {r['per_second']:,.0f} | {r['p50']:.1f} | "
              f"{r['p99']:.1f} | {r['errors']} |")


if __name__ == "__main__":
    main()
