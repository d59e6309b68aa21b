"""Export a checkpoint to ONNX, check it against PyTorch, optionally quantize it to int8.

An export is only written once it agrees with the PyTorch model on held-out
reviews (the checkpoint's test split): label agreement of at least 99.9% and
a largest logit difference of at most 1e-3, else :class:`ParityError` and no
file. Exporters that skip this check ship models that silently lose accuracy
(transformers #21623: 70% to 17%). A multi-label model is checked per label
(:func:`multi_label_parity`): every label's logits within the same 1e-3, and
label agreement counts the texts whose predicted label sets (the checkpoint's
per-label temperatures and thresholds applied to each side's logits) are equal.
Its decision rule (``config.json``'s ``"multi_label"``) travels in the file with
the rest of ``config.json``. The figures go into the exported file, into
``export_<name>.json`` beside the checkpoint and so into its model card.

The graph is :meth:`SentimentClassifier.forward <sentiment_cli.model.classifier.SentimentClassifier.forward>`
itself, traced: word (+ hashed word-bigram) embeddings, sinusoidal positions,
the encoder with its key-padding mask, the masked max-pool over real tokens
only, the dense head, and the n-gram score if any; batch and sequence axes are dynamic
(``seq_len`` up to ``max_length``). It also returns each token's share of every
class's logit (``token_logits``), from which the predictor's ONNX backend
forms the same explanation as the PyTorch one (:mod:`sentiment_cli.inference.explain`:
any target class, any number of classes), so explanations need no torch either.

``int8`` uses ONNX Runtime's dynamic quantization (weights stored as int8,
activations quantized on the fly); its test accuracy is measured before and
after (a multi-label model's: subset accuracy, the texts whose whole label set is right), and refused
beyond ``max_accuracy_drop``.

Uses torch (the exporter), onnx and onnxruntime (the ``onnx`` extra) and the
dataset for the held-out texts; never prints.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..card.facts import model_card
from ..card.readme import write_card
from ..compact_table import CompactTable
from ..checkpoint import (CONFIG_FILE, EXPORT_PREFIX, TOKENIZER_FILE, WEIGHTS_FILE, checkpoint_inputs, load_checkpoint,
                          weights_digest, write_json)
from ..errors import SentimentError, UsageError
from ..model.classifier import SentimentClassifier
from ..outputs import check_output
from .multilabel import Decision
from .onnx_backend import (META_BIAS, META_CARD, META_CONFIG, META_LABELS, META_TOKENIZER, META_WEIGHTS,
                           ONNX_FILE, ONNX_INSTALL, OnnxBackend, pad)

INT8_FILE = "model.int8.onnx"
MIN_AGREEMENT = 0.999
MAX_LOGIT_DIFFERENCE = 1e-3


class ParityError(SentimentError):
    """The exported model disagrees with PyTorch beyond the tolerances; nothing was written (exit 1)."""


class TraceError(SentimentError):
    """torch.onnx could not trace the model (exit 1); nothing was written. The message is the exporter's summary."""


class ExportUnavailable(SentimentError):
    """onnx / onnxruntime / onnxscript are not installed (exit 1); the message names the install command."""


class ExportGraph(nn.Module):
    """The classifier's own forward pass (eval mode) as a traceable graph with two outputs.

    ``(logits, token_logits)``: ``(batch, num_labels)`` and ``(batch, seq_len, num_labels)`` from
    ``(batch, seq_len)`` int64 ids and a bool padding mask (``True`` at padding), as
    :class:`~sentiment_cli.model.classifier.ClassifierOutput` holds them; a graph returns tensors, not
    the record. ``token_logits[i].sum(0) + bias == logits[i]``, with ``bias`` stored in the file's
    metadata. The forward's CPU shortcut (no mask when a batch has no padding) is off while exporting.

    Args:
        model: the trained classifier (put in eval mode here).
    """

    def __init__(self, model: SentimentClassifier):
        super().__init__()
        self.model = model.eval()

    def forward(self, input_ids: Tensor, padding_mask: Tensor) -> tuple[Tensor, Tensor]:
        """``(logits, token_logits)`` of :meth:`SentimentClassifier.forward` with ``token_logits=True``."""
        out = self.model(input_ids, padding_mask, token_logits=True)
        return out.logits, out.token_logits


