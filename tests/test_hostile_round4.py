"""Hostile input, fourth round (issue 78): `eval --plot` and every other writer under one output rule, ONNX files
tied to their weights, labels that look like Rich markup, `metrics.json` of odd shapes, integers over Python's
4,300 digits, sizes too big together, a vocabulary of no words, two runs pretraining one folder, SIGTERM in any
command that writes, `check` cases a perturbation empties, the Python API's odd arrays. Each test failed before
its fix (on 7d873c1).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sentiment_cli.cli import app
from sentiment_cli.errors import UsageError

from .conftest import ROOT
from .test_hostile import assert_one_error_line

REVIEWS = ROOT / "tests" / "data" / "reviews_small" / "reviews.csv"   # 600 IMDB reviews, labels neg / pos
runner = CliRunner()


def invoke(*args, **kwargs):
    return runner.invoke(app, [str(a) for a in args], **kwargs)


@pytest.fixture(scope="module")
def ck(tmp_path_factory) -> Path:
    """The seed preset trained for one epoch on the 600 committed reviews (a few seconds); tests that change a
    file of it work on a copy (:func:`copy_of`)."""
    out = tmp_path_factory.mktemp("round4") / "ck"
    r = invoke("train", "--config", "seed", "--data", REVIEWS, "--output", out, "--epochs", 1)
    assert r.exit_code == 0, r.stderr
    return out


def copy_of(folder: Path, tmp_path: Path, name: str = "copy") -> Path:
    target = tmp_path / name
    shutil.copytree(folder, target, ignore=shutil.ignore_patterns("trainer_state"))
    return target


# ---------------------------------------------------------------------------- 1. one output rule for every writer

def test_eval_plot_follows_the_output_rule(ck, tmp_path):
    """`eval --plot` wrote over its --data file, the checkpoint's weights and a device node, exit 0."""
    held = tmp_path / "held.csv"
    shutil.copy(REVIEWS, held)
    weights = ck / "model.safetensors"
    before = {held: held.read_bytes(), weights: weights.read_bytes()}
    fifo = tmp_path / "fifo.png"
    os.mkfifo(fifo)
    for force in ((), ("--force",)):
        r = invoke("eval", "--checkpoint", ck, "--data", held, "--plot", held, *force)
        assert_one_error_line(r, 2, f"--plot {held}: would write over --data {held}, which this command reads")
        r = invoke("eval", "--checkpoint", ck, "--data", held, "--plot", weights, *force)
        assert_one_error_line(r, 2, f"--plot {weights}: would write into the checkpoint folder {ck}")
        r = invoke("eval", "--checkpoint", ck, "--plot", REVIEWS, *force)   # the data it was trained on
        assert_one_error_line(r, 2, f"--plot {REVIEWS}: would write over the checkpoint's data {REVIEWS}")
        assert all(path.read_bytes() == data for path, data in before.items())
        r = invoke("eval", "--checkpoint", ck, "--data", held, "--plot", fifo, *force)
        assert_one_error_line(r, 2, f"--plot {fifo}: not a regular file (a device, FIFO or socket)")
        assert fifo.is_fifo()
    png = tmp_path / "cm.png"
    assert invoke("eval", "--checkpoint", ck, "--data", held, "--plot", png).exit_code == 0
    for target, option in ((png, "--plot"), (tmp_path / "cm-reliability.png", "--plot's reliability diagram")):
        if target != png:
            png.unlink()
        r = invoke("eval", "--checkpoint", ck, "--data", held, "--plot", png)
        assert_one_error_line(r, 2, f"{option} {target}: the file exists; pass --force to replace it")
    assert invoke("eval", "--checkpoint", ck, "--data", held, "--plot", png, "--force").exit_code == 0


def test_no_writer_replaces_a_device_or_fifo_even_with_force(tmp_path):
    from sentiment_cli.outputs import check_output

    fifo = tmp_path / "f.csv"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="not a regular file"):
        check_output(fifo, force=True)
    with pytest.raises(UsageError, match="not a regular file"):
        check_output("/dev/null", force=True)


