"""A behavioural suite: its file format (TOML), read and checked into :class:`Suite` and :class:`Test`.

The format is documented in ``docs/check.md``. A suite names its lexicons (lists of words or phrases) and its
tests; each test has a type (``MFT``, ``INV``, ``DIR``), a capability (a free name that groups tests in the
report) and templates, either one list (``templates``) or two halves (``dev``, used while choosing a model's
settings, and ``test``, only reported). Every problem is one line naming the file and the test.
"""

from __future__ import annotations

import importlib.resources
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..data.labels import LABELS, SENTIMENT_ALIASES
from ..decoding import toml_loads
from ..errors import UsageError
from ..wording import listed
from .perturb import PERTURBATIONS, NEEDS_LEXICON
from .templates import placeholders

TYPES = ("MFT", "INV", "DIR")
HALVES = ("dev", "test")
BUILTIN = "sentiment.toml"    # the built-in suite, package data of this package
BUILTIN_SOURCE = f"the built-in suite ({BUILTIN})"   # its Suite.source
MAX_SAMPLES = 1000            # cases per template, at most: a suite file is input, and work is bounded by it
MAX_TEMPLATES = 10_000        # templates in one suite
MAX_SUITE_BYTES = 64 << 20    # a suite file's size


class SuiteError(UsageError):
    """A suite file that cannot be read or breaks the format (exit 2); the message names the file and the test."""


@dataclass(frozen=True)
class Test:
    """One behavioural test.

    Attributes:
        name: unique in its suite.
        capability: the group it is reported under (vocabulary, negation, ...).
        type: ``"MFT"`` (a label expected of each case), ``"INV"`` (a perturbation must not change the
            predicted label) or ``"DIR"`` (a perturbation must not move ``label``'s probability the wrong way
            by more than ``tolerance``).
        templates: ``(half, template)`` pairs; ``half`` is ``"dev"``, ``"test"`` or ``"all"`` (an unsplit test).
        samples: cases drawn per template.
        expect: MFT: the label each case must get.
        perturb: INV and DIR: the perturbation's name (:data:`~.perturb.PERTURBATIONS`).
        lexicon: for ``swap``, ``append``, ``prepend``: the lexicon the perturbation reads.
        variants: INV and DIR: perturbed copies per case.
        label: DIR: the label whose probability is watched.
        direction: DIR: ``"down"`` (must not rise by more than ``tolerance``) or ``"up"`` (must not fall).
        tolerance: DIR: probability, in [0, 1].
        description: what passes, in a sentence.
    """

    name: str
    capability: str
    type: str
    templates: tuple[tuple[str, str], ...]
    samples: int
    expect: str | None = None
    perturb: str | None = None
    lexicon: str | None = None
    variants: int = 3
    label: str | None = None
    direction: str = "down"
    tolerance: float = 0.1
    description: str = ""


@dataclass(frozen=True)
class Suite:
    """A suite: its tests, the lexicons their templates read, and the labels it expects of a model.

    Attributes:
        name: the suite's name.
        labels: the label set the suite is for (empty: any model whose labels include the ones its tests name).
        label_aliases: other names a model may give each label (``{"positive": ("pos",)}``).
        lexicons: name -> entries.
        tests: in file order.
        seed: the seed of the template sampling (the cases are the same on every run).
        source: the file it was read from.
    """

    name: str
    labels: tuple[str, ...]
    label_aliases: dict[str, tuple[str, ...]]
    lexicons: dict[str, tuple[str, ...]]
    tests: tuple[Test, ...]
    seed: int = 0
    source: str = ""
    description: str = ""


def builtin_suite() -> Suite:
    """The built-in suite for two-class sentiment (``sentiment.toml``), its labels and their other names those
    ``data/labels.py`` defines (``LABELS``, ``SENTIMENT_ALIASES``)."""
    text = importlib.resources.files(__package__).joinpath(BUILTIN).read_text(encoding="utf-8")
    return replace(parse_suite(text, BUILTIN_SOURCE), labels=LABELS, label_aliases=dict(SENTIMENT_ALIASES))


