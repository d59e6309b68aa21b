"""A fit's setup: the reviews and tokenizer, the model, the n-gram score, the optimizer and schedule, the loop state.

:func:`setup` builds, in this order (it decides what the seeded RNGs draw): the reviews
(:class:`Reviews`: splits from the run's :class:`~.run_data.RunData`, the tokenizer, the token ids),
the model, the n-gram score (``ngram/fit.py``) and distillation's targets (``distill.py``), the class weights
(``imbalance.py``),
the optimizer and schedule, then the loop state: a new run's (``_fresh_state``) or the saved one
(``resume.py``). The epochs (``loop.py``) then work with the :class:`Fit` it returns.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer

from . import augment, distill, distributed, imbalance, lexicon
from ..checkpoint import Checkpoint, CheckpointRecord, load_weights, read_record
from ..config import Config
from ..data.labels import LABELS
from ..data.splits import DataSpec, Split
from ..data.token_ids import TokenIds
from ..data.tokenizer import tokenizer_from_str, vocabulary
from ..model.classifier import SentimentClassifier
from ..model.memory import check_training_memory
from ..ngram.fit import FittedScore, check_fit_size, fit_ngram_score
from ..ngram.report import REPORT_KEY
from ..runtime import device_name, memory_bytes, seed_everything, versions
from .context import RunContext
from .optim import lr_lambda, make_optimizer
from .pretrained import pretrained_weights
from .resume import check_same_data, resumed_state
from .run_data import RunData
from .state import STATE_DIR, TOKENIZER_FILE, LoopState, TrainerState, state_path


@dataclass
class Reviews:
    """The run's reviews: the labelled splits, the tokenizer, and the token ids it trains and validates on.

    Attributes:
        train, validation: the labelled splits (``validation`` is empty with ``validation_fraction`` 0).
        tokenizer, tokenizer_json: the run's tokenizer, and its ``tokenizer.json`` text (saved with every epoch).
        train_ids: the training reviews' token ids (:class:`~sentiment_cli.data.token_ids.TokenIds`: in a
            temporary file, read a batch at a time); with distillation, the unlabelled reviews' follow (from
            ``num_labelled`` on).
        train_labels: ``(num_labelled,)`` int64 label ids of the training reviews.
        val_ids: the validation reviews' token ids, on rank 0 only (it validates; other ranks: empty).
        lengths: ``(len(train_ids),)`` int64 token counts, for length-bucketed batches.
    """

    train: Split
    validation: Split
    tokenizer: Tokenizer
    tokenizer_json: str
    train_ids: TokenIds
    train_labels: torch.Tensor
    val_ids: TokenIds
    lexicon: int = 0     # one-word lexicon rows after the user's rows of ``train`` (training/lexicon.py)
    augmented: int = 0   # pairs of rule-negated sentences after them, at the end of ``train`` (training/augment.py)
    lengths: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.lengths = self.train_ids.lengths if isinstance(self.train_ids, TokenIds) else \
            np.asarray([len(x) for x in self.train_ids], dtype=np.int64)

    @property
    def num_labelled(self) -> int:
        """How many of ``train_ids`` are labelled reviews (the training split's)."""
        return len(self.train)

    @property
    def added_rows(self) -> int:
        """How many rows at the end of ``train`` are not the user's: the rule-negated sentences and the lexicon's
        words; they teach the encoder only."""
        return 2 * self.augmented + self.lexicon

    @property
    def labels(self) -> tuple[str, ...]:
        """The label names, in label-id order."""
        return self.train.label_names

    @property
    def validated(self) -> bool:
        """Whether the run has a validation split at all (``validation_fraction`` > 0)."""
        return bool(len(self.validation))


@dataclass
class Fit:
    """What every epoch of one run works with, set up once by :func:`setup`.

    Attributes:
        ctx, data: the run's context and its reviews.
        model: the classifier (saving and validation use it).
        net: ``model``, or its ``DistributedDataParallel`` wrapper under torchrun (forward and backward
            go through it).
        ngram: the fitted n-gram score, or ``None`` without one (``ngram/fit.py``).
        distillation: the soft targets and loss weights of distillation, or ``None`` without it.
        class_weights: ``(num_classes,)`` float32 loss weights by class (``[training] class_weight =
            "balanced"``, ``imbalance.py``), or ``None``.
        state: where the run stands (epochs done, best so far, ``metrics.json``).
        start, wall_before: when this process started the run (``time.perf_counter``), and the wall
            time of the run's earlier sessions (resumed runs), in seconds.
        step_budget: the optimizer steps the learning-rate schedule was last fitted to by a time budget (the
            search's trials, ``loop.py``), or ``None``: the run's own schedule over its epochs.
        kept: the kept epoch's checkpoint record (rank 0; ``None`` before an epoch is kept): the post-fit steps
            start from it (``run.py``).
    """

    ctx: RunContext
    data: Reviews
    model: SentimentClassifier
    net: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    ngram: FittedScore | None
    distillation: distill.Distillation | None
    class_weights: torch.Tensor | None
    state: LoopState
    start: float
    wall_before: float
    step_budget: int | None = None   # the step budget the schedule was last fitted to (``loop.py``), if any
    kept: CheckpointRecord | None = None

    def wall_time(self) -> float:
        """Seconds the run has taken so far, earlier sessions included."""
        return self.wall_before + time.perf_counter() - self.start


def setup(ctx: RunContext, run_data: RunData, saved: TrainerState | None, pretrained: Checkpoint | None) -> Fit:
    """Seed, then data and tokenizer, model, n-gram score, optimizer and schedule, and the loop state.

    A fresh run leaves an older run's trainer state in ``ctx.output`` until it saves its own first epoch (a run
    that fails before then loses nothing); a resumed one (``saved``) restores weights, optimizer, scheduler, RNG
    states and progress instead of initialising them.

    Raises:
        DataError, CheckpointError: as :func:`~.run.train` and :func:`~.run.resume`.
    """
    t = ctx.config.training
    start = time.perf_counter()
    seed_everything(t.seed)
    data = _load_data(ctx, run_data, saved, pretrained)
    check_fit_size(ctx.config, len(data.labels))   # before the model holds the n-gram score's weights
    model = _build_model(ctx, data, saved, pretrained)
    ngram, distillation = _fit_ngram(ctx, run_data, model, data)
    if distillation is not None:   # the unlabelled reviews follow the labelled ones
        data = dataclasses.replace(data, train_ids=data.train_ids + distillation.ids)
    class_weights = imbalance.class_weights(data.train.labels, len(data.labels), t.class_weight, ctx.policy.fit)
    optimizer, scheduler = _optimizer_and_schedule(ctx, model, data.num_labelled)
    kept = _kept(ctx, saved)   # before the saved RNG states are restored: loading must not move them
    if saved is not None:
        state = resumed_state(ctx, saved, optimizer, scheduler, data.validated)
    else:
        if ctx.info.enabled:
            torch.manual_seed(t.seed + ctx.info.rank)   # each rank its own dropout masks
        state = _fresh_state(ctx.config, model, data, pretrained, ngram, distillation,
                             imbalance.weights_report(class_weights, data.labels))
        if ctx.data_rules:
            state.metrics["data_rules"] = ctx.data_rules
    state.metrics.update({"device": str(ctx.device), "device_name": device_name(ctx.device),
                          "world_size": ctx.info.world_size, "versions": versions(), "config": ctx.config.to_dict()})
    net = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None) if ctx.info.enabled else model
    return Fit(ctx=ctx, data=data, model=model, net=net, optimizer=optimizer, scheduler=scheduler, ngram=ngram,
                distillation=distillation, class_weights=class_weights, state=state, start=start,
                wall_before=state.metrics.get("wall_time_seconds") or 0.0, kept=kept)


