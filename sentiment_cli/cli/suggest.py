"""``sentiment suggest``: which unlabelled texts to label next (``audit/suggest.py``), as a table, JSON and a CSV."""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from .app import DEFAULT_CHECKPOINT, Device, app, handle_errors
from .options import column_options
from .render import consoles, print_note, render_suggestions

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


@app.command()
def suggest(
    unlabelled: Annotated[str, typer.Option(
        help="Texts to choose from: a .txt file (one per line), a CSV/TSV/JSON/JSONL/Parquet file with a text "
             "column, or a dataset folder (its unsupervised split, else its train split).", show_default=False)],
    checkpoint: Annotated[Path, typer.Option(help="Checkpoint folder.")] = DEFAULT_CHECKPOINT,
    labelled: Annotated[Optional[str], typer.Option(
        help="Texts labelled already (a file or folder as --unlabelled reads them, labels ignored): their "
             "duplicates and near-duplicates are left out.", show_default=False)] = None,
    n: Annotated[int, typer.Option("-n", "--number", min=1, help="How many texts to suggest.")] = 100,
    strategy: Annotated[Strategy, typer.Option(
        help="uncertainty: the texts the model is least sure of; diverse: the most uncertain of each of n "
             "clusters of the 30 n most uncertain (see --space).")] = Strategy.uncertainty,
    space: Annotated[Space, typer.Option(
        help="What diverse clusters: the model's max-pooled encoder states, or the texts' word 1-3-grams (LSA).")
    ] = Space.ngram,
    measure: Annotated[Measure, typer.Option(
        help="Uncertainty: the margin between the two most probable classes, or the entropy.")] = Measure.margin,
    output: Annotated[Path, typer.Option("--output", "-o", help="CSV file to write: text, an empty label column "
                                                                "to fill in, rank and scores.")] = Path("suggest.csv"),
    force: Annotated[bool, typer.Option("--force", help="Replace --output if it exists.")] = False,
    text_column: TextColumnOption = None,
    seed: Annotated[int, typer.Option(help="Seed of the diverse strategy's k-means.")] = 0,
    device: Annotated[Device, typer.Option(help="Where to run the model.")] = Device.cpu,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object (summary and picks) instead of "
                                                         "a table.")] = False,
) -> None:
    """Suggest which unlabelled texts to label next, and write them to a CSV file to fill in for `train --data`.

    Noise-like texts, duplicates and near-duplicates (of each other, the picks, --labelled texts) are left out.
    """
    with handle_errors():
        from ..audit.suggest import suggest as run_suggest
        from ..audit.suggest import write_csv
        from ..errors import UsageError

        if output.is_dir():   # before any work: the answer would have nowhere to go
            raise UsageError(f"--output {output}: is a folder; give a CSV file name")
        if output.exists() and not force:
            raise UsageError(f"--output {output}: the file exists; pass --force to replace it, or choose another name")
        out, err = consoles()
        from ..data.unlabelled import load_unlabelled
        from ..inference.predictor import Predictor
        from ..runtime import resolve_device
        from .progress import RichEvalCallbacks

        predictor = Predictor(checkpoint, resolve_device(device.value))
        with err.status("reading the texts…") if not as_json and err.is_terminal else nullcontext():
            pool = load_unlabelled(unlabelled, text_column or "")
            known = _labelled_texts(labelled, text_column or "") if labelled else []
        for note in pool.notes:
            print_note(err, note)
        progress = RichEvalCallbacks(err, "scoring")
        done = [0]

        def on_progress(finished: int, total: int) -> None:
            if progress.progress is None:
                progress.on_start(total)
            progress.on_batch(finished - done[0])
            done[0] = finished

        try:
            result = run_suggest(predictor, pool.texts, n, strategy.value, measure.value, space=space.value,
                                 known=known, seed=seed, on_progress=on_progress)
        finally:
            progress.close()
        path = write_csv(result, output, force=force)
        if as_json:
            record = result.to_dict() | {"unlabelled": pool.where, "labelled": len(known),
                                         "checkpoint": str(checkpoint), "output": str(path)}
            sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
            return
        render_suggestions(out, result, pool.where, path)


def _labelled_texts(path: str, text_column: str) -> list[str]:
    """The texts of ``--labelled PATH`` (read as ``--unlabelled`` is; its label column is not needed).

    Raises:
        DataError: as :func:`~sentiment_cli.data.unlabelled.load_unlabelled`, naming ``--labelled``.
    """
    from ..data.unlabelled import load_unlabelled
    from ..errors import DataError

    try:
        return load_unlabelled(path, text_column).texts
    except DataError as exc:
        raise DataError(str(exc).replace("--unlabelled", "--labelled", 1)) from None
