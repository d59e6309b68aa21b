"""Load IMDB through Hugging Face ``datasets``: sources, label names, splits and the validation hold-out.

``source`` is a Hub dataset id (default ``stanfordnlp/imdb``) or a local
folder: either the Hub layout (``plain_text/train-*.parquet``, as in
``../shared/data/imdb``) or the original ``aclImdb`` archive
(``train|test/pos|neg/*.txt``). Labels are 0 = negative, 1 = positive.
"""

from __future__ import annotations

import glob
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import DataError, UsageError

SPLITS = ("train", "validation", "test")
LABELS = ("negative", "positive")   # IMDB's label names, by label id
NUM_LABELS = len(LABELS)


@dataclass
class Split:
    """One labelled split: ``texts[i]`` has label ``labels[i]`` (0 negative, 1 positive)."""

    name: str
    texts: list[str]
    labels: list[int]

    def __len__(self) -> int:
        return len(self.texts)

    def fingerprint(self) -> str:
        """``"sha256:<hex>"`` over the texts and labels, in order: equal splits give equal fingerprints.

        Each example contributes its label, the byte length of its UTF-8 text
        and the text, so no two different splits hash the same bytes.
        """
        h = hashlib.sha256()
        for text, label in zip(self.texts, self.labels):
            data = text.encode("utf-8", errors="surrogatepass")
            h.update(f"{int(label)}:{len(data)}:".encode("ascii"))
            h.update(data)
        return f"sha256:{h.hexdigest()}"


def absolute_source(source: str) -> str:
    """``source`` as an absolute path when it names an existing local path, else unchanged (a Hub id)."""
    p = Path(source).expanduser()
    return str(p.resolve()) if p.exists() else source


def _looks_local(source: str) -> bool:
    """A path (existing, or written as one) rather than a Hub id such as ``owner/name``."""
    return source.startswith((".", "/", "~")) or Path(source).expanduser().exists()


def _review_id(path: Path) -> tuple[int, str]:
    """Sort key of an aclImdb file ``<id>_<rating>.txt``: the numeric id (then the name)."""
    head = path.stem.split("_")[0]
    return (int(head) if head.isdigit() else -1, path.name)


def _load_aclimdb(root: Path):
    import datasets

    features = datasets.Features({"text": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=list(LABELS))})
    splits = {}
    for split in ("train", "test"):
        texts, labels = [], []
        for label, sub in enumerate(("neg", "pos")):
            folder = root / split / sub
            if not folder.is_dir():
                continue
            for f in sorted(folder.glob("*.txt"), key=_review_id):   # by review id, as on the Hub
                texts.append(f.read_text(encoding="utf-8", errors="replace"))
                labels.append(label)
        if texts:
            splits[split] = datasets.Dataset.from_dict({"text": texts, "label": labels}, features=features)
    unsup = sorted((root / "train" / "unsup").glob("*.txt"), key=_review_id)   # unlabelled reviews, label -1 as on the Hub
    if unsup:
        texts = [f.read_text(encoding="utf-8", errors="replace") for f in unsup]
        splits["unsupervised"] = datasets.Dataset.from_dict({"text": texts, "label": [-1] * len(texts)},
                                                            features=features)
    return datasets.DatasetDict(splits)


