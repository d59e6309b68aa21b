"""`sentiment serve` with several model workers: batches scored side by side, each request still gets exactly its
own results, no more batches at once than workers, shutdown waits for all of them; the loader's choice; predict
served by the guard in front of FastAPI, with the same answers, counted once."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

pytest.importorskip("fastapi", reason="the serve extra is part of the test extra; install .[test]")

from sentiment_cli.serving.app import create_app  # noqa: E402
from sentiment_cli.serving.batcher import MicroBatcher  # noqa: E402
from sentiment_cli.serving.settings import Loaded, ServeSettings  # noqa: E402

from .conftest import SMALL_DATA  # noqa: E402
from .serving import FakePredictor, ServerThread  # noqa: E402


class Overlap:
    """A ``score`` that records how many calls run at once; each call waits on ``gate`` (if given)."""

    def __init__(self, gate: threading.Event | None = None, seconds: float = 0.0):
        self.gate, self.seconds = gate, seconds
        self.lock = threading.Lock()
        self.now = self.most = 0
        self.calls: list[list[str]] = []
        self.threads: set[int] = set()

    def __call__(self, texts, kind):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.calls.append(list(texts))
            self.threads.add(threading.get_ident())
        try:
            if self.gate is not None and not self.gate.wait(10):
                raise RuntimeError("gate never opened")
            time.sleep(self.seconds)
            return [f"{t}!" for t in texts]
        finally:
            with self.lock:
                self.now -= 1


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_no_more_batches_at_once_than_workers_and_each_job_gets_its_own_results(workers):
    score = Overlap(seconds=0.02)

    async def main():
        b = MicroBatcher(score, max_batch_size=4, max_wait_ms=0, workers=workers)
        b.start()
        jobs = [[f"r{i}-{j}" for j in range(1 + i % 3)] for i in range(40)]
        got = await asyncio.gather(*(b.submit(texts) for texts in jobs))
        await b.close()
        return jobs, got

    jobs, got = run(main())
    assert got == [[f"{t}!" for t in texts] for texts in jobs]
    assert score.most == workers
    assert len(score.threads) <= workers
    assert sorted(t for call in score.calls for t in call) == sorted(t for texts in jobs for t in texts)


def test_two_workers_score_two_batches_side_by_side_and_close_waits_for_both():
    gate = threading.Event()
    score = Overlap(gate)

    async def main():
        b = MicroBatcher(score, max_batch_size=1, max_wait_ms=0, workers=2)
        b.start()
        first = asyncio.ensure_future(b.submit(["a"]))
        second = asyncio.ensure_future(b.submit(["b"]))
        third = asyncio.ensure_future(b.submit(["c"]))
        for _ in range(200):                  # bounded: 2 s
            if score.now == 2:
                break
            await asyncio.sleep(0.01)
        running, busy, queued = score.now, b.busy, b.queued
        closing = asyncio.ensure_future(b.close())
        await asyncio.sleep(0.05)
        still_closing = not closing.done()
        gate.set()
        await closing
        return running, busy, queued, still_closing, [await f for f in (first, second, third)]

    running, busy, queued, still_closing, answers = run(main())
    assert running == 2 and busy and queued == 1      # both workers in the model, the third request waits
    assert still_closing                              # close waits for the batches someone waits for
    assert answers == [["a!"], ["b!"], ["c!"]]        # queued work is finished on close too
    assert score.most == 2


def test_a_burst_is_shared_among_the_idle_workers():
    """8 requests queued at once, 2 idle workers: a batch of 4 each, not one of 8 and an idle worker."""
    gate = threading.Event()
    score = Overlap(gate)

    async def main():
        b = MicroBatcher(score, max_batch_size=64, max_wait_ms=100, workers=2)
        b.start()
        pending = [asyncio.ensure_future(b.submit([f"r{i}"])) for i in range(8)]
        for _ in range(300):                  # bounded: 3 s
            if score.now == 2:
                break
            await asyncio.sleep(0.01)
        gate.set()
        got = await asyncio.gather(*pending)
        await b.close()
        return got

    assert run(main()) == [[f"r{i}!"] for i in range(8)]
    assert [len(c) for c in score.calls] == [4, 4]
    assert sorted(t for c in score.calls for t in c) == [f"r{i}" for i in range(8)]


def test_workers_can_be_raised_once_the_model_is_loaded():
    score = Overlap(seconds=0.02)

    async def main():
        b = MicroBatcher(score, max_batch_size=1, max_wait_ms=0)
        b.start()
        await asyncio.gather(*(b.submit([str(i)]) for i in range(6)))
        alone = score.most
        b.workers = 3
        await asyncio.gather(*(b.submit([str(i)]) for i in range(12)))
        await b.close()
        return alone

    assert run(main()) == 1
    assert score.most == 3
    with pytest.raises(ValueError):
        MicroBatcher(score, workers=0)


def test_a_failing_batch_fails_only_its_own_requests_with_two_workers():
    fake = FakePredictor(fail_on="boom")
    with ServerThread(create_app(lambda: Loaded(fake, {}, workers=2), ServeSettings(max_wait_ms=0))) as s:
        s.wait_ready()
        r = httpx.post(s.url + "/v1/predict", json={"texts": ["boom"]}, timeout=30)
        assert r.status_code == 500
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda i: httpx.post(s.url + "/v1/predict", json={"texts": [f"fine {i}"]},
                                                         timeout=30), range(8)))
        assert [a.status_code for a in answers] == [200] * 8
        assert [a.json()["predictions"][0]["text"] for a in answers] == [f"fine {i}" for i in range(8)]


def test_the_real_model_in_two_workers_gives_each_review_its_margin_scored_alone(trained_checkpoint):
    """24 clients at once against two model threads; each review's logit margin equals its margin alone."""
    from sentiment_cli.card.facts import model_card
    from sentiment_cli.data.splits import load_split
    from sentiment_cli.inference.predictor import Predictor

    predictor = Predictor(trained_checkpoint)
    reviews = load_split(str(SMALL_DATA), "test", 0.0, 0).texts[:100]
    app = create_app(lambda: Loaded(predictor, model_card(trained_checkpoint), workers=2),
                     ServeSettings(max_batch_size=8, max_wait_ms=5))
    jobs = [reviews[i * 4: i * 4 + 1 + i % 4] for i in range(24)]
    start = threading.Barrier(len(jobs))

    def client(texts):
        start.wait()
        return httpx.post(s.url + "/v1/predict", json={"texts": texts}, timeout=60)

    with ServerThread(app) as s:
        s.wait_ready()
        assert app.state.batcher.workers == 2
        with ThreadPoolExecutor(len(jobs)) as pool:
            responses = list(pool.map(client, jobs))
    for texts, r in zip(jobs, responses):
        assert r.status_code == 200, r.text
        got = r.json()["predictions"]
        assert [p["text"] for p in got] == texts
        alone = predictor.logits(texts)
        for p, row in zip(got, alone):
            margin = math.log(p["probabilities"]["positive"]) - math.log(p["probabilities"]["negative"])
            assert margin == pytest.approx(float(row[1] - row[0]) / predictor.temperature, abs=1e-5)


