"""Score a dataset on Ray: ``sentiment predict --data DIR --output DIR --ray [ADDRESS]``.

The pipeline is Ray Data's: ``read_parquet`` / ``read_csv`` / ``read_json`` (by the files' suffix) ->
``map_batches`` over :class:`_Scorer`, a callable class that loads the checkpoint once per worker (an actor)
and scores each Arrow batch with :func:`~.table.score_table`, the function the single-process ``predict
--data`` calls, so both give the same columns -> ``write_parquet`` (a folder of Parquet files).

Each worker is one core: one torch (or ONNX Runtime) thread, ``num_cpus`` of Ray's resources. The workers
together are asked for at most all but one of the cluster's CPUs (on a 2-CPU machine, 2 workers ask 0.5
each), so that Ray Data's file listing, read and write tasks, which ask a whole CPU each, can always be
scheduled: with the actors holding every CPU, Ray 2.60's Parquet reader waits for ever. The logical CPUs are
bookkeeping; each worker still runs on a core of its own.

Rows keep their input order (``DataContext.execution_options.preserve_order``): the output files, sorted
by name, hold the rows in the order of the input files sorted by name.

Ray is an optional extra (``pip install 'sentiment-cli[ray]'``), imported only here and only when called.
"""

from __future__ import annotations

import logging
import re
import shutil
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..data.batches import choose_split
from ..data.columns import find_text_column
from ..data.sources import FILE_TYPES, FORMATS, SPLIT_FILES
from ..errors import DataError, SentimentError, UsageError
from .dataset import BATCH_ROWS, EXPLAIN_BATCH_ROWS
from .table import score_table

RAY_MISSING = "--ray needs Ray: pip install 'sentiment-cli[ray]'"


def predict_with_ray(checkpoint: str | Path, data: str | Path, output: str | Path, *, split: str | None = None,
                     text_column: str = "", explain: bool = False, address: str | None = None,
                     workers: int | None = None, batch_rows: int | None = None, batch_size: int | None = None,
                     onnx: bool = False, force: bool = False, progress: bool = True) -> dict[str, Any]:
    """Score every row of ``data`` on Ray and write them, with the prediction's columns, to the folder ``output``.

    Args:
        checkpoint: a checkpoint folder (with ``onnx``: a ``.onnx`` file or a folder holding ``model.onnx``),
            at the same path on every node of the cluster.
        data: a file or a folder of files (searched recursively; names starting with ``.`` or ``_`` skipped),
            all CSV, TSV, JSON, JSON Lines or Parquet; a local path or a URI (``s3://...``) the workers can read.
        split: read only the files of this split (``train``, ``validation`` or ``dev``, ``test``,
            ``unsupervised``...: :func:`find_input`); needed when the files name several (the Hub layout).
        output: the folder of Parquet files to write (local path or URI).
        text_column: the column of texts; empty: the one named like a text column (``text``, ``review``...).
        explain: add ``top_tokens``.
        address: the Ray cluster: ``None`` for Ray's default (``RAY_ADDRESS``, else a cluster started with
            ``ray start`` on this machine, else a new local one with every core), ``"auto"``, ``"ray://head:10001"``.
            Ignored when Ray is already initialised in this process (it is then left running).
        workers: scoring workers (one core each); default: one per CPU of the cluster.
        batch_rows: rows per batch a worker scores; default 1,024 (256 with ``explain``), as ``predict --data``.
        batch_size: texts per forward pass (``--batch-size``); default: the checkpoint's ``eval_batch_size``.
        onnx: run the exported model on ONNX Runtime in each worker.
        force: replace an existing, non-empty ``output`` folder.
        progress: show Ray Data's progress bars (rows/s) on stderr.

    Returns:
        ``{"rows", "seconds", "rows_per_second", "workers", "output"}``: the rows written and the wall time of
        the read -> score -> write pipeline (workers' start-up and checkpoint load included; Ray's own
        start-up not).

    Raises:
        UsageError: Ray is not installed; a bad ``workers``, ``batch_rows``, ``batch_size`` or ``text_column``;
            ``output`` is a file, overlaps ``data``, or is a non-empty folder without ``force``; mixed or
            unsupported files; files of several splits and no ``split``; no cluster at ``address``.
        DataError: no data files (of ``split``); no text column (or several); a missing or blank text (naming
            its batch).
        CheckpointError: the checkpoint cannot be loaded, or gives non-finite logits.
    """
    ray = import_ray()
    if workers is not None and workers < 1:
        raise UsageError(f"--workers must be at least 1, got {workers}")
    for name, value in (("batch_rows", batch_rows), ("--batch-size", batch_size)):
        if value is not None and value < 1:
            raise UsageError(f"{name} must be at least 1, got {value}")
    source = find_input(data, split)
    target = OutputFolder.check(output, force=force, data=source, inputs=[("the checkpoint", checkpoint)])
    _check_checkpoint(checkpoint, onnx)
    started = _connect(ray, address)
    try:
        with _data_context(ray, progress):
            rows = batch_rows or (EXPLAIN_BATCH_ROWS if explain else BATCH_ROWS)
            settings = {"checkpoint": str(Path(checkpoint).expanduser().resolve()), "explain": explain,
                        "onnx": onnx, "batch_size": batch_size, "where": f"--data {source.shown}"}
            return _run(ray, source, target, settings, text_column=text_column, workers=workers, batch_rows=rows)
    finally:
        if started:
            ray.shutdown()


