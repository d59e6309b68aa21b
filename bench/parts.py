"""A checkpoint's logits taken apart: the encoder alone, the n-gram score alone, and their sum, on one split.

    python -m bench.parts CHECKPOINT --data DIR [--split validation]

Prints each part's accuracy, the spread (standard deviation) of its logits, and the accuracy of
``w * encoder + score`` for a few weights ``w``. It is how docs/decisions.md#small-sets-random-start-faster-embedding measured
what the encoder learns beside the score; use it on dev splits only.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

WEIGHTS = (0.5, 1.0, 2.0, 3.0)


def parts(checkpoint: str, data: str, split: str = "validation") -> dict:
    """``{"labels", "encoder", "score"}``: the split's label ids and the two parts' logits,
    ``(rows, num_labels)`` each (the score's are zero for a model without one)."""
    from sentiment_cli.checkpoint import load_checkpoint
    from sentiment_cli.data.splits import load_split
    from sentiment_cli.data.tokenizer import encode_texts

    ckpt = load_checkpoint(checkpoint)
    rows = load_split(data, split, 0.1, ckpt.config.training.seed, label_names=ckpt.labels)
    ids = encode_texts(ckpt.tokenizer, rows.texts, ckpt.config.data)
    enc, score = logit_parts(ckpt.model, ids)
    return {"labels": np.asarray(rows.labels), "encoder": enc, "score": score}


def logit_parts(model, ids) -> tuple[np.ndarray, np.ndarray]:
    """``(encoder, score)``: the logits of the encoder alone and of the n-gram score alone (at its configured
    weight; zero for a model without one), ``(len(ids), num_labels)`` each. The model is left in the mode
    it was in."""
    from sentiment_cli.data.batching import collate

    encoder, score = [], []
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for i in range(0, len(ids), 256):
            x, mask = collate(ids[i:i + 256])
            encoder.append(model(x, mask, encoder_only=True).logits.float().numpy())    # (batch, num_labels)
            if model.ngram_score is not None:
                shares, bias = model.ngram_score(x)                                       # (batch, seq, labels)
                score.append((shares.sum(1) + bias).float().numpy())
    model.train(was_training)
    enc = np.concatenate(encoder)
    return enc, (np.concatenate(score) if score else np.zeros_like(enc))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.parts", description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--data", required=True)
    ap.add_argument("--split", default="validation")
    args = ap.parse_args(argv)
    p = parts(args.checkpoint, args.data, args.split)
    y, enc, score = p["labels"], p["encoder"], p["score"]

    def accuracy(logits):
        return 100 * float((logits.argmax(1) == y).mean())

    print(f"encoder alone {accuracy(enc):.2f}% (logit std {enc.std():.2f})  ·  score alone {accuracy(score):.2f}% "
          f"(logit std {score.std():.2f})  ·  sum {accuracy(enc + score):.2f}%")
    print("w * encoder + score: " + ", ".join(f"w {w:g}: {accuracy(w * enc + score):.2f}%" for w in WEIGHTS))


if __name__ == "__main__":
    main()
