"""Live progress on stderr with rich: the library's progress callbacks, implemented for a terminal."""

from __future__ import annotations

from .render import print_note, safe


class RichTrainCallbacks:
    """Renders training progress: one progress bar per epoch, then a line per epoch."""

    def __init__(self, console):
        from ..training.callbacks import TrainCallbacks  # noqa: F401  (documents the protocol implemented)
        self.console = console
        self.progress = None
        self.task = None
        self.stage = None

    def _new_progress(self):
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)
        self.close()
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
            console=self.console, transient=True, disable=not self.console.is_terminal,
        )
        self.progress.start()

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
        if self.stage is not None:
            self.stage.close()

    def on_stage(self, text: str) -> None:
        self.console.print(f"[dim]{safe(text)}…[/]", highlight=False)

    def on_note(self, text: str) -> None:
        print_note(self.console, text)

    def on_epoch_start(self, epoch: int, epochs: int, num_examples: int) -> None:
        self._new_progress()
        self.task = self.progress.add_task(f"epoch {epoch}/{epochs}", total=num_examples, stats="")

    def on_step(self, examples: int, loss: float, accuracy: float, examples_per_second: float) -> None:
        self.progress.update(self.task, advance=examples,
                             stats=f"loss {loss:.4f} acc {accuracy:.2%} {examples_per_second:,.0f} ex/s")

    def on_validation_start(self, num_examples: int) -> None:
        if self.progress is None:   # validation without an epoch before it (epochs = 0: the n-gram score alone)
            self._new_progress()
        else:
            self.progress.update(self.task, visible=False)
        self.task = self.progress.add_task("validation", total=num_examples, stats="")

    def on_validation_step(self, examples: int) -> None:
        self.progress.update(self.task, advance=examples)

    def for_pretraining(self) -> "RichPretrainCallbacks":
        self.stage = RichPretrainCallbacks(self.console)   # closed with this one
        return self.stage

    def on_epoch_end(self, r: dict) -> None:
        self.close()
        val = ("" if r["validation_accuracy"] is None   # trained on all of train: nothing to validate on
               else f"val loss {r['validation_loss']:.4f} acc {r['validation_accuracy']:.2%}  ")
        star = "  [green]best[/]" if r["best"] and val else ""
        self.console.print(
            f"epoch {r['epoch']:>2}  train loss {r['train_loss']:.4f} acc {r['train_accuracy']:.2%}  {val}"
            f"{r['train_examples_per_second']:,.0f} ex/s  {r['train_seconds']:.1f}s{star}",
            highlight=False, soft_wrap=True)


class RichPretrainCallbacks(RichTrainCallbacks):
    """Renders pretraining progress: masked-word loss and accuracy (among the sampled candidates) for mlm."""

    def on_step(self, examples: int, loss: float, accuracy: float, examples_per_second: float) -> None:
        self.progress.update(self.task, advance=examples,
                             stats=f"loss {loss:.4f} acc {accuracy:.2%} {examples_per_second:,.0f} ex/s")

    def on_epoch_end(self, r: dict) -> None:
        self.close()
        mlm = f"mlm loss {r['mlm_loss']:.4f} acc {r['mlm_accuracy']:.2%}  " if "mlm_loss" in r else ""
        if "rtd_loss" in r:
            mlm = f"replaced-token loss {r['rtd_loss']:.4f} acc {r['rtd_accuracy']:.2%}  generator's {mlm}"
        self.console.print(f"epoch {r['epoch']:>2}  {mlm}{r['train_examples_per_second']:,.0f} texts/s  "
                           f"{r['train_seconds']:.1f}s", highlight=False, soft_wrap=True)


class _SpinnerAndBar:
    """A spinner (``status``) and a progress bar (``progress``), each stopped once, by :meth:`close`."""

    def _stop_status(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None

    def close(self) -> None:
        self._stop_status()
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


class RichEvalCallbacks(_SpinnerAndBar):
    """Renders an evaluation's progress on stderr: a spinner while the split loads, then a progress bar."""

    def __init__(self, console, description: str):
        self.console, self.description = console, description
        self.status = self.progress = self.task = None

    def on_stage(self, text: str) -> None:
        self.status = self.console.status(safe(text))
        self.status.start()

    def on_start(self, num_examples: int) -> None:
        from rich.progress import Progress

        self._stop_status()
        self.progress = Progress(console=self.console, transient=True, disable=not self.console.is_terminal)
        self.progress.start()
        self.task = self.progress.add_task(safe(self.description), total=num_examples)

    def on_batch(self, examples: int) -> None:
        self.progress.update(self.task, advance=examples)

    def on_note(self, text: str) -> None:
        self.console.print(f"[dim]note: {safe(text)}[/]", highlight=False, soft_wrap=True)


class RichAuditCallbacks(_SpinnerAndBar):
    """Renders an audit's progress on stderr, in a terminal only (piped, stderr holds errors alone): a spinner
    per stage, and a progress bar per fold of the cross-fit that stays, with the fold's time."""

    def __init__(self, console):
        from ..audit.callbacks import AuditCallbacks  # noqa: F401  (documents the protocol implemented)
        self.console = console
        self.progress = self.task = self.status = None

    def on_stage(self, text: str) -> None:
        self.close()
        if self.console.is_terminal:
            self.status = self.console.status(safe(text))
            self.status.start()

    def on_fold_start(self, fold: int, folds: int, fit_rows: int, held_out_rows: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._stop_status()
        if self.progress is None:
            self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), console=self.console,
                                     disable=not self.console.is_terminal)
            self.progress.start()
        self.task = self.progress.add_task(f"fold {fold}/{folds}: fit on {fit_rows:,} rows, score {held_out_rows:,}",
                                           total=held_out_rows)

    def on_fold_end(self, fold: int, held_out_rows: int) -> None:
        self.progress.update(self.task, advance=held_out_rows)



class RichRowsProgress(_SpinnerAndBar):
    """``predict --data``'s progress on stderr: a spinner while the data loads, then rows done of all, rows/s
    and the time left (in a terminal only; piped, stderr holds errors alone)."""

    def __init__(self, console, description: str = "scoring"):
        self.console, self.description = console, description
        self.status = self.progress = self.task = None

    def on_stage(self, text: str) -> None:
        if self.console.is_terminal:
            self.status = self.console.status(safe(text))
            self.status.start()

    def on_start(self, rows: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self._stop_status()
        rate = TextColumn("{task.fields[rate]}")
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), rate,
                                 TimeRemainingColumn(), console=self.console, transient=True,
                                 disable=not self.console.is_terminal)
        self.progress.start()
        self.task = self.progress.add_task(safe(self.description), total=rows, rate="")

    def on_batch(self, rows: int) -> None:
        self.progress.update(self.task, advance=rows)
        speed = self.progress.tasks[0].speed
        if speed:
            self.progress.update(self.task, rate=f"{speed:,.0f} rows/s")
