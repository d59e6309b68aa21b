"""The report of ``python -m bench``: its results (``results.json``) as tables of text cells, printed with rich
and written as Markdown (``results.md``): the IMDB table of every system against the strongest peer, each config
against the notebook loop and each peer, the notes under them, and SST-5's table."""

from __future__ import annotations

from bench.jobs import EVAL_REPEATS


PEER_LABELS = {"tfidf": "TF-IDF + LR", "nbsvm": "NB-SVM", "fasttext": "fastText"}
PEER_NOTES = {
    "tfidf": "TF-IDF over word 1-2-grams + logistic regression (scikit-learn)",
    "nbsvm": "NB-SVM-style log-count ratios over binarised word 1-3-grams + logistic regression "
             "(Wang & Manning 2012, the NB-LR form; scikit-learn)",
    "fasttext": "fastText, supervised, with word bigrams, 1 thread (Joulin et al. 2017; the fasttext package)",
}


def _fmt_s(s):
    return f"{s:,.0f} s" if s >= 10 else f"{s:.1f} s"


def _peers(results: dict) -> dict:
    """``{job name: result}`` of the peers; results.json files from before NB-SVM and fastText had only TF-IDF."""
    return results.get("peers") or {"tfidf": results["tfidf"]}


def _strongest(peers: dict) -> str:
    """The peer with the highest test accuracy: the one the main table compares against."""
    return max(peers, key=lambda k: peers[k]["test_accuracy"])


def _validation_test(results: dict) -> str:
    """Each system's validation and test accuracy, as one line's text (shared by the table and results.md)."""
    systems = [*results["ours"].items(), *((PEER_LABELS[k], r) for k, r in _peers(results).items())]
    pairs = [f"{key} {r['validation_accuracy']:.2%} / {r['test_accuracy']:.2%}"
             for key, r in systems if r.get("validation_accuracy") is not None]   # None: trained on all of train
    if not pairs:
        return "(none: every system trained on all of train)"
    return "(validation: the held-out part of train; a large gap means validation flatters): " + ", ".join(pairs)


def _peer_reviews(peer: dict) -> str:
    n = peer.get("train_examples")   # results.json files from before it was recorded: 90% of train
    return f"{n:,} training reviews" if n is not None else "90% of train"


def _vs(r: dict, acc, other: dict) -> list[str]:
    """Three cells comparing system ``r`` (test accuracy ``acc``) with ``other``: accuracy difference in
    points, training-time ratio (``r`` ÷ other: above 1x is slower) and eval-speed ratio (above 1x is faster)."""
    return [f"{(acc - other['test_accuracy']) * 100:+.2f} pt" if acc is not None else "–",
            f"{r['train_seconds'] / other['train_seconds']:,.1f}x",
            f"{r['eval_reviews_per_second'] / other['eval_reviews_per_second']:.2f}x"]


def _systems(results: dict) -> list[tuple[str, str, dict, float | None, bool]]:
    """Every row of the benchmark: ``(kind, name, result, test accuracy, is a training run of the encoder)``."""
    nb = results["notebook"]
    rows = [("notebook", "notebook loop ¹", nb, None, True)]
    rows += [("ours", f"{key} ({r['epochs_run']} ep.)", r, r["test_accuracy"], True)
             for key, r in results["ours"].items()]
    rows += [("peer", f"{PEER_LABELS[k]} ²", r, r["test_accuracy"], False) for k, r in _peers(results).items()]
    return rows


