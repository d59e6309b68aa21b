"""What a prediction is, torch-free: results, the post-processing of logits, input checks, and the
tokens an explanation is about.

Used by :class:`~sentiment_cli.inference.predictor.Predictor` whichever backend computes the
logits (PyTorch or ONNX Runtime, which must not import torch).
"""

from __future__ import annotations

import unicodedata

from collections.abc import Iterable, Iterator, Sequence
from typing import Any
from dataclasses import dataclass, field

import numpy as np

from ..config import DataConfig
from ..data.labels import LABELS
from ..errors import UsageError
from ..data.tokenizer import UNK_ID, UNK_TOKEN, clip_text, marked_ids, truncate
from .probabilities import softmax

METASPACE = "\u2581"   # the space a Metaspace pre-tokenizer marks (subword tokenizers)


@dataclass
class Prediction:
    """One review's result: the predicted ``label``, its ``probability``, and ``probabilities`` mapping
    every label of the model (in label-id order) to its softmax probability."""

    text: str
    label: str
    probability: float
    probabilities: dict[str, float]

    def to_dict(self) -> dict:
        """The ``predict --json`` object (see DESIGN.md's output contract)."""
        return {"text": self.text, "label": self.label, "probability": self.probability,
                "probabilities": self.probabilities}


def predictions(texts: Sequence[str], logits: np.ndarray, labels: Sequence[str],
                temperature: float = 1.0, probabilities: np.ndarray | None = None) -> list[Prediction]:
    """One :class:`Prediction` per text from its ``(num_labels,)`` row of ``logits``: the label is the
    logits' argmax (the first of equals), the probabilities ``softmax(logits / temperature)``.

    Args:
        texts: the reviews, in the order of ``logits``' rows.
        logits: ``(len(texts), num_labels)`` float32.
        labels: the class names, by id.
        temperature: the checkpoint's temperature (> 0).
        probabilities: ``(len(texts), num_labels)`` float32, already computed (the predictor's postprocess);
            then ``temperature`` is not used.
    """
    if probabilities is None:
        probabilities = softmax(logits, temperature, np.float32)
    probs = probabilities.tolist()                                                # (n, num_labels)
    return [prediction(text, p, labels, k) for text, p, k in zip(texts, probs, logits.argmax(axis=1).tolist())]


def prediction(text: str, probabilities: Sequence[float], labels: Sequence[str], k: int | None = None) -> Prediction:
    """The :class:`Prediction` for one text: label ``k`` (default: the most probable, the first of
    equals) and every class's probability."""
    if k is None:
        k = max(range(len(probabilities)), key=probabilities.__getitem__)
    return Prediction(text, labels[k], probabilities[k], dict(zip(labels, probabilities)))


