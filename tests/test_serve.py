"""`sentiment serve`: the API against the CLI, micro-batching, limits, bad requests, auth, metrics, graceful stop."""

from __future__ import annotations

import json
import math
import re
import signal
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

pytest.importorskip("fastapi", reason="the serve extra is part of the test extra; install .[test]")

from sentiment_cli.serving.app import create_app  # noqa: E402
from sentiment_cli.serving.settings import Loaded, ServeSettings  # noqa: E402

from .conftest import PYTHON, ROOT, SMALL_DATA, SUBPROCESS_ENV  # noqa: E402
from .serving import FakePredictor, ServerThread, metric, start_cli_server  # noqa: E402

pytestmark = pytest.mark.slow   # starts servers (uvicorn in a thread or a `sentiment serve` process)


@pytest.fixture(scope="module")
def reviews():
    from sentiment_cli.data.splits import load_split

    texts = load_split(str(SMALL_DATA), "test", 0.0, 0).texts
    return [t for t in texts[:200]]


@pytest.fixture(scope="module")
def predictor(trained_checkpoint):
    from sentiment_cli.inference.predictor import Predictor

    return Predictor(trained_checkpoint)


@pytest.fixture(scope="module")
def server(trained_checkpoint, predictor):
    """The real model behind a real server; batches wait up to 30 ms so concurrent requests share them."""
    from sentiment_cli.card.facts import model_card

    app = create_app(lambda: Loaded(predictor, model_card(trained_checkpoint)),
                     ServeSettings(max_batch_size=32, max_wait_ms=30, max_texts=40, max_body_bytes=3 * 2**20,
                                   read_timeout=1.0))
    with ServerThread(app) as s:
        s.wait_ready()
        yield s


def read_response(sock, timeout: float = 30) -> bytes:
    """One whole HTTP response from a raw socket (headers and a Content-Length body)."""
    sock.settimeout(timeout)
    data = b""
    while True:
        head, sep, rest = data.partition(b"\r\n\r\n")
        if sep:
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            if len(rest) >= length:
                return data
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def post(url, body, **kw):
    return httpx.post(url + "/v1/predict", json=body, timeout=60, **kw)


# ----------------------------------------------------------------------------- the same answers as the CLI

def test_predict_gives_what_predict_json_gives(server, trained_checkpoint, reviews):
    texts = reviews[:6] + ["A moving, beautifully acted film.", "Ünïcödé ✓ — fine 👍"]
    for explain in (False, True):
        cli = subprocess.run([PYTHON, "-m", "sentiment_cli", "predict", "--json", "--checkpoint",
                              str(trained_checkpoint), *(["--explain"] if explain else []), *texts],
                             cwd=ROOT, env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=300)
        assert cli.returncode == 0, cli.stderr
        expected = [json.loads(line) for line in cli.stdout.splitlines()]
        r = post(server.url, {"texts": texts, "explain": explain})
        assert r.status_code == 200, r.text
        got = r.json()["predictions"]
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert set(g) == set(e)                        # exactly the same keys
            assert g["text"] == e["text"] and g["label"] == e["label"]
            assert g["probability"] == pytest.approx(e["probability"], abs=1e-6)
            for name in e["probabilities"]:
                assert g["probabilities"][name] == pytest.approx(e["probabilities"][name], abs=1e-6)
            if explain:
                assert g["tokens"] == e["tokens"]
                assert g["scores"] == pytest.approx(e["scores"], abs=1e-5)


def test_concurrent_clients_share_batches_and_get_their_own_exact_results(server, predictor, reviews):
    """24 clients at once, 1-4 reviews each; each review's logit margin equals its margin scored alone."""
    before = httpx.get(server.url + "/metrics").text
    jobs = [reviews[i * 4: i * 4 + 1 + i % 4] for i in range(24)]
    start = threading.Barrier(len(jobs))

    def client(texts):
        start.wait()
        return post(server.url, {"texts": texts})

    with ThreadPoolExecutor(len(jobs)) as pool:
        responses = list(pool.map(client, jobs))
    after = httpx.get(server.url + "/metrics").text
    batches = metric(after, "sentiment_batch_reviews_count") - metric(before, "sentiment_batch_reviews_count")
    scored = metric(after, "sentiment_batch_reviews_sum") - metric(before, "sentiment_batch_reviews_sum")
    n = sum(map(len, jobs))
    assert scored == n
    assert batches < len(jobs)                 # requests were merged
    for texts, r in zip(jobs, responses):
        assert r.status_code == 200, r.text
        got = r.json()["predictions"]
        assert [p["text"] for p in got] == texts   # each client got its own reviews, in order
        for text, p in zip(texts, got):
            alone = predictor.logits([text])[0]   # (2,) scored on its own
            # the probabilities are softmax(logits / T): their log-odds is the logit margin over T
            margin = math.log(p["probabilities"]["positive"]) - math.log(p["probabilities"]["negative"])
            assert margin == pytest.approx(float(alone[1] - alone[0]) / predictor.temperature, abs=1e-5)


