"""The update loop: closed chunks applied one at a time, in order, saved, then swapped in.

For each closed chunk, the service reads its engagements from the event log and the update
process (`sklearn_micro.serving.worker`, started with the service and kept) loads the file
of the model being served, runs ``partial_fit`` on the chunk and saves the result as the
chunk's snapshot (a temporary file renamed into place). The service then loads that
snapshot, runs its kernels once, gives it the engagements acknowledged since for the next
chunk, and swaps it in: one reference, so a request is answered by the model before the
chunk or the one after it, never a mix. Meanwhile requests are answered by the model
before. A close that fails leaves that model serving, is kept as ``last_error`` and is tried
again after a wait that doubles each time (up to `MAX_RETRY_SECONDS`): no later chunk is
applied before it. An update process that died is started again for the next try.

For tests of durability only, ``SKLEARN_MICRO_FAILPOINT=after-snapshot-rename`` in the
environment makes each close wait, after its snapshot is renamed into place and before the
new model is loaded and swapped in (``during-update``: in the update process, after
``partial_fit`` and before the snapshot is saved), for an hour (``NAME:SECONDS`` for that
many seconds), logging a warning when it starts waiting: a deterministic moment to kill the
service at (`worker.failpoint_seconds`). Requests are answered meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..persistence import load
from . import worker
from .model import ServedModel
from .snapshots import Snapshots
from .validation import as_id_array
from .worker import UpdateJob, UpdateReply

__all__ = ["Updater"]

logger = logging.getLogger("sklearn_micro.serving")

MAX_RETRY_SECONDS = 60.0


async def failpoint(name: str, chunk: int) -> None:
    """Wait at the moment ``name`` of the close of ``chunk`` if ``SKLEARN_MICRO_FAILPOINT``
    names it (see the module's docstring); return at once otherwise."""
    wait = worker.failpoint_seconds(name)
    if wait:
        logger.warning("failpoint %s of chunk %d: waiting %.1f s", name, chunk, wait)
        await asyncio.sleep(wait)


class UpdateFailed(RuntimeError):
    pass


class Handoff(NamedTuple):
    """The pickled handoff of a served model that came from an update."""

    served: ServedModel
    path: Path


class Updater:
    """Queue of closed chunks and the task that applies them.

    Parameters
    ----------
    service : Service
        Holds the served model (``service.served``), the event log (``service.eventlog``)
        and the ingest path, which swaps each new model in (``service.ingest.swap_in``).
    snapshots : Snapshots
        Where each update is saved.
    in_process : bool
        Apply updates on a thread of the service's process instead of a worker process
        (for comparison only: the sampler's kernels then hold the GIL the requests need).
    retry_seconds : float
        The wait before a failed close is tried again, doubled at each failure.
    """

    def __init__(self, service, snapshots: Snapshots, *, in_process: bool = False,
                 retry_seconds: float = 1.0):
        self.service = service
        self.snapshots = snapshots
        self.in_process = in_process
        self.retry_seconds = retry_seconds
        self.queued: list[int] = []
        self.last_error: dict | None = None
        self.last_seconds = 0.0
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._io = ThreadPoolExecutor(1, thread_name_prefix="micro-update")
        self._worker: asyncio.subprocess.Process | None = None
        # the pickled handoff of the served model, if it came from an update: the next
        # update loads it instead of the skops snapshot (ten times faster)
        self._handoff: Handoff | None = None

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

    def close(self, chunk: int) -> None:
        """Queue the close of ``chunk`` (durable in the event log, after every chunk
        queued)."""
        self.queued.append(chunk)
        self.service.metrics.queued.set(len(self.queued))
        self._wakeup.set()

    async def _run(self) -> None:
        failures = 0
        while True:
            if not self.queued:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            chunk = self.queued[0]
            start = time.perf_counter()
            try:
                await self._apply(chunk)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001  (kept for /health; the old model serves)
                failures += 1
                wait = min(MAX_RETRY_SECONDS, self.retry_seconds * 2 ** (failures - 1))
                message = str(exc) or type(exc).__name__
                logger.error("closing chunk %s failed (%d times): %s; trying again in %.1f s",
                          chunk, failures, message, wait)
                self.last_error = {"chunk": chunk, "error": message, "failures": failures,
                                   "retry_in_seconds": wait,
                                   "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
                self.service.metrics.updates.labels("failed").inc()
                await asyncio.sleep(wait)
            else:
                failures = 0
                self.last_seconds = time.perf_counter() - start
                self.service.metrics.updates.labels("applied").inc()
                self.service.metrics.update_seconds.observe(self.last_seconds)
                logger.info("chunk %s is live (%.1f s)", chunk, self.last_seconds)

    async def _apply(self, chunk: int) -> None:
        loop = asyncio.get_running_loop()
        base: ServedModel = self.service.served
        if base.chunk != chunk - 1:
            raise UpdateFailed(f"chunk {chunk} cannot be applied to the served model of "
                               f"chunk {base.chunk}")
        chunk_file = self.snapshots.temporary("chunk-").with_suffix(".npz")
        tmp = self.snapshots.temporary()
        handoff = self.snapshots.temporary("handoff-")
        final = self.snapshots.path(chunk)
        fmt = "skops" if self.snapshots.suffix == ".skops" else "pickle"
        base_file, base_format = (
            (self._handoff.path, "pickle") if self._handoff is not None
            and self._handoff.served is base else (base.path, fmt))
        job = UpdateJob(base=base_file, base_format=base_format, chunk_file=chunk_file,
                        tmp=tmp, final=final, format=fmt, handoff=handoff)
        steps = {}
        start = time.perf_counter()
        try:
            await loop.run_in_executor(self._io, self._write_chunk, chunk, base, chunk_file)
            if self.in_process:
                reply = await loop.run_in_executor(self._io, worker.update, job,
                                                   os.getppid())
            else:
                reply = await self._run_worker(job)
            logger.debug("update: %s", reply)
            steps["sampled and saved"] = time.perf_counter() - start
            await failpoint("after-snapshot-rename", chunk)
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
        start = time.perf_counter()
        self.last_error = None
        self.queued.remove(chunk)
        self.service.metrics.queued.set(len(self.queued))
        await self.service.ingest.swap_in(served)
        steps["swapped in"] = time.perf_counter() - start
        if self._handoff is not None:
            self._handoff.path.unlink(missing_ok=True)
        self._handoff = Handoff(served, handoff) if handoff.exists() else None
        await loop.run_in_executor(self._io, self._forget)
        logger.info("chunk %s: %s", chunk, ", ".join(f"{name} in {seconds:.2f} s"
                                                for name, seconds in steps.items()))

    def _forget(self) -> None:
        """Keep ``keep`` snapshots, and in the event log what the oldest of them lacks."""
        self.snapshots.prune()
        self.service.forget_held()

    def _write_chunk(self, chunk: int, base: ServedModel, path) -> None:
        user, item = self.service.eventlog.chunk(chunk)
        if not user:
            raise UpdateFailed(f"the event log holds no engagements of chunk {chunk}")
        with open(path, "wb") as f:
            np.savez(f, user=as_id_array(user, base.user_kind),
                     item=as_id_array(item, base.item_kind),
                     chunk=np.full(len(user), chunk, dtype=np.int64))

    async def _run_worker(self, job: UpdateJob) -> UpdateReply:
        """Have the update process apply ``job``: its reply, or `UpdateFailed`."""
        if self._worker is None or self._worker.returncode is not None:
            await self._start_worker()
        self._worker.stdin.write((job.to_json() + "\n").encode())
        await self._worker.stdin.drain()
        line = await self._worker.stdout.readline()
        if not line:
            code = await self._worker.wait()
            self._worker = None
            raise UpdateFailed(f"the update process ended with code {code}")
        reply = UpdateReply.from_json(line)
        if not reply.ok:
            raise UpdateFailed(reply.error)
        return reply

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
