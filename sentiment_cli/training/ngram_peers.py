"""The linear peers' representations among the n-gram stage's candidates (issue 75): the search cannot choose a
model worse on validation than the best of them.

The suite (``bench/suite.py``) compares the default with three linear peers, each with C chosen on dev: TF-IDF over
character 2-4-grams across spaces + LR, TF-IDF over word 1-2-grams + LR, and NB-SVM (NB-LR over binary word
1-3-grams). The n-gram stage (``ngram_stage.py``) fits their representations as readings of its own
(:attr:`~.policy.NgramStagePolicy.peer_readings`), each as plain LR with C from
:attr:`~.policy.NgramStagePolicy.peer_cs`, from the grid's middle towards the lower validation log-loss until it
rises (:func:`descend`):

- **characters**: the model's n-gram score reads token ids, so the character peer's representation is a
  *character reading* of the whole model: ``[data] tokenizer = "char"`` (a run of spaces one ``▁`` token, so the
  n-grams run across words), character 1-4-grams, sublinear TF-IDF, with the ``max_length`` and buckets the data
  rules give characters (:func:`char_settings`). When it wins, the encoder trials and the final run read characters
  too (``search.py``). It is left out, with the reason in the record, where more than
  :attr:`~.policy.NgramStagePolicy.char_cut_share` of the training texts are longer than the preset's
  ``max_length`` in characters (the peer reads them whole; IMDB's reviews), where the run reads characters
  already (its own fits are the peer's), or where the command line set one of its keys;
- **word 1-2-grams**: a :class:`~.ngram_candidate.Reading` of the run's word tokenizer, sublinear TF-IDF;
- **NB-SVM**: the grid's NB-LR over binary word 1-3-grams is its representation already (``bench/nbsvm.py``
  shares :func:`~sentiment_cli.ngram.forms.nb_lr_columns`), so those fits are tagged, not fitted again.

Each candidate that holds a peer's representation is tagged (:attr:`~.candidate.Candidate.peer`), and
:func:`peer_record` compares the best of each with the chosen candidate: ``metrics.json``'s ``"search"``
``"peers"``, the stage line and the model card's claim.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..config import Config, load_config
from ..data.tokenizer import tokenizer_from_str
from ..data.tokenizer_kind import TokenizerKind
from ..data.units import distinct_char_ngrams
from ..ngram.features import TFIDF
from .candidate import Candidate
from .ngram_candidate import READING_SETTINGS, Reading, StageFeatures
from .policy import DEFAULT, PeerReading, RulesPolicy

PEER_NAMES = {"tfidf-char": "TF-IDF character 2-4-grams + LR", "tfidf": "TF-IDF word 1-2-grams + LR",
              "nbsvm": "NB-SVM"}   # the suite's linear peers (bench/suite.py LINEAR_PEERS), as the record names them
READING_KEYS = frozenset(READING_SETTINGS.values()) | {"data.tokenizer"}   # a candidate that reads otherwise
CHAR_KEYS = ("data.tokenizer", "data.max_length", "data.min_frequency", "model.ngram_max_n", "model.ngram_weighting",
             "model.ngram_buckets")


def own_peer(settings: dict[str, Any], config: Config, kind: TokenizerKind) -> str:
    """Which peer's representation a fit of the run's own reading holds (``settings``: a candidate's, ``kind``: the
    run's tokenizer): ``"nbsvm"`` for NB-LR over binary word 1-3-grams, ``"tfidf-char"`` for LR over TF-IDF
    character 1-4-grams (a run that reads characters), ``"tfidf"`` for LR over TF-IDF word 1-2-grams; ``""`` for
    any other (another reading, word pieces, term frequencies)."""
    if READING_KEYS & set(settings):
        return ""
    m, form = config.model, settings.get("model.ngram_fit")
    if kind is TokenizerKind.WORD and form == "nb-lr" and m.ngram_weighting == "binary" and m.ngram_max_n >= 3:
        return "nbsvm"
    if form == "lr" and m.ngram_weighting in TFIDF and m.ngram_min_df == 1 and not m.ngram_word_chars:
        if kind is TokenizerKind.CHAR and m.ngram_max_n >= 4:
            return "tfidf-char"
        if kind is TokenizerKind.WORD and m.ngram_max_n >= 2:
            return "tfidf"
    return ""


def char_settings(config: Config, train_texts: Any, val_texts: Any, peer: PeerReading,
                  rules: RulesPolicy = DEFAULT.rules, cut_share: float = DEFAULT.ngram.char_cut_share
                  ) -> tuple[dict[str, Any], str]:
    """``(settings, "")``: the ``section.key`` values that make ``config`` read characters as the character peer
    does, or ``({}, why not)``.

    The settings: ``data.tokenizer = "char"``, ``data.max_length`` by the data rules' length rule on characters
    (:attr:`~.policy.RulesPolicy.length_quantile` of the training and validation texts, in steps of 8, at least 16,
    at most the preset's), ``data.min_frequency`` the peer's, ``model.ngram_max_n`` and ``ngram_weighting`` the
    peer's, ``model.ngram_buckets`` by the buckets rule on distinct character n-grams (at most the preset's); and,
    where ``config`` has them, no negation scope or rule-negated sentences (English words' rules), no word pieces, and
    a pretrained folder of its own (:func:`~.auto.pretrained_folder`).

    Why not: more than ``cut_share`` of the training texts are longer than the preset's ``max_length``
    in characters.
    """
    from .auto import pretrained_folder

    preset = load_config("default")
    cap = preset.data.max_length
    lengths = [_char_lengths(texts, rules.length_sample) for texts in (train_texts, val_texts)]
    cut = float(np.mean(lengths[0] > cap)) if len(lengths[0]) else 0.0
    if cut > cut_share:
        return {}, (f"{cut:.0%} of the training texts are longer than {cap} characters (more than "
                    f"{cut_share:.0%}): the character peer reads them whole")
    quantile = max(float(np.quantile(x, rules.length_quantile)) for x in lengths if len(x))
    length = min(cap, max(16, 8 * math.ceil(quantile / 8)))
    grams = distinct_char_ngrams(list(train_texts), peer.max_n, length)
    buckets = min(preset.model.ngram_buckets, rules.buckets(rules.bucket_headroom * grams))
    settings: dict[str, Any] = {"data.tokenizer": "char", "data.max_length": length,
                                "data.min_frequency": peer.min_frequency, "model.ngram_max_n": peer.max_n,
                                "model.ngram_weighting": peer.weighting, "model.ngram_buckets": buckets}
    if config.data.negation_scope != "none":
        settings["data.negation_scope"] = "none"
    if config.training.negation_augment:
        settings["training.negation_augment"] = 0
    if config.training.lexicon_prior:
        settings["training.lexicon_prior"] = 0
    if config.data.blind_identity:
        settings["data.blind_identity"] = False
    if config.model.ngram_word_chars:
        settings["model.ngram_word_chars"] = 0
    if config.training.init_from:
        settings["training.init_from"] = pretrained_folder(config.with_keys(settings, "the character reading"))
    return settings, ""


def _char_lengths(texts: Any, sample: int) -> np.ndarray:
    """Characters of up to ``sample`` texts (a seeded draw), a run of whitespace one, as the character tokenizer
    reads them (``<br />`` a space)."""
    rows = np.random.default_rng(0).permutation(len(texts))[:sample]
    return np.asarray([len(re.sub(r"\s+", " ", re.sub(r"<br\s*/?>", " ", str(texts[int(i)])).strip()))
                       for i in rows], dtype=np.int64)


def descend(fit: Callable[[float], Candidate | None], Cs: tuple[float, ...]) -> list[Candidate]:
    """Fit C's of ``Cs`` (ascending) from the middle (the lower middle of an even grid) and its two neighbours on,
    one more step at a time towards the lower validation log-loss (:meth:`Candidate.rank_key`), until the best is
    inside the C's fitted or at the grid's end. ``fit(C)`` returns ``None`` when the budget holds no more fits.
    Over a log-loss that falls and then rises in log C this finds the grid's best in 3 to 6 fits of its 9."""
    made: dict[int, Candidate] = {}

    def attempt(i: int) -> bool:
        if i in made or not 0 <= i < len(Cs):
            return False
        c = fit(Cs[i])
        if c is not None:
            made[i] = c
        return c is not None

    mid = (len(Cs) - 1) // 2
    if not attempt(mid) or not attempt(mid + 1) or not attempt(mid - 1):
        return list(made.values())
    while True:
        done = {i: c for i, c in made.items() if c.complete}
        if not done:
            break
        best = max(done, key=lambda i: done[i].rank_key())
        step = 1 if best == max(made) else -1 if best == min(made) else 0
        if not step or not attempt(best + step):
            break
    return list(made.values())


def peer_record(candidates: list[Candidate], chosen: Candidate, why_not: dict[str, str]) -> dict[str, Any]:
    """``metrics.json``'s ``"search"`` ``"peers"``: for each linear peer its best candidate by validation log-loss
    (name, log-loss, accuracy) or why none was fitted (``why_not``: peer -> reason); the best of them; and whether
    the chosen candidate's validation log-loss is at or below every peer's (``at_or_above_every_peer``: each peer
    fitted) and at or below the fitted peers' (``at_or_above_fitted_peers``)."""
    peers: dict[str, Any] = {}
    bests: dict[str, Candidate] = {}
    for peer, name in PEER_NAMES.items():
        mine = [c for c in candidates if c.peer == peer and c.complete]
        if mine:
            bests[peer] = max(mine, key=Candidate.rank_key)
            peers[peer] = {"peer": name, "candidate": bests[peer].name, "validation_nll": round(bests[peer].nll, 6),
                           "validation_accuracy": bests[peer].accuracy}
        else:
            peers[peer] = {"peer": name, "not_fitted": why_not.get(peer, "no fit of its representation ended in the "
                                                                         "n-gram stage's time")}
    best = max(bests, key=lambda peer: bests[peer].rank_key(), default=None)
    at_or_above = best is not None and chosen.nll <= bests[best].nll
    return {"peers": peers, "best": peers[best] if best else None, "chosen_nll": round(chosen.nll, 6),
            "at_or_above_fitted_peers": at_or_above, "at_or_above_every_peer": at_or_above and len(bests) == len(peers)}


class PeerFits:
    """The peer readings of one n-gram stage (``ngram_stage.py`` makes it after its words' features): which are
    fitted and why the others are not (:attr:`why_not`), the price of their first fits (:meth:`reserve`: the fits on
    words leave time for them), and their fits (:meth:`fit`).

    Args:
        config, given: the run's config and the keys its command line set.
        grid: the stage's forms (a form the command line pinned leaves LR out: no peer reading then).
        features: the run's own reading's :class:`~.ngram_candidate.StageFeatures`.
        splits: ``(data, train, val)``: the run's :class:`~.run_data.RunData` and its two splits.
        make_fit: ``make_fit(config, features, extra) -> fit(form, C, class_weight, reading)``: the stage's fit of a
            reading of ``features``, ``extra`` settings on its candidate.
        cb: the run's callbacks (each reading's line and note).
        policy: the stage's :class:`~.policy.NgramStagePolicy`; ``rules``: the data rules' numbers.

    Attributes:
        why_not: peer -> why its reading is not fitted (the record's ``not_fitted``).
        units: a tokenizer kind -> ``(vocab_size, mean tokens)`` of the readings that read another tokenizer (the
            encoder's step is priced from them when the trials read it, ``search.py``).
        setup_seconds: seconds the slowest other reading's tokenizer and features took.
    """

    def __init__(self, config: Config, given: frozenset[str], grid: dict[str, tuple[float, ...]],
                 features: StageFeatures, splits: tuple[Any, Any, Any], make_fit: Callable[..., Any], cb: Any,
                 policy: Any = DEFAULT.ngram, rules: RulesPolicy = DEFAULT.rules):
        self.config, self.features, self.make_fit, self.cb, self.policy = config, features, make_fit, cb, policy
        self.data, self.train, self.val = splits
        self.kind = TokenizerKind.of(features.tokenizer)
        self.why_not: dict[str, str] = {}
        self.units: dict[str, tuple[int, int]] = {}
        self.setup_seconds = 0.0
        self.plans: list[tuple[PeerReading, dict[str, Any]]] = []
        for peer in policy.peer_readings:
            settings, reason = self._plan(peer, given, grid, rules)
            if reason:
                self.why_not[peer.peer] = reason
            else:
                self.plans.append((peer, settings))
        pinned = "model.ngram_c" in given and self.config.model.ngram_c
        self.cs: tuple[float, ...] = (self.config.model.ngram_c,) if pinned else policy.peer_cs

    def _plan(self, peer: PeerReading, given: frozenset[str], grid: dict[str, tuple[float, ...]],
              rules: RulesPolicy) -> tuple[dict[str, Any], str]:
        """``(settings, "")`` of a peer reading to fit, or ``({}, why not)``."""
        m = self.config.model
        if self.train.multi_label:
            return {}, "several labels per text: the suite's multi-label peers are others"
        if "lr" not in grid:
            return {}, "the command line pinned the n-gram score's form"
        if peer.tokenizer == "char":
            if self.kind is TokenizerKind.CHAR:
                return {}, "the run reads characters: its own LR fits are the peer's"
            settings, reason = char_settings(self.config, self.train.texts, self.val.texts, peer, rules,
                                             self.policy.char_cut_share)
        elif self.kind is not TokenizerKind.WORD:
            return {}, f"the run reads {self.kind.units()}, not words"
        elif (m.ngram_weighting, m.ngram_max_n) == (peer.weighting, peer.max_n):
            return {}, "the run's own LR fits read it"
        else:
            settings, reason = {"model.ngram_weighting": peer.weighting, "model.ngram_max_n": peer.max_n}, ""
        pinned = sorted(given & set(settings))
        if pinned:
            return {}, f"the command line set {', '.join(pinned)}"
        return settings, reason

    def fit(self, fits: Any, leave: Callable[[], float] = lambda: 0.0) -> None:
        """Each peer reading's fits (:func:`descend` over :attr:`~.policy.NgramStagePolicy.peer_cs`, or the C the
        command line pinned: :attr:`cs`) in the stage's ``fits`` (``ngram_stage._Fits``), each tagged with its peer,
        while the next (as long as the reading's longest so far) ends within the stage's budget less ``leave()``
        seconds (the first fit with word pieces, ``ngram_stage._piece_reserve``). A reading's first fit is priced as
        the slowest LR fit on the run's own reading so far (LR over TF-IDF characters took no longer than over binary
        words: SST-5 beside a busy suite 4.7 s against 10.6 s, Subj 0.35 against 0.8, NSMC 1.6 against 1.1); a
        reading whose first fit would end past the stage's share is left out with a note and the reason kept."""
        for peer, settings in self.plans:
            price = _slowest_lr(fits.out)
            if fits.out and not fits.budget.less(leave()).fits(price):
                self.why_not[peer.peer] = (f"its first fit (about {price:,.0f} s) would end past the n-gram "
                                           f"stage's share ({fits.budget.remaining():,.0f} s left)")
                self.cb.on_note(f"no fit of the {peer.name} reading: {self.why_not[peer.peer]}")
                continue
            self.cb.on_stage(f"the search: the n-gram score alone over the {peer.name} reading (a linear peer's)")
            fit, reading = self._reading(peer, settings)
            longest = [price]

            def one(C: float) -> Candidate | None:
                if len(longest) > 1 and not fits.budget.less(leave()).fits(max(longest)):
                    return None
                c = fits.add("lr", C, reading, False, fit)
                c.peer = peer.peer
                longest.append(c.seconds)
                return c

            descend(one, self.cs)

    def _reading(self, peer: PeerReading, settings: dict[str, Any]) -> tuple[Callable[..., Candidate], Reading]:
        """``(fit, reading)`` of a peer reading: on the run's features with a :class:`Reading` of its own, or (another
        tokenizer) on that tokenizer's features, built here, with ``settings`` on each candidate."""
        if peer.tokenizer != "char":
            return self.make_fit(self.config, self.features, {}), Reading.of(self.config, **{
                "weighting": settings["model.ngram_weighting"], "max_n": settings["model.ngram_max_n"]})
        began = time.monotonic()
        config = self.config.with_keys(settings, "the character reading")
        tokenizer = tokenizer_from_str(self.data.tokenizer_json(self.train, config.data, self.cb.on_stage),
                                       "the character reading's tokenizer")
        features = StageFeatures(config, self.data, tokenizer, self.train, self.val)
        reading = Reading.of(config)
        features.of(reading)
        self.units["char"] = (tokenizer.get_vocab_size(), features.mean_tokens())
        self.setup_seconds = max(self.setup_seconds, time.monotonic() - began)
        return self.make_fit(config, features, settings), reading


def _slowest_lr(out: list[Candidate]) -> float:
    """The slowest complete LR fit of the run's own reading in ``out`` (any form's when none is LR; 0 before any)."""
    own = [c for c in out if c.complete and not READING_KEYS & set(c.settings)]
    lr = [c.seconds for c in own if c.settings.get("model.ngram_fit") == "lr"]
    return max(lr or [c.seconds for c in own] or [0.0])
