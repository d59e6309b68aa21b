"""The default reads the data: rules that fit the default preset's settings to the labelled source at hand.

``sentiment train`` with the default preset (no ``--config``, or ``--config default``) reads the
source once before training (:func:`~.profile.read_profile`: rows, classes, token lengths, a dev split,
unlabelled text) and sets each key below that the command line did not set itself
(:func:`data_rules`). Every choice is a :class:`Choice`: printed as one line when it is made, kept
in ``metrics.json`` (``"data_rules"``) and the model card, and its value is in ``config.json``.
``--set section.key=value`` fixes a key and its rule is skipped. A run from a file or another
preset applies no rule.

Each rule's numbers are the :class:`~.policy.RulesPolicy`'s; the dev-set evidence behind them is in
``docs/decisions.md`` ("The data rules"); the rules were chosen on the dev splits of TREC-6 and SST-5 and checked
on Subj.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import Config
from ..data.labels import IMBALANCE_RATIO
from ..data.splits import held_out_count, hold_out_way
from ..data.tokenizer_kind import TokenizerKind
from .augment import polar_labels
from .callbacks import TrainCallbacks
from .policy import DEFAULT, RulesPolicy
from .pretrained import pretraining_reads
from .profile import Profile, read_profile
from .run_data import RunData


@dataclass(frozen=True)
class Choice:
    """One setting chosen from the data.

    Attributes:
        key: ``section.key`` (``data.max_length``).
        value: the value set.
        reason: why, in a phrase with the figures it came from.
    """

    key: str
    value: Any
    reason: str

    def line(self) -> str:
        """The choice as the one line ``train`` prints."""
        return f"{self.key} = {self.value!r}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        """``{"key", "value", "reason"}`` for ``metrics.json``."""
        return {"key": self.key, "value": self.value, "reason": self.reason}


def data_rules(profile: Profile, config: Config, given: frozenset[str] = frozenset(),
               r: RulesPolicy = DEFAULT.rules) -> list[Choice]:
    """Every rule's choice for this data, given the default ``config`` (before any is applied), the keys the
    command line set (``given``: their rules are left to the caller to drop; a rule may read them) and the
    rules' numbers ``r``."""
    return [*_tokenizer_rules(profile, config, r), *_unlabelled_rules(profile, config, given, r),
            *_embedding_rule(profile, config, r), *_vocabulary_rule(profile, config, r),
            *_length_rule(profile, config, r), *_validation_rule(profile, config, r), *_epochs_rule(profile, config, r),
            *_imbalance_rule(profile, r), *_ngram_buckets_rule(profile, config, r),
            *_longer_dev_rules(profile, config, r), *_budget_rule(profile, config, r),
            *_negation_rules(profile, config, r), *_multi_label_rules(profile, config, r)]


def _tokenizer_rules(profile: Profile, config: Config, r: RulesPolicy) -> list[Choice]:
    """``[data] tokenizer = "auto"``: where most letters are in long runs without spaces or in a script written
    without them, characters for Han text and otherwise subwords (``subword_vocab`` Unigram pieces learned
    from the training texts); else words (:func:`~sentiment_cli.data.units.choose_units`; chosen on Wisesight's
    Thai, Chinese hotel reviews and the English sets, docs/data.md). The n-gram score then weighs its n-grams by
    TF-IDF, character 1-``char_max_n``-grams or subword 1-3-grams (dev splits, ``docs/decisions.md#text-without-spaces``)."""
    if profile.units is None:
        return []
    kind = TokenizerKind(profile.units.kind)
    choices = [Choice("data.tokenizer", kind.value, profile.units.reason())]
    if kind.subword and config.data.vocab_size != r.subword_vocab:
        choices.append(Choice("data.vocab_size", r.subword_vocab, f"text without spaces: {r.subword_vocab:,} subwords "
                              "(Wisesight's dev: 8,000 Unigram pieces' 1-3-grams above 32,000's in a linear model)"))
    if kind is TokenizerKind.WORD or not config.model.ngram_buckets:
        return choices
    if kind is TokenizerKind.CHAR and config.model.ngram_max_n < r.char_max_n:
        choices.append(Choice("model.ngram_max_n", r.char_max_n, f"character tokens: the n-gram score reads "
                              f"character 1-{r.char_max_n}-grams, within and across words"))
    if config.model.ngram_weighting != "tfidf":
        choices.append(Choice("model.ngram_weighting", "tfidf", "text without spaces: each n-gram counts its idf, a "
                              "text's n-grams L2-normalised (Wisesight's dev, characters: LR 70.9% against 70.1% "
                              "binary)"))
    return choices


