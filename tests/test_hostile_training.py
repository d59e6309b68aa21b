"""Hostile training probes: a stop during the refit resumes to the same weights; stops during the
pretraining stage's preprocessing are prompt; a copied IMDB folder keeps its unlabelled split."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sentiment_cli.data.sources import load_source
from sentiment_cli.data.unlabelled import load_unlabelled, unlabelled_texts
from sentiment_cli.errors import Interrupted
from sentiment_cli.training.callbacks import TrainCallbacks
from sentiment_cli.training.interrupts import StopFlag
from sentiment_cli.training.run import resume, train
from sentiment_cli.training.pretrain import _UntilStopped, pretrain

from .conftest import PYTHON, ROOT, SMALL_DATA, SUBPROCESS_ENV, small_config


def _refit_config():
    return small_config(refit=True, epochs=3).override("data", validation_fraction=0.1)


def _sha256(folder):
    return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()


class _StopInRefit(TrainCallbacks):
    """Requests a stop (as SIGINT would) at step ``at_step`` of the refit's epoch ``in_epoch``."""

    def __init__(self, stop: StopFlag, in_epoch: int, at_step: int):
        self.stop, self.in_epoch, self.at_step = stop, in_epoch, at_step
        self.in_refit, self.epoch, self.steps = False, 0, 0

    def on_stage(self, text):
        self.in_refit = self.in_refit or text.startswith("refit")

    def on_epoch_start(self, epoch, epochs, num_examples):
        self.epoch, self.steps = epoch, 0

    def on_step(self, examples, loss, accuracy, examples_per_second):
        self.steps += 1
        if self.in_refit and self.epoch == self.in_epoch and self.steps == self.at_step:
            self.stop.request(signal.SIGINT)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """A run with a refit that was never stopped: its folder."""
    out = tmp_path_factory.mktemp("whole") / "run"
    train(_refit_config(), out)
    return out


@pytest.mark.slow   # over 5 s on 2 cores: the full suite runs it, the fast lane does not (docs/development.md)
@pytest.mark.parametrize("in_epoch", [1, 2])
def test_a_stop_during_the_refit_resumes_to_the_uninterrupted_weights(tmp_path, uninterrupted, in_epoch):
    best = json.loads((uninterrupted / "metrics.json").read_text())["held_out_run"]["best_epoch"]
    if in_epoch > best:
        pytest.skip(f"the refit has {best} epoch(s)")
    out, stop = tmp_path / "run", StopFlag()
    with pytest.raises(Interrupted) as caught:
        train(_refit_config(), out, _StopInRefit(stop, in_epoch, at_step=3), stop=stop)
    exc = caught.value
    assert exc.exit_code == 130 and exc.resumable
    assert "during the refit on all rows" in str(exc) and f"resume with: sentiment train --resume {out}" in str(exc)
    marker = json.loads((out / "trainer_state" / "refit.json").read_text())
    assert marker == {"stage": "refit", "folder": ".run.refit", "epochs": best, "epochs_saved": in_epoch - 1}
    partial = tmp_path / ".run.refit"
    assert (partial / "trainer_state" / "state.json").is_file() == (in_epoch > 1)
    assert "held_out_run" not in json.loads((out / "metrics.json").read_text())   # the held-out run's checkpoint

    stages = []

    class Stages(TrainCallbacks):
        def on_stage(self, text):
            stages.append(text)

    result = resume(out, Stages(), stop=StopFlag())
    assert not any(s.startswith("nothing to resume") for s in stages), stages
    assert any(s.startswith("refit: continuing") if in_epoch > 1 else s.startswith("the refit had saved no epoch")
               for s in stages), stages
    assert _sha256(out) == _sha256(uninterrupted)                        # bit-identical weights
    metrics = json.loads((out / "metrics.json").read_text())
    whole = json.loads((uninterrupted / "metrics.json").read_text())
    assert metrics["held_out_run"]["best_epoch"] == best and result.metrics["held_out_run"]["best_epoch"] == best
    assert [h["train_loss"] for h in metrics["history"]] == [h["train_loss"] for h in whole["history"]]
    assert metrics["calibration"]["temperature"] == whole["calibration"]["temperature"]
    assert not (out / "trainer_state").exists() and not partial.exists()


