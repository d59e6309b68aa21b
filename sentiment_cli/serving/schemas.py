"""The API's request and response models (pydantic), and reading a ``POST /v1/predict`` body into one.

:class:`PredictRequest` is the body of ``POST /v1/predict``; :class:`PredictResponse` (a list of
:class:`PredictionOut`, each exactly a ``sentiment predict --json`` object) its answer; :class:`ErrorOut`
the ``{"error": "..."}`` of every error. :func:`parse_predict_request` turns the raw body into a
:class:`PredictRequest` or a one-line :class:`~sentiment_cli.errors.UsageError` saying where it is wrong;
:func:`validation_message` writes that line from pydantic's errors.

Needs pydantic (with the ``serve`` extra's fastapi).
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError

from ..errors import UsageError


class PredictRequest(BaseModel):
    """``POST /v1/predict`` body."""

    model_config = ConfigDict(extra="forbid")
    texts: list[StrictStr] = Field(min_length=1, description="Reviews to classify (each non-empty).",
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
    bias: float | None = Field(None, description="With explain: the part of the margin no token carries.")
    target: str | None = Field(None, description="With explain: the class whose margin the scores split (the "
                                                 "second label with two classes, else the predicted one).")


class PredictResponse(BaseModel):
    """``POST /v1/predict`` answer: one prediction per review, in the order of ``texts``."""

    predictions: list[PredictionOut]


class ErrorOut(BaseModel):
    """Every error's body: one line saying what went wrong."""

    error: str


#: The error answers an endpoint documents (OpenAPI ``responses``).
ERROR_RESPONSES = {code: {"model": ErrorOut} for code in (401, 408, 413, 422, 503)}

#: The request body ``POST /v1/predict`` documents (OpenAPI ``openapi_extra``), since it parses the body itself.
PREDICT_BODY_OPENAPI = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": PredictRequest.model_json_schema()}}}}


def parse_predict_request(raw: bytes) -> PredictRequest:
    """The request body as a :class:`PredictRequest`.

    Args:
        raw: the whole request body, whatever its Content-Type.

    Raises:
        UsageError: not UTF-8 JSON (or a JSON integer of more than 4,300 digits), or not ``{"texts": [non-empty strings...], "explain": bool}``;
            the message says where (answered as 422).
    """
    try:
        obj = json.loads(raw)
    except UnicodeDecodeError as exc:
        raise UsageError(f"request body is not UTF-8 (byte {exc.start})") from None
    except RecursionError:
        raise UsageError("request body is nested too deeply to be a prediction request") from None
    except json.JSONDecodeError as exc:
        what = "empty request body" if not raw.strip() else f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        raise UsageError(f'{what}; expected {{"texts": [...], "explain": false}}') from None
    except ValueError as exc:   # an integer literal over Python's 4,300-digit limit (int_max_str_digits)
        raise UsageError(f"request body holds a number too long to read ({exc.args[0].split(':')[0]})") from None
    if not isinstance(obj, dict):
        raise UsageError(f'expected a JSON object {{"texts": [...], "explain": false}}, got {type(obj).__name__}')
    try:
        return PredictRequest.model_validate(obj)
    except ValidationError as exc:
        raise UsageError(validation_message(exc.errors())) from None


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