def import_ray():
    """The ``ray`` module with ``ray.data``.

    Raises:
        UsageError: Ray (with its Data library) is not installed: :data:`RAY_MISSING`.
    """
    try:
        import ray
        import ray.data  # noqa: F401  (the extra ``ray[data]``: pandas, pyarrow, fsspec)
    except ImportError:
        raise UsageError(RAY_MISSING) from None
    return ray


@dataclass(frozen=True)
class Input:
    """The data files to read: ``paths`` on ``filesystem`` (a ``pyarrow.fs.FileSystem``), all of one format
    (``suffix``, a key of :data:`~sentiment_cli.data.sources.FILE_TYPES`); ``shown`` names them in messages;
    ``local`` is the resolved path for a local input, else ``None``."""

    shown: str
    paths: list[str]
    suffix: str
    filesystem: Any
    local: Path | None


def _filesystem(path: str | Path) -> tuple[Any, str, Path | None]:
    """``(filesystem, path on it, local path or None)`` for a local path or a URI (``s3://bucket/key``)."""
    import pyarrow as pa
    import pyarrow.fs as pafs

    text = str(path)
    if "://" in text and not text.startswith("file://"):
        try:
            fs, inner = pafs.FileSystem.from_uri(text)
        except (pa.ArrowException, ValueError) as exc:
            raise UsageError(f"{text}: not a path or URI pyarrow can open ({' '.join(str(exc).split())[:200]})") \
                from None
        return fs, inner, None
    local = Path(text.removeprefix("file://")).expanduser().resolve()
    return pafs.LocalFileSystem(), str(local), local


