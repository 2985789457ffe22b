"""The service's Prometheus metrics, in a registry of its own (one per app)."""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

__all__ = ["Metrics"]

disable_created_metrics()  # no *_created series: one timestamp per series is noise here

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0,
                   5.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
UPDATE_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class Metrics:
    """Requests by endpoint and status, their latency, the batches (and the batched calls
    that fell back to one call per request), the updates."""

    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("micro_requests", "Requests answered, by endpoint and status.",
                                ["endpoint", "status"], registry=r)
        self.latency = Histogram("micro_request_seconds", "Time to answer a request (from "
                                 "its body read to its answer built), by endpoint.",
                                 ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.batch_requests = Histogram("micro_batch_requests", "Requests answered by one "
                                        "model call.", buckets=BATCH_BUCKETS, registry=r)
        self.batch_rows = Histogram("micro_batch_rows", "Users (or items) ranked by one "
                                    "model call.", buckets=BATCH_BUCKETS, registry=r)
        self.batch_fallbacks = Counter("micro_batch_fallbacks", "Batched calls of several "
                                       "requests that raised, their requests then answered "
                                       "one by one.", registry=r)
        self.updates = Counter("micro_updates", "Chunk updates finished, by outcome "
                               "(applied or failed).", ["outcome"], registry=r)
        self.update_seconds = Histogram("micro_update_seconds", "Time from a chunk taken from "
                                        "the queue to its model answering.",
                                        buckets=UPDATE_BUCKETS, registry=r)
        self.queued = Gauge("micro_chunks_queued", "Chunks queued or being applied.",
                            registry=r)
        self.chunk = Gauge("micro_served_chunk", "The latest chunk of the served model.",
                           registry=r)

    def text(self) -> bytes:
        return generate_latest(self.registry)


SYNC_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
FRESHNESS_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0,
                     10.0, 30.0, 60.0, 300.0, 1800.0)


class LiveMetrics:
    """The event path's metrics, in the registry of a `Metrics`: ingest, the event log's
    syncs, observing, the open chunk."""

    def __init__(self, registry: CollectorRegistry):
        r = registry
        self.engagements = Counter("micro_engagements", "Engagements acknowledged (durable "
                                   "in the event log).", registry=r)
        self.sync_seconds = Histogram("micro_event_log_sync_seconds", "Time of one commit of "
                                      "the event log, its fsync included.",
                                      buckets=SYNC_BUCKETS, registry=r)
        self.commit_requests = Histogram("micro_event_log_commit_requests", "Requests "
                                         "written by one commit (a group commit).",
                                         buckets=BATCH_BUCKETS, registry=r)
        self.observe_seconds = Histogram("micro_observe_seconds", "Time of one observe of "
                                         "acknowledged engagements into the served model.",
                                         buckets=LATENCY_BUCKETS, registry=r)
        self.observe_failed = Counter("micro_observe_failed", "Acknowledged engagements the "
                                      "served model refused to observe (they are learned "
                                      "when their chunk closes).", registry=r)
        self.freshness = Histogram("micro_freshness_seconds", "Time from an engagement's "
                                   "acknowledgement to the served model answering with it.",
                                   buckets=FRESHNESS_BUCKETS, registry=r)
        self.live = Gauge("micro_live_engagements", "Engagements in the served model's live "
                          "layer (its open chunk).", registry=r)
        self.open_chunk = Gauge("micro_open_chunk", "The chunk engagements go to.", registry=r)
        self.open_engagements = Gauge("micro_open_engagements", "Engagements acknowledged in "
                                      "the open chunk.", registry=r)
        self.durable_offset = Gauge("micro_durable_offset", "The offset of the last durable "
                                    "engagement.", registry=r)
