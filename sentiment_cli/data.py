"""Labelled text through Hugging Face ``datasets``: sources, columns, the label set, splits and the validation hold-out.

A source (``[data] source``, ``--data``) is one of:

- a Hub dataset id (default ``stanfordnlp/imdb``);
- a folder: files named by split (``train``, ``validation`` or ``dev``, ``test``, and optionally
  ``unsupervised``) in CSV, TSV, JSON, JSON Lines or Parquet; the Hub layout
  (``plain_text/train-*.parquet``, as in ``../shared/data/imdb``); or the original ``aclImdb``
  archive (``train|test/pos|neg/*.txt``);
- a single file in one of those formats: the training data (validation is held out from it).

Files are read by ``datasets`` into its Arrow cache, which is memory-mapped, so a large file is
never held in memory twice; only the texts of the splits a run uses become Python strings.

Columns: ``[data] text_column`` / ``label_column``, or when empty the one column named like
:data:`TEXT_COLUMNS` / :data:`LABEL_COLUMNS` (case-insensitive). Labels are integers or strings
(or a ``ClassLabel``); the label set comes from the training split (the ``ClassLabel``'s names, else
the sorted distinct values) unless ``[data] labels`` fixes names and order. A label's id is its
position in the set. IMDB's ``ClassLabel`` names ``neg``/``pos`` are reported as
``negative``/``positive``, its names before label sets became configurable.
"""

from __future__ import annotations

import csv
import glob
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ConfigError, DataError, UsageError

SPLITS = ("train", "validation", "test")
LABELS = ("negative", "positive")   # IMDB's label names, by id; also those of checkpoints that predate label sets
NUM_LABELS = len(LABELS)
TEXT_COLUMNS = ("text", "review", "sentence", "content")
LABEL_COLUMNS = ("label", "sentiment", "rating", "stars", "class")
# Per-class metrics sit beside these averages in `eval --json` (precision: {"neg": .., "macro": ..}).
RESERVED_LABELS = ("macro", "weighted")
# A dataset's ClassLabel names -> the names this tool reports: IMDB keeps its output contract.
CLASSLABEL_ALIASES = {("neg", "pos"): LABELS}
# File suffix -> (datasets builder, its options).
FILE_TYPES = {".csv": ("csv", {"sep": ","}), ".tsv": ("csv", {"sep": "\t"}), ".json": ("json", {}),
              ".jsonl": ("json", {}), ".parquet": ("parquet", {})}
# A folder's files named by split: file stem -> split.
SPLIT_FILES = {"train": "train", "validation": "validation", "dev": "validation", "test": "test",
               "unsupervised": "unsupervised"}
FORMATS = "CSV, TSV, JSON, JSON Lines or Parquet (.csv, .tsv, .json, .jsonl, .parquet)"


@dataclass
class Split:
    """One labelled split: ``texts[i]`` has label id ``labels[i]``, whose name is ``label_names[labels[i]]``.

    Attributes:
        where: where the rows came from, for messages and the model card (a file, or ``source: split``).
    """

    name: str
    texts: list[str]
    labels: list[int]
    label_names: tuple[str, ...] = LABELS
    where: str = ""

    def __len__(self) -> int:
        return len(self.texts)

    def class_counts(self) -> dict[str, int]:
        """Examples per class, ``{name: count}`` in label order (classes without examples count 0)."""
        counts = np.bincount(np.asarray(self.labels, dtype=np.int64), minlength=len(self.label_names))
        return {name: int(c) for name, c in zip(self.label_names, counts)}

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


# ----------------------------------------------------------------------------- loading sources

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
        if len(set(header)) != len(header):
            dup = next(h for h in header if header.count(h) > 1)
            raise DataError(f"{shown}, line 1: column {dup!r} appears twice in the header")
        options.update(features=datasets.Features({h: datasets.Value("string") for h in header}),
                       keep_default_na=False, na_values=[""])
    try:
        ds = datasets.load_dataset(builder, data_files={"train": str(path)}, **options)["train"]
    except Exception as exc:  # datasets wraps pandas / pyarrow errors in several types
        where = _locate_error(path, builder, options.get("sep", ","))
        if where:
            raise DataError(f"{shown}, {where}") from None
        cause = exc.__cause__ or exc
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
                json.load(fh)
            except json.JSONDecodeError as exc:
                return f"line {exc.lineno}: not valid JSON ({exc.msg})"
            return None
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
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
        if files:
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
    return Source(source, dict(ds))