@dataclass
class ExportResult:
    """What :func:`export_onnx` wrote and measured (``record`` is what the model card shows)."""

    path: Path
    record: dict[str, Any]
    recorded: Path | None = None
    note: str | None = None
    timings: dict[str, float] = field(default_factory=dict)


def _require_onnx() -> None:
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
        import onnxscript  # noqa: F401  (torch.onnx's exporter)
    except ImportError as exc:
        raise ExportUnavailable(f"export needs the onnx extra ({exc.name} is missing): {ONNX_INSTALL}") from None


def _trace(model: SentimentClassifier, path: Path) -> None:
    """Write the bare graph (no metadata) to ``path`` with dynamic batch and sequence axes."""
    graph = ExportGraph(model)
    example_ids = torch.tensor([[2, 3, 4], [5, 6, 0]])
    example_mask = example_ids == 0
    batch = torch.export.Dim("batch", min=1)
    seq_len = torch.export.Dim("seq_len", min=1, max=model.max_length)
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)   # the fused kernel has no ONNX form; the SDPA path does
    table = model.ngram_score.compact_table() if model.ngram_score is not None else contextlib.nullcontext()
    try:
        with _quiet(), torch.no_grad(), table, _compact_for_export(model):   # the tables' fewest bytes in the graph
            torch.onnx.export(graph, (example_ids, example_mask), str(path), dynamo=True, external_data=False,
                              input_names=["input_ids", "padding_mask"], output_names=["logits", "token_logits"],
                              dynamic_shapes={"input_ids": {0: batch, 1: seq_len},
                                              "padding_mask": {0: batch, 1: seq_len}},
                              verbose=False)
    except Exception as exc:   # torch.onnx's own errors: a long report whose summary is its last line
        lines = [line.strip() for line in str(exc).splitlines() if line.strip() and "(Refer to" not in line]
        raise TraceError(f"torch.onnx could not export this model ({type(exc).__name__}: "
                         f"{lines[-1] if lines else 'no message'}); nothing was written") from None
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)


@contextlib.contextmanager
def _compact_for_export(model: SentimentClassifier):
    """Within the block, a compressed model's compact tables hold their scales as float16 where exact
    (:meth:`~sentiment_cli.compact_table.CompactTable.for_export`): its int8 rows go into the graph as they are,
    gathered, then cast and scaled (``Gather``, ``Cast``, ``Mul``), so the file is about the weights file's size."""
    with contextlib.ExitStack() as stack:
        for module in model.modules():
            if isinstance(module, CompactTable):
                stack.enter_context(module.for_export())
        yield


def _set_metadata(path: Path, meta: dict[str, str]) -> None:
    import onnx

    proto = onnx.load(str(path))
    del proto.metadata_props[:]
    for node in proto.graph.node:   # the exporter's debugging record of each node (stack traces, source paths)
        del node.metadata_props[:]
    for key, value in meta.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    proto.doc_string = ("sentiment-cli classifier: inputs input_ids, padding_mask (True at padding); "
                        "outputs logits, token_logits")
    onnx.save(proto, str(path))


def _onnx_logits_unsorted(backend: OnnxBackend, ids: list[list[int]], batch_size: int) -> np.ndarray:
    """ONNX logits in input order, batched as given (mixed lengths: much padding, which must not matter)."""
    out = []
    for lo in range(0, len(ids), batch_size):
        input_ids, mask = pad(ids[lo:lo + batch_size])
        out.append(backend.session.run(["logits"], {"input_ids": input_ids, "padding_mask": mask})[0])
    return np.concatenate(out)


def parity(reference: np.ndarray, exported: np.ndarray) -> dict[str, Any]:
    """Agreement of two ``(n, num_labels)`` logit arrays: ``reviews``, ``max_logit_difference``, ``label_agreement``."""
    return {"reviews": int(len(reference)),
            "max_logit_difference": float(np.abs(reference - exported).max()) if len(reference) else 0.0,
            "label_agreement": float((reference.argmax(1) == exported.argmax(1)).mean()) if len(reference) else 1.0}