@dataclass
class Explanation:
    """One review's prediction and the score of every token the model saw.

    Attributes:
        text: the review as given.
        label, probability, probabilities: as in :class:`~sentiment_cli.inference.predictor.Prediction`.
        target: the class whose margin the scores split (the second label with two classes, else
            ``label``); a positive score pushed towards it, a negative one towards the others.
        tokens: the surface text of each token the model saw, in order (the
            original spelling, also for words outside the vocabulary).
        scores: each token's share of the margin (logit units), same length as ``tokens``.
        bias: the head's bias margin; ``sum(scores) + bias`` is the margin.
        ids: the token ids the model saw (``1`` = ``<unk>``).
        spans: ``(start, end)`` character offsets of each token in ``text``.
        positions: index of each token in the text's tokenization before truncation (of its cut, for a
            text too long to tokenize whole: :func:`token_rows`); a jump means tokens were dropped there.
        num_tokens: tokens in that tokenization.
        join_pieces: the tokens are characters or subwords (``[data] tokenizer`` char, unigram or bpe): for
            display, :meth:`pieces` joins adjacent tokens into the pieces :meth:`top` ranks.
        across_spaces: the tokens are characters, a space one of them, whose n-grams run across spaces (the
            character reading, ``[data] tokenizer = "char"``): a piece also joins the piece after a space when the
            three push the same way, so that an n-gram across a space (Korean "안 좋") shows as the text a reader
            sees.
    """

    text: str
    label: str
    probability: float
    probabilities: dict[str, float]
    tokens: list[str]
    scores: list[float]
    bias: float
    ids: list[int] = field(repr=False)
    spans: list[tuple[int, int]] = field(repr=False)
    positions: list[int] = field(repr=False)
    num_tokens: int = 0
    target: str = LABELS[1]
    join_pieces: bool = False
    across_spaces: bool = False

    @property
    def margin(self) -> float:
        """The margin ``logit(target) - mean of the other logits`` = ``bias + sum(scores)``
        (``logit(positive) - logit(negative)`` for IMDB)."""
        return self.bias + sum(self.scores)

    def to_dict(self) -> dict:
        """The ``predict --explain --json`` object: the prediction plus ``tokens``, ``scores``, ``offsets`` (each
        token's ``[start, end)`` characters in ``text``), ``bias`` and ``target``."""
        return {"text": self.text, "label": self.label, "probability": self.probability,
                "probabilities": self.probabilities, "tokens": self.tokens, "scores": self.scores,
                "offsets": [list(span) for span in self.spans], "bias": self.bias, "target": self.target}

    def pieces(self) -> list[tuple[str, float, tuple[int, int]]]:
        """The tokens joined for display: ``(text, score, (start, end))`` in order.

        Without :attr:`join_pieces` each token is its own piece. With it, adjacent tokens (one's span ends where
        the next begins; a whitespace or punctuation token joins nothing, and a subword whose span starts with a
        space begins a piece: a clause is not one piece) whose scores do
        not differ in sign join into one piece, whose score is their sum and whose text is the input's span they
        cover: a Thai or Chinese word read as characters shows as the word. A combining mark (Thai vowel signs and
        tone marks, Unicode category M) always joins the character it sits on, and tokens of one span (NFKC splits
        Thai "ำ" in two) are one piece. With :attr:`across_spaces` (characters whose n-grams cross spaces), a space
        between two pieces that push the same way as it does joins them, its text as typed: ``"안 좋아요"``.
        """
        out: list[tuple[str, float, tuple[int, int]]] = []
        held = 0.0   # the score of a token of no text (a text's leading ▁), given to the next piece
        space: tuple[str, float, tuple[int, int]] | None = None   # a space token waiting for the piece after it
        for tok_id, (start, end), score in zip(self.ids, self.spans, self.scores):
            if self.join_pieces and start == end and tok_id != UNK_ID:
                held += score
                continue
            score, held = score + held, 0.0
            if space is not None:
                if _across(out[-1], space, self.text[start:end], score, start):
                    _, total, (first, _) = out.pop()
                    out.append((self.text[first:end], total + space[1] + score, (first, end)))
                    space = None
                    continue
                out.append(space)
                space = None
            if self.across_spaces and out and out[-1][2][1] == start < end and self.text[start:end].isspace() \
                    and not _apart(out[-1][0]):
                space = (self.text[start:end], score, (start, end))
                continue
            mark = start < end and unicodedata.category(self.text[start])[0] == "M"   # a vowel sign, a tone mark
            if out and self.join_pieces and start < end and start < out[-1][2][1]:   # the same span: NFKC split it
                text, total, span = out.pop()
                out.append((text, total + score, span))
            elif out and self.join_pieces and out[-1][2][1] == start < end and (out[-1][1] * score >= 0 or mark) \
                    and not self.text[start].isspace() \
                    and not _apart(self.text[start:end]) and not _apart(out[-1][0]):   # spaces, punctuation apart
                _, total, (first, _) = out.pop()
                out.append((self.text[first:end], total + score, (first, end)))
            else:
                out.append((self.text[start:end] or UNK_TOKEN, score, (start, end)))
        if space is not None:
            out.append(space)
        if held and out:   # nothing after it: the last piece takes it
            text, total, span = out.pop()
            out.append((text, total + held, span))
        elif held:
            out.append(("", held, (0, 0)))
        return out

    def top(self, k: int, positive: bool = True) -> list[tuple[str, float]]:
        """The ``k`` pieces (:meth:`pieces`: the tokens, or joined characters and subwords) that pushed hardest
        towards the target (or away from it), strongest first.

        Pieces with a zero score, or a score of the other sign, are left out; a piece's text is shown without the
        spaces around it, a piece of spaces alone as ``▁`` (a subword tokenizer's mark of a space).
        """
        pairs = [(_shown(t), s) for t, s, _ in self.pieces() if (s > 0 if positive else s < 0)]
        return sorted(pairs, key=lambda p: -abs(p[1]))[:k]

    def segments(self) -> list[tuple[str, str, float | None]]:
        """The review cut into pieces for display: ``(text, kind, score)`` in order.

        ``kind`` is ``"token"`` (a token the model saw, with its score),
        ``"unknown"`` (the same, for a word outside the vocabulary),
        ``"space"`` (text between two seen tokens, score ``None``) or
        ``"omitted"`` (text the model never saw because of truncation, score ``None``).
        """
        out: list[tuple[str, str, float | None]] = []
        cursor = 0
        prev = -1
        for tok_id, (start, end), pos, score in zip(self.ids, self.spans, self.positions, self.scores):
            if start < cursor:  # no span (empty tokenization) or overlapping offsets: show the token alone
                start, end = cursor, cursor
            if start > cursor:
                out.append((self.text[cursor:start], "omitted" if pos != prev + 1 else "space", None))
            kind = "unknown" if tok_id == UNK_ID else "token"
            out.append((self.text[start:end] or (UNK_TOKEN if kind == "unknown" else ""), kind, score))
            cursor, prev = end, pos
        if cursor < len(self.text):
            out.append((self.text[cursor:], "omitted" if prev + 1 < self.num_tokens else "space", None))
        return out