def load_imdb(source: str):
    """Load IMDB as a ``datasets.DatasetDict`` with at least ``train`` and ``test``.

    Raises:
        DataError: the folder is missing or empty, the Hub cannot be reached
            (the message names ``--data PATH``), or the splits lack ``text`` /
            ``label`` columns or have labels other than 0/1.
    """
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    if _looks_local(source):
        root = Path(source).expanduser()
        if not root.exists():
            raise DataError(f"data folder {source} does not exist")
        if not root.is_dir():
            raise DataError(f"--data {source} is a file; give a dataset folder or a Hub dataset id")
        if (root / "train" / "pos").is_dir() or (root / "test" / "pos").is_dir():
            ds = _load_aclimdb(root)
        else:
            real = str(root.resolve())   # datasets follows links, so a link's own name does not help
            if glob.escape(real) != real:
                raise DataError(f"cannot load a dataset from {source}: its path {real} holds a glob character "
                                "(*, ? or [), which Hugging Face datasets reads as a file pattern; "
                                "rename the folder")
            try:
                ds = datasets.load_dataset(str(root))
            except Exception as exc:  # datasets raises many types for unreadable folders
                raise DataError(f"cannot load a dataset from {source}: {str(exc).splitlines()[0][:200]}") from None
    else:
        try:
            ds = datasets.load_dataset(source)
        except (ConnectionError, OSError) as exc:
            raise DataError(
                f"cannot reach the Hugging Face Hub to download {source!r} ({type(exc).__name__}); "
                "work offline with a local copy: --data PATH (e.g. --data ../shared/data/imdb)") from None
        except Exception as exc:
            raise DataError(f"cannot load dataset {source!r}: {str(exc).splitlines()[0][:200]}") from None
    if not isinstance(ds, datasets.DatasetDict) or not len(ds):
        raise DataError(f"no data found in {source}")
    for name in ("train", "test"):
        if name in ds:
            _check_split(ds[name], name, source)
    return ds


def _check_split(split, name: str, source: str) -> None:
    missing = [c for c in ("text", "label") if c not in split.column_names]
    if missing:
        raise DataError(f"{source}: split {name!r} has no {' or '.join(missing)} column "
                        f"(columns: {', '.join(split.column_names)})")
    text_type = getattr(split.features["text"], "dtype", None)
    if text_type not in ("string", "large_string"):
        raise DataError(f"{source}: split {name!r} column 'text' holds {text_type or split.features['text']}, "
                        "not strings")
    bad = sorted(set(split.unique("label")) - {0, 1}, key=repr)   # key: None and ints do not compare
    if bad:
        raise DataError(f"{source}: split {name!r} has labels {bad[:5]}; expected 0 (negative) and 1 (positive)")
    missing_text = split.data.column("text").null_count   # from Arrow metadata, without reading the texts
    if missing_text:
        raise DataError(f"{source}: split {name!r} has {missing_text} rows without text (null)")


def load_split(source: str, name: str, validation_fraction: float, seed: int,
               validation_split: str = "random") -> Split:
    """One split as texts and labels.

    ``validation`` is ``validation_fraction`` of ``train``, stratified by label
    and drawn with ``seed``; ``train`` is the rest (all of it, shuffled with
    ``seed``, when ``validation_fraction`` is 0). ``test`` is the whole
    test split. ``validation_split`` says how validation is drawn:
    ``"random"`` (single reviews) or ``"blocks"`` (runs of consecutive
    reviews, see :func:`block_validation_indices`).

    Raises:
        UsageError: ``name`` is not train, validation or test, or it is
            validation and ``validation_fraction`` is 0.
        DataError: see :func:`load_imdb`; also a missing split.
    """
    if name not in SPLITS:
        raise UsageError(f"unknown split {name!r}; choose one of {', '.join(SPLITS)}")
    if name == "validation" and validation_fraction == 0:
        raise UsageError("no validation split: [data] validation_fraction is 0 (the run trained on all of train)")
    ds = load_imdb(source)
    return _select(ds, name, validation_fraction, seed, source, validation_split)


def load_train_validation(source: str, validation_fraction: float, seed: int,
                          validation_split: str = "random") -> tuple[Split, Split]:
    """``(train, validation)`` from the ``train`` split, as :func:`load_split` describes.

    With ``validation_fraction`` 0, validation is empty and train is all of ``train``.
    """
    ds = load_imdb(source)
    return (_select(ds, "train", validation_fraction, seed, source, validation_split),
            _select(ds, "validation", validation_fraction, seed, source, validation_split))


