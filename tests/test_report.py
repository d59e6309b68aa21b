"""Error analysis, training curves, confusion-matrix pictures and the model card, through the library and the CLI."""

import json
import math
import shutil
import sys
import tomllib

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from sentiment_cli import checkpoint
from sentiment_cli.evaluation import plots
from sentiment_cli.card.facts import model_card
from sentiment_cli.card.text import card_sections
from sentiment_cli.toml_writer import toml_tables
from sentiment_cli.cli import app
from sentiment_cli.config import config_from_dict
from sentiment_cli.data.splits import Split, load_split, load_train_validation
from sentiment_cli.evaluation.evaluate import confident_errors
from sentiment_cli.inference.probabilities import softmax

from .conftest import ROOT, SMALL_DATA, small_config

runner = CliRunner()
PNG = b"\x89PNG\r\n\x1a\n"


def invoke(*args, input=None):
    return runner.invoke(app, [str(a) for a in args], input=input)


@pytest.fixture
def ckpt(trained_checkpoint, tmp_path):
    """A private copy of the session checkpoint (eval writes into the folder)."""
    return shutil.copytree(trained_checkpoint, tmp_path / "ckpt")


@pytest.fixture
def no_matplotlib(monkeypatch):
    """Make every ``import matplotlib...`` fail, as on a machine without the [plot] extra."""
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)
    assert not plots.plot_available()


# ----------------------------------------------------------------------------- library

def test_fingerprint_identifies_texts_and_labels():
    base = Split("train", ["good film", "bad film"], [1, 0]).fingerprint()
    assert base.startswith("sha256:") and len(base) == len("sha256:") + 64
    assert Split("x", ["good film", "bad film"], [1, 0]).fingerprint() == base
    assert Split("train", ["good film", "bad film"], [1, 1]).fingerprint() != base      # a flipped label
    assert Split("train", ["good filmbad", " film"], [1, 0]).fingerprint() != base     # same bytes, other cut
    assert Split("train", ["bad film", "good film"], [0, 1]).fingerprint() != base     # another order


def test_confident_errors_are_the_most_confident_mistakes_first():
    logits = np.array([[0.0, 3.0], [2.0, 0.0], [0.0, 1.0], [5.0, 0.0], [0.0, 0.5]], np.float32)
    logits = softmax(logits, 1.0, np.float32)   # the probabilities predict reports
    labels = [0, 1, 1, 1, 0]          # wrong: 0 (p=.95), 1 (p=.88), 3 (p=.99), 4 (p=.62); right: 2
    errors = confident_errors(logits, labels, 3)
    assert [e["index"] for e in errors] == [3, 0, 1]
    assert errors[0] == {"index": 3, "label": "negative", "probability": pytest.approx(1 / (1 + math.exp(-5))),
                         "true_label": "positive"}
    assert [e["index"] for e in confident_errors(logits, labels, 10)] == [3, 0, 1, 4]   # only 4 mistakes
    assert confident_errors(logits, labels, 0) == []


def test_config_in_the_card_reads_back_as_the_same_config():
    cfg = small_config(lr=3e-5, betas=(0.8, 0.99)).override("data", source='C:\\odd "path"')
    text = toml_tables(cfg.to_dict())
    assert config_from_dict(tomllib.loads(text), "card") == cfg


def test_training_writes_curves_card_and_fingerprint(trained_checkpoint):
    metrics = json.loads((trained_checkpoint / "metrics.json").read_text())
    train_split, _ = load_train_validation(str(SMALL_DATA), 0.1, metrics["seed"])
    assert metrics["data"]["fingerprint"] == train_split.fingerprint()
    png = (trained_checkpoint / "curves.png").read_bytes()
    assert png.startswith(PNG) and len(png) > 10_000
    from PIL import Image
    with Image.open(trained_checkpoint / "curves.png") as im:
        assert im.width > 2 * im.height > 400         # two panels side by side
    card = (trained_checkpoint / "README.md").read_text()
    assert card.startswith("# Model card: small")
    assert metrics["data"]["fingerprint"] in card and "![training curves" in card
    assert "| validation | 100 |" in card


