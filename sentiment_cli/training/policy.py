"""Every tuning number of the default's data rules, its search and its fit, in one typed place: :class:`Policy`.

The stages read a :class:`Policy` handed to them and hold no numbers of their own: the data rules (``auto.py``)
read :attr:`Policy.rules`, the n-gram stage (``ngram_stage.py``) :attr:`Policy.ngram`, the search
(``search.py``) :attr:`Policy.search`, one run's fit (``calibrate.py``, ``imbalance.py``, ``augment.py``)
:attr:`Policy.fit`. Each field says what it means, its unit and the evidence behind its value (the figure, the
set and split, the date and commit; the decisions page is ``docs/decisions.md``). ``sentiment config --policy``
prints it; ``sentiment train --policy FILE`` (a TOML file of the fields to change) and
``sentiment_cli.train(..., policy=)`` swap it (:func:`policy_from_toml`).

To change a rule: change its value here, rerun the suite (``python -m bench --suite``) on dev, and write the
figure that decided it into the field's evidence and ``docs/decisions.md``.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError

DECISIONS = "docs/decisions.md"


def tuned(value: Any, unit: str, meaning: str, evidence: str) -> Any:
    """A policy field: its default ``value``, its ``unit``, what it ``meaning``s and the ``evidence`` for it."""
    return field(default=value, metadata={"unit": unit, "meaning": meaning, "evidence": evidence})


@dataclass(frozen=True)
class PieceFit:
    """One fit of the n-gram score with each token's character n-grams beside the words.

    Attributes:
        form: ``"lr"`` or ``"nb-lr"``.
        c: its inverse L2 strength; ignored with ``c_of_words``.
        c_of_words: take the form's best C on words alone instead of ``c``.
        weighting: ``[model] ngram_weighting`` of the fit (``"tfidf"``, ``"binary"``...); ignored with
            ``weighting_of_words``.
        weighting_of_words: read the pieces with the weighting the words were fitted with.
    """

    form: str
    c: float = 0.0
    c_of_words: bool = False
    weighting: str = "tfidf"
    weighting_of_words: bool = False


@dataclass(frozen=True)
class TermReading:
    """How several labels per text are also read: ``[model] ngram_weighting``, ``ngram_max_n``, ``ngram_min_df``."""

    weighting: str = "sublinear"
    max_n: int = 2
    min_df: int = 2


@dataclass(frozen=True)
class PeerReading:
    """A linear peer's representation, fitted by the n-gram stage as one of its readings (issue 75).

    Attributes:
        peer: the suite's name for the peer (``bench/suite.py``: ``"tfidf-char"``, ``"tfidf"``).
        name: how the search's record and the card name it.
        tokenizer: ``[data] tokenizer`` the reading needs (``"char"``), or ``""``: the run's own.
        max_n: ``[model] ngram_max_n``: the longest token n-gram (character 4-grams, word 2-grams).
        weighting: ``[model] ngram_weighting`` (the peers' sublinear TF-IDF).
        min_frequency: ``[data] min_frequency`` of its own tokenizer (the peers keep every n-gram: ``min_df`` 1).
    """

    peer: str
    name: str
    tokenizer: str = ""
    max_n: int = 2
    weighting: str = "sublinear"
    min_frequency: int = 1


@dataclass(frozen=True)
class RulesPolicy:
    """The data rules' numbers (``training/auto.py``, ``training/profile.py``): what the default reads of the data,
    and what it sets."""

    length_sample: int = tuned(5000, "texts", "texts whose token counts set max_length (a seeded draw)",
                               "a sample size, not tuned; f1ea72c, 2026-11-24")
    length_quantile: float = tuned(0.99, "share", "max_length covers this share of the training (or dev) texts whole",
                                   "no dev figure chose it; SST-5's phrases are 99% within 36 tokens, its dev "
                                   f"sentences 44; {DECISIONS}#max-length; f1ea72c, 2026-11-24")
    large_train: int = tuned(20_000, "rows", "from here on the hold-out is hold_out_rows (5% at least) and is not "
                             "trained on again (no refit)", "the refit stops paying there: a second fine-tuning, about "
                             f"15 minutes on IMDB, for 5% more rows; {DECISIONS}#the-refit; f1ea72c, 2026-11-24")
    hold_out_rows: int = tuned(1250, "rows", "a large training split's hold-out",
                               f"no dev figure chose it; {DECISIONS}#the-validation-hold-out; f1ea72c, 2026-11-24")
    target_steps: int = tuned(1000, "optimizer steps", "a run's steps at least (epochs grow up to max_epochs)",
                              "dev: the best epoch moved little with more epochs (TREC-6 84.0% at 4, 84.4% at 10); "
                              f"{DECISIONS}#epochs; 621b575, 2026-11-24")
    max_epochs: int = tuned(10, "epochs", "a run's epochs at most", f"{DECISIONS}#epochs; 621b575, 2026-11-24")
    shift_ratio: float = tuned(2.0, "ratio", "dev texts this many times as long as the training texts (median) are "
                               "another kind of text: NB-LR pinned and the score's weight may go below 1",
                               "SST-5 phrases (dev sentences 4x as long): cross-validation picked LR and lost 4.09 "
                               f"points on dev; {DECISIONS}#dev-texts-of-another-kind; 3ff9461, 2026-11-24")
    few_tokens: int = tuned(1_000_000, "tokens", "fewer training tokens make a small set (TREC-6 52k, SST-5 175k; "
                            "IMDB 6.9M)", "SST-5 phrases (1.24M tokens) keep the preset's rate: 10x gained 0.36 on one "
                            f"seed, lost 0.46 on the other; {DECISIONS}#small-sets-random-start-faster-embedding; "
                            "9acb292, 2026-11-25")
    small_embedding_lr_scale: float = tuned(10.0, "x lr", "a small set's token embedding learns this many times "
                                            "faster", "TREC-6's dev, the encoder alone: 75.1% -> 83.9%; SST-5's dev, "
                                            "the whole default 40.87% -> 43.05%; scale 3 and 30 no better; "
                                            f"{DECISIONS}#small-sets-random-start-faster-embedding; 9062fc3, 2026-11-25")
    longer_dev_scale_floor: float = tuned(0.5, "weight", "fit_ngram_scale's smallest candidate when the dev texts "
                                          "are of another kind", "SST-5 phrases, the weight chosen on one half of dev "
                                          "and scored on the other: +0.18 to +2.54 points in 6 of 8 halves; "
                                          f"{DECISIONS}#dev-texts-of-another-kind; a8ec93b, 2026-11-26")
    negation_pairs: int = tuned(10_000, "sentence pairs", "rule-negated sentence pairs at most (two-class "
                                "sentiment read as words)", "IMDB's block hold-out and the built-in suite's dev half: "
                                "90.29% dev accuracy, negation failures 79.1% -> 19.3%; "
                                f"{DECISIONS}#negation; affdc2a, 2026-11-27")
    lexicon_rows: int = tuned(25_000, "rows", "VADER's word rows at most (lexicon_repeats a word), for two-class "
                              "sentiment read as words (its 5,586 words of valence 1 or more, 4 times, fit)", "a bound, not tuned; "
                              f"{DECISIONS}#what-words-mean-outside-the-training-set; 2026-12-08")
    lexicon_min_tokens: int = tuned(50, "tokens a row", "VADER's words join only where the training texts average "
                                    "this many tokens: sentences people type are then out of the training texts' "
                                    "kind", "SST-2's dev (sentences of 19 tokens on average), validation log-loss: "
                                    "no rows 0.3871, 1,730 rows 0.3969, 5,536 rows 0.4014 (the main code's 0.3875); "
                                    "IMDB's (reviews of about 280): the levers 0.2471 against main's 0.2500; "
                                    f"{DECISIONS}#what-words-mean-outside-the-training-set; 2026-12-08")
    lexicon_share: float = tuned(0.8, "share of rows", "VADER's word rows at most this share of the training rows, "
                                 "the strongest words first", "a bound, not tuned: IMDB's 25,000 reviews take 5,000 "
                                 "words; "
                                 f"{DECISIONS}#what-words-mean-outside-the-training-set; 2026-12-08")
    negation_share: float = tuned(0.4, "share of rows", "rule-negated pairs at most this share of the training rows",
                                  f"a bound, not tuned; {DECISIONS}#negation; affdc2a, 2026-11-27")
    small_set_budget: float = tuned(300.0, "seconds", "a small set's search time (the preset's 1,800 s is IMDB's)",
                                    "one run of a set of short texts takes a minute or two (TREC-6 78 s, Subj 117 s), "
                                    f"so 5 minutes hold several settings and the refit; {DECISIONS}#the-time-budget; "
                                    "15b428f, 2026-11-27")
    small_run_reads: int = tuned(2_500_000, "tokens x epochs", "a small set's run reads this many tokens; a run "
                                 "reading more gets as many times small_set_budget", "2,750 Turkish news articles "
                                 "(8.5M a run): validation log-loss 0.2130 with the rule's 1,080 s against 0.2613; "
                                 f"{DECISIONS}#the-time-budget; fd2c485, 2026-11-30")
    char_max_n: int = tuned(4, "characters", "character tokens: the n-gram score reads character 1-n-grams",
                            "Wisesight's dev, characters: TF-IDF 1-4-grams 70.92% against binary 70.09%; "
                            f"{DECISIONS}#text-without-spaces; c0e44de, 2026-11-28")
    subword_vocab: int = tuned(8000, "subwords", "text without spaces: Unigram subwords", "8,000 pieces over "
                               f"32,000 in a linear model, 69.51% against 67.55%; {DECISIONS}#text-without-spaces; "
                               "31e0f82, 2026-11-29")
    subword_sample_chars: int = tuned(200_000, "characters", "characters a subword tokenizer is trained on to count "
                                      "a sample's tokens", "a sample size, not tuned; 69a04bd, 2026-11-29")
    bucket_headroom: int = tuned(4, "x n-grams", "the n-gram score's buckets: the next power of two above this many "
                                 "times the training n-grams (a load of 1/4 at most)", "no dev figure chose it; fewer "
                                 "buckets cost macro-F1 (GoEmotions' dev halves 0.4580 / 0.4558 / 0.4519 at 2M / 1M / "
                                 f"512K); {DECISIONS}#n-gram-buckets; c91715c, 2026-11-24")
    min_buckets: int = tuned(1 << 16, "buckets", "the n-gram score's buckets at least",
                             f"{DECISIONS}#n-gram-buckets; c91715c, 2026-11-24")
    multi_label_form: str = tuned("lr", "form", "several labels per text: one plain LR per label",
                                  "GoEmotions' dev: LR C 1 0.4621 macro-F1, NB-LR C 0.3 / 1 0.4152 / 0.4107; "
                                  f"{DECISIONS}#several-labels-per-text; 44d7489, 2026-11-27")
    multi_label_c: float = tuned(1.0, "C", "several labels per text: its C", "GoEmotions' dev: C 0.3 / 1 / 2 / 4: "
                                 "0.4419 / 0.4621 / 0.4567 / 0.4497; "
                                 f"{DECISIONS}#several-labels-per-text; 44d7489, 2026-11-27")
    multi_label_steps: int = tuned(4000, "optimizer steps", "several labels per text: steps at least", "GoEmotions' "
                                   "dev: 6 epochs 0.4766 macro-F1 against 4 epochs' 0.4707; "
                                   f"{DECISIONS}#several-labels-per-text; 44d7489, 2026-11-27")
    multi_label_budget: float = tuned(600.0, "seconds", "the search of a multi-label set of many short texts",
                                      "GoEmotions: one encoder run takes about 6 minutes, so 5 held the score alone "
                                      f"only; {DECISIONS}#several-labels-per-text; 44d7489, 2026-11-27")
    many_rows: int = tuned(20_000, "rows", "a multi-label set of this many rows of few tokens gets multi_label_budget",
                           f"{DECISIONS}#several-labels-per-text; 44d7489, 2026-11-27")
    multi_label_weights: int = tuned(1 << 26, "weights", "a multi-label n-gram score's weights at most (labels x "
                                     "buckets; 256 MB of float32)", f"a memory bound; {DECISIONS}#n-gram-buckets; "
                                     "44d7489, 2026-11-27")

    def buckets(self, entries: int) -> int:
        """The n-gram score's buckets for ``entries`` (already times :attr:`bucket_headroom`): the next power of two
        above them, at least :attr:`min_buckets` (the buckets rule, ``auto.py``; the character reading,
        ``ngram_peers.py``)."""
        return max(self.min_buckets, 1 << max(0, math.ceil(math.log2(max(1, entries)))))


@dataclass(frozen=True)
class NgramStagePolicy:
    """The search's first stage (``training/ngram_stage.py``): the n-gram score alone's fits."""

    grid: tuple[tuple[str, tuple[float, ...]], ...] = tuned(
        (("nb-lr", (0.1, 0.3, 1.0)), ("lr", (1.0, 3.0, 10.0, 30.0))), "C per form", "each form's C, fitted on the "
        "training split and scored on validation, from the middle out", "LR at C 3: Wisesight's validation 71.38% / "
        f"0.7079 against 70.84% / 0.7176 at C 10; {DECISIONS}#the-n-gram-stage; 285fb08, 2026-11-28")
    piece_chars: int = tuned(5, "characters", "each token's character 2-n-grams beside the words (fastText's "
                             "subwords)", "validation log-loss, words alone against with pieces: ASTD 0.8653 / "
                             f"0.8243, Subj 0.2005 / 0.1768; {DECISIONS}#word-pieces; a3efa67, 2026-11-28")
    piece_fits: tuple[PieceFit, ...] = tuned(
        (PieceFit("lr", 3.0), PieceFit("nb-lr", c_of_words=True, weighting_of_words=True), PieceFit("lr", 10.0)),
        "fits", "the fits with word pieces, the better form on words first",
        f"Wisesight's subwords, NB-LR C 10: 0.7263 against 0.6914; {DECISIONS}#word-pieces; fd02d52, 2026-11-30")
    term_reading: TermReading = tuned(TermReading(), "reading", "several labels per text: also sublinear TF-IDF "
                                      "1-2-grams in 2+ texts", "Reuters' validation log-loss: 0.0149 at C 100 against "
                                      f"binary 1-3-grams' 0.0239; {DECISIONS}#term-reading-for-several-labels; 799ff35, "
                                      "2026-11-29")
    term_cs: tuple[float, ...] = tuned((100.0, 300.0, 30.0), "C", "the term reading's C, in the order fitted",
                                       f"{DECISIONS}#term-reading-for-several-labels; aa5fcca, 2026-11-29")
    c_ladder: tuple[float, ...] = tuned((0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0), "C",
                                        "half decades past a grid's edge, where a form's best C is at it",
                                        "Chinese hotel reviews' LR: 0.3182 / 0.2687 / 0.2539 / 0.2475 at C 1 / 3 / 10 "
                                        f"/ 30; {DECISIONS}#past-the-grids-edge; 6ed4a0f, 2026-11-29")
    edge_steps: int = tuned(2, "rungs", "rungs of c_ladder past the grid's edge at most",
                            f"{DECISIONS}#past-the-grids-edge; 6ed4a0f, 2026-11-29")
    peer_readings: tuple[PeerReading, ...] = tuned(
        (PeerReading("tfidf-char", "TF-IDF character 1-4-grams across spaces + LR", "char", 4),
         PeerReading("tfidf", "TF-IDF word 1-2-grams + LR", "", 2)),
        "readings", "the suite's linear peers' representations, each fitted as plain LR with C from peer_cs (NB-SVM's "
        "is the grid's NB-LR over binary word 1-3-grams)", "an NSMC-like Korean set (15,000 / 2,000): validation "
        "log-loss, words with their pieces 0.4169, characters 1-4 across spaces 0.3467 (the character peer 0.3543); "
        f"{DECISIONS}#the-linear-peers-readings; 2026-12-07")
    peer_cs: tuple[float, ...] = tuned((0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0), "C",
                                       "a peer reading's C, from the middle of the grid towards the lower log-loss "
                                       "until it rises (the suite's grid for its peers, bench/suite.py C_GRID)",
                                       f"the suite's grid; {DECISIONS}#the-linear-peers-readings; 2026-12-07")
    char_cut_share: float = tuned(0.1, "share of texts", "the character reading is fitted when at most this share "
                                  "of the training texts is longer than the preset's max_length in characters (the "
                                  "peer reads them whole)", "a bound, not tuned: Wisesight 2.1% of its messages, "
                                  f"IMDB 90% of its reviews; {DECISIONS}#the-linear-peers-readings; 2026-12-07")

    def grid_dict(self) -> dict[str, tuple[float, ...]]:
        """:attr:`grid` as ``{form: Cs}``."""
        return dict(self.grid)


@dataclass(frozen=True)
class SearchPolicy:
    """The search on the validation split (``training/search.py``, ``training/trials.py``): its shares of the
    budget, the trials, the choice."""

    encoder_se: float = tuned(1.0, "standard errors", "the best encoder trial is kept over a better n-gram score alone "
                              "within this many paired standard errors of validation log-loss (Breiman et al. 1984)",
                              "busy IMDB: encoder 0.2538 against the score alone's 0.2516 (SE 0.0058), negation "
                              "failures 35.8% against 67.9%; "
                              f"{DECISIONS}#the-one-standard-error-rule; 67cce27, 2026-11-28")
    finish_share: float = tuned(0.02, "share of the budget", "kept for the work after the choice (the checkpoint, "
                                "the behaviour suite, the card)", "busy IMDB ended 14.5 s past its 30 minutes without "
                                f"it, 30 s inside with it; {DECISIONS}#budget-shares; 2ef3d52, 2026-11-30")
    ngram_share: float = tuned(0.3, "share of the budget", "the n-gram stage starts no fit past this share",
                               "Wisesight on a loaded machine: six n-gram fits (205 s) left no encoder trial; "
                               f"{DECISIONS}#budget-shares; 37c6ada, 2026-11-28")
    pretrain_share: float = tuned(0.25, "share of the budget", "pretraining starts no epoch that would end past this "
                                  "share", "busy IMDB: word2vec's five epochs took 19 of the 30 minutes; with 25% it ran "
                                  f"one and the encoder 1,311 steps; {DECISIONS}#budget-shares; c591ac6, 2026-11-28")
    first_trial_share: float = tuned(0.5, "share of the time left", "with a refit to come, the first encoder trial "
                                     "ends within this share of the time left", "a judgement (a refit trains on 10% "
                                     f"more rows without validation); {DECISIONS}#budget-shares; 15b428f, 2026-11-27")
    refit_factor: float = tuned(1.15, "x the held-out run", "a refit on every row takes this many times its "
                                "held-out run", f"a judgement; {DECISIONS}#budget-shares; 15b428f, 2026-11-27")
    max_trials: int = tuned(16, "trials", "encoder trials at most", "a judgement: on a few hundred validation rows "
                            f"more trials fit the rows' noise; {DECISIONS}#the-encoder-trials; f303ef4, 2026-11-27")
    timing_steps: int = tuned(30, "steps", "a trial's timing run: its rate sizes the trial's schedule",
                              "a version projecting from 10 steps stopped IMDB's rules' run after 368 s; "
                              f"{DECISIONS}#trial-sizing; 0d3cb5f, 2026-11-28")
    timing_min_steps: int = tuned(10, "steps", "a slow machine's timing run ends after this many steps once "
                                  "timing_seconds have passed", f"{DECISIONS}#trial-sizing; 0d3cb5f, 2026-11-28")
    timing_seconds: float = tuned(5.0, "seconds", "see timing_min_steps", f"{DECISIONS}#trial-sizing; 0d3cb5f, "
                                  "2026-11-28")
    size_margin: float = tuned(0.85, "share of the time left", "a trial's steps fill this share of its time "
                               "(slower steps, saving)", f"{DECISIONS}#trial-sizing; bc8882e, 2026-11-28")
    validation_speedup: float = tuned(3.0, "ratio", "a validation row takes this many times less than a training "
                                      "row (no backward)", f"{DECISIONS}#trial-sizing; bc8882e, 2026-11-28")
    min_steps: int = tuned(50, "optimizer steps", "a trial fitting fewer steps (or half its schedule) is stopped at "
                           "once, and the next is cheaper", "busy TREC-6: sized, the rules' trial ran its whole "
                           f"schedule where three had been stopped; {DECISIONS}#trial-sizing; 4a69603, 2026-11-28")
    min_trial_seconds: float = tuned(20.0, "seconds", "no trial starts with less time than this before its end",
                                     f"a bound, not tuned; {DECISIONS}#trial-sizing; bc8882e, 2026-11-28")
    max_level: int = tuned(3, "halvings", "cheaper settings after trials too slow for their time, at most this many "
                           "halvings of a step's cost", f"no dev figure chose the order; {DECISIONS}#cheaper-levels; "
                           "bc8882e, 2026-11-28")
    prune_warmup: float = tuned(0.5, "share of the epochs", "no trial is pruned before this share of its schedule",
                                "pruning from epoch 2 pruned all seven TREC-6 trials after the rules' run (86.42% and "
                                f"87.16% after epochs 1 and 2, 89.36% at the end); {DECISIONS}#the-encoder-trials; "
                                "15b428f, 2026-11-27")
    space: tuple[tuple[str, tuple[Any, ...]], ...] = tuned(
        (("training.lr", (1e-3, 2e-3, 4e-3)), ("training.embedding_lr_scale", (1.0, 3.0, 10.0, 30.0)),
         ("model.dropout", (0.1, 0.2, 0.3)), ("training.token_dropout", (0.1, 0.2, 0.3)),
         ("training.ngram_scale_min", (0.0, 0.5, 1.0))),
        "values per key", "the encoder's settings the TPE sampler proposes, each joined by the data rules' value",
        f"the levers with dev evidence (epochs, rates, regularisation, the weight); {DECISIONS}#the-encoder-trials; "
        "15b428f, 2026-11-27")

    def space_dict(self) -> dict[str, tuple[Any, ...]]:
        """:attr:`space` as ``{section.key: values}``."""
        return dict(self.space)


@dataclass(frozen=True)
class FitPolicy:
    """One run's fit: the n-gram score's weight, class weights of several labels, rule-negated sentences."""

    ngram_scales: tuple[float, ...] = tuned((0.0, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0), "weights", "ngram_scale's "
                                            "candidates from [training] ngram_scale_min up (0: the encoder alone)",
                                            "IMDB draws of 1,000-2,000 reviews: +0.26 to +1.08 points; with 0.5 in the "
                                            "preset's ladder half of Subj's dev chose it and lost 0.80 point on the "
                                            f"other half; {DECISIONS}#the-n-gram-scores-weight; 16dbdbe, 2026-11-26")
    pos_weight_power: float = tuned(0.5, "exponent", "several labels per text: a label's positives weigh "
                                    "(negatives / positives) ** this", "GoEmotions' dev: power 0.5 0.4707 macro-F1, "
                                    f"none 0.4336, 1 0.4690; {DECISIONS}#several-labels-per-text; 77239d6, 2026-11-27")
    max_pos_weight: float = tuned(100.0, "weight", "a label's positives' weight at most", "a bound, not tuned; "
                                  "77239d6, 2026-11-27")
    lexicon_auc: float = tuned(0.65, "ROC AUC", "VADER's word scores must tell the two labels apart this well for "
                               "its words to join the training rows (the labels are polarity)", "a bound, not tuned: "
                               "IMDB's training reviews 0.79, SST-5's sentences without the neutral ones 0.73, "
                               "Wisesight's Thai messages (positive against negative) 0.51; "
                               f"{DECISIONS}#what-words-mean-outside-the-training-set; 2026-12-08")
    lexicon_min_valence: float = tuned(1.0, "valence (-4 to +4)", "a VADER word joins when its mean human rating is "
                                       "at least this far from neutral", "a bound, not tuned: a quarter of the scale; "
                                       f"{DECISIONS}#what-words-mean-outside-the-training-set; 2026-12-08")
    lexicon_repeats: int = tuned(4, "rows a word", "each VADER word joins the training rows this many times (a "
                                 "one-word row is one token among a review's hundreds)", "IMDB's default beside two "
                                 "busy processes, once each: the encoder's logit on VADER's words in its vocabulary "
                                 "averaged 0.61 in size and 10% of them left CheckList's neutral band (\"hate\" -0.13); four times: 1.80, 51% "
                                 "(\"hate\" -1.82), single negative words failing 65.7% -> 40.0%; "
                                 f"{DECISIONS}#what-words-mean-outside-the-training-set; 2026-12-08")
    lexicon_contradiction: float = tuned(0.3, "log-count ratio", "a VADER word is left out when the training texts "
                                         "give it the other sign by at least this much (the user's labels win)",
                                         "a bound, not tuned: a third of a nat; "
                                         f"{DECISIONS}#what-words-mean-outside-the-training-set; 2026-12-08")
    augment_min_reviews: int = tuned(50, "texts", "a word's log-count ratio counts for the negation rule when this "
                                     "many training texts hold it (names do not count)", f"a bound, not tuned; "
                                     f"{DECISIONS}#negation; 9c7b7cd, 2026-11-27")


@dataclass(frozen=True)
class ShipPolicy:
    """The model a run ships (``training/shipping.py``): the compressions tried on validation, and the rule."""

    rungs: tuple[tuple[float, float, float], ...] = tuned(
        ((1.0, 1.0, 1.0), (1.0, 0.25, 0.5), (1.0, 0.1, 0.25), (0.5, 0.05, 0.1), (0.25, 0.02, 0.05)),
        "shares of (words, bigrams, n-grams) rows kept", "the compressions tried, largest first: the hashed tables "
        "lose rows first, the words last", "IMDB default, validation log-loss 0.2125 full, 0.2144 at (1, 0.1, "
        "0.25), 0.2196 at (0.25, 0.02, 0.05); TREC-6's words cost most (25% of them: -1.0 point of test); "
        f"{DECISIONS}#compressed-checkpoints; 2026-12-07")
    bits: int = tuned(8, "bits", "the kept rows' values stored as int8 with a power-of-two scale per row (0: "
                      "float32)", "int8 alone moved no validation figure on IMDB or TREC-6; "
                      f"{DECISIONS}#compressed-checkpoints; 2026-12-07")
    se: float = tuned(1.0, "standard errors", "the smallest compression whose validation log-loss (after its own "
                      "temperature) is within this many paired standard errors of the full model's, or within "
                      "margin, is shipped", "the search's rule (one standard error); accuracy on validation was too "
                      "coarse to choose (IMDB's 1,240 rows: a row is 0.08 point); "
                      f"{DECISIONS}#compressed-checkpoints; 2026-12-07")
    margin: float = tuned(0.002, "nats", "a compression whose mean validation log-loss is at most this much above "
                          "the full model's is shipped even where validation can tell them apart (the standard error "
                          "of two near-identical models' paired difference is tiny: int8 alone failed it on SST-5 "
                          "at +0.00006 nats)", "about 0.2 point of accuracy: across seven default runs' rungs "
                          "(IMDB twice, TREC-6, Subj, SST-5, NSMC, HuSST) validation accuracy fell a median 100 "
                          f"points a nat; {DECISIONS}#compressed-checkpoints; 2026-12-08")


@dataclass(frozen=True)
class Policy:
    """The default's tuning numbers: the data rules', the n-gram stage's, the search's, the fit's and the shipped
    model's."""

    rules: RulesPolicy = field(default_factory=RulesPolicy)
    ngram: NgramStagePolicy = field(default_factory=NgramStagePolicy)
    search: SearchPolicy = field(default_factory=SearchPolicy)
    fit: FitPolicy = field(default_factory=FitPolicy)
    ship: ShipPolicy = field(default_factory=ShipPolicy)


DEFAULT = Policy()
SECTIONS = ("rules", "ngram", "search", "fit", "ship")


def policy_rows(policy: Policy = DEFAULT) -> list[tuple[str, str, Any, str, str, str]]:
    """Every field of ``policy`` as ``(section, name, value, unit, meaning, evidence)``, for printing."""
    rows = []
    for section in SECTIONS:
        part = getattr(policy, section)
        for f in dataclasses.fields(part):
            meta = f.metadata
            rows.append((section, f.name, getattr(part, f.name), meta.get("unit", ""), meta.get("meaning", ""),
                         meta.get("evidence", "")))
    return rows


def policy_toml(policy: Policy = DEFAULT) -> str:
    """``policy`` as TOML that :func:`policy_from_toml` reads back, each field's meaning, unit and evidence in a
    comment above it."""
    from ..toml_writer import toml_value

    out: list[str] = []
    current = None
    for section, name, value, unit, meaning, evidence in policy_rows(policy):
        if section != current:
            out += ([""] if out else []) + [f"[{section}]"]
            current = section
        out += [f"# {meaning} ({unit}). Evidence: {evidence}", f"{name} = {toml_value(_plain(value))}"]
    return "\n".join(out) + "\n"


def _plain(value: Any) -> Any:
    """A field's value as TOML holds it: dataclasses as tables, tuples as arrays."""
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def policy_from_toml(path: str | Path, base: Policy = DEFAULT) -> Policy:
    """``base`` with the fields a TOML file sets (``[search] max_trials = 4``); the others stay.

    Raises:
        ConfigError: the file cannot be read or parsed, names an unknown section or field, or a value of the
            wrong type (one line naming the key).
    """
    try:
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, ValueError) as exc:
        raise ConfigError(f"{path}: not a policy file ({' '.join(str(exc).split())[:200]})") from None
    parts = {}
    for section, values in raw.items():
        if section not in SECTIONS or not isinstance(values, dict):
            raise ConfigError(f"{path}: unknown policy section [{section}] (sections: {', '.join(SECTIONS)})")
        part = getattr(base, section)
        known = {f.name: f for f in dataclasses.fields(part)}
        changes = {}
        for name, value in values.items():
            if name not in known:
                raise ConfigError(f"{path}: [{section}] has no field {name!r}")
            changes[name] = _typed(getattr(part, name), value, f"{path}: [{section}] {name}")
        parts[section] = dataclasses.replace(part, **changes)
    return dataclasses.replace(base, **parts)


