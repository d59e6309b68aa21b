"""Options that several commands declare, written once as ``Annotated`` aliases.

Typer reads ``typing.Annotated[type, typer.Option(...)]``: a command's parameter names an alias
as its type instead of repeating the declaration (as spaCy's CLI does). Typer copies the option
for each command, so one alias serves many.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Optional

import typer

from ..data.columns import LABEL_COLUMNS, TEXT_COLUMNS
from ..errors import UsageError


def _named(columns: Sequence[str]) -> str:
    """``"the one named text, review, sentence or content"``: the columns looked for when none is named."""
    return "the one named " + ", ".join(columns[:-1]) + " or " + columns[-1]


def column_options(text_help: str, label_help: str) -> tuple[Any, Any]:
    """The ``--text-column`` and ``--label-column`` options, as ``Annotated`` aliases with these help texts.

    ``{names}`` in a help text becomes the columns looked for by default (``"the one named text,
    review, sentence or content"``, and the label columns likewise), so every command lists the
    ones :func:`~sentiment_cli.data.columns.resolve_column` really tries.

    Returns:
        ``(text_column, label_column)``: each ``Annotated[Optional[str], typer.Option(...)]``, default ``None``.
    """
    return (Annotated[Optional[str], typer.Option(help=text_help.format(names=_named(TEXT_COLUMNS)))],
            Annotated[Optional[str], typer.Option(help=label_help.format(names=_named(LABEL_COLUMNS)))])


LabelColumnsOption = Annotated[Optional[str], typer.Option(
    "--label-columns", metavar="A,B,C", show_default=False,
    help="Multi-label: one 0/1 column per label, comma-separated (\\[data] label_columns); default: found when "
         "no label column is named and every column besides the text and an id column holds only 0 and 1.")]


def label_columns(value: Optional[str]) -> Optional[tuple[str, ...]]:
    """``--label-columns a,b,c`` as ``("a", "b", "c")`` (each name stripped); ``None`` when not given.

    Raises:
        UsageError: a blank name (``a,,b``).
    """
    if value is None:
        return None
    names = tuple(n.strip() for n in value.split(","))
    if not all(names):
        raise UsageError(f"--label-columns {value!r}: a blank column name; give names joined by commas: a,b,c")
    return names