def _kept(ctx: RunContext, saved: TrainerState | None) -> CheckpointRecord | None:
    """A resumed run's kept epoch (rank 0): the trainer state's kept weights (or, from a state saved before it kept
    them, the folder's), with the run's config and no post-fit part yet.

    Raises:
        CheckpointError: the folder's checkpoint is damaged.
    """
    if saved is None or not ctx.info.is_main:
        return None
    if saved.kept is not None:
        metrics = saved.progress.get("metrics") or {}
        labels = tuple((metrics.get("data") or {}).get("labels") or LABELS)
        return CheckpointRecord(ctx.config, saved.kept, saved.vocab_size, saved.tokenizer_json, metrics, labels)
    return dataclasses.replace(read_record(ctx.output), config=ctx.config, temperature=None, decision=None)


def _load_data(ctx: RunContext, run_data: RunData, saved: TrainerState | None,
               pretrained: Checkpoint | None) -> Reviews:
    """Load the splits, take the run's tokenizer and tokenize them.

    The tokenizer is the saved run's, the pretrained folder's, or one built on the training split (by
    rank 0, sent to the others).

    Raises:
        DataError: the dataset cannot be loaded, or (resuming) it changed since the run started.
    """
    config, info = ctx.config, ctx.info
    if not run_data.loaded:   # else the default's profile read it
        ctx.cb.on_stage(f"loading {config.data.source}")
    with distributed.main_first(info):   # rank 0 fills the datasets cache, then the others read it
        train_split, val_split = run_data.splits(DataSpec.from_config(config))
    if train_split.reading and not ctx.data_rules and info.is_main:   # the default's rules said it already
        ctx.cb.on_note(train_split.reading)
    train_split, lexicon = _lexicon(ctx, run_data, train_split)   # read on the user's rows alone
    train_split, augmented = _augmented(ctx, run_data, train_split)
    if saved is not None:
        tokenizer_json = saved.tokenizer_json
        check_same_data(saved, train_split, val_split, config.data.source, 2 * augmented + lexicon)
    elif pretrained is not None:
        tokenizer_json = pretrained.tokenizer.to_str()
    else:
        built = run_data.tokenizer_json(train_split, config.data, ctx.cb.on_stage) if info.is_main else ""
        tokenizer_json = distributed.broadcast_bytes(info, built.encode(), ctx.device).decode()
    tokenizer = tokenizer_from_str(tokenizer_json, ctx.output / STATE_DIR / TOKENIZER_FILE)
    ctx.cb.on_stage("tokenizing")
    return Reviews(train=train_split, validation=val_split, tokenizer=tokenizer, tokenizer_json=tokenizer_json,
                 train_ids=run_data.ids(tokenizer, train_split.texts, config.data),
                 val_ids=run_data.ids(tokenizer, val_split.texts, config.data) if info.is_main else
                 TokenIds.from_rows([]),
                 train_labels=train_targets(train_split), augmented=augmented, lexicon=lexicon)