def _defaults(sample: Any, value: Any, where: str) -> Any:
    """An entry of ``sample``'s dataclass with its fields' own defaults and ``value``'s required fields, for a list
    that does not pair with the default's entries (``peer_readings``: an entry without ``tokenizer`` reads the run's
    tokens, not the first default entry's characters).

    Raises:
        ConfigError: ``value`` is not a table or lacks a field without a default.
    """
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a table")
    fields = dataclasses.fields(sample)
    missing = [f.name for f in fields if f.default is dataclasses.MISSING and f.name not in value]
    if missing:
        raise ConfigError(f"{where}: each entry needs {', '.join(missing)}")
    return type(sample)(**{f.name: value[f.name] if f.default is dataclasses.MISSING else f.default for f in fields})


def _typed(default: Any, value: Any, where: str) -> Any:
    """``value`` read from TOML in the type of the field's ``default``.

    Raises:
        ConfigError: the type does not fit.
    """
    if dataclasses.is_dataclass(default):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a table")
        fields = {f.name for f in dataclasses.fields(default)}
        if set(value) - fields:
            raise ConfigError(f"{where}: unknown keys {sorted(set(value) - fields)}")
        return dataclasses.replace(default, **{k: _typed(getattr(default, k), v, f"{where}.{k}")
                                               for k, v in value.items()})
    if isinstance(default, tuple):
        if not isinstance(value, list) or not value and default:
            raise ConfigError(f"{where}: expected a non-empty array")
        if len(default) != len(value) and dataclasses.is_dataclass(default[0]):   # a new list: each entry's own
            return tuple(_typed(_defaults(default[0], v, where), v, where) for v in value)
        samples = default if len(default) == len(value) else [default[0]] * len(value)
        return tuple(_typed(sample, v, where) for sample, v in zip(samples, value))
    if isinstance(default, bool) or isinstance(default, str):
        if type(value) is not type(default):
            raise ConfigError(f"{where}: expected a {type(default).__name__}, got {value!r}")
        return value
    if isinstance(default, (int, float)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ConfigError(f"{where}: expected a finite number >= 0, got {value!r}")
        return type(default)(value) if isinstance(default, float) or float(value).is_integer() else value
    return value
