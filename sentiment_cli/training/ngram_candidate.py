"""One candidate of the n-gram stage: a reading of the texts (:class:`Reading`), its feature matrices
(:class:`StageFeatures`), and one fit scored on the validation split as the search's runs score theirs
(:func:`ngram_fit`). The stage that orders the fits is ``ngram_stage.py``.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import numpy as np
import torch

from ..config import Config
from ..errors import Interrupted
from ..evaluation import calibration
from ..inference.multilabel import fit_decision, row_binary_nll
from ..ngram.crossfit import full_logits
from ..ngram.estimator import NgramEstimator
from ..ngram.features import ngram_features, term_frequency, weighted_rows, word_pieces
from ..ngram.fit import fit_weighting, rows_digest
from ..ngram.memory import fit_limit
from ..data.tokenizer import vocabulary
from .callbacks import TrainCallbacks
from .candidate import Candidate, result_line
from .interrupts import StopFlag
from .run_data import RunData


class Reading(NamedTuple):
    """How the n-gram score reads a text: ``chars``, its words' character 2-``chars``-grams (0: none; ``[model]
    ngram_word_chars``), ``weighting``, ``max_n`` and ``min_df`` (``[model] ngram_weighting``, ``ngram_max_n``,
    ``ngram_min_df``)."""

    chars: int
    weighting: str
    max_n: int
    min_df: int

    @classmethod
    def of(cls, config: Config, **changes: Any) -> "Reading":
        """The config's reading, with ``changes``."""
        m = config.model
        return cls(m.ngram_word_chars, m.ngram_weighting, m.ngram_max_n, m.ngram_min_df)._replace(**changes)


READING_SETTINGS = {"chars": "model.ngram_word_chars", "weighting": "model.ngram_weighting",
                    "max_n": "model.ngram_max_n", "min_df": "model.ngram_min_df"}
FORM_NAMES = {"nb-lr": "NB-LR", "lr": "LR"}


class StageFeatures:
    """The n-gram stage's feature matrices ``(x, x_validation, rows_digest)``, made once for each :class:`Reading`:
    words alone (``chars`` 0) or with their character 2-``chars``-grams
    (:func:`~sentiment_cli.ngram.features.word_pieces`), binarised or as TF-IDF rows, as the model's score reads them
    (``[model] ngram_word_chars``, ``ngram_weighting``, ``ngram_max_n``, ``ngram_min_df``)."""

    def __init__(self, config: Config, data: RunData, tokenizer: Any, train: Any, val: Any):
        self.config, self.tokenizer = config, tokenizer
        self.train_ids = data.ids(tokenizer, train.texts, config.data)
        self.val_ids = data.ids(tokenizer, val.texts, config.data)
        self.labels, self.max_length = train.labels, config.data.max_length
        self.made: dict[Reading, tuple[Any, Any, str]] = {}
        self.tables: dict[int, torch.Tensor] = {}
        self.ratios: dict[int, float] = {}

    def mean_tokens(self) -> int:
        """A training text's mean token count (its ids are cut at ``max_length``)."""
        return int(round(float(np.mean(self.train_ids.lengths)))) if len(self.train_ids) else 0

    def pieces(self, chars: int) -> torch.Tensor | None:
        """The vocabulary's pieces table for ``chars`` (``None`` for 0), made once for both weightings and the
        size estimate."""
        if not chars:
            return None
        if chars not in self.tables:
            self.tables[chars] = torch.from_numpy(word_pieces(vocabulary(self.tokenizer),
                                                              self.config.model.ngram_buckets, chars))
        return self.tables[chars]

    def of(self, reading: Reading) -> tuple[Any, Any, str]:
        """``(x, x_validation, rows_digest)`` of a reading; the digest is of where the rows' entries lie
        (:func:`fit_key`)."""
        if reading not in self.made:
            buckets, pieces = self.config.model.ngram_buckets, self.pieces(reading.chars)
            tf, n = term_frequency(reading.weighting), reading.max_n
            x = ngram_features(self.train_ids, buckets, max_n=n, pieces=pieces, tf=tf)
            xv = ngram_features(self.val_ids, buckets, max_n=n, pieces=pieces, tf=tf)
            rows = rows_digest(x, self.labels)
            (x, xv), _ = weighted_rows(x, reading.weighting, reading.min_df, xv)   # as the model's score weighs them
            self.made[reading] = (x, xv, rows)
        return self.made[reading]

    def entries(self, sample: int = 500) -> int:
        """The entries of the first ``sample`` training texts' feature rows as the config reads them without word
        pieces (a fit's time grows with them)."""
        m = self.config.model
        return ngram_features(self.train_ids[:sample], m.ngram_buckets, max_n=m.ngram_max_n).nnz

    def size_ratio(self, chars: int, sample: int = 500) -> float:
        """How many times the entries of words alone the training matrix with ``chars`` pieces holds, measured once
        on its first ``sample`` texts (a fit's time grows with them)."""
        if chars not in self.ratios:
            m, ids = self.config.model, self.train_ids[:sample]
            with_pieces = ngram_features(ids, m.ngram_buckets, max_n=m.ngram_max_n, pieces=self.pieces(chars)).nnz
            self.ratios[chars] = with_pieces / max(1, self.entries(sample))
        return self.ratios[chars]


