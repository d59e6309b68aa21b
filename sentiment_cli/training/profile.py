"""What the default's data rules read of a labelled source: :class:`Profile` (rows, classes, token lengths, a dev
split, unlabelled text, the units ``[data] tokenizer = "auto"`` reads), read once by :func:`read_profile`.

``auto.py``'s rules take their choices from it; the sample sizes and the quantile it reads are the
:class:`~.policy.RulesPolicy`'s.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import numpy as np

from ..config import Config
from ..data.labels import imbalance
from ..data.splits import DataSpec
from ..data.tokenizer import SPACE_TOKEN, build_tokenizer, first_chars, pre_tokenizer_for
from ..data.tokenizer_kind import TokenizerKind
from ..data.units import Units, choose_units, distinct_char_ngrams
from .policy import DEFAULT, RulesPolicy
from .run_data import RunData

@dataclass(frozen=True)
class Profile:
    """What the rules read of a source.

    Attributes:
        train_rows: labelled training rows (the whole ``train`` split).
        class_counts: rows per class of ``train``, in label order.
        has_validation: the source has a ``validation`` (``dev``) split of its own.
        unlabelled: unlabelled texts available (the source's ``unsupervised`` split and ``[data] unlabelled``).
        length_quantile: :attr:`~.policy.RulesPolicy.length_quantile` of the token counts (pre-tokenizer words) of the training
            texts, or of the dev texts when those are longer.
        tokens: the training texts' tokens, estimated from the same sample.
        length_ratio: the dev texts' median token count over the training texts' (1 without a dev split).
        labels: the label names, in id order.
    """

    train_rows: int
    class_counts: tuple[int, ...]
    has_validation: bool
    unlabelled: int
    length_quantile: int
    tokens: int = 0
    length_ratio: float = 1.0
    notes: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    reading: str = ""   # how several labels per text were read (data/multilabel.py), "" for one label per text
    units: Units | None = None   # [data] tokenizer = "auto" resolved on the training texts (data/units.py); None: set
    char_ngrams: int = 0   # with character tokens, the training texts' distinct character 1-char_max_n-grams

    @property
    def imbalance(self) -> float:
        """Largest class over smallest (``inf`` when a class has no rows): :func:`imbalance`."""
        return imbalance(self.class_counts)


def read_profile(config: Config, data: RunData | None = None, rules: RulesPolicy = DEFAULT.rules) -> Profile:
    """Read ``config``'s source for the rules: its training split (all of it), a dev split, unlabelled text.

    ``data``: the run's source, read once (:class:`~.run_data.RunData`; ``None``: read here); the pretraining
    stage and the fit take their parts from the same object. ``rules``: the sample sizes and quantile read.

    Raises:
        DataError, UsageError, ConfigError: the source cannot be loaded or its data is unusable (as
            :func:`~sentiment_cli.data.splits.load_train_validation`).
    """
    spec = DataSpec.from_config(config)
    data = data or RunData(spec.source)
    src = data.src
    train, _ = data.splits(dataclasses.replace(spec, validation_fraction=0.0, max_length=0, unlabelled=""))
    found = data.unlabelled(spec)
    counts = tuple(train.class_counts().values())
    units = choose_units(train.texts, spec.seed) if config.data.tokenizer == "auto" else None
    kind = TokenizerKind(units.kind if units else config.data.tokenizer)
    lengths = _token_counts(train.texts, config, spec.seed, kind, rules)
    quantile, ratio = np.quantile(lengths, rules.length_quantile), 1.0
    if "validation" in src.splits:   # what the model will read may be longer than what it learns from (phrases)
        _, dev = data.splits(dataclasses.replace(spec, validation_fraction=0.1, max_length=0, unlabelled=""))
        dev_lengths = _token_counts(dev.texts, config, spec.seed, kind, rules)
        quantile = max(quantile, np.quantile(dev_lengths, rules.length_quantile))
        ratio = float(np.median(dev_lengths) / max(1.0, np.median(lengths)))
    return Profile(train_rows=len(train), class_counts=counts, has_validation="validation" in src.splits,
                   unlabelled=len(found.texts) if found else 0, length_quantile=int(np.ceil(quantile)),
                   tokens=int(lengths.mean() * len(train)), length_ratio=ratio,
                   notes=tuple(found.notes) if found else (), labels=tuple(train.label_names),
                   reading=train.reading, units=units,
                   char_ngrams=distinct_char_ngrams(train.texts, max(rules.char_max_n, config.model.ngram_max_n),
                                                    config.data.max_length) if kind is TokenizerKind.CHAR else 0)


def _token_counts(texts: list[str], config: Config, seed: int, kind: TokenizerKind,
                  rules: RulesPolicy) -> np.ndarray:
    """Token counts of up to :attr:`~.policy.RulesPolicy.length_sample` texts, a seeded draw: characters (a run of
    whitespace one) with character tokens; subwords with a subword tokenizer, as one trained on the first of them up
    to :attr:`~.policy.RulesPolicy.subword_sample_chars` characters cuts them (seconds; a little finer than the
    run's, trained on more text); else pre-tokenizer words."""
    rows = np.random.default_rng(seed).permutation(len(texts))[:rules.length_sample]
    cleaned = [re.sub(r"<br\s*/?>", " ", texts[i][:200_000]) for i in rows]
    if kind is TokenizerKind.CHAR:
        return np.asarray([len(re.sub(r"\s+", SPACE_TOKEN, t.strip())) for t in cleaned])
    if kind.subword:
        vocab = config.data.vocab_size if config.data.tokenizer == kind else rules.subword_vocab
        data = dataclasses.replace(config.data, tokenizer=kind, vocab_size=vocab)
        tok = build_tokenizer(list(first_chars(cleaned, rules.subword_sample_chars)), data)
        return np.asarray([len(e.ids) for e in tok.encode_batch(cleaned)])
    pre = pre_tokenizer_for(config.data.pre_tokenizer)
    return np.asarray([len(pre.pre_tokenize_str(t)) for t in cleaned])
