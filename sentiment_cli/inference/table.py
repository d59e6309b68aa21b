"""Score a table of texts: the input's columns kept, the prediction's columns added (``predict --data``, Ray).

One batch is an Arrow table (``pyarrow.Table``); :func:`score_table` returns it with these columns appended:

- a single-label model: ``label`` (string), ``probability`` (float32, the label's), and ``p_<label>`` (float32)
  for every label of the model, in label-id order (each row's ``p_`` columns sum to 1);
- a multi-label model: ``labels`` (a list of strings, the label set) and ``p_<label>`` for every label (each
  label's own probability, see :mod:`~.multilabel`);
- with ``explain``: ``top_tokens``, the (at most :data:`TOP_TOKENS`) tokens that pushed hardest towards the
  predicted label, strongest first; for a multi-label model a list of ``{"label", "tokens"}``, one per
  predicted label.

A name the input already uses (a labelled file has ``label``) is given as ``predicted_<name>`` instead, so no
input column is ever replaced (:func:`output_names`). The same function serves the single-process path and
each Ray worker, so the two give the same columns. Torch-free (the predictor's backend decides).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import DataError

if TYPE_CHECKING:
    import pyarrow as pa

    from .predictor import Predictor

TOP_TOKENS = 5   # tokens per label in ``top_tokens``


def added_columns(labels: Sequence[str], multi_label: bool, explain: bool) -> list[str]:
    """The names :func:`score_table` adds, before renaming clashes: ``label``, ``probability``, ``p_<label>``...

    Raises:
        DataError: two labels give the same ``p_`` name (impossible for a checkpoint's distinct labels).
    """
    names = ["labels"] if multi_label else ["label", "probability"]
    names += [f"p_{label}" for label in labels]
    if explain:
        names.append("top_tokens")
    if len(set(names)) != len(names):
        raise DataError("the model's labels give two output columns of one name; rename a label")
    return names


def output_names(input_columns: Sequence[str], added: Sequence[str]) -> dict[str, str]:
    """``added`` name -> the name written: itself, or ``predicted_<name>`` where the input has that column
    (then ``predicted_2_<name>``... while that is taken too)."""
    taken = set(input_columns)
    out: dict[str, str] = {}
    for name in added:
        new, k = name, 1
        while new in taken:
            new = f"predicted_{name}" if k == 1 else f"predicted_{k}_{name}"
            k += 1
        taken.add(new)
        out[name] = new
    return out


def check_batch_texts(table: "pa.Table", column: str, where: str, first: int) -> list[str]:
    """The texts of ``table[column]`` as Python strings, once each is known to be real text.

    Args:
        first: the number of the table's first row in the whole input (rows count from 1).

    Raises:
        DataError: a null, empty or whitespace-only text, naming ``where`` and its row.
    """
    import pyarrow.compute as pc

    col = table.column(column)
    if col.null_count:
        row = pc.indices_nonzero(pc.is_null(col))[0].as_py()
        raise DataError(f"{where}, row {first + row}: no text (column {column!r} is empty)")
    blank = pc.or_(pc.equal(pc.utf8_length(col), 0), pc.utf8_is_space(col))
    if pc.any(blank).as_py():
        row = pc.indices_nonzero(blank)[0].as_py()
        raise DataError(f"{where}, row {first + row}: empty text (column {column!r} holds only whitespace)")
    return col.to_pylist()


def score_table(predictor: "Predictor", table: "pa.Table", column: str, *, explain: bool = False,
                where: str = "input", first: int = 1) -> "pa.Table":
    """``table`` with the prediction's columns appended (module docstring), rows in the same order.

    Args:
        predictor: the loaded model.
        table: ``(rows, columns)``, with the texts in ``column`` (a string column).
        explain: add ``top_tokens`` (an explanation per text: slower, see :mod:`~.explain`).
        where: the input's name, for messages.
        first: the number of the table's first row in the whole input.

    Raises:
        DataError: a text is missing or blank (:func:`check_batch_texts`).
        CheckpointError: the model gives non-finite logits.
    """
    texts = check_batch_texts(table, column, where, first)
    labels = list(predictor.labels)
    names = output_names(table.column_names, added_columns(labels, predictor.multi_label, explain))
    if explain:   # one forward: the logits the explanations were formed from
        logits, found = predictor.explain_scored(texts, first=first)
        columns = _prediction_columns(predictor, logits)
        columns["top_tokens"] = _top_tokens(found, predictor.multi_label)
    else:
        columns = _prediction_columns(predictor, predictor.logits(texts, first=first))
    for name, values in columns.items():
        table = table.append_column(names[name], values)
    return table


def _prediction_columns(predictor: "Predictor", logits: np.ndarray) -> dict[str, Any]:
    """The decision's columns and the ``p_<label>`` ones for ``(rows, num_labels)`` logits, decided as
    :meth:`~.predictor.Predictor.predict` decides: the predictor's postprocess and decision (the argmax of the
    logits, or a multi-label model's rule)."""
    import pyarrow as pa

    labels = np.asarray(predictor.labels, dtype=object)
    if predictor.multi_label:
        probs = predictor.postprocess(logits, np.float64)                               # (rows, num_labels)
        chosen = predictor.decide(probs)
        sets = [labels[sorted(np.flatnonzero(c), key=lambda j, p=p: -p[j])].tolist() for c, p in zip(chosen, probs)]
        columns = {"labels": pa.array(sets, pa.list_(pa.string()))}
    else:
        probs = predictor.postprocess(logits)                                           # (rows, num_labels) f32
        k = logits.argmax(axis=1)
        columns = {"label": pa.array(labels[k].tolist(), pa.string()),
                   "probability": pa.array(probs[np.arange(len(k)), k], pa.float32())}
    for j, label in enumerate(labels):
        columns[f"p_{label}"] = pa.array(probs[:, j], pa.float32())
    return columns


def _top_tokens(found: list, multi_label: bool):
    """``top_tokens``: the strongest tokens towards each text's label (or, multi-label, each of its labels)."""
    import pyarrow as pa

    if not multi_label:
        # a two-class explanation scores towards the second label: towards the first, its negative scores
        return pa.array([[t for t, _ in e.top(TOP_TOKENS, positive=e.label == e.target)] for e in found],
                        pa.list_(pa.string()))
    kind = pa.list_(pa.struct([("label", pa.string()), ("tokens", pa.list_(pa.string()))]))
    return pa.array([[{"label": e.target, "tokens": [t for t, _ in e.top(TOP_TOKENS)]} for e in r.explanations]
                     for r in found], kind)