def load_dataset_dict(source: str):
    """The source's splits as a ``datasets.DatasetDict``, as loaded (columns not yet resolved).

    Raises:
        DataError, UsageError: as :func:`load_source`.
    """
    import datasets

    return datasets.DatasetDict(load_source(source).splits)


# ----------------------------------------------------------------------------- columns

def resolve_column(columns: Sequence[str], wanted: str, usual: Sequence[str], role: str, where: str) -> str:
    """The column holding the texts (``role="text"``) or labels (``"label"``) among ``columns``.

    ``wanted`` (from ``[data] text_column`` / ``label_column``) must be there; when it is empty, the
    one column whose name is one of ``usual`` (case-insensitive) is taken.

    Raises:
        UsageError: ``wanted`` is not a column.
        DataError: no column, or several, have a usual name; the message lists the columns found.
    """
    flag = f"--{role}-column NAME ([data] {role}_column)"
    found = ", ".join(columns) or "none"
    if wanted:
        if wanted not in columns:
            raise UsageError(f"{where}: no column {wanted!r} ({flag.replace('NAME', wanted)}); columns: {found}")
        return wanted
    hits = [c for c in columns if c.lower() in usual]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise DataError(f"{where}: no {role} column (looked for {', '.join(usual)}); name it with {flag}; "
                        f"columns: {found}")
    raise DataError(f"{where}: {len(hits)} columns could hold the {role}s ({', '.join(hits)}); choose one with "
                    f"{flag}; columns: {found}")


def _texts_checked(ds, column: str, where: str):
    """Check that a text column holds strings, none null or blank; return it as a ``datasets.Dataset`` column.

    Raises:
        DataError: naming ``where`` and the first bad row.
    """
    import pyarrow.compute as pc

    feature = ds.features[column]
    dtype = getattr(feature, "dtype", None)
    if dtype not in ("string", "large_string"):
        raise DataError(f"{where}: column {column!r} holds {dtype or feature}, not text")
    col = ds.data.column(column)   # Arrow, memory-mapped: checked without making Python strings
    if col.null_count:
        row = pc.indices_nonzero(pc.is_null(col))[0].as_py()
        raise DataError(f"{where}, row {row + 1}: no text (column {column!r} is empty; "
                        f"{col.null_count} such row{'s' if col.null_count > 1 else ''})")
    offset = 0
    for chunk in col.chunks:   # chunk by chunk: bounded extra memory for any file size
        blank = pc.or_(pc.equal(pc.utf8_length(chunk), 0), pc.utf8_is_space(chunk))
        if pc.any(blank).as_py():
            row = offset + pc.indices_nonzero(blank)[0].as_py()
            raise DataError(f"{where}, row {row + 1}: empty text (column {column!r} holds only whitespace)")
        offset += len(chunk)


# ----------------------------------------------------------------------------- labels

_INTEGER = r"^\s*[+-]?[0-9]+\s*$"


@dataclass
class _RawLabels:
    """A split's labels as text keys (``None`` = missing), and what they were: ``classlabel``, ``int``, ``str``, ``bool``."""

    keys: Any            # pyarrow string array, one per row
    kind: str
    names: tuple[str, ...] = ()   # ClassLabel names (aliased), when kind is classlabel