def main_table(results: dict) -> tuple[list[str], list[list[str]]]:
    """The benchmark's main table as ``(header, rows)`` of text cells: every system's own figures,
    then its comparison with the strongest peer of this run (highest test accuracy)."""
    peak, peers = results["peak"], _peers(results)
    best = _strongest(peers)
    label = PEER_LABELS[best]
    header = ["system", "test acc", "train time", "train reviews/s", "GFLOP/s", "of fp32 peak", "of bf16 peak",
              "eval reviews/s", "peak mem", f"acc − {label}", f"train time ÷ {label}", f"eval speed ÷ {label}"]
    rows = []
    for kind, name, r, acc, encoder in _systems(results):
        g = r.get("train_gflops") if encoder else None
        flops = ([f"{g:,.1f}", f"{g / peak['fp32_gflops']:.0%}", f"{g / peak['bf16_gflops']:.0%}"]
                 if g is not None else ["–"] * 3)
        vs = ["–"] * 3 if r is peers[best] else _vs(r, acc, peers[best])
        rows.append([name, f"{acc:.2%}" if acc is not None else "–", _fmt_s(r["train_seconds"]),
                     f"{r['train_examples_per_second']:,.0f}" if "train_examples_per_second" in r else "–",
                     *flops, f"{r['eval_reviews_per_second']:,.0f}", f"{r['peak_rss_mib']:,.0f} MiB", *vs])
    return header, rows


def ratio_table(results: dict) -> tuple[list[str], list[list[str]]]:
    """Each of the project's configs against the notebook loop and against each peer, same run:
    ``(header, rows)`` of text cells, one row per (config, other system). Ratios are config ÷ other:
    train time above 1x is slower, reviews/s above 1x is faster."""
    nb, peers = results["notebook"], _peers(results)
    header = ["config", "against", "acc − other", "train time ÷", "train reviews/s ÷", "eval reviews/s ÷"]
    others = [("notebook loop ¹", nb), *((PEER_LABELS[k], p) for k, p in peers.items())]
    rows = []
    for key, r in results["ours"].items():
        for name, other in others:
            acc, train_time, eval_speed = _vs(r, r["test_accuracy"] if other is not nb else None, other)
            rows.append([key, name, acc, train_time,
                         f"{r['train_examples_per_second'] / other['train_examples_per_second']:.2f}x", eval_speed])
    return header, rows


def _notes(results: dict) -> list[str]:
    """The lines under the tables (footnotes, peaks, the seed target, validation, pretraining, cold start)."""
    peak, nb, peers = results["peak"], results["notebook"], _peers(results)
    any_peer = next(iter(peers.values()))
    lines = [f"¹ the notebook's model and loop at the seed config (fixed padding to 200, no mask); "
             f"{nb['epochs']} epoch(s) timed, train time projected to 10 epochs.",
             f"² fitted on the same {_peer_reviews(any_peer)} as configs/default.toml, hyperparameters chosen on a "
             "validation hold-out of train (docs/experiments-peers.md); train reviews/s = reviews ÷ fit time. "
             + "; ".join(f"{PEER_LABELS[k]}: {PEER_NOTES[k]}" for k in peers) + ".",
             f"GFLOP/s: encoder matmul FLOPs of training ÷ time; peaks: torch.matmul 2048², median of 5, "
             f"fp32 {peak['fp32_gflops']:,.0f} GFLOP/s, bf16 {peak['bf16_gflops']:,.0f} GFLOP/s. "
             f"Eval reviews/s: median of {EVAL_REPEATS} passes over the test set. Peak mem: max RSS of the "
             "system's own process."]
    seed = results["ours"].get("seed")
    if seed:
        lines.append(f"seed config vs the notebook loop, same run: training reviews/s "
                     f"{seed['train_examples_per_second'] / nb['train_examples_per_second']:.2f}x (target 1.5x), "
                     f"eval reviews/s {seed['eval_reviews_per_second'] / nb['eval_reviews_per_second']:.2f}x "
                     f"(target 1.5x)")
    lines.append(f"validation / test accuracy {_validation_test(results)}")
    for key, r in results["ours"].items():
        if r.get("pretrain_seconds"):
            lines.append(f"{key}: training time = pretraining {_fmt_s(r['pretrain_seconds'])} + fine-tuning "
                         f"{_fmt_s(r['finetune_seconds'])}")
        if "test_accuracy_encoder_alone" in r:
            lines.append(f"{key}: its parts alone on test: the encoder {r['test_accuracy_encoder_alone']:.2%}, "
                         f"the n-gram score {r['test_accuracy_ngram_score_alone']:.2%} (the model adds their logits)")
    cs = results.get("coldstart")
    if cs:
        lines.append(f"cold start (median of {cs['repeats']}): python -c 'import torch' "
                     f"{cs['import_torch_seconds']:.2f} s, sentiment predict \"…\" {cs['predict_seconds']:.2f} s "
                     f"(+{cs['predict_seconds'] - cs['import_torch_seconds']:.2f} s; target ≤ +1.0 s)")
    return lines


