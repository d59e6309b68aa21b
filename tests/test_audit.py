"""`sentiment audit` on the committed slices: flipped labels rank high, the outputs, exact reasons, bad input."""

import csv
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from sentiment_cli.cli import app

from .conftest import ROOT, SMALL_DATA

REVIEWS = ROOT / "tests" / "data" / "reviews_small" / "reviews.csv"   # 600 IMDB reviews: review, sentiment
SST5 = ROOT / "tests" / "data" / "sst5_small"
FLIPS = 30                                                            # 5% of the 600
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def read_csv(path):
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def write_csv(path, rows, fields):
    with open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


@pytest.fixture(scope="module")
def noisy(tmp_path_factory):
    """The 600 reviews with 30 labels flipped (seed 0): ``(csv path, flipped row indices)``."""
    rows = read_csv(REVIEWS)
    flipped = set(np.random.default_rng(0).choice(len(rows), FLIPS, replace=False).tolist())
    for i in flipped:
        rows[i]["sentiment"] = {"pos": "neg", "neg": "pos"}[rows[i]["sentiment"]]
    path = tmp_path_factory.mktemp("audit") / "noisy.csv"
    write_csv(path, rows, ["review", "sentiment"])
    return path, flipped


@pytest.fixture(scope="module")
def audited(noisy, tmp_path_factory):
    """One `sentiment audit --json --output flagged.csv` of the noisy reviews: ``(result, json lines, output)``."""
    output = tmp_path_factory.mktemp("audit-out") / "flagged.csv"
    r = invoke("audit", "--data", noisy[0], "--json", "--top", 10, "--output", output)
    assert r.exit_code == 0, r.output
    return r, [json.loads(line) for line in r.stdout.split("\n") if line], output   # a text may hold U+0085


def test_the_flipped_rows_rank_high(noisy, audited):
    _, flipped = noisy
    rows = [int(r["rank"]) for r in read_csv(audited[2])]
    assert rows == list(range(1, len(rows) + 1))
    found = [int(r["line"]) - 2 for r in read_csv(audited[2])]   # the header is line 1, row 0 is line 2
    top = set(found[:FLIPS])
    # 5% of the rows are flipped; among the 30 ranked first, at least five times that share are
    assert len(top & flipped) >= 8, sorted(top & flipped)
    assert len(set(found) & flipped) >= 0.5 * FLIPS   # and the flagged rows hold most of them


def test_output_csv_has_the_input_columns_plus_the_audits(noisy, audited):
    out = read_csv(audited[2])
    assert list(out[0]) == ["review", "sentiment", "given", "suggested", "quality", "rank", "line", "reasons"]
    given = {r["review"]: r["sentiment"] for r in read_csv(noisy[0])}
    for r in out:
        assert r["given"] == r["sentiment"] == given[r["review"]]
        assert r["suggested"] in {"pos", "neg"} and r["suggested"] != r["given"]
        assert 0.0 <= float(r["quality"]) <= 0.5   # the given label is the less likely of two
    qualities = [float(r["quality"]) for r in out]
    assert qualities == sorted(qualities)   # ranked by self-confidence


def test_json_lines_carry_each_finding_then_the_warnings(audited):
    r, lines, _ = audited
    *lines, last = lines
    assert set(last) == {"warnings"} and all(set(w) == {"kind", "label", "share", "message"} for w in last["warnings"])
    assert len(lines) == 10 and [o["rank"] for o in lines] == list(range(1, 11))
    for o in lines:
        assert set(o) >= {"rank", "row", "file", "line", "text", "given", "suggested", "quality", "tokens", "scores"}
        assert len(o["tokens"]) == len(o["scores"]) and o["line"] == o["row"] + 2
        assert o["reasons"] and all(score > 0 for _, score in o["reasons"])
        assert o["probabilities"][o["suggested"]] > o["probabilities"][o["given"]]
    assert "estimated label errors" in r.stderr   # the summary goes to stderr with --json


def test_reasons_split_the_margin_exactly():
    """Each flagged row's token scores plus the bias are logit(suggested) - logit(given) of its fold's score."""
    from sentiment_cli.audit.probabilities import cross_fit, encode
    from sentiment_cli.audit.label_issues import find_issues
    from sentiment_cli.audit.reasons import explain_rows
    from sentiment_cli.data.splits import load_rows

    rows = load_rows(str(SST5), "validation")   # 400 rows of five classes: the contrast is between two of them
    s = rows.split
    tokenizer, ids = encode(s.texts)
    cross = cross_fit(ids, s.labels, len(s.label_names), folds=3)
    y = np.asarray(s.labels)
    issues = find_issues(y, cross.probabilities())
    some = issues.ranked[:50]
    explained = explain_rows(cross, tokenizer, s.texts, some, y, issues.suggested, s.label_names)
    for i in some.tolist():
        e, g, k = explained[i], y[i], issues.suggested[i]
        assert e.target == s.label_names[k] and len(e.tokens) == len(e.scores) == len(ids[i])
        assert sum(e.scores) + e.bias == pytest.approx(cross.logits[i, k] - cross.logits[i, g], abs=1e-4)