def train_targets(split: Split) -> torch.Tensor:
    """The training labels as the loss reads them: ``(rows,)`` int64 label ids, or ``(rows, num_labels)``
    float32 0/1 with several labels per text."""
    if split.multi_label:
        return torch.as_tensor(np.asarray(split.labels), dtype=torch.float32)
    return torch.tensor(split.labels, dtype=torch.long)


def _augmented(ctx: RunContext, run_data: RunData, train_split: Split) -> tuple[Split, int]:
    """The training split with ``[training] negation_augment``'s rule-negated sentence pairs (``augment.py``),
    and how many were added; a note when the labels are not two-class sentiment's."""
    pairs = ctx.config.training.negation_augment
    if not pairs:
        return train_split, 0
    if augment.polar_labels(train_split.label_names) is None:
        ctx.cb.on_note(f"negation_augment: the labels ({', '.join(train_split.label_names[:20])}) are not "
                       "negative/positive; no sentence is negated")
        return train_split, 0
    return run_data.shared(("negation_augment", train_split.fingerprint(), pairs), lambda: _negated(ctx, train_split))


def _lexicon(ctx: RunContext, run_data: RunData, train_split: Split) -> tuple[Split, int]:
    """The training split with ``[training] lexicon_prior``'s one-word rows (``lexicon.py``), and how many were
    added; a note saying why (the labels' ROC AUC against VADER's word scores)."""
    rows = ctx.config.training.lexicon_prior
    if not rows:
        return train_split, 0
    split, added, reason = run_data.shared(("lexicon_prior", train_split.fingerprint(), rows),
                                           lambda: lexicon.lexicon_rows(train_split, rows, ctx.policy.fit))
    repeats = ctx.policy.fit.lexicon_repeats
    ctx.cb.on_note(f"lexicon_prior: {reason}; {added // repeats:,} of VADER's words join, {repeats} one-word rows "
                   "each" if added else
                   f"lexicon_prior: {reason}; no word joins")
    return split, added


