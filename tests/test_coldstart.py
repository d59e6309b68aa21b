"""A cold `sentiment predict` (issue 43, item 5): loading a checkpoint imports nothing it does not need.

The shape check of an untrusted checkpoint builds the model on the ``meta`` device; ``torch.nn.init``'s
``normal_`` there runs through ``torch._refs`` and imports ``torch._dynamo`` (about a second of a cold
start). The model is now built without its random initialisation (``model/skeleton.py``); the check stays,
and the model that loading returns is the one an initialised model would be once its weights are loaded.
Speed itself is measured by ``python -m bench.coldstart``, not here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading

import numpy as np
import pytest
import torch

from sentiment_cli.checkpoint import read_weights
from sentiment_cli import checkpoint as ck
from sentiment_cli.errors import CheckpointError
from sentiment_cli.model.classifier import SentimentClassifier
from sentiment_cli.model.skeleton import no_init, tensor_specs

from .conftest import PYTHON, SUBPROCESS_ENV

# Run in a fresh interpreter: load a good checkpoint (argv[1]) and a crafted one (argv[2]), then predict; print
# what had been imported after the loads and after the prediction, the probabilities and the refusal. (A
# padded batch's first attention mask imports sympy, not dynamo: the prediction is checked for dynamo alone.)
LOAD = """
import json, sys
from sentiment_cli.errors import CheckpointError
from sentiment_cli.inference.predictor import Predictor
p = Predictor(sys.argv[1])
try:
    Predictor(sys.argv[2])
    refusal = None
except CheckpointError as exc:
    refusal = str(exc)
loaded = [m for m in ("torch._dynamo", "sympy") if m in sys.modules]
probabilities = p.predict_proba(["A moving film.", "Dull and far too long."]).tolist()
print(json.dumps({"probabilities": probabilities, "refusal": refusal, "after_load": loaded,
                  "after_predict": [m for m in ("torch._dynamo",) if m in sys.modules]}))
"""


def _crafted(src, dst):
    """A copy of ``src`` whose config.json describes wider layers than its weights hold (within the bounds)."""
    shutil.copytree(src, dst)
    raw = json.loads((dst / "config.json").read_text())
    raw["model"].update(d_model=2 * raw["model"]["d_model"])
    (dst / "config.json").write_text(json.dumps(raw))
    return dst


def test_loading_through_the_predictor_does_not_import_dynamo(trained_checkpoint, tmp_path):
    crafted = _crafted(trained_checkpoint, tmp_path / "crafted")
    r = subprocess.run([PYTHON, "-c", LOAD, str(trained_checkpoint), str(crafted)], capture_output=True, text=True,
                       env=SUBPROCESS_ENV, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["after_load"] == [], f"loading imported {out['after_load']}"
    assert out["after_predict"] == [], f"predicting imported {out['after_predict']}"
    assert out["refusal"] is not None and "\n" not in out["refusal"]
    assert "model.safetensors: does not match config.json" in out["refusal"]
    from sentiment_cli.inference.predictor import Predictor   # the same figures in this process
    expected = Predictor(trained_checkpoint).predict_proba(["A moving film.", "Dull and far too long."])
    assert np.allclose(out["probabilities"], expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("which", ["trained_checkpoint", "multilabel_checkpoint"])
def test_the_loaded_model_is_an_initialised_one_with_the_weights_loaded(request, which):
    """Nothing of the uninitialised frame survives loading: every tensor, buffers included, and the logits
    equal those of a model built as training builds it (randomly initialised), then loaded."""
    d = request.getfixturevalue(which)
    loaded = ck.load_checkpoint(d).model
    config, vocab_size, labels = ck.read_checkpoint_config(d)
    torch.manual_seed(0)
    reference = SentimentClassifier.from_config(config, vocab_size, len(labels))
    reference.load_state_dict(read_weights(d / ck.WEIGHTS_FILE), strict=True)
    reference.eval()
    ours, theirs = dict(loaded.named_buffers()), dict(reference.named_buffers())
    assert ours.keys() == theirs.keys() and "positional_encoding" in ours
    for name, tensor in [*loaded.named_parameters(), *ours.items()]:
        other = dict(reference.named_parameters()).get(name, theirs.get(name))
        assert torch.equal(tensor, other), name
    ids = torch.randint(4, vocab_size, (3, 17))
    mask = torch.zeros(3, 17, dtype=torch.bool)
    mask[1, 9:] = True
    with torch.inference_mode():
        assert torch.equal(loaded(ids, mask).logits, reference(ids, mask).logits)


def test_a_config_that_disagrees_with_the_weights_is_still_one_line(trained_checkpoint, tmp_path):
    d = _crafted(trained_checkpoint, tmp_path / "c")
    with pytest.raises(CheckpointError) as err:
        ck.load_checkpoint(d)
    assert str(err.value).startswith(f"{d / ck.WEIGHTS_FILE}: does not match config.json")
    assert "\n" not in str(err.value)


def test_tensor_specs_are_the_state_dict_of_a_built_model(trained_checkpoint, multilabel_checkpoint):
    for d in (trained_checkpoint, multilabel_checkpoint):
        config, vocab_size, labels = ck.read_checkpoint_config(d)
        model = SentimentClassifier.from_config(config, vocab_size, len(labels))
        assert tensor_specs(config, vocab_size, len(labels)) == {
            name: (t.dtype, tuple(t.shape)) for name, t in model.state_dict().items()}


def test_tensor_specs_of_a_huge_config_allocate_nothing(trained_checkpoint):
    config, _, _ = ck.read_checkpoint_config(trained_checkpoint)
    config = config.override("model", d_model=4096, n_heads=8, d_ff=16384, n_layers=48)
    config = config.override("data", max_length=16384)
    specs = tensor_specs(config, 4_000_000, 2)   # tens of GB were it allocated
    assert specs["token_embedding.weight"] == (torch.float32, (4_000_000, 4096))
    assert specs["encoder.layers.47.linear1.weight"] == (torch.float32, (16384, 4096))


def test_no_init_leaves_tensors_as_they_are_in_its_own_thread_only():
    t = torch.zeros(1000)
    with no_init():
        assert torch.nn.init.normal_(t) is t and not t.any()
        torch.nn.init.kaiming_uniform_(t.view(10, 100))
        assert not t.any()
        other = torch.zeros(1000)
        thread = threading.Thread(target=torch.nn.init.normal_, args=(other,))
        thread.start()
        thread.join()
        assert other.any()           # another thread initialises as usual
        assert (t + 1).sum() == 1000  # other calls run as usual
    torch.nn.init.normal_(t)
    assert t.any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_all_finite_finds_any_nan_or_infinity(dtype):
    assert ck.all_finite(torch.zeros(0, dtype=dtype)) and ck.all_finite(torch.tensor(2.0, dtype=dtype))
    for n in (1, 7, 64, 1001, 65_537):
        for where in {0, n // 2, n - 1}:
            for bad in (float("nan"), float("inf"), float("-inf")):
                t = torch.randn(n).to(dtype)
                assert ck.all_finite(t)
                t[where] = bad
                assert not ck.all_finite(t), (n, where, bad)
