"""``sentiment check``: the suite format, templates, perturbations, the judging of MFT / INV / DIR cases, the
built-in suite, the CLI, and negation-scope marks (``data/negation.py``) in the ids and the model."""

from __future__ import annotations

import csv
import json
import random

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from sentiment_cli.behaviour.cases import test_cases as cases_of
from sentiment_cli.behaviour.check import LabelMismatch, resolve_labels, run_check, summary
from sentiment_cli.behaviour.perturb import contraction, number, punctuation, swap, typo
from sentiment_cli.behaviour.suite import SuiteError, builtin_suite, parse_suite
from sentiment_cli.behaviour.templates import article, fill
from sentiment_cli.cli import app
from sentiment_cli.data.negation import SCOPE_OFFSET, mark_scope, role_of

from .conftest import ROOT

runner = CliRunner()
LABELS = ("negative", "positive")

SUITE = """
name = "toy"
labels = ["negative", "positive"]
[lexicons]
good = ["good", "great"]
thing = ["film", "book", "meal"]
name = ["Anna", "Omar", "Mei"]
bad_phrase = ["I hated it."]
[[test]]
name = "plain"
capability = "vocabulary"
type = "MFT"
expect = "positive"
dev = ["The {thing} was {good}."]
test = ["What {a:good} {thing}."]
[[test]]
name = "negated"
capability = "negation"
type = "MFT"
expect = "negative"
templates = ["The {thing} was not {good}."]
[[test]]
name = "names"
capability = "named entities"
type = "INV"
perturb = "swap"
lexicon = "name"
templates = ["{name} said the {thing} was {good}."]
[[test]]
name = "add bad"
capability = "vocabulary"
type = "DIR"
perturb = "append"
lexicon = "bad_phrase"
label = "positive"
direction = "down"
tolerance = 0.1
templates = ["The {thing} was {good}."]
"""


def word_scorer(texts: list[str]) -> np.ndarray:
    """A stand-in model: positive when it sees "good" or "great", blind to "not"; "hated" adds 0.3 to p(positive)
    (a DIR failure); "Omar" flips it (an INV failure)."""
    out = []
    for t in texts:
        p = 0.9 if ("good" in t or "great" in t) else 0.2
        p = min(p + 0.05, 1.0) if "hated" in t else p
        p = 1 - p if "Omar" in t else p
        out.append([1 - p, p])
    return np.array(out)


def toy():
    return parse_suite(SUITE, "toy.toml")


# ----------------------------------------------------------------------------- templates and perturbations

def test_fill_is_seeded_distinct_and_bounded():
    lex = {"a": [str(i) for i in range(30)], "b": ["x", "y"]}
    one = fill("{a} {b} {a1}", {**lex}, 10, random.Random(1))
    assert one == fill("{a} {b} {a1}", {**lex}, 10, random.Random(1))
    assert len(one) == 10 and len(set(one)) == 10
    assert all(s.split()[0] != s.split()[2] for s in one)   # {a} and {a1}: distinct entries of one lexicon
    assert sorted(fill("{b}", lex, 10, random.Random(0))) == ["X", "Y"]   # all fills, capitalised at the start
    assert article("apple") == "an" and article("film") == "a" and article("useful") == "a"


def test_perturbations_change_what_they_say():
    rng = random.Random(0)
    assert contraction("It is not good.", rng, 3) == ["It isn't good."]
    assert contraction("It isn't good.", rng, 3) == ["It is not good."]
    assert punctuation("Great film.", rng, 3) == ["Great film", "Great film!"]
    assert all(t != "I saw it 3 times." and t.startswith("I saw it ") for t in number("I saw it 3 times.", rng, 3))
    assert number("No digits here.", rng, 3) == []
    swapped = swap("Anna loved it, said anna.", rng, 2, ["Anna", "Omar", "Mei"])
    assert len(swapped) == 2 and all("Anna" not in s and "anna" not in s for s in swapped)
    for t in typo("Wonderful acting", rng, 3):
        assert t != "Wonderful acting" and sorted(t) == sorted("Wonderful acting")


# ----------------------------------------------------------------------------- the format

@pytest.mark.parametrize("change, message", [
    (("type = \"MFT\"\nexpect = \"negative\"\ntemplates = [\"The {thing} was not {good}.\"]",
      "type = \"XYZ\"\ntemplates = [\"The {thing} was not {good}.\"]"), "type must be one of MFT, INV, DIR"),
    (("templates = [\"The {thing} was not {good}.\"]", "templates = [\"The {thing} was not {nice}.\"]"),
     "names no lexicon 'nice'"),
    (("lexicon = \"name\"", "lexicon = \"nobody\""), "needs lexicon ="),
    (("tolerance = 0.1", "tolerance = 2"), "tolerance must be a probability"),
    (("name = \"negated\"", "name = \"plain\""), "two tests are named 'plain'"),
    (("expect = \"negative\"\ntemplates", "templates"), "MFT tests need expect"),
    (("[lexicons]", "[lexicons]\nempty = []"), "lexicon 'empty' is empty"),
    (("name = \"toy\"", "name = \"toy\"\nsamples = 0"), "samples must be an integer from 1"),
    (("dev = [", "templates = [\"x\"]\ndev = ["), "either templates, or the dev and test halves"),
    (("What {a:good} {thing}.", "What {a:good} {thing."), "brace outside"),
])
def test_a_broken_suite_is_one_line_naming_the_test(change, message):
    old, new = change
    assert old in SUITE
    with pytest.raises(SuiteError, match=message) as info:
        parse_suite(SUITE.replace(old, new, 1), "toy.toml")
    assert "\n" not in str(info.value) and "toy.toml" in str(info.value)


