"""The CLI end to end on the committed IMDB slice, through Typer's CliRunner and a real subprocess."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from sentiment_cli.cli import app

from .conftest import ROOT, SMALL_DATA

runner = CliRunner()


def invoke(*args, input=None):
    return runner.invoke(app, [str(a) for a in args], input=input)


@pytest.fixture(scope="module")
def cli_checkpoint(tmp_path_factory):
    """`sentiment train` on the slice, through the CLI."""
    out = tmp_path_factory.mktemp("cli") / "ckpt"
    cfg = tmp_path_factory.mktemp("cfg") / "small.toml"
    cfg.write_text((ROOT / "configs" / "seed.toml").read_text().replace("vocab_size = 50000", "vocab_size = 5000"))
    r = invoke("train", "--config", cfg, "--data", SMALL_DATA, "--output", out,
               "--epochs", 2, "--batch-size", 64, "--device", "cpu", "--seed", 7)
    assert r.exit_code == 0, r.output
    assert "training summary" in r.stdout and "best epoch" in r.stdout
    assert "fitted on the validation split: ECE" in r.stdout   # the temperature, at the end of training
    return out


def test_train_writes_the_checkpoint_folder(cli_checkpoint):
    assert {p.name for p in cli_checkpoint.iterdir()} >= {"config.json", "model.safetensors",
                                                          "tokenizer.json", "metrics.json"}
    metrics = json.loads((cli_checkpoint / "metrics.json").read_text())
    assert metrics["seed"] == 7 and len(metrics["history"]) == 2
    assert metrics["config"]["training"]["batch_size"] == 64


def test_eval_json_follows_the_output_contract(cli_checkpoint):
    r = invoke("eval", "--split", "test", "--checkpoint", cli_checkpoint, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["split"] == "test" and out["num_examples"] == 500 and out["labels"] == ["negative", "positive"]
    cm = out["confusion_matrix"]   # the accuracy is the confusion matrix's diagonal over the reviews
    assert out["accuracy"] == pytest.approx((cm[0][0] + cm[1][1]) / 500) and sum(map(sum, cm)) == 500
    for key in ("precision", "recall", "f1"):
        assert set(out[key]) == {"negative", "positive", "macro", "weighted"}
    assert out["support"] == {"negative": 250, "positive": 250}
    cm = out["confusion_matrix"]
    assert sum(map(sum, cm)) == 500 and sum(cm[0]) == 250
    assert out["accuracy"] == pytest.approx((cm[0][0] + cm[1][1]) / 500)
    assert out["examples_per_second"] > 0


def test_eval_tables_and_validation_split(cli_checkpoint):
    r = invoke("eval", "--split", "validation", "--checkpoint", cli_checkpoint)
    assert r.exit_code == 0, r.output
    assert "validation: 100 texts" in r.stdout and "confusion matrix" in r.stdout and "macro" in r.stdout


def test_predict_arguments_table_and_json(cli_checkpoint):
    r = invoke("predict", "A moving, beautifully acted film.", "Awful.", "--checkpoint", cli_checkpoint)
    assert r.exit_code == 0, r.output
    assert "probability" in r.stdout and ("positive" in r.stdout or "negative" in r.stdout)
    r = invoke("predict", "A moving, beautifully acted film.", "Awful.", "--checkpoint", cli_checkpoint, "--json")
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["text"] for x in lines] == ["A moving, beautifully acted film.", "Awful."]
    for x in lines:
        assert x["label"] in ("positive", "negative")
        assert x["probability"] == max(x["probabilities"].values())
        assert sum(x["probabilities"].values()) == pytest.approx(1.0)


def test_predict_from_file_and_stdin_match_arguments(cli_checkpoint, tmp_path):
    reviews = ["Great fun from start to finish.", "I want my two hours back.", "Meh."]
    f = tmp_path / "reviews.txt"
    f.write_text("\n".join(reviews) + "\n")
    by_args = invoke("predict", *reviews, "--checkpoint", cli_checkpoint, "--json").stdout
    by_file = invoke("predict", "--file", f, "--checkpoint", cli_checkpoint, "--json").stdout
    by_stdin = invoke("predict", "--file", "-", "--checkpoint", cli_checkpoint, "--json",
                      input="\n".join(reviews) + "\n").stdout
    assert by_args == by_file == by_stdin and len(by_args.splitlines()) == 3


def test_prediction_does_not_depend_on_the_batch(cli_checkpoint):
    review = "The plot was thin, but the acting was superb."
    alone = json.loads(invoke("predict", review, "--checkpoint", cli_checkpoint, "--json").stdout)
    others = ["word " * 190, "Short.", review, "Another review that is a little longer than the short one."]
    r = invoke("predict", *others, "--checkpoint", cli_checkpoint, "--json", "--batch-size", 4)
    together = json.loads(r.stdout.splitlines()[2])
    assert together["probabilities"]["positive"] == pytest.approx(alone["probabilities"]["positive"], abs=1e-5)


@pytest.mark.parametrize("args, code, message", [
    (["predict", "hi", "--checkpoint", "{missing}"], 1, "no trained model at {missing}; run `sentiment train` first"),
    (["predict", "   ", "--checkpoint", "{ckpt}"], 2, "review 1 is empty"),
    (["predict", "--checkpoint", "{ckpt}"], 2, "no review given"),
    (["eval", "--split", "dev", "--checkpoint", "{ckpt}"], 2, "'dev' is not one of"),
    (["train", "--config", "{badcfg}"], 2, "unknown key [model] layers"),
    (["train", "--config", "no/such.toml"], 2, "config file not found"),
    (["train", "--config", "{smallcfg}", "--epochs", "0"], 2, "[training] epochs = 0 keeps the n-gram score alone"),
    (["eval", "--checkpoint", "{ckpt}", "--data", "./no/such/folder"], 1, "does not exist"),
])
def test_errors_are_one_line_and_a_meaningful_exit_code(cli_checkpoint, tmp_path, args, code, message):
    bad = tmp_path / "bad.toml"
    bad.write_text("[model]\nlayers = 2\n")
    small = tmp_path / "small.toml"
    small.write_text(f"[data]\nsource = '{SMALL_DATA}'\n")
    fill = {"missing": str(tmp_path / "none"), "ckpt": str(cli_checkpoint), "badcfg": str(bad), "smallcfg": str(small)}
    r = invoke(*[a.format(**fill) for a in args])
    assert r.exit_code == code, r.output
    assert message.format(**fill) in r.stderr
    assert "Traceback" not in r.output and "Traceback" not in r.stderr
    if code == 1 or "review" in message or "config" in message or "key" in message:
        assert r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow   # `sentiment` processes
def test_predict_subprocess_does_not_import_datasets(cli_checkpoint):
    code = ("import sys\n"
            "from sentiment_cli.cli import app\n"
            "try:\n"
            f"    app(['predict', 'Loved it.', '--checkpoint', {str(cli_checkpoint)!r}, '--json'])\n"
            "except SystemExit as e:\n"
            "    assert e.code in (0, None), e.code\n"
            "print('datasets' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.splitlines()[0])["label"] in ("positive", "negative")
    assert out.splitlines()[-1] == "False"


@pytest.mark.slow   # `sentiment` processes
def test_python_dash_m_and_help():
    r = subprocess.run([sys.executable, "-m", "sentiment_cli", "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    for cmd in ("train", "eval", "predict"):
        assert cmd in r.stdout


@pytest.mark.parametrize("command", ["train", "pretrain", "eval", "predict", "info"])
def test_help_keeps_bracketed_names(command):
    # Rich markup swallows an unescaped "[model]" and left "TOML config file (, , )" in pretrain's help.
    r = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    assert "(, " not in r.output and "()" not in r.output
    if command in ("train", "pretrain"):
        assert {"train": "[training]", "pretrain": "[model]"}[command] in r.output


@pytest.mark.parametrize("command", ["train", "pretrain", "eval", "predict", "info"])
def test_help_wraps_paragraphs_only_at_the_terminal_width(command):
    # Typer's rich help keeps a docstring's line breaks: pretrain's read "stops at the next step (word2vec: the"
    # with "next epoch)" on a line of its own.
    import inspect

    callback = next(c.callback for c in app.registered_commands if (c.name or c.callback.__name__) == command)
    r = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    lines = [" ".join(line.split()) for line in r.output.splitlines()]
    for paragraph in inspect.cleandoc(callback.__doc__).split("\n\n"):
        assert " ".join(paragraph.split()) in lines, paragraph


def test_train_shows_its_notes_verbatim(tmp_path, monkeypatch):
    # Rich markup must not eat "[training]" in the note, nor "[b]" in the folder name.
    from sentiment_cli.training import run as train_module

    monkeypatch.setattr(train_module, "native_bf16", lambda device: False)   # a CPU without bf16 instructions
    cfg = tmp_path / "bf16.toml"
    cfg.write_text((ROOT / "configs" / "seed.toml").read_text().replace("vocab_size = 50000", "vocab_size = 5000")
                   .replace("autocast_bf16 = false", "autocast_bf16 = true"))
    r = invoke("train", "--config", cfg, "--data", SMALL_DATA, "--output", tmp_path / "out[b]", "--epochs", 1,
               "--device", "cpu")
    assert r.exit_code == 0, r.output
    assert "note: this CPU has no bfloat16 instructions" in r.stderr
    assert "[training] autocast_bf16 = false turns it off" in r.stderr
    assert f"saved to {tmp_path / 'out[b]'}" in " ".join(r.stdout.split())   # the folder, brackets and all


def test_stage_lines_show_paths_verbatim():
    import io

    from rich.console import Console

    from sentiment_cli.cli.progress import RichTrainCallbacks

    buf = io.StringIO()
    RichTrainCallbacks(Console(file=buf, width=200)).on_stage("starting from the pretrained weights in runs/[b]")
    assert "runs/[b]" in buf.getvalue()


def test_presets_and_set_overrides_from_the_command_line(tmp_path):
    r = invoke("train", "--config", "seed", "--set", "data.vocab_size=3000", "--set", "training.batch_size=32",
               "--data", SMALL_DATA, "--output", tmp_path / "out", "--epochs", 1, "--device", "cpu", "--json")
    assert r.exit_code == 0, r.output
    config = json.loads(r.stdout)["config"]
    assert (config["data"]["vocab_size"], config["training"]["batch_size"], config["training"]["epochs"]) == \
        (3000, 32, 1)
    assert config["model"]["d_model"] == 32   # the rest is the seed preset's


@pytest.mark.parametrize("args, message", [
    (["--set", "training.lr=abc"], "error: --set: [training] lr must be a number, got 'abc'"),
    (["--set", "training.epochs=2", "--epochs", "3"],
     "error: [training] epochs is set both by --set and by its own flag; give one"),
    (["--set", "epochs=2"], "error: --set epochs=2: expected section.key=value, e.g. training.lr=1e-3"),
    (["--config", "nope"], "error: nope: no such preset or config file (presets: default, seed, sst5, gpu; "
                           "or give the path of a TOML file)"),
    (["--resume", "--set", "training.lr=1"],
     "error: --resume continues the saved run with its saved settings; drop --set"),
])
def test_bad_config_options_are_one_line_usage_errors(tmp_path, args, message):
    r = invoke("train", *args, "--output", tmp_path / "x")
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines()[0].startswith(message) and len(r.stderr.strip().splitlines()) == 1


def test_config_prints_toml_that_reads_back_and_the_reference(tmp_path):
    from sentiment_cli.config import load_config

    r = invoke("config", "--config", "seed", "--set", "training.epochs=2", "--set", "model.d_model=64")
    assert r.exit_code == 0, r.output
    (tmp_path / "my.toml").write_text(r.stdout)
    cfg = load_config(tmp_path / "my.toml")
    assert cfg == load_config("seed").override("training", epochs=2).override("model", d_model=64)
    r = invoke("config", "--reference")
    assert r.exit_code == 0 and r.stdout == (ROOT / "docs" / "configuration.md").read_text()


def test_help_lists_the_presets():
    for command in ("train", "pretrain", "config"):
        # wide, as the tests above: at 80 columns the list wraps across the help table's rows
        r = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert "Preset (default, seed, sst5, gpu)" in " ".join(r.stdout.split()), command
