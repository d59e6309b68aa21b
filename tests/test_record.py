"""One checkpoint record, written once by ``checkpoint.py`` (issue 53): the post-fit steps work in memory,
``config.json`` is never patched, one ``TrainResult``; pretraining objectives found by a registry."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

import sentiment_cli
from sentiment_cli import checkpoint, objectives
from sentiment_cli.config import load_config
from sentiment_cli.card.facts import model_card
from sentiment_cli.card.text import card_sections
from sentiment_cli.training import callbacks, run
from sentiment_cli.training.pretrain import pretrain
from sentiment_cli.training.pretrained import load_pretrained, pretrained_weights

from .conftest import small_config


class _Writes:
    """Every write into one folder, counted by file name with Python's audit hooks: an ``open`` for writing of a
    file there, and an ``os.rename`` / ``os.replace`` onto one (an atomic write's temporary file counts once, at its
    move into place). A hook cannot be removed: it counts while ``folder`` is set."""

    hooked: "_Writes | None" = None

    def __init__(self):
        self.folder: Path | None = None
        self.counts: dict[str, int] = {}
        if _Writes.hooked is None:
            sys.addaudithook(_Writes._hook)
        _Writes.hooked = self

    @staticmethod
    def _hook(event, args):
        self = _Writes.hooked
        if self is None or self.folder is None:
            return
        if event == "open" and args[0] is not None and not isinstance(args[0], int):
            mode, flags = args[1] or "", args[2] or 0
            writes = any(c in str(mode) for c in "wax+") or flags & (os.O_WRONLY | os.O_RDWR)
            if writes:
                self._count(args[0])
        elif event in ("os.rename", "os.replace"):
            self._count(args[1])

    def _count(self, path):
        path = Path(os.fsdecode(path))
        if path.parent.resolve() == self.folder and not path.name.startswith("."):
            self.counts[path.name] = self.counts.get(path.name, 0) + 1


WRITES = _Writes()


def _counted(folder: Path, work) -> dict[str, int]:
    """``work()``'s writes into ``folder``, by file name."""
    folder.mkdir(parents=True, exist_ok=True)
    WRITES.counts, WRITES.folder = {}, folder.resolve()
    try:
        work()
    finally:
        WRITES.folder = None
    return WRITES.counts


FOLDER_FILES = {checkpoint.CONFIG_FILE, checkpoint.METRICS_FILE, checkpoint.WEIGHTS_FILE, checkpoint.TOKENIZER_FILE,
                "README.md", "curves.png"}


def test_a_run_and_its_refit_write_each_file_of_the_folder_once(tmp_path, monkeypatch):
    """One run with a held-out split, then its refit on every row: each file of the folder written once, at the
    end; the trainer state goes (nothing is kept in a finished folder but the model)."""
    out = tmp_path / "run"
    cfg = small_config(epochs=2, fit_ngram_scale=True, refit=True).override("model", ngram_buckets=1 << 12)
    result = {}
    counts = _counted(out, lambda: result.setdefault("r", run.train(cfg, out)))
    assert result["r"].metrics["held_out_run"]["best_epoch"] >= 1   # it was refitted
    assert counts == {name: 1 for name in FOLDER_FILES}, counts
    assert not (out / checkpoint.STATE_DIR).exists()
    written = json.loads((out / checkpoint.CONFIG_FILE).read_text())
    assert written == json.loads(json.dumps(result["r"].record.config_json()))
    assert written["temperature"] == result["r"].metrics["calibration"]["temperature"] != 1.0
    assert json.loads((out / checkpoint.METRICS_FILE).read_text())["behaviour"] == result["r"].metrics["behaviour"]


def test_a_run_never_reads_its_own_weights_back(tmp_path, monkeypatch):
    """Calibration and the behavioural record use the kept model in memory."""
    real_read = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: _no_read(self) if self.name == checkpoint.WEIGHTS_FILE
                        else real_read(self))
    run.train(small_config(epochs=2, fit_ngram_scale=True).override("model", ngram_buckets=1 << 12), tmp_path / "r")


def _no_read(path):
    raise AssertionError(f"{path} read back during the run")


