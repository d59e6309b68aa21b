"""Run a suite on a model: score every case's texts, judge each case by its test's type, and summarise
failure rates per test and per capability, as Ribeiro et al. 2020 report them.

A case fails:

- MFT: its sentence's predicted label is not the expected one (a multi-label model: the expected label is not
  in its predicted set);
- INV: a perturbed copy's predicted label (set) differs from the sentence's;
- DIR: a perturbed copy moves ``p(label)`` the wrong way by more than ``tolerance`` (``down``: it rises).

The model is any ``scorer``: texts -> ``(n, num_labels)`` probabilities, so that the benchmark runs the same
cases on the peers. A test's failure rate is failed cases / cases; a capability's and the suite's are the mean
over their tests (each test counts once, however many cases it draws).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import UsageError
from ..wording import listed
from .cases import MAX_CASES, MAX_CHARACTERS, Case, check_workload, test_cases
from .suite import Suite, Test

Scorer = Callable[[list[str]], np.ndarray]   # texts -> (n, num_labels) probabilities, in the model's label order
EXAMPLES = 3        # failing examples kept per test
SCORE_CHUNK = 512   # texts scored per call of the scorer


class LabelMismatch(UsageError):
    """The suite is for another label set than the model's (exit 2)."""


@dataclass
class TestResult:
    """One test's outcome: ``cases`` judged, ``failures`` among them, up to three failing ``examples``
    (the most confidently wrong first), each a dict (``docs/check.md``), the cases ``left_out`` (a
    perturbation that does not apply to the sentence, or empties it), and for an INV test ``mean_shift``: how far
    the perturbations move the prediction, the mean over cases of the largest change of any label's
    probability between the sentence and a copy (0 to 1; ``None`` for other types, or no case)."""

    test: Test
    cases: int
    failures: int
    examples: list[dict[str, Any]] = field(default_factory=list)
    left_out: int = 0   # cases not built: the perturbation does not apply, or empties them (cases.test_cases)
    mean_shift: float | None = None

    @property
    def failure_rate(self) -> float | None:
        """Failed cases / cases; ``None`` for a test with no case."""
        return self.failures / self.cases if self.cases else None


def resolve_labels(suite: Suite, model_labels: Sequence[str]) -> dict[str, int]:
    """Each label the suite names -> its index among ``model_labels`` (case-insensitive; the suite's
    ``label_aliases`` give other names a model may use).

    Raises:
        LabelMismatch: the suite declares ``labels`` and the model's label set is another; or a test names a
            label the model does not have.
    """
    index = {name.casefold(): i for i, name in enumerate(model_labels)}
    found: dict[str, int] = {}
    for label in _named(suite):
        names = (label, *suite.label_aliases.get(label, ()))
        hit = next((index[n.casefold()] for n in names if n.casefold() in index), None)
        if hit is not None:
            found[label] = hit
    shown = listed(model_labels)
    if suite.labels and (len(model_labels) != len(suite.labels) or any(lb not in found for lb in suite.labels)):
        raise LabelMismatch(f"{suite.source} is for models with the labels {', '.join(suite.labels)}; this "
                            f"model's are {shown}. Write a suite for its labels (docs/check.md) and pass --suite")
    missing = [lb for lb in _named(suite) if lb not in found]
    if missing:
        raise LabelMismatch(f"{suite.source}: label {missing[0]!r} is not one of the model's ({shown})")
    return found


def _named(suite: Suite) -> list[str]:
    """Every label the suite names: its ``labels``, then each test's ``expect`` / ``label``, once each."""
    names = list(suite.labels) + [t.expect or t.label for t in suite.tests if (t.expect or t.label)]
    return list(dict.fromkeys(names))


Decide = Callable[[np.ndarray], np.ndarray]   # (n, num_labels) probabilities -> (n, num_labels) bool label sets


