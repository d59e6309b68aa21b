"""The model card as display text: its facts in sections of ``(key, value)`` lines and its results as rows.

Shared by the checkpoint's ``README.md`` (``card/readme.py``) and the CLI's ``sentiment info``, so both say
the same; from :func:`~sentiment_cli.card.facts.model_card`'s dict alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import objectives
from ..data.splits import HOLD_OUT_WAYS, hold_out_way
from ..toml_writer import toml_value
from ..wording import plural
from .facts import UNKNOWN
from ..data.tokenizer_kind import TokenizerKind


def class_balance_text(counts: dict[str, int]) -> str:
    """``"neg 283 (52.4%), pos 257 (47.6%)"``: examples per class and their share."""
    total = sum(counts.values())
    return ", ".join(f"{name} {n:,} ({n / total:.1%})" if total else f"{name} {n:,}" for name, n in counts.items())


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else "–"


def _num(value: Any, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, (int, float)) and not isinstance(value, bool) else "–"


RESULT_COLUMNS = ("split", "texts", "accuracy", "macro F1", "loss", "from")


def card_results(card: dict[str, Any]) -> list[tuple[str, ...]]:
    """The card's metrics as display rows, one per split, in :data:`RESULT_COLUMNS` order."""
    rows = []
    for split, r in card["metrics"].items():
        src = r["source"]
        if r.get("data") and r["data"] != card["data"]["source"]:
            src += f", data {r['data']}"
        rows.append((split, _count(r.get("num_examples")), _num(r.get("accuracy"), ".2%"),
                     _num(r.get("f1_macro"), ".4f"), _num(r.get("loss"), ".4f"), src))
    return rows


def card_sections(card: dict[str, Any]) -> list[tuple[str, list[tuple[str, str]]]]:
    """The card's facts as display text: ``[(section, [(key, value), ...]), ...]``.

    Shared by :func:`card_markdown` and the CLI's ``sentiment info``, so both say the same.

    Args:
        card: :func:`model_card`'s dict.
    """
    rules = [(rule["key"], f"{toml_value(rule['value'])}: {rule['reason']}") for rule in card.get("data_rules") or []]
    search = card.get("search")
    return [("Model", _model_facts(card)), ("Training data", _data_facts(card)), ("Training", _training_facts(card)),
            *([("Settings chosen from the data", rules)] if rules else []),
            *([("Search on the validation split", search_facts(search))] if search else []),
            *_calibration_sections(card),
            *([("Behaviour (built-in suite, test half)", behaviour_facts(card["behaviour"]))]
              if card.get("behaviour") else [])]


def behaviour_facts(record: dict[str, Any]) -> list[tuple[str, str]]:
    """The built-in behavioural suite's record (``metrics.json``'s ``"behaviour"``) as facts: the mean failure
    rate over tests, then each capability's, with its worst test."""
    facts = [("mean failure rate", f"{_num(record.get('mean_failure_rate'), '.1%')} over "
                                   f"{len(record.get('tests') or [])} tests ({_count(record.get('cases'))} cases; "
                                   f"`sentiment check` for the examples)")]
    for cap in record.get("capabilities") or []:
        tests = [t for t in record.get("tests") or [] if t.get("capability") == cap.get("capability")]
        worst = max(tests, key=lambda t: t.get("failure_rate") or 0.0, default=None)
        detail = f"; worst: {worst['name']} {_num(worst.get('failure_rate'), '.1%')}" if worst and len(tests) > 1 else ""
        shifts = [t for t in tests if t.get("mean_shift") is not None]
        if shifts:   # INV: how far the swaps move the prediction, not only whether they flip it
            most = max(shifts, key=lambda t: t["mean_shift"])
            detail += (f"; the perturbations move a probability by {_num(float(np.mean([t['mean_shift'] for t in shifts])), '.1%')} "
                       f"on average (most: {most['name']} {_num(most['mean_shift'], '.1%')})")
        facts.append((str(cap.get("capability")), f"{_num(cap.get('failure_rate'), '.1%')} ({cap.get('tests')} "
                                                  f"tests{detail})"))
    return facts


