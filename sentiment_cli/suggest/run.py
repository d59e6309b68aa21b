"""What to label next: the unlabelled texts whose labels would teach a checkpoint most (``sentiment suggest``).

Pool-based active learning (Settles 2009, "Active Learning Literature Survey", 3.1) with two strategies:

- ``uncertainty``: the texts the model is least sure of, by the calibrated probabilities (the checkpoint's
  temperature): the margin or the entropy (``uncertainty.py``).
- ``diverse``: uncertainty, spread over the space (``diverse.py``; Zhdanov 2019). The ``CANDIDATES_PER_PICK * n``
  most uncertain texts (30 n: better on dev than 10 n in ``bench/active.py``) are clustered, over their word
  1-3-grams reduced by LSA (``space="ngram"``, the default: better on dev) or the model's max-pooled encoder
  states (``"encoder"``). It answers the weakness that Sener & Savarese 2018 ("Active Learning for
  Convolutional Neural Networks: A Core-Set Approach") and Ash et al. 2020 (BADGE, "Deep Batch Active Learning
  by Diverse, Uncertain Gradient Lower Bounds") point out in top-``n`` uncertainty: a batch of near-identical
  uncertain texts teaches little more than one of them.

A multi-label checkpoint (a sigmoid, a temperature and a decision threshold per label) is scored by its
per-label probabilities, and margin and entropy are taken per label (``uncertainty.py``); its picks carry the
predicted label set, and the file to fill in has a ``labels`` column (``picks_file.py``).

Both leave out, and count, noise-like texts, duplicates (of each other or of ``known`` texts, already labelled)
and near-duplicates (``exclusions.py``).

Work is bounded by the input: texts are checked and scored ``chunk`` at a time (one forward pass of the model
each, progress reported per chunk); only the at most ``CANDIDATES_PER_PICK * n`` best candidates get n-gram
vectors and (``diverse``) LSA vectors or encoder states.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import SEED_MAX
from ..errors import UsageError
from .diverse import diverse
from .exclusions import Picker, noise_reason, not_near_known, text_key, text_vectors
from .uncertainty import MEASURES, entropies, label_entropies, label_margins, margins, uncertainty

STRATEGIES = ("uncertainty", "diverse")
SPACES = ("encoder", "ngram")  # what diverse clusters: the pooled encoder states, or the texts' word n-grams (LSA)
CANDIDATES_PER_PICK = 30      # diverse: cluster the 30 n most uncertain texts (Zhdanov 2019's beta; 30 beat 10 on dev)
CHUNK = 1024                  # texts scored per forward pass (memory and progress)


@dataclass
class Pick:
    """One suggested text.

    Attributes:
        rank: 1 = label this first (most uncertain first).
        index: the text's position in the input (0-based).
        text: the text.
        uncertainty: the strategy's score in ``[0, 1]``; higher = less sure: ``1 - margin`` or the normalised entropy.
        margin: the most probable class's probability minus the second's, ``[0, 1]``.
        entropy: the entropy of the probabilities divided by ``log(num_labels)``, ``[0, 1]``.
        predicted: the class the model predicts (multi-label: its most probable label).
        probabilities: class name -> probability (with the checkpoint's temperature; multi-label: each label's
            sigmoid with its temperature).
        cluster: ``diverse``: the k-means cluster it was picked from; else ``None``.
        predicted_labels: multi-label: the labels the model predicts (its thresholds and ``min_labels``), most
            probable first; else ``None``.
    """

    rank: int
    index: int
    text: str
    uncertainty: float
    margin: float
    entropy: float
    predicted: str
    probabilities: dict[str, float]
    cluster: int | None = None
    predicted_labels: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The pick as JSON-ready values (``predicted_labels`` only for a multi-label model)."""
        out = {"rank": self.rank, "index": self.index, "text": self.text, "uncertainty": self.uncertainty,
               "margin": self.margin, "entropy": self.entropy, "predicted": self.predicted,
               "probabilities": self.probabilities, "cluster": self.cluster}
        if self.predicted_labels is not None:
            out["predicted_labels"] = self.predicted_labels
        return out


