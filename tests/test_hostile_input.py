"""Issue 26's rows 1, 2, 4, 9 and 11: a long review's explanation in linear time, the text cut before the
tokenizer sees all of it, NaN and silently merged labels refused, and one writer per output folder
(docs/robustness.md, "Hostile input")."""

import json
import os
import shutil
import signal
import subprocess
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from sentiment_cli.checkpoint import load_checkpoint
from sentiment_cli.cli import app
from sentiment_cli.config import DataConfig
from sentiment_cli.data import splits as data
from sentiment_cli.data.tokenizer import build_tokenizer, clip_chars, encode_texts, truncate
from sentiment_cli.errors import DataError
from sentiment_cli.inference.prediction import Explanation, token_rows
from sentiment_cli.inference.predictor import Predictor
from sentiment_cli.training.lock import LOCK_FILE, FolderInUse, output_lock
from sentiment_cli.training.run import resume, train
from sentiment_cli.training.pretrain import pretrain

from .conftest import PYTHON, ROOT, SUBPROCESS_ENV, small_config
from .test_hostile import assert_one_error_line

runner = CliRunner()
JSONL = ROOT / "tests" / "data" / "reviews_small" / "reviews.jsonl"


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def _reviews(n_chars: int) -> str:
    """Real reviews of the committed slice, end to end, until ``n_chars`` characters."""
    texts = [json.loads(line)["text"] for line in JSONL.read_text(encoding="utf-8").split("\n") if line]
    out, size = [], 0
    while size < n_chars:
        for t in texts:
            out.append(t)
            size += len(t) + 1
    return " ".join(out)[:n_chars]


class _Recording:
    """A tokenizer that delegates to ``tok``, records the longest text it was given, and counts how often
    each encoding's ``ids`` and ``offsets`` are read."""

    def __init__(self, tok):
        self.tok, self.longest, self.reads = tok, 0, 0

    def _seen(self, texts):
        self.longest = max([self.longest, *map(len, texts)])

    def encode_batch(self, texts):
        self._seen(texts)
        return [_CountingEncoding(e, self) for e in self.tok.encode_batch(texts)]

    def encode_batch_fast(self, texts):
        self._seen(texts)
        return self.tok.encode_batch_fast(texts)

    def token_to_id(self, token):
        return self.tok.token_to_id(token)


class _CountingEncoding:
    def __init__(self, enc, owner):
        self._enc, self._owner = enc, owner

    @property
    def ids(self):
        self._owner.reads += 1
        return self._enc.ids

    @property
    def offsets(self):
        self._owner.reads += 1
        return self._enc.offsets


# ---------------------------------------------------------------------------- row 1: explanation cost

def test_token_rows_reads_each_encodings_lists_once(trained_checkpoint):
    tok = _Recording(load_checkpoint(trained_checkpoint).tokenizer)
    texts = ["a fine film " * 300, "dull", "the plot was thin but the acting superb " * 50]
    rows = token_rows(tok, DataConfig(max_length=200), texts)
    assert [len(r[0]) for r in rows] == [200, 1, 200]
    assert tok.reads <= 2 * len(texts)   # ids and offsets once per text: not once per token (quadratic)


def test_a_4mb_review_is_explained_in_under_2_seconds(trained_checkpoint):
    p = Predictor(trained_checkpoint)
    text = "a " * 2_000_000   # 4 MB, 2 million tokens: the probe that took 111 s
    start = time.perf_counter()
    e = p.explain([text])[0]
    assert time.perf_counter() - start < 2.0
    assert len(e.tokens) == 200 and e.segments()[-1][1] == "omitted"


# ---------------------------------------------------------------------------- row 2: cut before tokenizing

