"""``sentiment suggest``: which unlabelled texts to label next (``suggest/``), as a table, JSON and a file
(CSV or JSON Lines) to label."""

from __future__ import annotations

import sys
from contextlib import nullcontext
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from ..config import SEED_MAX
from ..wording import plural
from .app import DEFAULT_CHECKPOINT, Device, app, handle_errors
from .options import column_options
from .render import consoles, json_text, label_style, print_note, printable, safe, shorten

if TYPE_CHECKING:
    from ..suggest.run import Suggestions
    from ..inference.predictor import Predictor

TextColumnOption, _ = column_options("Column of --unlabelled and --labelled holding the texts; default: {names}.", "")


class Strategy(str, Enum):
    uncertainty = "uncertainty"
    diverse = "diverse"


class Space(str, Enum):
    encoder = "encoder"
    ngram = "ngram"


class Measure(str, Enum):
    margin = "margin"
    entropy = "entropy"


UnlabelledOption = Annotated[str, typer.Option(
    help="Texts to choose from: a .txt file (one per line), a CSV/TSV/JSON/JSONL/Parquet file with a text "
         "column, or a dataset folder (its unsupervised split, else its train split).", show_default=False)]
CheckpointOption = Annotated[Path, typer.Option(help="Checkpoint folder.")]
LabelledOption = Annotated[Optional[str], typer.Option(
    help="Texts labelled already (a file or folder as --unlabelled reads them, labels ignored): their "
         "duplicates and near-duplicates are left out.", show_default=False)]
NumberOption = Annotated[int, typer.Option("-n", "--number", min=1, help="How many texts to suggest.")]
StrategyOption = Annotated[Strategy, typer.Option(
    help="uncertainty: the texts the model is least sure of; diverse: the most uncertain of each of n "
         "clusters of the 30 n most uncertain (see --space).")]
SpaceOption = Annotated[Space, typer.Option(
    help="What diverse clusters: the model's max-pooled encoder states, or the texts' word 1-3-grams (LSA).")]
MeasureOption = Annotated[Measure, typer.Option(
    help="Uncertainty: the margin between the two most probable classes, or the entropy.")]
OutputOption = Annotated[Path, typer.Option("--output", "-o", help="File to write, .csv or .jsonl (the suffix chooses "
                                                                   "the format): text, an empty label column to fill "
                                                                   "in, rank and scores.")]
ForceOption = Annotated[bool, typer.Option("--force", help="Replace --output if it exists (never a file it reads).")]
SeedOption = Annotated[int, typer.Option(min=0, max=SEED_MAX, help="Seed of the diverse strategy's k-means.")]
DeviceOption = Annotated[Device, typer.Option(help="Where to run the model.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object (summary and picks) instead of "
                                                         "a table.")]


@app.command()
def suggest(
    unlabelled: UnlabelledOption,
    checkpoint: CheckpointOption = DEFAULT_CHECKPOINT,
    labelled: LabelledOption = None,
    n: NumberOption = 100,
    strategy: StrategyOption = Strategy.uncertainty,
    space: SpaceOption = Space.ngram,
    measure: MeasureOption = Measure.margin,
    output: OutputOption = Path("suggest.csv"),
    force: ForceOption = False,
    text_column: TextColumnOption = None,
    seed: SeedOption = 0,
    device: DeviceOption = Device.cpu,
    as_json: JsonOption = False,
) -> None:
    """Suggest which unlabelled texts to label next, and write them to a file (CSV or JSON Lines) to fill in for
    `train --data`.

    Noise-like texts, duplicates and near-duplicates (of each other, the picks, --labelled texts) are left out.
    """
    with handle_errors():
        from ..suggest.picks_file import write_picks
        from ..inference.predictor import Predictor
        from ..outputs import TABLE_TYPES, check_output
        from ..runtime import resolve_device

        # before any work: the answer would have nowhere to go, or would write over what it reads
        check_output(output, force=force, suffixes=TABLE_TYPES,
                     inputs=[("the checkpoint", checkpoint), ("--unlabelled", unlabelled),
                             *([("--labelled", labelled)] if labelled else [])])
        out, err = consoles()
        predictor = Predictor(checkpoint, resolve_device(device.value))
        texts, where, known = _read_texts(err, unlabelled, labelled, text_column or "", spinner=not as_json)
        result = _pick(err, predictor, texts, n, strategy.value, measure.value, space=space.value, known=known,
                       seed=seed)
        path = write_picks(result, output)
        if as_json:
            record = result.to_dict() | {"unlabelled": where, "labelled": len(known),
                                         "checkpoint": str(checkpoint), "output": str(path)}
            sys.stdout.write(json_text(record) + "\n")
            return
        render_suggestions(out, result, where, path)


