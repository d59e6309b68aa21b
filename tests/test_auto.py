"""The default reads the data: unlabelled text from anywhere, the data rules, and their one-line errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sentiment_cli.cli import app
from sentiment_cli.config import given_keys, load_config
from sentiment_cli.data.splits import DataSpec, load_split, load_train_validation
from sentiment_cli.data.unlabelled import load_unlabelled, unlabelled_texts
from sentiment_cli.data.sources import load_source
from sentiment_cli.errors import ConfigError, DataError
from sentiment_cli.training import auto
from sentiment_cli.training.policy import DEFAULT

RULES = DEFAULT.rules

from .conftest import SMALL_DATA

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
REVIEWS = SMALL_DATA.parent / "reviews_small" / "reviews.csv"   # one file: 600 labelled reviews, no dev split
SST5_SMALL = SMALL_DATA.parent / "sst5_small"                   # train.csv, dev.csv, test.csv


def _invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


# ----------------------------------------------------------------------------- unlabelled text

def test_a_text_file_gives_one_text_per_line_and_skips_blank_lines(tmp_path):
    path = tmp_path / "more.txt"
    path.write_text("first text\n\n  second text  \n\nthird\n", encoding="utf-8")
    found = load_unlabelled(str(path))
    assert found.texts == ["first text", "second text", "third"] and found.notes == []


def test_a_labelled_csv_gives_its_texts_and_a_note_that_the_labels_are_ignored(tmp_path):
    got = load_unlabelled(str(REVIEWS), "review")
    assert len(got.texts) == 600 and got.texts[0].startswith("Back in 2004")       # the file's 600 reviews
    assert len(got.notes) == 1 and "column 'sentiment' looks like labels; it is ignored" in got.notes[0]


def test_a_dataset_folder_gives_its_train_split_when_it_has_no_unsupervised_split():
    got = load_unlabelled(str(SST5_SMALL))
    assert len(got.texts) == 2000 and got.where.endswith("train.csv")


def test_the_source_split_and_the_file_are_joined(tmp_path):
    path = tmp_path / "more.txt"
    path.write_text("one more text\nand another\n", encoding="utf-8")
    src = load_source(str(SST5_SMALL))
    assert unlabelled_texts(src, "", "sentence") is None                      # no unsupervised split, no file
    assert unlabelled_texts(src, str(path), "sentence").texts == ["one more text", "and another"]


@pytest.mark.parametrize("content, message", [
    (b"fine\n\xff\xfe broken\n", "line 2: not valid UTF-8 (byte 1)"),
    (b"\n \n", "no text in it"),
])
def test_an_unreadable_unlabelled_file_is_one_line_naming_it(tmp_path, content, message):
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    with pytest.raises(DataError, match=re.escape(message)):
        load_unlabelled(str(path))
    r = _invoke("train", "--data", REVIEWS, "--unlabelled", path, "--output", tmp_path / "out", "--epochs", "1")
    assert r.exit_code == 1 and "Traceback" not in r.output
    last = r.output.strip().splitlines()[-1]
    assert last.startswith(f"error: --unlabelled {path}") and message in last


def test_a_missing_unlabelled_path_is_one_line(tmp_path):
    r = _invoke("train", "--data", REVIEWS, "--unlabelled", tmp_path / "nope.txt", "--output", tmp_path / "out")
    assert r.exit_code == 1 and r.output.strip().splitlines()[-1] == \
        f"error: --unlabelled {tmp_path / 'nope.txt'}: no such file or folder"


# ----------------------------------------------------------------------------- the rules

def test_rules_for_a_single_file_without_dev_split_or_unlabelled_text():
    cfg = load_config("default").override("data", source=str(REVIEWS))
    profile = auto.read_profile(cfg)
    assert profile.train_rows == 600 and not profile.has_validation and profile.unlabelled == 0
    chosen = {c.key: c.value for c in auto.data_rules(profile, cfg)}
    assert profile.tokens < RULES.few_tokens                                      # 600 reviews: a small set
    assert chosen["training.init_from"] == "" and "pretrain.splits" not in chosen   # no word2vec on so few
    assert chosen["training.distill_reviews"] == 0
    assert chosen["training.embedding_lr_scale"] == RULES.small_embedding_lr_scale
    assert chosen["data.validation_fraction"] == 0.1                             # small: a 10% hold-out,
    assert chosen["training.refit"] is True                                      # then trained on
    assert "data.max_length" not in chosen          # reviews: longer than 512 tokens at the 99th percentile


def test_rules_on_the_shared_question_set_read_its_dev_split_lengths_and_imbalance():
    cfg = load_config("default").override("data", source=str(SHARED / "trec6"))
    profile = auto.read_profile(cfg)
    assert profile.has_validation and profile.train_rows == 4907 and profile.imbalance > 13
    chosen = {c.key: c for c in auto.data_rules(profile, cfg)}
    assert chosen["data.max_length"].value < 64                                  # questions are short
    assert "dev split" in chosen["data.validation_fraction"].reason
    assert "training.refit" not in chosen                                        # dev rows are not training rows
    assert chosen["training.embedding_lr_scale"].value == 10.0 and "52," in chosen["training.embedding_lr_scale"].reason
    assert chosen["training.init_from"].value == ""
    assert chosen["data.min_frequency"].value == 1                               # words seen once are kept


def test_a_small_sets_vocabulary_keeps_the_words_seen_once():
    import csv
    from dataclasses import replace

    from sentiment_cli.data.tokenizer import build_tokenizer

    cfg = load_config("default").override("data", source=str(SST5_SMALL))
    profile = auto.read_profile(cfg)
    chosen = {c.key: c.value for c in auto.data_rules(profile, cfg)}
    assert cfg.data.min_frequency == 2 and chosen["data.min_frequency"] == 1
    with open(SST5_SMALL / "train.csv", newline="", encoding="utf-8") as fh:
        texts = [row["sentence"] for row in csv.DictReader(fh)]
    kept = build_tokenizer(texts, replace(cfg.data, min_frequency=1), length=len(texts)).get_vocab_size()
    assert kept > build_tokenizer(texts, cfg.data, length=len(texts)).get_vocab_size()
    mine = cfg.override("data", min_frequency=1)                                  # already 1: nothing to choose
    assert "data.min_frequency" not in {c.key for c in auto.data_rules(profile, mine)}


def test_a_large_set_keeps_the_presets_embedding_and_word2vec_on_its_own_texts():
    profile = auto.Profile(train_rows=25_000, class_counts=(12_500, 12_500), has_validation=False, unlabelled=0,
                           length_quantile=1000, tokens=6_700_000)
    chosen = {c.key: c.value for c in auto.data_rules(profile, load_config("default"))}
    assert chosen["pretrain.splits"] == "train" and "training.init_from" not in chosen
    assert "training.embedding_lr_scale" not in chosen and "data.min_frequency" not in chosen
    just_under = auto.Profile(**{**profile.__dict__, "tokens": RULES.few_tokens - 1})
    chosen = {c.key: c.value for c in auto.data_rules(just_under, load_config("default"))}
    assert chosen["training.init_from"] == "" and chosen["training.embedding_lr_scale"] == 10.0
    assert chosen["data.min_frequency"] == 1


def test_a_large_set_without_dev_split_holds_out_a_smaller_share():
    profile = auto.Profile(train_rows=25_000, class_counts=(12_500, 12_500), has_validation=False, unlabelled=50_000,
                           length_quantile=1000, tokens=6_700_000)
    chosen = {c.key: c.value for c in auto.data_rules(profile, load_config("default"))}
    assert chosen["data.validation_fraction"] == 0.05 and "pretrain.splits" not in chosen
    assert "training.refit" not in chosen                     # a second fine-tuning for 5% more rows: not worth it
    assert "data.max_length" not in chosen and "training.distill_reviews" not in chosen
    assert "training.init_from" not in chosen and "training.embedding_lr_scale" not in chosen


def test_epochs_by_size_reach_the_target_steps_within_the_cap():
    cfg = load_config("default")                                  # batch 64, 4 epochs

    def epochs(rows):
        profile = auto.Profile(train_rows=rows, class_counts=(rows // 2, rows - rows // 2), has_validation=True,
                               unlabelled=0, length_quantile=40, tokens=2_000_000)
        return {c.key: c for c in auto.data_rules(profile, cfg)}.get("training.epochs")
    assert epochs(25_000) is None                                 # 391 steps an epoch: the preset's 4 suffice
    assert epochs(8_000).value == 8 and "125 steps an epoch" in epochs(8_000).reason   # 8 x 125 >= 1,000
    assert epochs(1_000).value == RULES.max_epochs and "at most" in epochs(1_000).reason   # 16 steps: capped


def test_a_small_set_with_unlabelled_text_counts_distillations_steps_and_keeps_the_presets_embedding_rate():
    cfg = load_config("default")                                  # batch 64, 4 epochs, 11,300 distilled an epoch
    alone = auto.Profile(train_rows=2_000, class_counts=(1_000, 1_000), has_validation=False, unlabelled=0,
                         length_quantile=600, tokens=560_000)
    chosen = {c.key: c for c in auto.data_rules(alone, cfg)}
    assert chosen["training.epochs"].value == RULES.max_epochs        # 32 steps an epoch: capped at 10
    assert chosen["training.embedding_lr_scale"].value == RULES.small_embedding_lr_scale   # a random start
    with_unlabelled = auto.Profile(**{**alone.__dict__, "unlabelled": 50_000})
    chosen = {c.key: c for c in auto.data_rules(with_unlabelled, cfg)}
    assert chosen["training.epochs"].value == 5                      # (2,000 + 11,300) / 64 = 208 steps an epoch
    assert "and 11,300 unlabelled texts make 208 steps an epoch" in chosen["training.epochs"].reason
    assert "training.embedding_lr_scale" not in chosen               # word2vec on the unlabelled text starts it
    assert chosen["data.min_frequency"].value == 1                   # the labelled set is still small
    fewer = auto.Profile(**{**alone.__dict__, "unlabelled": 8_000})  # distillation draws all 8,000 an epoch
    chosen = {c.key: c for c in auto.data_rules(fewer, cfg)}
    assert chosen["training.distill_reviews"].value == 8_000
    assert chosen["training.epochs"].value == 7                      # 157 steps an epoch: 7 make 1,099


def test_dev_texts_longer_than_the_training_texts_let_the_scores_weight_go_below_1():
    cfg = load_config("default")
    profile = auto.Profile(train_rows=156_810, class_counts=(1, 2, 3, 2, 1), has_validation=True, unlabelled=0,
                           length_quantile=44, tokens=1_240_000, length_ratio=4.0)
    chosen = {c.key: c for c in auto.data_rules(profile, cfg)}
    assert chosen["training.ngram_scale_min"].value == 0.5 == RULES.longer_dev_scale_floor
    assert "4.0x as long" in chosen["training.ngram_scale_min"].reason
    assert chosen["model.ngram_fit"].value == "nb-lr"                      # the same reading of the same lengths
    alike = auto.Profile(**{**profile.__dict__, "length_ratio": 1.5})
    assert "training.ngram_scale_min" not in {c.key for c in auto.data_rules(alike, cfg)}
    unfitted = cfg.override("training", fit_ngram_scale=False)            # no weight to fit: nothing to open
    assert "training.ngram_scale_min" not in {c.key for c in auto.data_rules(profile, unfitted)}


def test_keys_set_on_the_command_line_are_left_alone():
    assert given_keys("seed") is None and given_keys("my.toml") is None            # a chosen config: no rules
    given = given_keys(None, ["data.max_length=40"], {"training": {"epochs": 3, "lr": None}})
    assert given == {"data.max_length", "training.epochs"}
    cfg = load_config("default").override("data", source=str(REVIEWS))
    fitted, choices = auto.fit_to_data(cfg, given, auto.TrainCallbacks())
    assert "data.max_length" not in {c.key for c in choices}
    assert fitted.training.distill_reviews == 0 and fitted.training.init_from == ""
    given = given_keys(None, ["training.embedding_lr_scale=1", "training.init_from=checkpoints/mine"], {})
    mine = cfg.override("training", embedding_lr_scale=1.0, init_from="checkpoints/mine")
    fitted, choices = auto.fit_to_data(mine, given, auto.TrainCallbacks())
    assert not {"training.embedding_lr_scale", "training.init_from"} & {c.key for c in choices}
    assert fitted.training.embedding_lr_scale == 1.0 and fitted.training.init_from == "checkpoints/mine"
    assert fitted.pretrain.splits == "train"                  # the pretraining asked for reads the training texts
    fitted, choices = auto.fit_to_data(cfg, frozenset({"pretrain.epochs"}), auto.TrainCallbacks())
    assert fitted.training.init_from.startswith("checkpoints/pretrained-reviews.csv-")   # a pretrain key: pretrain


def test_each_data_gets_its_own_pretrained_folder():
    cfg = load_config("default")
    a = auto.pretrained_folder(cfg.override("data", source=str(REVIEWS)))
    b = auto.pretrained_folder(cfg.override("data", source=str(SST5_SMALL)))
    assert a != b and Path(a).name.startswith("pretrained-reviews.csv-")
    files = cfg.override("data", source=str(REVIEWS), validation_fraction=0.1).override("pretrain", splits="train")
    assert auto.pretrained_folder(files) != auto.pretrained_folder(files.override("training", seed=4321))
    assert Path(b).name.startswith("pretrained-sst5_small-")


# ----------------------------------------------------------------------------- bad labelled data

def test_a_class_with_one_row_cannot_be_held_out_and_is_named(tmp_path):
    rows = ["text,label"] + [f"text number {i},{'a' if i % 2 else 'b'}" for i in range(40)] + ["the odd one,rare"]
    path = tmp_path / "train.csv"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    with pytest.raises(DataError) as err:
        load_train_validation(DataSpec(str(path), 0.1))
    assert str(err.value) == (f"{path}: class 'rare' has 1 row, too few to hold out validation (a class needs at "
                              "least 2: one to train on, one to validate); add rows of it, give a dev split, or "
                              "drop the class")


def test_one_class_is_one_line(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("text,label\n" + "".join(f"text {i},same\n" for i in range(20)), encoding="utf-8")
    r = _invoke("train", "--data", path, "--output", tmp_path / "out")
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "only one class" in r.output.strip().splitlines()[-1]


@pytest.mark.slow   # the default preset's whole path on 600 reviews: the n-gram score, an epoch
def test_the_default_trains_on_a_file_without_flags_and_records_its_choices(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = _invoke("train", "--data", REVIEWS, "--epochs", "1", "--device", "cpu", "--time-budget", "0")
    assert r.exit_code == 0, r.output
    assert "note: training.init_from = '': no unlabelled text" in r.output
    assert "note: training.embedding_lr_scale = 10.0: " in r.output
    out = tmp_path / "checkpoints" / "default"
    metrics = json.loads((out / "metrics.json").read_text())
    rules = {rule["key"]: rule["value"] for rule in metrics["data_rules"]}
    assert rules["training.distill_reviews"] == 0 and rules["data.validation_fraction"] == 0.1
    assert metrics["calibration"]["temperature"] != 1.0 and "ece" in metrics["calibration"]
    assert rules["training.refit"] is True and metrics["held_out_run"]["validation_examples"] > 50
    pairs = metrics["data"]["negation_augment"]                                 # two-class sentiment: the rule
    assert rules["data.negation_scope"] == "sentence" and 0 < pairs <= rules["training.negation_augment"] == 240
    assert metrics["data"]["train_examples"] == 600                             # the hold-out, trained on
    words = metrics["data"]["lexicon_prior"]                                    # VADER's words' rows: at most 0.8
    assert 0 < words <= rules["training.lexicon_prior"] == 480
    assert rules["data.blind_identity"] is True and rules["model.ngram_intercept"] is False
    assert (f"then trained again on all 600 rows (+ {2 * pairs:,} rule-negated sentences, {words:,} one-word lexicon rows) "
            "for 1 epoch (the refit)" in " ".join(r.output.split()))
    config = json.loads((out / "config.json").read_text())
    assert config["training"]["init_from"] == "" and config["training"]["embedding_lr_scale"] == 10.0
    assert not list(tmp_path.glob("checkpoints/pretrained*"))                   # no word2vec on 600 reviews
    assert "Settings chosen from the data" in (out / "README.md").read_text()


@pytest.mark.slow   # word2vec on the training texts, the n-gram score, an epoch
def test_a_pretrained_start_asked_for_on_a_small_set_reads_its_training_texts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = _invoke("train", "--data", REVIEWS, "--epochs", "1", "--set", "pretrain.epochs=1", "--device", "cpu",
                "--set", "training.init_from=checkpoints/w2v", "--time-budget", "0")
    assert r.exit_code == 0, r.output
    assert "note: pretrain.splits = 'train': no unlabelled text" in r.output
    assert (tmp_path / "checkpoints" / "w2v" / "config.json").exists()
    config = json.loads((tmp_path / "checkpoints" / "default" / "config.json").read_text())
    assert config["training"]["init_from"] == "checkpoints/w2v"


def test_pretraining_reads_unlabelled_text_given_beside_a_source_without_it(tmp_path):
    """--unlabelled fills the `unsupervised` part of [pretrain] splits: here the 500 reviews of a .txt file."""
    from sentiment_cli.training.pretrain import pretrain
    from sentiment_cli.training.pretrained import load_pretrained

    from .conftest import small_config

    texts = load_split(str(SMALL_DATA), "test").texts[:500]
    path = tmp_path / "more.txt"
    path.write_text("\n".join(" ".join(t.split()) for t in texts) + "\n", encoding="utf-8")
    cfg = small_config().override("data", unlabelled=str(path)).override(
        "pretrain", objective="word2vec", epochs=1, splits="unsupervised")
    result = pretrain(cfg, tmp_path / "w2v")
    assert result.metrics["data"]["reviews"] == 500
    load_pretrained(tmp_path / "w2v", cfg)                                       # fits the config that made it
    with pytest.raises(ConfigError, match=r"\[data\] unlabelled is"):            # other unlabelled text: refit
        load_pretrained(tmp_path / "w2v", cfg.override("data", unlabelled=str(REVIEWS)))


def test_negation_rules_are_for_two_class_sentiment_read_as_words():
    """Negation scope, the augmentation's rules, VADER's words and the identity terms are English words' ("was
    good" -> "was not good"), and the n-gram score without an intercept is for polarity labels: two-class sentiment
    read as characters (Chinese, Thai) gets none, and nor do other label sets."""
    from sentiment_cli.data.units import Units

    cfg = load_config("default")
    words = auto.Profile(train_rows=6_000, class_counts=(2_000, 4_000), has_validation=True, unlabelled=0,
                         length_quantile=200, tokens=800_000, labels=("negative", "positive"),
                         units=Units("word", 0.02))
    chars = auto.Profile(**{**words.__dict__, "units": Units("char", 0.95, ("Han",))})
    polar = {"data.negation_scope", "training.negation_augment", "training.lexicon_prior", "data.blind_identity",
             "model.ngram_intercept"}
    chosen = {c.key: c.value for c in auto.data_rules(words, cfg)}
    assert polar <= set(chosen) and chosen["training.lexicon_prior"] == 4_800   # 0.8 of 6,000 rows
    assert not polar & {c.key for c in auto.data_rules(chars, cfg)}
    sentences = auto.Profile(**{**words.__dict__, "tokens": 6_000 * 20})               # 20 tokens a row: no VADER rows
    chosen = {c.key for c in auto.data_rules(sentences, cfg)}
    assert "training.lexicon_prior" not in chosen and polar - {"training.lexicon_prior"} <= chosen
    topics = auto.Profile(**{**words.__dict__, "labels": ("sports", "world")})
    assert not polar & {c.key for c in auto.data_rules(topics, cfg)}
