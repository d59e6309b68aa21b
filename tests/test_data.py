import shutil
from collections import Counter

import pytest

from sentiment_cli.data import batching, sources
from sentiment_cli.data import splits as data
from sentiment_cli.errors import DataError, UsageError

from .conftest import FULL_DATA, SMALL_DATA


def test_validation_is_a_stratified_deterministic_hold_out():
    train, val = data.load_train_validation(str(SMALL_DATA), 0.1, seed=1234)
    assert (len(train), len(val)) == (900, 100)
    assert Counter(val.labels) == {0: 50, 1: 50}
    assert not set(train.texts) & set(val.texts)
    again = data.load_split(str(SMALL_DATA), "validation", 0.1, seed=1234)
    assert again.texts == val.texts
    other = data.load_split(str(SMALL_DATA), "validation", 0.1, seed=1)
    assert other.texts != val.texts


def test_block_validation_holds_out_runs_of_consecutive_rows():
    import numpy as np

    labels = [0] * 1000 + [1] * 1000
    held = data.block_validation_indices(labels, 0.1, seed=1234)
    assert len(held) == 200 and (held < 1000).sum() == 100          # 10% of each label
    runs = np.split(held, np.flatnonzero(np.diff(held) != 1) + 1)
    assert len(runs) <= 20 and all(len(r) % 10 == 0 for r in runs)  # blocks of 10 consecutive rows
    assert np.array_equal(held, data.block_validation_indices(labels, 0.1, seed=1234))
    assert not np.array_equal(held, data.block_validation_indices(labels, 0.1, seed=1))
    with pytest.raises(ValueError, match="too few"):
        data.block_validation_indices([0, 1, 1], 0.5, seed=0)


def test_block_validation_split_of_the_slice():
    train, val = data.load_train_validation(str(SMALL_DATA), 0.1, seed=1234, validation_split="blocks")
    assert (len(train), len(val)) == (900, 100) and Counter(val.labels) == {0: 50, 1: 50}
    assert not set(train.texts) & set(val.texts)
    assert data.load_split(str(SMALL_DATA), "validation", 0.1, 1234, "blocks").texts == val.texts
    assert 20 < sum(train.labels[:100]) < 80                         # shuffled, not sorted by label


@pytest.mark.slow   # reads the full IMDB set
@pytest.mark.skipif(not FULL_DATA.exists(), reason=f"the full IMDB set is not at {FULL_DATA}")
def test_block_validation_keeps_movie_names_from_giving_the_label_away():
    """On IMDB a random hold-out shares movies with training: the rare capitalised words of a review
    (names, titles) predict its label from training reviews that share them far better than on test.
    Held out in blocks, they predict no better than on test."""
    import math
    import re

    def names(text):
        return set(re.findall(r"\b[A-Z][a-z]{3,}\b", text))

    test = data.load_split(str(FULL_DATA), "test", 0.1, 1234)
    accuracy = {}
    for mode in ("random", "blocks"):
        train, val = data.load_train_validation(str(FULL_DATA), 0.1, 1234, mode)
        pos, total = Counter(), Counter()
        for text, label in zip(train.texts, train.labels):
            for w in names(text):
                total[w] += 1
                pos[w] += label

        def vote(texts, labels):   # naive-Bayes-like vote of the names seen in 3-30 training reviews
            hits = []
            for text, label in zip(texts, labels):
                ws = [w for w in names(text) if 3 <= total[w] <= 30]
                if ws:
                    score = sum(math.log((pos[w] + 1) / (total[w] - pos[w] + 1)) for w in ws)
                    hits.append((score > 0) == bool(label))
            return sum(hits) / len(hits)

        accuracy[mode] = vote(val.texts, val.labels), vote(test.texts[::10], test.labels[::10])
    (random_val, random_test), (blocks_val, blocks_test) = accuracy["random"], accuracy["blocks"]
    assert random_val > random_test + 0.08      # measured: 0.705 vs 0.577
    assert blocks_val < blocks_test + 0.02      # measured: 0.511 vs 0.583


@pytest.mark.parametrize("how", ["random", "blocks"])
def test_validation_fraction_0_keeps_all_of_train_and_no_validation(how):
    train, val = data.load_train_validation(str(SMALL_DATA), 0.0, seed=1234, validation_split=how)
    part, _ = data.load_train_validation(str(SMALL_DATA), 0.1, seed=1234, validation_split=how)
    assert (len(train), len(val)) == (1000, 0)
    assert set(part.texts) < set(train.texts)                        # the 900, plus the 100 held out before
    assert 20 < sum(train.labels[:100]) < 80                         # shuffled, not sorted by label
    assert data.load_split(str(SMALL_DATA), "train", 0.0, 1234, how).texts == train.texts
    with pytest.raises(UsageError, match=r"no validation split: \[data\] validation_fraction is 0"):
        data.load_split(str(SMALL_DATA), "validation", 0.0, 1234, how)
    texts = data.load_pretraining_texts(str(SMALL_DATA), "train", 0.0, 1234, how)
    assert sorted(texts) == sorted(train.texts)


def test_training_order_is_shuffled_not_sorted_by_label():
    train, _ = data.load_train_validation(str(SMALL_DATA), 0.1, seed=1234)
    first = train.labels[:100]
    assert 20 < sum(first) < 80


