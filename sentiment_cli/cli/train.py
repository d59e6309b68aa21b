"""``sentiment train`` and ``sentiment pretrain``: parse the options, build the run configuration, run the
training library (:mod:`sentiment_cli.training`) until it finishes or is stopped, and render its summary."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional, TypeVar

import typer

from ..config import PRESETS, SEED_MAX, build_config, given_keys, parse_duration
from ..errors import UsageError
from ..wording import plural
from .app import DEFAULT_CHECKPOINT, DEFAULT_PRETRAINED, Device, app, handle_errors
from .options import LabelColumnsOption, column_options, label_columns as parse_label_columns
from .progress import RichPretrainCallbacks, RichTrainCallbacks
from .render import consoles, json_text, print_note, safe


_CONFIG_HELP = "Preset (" + ", ".join(PRESETS) + ") or TOML file."
_SET_HELP = "Set any config key, e.g. training.lr=1e-3 (repeatable; checked like the file)."

# Options of both commands.
SetOption = Annotated[Optional[list[str]], typer.Option("--set", metavar="SECTION.KEY=VALUE", help=_SET_HELP,
                                                        show_default=False)]
DeviceOption = Annotated[Optional[Device], typer.Option(help="Override \\[training] device.")]
SeedOption = Annotated[Optional[int], typer.Option(help=f"Override \\[training] seed (0 to {SEED_MAX:,}).")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print metrics.json instead of tables.")]

# sentiment train's.
ConfigOption = Annotated[Optional[str], typer.Option("--config", "-c", help=_CONFIG_HELP, show_default="default")]
DataOption = Annotated[Optional[str], typer.Option(
    help="Hub dataset id; folder (files named train, validation or dev, test; Hub layout; aclImdb); or one "
         "CSV, TSV, JSON, JSON Lines or Parquet file (validation held out from it).",
    show_default="stanfordnlp/imdb")]
UnlabelledOption = Annotated[Optional[str], typer.Option(
    metavar="PATH", help="Unlabelled text for pretraining and distillation (\\[data] unlabelled): a .txt file (one "
                         "text per line), a CSV, TSV, JSON, JSON Lines or Parquet file with a text column, or a "
                         "dataset folder (its unsupervised split).", show_default=False)]
TextColumnOption, LabelColumnOption = column_options(
    "Override \\[data] text_column: the column holding the texts (default: {names}).",
    "Override \\[data] label_column: the column holding the labels (default: {names}).")
MultiLabelOption = Annotated[bool, typer.Option(
    "--multi-label", show_default=False,
    help="Several labels per text (\\[data] multi_label true); default: found from the data (a label column of "
         "lists or of labels joined by , ; or |, or 0/1 label columns).")]
SingleLabelOption = Annotated[bool, typer.Option(
    "--single-label", show_default=False, help="One label per text (\\[data] multi_label false).")]
OutputOption = Annotated[Optional[Path], typer.Option("--output", "-o", help="Checkpoint folder to write.",
                                                      show_default=str(DEFAULT_CHECKPOINT))]
EpochsOption = Annotated[Optional[int], typer.Option(help="Override \\[training] epochs.")]
BatchSizeOption = Annotated[Optional[int], typer.Option(help="Override \\[training] batch_size.")]
LrOption = Annotated[Optional[float], typer.Option(help="Override \\[training] lr (peak learning rate).")]
TimeBudgetOption = Annotated[Optional[str], typer.Option(
    "--time-budget", metavar="DURATION", show_default="30m; 5m for a small set",
    help="How long the default may take from its start: reading the data, searching for its settings on the "
         "validation split and writing the winner (\\[training] time_budget): 90, 90s, 5m, 1h; 0 trains once with "
         "the data rules' settings.")]
InitOption = Annotated[Optional[Path], typer.Option("--init", help="Start from this `sentiment pretrain` folder "
                                                    "(overrides \\[training] init_from).")]
ResumeOption = Annotated[Optional[str], typer.Option(
    "--resume", metavar="[DIR]", show_default=False,
    help="Continue the run saved in DIR (default: --output) from its last completed epoch, with its "
         "saved settings; only --epochs and --device may change.")]

# sentiment pretrain's.
PretrainConfigOption = Annotated[Optional[str], typer.Option(
    "--config", "-c", help=_CONFIG_HELP + " Reads \\[model], \\[data], \\[pretrain].", show_default="default")]
PretrainDataOption = Annotated[Optional[str], typer.Option(help="Hub dataset id, local folder or file (as for train).",
                                                           show_default="stanfordnlp/imdb")]
PretrainOutputOption = Annotated[Optional[Path], typer.Option(
    "--output", "-o", help="Folder for the pretrained encoder.", show_default=str(DEFAULT_PRETRAINED))]
PretrainEpochsOption = Annotated[Optional[int], typer.Option(help="Override \\[pretrain] epochs.")]
SplitsOption = Annotated[Optional[str], typer.Option(help="Override \\[pretrain] splits: unsupervised+train, "
                                                          "unsupervised or train.")]
TrainForceOption = Annotated[bool, typer.Option(
    "--force", help="Write into an existing --output folder that holds other files (never into --data).")]
KeepStateOption = Annotated[bool, typer.Option(
    "--keep-state", help="Keep the trainer state (optimizer moments, RNG states) in the finished folder, so that "
                         "--resume --epochs N can train it longer; a stopped run always keeps it.")]
KeepFullOption = Annotated[bool, typer.Option(
    "--keep-full", help="When the run ships a compressed model (the default), also write the model before "
                        "compression into OUTPUT/full.")]
PolicyOption = Annotated[Optional[Path], typer.Option(
    "--policy", metavar="FILE", help="A TOML file of the default's tuning numbers to change (its data rules, search "
                                     "and fit; `sentiment config --policy` prints them all).")]

_T = TypeVar("_T")


@app.command()
def train(
    config: ConfigOption = None,
    sets: SetOption = None,
    data: DataOption = None,
    unlabelled: UnlabelledOption = None,
    text_column: TextColumnOption = None,
    label_column: LabelColumnOption = None,
    multi_label: MultiLabelOption = False,
    single_label: SingleLabelOption = False,
    label_columns: LabelColumnsOption = None,
    output: OutputOption = None,
    epochs: EpochsOption = None,
    batch_size: BatchSizeOption = None,
    lr: LrOption = None,
    device: DeviceOption = None,
    seed: SeedOption = None,
    init: InitOption = None,
    time_budget: TimeBudgetOption = None,
    resume: ResumeOption = None,
    force: TrainForceOption = False,
    keep_state: KeepStateOption = False,
    keep_full: KeepFullOption = False,
    policy: PolicyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Train a classifier and save the best epoch (by validation accuracy; the last without validation) as a checkpoint folder.

    Ctrl-C or SIGTERM stops at the next step; the last completed epoch is kept and `--resume` continues it.
    """
    with handle_errors():
        from ..training.policy import DEFAULT, policy_from_toml
        from ..training.run import resume as run_resume, train as run_train

        device_name, mode = (device.value if device else None), _multi_label_mode(multi_label, single_label)
        flags = {"--config": config, "--set": sets, "--data": data, "--unlabelled": unlabelled,
                 "--text-column": text_column, "--label-column": label_column,
                 "--multi-label / --single-label": mode, "--label-columns": label_columns,
                 "--batch-size": batch_size, "--lr": lr, "--seed": seed, "--init": init,
                 "--time-budget": time_budget, "--policy": policy}
        if resume is not None:
            folder = _resume_folder(resume, output)
            _refuse_changes(flags)
        else:
            cfg, given = _config_and_given(config, sets, _flag_sections(flags, epochs, device_name))
        rules, (out, err) = DEFAULT if policy is None else policy_from_toml(policy), consoles()
        callbacks = None if as_json else RichTrainCallbacks(err)
        if resume is not None:
            run = lambda stop: run_resume(folder, callbacks, epochs=epochs, device=device_name, stop=stop,  # noqa: E731
                                          keep_state=keep_state)
        else:
            run = lambda stop: run_train(cfg, output or DEFAULT_CHECKPOINT, callbacks, stop=stop,  # noqa: E731
                                         fit_to_data=given, force=force, policy=rules, keep_state=keep_state,
                                         keep_full=keep_full)
        result = _until_stopped(callbacks, run)
        if result.is_main:   # torchrun ranks other than 0 stay quiet
            _render_train(out, err, result, as_json)


