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
