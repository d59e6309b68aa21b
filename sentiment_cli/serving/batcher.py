"""Micro-batching: merge concurrent requests into one model batch, run it off the event loop.

A model scores 32 reviews in one forward pass in little more time than one
review (the per-call overhead dominates for short inputs), so a server that
runs each request on its own wastes most of its CPU under concurrent load.
:class:`MicroBatcher` queues requests; whenever one of its ``workers`` threads is free, it takes the
oldest, waits at most ``max_wait_ms`` for more to arrive (or none, when enough
are queued), and runs the merged batch of at most ``max_batch_size`` reviews in
that thread, so the event loop keeps answering (``/health``, new requests)
while batches run. Each request gets back exactly its own results, in order.

With several workers, several batches run at once, one per thread: a small
model's forward pass spends most of its time in torch or ONNX Runtime kernels,
which release the GIL, so on a CPU two single-threaded batches side by side
keep two cores busy, where one batch split over two intra-op threads keeps them
waiting on each other (and on the event loop) at every operation. The queue is
shared among the idle workers (a batch takes at most its share of the queued
reviews), so that a burst of requests becomes a batch for each worker rather
than one batch and idle workers.

A review's result does not depend on what shares its batch: the model's
padding mask and masked max-pool make each review's logits independent of
the others' (``model.py``).

Imports neither torch nor a web framework: the scoring function is given.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from contextlib import suppress
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any


class Overloaded(Exception):
    """The queue already holds ``max_queue`` reviews; the caller should retry later (HTTP 503)."""


class Closed(Exception):
    """The batcher is shutting down and takes no new work (HTTP 503)."""


@dataclass
class _Job:
    texts: Sequence[str]
    kind: Any                      # jobs of one kind share a batch (e.g. plain vs explained)
    future: asyncio.Future
    arrived: float = field(default_factory=time.monotonic)


class MicroBatcher:
    """Merge concurrent :meth:`submit` calls into batches for ``score``.

    Args:
        score: ``score(texts, kind) -> results``, one result per text in order; called in a
            worker thread, one batch at a time. An exception fails every request in that batch.
        max_batch_size: most reviews in one batch (a single larger request still runs, alone).
        max_wait_ms: longest a request waits for others to join its batch, in milliseconds.
        max_queue: most reviews waiting; :meth:`submit` raises :class:`Overloaded` beyond it.
        on_batch: called on the event loop with ``(reviews, seconds)`` after each batch.
        workers: most batches scored at once, each in its own thread (``score`` must then be safe to call
            from several threads); :attr:`workers` may be changed later, e.g. once the model is loaded.

    Raises:
        ValueError: a limit is out of range.
    """

    def __init__(self, score: Callable[[list[str], Any], list], *, max_batch_size: int = 64,
                 max_wait_ms: float = 5.0, max_queue: int = 2048,
                 on_batch: Callable[[int, float], None] | None = None, workers: int = 1):
        if max_batch_size < 1 or max_wait_ms < 0 or max_queue < 1 or workers < 1:
            raise ValueError("max_batch_size, max_queue and workers must be >= 1 and max_wait_ms >= 0")
        self.score = score
        self.max_batch_size = max_batch_size
        self.max_wait = max_wait_ms / 1000.0
        self.max_queue = max_queue
        self.on_batch = on_batch
        self._executor: ThreadPoolExecutor | None = None
        self.workers = workers
        self._pending: deque[_Job] = deque()
        self._queued = 0                       # reviews in _pending
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._closing = False
        self._batches: dict[asyncio.Task, list[_Job]] = {}   # the batches being scored, by their task
        self._scoring: set[int] = set()        # threads inside score (changed in those threads)

    @property
    def workers(self) -> int:
        """Most batches scored at once, each in its own thread."""
        return self._workers

    @workers.setter
    def workers(self, n: int) -> None:
        """Score up to ``n`` batches at once from now on (batches already running finish in their threads).

        Raises:
            ValueError: ``n`` is less than 1.
        """
        if n < 1:
            raise ValueError(f"workers must be >= 1, got {n}")
        old, self._workers = self._executor, n
        # threads start as batches need them; _run never has more than n batches out at once
        self._executor = ThreadPoolExecutor(n, thread_name_prefix="model")
        if old is not None:
            old.shutdown(wait=False)

    @property
    def queued(self) -> int:
        """Reviews waiting for a batch."""
        return self._queued

    @property
    def busy(self) -> bool:
        """A worker thread is scoring a batch (perhaps one :meth:`close` abandoned)."""
        return bool(self._scoring)

    def start(self) -> None:
        """Start the worker on the running event loop."""
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="micro-batcher")

    async def submit(self, texts: Sequence[str], kind: Any = None) -> list:
        """Queue ``texts`` and wait for their results (in order).

        If the caller is cancelled (its client went away) before the batch is formed, its
        reviews are dropped from the queue and never reach the model.

        Raises:
            Overloaded: the queue is full.
            Closed: the batcher is shutting down.
            Exception: whatever ``score`` raised for this batch.
        """
        if self._closing or self._task is None:
            raise Closed("the server is shutting down")
        if self._queued + len(texts) > self.max_queue and self._queued:
            raise Overloaded(f"{self._queued} reviews are already waiting; retry shortly")
        job = _Job(list(texts), kind, asyncio.get_running_loop().create_future())
        self._pending.append(job)
        self._queued += len(job.texts)
        self._wake.set()
        try:
            return await job.future
        except asyncio.CancelledError:
            job.future.cancel()
            raise

    async def close(self) -> None:
        """Take no new work, finish the batches someone still waits for, then stop.

        A batch whose requests are all gone (cancelled, e.g. by a shutdown's graceful timeout) is not waited
        for: it runs on in the worker thread (:attr:`busy`), whose result nobody reads.
        """
        self._closing = True
        if self._task is not None:
            self._wake.set()
            while not self._task.done() and any(not job.future.done() for job in self._waited_for()):
                await asyncio.wait({self._task}, timeout=0.05)
            for task in (self._task, *self._batches):
                task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _waited_for(self) -> list[_Job]:
        """The queued jobs and those of the batches being scored."""
        return [*self._pending, *(job for batch in self._batches.values() for job in batch)]

    async def _run(self) -> None:
        """Form batches while there is work and a free worker; each runs in its own task (:meth:`_dispatch`)."""
        loop = asyncio.get_running_loop()
        while True:
            if not self._pending or len(self._batches) >= self.workers:
                if self._closing and not self._pending:
                    if self._batches:
                        await asyncio.wait(set(self._batches))
                    return
                self._wake.clear()
                await self._wake.wait()   # set by submit, close and every finished batch
                continue
            await self._fill(self._pending[0].arrived + self.max_wait)
            # the queue is shared among the idle workers: one batch taking it all would leave the others idle
            # until its clients came back, and batches would run one at a time
            idle = self.workers - len(self._batches)
            batch = self._take(min(self.max_batch_size, -(-self._queued // idle)))
            if batch:
                task = loop.create_task(self._dispatch(batch))
                self._batches[task] = batch

    async def _dispatch(self, batch: list[_Job]) -> None:
        """Score one batch in a worker thread; give each job its results, or the batch's exception."""
        texts = [t for job in batch for t in job.texts]
        start = time.perf_counter()
        try:
            results = await asyncio.get_running_loop().run_in_executor(self._executor, self._score, texts,
                                                                       batch[0].kind)
        except Exception as exc:   # a fault in the model fails this batch, not the server
            for job in batch:
                if not job.future.done():
                    job.future.set_exception(exc)
            return
        finally:
            self._batches.pop(asyncio.current_task(), None)
            self._wake.set()
        if self.on_batch is not None:
            self.on_batch(len(texts), time.perf_counter() - start)
        lo = 0
        for job in batch:
            hi = lo + len(job.texts)
            if not job.future.done():
                job.future.set_result(results[lo:hi])
            lo = hi

    def _score(self, texts: list[str], kind: Any) -> list:
        """``score`` in a worker thread, counted in :attr:`busy` while it runs."""
        me = threading.get_ident()
        self._scoring.add(me)
        try:
            return self.score(texts, kind)
        finally:
            self._scoring.discard(me)

    async def _fill(self, deadline: float) -> None:
        """Wait until ``max_batch_size`` reviews are queued, the deadline passes, or shutdown."""
        while self._queued < self.max_batch_size and not self._closing:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), remaining)
            except TimeoutError:
                return

    def _take(self, limit: int) -> list[_Job]:
        """The next batch: the oldest live job, then later jobs of its kind while the batch holds at most ``limit``
        reviews."""
        while self._pending and self._pending[0].future.done():   # cancelled: its client left
            self._queued -= len(self._pending.popleft().texts)
        if not self._pending:
            return []
        first = self._pending.popleft()
        self._queued -= len(first.texts)
        batch, size, kept = [first], len(first.texts), deque()
        while self._pending:
            job = self._pending.popleft()
            if job.future.done():
                self._queued -= len(job.texts)
            elif job.kind == first.kind and size + len(job.texts) <= limit:
                batch.append(job)
                size += len(job.texts)
                self._queued -= len(job.texts)
            else:
                kept.append(job)
        self._pending = kept
        return batch
