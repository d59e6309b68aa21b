"""Where labelled text comes from: a source loaded through Hugging Face ``datasets``, split by split.

A source (``[data] source``, ``--data``) is one of:

- a Hub dataset id (default ``stanfordnlp/imdb``);
- a folder: files named by split (``train``, ``validation`` or ``dev``, ``test``, and optionally
  ``unsupervised``, ``unlabelled`` or ``unlabeled``) in CSV, TSV, JSON, JSON Lines or Parquet; the Hub
  layout (``plain_text/train-*.parquet``, as in ``../shared/data/imdb``), with or without its dataset card
  (``README.md``: without it, ``datasets`` reads only the ``train``, ``validation`` and ``test`` files,
  so :func:`_unlabelled_split` adds the ``unsupervised-*`` ones); or the original ``aclImdb`` archive
  (``train|test/pos|neg/*.txt``);
- a single file in one of those formats: the training data (validation is held out from it).

Files are read by ``datasets`` into its Arrow cache, which is memory-mapped, so a large file is
never held in memory twice; only the texts of the splits a run uses become Python strings
(:mod:`sentiment_cli.data.splits`). A malformed file is a :class:`~sentiment_cli.errors.DataError`
naming the file and line. Columns are not resolved here (:mod:`sentiment_cli.data.columns`).
"""

from __future__ import annotations

import csv
import glob
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..decoding import json_loads
from ..errors import DataError, UsageError
from .labels import LABELS

# File suffix -> (datasets builder, its options).
FILE_TYPES = {".csv": ("csv", {"sep": ","}), ".tsv": ("csv", {"sep": "\t"}), ".json": ("json", {}),
              ".jsonl": ("json", {}), ".parquet": ("parquet", {})}
# A folder's files named by split: file stem -> split.
SPLIT_FILES = {"train": "train", "validation": "validation", "dev": "validation", "test": "test",
               "unsupervised": "unsupervised", "unlabelled": "unsupervised", "unlabeled": "unsupervised"}
# A file of the unlabelled split in a folder ``datasets`` reads by file name (``unsupervised-00000-of-00001``):
# the name, then the end of the stem or a separator or digit (as ``datasets`` matches train-*, test-*).
UNLABELLED_STEM = re.compile(r"(unsupervised|unlabell?ed)($|[-._ 0-9])", re.IGNORECASE)
LABELLED_STEM = re.compile(r"(train|validation|valid|dev|test)($|[-._ 0-9])", re.IGNORECASE)
PARQUET_BATCH_ROWS = 10_000   # rows per Arrow batch of a Parquet file's cache (:func:`_load_file`)
FORMATS = "CSV, TSV, JSON, JSON Lines or Parquet (.csv, .tsv, .json, .jsonl, .parquet)"


@dataclass
class Source:
    """A loaded dataset: its splits (``datasets.Dataset``, Arrow-backed) and where each came from.

    Attributes:
        name: the source as given (for messages).
        splits: split name -> ``datasets.Dataset`` (``train``, ``validation``, ``test``, ``unsupervised``).
        files: split name -> the file it was read from, when a split is one file.
        single_file: the source is one file (its only split is ``train``).
    """

    name: str
    splits: dict[str, Any]
    files: dict[str, str] = field(default_factory=dict)
    single_file: bool = False

    def where(self, split: str) -> str:
        """The file a split came from, or ``source: split 'name'``."""
        return self.files.get(split) or f"{self.name}: split {split!r}"


def absolute_source(source: str) -> str:
    """``source`` as an absolute path when it names an existing local path, else unchanged (a Hub id)."""
    p = Path(source).expanduser()
    return str(p.resolve()) if p.exists() else source


def is_single_file(source: str) -> bool:
    """Whether ``source`` names an existing file (not a folder or a Hub id)."""
    return Path(source).expanduser().is_file()


def _looks_local(source: str) -> bool:
    """A path (existing, or written as one) rather than a Hub id such as ``owner/name``."""
    return source.startswith((".", "/", "~")) or Path(source).expanduser().exists() \
        or Path(source).suffix.lower() in FILE_TYPES


def _review_id(path: Path) -> tuple[int, str]:
    """Sort key of an aclImdb file ``<id>_<rating>.txt``: the numeric id (then the name)."""
    head = path.stem.split("_")[0]
    return (int(head) if head.isdigit() else -1, path.name)


def _load_aclimdb(root: Path) -> dict[str, Any]:
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
    return splits


def _quiet_datasets():
    import datasets

    datasets.disable_progress_bars()
    # CRITICAL, not ERROR: a builder logs "Failed to read file ..." before raising; we report it in one line.
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    return datasets


