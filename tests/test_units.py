"""Text written without spaces (issue 55): the units chosen by the data, the character and subword tokenizers, the
n-gram score's longer n-grams, an explanation's pieces and offsets, and the built-in suite refused."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from sentiment_cli.behaviour.run import refuse_builtin
from sentiment_cli.behaviour.suite import SuiteError, builtin_suite
from sentiment_cli.config import DataConfig, load_config, stored_config_from_dict
from sentiment_cli.data.batching import collate
from sentiment_cli.data.tokenizer import (BYTE_TOKENS, SPACE_TOKEN, UNK_ID, build_tokenizer, encode_texts,
                                          tokenizer_from_str, tokenizer_kind)
from sentiment_cli.data.units import choose_units
from sentiment_cli.inference.prediction import Explanation
from sentiment_cli.ngram.features import ngram_buckets, ngram_features
from sentiment_cli.ngram.score import NgramScore
from sentiment_cli.training.auto import Profile, data_rules
from sentiment_cli.data.tokenizer_kind import TokenizerKind
from sentiment_cli.training.policy import DEFAULT

SUBWORD_VOCAB = DEFAULT.rules.subword_vocab

DATA = Path(__file__).resolve().parent / "data"
THAI = DATA / "wisesight_small"


def _texts(path: Path, column: str) -> list[str]:
    with open(path, encoding="utf-8", newline="") as f:
        return [row[column] for row in csv.DictReader(f)]


def test_the_rule_reads_thai_as_subwords_and_english_as_words():
    thai = choose_units(_texts(THAI / "train.csv", "text"))
    english = choose_units(_texts(DATA / "sst5_small" / "train.csv", "sentence"))
    assert thai.kind == "unigram" and thai.share > 0.8 and "THAI" in thai.scripts
    assert "read as subwords" in thai.reason()
    assert english.kind == "word" and english.share < 0.2
    assert "without spaces" in thai.reason() and "%" in english.reason()


def test_the_rule_reads_chinese_as_characters_and_japanese_as_subwords():
    """Short texts, one short run each, are read by their script: Han characters (Chinese) as characters, a text
    mostly in kana (Japanese) as subwords."""
    chinese = ["太差了", "很好吃", "房间很大，床很舒服", "送餐很快"] * 5
    japanese = ["部屋が狭い", "とても良かった", "また泊まりたい"] * 5
    assert choose_units(chinese).kind == "char" and "Han characters" in choose_units(chinese).reason()
    assert choose_units(japanese).kind == "unigram" and "HIRAGANA" in choose_units(japanese).scripts
    assert choose_units(["Das Hotel war sehr schön und ruhig", "Mahtava hotelli, suosittelen"] * 5).kind == "word"


def test_a_thai_sentence_is_one_word_but_many_characters():
    texts = _texts(THAI / "train.csv", "text")
    word = build_tokenizer(texts, DataConfig(tokenizer="word"))
    char = build_tokenizer(texts, DataConfig(tokenizer="char"))
    sentence = "ร้านนี้อร่อยมาก บริการดี"
    assert len(word.encode(sentence).ids) == 2
    encoding = char.encode(sentence)
    assert tokenizer_kind(char) == "char" and tokenizer_kind(word) == "word"
    assert len(encoding.ids) == len(sentence) and SPACE_TOKEN in encoding.tokens
    assert [sentence[a:b] for a, b in encoding.offsets] == list(sentence)   # offsets map back to the text
    assert UNK_ID not in encode_texts(char, [sentence], DataConfig(tokenizer="char"))[0]


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_subwords_fall_back_to_bytes_never_unk(kind):
    texts = _texts(THAI / "train.csv", "text")[:200]
    tok = build_tokenizer(texts, DataConfig(tokenizer=kind, vocab_size=600))
    assert tokenizer_kind(tok) == kind and tok.token_to_id("<pad>") == 0 and tok.token_to_id("<unk>") == 1
    unseen = "房间很大 😀 ok"   # characters the Thai training texts never had
    encoding = tok.encode(unseen)
    assert UNK_ID not in encoding.ids and any(t in BYTE_TOKENS for t in encoding.tokens)
    again = tokenizer_from_str(tok.to_str(), "tokenizer.json")   # saved and loaded: still no <unk>
    assert again.encode(unseen).ids == encoding.ids


def test_an_old_config_reads_words_and_token_trigrams():
    old = {"data": {"vocab_size": 500}, "model": {"ngram_buckets": 1024}}
    cfg = stored_config_from_dict(old, "config.json")
    assert cfg.data.tokenizer == "word" and cfg.model.ngram_max_n == 3


def test_the_default_preset_asks_the_data():
    assert load_config("default").data.tokenizer == "auto"
    assert load_config("seed").data.tokenizer == "word"


def test_the_data_rule_says_subwords_in_one_line_with_their_size_and_tfidf():
    units = choose_units(_texts(THAI / "train.csv", "text"))
    profile = Profile(train_rows=600, class_counts=(168, 319, 100, 13), has_validation=True, unlabelled=0,
                      length_quantile=200, tokens=40_000, labels=("neg", "neu", "pos", "q"), units=units)
    choices = {c.key: c for c in data_rules(profile, load_config("default"))}
    assert choices["data.tokenizer"].value == "unigram" and "\n" not in choices["data.tokenizer"].line()
    assert choices["data.vocab_size"].value == SUBWORD_VOCAB and choices["model.ngram_weighting"].value == "tfidf"
    assert "model.ngram_max_n" not in choices   # subword 1-3-grams, as words
    english = Profile(train_rows=600, class_counts=(300, 300), has_validation=True, unlabelled=0,
                      length_quantile=50, tokens=40_000, labels=("neg", "pos"), units=choose_units(["a good film"]))
    rules = {c.key: c.value for c in data_rules(english, load_config("default"))}
    assert rules["data.tokenizer"] == "word" and "model.ngram_max_n" not in rules and "data.vocab_size" not in rules


def test_a_subword_sample_is_counted_in_subwords_not_in_runs():
    """Thai's space-split runs are whole phrases: max_length and the token count come from subwords."""
    from sentiment_cli.training.profile import _token_counts

    texts = _texts(THAI / "train.csv", "text")
    config = load_config("default")
    words, subwords = (_token_counts(texts, config, 0, TokenizerKind(kind), DEFAULT.rules)
                       for kind in ("word", "unigram"))
    chars = _token_counts(texts, config, 0, TokenizerKind.CHAR, DEFAULT.rules)
    assert 3 * words.sum() < subwords.sum() < chars.sum()


