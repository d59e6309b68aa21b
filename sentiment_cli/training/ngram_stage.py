"""The search's first stage: the n-gram score alone, each form and C fitted on the training split and scored on the
validation split (``search.py`` runs it first, then the encoder trials).

Each fit is a :class:`~.candidate.Candidate`. The stage reads words alone, then (with a word or subword tokenizer and
one label per text) each token's character n-grams beside them (:attr:`~.policy.NgramStagePolicy.piece_fits`), or
(several labels per text) term frequencies of the commoner n-grams (:attr:`~.policy.NgramStagePolicy.term_reading`),
with those character n-grams too; every number is the :class:`~.policy.NgramStagePolicy`'s; it leaves each
reading's best fit in the run's data, so that an encoder trial reading the same rows takes it instead of fitting
again (issue 54).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import Config
from ..data.splits import DataSpec
from ..data.tokenizer import tokenizer_from_str, tokenizer_kind
from ..ngram.features import TFIDF
from ..ngram.fit import fit_key, fit_weighting
from .budget import Budget
from .callbacks import TrainCallbacks
from .candidate import Candidate, within_se
from .interrupts import StopFlag
from .ngram_candidate import Reading, StageFeatures, ngram_fit, reads_terms
from .ngram_peers import READING_KEYS, PeerFits, own_peer
from .policy import DEFAULT, NgramStagePolicy, RulesPolicy
from .run_data import RunData

@dataclass
class NgramStage:
    """What the n-gram stage measured: its candidates, and what the search's later costs are sized from.

    Attributes:
        candidates: one per fit (:func:`ngram_candidates`).
        setup_seconds: seconds its tokenizer and feature matrices took (a refit makes them again on every row).
        vocab_size: the tokenizer's vocabulary (0: no stage ran).
        mean_tokens: a training text's mean token count, cut at ``max_length`` (0: no stage ran).
        train_rows, num_labels: the training split's rows and classes.
        units: a tokenizer kind (``"char"``) -> ``(vocab_size, mean_tokens)`` of a peer reading that reads another
            tokenizer than the run's (``ngram_peers.py``): what an encoder trial reading it is priced from.
        peers_not_fitted: a linear peer -> why its reading was not fitted (``ngram_peers.peer_record``).
    """

    candidates: list[Candidate] = field(default_factory=list)
    setup_seconds: float = 0.0
    vocab_size: int = 0
    mean_tokens: int = 0
    train_rows: int = 0
    num_labels: int = 2
    units: dict[str, tuple[int, int]] = field(default_factory=dict)
    peers_not_fitted: dict[str, str] = field(default_factory=dict)


def ngram_candidates(config: Config, data: RunData, cb: TrainCallbacks, given: frozenset[str], budget: Budget,
                     stop: StopFlag | None = None, policy: NgramStagePolicy = DEFAULT.ngram,
                     rules: RulesPolicy = DEFAULT.rules) -> NgramStage:
    """The n-gram score alone, each form at each C of :attr:`NgramStagePolicy.grid` (a form or C the command line
    pinned: that one) in :func:`fit_order`, fitted on the training split and scored on the validation split, while
    the next fit (as long as the longest so far) ends within ``budget`` (one fit at least), then past a grid's edge
    while a form's best C is at it (:func:`past_the_edge`). When the imbalance rule balanced the classes
    (:func:`_weighting_searched`), the first form and C is fitted unweighted too, second, even past the budget (the
    weighting is the encoder trials' loss's too), and the other fits take whichever weighting scored better. With
    a word or subword tokenizer, :attr:`NgramStagePolicy.piece_fits` follow with each token's character n-grams
    (:func:`_piece_fits`), the first of them both ways again when the weighting is searched; the fits on words
    alone leave time for the first of them (:func:`_piece_reserve`). With several labels per text,
    :attr:`NgramStagePolicy.term_reading` is fitted first. The linear peers' readings
    (:class:`~.ngram_peers.PeerFits`: characters across spaces, TF-IDF word 1-2-grams) come after the first C of
    each form on words (:func:`_fit_readings`); every candidate holding a peer's representation is tagged with it
    (:attr:`Candidate.peer`; NB-SVM's is the grid's NB-LR over binary word 1-3-grams). ``rules``: the numbers the
    character reading's length and buckets are set by.

    The texts are tokenized as the n-gram score alone's run will tokenize them (the run's tokenizer, built once
    on the training split: :meth:`~.run_data.RunData.tokenizer_json`), so that run reads the same ids.

    Returns:
        :class:`NgramStage`: one :class:`Candidate` per fit, ``settings`` naming ``model.ngram_fit`` and
        ``model.ngram_c`` (and ``model.ngram_word_chars``, ``model.ngram_weighting``, ``training.class_weight``
        where the fit read or weighed otherwise than the config); none without an n-gram score (``[model]
        ngram_buckets = 0``).

    Raises:
        DataError: as the fit (too few classes, a fit above ``[training] ngram_fit_gb``).
        Interrupted: ``stop`` was set (a signal), checked before each fit.
    """
    m = config.model
    train, val = data.splits(DataSpec.from_config(config))
    stage = NgramStage(train_rows=len(train), num_labels=len(train.label_names))
    if not m.ngram_buckets:
        return stage
    cb.on_stage(f"the search: the n-gram score alone, on {len(train):,} training and {len(val):,} validation rows")
    began = budget.clock()
    tokenizer = tokenizer_from_str(data.tokenizer_json(train, config.data, cb.on_stage), "the run's tokenizer")
    features = StageFeatures(config, data, tokenizer, train, val)
    stage.vocab_size, stage.mean_tokens = tokenizer.get_vocab_size(), features.mean_tokens()
    features.of(Reading.of(config))
    stage.setup_seconds = budget.clock() - began
    k, y_val = len(train.label_names), np.asarray(val.labels)
    grid = _grid(config, given, train.multi_label, policy)

    def make_fit(cfg: Config, feats: StageFeatures, extra: dict[str, Any]) -> Callable[..., Candidate]:
        def fit(form: str, C: float, class_weight: str, reading: Reading) -> Candidate:
            x, xv, rows = feats.of(reading)
            key = fit_key(rows, form, C, fit_weighting(class_weight, train.labels), reading.weighting, reading.min_df,
                          cfg.model.ngram_intercept)
            return ngram_fit(cfg, (form, C, class_weight), reading, (x, train.labels), (xv, y_val), k, cb, stop, key,
                             extra)
        return fit

    fits = _Fits(make_fit(config, features, {}), config.training.class_weight,
                 _weighting_searched(config, given, train.multi_label), budget, policy)
    peers = PeerFits(config, given, grid, features, (data, train, val), make_fit, cb, policy, rules)
    _fit_readings(fits, config, given, grid, features, tokenizer, train.multi_label, cb, peers)
    return _finished(stage, fits.out, peers, config, tokenizer, data)


def _grid(config: Config, given: frozenset[str], multi_label: bool,
          policy: NgramStagePolicy) -> dict[str, tuple[float, ...]]:
    """The stage's forms and their C's: the policy's grid, less a form the command line did not pin when it pinned
    one; only the C the command line pinned (or, with several labels per text, the rules' form and C)."""
    m = config.model
    grid = {form: Cs for form, Cs in policy.grid_dict().items() if "model.ngram_fit" not in given or m.ngram_fit == form}
    if ("model.ngram_c" in given or multi_label) and m.ngram_c:   # multi-label: the rules' pinned form
        grid = {form: (m.ngram_c,) for form in grid if not multi_label or form == m.ngram_fit}
    return grid


def _finished(stage: NgramStage, out: list[Candidate], peers: PeerFits, config: Config, tokenizer: Any,
              data: RunData) -> NgramStage:
    """``stage`` with its candidates ``out`` (the fits of the run's own reading that hold a linear peer's
    representation tagged with it, :func:`~.ngram_peers.own_peer`; each reading's best fit left in ``data``) and what
    the peer readings measured (``peers``)."""
    kind = tokenizer_kind(tokenizer)
    for c in out:
        c.peer = c.peer or own_peer(c.settings, config, kind)
    _leave_fits(out, data)
    stage.candidates, stage.units, stage.peers_not_fitted = out, peers.units, peers.why_not
    stage.setup_seconds = max(stage.setup_seconds, peers.setup_seconds)
    return stage


def _fit_readings(fits: "_Fits", config: Config, given: frozenset[str], grid: dict[str, tuple[float, ...]],
                  features: "StageFeatures", tokenizer: Any, multi_label: bool, cb: TrainCallbacks,
                  peers: PeerFits) -> None:
    """The stage's fits in order: the term reading's first C (several labels per text: a short budget's share may
    hold one fit; Reuters' 300 s: 90 s, one fit of 68 s), words alone at each form's first C, the linear peers'
    readings (``peers``: on four sets of four one of them was the best n-gram reading, where a share cut short had
    spent itself on words' C's: SST-5 beside a busy suite, 2026-12-07), the rest of the words' grid and past its
    edges, words with their pieces (the fits before them leave time for the first), then the term reading with
    pieces and at its other C's."""
    policy = fits.policy
    terms = Reading.of(config, **dataclasses.asdict(policy.term_reading)) \
        if _tries_terms(config, given, multi_label) else None
    if terms:
        cb.on_stage(f"the search: the n-gram score alone over {terms.weighting} TF-IDF 1-{terms.max_n}-grams in "
                    f"{terms.min_df} training texts or more")
        fits.terms(terms, policy.term_cs[:1])
    pieces = _tries_pieces(config, given, multi_label, tokenizer)

    def reserve() -> float:
        return _piece_reserve(fits.out, grid, features, fits.budget, policy) if pieces else 0.0

    words = Reading.of(config)
    fits.words(grid, words, reserve, slice(0, len(grid)), edges=False)   # each form near its usual best
    peers.fit(fits, reserve)
    fits.words(grid, words, reserve, slice(len(grid), None))
    if pieces:
        _add_pieces(fits, config, given, grid, features, cb)
    if terms:
        if _reads_pieces(config, given, tokenizer):   # each token's character n-grams beside the terms
            chars = policy.piece_chars
            cb.on_stage(f"the search: the same terms with each token's character 2-{chars}-grams")
            fits.terms(terms._replace(chars=chars), policy.term_cs[:1], features.size_ratio(chars))
        fits.terms(terms, policy.term_cs[1:])


def _leave_fits(out: list[Candidate], data: RunData) -> None:
    """Hand each candidate's kept fit to ``data`` (:meth:`~.run_data.RunData.ngram_fit`: each reading's best, made once
    for the trials, issue 54) and drop it from the candidate."""
    for c in out:
        if c.fit is not None:
            key, estimator = c.fit
            data.ngram_fit(key, lambda e=estimator: e)
            c.fit = None


class _Fits:
    """The n-gram stage's candidates, fitted one at a time by ``fit(form, C, class_weight, reading)``, each in the
    class weighting found better so far (``weighting``; ``searched``: :func:`_weighting_searched`)."""

    def __init__(self, fit: Callable[..., Candidate], weighting: str, searched: bool, budget: Budget,
                 policy: NgramStagePolicy):
        self.fit, self.weighting, self.searched, self.budget, self.policy = fit, weighting, searched, budget, policy
        self.out: list[Candidate] = []

    def next_fits(self, budget: Budget) -> bool:
        """Whether a fit as long as the longest so far ends within ``budget`` (always before the first fit)."""
        return budget.fits(max((c.seconds for c in self.out), default=0.0))

    def words(self, grid: dict[str, tuple[float, ...]], reading: Reading,
              reserve: Callable[[], float] | None = None, part: slice = slice(None), edges: bool = True) -> None:
        """Words alone as the config reads them (``reading``; its weighting is not the class weighting): each
        form and C of ``grid`` in :func:`fit_order` (its ``part``) while the next fit (as long as the longest so far)
        ends within the budget less ``reserve()`` seconds (kept for the fits with word pieces,
        :func:`_piece_reserve`; one fit at least), then, with ``edges``, past a grid's edge
        (:func:`past_the_edge`)."""
        def stop() -> bool:
            return not self.next_fits(self.budget.less(reserve() if reserve else 0.0))

        order = fit_order(grid, reading.weighting)
        for i in range(len(order))[part]:
            if self.out and stop():
                break
            self.add(*order[i], reading, i == 0)
        while edges and (edge := past_the_edge(self.out, grid, self.policy)) and not stop():
            self.add(*edge, reading, False)

    def terms(self, reading: Reading, Cs: tuple[float, ...], scale: float = 1.0) -> None:
        """LR per label over ``reading`` (the term reading, perhaps with word pieces) at each of ``Cs`` in turn while
        the next fit ends within the budget (the first fit of the stage always): a fit as long as the longest so
        far, or as the slowest over terms times ``scale`` (the entries word pieces add,
        :meth:`StageFeatures.size_ratio`) when that is longer."""
        for C in Cs:
            slowest = max((c.seconds for c in self.out if reads_terms(c.settings)), default=0.0)
            if not self.next_fits(self.budget) or (self.out and not self.budget.fits(slowest * scale)):
                break
            self.add("lr", C, reading, False)

    def add(self, form: str, C: float, reading: Reading, first: bool,
            fit: Callable[..., Candidate] | None = None) -> Candidate:
        """One fit (by ``fit``, a reading of other features: a peer's; else the stage's own), returned; the ``first``
        of each reading both ways when the weighting is searched (past the share too: it is the encoder's loss's as
        well), the rest in the better (on ASTD's dev, TF-IDF + LR with word pieces lost 5.3 points of accuracy to
        the balanced weights NB-LR on words alone chose)."""
        fit = fit or self.fit
        self.out.append(fit(form, C, self.weighting, reading))
        made = self.out[-1]
        if first and self.searched:
            other = "none" if self.weighting == "balanced" else "balanced"
            self.out.append(fit(form, C, other, reading))
            if self.out[-1].rank_key() > self.out[-2].rank_key():
                self.weighting = other
        _keep_best_fit(self.out)
        return made


def past_the_edge(out: list[Candidate], grid: dict[str, tuple[float, ...]],
                  policy: NgramStagePolicy = DEFAULT.ngram) -> tuple[str, float] | None:
    """``(form, C)``: the next C of :attr:`NgramStagePolicy.c_ladder` past a form's grid, when the best fit of that form on words
    alone (by :meth:`Candidate.rank_key`) has the largest or the smallest C fitted so far, every C of its grid was
    fitted, and the best beats its neighbour inside by more than one paired standard error of validation log-loss
    (:func:`~.candidate.within_se`: a slope within noise says the optimum is flat there, and each step costs a fit;
    IMDB's NB-LR at C 1 against 0.3, 0.2516 against 0.2525); at most :attr:`~NgramStagePolicy.edge_steps` past each edge. ``None``
    when no form's best is at such an edge (a grid of one C, as a pinned C or a multi-label run's, has none)."""
    words = [c for c in out if c.complete and not READING_KEYS & set(c.settings)]   # the run's own reading
    ladder, steps = policy.c_ladder, policy.edge_steps
    for form, Cs in grid.items():
        mine = [c for c in words if c.settings["model.ngram_fit"] == form]
        tried = sorted({c.settings["model.ngram_c"] for c in mine})
        if len(Cs) < 2 or not set(Cs) <= set(tried) or not set(tried) <= set(ladder):
            continue
        best = max(mine, key=Candidate.rank_key)
        C = best.settings["model.ngram_c"]
        i = ladder.index(C)
        if C == tried[-1] and i + 1 < len(ladder) and ladder[i + 1] <= _ladder_step(ladder, max(Cs), steps):
            step, inner = ladder[i + 1], tried[-2]
        elif C == tried[0] and i > 0 and ladder[i - 1] >= _ladder_step(ladder, min(Cs), -steps):
            step, inner = ladder[i - 1], tried[1]
        else:
            continue
        neighbour = max((c for c in mine if c.settings["model.ngram_c"] == inner), key=Candidate.rank_key)
        if within_se(neighbour, best) is None:
            return form, step
    return None


def _ladder_step(ladder: tuple[float, ...], C: float, steps: int) -> float:
    """The C ``steps`` rungs of ``ladder`` from ``C`` (clipped to the ladder's ends)."""
    i = min(max(ladder.index(C) + steps, 0), len(ladder) - 1)
    return ladder[i]


def _tries_terms(config: Config, given: frozenset[str], multi_label: bool) -> bool:
    """Whether the stage also fits the term reading: several labels per text, plain LR (the multi-label rules'
    form), and none of the reading's settings given on the command line or set otherwise than their defaults."""
    m = config.model
    return (multi_label and m.ngram_fit == "lr" and not m.ngram_word_chars and m.ngram_weighting == "binary"
            and m.ngram_min_df == 1 and not given & {"model.ngram_weighting", "model.ngram_max_n",
                                                     "model.ngram_min_df", "model.ngram_c", "model.ngram_fit"})


def _tries_pieces(config: Config, given: frozenset[str], multi_label: bool, tokenizer: Any) -> bool:
    """Whether the stage also fits tokens with their character n-grams: a word or subword tokenizer
    (:attr:`~sentiment_cli.data.tokenizer_kind.TokenizerKind.has_pieces`), one label per text (a multi-label run's rules pin its form), and ``[model]
    ngram_word_chars`` neither set nor given (:func:`_reads_pieces`)."""
    return not multi_label and _reads_pieces(config, given, tokenizer)


def _reads_pieces(config: Config, given: frozenset[str], tokenizer: Any) -> bool:
    """Whether a reading may add each token's character n-grams: a word or subword tokenizer
    (:attr:`~sentiment_cli.data.tokenizer_kind.TokenizerKind.has_pieces`), and ``[model] ngram_word_chars`` neither
    set nor given (a given 0 stays 0)."""
    return (not config.model.ngram_word_chars and "model.ngram_word_chars" not in given
            and tokenizer_kind(tokenizer).has_pieces)


def _add_pieces(fits: _Fits, config: Config, given: frozenset[str], grid: dict[str, tuple[float, ...]],
                features: StageFeatures, cb: TrainCallbacks) -> None:
    """Fit :func:`_piece_fits`' fits with word pieces, the first of them both ways when the class weighting is
    searched; a weighting given on the command line stays. The fits stop once one loses to its form's best fit on
    words alone beyond one paired standard error (:func:`_pieces_lose`)."""
    pieces = _piece_fits(fits.out, grid, features, fits.budget, fits.policy)
    if pieces:
        cb.on_stage(f"the search: the n-gram score alone with each token's character 2-{fits.policy.piece_chars}-grams")
    words = _best_of_each_form(_own(fits.out))   # on words alone
    for i, (form, C, tf, _) in enumerate(pieces):
        tf = config.model.ngram_weighting if tf is None or "model.ngram_weighting" in given else tf
        made = len(fits.out)
        fits.add(form, C, Reading.of(config, chars=fits.policy.piece_chars, weighting=tf), i == 0)
        lost = _pieces_lose(fits.out[made:], words) if i + 1 < len(pieces) else None
        if lost is not None:
            cb.on_note(f"no further fit with word pieces: {lost[0].name}, validation log-loss {lost[0].nll:.4f}, "
                       f"loses to {lost[1].nll:.4f} on words alone by more than one standard error")
            break


def _pieces_lose(new: list[Candidate], words: dict[str, Candidate]) -> tuple[Candidate, Candidate] | None:
    """``(fit, on words)`` when the fit with word pieces just made (``new``: the better of the two when the weighting
    was searched) loses to its form's best fit on words alone (``words``, :func:`_best_of_each_form`) by more than
    one paired standard error of validation log-loss (:func:`~.candidate.within_se`); else ``None``. A reading that
    loses where the form did best gets no more fits: on IMDB each word's character n-grams lost on every form, and
    beside two busy processes the two further fits took 160 s of the encoder's time (``docs/decisions.md``, word
    pieces; 2026-11-30)."""
    done = [c for c in new if c.complete]
    if not done:
        return None
    fit = max(done, key=Candidate.rank_key)
    best = words.get(fit.settings["model.ngram_fit"])
    if best is None:
        return None
    return (fit, best) if fit.rank_key() < best.rank_key() and within_se(fit, best) is None else None


def _own(candidates: list[Candidate]) -> list[Candidate]:
    """The complete fits of the run's own reading (words alone: no word pieces, no peer's or term reading), which the
    fits with word pieces are priced from and compared with (a peer's LR over characters is no word fit: Subj's
    fits with pieces stopped after one, which lost to the character reading, 2026-12-07)."""
    return [c for c in candidates if c.complete and not READING_KEYS & set(c.settings)]


def _best_of_each_form(candidates: list[Candidate]) -> dict[str, Candidate]:
    """Each form's best complete fit of ``candidates`` (by :meth:`Candidate.rank_key`), the better forms first."""
    best: dict[str, Candidate] = {}
    for c in sorted((c for c in candidates if c.complete), key=Candidate.rank_key, reverse=True):
        best.setdefault(c.settings["model.ngram_fit"], c)
    return best


def _piece_fits(out: list[Candidate], grid: dict[str, tuple[float, ...]], features: StageFeatures, budget: Budget,
                policy: NgramStagePolicy) -> list[tuple[str, float, str | None, float]]:
    """The fits ``(form, C, weighting, seconds)`` with word pieces: :attr:`NgramStagePolicy.piece_fits` of the forms
    in ``grid``, the form whose best fit on words ranked higher first (in the policy's order within a form), each
    kept when the fits' time (:func:`_piece_seconds`) still ends within ``budget``; a ``None`` weighting is the
    words' own. A fit too long for what is left gives way to a cheaper one: Wisesight beside two busy processes
    made no fit with pieces, LR's (about 340 s) too long for its share while NB-LR's (about 45 s) would have fitted
    (``docs/decisions.md``, word pieces; 2026-11-30)."""
    done = _own(out)
    if not done or budget.over():
        return []
    best = _best_of_each_form(done)
    order = list(best)   # the forms fitted on words, the better first
    kept, spent = [], 0.0
    for fit in sorted((f for f in policy.piece_fits if f.form in best), key=lambda f: order.index(f.form)):
        if fit.form not in grid or (not fit.c_of_words and fit.c not in grid[fit.form]):   # left out by the command line
            continue
        C = best[fit.form].settings["model.ngram_c"] if fit.c_of_words else fit.c   # perhaps past the edge
        seconds = _piece_seconds(done, fit.form, features, policy.piece_chars)
        if budget.fits(spent + seconds):
            spent += seconds
            kept.append((fit.form, C, None if fit.weighting_of_words else fit.weighting, seconds))
    return kept


def _piece_seconds(done: list[Candidate], form: str, features: StageFeatures, chars: int) -> float:
    """A fit's estimated seconds with word pieces: the form's slowest fit on words alone (of ``done``, complete
    fits) times :meth:`StageFeatures.size_ratio` (Turkish news topics, NB-LR: 16 s on words, 45-69 s with pieces,
    4.3 times the entries)."""
    return max(c.seconds for c in done if c.settings["model.ngram_fit"] == form) * features.size_ratio(chars)


def _piece_reserve(out: list[Candidate], grid: dict[str, tuple[float, ...]], features: StageFeatures,
                   budget: Budget, policy: NgramStagePolicy) -> float:
    """Seconds the fits on words alone leave for the first fit with word pieces: :func:`_piece_fits`' first, the best
    form's or, when that no longer fits ``budget``, a cheaper one's; 0 before any fit or when none fits (the words
    then take the time). Without a reserve a short share went to more C's on words alone and held no fit with
    pieces: SST-5's 90 s held nine fits on words (the best validation log-loss 1.4005) and none with pieces (NB-LR
    C 0.1: 1.3735; ``docs/decisions.md``, word pieces; 2026-11-30)."""
    fits = _piece_fits(out, grid, features, budget, policy)
    return fits[0][3] if fits else 0.0


def _keep_best_fit(candidates: list[Candidate]) -> None:
    """Drop every n-gram candidate's estimator but the best one's of each reading (words alone, with word pieces,
    term frequencies, a peer's; on GoEmotions each holds 2,097,153 x 28 weights): the encoder trials take one of
    them (:func:`_trials_ngram`)."""
    readings: dict[tuple[Any, ...], list[Candidate]] = {}
    for c in candidates:
        readings.setdefault(tuple(sorted((k, str(v)) for k, v in c.settings.items() if k in READING_KEYS)),
                            []).append(c)
    for reading in readings.values():
        best = max(reading, key=Candidate.rank_key)
        for c in reading:
            if c is not best:
                c.fit = None


def fit_order(grid: dict[str, tuple[float, ...]], weighting: str) -> list[tuple[str, float]]:
    """The n-gram stage's fits in the order it makes them, so that a stage its time share cuts short has measured
    each form near its usual best first: each form's C from the middle of its grid outward, the forms
    interleaved, plain LR first over TF-IDF rows (the standard TF-IDF + LR; NB-LR's log-count ratios are defined on
    binary or count features, Wang & Manning 2012) and NB-LR first otherwise.

    >>> fit_order({"nb-lr": (0.1, 0.3, 1.0), "lr": (1.0, 10.0, 30.0)}, "binary")
    [('nb-lr', 0.3), ('lr', 10.0), ('nb-lr', 1.0), ('lr', 30.0), ('nb-lr', 0.1), ('lr', 1.0)]
    """
    def middle_out(Cs: tuple[float, ...]) -> list[float]:
        mid = (len(Cs) - 1) // 2   # the lower middle of an even grid: LR's 3 of (1, 3, 10, 30)
        return sorted(Cs, key=lambda C: (abs(Cs.index(C) - mid), -Cs.index(C)))

    forms = sorted(grid, key=lambda form: (form == "nb-lr") == (weighting in TFIDF))
    ladders = {form: middle_out(grid[form]) for form in forms}
    return [(form, ladders[form][i]) for i in range(max(map(len, ladders.values()), default=0))
            for form in forms if i < len(ladders[form])]


def _weighting_searched(config: Config, given: frozenset[str], multi_label: bool) -> bool:
    """Whether the n-gram stage also fits unweighted: when the data rules balanced the
    classes (``training.class_weight``, the imbalance rule) and the command line did not pin it. Balanced
    weights help where the validation split's classes are spread unlike the training split's (SST-5's phrases
    and sentences) and cost accuracy where they are spread alike (Wisesight: 0.8 point of dev accuracy); the
    validation split says which (``docs/decisions.md``, class weights). Single-label runs
    only: a multi-label run's weights are each label's positives'."""
    return (config.training.class_weight == "balanced" and "training.class_weight" not in given
            and not multi_label)


