"""Damaged inputs are named, never read in part: a run's metrics.csv cut mid-number or its summary.json cut short is
`unreadable` (not failed), named by path on the console and in the report, and the user's claim says its n counts the
other runs; a file cut at a line boundary is caught by the length summary.json recorded; the tables' other inputs
(bandit CSVs, probe and warm-up JSON) name themselves too."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest

from mathrl.analysis.results import load_run, read_csv, read_json
from mathrl.pipeline import atomic
from mathrl.pipeline.cli import main
from mathrl.pipeline.config import load_config
from mathrl.pipeline.errors import DamagedFileError
from tests.conftest import TINY, write_config
from tests.synthetic import curve, write_run

pytestmark = pytest.mark.faults

EXPERIMENT = {
    "mine": {
        "variants": {"grpo": {"algorithm": "grpo"}, "rloo": {"algorithm": "rloo"}},
        "seeds": [0, 1, 2],
        "roles": {"baseline": "grpo", "candidate": "rloo"},
        "claims": [
            {
                "id": "rloo_beats_grpo",
                "statement": "RLOO ends more accurate than GRPO",
                "measure": "final_eval",
                "a": {"role": "candidate"},
                "b": {"role": "baseline"},
            }
        ],
    }
}


@pytest.fixture
def tree(tmp_path) -> dict:
    """Six synthetic runs of an experiment with a user's claim, as the trainer writes them (each with its record)."""
    cfg_dict = {**copy.deepcopy(TINY), "results": str(tmp_path / "results"), "experiments": EXPERIMENT}
    path = write_config(tmp_path / "mine.yaml", cfg_dict)
    cfg = load_config([path])
    for variant, rise in (("grpo", 0.01), ("rloo", 0.02)):
        for seed in (0, 1, 2):
            d = write_run(
                cfg,
                f"mine__{variant}__s{seed}",
                curve(4, 2, lambda s, r=rise, k=seed: 0.3 + r * s + k / 100),
                initial_eval=0.3,
            )
            summary = json.loads((d / "summary.json").read_text())
            summary["files"] = {"metrics.csv": atomic.record((d / "metrics.csv").read_bytes())}
            (d / "summary.json").write_text(json.dumps(summary))
    return {
        "config": path,
        "cfg": cfg,
        "runs": tmp_path / "results" / "runs",
        "tables": tmp_path / "results" / "tables",
    }


def test_a_cut_metrics_csv_and_summary_json_are_named_and_never_read_in_part(tree, capsys):
    runs = tree["runs"]
    metrics = runs / "mine__rloo__s1" / "metrics.csv"
    metrics.write_text(metrics.read_text()[:-6])  # cut mid-number, as a copy that stopped halfway
    summary = runs / "mine__grpo__s2" / "summary.json"
    summary.write_text(summary.read_text()[:40])
    capsys.readouterr()
    assert main(["aggregate", "--config", str(tree["config"])]) == 1  # the tables are written, and not the pipeline's
    err = capsys.readouterr().err
    assert "aggregate: 2 run(s) have files that do not read whole" in err
    assert f"  {metrics}: cut short: " in err and f"  {summary}: cut short or damaged: it does not read as JSON" in err

    t = tree["tables"]
    status = pd.read_csv(t / "runs.csv").set_index("run_id")["status"]
    assert status["mine__rloo__s1"] == status["mine__grpo__s2"] == "unreadable" and (status == "complete").sum() == 4
    curves = pd.read_csv(t / "curves.csv")
    assert "mine__rloo__s1" not in set(curves["run_id"]) and len(curves) == 4 * 4  # the four whole runs' rows
    claim = pd.read_csv(t / "claims.csv").set_index("claim_id").loc["rloo_beats_grpo"]
    assert claim["n_a"] == claim["n_b"] == 2  # of 3 seeds an arm: the claim says which runs it lacks, and why
    assert claim["note"].endswith("2 run(s) of mine left out, their files unreadable: mine__grpo__s2, mine__rloo__s1")
    assert not (tree["tables"].parent / "tables.complete").exists()

    capsys.readouterr()
    assert main(["runs", "--config", str(tree["config"]), "--status"]) == 0
    listed = dict(line.split("  ", 1) for line in capsys.readouterr().out.splitlines())
    assert listed["mine__rloo__s1"] == listed["mine__grpo__s2"] == "unreadable" and listed["mine__grpo__s0"] == "done"

    assert main(["claims", "--config", str(tree["config"]), "--kind", "user"]) == 0
    assert "warning: 2 run(s) had files that do not read whole when the tables were made" in capsys.readouterr().err


def test_a_metrics_csv_cut_at_a_line_boundary_is_caught_by_its_recorded_length(tree):
    d = tree["runs"] / "mine__grpo__s0"
    whole = (d / "metrics.csv").read_text()
    (d / "metrics.csv").write_text(whole[: whole.rindex("\n", 0, -1) + 1])  # one row less, every line whole
    run = load_run(d, None)
    assert run.status == "unreadable" and not run.ok
    assert run.problem.startswith(
        f"{d / 'metrics.csv'}: cut short: {len(whole) - len(whole.splitlines()[-1]) - 1} "
        f"bytes, where its run wrote {len(whole)}"
    )
    (d / "metrics.csv").write_text(whole.replace("0.3", "0.4", 1))  # as long, another number
    assert "damaged: its SHA-256 is not the one its run recorded" in load_run(d, None).problem
    (d / "metrics.csv").write_text(whole)
    assert load_run(d, None).ok


def test_the_tables_other_inputs_name_themselves(tmp_path):
    cut = tmp_path / "metrics.csv"
    cut.write_text("study,setting,seed,step\nentropy_collapse,normal,0,1\nentropy_collapse,nor")
    with pytest.raises(DamagedFileError, match=f"{cut}: cut short: its last line ends without a newline"):
        read_csv(cut)
    cut.write_text("study,setting,seed,step\nentropy_collapse,normal,0\n")
    with pytest.raises(DamagedFileError, match=f"{cut}, line 2: cut short or damaged: 3 fields, the header has 4"):
        read_csv(cut)
    probe = tmp_path / "add.json"
    probe.write_text('{"variance": [{"batch_size": 64')
    with pytest.raises(DamagedFileError, match=f"{probe}: cut short or damaged: it does not read as JSON"):
        read_json(probe)


def test_claims_warns_when_its_tables_came_from_another_config(tree, tmp_path, capsys):
    assert main(["aggregate", "--config", str(tree["config"])]) == 0
    other = write_config(tmp_path / "other.yaml", {**tree["cfg"], "train": {**tree["cfg"]["train"], "steps": 5}})
    capsys.readouterr()
    assert main(["claims", "--config", str(tree["config"])]) == 0
    assert "warning" not in capsys.readouterr().err
    assert main(["claims", "--config", str(other)]) == 0
    err = capsys.readouterr().err
    assert f"mathrl claims: warning: the tables in {tree['tables']} were made from config " in err
    assert "pass the --config files `mathrl aggregate` was given" in err
