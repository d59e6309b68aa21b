"""What a server is built from: its limits and switches, and what its model loader returns.

Shared by :mod:`~sentiment_cli.serving.server` (which builds both from the command's options) and
:mod:`~sentiment_cli.serving.app` (which serves with them). Plain dataclasses: no web framework, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ServeSettings:
    """Limits and switches of the server (``sentiment serve --help`` documents each).

    Attributes:
        max_batch_size: most reviews in one model batch.
        max_wait_ms: longest a request waits for others to join its batch (ms).
        max_texts: most reviews in one request (more: 413).
        max_body_bytes: largest request body (more: 413).
        max_header_bytes: most bytes of a request line and its headers (more: 431, connection closed).
        read_timeout: seconds a client has to send its headers, then again its whole body (slower: 408).
        max_queue: most reviews waiting for the model (more: 503 with Retry-After).
        api_key: if set, ``/v1/*`` and ``/metrics`` need ``Authorization: Bearer <api_key>``.
        cors_origins: origins allowed to call the API from a browser; empty: CORS off.
        info_paths: ``/v1/info`` shows the model card's absolute paths (the checkpoint's and the data's place
            on the server); False: each cut to its last part.
    """

    max_batch_size: int = 64
    max_wait_ms: float = 2.0
    max_texts: int = 128
    max_body_bytes: int = 4 * 2**20
    max_header_bytes: int = 64 * 1024
    read_timeout: float = 30.0
    max_queue: int = 2048
    api_key: str | None = field(default=None, repr=False)
    cors_origins: list[str] = field(default_factory=list)
    info_paths: bool = False


@dataclass
class Loaded:
    """What the loader returns: the predictor and its model card (``/v1/info``).

    Attributes:
        predictor: anything with ``labels``, ``predict(texts)`` and ``explain(texts)``, whose results
            have ``to_dict()`` (a ``sentiment predict --json`` object).
        card: the model card, answered as is by ``GET /v1/info``.
        workers: most batches the predictor scores at once, each in its own thread (it must then be safe to
            call from several threads).
    """

    predictor: Any
    card: dict[str, Any]
    workers: int = 1
