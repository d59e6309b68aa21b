from collections import Counter

import pytest

from sentiment_cli import data
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


def test_unknown_split_and_missing_folder():
    with pytest.raises(UsageError, match="unknown split 'dev'"):
        data.load_split(str(SMALL_DATA), "dev", 0.1, 0)
    with pytest.raises(DataError, match="does not exist"):
        data.load_split("./no/such/folder", "test", 0.1, 0)


def test_unreachable_hub_names_the_offline_way(monkeypatch):
    import datasets

    def offline(*a, **k):
        raise ConnectionError("Couldn't reach 'stanfordnlp/imdb' on the Hub (LocalEntryNotFoundError)")
    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError) as err:
        data.load_imdb("stanfordnlp/imdb")
    assert "cannot reach the Hugging Face Hub" in str(err.value) and "--data PATH" in str(err.value)


def test_collate_builds_the_mask_from_lengths():
    ids, mask = data.collate([[0, 5], [7]])   # a literal <pad> id typed in a review stays a real token
    assert ids.tolist() == [[0, 5], [7, 0]]
    assert mask.tolist() == [[False, False], [False, True]]


@pytest.mark.skipif(not FULL_DATA.exists(), reason=f"the full IMDB set is not at {FULL_DATA}")
def test_full_imdb_from_shared():
    ds = data.load_imdb(str(FULL_DATA))
    assert (len(ds["train"]), len(ds["test"])) == (25000, 25000)
    train, val = data.load_train_validation(str(FULL_DATA), 0.1, seed=1234)
    assert (len(train), len(val)) == (22500, 2500)
    assert Counter(val.labels) == {0: 1250, 1: 1250}
