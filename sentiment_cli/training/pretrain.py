"""Pretraining on unlabelled reviews (``sentiment pretrain``), for ``sentiment train --init`` to start from.

Three objectives (``[pretrain] objective``):

``word2vec`` (the default config's) learns the token embedding only, by
skip-gram with negative sampling (Mikolov et al. 2013, "Distributed
Representations of Words and Phrases"; gensim's implementation) over the
reviews' tokens; the encoder starts from a random initialisation as usual.
Each embedding dimension is standardised over the vocabulary to mean 0 and
standard deviation 1, the scale of ``nn.Embedding``'s own initialisation that
the sinusoidal positions are added to.

``mlm`` trains the whole encoder as a masked language model (Devlin et al.
2019, section 3.1): pick ``mask_fraction`` of the real tokens of each review,
replace 80% of them with the mask token, 10% with a random word and leave
10% as they are, and predict the original words from the encoder's states at
those positions. The prediction head is a dense layer, GELU and LayerNorm
followed by the token embedding matrix itself (tied weights, Press & Wolf
2017). The mask token is ``<unk>``: the tokenizer has no other spare id, and
an unknown word is what a masked word looks like to the fine-tuned
classifier anyway. A softmax over the whole 50,000-word vocabulary at ~2,500
masked positions a step costs ~20x the encoder on a CPU, so it runs over a
sampled candidate set instead (sampled softmax, Jean et al. 2015): every word
that is a target somewhere in the batch, plus ``negatives`` words drawn
uniformly from the vocabulary (:mod:`.mlm`).

``electra`` trains the whole encoder as the discriminator of replaced-token
detection (Clark et al. 2020; :mod:`.electra`). ``mlm`` and ``electra`` share
one loop here (:func:`_encoder_pretraining`); each objective is a module whose
call gives one step's loss.

All three build the tokenizer on the pretraining reviews and write an ordinary
checkpoint folder (``config.json``, ``model.safetensors``, ``tokenizer.json``,
``metrics.json`` with ``"kind": "pretrained"``) whose dense head is
untrained; ``sentiment train`` starts from it with ``--init DIR`` (or
``[training] init_from``), keeping its tokenizer and weights.

A stop (SIGINT, SIGTERM) is polled at bounded intervals in every long stage, not only between epochs:
at every review the tokenizer's training reads (:func:`_build_tokenizer_polling`), before each chunk of
:data:`TOKENIZE_CHUNK` reviews while tokenizing, and at every review gensim reads (its vocabulary scan and
each epoch: the corpus ends early, and the cut epoch is not saved).
"""

from __future__ import annotations

import functools
import math
import threading
import time
import zlib
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer
from torch import nn

from . import distributed
from ..data.batching import collate, make_batches
from .callbacks import TrainCallbacks, TrainResult
from .. import objectives
from ..checkpoint import CheckpointRecord, check_writable, write_checkpoint
from ..config import Config
from ..data.splits import PRETRAIN_ALONE_HINT, DataSpec
from ..errors import Interrupted, SentimentError, UsageError
from .budget import Budget
from .interrupts import StopFlag
from ..outputs import check_output_folder
from .lock import output_lock
from ..model.classifier import SentimentClassifier
from .optim import decay_groups, lr_lambda, optimizer_step
from ..runtime import autocast, device_name, resolve_device, seed_everything, versions
from ..data.sources import absolute_source
from ..data.tokenizer import build_tokenizer, encode_texts, save_tokenizer, vocabulary
from .electra import ElectraObjective
from .mlm import FIRST_WORD_ID, MaskedLMObjective
from .run_data import RunData