def test_export_and_ray_output_never_write_over_what_the_checkpoint_reads(ck, tmp_path):
    """`export --output` onto the checkpoint's own training data (no --data given) was replaced with --force;
    `predict --data --ray --output CHECKPOINT --force` would have replaced the checkpoint folder."""
    from sentiment_cli.inference.export import check_export_output
    from sentiment_cli.inference.ray_predict import OutputFolder, find_input

    data = tmp_path / "d.csv"
    shutil.copy(REVIEWS, data)
    trained = copy_of(ck, tmp_path)
    cfg = json.loads((trained / "config.json").read_text())
    cfg["data"]["source"] = str(data)
    (trained / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UsageError, match="would write over the checkpoint's data"):
        check_export_output(trained, data, force=True)
    with pytest.raises(UsageError, match="would write into the checkpoint"):
        OutputFolder.check(trained, force=True, data=find_input(data, None), inputs=[("the checkpoint", trained)])


# ---------------------------------------------------------------------------- 4. labels that look like markup

def test_labels_that_look_like_rich_markup_print_as_they_are(tmp_path):
    """Labels `[/]` and `[neutral]`: `info` ended in `rich.errors.MarkupError`, `eval --errors 3` crashed after the
    whole evaluation, and `[neutral]` printed as an empty string."""
    import csv

    data = tmp_path / "marked.csv"
    with open(REVIEWS, newline="", encoding="utf-8") as src, open(data, "w", newline="", encoding="utf-8") as dst:
        rows = csv.DictReader(src)
        out = csv.DictWriter(dst, fieldnames=rows.fieldnames)
        out.writeheader()
        for row in rows:
            out.writerow({**row, "sentiment": {"neg": "[/]", "pos": "[neutral]"}[row["sentiment"]]})
    folder = tmp_path / "[bold]ck"
    r = invoke("train", "--config", "seed", "--data", data, "--output", folder, "--epochs", 1)
    assert r.exit_code == 0, r.stderr
    r = invoke("info", "--checkpoint", folder)
    assert r.exit_code == 0, r.stderr
    assert "[/] " in r.stdout and "[neutral] " in r.stdout and "[bold]ck" in r.stdout
    held = shutil.copy(data, tmp_path / "held.csv")
    r = invoke("eval", "--checkpoint", folder, "--data", held, "--errors", 3)
    assert r.exit_code == 0, r.stderr
    table = r.stdout.split("3 most confident mistakes")[1]
    assert "[/]" in table and "[neutral]" in table


def test_one_escape_for_rich_in_the_cli():
    """Every command module escapes through `render.safe`; none imports Rich's `escape` on its own."""
    cli = ROOT / "sentiment_cli" / "cli"
    own = [p.name for p in cli.glob("*.py") if p.name != "render.py" and "rich.markup import escape" in p.read_text()]
    assert own == []
    from sentiment_cli.cli.render import safe

    assert safe("[/]") == "\\[/]" and safe("[neutral] \x1b[2J") == "\\[neutral] \\x1b[2J"


# ---------------------------------------------------------------------------- 6. integers over 4,300 digits

BIG = "7" * 5000   # Python's int() refuses over 4,300 digits: tomllib and json raised a plain ValueError


def test_integers_over_pythons_limit_are_one_line_errors_everywhere_toml_or_json_is_read(ck, tmp_path):
    toml = tmp_path / "big.toml"
    toml.write_text(f"[training]\nepochs = {BIG}\n")
    r = invoke("config", "--config", toml)
    assert_one_error_line(r, 2, f"{toml}: not valid TOML: an integer of 5,000 digits, over the 4,300 that Python "
                                "reads; write a smaller number (at line 2, column 10)")
    r = invoke("config", "--set", f"training.epochs={BIG}")
    assert_one_error_line(r, 2, "--set training.epochs: an integer of 5,000 digits")
    assert len(r.stderr) < 200
    suite = tmp_path / "suite.toml"
    suite.write_text(f"seed = {BIG}\n")
    r = invoke("check", "--checkpoint", ck, "--suite", suite)
    assert_one_error_line(r, 2, "an integer of 5,000 digits")
    for name, old, new in (("metrics.json", '"seed": 1234', f'"seed": {BIG}'),
                           ("config.json", '"epochs": 1', f'"epochs": {BIG}')):
        folder = copy_of(ck, tmp_path, name)
        path = folder / name
        assert old in path.read_text()
        path.write_text(path.read_text().replace(old, new, 1))
        for command in (("info",), ("predict", "fine")):
            r = invoke(*command[:1], "--checkpoint", folder, *command[1:])
            assert_one_error_line(r, 1, f"{path}: not valid JSON (an integer of 5,000 digits")
    flags = tmp_path / "flags.jsonl"   # `eval --audit FILE` reads an audit's JSON Lines
    flags.write_text(f'{{"rank": {BIG}, "text": "x", "suggested": "pos"}}\n')
    r = invoke("eval", "--checkpoint", ck, "--data", REVIEWS, "--errors", 3, "--audit", flags)
    assert_one_error_line(r, 1, f"{flags}: not an audit's output (an integer of 5,000 digits")