def search_facts(search: dict[str, Any]) -> list[tuple[str, str]]:
    """The search's record (``metrics.json``'s ``"search"``) as facts: the choice (and why, when the one-standard-error
    rule made it), the chosen against the linear peers' representations (:func:`peer_phrase`: "at or above every
    linear peer on validation" only when that holds), the budget, the metric, then a line per candidate (validation
    accuracy, log-loss, seconds, or what became of it)."""
    by = search.get("chosen_by") or {}
    facts = [("chosen", str(search.get("chosen", UNKNOWN)) + (f" ({by['why']})" if by.get("rule") == "one standard "
                                                             "error" and isinstance(by.get("why"), str) else "")),
             ("budget", f"{_num(search.get('budget_seconds'), ',.0f')} s; the search took "
                        f"{_num(search.get('seconds'), ',.0f')} s"),
             ("metric", str(search.get("metric", UNKNOWN)))]
    missing = encoder_missing(search)
    if missing:
        facts.insert(1, ("no encoder", missing))
    if isinstance(search.get("peers"), dict):
        facts.insert(1, ("linear peers", peer_phrase(search["peers"])))
    for c in search.get("candidates") or []:
        if c.get("status") == "complete":
            text = (f"{_num(c.get('validation_accuracy'), '.2%')}, log-loss {_num(c.get('validation_nll'), '.4f')}, "
                    f"{_num(c.get('seconds'), ',.1f')} s" + (f" ({c['ended']})" if c.get("ended") and
                                                             c["ended"] != "its schedule" else ""))
        else:
            text = f"{c.get('status')} ({_num(c.get('seconds'), ',.0f')} s)"
        settings = settings_phrase(c.get("settings") or {})
        facts.append((str(c.get("name")), f"{text}" + (f"; {settings}" if settings and c.get("kind") == "encoder"
                                                        else "")))
    return facts


def peer_phrase(record: dict[str, Any]) -> str:
    """The search's linear peers' record (``metrics.json``'s ``"search"`` ``"peers"``,
    :func:`~sentiment_cli.training.ngram_peers.peer_record`) in a phrase, for the search's stage line and the card:
    ``at or above every linear peer on validation: the best, TF-IDF character 2-4-grams + LR (n-gram alone, LR C
    10, ...), log-loss 0.3468 against the chosen's 0.3446``; "at or above the linear peers fitted" when a peer's
    representation was not fitted (and why, after it); "below the best linear peer" when the chosen's log-loss is
    higher (the one-standard-error rule may keep an encoder so)."""
    peers = record.get("peers") if isinstance(record.get("peers"), dict) else {}
    missing = [f"{p.get('peer', UNKNOWN)} ({p['not_fitted']})" for p in peers.values()
               if isinstance(p, dict) and "not_fitted" in p]
    best = record.get("best")
    if not isinstance(best, dict):
        return "no linear peer's representation was fitted" + (": " + "; ".join(missing) if missing else "")
    if record.get("at_or_above_every_peer") is True:
        head = "at or above every linear peer on validation"
    elif record.get("at_or_above_fitted_peers") is True:
        head = "at or above the linear peers fitted on validation"
    else:
        head = "below the best linear peer on validation"
    text = (f"{head}: the best, {best.get('peer', UNKNOWN)} ({best.get('candidate', UNKNOWN)}), log-loss "
            f"{_num(best.get('validation_nll'), '.4f')} against the chosen's {_num(record.get('chosen_nll'), '.4f')}")
    return text + ("; not fitted: " + "; ".join(missing) if missing else "")


def encoder_missing(search: dict[str, Any]) -> str | None:
    """What the user got when the search's checkpoint is the n-gram score alone because no encoder trial finished
    (``metrics.json``'s ``"search"``), with the ``--time-budget`` that would have fitted one
    (``encoder_budget_hint``); ``None`` when an encoder trial finished (the n-gram score alone then won on
    validation) or the n-gram score was not chosen."""
    candidates = search.get("candidates") or []
    chosen = next((c for c in candidates if c.get("name") == search.get("chosen")), None)
    encoders = [c for c in candidates if c.get("kind") == "encoder"]
    if chosen is None or chosen.get("kind") != "ngram" or any(c.get("status") == "complete" for c in encoders):
        return None
    hint = search.get("encoder_budget_hint")
    return ("no encoder trial finished within the time budget: this checkpoint is the n-gram score alone (a linear "
            "model over hashed n-grams, no encoder)" + (f"; --time-budget {hint} would have fitted an encoder"
                                                         if hint else "; raise --time-budget"))


