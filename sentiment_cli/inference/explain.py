"""Exact token-level explanations: which words moved the prediction, and by how much. Torch-free.

The classifier ends in a masked max-pool and a linear head (``model/classifier.py``)::

    pooled[f] = hidden[argmax[f], f]          one winning token per feature f
    logits    = W @ pooled + b                W: (num_labels, d_model), b: (num_labels,)

so the logits split exactly over the tokens that won the pool: token ``t``'s share
of class ``c`` is ``sum_f [argmax[f] == t] * pooled[f] * W[c, f]``. The n-gram
score (``ngram/score.py``), when the model has one, adds each of its n-grams' weights to
the token that ends it and its intercept to ``b``. The model's one forward pass
returns these shares as ``token_logits`` ``(seq_len, num_labels)`` per review and
the constant as ``bias`` (:class:`~sentiment_cli.model.classifier.ClassifierOutput`;
the ONNX graph returns the same), and this module forms the explanation from them,
whichever backend ran the model.

The explained quantity is the *margin* of a target class ``k``: its logit minus
the mean of the other classes' logits, a fixed linear combination of the logits,
so it splits over the tokens too::

    logits[k] - mean_{j != k} logits[j] = contrast(bias, k) + sum_t contrast(token_logits[t], k)

The target is the predicted class when there are three or more classes. With two
it is always the second label (``positive`` for IMDB), so the margin is
``logits[1] - logits[0]``, the log-odds of that label, for every review: a score's
sign says which of the two labels a token pushed towards. (The margin of the
predicted class would flip that sign on reviews predicted as the first label.)

A token that won no feature and ends no weighted n-gram scores exactly 0; padding
never wins a feature, so it never receives a score. The scores are in logit units:
with two classes a score of +1 multiplies the odds of the second label by e. It is
the exact decomposition of a linear function into weight times input (the
"gradient x input" attribution of Shrikumar et al. 2017, exact for linear
functions), applied to the features the max-pool selected. It explains the head
given the encoder's token states; those states mix context through attention, so
a token's score is that of the word in its context, not of the word alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .multilabel import Decision, label_sets
from .prediction import Explanation, predictions, surface_tokens

TokenRow = tuple[list[int], list[tuple[int, int]], list[int], int]   # prediction.token_rows' rows


def target_classes(logits: np.ndarray) -> np.ndarray:
    """Each row's explained class: the second label with two classes, else the predicted (argmax) class.

    Args:
        logits: ``(n, num_labels)``.

    Returns:
        ``(n,)`` int64.
    """
    if logits.shape[1] == 2:
        return np.ones(len(logits), dtype=np.int64)
    return logits.argmax(axis=1)


def contrast(values: np.ndarray, target: int) -> np.ndarray:
    """``values[..., k] - mean_{j != k} values[..., j]`` over the last (class) axis, for target ``k``.

    The others are summed with a 0/1 mask, so with two classes this is ``values[..., k] - values[..., other]``
    exactly (no rounding from adding and removing the target).

    Args:
        values: ``(..., num_labels)``: one review's token logits ``(seq_len, num_labels)``, or the bias
            ``(num_labels,)``.
        target: the class id ``k``.

    Returns:
        ``values.shape[:-1]``.
    """
    n = values.shape[-1]
    others = np.ones(n, dtype=values.dtype)
    others[target] = 0
    return values[..., target] - (values * others).sum(axis=-1) / (n - 1)


def explanations(texts: Sequence[str], rows: Sequence[TokenRow], logits: np.ndarray,
                 token_logits: Sequence[np.ndarray], bias: np.ndarray, labels: Sequence[str],
                 temperature: float = 1.0, join_pieces: bool = False,
                 probabilities: np.ndarray | None = None, across_spaces: bool = False) -> list[Explanation]:
    """Each review's prediction and the score of every token the model saw.

    Args:
        texts: the reviews.
        rows: their tokens (:func:`~sentiment_cli.inference.prediction.token_rows`), in the same order.
        logits: ``(len(texts), num_labels)`` float32.
        token_logits: per review, ``(len(ids), num_labels)``: each token's share of the logits.
        bias: ``(num_labels,)``: the part of the logits no token carries.
        labels: the class names, by id.
        temperature: the probabilities are ``softmax(logits / temperature)`` (the scores explain the
            logits, which it does not change).
        join_pieces: the tokens are characters or subwords (:attr:`Explanation.join_pieces`).
        probabilities: the probabilities, already computed (the predictor's postprocess; then
            ``temperature`` is not used).
        across_spaces: the tokens are characters whose n-grams cross spaces (:attr:`Explanation.across_spaces`).

    Returns:
        One :class:`Explanation` per text, in input order; ``sum(scores) + bias`` is the margin.
    """
    out = []
    for pred, (ids, spans, positions, n), t, k in zip(predictions(texts, logits, labels, temperature, probabilities), rows,
                                                     token_logits, target_classes(logits).tolist()):
        text = pred.text
        out.append(Explanation(text=text, label=pred.label, probability=pred.probability,
                               probabilities=pred.probabilities, tokens=surface_tokens(text, ids, spans),
                               scores=contrast(t, k).tolist(), bias=float(contrast(bias, k)), ids=ids, spans=spans,
                               positions=positions, num_tokens=n, target=labels[k], join_pieces=join_pieces,
                               across_spaces=across_spaces))
    return out


@dataclass
class LabelSetExplanation:
    """A multi-label model's result for one text, with one :class:`Explanation` per predicted label.

    Each label is its own binary decision, so its explanation splits the label's own logit (its log-odds
    before the temperature), not a margin against the other labels: ``bias + sum(scores)`` is that logit,
    exactly. ``explanations[i].target`` is ``labels[i]``.
    """

    text: str
    labels: list[str]
    probabilities: dict[str, float]
    explanations: list[Explanation]

    def to_dict(self) -> dict:
        """The ``predict --explain --json`` object of a multi-label model: ``text``, ``labels``,
        ``probabilities``, and ``explanations``: per predicted label ``{"label", "probability", "tokens",
        "scores", "bias"}``."""
        return {"text": self.text, "labels": self.labels, "probabilities": self.probabilities,
                "explanations": [{"label": e.target, "probability": e.probability, "tokens": e.tokens,
                                  "scores": e.scores, "bias": e.bias} for e in self.explanations]}


def label_set_explanations(texts: Sequence[str], rows: Sequence[TokenRow], logits: np.ndarray,
                           token_logits: Sequence[np.ndarray], bias: np.ndarray, labels: Sequence[str],
                           decision: Decision, join_pieces: bool = False,
                           probabilities: np.ndarray | None = None,
                           across_spaces: bool = False) -> list[LabelSetExplanation]:
    """Each text's label set (:func:`~.multilabel.label_sets`) and, per predicted label ``j``, each token's share
    of logit ``j``: ``token_logits[t][:, j]``, with ``bias[j]`` (arguments as :func:`explanations`)."""
    out = []
    sets = label_sets(texts, logits, labels, decision, probabilities)
    for result, (ids, spans, positions, n), t in zip(sets, rows, token_logits):
        text, tokens = result.text, surface_tokens(result.text, ids, spans)
        per = [Explanation(text=text, label=name, probability=result.probabilities[name],
                           probabilities=result.probabilities, tokens=tokens,
                           scores=t[:, labels.index(name)].astype(np.float64).tolist(),
                           bias=float(bias[labels.index(name)]), ids=ids, spans=spans, positions=positions,
                           num_tokens=n, target=name, join_pieces=join_pieces, across_spaces=across_spaces)
               for name in result.labels]
        out.append(LabelSetExplanation(text, result.labels, result.probabilities, per))
    return out