def _flag_sections(flags: dict[str, Any], epochs: Optional[int], device: Optional[str]) -> dict[str, dict[str, Any]]:
    """``train``'s flags (``flags``: by their names on the command line) as config sections and keys."""
    init, budget = flags["--init"], flags["--time-budget"]
    return {"data": {"source": flags["--data"], "unlabelled": flags["--unlabelled"],
                     "text_column": flags["--text-column"], "label_column": flags["--label-column"],
                     "label_columns": parse_label_columns(flags["--label-columns"]),
                     "multi_label": flags["--multi-label / --single-label"]},
            "training": {"epochs": epochs, "batch_size": flags["--batch-size"], "lr": flags["--lr"], "device": device,
                         "seed": flags["--seed"], "init_from": str(init) if init is not None else None,
                         "time_budget": parse_duration(budget) if budget is not None else None}}


def _config_and_given(config: Optional[str], sets: Optional[list[str]],
                      flags: dict[str, dict[str, Any]]) -> tuple[Any, frozenset[str]]:
    """The run's config (the preset or file, ``--set``, then the flags) and the keys the command line set."""
    return build_config(config, sets or (), flags), given_keys(config, sets or (), flags)


@app.command()
def pretrain(
    config: PretrainConfigOption = None,
    sets: SetOption = None,
    data: PretrainDataOption = None,
    unlabelled: UnlabelledOption = None,
    output: PretrainOutputOption = None,
    epochs: PretrainEpochsOption = None,
    splits: SplitsOption = None,
    device: DeviceOption = None,
    seed: SeedOption = None,
    force: TrainForceOption = False,
    as_json: JsonOption = False,
) -> None:
    """Pretrain on unlabelled reviews (never validation or test): word2vec embeddings, a masked language model,
    or ELECTRA (pretrain.objective).

    `sentiment train --init DIR` then fine-tunes it.

    Ctrl-C or SIGTERM stops within seconds, in any stage; completed epochs stay saved (not an epoch cut short).
    """
    with handle_errors():
        from ..training.pretrain import pretrain as run_pretrain

        cfg = build_config(config, sets or (), {
            "data": {"source": data, "unlabelled": unlabelled}, "pretrain": {"epochs": epochs, "splits": splits},
            "training": {"device": device.value if device else None, "seed": seed}})
        out, err = consoles()
        callbacks = None if as_json else RichPretrainCallbacks(err)
        result = _until_stopped(callbacks, lambda stop: run_pretrain(cfg, output or DEFAULT_PRETRAINED, callbacks,
                                                                     stop=stop, force=force))
        if as_json:
            typer.echo(json_text(result.metrics, ensure_ascii=True))
            return
        render_pretrain_summary(out, result)