def find_input(data: str | Path, split: str | None = None) -> Input:
    """The data files of ``data`` (a file, or a folder searched recursively), of the split ``split`` if given.

    A file's split is the start of its name, as ``train`` and ``predict --data`` read a folder: ``train``,
    ``validation`` (``dev``, ``valid``), ``test``, ``unsupervised`` (``unlabelled``), followed by the end of the
    name, a separator or a digit (``test-00000-of-00001.parquet`` in the Hub layout); other names belong to no
    split.

    Raises:
        DataError: ``data`` does not exist, a folder holds no data file, or none of ``split``.
        UsageError: an unsupported file type, files of several formats, or of several splits and no ``split``.
    """
    import pyarrow.fs as pafs

    shown = str(data)
    fs, root, local = _filesystem(data)
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        raise DataError(f"--data {shown}: no such file or folder")
    if info.type == pafs.FileType.File:
        found = [info]
    else:
        found = [f for f in fs.get_file_info(pafs.FileSelector(root, recursive=True))
                 if f.type == pafs.FileType.File and not _hidden(f.path[len(root):])]
        found = [f for f in found if Path(f.path).suffix.lower() in FILE_TYPES]
        if not found:
            raise DataError(f"--data {shown}: no data files in the folder (looked for {FORMATS})")
        found = _of_split(found, split, shown)
    suffixes = sorted({Path(f.path).suffix.lower() for f in found})
    if suffixes[0] not in FILE_TYPES:
        raise UsageError(f"--data {shown}: unsupported file type {suffixes[0] or '(no suffix)'}; give {FORMATS}")
    kinds = {FILE_TYPES[s][0] if s != ".tsv" else "tsv" for s in suffixes}
    if len(kinds) > 1:
        raise UsageError(f"--data {shown}: files of several formats ({', '.join(suffixes)}); --ray reads one "
                         "format per run: give a folder of one kind")
    return Input(shown, sorted(f.path for f in found), suffixes[0], fs, local)


SPLIT_STEM = re.compile(r"^(train|validation|valid|dev|test|unsupervised|unlabell?ed)($|[-._ 0-9])", re.IGNORECASE)


def _of_split(found: list, split: str | None, shown: str) -> list:
    """The files (``pyarrow.fs.FileInfo``) of ``split``; all of them when ``split`` is ``None`` and they name at
    most one split (see :func:`find_input`).

    Raises:
        DataError: no file of ``split``.
        UsageError: files of several splits and no ``split``.
    """
    def split_of(info) -> str | None:
        m = SPLIT_STEM.match(Path(info.path).stem)
        name = m.group(1).lower() if m else None
        return {"valid": "validation", "unlabeled": "unsupervised"}.get(name, SPLIT_FILES.get(name, name))

    wanted = choose_split({s for s in map(split_of, found) if s}, split, shown)   # predict --data's rule
    return found if split is None else [f for f in found if split_of(f) == wanted]


def _hidden(relative: str) -> bool:
    """Whether a path inside the input folder has a part named ``.x`` or ``_x`` (``_SUCCESS``, ``.crc``)."""
    return any(part[:1] in (".", "_") for part in relative.split("/") if part)


@dataclass
class OutputFolder:
    """Where the Parquet files go: a local folder is written as a hidden temporary folder beside it, renamed
    into place once every file is written (an interrupted run leaves no half output, and the old folder as it
    was); a URI (object storage has no rename) is written in place."""

    shown: str
    filesystem: Any
    path: str              # the final folder on ``filesystem``
    local: Path | None
    replace: bool          # an old folder (or its contents) is replaced

    @classmethod
    def check(cls, output: str | Path, *, force: bool, data: Input,
              inputs: Iterable[tuple[str, str | Path]] = ()) -> "OutputFolder":
        """Check that ``output`` may be written; ``inputs``: ``(what, path)`` of what else the command reads
        (the checkpoint), which a local output may not be, be inside or hold, ``force`` or not
        (:func:`~sentiment_cli.outputs.check_output_folder`'s rule).

        Raises:
            UsageError: ``output`` is a file, is inside ``data`` or one of ``inputs`` (or holds it), is in a
                folder that does not exist, or is a non-empty folder and ``force`` is not set.
        """
        import pyarrow.fs as pafs

        from ..outputs import check_output_folder

        fs, path, local = _filesystem(output)
        if local is not None:
            check_output_folder(local, force=True, option="--output", inputs=inputs)
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.File:
            raise UsageError(f"--output {output}: is a file; with --ray, --output names a folder of Parquet files")
        if local is not None and data.local is not None and (
                local.is_relative_to(data.local) or data.local.is_relative_to(local)):
            raise UsageError(f"--output {output}: overlaps --data {data.shown}, which this command reads; "
                             "choose another folder")
        if local is not None and not local.parent.is_dir():
            raise UsageError(f"--output {output}: folder {local.parent} does not exist")
        full = info.type == pafs.FileType.Directory and bool(fs.get_file_info(pafs.FileSelector(path)))
        if full and not force:
            raise UsageError(f"--output {output}: the folder exists and is not empty; --force replaces it")
        return cls(str(output), fs, path, local, full)

    def staging(self) -> str:
        """The folder to write into: a new temporary folder beside a local output, else the output itself
        (emptied first when replacing)."""
        if self.local is None:
            if self.replace:
                self.filesystem.delete_dir_contents(self.path)
            return self.path
        return str(self.local.parent / f".{self.local.name}.partial-{uuid.uuid4().hex[:8]}")

    def commit(self, staged: str) -> None:
        """Put the written folder ``staged`` in place of the output (a local output's old folder is removed)."""
        if self.local is None:
            return
        old = None
        if self.local.exists():
            old = self.local.parent / f".{self.local.name}.old-{uuid.uuid4().hex[:8]}"
            self.local.rename(old)
        Path(staged).rename(self.local)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def discard(self, staged: str) -> None:
        """Remove a local temporary folder after a failure."""
        if self.local is not None:
            shutil.rmtree(staged, ignore_errors=True)


