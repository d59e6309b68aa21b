"""A test's cases: its templates filled (``templates.py``) and, for INV and DIR tests, each sentence's
perturbed copies (``perturb.py``). The same suite gives the same cases on every run (seeded per template)."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from .perturb import perturbed
from .suite import Suite, SuiteError, Test
from .templates import PLACEHOLDER, fill, lexicon_of

MAX_CASES = 100_000             # cases a run builds by default (sentiment check --max-cases)
MAX_CHARACTERS = 50_000_000     # characters of case text (sentences and copies) by default (--max-characters)
PERTURB_GROWTH = 64             # characters a perturbation may add beyond a lexicon entry (a URL, a handle, digits)


@dataclass(frozen=True)
class Case:
    """One case of a test.

    Attributes:
        test: the test's name.
        half: ``"dev"``, ``"test"`` or ``"all"`` (the half of the template it came from).
        texts: the sentence, then (INV and DIR) its perturbed copies.
    """

    test: str
    half: str
    texts: tuple[str, ...]


def in_half(half: str, wanted: str) -> bool:
    """Whether a template of ``half`` belongs to the run's ``wanted`` half (``"all"`` takes every one; an
    unsplit test's templates, half ``"all"``, belong to every half)."""
    return wanted == "all" or half in (wanted, "all")


def workload(suite: Suite, wanted: str = "all") -> tuple[int, int]:
    """Upper bounds of what :func:`test_cases` builds for every test of ``suite`` in the ``wanted`` half,
    computed from the templates, lexicons and ``samples`` alone (nothing is filled): ``(cases, characters)``,
    the characters counting each case's sentence and its perturbed copies."""
    cases = characters = 0
    for test in suite.tests:
        copies = 0 if test.type == "MFT" else test.variants
        extra = PERTURB_GROWTH + max(map(len, suite.lexicons.get(test.lexicon or "", ())), default=0)
        for half, template in test.templates:
            if in_half(half, wanted):
                n, longest = _template_bound(template, suite, test.samples)
                cases += n
                characters += n * (longest + copies * (longest + extra))
    return cases, characters


def _template_bound(template: str, suite: Suite, samples: int) -> tuple[int, int]:
    """``(sentences, longest sentence's characters)`` a template can give, at most."""
    keys = PLACEHOLDER.findall(template)
    fixed = len(PLACEHOLDER.sub("", template))
    longest = {k: max(map(len, suite.lexicons.get(lexicon_of(k, suite.lexicons), ())), default=0) for _, k in keys}
    count = 1
    for k in dict.fromkeys(k for _, k in keys):
        count = min(samples, count * max(1, len(suite.lexicons.get(lexicon_of(k, suite.lexicons), ()))))
    return count, fixed + sum(longest[k] + (3 if a else 0) for a, k in keys)


def check_workload(suite: Suite, wanted: str = "all", *, max_cases: int = MAX_CASES,
                   max_characters: int = MAX_CHARACTERS) -> None:
    """Refuse, before any case is built, a suite whose cases (:func:`workload`) exceed the run's limits.

    Raises:
        SuiteError: over ``max_cases`` cases or ``max_characters`` characters; the message names the limit and
            the option that raises it.
    """
    cases, characters = workload(suite, wanted)
    if cases > max_cases:
        raise SuiteError(f"suite {suite.source}: up to {cases:,} cases (templates x samples), over the limit of "
                         f"{max_cases:,}; lower samples, or raise the limit with --max-cases")
    if characters > max_characters:
        raise SuiteError(f"suite {suite.source}: its cases may hold up to {characters:,} characters, over the limit "
                         f"of {max_characters:,}; shorten the templates or lexicon entries, or raise the limit with "
                         "--max-characters")


def test_cases(suite: Suite, test: Test, wanted: str = "all", left_out: Counter | None = None) -> list[Case]:
    """The cases of ``test`` in the ``wanted`` half (``"dev"``, ``"test"`` or ``"all"``).

    INV and DIR cases keep only sentences the perturbation applies to (a number to change, a name to swap), and
    only the copies it does not empty; a sentence that is empty, or whose copies are all empty, is left out too
    (no model scores an empty text). Each case left out is counted in ``left_out``, when given, under its
    reason: ``"does not apply"`` or ``"empty"`` (a template ``"!"`` whose mark the ``punctuation`` perturbation
    removes).
    """
    entries = suite.lexicons.get(test.lexicon) if test.lexicon else None
    left_out = Counter() if left_out is None else left_out
    cases: list[Case] = []
    for half, template in test.templates:
        if not in_half(half, wanted):
            continue
        rng = random.Random(f"{suite.seed}|{test.name}|{template}")
        for sentence in fill(template, suite.lexicons, test.samples, rng):
            if not sentence.strip():
                left_out["empty"] += 1
                continue
            if test.type == "MFT":
                cases.append(Case(test.name, half, (sentence,)))
                continue
            copies = perturbed(test.perturb, sentence, random.Random(f"{suite.seed}|{test.name}|{sentence}"),
                               test.variants, entries)
            kept = tuple(c for c in copies if c.strip())
            if kept:
                cases.append(Case(test.name, half, (sentence, *kept)))
            else:
                left_out["empty" if copies else "does not apply"] += 1
    return cases
