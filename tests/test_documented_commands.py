"""Every command the README, the user guide (docs/guide/), profiles/README.md, the Snakefile
header and the config headers show runs as written: Snakemake and make commands as dry runs
(`-n`), `dvc repro` with `--dry`, `mathrl` commands through the real parser and config (a run's
settings resolved, `launch --dry-run`), and the docs' example error is the real one."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mathrl.pipeline.cli import build_parser, main
from tests.conftest import ROOT

DOCS = [
    "README.md",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "guide").glob("*.md")),
    "profiles/README.md",
]
HEADERS = ["Snakefile", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "config").glob("*.yaml"))]
PROGRAMS = ("snakemake", "mathrl", "dvc", "make", "torchrun")
# Placeholders the docs use, and what stands in for them here.
PLACEHOLDERS = {
    "RUN_ID": "batch__b64__s0",
    "N": "1",
    "...": "--run-id docs",
    "[--task add]": "--task add",
    "[--warmup K]": "--warmup 0",
}


def _starts_a_command(text: str) -> bool:
    words = text.split()
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # VAR=value prefixes
        words = words[1:]
    return bool(words) and words[0] in PROGRAMS


def documented_commands() -> list[tuple[str, str]]:
    """(where, command) for each command shown: code lines and code spans in the Markdown
    files, `#   command   description` lines in the headers."""
    found = []
    for name in DOCS:
        text = (ROOT / name).read_text()
        blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
        for block in blocks:
            lines = [line.strip() for line in block.splitlines()]
            if any(line.startswith("$ ") for line in lines):  # a session: commands and their output
                lines = [line[2:] for line in lines if line.startswith("$ ")]
            for line in lines:
                line = re.sub(r"\s+#.*$", "", line)
                if _starts_a_command(line):
                    found.append((name, line))
        outside = re.sub(r"```.*?```", "", text, flags=re.S)
        for span in re.findall(r"`([^`]+)`", outside):  # a span may wrap onto the next line
            span = " ".join(span.split())
            if _starts_a_command(span) and len(span.split()) > 1:
                found.append((name, span))
    for name in HEADERS:
        for line in (ROOT / name).read_text().splitlines():
            if not line.startswith("#"):
                break
            body = re.split(r"\s{2,}", line.lstrip("#").strip())[0]
            if line.startswith("#  ") and _starts_a_command(body):  # an indented command line
                found.append((name, body))
    return found


def test_the_docs_show_the_commands_this_test_checks():
    assert "docs/guide/running.md" in DOCS and "docs/guide/dvc.md" in DOCS
    commands = [c for _, c in documented_commands()]
    assert any(c.startswith("snakemake report --cores 8 --resources gpu=4") for c in commands)
    assert "dvc repro --force --single-item report" in commands
    assert "snakemake report --cores 8 --configfile config/full.yaml --resources gpu=4" in commands
    assert any("profiles/slurm" in c for c in commands) and "mathrl train algorithm=sarsa" in commands


@pytest.fixture(scope="module")
def workflow_copy(tmp_path_factory) -> Path:
    """The workflow files in a directory of their own, so that dry runs leave no .snakemake here."""
    dst = tmp_path_factory.mktemp("docs_workflow")
    for name in ("Snakefile", "rules", "config", "profiles", "report", "Makefile", "scripts", "pyproject.toml"):
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy2)(ROOT / name, dst / name)
    os.symlink(ROOT / ".venv", dst / ".venv")
    return dst


def substitute(command: str) -> str:
    for placeholder, value in PLACEHOLDERS.items():
        command = re.sub(rf"(?<![\w-]){re.escape(placeholder)}(?![\w-])", value, command)
    return command


def split(command: str) -> tuple[dict, list[str]]:
    words = shlex.split(substitute(command))
    env = {}
    while re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    return env, words


def check_mathrl(args: list[str]) -> None:
    """Parse as `mathrl` does and load the config; resolve a run's settings; launch dry."""
    from mathrl.pipeline.cli import _load, resolve_run

    parsed = build_parser().parse_args(args)  # exits 2 on a bad flag
    if parsed.command == "launch":  # on a machine that shows the GPUs it asks for
        os.environ["MATHRL_FAKE_GPUS"] = str(max(parsed.gpus or 0, 1))
        try:
            assert main([*args[:1], "--dry-run", *args[1:]]) == 0
        finally:
            del os.environ["MATHRL_FAKE_GPUS"]
    elif parsed.command == "train":
        for run in parsed.run or [None]:
            resolve_run(_load(parsed), run, parsed.run_id, parsed.overrides)
    elif parsed.command == "dvc-yaml":
        return
    elif parsed.command in ("runs",):
        assert main(args) == 0
    else:
        _load(parsed)


def distinct_commands() -> list[tuple[str, str]]:
    """(where, command) once per command: a command shown in several places runs once, `where`
    naming every place (README.md, Snakefile)."""
    places: dict[str, list[str]] = {}
    for where, command in documented_commands():
        places.setdefault(command, [])
        if where not in places[command]:
            places[command].append(where)
    return [(", ".join(wheres), command) for command, wheres in places.items()]


def test_a_command_shown_twice_runs_once():
    commands = [c for _, c in distinct_commands()]
    assert len(commands) == len(set(commands)) and set(commands) == {c for _, c in documented_commands()}


@pytest.mark.parametrize(
    ("where", "command"), distinct_commands(), ids=lambda v: v if "/" not in v and "." not in v[:12] else None
)
def test_a_documented_command_runs_as_written(where, command, workflow_copy, capsys):
    env, words = split(command)
    program = words[0]
    if program == "mathrl":
        if words[1:2] == ["train"] and "algorithm=sarsa" in words:
            assert main(words[1:]) == 2  # the docs' example of an error (compared below)
            return
        check_mathrl(words[1:])
    elif program == "torchrun":
        check_mathrl(words[words.index("mathrl") + 1 :])
    elif program == "snakemake":
        done = subprocess.run([sys.executable, "-m", "snakemake", *words[1:], "-n"], cwd=workflow_copy,
                              env={**os.environ, **env}, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, f"{where}: {command}\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
    elif program == "make":
        done = subprocess.run(["make", "-n", *words[1:]], cwd=workflow_copy, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{where}: {command}\n{done.stderr}"
    elif program == "dvc":
        dvc = Path(sys.executable).with_name("dvc")
        sub = words[1:]
        if sub[:1] == ["repro"]:
            # `dvc repro --dry` needs every dependency to exist already, so on a fresh tree its
            # flags are checked against `dvc repro --help` and its targets against dvc.yaml.
            import yaml

            helptext = subprocess.run([str(dvc), "repro", "--help"], capture_output=True, text=True, timeout=120).stdout
            stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
            for word in sub[1:]:
                assert (word in helptext) if word.startswith("-") else (word in stages), f"{where}: {command}: {word}"
            return
        else:
            done = subprocess.run([str(dvc), *[w for w in sub if not w.startswith("-")], "--help"], cwd=ROOT,
                                  capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, f"{where}: {command}\n{done.stderr[-2000:]}"


def test_the_docs_example_error_is_the_real_one(capsys):
    pattern = r"```\n\$ (mathrl train algorithm=sarsa)\n(.*?)```"
    blocks = [b for name in DOCS if (b := re.search(pattern, (ROOT / name).read_text(), re.S))]
    assert len(blocks) == 1  # shown once, in the guide's page on configuration
    (block,) = blocks
    assert main(shlex.split(block.group(1))[1:]) == 2
    assert capsys.readouterr().err == block.group(2)