# ----------------------------------------------------------------------------- CLI: predict --explain

def test_predict_explain_json_has_tokens_and_scores(ckpt, tmp_path):
    reviews = ["The plot was thin, but the acting was superb.", "Zyxwvq qwerty!", "Awful. " * 300]
    f = tmp_path / "reviews.txt"
    f.write_text("\n".join(reviews) + "\n")
    r = invoke("predict", "--explain", "--json", "--file", f, "--checkpoint", ckpt)
    assert r.exit_code == 0, r.output
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["text"] for x in lines] == reviews
    plain = [json.loads(line) for line in invoke("predict", *reviews, "--json", "--checkpoint", ckpt).stdout.splitlines()]
    for x, p in zip(lines, plain):
        assert set(x) == {"text", "label", "probability", "probabilities", "tokens", "scores", "offsets", "bias",
                          "target"}
        assert [x["text"][a:b] for a, b in x["offsets"]] == x["tokens"]   # each token's span of the text
        assert x["text"] == p["text"] and x["label"] == p["label"]
        assert x["probabilities"]["positive"] == pytest.approx(p["probabilities"]["positive"], abs=1e-5)
        assert len(x["tokens"]) == len(x["scores"]) > 0
        assert all(isinstance(t, str) for t in x["tokens"]) and all(isinstance(s, float) for s in x["scores"])
        # the scores add up to the logit margin; the probabilities' log-odds are that margin / temperature
        temperature = json.loads((ckpt / "config.json").read_text())["temperature"]
        margin = temperature * math.log(x["probabilities"]["positive"] / x["probabilities"]["negative"])
        assert sum(x["scores"]) + x["bias"] == pytest.approx(margin, abs=1e-3)
    assert lines[0]["tokens"] == ["The", "plot", "was", "thin,", "but", "the", "acting", "was", "superb."]
    assert lines[1]["tokens"] == ["Zyxwvq", "qwerty!"]
    assert len(lines[2]["tokens"]) == 200                           # max_length: the tokens the model saw


def test_predict_explain_renders_the_review_and_the_top_tokens(ckpt):
    r = invoke("predict", "--explain", "The plot was thin, but the acting was superb.", "--checkpoint", ckpt)
    assert r.exit_code == 0, r.output
    assert "The plot was thin, but the acting was superb." in r.stdout
    assert "▲ positive:" in r.stdout and "▼ negative:" in r.stdout and "logit(positive) - logit(negative)" in r.stdout


# ----------------------------------------------------------------------------- CLI: eval --errors, --plot

def test_eval_errors_json_lists_real_mistakes(ckpt):
    r = invoke("eval", "--split", "test", "--checkpoint", ckpt, "--json", "--errors", 1000)
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    cm = out["confusion_matrix"]
    errors = out["errors"]
    assert len(errors) == cm[0][1] + cm[1][0] > 0                 # every mistake, no more
    assert len([e for e in errors if e["true_label"] == "negative"]) == cm[0][1]
    texts = load_split(str(SMALL_DATA), "test", 0.1, 0).texts
    for e in errors:
        assert set(e) == {"index", "label", "probability", "true_label", "text"}
        assert e["label"] != e["true_label"] and e["probability"] >= 0.5
        assert e["text"] == texts[e["index"]]
    probs = [e["probability"] for e in errors]
    assert probs == sorted(probs, reverse=True)
    five = json.loads(invoke("eval", "--split", "test", "--checkpoint", ckpt, "--json", "--errors", 5).stdout)
    assert five["errors"] == errors[:5]
    assert "errors" not in json.loads(invoke("eval", "--split", "test", "--checkpoint", ckpt, "--json").stdout)


def test_eval_errors_table_and_confusion_png(ckpt, tmp_path):
    png = tmp_path / "cm.png"
    r = invoke("eval", "--split", "test", "--checkpoint", ckpt, "--errors", 3, "--plot", png)
    assert r.exit_code == 0, r.output
    assert "3 most confident mistakes" in r.stdout and f"confusion matrix written to {png}" in r.stdout.replace("\n", "")
    assert png.read_bytes().startswith(PNG)
    r = invoke("eval", "--checkpoint", ckpt, "--plot", tmp_path / "no" / "cm.png")
    assert r.exit_code == 2 and r.stderr == f"error: --plot {tmp_path / 'no' / 'cm.png'}: folder {tmp_path / 'no'} does not exist\n"