@pytest.mark.parametrize("truncation", ["head", "head_tail"])
def test_a_long_text_is_cut_before_the_tokenizer_and_keeps_todays_tokens(trained_checkpoint, truncation):
    tok = load_checkpoint(trained_checkpoint).tokenizer
    cfg = DataConfig(max_length=200, truncation=truncation)
    text = _reviews(1_000_000)
    bound = 2 * clip_chars(cfg.max_length) + 1
    assert len(text) > 10 * bound
    rec = _Recording(tok)
    ids = encode_texts(rec, [text], cfg)[0]
    assert 0 < rec.longest <= bound                     # the tokenizer never saw the whole megabyte
    whole = tok.encode(text)
    whole_ids, whole_offsets = whole.ids, whole.offsets
    assert ids == truncate(whole_ids, cfg.max_length, truncation, cfg.head_fraction)   # the same tokens as before
    rows = token_rows(rec, cfg, [text])
    assert rec.longest <= bound
    row_ids, spans, positions, _ = rows[0]
    assert row_ids == ids
    kept = truncate(list(range(len(whole_ids))), cfg.max_length, truncation, cfg.head_fraction)
    assert spans == [tuple(whole_offsets[p]) for p in kept]   # spans point into the text as given, tail too


def test_an_explanation_of_a_cut_text_marks_what_was_left_out(trained_checkpoint):
    tok = load_checkpoint(trained_checkpoint).tokenizer
    text = "great " * 100 + "middle " * 200_000 + "awful " * 100   # 1.4 MB
    for truncation in ("head", "head_tail"):
        ids, spans, positions, n = token_rows(tok, DataConfig(max_length=200, truncation=truncation), [text])[0]
        e = Explanation(text, "positive", 0.5, {}, [text[a:b] for a, b in spans], [0.0] * len(ids), 0.0,
                        ids, spans, positions, n)
        segments = e.segments()
        assert "".join(s[0] for s in segments) == text     # every character accounted for, in order
        omitted = [s[0] for s in segments if s[1] == "omitted"]
        assert len(omitted) == 1 and len(omitted[0]) > 1_000_000
        if truncation == "head_tail":   # 50 from the head, 150 from the tail: the middle, in the text as given
            assert [s[0] for s in segments if s[1] == "token"][-1] == "awful" and spans[-1][1] == len(text) - 1
            assert text.index(omitted[0]) == spans[49][1] and segments[-1] == (" ", "space", None)
        else:
            assert positions == list(range(200)) and n > 200 and segments[-1][1] == "omitted"


def test_pretraining_texts_and_the_vocabulary_see_only_the_cut_text(tmp_path):
    words = " ".join(f"w{i}" for i in range(40_000))   # every word once: far past the cut's middle
    cfg = DataConfig(max_length=16, vocab_size=100_000, min_frequency=1)
    vocab = build_tokenizer([words], cfg).get_vocab()
    keep = clip_chars(16)
    assert "w0" in vocab and "w39999" in vocab and "w20000" not in vocab
    assert len(vocab) < 2 * keep // 5
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps({"text": t, "label": i % 2}) + "\n"
                            for i, t in enumerate([words] + ["short review"] * 9)))
    texts = data.load_pretraining_texts(data.DataSpec(str(path), 0.0, 1, max_length=16), "train")
    assert max(map(len, texts)) == 2 * keep + 1 and "short review" in texts


# ---------------------------------------------------------------------------- row 4: a NaN label

def _nan_rows():
    rows = [{"text": f"review {i}", "label": float(i % 2)} for i in range(20)]
    rows[5]["label"] = float("nan")
    return rows


def test_a_nan_label_in_jsonl_or_parquet_is_one_line_naming_the_file_and_row(tmp_path):
    jsonl = tmp_path / "nan.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in _nan_rows()))   # json.dumps writes NaN
    parquet = tmp_path / "nan.parquet"
    pq.write_table(pa.table({k: [r[k] for r in _nan_rows()] for k in ("text", "label")}), parquet)
    for path in (jsonl, parquet):
        with pytest.raises(DataError, match=rf"{path.name}, row 6: label NaN in column 'label' is not a number"):
            data.load_train_validation(str(path), 0.1, 0)
    r = invoke("train", "--config", "seed", "--data", jsonl, "--output", tmp_path / "out", "--device", "cpu")
    assert_one_error_line(r, 1, "nan.jsonl, row 6: label NaN in column 'label' is not a number")
    inf = tmp_path / "inf.parquet"
    pq.write_table(pa.table({"text": ["a", "b", "c", "d"], "label": [0.0, 1.0, float("-inf"), 1e300]}), inf)
    with pytest.raises(DataError, match=r"inf.parquet, row 3: label -inf in column 'label' is not a number"):
        data.load_train_validation(str(inf), 0.0, 0)