def render(results: dict) -> None:
    """Print the main table, the ratio table and the notes with rich."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=180)   # a file or CI log: keep each row on one line
    for title, (header, rows) in (
            (f"IMDB benchmark · {results['date']} · {results['hardware']}", main_table(results)),
            ("each config against the notebook loop and each peer, same run (config ÷ other)", ratio_table(results))):
        table = Table(title=title, title_justify="left")
        for col in header:
            text = col in ("system", "config", "against")
            table.add_column(col, justify="left" if text else "right", no_wrap=text)
        for row in rows:
            table.add_row(*row)
        console.print(table)
    for line in _notes(results):
        console.print(line, highlight=False)


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows)]


def markdown(results: dict) -> str:
    """The results as Markdown: the main table, the ratio table and the notes (what the README shows)."""
    lines = [f"Benchmark of {results['date']}, {results['hardware']}; `python -m bench`"
             + (" --quick" if results["quick"] else "") + ".", ""]
    lines += _md_table(*main_table(results))
    lines += ["", "Each config against the notebook loop and each peer, same run (config ÷ other):", ""]
    lines += _md_table(*ratio_table(results))
    lines += ["", *(f"{line}.  " if not line.endswith(".") else f"{line}  " for line in _notes(results))]
    return "\n".join(lines).rstrip() + "\n"


def sst5_rows(sst5: dict) -> list[tuple[str, ...]]:
    """The SST-5 table's rows: system, dev accuracy, test accuracy, test macro F1, ECE after / before the
    temperature, training time, and accuracy against the peer."""
    ours, peer = sst5["ours"], sst5["tfidf"]
    return [
        ("ours: configs/sst5.toml" + (f" ({ours['epochs_run']} ep.)"), f"{ours['validation_accuracy']:.2%}",
         f"{ours['test_accuracy']:.2%}", f"{ours['test_f1_macro']:.2%}",
         f"{ours['ece']:.2%} / {ours['ece_uncalibrated']:.2%} (T {ours['temperature']:.2f})",
         _fmt_s(ours["train_seconds"]), f"{(ours['test_accuracy'] - peer['test_accuracy']) * 100:+.2f} pt"),
        (f"TF-IDF 1-2-grams + LR (C {peer['C']:g}, chosen on dev)", f"{peer['validation_accuracy']:.2%}",
         f"{peer['test_accuracy']:.2%}", f"{peer['test_f1_macro']:.2%}", "–", _fmt_s(peer["train_seconds"]), "–"),
    ]


SST5_COLUMNS = ("system", "dev acc", "test acc", "test macro F1", "ECE after / before T", "train time", "acc − peer")


def render_sst5(results: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=170)
    table = Table(title=f"SST-5 (five classes) · {results['sst5']['data']}", title_justify="left")
    for col in SST5_COLUMNS:
        table.add_column(col, justify="left" if col == "system" else "right")
    for row in sst5_rows(results["sst5"]):
        table.add_row(*row)
    console.print(table)
    console.print("dev: SST-5's dev.csv (settings chosen on it); test scored once; ECE: 15 bins, on test",
                  highlight=False)


def sst5_markdown(results: dict) -> str:
    lines = ["", f"SST-5 (five classes, `{results['sst5']['data']}`), same run:", "",
             "| " + " | ".join(SST5_COLUMNS) + " |", "|---|" + "---:|" * (len(SST5_COLUMNS) - 1)]
    lines += ["| " + " | ".join(row) + " |" for row in sst5_rows(results["sst5"])]
    lines.append("")
    lines.append("Dev: SST-5's `dev.csv` (every setting chosen on it); test scored once; ECE with 15 bins, on test.")
    return "\n".join(lines) + "\n"
