"""Typed run configuration: TOML in (stdlib ``tomllib``), validated dataclasses out.

A config file has up to four tables, ``[model]``, ``[data]``, ``[training]``
and ``[pretrain]``, each mapping onto the dataclass of the same name below. Every key is
optional (the dataclass default applies); an unknown key, a value of the
wrong type or a value out of range raises :class:`ConfigError` with a
one-line message that names the file and the key.

A config comes from a preset shipped inside the package (``default``,
``seed``: :data:`PRESETS`, read with :mod:`importlib.resources`, so an
installed wheel has them) or from a TOML file, and dotted overrides
(``--set training.lr=1e-3``, spaCy-style) are validated exactly like the file.
``config_reference.py`` renders every key's help text (``docs/configuration.md``).
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from . import objectives
from .errors import ConfigError, UsageError
from .toml_writer import toml_tables
from .decoding import TomlNumberTooLong, toml_loads
from .untrusted import MAX_VOCAB_SIZE

# Presets ship as package data (sentiment_cli/configs/<name>.toml); the repository's top-level configs/
# links to them. Name -> one line for --help.
PRESETS = {
    "default": "the main job: word2vec on the unlabelled texts, then the tuned encoder with word bigrams",
    "seed": "the course notebook's small model, trained from scratch in minutes",
    "sst5": "five-class sentences (SST-5, ../shared/data/sst5), from scratch, settings chosen on its dev split",
    "gpu": "for one GPU: a 4-layer encoder pretrained by ELECTRA on the unlabelled text (a draft, not yet measured)",
}
DEFAULT_PRESET = "default"

SEED_MAX = 2**32 - 1   # [training] seed and every --seed: numpy's seeds are 0 to 2**32 - 1
# The most memory the n-gram score's fit may take, in GB ([training] ngram_fit_gb's default; sentiment audit's).
NGRAM_FIT_GB = 8.0


MAX_EPOCHS = 100_000   # [training] and [pretrain] epochs: a bound like the sizes', not a run anyone would wait for


def _spec(default: Any, *, lo: float | None = None, hi: float | None = None,
          lo_open: bool = False, hi_open: bool = False,
          choices: tuple[str, ...] | Callable[[], tuple[str, ...]] | None = None, help: str = "") -> Any:
    """A dataclass field with its valid range or choices stored in metadata (``choices``: the values, or a
    function giving them when a value is checked: a registry's, :func:`choices_of`)."""
    meta = {"lo": lo, "hi": hi, "lo_open": lo_open, "hi_open": hi_open,
            "choices": choices, "help": help}
    return field(default=default, metadata=meta)


def choices_of(f: dataclasses.Field) -> tuple[str, ...] | None:
    """A config field's valid values (asked of its registry now, when it has one), or ``None`` (any value)."""
    choices = f.metadata.get("choices")
    return choices() if callable(choices) else choices


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the Transformer encoder classifier (see ``model/classifier.py``)."""

    d_model: int = _spec(32, lo=2, hi=4096,
                         help="width of token embeddings and encoder layers; even (sinusoidal pairs)")
    n_heads: int = _spec(2, lo=1, hi=64, help="attention heads; must divide d_model")
    n_layers: int = _spec(1, lo=1, hi=64, help="Transformer encoder layers")
    d_ff: int = _spec(128, lo=1, hi=65536, help="hidden width of each layer's feed-forward block")
    dropout: float = _spec(0.0, lo=0.0, hi=1.0, hi_open=True,
                           help="dropout on embeddings and residual branches (on CPU, every dropout rate is rounded "
                                "to a multiple of 1/256: model/dropout.py)")
    activation_dropout: float = _spec(0.0, lo=0.0, hi=1.0, hi_open=True,
                                      help="dropout on the feed-forward hidden layer (fairseq's activation_dropout)")
    attention_dropout: float = _spec(0.0, lo=0.0, hi=1.0, hi_open=True,
                                     help="dropout on attention probabilities; > 0 leaves the fused CPU attention kernel "
                                          "(several times slower steps)")
    head_dropout: float = _spec(0.0, lo=0.0, hi=1.0, hi_open=True, help="dropout on the pooled vector before the dense head")
    activation: str = _spec("relu", choices=("relu", "gelu"), help="feed-forward activation")
    norm_first: bool = _spec(False, help="pre-norm layers (True) or post-norm as in Vaswani et al. (False)")
    scale_embedding: bool = _spec(False, help="multiply token embeddings by sqrt(d_model) (Vaswani et al. 2017, 3.4)")
    embedding_norm: bool = _spec(True, help="LayerNorm on embeddings + positions, as the notebook does")
    bigram_buckets: int = _spec(0, lo=0, hi=1 << 22,
                                help="rows of a hashed word-bigram embedding added to each token's embedding "
                                     "(fastText's hashing trick, Joulin et al. 2017); 0: words only")
    ngram_buckets: int = _spec(0, lo=0, hi=1 << 22,
                               help="rows of the n-gram score: a linear model over hashed token 1-3-grams "
                                    "(ngram_fit) that train fits on the training split; its score joins the "
                                    "head's logits and teaches distillation; 0: none")
    ngram_max_n: int = _spec(3, lo=1, hi=8,
                             help="the longest token n-gram the n-gram score reads (1 to ngram_max_n); with "
                                  "[data] tokenizer = \"char\" its n-grams are character n-grams within and across "
                                  "words (the default's data rule sets 4 there)")
    ngram_word_chars: int = _spec(0, lo=0, hi=8,
                                  help="with 2 or more, the n-gram score also reads each vocabulary token's "
                                       "character 2-ngram_word_chars-grams within spaces (fastText's subword "
                                       "n-grams; scikit-learn's char_wb); the default's search tries 5 beside "
                                       "words or subwords alone; 0: none")
    ngram_weighting: str = _spec("binary", choices=("binary", "tfidf", "sublinear"),
                                 help="what each distinct n-gram of a text counts in the n-gram score: binary (1); "
                                      "tfidf: its idf on the training texts, the text's n-grams L2-normalised (the "
                                      "default's data rule sets it with character tokens); or sublinear: as tfidf, "
                                      "times 1 + ln(its count in the text)")
    ngram_min_df: int = _spec(1, lo=1, help="with tfidf or sublinear weighting, an n-gram counts only when at least "
                              "this many training texts hold it (its idf is 0 otherwise)")
    ngram_scale: float = _spec(1.0, lo=0.0, help="weight of the n-gram score in the logits (with [training] "
                                                 "fit_ngram_scale, chosen on validation after training)")
    ngram_fit: str = _spec("auto", choices=("auto", "nb-lr", "lr"),
                           help="the n-gram score's form: nb-lr (NB-LR, C 0.1; one-vs-rest with more than two "
                                "classes), lr (plain L2 logistic regression on the binarised n-grams, C 10; "
                                "multinomial with more than two classes), or auto: the form and C (nb-lr 0.1, "
                                "0.3, 1; lr 1, 10, 30) that 3-fold cross-validation on up to 10,000 training "
                                "texts picks")
    ngram_intercept: bool = _spec(True, help="the n-gram score's fit has an intercept; false: a text with no n-gram "
                                             "scores 0 (even odds), so that a short text is not read by the "
                                             "intercept of long ones (ngram/forms.py)")
    ngram_c: float = _spec(0.0, lo=0.0, help="the inverse L2 strength C of a pinned ngram_fit (nb-lr or lr); 0: the "
                                             "form's default (nb-lr 0.1, lr 10), or cross-validation's with auto "
                                             "(the default's search sets it from the validation split)")


@dataclass(frozen=True)
class DataConfig:
    """Where the reviews come from and how they become token ids."""

    source: str = _spec("stanfordnlp/imdb", help="Hugging Face Hub dataset id; a local folder (files named by split: "
                                                 "train, validation or dev, test; the Hub layout; aclImdb); or one "
                                                 "file (CSV, TSV, JSON, JSON Lines, Parquet) to train on, with "
                                                 "validation held out from it")
    unlabelled: str = _spec("", help="unlabelled text for pretraining and distillation, besides the source's "
                                     "`unsupervised` split: a .txt file (one text per line), a CSV, TSV, JSON, JSON "
                                     "Lines or Parquet file with a text column, or a dataset folder (its "
                                     "`unsupervised` split, else its train split); empty: none")
    text_column: str = _spec("", help="column holding the texts; empty: the one named text, review, sentence or "
                                      "content")
    label_column: str = _spec("", help="column holding the labels (integers or strings); empty: the one named "
                                       "label, sentiment, rating, stars or class")
    labels: tuple[str, ...] = _spec((), help="the label names, in id order; must match the training data's labels; "
                                             "empty: the data's ClassLabel names, else its sorted distinct labels")
    multi_label: str = _spec("auto", choices=("auto", "true", "false"),
                             help="several labels per text (sigmoid and binary cross-entropy, a threshold per label): "
                                  "true, false, or auto: when the label column holds lists (a JSON list, a Parquet "
                                  "list, labels joined by label_separator) or label_columns names 0/1 columns "
                                  "(TOML true and false are read as \"true\" and \"false\")")
    label_separator: str = _spec("", help="the separator of several labels in one label field (\"a,b\"); empty: "
                                          "found among , ; | when multi_label is auto or true")
    label_columns: tuple[str, ...] = _spec((), help="one 0/1 column per label (multi-label), in id order; empty: "
                                                    "found when every column besides the text and an id column "
                                                    "holds only 0 and 1")
    validation_fraction: float = _spec(0.1, lo=0.0, hi=1.0, hi_open=True,
                                       help="share of train held out for validation (as validation_split says) "
                                            "when the source has no validation (dev) split of its own; 0 trains on "
                                            "all of train, without validation, and keeps the last epoch")
    validation_split: str = _spec("random", choices=("random", "blocks", "last"),
                                  help="hold out single rows (stratified), blocks of consecutive rows so that "
                                       "validation shares few movies with training (IMDB keeps a movie's reviews "
                                       "together), or the last rows in file order, for rows in time order whose "
                                       "new text comes later (news, tickets)")
    max_length: int = _spec(200, lo=1, hi=16384, help="tokens kept per review")
    truncation: str = _spec("head", choices=("head", "head_tail"),
                            help="keep the first max_length tokens, or the head and tail (Sun et al. 2019)")
    head_fraction: float = _spec(0.25, lo=0.0, hi=1.0, help="with head_tail: share of max_length taken from the head")
    vocab_size: int = _spec(50000, lo=3, hi=MAX_VOCAB_SIZE,
                            help="tokenizer vocabulary size, including <pad> and <unk>")
    min_frequency: int = _spec(1, lo=1, help="a token must occur this often in train to enter the vocabulary")
    pre_tokenizer: str = _spec("whitespace", choices=("whitespace", "punctuation"),
                               help="split on whitespace only (notebook) or also split off punctuation "
                                    "(word tokens only)")
    tokenizer: str = _spec("word", choices=("auto", "word", "char", "unigram", "bpe"),
                           help="the units of text the model reads (data/tokenizer.py): word (a vocabulary of "
                                "words split by pre_tokenizer), char (each character, a run of spaces as one), "
                                "unigram or bpe (subwords learned from the training texts with byte fallback, so "
                                "no character is <unk>), or auto: char where most letters are in long runs "
                                "without spaces (Thai, Chinese, Japanese), else word (data/units.py)")
    blind_identity: bool = _spec(False, help="read the names of nationalities, religions, ethnicities and "
                                             "sexualities as <unk> (data/identity.py; Garg et al. 2019's blindness), "
                                             "so that swapping one for another never changes a prediction")
    negation_scope: str = _spec("none", choices=("none", "clause", "sentence"),
                                help="mark the words a negator governs (Das & Chen 2001; data/negation.py): none; "
                                     "clause: up to the next punctuation mark; sentence: up to the next . ; : ! ? "
                                     "or contrast word (but, however, ...), and a negator with nothing after it "
                                     "(\"... but it was not.\") marks its sentence before it. The n-gram score "
                                     "reads a marked word as another n-gram, the encoder adds a learned scope vector")


@dataclass(frozen=True)
class TrainingConfig:
    """Optimisation: AdamW, schedule, regularisation, device."""

    epochs: int = _spec(10, lo=0, hi=MAX_EPOCHS,
                        help="passes over the training split; 0: no encoder epoch, the dense head stays zero and the "
                             "logits are the n-gram score's alone (ngram_buckets > 0)")
    batch_size: int = _spec(164, lo=1, help="texts per optimizer step")
    lr: float = _spec(1e-3, lo=0.0, lo_open=True, help="peak AdamW learning rate")
    weight_decay: float = _spec(0.01, lo=0.0, help="AdamW decoupled weight decay (torch default 0.01)")
    betas: tuple[float, float] = _spec((0.9, 0.999), help="AdamW betas")
    schedule: str = _spec("constant", choices=("constant", "linear", "cosine"),
                          help="learning-rate decay after warmup")
    warmup_fraction: float = _spec(0.0, lo=0.0, hi=1.0, help="share of all steps spent warming up linearly")
    grad_clip: float = _spec(0.0, lo=0.0, help="max global gradient norm; 0 disables clipping")
    label_smoothing: float = _spec(0.0, lo=0.0, hi=1.0, hi_open=True, help="cross-entropy label smoothing")
    class_weight: str = _spec("none", choices=("none", "balanced"),
                              help="weight of a labelled review's loss by its class, for imbalanced data: none "
                                   "(all 1), or balanced: a class of n_c of the n training texts weighs "
                                   "n / (k * n_c), k classes (scikit-learn's compute_class_weight(\"balanced\"), "
                                   "King & Zeng 2001); the n-gram score's fit weighs its classes the same way")
    patience: int = _spec(0, lo=0, help="stop after this many epochs without a better validation accuracy; 0 = never")
    bucket_batches: bool = _spec(True, help="group texts of similar length into a batch (less padding)")
    autocast_bf16: bool = _spec(False, help="bf16 autocast for the forward pass (CPU and CUDA)")
    sparse_embeddings: bool = _spec(False, help="the token and bigram embeddings get sparse gradients, and AdamW "
                                    "updates only the rows a batch used (lazy Adam; their weight decay too)")
    threads: int = _spec(0, lo=0, help="CPU threads for training; 0: OMP_NUM_THREADS where it is set, else the "
                         "cores other processes leave free (the load average), checked again every 100 steps")
    fused_optimizer: bool = _spec(False, help="AdamW's fused kernel (torch's fused=True): one pass over each "
                                  "parameter instead of one per operation")
    # Small: on a CPU a small batch's activations stay in cache (docs/decisions.md#eval-batch-size has the measurement);
    # on a GPU a larger one may pay.
    eval_batch_size: int = _spec(64, lo=1, help="texts per batch in validation and eval")
    seed: int = _spec(1234, lo=0, hi=SEED_MAX, help="seed for the split, shuffling, initialisation and dropout")
    device: str = _spec("auto", choices=("auto", "cpu", "cuda"), help="auto = CUDA when available, else CPU")
    token_dropout: float = _spec(0.0, lo=0.0, hi=1.0, hi_open=True,
                                 help="share of a training review's tokens replaced by <unk> at each step (word dropout)")
    embedding_lr_scale: float = _spec(1.0, lo=0.0, help="the token embedding's learning rate as a multiple of lr "
                                                        "(not the bigram embedding's); 0 freezes it (e.g. when it "
                                                        "comes pretrained)")
    adversarial_epsilon: float = _spec(0.0, lo=0.0, help="adversarial training (Miyato et al. 2017): a second loss on "
                                                         "token embeddings moved by this L2 norm per review in the "
                                                         "direction that raises the loss; 0 = off; ~2x the step time")
    adversarial_max_length: int = _spec(0, lo=0, help="the adversarial loss only on batches whose longest text has "
                                                      "at most this many tokens (short sentences such as the "
                                                      "negated ones); 0 = on every batch")
    negation_augment: int = _spec(0, lo=0, help="augmentation by rule (training/augment.py): up to this many "
                                                "sentences of the training texts, negated by rule ('was good' -> "
                                                "'was not good'), join the training split with the label flipped, "
                                                "beside the sentence with its own; two-class sentiment labels only")
    lexicon_prior: int = _spec(0, lo=0, help="what words mean outside the training set (training/lexicon.py): up "
                                             "to this many words of VADER's lexicon join the training split as "
                                             "one-word rows labelled by their polarity, where VADER's scores tell "
                                             "the labels apart and the training texts do not say otherwise; "
                                             "two-class sentiment labels only; they teach the encoder only")
    distill_reviews: int = _spec(0, lo=0, help="distillation (Hinton et al. 2015): unlabelled reviews per epoch, "
                                               "drawn from the source's `unsupervised` split, that learn the "
                                               "probabilities of an n-gram teacher fitted on the training split "
                                               "(a linear model over hashed token 1-3-grams, [model] ngram_fit: "
                                               "the model's n-gram score when ngram_buckets > 0); 0 = off")
    distill_weight: float = _spec(1.0, lo=0.0, help="weight of an unlabelled review's loss against the teacher, "
                                                    "relative to a labelled review's 1")
    ngram_residual: bool = _spec(False, help="the encoder learns what the n-gram score leaves: its training logits "
                                             "include the score, cross-fitted over 5 folds of the training split "
                                             "(stacking, Wolpert 1992); needs ngram_buckets > 0")
    compress: str = _spec("auto", choices=("auto", "none"),
                          help="the model written: 'auto', the smallest compression of its tables (rows pruned, "
                               "int8 values) within one standard error of the full model's validation log-loss "
                               "(training/shipping.py); 'none', the full model")
    refit: bool = _spec(False, help="after a run that held out part of train (validation_fraction > 0, no dev "
                                    "split), train again on every training row for its best epoch count; the "
                                    "weights keep its temperature (a second fine-tuning)")
    fit_ngram_scale: bool = _spec(False, help="after training, choose [model] ngram_scale (the n-gram score's "
                                              "weight beside the encoder) from ngram_scale_min to 5 by the "
                                              "validation NLL after the temperature; stored in the checkpoint's "
                                              "config.json")
    ngram_scale_min: float = _spec(1.0, lo=0.0, hi=5.0,
                                   help="fit_ngram_scale's smallest candidate: of 0, 0.5, 0.75, 1, 1.5, 2, 3 and 5, "
                                        "those from this one up; below 1 for validation texts of another kind "
                                        "than the training texts (the default: 0.5 when the dev texts are over "
                                        "twice as long)")
    ngram_fit_gb: float = _spec(NGRAM_FIT_GB, lo=0.0, lo_open=True,
                                help="the most memory the n-gram score's (or teacher's) fit may take, in GB: its "
                                     "weights, buckets x classes, and logistic regression's working copies, "
                                     "estimated before anything is allocated; a larger fit stops with an error "
                                     "that says what to lower")
    init_from: str = _spec("", help="checkpoint folder written by `sentiment pretrain` to start from; "
                                    "empty = random initialisation")
    time_budget: float = _spec(0.0, lo=0.0, help="seconds the default's search may take, counted from the "
                                                 "command's start (training/search.py): the n-gram score alone "
                                                 "and the encoder in several settings, each measured on the "
                                                 "validation split, the best refitted; "
                                                 "0 = one run with the settings as given (a preset other than "
                                                 "the default, or a file, never searches)")


@dataclass(frozen=True)
class PretrainConfig:
    """Pretraining on unlabelled reviews (``sentiment pretrain``): word2vec embeddings or a masked language model."""

    objective: str = _spec("word2vec", choices=objectives.names, help=objectives.summary())   # objectives/
    epochs: int = _spec(5, lo=1, hi=MAX_EPOCHS, help="passes over the pretraining texts")
    window: int = _spec(5, lo=1, help="word2vec: context words on each side")
    subsample: float = _spec(1e-3, lo=0.0, hi=1.0,
                             help="word2vec: frequent-word downsampling threshold t (Mikolov et al. 2013, 2.3; "
                                  "gensim's sample); 0 keeps every word")
    batch_size: int = _spec(64, lo=1, help="mlm, electra: texts per optimizer step")
    lr: float = _spec(2e-3, lo=0.0, lo_open=True,
                      help="mlm, electra: peak AdamW learning rate (warmup, then cosine decay)")
    weight_decay: float = _spec(0.01, lo=0.0, help="mlm, electra: AdamW decoupled weight decay on matrices")
    warmup_fraction: float = _spec(0.05, lo=0.0, hi=1.0,
                                   help="mlm, electra: share of all steps spent warming up linearly")
    grad_clip: float = _spec(1.0, lo=0.0, help="mlm, electra: max global gradient norm; 0 disables clipping")
    mask_fraction: float = _spec(0.15, lo=0.0, hi=1.0, lo_open=True, hi_open=True,
                                 help="mlm, electra: share of tokens to predict (Devlin et al. 2019: 15%)")
    negatives: int = _spec(2048, lo=0,
                           help="mlm, electra: random vocabulary words added to the batch's own targets as softmax "
                                "candidates; the vocabulary size or more: the exact softmax over every word")
    generator_layers: int = _spec(1, lo=1, hi=64, help="electra: encoder layers of the generator (a masked language model "
                                               "with d_model and n_heads of [model], d_ff a quarter of its d_ff)")
    rtd_weight: float = _spec(50.0, lo=0.0, hi=10_000.0, lo_open=True,
                              help="electra: weight of the replaced-token loss against the generator's "
                                   "(Clark et al. 2020, lambda = 50)")
    splits: str = _spec("unsupervised+train", choices=("unsupervised+train", "unsupervised", "train"),
                        help="texts to pretrain on; train means the training part (validation held out)")


@dataclass(frozen=True)
class PredictConfig:
    """How predictions are decided from the probabilities (multi-label models)."""

    min_labels: int = _spec(-1, lo=-1, hi=1, help="multi-label: 1: every text gets at least its most probable "
                                                   "label; 0: a text may get none; -1 (auto): 1 when every "
                                                   "training text has a label, else 0")


@dataclass(frozen=True)
class Config:
    """A whole run: model, data, training, pretraining and prediction settings."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    predict: PredictConfig = field(default_factory=PredictConfig)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict, ``{"model": {...}, "data": {...}, "training": {...}, "pretrain": {...},
        "predict": {...}}``."""
        d = dataclasses.asdict(self)
        d["training"]["betas"] = list(d["training"]["betas"])
        d["data"]["labels"] = list(d["data"]["labels"])
        d["data"]["label_columns"] = list(d["data"]["label_columns"])
        return d

    def to_toml(self) -> str:
        """The config as a TOML file that :func:`load_config` reads back to an equal config."""
        return toml_tables(self.to_dict())

    def override(self, section: str, /, origin: str = "command line", **values: Any) -> "Config":
        """Return a copy with ``values`` set in ``section`` (``None`` values are ignored) and the whole config
        validated again, exactly as a TOML file is; ``origin`` names where the values came from in an error.

        Several sections set at once (``--set``) go through :func:`build_config`, which checks them together.

        Raises:
            ConfigError: an unknown section or key, a wrong type or a value out of range (the message names it).
        """
        values = {k: v for k, v in values.items() if v is not None}
        if not values:
            return self
        return _with_sections(self, {section: values}, origin)


    def with_keys(self, values: dict[str, Any], /, origin: str = "command line") -> "Config":
        """Return a copy with ``{"section.key": value}`` set, every section together (as ``--set`` applies them),
        and the whole config validated again; ``origin`` names where the values came from in an error.

        Raises:
            ConfigError: as :meth:`override`.
        """
        sections: dict[str, dict[str, Any]] = {}
        for key, value in values.items():
            section, name = key.split(".")
            sections.setdefault(section, {})[name] = value
        return _with_sections(self, sections, origin) if sections else self


SECTIONS = {"model": ModelConfig, "data": DataConfig, "training": TrainingConfig, "pretrain": PretrainConfig,
            "predict": PredictConfig}


def _with_sections(config: Config, overrides: dict[str, dict[str, Any]], origin: str) -> Config:
    """``config`` with ``overrides`` (``{section: {key: value}}``) applied together, then validated whole."""
    merged = config.to_dict()
    for section, values in overrides.items():
        if section not in merged:
            raise ConfigError(f"{origin}: unknown table [{section}] (known: {', '.join(sorted(SECTIONS))})")
        merged[section].update(values)
    return config_from_dict(merged, origin)


def _type_name(tp: Any) -> str:
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(tp, str(tp))


def _check_value(cls: type, f: dataclasses.Field, value: Any, where: str) -> Any:
    """Validate one value against its field's type and metadata; return it normalised."""
    key = f"[{where}] {f.name}"
    tp = {"int": int, "float": float, "bool": bool, "str": str}.get(f.type, f.type)
    if f.name == "betas":
        if (not isinstance(value, (list, tuple)) or len(value) != 2
                or not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in value)
                or not all(0.0 <= b < 1.0 for b in value)):
            raise ValueError(f"{key} must be two numbers in [0, 1), got {value!r}")
        return (float(value[0]), float(value[1]))
    if f.name in ("labels", "label_columns"):
        return _check_labels(value, key)
    if f.name == "multi_label" and isinstance(value, bool):
        value = "true" if value else "false"
    if tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = isinstance(value, str)
    if not ok:
        raise ValueError(f"{key} must be {_type_name(tp)}, got {value!r}")
    if tp is float:
        value = float(value)
        if math.isnan(value) or math.isinf(value):
            raise ValueError(f"{key} must be a finite number, got {value!r}")
    m, choices = f.metadata, choices_of(f)
    if choices and value not in choices:
        raise ValueError(f"{key} must be one of {', '.join(choices)}; got {value!r}")
    lo, hi = m.get("lo"), m.get("hi")
    if lo is not None and (value < lo or (m["lo_open"] and value == lo)):
        raise ValueError(f"{key} must be {'>' if m['lo_open'] else '>='} {lo}, got {value!r}")
    if hi is not None and (value > hi or (m["hi_open"] and value == hi)):
        raise ValueError(f"{key} must be {'<' if m['hi_open'] else '<='} {hi}, got {value!r}")
    return value