# ----------------------------------------------------------------------------- the pretraining stage's preprocessing

def _word2vec_config(epochs=2):
    return small_config().override("pretrain", objective="word2vec", splits="train", epochs=epochs)


class _StopAt(TrainCallbacks):
    """Requests a stop (as SIGTERM would) when a stage starting with ``stage`` begins, or when epoch ``epoch``
    starts; records the stages and epochs seen."""

    def __init__(self, stop: StopFlag, stage: str | None = None, epoch: int | None = None):
        self.stop, self.stage, self.epoch = stop, stage, epoch
        self.stages, self.epochs = [], []

    def on_stage(self, text):
        self.stages.append(text)
        if self.stage and text.startswith(self.stage):
            self.stop.request(signal.SIGTERM)

    def on_epoch_start(self, epoch, epochs, num_examples):
        self.epochs.append(epoch)
        if epoch == self.epoch:
            self.stop.request(signal.SIGTERM)


@pytest.mark.parametrize("objective", ["word2vec", "mlm"])
def test_a_stop_while_tokenizing_for_pretraining_stops_before_the_next_chunk(tmp_path, objective):
    stop = StopFlag()
    cb = _StopAt(stop, stage="tokenizing")
    cfg = _word2vec_config().override("pretrain", objective=objective)
    with pytest.raises(Interrupted, match="^pretraining interrupted by SIGTERM before its first epoch; no epoch "
                                          r"was saved \(a pretraining run cannot be resumed\)$") as caught:
        pretrain(cfg, tmp_path / "pre", cb, stop=stop)
    assert caught.value.exit_code == 143
    assert not any(s.startswith("word2vec on") for s in cb.stages) and cb.epochs == []   # gensim never started


def test_a_stop_during_a_word2vec_epoch_ends_it_early_and_saves_nothing_of_it(tmp_path, monkeypatch):
    read = []
    real_iter = _UntilStopped.__iter__

    def counting(self):
        for words in real_iter(self):
            read.append(isinstance(words, list))   # gensim's word lists, not the tokenizer's texts
            yield words
    monkeypatch.setattr(_UntilStopped, "__iter__", counting)
    stop = StopFlag()
    cb = _StopAt(stop, epoch=1)
    with pytest.raises(Interrupted, match="during epoch 1 of 2; no epoch was saved") as caught:
        pretrain(_word2vec_config(), tmp_path / "pre", cb, stop=stop)
    assert caught.value.exit_code == 143 and cb.epochs == [1]
    reviews = 900   # the slice's training part: the vocabulary scan read them all, epoch 1 hardly any
    assert reviews <= sum(read) < reviews + 50
    assert not (tmp_path / "pre" / "metrics.json").exists()


# ----------------------------------------------------------------------------- a copied IMDB folder without its card

def _copied_imdb(folder, unlabelled_name="unsupervised-00000-of-00001.parquet", rows=40):
    """A folder as a user who copied IMDB's Parquet files (no README.md dataset card) has it."""
    folder.mkdir(parents=True)
    for name in ("train", "test"):
        table = pq.read_table(SMALL_DATA / "plain_text" / f"{name}-00000-of-00001.parquet")
        pq.write_table(table.slice(0, rows), folder / f"{name}-00000-of-00001.parquet")
    texts = pq.read_table(SMALL_DATA / "plain_text" / "test-00000-of-00001.parquet").column("text").to_pylist()
    unlabelled = [f"unlabelled {i}: {t}" for i, t in enumerate(texts[rows:rows + 30])]
    pq.write_table(pa.table({"text": unlabelled, "label": [-1] * len(unlabelled)}), folder / unlabelled_name)
    return unlabelled


@pytest.mark.parametrize("name", ["unsupervised-00000-of-00001.parquet", "unlabelled-00000-of-00002.parquet",
                                  "unlabeled.parquet"])
