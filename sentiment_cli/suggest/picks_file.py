"""The file ``suggest`` writes: the picks, with an empty ``label`` column for ``sentiment train --data`` (a
multi-label checkpoint's: an empty ``labels`` column, for the label names joined by ``,``)."""

from __future__ import annotations

from pathlib import Path

from ..arrow_output import write_table
from .run import Suggestions

CSV_COLUMNS = ("text", "label", "rank", "uncertainty", "margin", "entropy", "predicted", "probability", "index",
               "cluster")
# a multi-label checkpoint's: "labels" to fill in (names joined by LABEL_SEPARATOR), "predicted" the predicted set
MULTI_LABEL_COLUMNS = ("text", "labels", "rank", "uncertainty", "margin", "entropy", "predicted", "index", "cluster")
LABEL_SEPARATOR = ","   # how GoEmotions joins its labels, which the data reader finds (data/multilabel.py)


def write_picks(result: Suggestions, path: str | Path) -> Path:
    """Write the picks to a file that ``sentiment train --data`` reads once its ``label`` column is filled in:
    CSV or JSON Lines by ``path``'s suffix (:func:`~sentiment_cli.arrow_output.write_table`, atomically).

    Columns: :data:`CSV_COLUMNS`: ``text``, an empty ``label``, then ``rank`` (1 = label first), ``uncertainty``,
    ``margin``, ``entropy``, ``predicted`` and its ``probability``, the text's ``index`` in the input and its
    ``cluster`` (``diverse``; else empty). ``train`` reads ``text`` and ``label`` and ignores the rest. The caller
    checks ``path`` before any work (:func:`~sentiment_cli.outputs.check_output`). A multi-label result's columns are
    :data:`MULTI_LABEL_COLUMNS`: an empty ``labels`` column (fill in the names joined by ``,``), ``predicted`` the
    predicted label set so joined, and no ``probability``.

    Args:
        result: what :func:`suggest` returned.
        path: the ``.csv`` or ``.jsonl`` file to write.

    Returns:
        The path written.

    Raises:
        UsageError: another suffix.
    """
    jsonl = Path(path).suffix.lower() == ".jsonl"   # numbers as numbers; CSV keeps its six decimals

    def number(x: float) -> float | str:
        """A score as the format keeps it."""
        return round(float(x), 6) if jsonl else f"{x:.6f}"

    no_cluster = None if jsonl else ""
    if result.multi_label:
        rows = [dict(zip(MULTI_LABEL_COLUMNS, (pk.text, "", pk.rank, number(pk.uncertainty), number(pk.margin),
                                               number(pk.entropy), LABEL_SEPARATOR.join(pk.predicted_labels or []),
                                               pk.index, no_cluster if pk.cluster is None else pk.cluster)))
                for pk in result.picks]
        return write_table(path, MULTI_LABEL_COLUMNS, rows)
    rows = [dict(zip(CSV_COLUMNS, (pk.text, "", pk.rank, number(pk.uncertainty), number(pk.margin),
                                   number(pk.entropy), pk.predicted, number(pk.probabilities[pk.predicted]),
                                   pk.index, no_cluster if pk.cluster is None else pk.cluster)))
            for pk in result.picks]
    return write_table(path, CSV_COLUMNS, rows)