def test_eval_is_recorded_for_info_and_the_card(ckpt):
    out = json.loads(invoke("eval", "--split", "test", "--checkpoint", ckpt, "--json").stdout)
    record = json.loads((ckpt / "eval_test.json").read_text())
    assert record["accuracy"] == out["accuracy"] and record["data"] == str(SMALL_DATA)
    card = json.loads(invoke("info", "--checkpoint", ckpt, "--json").stdout)
    assert card["metrics"]["test"]["accuracy"] == out["accuracy"]
    assert card["metrics"]["test"]["f1_macro"] == out["f1"]["macro"]
    assert "| test | 500 |" in (ckpt / "README.md").read_text()
    # a record of other weights (say, a previous run in the same folder) is not shown
    record["weights"] = "sha256:" + "0" * 64
    (ckpt / "eval_test.json").write_text(json.dumps(record))
    assert "test" not in json.loads(invoke("info", "--checkpoint", ckpt, "--json").stdout)["metrics"]


# ----------------------------------------------------------------------------- CLI: info

def test_info_json_is_the_model_card(ckpt):
    r = invoke("info", "--checkpoint", ckpt, "--json")
    assert r.exit_code == 0, r.output
    card = json.loads(r.stdout)
    assert {"checkpoint", "name", "created", "labels", "config", "vocab_size", "parameters", "data", "training",
            "metrics", "versions", "files"} <= set(card)
    d_model = card["config"]["model"]["d_model"]
    assert card["parameters"]["embedding"] == card["vocab_size"] * d_model
    assert card["parameters"]["total"] == card["parameters"]["embedding"] + card["parameters"]["non_embedding"]
    metrics = json.loads((ckpt / "metrics.json").read_text())
    assert card["parameters"] == metrics["num_parameters"]
    assert card["data"]["fingerprint"] == metrics["data"]["fingerprint"]
    assert card["data"]["train_examples"] == 900 and card["metrics"]["validation"]["num_examples"] == 100
    best = metrics["history"][metrics["best_epoch"] - 1]
    assert card["metrics"]["validation"]["accuracy"] == best["validation_accuracy"]
    assert card["training"]["device"] == "cpu" and card["versions"]["torch"] == torch.__version__
    assert card["files"] == {"curves": "curves.png", "card": "README.md"}


def test_info_table_and_a_checkpoint_without_fingerprint(ckpt):
    r = invoke("info", "--checkpoint", ckpt)
    assert r.exit_code == 0, r.output
    for text in ("model card: ckpt", "results", "validation", "parameters", "fingerprint", "sha256:", "versions"):
        assert text in r.stdout
    metrics = json.loads((ckpt / "metrics.json").read_text())
    del metrics["data"]["fingerprint"]                  # as written before fingerprints existed
    (ckpt / "metrics.json").write_text(json.dumps(metrics))
    assert json.loads(invoke("info", "--checkpoint", ckpt, "--json").stdout)["data"]["fingerprint"] == "unknown"
    assert "unknown" in invoke("info", "--checkpoint", ckpt).stdout


def test_info_without_a_checkpoint_is_one_line(tmp_path):
    r = invoke("info", "--checkpoint", tmp_path / "none")
    assert r.exit_code == 1
    assert r.stderr.strip() == f"error: no trained model at {tmp_path / 'none'}; run `sentiment train` first"


# ----------------------------------------------------------------------------- without matplotlib

