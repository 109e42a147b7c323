"""The calibration section: the pilot's rule, each experiment's reference, runs below their warm-up."""

from __future__ import annotations

import copy
import io
import math

import pandas as pd
import pytest

from mathrl.analysis.measures import calibration_runs as cm
from mathrl.analysis.measures import run_measures
from mathrl.analysis.results import sustained_below
from mathrl.analysis.studies import calibration as cal
from mathrl.analysis.study_inputs import Context
from mathrl.pipeline.config import load_config
from tests.conftest import TINY, write_config
from tests.synthetic import curve, verdicts, with_claims, write_run


# ---- the pure rules, on cases worked by hand ------------------------------------------------
@pytest.mark.parametrize("accs, start, expected", [
    ([0.50, 0.55, 0.60], 0.50, False),        # rises
    ([0.44, 0.50, 0.52], 0.50, False),        # one reading 6 points down, then recovers
    ([0.44, 0.44, 0.52], 0.50, True),         # two readings in a row more than 5 points down
    ([0.52, 0.60, 0.44], 0.50, True),         # the last reading is down: it ends there
    ([0.46, 0.47, 0.46], 0.50, False),        # 4 points down is within the margin
    ([], 0.50, False),
])  # fmt: skip
def test_sustained_drop(accs, start, expected):
    assert sustained_below(accs, start - cm.DROP) is expected


def test_the_pilot_picks_the_largest_multiple_that_learns():
    assert (
        cm.learns(0.01, False)
        and not cm.learns(-0.01, False)
        and not cm.learns(0.02, True)
        and not cm.learns(math.nan, False)
    )
    assert cm.pick({0.33: True, 1.0: True, 3.3: False}) == 1.0
    assert cm.pick({0.33: True, 1.0: False, 3.3: True}) == 3.3  # the rule reads each multiple alone
    assert math.isnan(cm.pick({1.0: False}))