def test_not_toml_and_no_tests():
    with pytest.raises(SuiteError, match="not valid TOML"):
        parse_suite("name = ", "x.toml")
    with pytest.raises(SuiteError, match="no tests"):
        parse_suite("name = 'x'", "x.toml")


def test_halves_choose_templates():
    suite = toy()
    plain = suite.tests[0]
    assert [c.texts[0].startswith("What") for c in cases_of(suite, plain, "test")] == [True] * 6
    assert all(c.texts[0].startswith("The") for c in cases_of(suite, plain, "dev"))
    assert len(cases_of(suite, plain, "all")) == 12
    assert len(cases_of(suite, suite.tests[1], "dev")) == 6   # an unsplit test belongs to every half


# ----------------------------------------------------------------------------- judging

def test_mft_inv_dir_are_judged_as_the_paper_says():
    results, rows = run_check(toy(), word_scorer, LABELS)
    by = {r.test.name: r for r in results}
    assert (by["plain"].cases, by["plain"].failures) == (12, 0)
    assert (by["negated"].cases, by["negated"].failures) == (6, 6)          # blind to "not"
    # INV: a case fails when a swap brings in or takes out "Omar": every case, since the three names each
    # swap to the two others
    assert by["names"].cases == 18 and by["names"].failures == 18
    assert by["add bad"].failures == 0                                       # +0.05 is within the tolerance
    assert by["negated"].examples[0]["label"] == "positive" and len(by["negated"].examples) == 3
    report = summary(results)
    assert report["overall"]["mean_failure_rate"] == pytest.approx((0 + 1 + 1 + 0) / 4)
    negation = next(c for c in report["capabilities"] if c["capability"] == "negation")
    assert negation["failure_rate"] == 1.0
    assert {r["role"] for r in rows} == {"sentence", "perturbed"} and "p_positive" in rows[0]


def test_dir_tolerance_and_direction():
    text = SUITE.replace("tolerance = 0.1", "tolerance = 0.01")
    results, _ = run_check(parse_suite(text, "t.toml"), word_scorer, LABELS)
    assert next(r for r in results if r.test.name == "add bad").failures == 6   # every case: +0.05 > 0.01
    up = SUITE.replace("direction = \"down\"\ntolerance = 0.1", "direction = \"up\"\ntolerance = 0.01")
    results, _ = run_check(parse_suite(up, "t.toml"), word_scorer, LABELS)
    assert next(r for r in results if r.test.name == "add bad").failures == 0   # it rose: fine for "up"