def _negated(ctx: RunContext, train_split: Split) -> tuple[Split, int]:
    pairs = ctx.config.training.negation_augment
    ctx.cb.on_stage(f"negating up to {pairs:,} training sentences by rule (augmentation)")
    return augment.augment(train_split, pairs, ctx.policy.fit.augment_min_reviews)


def _build_model(ctx: RunContext, data: Reviews, saved: TrainerState | None,
                 pretrained: Checkpoint | None) -> SentimentClassifier:
    """The classifier, freshly initialised, then given the saved run's weights or the pretrained folder's.

    Raises:
        CheckpointError: the saved weights do not fit the model.
        ConfigError: training it would need more memory than there is (``model/memory.py``).
    """
    vocab, longest = data.tokenizer.get_vocab_size(), int(data.lengths.max(initial=1))   # before any allocation:
    check_training_memory(ctx.config, vocab, len(data.labels), *memory_bytes(ctx.device), seq_len=longest)
    model = SentimentClassifier.from_config(ctx.config, vocab, len(data.labels))
    if saved is not None:
        load_weights(model, saved.model, saved.tensors_path or state_path(ctx.output), against="state.json's config")
        return model
    if pretrained is not None:
        own = model.state_dict()
        model.load_state_dict({**own, **pretrained_weights(pretrained, like=own)})
    if model.ngram_score is not None:   # its word pieces, with [model] ngram_word_chars
        model.ngram_score.set_vocabulary(vocabulary(data.tokenizer))
    return model


def _fit_ngram(ctx: RunContext, run_data: RunData, model: SentimentClassifier,
               data: Reviews) -> tuple[FittedScore | None, distill.Distillation | None]:
    """``(score, distillation)``: the n-gram score fitted on the training split's reviews (``ngram/fit.py``;
    not on ``negation_augment``'s sentences: on dev they cost the score alone 0.9 point of IMDB accuracy), and
    distillation's unlabelled reviews with their soft targets (``training/distill.py``); each ``None`` when
    the run has none.

    Raises:
        DataError: no or too few unlabelled reviews for distillation.
    """
    reviews = data.num_labelled - data.added_rows   # the rule-negated sentences and lexicon words teach the encoder only
    c, t = ctx.config, ctx.config.training

    def fit() -> tuple[FittedScore | None, dict[str, Any] | None]:
        fitted = fit_ngram_score(c, model.ngram_score, len(data.labels), data.train_ids[:reviews],
                                 data.train.labels[:reviews], data.val_ids, data.validation.labels, ctx.cb.on_stage,
                                 cache=run_data.ngram_fit)   # the search's n-gram stage may have made it
        if fitted is None or fitted.score is not model.ngram_score:   # none, or a stand-alone teacher: kept whole
            return fitted, None
        return fitted, {"score": copy.deepcopy(fitted.score)}   # weights, idf, intercepts, form, as fitted

    # computed once per run for the same rows and settings (the search's trials share it: issue 54)
    key = ("ngram fit", data.tokenizer_json, len(data.labels), reviews, data.train.fingerprint(), len(data.validation),
           c.model.ngram_buckets, c.model.ngram_fit, c.model.ngram_c, c.model.ngram_max_n, c.model.ngram_weighting,
           c.model.ngram_word_chars, c.model.ngram_intercept, t.class_weight, t.ngram_residual, t.seed,
           bool(t.distill_reviews), c.data.max_length, c.data.truncation, c.data.head_fraction, c.data.negation_scope,
           c.data.blind_identity)
    earlier = run_data.has_shared(key)
    fitted, weights = run_data.shared(key, fit)
    if weights is not None and earlier:   # kept from an earlier trial: this model's copy
        ctx.cb.on_stage("the n-gram score: the fit made earlier in this run, on the same rows")
        model.ngram_score.copy_fit(weights["score"])
        fitted = dataclasses.replace(fitted, score=model.ngram_score, report=dict(fitted.report))
    teacher_key = ("distillation", key, t.distill_reviews, t.distill_weight, t.label_smoothing)
    return fitted, run_data.shared(teacher_key, lambda: distill.distillation(c, run_data, data.tokenizer, fitted,
                                                                             data.train.labels, ctx.cb))


