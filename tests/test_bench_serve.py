"""bench.serve: its yardstick is `predict --file --json`'s own output, rounds are summarised by their medians
(the ratio is the median of each round's ratio), and the baseline's process answers one line per pass."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench.serve import Baseline, cli_pass, summarise, table
from sentiment_cli.cli import app


def test_the_baseline_writes_what_predict_file_json_prints(trained_checkpoint, tmp_path):
    from sentiment_cli.inference.predictor import Predictor

    reviews = ["A moving, beautifully acted film.", "Dull and far too long.", "Not bad at all!"] * 5
    f = tmp_path / "reviews.txt"
    f.write_text("\n".join(reviews) + "\n", encoding="utf-8")
    cli = CliRunner().invoke(app, ["predict", "--file", str(f), "--checkpoint", str(trained_checkpoint), "--json"])
    assert cli.exit_code == 0, cli.output
    out = io.StringIO()
    cli_pass(Predictor(trained_checkpoint), reviews, out)
    assert out.getvalue() == cli.stdout
    assert [json.loads(line)["text"] for line in out.getvalue().splitlines()] == reviews


def _round(rps: float, base: dict[int, float], p99: float = 40.0) -> dict:
    runs = [{"reviews_per_second": v, "cpu_ms": 0.8, "threads": n} for n, v in base.items()]
    best = max(base.values())
    return {"requests_per_second": rps, "p50_ms": 20.0, "p99_ms": p99, "errors": 0, "requests": 1000,
            "client_cpu_ms": 0.05, "server_cpu_ms": 1.0, "in_process": runs, "in_process_reviews_per_second": best,
            "ratio": rps / best, "others_cores": 0.1}


def test_rounds_are_summarised_by_medians_and_the_ratio_is_the_median_of_the_rounds_ratios():
    rounds = [_round(1000, {2: 2000, 1: 1200}), _round(900, {2: 1000, 1: 1200}), _round(1300, {2: 1625, 1: 1300})]
    row = summarise("median", 172, 32, rounds)
    assert row["quiet_ratio"] == 0.75                        # every round had the machine to itself (0.1 cores)
    rounds[1]["others_cores"] = 0.9                          # a busy round is left out of the quiet median
    assert summarise("median", 172, 32, rounds)["quiet_ratio"] == pytest.approx(0.65)
    rounds[1]["others_cores"] = 0.1
    assert row["requests_per_second"] == 1000
    assert row["in_process_reviews_per_second"] == 1625      # each round's faster baseline, then the median
    assert row["ratio"] == 0.75                              # rounds' ratios 0.5, 0.75, 0.8: not 1000 / 1625
    assert row["in_process"][2]["reviews_per_second"] == 1625 and row["in_process"][1]["reviews_per_second"] == 1200
    assert row["requests"] == 3000 and row["errors"] == 0
    text = table({"rows": [row], "rss_mib": {"one review per request": 500.0}, "load_average": [1, 1, 1, 2, 2, 2],
                  "backend": "torch", "checkpoint": "ckpt", "cpus": 2, "repeats": 3})
    assert "| median (172 words) | 32 | 1,000 |" in text and "| 1,625 | 0.75x |" in text
    assert "ratios 0.50, 0.75, 0.80 (other processes meanwhile: 0.10, 0.10, 0.10 cores; median of the rounds " \
           "under 0.3 cores: 0.75x)" in text
    assert "medians of 3 interleaved rounds" in text


def test_the_baseline_process_times_one_pass_per_line(trained_checkpoint, tmp_path):
    review = tmp_path / "review.txt"
    review.write_text("A moving, beautifully acted film that I would gladly watch again.", encoding="utf-8")
    base = Baseline(Path(trained_checkpoint), False, 64)
    try:
        default, one = base.run(0, review), base.run(1, review)
    finally:
        base.close()
    assert default["reviews_per_second"] > 0 and one["reviews_per_second"] > 0
    assert one["threads"] == 1 and default["threads"] >= 1
    assert base.proc.returncode == 0
