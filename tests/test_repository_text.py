"""The repository speaks of the project alone: code, config, tests and docs explain the code and
the science, never how the work on it was organised (issue numbers, who did what, work sessions).

Citing another project's bug tracker ("torch issue #135712") is a reference, not history, and
pytest's sessions (`scope="session"`, a test session) are pytest's own word."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = [
    "mathrl",
    "config",
    "tests",
    "docs",
    "scripts",
    "bench",
    "rules",
    "report",
    "profiles",
    "README.md",
    "Snakefile",
    "Makefile",
    "pyproject.toml",
    "dvc.yaml",
    ".dvcignore",
]
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".smk", ".j2", ".toml", ".txt", ".cfg", ""}

# Another project's tracker, cited as a source: removed from a line before it is judged.
UPSTREAM = re.compile(
    r"\b(verl|trl|openrlhf|torch|pytorch|open-instruct|snakemake|dvc|wandb|github|jinja|pandas|numpy|scipy)('s)?"
    r"\s+(issues?|prs?|pull requests?)\s*#?\d+",
    re.IGNORECASE,
)
HISTORY = re.compile(
    r"\bissues?\s*#?\d+"  # an issue by number, with or without "#"
    r"|(?<![\w&#])#\d{1,4}\b"  # a bare "#" and number (not an HTML entity such as &#39;)
    r"|\bissue's\b"  # the table
    r"|\bhelpers?\s+\d+|\bhelper\s+\d+'s|\banother helper\b|\bother helpers\b"
    r"|\bthe lead\b|\blead's\b"
    r"|\b(first|second|third|fourth|this|that|the|later|earlier|previous|next|a later|an earlier)\s+session('s)?\b"
    r"|\bbranch\s+i\d+\b|\bdone-when\b|\buntil merged\b|\bwhen merging\b|\blent (device|machine|gpu|h100|h200)\b",
    re.IGNORECASE,
)
# pytest's own sessions, and a console session in the docs (commands and their output).
PYTEST = re.compile(r"pytest|scope=|session's config|test session|per session|a session:", re.IGNORECASE)


def history_references(line: str) -> list[str]:
    """The phrases of `line` that speak of how the project was made rather than of the project."""
    if PYTEST.search(line):
        return []
    return [m.group(0) for m in HISTORY.finditer(UPSTREAM.sub("", line))]


def scanned_files() -> list[Path]:
    files = []
    for name in SCANNED:
        path = ROOT / name
        candidates = [path] if path.is_file() else sorted(path.rglob("*")) if path.is_dir() else []
        for f in candidates:
            if f.is_file() and f.suffix in SUFFIXES and "__pycache__" not in f.parts and f != Path(__file__).resolve():
                files.append(f)
    return files


def test_the_scan_reads_the_code_the_docs_and_the_config():
    names = {f.relative_to(ROOT).as_posix() for f in scanned_files()}
    assert {
        "README.md",
        "mathrl/engine/trainer.py",
        "config/config.yaml",
        "docs/ARCHITECTURE.md",
        "tests/conftest.py",
    } <= names


def test_the_matcher_flags_history_and_passes_the_project():
    flagged = [
        "the analyses of issue 3 as pure functions",
        "a remedy for #3 here",
        "another helper's jobs ran meanwhile",
        "Helper 2's branch removes this",
        "the lead removes it",
        "measured again in the next session",
        "measured on branch i3",
        "the budget of the done-when",
    ]
    passed = [
        "torchrun's agent keeps its TCP store across restarts (torch issue #135712)",
        '@pytest.fixture(scope="session")',
        "built once per test session",
        "process helpers of the launcher and the fork server",
        "the drawing helpers live in the kit",
        "the unclipped (pessimistic) branch of the surrogate",
        "&lt;script&gt;alert(&#39;x&#39;)",
        "Start `cmd` in a session of its own",
    ]
    assert [line for line in flagged if not history_references(line)] == []
    assert {line: history_references(line) for line in passed if history_references(line)} == {}


def test_the_repository_speaks_of_the_project_alone():
    found = []
    for path in scanned_files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if refs := history_references(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {refs} in {line.strip()[:100]!r}")
    assert found == []