def _raw_labels(ds, column: str, where: str) -> _RawLabels:
    """Read a label column as text keys, one per row (Arrow compute: no Python objects per row).

    Integers and integer strings (``"4"``, as every CSV field is text) both give ``"4"``, so a CSV
    and a JSON file of the same labels agree.

    Raises:
        DataError: labels that are fractional numbers, lists, or of mixed types (naming the first row
            whose type differs from the first row's).
    """
    import datasets
    import pyarrow as pa
    import pyarrow.compute as pc

    feature = ds.features[column]
    col = ds.data.column(column).combine_chunks()
    if isinstance(feature, datasets.ClassLabel):
        names = tuple(CLASSLABEL_ALIASES.get(tuple(feature.names), feature.names))
        ids = pc.if_else(pc.less(col, 0), pa.scalar(None, col.type), col)   # -1: unlabelled (as on the Hub)
        return _RawLabels(pc.take(pa.array(names, pa.string()), ids), "classlabel", names)
    dtype = getattr(feature, "dtype", None)
    if dtype in ("string", "large_string"):
        col = col.cast(pa.string())
        valid = pc.drop_null(col)
        integer = pc.match_substring_regex(valid, _INTEGER)
        n_int = pc.sum(integer).as_py() or 0
        if n_int == 0:
            return _RawLabels(col, "str")
        if n_int == len(valid):
            as_int = pc.cast(pc.utf8_trim_whitespace(col), pa.int64())
            return _RawLabels(pc.cast(as_int, pa.string()), "int")
        kinds = pc.match_substring_regex(col, _INTEGER)
        _mixed(where, column, [("an integer" if k else "a string", v) for k, v in zip(kinds.to_pylist(), col.to_pylist())])
    if dtype and (dtype.startswith("int") or dtype.startswith("uint")):
        return _RawLabels(pc.cast(col, pa.string()), "int")
    if dtype == "bool":
        return _RawLabels(pc.if_else(col, "true", "false"), "bool")
    if dtype and dtype.startswith("float"):
        valid = pc.drop_null(col)
        if len(valid) and not pc.all(pc.equal(pc.floor(valid), valid)).as_py():
            bad = next(v for v in valid.to_pylist() if v != int(v))
            raise DataError(f"{where}: column {column!r} holds fractional numbers such as {bad}; labels must be "
                            "integers or strings (classes, not scores)")
        return _RawLabels(pc.cast(pc.cast(col, pa.int64()), pa.string()), "int")
    if type(feature).__name__ == "Json":   # JSON values of several types in one column
        values = [None if v is None else json.loads(v) for v in col.cast(pa.string()).to_pylist()]
        _mixed(where, column, [(_json_kind(v), v) for v in values])
    raise DataError(f"{where}: column {column!r} holds {feature}; labels must be integers or strings")


def _json_kind(value: Any) -> str:
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(
        type(value), "a list or object")


def _mixed(where: str, column: str, kinds: list[tuple[str, Any]]) -> None:
    """Raise :class:`DataError` naming the first row whose kind differs from the first labelled row's."""
    first = next(((i, k, v) for i, (k, v) in enumerate(kinds) if v is not None), None)
    if first is not None:
        i0, k0, v0 = first
        for i, (k, v) in enumerate(kinds):
            if v is not None and k != k0:
                raise DataError(f"{where}: mixed label types in column {column!r}: row {i0 + 1} holds {k0} "
                                f"({v0!r}), row {i + 1} {k} ({v!r}); use one type for all labels")
    raise DataError(f"{where}: column {column!r}: labels must be integers or strings")


def label_set(raw: _RawLabels, configured: Sequence[str], where: str) -> tuple[str, ...]:
    """The label names, by id: ``configured`` ([data] labels) when given, else the ClassLabel names,
    else the sorted distinct values (integers by value).

    Raises:
        ConfigError: ``configured`` lacks a label the data has, or lists one it does not have.
        DataError: fewer than two classes, or a label named like an average (``macro``, ``weighted``).
    """
    import pyarrow.compute as pc

    present = [v for v in pc.unique(raw.keys).to_pylist() if v is not None]
    if raw.kind == "classlabel":
        found = raw.names
    elif raw.kind == "int":
        found = tuple(sorted(present, key=int))
    else:
        found = tuple(sorted(present))
    if configured:
        configured = tuple(configured)
        missing = [v for v in found if v not in configured and (raw.kind != "classlabel" or v in present)]
        extra = [v for v in configured if v not in found]
        if missing or extra:
            what = "; ".join(x for x in (f"it does not list {', '.join(map(repr, missing))}" if missing else "",
                                        f"the data has no {', '.join(map(repr, extra))}" if extra else "") if x)
            raise ConfigError(f"[data] labels = {list(configured)} disagrees with {where}: {what} "
                              f"(labels in the data: {', '.join(found)})")
        found = configured
    if len(set(present)) < 2:
        only = f" ({present[0]!r})" if present else ""
        raise DataError(f"{where}: only one class{only} in the training data; a classifier needs at least two")
    reserved = [n for n in found if n in RESERVED_LABELS]
    if reserved:
        raise DataError(f"{where}: a label named {reserved[0]!r} would clash with the {reserved[0]} average in "
                        "the metrics; rename it")
    return tuple(found)