def _optimizer_and_schedule(ctx: RunContext, model: SentimentClassifier,
                            num_labelled: int) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """Move the model to the device; AdamW over it, and the learning-rate schedule over every step of the run.

    An epoch trains on ``num_labelled`` reviews, plus ``distill_reviews`` unlabelled ones with distillation,
    sharded over the ranks in batches of :attr:`RunContext.local_batch`.
    """
    t = ctx.config.training
    model.to(ctx.device)
    optimizer = make_optimizer(model, ctx.config)
    per_epoch = num_labelled + t.distill_reviews   # distill_reviews is 0 without distillation
    steps_per_epoch = math.ceil(math.ceil(per_epoch / ctx.info.world_size) / ctx.local_batch)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(t.schedule, t.warmup_fraction,
                                                                       steps_per_epoch * t.epochs))
    return optimizer, scheduler


def _fresh_state(config: Config, model: SentimentClassifier, data: Reviews, pretrained: Checkpoint | None,
                 ngram: FittedScore | None, distillation: distill.Distillation | None,
                 class_weights: dict[str, float] | None) -> LoopState:
    """The loop state of a new run: no epoch yet, and the metrics that describe the run (with the n-gram
    score's report ``ngram_score``, distillation's ``distillation`` and the ``class_weights`` by label name,
    when the run has them)."""
    t, train_split, val_split = config.training, data.train, data.validation
    state = LoopState(metrics={
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "seed": t.seed,
        "num_parameters": model.num_parameters(),
        "data": {"source": config.data.source, "train_examples": len(train_split) - data.added_rows,
                 "validation_examples": len(val_split), "fingerprint": train_split.fingerprint(),
                 "negation_augment": data.augmented, "lexicon_prior": data.lexicon,
                 "labels": list(train_split.label_names), **_multi_label_facts(train_split),
                 "class_counts": {"train": train_split.class_counts(), "validation": val_split.class_counts()},
                 "validation_from": val_split.where if val_split.where != train_split.where else None},
        "config": config.to_dict(),
        "pretrained": None if pretrained is None else {
            "from": str(Path(t.init_from).resolve()), "epochs": len(pretrained.metrics.get("history", [])),
            "wall_time_seconds": pretrained.metrics.get("wall_time_seconds"),
            "made_by_this_run": pretrained.metrics.get("made_by_this_run", False),
            "reviews": pretrained.metrics.get("data", {}).get("reviews")},
        "history": [], "best_epoch": None, "best_validation_accuracy": None, "best_validation_f1_macro": None,
        "stopped_early": False, "wall_time_seconds": None,
    })
    if ngram is not None:
        state.metrics[REPORT_KEY] = ngram.report
    if distillation is not None:
        state.metrics["distillation"] = distillation.report
    if class_weights is not None:
        state.metrics["class_weights"] = class_weights
    return state


def _multi_label_facts(train_split: Split) -> dict[str, Any]:
    """``metrics.json``'s data facts of several labels per text: ``multi_label``, how the labels were read, and
    the training texts without a label (none for single-label data)."""
    if not train_split.multi_label:
        return {}
    return {"multi_label": True, "reading": train_split.reading,
            "unlabelled_rows": train_split.unlabelled_rows()}