def test_without_matplotlib_training_and_eval_still_work(no_matplotlib, ckpt, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "curves.png").write_bytes(b"a picture of an earlier run")
    (out / "config.json").write_text('{"format_version": 1}')   # the earlier run's folder (issue 56: not the user's)
    cfg = tmp_path / "small.toml"
    cfg.write_text((ROOT / "configs" / "seed.toml").read_text().replace("vocab_size = 50000", "vocab_size = 2000"))
    r = invoke("train", "--config", cfg, "--data", SMALL_DATA, "--output", out, "--epochs", 1, "--device", "cpu")
    assert r.exit_code == 0, r.output
    notes = [line for line in r.output.splitlines() if "pip install" in line]
    assert notes == ['note: no curves.png: matplotlib is not installed; to get the picture: '
                     'pip install "sentiment-cli[plot]"']
    assert not (out / "curves.png").exists()                 # no stale picture of another run
    assert (out / "README.md").exists() and (out / "model.safetensors").exists()
    assert "![training curves" not in (out / "README.md").read_text()

    r = invoke("eval", "--split", "test", "--checkpoint", ckpt, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["num_examples"] == 500
    png = tmp_path / "cm.png"
    r = invoke("eval", "--split", "test", "--checkpoint", ckpt, "--plot", png)
    assert r.exit_code == 1 and not png.exists()
    assert r.stderr == 'error: matplotlib is not installed; to get the picture: pip install "sentiment-cli[plot]"\n'


def test_eval_on_a_read_only_checkpoint_still_prints_its_result(ckpt, monkeypatch):
    def refuse(path, obj):
        raise PermissionError(13, "Permission denied", str(path))
    monkeypatch.setattr(checkpoint, "write_json", refuse)
    r = invoke("eval", "--split", "test", "--checkpoint", ckpt, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["num_examples"] == 500
    assert f"note: result not recorded in {ckpt} (Permission denied)" in r.stderr.splitlines()
    assert not (ckpt / "eval_test.json").exists()


@pytest.mark.slow   # a `sentiment predict` process
def test_predict_explain_imports_neither_datasets_nor_matplotlib(trained_checkpoint):
    import subprocess
    code = ("import sys\n"
            "from sentiment_cli.cli import app\n"
            "try:\n"
            f"    app(['predict', '--explain', 'Loved it.', '--checkpoint', {str(trained_checkpoint)!r}, '--json'])\n"
            "except SystemExit as e:\n"
            "    assert e.code in (0, None), e.code\n"
            "print('datasets' in sys.modules, 'matplotlib' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert json.loads(out.splitlines()[0])["tokens"] == ["Loved", "it."]
    assert out.splitlines()[-1] == "False False"


def test_card_names_each_dropout_site(trained_checkpoint, tmp_path):
    card = model_card(trained_checkpoint)
    card["config"]["model"].update(dropout=0.1, activation_dropout=0.3, attention_dropout=0.0, head_dropout=0.2)
    arch = dict(dict(card_sections(card))["Model"])["architecture"]
    assert "dropout 0.1 (embeddings, residuals), feed-forward hidden layer 0.3, before the head 0.2;" in arch
    # A checkpoint from before attention and feed-forward dropout had keys of their own trained with `dropout`.
    old = tmp_path / "old"
    shutil.copytree(trained_checkpoint, old)
    config = json.loads((old / "config.json").read_text())
    config["model"]["dropout"] = 0.1
    for key in ("activation_dropout", "attention_dropout"):
        del config["model"][key]
    (old / "config.json").write_text(json.dumps(config))
    arch = dict(dict(card_sections(model_card(old)))["Model"])["architecture"]
    assert "dropout 0.1 (embeddings, residuals), feed-forward hidden layer 0.1, attention 0.1" in arch


def test_card_says_whether_the_model_reads_word_bigrams(trained_checkpoint):
    card = model_card(trained_checkpoint)
    vocabulary = dict(dict(card_sections(card))["Model"])["vocabulary"]
    assert "word-level tokens" in vocabulary and "bigram" not in vocabulary
    card["config"]["model"]["bigram_buckets"] = 131072
    vocabulary = dict(dict(card_sections(card))["Model"])["vocabulary"]
    assert vocabulary.endswith("; word bigrams hashed into 131,072 buckets")


def test_card_gives_the_token_embeddings_own_learning_rate_when_it_has_one(trained_checkpoint):
    card = model_card(trained_checkpoint)
    optimizer = dict(dict(card_sections(card))["Training"])["optimizer"]
    lr = card["config"]["training"]["lr"]
    assert optimizer.startswith(f"AdamW, lr {lr:g} (") and "token embedding" not in optimizer
    card["config"]["training"].update(lr=0.002, embedding_lr_scale=10.0)
    optimizer = dict(dict(card_sections(card))["Training"])["optimizer"]
    assert optimizer.startswith("AdamW, lr 0.002, token embedding 0.02 (")


def test_card_counts_the_encoder_layers_in_the_singular_and_the_plural(trained_checkpoint):
    card = model_card(trained_checkpoint)
    for n, words in ((1, "1 post-norm encoder layer,"), (2, "2 post-norm encoder layers,")):
        card["config"]["model"].update(n_layers=n, norm_first=False)
        assert words in dict(dict(card_sections(card))["Model"])["architecture"]


@pytest.mark.parametrize("key", ["ngram_score", "teacher"])
def test_card_names_the_ngram_scores_form_from_its_record_new_or_old(trained_checkpoint, tmp_path, key):
    """metrics.json files the n-gram score's fit under "ngram_score"; a checkpoint from before the rename has it
    under "teacher". Either way the card names the form fitted and distillation's teacher."""
    folder = tmp_path / key
    shutil.copytree(trained_checkpoint, folder)
    config = json.loads((folder / "config.json").read_text())
    config["model"].update(ngram_buckets=1009, ngram_fit="auto")
    config["training"]["distill_reviews"] = 200
    (folder / "config.json").write_text(json.dumps(config))
    metrics = json.loads((folder / "metrics.json").read_text())
    metrics.pop("ngram_score", None)
    metrics[key] = {"form": "lr", "C": 10.0, "chosen_by": "cross-validation",
                    "model": "logistic regression over hashed token 1-3-grams"}
    (folder / "metrics.json").write_text(json.dumps(metrics))
    card = model_card(folder)
    assert card["ngram_score"] == ("1 x an n-gram score (logistic regression over token 1-3-grams hashed into "
                                   "1,009 buckets)")
    sections = dict(card_sections(card))
    assert card["ngram_score"] in dict(sections["Model"])["architecture"]
    assert "from a teacher, logistic regression over hashed token 1-3-grams, on 200" in str(sections["Training"])


def test_the_cards_optimizer_line_names_where_the_adversarial_loss_ran():
    """The model card's optimizer fact names the adversarial epsilon, and the batches it was kept to when
    ``adversarial_max_length`` is set."""
    from sentiment_cli.card.text import _fine_tuning_text

    card = {"training": {"epochs": 4, "epochs_planned": 4, "best_epoch": 3, "stopped_early": False},
            "config": {"data": {"validation_fraction": 0.1},
                       "training": {"lr": 2e-3, "schedule": "cosine", "weight_decay": 0.05, "batch_size": 64,
                                    "adversarial_epsilon": 2.0, "adversarial_max_length": 0}}}
    _, everywhere = _fine_tuning_text(card)
    assert everywhere.endswith("adversarial training (Miyato et al. 2017), epsilon 2")
    card["config"]["training"]["adversarial_max_length"] = 64
    _, short = _fine_tuning_text(card)
    assert short.endswith("epsilon 2 (batches of at most 64 tokens)")


def test_the_cards_validation_line_says_how_validation_was_held_out():
    """The card's "validation texts" fact: stratified and seeded by default, the file's last rows with
    validation_split 'last' (no seed), and drawn unstratified with several labels per text."""
    from sentiment_cli.card.text import _validation_text

    data = {"validation_examples": 779}
    assert _validation_text(data, {"validation_fraction": 0.1, "validation_split": "random"}, 7) == \
        "779 (10% of train, stratified, seed 7)"
    assert _validation_text(data, {"validation_fraction": 0.1, "validation_split": "last"}, 7) == \
        "779 (10% of train, its last rows in file order)"
    assert _validation_text({**data, "multi_label": True}, {"validation_fraction": 0.1, "validation_split": "blocks"},
                            7) == "779 (10% of train, in blocks, seed 7)"