def token_rows(tokenizer, config: DataConfig, texts: Sequence[str]) -> list[tuple[list[int], list[tuple[int, int]], list[int], int]]:
    """The tokens the model sees for each text, with where they came from.

    The ids are those :func:`~sentiment_cli.data.tokenizer.encode_texts` gives (the same cut of a long
    text by :func:`~sentiment_cli.data.tokenizer.clip_text`, normalisation and truncation, including
    ``head_tail``). The work is linear in the tokens of the cut text, at most a few times ``max_length``.

    Args:
        tokenizer: the checkpoint's ``tokenizers.Tokenizer``.
        config: its data settings (``max_length``, ``truncation``, ``head_fraction``).
        texts: the reviews.

    Returns:
        Per text ``(ids, spans, positions, num_tokens)``: token ids, ``(start, end)``
        character offsets in the text as given (also after a cut), index of each token in the
        tokenization of the cut text (a jump means tokens were dropped there), and that
        tokenization's length.
    """
    clipped = [clip_text(t, config.max_length) for t in texts]
    # encode_batch (not encode_batch_fast): the offsets map each token back to the original text
    encodings = tokenizer.encode_batch([c[0] for c in clipped])
    rows = []
    metaspace = tokenizer.token_to_id(METASPACE)
    for enc, (cut, tail_start, shift) in zip(encodings, clipped):
        raw, offsets = enc.ids, enc.offsets   # each read builds a list: once
        ids, offsets = marked_ids(tokenizer, raw, config), _offsets(raw, offsets, cut, metaspace)
        # truncate() applied to positions keeps exactly the tokens it keeps of the ids
        positions = truncate(range(len(ids)), config.max_length, config.truncation, config.head_fraction) \
            if ids else []
        if positions:
            spans = [(s + shift, e + shift) if s >= tail_start else (s, e) for s, e in (offsets[p] for p in positions)]
            rows.append(([ids[p] for p in positions], spans, positions, len(ids)))
        else:  # nothing left after normalisation: the model sees one <unk>, as encode_texts() gives
            rows.append(([UNK_ID], [(0, 0)], [0], 0))
    return rows


def surface_tokens(text: str, ids: Sequence[int], spans: Sequence[tuple[int, int]]) -> list[str]:
    """Each token's text as the input spells it (``text[start:end]``): ``<unk>`` for an unknown token of no span
    (a text normalised to nothing), ``""`` for a known one (the ``▁`` before a text read as subwords)."""
    return [text[a:b] or (UNK_TOKEN if i == UNK_ID else "") for i, (a, b) in zip(ids, spans)]


