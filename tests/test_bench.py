"""The benchmark: the ablation's leave-one-out rows, the peers on the committed slice, the report tables."""

from pathlib import Path

import pytest

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


# ----------------------------------------------------------------------------- the peers (bench/peers.py)

def _slice():
    import numpy as np

    from sentiment_cli.data.splits import load_split

    from .conftest import SMALL_DATA

    tr, te = (load_split(str(SMALL_DATA), name, 0, 1234) for name in ("train", "test"))
    return tr.texts, np.array(tr.labels), te.texts, np.array(te.labels)


def test_log_count_ratio_matches_wang_and_manning():
    import numpy as np
    import scipy.sparse as sp

    from bench.peers import log_count_ratio

    # features: "great" in both positive reviews, "awful" in the negative one, "film" everywhere
    x = sp.csr_matrix(np.array([[1, 0, 1], [1, 0, 1], [0, 1, 1]], dtype=np.float32))
    y = np.array([1, 1, 0])
    p, q = np.array([3, 1, 3]), np.array([1, 2, 2])   # alpha = 1 plus the counts per class
    expected = np.log((p / p.sum()) / (q / q.sum()))
    assert np.allclose(log_count_ratio(x, y), expected)
    r = log_count_ratio(x, y)
    assert r[0] > 0 > r[1]


def test_nbsvm_learns_the_slice():
    from bench.peers import nbsvm

    train_texts, train_labels, test_texts, test_labels = _slice()
    out = nbsvm(train_texts, train_labels, test_texts, test_labels, test_texts[:50], test_labels[:50])
    assert out["test_accuracy"] > 0.8   # 1,000 training reviews; chance is 0.5
    assert out["train_seconds"] > 0 and out["eval_reviews_per_second"] > 0
    assert out["validation_accuracy"] > 0.7   # its validation rows are 50 of the test reviews


@pytest.mark.slow   # fits fastText twice
def test_fasttext_is_reproducible_and_learns_the_slice():
    pytest.importorskip("fasttext", reason="the fasttext package is in the test extra: pip install -e '.[test]'")
    import json
    import subprocess

    from .conftest import PYTHON, SUBPROCESS_ENV

    # one fit per process, as the benchmark runs it (bench.peers.fasttext_bigrams says why)
    code = ("import json; from tests.test_bench import _slice; from bench.peers import fasttext_bigrams; "
            "out = fasttext_bigrams(*_slice(), epoch=30, lr=0.5, dim=10, bucket=100_000); "   # the slice: 1/25 of train
            "print(json.dumps(out['test_accuracy']))")
    a, b = (json.loads(subprocess.run([PYTHON, "-c", code], cwd=ROOT, env=SUBPROCESS_ENV, check=True,
                                      capture_output=True, text=True).stdout) for _ in range(2))
    assert a > 0.7
    assert a == b   # one thread: the same seed, the same model


def test_fasttext_text_is_one_lowercase_line_with_punctuation_apart():
    from bench.peers import fasttext_text

    assert fasttext_text("Great film!!<br /><br />Don't\nmiss it.") == "great film !! don't miss it ."


# ----------------------------------------------------------------------------- the report tables

def _results():
    def run(acc, seconds, eval_speed, **extra):
        return {"test_accuracy": acc, "train_seconds": seconds, "eval_reviews_per_second": eval_speed,
                "train_examples_per_second": 100.0, "peak_rss_mib": 500.0, **extra}

    ours = dict(epochs_run=4, train_gflops=10.0, bf16=False, validation_accuracy=None)
    return {"date": "2025-01-01", "hardware": "test", "quick": False,
            "peak": {"fp32_gflops": 100.0, "bf16_gflops": 200.0},
            "notebook": {**run(None, 400.0, 500.0, train_gflops=5.0), "train_examples_per_second": 50.0,
                         "epochs": 2},
            "ours": {"default": run(0.91, 1000.0, 1000.0, **ours)},
            "peers": {"tfidf": run(0.90, 20.0, 2000.0), "nbsvm": run(0.915, 50.0, 500.0),
                      "fasttext": run(0.89, 10.0, 10000.0)}}


def test_main_table_compares_with_the_strongest_peer_and_shows_both_peaks():
    from bench.report import main_table

    header, rows = main_table(_results())
    assert header[-3:] == ["acc − NB-SVM", "train time ÷ NB-SVM", "eval speed ÷ NB-SVM"]   # the best peer
    default = next(r for r in rows if r[0].startswith("default"))
    cells = dict(zip(header, default))
    assert (cells["of fp32 peak"], cells["of bf16 peak"]) == ("10%", "5%")
    assert (cells["acc − NB-SVM"], cells["train time ÷ NB-SVM"], cells["eval speed ÷ NB-SVM"]) == \
        ("-0.50 pt", "20.0x", "2.00x")
    nbsvm_row = next(r for r in rows if r[0].startswith("NB-SVM"))
    assert nbsvm_row[-3:] == ["–", "–", "–"]   # not compared with itself
    assert len(rows) == 1 + 1 + 3   # notebook, the config, three peers