def test_summary_estimates_the_error_rate_per_class(audited):
    r = invoke("audit", "--data", SMALL_DATA, "--split", "test", "--top", 3)
    assert r.exit_code == 0, r.output
    assert "estimated label errors" in r.stdout and "most likely label errors" in r.stdout
    assert "NB-LR" in r.stdout or "logistic regression" in r.stdout   # says what scored the rows


def test_rows_are_located_by_the_line_their_record_starts_on(tmp_path):
    from sentiment_cli.audit.rows import locations

    path = tmp_path / "d.csv"
    path.write_text('text,label\n"two\nlines",a\n\nb text,b\n', encoding="utf-8")
    assert locations(str(path), 2) == (str(path), [2, 5])
    assert locations(str(path), 3) == (None, [1, 2, 3])   # a count that does not match: row numbers
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text('{"text": "x", "label": 1}\n\n{"text": "y", "label": 0}\n', encoding="utf-8")
    assert locations(str(jsonl), 2) == (str(jsonl), [1, 3])


def test_read_flags_reads_what_audit_wrote(audited):
    from sentiment_cli.audit.rows import read_flags

    flags = read_flags(audited[2])
    first = read_csv(audited[2])[0]
    assert flags[first["review"]]["rank"] == 1 and flags[first["review"]]["suggested"] == first["suggested"]


def test_eval_errors_marks_the_mistakes_the_audit_flagged(trained_checkpoint, tmp_path):
    import shutil

    from sentiment_cli.audit.rows import write_output
    from sentiment_cli.evaluation.evaluate import evaluate_checkpoint

    checkpoint = shutil.copytree(trained_checkpoint, tmp_path / "ckpt")   # eval records into it: a copy of the shared
    plain = evaluate_checkpoint(checkpoint, "test", errors=5, record=False)
    marked = plain["errors"][0]
    path = tmp_path / "flags.jsonl"
    write_output(path, [{"text": marked["text"], "label": marked["true_label"], "given": marked["true_label"],
                         "suggested": marked["label"], "quality": 0.01, "rank": 1, "line": 7, "reasons": ""}],
                 ["text", "label"])
    r = invoke("eval", "--checkpoint", checkpoint, "--split", "test", "--errors", 5, "--audit", path, "--json")
    assert r.exit_code == 0, r.output
    errors = json.loads(r.stdout)["errors"]
    assert errors[0]["audit"] == {"rank": 1, "given": marked["true_label"], "suggested": marked["label"],
                                  "quality": 0.01}
    assert all(e["audit"] is None for e in errors[1:])


@pytest.mark.parametrize("case, code, words", [
    ("missing", 1, "does not exist"),
    ("no_label", 1, "no label column"),
    ("one_class", 1, "only one class"),   # as train says it
    ("rare", 1, "--folds"),
    ("bad_output", 2, ".csv or .jsonl"),
])
def test_bad_input_is_one_error_line(tmp_path, case, code, words):
    data, extra = tmp_path / "d.csv", []
    rows = [{"text": f"review number {i}", "label": "a" if i % 2 else "b"} for i in range(20)]
    if case == "no_label":
        rows = [{"text": r["text"], "stars_given": r["label"]} for r in rows]
    elif case == "one_class":
        rows = [{**r, "label": "a"} for r in rows]
    elif case == "rare":
        rows = [{**r, "label": "c"} if i < 3 else r for i, r in enumerate(rows)]   # class c: 3 rows, 5 folds
    elif case == "bad_output":
        extra = ["--output", tmp_path / "out.xlsx"]
    if case != "missing":
        write_csv(data, rows, list(rows[0]))
    r = invoke("audit", "--data", data, *extra)
    assert r.exit_code == code, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and words in lines[0], r.stderr
    if case == "rare":
        assert "'c' has 3 rows" in lines[0] and "lower --folds to 3" in lines[0]


def test_the_cli_default_folds_are_the_librarys():
    """The CLI passes no --folds of its own: the library resolves it (10 stratified, 5 on multi-label data)."""
    import inspect

    from sentiment_cli.audit import multilabel, probabilities, run
    from sentiment_cli.cli import audit

    assert inspect.signature(audit.audit_).parameters["folds"].default is None
    assert inspect.signature(run.audit).parameters["folds"].default is None
    assert (probabilities.FOLDS, multilabel.LABEL_SET_FOLDS) == (10, 5)