def _offsets(ids: list[int], offsets: list[tuple[int, int]], text: str, metaspace: int | None) -> list[tuple[int, int]]:
    """``offsets``, with the ``▁`` a Metaspace pre-tokenizer puts before a text (subword tokenizers; id
    ``metaspace``) empty at its place: it stands for no character of the text, and ``tokenizers`` gives it the
    span of the first one, which the next token covers too. A ``▁`` read from a space keeps the space's span."""
    first = text[slice(*offsets[0])] if ids else ""
    if ids and ids[0] == metaspace and first and not first.isspace() and first != METASPACE:   # not a space it read
        offsets[0] = (offsets[0][0], offsets[0][0])
    return offsets


def check_iterable(texts: Any) -> None:
    """Refuse what is not an iterable of texts before any is read: a single ``str`` (its characters would be
    read as texts), ``bytes``, ``None``, a non-iterable.

    Raises:
        UsageError: naming the type and what to pass instead.
    """
    if isinstance(texts, str):
        raise UsageError("texts: give a list of texts, not one str (its characters would be read as texts); "
                         "pass [text]")
    if texts is None or isinstance(texts, (bytes, bytearray, memoryview)) or not isinstance(texts, Iterable):
        raise UsageError(f"texts: give an iterable of str (a list, a generator, a pandas Series), not "
                         f"{type(texts).__name__}")


def text_list(texts: Any, first: int = 1) -> list[str]:
    """``texts`` (any iterable of ``str``: a list, a tuple, a generator, a 1-D NumPy array or a pandas Series)
    as a list of ``str``, each checked to be one.

    Raises:
        UsageError: as :func:`check_iterable`, or an item that is not a ``str`` (its number, from ``first``, and
            type named).
    """
    if isinstance(texts, list) and all(type(t) is str for t in texts):
        return texts
    check_iterable(texts)
    out = list(texts)
    for i, text in enumerate(out, first):
        _check_str(text, i)
    return [str(t) for t in out]


def _check_str(text: Any, number: int) -> None:
    if not isinstance(text, str):
        hint = " (decode bytes first)" if isinstance(text, (bytes, bytearray)) else ""
        raise UsageError(f"review {number} is {type(text).__name__}, not str{hint}; give texts as str")


def chunked(texts: Iterable[str], chunk: int, score) -> Iterator:
    """Apply ``score(batch, first=n)`` to consecutive chunks of ``texts``; yield its results in order.

    Raises:
        UsageError: as :func:`check_iterable` (on the first ``next``), or an item that is not a ``str``.
    """
    check_iterable(texts)
    buf: list[str] = []
    done = 0
    for text in texts:
        _check_str(text, done + len(buf) + 1)
        buf.append(text)
        if len(buf) >= chunk:
            yield from score(buf, first=done + 1)
            done += len(buf)
            buf = []
    if buf:
        yield from score(buf, first=done + 1)


def check_texts(texts: Sequence[str], first: int = 1) -> None:
    """Raise :class:`UsageError` for an empty or whitespace-only text, or one that is not valid Unicode.

    ``first`` is the number of ``texts[0]`` in the message.
    """
    for i, text in enumerate(texts, first):
        if not text.strip():
            raise UsageError(f"review {i} is empty; give some text to classify")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise UsageError(f"review {i} is not valid Unicode text (unpaired surrogate at character "
                             f"{exc.start})") from None


def _shown(text: str) -> str:
    """A piece's text as :meth:`Explanation.top` shows it: without the spaces around it; spaces alone as ``▁``."""
    return text.strip() or ("▁" if text else text)


def _across(piece: tuple[str, float, tuple[int, int]], space: tuple[str, float, tuple[int, int]], text: str,
            score: float, start: int) -> bool:
    """Whether ``piece``, the ``space`` after it and the token after that (``text`` from ``start``, ``score``) are one
    piece of a character model's explanation: adjacent, the token neither a space nor punctuation, and no two of the
    three scores of opposite signs (:meth:`Explanation.pieces`)."""
    a, b = piece[1], space[1]
    return space[2][1] == start and bool(text) and not _apart(text) and a * b >= 0 and a * score >= 0 \
        and b * score >= 0


def _apart(text: str) -> bool:
    """Whether a piece of text stays a piece of its own in :meth:`Explanation.pieces`: whitespace, or punctuation
    alone (Unicode category P: ``，`` and ``。`` as ``,`` and ``.``)."""
    return text.isspace() or bool(text) and all(unicodedata.category(c)[0] == "P" for c in text)