def test_ratio_table_has_every_peer_and_the_notebook():
    from bench.report import markdown, ratio_table

    header, rows = ratio_table(_results())
    assert [r[1] for r in rows] == ["notebook loop ¹", "TF-IDF + LR", "NB-SVM", "fastText"]
    by_other = {r[1]: dict(zip(header, r)) for r in rows}
    assert by_other["notebook loop ¹"]["acc − other"] == "–"   # the notebook is timed, not scored
    assert by_other["notebook loop ¹"]["train reviews/s ÷"] == "2.00x"
    assert by_other["notebook loop ¹"]["eval reviews/s ÷"] == "2.00x"
    assert by_other["TF-IDF + LR"]["acc − other"] == "+1.00 pt"
    assert (by_other["fastText"]["train time ÷"], by_other["fastText"]["eval reviews/s ÷"]) == ("100.0x", "0.10x")
    md = markdown(_results())
    separators = [line for line in md.splitlines() if line.startswith("|---|")]
    assert len(separators) == 2 and "| NB-SVM ² | 91.50% |" in md   # two tables; the peer's own row


def test_score_weight_analysis_keeps_the_runs_epoch_and_reports_the_chosen_weight(tmp_path):
    import numpy as np

    from bench.score_weight import analyse

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 400)
    sign, signal = np.array([-1.0, 1.0]), np.where(y == 1, 1.0, -1.0)
    z = {"val_y": y[:200], "dev_y": y[200:]}
    for epoch, noise in ((1, 0.3), (2, 3.0)):   # epoch 2's encoder is noise: epoch 1 validates better
        enc = sign * (signal + rng.normal(0, noise, 400))[:, None] * 3
        score = sign * (signal + rng.normal(0, 1.0, 400))[:, None]
        z[f"val_enc_{epoch}"], z[f"dev_enc_{epoch}"] = enc[:200], enc[200:]
        z[f"val_score_{epoch}"], z[f"dev_score_{epoch}"] = score[:200], score[200:]
    np.savez(tmp_path / "run.parts.npz", **z)
    line = analyse(str(tmp_path / "run.parts.npz"), (1.0, 2.0))
    assert "epoch 1," in line and "chosen 1:" in line and "every weight on DEV: 1: " in line


def test_suite_data_folders_join_the_shared_sets_by_their_folder_name_and_bad_ones_stop_in_one_line(tmp_path):
    from bench.suite import MULTI_LABEL_SETS, SETS, set_folders

    from .conftest import SMALL_DATA

    sst5 = ROOT / "tests" / "data" / "sst5_small"
    assert list(set_folders(None, [])) == [*SETS, *MULTI_LABEL_SETS]      # no flags: every shared set, GoEmotions last
    assert set_folders(None, [str(sst5)]) == {"sst5_small": str(sst5)}   # --data alone: that folder only
    both = set_folders(["trec6"], [str(sst5), str(SMALL_DATA)])            # a Hub-layout folder reads too
    assert list(both) == ["trec6", "sst5_small", "imdb_small"]
    (tmp_path / "train.csv").write_text("text,label\ngood,1\nbad,0\n")   # nothing to score the systems on
    for bad, says in (([str(tmp_path / "missing")], "not a folder"), ([str(tmp_path)], "no 'test' split"),
                      ([str(sst5), str(sst5)], "already in the run")):
        with pytest.raises(SystemExit) as e:
            set_folders([], bad)
        assert str(e.value).startswith("error: --data") and says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.slow   # 18 fits and the slice's datasets cache: seconds on a quiet machine, minutes on a loaded one
def test_the_suite_has_a_character_ngram_peer_and_the_thai_set():
    """Issue 55: beside the word-level peers, TF-IDF over character 2-4-grams + LR with C chosen on dev, which needs no
    word boundaries; on the Thai slice it beats TF-IDF over space-split words on test."""
    from bench.suite import C_GRID, LINEAR_PEERS, PEER_NAMES, SETS, job_linear

    assert "tfidf-char" in LINEAR_PEERS and "tfidf-char" in PEER_NAMES and "wisesight" in SETS
    thai = str(Path(__file__).resolve().parent / "data" / "wisesight_small")
    chars, words = job_linear("tfidf-char", thai), job_linear("tfidf", thai)
    assert len(chars["dev"]) == len(C_GRID) and 0 <= chars["test_accuracy"] <= 1   # C_GRID, each on dev
    assert chars["dev_accuracy"] > words["dev_accuracy"]


def test_the_suite_runs_a_sets_extra_row_unless_told_not_to(monkeypatch, tmp_path):
    """`--no-extra` leaves out SST-5 phrases' run with IMDB's unlabelled text; without it the set runs both."""
    from bench import suite

    calls = []
    monkeypatch.setattr(suite, "run_ours", lambda folder, out, extra: calls.append(extra) or {"test_accuracy": 0.5})
    without = suite.run_set("sst5-phrases", "x", tmp_path, skip_ours=False, peers={}, extra=False)
    assert calls == [[]] and "ours_extra" not in without
    with_extra = suite.run_set("sst5-phrases", "x", tmp_path, skip_ours=False, peers={})
    assert calls == [[], [], suite.EXTRA_OURS["sst5-phrases"][1]] and "ours_extra" in with_extra
