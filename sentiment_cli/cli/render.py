"""Rich rendering shared by the commands: consoles, notes, and the tables and panels of each command's output.

Everything here only draws what a library call returned; nothing computes.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..wording import plural


def json_text(obj: Any, *, ensure_ascii: bool = False) -> str:
    """``obj`` as one line of JSON that any parser reads: never ``NaN`` or ``Infinity`` (Python's ``json``
    writes them, JSON has no such numbers). A non-finite float becomes ``null``; what ``--json`` prints goes
    through here."""
    try:
        return json.dumps(obj, ensure_ascii=ensure_ascii, allow_nan=False)
    except ValueError:   # a NaN or an infinity somewhere: null, as JavaScript's JSON.stringify writes them
        return json.dumps(_finite(obj), ensure_ascii=ensure_ascii, allow_nan=False)


def _finite(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by ``None``, in dicts, lists and tuples."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def consoles():
    """``(stdout console, stderr console)``."""
    from rich.console import Console
    return Console(), Console(stderr=True)


def print_note(console, text: str) -> None:
    """A yellow ``note:`` line: something the user should know that did not stop the command."""
    from rich.markup import escape
    console.print(f"[yellow]note:[/] {escape(text)}", highlight=False, soft_wrap=True)


# ----------------------------------------------------------------------------- train, pretrain

def render_train_summary(console, result) -> None:
    """The per-epoch table of a finished training run (validation loss, accuracy and macro F1 when it was
    validated) and where its best epoch was saved. A refitted run (``training/refit.py``) shows the held-out
    run's table, which chose the epoch count, and says that the saved weights learned from every row."""
    from rich.markup import escape
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
        negated = 2 * data.get("negation_augment", 0)
        rows = f"{data['train_examples'] - negated:,} rows" + (f" (+ {negated:,} rule-negated sentences)" if negated else "")
        kept = (f"{kept}; then trained again on all {rows} for {plural(epochs, 'epoch')} "
                "(the refit), "
                f"with the temperature fitted on the {first['validation_examples']:,} held-out rows,")
    console.print(f"{kept} saved to {escape(str(result.checkpoint))}  ·  {result.metrics['wall_time_seconds']:.0f} s "
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
    from rich.markup import escape
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
        table.add_row(escape(c["name"]), f"{c['validation_accuracy']:.2%}" if done else "–",
                      f"{c['validation_nll']:.4f}" if done and c["validation_nll"] is not None else "–",
                      f"{c['seconds']:,.1f}", escape(c["status"] + (f": {c['ended']}" if c.get("ended") else "")),
                      escape(settings),
                      style="bold green" if c["name"] == search["chosen"] else None)
    console.print(table)


def _f1(value) -> str:
    return "–" if value is None else f"{value:.4f}"


def render_report_note(console, report) -> None:
    """Where the curves and the model card were written (or why there are no curves)."""
    from rich.markup import escape

    if report is None:
        return
    if report.curves is not None:
        console.print(f"[dim]curves: {escape(str(report.curves))}  ·  model card: {escape(str(report.card))}[/]",
                      highlight=False, soft_wrap=True)
    else:
        console.print(f"[dim]model card: {escape(str(report.card))}[/]", highlight=False, soft_wrap=True)
        print_note(console, report.note)


def render_pretrain_summary(console, result) -> None:
    """Where the pretrained weights were saved, and how to fine-tune them."""
    import shlex

    from rich.markup import escape

    m = result.metrics
    console.print(f"pretrained {m['objective']} weights saved to {escape(str(result.checkpoint))}  ·  "
                  f"{m['data']['reviews']:,} reviews ({m['data']['splits']})  ·  "
                  f"{m['wall_time_seconds']:.0f} s on {m['device']}", highlight=False)
    console.print(f"fine-tune it: sentiment train --init {escape(shlex.quote(str(result.checkpoint)))}", highlight=False)


# ----------------------------------------------------------------------------- eval

def label_style(label: str, labels) -> str | None:
    """How to colour a label: with two classes the first red and the second green (IMDB's
    negative / positive); with more, bold (their order need not mean anything)."""
    labels = list(labels)
    if len(labels) == 2 and label in labels:
        return "red" if label == labels[0] else "green"
    return "bold"


def render_eval(console, r: dict) -> None:
    """An ``eval`` result: the headline, per-class precision / recall / F1 with the macro and weighted
    averages, and the N x N confusion matrix (rows true, columns predicted)."""
    from rich.markup import escape
    from rich.table import Table

    labels = r.get("labels") or ["negative", "positive"]
    console.print(f"[bold]{r['split']}[/]: {r['num_examples']:,} reviews  ·  {len(labels)} classes  ·  "
                  f"accuracy [bold]{r['accuracy']:.2%}[/]  ·  macro F1 {r['f1']['macro']:.4f}"
                  f"  ·  loss {r['loss']:.4f}  ·  {r['examples_per_second']:,.0f} reviews/s", highlight=False)
    cm = r["confusion_matrix"]
    support = r.get("support") or {name: sum(row) for name, row in zip(labels, cm)}
    per = Table(title="per class", title_justify="left")
    for col in ("class", "precision", "recall", "F1", "support"):
        per.add_column(col, justify="right" if col != "class" else "left")
    for name in labels:
        per.add_row(escape(name), f"{r['precision'][name]:.4f}", f"{r['recall'][name]:.4f}", f"{r['f1'][name]:.4f}",
                    f"{support[name]:,}")
    per.add_section()
    for avg in ("macro", "weighted"):
        if avg in r["precision"]:   # records written before weighted averages have only macro
            per.add_row(f"{avg} avg", f"{r['precision'][avg]:.4f}", f"{r['recall'][avg]:.4f}", f"{r['f1'][avg]:.4f}",
                        f"{r['num_examples']:,}", style="bold" if avg == "macro" else None)
    console.print(per)
    conf = Table(title="confusion matrix", title_justify="left",
                 caption="rows: true label · columns: predicted · bold: correct")
    conf.add_column("")
    for name in labels:
        conf.add_column(escape(name), justify="right")
    for i, name in enumerate(labels):
        conf.add_row(escape(name), *(f"[bold]{n:,}[/]" if i == j else f"{n:,}" for j, n in enumerate(cm[i])))
    console.print(conf)


def render_calibration(console, r: dict) -> None:
    """An ``eval`` result's calibration: ECE before and after the temperature (one line)."""
    if "ece" not in r:
        return
    t = r["temperature"]
    if t == 1.0:
        line = f"calibration: ECE [bold]{r['ece']:.2%}[/] (15 bins; no temperature fitted, T = 1)"
    else:
        line = (f"calibration: ECE [bold]{r['ece']:.2%}[/] with temperature {t:.3f}, "
                f"{r['ece_uncalibrated']:.2%} without (15 bins)")
    console.print(line, highlight=False)


def render_multilabel_eval(console, metrics: dict) -> None:
    """A multi-label ``eval`` result (``evaluation.multilabel.multilabel_metrics``' dict): the headline, a
    summary (micro / macro / weighted precision, recall and F1; subset accuracy, Hamming loss, LRAP, mean
    ECE) and the per-label table, most supported label first, with each label's threshold when the dict
    has ``"thresholds"`` (``{name: threshold}``)."""
    from rich.markup import escape
    from rich.table import Table

    m = metrics
    where = f"[bold]{escape(str(m['split']))}[/]: " if m.get("split") else ""
    console.print(f"{where}{m['examples']:,} texts  ·  {len(m['per_label'])} labels (multi-label)  ·  "
                  f"micro F1 [bold]{m['micro']['f1']:.4f}[/]  ·  subset accuracy {m['subset_accuracy']:.2%}",
                  highlight=False)
    averages = Table(title="summary", title_justify="left")
    for col in ("average", "precision", "recall", "F1"):
        averages.add_column(col, justify="left" if col == "average" else "right")
    for avg in ("micro", "macro", "weighted"):
        a = m[avg]
        averages.add_row(avg, f"{a['precision']:.4f}", f"{a['recall']:.4f}", f"{a['f1']:.4f}",
                         style="bold" if avg == "micro" else None)
    console.print(averages)
    sets = Table(caption="subset accuracy: texts with every label right · Hamming loss: wrong (text, label) "
                         "decisions · LRAP: label ranking average precision · ECE: mean over labels, 15 bins")
    for col in ("subset accuracy", "Hamming loss", "LRAP", "ECE"):
        sets.add_column(col, justify="right")
    sets.add_row(f"{m['subset_accuracy']:.2%}", f"{m['hamming_loss']:.4f}", f"{m['lrap']:.4f}", f"{m['ece']:.2%}")
    console.print(sets)
    console.print(_per_label_table(m))


def _per_label_table(m: dict):
    """The per-label rows of :func:`render_multilabel_eval`, by support (most first; ties in label order)."""
    from rich.markup import escape
    from rich.table import Table

    thresholds, ece = m.get("thresholds") or {}, m.get("ece_per_label") or {}
    per = Table(title="per label", title_justify="left")
    columns = ["label", "precision", "recall", "F1", "support"]
    columns += ["threshold"] * bool(thresholds) + ["ECE"] * bool(ece)
    for col in columns:
        per.add_column(col, justify="left" if col == "label" else "right")
    for name, r in sorted(m["per_label"].items(), key=lambda kv: -kv[1]["support"]):
        cells = [escape(name), f"{r['precision']:.4f}", f"{r['recall']:.4f}", f"{r['f1']:.4f}", f"{r['support']:,}"]
        if thresholds:
            cells.append(f"{thresholds[name]:.2f}" if name in thresholds else "–")
        if ece:
            cells.append(f"{ece[name]:.2%}" if name in ece else "–")
        per.add_row(*cells)
    return per


def _shorten(text: str, width: int) -> str:
    text = " ".join(text.replace("<br />", " ").split())
    return text if len(text) <= width else text[:width - 1].rstrip() + "…"


def render_label_set_errors(console, errors: list[dict], asked: int) -> None:
    """A multi-label model's most confident mistakes (``eval --errors``): predicted and true label sets, the
    labels decided wrongly, and the probability of the most confident wrong decision."""
    from rich.table import Table
    from rich.text import Text

    title = plural(len(errors), "most confident mistake")
    if len(errors) < asked:
        title += f" (only {len(errors)} in the split)"
    table = Table(title=title, title_justify="left", show_lines=True)
    for name, justify in (("#", "right"), ("index", "right"), ("predicted", "left"), ("true", "left"),
                          ("wrong", "left")):
        table.add_column(name, justify=justify)
    table.add_column("text", ratio=1)
    for i, e in enumerate(errors, 1):
        table.add_row(str(i), str(e["index"]), ", ".join(e["labels"]) or "-", ", ".join(e["true_labels"]) or "-",
                      Text(f"{', '.join(e['wrong'])} {e['probability']:.3f}", style="red"),
                      Text(_shorten(e["text"], 240)))
    console.print(table)


def render_errors(console, errors: list[dict], asked: int, labels=("negative", "positive")) -> None:
    """The most confident mistakes of an ``eval`` (``asked``: how many were asked for; ``labels``: the model's classes)."""
    from rich.table import Table
    from rich.text import Text

    title = plural(len(errors), "most confident mistake")
    if len(errors) < asked:
        title += f" (only {len(errors)} in the split)"
    table = Table(title=title, title_justify="left", show_lines=True)
    table.add_column("#", justify="right")
    table.add_column("index", justify="right")
    table.add_column("predicted")
    table.add_column("true")
    audited = any("audit" in e for e in errors)
    if audited:
        table.add_column("audit")
    table.add_column("review", ratio=1)
    for i, e in enumerate(errors, 1):
        color = label_style(e["label"], labels)
        cells = [str(i), str(e["index"]), Text(f"{e['label']} {e['probability']:.3f}", style=color), e["true_label"]]
        if audited:
            flag = e.get("audit")
            cells.append(Text(f"likely mislabelled (#{flag['rank']}, suggests {flag['suggested']})", style="yellow")
                         if flag else Text("-", style="dim"))
        table.add_row(*cells, Text(_shorten(e["text"], 240)))
    console.print(table)
    if audited:
        n = sum(1 for e in errors if e.get("audit"))
        console.print(f"[dim]{n} of these {len(errors)} mistakes are rows the audit flagged as likely mislabelled: "
                      "the label may be wrong, not the model[/]", highlight=False)


# ----------------------------------------------------------------------------- predict

_BIDI_CONTROLS = set(range(0x202A, 0x202F)) | set(range(0x2066, 0x206A))


def _printable(text: str) -> str:
    """``text`` safe for a terminal table: control characters and bidi overrides shown as escapes.

    A review holding ``ESC[2J`` would otherwise clear the user's screen, and a
    right-to-left override would reverse the rest of the table row.
    """
    import unicodedata

    return "".join(f"\\x{ord(c):02x}" if ord(c) < 0x100 and unicodedata.category(c) == "Cc"
                   else f"\\u{ord(c):04x}" if ord(c) in _BIDI_CONTROLS else c for c in text)


def render_predictions(console, predictions, labels=("negative", "positive")) -> None:
    """A table of :class:`~sentiment_cli.inference.predictor.Prediction` objects, numbered from 1 (``labels``: the model's classes)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(show_lines=False)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("label", no_wrap=True)
    table.add_column("probability", justify="right", no_wrap=True)
    # what the other columns and the borders leave, so that a long review cannot squeeze them away
    table.add_column("review", overflow="ellipsis", no_wrap=True, max_width=max(10, min(80, console.width - 40)))
    for i, p in enumerate(predictions, 1):
        table.add_row(str(i), Text(_printable(p.label), style=label_style(p.label, labels)), f"{p.probability:.3f}",
                      Text(_printable(p.text[:1000])))
    console.print(table)


_EXPLAIN_TOP = 5


def _score_style(score: float, scale: float, unknown: bool, gradient: bool):
    """Green (positive) or red (negative), stronger for larger |score|.

    ``gradient``: a background tint blended by magnitude (256-colour and
    truecolor terminals); else three steps that survive 16-colour terminals.
    """
    from rich.color import Color
    from rich.style import Style

    a = min(1.0, abs(score) / scale) if scale > 0 else 0.0
    if a < 0.05:
        return Style(underline=unknown)
    hue = "green" if score > 0 else "red"
    if not gradient:
        step = "bold white on " + hue if a > 0.6 else f"black on {hue}" if a > 0.25 else hue
        return Style.parse(step) + Style(underline=unknown)
    a = 0.15 + 0.85 * a
    top = (0, 150, 0) if score > 0 else (200, 0, 0)
    rgb = tuple(round(255 + (c - 255) * a) for c in top)
    return Style(bgcolor=Color.from_rgb(*rgb), color="white" if a > 0.55 else "black", underline=unknown)


def render_label_sets(console, results) -> None:
    """A table of a multi-label model's :class:`~sentiment_cli.inference.multilabel.LabelSet` objects, numbered
    from 1: each text's labels with their probabilities, most probable first."""
    from rich.table import Table
    from rich.text import Text

    table = Table(show_lines=False)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("labels", overflow="fold", max_width=40)
    table.add_column("review", overflow="ellipsis", no_wrap=True, max_width=max(10, min(80, console.width - 50)))
    for i, r in enumerate(results, 1):
        shown = ", ".join(f"{_printable(n)} {r.probabilities[n]:.2f}" for n in r.labels) or "(none)"
        table.add_row(str(i), Text(shown, style="bold" if r.labels else "dim"), Text(_printable(r.text[:1000])))
    console.print(table)


def render_label_set_explanation(console, number: int, e) -> None:
    """A :class:`~sentiment_cli.inference.explain.LabelSetExplanation`: one panel per predicted label, each
    splitting that label's own logit over the tokens."""
    if not e.explanations:
        console.print(f"{number} (no label reaches its threshold): {_printable(e.text[:200])}")
    for x in e.explanations:
        render_explanation(console, number, x, own_logit=True)


def render_explanation(console, number: int, e, own_logit: bool = False) -> None:
    """One :class:`~sentiment_cli.inference.explain.Explanation`: the review coloured by token score, the top tokens
    (``own_logit``: a multi-label model's, whose scores split the target label's own logit)."""
    from rich.panel import Panel
    from rich.text import Text

    scale = max((abs(s) for s in e.scores), default=0.0)
    gradient = console.color_system in ("256", "truecolor")
    body = Text()
    segments = e.segments()
    for piece, kind, score in segments:
        if kind == "omitted":
            body.append(" […] " if piece.strip() else piece, style="dim")
        elif kind == "space":
            body.append(piece)
        else:
            body.append(piece, style=_score_style(score, scale, kind == "unknown", gradient))
    body.append("\n")
    labels = list(e.probabilities)
    if own_logit:   # one label's own decision: + towards it, - away from it
        towards, away = e.target, f"not {e.target}"
    elif len(labels) == 2:   # the scores split logit(second) - logit(first): + towards the second label
        towards, away = labels[1], labels[0]
    else:
        towards, away = e.target, "the others"
    for positive, arrow, color in ((True, f"▲ {towards}", "green"), (False, f"▼ {away}", "red")):
        top = e.top(_EXPLAIN_TOP, positive)
        body.append(f"\n{arrow}: ", style=f"bold {color}")
        if not top:
            body.append("–", style="dim")
        for j, (tok, score) in enumerate(top):
            body.append((" · " if j else "") + tok, style=color)
            body.append(f" {score:+.2f}", style="dim")
    what = (f"logit({e.target})" if own_logit else f"logit({labels[1]}) - logit({labels[0]})" if len(labels) == 2
            else f"logit({e.target}) - mean of the other {len(labels) - 1} logits")
    body.append(f"\n{what} {e.margin:+.2f} = tokens {sum(e.scores):+.2f} + bias {e.bias:+.2f}", style="dim")
    if any(kind == "unknown" for _, kind, _ in segments):
        body.append("  ·  underlined: not in the vocabulary", style="dim")
    color = label_style(e.label, labels) or ""
    title = Text.assemble((f"{number} ", "bold"), (_printable(e.label), f"bold {color}".strip()), f" {e.probability:.3f}")
    console.print(Panel(body, title=title, title_align="left", expand=False))


# ----------------------------------------------------------------------------- info

def render_card(console, card: dict) -> None:
    """The model card (``sentiment info``): results by split, then the facts by section."""
    import shlex

    from rich.markup import escape
    from rich.table import Table

    from ..card.text import RESULT_COLUMNS, card_results, card_sections

    console.print(f"[bold]model card: {escape(card['name'])}[/]  ({escape(card['checkpoint'])})", highlight=False)
    rows = card_results(card)
    if rows:
        results = Table(title="results", title_justify="left")
        for col in RESULT_COLUMNS:
            results.add_column(col, justify="left" if col in ("split", "from") else "right")
        for row in rows:
            results.add_row(*row)
        console.print(results)
    elif card.get("kind") != "pretrained":   # e.g. trained on all of train (no validation), not yet evaluated
        console.print(f"results: none yet; add test metrics with `sentiment eval --split test --checkpoint "
                      f"{escape(shlex.quote(card['checkpoint']))}`", highlight=False)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(style="dim")
    grid.add_column()
    for title, facts in card_sections(card):
        for i, (key, value) in enumerate(facts):
            grid.add_row(title.lower() if i == 0 else "", key, value)
    console.print(grid)
    files = ", ".join(f for f in (card["files"]["curves"], card["files"].get("card")) if f)
    if files:
        console.print(f"[dim]in the folder: {escape(files)}[/]", highlight=False)


# ----------------------------------------------------------------------------- export
def render_export(console, result) -> None:
    """``sentiment export``'s result: the file, its parity check against PyTorch, int8 accuracy, how to use it."""
    from rich.markup import escape

    r = result.record
    p, b = r["parity"], r["bytes"]
    mib = 2**20
    size = b.get("onnx_int8", b["onnx"])
    console.print(f"wrote [bold]{escape(str(result.path))}[/] ({size / mib:.1f} MiB; PyTorch weights "
                  f"{b['pytorch_weights'] / mib:.1f} MiB, float32 ONNX {b['onnx'] / mib:.1f} MiB; opset {r['opset']})",
                  highlight=False, soft_wrap=True)
    console.print(f"parity with PyTorch on {p['reviews']:,} held-out reviews: label agreement "
                  f"[bold]{p['label_agreement']:.2%}[/] (needs ≥ {p['min_agreement']:.1%}), max logit difference "
                  f"[bold]{p['max_logit_difference']:.1e}[/] (needs ≤ {p['max_allowed_difference']:.0e})  [green]passed[/]",
                  highlight=False, soft_wrap=True)
    if r.get("int8"):
        q = r["int8"]
        console.print(f"int8: test accuracy {q['accuracy_before']:.2%} → [bold]{q['accuracy_after']:.2%}[/] "
                      f"({q['test_reviews']:,} reviews; {q['accuracy_after'] - q['accuracy_before']:+.2%}), "
                      f"size {b['onnx'] / mib:.1f} → {b['onnx_int8'] / mib:.1f} MiB; agreement with PyTorch "
                      f"{q['label_agreement_with_pytorch']:.2%}", highlight=False, soft_wrap=True)
    console.print(f"[dim]use it: sentiment predict --onnx --checkpoint {escape(str(result.path))} \"...\"  ·  "
                  f"sentiment serve --onnx --checkpoint {escape(str(result.path))}[/]", highlight=False, soft_wrap=True)


# ----------------------------------------------------------------------------- suggest

def _predicted_text(pick) -> str:
    """A pick's prediction with its probability: ``"joy 0.81"``; a multi-label model's set, ``"joy 0.81, love 0.40"``
    (``"(none)"`` when it predicts no label)."""
    names = pick.predicted_labels if pick.predicted_labels is not None else [pick.predicted]
    return ", ".join(f"{_printable(n)} {pick.probabilities[n]:.2f}" for n in names) or "(none)"


def render_suggestions(console, result, where: str, output) -> None:
    """The picks of ``sentiment suggest`` (:class:`~sentiment_cli.suggest.run.Suggestions`), what was left out and
    why, and where the CSV went."""
    from rich.markup import escape
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
        cells = [str(p.rank), f"{p.index:,}", f"{value:.3f}", Text(_shorten(shown[p.rank], 40), style=style)]
        if diverse:
            cells.append(str(p.cluster))
        table.add_row(*cells, Text(_printable(_shorten(p.text, 400))))
    console.print(table)
    clusters = f"; {result.clusters} clusters of {result.space} vectors" if diverse else ""
    console.print(f"read {result.read:,} texts from {escape(where)}; scored {result.scored:,} in "
                  f"{result.seconds:.1f} s{clusters}", highlight=False, soft_wrap=True)
    for reason, count in result.left_out.items():
        console.print(f"left out {count:,} ({reason}): {LEFT_OUT[reason]}", highlight=False, soft_wrap=True)
    column = "labels column (the label names joined by ',')" if getattr(result, "multi_label", False) \
        else "label column"
    console.print(f"wrote {escape(str(output))}: fill in its {column}, then `sentiment train --data "
                  f"{escape(str(output))}`", highlight=False, soft_wrap=True)


# ----------------------------------------------------------------------------- audit

def _render_findings(console, result, top: int, what: str, caption: str, labels) -> None:
    """The audit's warnings, then its ``top`` flagged rows as a table (``#``, line or row, given, suggested, quality,
    text, why): one for single-label findings and label-set ones alike; ``labels(finding)`` gives the given and
    suggested cells."""
    from rich.text import Text

    for warning in result.warnings:
        print_note(console, warning.message)
    if not top or not result.findings:
        return
    shown = result.findings[:top]
    table = _findings_table(result, len(shown), what, caption)
    for f in shown:
        table.add_row(str(f.rank), str(f.line), *labels(f), f"{f.quality:.3f}", Text(_shorten(_printable(f.text), 240)),
                      Text(f.reasons_text()))
    console.print(table)


def _findings_table(result, shown: int, what: str, caption: str):
    """The audit's table of flagged rows, its columns made (``#``, line or row, given, suggested, quality, text,
    why)."""
    from rich.table import Table

    table = Table(title=plural(shown, what), title_justify="left", show_lines=True, caption=caption)
    table.add_column("#", justify="right")
    table.add_column("line" if result.findings[0].file else "row", justify="right")
    for name in ("given", "suggested"):
        table.add_column(name)
    table.add_column("quality", justify="right")
    table.add_column("text", ratio=2)
    table.add_column("why", ratio=1)
    return table


def render_audit(console, result, top: int) -> None:
    """An ``audit`` result: what scored the rows, then the ``top`` most likely label errors with their reasons."""
    from rich.markup import escape
    from rich.text import Text

    if getattr(result, "multi_label", False):
        render_label_set_audit(console, result, top)
        return
    m, s = result.method, result.summary
    console.print(f"[bold]{escape(result.where)}[/]: {s['rows']:,} rows  ·  {len(result.labels)} classes  ·  "
                  f"[bold]{s['flagged']:,}[/] flagged as likely label errors  ·  {result.seconds:.0f} s",
                  highlight=False)
    console.print(f"[dim]out-of-fold probabilities: {escape(m['model'])}, cross-fitted over {m['folds']} "
                  f"stratified folds ({m['seconds']:.0f} s), temperature {m['temperature']:.3f}; "
                  f"out-of-fold accuracy {m['out_of_fold_accuracy']:.2%}; ranked by cleanlab[/]",
                  highlight=False, soft_wrap=True)
    _render_findings(console, result, top, "most likely label error",
                     "quality: the out-of-fold probability of the given label · why: the words that pushed towards "
                     "the suggested label (logit units)",
                     lambda f: (Text(f.given, style=label_style(f.given, result.labels)),
                                Text(f.suggested, style=label_style(f.suggested, result.labels))))


def render_audit_summary(console, result) -> None:
    """An ``audit`` result's summary: the estimated label error rate per class and the most confused pairs."""
    from rich.markup import escape
    from rich.table import Table

    s = result.summary
    if getattr(result, "multi_label", False):
        _render_label_set_summary(console, result)
        return
    per = Table(title=f"estimated label errors: {s['estimated_error_rate']:.1%} of the rows (cleanlab's "
                      "estimate_joint)", title_justify="left")
    for col in ("class", "rows", "flagged", "est. error rate"):
        per.add_column(col, justify="left" if col == "class" else "right")
    for c in s["classes"]:
        per.add_row(escape(c["label"]), f"{c['rows']:,}", f"{c['flagged']:,}", f"{c['estimated_error_rate']:.1%}")
    console.print(per)
    if s["pairs"]:
        pairs = Table(title="most confused: given label → likely true label", title_justify="left")
        for col in ("given", "likely", "est. rows", "flagged"):
            pairs.add_column(col, justify="right" if col in ("est. rows", "flagged") else "left")
        for p in s["pairs"]:
            pairs.add_row(escape(p["given"]), escape(p["likely"]), f"{p['estimated_rows']:,.0f}", f"{p['flagged']:,}")
        console.print(pairs)
    if result.output is not None:
        console.print(f"[dim]{s['flagged']:,} flagged rows written to {escape(str(result.output))}[/]", highlight=False)
    for note in result.method.get("notes", ()):
        print_note(console, note)


def render_label_set_audit(console, result, top: int) -> None:
    """A multi-label ``audit`` result (``audit/label_sets.py``): what scored the rows, then the ``top`` most
    likely label-set errors: given and suggested sets, the doubted labels with their probabilities."""
    from rich.markup import escape
    from rich.text import Text

    m, s = result.method, result.summary
    console.print(f"[bold]{escape(result.where)}[/]: {s['rows']:,} rows  ·  {len(result.labels)} labels (several per "
                  f"row)  ·  [bold]{s['flagged']:,}[/] flagged as likely label-set errors  ·  {result.seconds:.0f} s",
                  highlight=False)
    console.print(f"[dim]out-of-fold probabilities: {escape(m['model'])}, cross-fitted over {m['folds']} "
                  f"random folds ({m['seconds']:.0f} s), a temperature per label (mean {m['temperature']:.3f}); "
                  f"out-of-fold subset accuracy {m['out_of_fold_accuracy']:.2%}, micro-F1 "
                  f"{m['out_of_fold_micro_f1']:.3f}; ranked by cleanlab (multi-label)[/]", highlight=False,
                  soft_wrap=True)
    _render_findings(console, result, top, "most likely label-set error",
                     "quality: cleanlab's multi-label label quality · why: the labels that look wrong, with their "
                     "out-of-fold probabilities",
                     lambda f: (Text(", ".join(f.given)), Text(", ".join(f.suggested) or "(none)")))


def _render_label_set_summary(console, result) -> None:
    """A multi-label ``audit`` result's summary: per label, its rows, the flags and the estimated error rate."""
    from rich.markup import escape
    from rich.table import Table

    s = result.summary
    per = Table(title=f"estimated label errors: {s['estimated_error_rate']:.1%} of the (row, label) memberships "
                      "(cleanlab's estimate_joint, one-vs-rest)", title_justify="left")
    for col in ("label", "rows", "unlikely", "missing", "est. error rate"):
        per.add_column(col, justify="left" if col == "label" else "right")
    for c in s["classes"]:
        per.add_row(escape(c["label"]), f"{c['rows']:,}", f"{c['flagged']:,}", f"{c['missing']:,}",
                    f"{c['estimated_error_rate']:.1%}")
    console.print(per)
    if result.output is not None:
        console.print(f"[dim]{s['flagged']:,} flagged rows written to {escape(str(result.output))}[/]", highlight=False)
    for note in result.method.get("notes", ()):
        print_note(console, note)


# ----------------------------------------------------------------------------- check

def _rate(rate) -> str:
    return "–" if rate is None else f"{rate:.1%}"


def _rate_style(rate) -> str | None:
    """Red from 20% failures, yellow from 5%, green below (a reading aid, not a threshold of the tool)."""
    if rate is None:
        return "dim"
    return "red" if rate >= 0.2 else "yellow" if rate >= 0.05 else "green"


def render_check(console, report: dict, output=None) -> None:
    """``sentiment check``'s report: failure rates by capability, then by test with the failing examples."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    o = report["overall"]
    half = "" if report["half"] == "all" else f" · {report['half']} half"
    console.print(f"[bold]{escape(report['suite'])}[/]{half}: {o['tests']} tests · {o['cases']:,} cases · mean "
                  f"failure rate over tests [bold]{_rate(o['mean_failure_rate'])}[/]", highlight=False)
    caps = Table(title="by capability", title_justify="left")
    for col in ("capability", "tests", "cases", "failure rate"):
        caps.add_column(col, justify="left" if col == "capability" else "right")
    for c in report["capabilities"]:
        caps.add_row(escape(c["capability"]), str(c["tests"]), f"{c['cases']:,}",
                     Text(_rate(c["failure_rate"]), style=_rate_style(c["failure_rate"]) or ""))
    console.print(caps)
    tests = Table(title="by test", title_justify="left")
    for col in ("capability", "test", "type", "cases", "failure rate"):
        tests.add_column(col, justify="right" if col in ("cases", "failure rate") else "left")
    for t in report["tests"]:
        tests.add_row(escape(t["capability"]), escape(t["name"]), t["type"], f"{t['cases']:,}",
                      Text(_rate(t["failure_rate"]), style=_rate_style(t["failure_rate"]) or ""))
    console.print(tests)
    failing = [t for t in report["tests"] if t["examples"]]
    if failing:
        console.print("[bold]failing examples[/] (the most confidently wrong first)", highlight=False)
    for t in failing:
        console.print(f"  [bold]{escape(t['name'])}[/] ({t['type']}, {_rate(t['failure_rate'])})", highlight=False)
        for e in t["examples"]:
            console.print(Text("    " + _check_example(t["type"], e)), soft_wrap=True)
    if output is not None:
        console.print(f"[dim]every case: {escape(str(output))}[/]", highlight=False)


def _check_example(kind: str, e: dict) -> str:
    """One failing case in a line: the text and its label (and the perturbed copy's for INV and DIR)."""
    text = _printable(_shorten(e["text"], 90))
    if kind == "MFT":
        return f"{text} → {e['label']} {e['probability']:.2f} (expected {e['expected']})"
    changed = _printable(_shorten(e["perturbed"], 90))
    if kind == "INV":
        return f"{text} → {e['label']} {e['probability']:.2f}; {changed} → {e['perturbed_label']} " \
               f"{e['perturbed_probability']:.2f}"
    return f"p({e['label']}) {e['probability']:.2f} → {e['perturbed_probability']:.2f}: {changed}"
