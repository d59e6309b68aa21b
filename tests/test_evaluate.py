import numpy as np
import pytest
from sklearn.metrics import accuracy_score, confusion_matrix, precision_recall_fscore_support

from sentiment_cli.data.batching import make_batches
from sentiment_cli.evaluation.evaluate import classification_metrics


def test_metrics_agree_with_scikit_learn():
    rng = np.random.default_rng(0)
    for _ in range(20):
        y = rng.integers(0, 2, 200)
        p = np.where(rng.random(200) < 0.7, y, 1 - y)
        m = classification_metrics(y, p)
        prec, rec, f1, _ = precision_recall_fscore_support(y, p, labels=[0, 1], zero_division=0)
        assert m["accuracy"] == accuracy_score(y, p)
        assert m["confusion_matrix"] == confusion_matrix(y, p, labels=[0, 1]).tolist()
        for i, name in enumerate(("negative", "positive")):
            assert np.isclose(m["precision"][name], prec[i])
            assert np.isclose(m["recall"][name], rec[i])
            assert np.isclose(m["f1"][name], f1[i])
        assert np.isclose(m["f1"]["macro"], f1.mean())


@pytest.mark.parametrize("n", [3, 5, 7])
def test_n_class_metrics_agree_with_scikit_learn(n):
    rng = np.random.default_rng(n)
    names = [f"class {c}" for c in range(n)]
    for _ in range(10):
        y = rng.integers(0, n, 300)
        p = np.where(rng.random(300) < 0.5, y, rng.integers(0, n, 300))
        p[p == n - 1] = 0          # a class never predicted: its precision is 0, not NaN
        m = classification_metrics(y, p, names)
        assert m["accuracy"] == accuracy_score(y, p)
        assert m["confusion_matrix"] == confusion_matrix(y, p, labels=list(range(n))).tolist()
        assert m["support"] == {name: int((y == c).sum()) for c, name in enumerate(names)}
        for avg in (None, "macro", "weighted"):
            prec, rec, f1, _ = precision_recall_fscore_support(y, p, labels=list(range(n)), average=avg,
                                                               zero_division=0)
            keys = names if avg is None else [avg]
            for i, key in enumerate(keys):
                got = [m["precision"][key], m["recall"][key], m["f1"][key]]
                want = [prec[i], rec[i], f1[i]] if avg is None else [prec, rec, f1]
                assert np.allclose(got, want), (avg, key)


def test_metrics_when_a_class_is_never_predicted():
    m = classification_metrics([0, 1, 1], [0, 0, 0])
    assert m["precision"]["positive"] == 0.0 and m["recall"]["positive"] == 0.0 and m["f1"]["positive"] == 0.0
    assert m["confusion_matrix"] == [[1, 0], [2, 0]]


def test_batches_cover_every_example_once_and_bucket_by_length():
    lengths = list(np.random.default_rng(1).integers(1, 500, 1000))
    for shuffle in (True, False):
        batches = make_batches(lengths, 32, shuffle=shuffle, seed=3)
        flat = np.concatenate(batches)
        assert sorted(flat.tolist()) == list(range(1000))
        assert all(len(b) <= 32 for b in batches)
    # bucketing: far less padding than random batches
    def padding(bs):
        return sum(max(lengths[i] for i in b) * len(b) - sum(lengths[i] for i in b) for b in bs)
    assert padding(make_batches(lengths, 32, shuffle=True, seed=3)) < 0.2 * padding(
        make_batches(lengths, 32, shuffle=True, seed=3, bucket=False))
    # same seed, same batches; another seed, another order
    a = make_batches(lengths, 32, shuffle=True, seed=3)
    assert all((x == y).all() for x, y in zip(a, make_batches(lengths, 32, shuffle=True, seed=3)))
    assert any((x != y).any() for x, y in zip(a, make_batches(lengths, 32, shuffle=True, seed=4)) if len(x) == len(y))


def test_native_bf16_asks_torchs_cpu_probes(monkeypatch):
    import torch

    from sentiment_cli.runtime import native_bf16

    cpu = torch.device("cpu")
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert native_bf16(cpu) is False
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert native_bf16(cpu) is True
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported")
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported")
    assert native_bf16(cpu) is True   # a torch without the probes: assume support, no note