def pretrain(config: Config, output: str | Path, callbacks: TrainCallbacks | None = None, *,
             stop: StopFlag | None = None, data: RunData | None = None, force: bool = False,
             budget: Budget | None = None) -> TrainResult:
    """Pretrain with ``[pretrain] objective`` and write the result to ``output`` once: at the end, or at a stop
    with the epochs completed by then.

    Reads the ``[model]``, ``[data]`` and ``[pretrain]`` settings, and
    ``seed`` and ``device`` from ``[training]``. The tokenizer is built on the
    pretraining reviews (see :func:`~sentiment_cli.data.splits.load_pretraining_texts`: never the
    validation hold-out or the test split).

    Args:
        config: the run configuration.
        output: checkpoint folder; created if needed; an existing folder of other files only with ``force``
            (:func:`~sentiment_cli.outputs.check_output_folder`).
        callbacks: progress hooks (``on_stage``, ``on_epoch_start``, ``on_step``
            with the masked-word loss and accuracy (mlm only), ``on_epoch_end``).
        stop: polled at every step (mlm) or epoch (word2vec); once set, the
            run stops. The epochs already completed are written; there is no
            resuming a pretraining run.
        data: the source, when a training run has read it already (:class:`~.run_data.RunData` of
            ``[data] source`` made absolute); ``None``: read here.
        budget: the stage's part of the default's time budget (:class:`~.budget.Budget`); no epoch starts that the
            mean epoch so far projects past it, and the first always runs. ``metrics.json``'s
            ``"stopped_by_time"`` then says after which epoch. ``None``: every epoch.

    Returns:
        :class:`~.callbacks.TrainResult` with the folder and its ``metrics.json`` content.

    Raises:
        UsageError: unusable device or output folder, or started under torchrun with several processes.
        FolderInUse: another process holds ``output``'s lock (its pid named).
        DataError: the dataset cannot be loaded.
        Interrupted: ``stop`` was set.
        SentimentError: the loss became NaN or infinite.
    """
    cb = callbacks or TrainCallbacks()
    stop = stop or StopFlag()
    if distributed.from_env().world_size > 1:
        raise UsageError("sentiment pretrain runs in one process; start it without torchrun")
    device = resolve_device(config.training.device)
    output = Path(output)
    check_output_folder(output, force=True, inputs=[(what, path) for what, path in (
        ("the --data", config.data.source), ("[data] unlabelled", config.data.unlabelled)) if path])
    check_writable(output)
    check_output_folder(output, force=force)   # a folder of the user's files only with --force
    with output_lock(output):
        return _pretrain_locked(config, output, cb, stop, device, data, budget)


# Reviews tokenized between two polls of the stop flag (a fraction of a second on one core).
TOKENIZE_CHUNK = 1024


def _pretrain_locked(config: Config, output: Path, cb: TrainCallbacks, stop: StopFlag,
                     device: torch.device, data: RunData | None, budget: Budget | None = None) -> TrainResult:
    """:func:`pretrain`'s work, once it holds ``output``'s lock: the record kept in memory after each epoch,
    written once at the end (or at a stop)."""
    start = time.perf_counter()
    limit = _TimeLimit(budget, config.pretrain.epochs)
    seed_everything(config.training.seed)
    source = absolute_source(config.data.source)
    texts, tokenizer = _texts_and_tokenizer(config, data or RunData(source), cb, stop)
    tokenizer_json = save_tokenizer(tokenizer)
    model = SentimentClassifier.from_config(config, tokenizer.get_vocab_size())
    metrics = _new_metrics(config, model, source, len(texts), device)

    kept: list[CheckpointRecord] = []

    def save_epoch(record: dict) -> None:
        metrics["history"].append(record)
        metrics["wall_time_seconds"] = time.perf_counter() - start
        if limit.ends_after(record["epoch"]):
            metrics["stopped_by_time"] = {"epoch": record["epoch"], "of": config.pretrain.epochs,
                                          "seconds": budget.seconds}
            cb.on_note(f"pretraining ends after epoch {record['epoch']} of {config.pretrain.epochs}: another would "
                       f"end past its {budget.seconds:,.0f} s share of the time budget")
        kept[:] = [CheckpointRecord.of(model, config, tokenizer_json, metrics)]
        cb.on_epoch_end(record)

    check_stop = functools.partial(_check_stop, stop, output, config.pretrain.epochs)
    try:
        if objectives.objective(config.pretrain.objective).step is None:   # its own loop: word2vec's
            _word2vec(config, model, tokenizer, texts, cb, stop, check_stop, save_epoch, limit)
        else:
            cb.on_stage(f"tokenizing {len(texts):,} texts")
            _encoder_pretraining(config, model.to(device), device,
                                 _encode_polling(tokenizer, texts, config, check_stop), cb, check_stop, save_epoch,
                                 limit)
    finally:   # the epochs completed, written once (a stop keeps them)
        if kept:
            write_checkpoint(output, kept[0])
    return TrainResult(output, metrics)