def test_epochs_are_bounded_like_the_other_sizes():
    r = invoke("config", "--set", "training.epochs=99999999999999999999")
    assert_one_error_line(r, 2, "[training] epochs must be <= 100000, got 99999999999999999999")
    assert invoke("config", "--set", "training.epochs=100000").exit_code == 0


# ---------------------------------------------------------------------------- 5. metrics.json of odd shapes

def _search_record() -> dict:
    """A `metrics.json` "search" record as training/search.py writes it (an n-gram candidate, an encoder one)."""
    return {"budget_seconds": 120, "seconds": 100.0, "metric": "validation log-loss", "chosen": "encoder 1",
            "chosen_settings": {"training.lr": 0.002}, "encoder_budget_hint": None,
            "chosen_by": {"rule": "one standard error", "nll_difference": 0.01, "why": "within one standard error"},
            "candidates": [
                {"name": "n-gram nb-lr", "kind": "ngram", "settings": {"model.ngram_fit": "nb-lr"},
                 "validation_accuracy": 0.8, "validation_nll": 0.4, "seconds": 1.0, "status": "complete"},
                {"name": "encoder 1", "kind": "encoder", "settings": {"training.lr": 0.002, "training.epochs": 3},
                 "validation_accuracy": 0.81, "validation_nll": 0.39, "seconds": 30.0, "status": "complete",
                 "ended": "the time budget", "examples_per_second": 100.0, "needs_seconds": None}]}


def _paths(obj, prefix=()):
    """Every key path of a JSON document (each list item too)."""
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in items:
        yield prefix + (key,)
        yield from _paths(value, prefix + (key,))


def _set(obj, path, value):
    obj = json.loads(json.dumps(obj))
    inner = obj
    for key in path[:-1]:
        inner = inner[key]
    if value is _DELETE:
        del inner[path[-1]]
    else:
        inner[path[-1]] = value
    return obj


_DELETE = object()


@pytest.mark.slow   # about 15 s: some 500 crafted files, each card built and rendered
def test_metrics_json_of_any_shape_is_checked_at_load_with_the_key_named(ck, tmp_path):
    """11 of 15 shapes crashed `info` (`{"data": 5}`: AttributeError; `"history": 5`: TypeError; `search`,
    `behaviour`, `calibration`, `versions`, `data_rules`, `class_counts` of the wrong type). Every key path of a
    real `metrics.json` (plus a search's, the default's data rules, class weights, a refit's), set to each JSON type
    or removed: the card is built and rendered, or loading refuses it naming the key."""
    import io

    from rich.console import Console

    from sentiment_cli.card.facts import model_card
    from sentiment_cli.card.readme import card_markdown
    from sentiment_cli.checkpoint import read_metrics
    from sentiment_cli.cli.info import render_card
    from sentiment_cli.errors import CheckpointError

    folder = copy_of(ck, tmp_path)
    base = json.loads((folder / "metrics.json").read_text())
    base.update(search=_search_record(), class_weights={"neg": 1.1, "pos": 0.9},
                data_rules=[{"key": "training.epochs", "value": 4, "reason": "a small set"}],
                held_out_run={"validation_examples": 60, "best_epoch": 1, "best_validation_accuracy": 0.5})
    base["calibration"]["ngram_scale"] = 1.0
    refused = 0
    paths = [p for p in _paths(base) if p[0] != "config" and not any(isinstance(k, int) and k for k in p)]
    for path in paths:   # config is read from config.json; one item of each list
        for value in (5, "x", True, None, [], {"a": 5}, _DELETE):
            metrics = _set(base, path, value)
            (folder / "metrics.json").write_text(json.dumps(metrics))
            try:
                read_metrics(folder)   # the check at load, alone: cheap
                card = model_card(folder)
            except CheckpointError as exc:
                key = str(path[-1]) if not isinstance(path[-1], int) else str(path[-2])
                assert str(exc).startswith(f"{folder / 'metrics.json'}: ") and key in str(exc), (path, value, exc)
                refused += 1
                continue
            card_markdown(card)
            render_card(Console(file=io.StringIO(), width=100), card)
    assert refused > 100