def _check_labels(value: Any, key: str) -> tuple[str, ...]:
    """``[data] labels``: empty, or two or more distinct, non-blank names (integers are taken as their text)."""
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(v, (str, int)) and not isinstance(v, bool) for v in value):
        raise ValueError(f"{key} must be a list of label names, e.g. [\"negative\", \"positive\"]; got {value!r}")
    names = tuple(str(v) for v in value)
    if names and len(names) < 2:
        raise ValueError(f"{key} must name at least two classes, got {list(names)}")
    if any(not n.strip() for n in names):
        raise ValueError(f"{key} holds an empty name: {list(names)}")
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ValueError(f"{key} lists {dup!r} twice")
    return names


def _build(cls: type, table: Any, section: str, origin: str) -> Any:
    if not isinstance(table, dict):
        raise ConfigError(f"{origin}: [{section}] must be a table")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in table.items():
        if key not in fields:
            raise ConfigError(f"{origin}: unknown key [{section}] {key} "
                              f"(known: {', '.join(sorted(fields))})")
        try:
            kwargs[key] = _check_value(cls, fields[key], value, section)
        except ValueError as exc:
            raise ConfigError(f"{origin}: {exc}") from None
    return cls(**kwargs)


def _check_cross(cfg: Config, origin: str) -> None:
    m = cfg.model
    if m.d_model % 2:
        raise ConfigError(f"{origin}: [model] d_model must be even for the sinusoidal encoding, got {m.d_model}")
    if m.d_model % m.n_heads:
        raise ConfigError(f"{origin}: [model] n_heads ({m.n_heads}) must divide d_model ({m.d_model})")
    if cfg.training.ngram_residual and not m.ngram_buckets:
        raise ConfigError(f"{origin}: [training] ngram_residual learns beside the n-gram score, but [model] "
                          "ngram_buckets is 0; set ngram_buckets or ngram_residual = false")
    if cfg.training.epochs == 0 and not m.ngram_buckets:
        raise ConfigError(f"{origin}: [training] epochs = 0 keeps the n-gram score alone, but [model] ngram_buckets "
                          "is 0 (no n-gram score); set ngram_buckets or epochs >= 1")
    if m.ngram_c and m.ngram_fit == "auto":
        raise ConfigError(f"{origin}: [model] ngram_c pins the C of a pinned form; set ngram_fit to nb-lr or lr, "
                          "or ngram_c = 0")
    if m.ngram_min_df > 1 and m.ngram_weighting == "binary":
        raise ConfigError(f"{origin}: [model] ngram_min_df counts n-grams through their idf; set ngram_weighting to "
                          "tfidf or sublinear, or ngram_min_df = 1")
    if m.ngram_word_chars == 1:
        raise ConfigError(f"{origin}: [model] ngram_word_chars reads character 2-n-grams within each token: set it "
                          "to 2 or more, or 0 for none")
    if cfg.data.validation_fraction == 0 and cfg.training.patience:
        raise ConfigError(f"{origin}: [training] patience ({cfg.training.patience}) stops on validation accuracy, "
                          "but [data] validation_fraction is 0 (no validation); set patience = 0")


