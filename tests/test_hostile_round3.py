"""Hostile input, third round (issue 56): outputs the user did not make, the search's lock, `check` on
multi-label models and its bounds, the Python API's inputs, binary Parquet columns, crafted tokenizers,
unbounded layers. Each test failed before its fix.
"""

from __future__ import annotations

import json
import fcntl
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sentiment_cli.cli import app
from sentiment_cli.config import load_config
from sentiment_cli.errors import UsageError

from .conftest import ROOT
from .test_hostile import assert_one_error_line

REVIEWS = ROOT / "tests" / "data" / "reviews_small" / "reviews.csv"   # 600 IMDB reviews
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------- 1. train --output

def test_train_refuses_a_folder_of_the_users_files_without_force(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "README.md").write_text("my notes")
    (proj / "config.json").write_text('{"mine": 1}')
    r = invoke("train", "--config", "seed", "--data", REVIEWS, "--output", proj, "--epochs", 1)
    assert_one_error_line(r, 2, f"--output {proj}: the folder holds files this command did not write "
                                "(README.md, config.json); pass --force")
    assert _tree(proj) == {"README.md": b"my notes", "config.json": b'{"mine": 1}'}


def test_train_never_writes_into_its_data_folder_force_or_not(tmp_path):
    data = Path(shutil.copytree(REVIEWS.parent, tmp_path / "data"))
    before = _tree(data)
    for extra in ((), ("--force",)):
        r = invoke("train", "--config", "seed", "--data", data, "--output", data, "--epochs", 1, *extra)
        assert_one_error_line(r, 2, "would write into the --data")
    import sentiment_cli
    with pytest.raises(UsageError, match="would write into the --data"):
        sentiment_cli.train(data, config="seed", output=data, epochs=1)
    (data / "train").mkdir()   # an existing folder inside the data: a split's, say
    before = _tree(data)
    with pytest.raises(UsageError, match="would write into the --data"):
        sentiment_cli.train(data, config="seed", output=data / "train", epochs=1, force=True)
    assert _tree(data) == before


def test_train_into_its_own_checkpoint_folder_and_an_empty_one_still_works(tmp_path):
    from sentiment_cli.outputs import check_output_folder

    (tmp_path / "empty").mkdir()
    check_output_folder(tmp_path / "empty")
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "config.json").write_text('{"format_version": 3, "labels": ["a", "b"]}')
    (ck / "model.safetensors").write_bytes(b"x")
    check_output_folder(ck)
    check_output_folder(tmp_path / "new")
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "a.txt").write_text("x")
    with pytest.raises(UsageError, match="pass --force"):
        check_output_folder(tmp_path / "user")
    check_output_folder(tmp_path / "user", force=True)
    check_output_folder(tmp_path / "user" / "model", inputs=[("--data", tmp_path / "user")])   # a new subfolder
    with pytest.raises(UsageError, match="would write into --data"):
        check_output_folder(tmp_path, force=True, inputs=[("--data", tmp_path / "user" / "a.txt")])


# ---------------------------------------------------------------------------- 2. export --data

def test_export_never_writes_over_its_data_even_with_force(trained_checkpoint, tmp_path):
    held = tmp_path / "held.csv"
    shutil.copy(REVIEWS, held)
    before = held.read_bytes()
    r = invoke("export", "--format", "onnx", "--checkpoint", trained_checkpoint, "--output", held,
               "--data", held, "--force", "--parity-reviews", 20)
    assert_one_error_line(r, 2, f"--output {held}: would write over --data {held}")
    assert held.read_bytes() == before


# ---------------------------------------------------------------------------- 6. the search and the lock

