"""The HTTP service: a Starlette app over a served model, its batcher and its updater."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import __version__
from ..persistence import IncompatibleVersionError, load
from .batcher import Batcher
from .eventlog import EventLog
from .ingest import Ingest, Job
from .model import ServedModel
from .openapi import document
from .snapshots import Snapshots
from .telemetry import LiveMetrics, Metrics
from .updater import Updater
from .validation import (
    Limits,
    RecommendRequest,
    RequestError,
    SimilarRequest,
    parse_chunk,
    parse_close,
    parse_engagements,
    parse_explain,
    parse_json,
    parse_recommend,
    parse_similar,
)

__all__ = ["Service", "create_app", "state_dir_of"]

logger = logging.getLogger("sklearn_micro.serving")

_SUFFIXES = (".skops", ".pkl", ".pickle")
EVENT_LOG = "events.sqlite3"


def state_dir_of(model_path) -> Path:
    """The default folder of a model's snapshots: ``<MODEL>.d`` beside it."""
    path = Path(model_path)
    return path.with_name(path.name + ".d")


def _json(value, status: int = 200, headers: dict | None = None) -> Response:
    return Response(orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY), status_code=status,
                    media_type="application/json", headers=headers)


def _error(exc: RequestError) -> Response:
    return _json(exc.as_dict(), exc.status, exc.headers)


def choose_model(model_path: Path, snapshots: Snapshots) -> ServedModel:
    """What a service starts with, warm: the newest complete snapshot newer than MODEL's
    own chunk, else MODEL. A snapshot that cannot be read, or that is read but fails to
    warm (its kernels raise), is passed over with a warning; one from another minor
    version of sklearn-micro is refused."""
    fmt = "skops" if snapshots.suffix == ".skops" else "pickle"
    base = ServedModel.of(load(model_path), model_path)
    for chunk, path in reversed(snapshots.list()):
        if chunk <= base.chunk:
            break
        try:
            served = ServedModel.of(load(path, format=fmt), path)
            served.warm()
            return served
        except IncompatibleVersionError as exc:
            raise IncompatibleVersionError(
                f"the snapshot {str(path)!r} cannot be served: {exc} Move the folder "
                f"{str(snapshots.folder)!r} away to serve {str(model_path)!r}.") from None
        except Exception as exc:  # noqa: BLE001
            logger.warning("passing over the snapshot %s, which cannot be served: %s",
                           path, exc)
    base.warm()
    return base