def run_check(suite: Suite, scorer: Scorer, model_labels: Sequence[str], half: str = "all",
              on_progress: Callable[[int, int], None] | None = None,
              decide: Decide | None = None, *, max_cases: int = MAX_CASES,
              max_characters: int = MAX_CHARACTERS) -> tuple[list[TestResult], list[dict]]:
    """Run ``suite`` on a model.

    Args:
        suite: the suite.
        scorer: texts -> ``(n, len(model_labels))`` probabilities.
        model_labels: the model's labels, by id.
        half: ``"dev"``, ``"test"`` or ``"all"`` (:func:`~.cases.in_half`).
        on_progress: called with (texts scored, texts) after each chunk.
        decide: a multi-label model's rule, probabilities -> label sets (``Decision.labels``: each label's
            threshold, ``min_labels``); ``None``: one label per text, the most probable. With a rule, an MFT
            passes when its expected label is in the sentence's set, an INV when every copy gets the same set,
            and a ``label`` is the set, most probable first, joined by ``", "``, as ``predict`` gives it.
        max_cases, max_characters: the bounds on the cases built (:func:`~.cases.check_workload`), checked
            before any is.

    Returns:
        ``(results, rows)``: one :class:`TestResult` per test, in suite order, and one row per scored text of
        every case (``--output``'s table: test, capability, type, half, case, role, text, label, probability,
        expected, passed, then ``p_<label>`` per model label).

    Raises:
        LabelMismatch: as :func:`resolve_labels`.
        SuiteError: the suite's cases would exceed ``max_cases`` or ``max_characters``.
    """
    ids = resolve_labels(suite, model_labels)
    check_workload(suite, half, max_cases=max_cases, max_characters=max_characters)
    left_out = {t.name: Counter() for t in suite.tests}
    cases = {t.name: test_cases(suite, t, half, left_out[t.name]) for t in suite.tests}
    texts = list(dict.fromkeys(text for cs in cases.values() for c in cs for text in c.texts))
    probs = _score(scorer, texts, len(model_labels), on_progress)
    chosen = _Sets(probs, decide)
    row_of = {text: i for i, text in enumerate(texts)}
    results, rows = [], []
    for test in suite.tests:
        scored = [(case, [row_of[t] for t in case.texts]) for case in cases[test.name]]
        judged = [(case, _judge(test, chosen, rs, ids)) for case, rs in scored]
        failing = sorted((k for k, (_, (passed, _)) in enumerate(judged) if not passed), key=lambda k: -judged[k][1][1])
        examples = [_example(test, *scored[k], chosen, ids, model_labels) for k in failing[:EXAMPLES]]
        results.append(TestResult(test, len(judged), len(failing), examples, sum(left_out[test.name].values()),
                                  _mean_shift(test, chosen, [rs for _, rs in scored])))
        rows.extend(_rows(test, judged, chosen, row_of, model_labels))
    return results, rows


class _Sets:
    """Each scored text's probabilities and predicted labels: the most probable one, or a multi-label rule's set
    (most probable first; it may be empty)."""

    def __init__(self, probs: np.ndarray, decide: Decide | None):
        self.probs = probs
        self.multi = decide is not None
        chosen = decide(probs) if decide is not None else np.eye(probs.shape[1], dtype=bool)[probs.argmax(axis=1)]
        order = np.argsort(-probs, axis=1, kind="stable")
        self.sets = [tuple(int(j) for j in order[i] if chosen[i, j]) for i in range(len(probs))]

    def top(self, row: int) -> int:
        """The label shown first: the set's most probable (the most probable overall for an empty set)."""
        s = self.sets[row]
        return s[0] if s else int(self.probs[row].argmax())

    def name(self, row: int, labels: Sequence[str]) -> str:
        """The predicted label, or the set joined by ``", "``."""
        return ", ".join(labels[j] for j in self.sets[row]) if self.multi else labels[self.top(row)]


def _score(scorer: Scorer, texts: list[str], num_labels: int,
           on_progress: Callable[[int, int], None] | None) -> np.ndarray:
    """``(len(texts), num_labels)`` probabilities, ``SCORE_CHUNK`` texts per call."""
    out = np.zeros((len(texts), num_labels), np.float64)
    for lo in range(0, len(texts), SCORE_CHUNK):
        out[lo:lo + SCORE_CHUNK] = scorer(texts[lo:lo + SCORE_CHUNK])
        if on_progress is not None:
            on_progress(min(lo + SCORE_CHUNK, len(texts)), len(texts))
    return out


def _moves(test: Test, chosen: _Sets, rows: list[int], ids: dict[str, int]) -> list[float]:
    """INV and DIR: how far each perturbed copy moved the wrong way (> 0). INV: its top probability over its
    probability of the sentence's label (multi-label: the largest change of any label's probability); DIR:
    the rise (``down``) or fall (``up``) of p(``label``)."""
    p0 = chosen.probs[rows[0]]
    if test.type == "INV":
        if chosen.multi:
            return [float(np.abs(chosen.probs[r] - p0).max()) for r in rows[1:]]
        base = chosen.top(rows[0])
        return [float(chosen.probs[r].max() - chosen.probs[r][base]) for r in rows[1:]]
    watched = ids[test.label]
    sign = 1.0 if test.direction == "down" else -1.0
    return [sign * float(chosen.probs[r][watched] - p0[watched]) for r in rows[1:]]


