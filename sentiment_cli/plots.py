"""Pictures: training curves and confusion matrices, as PNG bytes.

They need matplotlib, an optional extra (``pip install
"sentiment-cli[plot]"``); they are drawn on a bare ``Figure`` with the
non-interactive Agg canvas (no pyplot, no display, no global state).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch

from .checkpoint import atomic_write
from .data import LABELS
from .errors import SentimentError

PLOT_INSTALL = 'pip install "sentiment-cli[plot]"'


class PlotUnavailable(SentimentError):
    """matplotlib is not installed, so no picture can be drawn (exit 1); the message says how to get it."""


def require_matplotlib():
    """``(Figure, FigureCanvasAgg)`` from matplotlib.

    Raises:
        PlotUnavailable: matplotlib is not installed; the message gives the install command.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotUnavailable(f"matplotlib is not installed; to get the picture: {PLOT_INSTALL}") from None
    return Figure, FigureCanvasAgg


def plot_available() -> bool:
    """Whether matplotlib can be imported (pictures can be drawn)."""
    try:
        require_matplotlib()
    except PlotUnavailable:
        return False
    return True


def _png(fig, canvas_cls) -> bytes:
    canvas_cls(fig)  # attaches the Agg canvas to the figure
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def curves_png(history: list[dict[str, Any]], best_epoch: int | None = None, title: str = "") -> bytes:
    """Training curves as PNG bytes: loss (left) and accuracy (right) per epoch, train and validation.

    Args:
        history: ``metrics.json``'s ``history`` (``epoch``, ``train_loss``,
            ``validation_loss``, ``train_accuracy``, ``validation_accuracy``;
            the validation values are ``None`` for a run without validation,
            and then only the train curves are drawn).
        best_epoch: marked with a dotted line when given and the run had validation.
        title: figure title.

    Raises:
        PlotUnavailable: matplotlib is not installed.
        ValueError: ``history`` is empty.
    """
    if not history:
        raise ValueError("no epochs to plot")
    Figure, Canvas = require_matplotlib()
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    epochs = [r["epoch"] for r in history]
    validated = any(r.get("validation_accuracy") is not None for r in history)   # not when trained on all of train
    fig = Figure(figsize=(10, 4.4), layout="constrained")
    ax_loss, ax_acc = fig.subplots(1, 2)
    for ax, key, name in ((ax_loss, "loss", "cross-entropy loss"), (ax_acc, "accuracy", "accuracy")):
        scale = 100.0 if key == "accuracy" else 1.0
        ax.plot(epochs, [r[f"train_{key}"] * scale for r in history], "o-", color="tab:blue",
                label="train (running mean over the epoch)")
        if validated:
            ax.plot(epochs, [r[f"validation_{key}"] * scale for r in history], "s-", color="tab:orange",
                    label="validation (after the epoch)")
        if validated and best_epoch is not None:
            ax.axvline(best_epoch, color="grey", linestyle=":", linewidth=1.2, label=f"best epoch ({best_epoch})")
        ax.set_title(key)
        ax.set_xlabel("epoch")
        ax.set_ylabel(name)
        ax.set_xlim(epochs[0] - 0.5, epochs[-1] + 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        if key == "accuracy":
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}%"))
        ax.grid(alpha=0.3)
    handles, labels = ax_loss.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), frameon=False)
    if title:
        fig.suptitle(title)
    return _png(fig, Canvas)


def confusion_png(confusion_matrix: list[list[int]], labels: list[str] | tuple[str, ...] = LABELS,
                  title: str = "") -> bytes:
    """A confusion matrix as PNG bytes: rows true label, columns predicted, counts and row shares.

    Args:
        confusion_matrix: N x N counts, rows true label, columns predicted, in ``labels`` order.
        labels: the N class names.
        title: figure title.

    Raises:
        PlotUnavailable: matplotlib is not installed.
        ValueError: the matrix is not ``len(labels)`` square.
    """
    n = len(labels)
    if len(confusion_matrix) != n or any(len(row) != n for row in confusion_matrix):
        raise ValueError(f"confusion matrix is not {n} x {n}")
    Figure, Canvas = require_matplotlib()
    cm = torch.tensor(confusion_matrix, dtype=torch.float64)
    rows = cm.sum(dim=1, keepdim=True).clamp(min=1)
    share = (cm / rows).tolist()                                        # row-normalised: recall per class
    side = max(4.2, 0.85 * n + 2.2)   # cells stay readable as classes are added
    fig = Figure(figsize=(side + 0.6, side))
    ax = fig.subplots()
    ax.imshow(share, cmap="Blues", vmin=0.0, vmax=1.0)
    size = 10 if n <= 6 else 8 if n <= 12 else 6
    for i in range(n):
        for j in range(n):
            ax.text(j, i, f"{int(cm[i, j]):,}\n{share[i][j]:.1%}", ha="center", va="center", fontsize=size,
                    color="white" if share[i][j] > 0.5 else "black")
    ax.set_xticks(range(n), labels, rotation=30 if any(len(x) > 8 for x in labels) else 0, ha="right"
                  if any(len(x) > 8 for x in labels) else "center")
    ax.set_yticks(range(n), labels)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true label")
    if title:
        ax.set_title(title)
    return _png(fig, Canvas)


def write_png(path: str | Path, png: bytes) -> None:
    """Write PNG bytes atomically (see :func:`~sentiment_cli.checkpoint.atomic_write`).

    Raises:
        OSError: the folder does not exist or is not writable.
    """
    atomic_write(path, png)
