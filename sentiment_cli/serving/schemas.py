"""The API's request and response models (pydantic), and reading a ``POST /v1/predict`` body into one.

:class:`PredictRequest` is the body of ``POST /v1/predict``; :class:`PredictResponse` (a list of
:class:`PredictionOut`, or with a multi-label model of :class:`LabelSetOut`, each exactly a
``sentiment predict --json`` object) its answer; :class:`ErrorOut`
the ``{"error": "..."}`` of every error. :func:`parse_predict_request` turns the raw body into a
:class:`PredictRequest` or a one-line :class:`~sentiment_cli.errors.UsageError` saying where it is wrong
(:class:`OverLimit` when it holds more than the server takes); :func:`validation_message` writes that line
from pydantic's errors.

The work is bounded by the limit on texts, not by the body's size: a 4 MiB body can hold two million JSON
values, and reading each into a Python object, then a validation error for each, took seconds of the event
loop. A body larger than :data:`SMALL_BODY`, or one that could hold more values than a request of
``max_texts`` texts, is read by the standard library's own pure-Python scanner, counting values as it goes and
stopping past the limit (strings are still read in C); the C scanner reads the small bodies that cannot hold
that many; and validation stops at the first bad text.

Needs pydantic (with the ``serve`` extra's fastapi).
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError

from ..errors import UsageError


class PredictRequest(BaseModel):
    """``POST /v1/predict`` body."""

    model_config = ConfigDict(extra="forbid")
    texts: list[StrictStr] = Field(min_length=1, fail_fast=True, description="Reviews to classify (each non-empty).",
                                   examples=[["A moving, beautifully acted film."]])
    explain: StrictBool = Field(False, description="Add each token and its share of the target class's logit margin.")


class PredictionOut(BaseModel):
    """One review's result: exactly a ``sentiment predict --json`` object."""

    text: str
    label: str
    probability: float
    probabilities: dict[str, float]
    tokens: list[str] | None = Field(None, description="With explain: the tokens the model saw.")
    scores: list[float] | None = Field(None, description="With explain: each token's share of the margin "
                                                         "logit(target) - mean of the other logits.")
    offsets: list[list[int]] | None = Field(None, description="With explain: each token's [start, end) characters "
                                                               "in text.")
    bias: float | None = Field(None, description="With explain: the part of the margin no token carries.")
    target: str | None = Field(None, description="With explain: the class whose margin the scores split (the "
                                                 "second label with two classes, else the predicted one).")


class LabelExplanationOut(BaseModel):
    """With explain, for a multi-label model: one predicted label's explanation."""

    label: str
    probability: float = Field(description="The label's calibrated probability (sigmoid of logit / temperature).")
    tokens: list[str] = Field(description="The tokens the model saw.")
    scores: list[float] = Field(description="Each token's share of the label's own logit.")
    bias: float = Field(description="The part of the label's logit no token carries: sum(scores) + bias is the logit.")


class LabelSetOut(BaseModel):
    """One text's result from a multi-label model: exactly its ``sentiment predict --json`` object."""

    text: str
    labels: list[str] = Field(description="The predicted labels, most probable first (may be empty: see "
                                          "/v1/info's decision.min_labels).")
    probabilities: dict[str, float] = Field(description="Every label's calibrated probability, in label order; "
                                                        "they need not sum to 1.")
    explanations: list[LabelExplanationOut] | None = Field(None, description="With explain: one per predicted "
                                                                             "label, in the order of labels.")


class PredictResponse(BaseModel):
    """``POST /v1/predict`` answer: one prediction per review, in the order of ``texts``: a
    :class:`PredictionOut` each, or with a multi-label model a :class:`LabelSetOut` each."""

    predictions: list[PredictionOut] | list[LabelSetOut]


class ErrorOut(BaseModel):
    """Every error's body: one line saying what went wrong."""

    error: str


#: The error answers an endpoint documents (OpenAPI ``responses``).
ERROR_RESPONSES = {code: {"model": ErrorOut} for code in (401, 408, 413, 422, 503)}

#: The request body ``POST /v1/predict`` documents (OpenAPI ``openapi_extra``), since it parses the body itself.
PREDICT_BODY_OPENAPI = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": PredictRequest.model_json_schema()}}}}


class OverLimit(UsageError):
    """A request holding more than the server takes in one request (answered 413); the message names the limit
    and the option that raises it."""


#: JSON values in a prediction request besides its texts: the object, the list of texts, ``explain``.
ENVELOPE_VALUES = 3
#: Bodies up to this many bytes whose :func:`most_values` is within the limit are read by the C scanner.
SMALL_BODY = 64 * 1024


