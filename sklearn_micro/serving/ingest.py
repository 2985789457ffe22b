"""The event path: engagements made durable, then observed into the served model.

Requests that write (``/engagements``, ``/chunks``, ``/chunks/close`` and the clock of
``chunk_seconds``) are queued as jobs; one task takes every job waiting, checks each
against the open chunk in order (a job that names the next chunk closes the open one),
and writes those it accepts to the event log in one transaction, synced before any of them
is answered (a group commit). A job refused, or a commit that fails, leaves nothing in the
log. Once committed, closes go to the updater's queue, and the engagements to the observer:
one task that adds them to the served model (`ServedModel.observe`) in offset order, many
requests in one call, on a thread of its own: the kernels' thread goes on answering from
the state before until the observed one is published. An engagement of a chunk the served
model cannot observe yet (a close is being applied) waits for the close's model, which is
given it before it is swapped in (`Ingest.swap_in`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .eventlog import EventLog, Pending
from .telemetry import LiveMetrics
from .validation import RequestError

__all__ = ["Acknowledged", "Ingest", "Job"]

logger = logging.getLogger("sklearn_micro.serving")

# how long an answer waits for its engagements to be observed before it is sent anyway
OBSERVE_WAIT = 1.0
# after an observe of s seconds the next waits OBSERVE_REST * s (at most OBSERVE_REST_MAX):
# the observer takes at most 1 / (1 + OBSERVE_REST) of a core, and what arrives meanwhile
# is observed in one call (an observe's cost is mostly the open chunk's view, made anew)
OBSERVE_REST = 3.0
OBSERVE_REST_MAX = 0.25


@dataclass(frozen=True)
class Job:
    """One write: ``kind`` is ``"engagements"`` (``user`` and ``item`` to ``chunk``, None
    for the open one), ``"chunk"`` (a whole chunk, closed with it) or ``"close"`` (the open
    chunk, which ``chunk`` must name when given)."""

    kind: str
    chunk: int | None = None
    user: list = field(default_factory=list, repr=False)
    item: list = field(default_factory=list, repr=False)


@dataclass
class Batch:
    """Acknowledged engagements of one request, waiting to be observed."""

    offset: int
    chunk: int
    user: list = field(repr=False)
    item: list = field(repr=False)
    acknowledged: float = 0.0
    observed: asyncio.Future | None = None

    def done(self) -> None:
        if self.observed is not None and not self.observed.done():
            self.observed.set_result(None)


@dataclass(frozen=True)
class Acknowledged:
    """What a committed job answers: its chunk, its engagements' last offset, its batch."""

    chunk: int
    offset: int
    n: int
    batch: Batch | None


@dataclass
class _Open:
    """The open chunk and the engagements acknowledged in it."""

    chunk: int
    n: int = 0

    def close(self) -> int:
        closed, self.chunk, self.n = self.chunk, self.chunk + 1, 0
        return closed


def _plan(job: Job, state: _Open, room: int) -> list[int]:
    """Check ``job`` against ``state`` and apply it there; returns the chunks it closes, or
    raises the `RequestError` that refuses it (``state`` then unchanged)."""
    open_ = state.chunk
    chunk = open_ if job.chunk is None else job.chunk
    if job.kind == "close":
        if chunk != open_:
            raise RequestError(409, "chunk", f"chunk {chunk} is not open; the open chunk is "
                                             f"{open_}.")
        if state.n == 0:
            raise RequestError(409, None, f"the open chunk {open_} holds no engagements: "
                                          f"there is nothing to close.")
        closes = [open_]
    else:
        if chunk < open_:
            raise RequestError(409, "chunk", f"chunk {chunk} is closed; the open chunk is "
                                             f"{open_} (send to chunk {open_}, or to "
                                             f"{open_ + 1} to close it).")
        if chunk > open_ + 1:
            raise RequestError(409, "chunk", f"the open chunk is {open_}: engagements go to "
                                             f"chunk {open_} or {open_ + 1}; got chunk "
                                             f"{chunk}.")
        if chunk == open_ + 1 and state.n == 0:
            raise RequestError(409, "chunk", f"the open chunk {open_} holds no engagements, "
                                             f"so chunk {chunk} cannot open yet; send to "
                                             f"chunk {open_}.")
        closes = [open_] if chunk == open_ + 1 else []
        if job.kind == "chunk":
            closes.append(chunk)
    if len(closes) > room:
        raise RequestError(429, None, "the closes queued are as many as the queue holds; "
                                      "send this again later.", headers={"Retry-After": "1"})
    if chunk == open_ + 1:
        state.close()
    state.n += len(job.user)
    if job.kind != "engagements":
        state.close()
    return closes


