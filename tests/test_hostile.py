"""Hostile input: each case is either handled (exit 0, sane output) or one `error:` line with exit 2 / 1.

Usage errors (bad review, flag, config, file) exit 2; runtime errors (unusable
data, checkpoint, disk) exit 1; never a traceback without --debug.
"""

import json
import random
import subprocess
from pathlib import Path

import datasets
import pytest
import torch
from typer.testing import CliRunner

from sentiment_cli.cli import app
from sentiment_cli.errors import SentimentError

from .conftest import PYTHON, ROOT, SMALL_DATA, SUBPROCESS_ENV

runner = CliRunner()


def invoke(*args, input=None):
    return runner.invoke(app, [str(a) for a in args], input=input)


def assert_one_error_line(r, code, message):
    """Exit ``code``; stderr ends with exactly one ``error:`` line holding ``message``; no traceback.

    (``train`` may print progress lines such as ``loading DATA…`` before failing; they are not errors.)
    """
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], r.stderr
    assert message in errors[0], errors[0]
    assert "Traceback" not in r.stderr + r.stdout


def predictions(r):
    assert r.exit_code == 0, r.stderr
    out = [json.loads(line) for line in r.stdout.splitlines()]
    for p in out:
        assert p["label"] in ("negative", "positive")
        assert 0.0 <= p["probability"] <= 1.0
        assert sum(p["probabilities"].values()) == pytest.approx(1.0)
    return out


# ---------------------------------------------------------------------------- reviews that must work

STRANGE = ["Great film 🎬🍿👍🏽 loved it 😍", "סרט נהדר, ממש אהבתי", "فيلم رائع جدا", "mixed עברית and English",
           "bell\x07 escape\x1b[2J clear\x7f", "nul\x00inside", "\u202eoverride\u202c", "\u200b\u200d",
           "ｆｕｌｌｗｉｄｔｈ", "a" * 5000]


def test_emoji_rtl_control_and_nul_reviews_are_classified(trained_checkpoint):
    r = invoke("predict", *STRANGE, "--checkpoint", trained_checkpoint, "--json")
    assert [p["text"] for p in predictions(r)] == STRANGE     # echoed back unchanged, in order


def test_the_table_never_sends_control_sequences_to_the_terminal(trained_checkpoint):
    r = invoke("predict", *STRANGE[:7], "--checkpoint", trained_checkpoint)
    assert r.exit_code == 0, r.stderr
    assert "\x1b[2J" not in r.stdout and "\x00" not in r.stdout and "\x07" not in r.stdout
    assert "\u202e" not in r.stdout
    assert "\\x1b[2J" in r.stdout and "\\u202e" in r.stdout and "🎬" in r.stdout


def test_a_one_megabyte_review(trained_checkpoint):
    review = ("An astonishing, moving film. " * 40_000)[:1_000_000]
    assert len(review.encode()) == 1_000_000
    r = invoke("predict", "--file", "-", "--checkpoint", trained_checkpoint, "--json", input=review + "\n")
    [p] = predictions(r)
    assert p["text"] == review
    r = invoke("predict", review, "--checkpoint", trained_checkpoint)            # as an argument, as a table
    assert r.exit_code == 0 and "An astonishing" in r.stdout and len(r.stdout) < 5_000


def test_invalid_utf8_with_errors_replace_and_a_byte_order_mark(trained_checkpoint, tmp_path):
    f = tmp_path / "latin1.txt"
    f.write_bytes("\ufeffgood film\n".encode() + "café crème\n".encode("latin-1"))
    r = invoke("predict", "--file", f, "--errors", "replace", "--checkpoint", trained_checkpoint, "--json")
    assert [p["text"] for p in predictions(r)] == ["good film", "caf\ufffd cr\ufffdme"]
    r = invoke("predict", "caf\udce9", "--errors", "replace", "--checkpoint", trained_checkpoint, "--json")
    assert [p["text"] for p in predictions(r)] == ["caf\ufffd"]   # argv bytes Python could not decode


# ---------------------------------------------------------------------------- 100,000 reviews on stdin

# Peak RSS of the CLI process: VmHWM from /proc (reset by exec; ru_maxrss is not, so on Linux it would
# report the forking pytest process's size), falling back to getrusage elsewhere.
RSS_WRAPPER = (
    "import atexit, resource, sys\n"
    "def peak():\n"
    "    try:\n"
    "        return int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM:')).split()[1])\n"
    "    except OSError:\n"
    "        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
    "atexit.register(lambda: sys.stderr.write(f'peak_rss_kb={peak()}\\n'))\n"
    "from sentiment_cli.cli import main\n"
    "sys.argv = ['sentiment'] + sys.argv[1:]\n"
    "main()\n")