def parse_predict_request(raw: bytes, max_texts: int | None = None) -> PredictRequest:
    """The request body as a :class:`PredictRequest`, read with work bounded by ``max_texts``.

    Args:
        raw: the whole request body, whatever its Content-Type.
        max_texts: most texts in one request (``--max-texts``); None: no limit.

    Raises:
        OverLimit: more than ``max_texts`` texts, or more JSON values than such a request holds (answered 413).
        UsageError: not UTF-8 JSON (or a JSON integer of more than 4,300 digits), or not ``{"texts": [non-empty strings...], "explain": bool}``;
            the message says where (answered as 422).
    """
    obj = _read_json(raw, None if max_texts is None else max_texts + ENVELOPE_VALUES, max_texts)
    if not isinstance(obj, dict):
        raise UsageError(f'expected a JSON object {{"texts": [...], "explain": false}}, got {type(obj).__name__}')
    texts = obj.get("texts")
    if max_texts is not None and isinstance(texts, list) and len(texts) > max_texts:
        raise OverLimit(f"{len(texts)} texts in one request; the limit is {max_texts} (--max-texts)")
    try:
        return PredictRequest.model_validate(obj)
    except ValidationError as exc:
        raise UsageError(validation_message(exc.errors(include_url=False, include_input=False))) from None


def _read_json(raw: bytes, max_values: int | None, max_texts: int | None):
    """``raw`` as JSON, holding at most ``max_values`` values (None: any number).

    Raises:
        OverLimit: more than ``max_values`` values.
        UsageError: not UTF-8 JSON, nested too deeply, or an integer literal over Python's 4,300 digits.
    """
    try:
        if max_values is None or (len(raw) <= SMALL_BODY and most_values(raw) <= max_values):
            return json.loads(raw)   # the C scanner: faster, and here it cannot meet more than max_values
        return _CountingDecoder(max_values).decode(raw.decode(json.detect_encoding(raw), "surrogatepass"))
    except UnicodeDecodeError as exc:
        raise UsageError(f"request body is not UTF-8 (byte {exc.start})") from None
    except (RecursionError, _TooDeep):
        raise UsageError("request body is nested too deeply to be a prediction request") from None
    except _TooMany:
        raise OverLimit(f"request body holds more than {max_values:,} JSON values; a request within the limit of "
                        f"{max_texts:,} texts (--max-texts) holds at most {max_values:,}") from None
    except json.JSONDecodeError as exc:
        what = "empty request body" if not raw.strip() else f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        raise UsageError(f'{what}; expected {{"texts": [...], "explain": false}}') from None
    except ValueError as exc:   # an integer literal over Python's 4,300-digit limit (int_max_str_digits)
        raise UsageError(f"request body holds a number too long to read ({exc.args[0].split(':')[0]})") from None


def most_values(raw: bytes) -> int:
    """An upper bound on the JSON values in ``raw``, in three passes of C: each value but the first follows a
    comma or opens its container (commas and brackets inside strings only make the bound looser)."""
    return 1 + raw.count(b",") + raw.count(b"[") + raw.count(b"{")


class _TooMany(Exception):
    """More values than the :class:`_CountingDecoder` reads."""


class _TooDeep(Exception):
    """The :class:`_CountingDecoder` stopped in a container nested deeper than a prediction request's."""


class _CountingDecoder(json.JSONDecoder):
    """The standard library's pure-Python JSON scanner, stopping once it has read more than ``most`` values.

    Strings are still read by the C ``scanstring``; only the structure is walked in Python, and at most
    ``most`` values of it. Stopping inside a container deeper than a request's (an object, its list of
    texts, their strings) raises :class:`_TooDeep`, else :class:`_TooMany`.
    """

    def __init__(self, most: int):
        super().__init__()
        self.most, self.seen, self.depth = most, 1, 0
        self.parse_array, self.parse_object = self._array, self._mapping
        self.scan_once = json.scanner.py_make_scanner(self)

    def _counted(self, scan_once):
        def scan(string, idx):
            self.seen += 1
            if self.seen > self.most:
                raise _TooDeep if self.depth > 2 else _TooMany
            return scan_once(string, idx)
        return scan

    def _array(self, s_and_end, scan_once):
        self.depth += 1
        try:
            return json.decoder.JSONArray(s_and_end, self._counted(scan_once))
        finally:
            self.depth -= 1

    def _mapping(self, s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo=None):
        self.depth += 1
        try:
            return json.decoder.JSONObject(s_and_end, strict, self._counted(scan_once), object_hook,
                                           object_pairs_hook, memo)
        finally:
            self.depth -= 1


def validation_message(errors: list[dict]) -> str:
    """One line from pydantic's errors: where and what, e.g. ``texts[0]: Input should be a valid string``.

    Args:
        errors: pydantic's (or FastAPI's) error dicts, each with ``loc`` and ``msg``; a leading
            ``"body"`` in ``loc`` is left out.

    Returns:
        the first error's place and message, and how many more there are.
    """
    if not errors:
        return "invalid request"
    first = errors[0]
    where = ""
    for part in first.get("loc", ()):
        if part != "body":
            where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    where = where or "body"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first.get('msg', 'invalid')}{more}"