def test_metrics_json_shapes_that_crashed_info_eval_and_export(ck, tmp_path):
    """The issue's shapes: `info` crashed on each; `eval` and `export` (after 11 s of work) on `{"data": 5}`."""
    folder = copy_of(ck, tmp_path)
    base = json.loads((folder / "metrics.json").read_text())
    for shape in ({"data": 5}, {"history": 5}, {"search": []}, {"versions": "3.11"}, {"behaviour": 1},
                  {"calibration": [1]}, {"data_rules": {}}, {"data": {"class_counts": 7}}):
        (folder / "metrics.json").write_text(json.dumps({**base, **shape}))
        key = next(iter(shape))
        for command in (("info",), ("eval", "--data", REVIEWS), ("export", "--format", "onnx")):
            r = invoke(command[0], "--checkpoint", folder, *command[1:])
            assert_one_error_line(r, 1, f"{folder / 'metrics.json'}: {key}")


# ---------------------------------------------------------------------------- 8. a vocabulary of no words

def test_a_vocabulary_of_no_words_stops_before_training(tmp_path):
    """`--set data.min_frequency=100000`, or texts that are all `<br />`: a whole epoch trained, then `exit 1` with
    `config.json: vocab_size must be an integer from 3 to 4,000,000, got 2` and a checkpoint nothing could load."""
    out = tmp_path / "o"
    r = invoke("train", "--config", "seed", "--data", REVIEWS, "--output", out, "--set", "data.min_frequency=100000")
    assert_one_error_line(r, 2, "[data] min_frequency = 100,000: no token occurs 100,000 times in the training texts")
    assert "epoch" not in r.stderr and not (out / "config.json").exists()
    data = tmp_path / "br.csv"
    data.write_text("review,sentiment\n" + "".join(f"<br /><br />  <br/>,{'pos' if i % 2 else 'neg'}\n"
                                                   for i in range(60)), encoding="utf-8")
    r = invoke("train", "--config", "seed", "--data", data, "--output", out)
    assert_one_error_line(r, 1, "the training texts hold no token")
    r = invoke("train", "--config", "seed", "--data", data, "--output", out, "--set", "data.tokenizer=char")
    assert_one_error_line(r, 1, "the training texts hold no character")
    assert not (out / "config.json").exists()


# ---------------------------------------------------------------------------- 7. sizes too big together

def test_a_model_too_big_for_the_machine_is_refused_before_it_is_allocated(tmp_path):
    """`--set model.d_model=4096 model.d_ff=65536 model.n_layers=64 model.n_heads=64` on 300 rows: each size within
    its bound, `RuntimeError: DefaultCPUAllocator: can't allocate memory` after 17 s (about 150 GB of weights)."""
    import torch

    out = tmp_path / "o"
    sizes = ("model.d_model=4096", "model.d_ff=65536", "model.n_layers=64", "model.n_heads=64")
    r = invoke("train", "--config", "seed", "--data", REVIEWS, "--output", out,
               *(a for s in sizes for a in ("--set", s)))
    assert_one_error_line(r, 2, "the model ([model] d_model 4,096, d_ff 65,536, n_layers 64, vocabulary ")

    from sentiment_cli.config import load_config
    from sentiment_cli.model.classifier import SentimentClassifier
    from sentiment_cli.model.memory import model_values, training_bytes
    from sentiment_cli.runtime import memory_bytes

    have = memory_bytes(torch.device("cpu"))[0]
    assert "38.7 billion values) needs about " in r.stderr and f"more than the {have / 1e9:,.1f} GB of this machine" \
        in r.stderr and not (out / "config.json").exists()
    seed = load_config("seed")
    built = SentimentClassifier.from_config(seed, 1000, 2).state_dict()
    assert model_values(seed, 1000, 2) == sum(t.numel() for t in built.values())   # counted on the meta device
    assert training_bytes(seed, 1000, 2) < 100e6   # the seed preset: far below any machine


# ---------------------------------------------------------------------------- 3. an ONNX file tied to its weights