def test_a_search_into_a_locked_folder_is_refused_before_the_data_and_leaves_the_trials(tmp_path):
    """A second `train` on a folder whose first run is searching: refused by the lock before any data is read,
    its trial folder (``.NAME.search``) and lock file untouched."""
    from sentiment_cli.training.lock import LOCK_FILE, FolderInUse
    from sentiment_cli.training.run import train

    out = tmp_path / "o_w"
    out.mkdir()
    work = tmp_path / ".o_w.search"
    (work / "trial-1").mkdir(parents=True)
    (work / "trial-1" / "live").write_text("trial")
    fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT)   # the first run's lock (another open file)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.pwrite(fd, b"4242\n", 0)
        cfg = load_config("default").override("data", source=str(tmp_path / "missing.csv"))
        cfg = cfg.override("training", time_budget=120.0, device="cpu")
        with pytest.raises(FolderInUse, match=r"in use by another run \(pid 4242\)"):
            train(cfg, out, fit_to_data=frozenset())   # the data does not exist: the lock is checked first
    finally:
        os.close(fd)
    assert (work / "trial-1" / "live").read_text() == "trial" and (out / LOCK_FILE).exists()


def test_a_shared_lock_is_reentered_within_the_process(tmp_path):
    from sentiment_cli.training.lock import LOCK_FILE, output_lock

    with output_lock(tmp_path, share=True):
        with output_lock(tmp_path):
            pass
        assert (tmp_path / LOCK_FILE).exists()   # the inner release leaves the outer holder's file
    assert not (tmp_path / LOCK_FILE).exists()


# ---------------------------------------------------------------------------- 3. check on a multi-label model

def test_check_on_a_multi_label_model_gives_predicts_label_sets(multilabel_checkpoint, tmp_path):
    from sentiment_cli.behaviour.run import check_checkpoint
    from sentiment_cli.behaviour.suite import load_suite
    from sentiment_cli.inference.predictor import Predictor

    predictor = Predictor(multilabel_checkpoint)
    texts = ["Thank you so much, this made my day!", "I am so angry about this.", "What a lovely surprise."]
    sets = predictor.predict(texts)
    wanted = sets[0].labels[0] if sets[0].labels else predictor.labels[0]
    suite = tmp_path / "s.toml"
    suite.write_text('name = "ml"\nsamples = 3\n[[test]]\nname = "t"\ncapability = "c"\ntype = "MFT"\n'
                     f'expect = "{wanted}"\ntemplates = {texts!r}\n'.replace("'", '"'))
    report, rows = check_checkpoint(multilabel_checkpoint, load_suite(suite))
    proba = predictor.predict_proba(texts)
    for text, s, p in zip(texts, sets, proba):
        row = next(r for r in rows if r["text"] == text)
        assert row["label"] == ", ".join(s.labels)   # predict's label set, not a softmax's argmax
        assert row[f"p_{wanted}"] == pytest.approx(float(p[predictor.labels.index(wanted)]), abs=1e-5)
    first = next(r for r in rows if r["text"] == texts[0])
    assert first["passed"] is (wanted in sets[0].labels) is True


# ---------------------------------------------------------------------------- 4, 5. check's bounds

def _words(prefix: str, n: int) -> str:
    return "[" + ", ".join(f'"{prefix}{i}"' for i in range(n)) + "]"


def test_check_refuses_a_suite_of_ten_million_cases_before_building_any(trained_checkpoint, tmp_path):
    import time

    from sentiment_cli.behaviour.cases import MAX_CASES, MAX_CHARACTERS
    suite = tmp_path / "big.toml"
    templates = ", ".join(f'"t{i} {{a}} {{b}}"' for i in range(10_000))
    suite.write_text(f'name = "big"\nsamples = 1000\n[lexicons]\na = {_words("a", 1000)}\nb = {_words("b", 1000)}\n'
                     f'[[test]]\nname = "t"\ncapability = "c"\ntype = "MFT"\nexpect = "positive"\n'
                     f"templates = [{templates}]\n")
    start = time.perf_counter()
    r = invoke("check", "--checkpoint", trained_checkpoint, "--suite", suite)
    assert_one_error_line(r, 2, f"up to 10,000,000 cases (templates x samples), over the limit of {MAX_CASES:,}; "
                                "lower samples, or raise the limit with --max-cases")
    assert time.perf_counter() - start < 10
    huge = tmp_path / "huge.toml"   # one template repeating a 1 MB entry 3,000 times: a 3 GB sentence
    huge.write_text(f'name = "huge"\n[lexicons]\nw = ["{"x" * 1_000_000}"]\n[[test]]\nname = "t"\ncapability = "c"\n'
                    f'type = "MFT"\nexpect = "positive"\ntemplates = ["{"{w} " * 3000}"]\n')
    r = invoke("check", "--checkpoint", trained_checkpoint, "--suite", huge)
    assert_one_error_line(r, 2, f"over the limit of {MAX_CHARACTERS:,}; shorten the templates or lexicon entries, "
                                "or raise the limit with --max-characters")
    # the CLI's --help shows the defaults as literals (it imports no behaviour module)
    assert (f"{MAX_CASES:,}", f"{MAX_CHARACTERS:,}") == ("100,000", "50,000,000")


