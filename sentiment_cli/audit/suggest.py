"""What to label next: the unlabelled texts whose labels would teach a checkpoint most (``sentiment suggest``).

Pool-based active learning (Settles 2009, "Active Learning Literature Survey", 3.1) with two strategies:

- ``uncertainty``: the texts the model is least sure of, by the calibrated probabilities (the checkpoint's
  temperature): the *margin* between its two most probable classes (Scheffer et al. 2001; Settles 2009,
  3.1), or the *entropy* of the distribution (Shannon entropy, divided by ``log(num_labels)`` so that it
  lies in ``[0, 1]``). Small margin, high entropy: uncertain.
- ``diverse``: uncertainty, spread over the space. The ``CANDIDATES_PER_PICK * n`` most uncertain texts (30 n:
  better on dev than 10 n in ``bench/active.py``) are clustered into ``n`` clusters by k-means weighted by their
  uncertainty, over their word 1-3-grams reduced by LSA (``space="ngram"``, the default: better on dev) or over
  the model's max-pooled encoder states (``"encoder"``), and the most uncertain text of each cluster is
  picked: the "diverse mini-batch" recipe of Zhdanov 2019 ("Diverse mini-batch Active Learning",
  arXiv:1901.05954). It answers the weakness that Sener & Savarese 2018 ("Active Learning for Convolutional
  Neural Networks: A Core-Set Approach") and Ash et al. 2020 (BADGE, "Deep Batch Active Learning by Diverse,
  Uncertain Gradient Lower Bounds") point out in top-``n`` uncertainty: a batch of near-identical uncertain
  texts teaches little more than one of them.

Both strategies leave out, and count:

- **noise-like** texts (:func:`noise_reason`): empty, fewer than ``MIN_WORDS`` words, mostly not letters
  (numbers, symbols, markup), or no word the checkpoint's vocabulary knows (the model reads nothing in it, so
  its "uncertainty" is its prior, not a question about the text). Uncertainty sampling otherwise favours
  exactly these (small-text issue 24);
- **duplicates**: texts equal after :func:`normalise` (case, accents, punctuation and spacing), of each other
  or of ``known`` texts (already labelled); the first is kept;
- **near-duplicates**: a text whose cosine similarity to a text already picked, or to a ``known`` text, is
  ``NEAR_DUPLICATE`` or more, over binarised hashed word 1-3-grams (scikit-learn's ``HashingVectorizer``).

Work is bounded by the input: texts are checked and scored ``chunk`` at a time (one forward pass of the model
each, progress reported per chunk); only the at most ``CANDIDATES_PER_PICK * n`` best candidates get n-gram
vectors and (``diverse``) LSA vectors or encoder states.
"""

from __future__ import annotations

import hashlib
import re
import time
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..config import SEED_MAX
from ..data.tokenizer import UNK_ID, encode_texts
from ..errors import UsageError
from ..evaluation.calibration import softmax
from ..outputs import write_table

STRATEGIES = ("uncertainty", "diverse")
MEASURES = ("margin", "entropy")
SPACES = ("encoder", "ngram")  # what diverse clusters: the pooled encoder states, or the texts' word n-grams (LSA)
LSA_DIMENSIONS = 64
MIN_WORDS = 2                 # fewer words than this: nothing to label
MIN_LETTER_SHARE = 0.5        # under this share of letters among the non-space characters: not text
NEAR_DUPLICATE = 0.9          # cosine over binarised word 1-3-grams at or above which two texts are near-duplicates
CANDIDATES_PER_PICK = 30      # diverse: cluster the 30 n most uncertain texts (Zhdanov 2019's beta; 30 beat 10 on dev)
HASH_FEATURES = 1 << 20       # buckets of the near-duplicate vectors
CHUNK = 1024                  # texts scored per forward pass (memory and progress)