def _label_ids(raw: _RawLabels, names: Sequence[str], where: str, column: str, training: bool) -> np.ndarray:
    """Label ids (``(rows,)`` int64) of ``raw`` in the label set ``names``.

    Raises:
        DataError: a row without a label, or with a label outside ``names`` (naming ``where`` and the row).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = raw.keys
    if keys.null_count:
        row = pc.indices_nonzero(pc.is_null(keys))[0].as_py()
        raise DataError(f"{where}, row {row + 1}: no label (column {column!r} is empty; "
                        f"{keys.null_count} such row{'s' if keys.null_count > 1 else ''})")
    ids = pc.index_in(keys, value_set=pa.array(list(names), pa.string()))
    if ids.null_count:
        row = pc.indices_nonzero(pc.is_null(ids))[0].as_py()
        value = keys[row].as_py()
        if training:
            raise ConfigError(f"[data] labels does not list {value!r}, the label of {where}, row {row + 1} "
                              f"(listed: {', '.join(names)})")
        raise DataError(f"{where}, row {row + 1}: label {value!r} is not one of the {len(names)} classes "
                        f"seen in training ({', '.join(names)})")
    if blank := [n for n in names if not n.strip()]:
        raise DataError(f"{where}: a label is empty or only whitespace ({blank[0]!r})")
    return ids.to_numpy(zero_copy_only=False).astype(np.int64)


# ----------------------------------------------------------------------------- splits

@dataclass
class _Labelled:
    """One split with its columns resolved and checked: the Arrow dataset and the label ids."""

    dataset: Any
    text_column: str
    ids: np.ndarray
    where: str


def _labelled(src: Source, split: str, text_column: str, label_column: str, names: Sequence[str] | None,
              configured: Sequence[str] = ()) -> tuple[_Labelled, tuple[str, ...]]:
    """Resolve and check ``split``'s columns and labels; ``(labelled, label names)``.

    ``names`` is the label set to map to (a trained model's); ``None`` derives it from this split
    (training), with ``configured`` ([data] labels) fixing names and order.
    """
    ds = src.splits[split]
    where = src.where(split)
    if len(ds) == 0:
        raise DataError(f"{where}: no rows")
    text = resolve_column(ds.column_names, text_column, TEXT_COLUMNS, "text", where)
    label = resolve_column(ds.column_names, label_column, LABEL_COLUMNS, "label", where)
    if text == label:
        raise UsageError(f"{where}: column {text!r} cannot hold both the texts and the labels")
    _texts_checked(ds, text, where)
    raw = _raw_labels(ds, label, where)
    training = names is None
    if training:
        if raw.keys.null_count:   # name the row before computing a label set from the rest
            _label_ids(raw, (), where, label, False)
        names = label_set(raw, configured, where)
    ids = _label_ids(raw, names, where, label, training and bool(configured))
    return _Labelled(ds.select_columns([text]), text, ids, where), tuple(names)


def _split(lab: _Labelled, name: str, names: tuple[str, ...], rows: np.ndarray | None = None) -> Split:
    """Materialise the texts of ``rows`` (all rows when ``None``), in that order."""
    part = lab.dataset if rows is None else lab.dataset.select(rows)
    ids = lab.ids if rows is None else lab.ids[np.asarray(rows, dtype=np.int64)]
    return Split(name, list(part[lab.text_column]), ids.tolist(), names, lab.where)


def _need(src: Source, split: str) -> None:
    if split not in src.splits:
        raise DataError(f"{src.name} has no {split!r} split (it has: {', '.join(src.splits)})")


def _hold_out(ids: np.ndarray, names: Sequence[str], validation_fraction: float, seed: int,
              validation_split: str, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Rows of train and of validation, each in the order a run reads them.

    ``validation_fraction`` 0: all rows shuffled with ``seed``, none for validation. ``blocks``: see
    :func:`block_validation_indices`. ``random``: a stratified draw (``datasets``' ``train_test_split``
    with ``seed``, as runs before label sets drew it: the same rows for the same labels).
    """
    import datasets

    n = len(ids)
    if validation_fraction == 0:
        return np.random.default_rng(seed).permutation(n), np.zeros(0, dtype=np.int64)
    if validation_split == "blocks":
        try:
            held = block_validation_indices(ids, validation_fraction, seed)
        except ValueError as exc:
            raise DataError(f"{where}: cannot hold out validation: {exc}") from None
        keep = np.zeros(n, dtype=bool)
        keep[held] = True
        return (np.random.default_rng(seed).permutation(np.flatnonzero(~keep)),
                np.random.default_rng(seed).permutation(np.flatnonzero(keep)))
    # Only the labels and row numbers go through datasets: the draw depends on nothing else.
    rows = datasets.Dataset.from_dict(
        {"label": ids, "row": np.arange(n, dtype=np.int64)},
        features=datasets.Features({"label": datasets.ClassLabel(names=list(names)), "row": datasets.Value("int64")}))
    try:
        parts = rows.train_test_split(test_size=validation_fraction, stratify_by_column="label", seed=seed,
                                      shuffle=True)
    except ValueError as exc:
        raise DataError(f"{where}: cannot hold out validation ({validation_fraction:g} of the rows, "
                        f"stratified by label): {exc}") from None
    return np.asarray(parts["train"]["row"], dtype=np.int64), np.asarray(parts["test"]["row"], dtype=np.int64)


@dataclass(frozen=True)
class DataSpec:
    """How to read a source's splits: the ``[data]`` keys that matter, and the run's seed."""

    source: str
    validation_fraction: float = 0.1
    seed: int = 1234
    validation_split: str = "random"
    text_column: str = ""
    label_column: str = ""
    labels: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config, source: str | None = None) -> "DataSpec":
        """The spec of a run :class:`~sentiment_cli.config.Config` (``source`` overrides ``[data] source``)."""
        d = config.data
        return cls(source or d.source, d.validation_fraction, config.training.seed, d.validation_split,
                   d.text_column, d.label_column, tuple(d.labels))


