"""``sentiment suggest`` (``sentiment_cli/suggest/``): what it picks, what it leaves out, its CSV, its errors."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from sentiment_cli.suggest import diverse, exclusions, run
from sentiment_cli.suggest import uncertainty as measures
from sentiment_cli.cli import app
from sentiment_cli.errors import UsageError
from sentiment_cli.inference.probabilities import softmax
from sentiment_cli.inference.predictor import Predictor

from .conftest import SMALL_DATA

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def predictor(trained_checkpoint):
    return Predictor(trained_checkpoint)


@pytest.fixture(scope="module")
def reviews():
    """The 500 test reviews of the committed slice, as unlabelled texts."""
    import pyarrow.parquet as pq

    table = pq.read_table(next((SMALL_DATA / "plain_text").glob("test-*.parquet")))
    return table.column("text").to_pylist(), table.column("label").to_pylist()


def test_uncertainty_picks_have_the_smallest_margins(predictor, reviews):
    texts = reviews[0][:300]
    result = run.suggest(predictor, texts, 20)
    assert len(result.picks) == 20 and result.scored == 300
    margins = measures.margins(softmax(predictor.logits(texts), predictor.temperature))
    picked = {p.index for p in result.picks}
    rest = np.array([m for i, m in enumerate(margins) if i not in picked])
    assert max(p.margin for p in result.picks) <= rest.min() + 1e-6
    assert [p.rank for p in result.picks] == list(range(1, 21))
    assert all(a.uncertainty >= b.uncertainty for a, b in zip(result.picks, result.picks[1:]))
    assert all(abs(p.margin - margins[p.index]) < 1e-5 for p in result.picks)


def test_entropy_orders_by_entropy(predictor, reviews):
    result = run.suggest(predictor, reviews[0][:200], 10, measure="entropy")
    picked = {p.index for p in result.picks}
    entropies = measures.entropies(softmax(predictor.logits(reviews[0][:200]), predictor.temperature))
    assert min(p.entropy for p in result.picks) >= max(e for i, e in enumerate(entropies) if i not in picked) - 1e-6


def test_margin_and_entropy_formulas():
    p = np.array([[0.5, 0.5], [0.9, 0.1], [1.0, 0.0], [0.2, 0.3, 0.5][:2] + [0.5]][:3])
    assert np.allclose(measures.margins(p), [0.0, 0.8, 1.0])
    assert np.allclose(measures.entropies(p), [1.0, -(0.9 * np.log(0.9) + 0.1 * np.log(0.1)) / np.log(2), 0.0], atol=1e-6)
    three = np.array([[1 / 3, 1 / 3, 1 / 3], [0.6, 0.3, 0.1]])
    assert np.allclose(measures.margins(three), [0.0, 0.3]) and np.isclose(measures.entropies(three)[0], 1.0)
    assert np.allclose(measures.uncertainty(p, "margin"), 1 - measures.margins(p))


class _FakeBackend:
    """Logits and pooled states chosen per text: a constructed pool whose geometry the test knows."""

    def __init__(self, real, logits_of: dict, states_of: dict):
        self.tokenizer, self.batch_size, self.config = real.tokenizer, real.batch_size, real.config
        self.labels, self.temperature = real.labels, real.temperature
        self.decision = real.decision   # None: single-label (a multi-label backend's rule otherwise)
        self.logits_of, self.states_of = logits_of, states_of

    def forward(self, rows, token_logits=False):
        return np.array([self.logits_of[tuple(r)] for r in rows], np.float32), None, None


@pytest.mark.parametrize("space", ["encoder", "ngram"])
def test_diverse_covers_more_groups_than_uncertainty(predictor, monkeypatch, space):
    """Five groups of texts; the 40 most uncertain all lie in group 0. Uncertainty takes 5 from group 0; diverse,
    clustering the 150 most uncertain over encoder states that separate the groups (constructed), or over their
    n-grams (each group has words of its own), takes from more than one."""
    from sentiment_cli.data.tokenizer import encode_texts

    words = ["movie film plot", "actor role cast", "music score song", "camera shot scene", "ending story twist"]
    common = ("the a was is and but very not so it this that one good bad great long short funny dull old new "
              "real big little best worst all some most much more").split()
    rng = np.random.default_rng(0)
    texts, group, margin = [], [], []
    for g, w in enumerate(words):
        for i in range(40):
            texts.append(f"{w} " + " ".join(rng.choice(common, 8)))
            group.append(g)
            margin.append(rng.uniform(0.0, 0.05) if g == 0 else rng.uniform(0.1, 0.9))
    ids = encode_texts(predictor.backend.tokenizer, texts, predictor.config.data)
    logits_of = {tuple(r): [0.0, float(np.log((1 + m) / (1 - m)))] for r, m in zip(ids, margin)}
    assert len(logits_of) == len(texts)
    fake = _FakeBackend(predictor.backend, logits_of, {})
    monkeypatch.setattr(predictor, "backend", fake)
    centres = np.eye(5) * 3
    states = {t: centres[g] + rng.normal(0, 0.1, 5) for t, g in zip(texts, group)}
    monkeypatch.setattr(diverse, "pooled_states", lambda _p, ts: np.array([states[t] for t in ts]))
    unc = run.suggest(predictor, texts, 5, "uncertainty")
    div = run.suggest(predictor, texts, 5, "diverse", space=space)
    groups = {s: {group[p.index] for p in r.picks} for s, r in (("uncertainty", unc), ("diverse", div))}
    assert groups["uncertainty"] == {0}
    assert len(groups["diverse"]) > 1 and len(div.picks) == 5 and div.clusters == 5
    assert len({p.cluster for p in div.picks}) == 5


def test_diverse_on_the_real_model(predictor, reviews):
    result = run.suggest(predictor, reviews[0][:300], 10, "diverse")
    assert len(result.picks) == 10 and len({p.index for p in result.picks}) == 10 and result.clusters == 10
    assert all(p.cluster is not None for p in result.picks)
    states = diverse.pooled_states(predictor, reviews[0][:3])
    assert states.shape == (3, predictor.config.model.d_model)


def test_duplicates_and_near_duplicates_are_left_out(predictor, reviews):
    base = reviews[0][:40]
    long = base[0]
    pool = [*base, base[1].upper(), base[1] + " !!", " ".join(base[2].split()),   # same after normalising
            long.replace(long.split()[5], "banana", 1)]                            # one word changed: near
    result = run.suggest(predictor, pool, len(pool), known=[base[3]])
    indices = [p.index for p in result.picks]
    assert result.left_out.get("duplicate", 0) == 4      # three variants, and the known text
    assert result.left_out.get("near-duplicate", 0) >= 1
    texts = {exclusions.normalise(p.text) for p in result.picks}
    assert len(texts) == len(indices)
    assert not ({0, len(base) + 3} <= set(indices))    # never both of the near-duplicate pair
    assert 3 not in indices


def test_noise_like_texts_are_left_out(predictor, reviews):
    noise = ["12345 678 910", "wow", "qzxv wqpz kkkj", "%%% $$$ ### 1 2 3 a", "   "]
    result = run.suggest(predictor, [*noise, *reviews[0][:10]], 15)
    assert result.left_out == {"not text": 2, "too short": 1, "unknown words only": 1, "empty": 1}
    assert {p.index for p in result.picks} == set(range(5, 15)) and result.scored == 10
    assert exclusions.noise_reason("a fine film", [5, 6, 7]) is None


def test_library_refuses_bad_arguments(predictor):
    with pytest.raises(UsageError, match="at least 1"):
        run.suggest(predictor, ["a fine film"], 0)
    with pytest.raises(UsageError, match="unknown strategy"):
        run.suggest(predictor, ["a fine film"], 1, "clever")


def test_csv_round_trips_into_train(trained_checkpoint, reviews, tmp_path):
    texts, labels = reviews
    pool = tmp_path / "pool.csv"
    with open(pool, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["review"])
        w.writerows([t] for t in texts[:200])
    out = tmp_path / "suggest.csv"
    r = invoke("suggest", "--checkpoint", trained_checkpoint, "--unlabelled", pool, "-n", 60, "-o", out)
    assert r.exit_code == 0, r.output
    assert "60 texts to label next" in r.stdout and f"wrote {out}" in r.stdout.replace("\n", "")
    with open(out, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 60 and list(rows[0])[:3] == ["text", "label", "rank"] and all(x["label"] == "" for x in rows)
    truth = dict(zip(texts, labels))
    names = ("negative", "positive")
    for row in rows:          # the user fills the label column in
        row["label"] = names[truth[row["text"]]]
    filled = tmp_path / "filled.csv"
    with open(filled, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    r = invoke("train", "--config", "seed", "--epochs", 1, "--data", filled, "-o", tmp_path / "model", "--json")
    assert r.exit_code == 0, r.output
    metrics = json.loads(r.stdout[r.stdout.index("{"):r.stdout.rindex("}") + 1])
    assert metrics["data"]["train_examples"] + metrics["data"]["validation_examples"] == 60


def test_json_output_and_the_existing_file(trained_checkpoint, reviews, tmp_path):
    pool = tmp_path / "pool.txt"
    pool.write_text("\n".join(" ".join(t.split()) for t in reviews[0][:50]) + "\n")
    out = tmp_path / "s.csv"
    r = invoke("suggest", "--checkpoint", trained_checkpoint, "--unlabelled", pool, "-n", 5, "--strategy",
               "diverse", "-o", out, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["strategy"] == "diverse" and len(d["picks"]) == 5 and d["read"] == 50 and d["output"] == str(out)
    assert set(d["picks"][0]) >= {"rank", "index", "text", "uncertainty", "margin", "predicted", "probabilities"}
    before = out.read_bytes()
    r = invoke("suggest", "--checkpoint", trained_checkpoint, "--unlabelled", pool, "-o", out)
    assert r.exit_code == 2 and "--force" in r.stderr and out.read_bytes() == before
    r = invoke("suggest", "--checkpoint", trained_checkpoint, "--unlabelled", pool, "-n", 3, "-o", out, "--force")
    assert r.exit_code == 0 and len(out.read_text().splitlines()) == 4


@pytest.mark.parametrize("case, code, message", [
    ("no checkpoint", 1, "no trained model"),
    ("no unlabelled file", 1, "no such file"),
    ("empty unlabelled file", 1, "no text"),
    ("n is 0", 2, "-n"),
    ("output is a folder", 2, "is a folder"),
    ("unknown strategy", 2, "strategy"),
])
def test_bad_input_is_one_line_and_nonzero(trained_checkpoint, tmp_path, case, code, message):
    pool = tmp_path / "pool.txt"
    pool.write_text("a fine film with a good cast\n")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    base = ["suggest", "--checkpoint", trained_checkpoint, "--unlabelled", pool, "-o", tmp_path / "s.csv"]
    args = {"no checkpoint": ["suggest", "--checkpoint", tmp_path / "nope", "--unlabelled", pool],
            "no unlabelled file": [*base[:4], tmp_path / "missing.txt"],
            "empty unlabelled file": [*base[:4], empty],
            "n is 0": [*base, "-n", 0],
            "output is a folder": [*base[:6], tmp_path],
            "unknown strategy": [*base, "--strategy", "clever"]}[case]
    r = invoke(*args)
    assert r.exit_code == code, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], r.stderr
    assert "Traceback" not in r.output


def test_labelled_texts_and_their_near_duplicates_are_left_out(trained_checkpoint, reviews, tmp_path):
    texts = [" ".join(t.split()) for t in reviews[0][:60]]
    pool = tmp_path / "pool.txt"
    pool.write_text("\n".join(texts) + "\n")
    labelled = tmp_path / "labelled.csv"
    with open(labelled, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["text", "label"])
        w.writerows([t, "positive"] for t in texts[:20])
    r = invoke("suggest", "--checkpoint", trained_checkpoint, "--unlabelled", pool, "--labelled", labelled,
               "-n", 60, "-o", tmp_path / "s.csv", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["labelled"] == 20 and d["left_out"]["duplicate"] == 20
    assert all(p["index"] >= 20 for p in d["picks"]) and len(d["picks"]) == 40
    r = invoke("suggest", "--checkpoint", trained_checkpoint, "--unlabelled", pool, "--labelled", tmp_path / "no.csv",
               "-o", tmp_path / "t.csv")
    assert r.exit_code == 1 and r.stderr.startswith("error: --labelled ") and len(r.stderr.splitlines()) == 1


def test_diverse_over_ngrams_spreads_picks(predictor, reviews):
    texts = reviews[0][:300]
    result = run.suggest(predictor, texts, 10, "diverse", space="ngram")
    assert len(result.picks) == 10 and result.clusters == 10 and len({p.cluster for p in result.picks}) == 10
    with pytest.raises(UsageError, match="unknown space"):
        run.suggest(predictor, texts, 10, "diverse", space="pixels")


@pytest.mark.parametrize("strategy", ["uncertainty", "diverse"])
def test_a_pool_of_noise_gives_no_picks(predictor, strategy):
    result = run.suggest(predictor, ["1 2 3", "ok", "%%% ###"], 5, strategy)
    assert result.picks == [] and result.scored == 0 and sum(result.left_out.values()) == 3


def test_help_keeps_its_paragraphs():
    import inspect

    callback = next(c.callback for c in app.registered_commands if c.callback.__name__ == "suggest")
    r = runner.invoke(app, ["suggest", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "(, " not in r.output
    lines = [" ".join(line.split()) for line in r.output.splitlines()]
    for paragraph in inspect.cleandoc(callback.__doc__).split("\n\n"):
        assert " ".join(paragraph.split()) in lines, paragraph


def test_bench_goals_compare_means_round_by_round():
    from bench.active import goals, summary

    def curve(accs):
        return [{"labels": 100 * (i + 1), "test_accuracy": a} for i, a in enumerate(accs)]

    runs = {"s": {"0": {"random": curve([0.5, 0.6, 0.7]), "uncertainty": curve([0.5, 0.55, 0.75])},
                  "1": {"random": curve([0.5, 0.6, 0.7]), "uncertainty": curve([0.5, 0.75, 0.75])}}}
    table = summary({"runs": runs, "strategies": ["random", "uncertainty"]})
    assert table["s"]["uncertainty"]["mean"] == pytest.approx([0.5, 0.65, 0.75])
    assert table["s"]["uncertainty"]["min"] == pytest.approx([0.5, 0.55, 0.75])
    g = goals(table)["s"]["uncertainty"]
    assert g["rounds_not_worse"] == 2 and g["rounds"] == 2 and g["labels_to_reach_random_final"] == 300
    runs["s"]["0"]["uncertainty"][1]["test_accuracy"] = 0.3      # mean 0.525 < 0.6 at 200 labels
    assert goals(summary({"runs": runs, "strategies": ["random", "uncertainty"]}))["s"]["uncertainty"][
        "rounds_not_worse"] == 1


def test_bench_goals_skip_a_run_without_random():
    from bench.active import goals, summary

    runs = {"s": {"0": {"diverse": [{"labels": 100, "test_accuracy": 0.5}, {"labels": 200, "test_accuracy": 0.6}]}}}
    table = summary({"runs": runs, "strategies": ["diverse"]})
    assert goals(table) == {}