LEFT_OUT = {   # reason -> what it means, for the summary
    "empty": "no token at all",
    "too short": f"fewer than {MIN_WORDS} words",
    "not text": f"under {MIN_LETTER_SHARE:.0%} of its characters are letters",
    "unknown words only": "no word the checkpoint's vocabulary knows",
    "duplicate": "the same text (after normalising case, accents, punctuation and spaces) as an earlier one",
    "near-duplicate": f"cosine similarity of word 1-3-grams >= {NEAR_DUPLICATE} with a text picked or known",
}
_WORD = re.compile(r"\w", re.UNICODE)
_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)


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
        predicted: the class the model predicts.
        probabilities: class name -> probability (with the checkpoint's temperature).
        cluster: ``diverse``: the k-means cluster it was picked from; else ``None``.
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

    def to_dict(self) -> dict[str, Any]:
        """The pick as JSON-ready values."""
        return {"rank": self.rank, "index": self.index, "text": self.text, "uncertainty": self.uncertainty,
                "margin": self.margin, "entropy": self.entropy, "predicted": self.predicted,
                "probabilities": self.probabilities, "cluster": self.cluster}


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

    def to_dict(self) -> dict[str, Any]:
        """The summary and the picks as JSON-ready values."""
        return {"strategy": self.strategy, "measure": self.measure, "labels": list(self.labels), "read": self.read,
                "scored": self.scored, "left_out": dict(self.left_out), "clusters": self.clusters, "space": self.space,
                "seconds": self.seconds, "picks": [p.to_dict() for p in self.picks]}


def normalise(text: str) -> str:
    """``text`` for duplicate detection: NFKC, accents stripped, lower case, runs of non-word characters as one
    space."""
    t = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text))
    t = "".join(c for c in t if not unicodedata.combining(c)).casefold()
    return _NON_WORD.sub(" ", t).strip()


def noise_reason(text: str, ids: Sequence[int]) -> str | None:
    """Why ``text`` is noise-like (a key of :data:`LEFT_OUT`), or ``None`` when it is worth labelling.

    Args:
        text: the raw text.
        ids: its token ids under the checkpoint's tokenizer (``<unk>`` = 1).

    Returns:
        ``"empty"``, ``"too short"``, ``"not text"``, ``"unknown words only"`` or ``None``.
    """
    if not ids or not text.strip():
        return "empty"
    if len(_NON_WORD.sub(" ", text).split()) < MIN_WORDS:
        return "too short"
    chars = [c for c in text if not c.isspace()]
    if sum(c.isalpha() for c in chars) < MIN_LETTER_SHARE * len(chars):
        return "not text"
    if all(i <= UNK_ID for i in ids):
        return "unknown words only"
    return None


def margins(probabilities: np.ndarray) -> np.ndarray:
    """``(n,)`` the top class's probability minus the second's, from ``(n, num_labels)`` probabilities."""
    top2 = np.sort(probabilities, axis=1)[:, -2:]
    return top2[:, 1] - top2[:, 0]


def entropies(probabilities: np.ndarray) -> np.ndarray:
    """``(n,)`` Shannon entropy of each row of ``(n, num_labels)`` probabilities, over ``log(num_labels)``: in
    ``[0, 1]``."""
    p = np.clip(probabilities, 1e-12, 1.0)
    return -(p * np.log(p)).sum(axis=1) / np.log(probabilities.shape[1])


def uncertainty(probabilities: np.ndarray, measure: str = "margin") -> np.ndarray:
    """``(n,)`` uncertainty in ``[0, 1]``, higher = less sure: ``1 - margin`` or the normalised entropy.

    Raises:
        UsageError: an unknown ``measure``.
    """
    if measure == "margin":
        return 1.0 - margins(probabilities)
    if measure == "entropy":
        return entropies(probabilities)
    raise UsageError(f"unknown uncertainty measure {measure!r}; use one of: {', '.join(MEASURES)}")


def text_vectors(texts: Sequence[str]):
    """``(len(texts), HASH_FEATURES)`` float32 scipy CSR: binarised hashed word 1-3-grams of the normalised texts,
    rows of unit L2 norm, so that a row product is a cosine similarity. Independent of any checkpoint."""
    import scipy.sparse as sp
    from sklearn.feature_extraction.text import HashingVectorizer

    if not len(texts):
        return sp.csr_matrix((0, HASH_FEATURES), dtype=np.float32)
    vectoriser = HashingVectorizer(ngram_range=(1, 3), n_features=HASH_FEATURES, binary=True, norm="l2",
                                   alternate_sign=False, token_pattern=r"(?u)\b\w+\b", dtype=np.float32)
    return vectoriser.transform([normalise(t) for t in texts]).tocsr()


def pooled_states(predictor: Any, texts: Sequence[str]) -> np.ndarray:
    """``(len(texts), d_model)`` float32: the checkpoint's max-pooled encoder states (the head's input), in input order.

    Raises:
        UsageError: the predictor has no PyTorch model (an ONNX file).
    """
    from ..inference.torch_backend import batched_pooled

    backend = predictor.backend
    if not hasattr(backend, "checkpoint"):
        raise UsageError("the diverse strategy reads the model's encoder states; give a checkpoint folder, not ONNX")
    ids = encode_texts(backend.tokenizer, texts, predictor.config.data)
    return batched_pooled(backend.checkpoint.model, ids, batch_size=backend.batch_size, device=backend.device)