def _check_checkpoint(checkpoint: str | Path, onnx: bool) -> None:
    """Fail before Ray starts when the checkpoint is plainly missing (workers would fail one by one).

    Raises:
        CheckpointError: no such folder or file.
    """
    from ..errors import CheckpointError

    path = Path(checkpoint).expanduser()
    if onnx:
        from .onnx_backend import onnx_path

        onnx_path(path)
    elif not (path / "config.json").is_file():
        raise CheckpointError(f"{checkpoint}: not a checkpoint folder (no config.json); train one with "
                              "`sentiment train`")


def _connect(ray, address: str | None) -> bool:
    """Initialise Ray unless it already is; whether this call started it (and should shut it down).

    Raises:
        UsageError: no cluster answers at ``address``.
    """
    if ray.is_initialized():
        return False
    try:
        ray.init(address=address or None, log_to_driver=False, include_dashboard=False,
                 logging_level=logging.ERROR)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"--ray {address}" if address else "--ray"
        raise UsageError(f"{where}: cannot start or reach a Ray cluster ({' '.join(str(exc).split())[:200]})") \
            from None
    return True


class _data_context:
    """Within: Ray Data keeps row order and shows progress bars or not; the settings are restored after."""

    def __init__(self, ray, progress: bool):
        self.ctx = ray.data.DataContext.get_current()
        self.progress = progress

    def __enter__(self):
        opts = self.ctx.execution_options
        self.saved = (opts.preserve_order, self.ctx.enable_progress_bars, logging.getLogger("ray.data").level,
                      getattr(self.ctx, "raise_original_map_exception", None))
        opts.preserve_order = True
        self.ctx.enable_progress_bars = self.progress
        if self.saved[3] is not None:   # a worker's DataError reaches the driver as itself (Ray >= 2.40)
            self.ctx.raise_original_map_exception = True
        # Quiet: not the plan at INFO, nor a worker's DataError as a stack trace at ERROR (it is raised here
        # as one line, and any other error with its traceback)
        logging.getLogger("ray.data").setLevel(logging.CRITICAL)
        return self.ctx

    def __exit__(self, *exc) -> None:
        order, bars, level, original = self.saved
        self.ctx.execution_options.preserve_order = order
        self.ctx.enable_progress_bars = bars
        logging.getLogger("ray.data").setLevel(level)
        if original is not None:
            self.ctx.raise_original_map_exception = original


