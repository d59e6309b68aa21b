"""What an audit reports while it runs: progress hooks (the library prints nothing; the CLI draws them)."""

from __future__ import annotations


class AuditCallbacks:
    """Hooks for progress reporting during :func:`~sentiment_cli.audit.run.audit`; the default does nothing."""

    def on_stage(self, text: str) -> None:
        """A stage begins (loading the rows, tokenizing, choosing the fit, ranking)."""

    def on_fold_start(self, fold: int, folds: int, fit_rows: int, held_out_rows: int) -> None:
        """Fold ``fold`` (1-based) of ``folds`` starts: a fit on ``fit_rows`` rows, then ``held_out_rows`` scored."""

    def on_fold_end(self, fold: int, held_out_rows: int) -> None:
        """Fold ``fold``'s held-out rows were scored."""