def _read_texts(err, unlabelled: str, labelled: str | None, text_column: str,
                spinner: bool) -> tuple[list[str], str, list[str]]:
    """``(the pool's texts, where they came from, the --labelled texts)``, under a spinner on a terminal when
    ``spinner``; the pool's notes go to ``err``.

    Raises:
        DataError: either file is missing, unreadable or empty (as
            :func:`~sentiment_cli.data.unlabelled.load_unlabelled`).
    """
    from ..data.unlabelled import load_unlabelled

    with err.status("reading the texts…") if spinner and err.is_terminal else nullcontext():
        pool = load_unlabelled(unlabelled, text_column, strict=True)
        known = _labelled_texts(labelled, text_column) if labelled else []
    for note in pool.notes:
        print_note(err, note)
    return pool.texts, pool.where, known


def _pick(err, predictor: Predictor, texts: list[str], n: int, strategy: str, measure: str, *, space: str,
          known: list[str], seed: int) -> Suggestions:
    """:func:`~sentiment_cli.suggest.run.suggest` over ``texts`` (its arguments), with a progress bar on ``err``
    while it scores them.

    Raises:
        What :func:`~sentiment_cli.suggest.run.suggest` raises (``UsageError`` for a bad strategy or space).
    """
    from ..suggest.run import suggest as run_suggest
    from .progress import RichEvalCallbacks

    progress = RichEvalCallbacks(err, "scoring")
    done = [0]

    def on_progress(finished: int, total: int) -> None:
        if progress.progress is None:
            progress.on_start(total)
        progress.on_batch(finished - done[0])
        done[0] = finished

    try:
        return run_suggest(predictor, texts, n, strategy, measure, space=space, known=known, seed=seed,
                           on_progress=on_progress)
    finally:
        progress.close()


def _labelled_texts(path: str, text_column: str) -> list[str]:
    """The texts of ``--labelled PATH`` (read as ``--unlabelled`` is; its label column is not needed).

    Raises:
        DataError, UsageError: as :func:`~sentiment_cli.data.unlabelled.load_unlabelled`, naming ``--labelled``.
    """
    from ..data.unlabelled import load_unlabelled
    from ..errors import DataError, UsageError

    try:
        return load_unlabelled(path, text_column, strict=True).texts
    except (DataError, UsageError) as exc:
        raise type(exc)(str(exc).replace("--unlabelled", "--labelled", 1)) from None


# ----------------------------------------------------------------------------- rendering: suggest's output

def _predicted_text(pick) -> str:
    """A pick's prediction with its probability: ``"joy 0.81"``; a multi-label model's set, ``"joy 0.81, love 0.40"``
    (``"(none)"`` when it predicts no label)."""
    names = pick.predicted_labels if pick.predicted_labels is not None else [pick.predicted]
    return ", ".join(f"{printable(n)} {pick.probabilities[n]:.2f}" for n in names) or "(none)"


def render_suggestions(console, result, where: str, output) -> None:
    """The picks of ``sentiment suggest`` (:class:`~sentiment_cli.suggest.run.Suggestions`), what was left out and
    why, and where the CSV went."""
    from rich.table import Table
    from rich.text import Text

    from ..suggest.exclusions import LEFT_OUT

    diverse = result.strategy == "diverse"
    table = Table(title=f"{plural(len(result.picks), 'text')} to label next "
                        f"({result.strategy}, {result.measure})", title_justify="left")
    # the numbers keep their width (min_width); the text takes what is left
    shown = {p.rank: _predicted_text(p) for p in result.picks}
    width = min(40, max(len(t) for t in shown.values())) if result.picks else 9
    table.add_column("#", justify="right", no_wrap=True, min_width=len(str(len(result.picks))))
    table.add_column("index", justify="right", no_wrap=True, min_width=max(5, len(f"{result.read:,}")))
    table.add_column(result.measure, justify="right", no_wrap=True, min_width=max(6, len(result.measure)))
    table.add_column("predicted", no_wrap=True, min_width=width)
    if diverse:
        table.add_column("cluster", justify="right", no_wrap=True, min_width=7)
    fixed = sum(c.min_width + 3 for c in table.columns) + 4     # the other columns, their padding and borders
    table.add_column("text", overflow="ellipsis", no_wrap=True, max_width=max(10, console.width - fixed))
    for p in result.picks:
        value = p.margin if result.measure == "margin" else p.entropy
        style = None if p.predicted_labels is not None else label_style(p.predicted, result.labels)
        cells = [str(p.rank), f"{p.index:,}", f"{value:.3f}", Text(shorten(shown[p.rank], 40), style=style)]
        if diverse:
            cells.append(str(p.cluster))
        table.add_row(*cells, Text(printable(shorten(p.text, 400))))
    console.print(table)
    clusters = f"; {result.clusters} clusters of {result.space} vectors" if diverse else ""
    console.print(f"read {result.read:,} texts from {safe(where)}; scored {result.scored:,} in "
                  f"{result.seconds:.1f} s{clusters}", highlight=False, soft_wrap=True)
    for reason, count in result.left_out.items():
        console.print(f"left out {count:,} ({reason}): {LEFT_OUT[reason]}", highlight=False, soft_wrap=True)
    column = "labels column (the label names joined by ',')" if getattr(result, "multi_label", False) \
        else "label column"
    console.print(f"wrote {safe(str(output))}: fill in its {column}, then `sentiment train --data "
                  f"{safe(str(output))}`", highlight=False, soft_wrap=True)