def test_character_4_grams_cross_words_and_match_the_fit_features():
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    b3, b4 = ngram_buckets(ids, 1 << 16, 3), ngram_buckets(ids, 1 << 16, 4)
    assert b4.shape == (1, 5, 4) and torch.equal(b4[..., :3], b3)
    assert (b4[0, :3, 3] == 0).all() and (b4[0, 3:, 3] > 0).all()   # a 4-gram ends at the 4th token on
    score = NgramScore(1 << 16, num_labels=3, max_n=4)
    with torch.no_grad():
        score.weight.normal_()
    rows = [[5, 6, 7, 8, 9, 5, 6, 7, 8], [2, 3]]
    x = ngram_features(rows, 1 << 16, max_n=4)
    assert x[0].nnz == 5 + 5 + 5 + 5   # 1- to 4-grams of 5 6 7 8 9 5 6 7 8, each counted once
    token_sum = score.token_logits(collate(rows)[0]).sum(1)
    assert torch.allclose(token_sum, torch.from_numpy(x @ score.weight.numpy()).float(), atol=1e-5)


def _explanation(text, spans, scores, join):
    return Explanation(text=text, label="pos", probability=0.9, probabilities={"neg": 0.1, "pos": 0.9},
                       tokens=[text[a:b] for a, b in spans], scores=scores, bias=0.0, ids=[5] * len(spans),
                       spans=spans, positions=list(range(len(spans))), num_tokens=len(spans), join_pieces=join)


def test_characters_join_into_pieces_with_offsets():
    text = "อร่อยมาก แย่"
    spans = [(i, i + 1) for i in range(len(text)) if text[i] != " "]
    scores = [0.5] * 8 + [-1.0] * 3
    joined = _explanation(text, spans, scores, True)
    assert [(t, round(s, 3)) for t, s, _ in joined.pieces()] == [("อร่อยมาก", 4.0), ("แย่", -3.0)]
    assert joined.top(1) == [("อร่อยมาก", 4.0)] and joined.top(1, positive=False) == [("แย่", -3.0)]
    assert joined.to_dict()["offsets"][0] == [0, 1]
    words = _explanation(text, spans, scores, False)   # a word-level model's tokens stay apart
    assert len(words.pieces()) == len(spans)
    # punctuation stays apart, as spaces do: a Chinese clause is a piece, not the sentence
    text = "房间太小了，隔音很差，不会再来"
    spans = [(i, i + 1) for i in range(len(text))]
    scores = [-1.0] * 14 + [0.5]
    assert [t for t, _, _ in _explanation(text, spans, scores, True).pieces()] == \
        ["房间太小了", "，", "隔音很差", "，", "不会再", "来"]
    # subwords whose spans hold the space before them (Metaspace's offsets): a space begins a piece
    text = "อาหารอร่อยมาก แต่บริการแย่ ไม่ประทับใจ"
    spans = [(0, 5), (5, 13), (13, 17), (17, 23), (23, 26), (26, 30), (30, 38)]
    assert [t for t, _, _ in _explanation(text, spans, [1.0] * 7, True).pieces()] == \
        ["อาหารอร่อยมาก", " แต่บริการแย่", " ไม่ประทับใจ"]
    spans = [(0, 13), (13, 14), (14, 26)]   # a space of its own (a lone ▁) shows as ▁ among the top pieces
    assert [t for t, _ in _explanation(text, spans, [1.0, 0.5, 2.0], True).top(3)] == \
        ["แต่บริการแย่", "อาหารอร่อยมาก", "▁"]