def test_the_loader_gives_a_cpu_model_one_worker_per_thread_each_single_threaded(trained_checkpoint, monkeypatch):
    import os

    import torch

    from sentiment_cli.serving.server import model_loader

    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)   # restored after the test
    before = torch.get_num_threads()
    try:
        assert model_loader(trained_checkpoint, onnx=False, device="cpu", threads=1)().workers == 1
        assert "TOKENIZERS_PARALLELISM" not in os.environ         # one worker: the tokenizer keeps its pool
        loaded = model_loader(trained_checkpoint, onnx=False, device="cpu", threads=3)()
        assert loaded.workers == 3 and torch.get_num_threads() == 1
        assert os.environ["TOKENIZERS_PARALLELISM"] == "false"   # each worker tokenizes its own batch
    finally:
        torch.set_num_threads(before)


# ----------------------------------------------------------------------------- the guard in front of FastAPI

def test_predict_is_served_in_front_of_fastapi_and_counted_once():
    from sentiment_cli.serving.guard import BodyGuard

    from .serving import metric

    app = create_app(lambda: Loaded(FakePredictor(), {"name": "fake"}), ServeSettings(max_body_bytes=1000))
    assert isinstance(app.state.asgi, BodyGuard) and app.state.asgi.front
    with ServerThread(app) as s:
        s.wait_ready()
        answers = [httpx.post(s.url + "/v1/predict", json={"texts": [f"r{i}"]}) for i in range(3)]
        too_big = httpx.post(s.url + "/v1/predict", json={"texts": ["x" * 2000]})
        bad = httpx.post(s.url + "/v1/predict", content=b"{not json")
        info = httpx.get(s.url + "/v1/info")
        text = httpx.get(s.url + "/metrics").text
    assert [a.status_code for a in answers] == [200] * 3 and all(a.headers["x-request-id"] for a in answers)
    assert too_big.status_code == 413 and "over the limit" in too_big.json()["error"]
    assert bad.status_code == 422 and bad.json()["error"]
    assert info.status_code == 200 and info.json()["name"] == "fake" and info.headers["x-request-id"]
    assert metric(text, "sentiment_requests_total", route="/v1/predict", status="200") == 3
    assert metric(text, "sentiment_requests_total", route="/v1/predict", status="413") == 1
    assert metric(text, "sentiment_requests_total", route="/v1/info", status="200") == 1


def test_with_cors_the_app_serves_predict_itself():
    app = create_app(lambda: Loaded(FakePredictor(), {}), ServeSettings(cors_origins=["https://app.example.com"]))
    assert app.state.asgi is app