def _check_file_name(path: Path, shown: str) -> None:
    real = str(path.resolve())   # datasets follows links, so a link's own name does not help
    if glob.escape(real) != real:
        raise DataError(f"cannot load {shown}: its path {real} holds a glob character (*, ? or [), which "
                        f"Hugging Face datasets reads as a file pattern; rename the {'folder' if path.is_dir() else 'file'}")


def _csv_header(path: Path, sep: str, shown: str) -> list[str]:
    """The column names in the first line of a CSV / TSV file (a byte-order mark is dropped)."""
    with open(path, "rb") as fh:
        first = fh.readline(1 << 20)
    try:
        line = first.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DataError(f"{shown}, line 1: not valid UTF-8 text") from None
    try:
        header = next(csv.reader([line.rstrip("\r\n")], delimiter=sep, strict=True), None)
    except csv.Error as exc:
        raise DataError(f"{shown}, line 1: not a valid header ({exc})") from None
    if not header or not any(h.strip() for h in header):
        raise DataError(f"{shown}: empty file (expected a header line naming the columns)")
    return header


def _load_file(path: Path, shown: str):
    """One file as a ``datasets.Dataset``; a malformed file is a :class:`DataError` naming the file and line."""
    datasets = _quiet_datasets()
    suffix = path.suffix.lower()
    if suffix not in FILE_TYPES:
        raise UsageError(f"{shown}: unsupported file type {suffix or '(no suffix)'}; give {FORMATS}")
    _check_file_name(path, shown)
    builder, options = FILE_TYPES[suffix]
    options = dict(options)
    if builder == "csv":
        # Every column as text: labels such as "1" and "pos" are told apart here, not by pandas' guess
        # (which could differ between chunks of a large file); only empty fields are missing values.
        header = _csv_header(path, options["sep"], shown)
        if any(not h.strip() for h in header):
            n = next(i for i, h in enumerate(header, 1) if not h.strip())
            raise DataError(f"{shown}, line 1: column {n} of the header has no name; name every column")
        if len(set(header)) != len(header):
            dup = next(h for h in header if header.count(h) > 1)
            raise DataError(f"{shown}, line 1: column {dup!r} appears twice in the header")
        options.update(features=datasets.Features({h: datasets.Value("string") for h in header}),
                       keep_default_na=False, na_values=[""])
    if builder == "parquet":   # pre-buffering reads far ahead: 0.51 GB more peak memory for 400,000 reviews
        import pyarrow.dataset as pads

        options["fragment_scan_options"] = pads.ParquetFragmentScanOptions(pre_buffer=False)
        # the cache in batches of bounded rows, not one per row group (pyarrow writes up to 1Mi rows in one): a
        # reader of the cache (predict --data, training's texts) then holds one such batch at a time
        options["batch_size"] = PARQUET_BATCH_ROWS
    try:
        ds = datasets.load_dataset(builder, data_files={"train": str(path)}, **options)["train"]
    except Exception as exc:  # datasets wraps pandas / pyarrow errors in several types
        where = _locate_error(path, builder, options.get("sep", ","))
        if where:
            raise DataError(f"{shown}, {where}") from None
        cause = exc.__cause__ or exc
        if "corresponds to no data" in str(cause):   # datasets' words for a file of no rows
            raise DataError(f"{shown}: no rows (only a header, or an empty table); give a file with data") from None
        raise DataError(f"cannot read {shown}: {' '.join(str(cause).split())[:200]}") from None
    return ds


def _locate_error(path: Path, builder: str, sep: str) -> str | None:
    """``"line N: what is wrong"`` for the first problem found reading ``path`` again as a stream, or ``None``.

    Only called after a load failed, to name the line the library's message does not.
    """
    if builder == "parquet":
        return None
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                return f"line {n}: not valid UTF-8 (byte {exc.start + 1})"
    if builder == "csv":
        with open(path, encoding="utf-8-sig", newline="") as fh:
            reader = csv.reader(fh, delimiter=sep, strict=True)
            width, start = None, 1
            try:
                for row in reader:
                    if width is None:
                        width = len(row)
                    elif row and len(row) != width:
                        return f"line {start}: {len(row)} fields, but the header has {width}"
                    start = reader.line_num + 1
            except csv.Error as exc:
                return f"line {start}: malformed ({exc}; an unclosed quote?)"
        return None
    with open(path, encoding="utf-8-sig") as fh:   # JSON: one document, or one object per line
        head = fh.read(4096).lstrip()
        fh.seek(0)
        if head.startswith("["):
            try:
                json_loads(fh.read())
            except json.JSONDecodeError as exc:
                return f"line {exc.lineno}: not valid JSON ({exc.msg})"
            return None
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json_loads(line)
            except json.JSONDecodeError as exc:
                return f"line {n}: not valid JSON ({exc.msg}, column {exc.colno})"
            if not isinstance(obj, dict):
                return f"line {n}: not a JSON object ({type(obj).__name__}); expected one object per line"
    return None