def test_health_answers_while_the_model_is_busy():
    gate = threading.Event()
    fake = FakePredictor(gate)
    with ServerThread(create_app(lambda: Loaded(fake, {"labels": fake.labels}))) as s:
        s.wait_ready()
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(post, s.url, {"texts": ["slow"]})
            assert fake.running.wait(10)
            assert httpx.get(s.url + "/health", timeout=5).status_code == 200   # the loop is free
            assert not pending.done()
            gate.set()
            assert pending.result().status_code == 200


def test_ready_is_503_until_the_model_is_loaded():
    release = threading.Event()

    def load():
        release.wait(30)
        return Loaded(FakePredictor(), {"name": "fake"})

    with ServerThread(create_app(load)) as s:
        assert httpx.get(s.url + "/health").status_code == 200
        r = httpx.get(s.url + "/ready")
        assert r.status_code == 503 and "loading" in r.json()["error"]
        assert post(s.url, {"texts": ["x"]}).status_code == 503
        release.set()
        s.wait_ready()
        assert post(s.url, {"texts": ["x"]}).status_code == 200
        assert httpx.get(s.url + "/v1/info").json() == {"name": "fake"}


def test_info_is_the_model_card(server, trained_checkpoint):
    from sentiment_cli.card.facts import model_card
    from sentiment_cli.serving.app import without_paths

    card = httpx.get(server.url + "/v1/info").json()
    # absolute paths cut to their last part (issue 26 row 12; --info-paths shows them: test_hostile_server.py)
    assert card == json.loads(json.dumps(without_paths(model_card(trained_checkpoint))))
    assert card["checkpoint"] == trained_checkpoint.name
    assert card["labels"] == ["negative", "positive"]


# ----------------------------------------------------------------------------- bad requests and limits

BAD = [
    (b'{"texts": ["a", ', 422, "malformed JSON"),
    (b"", 422, "empty request body"),
    (b"[1, 2]", 422, "expected a JSON object"),
    (b'{"texts": "one review"}', 422, "texts"),
    (b'{"texts": [1]}', 422, "texts[0]"),
    (b'{"texts": []}', 422, "texts"),
    (b'{"texts": ["ok", "  "]}', 422, "review 2 is empty"),
    (b'{"texts": ["ok"], "explain": "yes"}', 422, "explain"),
    (b'{"texts": ["ok"], "path": "/etc/passwd"}', 422, "path"),
    (b'{"texts": ["\\ud800"]}', 422, "not valid Unicode"),
    (b"\xff\xfe\xfa", 422, ""),
    (b"[" * 100_000, 422, "nested too deeply"),
    (json.dumps({"texts": ["x"] * 41}).encode(), 413, "limit is 40"),
]


