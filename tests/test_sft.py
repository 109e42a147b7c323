"""The warm-up's stopping rule reads the validation split, never the test set it is scored on."""

from __future__ import annotations

import copy
import json

from mathrl.cli import main
from tests.conftest import TINY, write_config


def warm_up(tmp_path, **task):
    d = copy.deepcopy(TINY)
    d["results"] = str(tmp_path / "results")
    d["tasks"]["mul"].update(task)
    d["sft"]["mul"] = {"preset": "small", "max_steps": 30, "eval_every": 10, "band": [0.0, 1.0], "device": "cpu"}
    path = write_config(tmp_path / "c.yaml", d)
    assert main(["problems", "--config", str(path), "--task", "mul"]) == 0
    assert main(["sft", "--config", str(path), "--task", "mul"]) == 0
    return json.loads((tmp_path / "results" / "sft" / "mul" / "summary.json").read_text())


def test_the_band_is_read_on_the_validation_split(tmp_path, capsys):
    s = warm_up(tmp_path, n_val=20)  # band low 0: the first validation reading stops it
    first = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("sft mul step 10 | "))
    assert " | at most " in first and "more (max_steps 30;" in first  # how long it may still take, said at once
    assert s["steps"] == 10 and s["n_val"] == 20 and s["n_test"] == 20
    assert [h["step"] for h in s["history"]] == [10] and "val_accuracy" in s["history"][0]
    assert 0 <= s["eval_accuracy"] <= 1  # the test set, scored once after the stop


def test_without_a_validation_split_the_warm_up_runs_to_its_cap(tmp_path):
    s = warm_up(tmp_path, n_val=0)
    assert s["steps"] == 30 and s["n_val"] == 0 and s["history"] == [] and s["val_accuracy"] != s["val_accuracy"]  # NaN
