"""The package's layers (bench/imports.py, docs/development.md): no cycle, and no import up the layers."""

from __future__ import annotations

from bench.imports import LAYER_ORDER, import_graph, layer_graph, main, upward_edges
from bench.imports import ROOT


def test_the_package_imports_only_down_its_layers(capsys):
    assert main([]) == 0, capsys.readouterr().out


def test_the_library_never_imports_the_command_line():
    graph = import_graph(ROOT / "sentiment_cli")
    library = [m for m in graph if m.split(".")[1:2] not in (["cli"], ["__main__"])]
    assert [m for m in library if any(t.startswith("sentiment_cli.cli") for t in graph[m])] == []


def _package(tmp_path, files: dict[str, str]):
    pkg = tmp_path / "sentiment_cli"
    for name, text in files.items():
        path = pkg / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return pkg


def test_an_import_up_the_layers_is_found_even_inside_a_function(tmp_path):
    pkg = _package(tmp_path, {
        "__init__.py": "",
        "config.py": "",
        "cli/__init__.py": "from .. import config\n",
        "cli/progress.py": "",
        "api.py": "def f():\n    from .cli.progress import x\n",
    })
    layers, _ = layer_graph(import_graph(pkg))
    up, unplaced = upward_edges(layers)
    assert up == [("api", "cli")] and unplaced == []


def test_a_layer_the_order_does_not_place_is_reported(tmp_path):
    layers, _ = layer_graph(import_graph(_package(tmp_path, {"__init__.py": "", "newthing.py": ""})))
    assert upward_edges(layers)[1] == ["newthing"]
    assert "newthing" not in LAYER_ORDER