@pytest.mark.parametrize("body,status,words", BAD, ids=[f"{i}-{s}" for i, (_, s, _) in enumerate(BAD)])
def test_bad_requests_get_a_4xx_error_object(server, body, status, words):
    r = httpx.post(server.url + "/v1/predict", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    assert words in r.json()["error"]
    assert r.headers["x-request-id"]


def test_the_server_never_answered_500_and_stays_up(server):
    for path, method in (("/nope", "GET"), ("/v1/predict", "DELETE"), ("/v1/predict", "GET")):
        r = httpx.request(method, server.url + path)
        assert 400 <= r.status_code < 500 and "error" in r.json()
    assert post(server.url, {"texts": ["still here"]}).status_code == 200
    text = httpx.get(server.url + "/metrics").text
    assert 'status="500"' not in text


def test_body_over_the_limit_is_413_with_or_without_content_length(server):
    big = json.dumps({"texts": ["word " * 700_000]}).encode()          # 3.5 MB > 3 MiB
    assert httpx.post(server.url + "/v1/predict", content=big).status_code == 413

    def chunks():   # no Content-Length: counted as it arrives
        for i in range(0, len(big), 65536):
            yield big[i:i + 65536]
    r = httpx.post(server.url + "/v1/predict", content=chunks())
    assert r.status_code == 413 and "limit" in r.json()["error"]
    assert post(server.url, {"texts": ["fine"]}).status_code == 200


def test_a_one_megabyte_review_is_answered(server, trained_checkpoint):
    from sentiment_cli.config import load_config  # noqa: F401  (the checkpoint's max_length below)

    review = ("a wonderful film with a terrible ending " * 30_000)[:1_000_000]
    r = post(server.url, {"texts": [review], "explain": True})
    assert r.status_code == 200, r.text
    p = r.json()["predictions"][0]
    cfg = json.loads((trained_checkpoint / "config.json").read_text())
    assert len(p["text"]) == 1_000_000 and len(p["tokens"]) == cfg["data"]["max_length"]


def test_a_slow_client_gets_408_and_holds_nothing(server):
    with socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1]))) as sock:
        sock.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"texts\": [")
        # meanwhile others are served
        assert post(server.url, {"texts": ["quick"]}).status_code == 200
        answer = read_response(sock).decode()
    assert answer.startswith("HTTP/1.1 408") and "not received within" in answer


def test_a_client_that_leaves_costs_no_model_time():
    gate = threading.Event()
    fake = FakePredictor(gate)
    with ServerThread(create_app(lambda: Loaded(fake, {}), ServeSettings(max_wait_ms=0))) as s:
        s.wait_ready()
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(post, s.url, {"texts": ["first"]})
            assert fake.running.wait(10)               # the model is busy with "first"
            body = json.dumps({"texts": ["left early"]}).encode()
            with socket.create_connection(("127.0.0.1", int(s.url.rsplit(":", 1)[1]))) as sock:
                sock.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                time.sleep(0.3)                        # queued behind "first"
            time.sleep(0.3)                            # the server notices the closed connection
            gate.set()
            assert first.result().status_code == 200
        assert post(s.url, {"texts": ["after"]}).status_code == 200
        seen = [t for batch in fake.batches for t in batch]
        assert "left early" not in seen and seen == ["first", "after"]
        assert metric(httpx.get(s.url + "/metrics").text, "sentiment_client_disconnects_total") >= 1


def test_a_fault_is_a_500_logged_with_its_request_id(caplog):
    fake = FakePredictor(fail_on="boom")
    with ServerThread(create_app(lambda: Loaded(fake, {}))) as s:
        s.wait_ready()
        with caplog.at_level("ERROR", logger="sentiment.serve"):
            r = post(s.url, {"texts": ["boom"]})
        assert r.status_code == 500
        rid = r.headers["x-request-id"]
        assert rid in r.json()["error"]
        assert any(rid in rec.getMessage() and rec.exc_info for rec in caplog.records)
        assert post(s.url, {"texts": ["fine"]}).status_code == 200


# ----------------------------------------------------------------------------- safe by default

def test_api_key_is_required_when_configured():
    with ServerThread(create_app(lambda: Loaded(FakePredictor(), {"name": "x"}),
                                 ServeSettings(api_key="s3cret-key"))) as s:
        s.wait_ready()
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic czNjcmV0LWtleQ=="},
                        {"Authorization": "Bearer s3cret-key2"}):
            for r in (post(s.url, {"texts": ["x"]}, headers=headers), httpx.get(s.url + "/v1/info", headers=headers),
                      httpx.get(s.url + "/metrics", headers=headers)):
                assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
                assert "API key" in r.json()["error"]
        good = {"Authorization": "Bearer s3cret-key"}
        assert post(s.url, {"texts": ["x"]}, headers=good).status_code == 200
        assert httpx.get(s.url + "/v1/info", headers=good).json() == {"name": "x"}
        assert httpx.get(s.url + "/metrics", headers=good).status_code == 200
        assert httpx.get(s.url + "/health").status_code == 200     # probes need no key
        assert httpx.get(s.url + "/ready").status_code == 200