@dataclass
class Suggestions:
    """What :func:`suggest` found.

    Attributes:
        picks: the texts to label, best first (at most ``n``).
        strategy: ``uncertainty`` or ``diverse``.
        measure: ``margin`` or ``entropy``.
        labels: the checkpoint's class names.
        read: texts given.
        scored: texts the model scored (``read`` minus the noise-like texts and the duplicates).
        left_out: reason -> number of texts left out for it (reasons as :data:`LEFT_OUT`); near-duplicates
            are counted among the candidates examined, not the whole input.
        clusters: ``diverse``: number of k-means clusters; else 0.
        space: ``diverse``: what was clustered (``encoder`` or ``ngram``); else ``""``.
        seconds: wall time.
        multi_label: the checkpoint gives several labels per text (per-label uncertainty, ``uncertainty.py``).
    """

    picks: list[Pick]
    strategy: str
    measure: str
    labels: tuple[str, ...]
    read: int
    scored: int
    left_out: dict[str, int] = field(default_factory=dict)
    clusters: int = 0
    space: str = ""
    seconds: float = 0.0
    multi_label: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The summary and the picks as JSON-ready values."""
        return {"strategy": self.strategy, "measure": self.measure, "labels": list(self.labels), "read": self.read,
                "scored": self.scored, "left_out": dict(self.left_out), "clusters": self.clusters, "space": self.space,
                "seconds": self.seconds, "multi_label": self.multi_label, "picks": [p.to_dict() for p in self.picks]}


def _score(predictor: Any, texts: Sequence[str], known: Sequence[str], chunk: int,
           on_progress: Callable[[int, int], None] | None) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """``(kept indices (m,), probabilities (m, num_labels), left out by reason)``: noise-like texts and exact
    duplicates (of each other or of ``known``) are left out before the model scores the rest, ``chunk`` at a time.
    Each chunk goes through the predictor's preprocess -> forward -> postprocess (float64): the softmax with the
    checkpoint's temperature, or a multi-label model's per-label sigmoids."""
    seen = {text_key(t) for t in known}
    left: dict[str, int] = {}
    kept, probs = [], []
    for lo in range(0, len(texts), chunk):
        part = texts[lo:lo + chunk]
        ids = predictor.preprocess([t if t.strip() else " " for t in part], check=False)
        rows, where = [], []
        for i, (text, row) in enumerate(zip(part, ids)):
            reason = noise_reason(text, row)
            if reason is None:
                key = text_key(text)
                reason = "duplicate" if key in seen else None
                seen.add(key)
            if reason is not None:
                left[reason] = left.get(reason, 0) + 1
                continue
            rows.append(row)
            where.append(lo + i)
        if rows:
            probs.append(predictor.postprocess(predictor.forward(rows)[0], np.float64))
            kept.extend(where)
        if on_progress is not None:
            on_progress(min(lo + chunk, len(texts)), len(texts))
    k = len(predictor.labels)
    return np.asarray(kept, np.int64), (np.concatenate(probs) if probs else np.zeros((0, k))), left


def suggest(predictor: Any, texts: Sequence[str], n: int = 100, strategy: str = "uncertainty",
            measure: str = "margin", *, space: str = "ngram", known: Sequence[str] = (), seed: int = 0,
            candidates: int = CANDIDATES_PER_PICK, chunk: int = CHUNK,
            on_progress: Callable[[int, int], None] | None = None) -> Suggestions:
    """Pick at most ``n`` of ``texts`` to label next (see the module docstring).

    Args:
        predictor: a :class:`~sentiment_cli.inference.predictor.Predictor` over a checkpoint folder.
        texts: the unlabelled pool.
        n: how many to pick, at least 1; fewer come back when fewer are left after the exclusions.
        strategy: ``uncertainty`` or ``diverse``.
        measure: ``margin`` or ``entropy``.
        space: what ``diverse`` clusters: ``encoder``, the max-pooled encoder states ``(m, d_model)``; ``ngram``,
            the candidates' binarised word 1-3-grams reduced to ``LSA_DIMENSIONS`` by truncated SVD (latent
            semantic analysis, Deerwester et al. 1990; scikit-learn's ``TruncatedSVD``).
        known: texts already labelled; their duplicates and near-duplicates are left out.
        seed: k-means' seed (``diverse``).
        candidates: ``diverse`` clusters the ``candidates * n`` most uncertain texts (Zhdanov 2019's beta).
        chunk: texts per forward pass.
        on_progress: called with ``(texts done, texts in all)`` after each chunk.

    Returns:
        :class:`Suggestions`.

    Raises:
        UsageError: ``n`` below 1, a ``seed`` outside 0 to 2**32 - 1, an unknown ``strategy``, ``measure`` or
            ``space``, or ``diverse`` over the encoder without a PyTorch model.
    """
    start = time.perf_counter()
    _check_choices(n, strategy, measure, space, seed)
    texts = list(texts)
    kept, probs, left = _score(predictor, texts, known, chunk, on_progress)
    decision = predictor.decision
    scores = uncertainty(probs, measure, None if decision is None else np.asarray(decision.thresholds))
    cand = _candidates(scores, [texts[k] for k in kept], known, min(len(scores), max(1, candidates) * n), left)
    picker = Picker(text_vectors([texts[kept[j]] for j in cand]))
    clusters = None
    if strategy == "uncertainty":
        for j in range(len(cand)):
            if len(picker.picked) == n:
                break
            picker.take(j)
    else:
        clusters = diverse(predictor, [texts[kept[j]] for j in cand], scores[cand], n, seed, picker, space)
    left["near-duplicate"] = left.get("near-duplicate", 0) + picker.refused
    labels = tuple(predictor.labels)
    chosen = sorted(picker.picked, key=lambda j: -scores[cand[j]])
    picks = _picks(chosen, cand, kept, texts, probs, scores, labels, clusters,
                   None if decision is None else predictor)
    k = int(clusters.max()) + 1 if clusters is not None and len(clusters) else 0
    return Suggestions(picks, strategy, measure, labels, len(texts), len(kept), {r: c for r, c in left.items() if c},
                       k, "" if clusters is None else space, time.perf_counter() - start, decision is not None)


def _check_choices(n: int, strategy: str, measure: str, space: str, seed: int = 0) -> None:
    """Check the arguments of :func:`suggest` before any text is scored.

    Raises:
        UsageError: ``n`` below 1, a ``seed`` outside 0 to 2**32 - 1, or an unknown ``strategy``, ``measure`` or
            ``space``; checked before any text is scored.
    """
    if n < 1:
        raise UsageError(f"-n must be at least 1, got {n}")
    if not 0 <= seed <= SEED_MAX:
        raise UsageError(f"--seed must be from 0 to {SEED_MAX}, got {seed}")
    if strategy not in STRATEGIES:
        raise UsageError(f"unknown strategy {strategy!r}; use one of: {', '.join(STRATEGIES)}")
    if measure not in MEASURES:
        raise UsageError(f"unknown uncertainty measure {measure!r}; use one of: {', '.join(MEASURES)}")
    if space not in SPACES:
        raise UsageError(f"unknown space {space!r}; use one of: {', '.join(SPACES)}")


def _candidates(scores: np.ndarray, texts: list[str], known: Sequence[str], want: int,
                left: dict[str, int]) -> np.ndarray:
    """The ``want`` most uncertain of ``texts`` (the scored ones, ``scores`` ``(m,)``) that are no near-duplicate of a
    ``known`` text, most uncertain first (ties by input order): positions into ``texts``, taken in blocks of
    ``want``. Counts the near-duplicates left out in ``left``."""
    order = np.argsort(-scores, kind="stable")
    known_vectors = text_vectors(known) if len(known) else None
    cand = np.zeros(0, np.int64)
    lo = 0
    while lo < len(order) and len(cand) < want:
        block = order[lo:lo + want]
        ok = not_near_known(text_vectors([texts[j] for j in block]), known_vectors)
        left["near-duplicate"] = left.get("near-duplicate", 0) + int((~ok).sum())
        cand = np.concatenate([cand, block[ok]])
        lo += want
    return cand[:want]


def _picks(chosen: list[int], cand: np.ndarray, kept: Sequence[int], texts: Sequence[str], probs: np.ndarray,
           scores: np.ndarray, labels: tuple[str, ...], clusters: np.ndarray | None, multi=None) -> list[Pick]:
    """A :class:`Pick` per ``chosen`` candidate, ranked in that order; ``probs`` ``(m, num_labels)`` and
    ``scores`` ``(m,)`` are over the scored texts ``kept`` (indices into ``texts``); ``multi``: a multi-label
    model's predictor (per-label margin to its decision's thresholds, entropy, and the label set its
    :meth:`~sentiment_cli.inference.predictor.Predictor.decide` gives)."""
    if multi is None:
        m, e, sets = margins(probs), entropies(probs), None
    else:
        m, e = label_margins(probs, np.asarray(multi.decision.thresholds)), label_entropies(probs)
        sets = multi.decide(probs)
    picks = []
    for rank, j in enumerate(chosen, 1):
        r = int(cand[j])
        p = probs[r]
        picks.append(Pick(rank=rank, index=int(kept[r]), text=texts[kept[r]], uncertainty=float(scores[r]),
                          margin=float(m[r]), entropy=float(e[r]), predicted=labels[int(p.argmax())],
                          probabilities={c: float(x) for c, x in zip(labels, p)},
                          cluster=None if clusters is None else int(clusters[j]),
                          predicted_labels=None if sets is None else
                          [labels[c] for c in np.argsort(-p, kind="stable").tolist() if sets[r, c]]))
    return picks