def test_the_builtin_suite_refuses_a_model_that_does_not_read_english():
    texts = _texts(THAI / "train.csv", "text")[:100]
    char = build_tokenizer(texts, DataConfig(tokenizer="char"))
    with pytest.raises(SuiteError, match="English sentences, but this model reads characters") as info:
        refuse_builtin(builtin_suite(), char)
    assert "\n" not in str(info.value)
    # words, but of another language: its vocabulary knows almost none of the suite's words
    with pytest.raises(SuiteError, match=r"vocabulary knows \d+% of its words"):
        refuse_builtin(builtin_suite(), build_tokenizer(texts, DataConfig(tokenizer="word")))
    english = _texts(DATA / "reviews_small" / "reviews.csv", "review")
    refuse_builtin(builtin_suite(), build_tokenizer(english, DataConfig(tokenizer="word")))   # English words: runs


def test_tfidf_weighting_in_the_model_is_the_fit_s_rows():
    """The torch score (what the model and its ONNX export run) equals the scipy TF-IDF rows the fit reads."""
    import numpy as np

    from sentiment_cli.ngram.features import idf_weights, tfidf_rows

    rows = [[5, 6, 7, 8, 9, 5, 6], [2, 3, 4], [9, 9, 40, 41]]
    buckets = 1 << 12
    x = ngram_features(rows, buckets, max_n=4)
    idf = idf_weights(x[:2])   # fitted on the first two: the third's unseen n-grams count nothing
    assert idf[0] == 0 and (idf[np.unique(x[:2].indices)] >= 1).all()
    w = np.random.default_rng(0).normal(size=(buckets + 1, 3)).astype(np.float32)
    score = NgramScore(buckets, num_labels=3, max_n=4, weighting="tfidf")
    score.load_fit(w, np.zeros(3), "lr", idf)
    expected = tfidf_rows(x, idf) @ w
    assert np.allclose(score.margins(rows), expected, atol=1e-5)
    token_sum = score.token_logits(collate(rows)[0]).sum(1).numpy()
    assert np.allclose(token_sum, expected, atol=1e-5)
    row = tfidf_rows(x, idf)[0]
    assert abs(float(row.multiply(row).sum()) - 1.0) < 1e-5
    with pytest.raises(ValueError, match="idf"):
        NgramScore(buckets, num_labels=3, weighting="tfidf").load_fit(w, np.zeros(3), "lr")


def test_sublinear_weighting_counts_repeats_as_the_fit_s_rows_do():
    """Sublinear tf: an n-gram seen c times in a text counts 1 + ln(c) before its idf, in the scipy rows the fit
    reads, in the torch score, and in the checkpoint's margins; min_df gives an idf of 0 to rarer n-grams."""
    import math

    import numpy as np

    from sentiment_cli.ngram.features import idf_weights, occurrence_counts, tfidf_rows

    rows = [[5, 6, 5, 6, 5, 7], [2, 3, 4, 2], [5, 9, 9, 9, 40]]
    buckets = 1 << 12
    x = ngram_features(rows, buckets, max_n=2, tf="sublinear")
    counts = [3, 2, 2, 2, 1, 1]   # 5; 6; "5 6"; "6 5"; 7; "5 7"
    assert np.allclose(sorted(x[0].data), sorted(1 + math.log(c) for c in counts))
    assert np.array_equal(occurrence_counts(torch.tensor([[4, 0, 4, 2, 4]])), torch.tensor([[3, 0, 0, 1, 0]]))
    idf = idf_weights(x, min_df=2)
    assert idf[0] == 0 and (idf > 0).sum() == 1   # only the unigram 5 is in two texts
    w = np.random.default_rng(0).normal(size=(buckets + 1, 3)).astype(np.float32)
    score = NgramScore(buckets, num_labels=3, max_n=2, weighting="sublinear")
    score.load_fit(w, np.zeros(3), "lr", idf_weights(x))
    expected = tfidf_rows(x, idf_weights(x)) @ w
    assert np.allclose(score.margins(rows), expected, atol=1e-5)
    assert np.allclose(score.token_logits(collate(rows)[0]).sum(1).numpy(), expected, atol=1e-5)
    binary = NgramScore(buckets, num_labels=3, max_n=2, weighting="tfidf")
    binary.load_fit(w, np.zeros(3), "lr", idf_weights(x))
    assert not np.allclose(binary.margins(rows)[0], expected[0], atol=1e-3)   # the repeats changed the first row
    with pytest.raises(ValueError, match="unknown term frequency"):
        ngram_features(rows, buckets, tf="log")


