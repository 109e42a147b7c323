"""The package's shape: no import cycles (imports inside functions included), no long functions."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "mathrl"
MAX_FUNCTION_LINES = 80


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str]) -> set[str]:
    """The mathrl modules `path` imports anywhere in its body (a package's submodule
    counts as the package's import only when it is no module of its own)."""
    here = module_name(path)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != here and name.startswith("mathrl"):
                found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {name: imports(path, set(files)) for name, path in files.items()}
    for name in graph:  # importing a.b runs a/__init__ first: that is no edge of a.b's own code
        graph[name].discard("mathrl")
    return graph


def imports_between(graph: dict[str, set[str]], importers: str, imported) -> set[str]:
    """Each `module -> dependency` of the graph from a module under `importers` to one that `imported(name)` says."""
    return {
        f"{module} -> {dep}"
        for module, deps in graph.items()
        if module.startswith(importers)
        for dep in deps
        if imported(dep)
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every elementary cycle's smallest rotation, found by depth-first search."""
    found = set()

    def visit(start, node, path):
        for nxt in graph.get(node, ()):
            if nxt == start:
                i = path.index(min(path))
                found.add(tuple(path[i:] + path[:i]))
            elif nxt not in path and nxt > start:
                visit(start, nxt, path + [nxt])

    for start in graph:
        visit(start, start, [start])
    return [list(c) for c in sorted(found)]


def test_the_import_graph_is_found():
    graph = import_graph()
    assert "mathrl.pipeline.launch" in graph["mathrl.pipeline.cli"]  # a lazy import inside cmd_launch
    assert "mathrl.pipeline.processes" in graph["mathrl.pipeline.forkserver"]


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_function_is_longer_than_80_lines():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} ({n} lines)")
    assert long == []


WINGS = ("engine", "pipeline", "analysis")
# What the analysis may import from the engine: torch-free at import (the stability monitor's rules, which it replays
# over imported logs; the carry probe's constants and per-position maths, which name the file a run writes).
ENGINE_PURE_HELPERS = {"mathrl.engine.monitor", "mathrl.engine.carry_probe"}


def test_the_package_is_three_wings_and_the_analysis_needs_no_engine():
    """Every module lives in a wing; the analysis imports nothing from the engine but its declared pure helpers (a
    lazy import inside a function counts), and importing every analysis module loads no torch."""
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert loose == [] and {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"} == set(WINGS)
    graph = import_graph()

    def engine(dep: str) -> bool:  # the engine but its pure helpers
        return dep.startswith("mathrl.engine") and dep not in ENGINE_PURE_HELPERS

    assert imports_between(graph, "mathrl.analysis", engine) == set()
    modules = sorted(m for m in graph if m.startswith("mathrl.analysis"))
    code = f"import importlib, sys; [importlib.import_module(m) for m in {modules!r}]; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    for helper in ENGINE_PURE_HELPERS:  # a pure helper stays pure: torch only inside its functions
        top = ast.parse((PACKAGE.parent / (helper.replace(".", "/") + ".py")).read_text()).body
        imported = {a.name for n in top if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module for n in top if isinstance(n, ast.ImportFrom) and n.module}
        assert not any(name == "torch" or name.startswith(("torch.", "mathrl.engine")) for name in imported), helper


STUDY_SIDE = (
    "mathrl.analysis.kit",
    "mathrl.analysis.study_inputs",
    "mathrl.analysis.figure_style",
    "mathrl.analysis.studies",
)


def test_the_measures_read_runs_not_studies():
    """A measure is a number about a run, whichever study reads it: no module of measures/ imports the studies or
    what only they use (their table plumbing, their inputs, their figures), so the registry loads without them."""
    assert imports_between(import_graph(), "mathrl.analysis.measures", lambda dep: dep.startswith(STUDY_SIDE)) == set()


MAX_STUDY_LINES = 2_000  # the study modules together, as the formatter lays them out


def test_the_studies_hold_the_documents_science_alone():
    """A study module keeps its report tables, figures and section; a number about a run is a measure
    (analysis/measures/), shared plumbing is kit's, figure_style's or study_inputs'. The studies together stay small."""
    sizes = {p.name: len(p.read_text().splitlines()) for p in sorted((PACKAGE / "analysis" / "studies").glob("*.py"))}
    assert sum(sizes.values()) <= MAX_STUDY_LINES, sizes


def test_no_two_modules_share_a_name():
    """A name says which module it is wherever it is read (a study of the mismatch is not the mismatch maths)."""
    names = [p.stem for p in PACKAGE.rglob("*.py") if p.stem not in ("__init__", "__main__")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


MAX_FORMATTER_ESCAPES = 20  # `# fmt: skip` or `# fmt: off` kept only on tables of numbers that read as tables


def test_the_formatter_owns_the_layout_and_the_length_cap_is_measured_on_its_layout():
    escapes = [
        f"{path.relative_to(PACKAGE.parent)}:{i}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if line.rstrip().endswith(("# fmt: skip", "# fmt: off"))
    ]
    assert len(escapes) <= MAX_FORMATTER_ESCAPES, escapes


def test_the_readers_of_results_take_their_paths_from_layout():
    """Where a result lives is stated once, in mathrl.pipeline.layout: no reader joins a results path by hand."""
    readers = [PACKAGE / "pipeline" / "cli.py"]
    readers += [
        PACKAGE / "analysis" / f"{m}.py" for m in ("results", "compare", "aggregate", "plots", "report", "study_inputs")
    ]
    readers += sorted((PACKAGE / "analysis" / "studies").glob("*.py"))
    by_hand = ['/ "runs"', '/ "summary.json"', '/ "metrics.csv"', '/ "snapshot.pt"', '/ "figures"', '/ "tables"',
               '/ "bandit"', '/ "sft"', '/ "gradvar"', '/ "logs"', '/ "benchmarks"', '/ "compare"']  # fmt: skip
    found = [f"{p.name}: {s}" for p in readers for s in by_hand if s in p.read_text()]
    assert not found, found


def test_every_name_the_scripts_and_benchmarks_import_from_mathrl_exists():
    """A script run by hand now and then still starts: each `from mathrl.X import name` it makes names
    something mathrl.X has (a module-level import, or one inside a function)."""
    import importlib

    missing = []
    for path in sorted([*(PACKAGE.parent / "scripts").glob("*.py"), *(PACKAGE.parent / "bench").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("mathrl"):
                module = importlib.import_module(node.module)
                missing += [f"{path.name}: {node.module}.{a.name}" for a in node.names if not has(module, a.name)]
    assert missing == []


def has(module, name: str) -> bool:
    """Whether `from module import name` finds something: an attribute or a submodule."""
    import importlib.util

    if hasattr(module, name):
        return True
    return hasattr(module, "__path__") and importlib.util.find_spec(f"{module.__name__}.{name}") is not None