@pytest.mark.slow   # the default's search on 600 reviews: n-gram fits, encoder trials, the winner and its refit
def test_a_search_writes_each_file_of_the_folder_once(tmp_path, monkeypatch):
    from .test_search import REVIEWS

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "searched"
    cfg = load_config("default").override("data", source=str(REVIEWS), max_length=64, vocab_size=5000)
    cfg = cfg.override("model", ngram_buckets=1 << 16).override("training", time_budget=60.0, epochs=2,
                                                                device="cpu", init_from="")
    result = {}
    counts = _counted(out, lambda: result.setdefault("r", run.train(cfg, out, fit_to_data=frozenset(
        {"model.ngram_buckets", "data.max_length", "data.vocab_size", "training.epochs", "training.init_from"}))))
    assert "search" in result["r"].metrics
    trained = any(r.get("train_loss") is not None for r in result["r"].metrics.get("history") or [])
    files = FOLDER_FILES if trained else FOLDER_FILES - {"curves.png"}   # the n-gram score alone: no curve
    assert {k: v for k, v in counts.items() if k != checkpoint.STATE_DIR} == {name: 1 for name in files}, counts
    assert not (out / checkpoint.STATE_DIR).exists()   # a winner's refit resumable while it ran, then removed


def test_a_record_read_back_writes_the_same_files(trained_checkpoint, tmp_path):
    record = checkpoint.read_record(trained_checkpoint)
    checkpoint.write_checkpoint(tmp_path / "again", record)
    for name in checkpoint.CHECKPOINT_FILES:
        assert (tmp_path / "again" / name).read_bytes() == (trained_checkpoint / name).read_bytes(), name


def test_one_train_result_for_the_api_the_cli_and_training():
    assert sentiment_cli.TrainResult is callbacks.TrainResult
    assert {f for f in callbacks.TrainResult.__dataclass_fields__} == {"checkpoint", "metrics", "is_main", "report",
                                                                       "record", "validation_losses"}


TOY = '''
"""toy: a step that trains the encoder to shrink its states (a test's objective)."""
from sentiment_cli.objectives import ENCODER_KEYS, Objective


class ToyStep:
    """Built by the registry's record; a torch module in all but name."""

    @classmethod
    def for_run(cls, model, config, generator):
        import torch

        class Step(torch.nn.Module):
            def forward(self, model, input_ids, padding_mask):
                hidden = model.hidden_states(input_ids, padding_mask)
                loss = hidden.pow(2).mean()
                return loss, {"loss_sum": float(loss.detach()) * len(input_ids), "correct": 0.0, "count": len(input_ids)}

            @staticmethod
            def record(tally):
                return {"train_loss": tally["loss_sum"] / tally["count"]}

        return Step()


OBJECTIVE = Objective("toy", "the encoder's states shrunk (a test)", fixes=ENCODER_KEYS, takes="encoder",
                      describe=lambda pre: ("toy pretraining", f"{pre['epochs']} toy epochs"),
                      step="sentiment_cli.objectives.toy:ToyStep")
'''


@pytest.fixture
def toy_objective(tmp_path, monkeypatch):
    """``toy.py`` beside the package's objectives, as a new objective's one module would be."""
    extra = tmp_path / "objectives"
    extra.mkdir()
    (extra / "toy.py").write_text(textwrap.dedent(TOY))
    monkeypatch.setattr(objectives, "__path__", [*objectives.__path__, str(extra)])
    objectives._registry.cache_clear()
    yield
    sys.modules.pop("sentiment_cli.objectives.toy", None)
    objectives._registry.cache_clear()


def test_a_new_objective_is_one_module(toy_objective, tmp_path):
    assert objectives.names() == ("electra", "mlm", "toy", "word2vec")
    cfg = small_config().override("pretrain", objective="toy", splits="train", epochs=1)   # the config knows it
    out = tmp_path / "toy"
    result = pretrain(cfg, out)
    assert result.metrics["objective"] == "toy" and result.metrics["history"][0]["train_loss"] > 0
    training = dict(dict(card_sections(model_card(out)))["Training"])
    assert training["epochs"].startswith("1 of 1 of toy pretraining") and training["optimizer"] == "1 toy epochs"
    pretrained = load_pretrained(out, small_config().override("pretrain", objective="toy", splits="train", epochs=1))
    assert set(pretrained_weights(pretrained)) == {k for k in pretrained.model.state_dict() if not k.startswith("head.")}


def test_an_objective_the_registry_lacks_is_refused_by_the_config():
    with pytest.raises(sentiment_cli.errors.ConfigError, match="objective must be one of electra, mlm, word2vec"):
        small_config().override("pretrain", objective="toy")