# ---------------------------------------------------------------------------- row 9: labels merged silently

def _csv(tmp_path, labels):
    path = tmp_path / "labels.csv"
    path.write_text("text,label\n" + "".join(f"review number {i},{v}\n" for i, v in enumerate(labels)))
    return path


@pytest.mark.parametrize("labels, message", [
    (["pos", "neg", "pos "] * 10, "labels 'pos' (row 1) and 'pos ' (row 3) in column 'label' differ only in "
                                  "surrounding whitespace"),
    (["1", "0", "01"] * 10, "labels '1' (row 1) and '01' (row 3) in column 'label' are one number written two ways"),
    (["0", " 1", "1"] * 10, "labels ' 1' (row 2) and '1' (row 3) in column 'label' differ only in surrounding"),
])
def test_labels_that_would_merge_are_refused_naming_both(tmp_path, labels, message):
    r = invoke("train", "--config", "seed", "--data", _csv(tmp_path, labels), "--output", tmp_path / "out",
               "--device", "cpu")
    assert_one_error_line(r, 1, message)


def test_labels_are_stripped_of_surrounding_whitespace_and_nothing_else(tmp_path):
    train_split, _ = data.load_train_validation(str(_csv(tmp_path, [" pos", " neg"] * 10)), 0.0, 0)
    assert train_split.label_names == ("neg", "pos")
    train_split, _ = data.load_train_validation(str(_csv(tmp_path, ["Pos", "pos", "neg"] * 10)), 0.0, 0)
    assert train_split.label_names == ("Pos", "neg", "pos")     # case is kept: distinct strings stay distinct
    train_split, _ = data.load_train_validation(str(_csv(tmp_path, ["02", "10", "1"] * 10)), 0.0, 0)
    assert train_split.label_names == ("1", "02", "10")         # by value, as written
    with pytest.raises(DataError, match=r"row 1: label 1111111111.* has 50 characters"):
        data.load_train_validation(str(_csv(tmp_path, ["1" * 50, "0"] * 10)), 0.0, 0)


# ---------------------------------------------------------------------------- row 11: one writer per folder

def test_train_and_resume_refuse_a_folder_another_run_holds(trained_checkpoint, tmp_path):
    assert not (trained_checkpoint / LOCK_FILE).exists()   # a finished run removed its lock file
    folder = tmp_path / "run"
    train(small_config(epochs=1), folder, keep_state=True)   # a run to resume
    before = (folder / "metrics.json").read_bytes()
    with output_lock(folder):
        assert (folder / LOCK_FILE).read_text().strip() == str(os.getpid())
        with pytest.raises(FolderInUse, match=rf"output folder {folder} is in use by another run "
                                              rf"\(pid {os.getpid()}\)"):
            train(small_config(epochs=1), folder)
        with pytest.raises(FolderInUse, match=rf"pid {os.getpid()}"):
            resume(folder, epochs=4)
        with pytest.raises(FolderInUse, match=rf"pid {os.getpid()}"):
            pretrain(small_config(), folder)
        r = invoke("train", "--resume", folder, "--epochs", 4)
        assert_one_error_line(r, 1, f"is in use by another run (pid {os.getpid()})")
    assert not (folder / LOCK_FILE).exists()   # released: the folder is as a finished run leaves it
    assert load_checkpoint(folder).labels == ("negative", "positive")
    assert (folder / "metrics.json").read_bytes() == before   # nothing was written


def test_a_killed_holder_releases_the_lock(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    holder = subprocess.Popen(
        [PYTHON, "-c", "import sys, time; from pathlib import Path; from sentiment_cli.training.lock import "
                       "output_lock\nwith output_lock(Path(sys.argv[1])):\n    print('held', flush=True); "
                       "time.sleep(60)", str(folder)],
        stdout=subprocess.PIPE, text=True, env=SUBPROCESS_ENV)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(FolderInUse, match=rf"pid {holder.pid}\)"):
            with output_lock(folder):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (folder / LOCK_FILE).exists()   # SIGKILL left the file; the OS lock went with the process
    with output_lock(folder):
        assert (folder / LOCK_FILE).read_text().strip() == str(os.getpid())
    assert not (folder / LOCK_FILE).exists()

