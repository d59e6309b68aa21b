"""TOML and JSON text decoded, Python's limit on the digits of an integer included.

``tomllib`` and ``json`` raise a plain ``ValueError`` ("Exceeds the limit (4300 digits) for integer string
conversion") for an integer literal longer than ``sys.get_int_max_str_digits()``, which the handlers of a
malformed file (``TOMLDecodeError``, ``JSONDecodeError``) let through as a traceback. :func:`toml_loads` and
:func:`json_loads` raise the format's own decode error instead (:class:`TomlNumberTooLong`,
:class:`JsonNumberTooLong`), naming the line and column of the number, so every reader's one handler of a
malformed file (a config, a suite, a checkpoint's JSON, a data file's lines) gives its one-line error. Every
decoder of TOML or JSON from a file or the command line goes through here. Imports nothing of the package.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from typing import Any

_DIGIT_RUN = re.compile(r"[0-9][0-9_]*")


class TomlNumberTooLong(tomllib.TOMLDecodeError):
    """A TOML integer literal with more digits than Python converts (``sys.get_int_max_str_digits()``)."""


class JsonNumberTooLong(json.JSONDecodeError):
    """A JSON integer literal with more digits than Python converts (``sys.get_int_max_str_digits()``)."""


def toml_loads(text: str) -> dict[str, Any]:
    """``tomllib.loads(text)``.

    Raises:
        tomllib.TOMLDecodeError: not TOML; :class:`TomlNumberTooLong` (a subclass) for an integer of more digits
            than Python converts, its message giving the count, the limit, the line and the column.
    """
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        raise
    except ValueError as exc:
        where = _long_number(text, exc)
        raise TomlNumberTooLong(f"{_message(where[0])} (at line {where[1]}, column {where[2]})") from None


def json_loads(text: str | bytes | bytearray) -> Any:
    """``json.loads(text)``.

    Raises:
        json.JSONDecodeError: not JSON; :class:`JsonNumberTooLong` (a subclass) for an integer of more digits than
            Python converts, at the number's position (its ``lineno`` and ``colno``).
        UnicodeDecodeError: bytes that are not UTF-8 (as ``json.loads``).
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError as exc:
        doc = text.decode("utf-8") if isinstance(text, (bytes, bytearray)) else text
        digits, _, _, pos = _long_number(doc, exc)
        raise JsonNumberTooLong(_message(digits), doc, pos) from None


def _message(digits: int) -> str:
    return (f"an integer of {digits:,} digits, over the {sys.get_int_max_str_digits():,} that Python reads; "
            "write a smaller number")


def _long_number(text: str, exc: ValueError) -> tuple[int, int, int, int]:
    """``(digits, line, column, offset)`` of the first integer literal in ``text`` over Python's limit, once
    ``exc`` is known to be that limit's error (anything else is re-raised: a bug, not the input)."""
    limit = sys.get_int_max_str_digits()
    if "integer string conversion" not in str(exc) or not limit:
        raise exc
    for match in _DIGIT_RUN.finditer(text):
        digits = len(match.group().replace("_", ""))
        if digits > limit:
            line = text.count("\n", 0, match.start()) + 1
            return digits, line, match.start() - (text.rfind("\n", 0, match.start()) + 1) + 1, match.start()
    return limit + 1, 1, 1, 0   # pragma: no cover (the decoder found one)
