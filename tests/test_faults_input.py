"""Bad input: exit status 2, a message naming the problem, nothing written."""

from __future__ import annotations

import pytest
from conftest import tiny_cfg, write_config

from mathrl.pipeline.cli import main

pytestmark = pytest.mark.faults


# --- bad input: exit 2, a message naming the problem, nothing written ----------------------


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--set", "train.bacth_size=8"], "train.bacth_size: unknown key (did you mean 'batch_size'?)"),
        (["--set", "tasks.add.ndigit=two"], "tasks.add.ndigit: 'two' is not of type 'integer'"),
        (["--set", "train.group_size=0"], "train.group_size: 0 is less than the minimum of 1"),
        (["--set", "experiments.tiny.grid.batch_size=[]"], "experiments.tiny.grid.batch_size: [] should be non-empty"),
        (["--config", "MALFORMED"], "bad.yaml line 3: malformed YAML: mapping values are not allowed"),
    ],
    ids=["unknown-key", "wrong-type", "out-of-range", "zero-run-grid", "malformed-yaml"],
)
def test_bad_config_through_train_exits_2_and_writes_nothing(tmp_path, capsys, args, needle):
    config = write_config(tmp_path / "c.yaml", tiny_cfg(tmp_path / "results"))
    malformed = tmp_path / "bad.yaml"
    malformed.write_text("train:\n  steps: 4\n  lr: 0.1: 2\n  seed: 1\n")
    args = [str(malformed) if a == "MALFORMED" else a for a in args]
    assert main(["train", "--config", str(config), *args, "--run-id", "r"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mathrl train: error:") and needle in err, err
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("command", ["train", "sft"])
def test_malformed_problem_file_names_its_line_and_writes_nothing(env, capsys, command):
    train_txt = env["results"] / "problems" / "add" / "train.txt"
    lines = train_txt.read_text().splitlines(keepends=True)
    lines[6] = "12+34=47\n"  # line 7: a wrong result
    train_txt.write_text("".join(lines))
    before = {p: p.read_bytes() for p in env["results"].rglob("*") if p.is_file()}
    argv = ["train", "--run-id", "r"] if command == "train" else ["sft", "--task", "add"]
    assert main([argv[0], "--config", str(env["config"]), *argv[1:]]) == 2
    err = capsys.readouterr().err
    assert f"mathrl {command}: error: {train_txt}, line 7: '12+34=47': wrong result: expected 46" in err
    assert {p: p.read_bytes() for p in env["results"].rglob("*") if p.is_file()} == before