def _unlabelled_rules(profile: Profile, config: Config, given: frozenset[str], r: RulesPolicy) -> list[Choice]:
    """Pretraining and distillation read unlabelled text when there is some. Without any, distillation is off,
    and word2vec reads the training texts, unless they hold fewer than ``few_tokens`` tokens: then the
    encoder starts from random vectors (on TREC-6's dev split word2vec on 52,129 tokens started it 2 to 3
    points worse). A command line that sets ``training.init_from`` or a ``pretrain`` key asks for pretraining,
    and gets it."""
    t = config.training
    asked = "training.init_from" in given or any(key.startswith("pretrain.") for key in given)
    if profile.unlabelled == 0:
        if profile.tokens < r.few_tokens and t.init_from and not asked:
            start = Choice("training.init_from", "", f"no unlabelled text (no unsupervised split, no --unlabelled) "
                           f"and {profile.tokens:,} training tokens (under {r.few_tokens:,}): too few for word2vec; "
                           "the encoder starts from random vectors")
        else:
            start = Choice("pretrain.splits", "train", "no unlabelled text (no unsupervised split, no "
                           "--unlabelled): word2vec reads the training texts")
        return [start, Choice("training.distill_reviews", 0, "no unlabelled text: no distillation")]
    if t.distill_reviews > profile.unlabelled:
        return [Choice("training.distill_reviews", profile.unlabelled,
                       f"{profile.unlabelled:,} unlabelled texts: distillation draws all of them each epoch")]
    return []


def _embedding_rule(profile: Profile, config: Config, r: RulesPolicy) -> list[Choice]:
    """A small set's token embedding learns ``small_embedding_lr_scale`` times faster than ``lr``.

    AdamW moves a word's vector by about ``lr`` per coordinate per step in which the word occurs, and the
    vectors start at unit scale; in a set of fewer than ``few_tokens`` tokens most words occur too
    rarely for their vectors to move far at the preset's ``lr``, and the encoder underfits (dev accuracy of
    the encoder alone: TREC-6 after 5 epochs 75.1% -> 83.9%, SST-5 in the whole default 30.8% -> 41.2%;
    ``docs/decisions.md#small-sets-random-start-faster-embedding``).

    With unlabelled text the encoder starts from word2vec vectors learned on it, not from random ones, and the
    preset's rate keeps them (2,000 IMDB reviews with IMDB's unlabelled ones: ``docs/decisions.md#small-sets-random-start-faster-embedding``).
    """
    if profile.tokens >= r.few_tokens or profile.unlabelled or config.training.embedding_lr_scale != 1.0:
        return []
    return [Choice("training.embedding_lr_scale", r.small_embedding_lr_scale,
                   f"{profile.tokens:,} training tokens (under {r.few_tokens:,}): most words occur too rarely for "
                   f"their vectors to move at lr {config.training.lr:g}; the token embedding learns "
                   f"{r.small_embedding_lr_scale:g}x faster")]


def _vocabulary_rule(profile: Profile, config: Config, r: RulesPolicy) -> list[Choice]:
    """A small set keeps the words seen once in its vocabulary (``data.min_frequency = 1``).

    The preset's ``min_frequency`` 2 drops the words that occur once in the training texts, and so both the
    encoder and the n-gram score (which hashes token ids) read them as ``<unk>``. In a set of fewer than
    ``few_tokens`` tokens these are about half of its words: the vocabulary grows from 3,274 to 7,912 words
    (TREC-6), 8,241 to 15,349 (SST-5) and 10,036 to 18,878 (Subj). Best dev accuracy with them, seeds 1234 /
    4321 (``docs/decisions.md#small-sets-words-seen-once``): TREC-6 88.81 / 88.44 against 88.44 / 87.89,
    SST-5 42.78 / 43.23 against 43.05 / 42.87; checked on Subj, which chose nothing: 93.31 against 92.71 (seed
    1234).
    """
    if profile.tokens >= r.few_tokens or config.data.min_frequency <= 1:
        return []
    return [Choice("data.min_frequency", 1,
                   f"{profile.tokens:,} training tokens (under {r.few_tokens:,}): the words seen once are about half "
                   "of its words; the vocabulary keeps them")]