def test_labels_are_matched_or_refused():
    suite = builtin_suite()
    assert resolve_labels(suite, ("NEG", "pos")) == {"negative": 0, "positive": 1}
    assert resolve_labels(suite, ("positive", "negative")) == {"negative": 1, "positive": 0}
    with pytest.raises(LabelMismatch, match="is for models with the labels negative, positive"):
        resolve_labels(suite, ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"))
    with pytest.raises(LabelMismatch):
        resolve_labels(suite, ("very negative", "negative", "neutral", "positive", "very positive"))


# ----------------------------------------------------------------------------- the built-in suite

def test_the_builtin_suite_covers_the_capabilities_in_two_disjoint_halves():
    suite = builtin_suite()
    capabilities = {t.capability for t in suite.tests}
    assert {"vocabulary", "intensifiers", "negation", "contrast", "temporal", "robustness", "named entities",
            "fairness"} <= capabilities
    assert {t.type for t in suite.tests} == {"MFT", "INV", "DIR"}
    for t in suite.tests:
        dev = {tpl for half, tpl in t.templates if half == "dev"}
        test = {tpl for half, tpl in t.templates if half == "test"}
        assert dev and test and not dev & test, t.name
        assert cases_of(suite, t, "dev") and cases_of(suite, t, "test"), t.name


def test_the_user_example_suite_parses():
    from sentiment_cli.behaviour.suite import load_suite

    suite = load_suite(ROOT / "docs" / "examples" / "trec6-suite.toml")
    assert set(suite.labels) == {"ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"}
    assert all(cases_of(suite, t) for t in suite.tests)


# ----------------------------------------------------------------------------- the command

def test_check_on_a_checkpoint(trained_checkpoint, tmp_path):
    out = tmp_path / "cases.csv"
    r = runner.invoke(app, ["check", "--checkpoint", str(trained_checkpoint), "--json", "--half", "test",
                            "--output", str(out)])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["half"] == "test" and report["labels"] == ["negative", "positive"]
    assert {c["capability"] for c in report["capabilities"]} >= {"negation", "robustness"}
    assert all(t["cases"] > 0 and 0 <= t["failure_rate"] <= 1 for t in report["tests"])
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    assert sum(t["cases"] for t in report["tests"]) == len({(r["test"], r["case"]) for r in rows})
    again = runner.invoke(app, ["check", "--checkpoint", str(trained_checkpoint), "--output", str(out)])
    assert again.exit_code == 2 and "--force" in again.output
    table = runner.invoke(app, ["check", "--checkpoint", str(trained_checkpoint), "--half", "dev"])
    assert table.exit_code == 0 and "by capability" in table.stdout and "negation" in table.stdout


def test_check_refuses_a_suite_for_other_labels(trained_checkpoint):
    r = runner.invoke(app, ["check", "--checkpoint", str(trained_checkpoint), "--suite",
                            str(ROOT / "docs" / "examples" / "trec6-suite.toml")])
    assert r.exit_code == 2 and "ABBR" in r.output and "Traceback" not in r.output


def test_check_bad_suite_file(trained_checkpoint, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("name = 'x'\n[[test]]\nname = 'a'\ntype = 'MFT'\n")
    r = runner.invoke(app, ["check", "--checkpoint", str(trained_checkpoint), "--suite", str(bad)])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "no templates" in r.output
    r = runner.invoke(app, ["check", "--checkpoint", str(trained_checkpoint), "--suite", str(tmp_path / "no.toml")])
    assert r.exit_code == 2 and "no such file" in r.output


# ----------------------------------------------------------------------------- negation scope

def _marks(words: list[str], rule: str) -> list[str]:
    vocab = {w: i + 2 for i, w in enumerate(dict.fromkeys(words))}
    roles = np.zeros(max(vocab.values()) + 1, np.uint8)
    for w, i in vocab.items():
        roles[i] = role_of(w)
    ids = mark_scope([vocab[w] for w in words], roles, rule)
    return [("NOT_" if i >= SCOPE_OFFSET else "") + words[k] for k, i in enumerate(ids)]


def test_scope_runs_from_a_negator_to_the_clause_end():
    words = "this is not a good film , but i liked it .".split()
    assert _marks(words, "clause") == "this is not NOT_a NOT_good NOT_film , but i liked it .".split()
    assert _marks(words, "none") == words
    assert _marks("i didn ' t enjoy it .".split(), "clause") == "i didn ' t NOT_enjoy NOT_it .".split()


def test_a_sentence_scope_runs_past_commas_to_a_stop_or_contrast_word():
    words = "i don ' t think , given the cast , that it is good but it was fun .".split()
    assert _marks(words, "sentence") == \
        "i don ' t NOT_think , NOT_given NOT_the NOT_cast , NOT_that NOT_it NOT_is NOT_good but it was fun .".split()
    assert _marks(words, "clause")[4:6] == ["NOT_think", ","] and _marks(words, "clause")[6] == "given"


def test_a_negator_with_nothing_to_govern_marks_its_sentence_before_it():
    words = "ok . i hoped it would be good , but it was not .".split()
    assert _marks(words, "sentence") == \
        "ok . NOT_i NOT_hoped NOT_it NOT_would NOT_be NOT_good , NOT_but NOT_it NOT_was not .".split()
    assert _marks(words, "clause") == words


def test_a_scope_model_reads_marks_and_loads_back(tmp_path):
    from sentiment_cli.model.classifier import SentimentClassifier

    from .conftest import small_config

    cfg = small_config().override("data", negation_scope="clause")
    model = SentimentClassifier.from_config(cfg, vocab_size=50, num_labels=2).eval()
    with torch.no_grad():
        model.scope_embedding.weight[1] = torch.randn(model.config.d_model)   # (a constant would vanish in LayerNorm)
        ids = torch.tensor([[5, 6, 7]])
        mask = torch.zeros_like(ids, dtype=torch.bool)
        plain = model(ids, mask).logits
        marked = model(ids + torch.tensor([[0, SCOPE_OFFSET, SCOPE_OFFSET]]), mask).logits
    assert not torch.allclose(plain, marked)
    assert "scope_embedding.weight" in model.state_dict()
    assert SentimentClassifier.from_config(small_config(), 50, 2).scope_embedding is None


def test_train_records_the_builtin_suite_in_metrics_and_card(trained_checkpoint):
    metrics = json.loads((trained_checkpoint / "metrics.json").read_text())
    record = metrics["behaviour"]
    assert record["half"] == "test" and record["suite"] == "sentiment-en"
    assert {c["capability"] for c in record["capabilities"]} >= {"negation", "fairness"}
    assert len(record["tests"]) == len(builtin_suite().tests)
    rates = [t["failure_rate"] for t in record["tests"] if t["failure_rate"] is not None]   # each test once
    assert record["mean_failure_rate"] == pytest.approx(sum(rates) / len(rates))
    card = (trained_checkpoint / "README.md").read_text()
    assert "## Behaviour (built-in suite, test half)" in card and "| negation |" in card
    r = runner.invoke(app, ["info", "--checkpoint", str(trained_checkpoint)])
    assert r.exit_code == 0 and "behaviour" in r.stdout
