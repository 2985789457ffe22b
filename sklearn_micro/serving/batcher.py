"""Concurrent requests answered together: one model call per batch.

Requests wait in a queue while the model is busy; when it is free, the queue is taken
whole, up to ``max_rows`` users (or items) and after at most ``max_wait`` seconds since the
oldest arrived, and grouped by key (same endpoint, ``m`` and options), each group answered
by one call of the batch kernels. The calls run one at a time on one thread, so compiled
kernels are never entered from two threads at once and the event loop stays free to read
and parse the next requests. A group whose call fails is answered request by request, so
that one bad request gets its own error and the others their answers; each such fallback
is logged (a warning with the error) and counted (``on_fallback``). When the batcher stops,
the requests it has not answered (queued, or in a call it gives up) are cancelled: their
``submit`` raises `asyncio.CancelledError`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

__all__ = ["Batcher", "QueuedRequest"]

logger = logging.getLogger("sklearn_micro.serving")


@dataclass(eq=False)
class QueuedRequest:
    """A request waiting for its answer.

    Attributes
    ----------
    model : ServedModel
        The model that answers it (the one served when it arrived).
    request : RecommendRequest or SimilarRequest
        The parsed request.
    future : asyncio.Future
        Set to its answer, or to the exception the model raised for it.
    arrived : float
        `time.perf_counter` when it was queued.
    """

    model: object
    request: object
    future: asyncio.Future
    arrived: float


class Batcher:
    """Queue requests and answer them in batches.

    Parameters
    ----------
    answer : callable
        ``answer(requests) -> list`` answers requests of one key with one call (run on the
        batcher's thread).
    executor : ThreadPoolExecutor
        The one thread of model calls.
    max_rows : int
        Users (or items) in one batch, at most (a single larger request is a batch alone).
    max_wait : float
        Seconds a batch waits for more requests after its first, when the model is free.
    on_batch : callable, optional
        ``on_batch(n_requests, n_rows)`` after each call that answered (metrics): a
        group's batched call, or one request's own call after a fallback.
    on_fallback : callable, optional
        ``on_fallback()`` after each batched call of several requests that raised, its
        requests then answered one by one (metrics).

    Attributes
    ----------
    n_batched, n_fallbacks : int
        Groups of several requests answered by their batched call, and groups whose
        batched call raised.
    """

    def __init__(self, answer, executor: ThreadPoolExecutor, *, max_rows: int = 256,
                 max_wait: float = 0.0, on_batch=None, on_fallback=None):
        self.answer = answer
        self.executor = executor
        self.max_rows = max_rows
        self.max_wait = max_wait
        self.on_batch = on_batch
        self.on_fallback = on_fallback
        self.n_batched = 0
        self.n_fallbacks = 0
        self._pending: deque[QueuedRequest] = deque()
        self._in_call: list[QueuedRequest] = []
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stopped = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop taking requests, and cancel those not answered yet."""
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        for queued in (*self._in_call, *self._pending):
            queued.future.cancel()
        self._in_call = []
        self._pending.clear()

    async def submit(self, model, request):
        """The answer to ``request`` from ``model`` (a `ServedModel` whose method
        ``answer`` names); raises what the model raised for it, or
        `asyncio.CancelledError` if the batcher stops (or has stopped) before answering."""
        future = asyncio.get_running_loop().create_future()
        if self._stopped:
            future.cancel()
        else:
            self._pending.append(QueuedRequest(model, request, future, time.perf_counter()))
            self._wakeup.set()
        return await future

    def _take(self) -> list:
        """The next batch from the queue: whole requests, up to ``max_rows`` rows."""
        batch, rows = [], 0
        while self._pending:
            n = self._pending[0].request.n
            if batch and rows + n > self.max_rows:
                break
            batch.append(self._pending.popleft())
            rows += n
        return batch

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending:
                if self.max_wait > 0:
                    waited = time.perf_counter() - self._pending[0].arrived
                    rows = sum(queued.request.n for queued in self._pending)
                    if waited < self.max_wait and rows < self.max_rows:
                        await asyncio.sleep(self.max_wait - waited)
                batch = [queued for queued in self._take() if not queued.future.done()]
                if not batch:
                    continue
                self._in_call = batch
                try:
                    results = await loop.run_in_executor(self.executor, self._answer_all,
                                                         batch)
                except Exception as exc:  # noqa: BLE001  (handed to the requests)
                    results = [exc] * len(batch)
                self._in_call = []
                for queued, result in zip(batch, results, strict=True):
                    if queued.future.done():
                        continue
                    if isinstance(result, BaseException):
                        queued.future.set_exception(result)
                    else:
                        queued.future.set_result(result)

    def _answer_all(self, batch: list[QueuedRequest]) -> list:
        """Answers (or exceptions) for ``batch``, in its order: one call per group of
        requests of the same model and key."""
        groups: dict = {}
        for position, queued in enumerate(batch):
            groups.setdefault((id(queued.model), queued.request.key()), []).append(position)
        results: list = [None] * len(batch)
        for positions in groups.values():
            model = batch[positions[0]].model
            requests = [batch[p].request for p in positions]
            try:
                answers = self.answer(model, requests)
            except Exception as exc:  # noqa: BLE001
                if len(requests) == 1:
                    answers = [exc]
                else:
                    self.n_fallbacks += 1
                    logger.warning("a batched call of %d requests (%s) failed, so they are "
                                "answered one by one: %s: %s", len(requests),
                                requests[0].endpoint, type(exc).__name__, exc)
                    if self.on_fallback is not None:
                        self.on_fallback()
                    answers = [self._one(model, r) for r in requests]
            else:
                self.n_batched += len(requests) > 1
                self._answered(requests)
            for p, answer in zip(positions, answers, strict=True):
                results[p] = answer
        return results

    def _one(self, model, request):
        try:
            answer = self.answer(model, [request])[0]
        except Exception as exc:  # noqa: BLE001
            return exc
        self._answered([request])
        return answer

    def _answered(self, requests: list) -> None:
        if self.on_batch is not None:
            self.on_batch(len(requests), sum(r.n for r in requests))