# ---- the section on a synthetic results tree ------------------------------------------------
@pytest.fixture
def ctx(tmp_path):
    d = copy.deepcopy(TINY)
    d["results"] = str(tmp_path / "results")
    d["experiments"] = {
        "calibration": {"fixed": {"steps": 4, "eval_every": 2},
                        "variants": {"slow": {"lr_scale": 0.5}, "ref": {}, "hot": {"lr_scale": 4}},
                        "roles": {"reference_add": "ref"}, "seeds": [0]},
        "study": {"fixed": {"eval_every": 4}, "grid": {"batch_size": [8, 16]}, "roles": {"reference": "batch_size=16"},
                  "seeds": [0, 1, 2]},
        "plain": {"variants": {"only": {"lr_scale": 2}}, "seeds": [0]},
        "high": {"variants": {"top": {"lr_scale": 3}}, "roles": {"reference": "top"}, "seeds": [0, 1]},
    }  # fmt: skip
    cfg = load_config(write_config(tmp_path / "config.yaml", d))
    # the pilot: slow gains +10 points, ref +30, hot drops 20 points and stays there
    for variant, path in {"slow": [0.5, 0.55, 0.6], "ref": [0.5, 0.65, 0.8], "hot": [0.5, 0.3, 0.3]}.items():
        write_run(cfg, f"calibration__{variant}__s0", curve(4, 2, lambda s, p=path: p[s // 2]), initial_eval=path[0])
    for seed, gain in enumerate([0.10, 0.12, 0.08]):  # the reference of `study` gains ~10 points in every seed
        write_run(
            cfg, f"study__batch_size-16__s{seed}", curve(4, 2, lambda s, g=gain: 0.4 + g * s / 4), initial_eval=0.4
        )
        write_run(
            cfg, f"study__batch_size-8__s{seed}", curve(4, 2, lambda s: 0.4 - 0.1 * s / 4), initial_eval=0.4
        )  # ends 10 points down
    for seed in (0, 1):  # starts at 95%: nothing left to gain
        write_run(cfg, f"high__top__s{seed}", curve(4, 2, lambda s: 0.95), initial_eval=0.95)
    return Context(cfg)


def test_pilot_table_and_pick(ctx):
    t = cal.tables(ctx)
    p = t["calibration_pilot"].set_index("variant")
    assert (
        p.loc["ref", "multiple"] == 1.0
        and p.loc["hot", "multiple"] == pytest.approx(4.0)
        and p.loc["slow", "multiple"] == pytest.approx(0.5)
    )
    assert p.loc["ref", "gain"] == pytest.approx(0.3) and bool(p.loc["ref", "learns"])
    assert bool(p.loc["hot", "sustained_drop"]) and not bool(p.loc["hot", "learns"])
    # +10 points on 50 problems: Newcombe's interval for 30/50 against 25/50 includes 0
    assert p.loc["slow", "gain_lo"] < 0 and not bool(p.loc["slow", "learns"])
    pick = t["calibration_pick"].iloc[0]
    assert pick["pick"] == 1.0 and bool(pick["reference_is_pick"]) and pick["tried"] == "0.5x, 1x, 4x"


def test_references_are_verdicts_and_the_share_below_the_warm_up(ctx):
    t = with_claims(ctx.cfg, cal.tables(ctx))
    t["run_measures"] = run_measures(ctx.runs)
    t = with_claims(ctx.cfg, t)
    v = verdicts(t, "calibration")
    assert list(v.index) == ["reference_study", "reference_high"]  # `plain` and the pilot declare no `reference`
    assert v.loc["reference_high", "outcome"] == "inconclusive"  # gain 0 in both seeds
    assert bool(t["calibration_references"].set_index("experiment").loc["high", "no_headroom"])
    assert v.loc["reference_study", "diff"] == pytest.approx(0.10) and v.loc["reference_study", "outcome"] == "agrees"
    assert v.loc["reference_study", "n"] == 3 and v.loc["reference_study", "ci_low"] > 0
    refs = t["calibration_references"].set_index("experiment")
    assert refs.loc["plain", "n"] == 0
    below = t["calibration_below"].set_index("experiment")
    # missing runs (plain) are not counted; 3 batch-8 runs and the pilot's hot run end > 5 points down
    assert below.loc["all runs", "runs"] == 11 and below.loc["all runs", "below"] == 4
    lo, hi = below.loc["all runs", ["below_lo", "below_hi"]]
    assert lo < 4 / 11 < hi
    section = cal.section(t)
    assert section["overall"]["below"] == 4 and section["meets_target"] is False


def test_only_experiments_without_a_reference_are_listed_as_unchecked(ctx):
    t = with_claims(ctx.cfg, cal.tables(ctx))
    not_run_yet = pd.DataFrame([{"experiment": "late", "reference": "a", "task": "", "n": 0}])  # partial results
    t["calibration_references"] = pd.concat([t["calibration_references"], not_run_yet], ignore_index=True)
    assert cal.section(t)["unreferenced"] == ["calibration", "plain"]
    buf = io.StringIO()  # as the report reads it back: an empty reference is NaN
    t["calibration_references"].to_csv(buf, index=False)
    t["calibration_references"] = pd.read_csv(io.StringIO(buf.getvalue()))
    assert cal.section(t)["unreferenced"] == ["calibration", "plain"]


@pytest.mark.parametrize("files", [["config/config.yaml"], ["config/config.yaml", "config/full.yaml"]])
def test_the_pilot_selects_on_the_validation_split(files):
    """Every calibration run is evaluated on the validation split, so none is the same run as a
    study's (held-out) run of the same settings."""
    from mathrl.pipeline.config import ROOT, expand_runs

    runs = expand_runs(load_config([ROOT / f for f in files]))
    pilot = {rid: spec for rid, spec in runs.items() if spec.experiment == "calibration"}
    assert pilot and all(spec.settings.eval_split == "val" for spec in pilot.values())
    assert all(runs[spec.trained_as].settings.eval_split == "val" for spec in pilot.values())
    assert {spec.settings.eval_split for rid, spec in runs.items() if spec.experiment == "system"} == {"test"}
