"""The ablation's leave-one-out rows: each is a valid config that differs from the default in its lever only."""

from bench.ablation import leave_one_out
from sentiment_cli.config import load_config

from .conftest import ROOT


def _config(overrides):
    cfg = load_config(ROOT / "configs" / "default.toml")
    for section, values in overrides.items():
        cfg = cfg.override(section, **values)
    return cfg


def test_leave_one_out_rows_hold_out_validation_and_change_one_lever_each():
    rows = leave_one_out("/w2v")
    base = _config(rows[0][1])
    assert (base.data.validation_fraction, base.data.validation_split, base.training.patience) == (0.1, "blocks", 3)
    assert base.training.init_from == "/w2v"
    default = load_config(ROOT / "configs" / "default.toml")
    assert base.model == default.model   # the default's settings, apart from the hold-out and the folder
    changed = []
    for label, overrides in rows[1:]:
        cfg = _config(overrides)
        assert cfg.data.validation_fraction == 0.1   # every row is scored on the same blocks
        diff = {(s, k) for s in ("model", "data", "training") for k, v in vars(getattr(cfg, s)).items()
                if getattr(getattr(base, s), k) != v}
        assert diff, label
        changed.append(diff)
    assert ("training", "adversarial_epsilon") in changed[0] and changed[1] == {("training", "init_from")}