def multi_label_parity(reference: np.ndarray, exported: np.ndarray, labels: tuple[str, ...],
                       decision: Decision) -> dict[str, Any]:
    """:func:`parity` of a multi-label model, per label: ``label_agreement`` is the share of texts whose predicted
    label sets (``decision`` applied to each side's logits) are equal, and ``max_logit_difference_by_label`` maps
    each label to its largest logit difference (``max_logit_difference`` is the largest of them).

    Args:
        reference, exported: ``(n, num_labels)`` logits before the temperatures (PyTorch's, ONNX Runtime's).
        labels: the ``num_labels`` label names, by id.
        decision: the checkpoint's rule (per-label temperatures and thresholds, ``min_labels``).

    Returns:
        ``{"reviews", "max_logit_difference", "max_logit_difference_by_label", "label_agreement",
        "multi_label": True}``.
    """
    n = len(reference)
    by_label = np.abs(reference - exported).max(axis=0) if n else np.zeros(len(labels))
    same = (decision.labels(decision.probabilities(reference)) ==
            decision.labels(decision.probabilities(exported))).all(axis=1) if n else np.ones(0, dtype=bool)
    return {"reviews": int(n), "max_logit_difference": float(by_label.max()) if n else 0.0,
            "max_logit_difference_by_label": {name: float(d) for name, d in zip(labels, by_label)},
            "label_agreement": float(same.mean()) if n else 1.0, "multi_label": True}


def _decision(ckpt) -> Decision | None:
    """The checkpoint's multi-label rule (``config.json``'s ``"multi_label"``), or ``None`` for a single-label model."""
    return None if ckpt.decision is None else Decision.from_json(ckpt.decision, len(ckpt.labels))


def _right(logits: np.ndarray, test, decision: Decision | None) -> int:
    """Texts of ``test`` (a :class:`~sentiment_cli.data.splits.Split`) predicted right from ``(n, num_labels)``
    logits: the label (argmax), or with ``decision`` the whole label set (subset accuracy)."""
    if decision is None:
        return int((logits.argmax(1) == np.asarray(test.labels)).sum())
    gold = np.asarray(test.labels).reshape(len(logits), -1).astype(bool)
    return int((decision.labels(decision.probabilities(logits)) == gold).all(axis=1).sum())


@dataclass
class _HeldOut:
    """The test split the export is checked on, and the seeded sample of it that both runtimes score."""

    test: Any          # data.splits.Split
    sample: list[int]  # indices into test
    ids: list[list[int]]
    source: str