def _reviews(n, seed=0):
    words = "good bad great awful movie film plot acting boring superb terrible fun the a and".split()
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 60))) for _ in range(n)]


def _predict_stdin(checkpoint, lines):
    data = ("\n".join(lines) + "\n").encode()
    r = subprocess.run([PYTHON, "-c", RSS_WRAPPER, "predict", "--file", "-", "--json", "--checkpoint", checkpoint],
                       input=data, capture_output=True, cwd=ROOT, env=SUBPROCESS_ENV, timeout=300)
    rss = int(r.stderr.decode().rsplit("peak_rss_kb=", 1)[1].split()[0])
    return r, rss / 1024


@pytest.mark.slow   # a `sentiment predict` process streams a large input
def test_100k_reviews_on_stdin_stream_in_bounded_memory(trained_checkpoint, capsys):
    small, small_mb = _predict_stdin(trained_checkpoint, _reviews(2_000))
    lines = _reviews(100_000, seed=1)
    big, big_mb = _predict_stdin(trained_checkpoint, lines)
    with capsys.disabled():
        print(f"\n  predict --file - --json: peak RSS {small_mb:.0f} MiB for 2,000 reviews, "
              f"{big_mb:.0f} MiB for 100,000 reviews ({sum(map(len, lines)) / 2**20:.1f} MiB of text)")
    assert small.returncode == 0 and big.returncode == 0, big.stderr.decode()[-500:]
    out = big.stdout.decode().splitlines()
    assert len(out) == 100_000
    assert [json.loads(out[i])["text"] for i in (0, 54_321, 99_999)] == [lines[0], lines[54_321], lines[99_999]]
    # Holding all 100,000 inputs and results (the non-streaming way) costs ~400 MiB more; streaming ~nothing.
    assert big_mb < small_mb + 100


def test_a_line_too_long_to_be_a_review_is_refused_without_reading_it_all(trained_checkpoint):
    r = invoke("predict", "--file", "-", "--checkpoint", trained_checkpoint, input="word " * 3_600_000 + "\n")
    assert_one_error_line(r, 2, "stdin, line 1: longer than 16 MiB; expected one review per line")


@pytest.mark.slow   # a `sentiment predict` process streams a large input
def test_an_empty_line_deep_in_a_stream_names_its_line(trained_checkpoint):
    lines = _reviews(100_000, seed=2)
    lines[59_999] = "   "
    r = invoke("predict", "--file", "-", "--checkpoint", trained_checkpoint, "--json", input="\n".join(lines) + "\n")
    assert_one_error_line(r, 2, "stdin, line 60000: empty review")
    printed = r.stdout.splitlines()
    assert 58_000 < len(printed) < 60_000   # streamed: whole batches before the bad line were already printed
    assert json.loads(printed[-1])["text"] == lines[len(printed) - 1]


# ---------------------------------------------------------------------------- usage errors (exit 2)