def settings_phrase(settings: dict[str, Any]) -> str:
    """A search candidate's ``{"section.key": value}`` in a phrase: ``lr 0.002, dropout 0.1, epochs 10`` (the
    search's progress line, its table in ``train``'s summary, the card)."""
    return ", ".join(f"{key.split('.')[-1]} {value:g}" if isinstance(value, float) else f"{key.split('.')[-1]} {value}"
                     for key, value in settings.items())


def _model_facts(card: dict[str, Any]) -> list[tuple[str, str]]:
    """The "Model" section: architecture, parameter counts, vocabulary, input length."""
    m, d, p = card["config"]["model"], card["config"]["data"], card["parameters"]
    norm = "pre-norm" if m["norm_first"] else "post-norm"
    layers = plural(m["n_layers"], f"{norm} encoder layer")
    truncation = (f"first {d['max_length']} tokens" if d["truncation"] == "head" else
                  f"{d['max_length']} tokens, head and tail ({d['head_fraction']:.0%} from the start)")
    sites = [f"{name} {m[key]:g}" for name, key in (("feed-forward hidden layer", "activation_dropout"),
                                                     ("attention", "attention_dropout"),
                                                     ("before the head", "head_dropout")) if m[key]]
    dropout = ", ".join([f"dropout {m['dropout']:g} (embeddings, residuals)"] + sites)
    architecture = (f"{layers}, d_model {m['d_model']}, {m['n_heads']} heads, feed-forward {m['d_ff']} "
                    f"({m['activation']}), {dropout}; masked max-pool; dense head"
                    + (f"; plus {card['ngram_score']}" if card.get("ngram_score") else ""))
    if card["config"]["training"].get("epochs") == 0:   # [training] epochs = 0: the n-gram score alone
        architecture = (f"the n-gram score alone: {card.get('ngram_score') or 'an n-gram score'} (no encoder "
                        f"epoch: the dense head is zero, so the encoder ({layers}, d_model {m['d_model']}) adds "
                        "nothing to the logits)")
    return [
        ("architecture", architecture),
        ("parameters", f"{p['total']:,} ({p['embedding']:,} embedding, {p['non_embedding']:,} non-embedding)"),
        ("vocabulary", _vocabulary(card, d)
                       + (f"; {'word' if card.get('tokenizer', 'word') == 'word' else 'token'} bigrams hashed into "
                          f"{m['bigram_buckets']:,} buckets" if m.get("bigram_buckets")
                          else "")),
        ("input", truncation),
    ] + ([("size", _size(card))] if card.get("size_bytes") else []) + (
        [("compressed", _compressed(card["compression"]))] if card.get("compression") else [])


def _size(card: dict[str, Any]) -> str:
    """The size line: the checkpoint's files, and ``trainer_state/`` when there is one."""
    line = f"{card['size_bytes'] / 2**20:,.1f} MiB on disk"
    if card.get("state_bytes"):
        line += (f"; trainer_state/ {card['state_bytes'] / 2**20:,.1f} MiB more, only for `sentiment train --resume` "
                 "(leave it out when you ship the model)")
    return line


def _compressed(record: dict[str, Any]) -> str:
    """The compression line (``config.json``'s record, ``model/compress.py``): the share of each table's rows kept
    and how the values are stored."""
    keep = record.get("keep") or {}
    shares = ", ".join(f"{name} {keep[key]:.0%}" for key, name in (("words", "words"), ("bigrams", "word bigrams"),
                                                                   ("ngrams", "n-gram weights")) if key in keep)
    values = "int8 values, a power-of-two scale a row" if record.get("bits") == 8 else "float values"
    return (f"rows kept (the most frequent words, a pruned one reads <unk>; the hashed rows by norm): {shares}; "
            f"{values}")