def _train_and_validation(src: Source, spec: DataSpec, names: Sequence[str] | None
                          ) -> tuple[_Labelled, tuple[str, ...], np.ndarray, _Labelled | None, np.ndarray]:
    """The training split's rows for train and validation, or the source's own validation split."""
    _need(src, "train")
    train, names = _labelled(src, "train", spec.text_column, spec.label_column, names, spec.labels)
    if "validation" in src.splits and spec.validation_fraction > 0:   # the source's own (dev) split
        val, _ = _labelled(src, "validation", spec.text_column, spec.label_column, names)
        return train, names, np.random.default_rng(spec.seed).permutation(len(train.ids)), val, np.arange(len(val.ids))
    train_rows, val_rows = _hold_out(train.ids, names, spec.validation_fraction, spec.seed, spec.validation_split,
                                     train.where)
    return train, names, train_rows, None, val_rows


def load_train_validation(source: str | DataSpec, validation_fraction: float = 0.1, seed: int = 1234,
                          validation_split: str = "random") -> tuple[Split, Split]:
    """``(train, validation)`` of a source, with the label set taken from its training split.

    Validation is the source's own ``validation`` (or ``dev``) split when it has one, with all of
    ``train`` (shuffled with ``seed``) for training; otherwise ``validation_fraction`` of ``train``
    held out as :func:`load_split` describes. With ``validation_fraction`` 0, validation is empty
    and train is all of ``train``.

    Args:
        source: a :class:`DataSpec`, or a source (then the other arguments apply, columns are
            found by name and the label set comes from the data).

    Raises:
        DataError: the source cannot be loaded or its data is unusable (missing or ambiguous
            column, empty text or label, one class, mixed label types, an unseen class in validation).
        UsageError: a named column is missing.
        ConfigError: ``[data] labels`` disagrees with the training data.
    """
    spec = source if isinstance(source, DataSpec) else DataSpec(source, validation_fraction, seed, validation_split)
    src = load_source(spec.source)
    train, names, train_rows, val, val_rows = _train_and_validation(src, spec, None)
    return (_split(train, "train", names, train_rows),
            _split(val if val is not None else train, "validation", names, val_rows))


