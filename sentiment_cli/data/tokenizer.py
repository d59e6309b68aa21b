"""Build, save, load and apply the Hugging Face ``tokenizers`` tokenizer: words, characters or subwords.

``tokenizers`` replaces torchtext (deprecated; its last release is built for
torch 2.3 and does not load beside current torch). The tokenizer normalises
text (HTML ``<br />`` to a space, Unicode NFKC, lowercase), splits it, and maps
its units to ids; ``[data] tokenizer`` names the units:

- ``word``: a WordLevel vocabulary of the words ``[data] pre_tokenizer`` splits (every checkpoint before
  ``[data] tokenizer`` existed; its ``tokenizer.json`` loads and encodes as it did);
- ``char``: a WordLevel vocabulary of single characters, a run of whitespace read as one ``▁`` (so the
  n-gram score's token n-grams are character n-grams within and across words);
- ``unigram`` / ``bpe``: subwords learned from the training texts (Kudo 2018; Sennrich et al. 2016) after a
  Metaspace pre-tokenizer, with byte fallback: a character outside the vocabulary becomes its UTF-8 bytes'
  tokens (``<0x00>`` to ``<0xFF>``), never ``<unk>``;
- ``auto``: ``word``, ``char`` or ``unigram`` by :func:`~.units.choose_units` on the training texts.

No tokenizer is downloaded. This module owns the special tokens: ``<pad>`` is id 0 and ``<unk>`` id 1 in
every vocabulary.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers
from tokenizers.models import BPE, Unigram, WordLevel
from tokenizers.trainers import BpeTrainer, UnigramTrainer, WordLevelTrainer

from ..config import DataConfig
from ..decoding import json_loads
from ..errors import CheckpointError
from .identity import blind, identity_ids
from .negation import mark_scope, token_roles, vocabulary_id
from .token_ids import TokenIds, TokenIdsWriter
from .units import choose_units
from .tokenizer_kind import TokenizerKind

PAD_TOKEN = "<pad>"
UNK_TOKEN = "<unk>"
ENCODE_ROWS = 2048   # texts encoded at a time by encode_token_ids (memory only: a text's ids do not depend on it)
SPACE_TOKEN = "▁"   # a run of whitespace, as a character token (SentencePiece's meta symbol)
BYTE_TOKENS = tuple(f"<0x{i:02X}>" for i in range(256))   # the byte fallback's tokens (unigram, bpe)
PAD_ID = 0   # padding: masked out of attention and of the max-pool
UNK_ID = 1   # a word outside the vocabulary (also word dropout's and the masked LM's replacement)

# A long text is cut to its first and last CLIP_CHARS_PER_TOKEN * max_length + CLIP_MARGIN_CHARS characters
# before the tokenizer sees it (clip_text). 64 characters per token is over ten times an English word with its
# space, so the max_length tokens truncation keeps come out the same; only the middle, which no strategy keeps,
# is never tokenized. The margin keeps every real review whole whatever max_length (IMDB's longest, unsupervised
# split included, has 14,282 characters; the smallest cut keeps 2 x 16,448), so vocabularies do not change.
CLIP_CHARS_PER_TOKEN = 64
CLIP_MARGIN_CHARS = 16_384
CLIP_JOIN = " "   # between the head and the tail: a word cut at either end is not glued to the other


def pre_tokenizer_for(kind: str) -> pre_tokenizers.PreTokenizer:
    """The HF pre-tokenizer that ``[data] pre_tokenizer`` names: how text is split into words before the
    vocabulary (``train``'s tokenizer and the default's length rule read the same words).

    Raises:
        ValueError: an unknown ``kind`` (not ``"whitespace"`` or ``"punctuation"``).
    """
    if kind == "whitespace":
        return pre_tokenizers.WhitespaceSplit()  # str.split(), as the notebook's torchtext Field
    if kind == "punctuation":
        return pre_tokenizers.Whitespace()       # \w+|[^\w\s]+ : words and runs of punctuation apart
    raise ValueError(f"unknown pre_tokenizer {kind!r}")


PRE_TOKENIZERS = ("whitespace", "punctuation")   # [data] pre_tokenizer's values (pre_tokenizer_for)
# A Unigram vocabulary is learned from the first 2,000,000 characters of the training texts: its trainer took
# 127 s on Wisesight's 1.94 million (all of them) and 112 s on 1 million of Japanese news (livedoor), 7.4 million
# in all, on 2 cores; BPE's learns from all of them (43 s on those 7.4 million).
UNIGRAM_CHARS = 2_000_000
TOKENIZER_KINDS = ("word", "char", "unigram", "bpe")   # what [data] tokenizer resolves to (build_tokenizer)
_MODEL_TYPES = {"word": "WordLevel", "char": "WordLevel", "unigram": "Unigram", "bpe": "BPE"}


def _parts(tok: Tokenizer) -> tuple[object, object]:
    """``(normalizer, pre_tokenizer)`` of a tokenizer, as the parsed JSON a ``tokenizer.json`` holds them as."""
    raw = json.loads(tok.to_str())
    return raw["normalizer"], raw["pre_tokenizer"]


@functools.lru_cache(maxsize=1)   # built once a process: every checkpoint load checks against it
def _written_parts() -> dict[str, list[tuple[object, object]]]:
    """Each model type -> the ``(normalizer, pre_tokenizer)`` pairs :func:`build_tokenizer` writes with it."""
    written: dict[str, list[tuple[object, object]]] = {}
    for kind in TOKENIZER_KINDS:
        for pre in (PRE_TOKENIZERS if kind == "word" else PRE_TOKENIZERS[:1]):
            config = DataConfig(tokenizer=kind, pre_tokenizer=pre)
            written.setdefault(_MODEL_TYPES[kind], []).append(_parts(_untrained(kind, config)))
    return written


def check_structure(text: str, where: str | Path) -> None:
    """Refuse a ``tokenizer.json`` (untrusted, as a checkpoint's weights are) that is not a kind this module
    writes, before ``tokenizers`` builds it: a WordLevel (words, characters), Unigram or BPE model whose unknown
    token is ``<unk>`` (id 1); the normaliser and pre-tokenizer :func:`build_tokenizer` gives that model (a
    crafted normaliser regex could backtrack for hours or panic in Rust); and no padding or truncation of its own
    (a ``Fixed`` padding of millions of ids would allocate gigabytes per text; this module pads and truncates).

    Raises:
        CheckpointError: naming ``where`` and the part that differs.
    """
    try:
        raw = json_loads(text)
    except ValueError as exc:
        raise CheckpointError(f"{where}: not a valid tokenizer file ({exc})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("model"), dict):
        raise CheckpointError(f"{where}: not a valid tokenizer file (no model)")
    model = raw["model"]
    kind = model.get("type")
    written = _written_parts()
    unk_key, unk_want = ("unk_id", UNK_ID) if kind == "Unigram" else ("unk_token", UNK_TOKEN)
    pairs = written.get(kind, [])
    problems = [
        (kind not in written, f"model {str(kind)[:40]!r}, not one of {', '.join(sorted(written))}"),
        (model.get(unk_key) != unk_want, f"model.{unk_key} {str(model.get(unk_key))[:40]!r}, not {unk_want}"),
        (raw.get("padding") is not None, "its own padding (this tool pads batches itself)"),
        (raw.get("truncation") is not None, "its own truncation (this tool truncates itself)"),
        (all(raw.get("normalizer") != n for n, _ in pairs), "a normalizer this tool does not write"),
        ((raw.get("normalizer"), raw.get("pre_tokenizer")) not in pairs, "a pre_tokenizer this tool does not write"),
    ]
    for bad, what in problems:
        if bad:
            raise CheckpointError(f"{where}: not a tokenizer this tool writes: {what}")


def build_tokenizer(texts: Iterable[str], config: DataConfig, length: int | None = None) -> Tokenizer:
    """Train the tokenizer ``[data] tokenizer`` names on ``texts`` (the training split only), each cut by
    :func:`clip_text`.

    Args:
        texts: the training reviews (a sequence when ``config.tokenizer`` is ``"auto"``: a sample is read first).
        config: ``tokenizer``, ``vocab_size`` (including the two specials), ``min_frequency``, ``pre_tokenizer``.
        length: number of texts, for the trainer's bookkeeping.

    Returns:
        A trained :class:`tokenizers.Tokenizer` with ``<pad>`` = 0 and ``<unk>`` = 1.

    Raises:
        ConfigError: a word or character vocabulary of no token, ``min_frequency`` above 1 (no token occurs that
            often), before any training.
        DataError: the same with ``min_frequency`` 1: the texts hold no token (all ``<br />`` or spaces).
    """
    kind = resolved_kind(texts, config)
    tok = _untrained(kind, config)
    specials = [PAD_TOKEN, UNK_TOKEN]
    if kind == "unigram":
        trainer = UnigramTrainer(vocab_size=config.vocab_size, special_tokens=specials + list(BYTE_TOKENS),
                                 unk_token=UNK_TOKEN, show_progress=False)
    elif kind == "bpe":
        trainer = BpeTrainer(vocab_size=config.vocab_size, min_frequency=config.min_frequency,
                             special_tokens=specials + list(BYTE_TOKENS), show_progress=False)
    else:
        trainer = WordLevelTrainer(vocab_size=config.vocab_size, min_frequency=config.min_frequency,
                                   special_tokens=specials, show_progress=False)
    # lazily: a caller may end ``texts`` early to stop (training/pretrain.py), and no second list is held
    clipped = (clip_text(t, config.max_length)[0] for t in texts)
    if kind == "unigram":   # its trainer's time grows faster than its text: the first UNIGRAM_CHARS characters
        clipped, length = first_chars(clipped, UNIGRAM_CHARS), None
    tok.train_from_iterator(clipped, trainer, length=length)
    if kind == "unigram":   # its trainer leaves the model without byte fallback: set it again
        state = json.loads(tok.to_str())
        state["model"]["byte_fallback"] = True
        tok = Tokenizer.from_str(json.dumps(state))
    assert tok.token_to_id(PAD_TOKEN) == PAD_ID and tok.token_to_id(UNK_TOKEN) == UNK_ID
    if tok.get_vocab_size() <= len(specials):   # words or characters: only <pad> and <unk>, every text all <unk>
        _refuse_empty_vocabulary(kind, config.min_frequency)
    return tok


def _refuse_empty_vocabulary(kind: str, min_frequency: int) -> None:
    """Say why a word or character vocabulary came out empty, before a run trains on texts of ``<unk>`` alone.

    Raises:
        ConfigError: ``min_frequency`` above 1.
        DataError: otherwise (the texts hold no token).
    """
    from ..errors import ConfigError, DataError

    unit = "character" if kind == "char" else "token"
    if min_frequency > 1:
        raise ConfigError(f"[data] min_frequency = {min_frequency:,}: no {unit} occurs {min_frequency:,} times in "
                          "the training texts, so the vocabulary would hold none; lower min_frequency")
    raise DataError(f"the training texts hold no {unit} (once <br /> and spaces are removed), so the vocabulary "
                    "would hold none; give texts with words")


def first_chars(texts: Iterable[str], limit: int) -> Iterator[str]:
    """``texts`` up to the one that reaches ``limit`` characters in all (that one included; so at least one)."""
    total = 0
    for text in texts:
        if total >= limit:
            return
        total += len(text)
        yield text


def resolved_kind(texts: Iterable[str], config: DataConfig) -> str:
    """``[data] tokenizer``, with ``"auto"`` resolved on ``texts`` by :func:`~.units.choose_units` (a sequence
    then; an iterable that is not one is read into a list)."""
    if config.tokenizer != "auto":
        return config.tokenizer
    return choose_units(texts if isinstance(texts, Sequence) else list(texts)).kind


def _normalizer(kind: str) -> normalizers.Normalizer:
    """HTML line breaks to a space, NFKC, lowercase; for characters, a run of whitespace to one ``▁``."""
    steps = [normalizers.Replace(Regex(r"<br\s*/?>"), " "), normalizers.NFKC(), normalizers.Lowercase()]
    if kind == "char":
        steps += [normalizers.Strip(), normalizers.Replace(Regex(r"\s+"), SPACE_TOKEN)]
    return normalizers.Sequence(steps)


def _untrained(kind: str, config: DataConfig) -> Tokenizer:
    """The tokenizer of ``kind`` before training: its model, normalizer and pre-tokenizer."""
    if kind == "unigram":
        tok = Tokenizer(Unigram([(PAD_TOKEN, 0.0), (UNK_TOKEN, 0.0)], unk_id=UNK_ID, byte_fallback=True))
    elif kind == "bpe":
        tok = Tokenizer(BPE(unk_token=UNK_TOKEN, byte_fallback=True))
    elif kind in ("word", "char"):
        tok = Tokenizer(WordLevel(unk_token=UNK_TOKEN))
    else:
        raise ValueError(f"unknown tokenizer {kind!r}")
    tok.normalizer = _normalizer(kind)
    if kind == "word":
        tok.pre_tokenizer = pre_tokenizer_for(config.pre_tokenizer)
    elif kind == "char":
        tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")   # each character its own token
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
    return tok


def tokenizer_kind(tok: Tokenizer) -> TokenizerKind:
    """What a (saved) tokenizer reads (:meth:`TokenizerKind.of`)."""
    return TokenizerKind.of(tok)


def save_tokenizer(tok: Tokenizer) -> str:
    """The tokenizer as a JSON string (the ``tokenizer.json`` format)."""
    return tok.to_str()


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Load ``tokenizer.json``.

    Raises:
        CheckpointError: the file is missing or is not a valid tokenizer.
    """
    path = Path(path)
    if not path.is_file():   # tokenizers reports a missing file as a bare Exception
        raise CheckpointError(f"{path}: missing")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: not a valid tokenizer file ({exc})") from None
    return tokenizer_from_str(text, path)


def tokenizer_from_str(text: str, where: str | Path) -> Tokenizer:
    """A tokenizer from its ``tokenizer.json`` text (checked first by :func:`check_structure`); ``where``
    names its origin in errors.

    Raises:
        CheckpointError: ``text`` is not a valid tokenizer, or not of the kind this module writes.
    """
    check_structure(text, where)
    try:
        tok = Tokenizer.from_str(text)
    except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
        raise CheckpointError(f"{where}: not a valid tokenizer file ({str(exc).splitlines()[0][:120]})") from None
    return _check_specials(tok, where)


def _check_specials(tok: Tokenizer, where: str | Path) -> Tokenizer:
    if tok.token_to_id(PAD_TOKEN) != PAD_ID or tok.token_to_id(UNK_TOKEN) != UNK_ID:
        raise CheckpointError(f"{where}: expected {PAD_TOKEN}=0 and {UNK_TOKEN}=1 in the vocabulary")
    return tok


def check_token_ids(tok: Tokenizer, rows: int, where: str | Path) -> Tokenizer:
    """Refuse a tokenizer that can give an id the model has no embedding row for (a crafted
    ``tokenizer.json`` would otherwise fail each forward pass that meets the word).

    Every id ``tok`` can produce (its vocabulary and added tokens, its padding id, its post-processor's
    special tokens) must be below ``rows``, the token embedding's rows (the checkpoint's ``vocab_size``).

    Raises:
        CheckpointError: an id ``>= rows``; the message names ``where`` and the token.
    """
    vocab = tok.get_vocab(with_added_tokens=True)
    word, top = max(vocab.items(), key=lambda item: item[1], default=("", 0))
    if top >= rows:
        raise CheckpointError(f"{where}: token {word[:40]!r} has id {top}, but the model's embedding has {rows} "
                              f"rows (ids 0 to {rows - 1})")
    pad_id = (tok.padding or {}).get("pad_id", PAD_ID)
    special = json.loads(tok.post_processor.__getstate__()) if tok.post_processor is not None else None
    extra = max(pad_id, *_ints(special))
    if extra >= rows:
        raise CheckpointError(f"{where}: its padding or post-processor gives id {extra}, but the model's embedding "
                              f"has {rows} rows (ids 0 to {rows - 1})")
    return tok


def _ints(obj: object) -> list[int]:
    """Every integer in a parsed JSON value (a post-processor's token ids among them); ``[0]`` when none."""
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, list):
        return [i for x in obj for i in _ints(x)] or [0]
    return [obj] if isinstance(obj, int) and not isinstance(obj, bool) else [0]