def _vocabulary(card: dict[str, Any], d: dict[str, Any]) -> str:
    """The vocabulary line: its size and the units it reads (``[data] tokenizer``)."""
    try:
        kind = TokenizerKind(card.get("tokenizer", "word"))
    except ValueError:   # a card of another kind than this tool builds: its name as it is
        return f"{card['vocab_size']:,} tokens ({card.get('tokenizer')})"
    return kind.vocabulary_phrase(card["vocab_size"], d["pre_tokenizer"])


def _labels_text(card: dict[str, Any]) -> str:
    """The labels line: ``N classes: a, b``; or a multi-label model's labels, how they were read, and the
    training texts without a label."""
    data, names = card["data"], ", ".join(card["labels"])
    if not data.get("multi_label"):
        return f"{len(card['labels'])} classes: {names}"
    none = f"; {data.get('unlabelled_rows', 0):,} training texts carry none" if data.get("unlabelled_rows") else ""
    reading = (data.get("reading") or "").removeprefix("multi-label: ")
    return f"{len(card['labels'])} labels, several per text ({reading or 'multi-label'}{none}): {names}"


def _data_facts(card: dict[str, Any]) -> list[tuple[str, str]]:
    """The "Training data" section: source, labels, review counts, fingerprint, class balance."""
    d, data = card["config"]["data"], card["data"]
    return [
        ("source", str(data["source"])),
        *([] if card.get("kind") == "pretrained" else
          [("labels", _labels_text(card))]),
        ("training texts", _count(data["train_examples"]) + (
            f", and {2 * data['negation_augment']:,} sentences and their negations by rule "
            f"({data['negation_augment']:,} pairs, negation_augment)"
            if data.get("negation_augment") else "")),
        ("validation texts", _validation_text(data, d, card["training"]["seed"]) if d["validation_fraction"] > 0
         else "none (validation_fraction 0: trained on all of train)"),
        ("fingerprint", str(data["fingerprint"])),
        *((f"class balance, {split}", class_balance_text(counts))
          for split, counts in card.get("class_balance", {}).items()),
    ]


def _training_facts(card: dict[str, Any]) -> list[tuple[str, str]]:
    """The "Training" section: the encoder it started from, epochs, optimizer, class weights (when balanced),
    device, time, seed, versions."""
    t = card["training"]
    epochs, optimizer = _pretraining_text(card) if card.get("kind") == "pretrained" else _fine_tuning_text(card)
    start = []
    if card.get("pretrained"):
        pre = card["pretrained"]
        start = [("initialised from", f"{pre.get('from')} ({pre.get('epochs')} pretraining epochs, "
                                      f"{_num(pre.get('wall_time_seconds'), '.0f')} s)")]
    return [
        *start,
        ("epochs", epochs),
        ("optimizer", optimizer),
        *_class_weight_facts(t.get("class_weights")),
        *_refit_facts(t.get("refit")),
        ("device", t["device"] + (f" ({t['device_name']})" if t.get("device_name") else "")),
        ("wall time", _num(t["wall_time_seconds"], ".0f") + " s" if t["wall_time_seconds"] is not None else UNKNOWN),
        ("seed", str(t["seed"])),
        ("created", str(card["created"])),
        ("versions", ", ".join(f"{k} {v}" for k, v in card["versions"].items()) or UNKNOWN),
    ]