def _length_rule(profile: Profile, config: Config, r: RulesPolicy) -> list[Choice]:
    """``max_length`` covers 99% of the training (or dev) texts whole, in steps of 8, up to the preset's."""
    cap, fit = config.data.max_length, _max_length(profile, config, r)
    if fit == cap:
        return []
    return [Choice("data.max_length", fit, f"99% of the training and dev texts have at most "
                   f"{profile.length_quantile} tokens")]


def _max_length(profile: Profile, config: Config, r: RulesPolicy) -> int:
    """The ``max_length`` :func:`_length_rule` gives: the training (or dev) texts' ``length_quantile`` in steps of
    8, at least 16, at most the preset's."""
    return min(config.data.max_length, max(16, 8 * math.ceil(profile.length_quantile / 8)))


def _validation_rule(profile: Profile, config: Config, r: RulesPolicy) -> list[Choice]:
    """Validation, for the best epoch and the temperature: the source's dev split, else a stratified hold-out.

    Under ``large_train`` rows the hold-out (10%) is then trained on: the refit (``refit.py``), a second
    run on every row for the best epoch count, keeping the temperature. On the shared sets' training files
    alone, scored on their dev files (``docs/decisions.md#the-refit``), it gained on
    each. From ``large_train`` rows the hold-out is 5% of them, and the refit would cost a whole second
    fine-tuning (IMDB: about 15 minutes) for 5% more rows.
    """
    if profile.has_validation:
        return [Choice("data.validation_fraction", 0.1, "the source's dev split validates: it picks the best "
                       "epoch and fits the temperature")]
    n = profile.train_rows
    fraction = 0.1 if n < r.large_train else round(max(0.05, r.hold_out_rows / n), 3)
    held = Choice("data.validation_fraction", fraction,
                  f"no dev split: {_held_out_phrase(profile, config, fraction, r)} held out to pick the best epoch and "
                  "fit the temperature")
    if n >= r.large_train:
        return [held]
    return [held, Choice("training.refit", True, f"then trained on: a second run on all {n:,} rows for the best "
                         f"epoch count keeps the fitted temperature (under {r.large_train:,} rows)")]


def _held_out_phrase(profile: Profile, config: Config, fraction: float, r: RulesPolicy) -> str:
    """How many rows the hold-out takes, in words, as :func:`~sentiment_cli.data.splits.held_out_count` counts
    them: ``10% of train (60 of 600 rows, stratified) is``; when classes too small for ``fraction`` give a row
    each all the same, the real share and why (``300 of 600 rows (50% of train: one row of each of the 300
    classes too small for 10%; stratified, in blocks) are``)."""
    n = profile.train_rows
    counts = (n,) if profile.reading else profile.class_counts   # several labels per text: rows, unstratified
    rows, forced = held_out_count(counts, fraction, config.training.seed, config.data.validation_split)
    how = hold_out_way(config.data.validation_split, bool(profile.reading))
    if not forced:
        return f"{fraction:.0%} of train ({rows:,} of {n:,} rows, {how}) is"
    classes = "the 1 class" if forced == 1 else f"each of the {forced:,} classes"
    others = f", and {fraction:.0%} of the others" if forced < len([c for c in profile.class_counts if c]) else ""
    return (f"{rows:,} of {n:,} rows ({rows / n:.0%} of train: one row of {classes} too small for "
            f"{fraction:.0%}{others}; {how}) are")