def load_split(source: str | DataSpec, name: str, validation_fraction: float = 0.1, seed: int = 1234,
               validation_split: str = "random", *, label_names: Sequence[str] | None = None) -> Split:
    """One split as texts and label ids.

    ``train`` and ``validation`` are drawn as in :func:`load_train_validation`. ``test`` is the
    whole ``test`` split; a single-file source has none, so its ``test`` is the whole file (to
    score a file: ``sentiment eval --data FILE``).

    Args:
        source: a :class:`DataSpec`, or a source (see :func:`load_train_validation`).
        name: ``train``, ``validation`` or ``test``.
        label_names: a trained model's label set: labels are mapped to it, and one it lacks is an
            error. ``None``: the label set comes from the training split.

    Raises:
        UsageError: ``name`` is not train, validation or test, or it is validation and
            ``validation_fraction`` is 0 (and the source has no validation split).
        DataError: as :func:`load_train_validation`; also a missing split, or a label the model never saw.
    """
    spec = source if isinstance(source, DataSpec) else DataSpec(source, validation_fraction, seed, validation_split)
    if name not in SPLITS:
        raise UsageError(f"unknown split {name!r}; choose one of {', '.join(SPLITS)}")
    if name == "validation" and spec.validation_fraction == 0:
        raise UsageError("no validation split: [data] validation_fraction is 0 (the run trained on all of train)")
    src = load_source(spec.source)
    names = tuple(label_names) if label_names is not None else None
    if name == "test":
        split = "train" if src.single_file else "test"
        _need(src, split)
        if names is None:   # the label set of training, from the training split
            _need(src, "train")
            _, names = _labelled(src, "train", spec.text_column, spec.label_column, None, spec.labels)
        lab, _ = _labelled(src, split, spec.text_column, spec.label_column, names)
        return _split(lab, "test", names)
    train, names, train_rows, val, val_rows = _train_and_validation(src, spec, names)
    if name == "train":
        return _split(train, "train", names, train_rows)
    return _split(val if val is not None else train, "validation", names, val_rows)


def load_pretraining_texts(source: str | DataSpec, splits: str, validation_fraction: float = 0.1, seed: int = 1234,
                           validation_split: str = "random") -> list[str]:
    """Unlabelled texts for pretraining (``sentiment pretrain``), shuffled with ``seed``.

    ``splits`` is ``unsupervised`` (e.g. IMDB's 50,000 unlabelled reviews), ``train`` (the training
    part of ``train``: validation, drawn as by :func:`load_split`, is left out so it stays unseen;
    all of it when the fraction is 0) or ``unsupervised+train``. The ``test`` split is never read.

    Raises:
        DataError: see :func:`load_source`; also no ``unsupervised`` split when one is asked for.
    """
    spec = source if isinstance(source, DataSpec) else DataSpec(source, validation_fraction, seed, validation_split)
    src = load_source(spec.source)
    parts = splits.split("+")
    texts: list[str] = []
    if "unsupervised" in parts:
        if "unsupervised" not in src.splits:
            raise DataError(f"{spec.source} has no 'unsupervised' split (it has: {', '.join(src.splits)}); "
                            "pass --splits train (or set [pretrain] splits = \"train\")")
        ds = src.splits["unsupervised"]
        column = resolve_column(ds.column_names, spec.text_column, TEXT_COLUMNS, "text", src.where("unsupervised"))
        texts += list(ds[column])
    if "train" in parts:
        train, names, train_rows, _, _ = _train_and_validation(src, spec, None)
        texts += _split(train, "train", names, train_rows).texts
    order = np.random.default_rng(spec.seed).permutation(len(texts))
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