def test_an_export_beside_other_weights_is_refused_without_torch(ck, tmp_path):
    """The check the ONNX backend makes at load (`check_exported_from`), on a copy of the checkpoint: the digest
    recorded at export against the weights and config.json beside the file. `predict --onnx` served a model
    older than the weights (`pos` where `predict` said `yes`)."""
    from sentiment_cli import checkpoint
    from sentiment_cli.errors import CheckpointError
    from sentiment_cli.inference import onnx_backend
    from sentiment_cli.inference.onnx_backend import META_CONFIG, META_WEIGHTS, check_exported_from

    assert (onnx_backend.WEIGHTS_FILE, onnx_backend.CONFIG_FILE, onnx_backend.CONFIG_LIMIT) == \
        (checkpoint.WEIGHTS_FILE, checkpoint.CONFIG_FILE, checkpoint.JSON_LIMIT)
    folder = copy_of(ck, tmp_path)
    meta = {META_WEIGHTS: checkpoint.weights_digest(folder), META_CONFIG: (folder / "config.json").read_text()}
    onnx = folder / "model.onnx"
    check_exported_from(meta, onnx)   # as exported
    check_exported_from({META_CONFIG: "{}"}, onnx)   # exported before the digest was recorded: not checked
    check_exported_from({**meta, META_WEIGHTS: "sha256:0"}, tmp_path / "alone" / "model.onnx")   # no checkpoint
    for changed in ({META_WEIGHTS: "sha256:0"}, {META_CONFIG: meta[META_CONFIG] + " "}):
        with pytest.raises(CheckpointError, match=f"{onnx}: not an export of {folder / 'model.safetensors'} as it is "
                                                  f"now .*; export it again: sentiment export --format onnx "
                                                  f"--checkpoint {folder}$"):
            check_exported_from({**meta, **changed}, onnx)
    with pytest.raises(CheckpointError, match=f"--output {folder / 'model.int8.onnx'}$"):
        check_exported_from({**meta, META_WEIGHTS: "sha256:0"}, folder / "model.int8.onnx")


@pytest.mark.slow   # exports to ONNX (about 10 s) and trains twice
def test_predict_onnx_refuses_an_export_of_older_weights(ck, tmp_path):
    import csv

    folder = copy_of(ck, tmp_path)
    held = shutil.copy(REVIEWS, tmp_path / "held.csv")   # a file other than the one trained on: the held-out texts
    r = invoke("export", "--format", "onnx", "--checkpoint", folder, "--data", held, "--parity-reviews", 20)
    assert r.exit_code == 0, r.stderr
    assert invoke("predict", "--onnx", "--checkpoint", folder, "good film").exit_code == 0
    data = tmp_path / "yes_no.csv"
    with open(REVIEWS, newline="", encoding="utf-8") as src, open(data, "w", newline="", encoding="utf-8") as dst:
        rows = csv.DictReader(src)
        out = csv.DictWriter(dst, fieldnames=rows.fieldnames)
        out.writeheader()
        out.writerows({**row, "sentiment": {"neg": "no", "pos": "yes"}[row["sentiment"]]} for row in rows)
    assert invoke("train", "--config", "seed", "--data", data, "--output", folder, "--epochs", 1).exit_code == 0
    r = invoke("predict", "--onnx", "--checkpoint", folder, "good film")
    assert_one_error_line(r, 1, f"{folder / 'model.onnx'}: not an export of {folder / 'model.safetensors'} as it is "
                                "now")
    shutil.copy(folder / "model.onnx", tmp_path / "alone.onnx")   # deployed on its own: self-contained
    assert invoke("predict", "--onnx", "--checkpoint", tmp_path / "alone.onnx", "good film").exit_code == 0


# ---------------------------------------------------------------------------- 10. SIGTERM in any command that writes

def _sigterm_self():
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(10_000):   # the handler runs between bytecodes
        pass
    raise AssertionError("SIGTERM did not stop the command")


