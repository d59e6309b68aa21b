"""A test's cases: its templates filled (``templates.py``) and, for INV and DIR tests, each sentence's
perturbed copies (``perturb.py``). The same suite gives the same cases on every run (seeded per template)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from .perturb import perturbed
from .suite import Suite, Test
from .templates import fill


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


def test_cases(suite: Suite, test: Test, wanted: str = "all") -> list[Case]:
    """The cases of ``test`` in the ``wanted`` half (``"dev"``, ``"test"`` or ``"all"``).

    INV and DIR cases keep only sentences the perturbation applies to (a number to change, a name to swap).
    """
    entries = suite.lexicons.get(test.lexicon) if test.lexicon else None
    cases: list[Case] = []
    for half, template in test.templates:
        if not in_half(half, wanted):
            continue
        rng = random.Random(f"{suite.seed}|{test.name}|{template}")
        for sentence in fill(template, suite.lexicons, test.samples, rng):
            if test.type == "MFT":
                cases.append(Case(test.name, half, (sentence,)))
                continue
            copies = perturbed(test.perturb, sentence, random.Random(f"{suite.seed}|{test.name}|{sentence}"),
                               test.variants, entries)
            if copies:
                cases.append(Case(test.name, half, (sentence, *copies)))
    return cases
