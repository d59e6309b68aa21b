"""``sentiment train`` and ``sentiment pretrain``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..config import PRESETS, build_config
from ..errors import UsageError
from .app import DEFAULT_CHECKPOINT, DEFAULT_PRETRAINED, Device, app, handle_errors
from .progress import RichPretrainCallbacks, RichTrainCallbacks
from .render import consoles, render_pretrain_summary, render_report_note, render_train_summary


_CONFIG_HELP = "Preset (" + ", ".join(PRESETS) + ") or TOML file."
_SET_HELP = "Set any config key, e.g. training.lr=1e-3 (repeatable; checked like the file)."


@app.command()
def train(
    config: Annotated[Optional[str], typer.Option("--config", "-c", help=_CONFIG_HELP, show_default="default")] = None,
    sets: Annotated[Optional[list[str]], typer.Option("--set", metavar="SECTION.KEY=VALUE", help=_SET_HELP,
                                                      show_default=False)] = None,
    data: Annotated[Optional[str], typer.Option(
        help="Hub dataset id; folder (files named train, validation or dev, test; Hub layout; aclImdb); or one "
             "CSV, TSV, JSON, JSON Lines or Parquet file (validation held out from it).",
        show_default="stanfordnlp/imdb")] = None,
    text_column: Annotated[Optional[str], typer.Option(
        help="Override \\[data] text_column: the column holding the texts (default: the one named text, review, "
             "sentence or content).")] = None,
    label_column: Annotated[Optional[str], typer.Option(
        help="Override \\[data] label_column: the column holding the labels (default: the one named label, "
             "sentiment, rating, stars or class).")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Checkpoint folder to write.",
                                                   show_default=str(DEFAULT_CHECKPOINT))] = None,
    epochs: Annotated[Optional[int], typer.Option(help="Override \\[training] epochs.")] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="Override \\[training] batch_size.")] = None,
    lr: Annotated[Optional[float], typer.Option(help="Override \\[training] lr (peak learning rate).")] = None,
    device: Annotated[Optional[Device], typer.Option(help="Override \\[training] device.")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Override \\[training] seed.")] = None,
    init: Annotated[Optional[Path], typer.Option("--init", help="Start from this `sentiment pretrain` folder "
                                                 "(overrides \\[training] init_from).")] = None,
    resume: Annotated[Optional[str], typer.Option(
        "--resume", metavar="[DIR]", show_default=False,
        help="Continue the run saved in DIR (default: --output) from its last completed epoch, with its "
             "saved settings; only --epochs and --device may change.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print metrics.json instead of tables.")] = False,
) -> None:
    """Train a classifier and save the best epoch (by validation accuracy; the last without validation) as a checkpoint folder.

    Ctrl-C or SIGTERM stops at the next step; the last completed epoch is kept and `--resume` continues it.
    """
    with handle_errors():
        from ..training.interrupts import stop_on_signals
        from ..training.loop import resume as run_resume
        from ..training.loop import train as run_train

        if resume is not None:
            folder = _resume_folder(resume, output)
            changed = [flag for flag, value in (("--config", config), ("--set", sets), ("--data", data),
                                                ("--text-column", text_column), ("--label-column", label_column),
                                                ("--batch-size", batch_size), ("--lr", lr), ("--seed", seed),
                                                ("--init", init))
                       if value not in (None, [])]
            if changed:
                raise UsageError(f"--resume continues the saved run with its saved settings; drop {', '.join(changed)} "
                                 "(only --epochs and --device can change)")
        else:
            cfg = build_config(config, sets or (), {
                "data": {"source": data, "text_column": text_column, "label_column": label_column},
                "training": {"epochs": epochs, "batch_size": batch_size, "lr": lr,
                             "device": device.value if device else None, "seed": seed,
                             "init_from": str(init) if init is not None else None}})
        out, err = consoles()
        callbacks = None if as_json else RichTrainCallbacks(err)
        try:
            with stop_on_signals() as stop:
                if resume is not None:
                    result = run_resume(folder, callbacks, epochs=epochs, device=device.value if device else None,
                                        stop=stop)
                else:
                    result = run_train(cfg, output or DEFAULT_CHECKPOINT, callbacks, stop=stop)
        finally:
            if callbacks is not None:
                callbacks.close()
        if not result.is_main:   # torchrun ranks other than 0 stay quiet
            return
        if as_json:
            typer.echo(json.dumps(result.metrics))
        else:
            render_train_summary(out, result)
        render_report_note(out if not as_json else err, result.report)


@app.command()
def pretrain(
    config: Annotated[Optional[str], typer.Option("--config", "-c", help=_CONFIG_HELP + " Reads \\[model], "
                                                  "\\[data], \\[pretrain].", show_default="default")] = None,
    sets: Annotated[Optional[list[str]], typer.Option("--set", metavar="SECTION.KEY=VALUE", help=_SET_HELP,
                                                      show_default=False)] = None,
    data: Annotated[Optional[str], typer.Option(help="Hub dataset id, local folder or file (as for train).",
                                                show_default="stanfordnlp/imdb")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Folder for the pretrained encoder.",
                                                   show_default=str(DEFAULT_PRETRAINED))] = None,
    epochs: Annotated[Optional[int], typer.Option(help="Override \\[pretrain] epochs.")] = None,
    splits: Annotated[Optional[str], typer.Option(help="Override \\[pretrain] splits: unsupervised+train, "
                                                       "unsupervised or train.")] = None,
    device: Annotated[Optional[Device], typer.Option(help="Override \\[training] device.")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Override \\[training] seed.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print metrics.json instead of tables.")] = False,
) -> None:
    """Pretrain on unlabelled reviews (never validation or test): word2vec embeddings or a masked language model.

    `sentiment train --init DIR` then fine-tunes it.

    Ctrl-C or SIGTERM stops at the next step (word2vec: the next epoch); completed epochs stay saved.
    """
    with handle_errors():
        from ..training.interrupts import stop_on_signals
        from ..training.pretrain import pretrain as run_pretrain

        cfg = build_config(config, sets or (), {
            "data": {"source": data}, "pretrain": {"epochs": epochs, "splits": splits},
            "training": {"device": device.value if device else None, "seed": seed}})
        out, err = consoles()
        callbacks = None if as_json else RichPretrainCallbacks(err)
        try:
            with stop_on_signals() as stop:
                result = run_pretrain(cfg, output or DEFAULT_PRETRAINED, callbacks, stop=stop)
        finally:
            if callbacks is not None:
                callbacks.close()
        if as_json:
            typer.echo(json.dumps(result.metrics))
            return
        render_pretrain_summary(out, result)


def _resume_folder(resume: str, output: Optional[Path]) -> Path:
    """``--resume DIR`` or bare ``--resume`` (then ``--output``, or the default folder)."""
    if not resume:
        return output or DEFAULT_CHECKPOINT
    folder = Path(resume)
    if output is not None and output.resolve() != folder.resolve():
        raise UsageError(f"--resume {resume} and --output {output} name different folders; "
                         "a resumed run writes where it started")
    return folder