def load_suite(path: str | Path) -> Suite:
    """Read a suite file.

    Raises:
        SuiteError: the file is missing, is not TOML, or breaks the format (one line each).
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise SuiteError(f"--suite {path}: no such file")
    if p.is_dir():
        raise SuiteError(f"--suite {path}: is a folder; give a suite file (.toml)")
    if not p.is_file():
        raise SuiteError(f"--suite {path}: not a regular file (a device, FIFO or socket); give a suite file (.toml)")
    if p.stat().st_size > MAX_SUITE_BYTES:
        raise SuiteError(f"--suite {path}: larger than {MAX_SUITE_BYTES:,} bytes; not a suite file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SuiteError(f"--suite {path}: not valid UTF-8 (byte {exc.start}); save it as UTF-8") from None
    except OSError as exc:
        raise SuiteError(f"--suite {path}: cannot read it ({exc.strerror or exc})") from None
    return parse_suite(text, str(path))


def parse_suite(text: str, where: str) -> Suite:
    """A :class:`Suite` from a suite file's text; ``where`` names it in errors.

    Raises:
        SuiteError: not TOML, or breaks the format.
    """
    try:
        raw = toml_loads(text)   # an integer over Python's 4,300 digits: a TOMLDecodeError too
    except tomllib.TOMLDecodeError as exc:
        raise SuiteError(f"{where}: not valid TOML ({exc})") from None
    _known(raw, {"name", "description", "labels", "label_aliases", "seed", "samples", "lexicons", "test"}, where)
    lexicons = _lexicons(raw.get("lexicons", {}), where)
    samples = _int(raw.get("samples", 20), "samples", where, 1, MAX_SAMPLES)
    tests_raw = raw.get("test", [])
    if not isinstance(tests_raw, list) or not tests_raw:
        raise SuiteError(f"{where}: no tests; add [[test]] tables (docs/check.md)")
    tests = tuple(_test(t, i, lexicons, samples, where) for i, t in enumerate(tests_raw, 1))
    _unique([t.name for t in tests], where)
    if sum(len(t.templates) for t in tests) > MAX_TEMPLATES:
        raise SuiteError(f"{where}: more than {MAX_TEMPLATES:,} templates")
    labels = tuple(_strings(raw.get("labels", []), "labels", where))
    aliases = raw.get("label_aliases", {})
    if not isinstance(aliases, dict):
        raise SuiteError(f"{where}: label_aliases must be a table of label = [names]")
    aliases = {str(k): tuple(_strings(v, f"label_aliases.{k}", where)) for k, v in aliases.items()}
    return Suite(name=_text(raw.get("name", Path(where).stem), "name", where), labels=labels, label_aliases=aliases,
                 lexicons=lexicons, tests=tests, seed=_int(raw.get("seed", 0), "seed", where, 0, 2**32 - 1),
                 source=where, description=_text(raw.get("description", ""), "description", where))


def _test(raw: Any, number: int, lexicons: dict[str, tuple[str, ...]], samples: int, where: str) -> Test:
    """One ``[[test]]`` table, checked."""
    if not isinstance(raw, dict):
        raise SuiteError(f"{where}: test {number} is not a table")
    name = _text(raw.get("name", ""), "name", f"{where}: test {number}").strip()
    at = f"{where}: test {name!r}" if name else f"{where}: test {number}"
    if not name:
        raise SuiteError(f"{at}: no name")
    _known(raw, {"name", "capability", "type", "description", "templates", "dev", "test", "samples", "expect",
                 "perturb", "lexicon", "variants", "label", "direction", "tolerance"}, at)
    kind = str(raw.get("type", "")).upper()
    if kind not in TYPES:
        raise SuiteError(f"{at}: type must be one of {', '.join(TYPES)}, got {raw.get('type')!r}")
    templates = _templates(raw, lexicons, at)
    fields: dict[str, Any] = dict(
        name=name, capability=_text(raw.get("capability", "other"), "capability", at).strip() or "other", type=kind,
        templates=templates, samples=_int(raw.get("samples", samples), "samples", at, 1, MAX_SAMPLES),
        description=_text(raw.get("description", ""), "description", at))
    if kind == "MFT":
        fields["expect"] = _required(raw, "expect", at)
    else:
        fields.update(_perturbation(raw, lexicons, at))
    if kind == "DIR":
        fields["label"] = _required(raw, "label", at)
        fields["direction"] = str(raw.get("direction", "down"))
        if fields["direction"] not in ("down", "up"):
            raise SuiteError(f"{at}: direction must be 'down' or 'up', got {fields['direction']!r}")
        tolerance = raw.get("tolerance", 0.1)
        if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance <= 1:
            raise SuiteError(f"{at}: tolerance must be a probability in [0, 1], got {tolerance!r}")
        fields["tolerance"] = float(tolerance)
    return Test(**fields)


def _templates(raw: dict, lexicons: dict[str, tuple[str, ...]], at: str) -> tuple[tuple[str, str], ...]:
    """The ``(half, template)`` pairs of a test: ``templates``, or the ``dev`` and ``test`` halves."""
    if "templates" in raw and ("dev" in raw or "test" in raw):
        raise SuiteError(f"{at}: give either templates, or the dev and test halves, not both")
    halves = [("all", "templates")] if "templates" in raw else [(h, h) for h in HALVES if h in raw]
    pairs = [(half, t) for half, key in halves for t in _strings(raw[key], key, at)]
    if not pairs:
        raise SuiteError(f"{at}: no templates (give templates = [...], or dev = [...] and test = [...])")
    for _, template in pairs:
        try:
            names = placeholders(template, lexicons)
        except ValueError as exc:
            raise SuiteError(f"{at}: {exc}") from None
        missing = sorted({lexicon for _, lexicon in names if lexicon not in lexicons})
        if missing:
            raise SuiteError(f"{at}: template {template!r} names no lexicon {missing[0]!r} "
                             f"(lexicons: {listed(sorted(lexicons))})")
    return tuple(pairs)


def _perturbation(raw: dict, lexicons: dict[str, tuple[str, ...]], at: str) -> dict[str, Any]:
    """An INV or DIR test's perturbation keys, checked."""
    perturb = _required(raw, "perturb", at)
    if perturb not in PERTURBATIONS:
        raise SuiteError(f"{at}: perturb must be one of {', '.join(PERTURBATIONS)}, got {perturb!r}")
    lexicon = raw.get("lexicon")
    if perturb in NEEDS_LEXICON:
        if lexicon not in lexicons:
            raise SuiteError(f"{at}: perturb {perturb!r} needs lexicon = the name of one of the suite's lexicons, "
                             f"got {lexicon!r}")
        if perturb == "swap" and len(lexicons[lexicon]) < 2:
            raise SuiteError(f"{at}: swap needs a lexicon of two entries or more; {lexicon!r} has "
                             f"{len(lexicons[lexicon])}")
    return {"perturb": perturb, "lexicon": None if lexicon is None else str(lexicon),
            "variants": _int(raw.get("variants", 3), "variants", at, 1, 20)}