def test_a_character_model_pretrains_in_a_folder_of_its_own():
    from sentiment_cli.training.auto import pretrained_folder
    from sentiment_cli.training.pretrained import _TOKEN_KEYS

    words = load_config("default").override("data", source=str(THAI), tokenizer="word")
    chars = words.override("data", tokenizer="char")
    assert pretrained_folder(words) != pretrained_folder(chars)
    subwords = words.override("data", tokenizer="unigram", vocab_size=8000)
    assert pretrained_folder(subwords) != pretrained_folder(subwords.override("data", vocab_size=16000))
    assert "tokenizer" in _TOKEN_KEYS   # a word-level pretrained folder is refused for a character model


THAI_SUITE = """
name = "thai-smoke"
labels = ["neg", "neu", "pos", "q"]
seed = 0
samples = 5

[lexicons]
food = ["ข้าวมันไก่", "ก๋วยเตี๋ยว", "ส้มตำ"]
good = ["อร่อยมาก", "ดีมาก"]

[[test]]
name = "praise"
capability = "vocabulary"
type = "MFT"
expect = "pos"
dev = ["{food}ร้านนี้{good}"]
test = ["{food}{good}เลย"]

[[test]]
name = "punctuation"
capability = "robustness"
type = "INV"
perturb = "punctuation"
dev = ["{food}ร้านนี้{good}"]
test = ["{food}{good}เลย"]
"""


@pytest.mark.slow   # trains a model: seconds on a quiet machine
def test_a_thai_model_through_every_command(tmp_path):
    """The default's rules on the Thai slice read subwords; explain's offsets map back to the text, the built-in
    suite is refused in one line, a Thai suite runs, and export's parity gate passes."""
    from typer.testing import CliRunner

    from sentiment_cli.cli.app import app

    runner = CliRunner()
    out = tmp_path / "thai"
    r = runner.invoke(app, ["train", "--data", str(THAI), "--output", str(out), "--time-budget", "0", "--epochs", "1"])
    assert r.exit_code == 0, r.output
    assert "data.tokenizer = 'unigram'" in r.output and json.loads((out / "config.json").read_text())
    text = "ข้าวมันไก่ร้านนี้อร่อยมาก แนะนำเลย"
    r = runner.invoke(app, ["predict", "--checkpoint", str(out), "--explain", "--json", text])
    got = json.loads(r.stdout)
    assert [text[a:b] for a, b in got["offsets"]] == got["tokens"]
    # every character is some token's span (with byte fallback, no character is left out)
    assert {i for a, b in got["offsets"] for i in range(a, b)} == set(range(len(text)))
    r = runner.invoke(app, ["check", "--checkpoint", str(out)])
    assert r.exit_code == 2 and "built-in suite is English" in r.output
    suite = tmp_path / "thai.toml"
    suite.write_text(THAI_SUITE, encoding="utf-8")
    r = runner.invoke(app, ["check", "--checkpoint", str(out), "--suite", str(suite), "--json"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["export", "--format", "onnx", "--checkpoint", str(out), "--output", str(tmp_path / "t.onnx")])
    assert r.exit_code == 0 and "passed" in r.output, r.output


def test_tokens_of_one_span_are_one_piece():
    text = "นำ"   # NFKC gives "น", "ํ", "า": the last two share the span of "ำ"
    joined = _explanation(text, [(0, 1), (1, 2), (1, 2)], [0.5, 0.25, -0.5], True)
    assert [(t, s) for t, s, _ in joined.pieces()] == [("นำ", 0.25)]


def test_a_space_token_joins_no_piece():
    text = "ดี ดี"   # a character model reads the space as a token of its own
    joined = _explanation(text, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)], [0.5, 0.5, 0.0, 0.5, 0.5], True)
    assert [t for t, _, _ in joined.pieces()] == ["ดี", " ", "ดี"]


