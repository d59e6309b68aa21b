"""The Python API (``sentiment_cli.load``, ``sentiment_cli.train``): docs/python.md's code blocks run as written,
the errors are the one-line typed ones, and ``import sentiment_cli`` stays light."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import sentiment_cli
from sentiment_cli.errors import CheckpointError, ConfigError, DataError, SentimentError, UsageError

from .conftest import ROOT, SMALL_DATA, SUBPROCESS_ENV

GUIDE = ROOT / "docs" / "python.md"
# A fenced block whose info string is exactly "python" runs; "python notest" (e.g. one that needs a cluster) does not.
_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def guide_blocks(text: str) -> list[str]:
    """The code of each ```python block of ``text``, in order."""
    return _BLOCK.findall(text)


def test_guide_blocks_are_found_and_notest_ones_skipped():
    text = "```python\na = 1\n```\n```python notest\nb = 2\n```\n```bash\nc\n```\n```python\nd = 3\n```\n"
    assert guide_blocks(text) == ["a = 1\n", "d = 3\n"]


@pytest.mark.slow   # over 5 s on 2 cores: the full suite runs it, the fast lane does not (docs/development.md)
def test_the_guide_runs_as_written(tmp_path, monkeypatch, capsys):
    """Every python block of docs/python.md, in order and in one namespace, from a folder whose tests/data is
    the repository's (its relative paths), writing its checkpoints there."""
    blocks = guide_blocks(GUIDE.read_text(encoding="utf-8"))
    assert len(blocks) >= 6
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "data").symlink_to(ROOT / "tests" / "data", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__guide__"}
    for i, code in enumerate(blocks, 1):
        exec(compile(code, f"{GUIDE}:block {i}", "exec"), namespace)
    out = capsys.readouterr().out
    assert "unknown setting epoch=1" in out and "did you mean epochs?" in out
    assert "no trained model at checkpoints/nothing-here" in out
    assert namespace["result"].checkpoint == Path("checkpoints/tiny-2")
    assert namespace["model"].labels == ("negative", "positive")
    assert namespace["tagger"].multi_label and len(namespace["tagger"].labels) == 28
    for name in ("tiny", "emotions", "tiny-2", "tiny-3"):
        assert (tmp_path / "checkpoints" / name / "model.safetensors").is_file()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A one-epoch checkpoint written by the API."""
    out = tmp_path_factory.mktemp("api") / "tiny"
    result = sentiment_cli.train(SMALL_DATA, config="seed", output=out, epochs=1, vocab_size=2000,
                                 device="cpu", **{"model.d_model": 16})
    assert isinstance(result, sentiment_cli.TrainResult) and result.checkpoint == out
    return out


def test_train_returns_the_checkpoint_and_its_metrics(tiny):
    import json

    metrics = json.loads((tiny / "metrics.json").read_text())
    assert metrics["config"]["training"]["epochs"] == 1
    assert metrics["config"]["data"]["vocab_size"] == 2000
    assert metrics["config"]["model"]["d_model"] == 16
    assert metrics["data"]["labels"] == ["negative", "positive"]


def test_train_result_is_frozen(tiny):
    result = sentiment_cli.TrainResult(tiny, {})
    with pytest.raises(AttributeError):
        result.checkpoint = Path("elsewhere")   # type: ignore[misc]


def test_load_accepts_str_and_path_and_scores_alike(tiny):
    texts = ["A moving, beautifully acted film.", "Two hours I will never get back."]
    by_str, by_path = sentiment_cli.load(str(tiny)), sentiment_cli.load(tiny)
    proba = by_path.predict_proba(texts)
    assert proba.shape == (2, 2) and proba.dtype == np.float32
    np.testing.assert_array_equal(by_str.predict_proba(texts), proba)
    assert [p.label for p in by_str.predict(texts)] == [by_path.labels[j] for j in proba.argmax(axis=1)]
    assert [e.label for e in by_path.explain(texts)] == [p.label for p in by_path.predict(texts)]


def _one_line(err: BaseException) -> str:
    text = str(err)
    assert text and "\n" not in text and "Traceback" not in text
    return text


@pytest.mark.parametrize("make", [lambda tmp: tmp / "missing", lambda tmp: str(tmp / "missing"),
                                  lambda tmp: tmp])   # an existing folder without a model
def test_load_missing_checkpoint(tmp_path, make):
    with pytest.raises(CheckpointError) as err:
        sentiment_cli.load(make(tmp_path))
    assert "no trained model at" in _one_line(err.value)


def test_load_damaged_checkpoint(tiny, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(tiny, broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError) as err:
        sentiment_cli.load(broken)
    assert "model.safetensors" in _one_line(err.value)


@pytest.mark.parametrize("kwargs, message", [
    ({"device": "gpu"}, "device 'gpu': not a device"),
    ({"device": "meta"}, "device 'meta': not supported"),
    ({"batch_size": 0}, "batch_size must be an integer >= 1"),
    ({"onnx": True, "device": "cuda"}, "with onnx=True"),
])
def test_load_bad_options(tiny, kwargs, message):
    with pytest.raises(UsageError) as err:
        sentiment_cli.load(tiny, **kwargs)
    assert message in _one_line(err.value)


def test_load_cuda_without_a_gpu(tiny):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(UsageError, match="torch sees no CUDA device"):
        sentiment_cli.load(tiny, device="cuda")


def test_load_refuses_a_path_of_the_wrong_type():
    with pytest.raises(TypeError, match="path must be a str or a path"):
        sentiment_cli.load(42)   # type: ignore[arg-type]


@pytest.mark.parametrize("overrides, message", [
    ({"epoch": 1}, "no key epoch (did you mean epochs?)"),
    ({"training__epoch": 1}, "no key epoch in [training] (did you mean epochs?)"),
    ({"trainin__epochs": 1}, "no section trainin (did you mean training?)"),
    ({"model__epochs": 1}, "[model] has no key epochs; [training] and [pretrain] have"),
    ({"model.vocab_size": 10}, "[model] has no key vocab_size; [data] has"),
    ({"epochs": "two"}, "[training] epochs must be an integer, got 'two'"),
    ({"lr": -1.0}, "[training] lr must be > 0"),
    ({"source": "elsewhere.csv"}, "data is given twice"),
])
def test_train_refuses_bad_settings_before_any_work(tmp_path, overrides, message):
    out = tmp_path / "out"
    with pytest.raises(ConfigError) as err:
        sentiment_cli.train(SMALL_DATA, config="seed", output=out, **overrides)
    assert message in _one_line(err.value)
    assert not out.exists()


def test_train_refuses_an_unknown_preset(tmp_path):
    with pytest.raises(ConfigError, match="no such preset or config file"):
        sentiment_cli.train(SMALL_DATA, config="nosuch", output=tmp_path / "out")


@pytest.mark.parametrize("data", [Path("no/such/folder"), "no/such/reviews.csv"])
def test_train_bad_data_path(tmp_path, data):
    out = tmp_path / "out"
    with pytest.raises(DataError) as err:
        sentiment_cli.train(data, config="seed", output=out, epochs=1)
    assert "does not exist" in _one_line(err.value) or "no such file or folder" in str(err.value)
    assert not out.exists()


def test_train_bad_argument_types(tmp_path):
    with pytest.raises(TypeError, match="data must be a str or a path"):
        sentiment_cli.train(3, config="seed")   # type: ignore[arg-type]
    with pytest.raises(TypeError, match="config must be"):
        sentiment_cli.train(SMALL_DATA, config=3)   # type: ignore[arg-type]
    with pytest.raises(TypeError, match="progress must be"):
        sentiment_cli.train(SMALL_DATA, config="seed", output=tmp_path / "out", progress="yes")
    assert not (tmp_path / "out").exists()


def test_train_takes_a_config_object_and_progress_hooks(tmp_path):
    from sentiment_cli.config import load_config
    from sentiment_cli.training.callbacks import TrainCallbacks

    class Epochs(TrainCallbacks):
        def __init__(self):
            self.seen: list[int] = []

        def on_epoch_end(self, record):
            self.seen.append(record["epoch"])

    hooks = Epochs()
    cfg = load_config("seed").override("data", vocab_size=1000).override("model", d_model=8, n_heads=2, d_ff=16)
    result = sentiment_cli.train(str(SMALL_DATA), config=cfg, output=tmp_path / "c", epochs=2, progress=hooks)
    assert hooks.seen == [1, 2]
    assert [h["epoch"] for h in result.metrics["history"]] == [1, 2]
    assert result.metrics["config"]["data"]["vocab_size"] == 1000


def test_the_errors_are_the_cli_ones():
    for cls in (CheckpointError, ConfigError, DataError, UsageError):
        assert issubclass(cls, SentimentError)


def test_package_lists_its_api():
    assert {"load", "train", "TrainResult", "Predictor"} <= set(sentiment_cli.__all__)
    assert {"load", "train"} <= set(dir(sentiment_cli))
    from sentiment_cli.inference.predictor import Predictor

    assert sentiment_cli.Predictor is Predictor
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        sentiment_cli.nope   # noqa: B018


@pytest.mark.slow   # a python process: the import must be measured where nothing is imported yet
def test_import_sentiment_cli_stays_light():
    code = ("import sys, sentiment_cli\n"
            "heavy = ('torch', 'numpy', 'datasets', 'pandas', 'pyarrow', 'sklearn', 'rich', 'typer')\n"
            "print(sorted(m for m in heavy if m in sys.modules))\n"
            "sentiment_cli.TrainResult\n"
            "print(sorted(m for m in heavy if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=SUBPROCESS_ENV, cwd=ROOT).stdout.splitlines()
    assert out == ["[]", "[]"]


def test_ctrl_c_stops_train_at_the_next_step_and_restores_the_handler(tmp_path):
    import os
    import signal

    from sentiment_cli.errors import Interrupted
    from sentiment_cli.training.callbacks import TrainCallbacks

    class CtrlC(TrainCallbacks):
        def on_epoch_end(self, record):
            if record["epoch"] == 1:
                os.kill(os.getpid(), signal.SIGINT)   # train's handler, not pytest's, receives it

    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(Interrupted) as err:
        sentiment_cli.train(SMALL_DATA, config="seed", output=tmp_path / "c", epochs=3, vocab_size=1000,
                            progress=CtrlC(), **{"model.d_model": 8, "model.d_ff": 16})
    assert err.value.resumable and "epoch 1 is saved" in _one_line(err.value)
    assert signal.getsignal(signal.SIGINT) is before