def test_aclimdb_folder_layout(tmp_path):
    for split in ("train", "test"):
        for label in ("pos", "neg"):
            folder = tmp_path / "aclImdb" / split / label
            folder.mkdir(parents=True)
            for i in range(10):
                (folder / f"{i}_7.txt").write_text(f"{label} review {i} of {split}")
    test = data.load_split(str(tmp_path / "aclImdb"), "test", 0.1, seed=0)
    assert len(test) == 20 and Counter(test.labels) == {0: 10, 1: 10}
    assert all(t.startswith("pos") == bool(y) for t, y in zip(test.texts, test.labels))
    train, val = data.load_train_validation(str(tmp_path / "aclImdb"), 0.2, seed=0)
    assert (len(train), len(val)) == (16, 4)


def test_aclimdb_files_are_read_in_review_id_order(tmp_path):
    # as on the Hub: by review id (10 after 9, not after 1), which keeps a movie's reviews together
    for label in ("pos", "neg"):
        folder = tmp_path / "aclImdb" / "test" / label
        folder.mkdir(parents=True)
        for i in range(12):
            (folder / f"{i}_7.txt").write_text(f"{label} {i}")
    ds = sources.load_dataset_dict(str(tmp_path / "aclImdb"))
    assert ds["test"]["text"][:12] == [f"neg {i}" for i in range(12)]


def test_unknown_split_and_missing_folder():
    with pytest.raises(UsageError, match="unknown split 'dev'"):
        data.load_split(str(SMALL_DATA), "dev", 0.1, 0)
    with pytest.raises(DataError, match="does not exist"):
        data.load_split("./no/such/folder", "test", 0.1, 0)


def test_folder_name_with_glob_characters_gets_a_clear_error(tmp_path):
    # datasets reads "[small]" as a pattern and then reports the folder as empty
    folder = tmp_path / "imdb[small]"
    shutil.copytree(SMALL_DATA, folder)
    with pytest.raises(DataError, match=r"glob character .* rename the folder"):
        sources.load_dataset_dict(str(folder))


def test_unreachable_hub_names_the_offline_way(monkeypatch):
    import datasets

    def offline(*a, **k):
        raise ConnectionError("Couldn't reach 'stanfordnlp/imdb' on the Hub (LocalEntryNotFoundError)")
    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError) as err:
        sources.load_dataset_dict("stanfordnlp/imdb")
    assert "cannot reach the Hugging Face Hub" in str(err.value) and "--data PATH" in str(err.value)


def test_collate_builds_the_mask_from_lengths():
    ids, mask = batching.collate([[0, 5], [7]])   # a literal <pad> id typed in a review stays a real token
    assert ids.tolist() == [[0, 5], [7, 0]]
    assert mask.tolist() == [[False, False], [False, True]]


@pytest.mark.slow   # reads the full IMDB set
@pytest.mark.skipif(not FULL_DATA.exists(), reason=f"the full IMDB set is not at {FULL_DATA}")
def test_full_imdb_from_shared():
    ds = sources.load_dataset_dict(str(FULL_DATA))
    assert (len(ds["train"]), len(ds["test"])) == (25000, 25000)
    train, val = data.load_train_validation(str(FULL_DATA), 0.1, seed=1234)
    assert (len(train), len(val)) == (22500, 2500)
    assert Counter(val.labels) == {0: 1250, 1: 1250}


def _time_ordered_csv(tmp_path, labels):
    path = tmp_path / "stories.csv"
    path.write_text("text,label\n" + "".join(f"story {i},{label}\n" for i, label in enumerate(labels)))
    return str(path)


def test_last_rows_validate_in_file_order(tmp_path):
    """validation_split 'last': the newest tenth of a file in time order validates, the rest trains (shuffled)."""
    source = _time_ordered_csv(tmp_path, ["pos", "neg"] * 20 + ["pos"] * 5 + ["neg"] * 5)   # 50 rows
    train, val = data.load_train_validation(source, 0.1, seed=3, validation_split="last")
    assert val.texts == [f"story {i}" for i in range(45, 50)]
    assert sorted(train.texts, key=lambda t: int(t.split()[1])) == [f"story {i}" for i in range(45)]
    assert train.texts != sorted(train.texts, key=lambda t: int(t.split()[1]))      # shuffled
    assert data.load_split(source, "validation", 0.1, 3, "last").texts == val.texts
    assert data.held_out_count([25, 25], 0.1, 3, "last") == (5, 0)
    multi = tmp_path / "multi.jsonl"
    multi.write_text("".join(f'{{"text": "story {i}", "labels": ["a", "b"]}}\n' for i in range(20)))
    train, val = data.load_train_validation(str(multi), 0.25, seed=3, validation_split="last")
    assert val.texts == [f"story {i}" for i in range(15, 20)] and len(train) == 15


def test_last_rows_refuse_a_class_training_would_never_see(tmp_path):
    source = _time_ordered_csv(tmp_path, ["pos", "neg"] * 20 + ["new"] * 5)
    with pytest.raises(DataError, match="class 'new' has all its rows among the last 5 rows"):
        data.load_train_validation(source, 0.1, seed=3, validation_split="last")
