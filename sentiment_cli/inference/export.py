"""Export a checkpoint to ONNX, check it against PyTorch, optionally quantize it to int8.

An export is only written once it agrees with the PyTorch model on held-out
reviews (the checkpoint's test split): label agreement of at least 99.9% and
a largest logit difference of at most 1e-3, else :class:`ParityError` and no
file. Exporters that skip this check ship models that silently lose accuracy
(transformers #21623: 70% to 17%). The figures go into the exported file, into
``export_<name>.json`` beside the checkpoint and so into its model card.

The graph reproduces :meth:`SentimentClassifier.forward <sentiment_cli.model.classifier.SentimentClassifier.forward>`
exactly: word (+ hashed word-bigram) embeddings, sinusoidal positions, the
encoder with its key-padding mask, the masked max-pool over real tokens only,
and the dense head; batch and sequence axes are dynamic (``seq_len`` up to
``max_length``). It also returns each token's share of every class's logit
(``token_logits``), from which :class:`~sentiment_cli.inference.onnx_backend.OnnxPredictor`
forms the same margin decomposition as :mod:`sentiment_cli.inference.explain` (any target
class, any number of classes), so explanations need no torch either.

``int8`` uses ONNX Runtime's dynamic quantization (weights stored as int8,
activations quantized on the fly); its test accuracy is measured before and
after, and refused beyond ``max_accuracy_drop``.

Uses torch (the exporter), onnx and onnxruntime (the ``onnx`` extra) and the
dataset for the held-out reviews; never prints.
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

from ..checkpoint import CONFIG_FILE, EXPORT_PREFIX, TOKENIZER_FILE, WEIGHTS_FILE, load_checkpoint, write_json
from ..errors import SentimentError, UsageError
from ..model.classifier import SentimentClassifier, bigram_buckets, masked_max_pool
from .onnx_backend import (META_BIAS, META_CARD, META_CONFIG, META_LABELS, META_TOKENIZER, ONNX_FILE,
                           ONNX_INSTALL, OnnxPredictor)

INT8_FILE = "model.int8.onnx"
MIN_AGREEMENT = 0.999
MAX_LOGIT_DIFFERENCE = 1e-3


class ParityError(SentimentError):
    """The exported model disagrees with PyTorch beyond the tolerances; nothing was written (exit 1)."""


class ExportUnavailable(SentimentError):
    """onnx / onnxruntime / onnxscript are not installed (exit 1); the message names the install command."""


class ExportGraph(nn.Module):
    """The classifier's inference path as one traceable graph, with token logits as a second output.

    The same computation as ``SentimentClassifier.forward`` in eval mode (dropout is the
    identity), without its CPU shortcut that skips the mask when a batch has no padding:
    a data-dependent branch cannot be exported, and the mask is exact either way.

    Args:
        model: the trained classifier (put in eval mode here).
    """

    def __init__(self, model: SentimentClassifier):
        super().__init__()
        self.model = model.eval()

    def forward(self, input_ids: Tensor, padding_mask: Tensor) -> tuple[Tensor, Tensor]:
        """``(logits, token_logits)``: ``(batch, num_labels)`` and ``(batch, seq_len, num_labels)`` from
        ``(batch, seq_len)`` int64 ids and bool padding mask (``True`` at padding).

        ``token_logits[i, t, c]`` is token ``t``'s share of ``logits[i, c]`` without the bias: the sum of
        ``pooled[f] * W[c, f]`` over the features ``f`` that token won in the max-pool (0 at padding), so
        ``token_logits[i].sum(0) + b == logits[i]``. With an n-gram score, each token's share of it
        (``SentimentClassifier.ngram_token_logits``) joins its token logits and the score's intercept ``b``.
        """
        m = self.model
        x = m.token_embedding(input_ids)                                            # (batch, seq_len, d_model)
        if m.bigram_embedding is not None:
            x = x + m.bigram_embedding(bigram_buckets(input_ids, m.config.bigram_buckets))
        x = x * m.embed_scale
        x = x + m.positional_encoding[: input_ids.shape[1]]
        x = m.embedding_norm(x)
        hidden = m.encoder(x, src_key_padding_mask=padding_mask)                    # (batch, seq_len, d_model)
        pooled, argmax = masked_max_pool(hidden, padding_mask)                      # (batch, d_model) each
        logits = m.head(pooled)                                                     # (batch, num_labels)
        # explain.token_scores without scatter_add, per class: the target's contrast is taken by the
        # predictor (a linear combination), so one graph serves every target and any number of classes
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)       # (seq_len,)
        won = (argmax.unsqueeze(1) == positions.view(1, -1, 1)).to(pooled.dtype)    # (batch, seq_len, d_model)
        token_logits = (won * pooled.unsqueeze(1)) @ m.head.weight.T                # (batch, seq_len, num_labels)
        if m.config.ngram_buckets:   # the n-gram score: its token shares, and its intercept in the logits
            ngram = m.ngram_token_logits(input_ids)                                 # (batch, seq_len, 2)
            token_logits = token_logits + ngram
            logits = logits + ngram.sum(1) + m.ngram_logit_bias()
        return logits, token_logits


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
    try:
        with _quiet(), torch.no_grad():
            torch.onnx.export(graph, (example_ids, example_mask), str(path), dynamo=True, external_data=False,
                              input_names=["input_ids", "padding_mask"], output_names=["logits", "token_logits"],
                              dynamic_shapes={"input_ids": {0: batch, 1: seq_len},
                                              "padding_mask": {0: batch, 1: seq_len}},
                              verbose=False)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)


def _set_metadata(path: Path, meta: dict[str, str]) -> None:
    import onnx

    proto = onnx.load(str(path))
    del proto.metadata_props[:]
    for key, value in meta.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    proto.doc_string = ("sentiment-cli classifier: inputs input_ids, padding_mask (True at padding); "
                        "outputs logits, token_logits")
    onnx.save(proto, str(path))


def _torch_logits(model: SentimentClassifier, ids: list[list[int]], batch_size: int) -> np.ndarray:
    from .predictor import batched_logits

    return batched_logits(model, ids, batch_size=batch_size, device=torch.device("cpu")).numpy()


def _onnx_logits_unsorted(predictor: OnnxPredictor, ids: list[list[int]], batch_size: int) -> np.ndarray:
    """ONNX logits in input order, batched as given (mixed lengths: much padding, which must not matter)."""
    from .onnx_backend import pad

    out = []
    for lo in range(0, len(ids), batch_size):
        input_ids, mask = pad(ids[lo:lo + batch_size])
        out.append(predictor.session.run(["logits"], {"input_ids": input_ids, "padding_mask": mask})[0])
    return np.concatenate(out)


def parity(reference: np.ndarray, exported: np.ndarray) -> dict[str, Any]:
    """Agreement of two ``(n, num_labels)`` logit arrays: ``reviews``, ``max_logit_difference``, ``label_agreement``."""
    return {"reviews": int(len(reference)),
            "max_logit_difference": float(np.abs(reference - exported).max()) if len(reference) else 0.0,
            "label_agreement": float((reference.argmax(1) == exported.argmax(1)).mean()) if len(reference) else 1.0}


def export_onnx(checkpoint: str | Path, output: str | Path | None = None, *, quantize: str | None = None,
                data: str | None = None, parity_reviews: int = 2000, batch_size: int = 64,
                min_agreement: float = MIN_AGREEMENT, max_logit_difference: float = MAX_LOGIT_DIFFERENCE,
                max_accuracy_drop: float = 0.01, on_stage: Callable[[str], None] | None = None) -> ExportResult:
    """Export ``checkpoint`` to one self-contained ``.onnx`` file, after a parity check against PyTorch.

    Args:
        checkpoint: the checkpoint folder.
        output: the file to write; default ``model.onnx`` (``model.int8.onnx`` with ``quantize``) in the folder.
        quantize: ``None`` or ``"int8"`` (ONNX Runtime dynamic quantization).
        data: dataset for the held-out reviews; default: the one the checkpoint was trained on.
        parity_reviews: held-out (test) reviews scored by both runtimes (a seeded sample; all if fewer).
        batch_size: reviews per ONNX Runtime run in the parity check (input order: mixed lengths).
        min_agreement, max_logit_difference: the parity gate.
        max_accuracy_drop: with ``quantize``, the largest test-accuracy loss accepted (0.01 = 1 point).
        on_stage: called with a short description of each step (for progress display).

    Returns:
        :class:`ExportResult`; ``record`` holds ``parity``, sizes, and for ``int8`` the accuracies.

    Raises:
        ExportUnavailable: the onnx extra is missing.
        CheckpointError / DataError: the checkpoint or the held-out reviews cannot be loaded.
        UsageError: ``quantize`` is not ``int8``, or ``output`` is in a folder that does not exist.
        ParityError: the export disagrees with PyTorch (or int8 loses too much accuracy); nothing written.
    """
    stage = on_stage or (lambda _text: None)
    if quantize not in (None, "int8"):
        raise UsageError(f"--quantize {quantize}: only int8 is supported")
    _require_onnx()
    from ..evaluation.card import model_card
    from ..checkpoint import weights_digest
    from ..data.splits import load_split
    from ..data.tokenizer import encode_texts

    checkpoint = Path(checkpoint)
    output = Path(output) if output is not None else checkpoint / (INT8_FILE if quantize else ONNX_FILE)
    if not output.parent.is_dir():
        raise UsageError(f"--output {output}: folder {output.parent} does not exist")
    timings: dict[str, float] = {}
    stage("loading the checkpoint")
    ckpt = load_checkpoint(checkpoint, "cpu")
    cfg = ckpt.config
    spec = _held_out_spec(cfg, data)
    source = spec.source
    stage(f"loading held-out reviews (test split of {source})")
    test = load_split(spec, "test", label_names=ckpt.labels)
    rng = np.random.default_rng(cfg.training.seed)
    sample = sorted(rng.permutation(len(test.texts))[:parity_reviews].tolist())
    ids = encode_texts(ckpt.tokenizer, [test.texts[i] for i in sample], cfg.data)

    with tempfile.TemporaryDirectory(dir=output.parent, prefix=".export-") as tmp:
        fp32 = Path(tmp) / "model.onnx"
        stage("exporting with torch.onnx (dynamic batch and sequence axes)")
        start = time.perf_counter()
        _trace(ckpt.model, fp32)
        timings["export_seconds"] = time.perf_counter() - start
        config_json = (checkpoint / CONFIG_FILE).read_text(encoding="utf-8")
        tokenizer_json = (checkpoint / TOKENIZER_FILE).read_text(encoding="utf-8")
        bias = ckpt.model.head.bias.detach()   # the constant that token_logits leave out of the logits
        if ckpt.model.config.ngram_buckets:
            bias = bias + ckpt.model.ngram_logit_bias().detach()
        meta = {META_CONFIG: config_json, META_TOKENIZER: tokenizer_json, META_LABELS: json.dumps(list(ckpt.labels)),
                META_BIAS: json.dumps(bias.float().tolist())}
        _set_metadata(fp32, meta)

        stage(f"parity check on {len(ids):,} held-out reviews: PyTorch against ONNX Runtime")
        reference = _torch_logits(ckpt.model, ids, cfg.training.eval_batch_size)
        fp32_predictor = OnnxPredictor(fp32)
        check = parity(reference, _onnx_logits_unsorted(fp32_predictor, ids, batch_size))
        check.update(min_agreement=min_agreement, max_allowed_difference=max_logit_difference,
                     data=f"{source} (test split, seeded sample)")
        if check["label_agreement"] < min_agreement or check["max_logit_difference"] > max_logit_difference:
            raise ParityError(
                f"parity check failed on {check['reviews']:,} held-out reviews: label agreement "
                f"{check['label_agreement']:.4%} (needs >= {min_agreement:.1%}), max logit difference "
                f"{check['max_logit_difference']:.2e} (needs <= {max_logit_difference:.0e}); nothing written")
        record: dict[str, Any] = {
            "format": "onnx", "file": str(output), "quantization": quantize, "parity": check,
            "opset": _opset(fp32), "bytes": {"pytorch_weights": (checkpoint / WEIGHTS_FILE).stat().st_size,
                                             "onnx": fp32.stat().st_size},
            "exported": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "weights": weights_digest(checkpoint),
            "versions": _versions(),
        }
        final = fp32
        if quantize:
            final = Path(tmp) / "model.int8.onnx"
            stage("quantizing to int8 (ONNX Runtime dynamic quantization)")
            _quantize_int8(fp32, final)
            _set_metadata(final, meta)
            record["bytes"]["onnx_int8"] = final.stat().st_size
            stage(f"test accuracy before and after quantization ({len(test.texts):,} reviews)")
            all_ids = encode_texts(ckpt.tokenizer, test.texts, cfg.data)
            labels = np.asarray(test.labels)
            before = float((fp32_predictor._run(all_ids)[0].argmax(1) == labels).mean())
            int8 = OnnxPredictor(final)
            after_logits = int8._run(all_ids)[0]
            after = float((after_logits.argmax(1) == labels).mean())
            int8_parity = parity(reference, after_logits[sample])
            record["int8"] = {"test_reviews": int(len(labels)), "accuracy_before": before, "accuracy_after": after,
                              "label_agreement_with_pytorch": int8_parity["label_agreement"],
                              "max_logit_difference_to_pytorch": int8_parity["max_logit_difference"],
                              "max_accuracy_drop": max_accuracy_drop}
            if before - after > max_accuracy_drop:
                raise ParityError(f"int8 quantization costs {before - after:.2%} test accuracy ({before:.2%} -> "
                                  f"{after:.2%}; accepted: {max_accuracy_drop:.2%}); nothing written")
        card = model_card(checkpoint)
        card.setdefault("exports", {})[_record_name(quantize)] = record
        size_key = "onnx_int8" if quantize else "onnx"
        for _ in range(4):   # the card holds the file's size, which holds the card: a few rounds settle it
            _set_metadata(final, {**meta, META_CARD: json.dumps(card, ensure_ascii=False)})
            if record["bytes"][size_key] == final.stat().st_size:
                break
            record["bytes"][size_key] = final.stat().st_size
        os.replace(final, output)

    result = ExportResult(output, record, timings=timings)
    try:   # the model card lists the export; a read-only checkpoint only loses that
        result.recorded = record_export(checkpoint, record, quantize)
    except OSError as exc:
        result.note = f"export not recorded in {checkpoint} ({exc.strerror or exc})"
    return result


def _held_out_spec(cfg, data: str | None):
    """The reviews the parity check scores: the test split of the checkpoint's data (its columns and
    label set), or of ``data`` (its own column names).

    Raises:
        UsageError: the checkpoint was trained on a single file, which has no test split, and no ``data`` was given.
    """
    from ..data.splits import DataSpec
    from ..data.sources import is_single_file

    if data is None or data == cfg.data.source:
        if is_single_file(cfg.data.source):
            raise UsageError(f"the checkpoint was trained on the single file {cfg.data.source}, which has no test "
                             "split; give held-out reviews for the parity check with --data FILE")
        return DataSpec.from_config(cfg)
    spec = DataSpec.from_config(cfg, source=data)
    return DataSpec(spec.source, spec.validation_fraction, spec.seed, spec.validation_split)


def _record_name(quantize: str | None) -> str:
    return "onnx" if not quantize else f"onnx-{quantize}"


def record_export(checkpoint: Path, record: dict[str, Any], quantize: str | None) -> Path:
    """Keep the export's figures in ``export_<name>.json`` and refresh the model card (``README.md``).

    Raises:
        OSError: the folder is not writable.
    """
    from ..evaluation.card import write_card

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