def _epochs_rule(profile: Profile, config: Config, r: RulesPolicy) -> list[Choice]:
    """Epochs by size: at least ``target_steps`` optimizer steps, from the preset's epochs up to
    ``max_epochs``; validation keeps the best epoch.

    An epoch's steps count the unlabelled texts distillation draws beside the labelled rows
    (``distill_reviews``, at most as many as there are): 2,000 labelled reviews with IMDB's unlabelled ones
    make 208 steps an epoch, not 32, so 5 epochs, not 10 (``docs/decisions.md#epochs``).
    """
    t = config.training
    if profile.reading:   # several labels per text: _multi_label_rules' steps
        return []
    steps, distilled = _epoch_steps(profile, config, r)
    epochs = _epochs(profile, config, r)
    if epochs == t.epochs:
        return []
    capped = f" (at most {r.max_epochs} epochs)" if epochs == r.max_epochs else ""
    rows = f"{profile.train_rows:,} training rows" + (f" and {distilled:,} unlabelled texts" if distilled else "")
    return [Choice("training.epochs", epochs, f"{rows} make {steps:,} steps an epoch; "
                   f"{epochs} epochs make {epochs * steps:,} steps{capped}")]


def _imbalance_rule(profile: Profile, r: RulesPolicy) -> list[Choice]:
    """Balanced class weights when the largest class outnumbers the smallest by more than 5 to 1 (several labels
    per text: the most frequent label's texts the rarest's; ``balanced`` then weighs each label's positives,
    ``imbalance.positive_weights``)."""
    ratio = profile.imbalance
    if ratio > IMBALANCE_RATIO:
        what = "the most frequent label's texts outnumber the rarest's" if profile.reading else \
            "the largest class outnumbers the smallest"
        return [Choice("training.class_weight", "balanced", f"{what} {ratio:.1f} to 1 (above {IMBALANCE_RATIO:g} "
                       "to 1)")]
    return []


