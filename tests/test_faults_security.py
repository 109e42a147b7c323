"""Security basics: YAML python tags and snapshots with code are refused; every value
reaching a rule's shell is quoted or constrained; run, experiment and variant names with
metacharacters are refused."""

from __future__ import annotations

import ast
import hashlib
import io
import os
import re
from pathlib import Path

import pytest
import torch
from conftest import ROOT, run_dir, run_files, tiny_cfg, write_config

from mathrl.engine import snapshot
from mathrl.pipeline import layout
from mathrl.pipeline.cli import main
from mathrl.pipeline.config import load_schema

pytestmark = pytest.mark.faults


# --- security basics ----------------------------------------------------------------------


def test_yaml_python_tags_are_refused(tmp_path, capsys):
    marker = tmp_path / "pwned"
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"results: !!python/object/apply:os.system ['touch {marker}']\n")
    assert main(["runs", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "malformed YAML" in err and "python/object/apply" in err
    assert not marker.exists()


class Evil:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_snapshot_with_code_is_refused_even_with_a_valid_checksum(env, capsys):
    marker = env["dir"] / "pwned"
    buf = io.BytesIO()
    torch.save({"step": 1, "net": Evil(marker)}, buf)
    payload = buf.getvalue()
    data = snapshot.MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload
    d = run_dir(env, "r")
    d.mkdir(parents=True)
    (d / "snapshot.pt").write_bytes(data)
    with pytest.raises(Exception, match="Weights only load failed"):
        snapshot.decode(data, "evil")
    assert main(["train", "--config", str(env["config"]), "--run-id", "r", "steps=2"]) == 2
    err = capsys.readouterr().err
    assert f"{d / 'snapshot.pt'}: " in err and "Weights only load failed" in err
    assert not marker.exists()
    assert (d / "snapshot.pt").read_bytes() == data and list(run_files(d)) == ["snapshot.pt"]


def shell_commands() -> dict[str, str]:
    """Each rule's shell command (its string literals joined, or the layout's command for
    `mathrl_shell("stage")`), by rule name."""
    commands = {}
    for smk in sorted((ROOT / "rules").glob("*.smk")):
        lines = smk.read_text().splitlines()
        rule = None
        for i, line in enumerate(lines):
            if m := re.match(r"\s*rule (\w+):", line):
                rule = m[1]
            elif re.match(r"\s*rule:", line):  # a rule made in a loop: named by its stage below
                rule = None
            if line.strip() == "shell:":
                if call := re.fullmatch(r'mathrl_shell\("(\w+)"(, group=True)?\)', lines[i + 1].strip()):
                    commands[rule or call[1]] = layout.snakemake_shell(call[1], group=bool(call[2]))
                    continue
                parts = []
                for nxt in lines[i + 1 :]:
                    if not nxt.strip().startswith(('"', "'")):
                        break
                    parts.append(nxt.strip())
                commands[rule] = ast.literal_eval("(" + "\n".join(parts) + ")")
    return commands


def test_every_value_reaching_a_rule_shell_is_quoted_or_constrained():
    common = (ROOT / "rules" / "common.smk").read_text()
    block = re.search(r"^wildcard_constraints:\n((?:    .*\n)+)", common, re.M)[1]
    constrained = set(re.findall(r"^    (\w+)=", block, re.M))
    assert re.search(r'study="\[A-Za-z0-9_\]\+"', block)  # run_id and task: alternations of validated names
    schema = load_schema()["definitions"]
    # Params that are no file and no free text: a closed set of safe words from the schema.
    enum_params = {"torchrun": schema["pipeline"]["properties"]["torchrun"]["enum"], "fork_server": ["auto", "off"]}
    for values in enum_params.values():
        assert all(re.fullmatch(r"[a-z]+", v) for v in values)
    commands = shell_commands()
    assert {"problems", "sft", "train", "bandit", "gradvar", "aggregate", "figures", "report"} <= set(commands)
    for rule, cmd in commands.items():
        for field in re.findall(r"\{([^{}]+)\}", cmd):
            name, _, spec = field.partition(":")
            kind, _, attr = name.partition(".")
            if kind in ("input", "output", "log", "params"):
                assert spec == "q" or (kind == "params" and attr in enum_params), (
                    f"rule {rule}: {{{field}}} is not quoted"
                )
            elif kind == "wildcards":
                assert attr in constrained, f"rule {rule}: wildcard {attr} has no constraint"
            else:
                assert name in ("threads", "resources.gpu"), f"rule {rule}: {{{field}}}"  # integers


@pytest.mark.parametrize("run_id", ["x;touch pwned", "<b>x</b>", "a b", "..", "$(id)", ""])
def test_run_id_with_shell_or_html_metacharacters_is_refused(tmp_path, capsys, run_id):
    config = write_config(tmp_path / "c.yaml", tiny_cfg(tmp_path / "results"))
    assert main(["train", "--config", str(config), "--run-id", run_id]) == 2
    assert "--run-id" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("where", ["experiment", "variant"])
def test_experiment_or_variant_name_with_metacharacters_is_refused(tmp_path, capsys, where):
    name = "x;touch pwned<b>"
    cfg = tiny_cfg(tmp_path / "results")
    cfg["experiments"] = (
        {name: {"seeds": [0]}} if where == "experiment" else {"e": {"variants": {name: {}}, "seeds": [0]}}
    )
    config = write_config(tmp_path / "c.yaml", cfg)
    assert main(["runs", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert (
        f"{name!r} does not match '^[A-Za-z0-9_]+$'" if where == "experiment" else "characters outside [A-Za-z0-9_.-]"
    ) in err, err
    assert not (tmp_path / "results").exists()
