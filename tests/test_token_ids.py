"""Token ids kept in a temporary file (data/token_ids.py) and encoded a block at a time (data/tokenizer.py)."""

import numpy as np
import pytest

from sentiment_cli.data import tokenizer as tokenization
from sentiment_cli.data.batching import collate
from sentiment_cli.data.token_ids import TokenIds
from sentiment_cli.data.tokenizer import build_tokenizer, encode_texts, encode_token_ids

from .conftest import small_config

ROWS = [[5, 6, 7], [2], [9, 8, 7, 6, 5], [3, 3], [16_777_259 + 40]]   # the last: a negation mark's id


def test_rows_read_back_as_written_views_included():
    ids = TokenIds.from_rows(ROWS)
    assert len(ids) == 5 and ids.tolist() == ROWS
    assert [ids[i].tolist() for i in range(-5, 5)] == ROWS + ROWS
    assert ids.lengths.tolist() == [3, 1, 5, 2, 1]
    view = ids[np.array([4, 0, 0, 2])]                      # any order, repeats allowed: no copy
    assert view.tolist() == [ROWS[4], ROWS[0], ROWS[0], ROWS[2]] and view.lengths.tolist() == [1, 3, 3, 5]
    assert view[1:3].tolist() == [ROWS[0], ROWS[0]] and ids[1:4].tolist() == ROWS[1:4] and ids[3:1].tolist() == []
    assert (ids[:2] + view[:1]).tolist() == [ROWS[0], ROWS[1], ROWS[4]]
    with pytest.raises(IndexError):
        ids[5]
    with pytest.raises(ValueError, match="int32"):
        TokenIds.from_rows([[1 << 31]])
    assert len(TokenIds.from_rows([])) == 0 and TokenIds.from_rows([[]]).tolist() == [[]]


def test_collate_reads_a_batch_of_rows_as_lists_would():
    ids = TokenIds.from_rows(ROWS)
    for batch in ([2, 0, 4], [1], [3, 3]):
        got, want = collate(ids, batch), collate(ROWS, batch)
        assert all(g.equal(w) for g, w in zip(got, want))


def test_many_rows_iterate_in_blocks_as_written(monkeypatch):
    from sentiment_cli.data import token_ids

    monkeypatch.setattr(token_ids, "_READ_ROWS", 7)          # several blocks, some consecutive, some not
    rng = np.random.default_rng(0)
    rows = [rng.integers(0, 50_000, size=rng.integers(1, 30)).tolist() for _ in range(100)]
    ids = TokenIds.from_rows(rows)
    assert ids.tolist() == rows
    order = rng.permutation(100)
    assert ids[order].tolist() == [rows[i] for i in order] and ids[10:90].tolist() == rows[10:90]


def test_encoding_a_block_at_a_time_gives_encode_texts_ids(monkeypatch):
    cfg = small_config().data
    texts = ["A fine film.", "Not good at all<br />really", "x " * 300, "", "Bad. Bad! Worse?"] * 3
    tok = build_tokenizer(texts, cfg)
    monkeypatch.setattr(tokenization, "ENCODE_ROWS", 4)    # blocks of 4 texts: the ids do not depend on it
    assert encode_token_ids(tok, iter(texts), cfg).tolist() == encode_texts(tok, texts, cfg)