def test_sigterm_in_any_command_removes_its_temporary_files(ck, tmp_path, monkeypatch):
    """SIGTERM during `export` exited 143 with no `error:` line and left `.export-…` in the checkpoint folder
    (round 3 fixed `predict --data` alone). Every command runs under the same handler (`handle_errors`): here
    `export` inside its temporary folder and `eval --plot` inside its temporary file."""
    from sentiment_cli.evaluation import plots
    from sentiment_cli.inference import export

    folder = copy_of(ck, tmp_path)
    held = shutil.copy(REVIEWS, tmp_path / "held.csv")
    before = signal.getsignal(signal.SIGTERM)

    def graph_then_sigterm(ckpt, checkpoint, path):
        path.write_bytes(b"half an export")
        _sigterm_self()

    monkeypatch.setattr(export, "_write_graph", graph_then_sigterm)
    r = invoke("export", "--format", "onnx", "--checkpoint", folder, "--data", held, "--parity-reviews", 5)
    assert_one_error_line(r, 143, "stopped by SIGTERM")
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")] and not (folder / "model.onnx").exists()

    def write_then_sigterm(path, png):   # the signal comes once the temporary file is written, before os.replace
        from sentiment_cli.checkpoint import atomic_write

        monkeypatch.setattr("os.replace", lambda *a: _sigterm_self())
        atomic_write(path, png)

    monkeypatch.setattr(plots, "write_png", write_then_sigterm)
    r = invoke("eval", "--checkpoint", folder, "--data", held, "--plot", tmp_path / "cm.png")
    monkeypatch.undo()
    assert_one_error_line(r, 143, "stopped by SIGTERM")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy", "held.csv"]
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.slow   # starts `sentiment export` and signals it
def test_sigterm_during_a_real_export_leaves_no_temporary_folder(ck, tmp_path):
    import subprocess
    import sys
    import time

    from .conftest import SUBPROCESS_ENV

    folder = copy_of(ck, tmp_path)
    held = shutil.copy(REVIEWS, tmp_path / "held.csv")
    proc = subprocess.Popen([sys.executable, "-m", "sentiment_cli", "export", "--format", "onnx", "--checkpoint",
                             str(folder), "--data", str(held), "--parity-reviews", "20"], env=SUBPROCESS_ENV,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not any(p.name.startswith(".export-") for p in folder.iterdir()):
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr
    assert stderr.strip().splitlines()[-1].startswith("error: stopped by SIGTERM"), stderr
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")]


# ---------------------------------------------------------------------------- 11. check: a case a perturbation empties

def test_check_leaves_out_and_counts_a_case_a_perturbation_empties(ck, tmp_path):
    """An INV `punctuation` test with the template `"!"` stopped the run: `error: review 4 is empty`, exit 2."""
    suite = tmp_path / "s.toml"
    suite.write_text('name = "s"\nsamples = 1\n\n'
                     '[[test]]\nname = "bang"\ncapability = "robustness"\ntype = "INV"\nperturb = "punctuation"\n'
                     'templates = ["!", "A fine film."]\n\n'
                     '[[test]]\nname = "numbers"\ncapability = "robustness"\ntype = "INV"\nperturb = "number"\n'
                     'templates = ["No number here.", "It cost 40 dollars."]\n')
    r = invoke("check", "--checkpoint", ck, "--suite", suite, "--json")
    assert r.exit_code == 0, r.stderr
    report = json.loads(r.stdout)
    tests = {t["name"]: t for t in report["tests"]}
    assert (tests["bang"]["cases"], tests["bang"]["left_out"]) == (1, 1)        # "!" emptied; "A fine film." kept
    assert (tests["numbers"]["cases"], tests["numbers"]["left_out"]) == (1, 1)  # no number to change
    assert report["overall"]["left_out"] == 2
    r = invoke("check", "--checkpoint", ck, "--suite", suite)
    assert r.exit_code == 0 and "2 cases · 2 left out (the perturbation does not apply, or empties" in r.stdout


# ---------------------------------------------------------------------------- 9. two runs pretraining one folder

@pytest.fixture(scope="module")
def pretrained_pair(tmp_path_factory):
    """Two `sentiment pretrain` folders (word2vec, 2 epochs on the committed slice's training part, a second or
    two each): one with the stage config's settings, one with another d_model."""
    from sentiment_cli.training.pretrain import pretrain

    from .test_pretrain_stage import stage_config

    root = tmp_path_factory.mktemp("race")
    same, other = root / "same", root / "other"
    pretrain(stage_config(root / "unused"), same)
    pretrain(stage_config(root / "unused").override("model", d_model=16, n_heads=2), other)
    return same, other


def test_the_second_run_to_pretrain_a_folder_takes_the_winners(pretrained_pair, tmp_path, monkeypatch):
    """Two runs building the same missing `init_from` folder: the second to finish ended `error: …: Directory not
    empty` and left its hidden `.pt.pretraining-…` folder."""
    from sentiment_cli.errors import ConfigError
    from sentiment_cli.training import pretrained as stage

    from .test_pretrain_stage import Stages, stage_config

    for winner in pretrained_pair:
        target = tmp_path / winner.name / "pt"

        def finish_second(config, partial, cb, **_):   # this run's folder is done once the other's is in place
            shutil.copytree(winner, target)
            shutil.copytree(pretrained_pair[0], partial)

        monkeypatch.setattr(stage, "pretrain", finish_second)
        cb = Stages()
        cb.on_note = cb.stages.append
        if winner == pretrained_pair[0]:
            ckpt, made = stage.ensure_pretrained(stage_config(target), cb)
            assert not made and ckpt.directory == target
            assert any(s.startswith(f"another run pretrained {target} while this one did") for s in cb.stages)
        else:
            with pytest.raises(ConfigError, match=r"\[model\] d_model is 16 there but 32 in this config"):
                stage.ensure_pretrained(stage_config(target), cb)
        assert sorted(p.name for p in target.parent.iterdir()) == ["pt"]   # no hidden folder left
        assert (target / "model.safetensors").read_bytes() == (winner / "model.safetensors").read_bytes()


# ---------------------------------------------------------------------------- lesser: serve's 413, the API's arrays

def test_a_body_over_the_limit_is_read_before_its_413_so_the_client_reads_the_answer():
    """`serve` answered a 7.7 MB body with a connection reset: its 413 was sent and the connection closed with the
    body unread, and the kernel's reset reached the client before the answer. The guard now reads and drops the
    rest of the body (bounded) before it answers."""
    import asyncio

    from sentiment_cli.serving.guard import BodyGuard
    from sentiment_cli.serving.metrics import Metrics

    chunk = b"x" * (1 << 20)

    async def run(declared: int, chunks: int, expect: bool = False):
        pending = [{"type": "http.request", "body": chunk, "more_body": i < chunks - 1} for i in range(chunks)]
        read, sent = [], []

        async def receive():
            read.append(1)
            return pending.pop(0) if pending else {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        async def app(scope, receive, send):   # pragma: no cover (never reached)
            raise AssertionError("the app saw a refused body")

        headers = [(b"content-length", str(declared).encode())] + ([(b"expect", b"100-continue")] if expect else [])
        guard = BodyGuard(app, max_body_bytes=4 << 20, read_timeout=5, metrics=Metrics())
        await guard({"type": "http", "method": "POST", "path": "/v1/predict", "headers": headers}, receive, send)
        return len(read), sent[0]["status"], pending

    count, status, left = asyncio.run(run(8 << 20, 8))
    assert status == 413 and count == 8 and not left   # every chunk read before the answer
    from sentiment_cli.serving.guard import DRAIN_BYTES

    count, status, left = asyncio.run(run(DRAIN_BYTES + 1, 3))
    assert status == 413 and count == 0                 # too big to drain: answered at once
    count, status, _ = asyncio.run(run(8 << 20, 8, expect=True))
    assert status == 413 and count == 0                 # 100-continue: the client has sent nothing yet


def test_the_python_apis_steps_on_no_texts_and_on_arrays_of_the_wrong_shape(ck):
    """`forward(preprocess([]))` raised `ValueError: range() arg 3 must not be zero`, `decide()` of a 1-D array
    `AxisError`, and `postprocess()` of 3 columns on a 2-label model returned 3 columns."""
    import numpy as np

    import sentiment_cli

    p = sentiment_cli.load(ck)
    logits, shares, bias = p.forward(p.preprocess([]))
    assert logits.shape == (0, 2) and logits.dtype == np.float32 and shares is None and bias is None
    assert p.forward(p.preprocess([]), token_logits=True)[1] == []
    assert p.postprocess(logits).shape == (0, 2) and p.decide(p.postprocess(logits)).shape == (0,)
    with pytest.raises(UsageError, match=r"probabilities: expected an \(n, 2\) array, a column per label \(neg, pos\), "
                                         r"got shape \(2,\)"):
        p.decide(np.array([0.2, 0.8]))
    with pytest.raises(UsageError, match=r"logits: expected an \(n, 2\) array.*got shape \(4, 3\)"):
        p.postprocess(np.zeros((4, 3), np.float32))
