"""electra: the whole encoder as the discriminator of replaced-token detection (Clark et al. 2020; the step is
``training/electra.py``'s)."""

from __future__ import annotations

from typing import Any

from . import ENCODER_KEYS, Objective
from .mlm import encoder_optimizer


def _describe(pre: dict[str, Any]) -> tuple[str, str]:
    return (f"replaced-token-detection (ELECTRA) pretraining, generator of {pre.get('generator_layers', 1)} "
            f"layer(s), loss weight {pre.get('rtd_weight', 50.0):g}", encoder_optimizer(pre))


OBJECTIVE = Objective("electra", "the whole encoder as the discriminator of replaced-token detection "
                                 "(Clark et al. 2020)",
                      fixes=ENCODER_KEYS, takes="encoder", describe=_describe,
                      step="sentiment_cli.training.electra:ElectraObjective")
