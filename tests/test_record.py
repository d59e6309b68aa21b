"""One checkpoint record, written once by ``checkpoint.py`` (issue 53): the post-fit steps work in memory,
``config.json`` is never patched, one ``TrainResult``; pretraining objectives found by a registry."""

from __future__ import annotations

import inspect
import json
import sys
import textwrap
from pathlib import Path

import pytest

import sentiment_cli
from sentiment_cli import checkpoint, objectives
from sentiment_cli.card.facts import model_card
from sentiment_cli.card.text import card_sections
from sentiment_cli.training import callbacks, run
from sentiment_cli.training.pretrain import load_pretrained, pretrain, pretrained_weights

from .conftest import small_config


def test_a_run_writes_its_record_once_and_never_patches_config_json(tmp_path, monkeypatch):
    final, config_writers = [], []
    real_write, real_json = checkpoint.write_checkpoint, checkpoint.write_json

    def counted(directory, record):   # the writer the run calls once its record is whole
        final.append(record)
        real_write(directory, record)

    def json_write(path, obj):   # who writes config.json: the loop's kept epochs and the final record
        if Path(path).name == checkpoint.CONFIG_FILE:
            config_writers.append(inspect.stack()[1].function)
        real_json(path, obj)

    def no_weights_read(path):   # calibration and the behavioural record use the kept model in memory
        raise AssertionError(f"{path} read back during the run")

    monkeypatch.setattr(run, "write_checkpoint", counted)
    monkeypatch.setattr(checkpoint, "write_json", json_write)
    real_read = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: no_weights_read(self) if self.name == checkpoint.WEIGHTS_FILE
                        else real_read(self))
    out = tmp_path / "run"
    result = run.train(small_config(epochs=2, fit_ngram_scale=True).override("model", ngram_buckets=1 << 12), out)
    assert len(final) == 1 and final[0] is result.record
    assert config_writers and set(config_writers) == {"write_checkpoint"}   # written whole, never patched
    written = json.loads((out / checkpoint.CONFIG_FILE).read_text())
    assert written == json.loads(json.dumps(final[0].config_json()))
    assert written["temperature"] == result.metrics["calibration"]["temperature"] != 1.0
    assert written["model"]["ngram_scale"] == result.metrics["calibration"]["ngram_scale"]
    assert json.loads((out / checkpoint.METRICS_FILE).read_text())["behaviour"] == result.metrics["behaviour"]


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