def test_a_folder_of_imdb_files_without_its_card_keeps_its_unlabelled_split(tmp_path, name):
    folder = tmp_path / "imdb"
    unlabelled = _copied_imdb(folder, name)
    source = load_source(str(folder))
    assert sorted(source.splits) == ["test", "train", "unsupervised"]
    assert len(source.splits["train"]) == 40 and source.splits["unsupervised"]["text"] == unlabelled
    assert unlabelled_texts(source, "").texts == unlabelled              # word2vec and distillation read them
    assert load_unlabelled(str(folder)).texts == unlabelled              # --unlabelled FOLDER too


def test_an_unlabelled_file_beside_split_files_is_the_unsupervised_split(tmp_path):
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "train.csv").write_text("text,label\ngood film,pos\nbad film,neg\n")
    (folder / "unlabelled.jsonl").write_text('{"text": "a film"}\n{"text": "another film"}\n')
    assert load_source(str(folder)).splits["unsupervised"]["text"] == ["a film", "another film"]


def test_a_folder_of_unlabelled_files_alone_is_still_read_as_train(tmp_path):
    folder = tmp_path / "only"
    folder.mkdir()
    pq.write_table(pa.table({"text": ["a film", "another"]}), folder / "unsupervised-00000-of-00001.parquet")
    assert sorted(load_source(str(folder)).splits) == ["train"]         # as datasets reads it
    assert load_unlabelled(str(folder)).texts == ["a film", "another"]


def test_an_unlabelled_file_alone_in_a_folder_is_its_only_split(tmp_path):
    folder = tmp_path / "u"
    folder.mkdir()
    (folder / "unlabelled.csv").write_text("text\na film\n")
    (folder / "notes.csv").write_text("what\nnot data\n")
    assert sorted(load_source(str(folder)).splits) == ["unsupervised"]


@pytest.mark.slow   # signals real `sentiment train` processes
def test_sigint_during_the_refit_then_train_resume_matches_an_uninterrupted_run(tmp_path):
    cfg = tmp_path / "small.toml"
    cfg.write_text((ROOT / "configs" / "seed.toml").read_text().replace("vocab_size = 50000", "vocab_size = 5000"))

    def command(out):
        return [PYTHON, "-m", "sentiment_cli", "train", "--config", str(cfg), "--data", str(SMALL_DATA), "--output",
                str(out), "--epochs", "3", "--batch-size", "64", "--device", "cpu", "--set", "training.refit=true"]

    env = {**SUBPROCESS_ENV, "OMP_NUM_THREADS": "1"}   # the same threads in each process: the same sums, whatever the load
    whole = subprocess.run(command(tmp_path / "whole"), cwd=ROOT, env=env, capture_output=True, text=True)
    assert whole.returncode == 0, whole.stderr
    out = tmp_path / "run"
    proc = subprocess.Popen(command(out), cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    saved = tmp_path / ".run.refit" / "trainer_state" / "state.json"   # the refit's first epoch
    deadline = time.monotonic() + 300
    while not saved.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("error: interrupted by SIGINT during the refit on all rows; ") and "Traceback" not in stderr
    assert last.endswith(f"resume with: sentiment train --resume {out}")
    assert json.loads((out / "trainer_state" / "refit.json").read_text())["epochs_saved"] >= 1
    r = subprocess.run([PYTHON, "-m", "sentiment_cli", "train", "--resume", str(out), "--json"], cwd=ROOT,
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "nothing to resume" not in r.stderr and "held_out_run" in json.loads(r.stdout)
    assert _sha256(out) == _sha256(tmp_path / "whole")


def test_a_stop_while_building_the_pretraining_tokenizer_stops_before_tokenizing(tmp_path):
    stop = StopFlag()
    cb = _StopAt(stop, stage="building the tokenizer")
    with pytest.raises(Interrupted, match="^pretraining interrupted by SIGTERM before its first epoch"):
        pretrain(_word2vec_config(), tmp_path / "pre", cb, stop=stop)
    assert not any(s.startswith("tokenizing") for s in cb.stages), cb.stages
