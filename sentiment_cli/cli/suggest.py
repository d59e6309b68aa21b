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
from .app import DEFAULT_CHECKPOINT, Device, app, handle_errors
from .options import column_options
from .render import consoles, json_text, print_note, render_suggestions

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
                     inputs=[("--unlabelled", unlabelled), *([("--labelled", labelled)] if labelled else [])])
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
