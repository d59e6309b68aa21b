import pytest

import tomllib

from sentiment_cli.config import (PRESETS, Config, build_config, config_from_dict, load_config, parse_overrides,
                                  stored_config_from_dict)
from sentiment_cli.config_reference import reference_markdown
from sentiment_cli.errors import ConfigError

from .conftest import ROOT


def test_seed_config_reproduces_the_notebook():
    cfg = load_config(ROOT / "configs" / "seed.toml")
    m, d, t = cfg.model, cfg.data, cfg.training
    assert (m.n_layers, m.d_model, m.n_heads, m.d_ff) == (1, 32, 2, 128)
    assert (d.max_length, d.vocab_size, d.pre_tokenizer, d.validation_fraction) == (200, 50000, "whitespace", 0.1)
    assert (t.batch_size, t.lr, t.epochs) == (164, 1e-3, 10)


def test_default_config_is_what_runs_without_config():
    assert load_config(None) == load_config("default") == load_config(ROOT / "configs" / "default.toml")
    assert load_config("default") != load_config("seed")


def test_presets_are_package_data_and_the_repository_configs_are_the_same_files():
    import importlib.resources

    for name in PRESETS:
        shipped = importlib.resources.files("sentiment_cli").joinpath("configs", f"{name}.toml").read_text()
        assert shipped == (ROOT / "configs" / f"{name}.toml").read_text()
        assert load_config(name) == load_config(ROOT / "configs" / f"{name}.toml")


def test_an_existing_file_wins_over_a_preset_of_the_same_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "seed").write_text("[training]\nepochs = 7\n")
    assert load_config("seed").training.epochs == 7


def test_an_unknown_name_lists_the_presets():
    with pytest.raises(ConfigError, match=r"^nope: no such preset or config file \(presets: default, seed, sst5"):
        load_config("nope")


def test_set_overrides_parse_toml_values_and_fall_back_to_strings():
    got = parse_overrides(["training.lr=1e-3", "data.source=../data/reviews.csv", "model.norm_first=true",
                           "training.betas=[0.9, 0.98]", "data.pre_tokenizer=\"whitespace\"", "training.epochs = 3"])
    assert got == {"training": {"lr": 0.001, "betas": [0.9, 0.98], "epochs": 3},
                   "data": {"source": "../data/reviews.csv", "pre_tokenizer": "whitespace"},
                   "model": {"norm_first": True}}
    cfg = build_config("seed", ["training.lr=1e-3", "data.source=../data/reviews.csv", "model.norm_first=true",
                                 "training.betas=[0.9, 0.98]"])
    assert (cfg.training.lr, cfg.training.betas) == (0.001, (0.9, 0.98))
    assert cfg.data.source == "../data/reviews.csv" and cfg.model.norm_first is True
    assert cfg.model.d_model == 32   # the rest is the preset's


@pytest.mark.parametrize("items, expected", [
    (["training.lr=abc"], "--set: [training] lr must be a number, got 'abc'"),
    (["training.epochs=-1"], "--set: [training] epochs must be >= 0, got -1"),
    (["trainin.lr=1"], "--set: unknown table [trainin]"),
    (["training.lrr=1"], "--set: unknown key [training] lrr"),
    (["model.d_model=33"], "--set: [model] d_model must be even"),
    (["lr=1"], "--set lr=1: expected section.key=value"),
    (["training.lr"], "--set training.lr: expected section.key=value"),
    (["training.lr=1", "training.lr=2"], "--set training.lr=2: [training] lr is set twice"),
])
def test_set_overrides_are_checked_like_the_file_and_name_the_key(items, expected):
    with pytest.raises(ConfigError) as err:
        build_config("seed", items)
    assert str(err.value).startswith(expected) and "\n" not in str(err.value)


def test_a_config_written_as_toml_reads_back_equal():
    for name in PRESETS:
        cfg = load_config(name)
        assert config_from_dict(tomllib.loads(cfg.to_toml())) == cfg


def test_the_committed_configuration_reference_is_the_generated_one():
    committed = (ROOT / "docs" / "configuration.md").read_text()
    assert committed == reference_markdown() + "\n", \
        "docs/configuration.md is stale: run `sentiment config --reference > docs/configuration.md`"
    for section in ("model", "data", "training", "pretrain"):
        assert f"## [{section}]" in committed
    assert "| `bigram_buckets` | integer | `0` | `131072` | `0` |" in committed