def truncate(ids: Sequence[int], max_length: int, strategy: str = "head", head_fraction: float = 0.25) -> list[int]:
    """Cut a token-id list to at most ``max_length``.

    ``head`` keeps the first ``max_length`` ids; ``head_tail`` keeps the first
    ``round(max_length * head_fraction)`` and the rest from the end (Sun et al.
    2019, "How to Fine-Tune BERT for Text Classification?", 5.3.1). An empty
    list becomes ``[<unk>]`` so that every review has one real token.
    """
    if not ids:
        return [UNK_ID]
    if len(ids) <= max_length:
        return list(ids)
    if strategy == "head_tail":
        head = round(max_length * head_fraction)
        tail = max_length - head
        return list(ids[:head]) + (list(ids[-tail:]) if tail else [])
    return list(ids[:max_length])


def clip_chars(max_length: int) -> int:
    """Characters :func:`clip_text` keeps from each end of a long text, for ``max_length`` tokens."""
    return CLIP_CHARS_PER_TOKEN * max_length + CLIP_MARGIN_CHARS


def clip_text(text: str, max_length: int) -> tuple[str, int, int]:
    """``text`` cut to what ``max_length`` tokens can come from, before any tokenizer sees it.

    A text longer than ``2 * clip_chars(max_length) + 1`` characters keeps its first and last
    :func:`clip_chars` characters, joined by a space; a shorter one is returned as it is. Its
    ``head`` and ``head_tail`` truncations (:func:`truncate`) come out the same as the whole text's
    unless its ends average more than ``CLIP_CHARS_PER_TOKEN`` characters a token; the tokenizer's
    time and memory are bounded by ``max_length``, not by the text.

    Returns:
        ``(clipped, tail_start, shift)``: a token starting at character ``tail_start`` or later of
        ``clipped`` is at ``shift`` characters further in ``text`` (``shift`` is 0 when uncut).
    """
    keep = clip_chars(max_length)
    if len(text) <= 2 * keep + len(CLIP_JOIN):
        return text, len(text), 0
    tail_start = keep + len(CLIP_JOIN)
    return text[:keep] + CLIP_JOIN + text[-keep:], tail_start, len(text) - keep - tail_start