def test_the_workload_bound_is_an_upper_bound_of_the_builtin_suite():
    from sentiment_cli.behaviour.cases import test_cases, workload
    from sentiment_cli.behaviour.suite import builtin_suite

    suite = builtin_suite()
    built = [c for t in suite.tests for c in test_cases(suite, t)]
    cases, characters = workload(suite)
    assert len(built) <= cases and sum(len(x) for c in built for x in c.texts) <= characters


def test_number_perturbation_of_a_number_over_4300_digits():
    import random

    from sentiment_cli.behaviour.perturb import number

    text = "It cost " + "7" * 5000 + " dollars."
    copies = number(text, random.Random(0), 3)
    assert copies and all(c != text and len(c) == len(text) for c in copies)
    assert number("It cost 40 dollars.", random.Random(0), 2)   # a short number as before


# ---------------------------------------------------------------------------- 7. SIGTERM during predict --data -o

def test_sigterm_inside_an_output_file_removes_the_temporary_file(tmp_path):
    import signal

    from sentiment_cli.cli.app import sigterm_as_interrupt
    from sentiment_cli.errors import Terminated   # a KeyboardInterrupt since issue 78 (was Interrupted)
    from sentiment_cli.outputs import atomic_file

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated) as caught:
        with sigterm_as_interrupt(), atomic_file(tmp_path / "out.csv") as tmp:
            tmp.write_text("half")
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):   # the handler runs between bytecodes
                pass
    assert caught.value.exit_code == 143 and list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.slow   # starts a `sentiment predict` process and signals it