def export_onnx(checkpoint: str | Path, output: str | Path | None = None, *, quantize: str | None = None,
                data: str | None = None, parity_reviews: int = 2000, batch_size: int = 64,
                min_agreement: float = MIN_AGREEMENT, max_logit_difference: float = MAX_LOGIT_DIFFERENCE,
                max_accuracy_drop: float = 0.01, force: bool = False,
                on_stage: Callable[[str], None] | None = None) -> ExportResult:
    """Export ``checkpoint`` to one self-contained ``.onnx`` file, after a parity check against PyTorch.

    Args:
        checkpoint: the checkpoint folder.
        output: the file to write; default ``model.onnx`` (``model.int8.onnx`` with ``quantize``) in the folder.
        quantize: ``None`` or ``"int8"`` (ONNX Runtime dynamic quantization).
        data: dataset for the held-out texts; default: the one the checkpoint was trained on.
        parity_reviews: held-out (test) reviews scored by both runtimes (a seeded sample; all if fewer).
        batch_size: reviews per ONNX Runtime run in the parity check (input order: mixed lengths).
        min_agreement, max_logit_difference: the parity gate (multi-label: label sets, each label's logits).
        max_accuracy_drop: with ``quantize``, the largest test-accuracy loss accepted (0.01 = 1 point).
        force: replace an existing file that is not an ``.onnx`` file (an existing ``.onnx`` file, an earlier
            export, is replaced without it); never a file of the checkpoint (:func:`check_export_output`).
        on_stage: called with a short description of each step (for progress display).

    Returns:
        :class:`ExportResult`; ``record`` holds ``parity``, sizes, and for ``int8`` the accuracies.

    Raises:
        ExportUnavailable: the onnx extra is missing.
        CheckpointError / DataError: the checkpoint or the held-out texts cannot be loaded.
        UsageError: ``quantize`` is not ``int8``, or ``output`` is unusable (:func:`check_export_output`);
            checked before any work.
        ParityError: the export disagrees with PyTorch (or int8 loses too much accuracy); nothing written.
        TraceError: torch.onnx could not trace the model; nothing written.
    """
    stage = on_stage or (lambda _text: None)
    if quantize not in (None, "int8"):
        raise UsageError(f"--quantize {quantize}: only int8 is supported")
    _require_onnx()
    checkpoint = Path(checkpoint)
    output = check_export_output(checkpoint, output, quantize, force=force, data=data)
    stage("loading the checkpoint")
    ckpt = load_checkpoint(checkpoint, "cpu")
    held_out = _held_out(ckpt, data, parity_reviews, stage)
    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory(dir=output.parent, prefix=".export-") as tmp:
        fp32 = Path(tmp) / "model.onnx"
        stage("exporting with torch.onnx (dynamic batch and sequence axes)")
        start = time.perf_counter()
        meta = _write_graph(ckpt, checkpoint, fp32)
        timings["export_seconds"] = time.perf_counter() - start
        stage(f"parity check on {len(held_out.ids):,} held-out texts: PyTorch against ONNX Runtime")
        reference = _torch_logits(ckpt.model, held_out.ids, ckpt.config.training.eval_batch_size)
        check = _checked_parity(reference, fp32, held_out, batch_size, min_agreement, max_logit_difference,
                                ckpt.labels, _decision(ckpt))
        record = _record(checkpoint, output, quantize, check, fp32)
        final = fp32
        if quantize:
            final = Path(tmp) / "model.int8.onnx"
            record["int8"] = _quantized(ckpt, fp32, final, meta, reference, held_out, max_accuracy_drop, stage)
            record["bytes"]["onnx_int8"] = final.stat().st_size
        _embed_card(final, meta, record, checkpoint, quantize)
        os.replace(final, output)
    return _recorded(ExportResult(output, record, timings=timings), checkpoint, quantize)


def check_export_output(checkpoint: Path, output: str | Path | None, quantize: str | None = None, *,
                        force: bool = False, data: str | None = None) -> Path:
    """The file an export writes (``output``, default ``model.onnx`` or ``model.int8.onnx`` in ``checkpoint``),
    checked before any work by :func:`~sentiment_cli.outputs.check_output`.

    Inside the checkpoint folder only an ``.onnx`` file (an export) may be written, never the checkpoint's own
    files; an existing ``.onnx`` file is an earlier export and is replaced; another existing file needs ``force``.
    ``data`` (``--data``, the held-out texts) is an input: never written over or into, ``force`` or not.

    Raises:
        UsageError: ``output`` is a folder, in a folder that does not exist, one of the checkpoint's files,
            ``data`` or a file inside it, or an existing file other than an ``.onnx`` one without ``force``.
    """
    path = Path(output) if output is not None else checkpoint / (INT8_FILE if quantize else ONNX_FILE)
    onnx = path.suffix.lower() == ".onnx"
    inputs = checkpoint_inputs(checkpoint, data)   # the folder, and --data or the data it was trained on
    if onnx:   # an export may go into the checkpoint folder (its default place), over an earlier export
        inputs = [(what, where) for what, where in inputs if what != "the checkpoint folder"]
    return check_output(path, force=force or onnx, inputs=inputs)


def _recorded(result: ExportResult, checkpoint: Path, quantize: str | None) -> ExportResult:
    """List the export in the checkpoint's model card; a read-only checkpoint only loses that (a note)."""
    try:
        result.recorded = record_export(checkpoint, result.record, quantize)
    except OSError as exc:
        result.note = f"export not recorded in {checkpoint} ({exc.strerror or exc})"
    return result