class _TimeLimit:
    """Whether pretraining ends after an epoch: the next one, at the mean epoch's length so far, would end past
    ``budget``; ``None`` never ends it early.

    Args:
        budget: the stage's part of the time budget (its tokenizing counts), or ``None``.
        epochs: ``[pretrain] epochs`` (the last never ends early: it is the end).
    """

    def __init__(self, budget: Budget | None, epochs: int):
        self.budget, self.epochs = budget, epochs
        self.first_epoch_began: float | None = None
        self.ended_after: int | None = None

    def epoch_began(self) -> None:
        if self.first_epoch_began is None:
            self.first_epoch_began = time.perf_counter()

    def ends_after(self, epoch: int) -> bool:
        """Called once at the end of each epoch; ``True`` (and every call after) once no other epoch fits."""
        if self.ended_after is not None:
            return False
        if self.budget is None or epoch >= self.epochs or self.first_epoch_began is None:
            return False
        mean = (time.perf_counter() - self.first_epoch_began) / epoch
        if not self.budget.fits(mean):
            self.ended_after = epoch
            return True
        return False

    @property
    def ended(self) -> bool:
        return self.ended_after is not None


def _texts_and_tokenizer(config: Config, data: RunData, cb: TrainCallbacks,
                         stop: StopFlag) -> tuple[list[str], Tokenizer]:
    """``(texts, tokenizer)``: the pretraining reviews of ``[pretrain] splits`` (never the validation hold-out
    or the test split), and the tokenizer built on them (:func:`_build_tokenizer_polling`).

    Raises:
        DataError: the source cannot be loaded or lacks those splits.
        Interrupted: ``stop`` was set while the tokenizer was being built.
    """
    if not data.loaded:   # else the training run's profile read it
        cb.on_stage(f"loading {data.source}")
    texts = pretraining_texts(config, data)
    cb.on_stage(f"building the tokenizer on {len(texts):,} texts ({config.pretrain.splits})")
    return texts, _build_tokenizer_polling(texts, config, stop)


def pretraining_texts(config: Config, data: RunData) -> list[str]:
    """The texts of ``[pretrain] splits`` pretraining reads (never the validation hold-out or the test split), read
    once by ``data``.

    Raises:
        DataError: the source lacks those splits (the message says what to give instead).
    """
    hint = ("give unlabelled text with --unlabelled PATH, or learn from the labelled texts alone with "
            "--set pretrain.splits=train --set training.distill_reviews=0"   # distillation would stop next
            if config.training.distill_reviews else PRETRAIN_ALONE_HINT)
    return data.pretraining_texts(DataSpec.from_config(config, data.source), config.pretrain.splits, missing_hint=hint)