def _key(text: str) -> bytes:
    """A 16-byte hash of the normalised text: equal for duplicates (see :func:`normalise`)."""
    return hashlib.blake2b(normalise(text).encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _score(predictor: Any, texts: Sequence[str], known: Sequence[str], chunk: int,
           on_progress: Callable[[int, int], None] | None) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """``(kept indices (m,), probabilities (m, num_labels), left out by reason)``: noise-like texts and exact
    duplicates (of each other or of ``known``) are left out before the model scores the rest, ``chunk`` at a time."""
    seen = {_key(t) for t in known}
    left: dict[str, int] = {}
    kept, probs = [], []
    tokenizer, data = predictor.backend.tokenizer, predictor.config.data
    for lo in range(0, len(texts), chunk):
        part = texts[lo:lo + chunk]
        ids = encode_texts(tokenizer, [t if t.strip() else " " for t in part], data)
        rows, where = [], []
        for i, (text, row) in enumerate(zip(part, ids)):
            reason = noise_reason(text, row)
            if reason is None:
                key = _key(text)
                reason = "duplicate" if key in seen else None
                seen.add(key)
            if reason is not None:
                left[reason] = left.get(reason, 0) + 1
                continue
            rows.append(row)
            where.append(lo + i)
        if rows:
            logits = predictor.backend.forward(rows)[0]
            probs.append(softmax(logits, predictor.temperature, np.float64))
            kept.extend(where)
        if on_progress is not None:
            on_progress(min(lo + chunk, len(texts)), len(texts))
    k = len(predictor.labels)
    return np.asarray(kept, np.int64), (np.concatenate(probs) if probs else np.zeros((0, k))), left


def _not_near_known(vectors, known_vectors) -> np.ndarray:
    """``(m,)`` bool: the rows of ``vectors`` whose cosine with every row of ``known_vectors`` is below
    :data:`NEAR_DUPLICATE`."""
    if known_vectors is None or known_vectors.shape[0] == 0:
        return np.ones(vectors.shape[0], bool)
    best = np.zeros(vectors.shape[0])
    for lo in range(0, known_vectors.shape[0], 4096):   # (m, 4096) similarities at a time
        sims = (vectors @ known_vectors[lo:lo + 4096].T).max(axis=1)
        best = np.maximum(best, sims.toarray().ravel())
    return best < NEAR_DUPLICATE - 1e-6


class _Picker:
    """Greedy picking that refuses a candidate too similar to one already picked."""

    def __init__(self, vectors):
        self.vectors = vectors                      # (m, HASH_FEATURES) unit rows
        self.picked: list[int] = []
        self.refused = 0

    def take(self, j: int) -> bool:
        """Pick candidate ``j`` unless its cosine similarity to a picked row reaches ``NEAR_DUPLICATE``;
        whether it was picked."""
        if self.picked:
            sims = (self.vectors[self.picked] @ self.vectors[j].T).toarray().ravel()
            if sims.max() >= NEAR_DUPLICATE - 1e-6:
                self.refused += 1
                return False
        self.picked.append(j)
        return True


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
    scores = uncertainty(probs, measure)
    cand = _candidates(scores, [texts[k] for k in kept], known, min(len(scores), max(1, candidates) * n), left)
    picker = _Picker(text_vectors([texts[kept[j]] for j in cand]))
    clusters = None
    if strategy == "uncertainty":
        for j in range(len(cand)):
            if len(picker.picked) == n:
                break
            picker.take(j)
    else:
        clusters = _diverse(predictor, [texts[kept[j]] for j in cand], scores[cand], n, seed, picker, space)
    left["near-duplicate"] = left.get("near-duplicate", 0) + picker.refused
    labels = tuple(predictor.labels)
    chosen = sorted(picker.picked, key=lambda j: -scores[cand[j]])
    picks = _picks(chosen, cand, kept, texts, probs, scores, labels, clusters)
    k = int(clusters.max()) + 1 if clusters is not None and len(clusters) else 0
    return Suggestions(picks, strategy, measure, labels, len(texts), len(kept), {r: c for r, c in left.items() if c},
                       k, "" if clusters is None else space, time.perf_counter() - start)


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
        ok = _not_near_known(text_vectors([texts[j] for j in block]), known_vectors)
        left["near-duplicate"] = left.get("near-duplicate", 0) + int((~ok).sum())
        cand = np.concatenate([cand, block[ok]])
        lo += want
    return cand[:want]


def _picks(chosen: list[int], cand: np.ndarray, kept: Sequence[int], texts: Sequence[str], probs: np.ndarray,
           scores: np.ndarray, labels: tuple[str, ...], clusters: np.ndarray | None) -> list[Pick]:
    """A :class:`Pick` per ``chosen`` candidate, ranked in that order; ``probs`` ``(m, num_labels)`` and
    ``scores`` ``(m,)`` are over the scored texts ``kept`` (indices into ``texts``)."""
    m, e = margins(probs), entropies(probs)
    picks = []
    for rank, j in enumerate(chosen, 1):
        r = int(cand[j])
        p = probs[r]
        picks.append(Pick(rank=rank, index=int(kept[r]), text=texts[kept[r]], uncertainty=float(scores[r]),
                          margin=float(m[r]), entropy=float(e[r]), predicted=labels[int(p.argmax())],
                          probabilities={c: float(x) for c, x in zip(labels, p)},
                          cluster=None if clusters is None else int(clusters[j])))
    return picks


def _diverse(predictor: Any, texts: list[str], scores: np.ndarray, n: int, seed: int, picker: _Picker,
             space: str = "encoder") -> np.ndarray:
    """Pick the most uncertain text of each of ``n`` clusters (Zhdanov 2019) into ``picker``.

    k-means (scikit-learn, k-means++ seeding, one run) over the candidates' L2-normalised max-pooled encoder states
    (``space="encoder"``) or LSA vectors of their word 1-3-grams (``"ngram"``), each weighted by its uncertainty;
    clusters are visited best member first, round after round, until ``n`` are picked or the candidates run out.

    Args:
        texts: the candidates ``(m,)``, most uncertain first.
        scores: ``(m,)`` their uncertainty.

    Returns:
        ``(m,)`` int: each candidate's cluster.
    """
    from sklearn.cluster import KMeans

    if len(texts) == 0:
        return np.zeros(0, np.int64)
    if space == "encoder":
        x = pooled_states(predictor, texts).astype(np.float64)              # (m, d_model)
    else:
        from sklearn.decomposition import TruncatedSVD

        v = picker.vectors[:, np.unique(picker.vectors.indices)]            # the used buckets only: a fast SVD
        dims = min(LSA_DIMENSIONS, len(texts) - 1, v.shape[1] - 1)
        x = (TruncatedSVD(dims, random_state=seed).fit_transform(v) if dims >= 1
             else v.toarray()).astype(np.float64)                           # (m, dims)
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    k = min(n, len(texts), len(np.unique(x, axis=0)))
    clusters = KMeans(n_clusters=k, n_init=1, random_state=seed).fit_predict(x, sample_weight=scores + 1e-6)
    members = [list(np.flatnonzero(clusters == c)) for c in range(k)]     # each most uncertain first
    members = [js for js in members if js]
    members.sort(key=lambda js: js[0])
    while len(picker.picked) < n and any(members):
        for js in members:
            while js and len(picker.picked) < n:
                if picker.take(js.pop(0)):
                    break
    return clusters


CSV_COLUMNS = ("text", "label", "rank", "uncertainty", "margin", "entropy", "predicted", "probability", "index",
               "cluster")


def write_picks(result: Suggestions, path: str | Path) -> Path:
    """Write the picks to a file that ``sentiment train --data`` reads once its ``label`` column is filled in:
    CSV or JSON Lines by ``path``'s suffix (:func:`~sentiment_cli.outputs.write_table`, atomically).

    Columns: :data:`CSV_COLUMNS`: ``text``, an empty ``label``, then ``rank`` (1 = label first), ``uncertainty``,
    ``margin``, ``entropy``, ``predicted`` and its ``probability``, the text's ``index`` in the input and its
    ``cluster`` (``diverse``; else empty). ``train`` reads ``text`` and ``label`` and ignores the rest. The caller
    checks ``path`` before any work (:func:`~sentiment_cli.outputs.check_output`).

    Args:
        result: what :func:`suggest` returned.
        path: the ``.csv`` or ``.jsonl`` file to write.

    Returns:
        The path written.

    Raises:
        UsageError: another suffix.
    """
    jsonl = Path(path).suffix.lower() == ".jsonl"   # numbers as numbers; CSV keeps its six decimals

    def number(x: float) -> float | str:
        """A score as the format keeps it."""
        return round(float(x), 6) if jsonl else f"{x:.6f}"

    no_cluster = None if jsonl else ""
    rows = [dict(zip(CSV_COLUMNS, (pk.text, "", pk.rank, number(pk.uncertainty), number(pk.margin),
                                   number(pk.entropy), pk.predicted, number(pk.probabilities[pk.predicted]),
                                   pk.index, no_cluster if pk.cluster is None else pk.cluster)))
            for pk in result.picks]
    return write_table(path, CSV_COLUMNS, rows)
