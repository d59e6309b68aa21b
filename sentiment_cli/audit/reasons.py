"""Why the audit suggests another label for a row: the exact split of the suggestion's logit margin over its tokens.

A flagged row's out-of-fold logits come from the n-gram score fitted on the other folds
(``audit/probabilities.py``), a linear function of the row's binarised hashed 1-3-grams. The model's own
:meth:`~sentiment_cli.ngram.score.NgramScore.token_logits` gives each n-gram's weight to the token
that ends it (a repeated n-gram counts once), so the margin of the suggested class ``s`` over the given
class ``g`` splits exactly over the tokens::

    logits[s] - logits[g] = (b[s] - b[g]) + sum_t (token_logits[t, s] - token_logits[t, g])

A token with a positive score pushed the row towards the suggested label, away from the given one.
The scores are in logit units before the temperature (which divides the margin, never its sign).
With two classes the margin is the log-odds of the suggested label, as ``predict --explain`` explains
the log-odds of the second label (``inference/explain.py``). Each row is returned as the project's
:class:`~sentiment_cli.inference.prediction.Explanation` with ``target`` the suggested label, so that
``bias + sum(scores)`` is this margin (not the margin over the mean of all others, as in ``predict``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..inference.prediction import Explanation, surface_tokens, token_rows
from .probabilities import AUDIT_DATA, CrossFit

BATCH = 64   # rows explained at a time (memory only)


def explain_rows(cross: CrossFit, tokenizer, texts: Sequence[str], rows: Sequence[int], given: Sequence[int],
                 suggested: Sequence[int], label_names: Sequence[str]) -> dict[int, Explanation]:
    """The exact explanation (module docstring) of each row in ``rows``: suggested against given label.

    Args:
        cross: the cross-fit whose held-out logits flagged the rows.
        tokenizer: the audit's tokenizer (:func:`~sentiment_cli.audit.probabilities.encode`).
        texts: all the audited texts (indexed by row).
        rows: the rows to explain (the flagged ones): the work is linear in their tokens.
        given, suggested: ``(n,)`` label ids of all rows.
        label_names: the class names, by id.

    Returns:
        ``{row: Explanation}``: ``tokens`` / ``scores`` over the tokens the score read, ``bias`` the
        intercepts' difference, ``label`` and ``target`` the suggested label, ``probability`` /
        ``probabilities`` the calibrated out-of-fold ones.
    """
    import torch

    from ..data.batching import collate

    probabilities = cross.probabilities()
    out: dict[int, Explanation] = {}
    rows = np.asarray(rows, dtype=np.int64)
    for f in np.unique(cross.fold[rows]).tolist():
        score = cross.score(f)
        mine = rows[cross.fold[rows] == f]
        for lo in range(0, len(mine), BATCH):
            batch = mine[lo:lo + BATCH].tolist()
            found = token_rows(tokenizer, AUDIT_DATA, [texts[i] for i in batch])
            with torch.no_grad():
                token_logits, bias = score(collate([r[0] for r in found])[0])   # (b, seq_len, k), (k,)
            token_logits, bias = token_logits.numpy(), bias.numpy()
            for j, (i, (ids, spans, positions, n)) in enumerate(zip(batch, found)):
                s, g = int(suggested[i]), int(given[i])
                shares = token_logits[j, :len(ids)]
                text = texts[i]
                p = probabilities[i].tolist()
                out[i] = Explanation(
                    text=text, label=label_names[s], probability=p[s], probabilities=dict(zip(label_names, p)),
                    tokens=surface_tokens(text, ids, spans), scores=(shares[:, s] - shares[:, g]).tolist(),
                    bias=float(bias[s] - bias[g]), ids=ids, spans=spans, positions=positions, num_tokens=n,
                    target=label_names[s])
    return out
