"""``sentiment check``'s library call: a checkpoint, a suite (the built-in one by default) -> the report.

The report is ``--json``'s object (``docs/check.md``): the suite, the half, the checkpoint, per test, per
capability and overall failure rates; the rows are ``--output``'s table, one per scored text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .check import LabelMismatch, resolve_labels, run_check, summary
from .suite import BUILTIN_SOURCE, Suite, SuiteError, builtin_suite, load_suite


def suite_for(path: str | Path | None) -> Suite:
    """The suite at ``path``, or the built-in one when ``None``.

    Raises:
        SuiteError: as :func:`~.suite.load_suite`.
    """
    return builtin_suite() if path is None else load_suite(path)


def predictor_scorer(predictor) -> Callable[[list[str]], np.ndarray]:
    """A :data:`~.check.Scorer` from a :class:`~sentiment_cli.inference.predictor.Predictor`: the probabilities
    ``predict`` reports, ``(n, num_labels)`` float64 (:meth:`~sentiment_cli.inference.predictor.Predictor.predict_proba`:
    the predictor's postprocess, the softmax of the logits over the temperature, or a multi-label model's sigmoid
    of each label's)."""
    return lambda texts: predictor.predict_proba(texts, dtype=np.float64)


def predictor_decide(predictor) -> Callable[[np.ndarray], np.ndarray] | None:
    """A multi-label predictor's rule, probabilities -> label sets (:data:`~.check.Decide`), as ``predict``
    applies it; ``None`` for a single-label one."""
    return predictor.decide if predictor.multi_label else None


def check_scorer(suite: Suite, scorer: Callable[[list[str]], np.ndarray], labels: Sequence[str], half: str = "all",
                 on_progress: Callable[[int, int], None] | None = None,
                 decide: Callable[[np.ndarray], np.ndarray] | None = None,
                 **limits: int) -> tuple[dict[str, Any], list[dict]]:
    """``(report, rows)`` of ``suite`` on any scorer (:func:`~.check.run_check`; ``decide``: a multi-label
    model's rule, :func:`predictor_decide`; ``limits``: ``max_cases``, ``max_characters``); the report is :func:`~.check.summary` plus the suite's name and
    source, the half and the labels.

    Raises:
        LabelMismatch: as :func:`~.check.resolve_labels`.
        SuiteError: over a limit (:func:`~.cases.check_workload`).
    """
    results, rows = run_check(suite, scorer, labels, half, on_progress, decide, **limits)
    report = {"suite": suite.name, "source": suite.source, "half": half, "labels": list(labels), **summary(results)}
    return report, rows


def check_checkpoint(checkpoint: str | Path | Any, suite: Suite, half: str = "all", device: Any = "cpu",
                     on_progress: Callable[[int, int], None] | None = None,
                     **limits: int) -> tuple[dict[str, Any], list[dict]]:
    """Run ``suite`` on a checkpoint folder, or a checkpoint already loaded (a training run's) (``limits``: ``max_cases``, ``max_characters``, as
    :func:`~.check.run_check`).

    Returns:
        ``(report, rows)``, as :func:`check_scorer`, the report with ``"checkpoint"``.

    Raises:
        CheckpointError: the checkpoint is missing or unusable.
        LabelMismatch: the suite is for another label set (checked before any text is scored).
        SuiteError: the suite's cases are over a limit (checked before the model loads); the built-in
            (English) suite on a model that reads characters or subwords (:func:`refuse_builtin`).
    """
    from ..inference.predictor import Predictor
    from .cases import check_workload

    check_workload(suite, half, **limits)
    predictor = Predictor(checkpoint, device=device)
    refuse_builtin(suite, predictor.backend.tokenizer)
    report, rows = check_scorer(suite, predictor_scorer(predictor), predictor.labels, half, on_progress,
                                predictor_decide(predictor), **limits)
    return {"checkpoint": str(checkpoint), **report}, rows


MIN_KNOWN_WORDS = 0.5   # the built-in suite runs on a word-level model that knows at least this share of its words


def refuse_builtin(suite: Suite, tokenizer) -> None:
    """Refuse the built-in suite, English sentences, on a model that does not read English: its failure rates
    would measure a language it was not trained on (:func:`builtin_refusal`).

    Raises:
        SuiteError: in one line, naming why and what to do (a suite of one's own, ``--suite``).
    """
    why = builtin_refusal(tokenizer) if suite.source == BUILTIN_SOURCE else None
    if why:
        raise SuiteError(f"the built-in suite is English sentences, but {why}; write a suite in the model's "
                         "language and pass it with --suite FILE (docs/check.md)")


def builtin_refusal(tokenizer) -> str | None:
    """Why the built-in (English) suite does not fit a model with this tokenizer, in a phrase, or ``None``: the model
    reads characters or subwords (``[data] tokenizer`` char, unigram, bpe: chosen for text written without spaces,
    Thai or Chinese), or reads words and knows under :data:`MIN_KNOWN_WORDS` of the suite's (a vocabulary of
    another language: Arabic, say). An English model trained on the committed 1,000 reviews knows most of them;
    a vocabulary of Thai or Arabic almost none."""
    from ..data.tokenizer import UNK_ID, tokenizer_kind
    from .cases import test_cases

    kind = tokenizer_kind(tokenizer)
    if kind.joined:
        return f"this model reads {kind.units()} (a tokenizer chosen for text written without spaces between words)"
    suite = builtin_suite()
    texts = [case.texts[0] for test in suite.tests for case in test_cases(suite, test)]
    ids = [i for encoding in tokenizer.encode_batch(texts) for i in encoding.ids]
    known = 1.0 - ids.count(UNK_ID) / max(1, len(ids))
    if known < MIN_KNOWN_WORDS:
        return f"this model's vocabulary knows {known:.0%} of its words (it was trained on another language)"
    return None


def builtin_applies(labels: Sequence[str], tokenizer) -> bool:
    """Whether the built-in suite fits a model with these labels and this tokenizer (its card then gets the suite's
    summary): two-class sentiment read as English words (:func:`builtin_refusal`)."""
    try:
        resolve_labels(builtin_suite(), labels)
    except LabelMismatch:
        return False
    return builtin_refusal(tokenizer) is None


def builtin_record(checkpoint: str | Path | Any, device: Any = "cpu") -> dict[str, Any]:
    """The built-in suite's test half on a checkpoint (a folder, or one loaded: a training run's), in brief (``metrics.json``'s ``"behaviour"``, the model
    card's section): the suite, the half, the mean failure rate over tests, and the failure rate of each
    capability and test. Ask :func:`builtin_applies` first.

    Raises:
        CheckpointError: the checkpoint is missing or unusable.
        LabelMismatch: the suite does not fit the model's labels.
    """
    report, _ = check_checkpoint(checkpoint, builtin_suite(), half="test", device=device)
    return {"suite": report["suite"], "half": "test",
            "mean_failure_rate": report["overall"]["mean_failure_rate"], "cases": report["overall"]["cases"],
            "capabilities": [{k: c[k] for k in ("capability", "tests", "failure_rate")}
                             for c in report["capabilities"]],
            "tests": [{k: t[k] for k in ("name", "capability", "type", "cases", "failure_rate")}
                      for t in report["tests"]]}
