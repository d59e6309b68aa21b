"""The weights file stores a table whose rows are mostly zero as its non-zero rows (issue 55: a checkpoint the
size of what the data used), losslessly, and reads such a file as untrusted input."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from sentiment_cli import checkpoint as ck
from sentiment_cli.errors import CheckpointError
from sentiment_cli.weights_file import PACK_MIN_ROWS, dense_specs, pack, packed_shapes, unpack


def _table(rows_used: int, n: int = PACK_MIN_ROWS, k: int = 3) -> torch.Tensor:
    t = torch.zeros(n, k)
    t[torch.randperm(n, generator=torch.Generator().manual_seed(0))[:rows_used]] = torch.randn(rows_used, k)
    return t


def test_a_mostly_zero_table_is_packed_and_read_back_bit_for_bit():
    weights = {"ngram_weight": _table(100), "ngram_bias": torch.randn(3), "dense": torch.randn(PACK_MIN_ROWS, 2),
               "small": torch.zeros(10, 4)}
    tensors, metadata = pack(weights)
    assert set(tensors) == {"ngram_weight@rows", "ngram_weight@values", "ngram_bias", "dense", "small"}
    assert tensors["ngram_weight@values"].shape == (100, 3)
    back = unpack(tensors, packed_shapes(metadata))
    assert set(back) == set(weights) and all(torch.equal(back[k], weights[k]) for k in weights)


def test_values_exact_in_float16_are_stored_as_float16_and_read_back_as_float32_bit_for_bit():
    exact, inexact = _table(100).half().float(), _table(100)
    tensors, metadata = pack({"exact": exact, "inexact": inexact})
    assert tensors["exact@values"].dtype == torch.float16 and tensors["inexact@values"].dtype == torch.float32
    back = unpack(tensors, packed_shapes(metadata))
    assert back["exact"].dtype == torch.float32 and torch.equal(back["exact"], exact)
    assert torch.equal(back["inexact"], inexact)
    found = {name: (t.dtype, tuple(t.shape)) for name, t in tensors.items()}
    assert dense_specs(found, packed_shapes(metadata))["exact"] == (torch.float32, tuple(exact.shape))


def test_float16_values_pack_a_table_whose_float32_rows_would_stay_whole():
    # 3 float16 a row (6 bytes) and a 4-byte index against 12 bytes a row whole: packed up to 0.9 * 12 / 10 = 108%
    table = torch.randn(PACK_MIN_ROWS, 3).half().float()
    tensors, _ = pack({"t": table})
    assert set(tensors) == {"t@rows", "t@values"} and tensors["t@values"].dtype == torch.float16


def test_a_table_stays_whole_unless_packing_saves_a_tenth_of_it():
    # 3 float32 a row (12 bytes) and a 4-byte index: packed up to 0.9 * 12 / 16 = 67.5% of the rows
    assert set(pack({"t": _table(int(0.67 * PACK_MIN_ROWS))})[0]) == {"t@rows", "t@values"}
    tensors, metadata = pack({"t": _table(int(0.68 * PACK_MIN_ROWS))})
    assert set(tensors) == {"t"} and metadata == {}


def test_a_checkpoint_with_an_ngram_table_is_smaller_and_loads_the_same(multilabel_checkpoint, tmp_path):
    """The written file holds the used rows only, and the model loaded from it scores as the one in memory."""
    ckpt = ck.load_checkpoint(multilabel_checkpoint)
    record = ck.CheckpointRecord.of(ckpt.model, ckpt.config, ckpt.tokenizer.to_str(), ckpt.metrics, ckpt.labels)
    ck.write_checkpoint(tmp_path / "c", record)
    raw = load_file(tmp_path / "c" / ck.WEIGHTS_FILE)
    dense = record.weights["ngram_weight"]
    used = int((dense != 0).any(1).sum())
    assert "ngram_weight" not in raw and raw["ngram_weight@values"].shape[0] == used < dense.shape[0] // 2
    back = ck.read_weights(tmp_path / "c" / ck.WEIGHTS_FILE)
    assert all(torch.equal(back[k], v) for k, v in record.weights.items()) and set(back) == set(record.weights)
    assert raw["ngram_weight@values"].dtype == torch.float16   # the fit's weights are exact in float16
    assert json.loads((tmp_path / "c" / ck.CONFIG_FILE).read_text())["format_version"] == ck.CHECKPOINT_FORMAT_VERSION


def _rewrite(path, edit):
    from safetensors import safe_open
    tensors = load_file(path)
    with safe_open(path, "pt") as f:
        metadata = f.metadata()
    tensors, metadata = edit(tensors, metadata)
    save_file(tensors, path, metadata=metadata)


@pytest.mark.parametrize("edit, message", [
    (lambda t, m: ({**t, "ngram_weight@rows": t["ngram_weight@rows"].flip(0)}, m), "not ascending"),
    (lambda t, m: ({**t, "ngram_weight@rows": t["ngram_weight@rows"] + 10**9}, m), "not ascending within"),
    (lambda t, m: ({**t, "ngram_weight@rows": t["ngram_weight@rows"].long()}, m), "packed table ngram_weight has rows"),
    (lambda t, m: ({k: v for k, v in t.items() if k != "ngram_weight@values"}, m), "has no rows or values"),
    (lambda t, m: (t, {**m, "packed_rows": "[1, 2]"}), "not a map of names to shapes"),
    (lambda t, m: (t, {k: v for k, v in m.items() if k != "packed_rows"}), "belongs to no packed table"),
    (lambda t, m: (t, {**m, "packed_rows": json.dumps({"ngram_weight": [10**12, 1]})}), "packed table ngram_weight"),
])
def test_a_tampered_packed_table_is_refused_in_one_line(multilabel_checkpoint, tmp_path, edit, message):
    import shutil
    d = tmp_path / "c"
    shutil.copytree(multilabel_checkpoint, d)
    _rewrite(d / ck.WEIGHTS_FILE, edit)
    with pytest.raises(CheckpointError, match=message) as info:
        ck.load_checkpoint(d)
    assert "\n" not in str(info.value) and "model.safetensors" in str(info.value)


def test_dense_specs_refuse_a_table_stored_both_ways():
    f32 = torch.float32
    with pytest.raises(ValueError, match="both whole and packed"):
        dense_specs({"t": (f32, (5, 2)), "t@rows": (torch.int64, (1,)), "t@values": (f32, (1, 2))}, {"t": (5, 2)})


def test_read_weights_bounds_a_packed_table_by_the_file_s_limit(multilabel_checkpoint, tmp_path):
    import shutil
    d = tmp_path / "c"
    shutil.copytree(multilabel_checkpoint, d)
    _rewrite(d / ck.WEIGHTS_FILE, lambda t, m: (t, {**m, "packed_rows": json.dumps({"ngram_weight": [10**12, 28]})}))
    with pytest.raises(CheckpointError, match="would take"):
        ck.read_weights(d / ck.WEIGHTS_FILE)


def test_the_trainer_state_packs_its_tables_too_and_reads_them_back_bit_for_bit(multilabel_checkpoint):
    """``trainer_state/`` holds the last epoch's weights and AdamW moments for ``--resume``: its n-gram table is
    stored as the checkpoint's is (used rows, float16), and loading gives the table the model holds."""
    from sentiment_cli.training.state import STATE_DIR, load_trainer_state

    state_file = next((multilabel_checkpoint / STATE_DIR).glob("epoch-*.safetensors"))
    raw = load_file(state_file)
    assert "model.ngram_weight" not in raw and raw["model.ngram_weight@values"].dtype == torch.float16
    state = load_trainer_state(multilabel_checkpoint)
    weights = ck.read_weights(multilabel_checkpoint / ck.WEIGHTS_FILE)
    assert state.model["ngram_weight"].dtype == torch.float32
    assert torch.equal(state.model["ngram_weight"], weights["ngram_weight"])   # the fit is the same every epoch