def reads_terms(settings: dict[str, Any]) -> bool:
    """Whether a candidate's ``settings`` are the term reading's (the only reading that sets ``min_df``)."""
    return "model.ngram_min_df" in settings


def ngram_fit(config: Config, setting: tuple[str, float, str], reading: Reading, train: tuple[Any, Any],
               val: tuple[Any, np.ndarray], k: int, cb: TrainCallbacks, stop: StopFlag | None,
               key: str = "", extra: dict[str, Any] | None = None) -> Candidate:
    """One n-gram candidate: ``setting`` ``(form, C, class_weight)`` fitted on ``train`` ``(features, labels)`` of
    ``reading`` (:class:`Reading`) and scored on ``val``; its
    line told through ``cb.on_note``; its ``fit`` is ``(key, the estimator)`` (``key``:
    :func:`~sentiment_cli.ngram.fit.fit_key`). ``extra``: settings of the reading that ``config`` holds already
    and the candidate sets over the run's (the character reading's tokenizer and its keys, ``ngram_peers.py``).

    Raises:
        Interrupted: ``stop`` was set (a signal), checked before the fit.
    """
    form, C, class_weight = setting
    if stop is not None and stop.requested:
        raise Interrupted(f"interrupted by {stop.reason} during the search; the output folder is as it "
                          "was: run the same command again", exit_code=stop.exit_code)
    began = time.perf_counter()
    weighting = fit_weighting(class_weight, train[1])
    fitted = NgramEstimator(k, form, C, class_weight=weighting, limit=fit_limit(config, k),
                            fit_intercept=config.model.ngram_intercept).fit(*train)
    accuracy, nll, losses = scored(np.asarray(fitted.decision_function(val[0]), np.float64), val[1], k)
    settings = {**(extra or {}), "model.ngram_fit": form, "model.ngram_c": float(C)}
    if class_weight != config.training.class_weight:
        settings["training.class_weight"] = class_weight
    own = Reading.of(config)
    settings.update({READING_SETTINGS[key]: value for key, value in reading._asdict().items()
                     if value != getattr(own, key)})
    name = f"n-gram alone, {FORM_NAMES[form]} C {C:g}" + ("" if class_weight == "none" else ", classes balanced")
    name += _reading_phrase(settings)
    c = Candidate(name, "ngram", settings,
                  accuracy=accuracy, nll=nll,
                  seconds=time.perf_counter() - began, losses=losses, fit=(key, fitted))
    cb.on_note(result_line(c))
    return c


def _reading_phrase(settings: dict[str, Any]) -> str:
    """How a candidate's reading differs from the config's, for its name: ``", TF-IDF, characters 2-5 within
    each token"``, ``", sublinear TF-IDF 1-2-grams in 2+ texts"`` (with the characters after it when both),
    ``", sublinear TF-IDF character 1-4-grams across spaces"`` (the character reading), or ``""``."""
    weighting = {"tfidf": "TF-IDF", "sublinear": "sublinear TF-IDF"}.get(settings.get("model.ngram_weighting"))
    n = settings.get("model.ngram_max_n")
    df = settings.get("model.ngram_min_df")
    phrase = "" if weighting is None else f", {weighting}" + (f" 1-{n}-grams" if n else "") + \
        (f" in {df}+ texts" if df else "")
    if settings.get("data.tokenizer") == "char":
        return f", {weighting or 'binary'} character 1-{n}-grams across spaces"
    if settings.get("model.ngram_word_chars"):
        phrase += f", characters 2-{settings['model.ngram_word_chars']} within each token"
    return phrase


def scored(scores: np.ndarray, y_val: np.ndarray, k: int) -> tuple[float, float, np.ndarray | None]:
    """``(accuracy, nll, losses)`` of the n-gram score alone on validation, as a trial's run records them: accuracy
    and the log-loss after the temperature, and each row's (``(n_validation,)``); with several labels per text
    (``y_val`` a 0/1 matrix) the subset accuracy at each label's F1 threshold, the binary log-loss after a
    temperature per label, and each row's (the mean over its labels)."""
    if y_val.ndim == 2:
        rule, p, _, _ = fit_decision(scores, y_val)
        chosen = rule.labels(p)
        losses = row_binary_nll(scores, y_val, np.asarray(rule.temperatures))
        return float((chosen == y_val.astype(bool)).all(1).mean()), float(losses.mean()), losses
    logits = full_logits(scores, k)
    temperature = calibration.fit_temperature(logits, y_val)
    losses = calibration.row_nll(logits, y_val, temperature)
    return float((logits.argmax(1) == y_val).mean()), float(losses.mean()), losses