def test_a_stored_config_without_the_later_dropout_keys_means_what_it_trained_with(tmp_path):
    # Until they had keys of their own, attention and feed-forward hidden dropout were `dropout`.
    old = {"model": {"d_model": 32, "dropout": 0.1}}
    m = stored_config_from_dict(old).model
    assert (m.attention_dropout, m.activation_dropout) == (0.1, 0.1)
    newer = {"model": {"d_model": 32, "dropout": 0.1, "attention_dropout": 0.0}}   # between the two changes
    m = stored_config_from_dict(newer).model
    assert (m.attention_dropout, m.activation_dropout) == (0.0, 0.1)
    assert newer == {"model": {"d_model": 32, "dropout": 0.1, "attention_dropout": 0.0}}   # not modified
    # a user's TOML file without them gets the built-in defaults
    m = load_config(_write(tmp_path, "[model]\ndropout = 0.1\n")).model
    assert (m.attention_dropout, m.activation_dropout) == (0.0, 0.0)


def _write(tmp_path, text):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("text, expected", [
    ("[model]\nd_modle = 32\n", "unknown key [model] d_modle"),
    ("[modle]\n", "unknown table [modle]"),
    ("[model]\nd_model = '32'\n", "[model] d_model must be an integer"),
    ("[model]\nnorm_first = 1\n", "[model] norm_first must be true or false"),
    ("[training]\nlr = 0\n", "[training] lr must be > 0"),
    ("[training]\nlr = -1e-3\n", "[training] lr must be > 0"),
    ("[training]\nlr = nan\n", "[training] lr must be a finite number"),
    ("[training]\nepochs = -2\n", "[training] epochs must be >= 0"),
    ("[training]\nepochs = 0\n", "[training] epochs = 0 keeps the n-gram score alone, but [model] ngram_buckets is 0"),
    ("[data]\nvalidation_fraction = 1.0\n", "[data] validation_fraction must be < 1.0"),
    ("[data]\nvalidation_fraction = -0.1\n", "[data] validation_fraction must be >= 0.0"),
    ("[data]\nvalidation_fraction = 0\n[training]\npatience = 2\n",
     "[training] patience (2) stops on validation accuracy, but [data] validation_fraction is 0"),
    ("[data]\npre_tokenizer = 'bpe'\n", "[data] pre_tokenizer must be one of whitespace, punctuation"),
    ("[model]\nd_model = 30\nn_heads = 4\n", "n_heads (4) must divide d_model (30)"),
    ("[model]\nd_model = 33\nn_heads = 1\n", "d_model must be even"),
    ("[model]\nbigram_buckets = -1\n", "[model] bigram_buckets must be >= 0"),
    ("[model]\nbigram_buckets = 5000000\n", "[model] bigram_buckets must be <= 4194304"),
    ("[model\n", "not valid TOML"),
])
def test_config_errors_name_the_file_and_the_key(tmp_path, text, expected):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    msg = str(err.value)
    assert msg.startswith(str(path)) and expected in msg
    assert "\n" not in msg


def test_missing_config_file():
    with pytest.raises(ConfigError, match="config file not found"):
        load_config("no/such.toml")


def test_validation_fraction_0_is_a_run_on_all_of_train():
    cfg = Config().override("data", validation_fraction=0)
    assert cfg.data.validation_fraction == 0.0
    with pytest.raises(ConfigError, match=r"command line: \[training\] patience \(3\) stops on validation"):
        cfg.override("training", patience=3)


def test_a_minimum_document_count_needs_an_idf():
    """ngram_min_df counts n-grams through their idf: refused with binary weighting, taken with TF-IDF."""
    with pytest.raises(ConfigError, match=r"command line: \[model\] ngram_min_df counts n-grams through their idf"):
        Config().override("model", ngram_min_df=2)
    cfg = Config().override("model", ngram_weighting="sublinear", ngram_min_df=2)
    assert (cfg.model.ngram_weighting, cfg.model.ngram_min_df) == ("sublinear", 2)


def test_overrides_are_validated():
    cfg = Config()
    assert cfg.override("training", epochs=3, lr=None).training.epochs == 3
    assert cfg.override("training", lr=None) is cfg
    with pytest.raises(ConfigError, match=r"command line: \[training\] batch_size must be >= 1"):
        cfg.override("training", batch_size=0)


def test_with_keys_sets_dotted_keys_of_several_sections_together():
    cfg = load_config("seed").with_keys({"model.ngram_buckets": 1 << 16, "training.epochs": 0}, "the search")
    assert cfg.model.ngram_buckets == 1 << 16 and cfg.training.epochs == 0   # valid only together
    assert load_config("seed").with_keys({}) == load_config("seed")
    with pytest.raises(ConfigError, match=r"^the search: \[training\] epochs must be >= 0"):
        load_config("seed").with_keys({"training.epochs": -1}, "the search")