def test_an_ngram_across_a_space_shows_as_the_text_a_reader_sees():
    """A character model reads n-grams across spaces (Korean "안 좋": not good): a piece joins the piece after a space
    when the three push the same way, the space as typed; where a sign changes, the space stays a piece of its own;
    a model whose n-grams stop at spaces (subwords, Thai) keeps the space apart (the test above)."""
    text = "정말  안 좋아요. 최고"   # two spaces typed after 정말: one ▁ token, its span both
    spans = [(0, 1), (1, 2), (2, 4), (4, 5), (5, 6), (6, 7), (7, 8), (8, 9), (9, 10), (10, 11), (11, 12), (12, 13)]
    scores = [0.25, 0.25, 0.5, 0.5, -0.25, -1.0, -0.25, -0.25, 0.0, 0.0, 0.5, 0.5]
    explained = _explanation(text, spans, scores, True)
    explained.across_spaces = True
    assert [(t, s) for t, s, _ in explained.pieces()] == [
        ("정말  안", 1.5), (" ", -0.25), ("좋아요", -1.5), (".", 0.0), (" ", 0.0), ("최고", 1.0)]
    scores[3], scores[4] = -0.5, -0.5   # 안 and its space push the way 좋아요 does: "안 좋아요" is one piece
    explained.scores = scores
    assert explained.top(1, positive=False) == [("안 좋아요", -2.5)]
    assert sum(s for _, s, _ in explained.pieces()) == pytest.approx(sum(scores))   # still exact
    explained.across_spaces = False
    assert [t for t, _, _ in explained.pieces()][:4] == ["정말", "  ", "안", " "]


def test_the_audit_reads_text_without_spaces_as_characters():
    """The audit's linear score reads Thai as characters, where the default's encoder reads subwords."""
    from sentiment_cli.audit.probabilities import encode

    texts = _texts(THAI / "train.csv", "text")[:200]
    tokenizer, ids = encode(texts)
    assert tokenizer_kind(tokenizer) == "char" and len(ids) == 200
    words, _ = encode(["a good film", "a bad film"] * 20)
    assert tokenizer_kind(words) == "word"


def test_the_space_before_a_subword_text_covers_none_of_it():
    """A Metaspace pre-tokenizer's leading ▁ got the first character's span from ``tokenizers``, which the next
    token covers too: the display showed ``<unk>`` and the first word's piece as one character."""
    from sentiment_cli.inference.prediction import surface_tokens, token_rows

    texts = _texts(THAI / "train.csv", "text")
    tok = build_tokenizer(texts, DataConfig(tokenizer="unigram", vocab_size=2000))
    text = "อาหารอร่อยมาก แต่บริการแย่สุดๆ"
    assert tok.encode(text).tokens[0] == "\u2581"   # the slice's pieces leave the leading ▁ a token of its own
    (ids, spans, _, _), = token_rows(tok, DataConfig(tokenizer="unigram", max_length=256), [text])
    assert spans[0] == (0, 0) and surface_tokens(text, ids, spans)[0] == ""
    assert all(a >= b for (_, b), (a, _) in zip(spans, spans[1:]))   # no character in two tokens
    joined = _explanation(text, spans, [0.5] * len(spans), True)
    pieces = joined.pieces()
    assert "<unk>" not in [t for t, _, _ in pieces] and pieces[0][2][0] == 0 and len(pieces[0][0]) > 1
    assert abs(sum(s for _, s, _ in pieces) - 0.5 * len(spans)) < 1e-9   # the ▁'s score is kept


def test_a_unigram_vocabulary_learns_from_the_first_two_million_characters(monkeypatch):
    from sentiment_cli.data import tokenizer as tokenizer_module

    assert list(tokenizer_module.first_chars(["ab", "cd", "ef"], 3)) == ["ab", "cd"]
    texts = _texts(THAI / "train.csv", "text")
    fifty = build_tokenizer(texts[:50], DataConfig(tokenizer="unigram", vocab_size=2000))
    monkeypatch.setattr(tokenizer_module, "UNIGRAM_CHARS", 1)   # the first text alone
    first = build_tokenizer(texts, DataConfig(tokenizer="unigram", vocab_size=2000))
    alone = build_tokenizer(texts[:1], DataConfig(tokenizer="unigram", vocab_size=2000))
    assert set(first.get_vocab()) == set(alone.get_vocab())   # (the pieces' scores' ties fall either way)
    assert first.get_vocab_size() < fifty.get_vocab_size()