class Ingest:
    """The open chunk, its group commits and its observer.

    Parameters
    ----------
    service : Service
        Holds the served model (``service.served``), the kernels' thread
        (``service.executor``) and the updater (``service.updater``).
    eventlog : EventLog
        Where acknowledged jobs are written.
    pending : Pending
        What the log holds beyond the served model's chunk when the service starts.
    metrics : LiveMetrics
    queue_size : int
        Closes queued or being applied, at most.
    chunk_seconds : float, optional
        Close the open chunk this many seconds after it opened (if it holds engagements).
    """

    def __init__(self, service, eventlog: EventLog, pending: Pending, metrics: LiveMetrics,
                 *, queue_size: int = 4, chunk_seconds: float | None = None):
        self.service = service
        self.eventlog = eventlog
        self.metrics = metrics
        self.queue_size = queue_size
        self.chunk_seconds = chunk_seconds
        served = service.served.chunk
        last = max([served + 1, *(c + 1 for c in pending.closed), *pending.chunks])
        self.state = _Open(last, sum(len(u) for u, c in zip(pending.users, pending.chunks,
                                                            strict=True) if c == last))
        # closes due: every chunk before the open one that the served model lacks
        self.due = list(range(served + 1, last))
        now = time.monotonic()
        self._unobserved: deque[Batch] = deque(
            Batch(o, c, u, i, now) for o, c, u, i in zip(
                pending.offsets, pending.chunks, pending.users, pending.items, strict=True))
        self._jobs: list[tuple[Job, asyncio.Future]] = []
        self._commit_wakeup = asyncio.Event()
        self._observe_wakeup = asyncio.Event()
        self._observing = asyncio.Lock()
        self._observe_after = 0.0
        self._tasks: list[asyncio.Task] = []
        self._db = ThreadPoolExecutor(1, thread_name_prefix="micro-eventlog")
        # observes run beside the answers: their kernels are not parallel, and each
        # publishes a new state in one swap (its view of the open chunk made first)
        self._observer = ThreadPoolExecutor(1, thread_name_prefix="micro-observer")
        self._opened_at = now
        self._show()

    # ------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Observe what the log holds of the open chunk, then take jobs."""
        async with self._observing:
            await self._observe_pending(self.service.served)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._commit_loop()),
                       loop.create_task(self._observe_loop())]
        if self.chunk_seconds:
            self._tasks.append(loop.create_task(self._clock()))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
        for _, future in self._jobs:
            future.cancel()
        self._db.shutdown(wait=True)
        self._observer.shutdown(wait=True)

    # ---------------------------------------------------------------- writes

    async def submit(self, job: Job) -> Acknowledged:
        """Commit ``job`` and return once it is durable (and its engagements observed, when
        the served model can observe them at once, within `OBSERVE_WAIT` seconds); raises
        the `RequestError` that refuses it."""
        future = asyncio.get_running_loop().create_future()
        self._jobs.append((job, future))
        self._commit_wakeup.set()
        ack: Acknowledged = await future
        if ack.batch is not None and ack.batch.observed is not None:
            try:
                await asyncio.wait_for(asyncio.shield(ack.batch.observed), OBSERVE_WAIT)
            except asyncio.TimeoutError:
                pass
        return ack

    async def _commit_loop(self) -> None:
        while True:
            await self._commit_wakeup.wait()
            self._commit_wakeup.clear()
            while self._jobs:
                jobs, self._jobs = self._jobs, []
                await self._commit([(j, f) for j, f in jobs if not f.done()])

    async def _commit(self, jobs: list) -> None:
        state = _Open(self.state.chunk, self.state.n)
        room = self.queue_size - len(self.service.updater.queued)
        accepted, batches, closed = [], [], []
        for job, future in jobs:
            try:
                closes = _plan(job, state, room - len(closed))
            except RequestError as exc:
                future.set_exception(exc)
                continue
            chunk = state.chunk - 1 if job.kind != "engagements" else state.chunk
            accepted.append((job, future, chunk, len(batches) if job.user else None))
            if job.user:
                batches.append((chunk, job.user, job.item))
            closed.extend(closes)
        if not accepted:
            return
        start = time.perf_counter()
        try:
            offsets = await asyncio.get_running_loop().run_in_executor(
                self._db, self.eventlog.append, batches, closed)
        except Exception as exc:  # noqa: BLE001  (the requests are refused, the server goes on)
            logger.error("the event log could not be written: %s", exc)
            for _, future, _, _ in accepted:
                future.set_exception(RequestError(
                    503, None, f"the event log could not be written ({exc}); nothing of this "
                               f"request was acknowledged: send it again."))
            return
        now = time.monotonic()
        self.metrics.sync_seconds.observe(time.perf_counter() - start)
        self.metrics.commit_requests.observe(len(accepted))
        if state.chunk != self.state.chunk:
            self._opened_at = now
        self.state = state
        served = self.service.served.chunk
        for job, future, chunk, j in accepted:
            batch = None
            if j is not None:
                observable = chunk == served + 1 and chunk == state.chunk
                batch = Batch(offsets[j], chunk, job.user, job.item, now,
                              asyncio.get_running_loop().create_future()
                              if observable else None)
                self._unobserved.append(batch)
                self.metrics.engagements.inc(len(job.user))
            last = offsets[j] + len(job.user) - 1 if j is not None else self.eventlog.last_offset
            future.set_result(Acknowledged(chunk, last, len(job.user), batch))
        for chunk in closed:
            logger.info("chunk %d closed (%s engagements acknowledged after it so far)", chunk,
                     state.n)
            self.service.updater.close(chunk)
        self._show()
        self._observe_wakeup.set()

    async def _clock(self) -> None:
        """Close the open chunk ``chunk_seconds`` after it opened, if it holds engagements;
        an empty chunk, or one the full queue cannot take, waits as long again."""
        while True:
            wait = self._opened_at + self.chunk_seconds - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            chunk = self.state.chunk
            if self.state.n == 0:
                self._opened_at = time.monotonic()
                continue
            try:
                await self.submit(Job("close", chunk))
            except RequestError as exc:
                logger.info("chunk %d stays open: %s", chunk, exc.message)
                self._opened_at = time.monotonic()

    # -------------------------------------------------------------- observer

    async def _observe_loop(self) -> None:
        while True:
            await self._observe_wakeup.wait()
            rest = self._observe_after - time.perf_counter()
            if rest > 0:
                await asyncio.sleep(rest)
            self._observe_wakeup.clear()
            async with self._observing:
                await self._observe_pending(self.service.served, once=True)

    async def swap_in(self, served) -> None:
        """Give ``served`` (a close's model) the acknowledged engagements of its open chunk,
        then serve it."""
        async with self._observing:
            await self._observe_pending(served)
            self.service.swap(served)
        self._show()

    async def _observe_pending(self, served, *, once: bool = False) -> None:
        """Observe into ``served`` what waits for its open chunk, until nothing does (with
        ``once``, in one call, the observer woken again for what arrives meanwhile);
        engagements of a chunk closed since are left to the close."""
        loop = asyncio.get_running_loop()
        queue = self._unobserved
        while queue:
            while queue and queue[0].chunk < self.state.chunk:
                queue.popleft().done()
            take = []
            while queue and queue[0].chunk == served.chunk + 1:
                take.append(queue.popleft())
            if not take:
                return
            user = [u for b in take for u in b.user]
            item = [i for b in take for i in b.item]
            start = time.perf_counter()
            try:
                await loop.run_in_executor(self._observer, served.observe, user, item)
            except Exception as exc:  # noqa: BLE001  (durable: learned when the chunk closes)
                logger.error("observing %d engagements at offset %d failed: %s", len(user),
                          take[0].offset, exc)
                self.metrics.observe_failed.inc(len(user))
            else:
                seconds = time.perf_counter() - start
                self.metrics.observe_seconds.observe(seconds)
                self._observe_after = time.perf_counter() + min(OBSERVE_REST * seconds,
                                                                OBSERVE_REST_MAX)
                now = time.monotonic()
                for b in take:
                    self.metrics.freshness.observe(now - b.acknowledged)
            finally:
                for b in take:
                    b.done()
            self.metrics.live.set(served.n_observed)
            if once:
                if queue:
                    self._observe_wakeup.set()
                return

    # ---------------------------------------------------------------- state

    def _show(self) -> None:
        self.metrics.open_chunk.set(self.state.chunk)
        self.metrics.open_engagements.set(self.state.n)
        self.metrics.durable_offset.set(self.eventlog.last_offset)

    def health(self) -> dict:
        return {"open_chunk": self.state.chunk, "engagements": self.state.n,
                "observed": self.service.served.n_observed,
                "offset": self.eventlog.last_offset}