def load_pretraining_texts(source: str, splits: str, validation_fraction: float, seed: int,
                           validation_split: str = "random") -> list[str]:
    """Unlabelled reviews for pretraining (``sentiment pretrain``), shuffled with ``seed``.

    ``splits`` is ``unsupervised`` (IMDB's 50,000 unlabelled reviews),
    ``train`` (the training part of ``train``: the validation hold-out of
    :func:`load_split` with the same ``validation_fraction`` and ``seed`` is
    left out, so validation stays unseen; all of it when the fraction is 0) or ``unsupervised+train``. The
    ``test`` split is never read.

    Raises:
        DataError: see :func:`load_imdb`; also no ``unsupervised`` split when one is asked for.
    """
    ds = load_imdb(source)
    parts = splits.split("+")
    texts: list[str] = []
    if "unsupervised" in parts:
        if "unsupervised" not in ds:
            raise DataError(f"{source} has no 'unsupervised' split (it has: {', '.join(ds)}); "
                            "pretrain on the training reviews alone with --set pretrain.splits=train")
        texts += list(ds["unsupervised"]["text"])
    if "train" in parts:
        texts += _select(ds, "train", validation_fraction, seed, source, validation_split).texts
    order = np.random.default_rng(seed).permutation(len(texts))
    return [texts[i] for i in order]


BLOCK_ROWS = 100


def block_validation_indices(labels: Sequence[int], validation_fraction: float, seed: int) -> np.ndarray:
    """Rows held out for validation as whole runs ("blocks") of consecutive reviews of one label.

    IMDB keeps a movie's reviews together: rows are ordered by review id, and
    one movie's reviews (up to 30) sit within a few rows of each other.
    A random 10% of ``train`` therefore shares movies with the other 90%, and
    a model that memorises a movie's names and title is rewarded on validation
    but not on ``test`` (other movies). Holding out blocks of ``BLOCK_ROWS``
    consecutive rows keeps most movies on one side.

    For each label, its rows (in dataset order) are cut into blocks of
    ``min(BLOCK_ROWS, k // 10)`` rows (at least 1), where ``k`` =
    ``round(validation_fraction * rows)``, and ``round(k / block)`` blocks
    drawn with ``seed`` go to validation: about ``validation_fraction`` of each
    label, in at least ~10 blocks.

    Args:
        labels: label of each row, in dataset order.
        validation_fraction: share of each label to hold out, in (0, 1).
        seed: seed of the draw.

    Returns:
        Sorted row indices, int64.

    Raises:
        ValueError: a label has too few rows to leave one block on each side.
    """
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    chosen = []
    for label in np.unique(labels):
        rows = np.flatnonzero(labels == label)
        k = round(validation_fraction * len(rows))
        block = max(1, min(BLOCK_ROWS, k // 10))
        starts = np.arange(0, len(rows), block)
        take = max(1, round(k / block))
        if take >= len(starts):
            raise ValueError(f"label {label} has {len(rows)} rows: too few to hold out blocks")
        for start in rng.choice(starts, size=take, replace=False):
            chosen.append(rows[start:start + block])
    return np.sort(np.concatenate(chosen))


def _select(ds, name: str, validation_fraction: float, seed: int, source: str,
            validation_split: str = "random") -> Split:
    import datasets

    base = "test" if name == "test" else "train"
    if base not in ds:
        raise DataError(f"{source} has no {base!r} split (it has: {', '.join(ds)})")
    split = ds[base]
    if len(split) == 0:
        raise DataError(f"{source}: split {base!r} is empty")
    if name != "test" and validation_fraction == 0:   # no hold-out: all of train, none for validation
        rows = np.random.default_rng(seed).permutation(len(split)) if name == "train" else []
        split = split.select(rows)
    elif name != "test" and validation_split == "blocks":
        try:
            held = block_validation_indices(split["label"], validation_fraction, seed)
        except ValueError as exc:
            raise DataError(f"{source}: cannot hold out validation: {exc}") from None
        keep = np.zeros(len(split), dtype=bool)
        keep[held] = True
        rows = np.flatnonzero(keep if name == "validation" else ~keep)
        split = split.select(np.random.default_rng(seed).permutation(rows))
    elif name != "test":
        if not isinstance(split.features["label"], datasets.ClassLabel):
            split = split.cast_column("label", datasets.ClassLabel(names=list(LABELS)))
        try:
            parts = split.train_test_split(test_size=validation_fraction, stratify_by_column="label",
                                           seed=seed, shuffle=True)
        except ValueError as exc:
            raise DataError(f"{source}: cannot hold out validation: {exc}") from None
        split = parts["train" if name == "train" else "test"]
    return Split(name, list(split["text"]), [int(x) for x in split["label"]])