class Service:
    """A served model with its batcher, updater, metrics and limits.

    Parameters
    ----------
    model_path : path
        A model saved by `sklearn_micro.persistence.dump` (``.skops``, ``.pkl`` or
        ``.pickle``).
    state_dir : path, optional
        The snapshots' folder; default ``<MODEL>.d`` beside MODEL.
    keep : int, default=3
        Snapshots kept.
    limits : Limits, optional
        What one request may ask for.
    queue_size : int, default=4
        Chunks queued or being applied, at most.
    max_batch : int, default=256
        Users (or items) answered by one model call, at most.
    batch_wait : float, default=0.0
        Seconds a batch waits for more requests when the model is free.
    update_in_process : bool, default=False
        Apply updates on a thread of this process rather than in a worker process (for
        comparison).
    chunk_seconds : float, optional
        Close the open chunk this many seconds after it opened (if it holds engagements).
    retry_seconds : float, default=1.0
        The first wait before a failed close is tried again (doubled at each failure).
    """

    def __init__(self, model_path, *, state_dir=None, keep: int = 3,
                 limits: Limits | None = None, queue_size: int = 4, max_batch: int = 256,
                 batch_wait: float = 0.0, update_in_process: bool = False,
                 chunk_seconds: float | None = None, retry_seconds: float = 1.0):
        model_path = Path(model_path)
        if model_path.suffix.lower() not in _SUFFIXES:
            raise ValueError(f"MODEL must be a file saved by sklearn_micro.persistence.dump, "
                             f"ending in {', '.join(_SUFFIXES)}; got {str(model_path)!r}.")
        if not model_path.is_file():
            raise FileNotFoundError(f"no model at {str(model_path)!r}.")
        if keep < 1:
            raise ValueError(f"keep must be at least 1; got {keep}.")
        self.model_path = model_path
        self.limits = limits or Limits()
        self.metrics = Metrics()
        self.snapshots = Snapshots(state_dir or state_dir_of(model_path),
                                   model_path.suffix.lower(), keep).open()
        try:
            served = choose_model(model_path, self.snapshots)
            self.eventlog = EventLog(self.snapshots.folder / EVENT_LOG)
        except BaseException:
            self.snapshots.close()
            raise
        self.served = served
        self.metrics.chunk.set(served.chunk)
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="micro-kernels")
        self.batcher = Batcher(self._answer, self.executor, max_rows=max_batch,
                               max_wait=batch_wait, on_batch=self._on_batch,
                               on_fallback=self.metrics.batch_fallbacks.inc)
        self.updater = Updater(self, self.snapshots, in_process=update_in_process,
                               retry_seconds=retry_seconds)
        self.forget_held()  # what is after the served chunk is replayed
        self.ingest = Ingest(self, self.eventlog, self.eventlog.after(served.chunk),
                             LiveMetrics(self.metrics.registry), queue_size=queue_size,
                             chunk_seconds=chunk_seconds)
        self._openapi = {}

    # ------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Replay the event log's open chunk, start the batcher and the updater, and queue
        the closes that were due."""
        self.batcher.start()
        await self.ingest.start()
        await self.updater.start()
        for chunk in self.ingest.due:
            self.updater.close(chunk)

    async def stop(self) -> None:
        await self.ingest.stop()
        await self.updater.stop()
        await self.batcher.stop()
        self.executor.shutdown(wait=True)
        self.eventlog.close()
        self.snapshots.close()

    def forget_held(self) -> None:
        """Delete from the event log the chunks that every snapshot a restart could serve
        holds: those through the served chunk and the oldest kept snapshot's, whichever is
        older. A kept snapshot found damaged at a restart thus loses nothing: the restart
        serves an older one and replays the chunks after it from the log."""
        kept = [chunk for chunk, _ in self.snapshots.list()]
        self.eventlog.forget_through(min([self.served.chunk, *kept[:1]]))

    async def warm(self, served: ServedModel) -> None:
        """Run ``served``'s kernels once, on the kernels' thread."""
        await asyncio.get_running_loop().run_in_executor(self.executor, served.warm)

    def swap(self, served: ServedModel) -> None:
        """Serve ``served`` from the next request on."""
        self.served = served
        self.metrics.chunk.set(served.chunk)

    # --------------------------------------------------------------- answers

    @staticmethod
    def _answer(model: ServedModel, requests: list) -> list:
        if isinstance(requests[0], RecommendRequest):
            return model.recommend(requests)
        if isinstance(requests[0], SimilarRequest):
            return model.similar(requests)
        raise TypeError(f"the batcher answers RecommendRequest and SimilarRequest; got "
                        f"{type(requests[0]).__name__}.")

    def _on_batch(self, n_requests: int, n_rows: int) -> None:
        self.metrics.batch_requests.observe(n_requests)
        self.metrics.batch_rows.observe(n_rows)

    def openapi(self) -> dict:
        kinds = (self.served.user_kind, self.served.item_kind)
        if kinds not in self._openapi:
            self._openapi[kinds] = document(*kinds, self.limits, __version__)
        return self._openapi[kinds]

    def health(self) -> dict:
        served = self.served
        error = self.updater.last_error
        return {"status": "ok" if error is None else "degraded", "chunk": served.chunk,
                "model": served.name, "path": str(served.path),
                **self.ingest.health(), "queued": list(self.updater.queued),
                "last_error": error, "version": __version__}


async def _body(request: Request, limit: int) -> dict:
    return parse_json(await _read(request, limit))


async def _read(request: Request, limit: int) -> bytes:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise RequestError(413, None, f"the body is {int(length)} bytes; at most {limit}.")
    parts, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise RequestError(413, None, f"the body is over {limit} bytes, the most allowed.")
        parts.append(part)
    return b"".join(parts)


async def _model_call(call):
    """Await a model's answer; what the model refuses is the request's fault (422)."""
    try:
        return await call
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise RequestError(422, None, str(exc)) from None


def create_app(model_path=None, *, service: Service | None = None, **options) -> Starlette:
    """The service's ASGI app for the model saved at ``model_path``.

    The model is loaded (the newest complete snapshot newer than it, if any) and its
    kernels run once before this returns, so the app answers ``/health`` only when warm.
    ``options`` are those of `Service`.
    """
    if service is None:
        service = Service(model_path, **options)
    limits = service.limits

    async def health(request):
        return _json(service.health())

    async def recommend(request):
        body = await _body(request, limits.max_body_bytes)
        served = service.served
        req = parse_recommend(body, served.user_kind, served.item_kind, limits)
        return _json(await _model_call(service.batcher.submit(served, req)))

    async def similar(request):
        body = await _body(request, limits.max_body_bytes)
        served = service.served
        req = parse_similar(body, served.item_kind, limits)
        served.check_similar(req)
        return _json(await _model_call(service.batcher.submit(served, req)))

    async def explain(request):
        body = await _body(request, limits.max_body_bytes)
        served = service.served
        req = parse_explain(body, served.user_kind, served.item_kind, limits)
        served.check_explain(req)
        loop = asyncio.get_running_loop()
        return _json(await _model_call(loop.run_in_executor(service.executor, served.explain,
                                                            req)))

    async def chunks(request):
        raw = await _read(request, limits.max_chunk_bytes)
        served = service.served
        # a chunk's JSON is large: parsed and checked off the event loop
        req = await asyncio.get_running_loop().run_in_executor(
            None, lambda: parse_chunk(parse_json(raw), served.user_kind, served.item_kind))
        ack = await service.ingest.submit(Job("chunk", req.chunk, req.user, req.item))
        return _json({"status": "queued", "chunk": ack.chunk, "offset": ack.offset,
                      "queued": list(service.updater.queued)}, 202)

    async def engagements(request):
        raw = await _read(request, limits.max_engagements_bytes)
        served = service.served

        def parse():
            return parse_engagements(parse_json(raw), served.user_kind, served.item_kind,
                                     limits)

        # a large body is parsed and checked off the event loop
        req = (parse() if len(raw) < 65536
               else await asyncio.get_running_loop().run_in_executor(None, parse))
        ack = await service.ingest.submit(Job("engagements", req.chunk, req.user, req.item))
        return _json({"acknowledged": ack.n, "chunk": ack.chunk, "offset": ack.offset})

    async def close(request):
        raw = await _read(request, limits.max_body_bytes)
        chunk = parse_close(parse_json(raw) if raw else {})
        ack = await service.ingest.submit(Job("close", chunk))
        return _json({"status": "queued", "chunk": ack.chunk,
                      "queued": list(service.updater.queued)}, 202)

    async def metrics(request):
        return Response(service.metrics.text(), media_type=CONTENT_TYPE_LATEST)

    async def openapi(request):
        return _json(service.openapi())

    def endpoint(name, handler):
        requests_total = service.metrics.requests
        latency = service.metrics.latency.labels(name)

        async def answer(request):
            start = time.perf_counter()
            try:
                response = await handler(request)
            except RequestError as exc:
                response = _error(exc)
            except Exception:  # noqa: BLE001  (a bug: logged, answered, the server goes on)
                logger.exception("%s failed", name)
                response = _json({"error": "internal error; see the server's log",
                                  "field": None}, 500)
            latency.observe(time.perf_counter() - start)
            requests_total.labels(name, str(response.status_code)).inc()
            return response

        return answer

    routes = [
        Route("/health", endpoint("health", health), methods=["GET"]),
        Route("/recommend", endpoint("recommend", recommend), methods=["POST"]),
        Route("/similar", endpoint("similar", similar), methods=["POST"]),
        Route("/explain", endpoint("explain", explain), methods=["POST"]),
        Route("/chunks", endpoint("chunks", chunks), methods=["POST"]),
        Route("/chunks/close", endpoint("close", close), methods=["POST"]),
        Route("/engagements", endpoint("engagements", engagements), methods=["POST"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
    ]

    async def http_error(request, exc: HTTPException):
        return _json({"error": exc.detail, "field": None}, exc.status_code, exc.headers)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: http_error})
    app.state.service = service
    return app
