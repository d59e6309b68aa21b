"""word2vec: skip-gram with negative sampling on the token embedding alone (Mikolov et al. 2013, "Distributed
Representations of Words and Phrases"; gensim's implementation; its loop is ``training/pretrain.py``'s)."""

from __future__ import annotations

from typing import Any

from . import Objective


def _describe(pre: dict[str, Any]) -> tuple[str, str]:
    return ("word2vec (skip-gram) pretraining of the token embedding",
            f"gensim Word2Vec, window {pre['window']}, 5 negative samples, "
            f"frequent words downsampled at {pre['subsample']:g}")


OBJECTIVE = Objective("word2vec", "the token embedding only, skip-gram with negative sampling (Mikolov et al. 2013, gensim)",
                      fixes=("d_model",), takes="embedding", describe=_describe)
