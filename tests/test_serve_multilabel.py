"""`sentiment serve` with a multi-label checkpoint (issue 42): each text's label set and every label's probability,
through the fast path and the FastAPI route (CORS on), the micro-batcher, explain, `/v1/info`'s decision, 4xx."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the serve extra is part of the test extra; install .[test]")

from fastapi.testclient import TestClient  # noqa: E402

from sentiment_cli.serving.app import create_app  # noqa: E402
from sentiment_cli.serving.settings import Loaded, ServeSettings  # noqa: E402

from .serving import metric  # noqa: E402

TEXTS = ["I love this so much, thank you!", "This is terrible and I'm angry.", "what? why would anyone do that",
         "ok", "Ünïcödé ✓ — so sad to hear that 😢"]

@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, multilabel_checkpoint) -> Path:
    """A copy of the multi-label checkpoint (the original is never written to)."""
    out = tmp_path_factory.mktemp("ml") / "goemotions-small"
    shutil.copytree(multilabel_checkpoint, out, ignore=shutil.ignore_patterns("trainer_state", "*.onnx"))
    return out


@pytest.fixture(scope="module")
def predictor(checkpoint):
    from sentiment_cli.inference.predictor import Predictor

    p = Predictor(checkpoint)
    assert p.multi_label
    return p


def client_for(predictor, card: dict, **settings) -> TestClient:
    return TestClient(create_app(lambda: Loaded(predictor, card), ServeSettings(**settings)))


def wait_ready(client: TestClient) -> None:
    for _ in range(600):   # bounded: 60 s
        if client.get("/ready").status_code == 200:
            return
        time.sleep(0.1)
    raise RuntimeError("model did not load")


@pytest.fixture(scope="module", params=["fast path", "route"])
def client(request, predictor, checkpoint):
    """The app over the real model: the guard's fast path, or (CORS on) the FastAPI route."""
    from sentiment_cli.card.facts import model_card

    cors = ["http://example.com"] if request.param == "route" else []
    with client_for(predictor, model_card(checkpoint), max_texts=8, max_wait_ms=20, cors_origins=cors) as c:
        wait_ready(c)
        yield c


def test_predict_answers_label_sets_equal_to_the_predictors(client, predictor):
    r = client.post("/v1/predict", json={"texts": TEXTS})
    assert r.status_code == 200, r.text
    got = r.json()["predictions"]
    expected = [p.to_dict() for p in predictor.predict(TEXTS)]
    assert len(got) == len(TEXTS)
    for g, e, text in zip(got, expected, TEXTS):
        assert set(g) == {"text", "labels", "probabilities"}   # the multi-label shape, nothing of the single-label one
        assert g["text"] == text
        assert g["labels"] == e["labels"]
        assert list(g["probabilities"]) == list(predictor.labels)
        assert g["probabilities"] == pytest.approx(e["probabilities"], abs=1e-9)
        assert all(0.0 <= v <= 1.0 for v in g["probabilities"].values())
        probs = [g["probabilities"][name] for name in g["labels"]]
        assert probs == sorted(probs, reverse=True)   # most probable first
    if predictor.decision.min_labels == 1:
        assert all(g["labels"] for g in got)


def test_explain_answers_one_explanation_per_predicted_label(client, predictor):
    r = client.post("/v1/predict", json={"texts": TEXTS[:3], "explain": True})
    assert r.status_code == 200, r.text
    got = r.json()["predictions"]
    expected = [e.to_dict() for e in predictor.explain(TEXTS[:3])]
    logits = predictor.logits(TEXTS[:3])
    for g, e, row in zip(got, expected, logits):
        assert set(g) == {"text", "labels", "probabilities", "explanations"}
        assert g["labels"] == e["labels"] and [x["label"] for x in g["explanations"]] == g["labels"]
        for x, y in zip(g["explanations"], e["explanations"]):
            assert set(x) == {"label", "probability", "tokens", "scores", "bias"}
            assert x["tokens"] == y["tokens"] and x["scores"] == pytest.approx(y["scores"], abs=1e-6)
            # exact: the scores and the bias add up to the label's own logit
            j = predictor.labels.index(x["label"])
            assert sum(x["scores"]) + x["bias"] == pytest.approx(float(row[j]), abs=1e-4)


def test_concurrent_requests_share_batches_and_get_their_own_label_sets(predictor, checkpoint):
    from concurrent.futures import ThreadPoolExecutor

    expected = {t: p.to_dict()["labels"] for t, p in zip(TEXTS, predictor.predict(TEXTS))}
    jobs = [[TEXTS[i % len(TEXTS)], TEXTS[(i + 2) % len(TEXTS)]][: 1 + i % 2] for i in range(10)]
    with client_for(predictor, {}, max_wait_ms=50) as c:
        wait_ready(c)
        with ThreadPoolExecutor(len(jobs)) as pool:
            answers = list(pool.map(lambda texts: c.post("/v1/predict", json={"texts": texts}), jobs))
        exposition = c.get("/metrics").text
    assert metric(exposition, "sentiment_batch_reviews_sum") == sum(map(len, jobs))
    assert metric(exposition, "sentiment_batch_reviews_count") < len(jobs)   # requests were merged
    for texts, r in zip(jobs, answers):
        assert r.status_code == 200, r.text
        assert [p["text"] for p in r.json()["predictions"]] == texts
        assert [p["labels"] for p in r.json()["predictions"]] == [expected[t] for t in texts]


def test_info_says_multi_label_and_the_thresholds(client, predictor):
    info = client.get("/v1/info").json()
    assert info["multi_label"] is True
    assert info["labels"] == list(predictor.labels)
    decision = info["decision"]
    assert decision["min_labels"] == predictor.decision.min_labels
    assert list(decision["thresholds"]) == list(predictor.labels)
    assert list(decision["thresholds"].values()) == pytest.approx(list(predictor.decision.thresholds))
    assert list(decision["temperatures"].values()) == pytest.approx(list(predictor.decision.temperatures))


@pytest.mark.parametrize("body, status", [
    ({"texts": []}, 422), ({"texts": [""]}, 422), ({"texts": ["ok", 3]}, 422),
    ({"texts": ["ok"], "explain": "yes"}, 422), ({"text": ["ok"]}, 422), ({"texts": ["x"] * 9}, 413),
])
def test_bad_requests_are_4xx_and_the_server_stays_up(client, body, status):
    r = client.post("/v1/predict", json=body)
    assert r.status_code == status, r.text
    assert set(r.json()) == {"error"}
    assert client.post("/v1/predict", json={"texts": ["still here"]}).status_code == 200


def test_malformed_json_is_422(client):
    r = client.post("/v1/predict", content=b'{"texts": ["a", ', headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and "malformed JSON" in r.json()["error"]


def test_openapi_documents_both_shapes(client):
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    assert {"PredictionOut", "LabelSetOut", "LabelExplanationOut"} <= set(schemas)
    assert set(schemas["LabelSetOut"]["required"]) == {"text", "labels", "probabilities"}
