"""The suite's multi-label peers and table (bench/multilabel.py), on a small multi-label set written here."""

import json

import numpy as np
import pytest

pytest.importorskip("sklearn")   # the [bench] extra


def _write_set(folder, seed=0):
    """train/dev/test CSVs: three labels, each cued by its own words; a fifth of the rows carry two labels."""
    rng = np.random.default_rng(seed)
    cues = {"joy": ["happy", "glad", "great"], "anger": ["angry", "mad", "furious"], "fear": ["scared", "afraid"]}
    filler = ["the", "a", "day", "it", "was", "so", "and", "today", "really", "thing"]
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 300), ("dev", 120), ("test", 120)):
        lines = ["text,labels"]
        for _ in range(n):
            names = list(rng.choice(list(cues), size=1 + (rng.random() < 0.2), replace=False))
            words = [*rng.choice(filler, size=5)] + [rng.choice(cues[name]) for name in names]
            rng.shuffle(words)
            lines.append(f"{' '.join(words)},\"{','.join(sorted(names))}\"")
        (folder / f"{split}.csv").write_text("\n".join(lines) + "\n")
    return folder


def test_decide_keeps_each_rows_top_label_and_takes_one_threshold_or_one_per_label():
    from bench.multilabel import decide

    probs = np.array([[0.1, 0.2, 0.05], [0.6, 0.5, 0.3]])
    assert decide(probs, 0.4).tolist() == [[0, 1, 0], [1, 1, 0]]            # row 0: nothing reaches, its top kept
    assert decide(probs, np.array([0.7, 0.1, 0.3])).tolist() == [[0, 1, 0], [1, 1, 1]]


def test_thresholds_are_chosen_on_the_grid_by_macro_f1_and_by_each_labels_f1():
    from bench.multilabel import THRESHOLDS, best_threshold, per_label_thresholds

    assert THRESHOLDS[0] == 0.05 and THRESHOLDS[-1] == 0.575 and len(THRESHOLDS) == 22
    y = np.array([[1, 0], [1, 1], [0, 1], [0, 1]])
    probs = np.array([[0.9, 0.05], [0.8, 0.3], [0.1, 0.3], [0.2, 0.4]])   # label 1: all positives reach 0.3
    t, macro = best_threshold(y, probs)
    assert t in THRESHOLDS and macro == 1.0
    per = per_label_thresholds(y, probs)
    assert per[1] <= 0.3 and per[0] > 0.2   # label 0's negatives (0.1, 0.2) under it


def test_tfidf_peers_choose_c_and_thresholds_on_dev_never_on_test(tmp_path):
    from bench.multilabel import C_GRID, job_tfidf

    folder = _write_set(tmp_path / "set")
    r = job_tfidf(str(folder))
    one, per = r["tfidf"], r["tfidf_per_label"]
    assert one["setting"]["C"] in C_GRID and set(one["dev"]) == {str(c) for c in C_GRID}
    assert one["dev"][str(one["setting"]["C"])]["f1_macro"] == max(d["f1_macro"] for d in one["dev"].values())
    assert per["setting"]["C"] == one["setting"]["C"] and set(per["thresholds"]) == {"anger", "fear", "joy"}
    for v in (one, per):
        assert 0.8 < v["test_f1_macro"] <= 1 and 0.8 < v["test_f1_micro"] <= 1 and 0.5 < v["test_exact_match"] <= 1
    # other test labels: the same choices on dev
    test = (folder / "test.csv").read_text().splitlines()
    (folder / "test.csv").write_text("\n".join([test[0], *(line.replace("joy", "fear") for line in test[1:])]))
    again = job_tfidf(str(folder))
    assert again["tfidf"]["setting"] == one["setting"] and again["tfidf_per_label"]["thresholds"] == per["thresholds"]
    assert again["tfidf"]["test_f1_macro"] < one["test_f1_macro"]



def test_the_character_peers_read_character_ngrams_and_are_named_for_it(tmp_path):
    """Issue 55: beside the word peers, TF-IDF over character 2-4-grams + LR, its C and thresholds chosen on dev."""
    from bench.multilabel import C_GRID, PEER_NAMES, job_tfidf, tfidf_ovr

    folder = _write_set(tmp_path / "set")
    r = job_tfidf(str(folder), "chars")
    assert set(r) == {"tfidf-char", "tfidf-char_per_label"} and set(r) <= set(PEER_NAMES)
    assert r["tfidf-char"]["setting"]["C"] in C_GRID and 0.8 < r["tfidf-char_per_label"]["test_f1_macro"] <= 1
    vocabulary = tfidf_ovr(1.0, "chars").fit(["happy day", "mad day"], [[1, 0], [0, 1]])[0].vocabulary_
    assert "ppy" in vocabulary and "y d" in vocabulary and "happy" not in vocabulary   # across words, 2-4 long
    with pytest.raises(ValueError, match="reading 'bytes'"):
        job_tfidf(str(folder), "bytes")