def _build_tokenizer_polling(texts: list[str], config: Config, stop: StopFlag) -> Tokenizer:
    """``build_tokenizer`` over ``texts``, stopping within a moment of a stop request.

    The ``tokenizers`` library trains in Rust without returning to Python, so no signal handler could run
    meanwhile: it trains in a worker thread, fed the texts (:class:`_UntilStopped`) until ``stop`` is set,
    while this (main) thread waits in short joins, where handlers run.

    Raises:
        Interrupted: ``stop`` was set (the tokenizer, built on part of the texts, is dropped).
    """
    done: dict[str, Any] = {}

    def work() -> None:
        try:
            done["tokenizer"] = build_tokenizer(_UntilStopped(texts, stop), config.data, length=len(texts))
        except BaseException as exc:   # handed to the main thread
            done["error"] = exc

    worker = threading.Thread(target=work, name="build-tokenizer", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
    _check_stop(stop, Path(), 0, 0)
    if "error" in done:
        raise done["error"]
    return done["tokenizer"]


def _new_metrics(config: Config, model: SentimentClassifier, source: str, reviews: int,
                 device: torch.device) -> dict[str, Any]:
    """The ``metrics.json`` of a new pretraining run (``"kind": "pretrained"``), before its first epoch."""
    p, t = config.pretrain, config.training
    return {"kind": "pretrained", "objective": p.objective,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "seed": t.seed,
            "num_parameters": model.num_parameters(),
            "data": {"source": source, "splits": p.splits, "reviews": reviews},
            "config": config.to_dict(), "history": [], "device": str(device),
            "device_name": device_name(device), "versions": versions(), "wall_time_seconds": None}


def _encode_polling(tokenizer: Tokenizer, texts: list[str], config: Config, check_stop) -> list[list[int]]:
    """``encode_texts`` over ``texts``, :data:`TOKENIZE_CHUNK` at a time, with ``check_stop(0)`` before each chunk.

    Raises:
        Interrupted: a stop was requested (no epoch was saved yet).
    """
    ids: list[list[int]] = []
    for begin in range(0, len(texts), TOKENIZE_CHUNK):
        check_stop(0)
        ids += encode_texts(tokenizer, texts[begin:begin + TOKENIZE_CHUNK], config.data)
    return ids


def _check_stop(stop: StopFlag, output: Path, epochs: int, epoch: int) -> None:
    """Polled during ``epoch`` (every step with mlm, every review gensim reads with word2vec); ``epoch`` 0:
    before the first one (tokenizing, gensim's vocabulary scan).

    Raises:
        Interrupted: ``stop`` is set; the epochs before ``epoch`` stay saved in ``output``.
    """
    if stop.requested and epoch == 0:
        raise Interrupted(f"pretraining interrupted by {stop.reason} before its first epoch; no epoch was saved "
                          "(a pretraining run cannot be resumed)", exit_code=stop.exit_code)
    if stop.requested:
        done = f"epoch {epoch - 1} is saved in {output}" if epoch > 1 else "no epoch was saved"
        raise Interrupted(f"pretraining interrupted by {stop.reason} during epoch {epoch} of {epochs}; "
                          f"{done} (a pretraining run cannot be resumed)", exit_code=stop.exit_code)


def _word2vec(config: Config, model: SentimentClassifier, tokenizer, texts: list[str], cb: TrainCallbacks,
              stop: StopFlag, check_stop, save_epoch, limit: "_TimeLimit") -> None:
    """Skip-gram word2vec over whole reviews (no truncation) into ``model.token_embedding``.

    ``stop`` is polled before each chunk of reviews tokenized and at every review gensim reads
    (:class:`_UntilStopped`); ``check_stop`` then raises, before an epoch cut short is saved. Once ``limit``
    ends the stage after an epoch, the corpus reads empty, so gensim's remaining epochs pass at once, unsaved.
    """
    from gensim.models import Word2Vec
    from gensim.models.callbacks import CallbackAny2Vec

    p, t = config.pretrain, config.training
    cb.on_stage(f"tokenizing {len(texts):,} texts")
    vocab = tokenizer.get_vocab()
    sentences, words = _word_lists(tokenizer, texts, check_stop)

    class Epochs(CallbackAny2Vec):
        def __init__(self):
            self.epoch, self.began = 0, 0.0

        def on_train_begin(self, w2v):
            check_stop(0)   # a stop cut the vocabulary scan short

        def on_epoch_begin(self, w2v):
            self.epoch += 1
            check_stop(self.epoch)
            if limit.ended:
                return
            limit.epoch_began()
            cb.on_epoch_start(self.epoch, p.epochs, len(sentences))
            self.began = time.perf_counter()

        def on_epoch_end(self, w2v):
            check_stop(self.epoch)   # a stop ended the epoch early (_UntilStopped): do not save it
            if limit.ended:
                return
            seconds = time.perf_counter() - self.began
            _embed(model, w2v.wv, vocab, words)
            save_epoch({"epoch": self.epoch, "train_seconds": seconds,
                        "train_examples_per_second": len(sentences) / seconds})

    cb.on_stage(f"word2vec on {sum(map(len, sentences)):,} tokens")
    # Every word of the tokenizer's vocabulary gets a vector (min_count=1 over the same reviews it was
    # built from). One worker thread and a stable hash for the initial vectors (gensim's default is
    # Python's per-process salted hash): the same seed gives the same vectors, run after run.
    try:
        Word2Vec(_UntilStopped(sentences, stop, limit), vector_size=config.model.d_model, window=p.window,
                 sample=p.subsample, min_count=1, sg=1, negative=5, epochs=p.epochs, workers=1, seed=t.seed,
                 hashfxn=_stable_hash, callbacks=[Epochs()])
    except RuntimeError:
        check_stop(0)   # a stop at the very start of the vocabulary scan leaves gensim no vocabulary to train
        raise


def _word_lists(tokenizer, texts: list[str], check_stop) -> tuple[list[list[str]], list[str]]:
    """``(sentences, words)``: each review as its list of words, as gensim wants them, and the vocabulary's words
    in id order from :data:`~.mlm.FIRST_WORD_ID` (``get_vocab()``'s order changes from process to process).

    A chunk of :data:`TOKENIZE_CHUNK` reviews at a time, ``check_stop(0)`` before each, each word one shared
    str, rather than every review's ``tokenizers.Encoding`` and a fresh str per token at once: over tens of
    thousands of reviews those would hold gigabytes that the word lists do not need.
    """
    word_of = vocabulary(tokenizer)
    sentences = []
    for begin in range(0, len(texts), TOKENIZE_CHUNK):
        check_stop(0)
        sentences += [[word_of[i] for i in e.ids] for e in tokenizer.encode_batch(texts[begin:begin + TOKENIZE_CHUNK])]
    return sentences, word_of[FIRST_WORD_ID:]


class _UntilStopped:
    """Reviews (or their word lists), read again on every pass (gensim's vocabulary scan, then each epoch;
    the tokenizer's training), ending early once ``stop`` is set.

    gensim reads the corpus in a producer thread and trains in worker threads, and its batch callbacks
    run there, where an exception would leave the others waiting: ending the corpus lets gensim finish
    the pass by itself within a batch or two, and the epoch callbacks (in the calling thread) raise.
    """

    def __init__(self, sentences: list, stop: StopFlag, limit: "_TimeLimit | None" = None):
        self.sentences, self.stop, self.limit = sentences, stop, limit

    def __len__(self) -> int:
        return len(self.sentences)

    def __iter__(self):
        if self.limit is not None and self.limit.ended:
            return
        for words in self.sentences:
            if self.stop.requested:
                return
            yield words


def _stable_hash(text: str) -> int:
    """A hash of ``text`` that is the same in every process (unlike ``hash``)."""
    return zlib.crc32(text.encode("utf-8"))


def _embed(model: SentimentClassifier, vectors, vocab: dict[str, int], words: list[str]) -> None:
    """Copy word vectors into the token embedding, each dimension standardised over the vocabulary.

    The mean and standard deviation are taken in float64, so the result does not depend on the
    order of ``words``: in float32 the sums' rounding did, and the same vectors came out up to an
    ulp apart (~1e-6) in about half the entries from one process to the next.
    """
    known = [w for w in words if w in vectors.key_to_index]
    rows = torch.tensor([vocab[w] for w in known])
    values = vectors[known].astype(np.float64)                                    # (n_words, d_model)
    values = (values - values.mean(0)) / np.maximum(values.std(0, ddof=1), 1e-6)
    with torch.no_grad():
        model.token_embedding.weight[rows] = torch.from_numpy(values).float()


def _objective_for(config: Config, model: SentimentClassifier, generator: torch.Generator) -> nn.Module:
    """The step of ``[pretrain] objective`` (one that trains the whole encoder: its registry record's ``step``,
    ``objectives/``): a module whose call gives ``(loss, tally)``."""
    return objectives.objective(config.pretrain.objective).step_class().for_run(model, config, generator)


def _encoder_pretraining(config: Config, model: SentimentClassifier, device: torch.device, ids: list[list[int]],
                         cb: TrainCallbacks, check_stop, save_epoch, limit: "_TimeLimit") -> None:
    """The loop of the objectives that train the whole encoder (mlm, electra; see the module docstring)."""
    p, t = config.pretrain, config.training
    ids = [x for x in ids if x]
    generator = torch.Generator().manual_seed(t.seed)
    objective = _objective_for(config, model, generator).to(device)
    both = nn.ModuleList([model, objective])   # .parameters() lists the shared embedding once
    optimizer = torch.optim.AdamW(decay_groups(both.parameters(), p.weight_decay), lr=p.lr)
    total_steps = math.ceil(len(ids) / p.batch_size) * p.epochs
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda("cosine", p.warmup_fraction, total_steps))
    lengths = np.asarray([len(x) for x in ids])

    for epoch in range(1, p.epochs + 1):
        if limit.ended:
            break
        limit.epoch_began()
        both.train()
        cb.on_epoch_start(epoch, p.epochs, len(ids))
        epoch_start = time.perf_counter()
        tally: dict[str, float] = {}
        seen = 0
        for batch in make_batches(lengths, p.batch_size, shuffle=True, seed=t.seed * 100_003 + epoch):
            check_stop(epoch)
            input_ids, padding_mask = collate(ids, batch)
            with autocast(device, t.autocast_bf16):
                loss, step = objective(model, input_ids, padding_mask)
            if loss is None:
                continue
            if not torch.isfinite(loss):
                raise SentimentError(f"pretraining diverged at epoch {epoch} (loss {loss.item()}); "
                                     "lower [pretrain] lr")
            loss.backward()
            optimizer_step(optimizer, scheduler, both.parameters(), p.grad_clip)
            tally = {k: tally.get(k, 0) + v for k, v in step.items()}
            seen += len(batch)
            cb.on_step(len(batch), tally["loss_sum"] / tally["count"], tally["correct"] / tally["count"],
                       seen / (time.perf_counter() - epoch_start))
        seconds = time.perf_counter() - epoch_start
        save_epoch({"epoch": epoch, **objective.record(tally), "train_seconds": seconds,
                    "train_examples_per_second": seen / seconds, "learning_rate": scheduler.get_last_lr()[0]})


# ----------------------------------------------------------------------------- starting a run from it