def _until_stopped(callbacks: Any, run: Callable[[Any], _T]) -> _T:
    """``run(stop)``, where ``stop`` is set by Ctrl-C or SIGTERM; the progress display ``callbacks`` (or
    ``None``) is closed however it ends."""
    from ..training.interrupts import stop_on_signals

    try:
        with stop_on_signals() as stop:
            return run(stop)
    finally:
        if callbacks is not None:
            callbacks.close()


def _render_train(out, err, result: Any, as_json: bool) -> None:
    """A finished run: ``metrics.json`` (``--json``) or the summary tables, then the note on the training
    report's files (on stderr with ``--json``, to keep stdout one JSON object)."""
    if as_json:
        typer.echo(json_text(result.metrics, ensure_ascii=True))
    else:
        render_train_summary(out, result)
    render_report_note(out if not as_json else err, result.report)


def _multi_label_mode(multi_label: bool, single_label: bool) -> Optional[str]:
    """``[data] multi_label`` as the flags set it: ``"true"`` (``--multi-label``), ``"false"``
    (``--single-label``), ``None`` (neither: the config's).

    Raises:
        UsageError: both flags.
    """
    if multi_label and single_label:
        raise UsageError("--multi-label and --single-label contradict each other; give one")
    return "true" if multi_label else "false" if single_label else None


