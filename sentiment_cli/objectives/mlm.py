"""mlm: the whole encoder as a masked language model (Devlin et al. 2019, section 3.1; the step is
``training/mlm.py``'s)."""

from __future__ import annotations

from typing import Any

from . import ENCODER_KEYS, Objective


def encoder_optimizer(pre: dict[str, Any]) -> str:
    """The model card's optimizer words of an objective that trains the whole encoder (mlm, electra)."""
    return (f"AdamW, lr {pre['lr']:g} (cosine schedule), weight decay {pre['weight_decay']:g}, "
            f"batch {pre['batch_size']}, {pre['mask_fraction']:.0%} of tokens masked")


def _describe(pre: dict[str, Any]) -> tuple[str, str]:
    return "masked-language-model pretraining", encoder_optimizer(pre)


OBJECTIVE = Objective("mlm", "the whole encoder (Devlin et al. 2019)",
                      fixes=ENCODER_KEYS, takes="encoder", describe=_describe,
                      step="sentiment_cli.training.mlm:MaskedLMObjective")