def _torch_logits(model: SentimentClassifier, ids: list[list[int]], batch_size: int) -> np.ndarray:
    from .torch_backend import batched_logits

    return batched_logits(model, ids, batch_size=batch_size, device=torch.device("cpu")).numpy()


def _held_out(ckpt, data: str | None, parity_reviews: int, stage: Callable[[str], None]) -> _HeldOut:
    """Load the test split (of the checkpoint's data, or ``data``) and tokenize a seeded sample of it."""
    from ..data.splits import load_split, scoring_spec
    from ..data.tokenizer import encode_texts

    spec = scoring_spec(ckpt.config, "test", data,
                        single_file_hint="give held-out texts for the parity check with --data FILE")
    stage(f"loading held-out texts (test split of {spec.source})")
    test = load_split(spec, "test", label_names=ckpt.labels)
    rng = np.random.default_rng(ckpt.config.training.seed)
    sample = sorted(rng.permutation(len(test.texts))[:parity_reviews].tolist())
    ids = encode_texts(ckpt.tokenizer, [test.texts[i] for i in sample], ckpt.config.data)
    return _HeldOut(test, sample, ids, spec.source)


def _write_graph(ckpt, checkpoint: Path, path: Path) -> dict[str, str]:
    """Trace the model to ``path`` and store what a predictor needs in its metadata; returns that metadata."""
    _trace(ckpt.model, path)
    with torch.no_grad():   # the constant that token_logits leave out of the logits: the head's bias (+ a term's)
        ids = torch.tensor([[2]])
        bias = ckpt.model.eval()(ids, ids == 0, token_logits=True).bias
    meta = {META_CONFIG: (checkpoint / CONFIG_FILE).read_text(encoding="utf-8"),
            META_TOKENIZER: (checkpoint / TOKENIZER_FILE).read_text(encoding="utf-8"),
            META_LABELS: json.dumps(list(ckpt.labels)), META_BIAS: json.dumps(bias.float().tolist()),
            META_WEIGHTS: weights_digest(checkpoint)}   # the ONNX backend checks it against the folder's
    _set_metadata(path, meta)
    return meta


def _checked_parity(reference: np.ndarray, fp32: Path, held_out: _HeldOut, batch_size: int, min_agreement: float,
                    max_logit_difference: float, labels: tuple[str, ...] = (),
                    decision: Decision | None = None) -> dict[str, Any]:
    """The parity record of the exported file against PyTorch's ``reference`` logits; with a multi-label
    ``decision``, per label (:func:`multi_label_parity`: every label's logits, and the label sets).

    Raises:
        ParityError: the figures miss the gate; for a multi-label model the message names the label whose
            logits differ most.
    """
    exported = _onnx_logits_unsorted(OnnxBackend(fp32), held_out.ids, batch_size)
    check = parity(reference, exported) if decision is None else \
        multi_label_parity(reference, exported, labels, decision)
    check.update(min_agreement=min_agreement, max_allowed_difference=max_logit_difference,
                 data=f"{held_out.source} (test split, seeded sample)")
    if check["label_agreement"] < min_agreement or check["max_logit_difference"] > max_logit_difference:
        agreement, worst = "label agreement", ""
        if decision is not None:
            by_label = check["max_logit_difference_by_label"]
            agreement, worst = "label-set agreement", f" (label {max(by_label, key=by_label.get)!r})"
        raise ParityError(
            f"parity check failed on {check['reviews']:,} held-out texts: {agreement} "
            f"{check['label_agreement']:.4%} (needs >= {min_agreement:.1%}), max logit difference "
            f"{check['max_logit_difference']:.2e}{worst} (needs <= {max_logit_difference:.0e}); nothing written")
    return check