def _ngram_buckets_rule(profile: Profile, config: Config, r: RulesPolicy) -> list[Choice]:
    """The n-gram score's buckets: the next power of two above 4x the training texts' 1-3-gram occurrences
    (a load of at most 1/4, so few n-grams share a bucket), up to the preset's."""
    cap = config.model.ngram_buckets
    if not cap:
        return []
    if profile.char_ngrams:   # characters repeat: the table is sized from the distinct n-grams
        fit = min(cap, _buckets(r.bucket_headroom * profile.char_ngrams, r))
        why = (f"the training texts hold {profile.char_ngrams:,} distinct character 1-"
               f"{max(r.char_max_n, config.model.ngram_max_n)}-grams: buckets for {r.bucket_headroom}x as many")
    else:
        fit = min(cap, _buckets(r.bucket_headroom * 3 * profile.tokens, r))
        why = f"the training texts hold about {3 * profile.tokens:,} n-gram occurrences: buckets for {r.bucket_headroom}x as many"
    labels = len(profile.labels)
    if profile.reading and fit * labels > r.multi_label_weights:   # a column of weights per label
        fit = max(r.min_buckets, 1 << int(math.log2(r.multi_label_weights // labels)))
        why = (f"several labels per text: a column of weights per label, {labels} labels x {fit:,} buckets "
               f"(at most {r.multi_label_weights:,} weights, {r.multi_label_weights * 4 // 2**20} MB)")
    if fit == cap:
        return []
    return [Choice("model.ngram_buckets", fit, why)]


def _buckets(entries: int, r: RulesPolicy) -> int:
    """The next power of two above ``entries``, at least ``r.min_buckets`` (:meth:`RulesPolicy.buckets`)."""
    return r.buckets(entries)


def _longer_dev_rules(profile: Profile, config: Config, r: RulesPolicy) -> list[Choice]:
    """When the dev texts are of another kind than the training texts (over ``shift_ratio`` times as long at
    the median, as SST-5's sentences against its phrases), the n-gram score is fitted and weighted for them.

    - ``model.ngram_fit = "nb-lr"``: cross-validation on the training texts would choose the form for other
      texts.
    - ``training.ngram_scale_min = 0.5``: the score sums over a text's n-grams, so on sentences 4x as long as
      the phrases it was fitted on, its logits outgrow the encoder's, whose max-pool does not grow with length;
      its fitted weight may go below 1. SST-5's phrases, 4 probes on its dev split, the weight chosen by NLL on
      one half and scored on the other: +0.2 to +2.5 points in 6 of 8 halves and +0 in 2 (``docs/decisions.md#dev-texts-of-another-kind``). Sets whose dev texts are like their training texts
      keep 1 as the floor: there, half of Subj's dev chose 0.5 and lost 0.8 point on the other half.
    """
    m, t = config.model, config.training
    if not m.ngram_buckets or profile.length_ratio < r.shift_ratio:
        return []
    longer = f"the dev texts are {profile.length_ratio:.1f}x as long as the training texts (median)"
    choices = []
    if m.ngram_fit == "auto":
        choices.append(Choice("model.ngram_fit", "nb-lr",
                              f"{longer}: cross-validation on training texts would choose for other texts"))
    if t.fit_ngram_scale and t.ngram_scale_min > r.longer_dev_scale_floor:
        choices.append(Choice("training.ngram_scale_min", r.longer_dev_scale_floor,
                              f"{longer}: the n-gram score sums over more n-grams in them than it was fitted on, "
                              "so its weight may go below 1"))
    return choices


def _epochs(profile: Profile, config: Config, r: RulesPolicy) -> int:
    """The epochs :func:`_epochs_rule` (one label per text) or :func:`_multi_label_rules` (several) give: at least
    ``target_steps`` (``multi_label_steps``) optimizer steps, from the preset's epochs up to
    ``max_epochs``; an epoch's steps count the unlabelled texts distillation draws (one label per text)."""
    target = r.multi_label_steps if profile.reading else r.target_steps
    return min(r.max_epochs, max(config.training.epochs, math.ceil(target / _epoch_steps(profile, config, r)[0])))


def _epoch_steps(profile: Profile, config: Config, r: RulesPolicy) -> tuple[int, int]:
    """An epoch's optimizer steps and the unlabelled texts distillation draws into it: ``(steps, distilled)``;
    ``distilled`` is 0 without unlabelled text (distillation is off) and with several labels per text."""
    t = config.training
    distilled = 0 if profile.reading else min(t.distill_reviews, profile.unlabelled)
    return math.ceil((profile.train_rows + distilled) / t.batch_size), distilled


def _run_reads(profile: Profile, config: Config, r: RulesPolicy) -> int:
    """Tokens one encoder run reads: the training texts' tokens, each text cut at the ``max_length`` of
    :func:`_length_rule` (at most ``train_rows * max_length``), times the epochs of :func:`_epochs` (an estimate
    from :attr:`Profile.tokens`; TREC-6 0.5M, Subj 1.6M, Turkish news topics 8.5M)."""
    tokens = min(profile.tokens, profile.train_rows * _max_length(profile, config, r))
    return tokens * _epochs(profile, config, r)


def _budget_rule(profile: Profile, config: Config, r: RulesPolicy) -> list[Choice]:
    """A small set's search takes ``small_set_budget`` seconds, or as many times that as its runs read
    ``small_run_reads`` tokens (:func:`_run_reads`), at most the preset's: one run of a set of short texts
    takes under two minutes on 2 cores (TREC-6 78 s and Subj 117 s with the refit), so five minutes measure
    several settings and refit the best; the preset's 30 minutes are IMDB's, whose one run takes about 25. On
    long texts a run reads more: 2,750 Turkish news articles' 854,357 tokens in 10 epochs of 512 tokens at most,
    8.5M, took 337 s for one encoder run, and 5 minutes left the n-gram stage 90 s (no fit of each word's
    character n-grams) and the encoder 284 of its 430 steps. Small: under ``few_tokens`` tokens and under
    ``large_train`` rows (an epoch's steps grow with the rows: Wisesight's 21,641 messages in 575,209 subword
    tokens, whose tokenizer, n-gram fits and one encoder run take over ten minutes)."""
    if profile.tokens >= r.few_tokens or profile.train_rows >= r.large_train \
            or not 0 < r.small_set_budget < config.training.time_budget \
            or _many_short_texts(profile, r):   # its own budget: _multi_label_rules
        return []
    reads = _run_reads(profile, config, r)
    budget = min(config.training.time_budget, 60.0 * math.ceil(r.small_set_budget * reads / r.small_run_reads / 60))
    budget = max(r.small_set_budget, budget)
    why = f"{profile.tokens:,} training tokens (under {r.few_tokens:,}) in {profile.train_rows:,} rows"
    if budget == r.small_set_budget:
        return [Choice("training.time_budget", budget, f"{why}: a run takes a minute or two; the search takes at "
                       f"most {budget / 60:g} minutes")]
    return [Choice("training.time_budget", budget, f"{why}, but a run reads {reads / 1e6:.1f}M tokens, "
                   f"{reads / r.small_run_reads:.1f} times a small set's {r.small_run_reads / 1e6:g}M: the search "
                   f"takes at most {budget / 60:g} minutes")]


def _negation_rules(profile: Profile, config: Config, r: RulesPolicy) -> list[Choice]:
    """Two-class sentiment (labels negative and positive) read as words reads negation scope and learns from
    rule-negated sentences (``docs/decisions.md#negation``): ``[data] negation_scope = "sentence"``,
    and ``[training] negation_augment`` pairs, ``negation_pairs`` at most and ``negation_share`` of the
    training rows (IMDB's 25,000 reviews: 10,000); ``[training] lexicon_prior`` (VADER's words as one-word rows,
    ``lexicon_rows`` and ``lexicon_share`` of the training rows at most, where the training texts average
    ``lexicon_min_tokens`` tokens or more; ``docs/decisions.md#what-words-mean-outside-the-training-set``) and ``[data]
    blind_identity`` (identity terms read as ``<unk>``; ``docs/decisions.md#identity-terms``). Other label sets
    keep the preset's (none), and so does text
    read as characters (Chinese, Thai): the scope runs over words after an English negator, and the augmentation's
    rules rewrite English words ("was good" -> "was not good")."""
    kind = profile.units.kind if profile.units else config.data.tokenizer   # "auto" unresolved: not words
    if polar_labels(profile.labels) is None or kind != TokenizerKind.WORD:
        return []
    pairs = min(r.negation_pairs, round(r.negation_share * profile.train_rows))
    words = min(r.lexicon_rows, round(r.lexicon_share * profile.train_rows))
    mean_tokens = profile.tokens / max(1, profile.train_rows)
    lexicon = [Choice("training.lexicon_prior", words, f"two-class sentiment in texts of {mean_tokens:.0f} tokens on "
                      f"average (at least {r.lexicon_min_tokens}): up to {words:,} one-word rows of VADER's words "
                      "teach the encoder what words mean in a short sentence, where its scores say the labels are "
                      "polarity and the texts do not say otherwise")] if mean_tokens >= r.lexicon_min_tokens else []
    return [Choice("data.negation_scope", "sentence", "two-class sentiment: words a negator governs are marked "
                   "(up to the next . ; : ! ? or 'but')"),
            Choice("training.negation_augment", pairs, f"two-class sentiment: up to {pairs:,} training sentences "
                   "negated by rule, the label flipped, teach the encoder what 'not' does"),
            *lexicon,
            Choice("model.ngram_intercept", False, "two-class sentiment: the n-gram score has no intercept, so "
                   "a short text is read by its words, not by the bias of long reviews"),
            Choice("data.blind_identity", True, "two-class sentiment: the names of nationalities, religions, "
                   "ethnicities and sexualities are read as <unk>, so that none moves the prediction")]


def _multi_label_rules(profile: Profile, config: Config, r: RulesPolicy) -> list[Choice]:
    """Several labels per text (``profile.reading``; ``docs/decisions.md#several-labels-per-text``):

    - the n-gram score is one plain logistic regression per label at C 1, pinned (``multi_label_form``,
      ``multi_label_c``), not
      chosen by cross-validation among single-label's forms;
    - at least ``multi_label_steps`` optimizer steps (at most ``max_epochs`` epochs): a rare label has few
      positives to learn from (GoEmotions' dev: 6 epochs 0.477 macro-F1, 4 epochs 0.471);
    - a set of many short texts (under ``few_tokens`` tokens, ``many_rows`` rows or more) searches for
      ``multi_label_budget`` seconds, not ``small_set_budget``: its steps count rows, not tokens, so one
      encoder run takes minutes (GoEmotions: 6 minutes), and 5 minutes hold the n-gram score alone but no encoder.
    """
    if not profile.reading:
        return []
    m, t, choices = config.model, config.training, []
    if m.ngram_buckets and m.ngram_fit == "auto":
        form, c = r.multi_label_form, r.multi_label_c
        why = "several labels per text: one logistic regression per label, C 1 (GoEmotions' dev: 0.46 macro-F1, " \
              "NB-LR's 0.41)"
        choices += [Choice("model.ngram_fit", form, why), Choice("model.ngram_c", c, why)]
    steps, epochs = _epoch_steps(profile, config, r)[0], _epochs(profile, config, r)
    if epochs > t.epochs:
        choices.append(Choice("training.epochs", epochs, f"several labels per text, rare ones with few positives: "
                              f"{epochs} epochs of {steps:,} steps (at least {r.multi_label_steps:,} steps, at most "
                              f"{r.max_epochs} epochs)"))
    if _many_short_texts(profile, r) and 0 < t.time_budget:
        choices.append(Choice("training.time_budget", min(t.time_budget, r.multi_label_budget),
                              f"{profile.train_rows:,} rows of {profile.tokens:,} tokens: an encoder run takes "
                              f"minutes; the search takes at most {r.multi_label_budget / 60:g} minutes"))
    return choices


def _many_short_texts(profile: Profile, r: RulesPolicy) -> bool:
    """Many rows of few tokens: a multi-label set whose search gets ``multi_label_budget``."""
    return bool(profile.reading) and profile.tokens < r.few_tokens and profile.train_rows >= r.many_rows


def pretrained_folder(config: Config) -> str:
    """The default's pretrained folder for this data: ``init_from`` with the source's name and a hash of what
    pretraining reads (:func:`~sentiment_cli.training.pretrained.pretraining_reads`: the data, and the seed
    that draws the hold-out it must not read, and a tokenizer other than words with its size), so that runs on
    other data, with another ``--seed`` or other units never meet in one folder
    (``checkpoints/pretrained-trec6-1a2b3c``)."""
    d = config.data
    key = "\n".join(f"{section}.{name}={value}" for section, name, value in pretraining_reads(config))
    if d.tokenizer != "word":   # another tokenizer's encoder gets a folder of its own (words keep their names)
        key += f"\ndata.tokenizer={d.tokenizer}\ndata.vocab_size={d.vocab_size}"
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(d.source.rstrip("/\\")).name or "data").strip("-.") or "data"
    base = Path(config.training.init_from)
    return str(base.parent / f"{base.name}-{name[:40]}-{hashlib.sha256(key.encode()).hexdigest()[:6]}")


def fit_to_data(config: Config, given: frozenset[str], cb: TrainCallbacks, data: RunData | None = None,
                rules: RulesPolicy = DEFAULT.rules) -> tuple[Config, list[Choice]]:
    """Apply :func:`data_rules` to ``config``, except for the keys in ``given`` (set on the command line).

    ``data``: the run's source, read once (see :func:`~.profile.read_profile`). ``rules``: the rules' numbers.

    Returns:
        ``(config, choices)``: the config with the choices applied, and the choices made.

    Raises:
        DataError, UsageError, ConfigError: as :func:`~.profile.read_profile`; ConfigError when a choice is invalid
            together with a key the user set.
    """
    cb.on_stage(f"reading {config.data.source} to fit the default's settings to it")
    profile = read_profile(config, data, rules)
    if profile.reading:
        cb.on_note(profile.reading)
    for note in profile.notes:
        cb.on_note(note)
    choices = [c for c in data_rules(profile, config, given, rules) if c.key not in given]
    config = config.with_keys({c.key: c.value for c in choices}, "the default's data rules")
    if config.training.init_from and "training.init_from" not in given:
        folder = pretrained_folder(config)
        choices.append(Choice("training.init_from", folder, "the pretrained encoder of this data (made when missing)"))
        config = config.override("training", init_from=folder)
    for c in choices:
        cb.on_note(c.line())
    return config, choices

