"""TOML out: the package's one writer of TOML (``tomllib`` reads it back).

:func:`toml_tables` writes a run config (``Config.to_dict()``: ``sentiment config``, the model card's
"Configuration" section); :func:`toml_value` writes one value on one line (the reference's defaults, the card's
settings chosen from the data). Arrays stay on one line, so a config reads as its keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tomli_w


def toml_value(value: Any) -> str:
    """One value as TOML, on one line: ``0.001``, ``true``, ``"text"``, ``[0.9, 0.999]``, ``{form = "lr", c = 3.0}``.

    Raises:
        TypeError: a value TOML cannot hold (``None``, an object).
    """
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):   # an inline table
        return "{" + ", ".join(f"{tomli_w.dumps({k: 0}).split(' = ')[0]} = {toml_value(v)}"
                               for k, v in value.items()) + "}"
    return tomli_w.dumps({"v": value}).strip()[len("v = "):]


def toml_tables(tables: Mapping[str, Mapping[str, Any]]) -> str:
    """``{table: {key: value}}`` as a TOML file: each ``[table]`` and its ``key = value`` lines, a blank line
    after each table.

    Raises:
        TypeError: as :func:`toml_value`.
    """
    out = []
    for table, values in tables.items():
        out.append(f"[{table}]")
        out += [f"{key} = {toml_value(value)}" for key, value in values.items()]
        out.append("")
    return "\n".join(out)