def _mean_shift(test: Test, chosen: _Sets, cases: list[list[int]]) -> float | None:
    """An INV test's mean over cases of the largest change of any label's probability from the sentence to a
    perturbed copy; ``None`` for other types or no case."""
    if test.type != "INV" or not cases:
        return None
    p = chosen.probs
    return float(np.mean([max((float(np.abs(p[r] - p[rows[0]]).max()) for r in rows[1:]), default=0.0)
                          for rows in cases]))


def _judge(test: Test, chosen: _Sets, rows: list[int], ids: dict[str, int]) -> tuple[bool, float]:
    """``(passed, margin)`` of one case; ``margin`` orders failures, the most confidently wrong first."""
    p0 = chosen.probs[rows[0]]
    if test.type == "MFT":
        want = ids[test.expect]
        return want in chosen.sets[rows[0]], float(p0.max() - p0[want])
    worst = max(_moves(test, chosen, rows, ids))
    if test.type == "INV":
        return all(chosen.sets[r] == chosen.sets[rows[0]] for r in rows[1:]), worst
    return worst <= test.tolerance, worst


def _example(test: Test, case: Case, rows: list[int], chosen: _Sets, ids: dict[str, int],
             labels: Sequence[str]) -> dict[str, Any]:
    """A failing case as ``--json`` and the table show it: the sentence, its label and probability, and for
    INV and DIR the worst perturbed copy (for DIR, both probabilities are of the watched label)."""
    probs, base = chosen.probs, chosen.top(rows[0])
    if test.type == "MFT":
        return {"text": case.texts[0], "expected": test.expect, "label": chosen.name(rows[0], labels),
                "probability": float(probs[rows[0]][base])}
    k = 1 + int(np.argmax(_moves(test, chosen, rows, ids)))   # the worst copy
    if test.type == "INV":
        flipped = chosen.top(rows[k])
        return {"text": case.texts[0], "label": chosen.name(rows[0], labels), "probability": float(probs[rows[0]][base]),
                "perturbed": case.texts[k], "perturbed_label": chosen.name(rows[k], labels),
                "perturbed_probability": float(probs[rows[k]][flipped])}
    watched = ids[test.label]
    return {"text": case.texts[0], "label": labels[watched], "probability": float(probs[rows[0]][watched]),
            "perturbed": case.texts[k], "perturbed_label": labels[watched],
            "perturbed_probability": float(probs[rows[k]][watched])}


def _rows(test: Test, judged: list[tuple[Case, tuple[bool, float]]], chosen: _Sets,
          row_of: dict[str, int], labels: Sequence[str]) -> list[dict[str, Any]]:
    rows = []
    for number, (case, (passed, _)) in enumerate(judged, 1):
        for k, text in enumerate(case.texts):
            row = row_of[text]
            p = chosen.probs[row]
            rows.append({"test": test.name, "capability": test.capability, "type": test.type, "half": case.half,
                         "case": number, "role": "sentence" if k == 0 else "perturbed", "text": text,
                         "label": chosen.name(row, labels), "probability": round(float(p[chosen.top(row)]), 6),
                         "expected": test.expect or "", "passed": passed,
                         **{f"p_{lb}": round(float(p[i]), 6) for i, lb in enumerate(labels)}})
    return rows


def summary(results: Sequence[TestResult]) -> dict[str, Any]:
    """The report as ``--json`` gives it (without the run's own fields): per test, per capability (in first
    appearance order) and over the suite; rates are fractions, ``None`` where no case was judged."""
    tests = [{"name": r.test.name, "capability": r.test.capability, "type": r.test.type, "cases": r.cases,
              "failures": r.failures, "failure_rate": r.failure_rate, "description": r.test.description,
              "examples": r.examples, "left_out": r.left_out, "mean_shift": r.mean_shift} for r in results]
    capabilities = []
    for cap in dict.fromkeys(r.test.capability for r in results):
        mine = [r for r in results if r.test.capability == cap]
        capabilities.append({"capability": cap, "tests": len(mine), "cases": sum(r.cases for r in mine),
                             "failures": sum(r.failures for r in mine), "failure_rate": _mean(mine)})
    overall = {"tests": len(results), "cases": sum(r.cases for r in results),
               "failures": sum(r.failures for r in results), "mean_failure_rate": _mean(results),
               "left_out": sum(r.left_out for r in results)}
    return {"tests": tests, "capabilities": capabilities, "overall": overall}


def _mean(results: Sequence[TestResult]) -> float | None:
    rates = [r.failure_rate for r in results if r.failure_rate is not None]
    return float(np.mean(rates)) if rates else None
