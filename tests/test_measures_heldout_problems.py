"""pass@k per run and k, and held-out accuracy by carries per run (mathrl.analysis.measures.heldout_problems), on
hand-made run directories."""

import math

import pandas as pd
import pytest

from mathrl.analysis.claim_names import declared_tables
from mathrl.analysis.measures import heldout_problems as hp
from mathrl.analysis.results import Run
from mathrl.pipeline.config import RunSpec

KEYS = {"experiment": "adv_scaling", "setting": "group_std", "seed": 0, "warmup": 0}


def run_in(directory, files: dict[str, str]) -> Run:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)
    spec = RunSpec("adv_scaling__group_std__s0", "adv_scaling", "group_std", {}, 0, {})
    summary = {"initial": {"eval_accuracy": 0.0}, "config": {"task": "add"}}
    return Run(spec, "complete", summary, pd.DataFrame({"step": [1]}), dir=directory)


def test_pass_at_k_per_phase_and_k(tmp_path):
    # 4 samples per problem: before RL 1 and 3 correct, after RL 2 and 4
    text = "phase,a,b,samples,correct\ninitial,1,2,4,1\ninitial,3,4,4,3\nfinal,1,2,4,2\nfinal,3,4,4,4\n"
    df = hp.pass_at_k_runs([(KEYS, run_in(tmp_path / "r", {"pass_at_k.csv": text}))])
    assert list(df.columns) == hp.PASS_AT_K == list(declared_tables()["diagnostics_pass_at_k_runs"])
    s = df.set_index(["phase", "k"])
    assert list(s.loc["initial"].index) == [1, 2, 4]  # the k of KS up to the 4 samples drawn
    assert s.loc[("initial", 1), "pass_at_k"] == pytest.approx(0.5)  # (1/4 + 3/4) / 2
    assert s.loc[("initial", 2), "pass_at_k"] == pytest.approx(0.75)  # (1 − C(3,2)/C(4,2) + 1) / 2
    assert s.loc[("final", 4), "pass_at_k"] == 1.0 and s.loc[("final", 4), "problems"] == 2
    lo, hi = s.loc[("initial", 1), ["boot_lo", "boot_hi"]]
    assert 0.25 <= lo < 0.5 < hi <= 0.75  # resampled over the two problems
    assert s.loc[("final", 4), "boot_lo"] == s.loc[("final", 4), "boot_hi"] == 1.0  # all alike: nothing to resample
    assert (df["experiment"] == "adv_scaling").all() and "warmup" not in df


def test_a_run_without_the_file_has_no_rows(tmp_path):
    run = run_in(tmp_path / "r", {})
    assert hp.pass_at_k_runs([(KEYS, run)]).empty and hp.carry_runs([(KEYS, run)], {}).empty
    assert list(hp.carry_runs([], {}).columns) == hp.CARRIES


def test_accuracy_by_carries(tmp_path):
    # 12 + 13: no carry; 15 + 15: one; 95 + 5: two
    text = "a,b,initial,final\n12,13,0,1\n15,15,1,1\n95,5,0,1\n"
    run = run_in(tmp_path / "r", {"heldout.csv": text})
    df = hp.carry_runs([(KEYS, run)], {"add": {"op": "add"}})
    assert list(df.columns) == hp.CARRIES == list(declared_tables()["diagnostics_adv_scaling_runs"])
    s = df.set_index("carries")
    assert list(s.index) == ["all", "0", "1", "2"] and s.loc["all", "problems"] == 3
    assert s.loc["all", "initial"] == pytest.approx(1 / 3) and s.loc["all", "gain"] == pytest.approx(2 / 3)
    assert s.loc["1", "gain"] == 0.0 and s.loc["2", "final"] == 1.0 and (s["setting"] == "group_std").all()
    other = hp.carry_runs([(KEYS, run)], {}).set_index("carries")  # not addition: no carries to count
    assert list(other.index) == ["all", "-1"] and other.loc["-1", "problems"] == 3


def test_bootstrap_of_one_value():
    assert hp.bootstrap_mean(pd.Series([0.5]).to_numpy()) == (0.5, 0.5)
    lo, hi = hp.bootstrap_mean(pd.Series([0.0, 1.0, 0.0, 1.0]).to_numpy())
    assert 0.0 <= lo < 0.5 < hi <= 1.0 and not math.isnan(lo)
