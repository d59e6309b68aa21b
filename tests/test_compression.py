"""Compressed checkpoints (issue 77): rows pruned by norm, int8 values with power-of-two scales, stored as their
rows (checkpoint format_version 4) and held so in memory, giving exactly the logits of the float model
``compress`` returns."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from sentiment_cli import checkpoint as ck
from sentiment_cli.training.policy import DEFAULT
from sentiment_cli.compact_table import CompactTable, TableCode, encode, pack_mask, quantized, unpack_mask
from sentiment_cli.data.tokenizer import PAD_ID, UNK_ID
from sentiment_cli.errors import CheckpointError
from sentiment_cli.inference.torch_backend import batched_logits, batched_token_logits
from sentiment_cli.model.compress import BLOCK, Compression, compress, kept_rows, ladder, table_codes

from .conftest import SMALL_DATA

CPU = torch.device("cpu")


def _table(n=500, width=8, used=300, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = torch.zeros(n, width) if width else torch.zeros(n)
    rows = torch.randperm(n - 1, generator=g)[:used] + 1
    t[rows] = torch.randn((used, width) if width else (used,), generator=g) * torch.rand(
        (used, 1) if width else (used,), generator=g)
    return t


# ----------------------------------------------------------------------------- the int8 code


@pytest.mark.parametrize("width, block", [(8, 1), (0, BLOCK), (0, 7)])
def test_int8_values_are_exact_products_and_rounding_twice_changes_nothing(width, block):
    t = _table(width=width)
    q = quantized(t, block)
    assert torch.equal(quantized(q, block), q)                       # idempotent: the writer re-derives the codes
    blocks = q.view(q.shape[0], -1) if width else torch.cat([q, q.new_zeros(-len(q) % block)]).view(-1, block)
    originals = t.view(t.shape[0], -1) if width else torch.cat([t, t.new_zeros(-len(t) % block)]).view(-1, block)
    for got, was in zip(blocks, originals):
        if not was.any():
            assert not got.any()
            continue
        scale = 2.0 ** torch.ceil(torch.log2(was.abs().max() / 127))   # the least power of two that fits 127 codes
        codes = got / scale
        assert torch.equal(codes, codes.round()) and 64 <= codes.abs().max() <= 127
        assert (got - was).abs().max() <= scale / 2 + 1e-12        # rounding to the nearest code


def test_tiny_rows_round_to_zero_and_huge_ones_are_refused():
    t = torch.tensor([[1e-40, -1e-41], [3.0, 1.0]])
    q = quantized(t)
    assert torch.equal(q[0], torch.zeros(2)) and q[1, 0] == 3.0
    with pytest.raises(ValueError, match="beyond an int8"):
        quantized(torch.tensor([[3e38, 1.0]]))
    with pytest.raises(ValueError, match="NaN"):
        quantized(torch.tensor([[float("nan"), 1.0]]))


# ----------------------------------------------------------------------------- pruning


def test_kept_rows_keep_the_largest_share_of_the_used_rows_and_the_protected_ones():
    t = torch.zeros(10, 2)
    t[2:10] = torch.arange(8, 0, -1, dtype=torch.float32).view(-1, 1)   # norms fall as the row grows
    t[1] = 0.5                                                          # a protected row with a small norm
    t[5] = 100.0                                                        # a large row far down the ids
    # 8 used rows besides the protected ones: ceil(0.25 * 8) = 2 kept, and rows 0, 1
    assert kept_rows(t, 0.25, protected=(0, 1)).nonzero().flatten().tolist() == [0, 1, 2, 5]          # by norm
    assert kept_rows(t, 0.25, protected=(0, 1), by="id").nonzero().flatten().tolist() == [0, 1, 2, 3]  # by id
    assert kept_rows(t, 1.0).all()
    assert kept_rows(torch.zeros(4, 2), 0.1).all()                   # unused rows: nothing to prune
    with pytest.raises(ValueError):
        kept_rows(t, 0.5, by="frequency")


def test_a_pruned_word_reads_unk_a_pruned_bucket_reads_zeros_and_pad_stays_zero():
    g = torch.Generator().manual_seed(1)
    weights = {"token_embedding.weight": torch.randn(50, 4, generator=g),
               "bigram_embedding.weight": _table(64, 4, 40),
               "ngram_weight": _table(100, 0, 60), "head.bias": torch.randn(2, generator=g)}
    weights["token_embedding.weight"][PAD_ID] = 0
    out = compress(weights, Compression(words=0.2, bigrams=0.25, ngrams=0.5, bits=None))
    words = out["token_embedding.weight"]
    pruned = ~kept_rows(weights["token_embedding.weight"], 0.2, (PAD_ID, UNK_ID), by="id")
    assert pruned.nonzero().flatten().tolist() == list(range(12, 50))   # ceil(0.2 * 48) = 10 words kept: ids 2..11
    assert (words[pruned] == words[UNK_ID]).all() and torch.equal(words[UNK_ID], weights["token_embedding.weight"][1])
    assert not words[PAD_ID].any()
    bigrams = out["bigram_embedding.weight"]
    assert int(bigrams.ne(0).any(1).sum()) == 10 and not bigrams[0].any()
    assert int(out["ngram_weight"].ne(0).sum()) == 30
    assert out["head.bias"] is weights["head.bias"]                  # the rest as it was


def test_compression_records_round_trip_and_bad_ones_are_refused():
    c = Compression(0.5, 0.1, 0.25, 8)
    record = json.loads(json.dumps(c.record()))
    assert record["keep"] == {"words": 0.5, "bigrams": 0.1, "ngrams": 0.25} and record["bits"] == 8
    assert Compression.from_record(record) == c
    for bad in ({"keep": {"words": 0}}, {"keep": {"verbs": 0.5}}, {"keep": {}, "bits": 4}, [1], {"bits": 8},
                {"keep": {}, "bits": 8.0}, {"keep": {}, "bits": True}, {"keep": {"words": "1"}}):
        with pytest.raises(ValueError):
            Compression.from_record(bad)
    rungs = ladder(DEFAULT.ship.rungs)
    assert rungs[0] == Compression() and all(r.bits == 8 for r in rungs)
    shares = [(r.words, r.bigrams, r.ngrams) for r in rungs]
    assert all(all(b <= a for a, b in zip(x, y)) for x, y in zip(shares, shares[1:]))   # each rung keeps less


# ----------------------------------------------------------------------------- storage and the table in memory


@pytest.mark.parametrize("width, used, fill, bits, index, every_row_held", [
    (8, 300, None, 8, "mask", False), (8, 499, None, 8, "every", True), (8, 480, UNK_ID, 8, "mask", True),
    (0, 10, None, 8, "rows", False), (0, 400, None, 8, "mask", True), (8, 50, None, None, "mask", False),
    (0, 5, None, None, "rows", False)])
def test_a_compact_table_gives_back_every_row_bit_for_bit(width, used, fill, bits, index, every_row_held):
    t = _table(width=width, used=used)
    if fill is not None:
        t[t.ne(0).view(len(t), -1).any(1).logical_not()] = t[fill].clone()   # unstored rows read the fill row
    t = quantized(t, 1 if width else BLOCK) if bits else t
    code = TableCode(bits, fill, 1 if width else BLOCK)
    stored = encode(t, code)
    # the cheapest index: 4 bytes a stored row, a bit a row of the table, or none (every row stored); 500 rows
    assert {"rows", "mask"} & set(stored) == ({index} - {"every"})
    table = CompactTable.of(tuple(t.shape), stored, code)
    # in memory an id costs 4 bytes a stored row: every row is held where that is fewer bytes (int8 rows of 8 and
    # a float32 scale: 12 bytes a row, 16 with its id)
    assert (table.rows is None) == every_row_held
    assert torch.equal(table.dense(), t)
    ids = torch.randint(0, len(t), (7, 11))
    assert torch.equal(table(ids), t[ids])


def test_a_mask_sets_a_bit_a_stored_row():
    rows = torch.tensor([0, 3, 8, 9, 15, 16], dtype=torch.int32)
    mask = pack_mask(rows, 17)
    assert mask.tolist() == [0b1001, 0b10000011, 0b1] and torch.equal(unpack_mask(mask, 17), rows)
    with pytest.raises(ValueError, match="beyond its 16 rows"):
        unpack_mask(mask, 16)


def test_the_onnx_form_of_the_row_search_finds_the_same_rows(monkeypatch):
    t = quantized(_table(width=4, used=40))
    code = TableCode(8, None, 1)
    table = CompactTable.of(tuple(t.shape), encode(t, code), code)
    ids = torch.arange(len(t)).view(10, -1)
    monkeypatch.setattr(torch.compiler, "is_exporting", lambda: True)   # the branch-free binary search
    assert torch.equal(table(ids), t[ids])


def test_the_writer_refuses_weights_compress_did_not_make():
    weights = {"token_embedding.weight": torch.randn(30, 4), "head.bias": torch.zeros(2)}
    with pytest.raises(ValueError, match="not what compression gives"):
        ck.tensors_to_bytes(weights, codes=table_codes(weights, Compression()))
    c = Compression(0.5)
    assert ck.tensors_from_bytes(ck.tensors_to_bytes(compress(weights, c), codes=table_codes(weights, c)), "x")


def test_a_compression_that_changes_nothing_stores_the_tables_as_before(compressible_checkpoint):
    record = ck.read_record(compressible_checkpoint)
    assert table_codes(record.weights, Compression(bits=None)) == {}
    assert ck.weights_bytes(record.weights, Compression(bits=None)) == ck.weights_bytes(record.weights)


# ----------------------------------------------------------------------------- a compressed checkpoint


def _texts():
    from sentiment_cli.data.splits import load_split

    return load_split(str(SMALL_DATA), "test", 0.0, 0).texts[:150] + ["bad", "!!!", "not good, not bad " * 40]


def _ids(ckpt, texts):
    from sentiment_cli.data.tokenizer import encode_texts

    return encode_texts(ckpt.tokenizer, texts, ckpt.config.data)


@pytest.mark.parametrize("c", [Compression(0.5, 0.25, 0.5, 8), Compression(1.0, 1.0, 1.0, 8),
                               Compression(0.3, 0.1, 0.05, None)])
def test_the_loaded_folder_gives_the_logits_and_explanations_of_the_float_model_bit_for_bit(
        compressible_checkpoint, tmp_path, c):
    record = ck.read_record(compressible_checkpoint)
    small = record.compressed(c)
    ck.write_checkpoint(tmp_path / "c", small)
    assert ck.read_compression(tmp_path / "c") == c
    assert json.loads((tmp_path / "c" / ck.CONFIG_FILE).read_text())["format_version"] == 4
    back = ck.read_weights(tmp_path / "c" / ck.WEIGHTS_FILE)        # lossless w.r.t. compress()
    assert set(back) == set(small.weights) and all(torch.equal(back[k], small.weights[k]) for k in back)
    loaded = ck.load_checkpoint(tmp_path / "c")
    ids = _ids(loaded, _texts())
    memory = small.model()
    assert torch.equal(batched_logits(memory, ids, batch_size=32, device=CPU),
                       batched_logits(loaded.model, ids, batch_size=32, device=CPU))
    a, b = (batched_token_logits(m, ids[:40], batch_size=16, device=CPU) for m in (memory, loaded.model))
    assert (a[0] == b[0]).all() and all((x == y).all() for x, y in zip(a[1], b[1])) and (a[2] == b[2]).all()
    # and the compression did something: the full model's logits differ
    full = batched_logits(record.model(), ids, batch_size=32, device=CPU)
    assert not torch.equal(full, batched_logits(memory, ids, batch_size=32, device=CPU))


def test_the_loaded_model_holds_int8_rows_not_float_tables(compressed_checkpoint, compressible_checkpoint):
    model = ck.load_checkpoint(compressed_checkpoint).model
    config = ck.read_config(compressed_checkpoint)[0].model
    tables = [model.token_embedding, model.bigram_embedding, model.ngram_score.table]
    assert all(isinstance(t, CompactTable) and t.values.dtype == torch.int8 for t in tables)
    assert model.ngram_score.weight is None
    largest = max(t.numel() for t in [*model.parameters(), *model.buffers()] if t.is_floating_point())
    assert largest < config.bigram_buckets * config.d_model    # no float table of the bigrams' size, or larger
    assert model.num_parameters() == ck.load_checkpoint(compressible_checkpoint).model.num_parameters()
    raw = load_file(compressed_checkpoint / ck.WEIGHTS_FILE)
    assert raw["bigram_embedding.weight@values"].dtype == torch.int8 and "bigram_embedding.weight" not in raw
    size = (compressed_checkpoint / ck.WEIGHTS_FILE).stat().st_size
    assert size < 0.5 * (compressible_checkpoint / ck.WEIGHTS_FILE).stat().st_size
    assert size == ck.weights_bytes(ck.read_record(compressed_checkpoint).weights,
                                    ck.read_compression(compressed_checkpoint))


def test_a_multi_label_score_of_many_columns_compresses_exactly(multilabel_checkpoint, tmp_path):
    small = ck.read_record(multilabel_checkpoint).compressed(Compression(0.5, 1.0, 0.25, 8))
    ck.write_checkpoint(tmp_path / "c", small)
    raw = load_file(tmp_path / "c" / ck.WEIGHTS_FILE)
    assert raw["ngram_weight@values"].dtype == torch.int8 and raw["ngram_weight@values"].shape[1] == 28
    loaded = ck.load_checkpoint(tmp_path / "c")
    ids = _ids(loaded, _texts()[:60])
    assert torch.equal(batched_logits(small.model(), ids, batch_size=16, device=CPU),
                       batched_logits(loaded.model, ids, batch_size=16, device=CPU))


@pytest.fixture(scope="module")
def tfidf_checkpoint(tmp_path_factory):
    """A tiny model whose n-gram score is TF-IDF weighted (an idf table beside its weights), 1 epoch (seconds)."""
    from sentiment_cli.training.run import train

    from .conftest import small_config

    out = tmp_path_factory.mktemp("tfidf") / "ckpt"
    train(small_config(epochs=1).override("model", ngram_buckets=65_537, ngram_weighting="tfidf"), out)
    return out


def test_a_tfidf_score_loses_the_idf_of_the_n_grams_it_prunes_and_loads_exactly(tfidf_checkpoint, tmp_path):
    record = ck.read_record(tfidf_checkpoint)
    small = record.compressed(Compression(1.0, 1.0, 0.25, 8))
    weight, idf = small.weights["ngram_weight"], small.weights["ngram_idf"]
    pruned = record.weights["ngram_weight"].ne(0) & weight.eq(0)
    assert pruned.sum() > 1000 and not idf[pruned].any() and idf[weight.ne(0)].all()
    assert torch.equal(quantized(idf, BLOCK), idf) and not torch.equal(idf, record.weights["ngram_idf"])
    ck.write_checkpoint(tmp_path / "c", small)
    raw = load_file(tmp_path / "c" / ck.WEIGHTS_FILE)
    assert raw["ngram_idf@values"].dtype == torch.int8
    loaded = ck.load_checkpoint(tmp_path / "c")
    assert loaded.model.ngram_score.idf is None and loaded.model.ngram_score.idf_table is not None
    ids = _ids(loaded, _texts()[:80])
    assert torch.equal(batched_logits(small.model(), ids, batch_size=16, device=CPU),
                       batched_logits(loaded.model, ids, batch_size=16, device=CPU))
    margins = loaded.model.ngram_score.margins(ids[:5])      # the numpy path reads the tables whole
    assert np.allclose(margins, small.model().ngram_score.margins(ids[:5]))


def test_read_record_gives_back_the_compressed_record(compressed_checkpoint):
    record = ck.read_record(compressed_checkpoint)
    assert record.compression == Compression(0.5, 0.25, 0.5, 8)
    with pytest.raises(ValueError, match="compressed already"):
        record.compressed(Compression())


def _rewrite(path, edit):
    tensors = load_file(path)
    with safe_open(path, "pt") as f:
        metadata = f.metadata()
    tensors, metadata = edit(tensors, metadata)
    save_file(tensors, path, metadata=metadata)


def _meta(m, name, **changes):
    entries = json.loads(m["compact_rows"])
    entries[name].update(changes)
    return {**m, "compact_rows": json.dumps(entries)}


def _unstored(mask):
    rows = set(unpack_mask(mask, 8 * len(mask)).tolist())
    return next(i for i in range(len(rows) + 1) if i not in rows)


def _first_byte_set(mask):
    out = mask.clone()
    out[0] = 255
    return out


def _as_rows(t, name, change):
    """The file's tensors with table ``name``'s mask replaced by its rows (``change``d): a file that indexes by rows."""
    out = {k: v for k, v in t.items() if k != name + "@mask"}
    return {**out, name + "@rows": change(unpack_mask(t[name + "@mask"], 8 * len(t[name + "@mask"])))}


B, N = "bigram_embedding.weight", "ngram_weight"


@pytest.mark.parametrize("edit, message", [
    (lambda t, m: (_as_rows(t, B, lambda rows: rows.flip(0)), m), "not ascending"),
    (lambda t, m: (_as_rows(t, B, lambda rows: rows + 10**6), m), "not ascending within"),
    (lambda t, m: ({**_as_rows(t, B, lambda rows: rows), B + "@mask": t[B + "@mask"]}, m), "both rows and a mask"),
    (lambda t, m: ({**t, B + "@mask": t[B + "@mask"] * 0 + 255}, m), "its mask sets a row beyond its 998 rows"),
    (lambda t, m: ({**t, B + "@mask": _first_byte_set(t[B + "@mask"])}, m), r"\d+ stored values for \d+ rows"),
    (lambda t, m: ({**t, B + "@mask": t[B + "@mask"][:-1]}, m), "a mask torch.uint8"),
    (lambda t, m: ({**t, B + "@exponents": t[B + "@exponents"] * 0 + 127}, m), "exponents lie outside"),
    (lambda t, m: ({**t, B + "@values": t[B + "@values"][:-1]}, m), "compact table bigram_embedding.weight"),
    (lambda t, m: ({k: v for k, v in t.items() if k != B + "@exponents"}, m), "exponents None"),
    (lambda t, m: (t, _meta(m, B, bits=4)), "describes bigram_embedding.weight"),
    (lambda t, m: (t, _meta(m, B, bits=8.0)), "describes bigram_embedding.weight"),
    (lambda t, m: (t, _meta(m, B, shape=[10**12, 32])), r"a mask torch.uint8 \[125\] for 1000000000000 rows"),
    (lambda t, m: (t, _meta(m, B, shape=[1000, 32])), "does not match config.json"),
    (lambda t, m: (t, _meta(m, "token_embedding.weight", fill=10**9)), "fill row"),
    (lambda t, m: (t, _meta(m, "token_embedding.weight", fill=_unstored(t["token_embedding.weight@mask"]))),
     "fill row \\d+ is not stored"),
    (lambda t, m: (t, {**m, "compact_rows": "[]"}), "not a map of names to tables"),
    (lambda t, m: (t, {k: v for k, v in m.items() if k != "compact_rows"}), "belongs to no packed table"),
])
def test_a_tampered_compact_table_is_refused_in_one_line(compressed_checkpoint, tmp_path, edit, message):
    d = tmp_path / "c"
    shutil.copytree(compressed_checkpoint, d)
    _rewrite(d / ck.WEIGHTS_FILE, edit)
    with pytest.raises(CheckpointError, match=message) as info:
        ck.load_checkpoint(d)
    assert "\n" not in str(info.value) and "model.safetensors" in str(info.value)


def test_a_malformed_compression_record_is_refused_in_one_line(compressed_checkpoint, tmp_path):
    d = tmp_path / "c"
    shutil.copytree(compressed_checkpoint, d)
    raw = json.loads((d / ck.CONFIG_FILE).read_text())
    raw["compression"]["keep"]["words"] = 7
    (d / ck.CONFIG_FILE).write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match="config.json: compression: words must be a share") as info:
        ck.load_checkpoint(d)
    assert "\n" not in str(info.value)


def test_a_version_4_folder_is_refused_by_a_tool_that_reads_3(compressed_checkpoint, monkeypatch):
    monkeypatch.setattr(ck, "CHECKPOINT_FORMAT_VERSION", 3)
    with pytest.raises(CheckpointError, match="format_version 4 is newer than this tool reads"):
        ck.load_checkpoint(compressed_checkpoint)
