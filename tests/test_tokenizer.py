from sentiment_cli.config import DataConfig
from sentiment_cli.data.tokenizer import PAD_ID, UNK_ID, build_tokenizer, encode_texts, load_tokenizer, save_tokenizer, truncate

TEXTS = ["A great movie.<br /><br />Great acting!", "Terrible, TERRIBLE film", "great film"]


def test_specials_normalisation_and_whitespace_split():
    tok = build_tokenizer(TEXTS, DataConfig(vocab_size=100))
    assert tok.token_to_id("<pad>") == PAD_ID and tok.token_to_id("<unk>") == UNK_ID
    # <br /> becomes a space, text is lowercased, whitespace split keeps punctuation on the word
    assert tok.encode("A great movie.<br />Great").tokens == ["a", "great", "movie.", "great"]
    assert tok.encode("never-seen-word").ids == [UNK_ID]


def test_punctuation_pre_tokenizer_splits_punctuation():
    tok = build_tokenizer(TEXTS, DataConfig(vocab_size=100, pre_tokenizer="punctuation"))
    assert tok.encode("Terrible, great!").tokens == ["terrible", ",", "great", "!"]


def test_vocab_size_and_min_frequency_are_respected():
    tok = build_tokenizer(TEXTS, DataConfig(vocab_size=5))
    assert tok.get_vocab_size() == 5
    tok = build_tokenizer(TEXTS, DataConfig(vocab_size=100, min_frequency=2))
    assert set(tok.get_vocab()) == {"<pad>", "<unk>", "great", "terrible,", "film"} - {"terrible,"} | {"great"}


def test_round_trip_gives_identical_ids(tmp_path):
    cfg = DataConfig(vocab_size=100)
    tok = build_tokenizer(TEXTS, cfg)
    path = tmp_path / "tokenizer.json"
    path.write_text(save_tokenizer(tok))
    again = load_tokenizer(path)
    probe = TEXTS + ["unseen words and great films", "ÉMOJI 🎬 <br/> ok"]
    assert encode_texts(again, probe, cfg) == encode_texts(tok, probe, cfg)


def test_truncation_head_and_head_tail():
    ids = list(range(10, 30))
    assert truncate(ids, 8) == ids[:8]
    assert truncate(ids, 8, "head_tail", 0.25) == ids[:2] + ids[-6:]
    assert truncate(ids[:5], 8, "head_tail") == ids[:5]
    assert truncate([], 8) == [UNK_ID]   # every review keeps one real token
