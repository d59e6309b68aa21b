"""One place per job (issue 53): the two-class labels, the decision rule, the split rule and the text check, the
Arrow cache's reader, and the benchmarks' drivers are each defined once and used by every caller."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sentiment_cli
from sentiment_cli.data import batches, columns
from sentiment_cli.data.labels import LABELS, SENTIMENT_ALIASES
from sentiment_cli.errors import DataError, UsageError

from .conftest import ROOT

PACKAGE = Path(sentiment_cli.__file__).parent
DATA = Path(__file__).parent / "data"


def _literal_label_sets(path: Path) -> list[int]:
    """Lines of ``path`` holding a tuple, list or set literal that spells ``"negative"`` or ``"positive"``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            values = {e.value for e in node.elts if isinstance(e, ast.Constant)}
            if values & {"negative", "positive"}:
                found.append(node.lineno)
    return found


def test_two_class_labels_are_spelled_once():
    spelled = {str(p.relative_to(PACKAGE)): lines for p in PACKAGE.rglob("*.py") if (lines := _literal_label_sets(p))}
    assert list(spelled) == ["data/labels.py"], spelled
    toml = (PACKAGE / "behaviour" / "sentiment.toml").read_text(encoding="utf-8")
    assert not any(line.startswith(("labels", "label_aliases")) for line in toml.splitlines())
    from sentiment_cli.behaviour.suite import builtin_suite
    from sentiment_cli.training.augment import NEGATIVE_NAMES, POSITIVE_NAMES

    suite = builtin_suite()
    assert suite.labels == LABELS and suite.label_aliases == SENTIMENT_ALIASES
    # the augmentation's names are the labels and their aliases, read from data/labels.py, not spelled again
    for names, label in zip((NEGATIVE_NAMES, POSITIVE_NAMES), LABELS):
        assert names[0] == label and set(names[1:]) == set(SENTIMENT_ALIASES[label])


def test_the_decision_rule_and_its_fit_live_in_inference():
    from sentiment_cli.evaluation import multilabel as metrics
    from sentiment_cli.inference import multilabel as rule

    for name in ("fit_decision", "fit_thresholds", "fit_label_temperatures", "binary_nll", "Decision", "decide"):
        assert hasattr(rule, name) and not hasattr(metrics, name), name   # inference defines them, once
    defined = {n.name for n in ast.parse((PACKAGE / "evaluation" / "multilabel.py").read_text()).body
               if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert not defined & {"fit_decision", "fit_thresholds", "fit_label_temperatures", "binary_nll"}


def test_ray_takes_the_split_rule_and_the_text_check_of_predict_data(tmp_path):
    import pyarrow as pa

    from sentiment_cli.inference import ray_predict

    assert ray_predict.choose_split is batches.choose_split
    assert ray_predict.find_text_column is columns.find_text_column
    hub = DATA / "imdb_small"
    said = []
    for read in (ray_predict.find_input, batches.open_split):
        with pytest.raises(UsageError) as several:
            read(str(hub))
        with pytest.raises(DataError) as missing:
            read(str(hub), "dev")
        said.append((str(several.value), str(missing.value)))
    assert said[0] == said[1]
    schema = pa.schema([("text", pa.int64())])
    with pytest.raises(DataError, match="x.csv: column 'text' holds int64, not text"):
        ray_predict.text_column_of(schema, "", "x.csv")


def test_one_reader_of_the_arrow_cache():
    for module in ("batches.py", "text_column.py"):
        text = (PACKAGE / "data" / module).read_text(encoding="utf-8")
        assert "_indices" not in text and "\"filename\"" not in text and "ipc.open_stream" not in text, module


def test_the_suite_and_multi_label_benchmarks_do_not_import_each_other():
    def imported(name: str) -> set[str]:
        tree = ast.parse((ROOT / "bench" / f"{name}.py").read_text(encoding="utf-8"))
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
        return found

    assert "bench.suite" not in imported("multilabel")
    assert "bench.multilabel" in imported("suite")   # the one direction: the suite runs the multi-label sets


def test_one_table_writer(tmp_path, monkeypatch):
    from sentiment_cli import arrow_output, outputs

    assert not hasattr(outputs, "write_table")   # rows and Arrow batches: one writer
    used = []
    real = arrow_output.ArrowStreamWriter.write_rows
    monkeypatch.setattr(arrow_output.ArrowStreamWriter, "write_rows",
                        lambda self, columns, rows: used.append(self.format) or real(self, columns, rows))
    rows = [{"text": 'a "quoted", line\nbreak', "p": 0.5}, {"text": "ü", "p": None}]
    arrow_output.write_table(tmp_path / "t.csv", ["text", "p"], rows)
    arrow_output.write_table(tmp_path / "t.jsonl", ["text", "p"], rows)
    assert used == [".csv", ".jsonl"]
    assert (tmp_path / "t.csv").read_bytes() == b'text,p\r\n"a ""quoted"", line\nbreak",0.5\r\n\xc3\xbc,\r\n'
    assert (tmp_path / "t.jsonl").read_text(encoding="utf-8").splitlines()[1] == '{"text": "ü", "p": null}'
    with pytest.raises(UsageError, match="write .csv or .jsonl"):
        arrow_output.write_table(tmp_path / "t.parquet", ["text"], rows)


def test_each_command_renders_its_own_output():
    from sentiment_cli.cli import audit, check, deploy, evaluate, info, predict, render, suggest, train

    shared = {n.name for n in ast.parse(Path(render.__file__).read_text()).body if isinstance(n, ast.FunctionDef)}
    assert not {n for n in shared if n.startswith("render_")}, shared
    owners = {train: "render_train_summary", evaluate: "render_eval", predict: "render_explanation", info: "render_card",
              deploy: "render_export", suggest: "render_suggestions", audit: "render_audit", check: "render_check"}
    for module, name in owners.items():
        assert getattr(module, name).__module__ == module.__name__