@pytest.mark.slow   # audits the full TREC-6 set in ../shared
def test_a_rare_class_keeps_its_own_rows(tmp_path):
    """TREC-6's own labels: ABBR has 84 of 4,907 questions (the largest class outnumbers it 13 to 1). Cross-fitted
    without class weights, its prior shrinks its probabilities and confident learning flagged 24 of its questions
    (29%); balanced, as ``train`` weighs such classes, it flags at most a tenth of them."""
    from sentiment_cli.audit.probabilities import class_weighting
    from sentiment_cli.audit.run import audit

    result = audit(str(ROOT.parent / "shared" / "data" / "trec6"))
    assert result.method["class_weight"] == "balanced" and "classes balanced" in result.method["model"]
    abbr = next(c for c in result.summary["classes"] if c["label"] == "ABBR")
    assert abbr["rows"] == 84 and abbr["flagged"] <= 8, abbr
    assert 100 <= result.summary["flagged"] <= 400   # the other classes' suspects are still flagged
    assert class_weighting([0] * 5 + [1] * 25) is None                      # 5 to 1: not over it
    assert class_weighting([0] * 5 + [1] * 26 + [3] * 7) == "balanced"      # 5.2 to 1; class 2 absent


def test_flagged_rows_are_those_both_rules_of_confident_learning_agree_on():
    """With more than two classes the audit flags only the rows that cleanlab's ``prune_by_noise_rate`` and
    ``prune_by_class`` both flag: fewer correctly labelled rows (docs/audit.md)."""
    from cleanlab.filter import find_label_issues

    from sentiment_cli.audit.probabilities import cross_fit, encode
    from sentiment_cli.audit.label_issues import find_issues
    from sentiment_cli.data.splits import load_rows

    s = load_rows(str(SST5), "validation").split
    _, ids = encode(s.texts)
    y = np.asarray(s.labels)
    p = cross_fit(ids, y, len(s.label_names), folds=3).probabilities()
    flagged = set(find_issues(y, p).ranked.tolist())
    by_rule = {rule: set(np.flatnonzero(find_label_issues(y, p, filter_by=rule)).tolist())
               for rule in ("prune_by_noise_rate", "prune_by_class")}
    assert flagged == by_rule["prune_by_noise_rate"] & by_rule["prune_by_class"]
    assert len(flagged) < len(by_rule["prune_by_noise_rate"])   # the agreement is stricter on this slice


@pytest.mark.slow   # over 5 s on 2 cores: the full suite runs it, the fast lane does not (docs/development.md)
def test_a_class_flagged_far_above_the_rest_gets_a_note(tmp_path):
    """The committed SST-5 slice with 15% of its very negative sentences kept (34 of 1,773 rows): balanced weights do
    not keep a rare class that is also hard to tell from its neighbour (27 of its 34 rows flagged), so the audit
    says so, for that class alone."""
    import random

    rows = read_csv(SST5 / "train.csv")
    rng = random.Random(0)
    kept = [r for r in rows if r["sentiment"] != "very negative" or rng.random() < 0.15]
    write_csv(tmp_path / "imbalanced.csv", kept, ["sentence", "sentiment"])
    r = invoke("audit", "--data", tmp_path / "imbalanced.csv", "--folds", 5, "--top", 0)
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())   # the note wraps
    assert "of the 34 rows of very negative are flagged" in text and "read its flags before removing any" in text
    assert text.count("read its flags before removing any") == 1


def test_warnings_say_when_the_flags_are_the_models_own_mistakes():
    from sentiment_cli.audit.warnings import audit_warnings

    def classes(*flagged_rows):
        return [{"label": name, "flagged": f, "rows": n} for name, (f, n) in zip("abc", flagged_rows)]

    quiet = {"rows": 300, "flagged": 30, "classes": classes((10, 100), (10, 100), (10, 100))}
    assert audit_warnings(quiet, 0.9) == []
    crowded = {"rows": 300, "flagged": 40, "classes": classes((30, 100), (5, 100), (5, 100))}
    [w] = audit_warnings(crowded, 0.9)
    assert (w.kind, w.label, w.share) == ("crowded_class", "a", 0.3) and "30 of the 100 rows of a" in w.message
    many = {"rows": 300, "flagged": 90, "classes": classes((30, 100), (30, 100), (30, 100))}
    [w] = audit_warnings(many, 0.7)
    assert (w.kind, w.label, w.share) == ("many_flagged", None, 0.3) and "right on 70% of them" in w.message