@pytest.mark.parametrize("args, message", [
    (["predict", ""], "review 1 is empty"),
    (["predict", "fine", " \t\n "], "review 2 is empty"),
    (["predict", "caf\udce9"], "review 1: not valid UTF-8 (byte 3); pass --errors replace"),
    (["predict", "lone \ud800 surrogate"], "review 1: holds an unpaired surrogate"),
    (["predict", "--file", "{tmp}/nope.txt"], "--file {tmp}/nope.txt: no such file"),
    (["predict", "--file", "{tmp}"], "--file {tmp}: is a folder"),
    (["predict", "--file", "{latin1}"], "{latin1}, line 2: not valid UTF-8 (byte 3); fix the file or pass --errors replace"),
    (["predict", "--file", "{binary}"], "{binary}, line 1: contains a NUL byte; this looks like a binary file"),
    (["predict", "--file", "{python}"], "line 1: contains a NUL byte; this looks like a binary file"),
    (["predict", "--file", "{blank}"], "{blank}, line 2: empty review"),
    (["predict", "hi", "--batch-size", "0"], "Invalid value for '--batch-size'"),
    (["eval", "--split", "dev"], "'dev' is not one of 'train', 'validation', 'test'"),
    (["eval", "--batch-size", "-1"], "Invalid value for '--batch-size'"),
    (["train", "--epochs", "-1"], "[training] epochs must be >= 0, got -1"),
    (["train", "--config", "seed", "--epochs", "0"], "[training] epochs = 0 keeps the n-gram score alone, but "
                                                     "[model] ngram_buckets is 0 (no n-gram score)"),
    (["train", "--time-budget", "soon"], "--time-budget 'soon': give seconds or a duration such as 90, 90s, 5m or 1h"),
    (["train", "--batch-size", "-1"], "[training] batch_size must be >= 1, got -1"),
    (["train", "--lr", "0"], "[training] lr must be > 0.0, got 0.0"),
    (["train", "--lr", "-0.001"], "[training] lr must be > 0.0, got -0.001"),
    (["train", "--lr", "nan"], "[training] lr must be a finite number, got nan"),
    (["train", "--lr", "inf"], "[training] lr must be a finite number, got inf"),
    (["train", "--seed", "-1"], "[training] seed must be >= 0, got -1"),
    (["train", "--config", "{cfg_nan}"], "[training] lr must be a finite number, got nan"),
    (["train", "--config", "{cfg_neg}"], "[model] dropout must be >= 0.0, got -0.1"),
    (["train", "--config", "{cfg_zero}"], "[training] patience (3) stops on validation accuracy, but [data] "
                                          "validation_fraction is 0 (no validation); set patience = 0"),
    (["train", "--config", "{binary}"], "not valid TOML"),
    (["train", "--output", "{file}/ckpt"], "cannot create output folder {file}/ckpt: Not a directory"),
    (["train", "--output", "{file}"], "output {file} is a file, not a folder"),
])
def test_usage_errors(trained_checkpoint, tmp_path, args, message):
    (tmp_path / "latin1.txt").write_bytes("good\ncafé\n".encode("latin-1"))
    (tmp_path / "binary.bin").write_bytes(bytes(range(256)) * 8)
    (tmp_path / "blank.txt").write_text("good\n\nbad\n")
    (tmp_path / "file").write_text("a regular file")
    (tmp_path / "nan.toml").write_text("[training]\nlr = nan\n")
    (tmp_path / "neg.toml").write_text("[model]\ndropout = -0.1\n")
    (tmp_path / "zero.toml").write_text("[data]\nvalidation_fraction = 0.0\n[training]\npatience = 3\n")
    import os
    import sys
    fill = {"tmp": tmp_path, "latin1": tmp_path / "latin1.txt", "binary": tmp_path / "binary.bin",
            "blank": tmp_path / "blank.txt", "file": tmp_path / "file", "cfg_nan": tmp_path / "nan.toml",
            "cfg_neg": tmp_path / "neg.toml", "cfg_zero": tmp_path / "zero.toml",
            "python": os.path.realpath(sys.executable)}
    args = [a.format(**fill) for a in args]
    if args[0] in ("predict", "eval"):
        args += ["--checkpoint", str(trained_checkpoint)]
    else:   # these fail before any training starts; --epochs 1 only bounds the damage if one did not
        args += ["--data", str(SMALL_DATA), "--device", "cpu"] + ([] if "--epochs" in args else ["--epochs", "1"])
        args += [] if "--output" in args else ["--output", str(tmp_path / "out")]
    r = invoke(*args)
    assert_one_error_line(r, 2, message.format(**fill))


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs Linux sysfs: a folder even root cannot write")
def test_an_existing_folder_nobody_can_write_is_refused_before_training(tmp_path):
    """Tests run as root, for whom chmod blocks nothing and os.access says yes; sysfs refuses file creation."""
    r = invoke("train", "--data", SMALL_DATA, "--output", "/sys", "--epochs", 1, "--device", "cpu")
    assert_one_error_line(r, 2, "output folder /sys is not writable (")
    assert "epoch" not in r.stderr   # refused up front, not after an epoch of training


@pytest.mark.parametrize("command", ["train", "eval", "predict"])
def test_device_cuda_without_cuda(trained_checkpoint, tmp_path, monkeypatch, command):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)   # the point holds on a GPU machine too
    args = {"train": ["train", "--data", SMALL_DATA, "--output", tmp_path / "out"],
            "eval": ["eval", "--checkpoint", trained_checkpoint],
            "predict": ["predict", "hi", "--checkpoint", trained_checkpoint]}[command]
    r = invoke(*args, "--device", "cuda")
    assert_one_error_line(r, 2, "--device cuda: torch sees no CUDA device here; use --device cpu or auto")