def _split_files(root: Path) -> dict[str, Path]:
    """Files directly in ``root`` named by split (``train.csv``, ``dev.jsonl``...), by split."""
    found: dict[str, list[Path]] = {}
    for f in sorted(root.iterdir()):
        split = SPLIT_FILES.get(f.stem.lower())
        if split and f.is_file() and f.suffix.lower() in FILE_TYPES:
            found.setdefault(split, []).append(f)
    for split, files in found.items():
        if len(files) > 1:
            raise DataError(f"{root}: {len(files)} files for split {split!r} ({', '.join(f.name for f in files)}); "
                            "keep one")
    return {split: files[0] for split, files in found.items()}


def load_source(source: str) -> Source:
    """Load a source (see the module docstring) without reading its texts into Python.

    Raises:
        DataError: the path does not exist, a file is malformed (the message names the file and line),
            the folder holds nothing loadable, or the Hub cannot be reached (the message names
            ``--data PATH``).
        UsageError: a single file of an unsupported type.
    """
    datasets = _quiet_datasets()
    if _looks_local(source):
        root = Path(source).expanduser()
        if not root.exists():
            raise DataError(f"data {'file' if root.suffix.lower() in FILE_TYPES else 'folder'} {source} does not exist")
        if root.is_file():
            return Source(source, {"train": _load_file(root, source)}, {"train": source}, single_file=True)
        if (root / "train" / "pos").is_dir() or (root / "test" / "pos").is_dir():
            return Source(source, _load_aclimdb(root))
        files = _split_files(root)
        # an unlabelled file alone beside train-*.parquet etc.: datasets reads those, _unlabelled_split adds it
        if files and (set(files) != {"unsupervised"}
                      or not any(LABELLED_STEM.match(f.stem) for f in _data_files(root))):
            shown = {split: str(Path(source) / f.name) for split, f in files.items()}
            return Source(source, {split: _load_file(f, shown[split]) for split, f in files.items()}, shown)
        _check_file_name(root, source)
        try:
            ds = datasets.load_dataset(str(root))
        except Exception as exc:  # datasets raises many types for unreadable folders
            raise DataError(f"cannot load a dataset from {source}: {str(exc).splitlines()[0][:200]} "
                            f"(a folder needs files named by split, train.csv etc., in {FORMATS}, "
                            "or the Hub layout)") from None
    else:
        try:
            ds = datasets.load_dataset(source)
        except (ConnectionError, OSError) as exc:
            raise DataError(
                f"cannot reach the Hugging Face Hub to download {source!r} ({type(exc).__name__}); "
                "work offline with a local copy: --data PATH (a folder or a file, e.g. --data ../shared/data/imdb)") from None
        except Exception as exc:
            raise DataError(f"cannot load dataset {source!r}: {str(exc).splitlines()[0][:200]}") from None
    if not isinstance(ds, datasets.DatasetDict) or not len(ds):
        raise DataError(f"no data found in {source}")
    splits = dict(ds)
    if _looks_local(source) and "unsupervised" not in splits:
        splits.update(_unlabelled_split(Path(source).expanduser()))
    return Source(source, splits)


def _unlabelled_split(root: Path) -> dict[str, Any]:
    """``{"unsupervised": dataset}`` from the files named like an unlabelled split anywhere in ``root``
    (:data:`UNLABELLED_STEM`), which ``datasets`` leaves out of a folder without a dataset card; ``{}``
    when there are none, or when they are the folder's only data files (``datasets`` read them as ``train``).

    Raises:
        DataError: such a file is malformed, or they are of more than one format.
    """
    datasets = _quiet_datasets()
    data = _data_files(root)
    files = [f for f in data if UNLABELLED_STEM.match(f.stem)]
    if not files or len(files) == len(data):
        return {}
    if len({f.suffix.lower() for f in files}) > 1:
        raise DataError(f"{root}: the unlabelled split's files are of more than one format "
                        f"({', '.join(f.name for f in files)}); keep one")
    parts = [_load_file(f, str(f)) for f in files]
    return {"unsupervised": parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)}


def _data_files(root: Path) -> list[Path]:
    """The files of a readable format anywhere in ``root`` (not in hidden folders), sorted."""
    return [f for f in sorted(root.rglob("*")) if f.is_file() and f.suffix.lower() in FILE_TYPES
            and not any(part.startswith(".") for part in f.relative_to(root).parts)]


def load_dataset_dict(source: str):
    """The source's splits as a ``datasets.DatasetDict``, as loaded (columns not yet resolved).

    Raises:
        DataError, UsageError: as :func:`load_source`.
    """
    import datasets

    return datasets.DatasetDict(load_source(source).splits)
