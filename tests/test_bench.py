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


def test_ablation_table_deltas():
    from bench.ablation import table

    rows = [{"step": s, "lever": f"row {s}", "validation_accuracy": a, "median_epoch_seconds": 10.0, "threads": 1}
            for s, a in ((0, 0.88), (1, 0.87), (2, 0.885))]
    cumulative = [line.split(" | ")[3] for line in table(rows)[2:]]
    assert cumulative == ["–", "-1.00 pt", "+1.50 pt"]
    against_0 = [line.split(" | ")[3] for line in table(rows, against_row_0=True)[2:]]
    assert against_0 == ["–", "-1.00 pt", "+0.50 pt"]
    assert [line.split(" | ")[3] for line in table(rows[1:], against_row_0=True)[2:]] == ["–", "–"]   # no row 0
