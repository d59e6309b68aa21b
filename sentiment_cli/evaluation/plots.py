"""Pictures: training curves, confusion matrices and reliability diagrams, as PNG bytes.

They need matplotlib, an optional extra (``pip install
"sentiment-cli[plot]"``); they are drawn on a bare ``Figure`` with the
non-interactive Agg canvas (no pyplot, no display, no global state).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch

from ..checkpoint import atomic_write
from ..data.labels import LABELS
from ..errors import SentimentError

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


def reliability_path(path: str | Path) -> Path:
    """Where ``eval --plot PATH`` puts the reliability diagram: beside ``PATH``, ``<stem>-reliability.png``."""
    path = Path(path)
    return path.with_name(f"{path.stem}-reliability.png")


def reliability_png(calibrated: dict[str, Any], uncalibrated: dict[str, Any], temperature: float,
                    title: str = "") -> bytes:
    """Reliability diagrams before and after temperature scaling, as PNG bytes (Guo et al. 2017, figure 1).

    Two columns (left: the model's own probabilities; right: divided by the temperature). Top row:
    accuracy per equal-width confidence bin, with the gap to the diagonal (perfect calibration) shaded
    and the ECE in the corner. Bottom row: the share of predictions in each bin, so a large gap in a
    bin with few predictions reads as what it is.

    Args:
        calibrated, uncalibrated: :meth:`~sentiment_cli.evaluation.calibration.Reliability.to_dict` of the
            probabilities after and before the temperature (``edges``, ``counts``, ``accuracy``,
            ``confidence``, ``ece``).
        temperature: the temperature ``T`` applied on the right.
        title: figure title.

    Raises:
        PlotUnavailable: matplotlib is not installed.
    """
    Figure, Canvas = require_matplotlib()
    from matplotlib.ticker import PercentFormatter

    fig = Figure(figsize=(9.6, 5.6), layout="constrained")
    axes = fig.subplots(2, 2, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    panels = ((uncalibrated, "before: softmax(logits)"),
              (calibrated, f"after: softmax(logits / T), T = {temperature:.3g}"))
    top = max(max(r["counts"]) / max(sum(r["counts"]), 1) for r, _ in panels) * 100
    for col, (r, name) in enumerate(panels):
        ax, ax_n = axes[0, col], axes[1, col]
        edges = r["edges"]
        width = [hi - lo for lo, hi in zip(edges[:-1], edges[1:])]
        mids = [(lo + hi) / 2 for lo, hi in zip(edges[:-1], edges[1:])]
        filled = [n > 0 for n in r["counts"]]
        acc = [a if f else 0.0 for a, f in zip(r["accuracy"], filled)]
        conf = [c if f else 0.0 for c, f in zip(r["confidence"], filled)]
        ax.bar(mids, acc, width=width, color="tab:blue", edgecolor="navy", linewidth=0.6, label="accuracy")
        gap_lo = [min(a, c) for a, c in zip(acc, conf)]
        gap_h = [abs(c - a) for a, c in zip(acc, conf)]
        ax.bar(mids, gap_h, bottom=gap_lo, width=width, color="tab:red", alpha=0.3, edgecolor="tab:red",
               hatch="//", linewidth=0.6, label="gap to mean confidence")
        ax.plot([0, 1], [0, 1], "--", color="grey", linewidth=1.2, label="perfect calibration")
        ax.text(0.04, 0.95, f"ECE {r['ece']:.2%}", transform=ax.transAxes, va="top", fontsize=11,
                bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "lightgrey"})
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_title(name)
        ax.set_ylabel("accuracy in bin")
        ax.grid(alpha=0.3)
        share = [100 * n / max(sum(r["counts"]), 1) for n in r["counts"]]
        ax_n.bar(mids, share, width=width, color="grey", edgecolor="dimgrey", linewidth=0.6)
        ax_n.set_ylim(0, top * 1.1 or 1)
        ax_n.yaxis.set_major_formatter(PercentFormatter(decimals=0))
        ax_n.set_xlabel("confidence (probability of the predicted label)")
        ax_n.set_ylabel("predictions")
        ax_n.grid(alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), frameon=False)
    if title:
        fig.suptitle(title)
    return _png(fig, Canvas)


def write_png(path: str | Path, png: bytes) -> None:
    """Write PNG bytes atomically (see :func:`~sentiment_cli.checkpoint.atomic_write`).

    Raises:
        OSError: the folder does not exist or is not writable.
    """
    atomic_write(path, png)