_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``2.5m``, ``5min`` or ``1h`` (``--time-budget``).

    Raises:
        UsageError: not a non-negative number with one of those units.
    """
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*(s|m|min|h)?\s*", text or "")
    if not match:
        raise UsageError(f"--time-budget {text!r}: give seconds or a duration such as 90, 90s, 5m or 1h")
    return float(match.group(1)) * _UNITS[match.group(2) or ""]


def config_from_dict(raw: dict[str, Any], origin: str = "config") -> Config:
    """Build and validate a :class:`Config` from a parsed TOML/JSON mapping.

    Raises:
        ConfigError: unknown table or key, wrong type, or value out of range.
    """
    unknown = set(raw) - set(SECTIONS)
    if unknown:
        raise ConfigError(f"{origin}: unknown table [{sorted(unknown)[0]}] (known: {', '.join(sorted(SECTIONS))})")
    parts = {name: _build(cls, raw.get(name, {}), name, origin) for name, cls in SECTIONS.items()}
    cfg = Config(**parts)
    _check_cross(cfg, origin)
    return cfg


# Rates that were ``dropout`` until they got keys of their own: a run config written before then (a
# checkpoint's config.json, a trainer state) trained with ``dropout`` there.
_SPLIT_FROM_DROPOUT = ("attention_dropout", "activation_dropout")
# A run config written before [model] ngram_fit fitted its n-gram score by NB-LR, C 0.1 (a resumed run
# refits it so, and its card says so).
_BEFORE_NGRAM_FIT = "nb-lr"


def stored_config_from_dict(raw: dict[str, Any], origin: str = "config") -> Config:
    """:func:`config_from_dict` for a config a run wrote (checkpoint, trainer state), which says what it did.

    A key an older version did not write gets the value that version used,
    where that differs from today's built-in default: ``attention_dropout``
    and ``activation_dropout`` were ``dropout``, and ``ngram_fit`` was
    ``"nb-lr"``. (A user's TOML file without them gets the built-in defaults.)

    Raises:
        ConfigError: as :func:`config_from_dict`.
    """
    model = raw.get("model")
    if isinstance(model, dict) and "dropout" in model:
        model = {**{k: model["dropout"] for k in _SPLIT_FROM_DROPOUT}, **model}
    if isinstance(model, dict) and "ngram_fit" not in model:
        model = {"ngram_fit": _BEFORE_NGRAM_FIT, **model}
    if model is not raw.get("model"):
        raw = {**raw, "model": model}
    return config_from_dict(raw, origin)


def preset_text(name: str) -> str:
    """The TOML text of the preset ``name`` (one of :data:`PRESETS`), read from the installed package.

    Raises:
        ConfigError: no preset of that name.
    """
    if name not in PRESETS:
        raise ConfigError(f"{name}: no such preset or config file (presets: {', '.join(PRESETS)}; "
                          "or give the path of a TOML file)")
    return resources.files(__package__).joinpath("configs", f"{name}.toml").read_text(encoding="utf-8")


def _parse_toml(text: str, origin: str) -> dict[str, Any]:
    try:
        return toml_loads(text)
    except tomllib.TOMLDecodeError as exc:   # TomlNumberTooLong too: an integer over Python's 4,300 digits
        raise ConfigError(f"{origin}: not valid TOML: {exc}") from None


def load_config(name_or_path: str | Path | None = None) -> Config:
    """Read a preset by name (``default`` when None) or a TOML config file by path.

    An existing file wins over a preset of the same name; a name that is
    neither a file nor a preset is an error that lists the presets.

    Raises:
        ConfigError: no such preset or file, the file is not valid TOML, or it holds an invalid setting.
    """
    if name_or_path is None:
        name_or_path = DEFAULT_PRESET
    path = Path(name_or_path)
    if str(name_or_path) in PRESETS and not path.is_file():
        origin = f"preset {name_or_path}"
        return config_from_dict(_parse_toml(preset_text(str(name_or_path)), origin), origin)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        if path.suffix or len(path.parts) > 1:
            raise ConfigError(f"{path}: config file not found") from None
        preset_text(str(name_or_path))   # a bare name: say which presets exist
        raise   # pragma: no cover (preset_text raised)
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, not a config file") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not valid TOML: the file is not UTF-8 text") from None
    return config_from_dict(_parse_toml(text, str(path)), str(path))


def parse_overrides(items: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``["training.lr=1e-3", "data.source=reviews.csv"]`` -> ``{"training": {"lr": 0.001}, "data": {...}}``.

    The value is read as a TOML value (``1e-3``, ``true``, ``[0.9, 0.98]``, ``"text"``); a value that
    is not TOML (``reviews.csv``) is taken as a string. Types and ranges are checked later, by
    :func:`build_config`, exactly as for a file.

    Raises:
        ConfigError: an item is not ``section.key=value``, or sets the same key twice.
    """
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        name, eq, raw = item.partition("=")
        section, dot, key = name.strip().partition(".")
        if not eq or not dot or not section or not key or "." in key:
            raise ConfigError(f"--set {item}: expected section.key=value, e.g. training.lr=1e-3")
        try:
            value = toml_loads(f"v = {raw.strip()}")["v"]
        except TomlNumberTooLong as exc:   # not a string to keep: a number Python cannot read
            raise ConfigError(f"--set {name.strip()}: {str(exc).split(' (at line')[0]}") from None
        except tomllib.TOMLDecodeError:
            value = raw.strip()
        if key in out.setdefault(section, {}):
            raise ConfigError(f"--set {item}: [{section}] {key} is set twice")
        out[section][key] = value
    return out


def build_config(name_or_path: str | Path | None, sets: Iterable[str] = (),
                 flags: dict[str, dict[str, Any]] | None = None) -> Config:
    """The config a command runs with: a preset or file, then ``--set`` items, then the command's own flags.

    Args:
        name_or_path: preset name or TOML file (see :func:`load_config`).
        sets: ``section.key=value`` items (see :func:`parse_overrides`).
        flags: ``{section: {key: value}}`` from flags such as ``--epochs``; ``None`` values are unset.

    Raises:
        ConfigError: as :func:`load_config` and :func:`parse_overrides`; an invalid value; or a key set
            both by ``--set`` and by its own flag.
    """
    cfg = load_config(name_or_path)
    overrides = parse_overrides(sets)
    if overrides:
        cfg = _with_sections(cfg, overrides, "--set")
    for section, values in (flags or {}).items():
        given = {k: v for k, v in values.items() if v is not None}
        both = sorted(set(given) & set(overrides.get(section, {})))
        if both:
            raise ConfigError(f"[{section}] {both[0]} is set both by --set and by its own flag; give one")
        cfg = cfg.override(section, **given)
    return cfg


def given_keys(name_or_path: str | Path | None, sets: Iterable[str] = (),
               flags: dict[str, dict[str, Any]] | None = None) -> frozenset[str] | None:
    """The ``section.key`` names a command line sets itself, which the default's data rules leave alone.

    Returns:
        ``None`` when the config is a file or a preset other than ``default``: every key there was
        chosen, so no rule applies. Else the keys of ``sets`` and of the flags given (not ``None``).

    Raises:
        ConfigError: as :func:`parse_overrides`.
    """
    if name_or_path not in (None, "default"):
        return None
    keys = {f"{section}.{key}" for section, values in parse_overrides(sets).items() for key in values}
    keys |= {f"{section}.{key}" for section, values in (flags or {}).items()
             for key, value in values.items() if value is not None}
    return frozenset(keys)
