"""``sklearn-micro serve``: a fitted model behind JSON over HTTP, updated chunk by chunk.

- `create_app` builds the ASGI app (Starlette) for a model saved by
  `sklearn_micro.persistence.dump`; `run` serves it with uvicorn.
- `requests` validates every request body; `model` answers from one loaded model;
  `batcher` answers concurrent requests with one call; `ingest` makes engagements durable
  in the `eventlog` (SQLite) and observes them into the model; `updater` applies closed
  chunks (in a `worker` process), `snapshots` keeps them on disk; `metrics` and `openapi`
  describe it.

Needs the ``serve`` extra: ``pip install "sklearn-micro[serve]"``. See docs/serving.md.
"""

from __future__ import annotations

__all__ = ["create_app", "run"]


def create_app(model_path=None, **options):
    """The ASGI app serving the model saved at ``model_path`` (see `app.create_app`)."""
    from .app import create_app as _create_app

    return _create_app(model_path, **options)


def run(model_path, *, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info",
        access_log: bool = False, **options) -> None:
    """Load the model, warm its kernels, and serve it until stopped (SIGINT or SIGTERM)."""
    import logging

    import uvicorn

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(message)s")
    app = create_app(model_path, **options)
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=access_log)