def _refuse_changes(flags: dict[str, Any]) -> None:
    """``--resume`` continues a run with its saved settings: refuse the flags that would change them.

    Args:
        flags: each flag that cannot change, with its value (``None`` or ``[]``: not given).

    Raises:
        UsageError: any of ``flags`` was given.
    """
    changed = [flag for flag, value in flags.items() if value not in (None, [])]
    if changed:
        raise UsageError(f"--resume continues the saved run with its saved settings; drop {', '.join(changed)} "
                         "(only --epochs and --device can change)")


def _resume_folder(resume: str, output: Optional[Path]) -> Path:
    """``--resume DIR`` or bare ``--resume`` (then ``--output``, or the default folder).

    Raises:
        UsageError: ``DIR`` and ``--output`` name different folders.
    """
    if not resume:
        return output or DEFAULT_CHECKPOINT
    folder = Path(resume)
    if output is not None and output.resolve() != folder.resolve():
        raise UsageError(f"--resume {resume} and --output {output} name different folders; "
                         "a resumed run writes where it started")
    return folder


# ----------------------------------------------------------------------------- rendering: train, pretrain's output

def render_train_summary(console, result) -> None:
    """The per-epoch table of a finished training run (validation loss, accuracy and macro F1 when it was
    validated) and where its best epoch was saved. A refitted run (``training/refit.py``) shows the held-out
    run's table, which chose the epoch count, and says that the saved weights learned from every row."""
    from rich.table import Table

    if result.metrics.get("search"):
        render_search(console, result.metrics["search"])
    first = result.metrics.get("held_out_run")
    m = {**result.metrics, **first} if first else result.metrics
    validated = m["best_validation_accuracy"] is not None
    table = Table(title="training summary", title_justify="left",
                  caption="val F1: macro F1 (the mean of the classes' F1)" if validated else None,
                  caption_justify="left")
    for col in ("epoch", "train loss", "train acc", *(("val loss", "val acc", "val F1") if validated else ()),
                "ex/s", "seconds"):
        table.add_column(col, justify="right")
    for r in m["history"]:
        style = "bold green" if r["epoch"] == m["best_epoch"] else None
        val = (f"{r['validation_loss']:.4f}", f"{r['validation_accuracy']:.2%}",
               _f1(r.get("validation_f1_macro"))) if validated else ()   # no F1 in a history from before it
        if r.get("train_loss") is None:   # epoch 0: the n-gram score alone, no encoder epoch
            table.add_row(str(r["epoch"]), "–", "–", *val, "–", "–", style=style)
            continue
        table.add_row(str(r["epoch"]), f"{r['train_loss']:.4f}", f"{r['train_accuracy']:.2%}", *val,
                      f"{r['train_examples_per_second']:,.0f}", f"{r['train_seconds']:.1f}", style=style)
    console.print(table)
    f1 = m.get("best_validation_f1_macro")
    kept = (f"best epoch {m['best_epoch']} (validation accuracy {m['best_validation_accuracy']:.2%}"
            + (f", macro F1 {f1:.4f})" if f1 is not None else ")") if validated
            else f"epoch {m['best_epoch']}, the last (no validation split: trained on all of train)")
    if first:
        data, epochs = result.metrics["data"], m["best_epoch"]
        negated, words = 2 * data.get("negation_augment", 0), data.get("lexicon_prior", 0)
        added = [f"{negated:,} rule-negated sentences" if negated else "", f"{words:,} one-word lexicon rows" if words else ""]
        rows = f"{data['train_examples']:,} rows" + (f" (+ {', '.join(a for a in added if a)})" if any(added) else "")
        kept = (f"{kept}; then trained again on all {rows} for {plural(epochs, 'epoch')} "
                "(the refit), "
                f"with the temperature fitted on the {first['validation_examples']:,} held-out rows,")
    console.print(f"{kept} saved to {safe(str(result.checkpoint))}  ·  {result.metrics['wall_time_seconds']:.0f} s "
                  f"on {m['device']}"
                  + ("  ·  stopped early" if m["stopped_early"] else ""), highlight=False)
    cal = m.get("calibration") or {}
    if "ece" in cal and cal.get("multi_label"):
        shared = len(cal.get("shared_threshold_labels") or [])
        rare = f" ({shared} rare labels share one threshold, {cal['shared_threshold']:.2f})" if shared else ""
        console.print("a temperature and an F1 threshold per label fitted on the validation split" + rare
                      + f": mean ECE over labels {cal['ece_uncalibrated']:.2%} → {cal['ece']:.2%} (15 bins)",
                      highlight=False)
    elif "ece" in cal:
        console.print(f"temperature {cal['temperature']:.3f} fitted on the validation split: ECE "
                      f"{cal['ece_uncalibrated']:.2%} → {cal['ece']:.2%} (15 bins)", highlight=False)
    from ..card.text import encoder_missing

    missing = encoder_missing(result.metrics.get("search") or {})
    if missing:   # the last line: what the user got (issue 54)
        print_note(console, missing)