def clip_texts(texts: Iterable[str], max_length: int) -> list[str]:
    """Each text cut by :func:`clip_text` (the same ``str`` object when it is short enough)."""
    return [clip_text(t, max_length)[0] for t in texts]


def encode_texts(tok: Tokenizer, texts: Sequence[str], config: DataConfig) -> list[list[int]]:
    """Token ids for each text, cut by :func:`clip_text`, marked per ``[data] negation_scope`` (:func:`marked_ids`)
    and truncated per ``config`` (length 1 to ``max_length``)."""
    texts = clip_texts(texts, config.max_length)
    encodings = tok.encode_batch_fast(texts) if hasattr(tok, "encode_batch_fast") else tok.encode_batch(texts)
    rows = (marked_ids(tok, e.ids, config) for e in encodings)
    return [truncate(ids, config.max_length, config.truncation, config.head_fraction) for ids in rows]


def encode_token_ids(tok: Tokenizer, texts: Iterable[str], config: DataConfig) -> TokenIds:
    """:func:`encode_texts` of ``texts``, :data:`ENCODE_ROWS` at a time, kept as :class:`~.token_ids.TokenIds`
    (a temporary file): memory holds one block's texts and ids, whatever the number of texts.

    A text's ids depend on the text alone, unless the tokenizer pads (none this package builds; a crafted
    ``tokenizer.json`` could): such a tokenizer encodes every text in one batch, as :func:`encode_texts` would.
    """
    if tok.padding is not None:
        return TokenIds.from_rows(encode_texts(tok, list(texts), config))
    writer, block = TokenIdsWriter(), []
    for text in texts:
        block.append(text)
        if len(block) == ENCODE_ROWS:
            writer.add(encode_texts(tok, block, config))
            block = []
    if block:
        writer.add(encode_texts(tok, block, config))
    return writer.finish()


def marked_ids(tok: Tokenizer, ids: Sequence[int], config: DataConfig) -> Sequence[int]:
    """A whole tokenization's ids with identity terms as ``<unk>`` (``[data] blind_identity``, :mod:`~.identity`)
    and ``[data] negation_scope``'s marks (:mod:`~.negation`); unchanged with neither."""
    if config.blind_identity:
        ids = blind(ids, identity_ids(tok), UNK_ID)
    if config.negation_scope == "none":
        return ids
    return mark_scope(ids, token_roles(tok), config.negation_scope)


def vocabulary(tok: Tokenizer) -> list[str]:
    """The tokenizer's tokens by id: ``vocabulary(tok)[i]`` is id ``i``'s (``get_vocab()`` is a dict)."""
    words = [""] * tok.get_vocab_size()
    for token, i in tok.get_vocab().items():
        words[i] = token
    return words


def tokens(tok: Tokenizer, text: str, config: DataConfig) -> list[str]:
    """The surface tokens the model sees for ``text`` (after truncation), for display."""
    ids = encode_texts(tok, [text], config)[0]
    return [tok.id_to_token(vocabulary_id(i)) or UNK_TOKEN for i in ids]