def test_cors_is_off_unless_asked_for():
    preflight = {"Origin": "https://elsewhere.example", "Access-Control-Request-Method": "POST"}
    with ServerThread(create_app(lambda: Loaded(FakePredictor(), {}))) as s:
        r = httpx.options(s.url + "/v1/predict", headers=preflight)
        assert "access-control-allow-origin" not in r.headers
        r = httpx.get(s.url + "/health", headers={"Origin": "https://elsewhere.example"})
        assert "access-control-allow-origin" not in r.headers
    with ServerThread(create_app(lambda: Loaded(FakePredictor(), {}),
                                 ServeSettings(cors_origins=["https://elsewhere.example"]))) as s:
        r = httpx.options(s.url + "/v1/predict", headers=preflight)
        assert r.headers["access-control-allow-origin"] == "https://elsewhere.example"


def test_metrics_and_docs(server):
    post(server.url, {"texts": ["counted"]})
    text = httpx.get(server.url + "/metrics").text
    assert metric(text, "sentiment_requests_total", route="/v1/predict", status="200") >= 1
    assert metric(text, "sentiment_request_seconds_count", route="/v1/predict") >= 1
    assert metric(text, "sentiment_batch_reviews_count") >= 1
    assert httpx.get(server.url + "/docs").status_code == 200
    schema = httpx.get(server.url + "/openapi.json").json()
    body = schema["paths"]["/v1/predict"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert set(body["properties"]) == {"texts", "explain"}


def test_the_page_is_one_self_contained_file(server):
    r = httpx.get(server.url + "/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    html = r.text
    assert "<script" in html and "/v1/predict" in html
    assert not re.search(r"https?://|//cdn|@import|<script[^>]+src=|<link[^>]+href=", html, re.I)   # nothing fetched elsewhere


# ----------------------------------------------------------------------------- the command

@pytest.mark.parametrize("sig,host", [(signal.SIGTERM, "127.0.0.1"), (signal.SIGINT, "0.0.0.0")])
def test_a_signal_finishes_the_request_in_flight_then_exits_0(trained_checkpoint, sig, host):
    proc, url = start_cli_server("--checkpoint", str(trained_checkpoint), "--host", host)
    try:
        assert ("warning: listening on 0.0.0.0" in proc.banner) == (host == "0.0.0.0")
        port = int(url.rsplit(":", 1)[1])
        body = json.dumps({"texts": ["A moving, beautifully acted film."]}).encode()
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
                         + body[:10])                     # in flight: half of the body sent
            time.sleep(0.5)
            proc.send_signal(sig)
            time.sleep(1.0)
            with pytest.raises(OSError):                  # no longer accepting
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
            sock.sendall(body[10:])
            answer = read_response(sock)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["predictions"][0]["label"] in ("negative", "positive")
        assert proc.wait(30) == 0
    finally:
        proc.kill()


def test_serve_without_the_extra_names_the_install_command(tmp_path):
    blocked = tmp_path / "fastapi"
    blocked.mkdir()
    (blocked / "__init__.py").write_text("raise ImportError('blocked for the test', name='fastapi')\n")
    env = {**SUBPROCESS_ENV, "PYTHONPATH": f"{tmp_path}:{SUBPROCESS_ENV['PYTHONPATH']}"}
    r = subprocess.run([PYTHON, "-m", "sentiment_cli", "serve"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        'error: sentiment serve needs the serve extra (fastapi is missing): pip install "sentiment-cli[serve]"']


def test_serve_refuses_a_missing_key_variable_and_a_missing_checkpoint(tmp_path):
    env = {k: v for k, v in SUBPROCESS_ENV.items() if k != "NO_SUCH_KEY_VAR"}
    r = subprocess.run([PYTHON, "-m", "sentiment_cli", "serve", "--api-key-env", "NO_SUCH_KEY_VAR", "--port", "0"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.startswith("error: --api-key-env NO_SUCH_KEY_VAR")
    r = subprocess.run([PYTHON, "-m", "sentiment_cli", "serve", "--checkpoint", str(tmp_path), "--port", "0"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        f"error: no trained model at {tmp_path}; run `sentiment train` first"]