def _lexicons(raw: Any, where: str) -> dict[str, tuple[str, ...]]:
    if not isinstance(raw, dict):
        raise SuiteError(f"{where}: [lexicons] must be a table of name = [entries]")
    out = {}
    for name, entries in raw.items():
        values = tuple(_strings(entries, f"lexicons.{name}", where))
        if not values:
            raise SuiteError(f"{where}: lexicon {name!r} is empty")
        out[str(name)] = values
    return out


def _text(value: Any, key: str, where: str) -> str:
    if not isinstance(value, str):
        raise SuiteError(f"{where}: {key} must be a string, got {value!r}"[:300])
    return value


def _strings(value: Any, key: str, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise SuiteError(f"{where}: {key} must be a list of non-empty strings")
    return [v.strip() for v in value]


def _int(value: Any, key: str, where: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise SuiteError(f"{where}: {key} must be an integer from {lo:,} to {hi:,}, got {value!r}")
    return value


def _required(raw: dict, key: str, at: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value.strip():
        raise SuiteError(f"{at}: {raw.get('type', '').upper()} tests need {key} = \"...\"")
    return value.strip()


def _known(raw: dict, keys: set[str], where: str) -> None:
    unknown = sorted(set(raw) - keys)
    if unknown:
        raise SuiteError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(keys))})")


def _unique(names: list[str], where: str) -> None:
    seen = set()
    for name in names:
        if name in seen:
            raise SuiteError(f"{where}: two tests are named {name!r}")
        seen.add(name)

