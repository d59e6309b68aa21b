"""Score a whole split, batch by batch: read (:mod:`~sentiment_cli.data.batches`) -> score
(:func:`~.table.score_table`) -> write (:class:`~sentiment_cli.arrow_output.ArrowStreamWriter`).

Memory holds one batch of rows at a time, whatever the number of rows (``predict --data``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .table import score_table

if TYPE_CHECKING:
    from ..arrow_output import ArrowStreamWriter
    from ..data.batches import TableStream
    from .predictor import Predictor

BATCH_ROWS = 1024          # rows read, scored and written at a time
EXPLAIN_BATCH_ROWS = 256   # with explanations: each row carries its tokens' scores


def predict_split(predictor: "Predictor", stream: "TableStream", writer: "ArrowStreamWriter", *,
                  explain: bool = False, batch_rows: int | None = None,
                  on_batch: Callable[[int], None] | None = None) -> int:
    """Write every row of ``stream`` with the prediction's columns added, in input order.

    Args:
        predictor: the loaded model (its ``batch_size`` sets the forward passes within a batch).
        stream: the split to read.
        writer: where the scored tables go (open: inside its ``with`` block).
        explain: add ``top_tokens``.
        batch_rows: rows per batch; default :data:`BATCH_ROWS` (:data:`EXPLAIN_BATCH_ROWS` with ``explain``).
        on_batch: called with each batch's row count once it is written (a progress bar).

    Returns:
        The rows written.

    Raises:
        DataError: a text is missing or blank (naming its row).
        CheckpointError: the model gives non-finite logits.
    """
    rows = batch_rows or (EXPLAIN_BATCH_ROWS if explain else BATCH_ROWS)
    done = 0
    for table in stream.batches(rows):
        writer.write(score_table(predictor, table, stream.text_column, explain=explain, where=stream.where,
                                 first=done + 1))
        done += table.num_rows
        if on_batch is not None:
            on_batch(table.num_rows)
    return done