@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".jsonl"])
def test_sigterm_during_predict_data_leaves_no_temporary_file(trained_checkpoint, tmp_path, suffix):
    import signal
    import subprocess
    import sys
    import time

    from .conftest import SUBPROCESS_ENV

    rows = (REVIEWS.read_text(encoding="utf-8").splitlines())
    big = tmp_path / "big.csv"
    big.write_text("\n".join([rows[0]] + rows[1:] * 60) + "\n", encoding="utf-8")
    out = tmp_path / f"out{suffix}"
    proc = subprocess.Popen([sys.executable, "-m", "sentiment_cli", "predict", "--checkpoint", str(trained_checkpoint),
                             "--data", str(big), "-o", str(out)], env=SUBPROCESS_ENV, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not any(p.name.startswith(f".{out.name}.") for p in tmp_path.iterdir()):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    assert [p.name for p in tmp_path.iterdir()] == ["big.csv"], stderr
    assert stderr.strip().splitlines()[-1].startswith("error: stopped by SIGTERM")


# ---------------------------------------------------------------------------- 8, 9. the Python API's inputs

@pytest.fixture(scope="module")
def predictor(trained_checkpoint):
    import sentiment_cli
    return sentiment_cli.load(trained_checkpoint)


@pytest.mark.parametrize("bad, message", [
    ("great", "not one str"), ("good film", "not one str"), (None, "not NoneType"), (b"x", "not bytes"),
    (5, "not int"), ([None], "review 1 is NoneType, not str"), (["ok", 5], "review 2 is int, not str"),
    ([b"x"], "review 1 is bytes, not str (decode bytes first)")])
def test_the_api_refuses_what_is_not_an_iterable_of_texts_with_usage_error(predictor, bad, message):
    for call in (predictor.predict, predictor.predict_proba, predictor.explain, predictor.logits,
                 lambda t: list(predictor.predict_stream(t)), lambda t: list(predictor.explain_stream(t))):
        with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
            call(bad)


def test_the_api_takes_any_iterable_of_texts(predictor):
    import numpy as np
    import pandas as pd

    texts = ["a fine film", "dull and far too long"]
    want = [p.label for p in predictor.predict(texts)]
    for given in (tuple(texts), (t for t in texts), np.array(texts), pd.Series(texts), iter(texts)):
        assert [p.label for p in predictor.predict(given)] == want
    assert [p.label for p in predictor.predict_stream(t for t in texts)] == want
    assert predictor.predict_proba(np.array(texts)).shape == (2, len(predictor.labels))
    assert predictor.predict(pd.Series([], dtype=str)) == []


# ---------------------------------------------------------------------------- 10. binary and dictionary columns

@pytest.fixture
def binary_parquet(tmp_path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "bin.parquet"
    pq.write_table(pa.table({"review": ["a fine film", "dull and far too long"],
                             "blob": pa.array([b"\x00\xff", None], pa.binary()),
                             "cat": pa.array(["x", "y"]).dictionary_encode()}), path)
    return path


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_binary_column_is_written_as_base64_text(trained_checkpoint, binary_parquet, tmp_path, suffix):
    import csv
    import json

    out = tmp_path / f"b{suffix}"
    r = invoke("predict", "--checkpoint", trained_checkpoint, "--data", binary_parquet, "-o", out)
    assert r.exit_code == 0, r.output
    if suffix == ".csv":
        rows = list(csv.DictReader(out.open(encoding="utf-8")))
    else:
        rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert rows[0]["blob"] == "AP8=" and rows[0]["cat"] == "x"   # base64 of b"\x00\xff", not a Python repr
    assert rows[1]["blob"] in ("", None)


def test_parquet_output_keeps_binary_and_dictionary_columns(trained_checkpoint, binary_parquet, tmp_path):
    import pyarrow.parquet as pq

    out = tmp_path / "b.parquet"
    r = invoke("predict", "--checkpoint", trained_checkpoint, "--data", binary_parquet, "-o", out)
    assert r.exit_code == 0, r.output
    written, source = pq.read_table(out), pq.read_table(binary_parquet)
    for name in ("review", "blob", "cat"):
        assert written.schema.field(name).type == source.schema.field(name).type
        assert written.column(name).to_pylist() == source.column(name).to_pylist()


# ---------------------------------------------------------------------------- 11. a crafted tokenizer.json

def _crafted(source: Path, tmp_path: Path, edit) -> Path:
    import json

    folder = Path(shutil.copytree(source, tmp_path / "crafted"))
    raw = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    edit(raw)
    (folder / "tokenizer.json").write_text(json.dumps(raw), encoding="utf-8")
    return folder


def _fixed_padding(raw):
    raw["padding"] = {"strategy": {"Fixed": 5_000_000}, "direction": "Right", "pad_to_multiple_of": None,
                      "pad_id": 0, "pad_type_id": 0, "pad_token": "<pad>"}


def _backtracking_regex(raw):
    raw["normalizer"]["normalizers"][0]["pattern"] = {"Regex": "(a|aa)+$"}


def _unknown_unk(raw):
    raw["model"]["unk_token"] = "<not-there>"


@pytest.mark.parametrize("edit, message", [
    (_fixed_padding, "its own padding"), (_backtracking_regex, "a normalizer this tool does not write"),
    (_unknown_unk, "model.unk_token '<not-there>', not <unk>")])
def test_a_crafted_tokenizer_is_refused_at_load(trained_checkpoint, tmp_path, edit, message):
    from sentiment_cli.errors import CheckpointError
    from sentiment_cli.inference.predictor import Predictor

    folder = _crafted(trained_checkpoint, tmp_path, edit)
    with pytest.raises(CheckpointError, match=message):
        Predictor(folder)
    r = invoke("predict", "--checkpoint", folder, "a" * 30 + "b")
    assert_one_error_line(r, 1, f"{folder / 'tokenizer.json'}: not a tokenizer this tool writes: {message}")


def test_the_tokenizers_this_tool_writes_pass_the_structure_check(trained_checkpoint):
    from sentiment_cli.config import DataConfig
    from sentiment_cli.data.tokenizer import PRE_TOKENIZERS, build_tokenizer, check_structure

    check_structure((trained_checkpoint / "tokenizer.json").read_text(encoding="utf-8"), "ck")
    check_structure((ROOT / "tests/data/imdb_checkpoint_v1/tokenizer.json").read_text(encoding="utf-8"), "v1")
    for kind in PRE_TOKENIZERS:
        tok = build_tokenizer(["a b, c", "b c"], DataConfig(vocab_size=10, min_frequency=1, pre_tokenizer=kind))
        check_structure(tok.to_str(), kind)


# ---------------------------------------------------------------------------- 12. generator layers

def test_generator_layers_are_capped_as_the_encoders_are():
    from sentiment_cli.errors import ConfigError

    r = invoke("config", "--set", "pretrain.generator_layers=1000000")
    assert_one_error_line(r, 2, "[pretrain] generator_layers must be <= 64, got 1000000")
    with pytest.raises(ConfigError, match="generator_layers must be <= 64"):
        load_config("default").override("pretrain", generator_layers=65)
    load_config("default").override("pretrain", generator_layers=64)


# ---------------------------------------------------------------------------- minor: suite files

@pytest.mark.parametrize("body, message", [
    ('name = 5\n[[test]]\nname = "t"\ntype = "MFT"\nexpect = "positive"\ntemplates = ["good"]\n', "name must be a string, got 5"),
    ('[[test]]\nname = "t"\ncapability = ["c"]\ntype = "MFT"\nexpect = "positive"\ntemplates = ["good"]\n',
     "capability must be a string, got ['c']")])
def test_a_suite_with_a_non_string_name_is_refused(tmp_path, body, message):
    from sentiment_cli.behaviour.suite import SuiteError, load_suite

    (tmp_path / "s.toml").write_text(body)
    with pytest.raises(SuiteError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_suite(tmp_path / "s.toml")


def test_a_suite_that_is_a_device_a_folder_or_not_utf8_says_so(tmp_path):
    from sentiment_cli.behaviour.suite import SuiteError, load_suite

    with pytest.raises(SuiteError, match="/dev/zero: not a regular file"):
        load_suite("/dev/zero")
    with pytest.raises(SuiteError, match="is a folder; give a suite file"):
        load_suite(tmp_path)
    (tmp_path / "l.toml").write_bytes(b'name = "caf\xe9"\n')
    with pytest.raises(SuiteError, match=r"not valid UTF-8 \(byte 11\); save it as UTF-8"):
        load_suite(tmp_path / "l.toml")


# ---------------------------------------------------------------------------- minor: a closed pipe

def test_a_closed_pipe_ends_quietly_with_141(capsys):
    import typer

    from sentiment_cli.cli.app import handle_errors

    with pytest.raises(typer.Exit) as caught:
        with handle_errors():
            raise BrokenPipeError(32, "Broken pipe")
    assert caught.value.exit_code == 141 and "error" not in capsys.readouterr().err


# ---------------------------------------------------------------------------- 13. a graceful stop under load

def test_the_backlog_is_taken_before_the_listener_closes():
    """Connections the kernel accepted but the server had not (a loop busy with requests when SIGTERM came)
    are taken before the listening socket closes, which would reset them (uvicorn closes it at once)."""
    import asyncio
    import socket

    from sentiment_cli.serving.server import drain_backlog, listen

    async def main() -> tuple[int, int]:
        sock = listen("127.0.0.1", 0)
        sock.setblocking(False)
        taken: list[object] = []

        class Count(asyncio.Protocol):
            def connection_made(self, transport):
                taken.append(transport)

        clients = []
        for _ in range(20):   # connected by the kernel, queued: the loop has not run yet
            c = socket.create_connection(sock.getsockname()[:2])
            c.sendall(b"GET / HTTP/1.1\r\n\r\n")
            clients.append(c)
        server = await asyncio.get_running_loop().create_server(Count, sock=sock)
        await drain_backlog([sock])
        server.close()
        for c in clients:
            c.close()
        return len(taken), len(clients)

    taken, sent = asyncio.run(main())
    assert taken == sent


# ---------------------------------------------------------------------------- minor: empty tables, unnamed columns

def test_a_file_of_no_rows_and_an_unnamed_column_say_so(trained_checkpoint, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "ho.csv").write_text("review,sentiment\n")
    pq.write_table(pa.table({"review": pa.array([], pa.string())}), tmp_path / "zero.parquet")
    (tmp_path / "eh.csv").write_text("review,\ngood film,pos\nbad film,neg\n")
    for name in ("ho.csv", "zero.parquet"):
        r = invoke("predict", "--checkpoint", trained_checkpoint, "--data", tmp_path / name)
        assert_one_error_line(r, 1, f"{name}: no rows (only a header, or an empty table); give a file with data")
    r = invoke("predict", "--checkpoint", trained_checkpoint, "--data", tmp_path / "eh.csv")
    assert_one_error_line(r, 1, "eh.csv, line 1: column 2 of the header has no name; name every column")


def test_rtd_weight_is_bounded():
    r = invoke("config", "--set", "pretrain.rtd_weight=1e300")
    assert_one_error_line(r, 2, "[pretrain] rtd_weight must be <= 10000")


def test_a_failed_write_names_the_file(tmp_path):
    import errno

    from sentiment_cli.outputs import atomic_file

    out = tmp_path / "out.csv"
    with pytest.raises(OSError) as caught:
        with atomic_file(out):
            raise OSError(errno.ENOSPC, "No space left on device")
    assert caught.value.filename == str(out) and caught.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []


def test_a_missing_onnx_file_suggests_an_export_that_writes_it(tmp_path):
    from sentiment_cli.errors import CheckpointError
    from sentiment_cli.inference.onnx_backend import onnx_path

    with pytest.raises(CheckpointError, match=r"--checkpoint CHECKPOINT_FOLDER --output nope\.onnx`"):
        onnx_path("nope.onnx")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match=rf"--checkpoint {tmp_path} --output {tmp_path / 'x.onnx'}`"):
        onnx_path(tmp_path / "x.onnx")


@pytest.mark.parametrize("kind", ["word", "char", "unigram", "bpe"])
def test_the_structure_check_accepts_every_tokenizer_this_tool_writes(kind):
    from sentiment_cli.config import DataConfig
    from sentiment_cli.data.tokenizer import build_tokenizer, check_structure, save_tokenizer
    from sentiment_cli.errors import CheckpointError

    texts = ["อาหารอร่อยมาก บริการดีเยี่ยม", "the film was great, not bad at all", "服务很好 房间很大"] * 20
    tok = build_tokenizer(texts, DataConfig(tokenizer=kind, vocab_size=300, min_frequency=1), len(texts))
    check_structure(save_tokenizer(tok), "t")   # raises on a kind the check does not know
    crafted = json.loads(save_tokenizer(tok))
    crafted["normalizer"] = {"type": "Replace", "pattern": {"Regex": "(a|aa)+$"}, "content": "b"}
    with pytest.raises(CheckpointError, match="a normalizer this tool does not write"):
        check_structure(json.dumps(crafted), "t")