# ---------------------------------------------------------------------------- runtime errors (exit 1)

def _dataset(root, train, test=None):
    """A Hub-layout folder of parquet files built from column dicts."""
    (root / "plain_text").mkdir(parents=True)
    for name, cols in (("train", train), ("test", test or train)):
        datasets.Dataset.from_dict(cols).to_parquet(str(root / "plain_text" / f"{name}-00000-of-00001.parquet"))
    return root


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "missing", "data folder {d}/missing does not exist"),
    (lambda d: (d / "empty").mkdir() or d / "empty", "cannot load a dataset from {d}/empty: The directory at"),
    (lambda d: _dataset(d / "cols", {"body": ["a", "b"], "score": [0, 1]}),
     "split 'train': no text column (looked for text, review, sentence, content); name it with --text-column"),
    (lambda d: _dataset(d / "nolabel", {"text": ["a", "b"]}), "split 'train': no label column"),
    (lambda d: _dataset(d / "oneclass", {"text": ["a", "b", "c"] * 5, "label": [2] * 15}),
     "only one class ('2') in the training data; a classifier needs at least two"),
    (lambda d: _dataset(d / "frac", {"text": ["a", "b"] * 5, "label": [0.5, 1.0] * 5}),
     "column 'label' holds fractional numbers such as 0.5"),
    (lambda d: _dataset(d / "none", {"text": ["a", "b"] * 5, "label": [None, 1] * 5}),
     "split 'train', row 1: no label (column 'label' is empty; 5 such rows)"),
    (lambda d: _dataset(d / "nulltext", {"text": ["a", None] * 5, "label": [0, 1] * 5}),
     "split 'train', row 2: no text (column 'text' is empty; 5 such rows)"),
    (lambda d: _dataset(d / "inttext", {"text": [1, 2] * 5, "label": [0, 1] * 5}),
     "split 'train': column 'text' holds int64, not text"),
])
def test_unusable_data_is_a_runtime_error(tmp_path, make, message):
    data = make(tmp_path)
    # The seed config: the default one would first ask for its pretrained embeddings (`sentiment pretrain`).
    r = invoke("train", "--config", ROOT / "configs" / "seed.toml", "--data", data, "--output", tmp_path / "out",
               "--epochs", 1, "--device", "cpu")
    assert_one_error_line(r, 1, message.format(d=tmp_path))


def test_a_full_disk_during_training_names_the_file(tmp_path, monkeypatch):
    import errno

    from sentiment_cli import checkpoint

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))
    monkeypatch.setattr(checkpoint, "atomic_write", full)
    cfg = tmp_path / "small.toml"
    cfg.write_text((ROOT / "configs" / "seed.toml").read_text().replace("vocab_size = 50000", "vocab_size = 2000"))
    r = invoke("train", "--config", cfg, "--data", SMALL_DATA, "--output", tmp_path / "out", "--epochs", 1,
               "--device", "cpu")
    assert_one_error_line(r, 1, f"{tmp_path / 'out' / 'trainer_state'}/")   # the first file a run writes, named
    assert r.stderr.strip().endswith(": No space left on device")


def test_debug_shows_the_traceback(tmp_path):
    r = runner.invoke(app, ["--debug", "train", "--data", str(tmp_path / "missing"), "--output", str(tmp_path / "o")])
    # raised as the library's own error, not turned into one line (that path ends in SystemExit)
    assert r.exit_code != 0 and isinstance(r.exception, SentimentError), repr(r.exception)
    assert "error:" not in r.output


@pytest.mark.slow   # over 5 s on 2 cores: the full suite runs it, the fast lane does not (docs/development.md)
def test_default_config_pretrains_first_and_says_what_to_change_when_the_data_cannot_do_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # no pretrained folder here: train runs the pretraining stage itself
    r = invoke("train", "--data", SMALL_DATA, "--output", tmp_path / "out", "--device", "cpu",
               "--set", "pretrain.splits=unsupervised+train")
    # asked to pretrain on unlabelled text, which the committed slice lacks (the rules would have read train)
    assert_one_error_line(r, 1, f"{SMALL_DATA} has no 'unsupervised' split (it has: train, test) and [data] "
                                "unlabelled is empty; give unlabelled text with --unlabelled PATH, or pretrain on "
                                "the training reviews alone with --set pretrain.splits=train")
    assert "no pretrained encoder in checkpoints/pretrained-imdb_small-" in r.stderr
    assert not list(tmp_path.glob("checkpoints/pretrained*"))   # nothing left behind