def render_search(console, search: dict) -> None:
    """The default's search (``metrics.json``'s ``"search"``): a row per candidate with its validation accuracy,
    log-loss and seconds, or what became of it; the chosen one in bold green."""
    from rich.table import Table

    from ..card.text import settings_phrase

    table = Table(title=f"the search on the validation split ({search['seconds']:,.0f} s of a "
                        f"{search['budget_seconds']:,.0f} s budget)", title_justify="left",
                  caption=f"chosen by {search['metric']}", caption_justify="left")
    for col, justify in (("candidate", "left"), ("val acc", "right"), ("log-loss", "right"),
                         ("seconds", "right"), ("status", "left"), ("settings", "left")):
        table.add_column(col, justify=justify)
    for c in search["candidates"]:
        done = c["status"] == "complete"
        settings = settings_phrase(c["settings"]) if c["kind"] == "encoder" else ""
        table.add_row(safe(c["name"]), f"{c['validation_accuracy']:.2%}" if done else "–",
                      f"{c['validation_nll']:.4f}" if done and c["validation_nll"] is not None else "–",
                      f"{c['seconds']:,.1f}", safe(c["status"] + (f": {c['ended']}" if c.get("ended") else "")),
                      safe(settings),
                      style="bold green" if c["name"] == search["chosen"] else None)
    console.print(table)


def _f1(value) -> str:
    return "–" if value is None else f"{value:.4f}"


def render_report_note(console, report) -> None:
    """Where the curves and the model card were written (or why there are no curves)."""

    if report is None:
        return
    if report.curves is not None:
        console.print(f"[dim]curves: {safe(str(report.curves))}  ·  model card: {safe(str(report.card))}[/]",
                      highlight=False, soft_wrap=True)
    else:
        console.print(f"[dim]model card: {safe(str(report.card))}[/]", highlight=False, soft_wrap=True)
        print_note(console, report.note)


def render_pretrain_summary(console, result) -> None:
    """Where the pretrained weights were saved, and how to fine-tune them."""
    import shlex

    m = result.metrics
    console.print(f"pretrained {m['objective']} weights saved to {safe(str(result.checkpoint))}  ·  "
                  f"{m['data']['reviews']:,} reviews ({m['data']['splits']})  ·  "
                  f"{m['wall_time_seconds']:.0f} s on {m['device']}", highlight=False)
    console.print(f"fine-tune it: sentiment train --init {safe(shlex.quote(str(result.checkpoint)))}", highlight=False)
