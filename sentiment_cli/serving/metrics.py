"""The server's Prometheus metrics (prometheus-client), served as text by ``GET /metrics``.

One :class:`Metrics` per app, in a registry of its own (so several apps in one process, as in
the tests, never share counts). Names (the text format adds ``_total`` to counters):

    sentiment_requests{route, status}      HTTP requests (route: the matched path, never the raw one)
    sentiment_request_seconds{route}       HTTP request latency
    sentiment_batch_reviews                reviews per model batch (micro-batching)
    sentiment_batch_seconds                model time per batch
    sentiment_reviews                      reviews scored
    sentiment_queued_reviews               reviews waiting for a model batch
    sentiment_client_disconnects           requests whose client left before the answer

Needs the ``serve`` extra (prometheus-client).
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

#: The media type of :meth:`Metrics.exposition` (Prometheus text format).
CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    """The server's Prometheus metrics, in a registry of their own (one per app).

    Attributes:
        registry: the registry holding every metric below.
        requests, latency: HTTP requests and their latency (recorded by the guard).
        batch_size, batch_seconds, reviews: model batches (recorded by :meth:`on_batch`).
        queued: reviews waiting, set on each scrape.
        disconnects: requests dropped because their client left.
    """

    def __init__(self):
        self.registry = CollectorRegistry()
        self.requests = Counter("sentiment_requests", "HTTP requests by route and status code.",
                                ["route", "status"], registry=self.registry)
        self.latency = Histogram("sentiment_request_seconds", "HTTP request latency by route, in seconds.",
                                 ["route"], registry=self.registry,
                                 buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))
        self.batch_size = Histogram("sentiment_batch_reviews", "Reviews per model batch (micro-batching).",
                                    registry=self.registry, buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
        self.batch_seconds = Histogram("sentiment_batch_seconds", "Model time per batch, in seconds.",
                                       registry=self.registry,
                                       buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5))
        self.reviews = Counter("sentiment_reviews", "Reviews scored.", registry=self.registry)
        self.queued = Gauge("sentiment_queued_reviews", "Reviews waiting for a model batch.", registry=self.registry)
        self.disconnects = Counter("sentiment_client_disconnects",
                                   "Requests whose client left before the answer (work dropped).",
                                   registry=self.registry)

    def on_batch(self, reviews: int, seconds: float) -> None:
        """Record one model batch (the micro-batcher's ``on_batch``).

        Args:
            reviews: reviews in the batch.
            seconds: the model's time for it.
        """
        self.batch_size.observe(reviews)
        self.batch_seconds.observe(seconds)
        self.reviews.inc(reviews)

    def exposition(self, queued: int) -> bytes:
        """Every metric in Prometheus text format (media type :data:`CONTENT_TYPE`).

        Args:
            queued: reviews waiting for the model now (sets ``sentiment_queued_reviews``).
        """
        self.queued.set(queued)
        return generate_latest(self.registry)