def read_input(ray, source: Input):
    """``source`` as a lazy ``ray.data.Dataset``; CSV / TSV columns are read as text, empty fields as missing
    (as ``train`` and ``predict --data`` read them)."""
    kind = FILE_TYPES[source.suffix][0]
    common = {"filesystem": source.filesystem}
    if kind == "parquet":
        return ray.data.read_parquet(source.paths, file_extensions=None, **common)
    if kind == "json":
        return ray.data.read_json(source.paths, lines=source.suffix == ".jsonl", file_extensions=None, **common)
    import pyarrow as pa
    import pyarrow.csv as pacsv

    sep = FILE_TYPES[source.suffix][1]["sep"]
    parse = pacsv.ParseOptions(delimiter=sep, newlines_in_values=True)
    names: dict[str, None] = {}
    for path in source.paths:
        names.update(dict.fromkeys(_csv_names(source.filesystem, path, parse)))
    convert = pacsv.ConvertOptions(column_types={n: pa.string() for n in names}, null_values=[""],
                                   strings_can_be_null=True)
    return ray.data.read_csv(source.paths, parse_options=parse, convert_options=convert, **common)


def _csv_names(fs, path: str, parse) -> list[str]:
    """The header of one CSV / TSV file.

    Raises:
        DataError: the file cannot be parsed as CSV.
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv

    try:
        with fs.open_input_stream(path) as fh:
            return pacsv.open_csv(fh, parse_options=parse).schema.names
    except pa.ArrowInvalid as exc:
        raise DataError(f"cannot read {path}: {' '.join(str(exc).split())[:200]}") from None


def text_column_of(schema, wanted: str, where: str) -> str:
    """The text column among ``schema``'s (a ``ray.data`` or Arrow schema), checked to hold strings.

    Raises:
        UsageError: ``wanted`` is not a column.
        DataError: no column, or several, named like a text column; the column does not hold text.
    """
    names = list(schema.names)
    return find_text_column(names, wanted, where, lambda c: schema.types[names.index(c)])   # predict --data's check


def worker_plan(ray, workers: int | None) -> tuple[int, float]:
    """``(workers, CPUs each asks Ray for)``: one worker per CPU by default; together they ask for at most all
    but one CPU (module docstring), and at most one each."""
    cpus = float(ray.cluster_resources().get("CPU", 1.0))
    n = workers or max(1, int(cpus))
    return n, max(0.0, min(1.0, (cpus - 1.0) / n))


class _Scorer:
    """A Ray Data worker: loads the checkpoint once (in its constructor), then scores Arrow batches.

    Args:
        checkpoint: the checkpoint (an absolute path every node can read).
        column: the text column.
        explain: add ``top_tokens``.
        onnx: run the exported model on ONNX Runtime.
        batch_size: texts per forward pass (``None``: the checkpoint's).
        where: the input's name, for messages.
    """

    def __init__(self, checkpoint: str, column: str, explain: bool, onnx: bool, batch_size: int | None,
                 where: str) -> None:
        from .predictor import Predictor

        if not onnx:
            import torch

            torch.set_num_threads(1)   # one worker, one core
        self.predictor = Predictor(checkpoint, "cpu", batch_size, onnx=onnx, threads=1 if onnx else None)
        self.column, self.explain, self.where = column, explain, where

    def __call__(self, batch):
        """``batch`` (a ``pyarrow.Table``) with the prediction's columns appended (:func:`~.table.score_table`)."""
        where = f"{self.where} (a batch of {batch.num_rows:,} rows; rows counted within it)"
        return score_table(self.predictor, batch, self.column, explain=self.explain, where=where)


def _run(ray, source: Input, target: OutputFolder, settings: dict[str, Any], *, text_column: str,
         workers: int | None, batch_rows: int) -> dict[str, Any]:
    """Read -> score -> write, timed; the stats :func:`predict_with_ray` returns. ``settings``: the
    :class:`_Scorer`'s arguments but the column."""
    ds = read_input(ray, source)
    settings = {**settings, "column": text_column_of(ds.schema(), text_column, source.shown)}
    n, cpus = worker_plan(ray, workers)
    staged = target.staging()
    start = time.perf_counter()
    try:
        blocks = _split(ds, block_rows(source, n, batch_rows))
        scored = blocks.map_batches(_Scorer, fn_constructor_kwargs=settings, batch_format="pyarrow",
                                    batch_size=batch_rows, compute=ray.data.ActorPoolStrategy(size=n), num_cpus=cpus)
        scored.write_parquet(staged, filesystem=target.filesystem)
    except Exception as exc:
        target.discard(staged)
        raise _user_error(exc) from None
    except BaseException:
        target.discard(staged)
        raise
    seconds = time.perf_counter() - start
    rows = _written_rows(target.filesystem, staged)
    target.commit(staged)
    return {"rows": rows, "seconds": seconds, "rows_per_second": rows / seconds if seconds else 0.0,
            "workers": n, "output": target.shown}


BLOCKS_PER_WORKER = 8      # blocks a worker scores in a run, at least: the last one leaves the others idle
MAX_BATCHES_PER_BLOCK = 16   # each block is a task, a transfer and an output file: not too many small ones
COUNTED_FILES = 256        # Parquet footers read to count the rows, at most


def block_rows(source: Input, workers: int, batch_rows: int) -> int:
    """Rows per block (a multiple of ``batch_rows``): about :data:`BLOCKS_PER_WORKER` blocks per worker where the
    rows can be counted cheaply (at most :data:`COUNTED_FILES` Parquet files), between one batch and
    :data:`MAX_BATCHES_PER_BLOCK` batches; else the most.

    Small blocks share a small input evenly (20,000 IMDB reviews were one block of Ray's, scored by one of two
    workers); large blocks cost less each (200,000 short sentences ran 1.35x faster on one worker in blocks
    of 8,192 rows than of 1,024).
    """
    most = MAX_BATCHES_PER_BLOCK * batch_rows
    if FILE_TYPES[source.suffix][0] != "parquet" or len(source.paths) > COUNTED_FILES:
        return most
    import pyarrow.parquet as pq

    rows = 0
    for path in source.paths:
        with source.filesystem.open_input_file(path) as fh:
            rows += pq.ParquetFile(fh).metadata.num_rows
    batches = -(-rows // (workers * BLOCKS_PER_WORKER * batch_rows))   # ceil
    return min(most, max(1, batches) * batch_rows)


def _split(ds, rows: int):
    """``ds`` in blocks of at most ``rows`` rows (streamed, order kept): Ray Data's readers make blocks of 1 to
    128 MiB, and a block goes to one worker. Unchanged on a Ray without streaming repartition (< 2.46)."""
    try:
        return ds.repartition(target_num_rows_per_block=rows)
    except TypeError:
        return ds


def _written_rows(fs, folder: str) -> int:
    """The rows in the Parquet files of ``folder`` (from their footers); 0 when nothing was written."""
    import pyarrow.dataset as pads
    import pyarrow.fs as pafs

    if fs.get_file_info(folder).type == pafs.FileType.NotFound:
        return 0
    return pads.dataset(folder, filesystem=fs, format="parquet").count_rows()


def _user_error(exc: BaseException) -> BaseException:
    """The project's own error inside what Ray raised (a worker's ``DataError``, ``CheckpointError``...): found
    along the chain of causes, else read from the last line of the worker's traceback that Ray's message
    carries; else ``exc`` itself."""
    import re

    from .. import errors

    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        # Ray's wrappers may subclass the cause's class too (``RayTaskError(DataError)``): the project's own
        # classes only
        if isinstance(cause, SentimentError) and type(cause).__module__ == SentimentError.__module__:
            return cause
        seen.add(id(cause))
        cause = getattr(cause, "cause", None) or cause.__cause__ or cause.__context__
    found = re.findall(rf"^{re.escape(SentimentError.__module__)}\.(\w+): (.+)$", str(exc), re.MULTILINE)
    kind = getattr(errors, found[-1][0], None) if found else None
    if isinstance(kind, type) and issubclass(kind, SentimentError):
        return kind(found[-1][1])
    return exc