def _refit_facts(refit: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The "refit" fact of a run trained again on every row after its hold-out (``training/refit.py``)."""
    if not refit:
        return []
    acc = refit.get("best_validation_accuracy")
    seen = f" (validation accuracy {acc:.2%})" if isinstance(acc, (int, float)) else ""
    held, epochs = _count(refit.get("validation_examples")), refit.get("best_epoch")
    return [("refit", f"these weights were trained again on every training row, the {held} held-out rows "
                      f"included, for {epochs} epoch{'' if epochs == 1 else 's'}, the count that was best on "
                      f"them{seen}; the calibration below was fitted on the held-out rows before")]


def _class_weight_facts(weights: dict[str, float] | None) -> list[tuple[str, str]]:
    """The "class weights" fact of a run trained with ``class_weight = "balanced"``; none otherwise."""
    if not weights:
        return []
    return [("class weights", "balanced, n / (classes × count) (scikit-learn's heuristic): "
                              + ", ".join(f"{name} {w:.3g}" for name, w in weights.items()))]


def _fine_tuning_text(card: dict[str, Any]) -> tuple[str, str]:
    """A classifier's ``(epochs, optimizer)`` facts: epochs run and the best, the optimizer and its regularisation."""
    t, tr = card["training"], card["config"]["training"]
    validated = card["config"]["data"]["validation_fraction"] > 0
    epochs = f"{t['epochs']} of {t['epochs_planned']}, " + (f"best epoch {t['best_epoch']}" if validated
                                                            else "the last kept (no validation)")
    if t["stopped_early"]:
        epochs += " (stopped early)"
    scale = tr.get("embedding_lr_scale", 1.0)
    embedding = f", token embedding {tr['lr'] * scale:g}" if scale != 1.0 else ""
    optimizer = (f"AdamW, lr {tr['lr']:g}{embedding} ({tr['schedule']} schedule), weight decay "
                 f"{tr['weight_decay']:g}, batch {tr['batch_size']}")
    regularisation = [f"{name} {tr[key]:g}" for name, key in (
        ("word dropout", "token_dropout"), ("label smoothing", "label_smoothing"),
        ("adversarial training (Miyato et al. 2017), epsilon", "adversarial_epsilon")) if tr.get(key)]
    if tr.get("adversarial_epsilon") and tr.get("adversarial_max_length"):
        regularisation[-1] += f" (batches of at most {tr['adversarial_max_length']} tokens)"
    if tr.get("distill_reviews"):
        teacher = card.get("teacher") or "an n-gram model over hashed token 1-3-grams"
        regularisation.append(f"distillation (Hinton et al. 2015) from a teacher, {teacher}, on "
                              f"{tr['distill_reviews']:,} unlabelled texts per epoch, weight {tr['distill_weight']:g}")
    if regularisation:
        optimizer += "; " + ", ".join(regularisation)
    return epochs, optimizer


def _pretraining_text(card: dict[str, Any]) -> tuple[str, str]:
    """A pretrained encoder's ``(epochs, optimizer)`` facts: word2vec or masked-language-model pretraining."""
    pre = card["config"]["pretrain"]
    try:
        what, optimizer = objectives.objective(pre["objective"]).describe(pre)   # its words: objectives/
    except KeyError:   # a folder from a version that knows another objective
        what, optimizer = f"{pre['objective']} pretraining", UNKNOWN
    epochs = f"{card['training']['epochs']} of {pre['epochs']} of {what} on {pre['splits']} (classifier head untrained)"
    return epochs, optimizer


def _calibration_sections(card: dict[str, Any]) -> list[tuple[str, list[tuple[str, str]]]]:
    """The "Calibration" section (the temperature, ECE by split) of a classifier's card; none for an encoder."""
    cal = card.get("calibration")
    if not cal or card.get("kind") == "pretrained":
        return []
    how = ("fitted on the validation split at the end of training (Guo et al. 2017)" if cal["fitted"]
           else "none fitted (no validation split, or trained before temperatures were fitted)")
    return [("Calibration", [
        ("temperature", f"{cal['temperature']:.4g}: probabilities are softmax(logits / T); {how}"),
        *((("n-gram score's weight", f"{cal['ngram_scale']:g} (the logits are the encoder's + {cal['ngram_scale']:g} "
            "x the score's), chosen on the validation split from 1 to 5 by the NLL after the temperature"),)
          if "ngram_scale" in cal else ()),
        *((f"ECE, {split}", f"{r['ece']:.2%} with the temperature, {_num(r.get('ece_uncalibrated'), '.2%')} "
                            f"without (15 bins)") for split, r in cal["ece"].items()),
    ])]


def _validation_text(data: dict[str, Any], d: dict[str, Any], seed: int) -> str:
    if data.get("validation_from"):
        return f"{_count(data['validation_examples'])} (the source's own validation split: {data['validation_from']})"
    split = d.get("validation_split") if d.get("validation_split") in HOLD_OUT_WAYS else "random"
    how = hold_out_way(split, bool(data.get("multi_label")))
    drawn = "" if split == "last" else f", seed {seed}"
    return f"{_count(data['validation_examples'])} ({d['validation_fraction']:.0%} of train, {how}{drawn})"
