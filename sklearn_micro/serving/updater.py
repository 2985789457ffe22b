"""The update loop: queued chunks applied one at a time, saved, then swapped in.

For each chunk, the update process (`sklearn_micro.serving.worker`, started with the
service and kept) loads the file of the model being served, runs ``partial_fit`` on the
chunk and saves the result as the chunk's snapshot (a temporary file renamed into place).
The service then loads that snapshot, runs its kernels once, and swaps it in: one
reference, so a request is answered by the model before the chunk or the one after it,
never a mix. Meanwhile requests are answered by the model before. A failed update leaves
that model serving and is kept as ``last_error``; an update process that died is started
again for the next chunk.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..persistence import load
from . import worker
from .model import ServedModel
from .requests import ChunkRequest, RequestError, as_id_array
from .snapshots import Snapshots

__all__ = ["Updater"]

log = logging.getLogger("sklearn_micro.serving")


class UpdateFailed(RuntimeError):
    pass


class Updater:
    """Queue of chunks and the task that applies them.

    Parameters
    ----------
    service : Service
        Holds the served model (``service.served``) and is told of each new one
        (``service.swap``).
    snapshots : Snapshots
        Where each update is saved.
    queue_size : int
        Chunks queued or being applied, at most: one more is a 429.
    in_process : bool
        Apply updates on a thread of the service's process instead of a worker process
        (for comparison only: the sampler's kernels then hold the GIL the requests need).
    """

    def __init__(self, service, snapshots: Snapshots, *, queue_size: int = 4,
                 in_process: bool = False):
        self.service = service
        self.snapshots = snapshots
        self.queue_size = queue_size
        self.in_process = in_process
        self.queued: list[int] = []
        self.last_error: dict | None = None
        self.last_seconds = 0.0
        self._queue: asyncio.Queue = asyncio.Queue()
        self._task: asyncio.Task | None = None
        self._io = ThreadPoolExecutor(1, thread_name_prefix="micro-update")
        self._worker: asyncio.subprocess.Process | None = None
        # the pickled handoff of the served model, if it came from an update: the next
        # update loads it instead of the skops snapshot (ten times faster)
        self._handoff: tuple | None = None

    async def start(self) -> None:
        if not self.in_process:
            await self._start_worker()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self._stop_worker()
        self._io.shutdown(wait=False, cancel_futures=True)

    def submit(self, req: ChunkRequest) -> None:
        """Queue ``req``, or raise the `RequestError` that says why not."""
        live = self.service.served.chunk
        if req.chunk == live:
            raise RequestError(409, "chunk", f"chunk {req.chunk} is live already.")
        if req.chunk in self.queued:
            raise RequestError(409, "chunk", f"chunk {req.chunk} is queued already.")
        newest = max([live, *self.queued])
        if req.chunk < newest:
            where = "live" if newest == live else "queued"
            raise RequestError(409, "chunk", f"chunks must come in order: chunk {req.chunk} is "
                                             f"older than chunk {newest}, which is {where}.")
        if len(self.queued) >= self.queue_size:
            retry = max(1, round(self.last_seconds * len(self.queued)))
            raise RequestError(429, None, f"{len(self.queued)} chunks are queued or being "
                                          f"applied, the most the queue holds; send this one "
                                          f"again later.", headers={"Retry-After": str(retry)})
        self.queued.append(req.chunk)
        self.service.metrics.queued.set(len(self.queued))
        self._queue.put_nowait(req)

    async def _run(self) -> None:
        while True:
            req = await self._queue.get()
            start = time.perf_counter()
            try:
                await self._apply(req)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001  (kept for /health; the old model serves)
                message = str(exc) or type(exc).__name__
                log.error("update to chunk %s failed: %s", req.chunk, message)
                self.last_error = {"chunk": req.chunk, "error": message,
                                   "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
                self.service.metrics.updates.labels("failed").inc()
            else:
                self.last_seconds = time.perf_counter() - start
                self.service.metrics.updates.labels("applied").inc()
                self.service.metrics.update_seconds.observe(self.last_seconds)
                log.info("chunk %s is live (%.1f s)", req.chunk, self.last_seconds)
            finally:
                if req.chunk in self.queued:
                    self.queued.remove(req.chunk)
                self.service.metrics.queued.set(len(self.queued))

    async def _apply(self, req: ChunkRequest) -> None:
        loop = asyncio.get_running_loop()
        base: ServedModel = self.service.served
        chunk_file = self.snapshots.temporary("chunk-").with_suffix(".npz")
        tmp = self.snapshots.temporary()
        handoff = self.snapshots.temporary("handoff-")
        final = self.snapshots.path(req.chunk)
        fmt = "skops" if self.snapshots.suffix == ".skops" else "pickle"
        source = (self._handoff[1], "pickle") if (
            self._handoff is not None and self._handoff[0] is base) else (base.path, fmt)
        steps = {}
        start = time.perf_counter()
        try:
            await loop.run_in_executor(self._io, self._write_chunk, req, base, chunk_file)
            if self.in_process:
                await loop.run_in_executor(self._io, worker.update, source[0], chunk_file,
                                           tmp, final, fmt, os.getppid(), handoff, source[1])
            else:
                await self._run_worker(source, chunk_file, tmp, final, fmt, handoff)
            steps["sampled and saved"] = time.perf_counter() - start
            start = time.perf_counter()
            # the pickled handoff when there is one: our own file, ten times faster to load
            # than the skops snapshot, which holds the same model
            new, new_fmt = (handoff, "pickle") if handoff.exists() else (final, fmt)
            served = await loop.run_in_executor(
                self._io, lambda: ServedModel.of(load(new, format=new_fmt), final))
            steps["loaded"] = time.perf_counter() - start
            start = time.perf_counter()
            await self.service.warm(served)
            steps["warmed"] = time.perf_counter() - start
        except BaseException as exc:
            handoff.unlink(missing_ok=True)
            if isinstance(exc, Exception):
                final.unlink(missing_ok=True)  # a restart must not serve what failed to load
            raise
        finally:
            for path in (chunk_file, tmp):
                path.unlink(missing_ok=True)
        # what /health shows changes at once with the model
        self.last_error = None
        self.queued.remove(req.chunk)
        self.service.swap(served)
        if self._handoff is not None:
            self._handoff[1].unlink(missing_ok=True)
        self._handoff = (served, handoff) if handoff.exists() else None
        await loop.run_in_executor(self._io, self.snapshots.prune)
        log.info("chunk %s: %s", req.chunk, ", ".join(f"{name} in {seconds:.2f} s"
                                                    for name, seconds in steps.items()))

    @staticmethod
    def _write_chunk(req: ChunkRequest, base: ServedModel, path) -> None:
        with open(path, "wb") as f:
            np.savez(f, user=as_id_array(req.user, base.user_kind),
                     item=as_id_array(req.item, base.item_kind),
                     chunk=np.full(len(req.user), req.chunk, dtype=np.int64))

    async def _run_worker(self, source: tuple, chunk_file, tmp, final, fmt,
                          handoff) -> None:
        if self._worker is None or self._worker.returncode is not None:
            await self._start_worker()
        job = {"base": str(source[0]), "base_format": source[1],
               "chunk_file": str(chunk_file), "tmp": str(tmp), "final": str(final),
               "format": fmt, "handoff": str(handoff)}
        self._worker.stdin.write((json.dumps(job) + "\n").encode())
        await self._worker.stdin.drain()
        line = await self._worker.stdout.readline()
        if not line:
            code = await self._worker.wait()
            self._worker = None
            raise UpdateFailed(f"the update process ended with code {code}")
        answer = json.loads(line)
        if not answer["ok"]:
            raise UpdateFailed(answer["error"])
        log.debug("update: %s", answer)

    async def _start_worker(self) -> None:
        """Start the update process (it imports while the service answers)."""
        self._worker = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "sklearn_micro.serving.worker", str(os.getpid()),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)

    async def _stop_worker(self) -> None:
        proc, self._worker = self._worker, None
        if proc is None or proc.returncode is not None:
            return
        proc.kill()  # idle, or its update was given up: nothing of it is published
        await proc.wait()