def test_fasttext_ova_picks_its_setting_and_threshold_on_dev(tmp_path, monkeypatch):
    pytest.importorskip("fasttext")
    from bench import multilabel

    folder = _write_set(tmp_path / "set")
    monkeypatch.setattr(multilabel, "FASTTEXT_GRID", [{"lr": 0.5, "epoch": 5}, {"lr": 0.5, "epoch": 25}])
    r = multilabel.run_fasttext(str(folder))   # each fit in a job process of its own
    assert set(r["dev"]) == {json.dumps(g) for g in multilabel.FASTTEXT_GRID}
    best = json.dumps({k: r["setting"][k] for k in ("lr", "epoch")})
    assert r["dev"][best]["f1_macro"] == max(d["f1_macro"] for d in r["dev"].values())
    assert r["setting"]["threshold"] == r["dev"][best]["threshold"] in multilabel.THRESHOLDS
    assert r["test_f1_macro"] > 0.5 and r["train_seconds"] > 0


def test_our_row_reads_the_multi_label_eval_json_and_says_why_when_it_cannot(tmp_path, monkeypatch):
    from bench import multilabel, processes

    ev = {"multi_label": True, "examples": 10, "micro": {"precision": 0.6, "recall": 0.5, "f1": 0.55},
          "macro": {"precision": 0.5, "recall": 0.4, "f1": 0.44}, "weighted": {"f1": 0.5}, "per_label": {},
          "subset_accuracy": 0.3, "hamming_loss": 0.05, "lrap": 0.7, "ece": 0.02}
    asked = []
    monkeypatch.setattr(processes, "train_and_eval", lambda folder, out, extra: (asked.append(extra) or (
        {**ev, "folder_bytes": 2_000_000, "full": {**ev, "macro": {"f1": 0.45}, "folder_bytes": 9_000_000}}, 12.0)))
    r = multilabel.run_ours("DIR", tmp_path / "ours", [])
    assert r == {"test_f1_macro": 0.44, "test_f1_micro": 0.55, "test_exact_match": 0.3, "hamming_loss": 0.05,
                 "lrap": 0.7, "ece": 0.02, "train_seconds": 12.0, "folder_bytes": 2_000_000,
                 "full_test_f1_macro": 0.45, "full_folder_bytes": 9_000_000}
    assert asked == [["--keep-full"]]   # the same run's model before compression, scored beside
    monkeypatch.setattr(processes, "train_and_eval", lambda folder, out, extra: ({"accuracy": 0.5, "f1": {}}, 3.0))
    assert "not multi-label" in multilabel.run_ours("DIR", tmp_path / "ours", [])["error"]
    monkeypatch.setattr(processes, "train_and_eval", lambda folder, out, extra: ({"error": "exit 2: no"}, 1.0))
    assert multilabel.run_ours("DIR", tmp_path / "ours", []) == {"error": "exit 2: no", "train_seconds": 1.0}


def _peer(macro, micro, exact, **setting):
    return {"setting": setting, "test_f1_macro": macro, "test_f1_micro": micro, "test_exact_match": exact,
            "train_seconds": 20.0}


def test_suite_markdown_puts_multi_label_sets_in_a_table_of_their_own():
    from bench.suite import HEADER, markdown

    single = {"peers": {"tfidf": {"setting": {"C": 1.0}, "test_accuracy": 0.9, "test_f1_macro": 0.89,
                                  "train_seconds": 3.0}},
              "ours": {"test_accuracy": 0.92, "test_f1_macro": 0.91, "train_seconds": 30.0, "ece": 0.01}}
    results = {"date": "2026-11-27", "hardware": "x", "commit": "abc", "sets": {"trec6": single}}
    before = markdown(results)
    assert "macro-F1 | micro-F1" not in before and before.count("| trec6 |") == 2
    results["sets"]["goemotions"] = {
        "multi_label": True,
        "peers": {"tfidf": _peer(0.437, 0.508, 0.205, C=4.0, threshold=0.1),
                  "tfidf_per_label": _peer(0.454, 0.542, 0.333, C=4.0),
                  "fasttext": _peer(0.385, 0.516, 0.378, lr=0.5, epoch=10, threshold=0.05)},
        "ours": {"error": "exit 2: error: multi-label data is not supported yet", "train_seconds": 1.0}}
    both = markdown(results)
    assert both.startswith(before) and "| " + " | ".join(HEADER) + " |" in both
    assert "| set | system | macro-F1 | micro-F1 | exact match | train time | against the best peer |" in both
    assert "| goemotions | TF-IDF + LR, a threshold per label (C 4) | 0.4540 | 0.5420 | 33.30% | 20.0 s | best peer |" \
        in both
    assert "fastText ova (lr 0.5, epoch 10, threshold 0.05)" in both and "not supported yet" in both
    results["sets"]["goemotions"]["ours"] = {"test_f1_macro": 0.47, "test_f1_micro": 0.55, "test_exact_match": 0.4,
                                             "train_seconds": 600.0}
    assert "+0.0160 macro-F1 vs TF-IDF + LR, a threshold per label" in markdown(results)
    del results["sets"]["trec6"]
    alone = markdown(results)
    assert "test accuracy" not in alone and "| goemotions | sentiment train (no flags) | 0.4700 |" in alone