def _record(checkpoint: Path, output: Path, quantize: str | None, check: dict[str, Any], fp32: Path) -> dict[str, Any]:
    """The export record the model card shows (sizes, parity, versions, the weights' digest)."""

    return {"format": "onnx", "file": str(output), "quantization": quantize, "parity": check,
            "opset": _opset(fp32), "bytes": {"pytorch_weights": (checkpoint / WEIGHTS_FILE).stat().st_size,
                                             "onnx": fp32.stat().st_size},
            "exported": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "weights": weights_digest(checkpoint), "versions": _versions()}


def _quantized(ckpt, fp32: Path, final: Path, meta: dict[str, str], reference: np.ndarray, held_out: _HeldOut,
               max_accuracy_drop: float, stage: Callable[[str], None]) -> dict[str, Any]:
    """Quantize ``fp32`` to int8 at ``final`` and measure the whole test split before and after (accuracy; for a
    multi-label model subset accuracy, and label-set agreement with PyTorch).

    Raises:
        ParityError: int8 loses more than ``max_accuracy_drop`` test accuracy.
    """
    from ..data.tokenizer import encode_texts

    stage("quantizing to int8 (ONNX Runtime dynamic quantization)")
    _quantize_int8(fp32, final)
    _set_metadata(final, meta)
    test = held_out.test
    stage(f"test accuracy before and after quantization ({len(test.texts):,} texts)")
    all_ids = encode_texts(ckpt.tokenizer, test.texts, ckpt.config.data)
    decision, n = _decision(ckpt), len(test.texts)
    right_before = _right(OnnxBackend(fp32).forward(all_ids)[0], test, decision)
    after_logits = OnnxBackend(final).forward(all_ids)[0]
    right_after = _right(after_logits, test, decision)
    before, after = right_before / n, right_after / n
    after_sample = after_logits[held_out.sample]
    int8_parity = parity(reference, after_sample) if decision is None else \
        multi_label_parity(reference, after_sample, ckpt.labels, decision)
    # in reviews, not a float difference: 5 of 500 is exactly 1 point, which 0.558 - 0.548 exceeds in floats
    if right_before - right_after > max_accuracy_drop * n + 1e-9:
        raise ParityError(f"int8 quantization costs {before - after:.2%} test accuracy ({before:.2%} -> "
                          f"{after:.2%}; accepted: {max_accuracy_drop:.2%}); nothing written")
    return {"test_reviews": int(n), "accuracy_before": before, "accuracy_after": after,
            "label_agreement_with_pytorch": int8_parity["label_agreement"],
            "max_logit_difference_to_pytorch": int8_parity["max_logit_difference"],
            "max_accuracy_drop": max_accuracy_drop}


def _embed_card(final: Path, meta: dict[str, str], record: dict[str, Any], checkpoint: Path,
                quantize: str | None) -> None:
    """Store the model card, with this export's record, in the file's metadata."""
    card = model_card(checkpoint)
    card.setdefault("exports", {})[_record_name(quantize)] = record
    size_key = "onnx_int8" if quantize else "onnx"
    for _ in range(4):   # the card holds the file's size, which holds the card: a few rounds settle it
        _set_metadata(final, {**meta, META_CARD: json.dumps(card, ensure_ascii=False)})
        if record["bytes"][size_key] == final.stat().st_size:
            break
        record["bytes"][size_key] = final.stat().st_size


def _record_name(quantize: str | None) -> str:
    return "onnx" if not quantize else f"onnx-{quantize}"


def record_export(checkpoint: Path, record: dict[str, Any], quantize: str | None) -> Path:
    """Keep the export's figures in ``export_<name>.json`` and refresh the model card (``README.md``).

    Raises:
        OSError: the folder is not writable.
    """
    path = checkpoint / f"{EXPORT_PREFIX}{_record_name(quantize)}.json"
    write_json(path, record)
    write_card(checkpoint)
    return path


def _quantize_int8(source: Path, target: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _quiet():
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8)


@contextlib.contextmanager
def _quiet():
    """Silence the exporter's and the quantizer's warnings and log lines (about their own internals)."""
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(logging.NOTSET)


def _opset(path: Path) -> int | None:
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)


def _versions() -> dict[str, str]:
    import onnx
    import onnxruntime

    from .. import __version__
    return {"sentiment_cli": __version__, "torch": torch.__version__, "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__}
