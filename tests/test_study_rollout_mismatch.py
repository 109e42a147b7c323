"""The rollout/trainer mismatch tables on a hand-made results tree: per-variant summaries, the
accuracy differences paired by seed, the control across every run, the figure and the template."""

import math

import matplotlib
import pytest

from mathrl.analysis.report import environment
from mathrl.analysis.studies import diagnostics, rollout_mismatch
from mathrl.analysis.study_inputs import Context, Tables
from tests.synthetic import write_run

matplotlib.use("Agg")

# per variant: the mean per-token gap, the largest gap at step 2, and the final held-out accuracy of seeds 0 and 1
GAPS = {"fp32": (1e-7, 4e-6, (0.60, 0.64)), "bf16": (3e-3, 0.04, (0.60, 0.62)),
        "stale2": (0.2, 3.0, (0.50, 0.52)), "stale2_tis": (0.2, 3.0, (0.56, 0.60))}  # fmt: skip
ROLES = {"control": "fp32", "remedy": "stale2_tis", "remedied": "stale2"}


def rows(name: str, seed: int) -> list[dict]:
    mean, top, finals = GAPS[name]
    out = []
    for step in (1, 2):
        row = {"step": step, "samples": 16 * step, "seconds": 1.0, "sample_seconds": 0.1 * step, "update_seconds": 0.2,
               "mismatch_logp_diff_mean": mean * step, "mismatch_logp_diff_max": top * step / 2,
               "mismatch_kl_k3": mean / 10, "mismatch_chi2": 0.01, "mismatch_ess": 1.0 - mean * step,
               "mismatch_logp_corr": 0.999,
               "mismatch_corrected_frac": 0.05 if name == "stale2_tis" else math.nan}  # fmt: skip
        out.append({**row, "eval_accuracy": finals[seed]} if step == 2 else row)
    return out


@pytest.fixture(scope="module")
def cfg(study_config):
    variants = {"fp32": {}, "bf16": {"sampler_dtype": "bfloat16"}, "stale2": {"rollout_staleness": 2},
                "stale2_tis": {"rollout_staleness": 2, "tis_cap": 2.0}}  # fmt: skip
    experiments = {
        "rollout_mismatch": {"fixed": {"steps": 2}, "variants": variants, "roles": ROLES, "seeds": [0, 1]},
        "other": {"fixed": {"steps": 2}, "variants": {"plain": {"lr": 1e-4}, "hot": {"temperature": 2.0}},
                  "seeds": [0]},
    }  # fmt: skip
    return study_config("mismatch", experiments)


@pytest.fixture(scope="module")
def t(cfg):
    for name in GAPS:
        for seed in (0, 1):
            write_run(cfg, f"rollout_mismatch__{name}__s{seed}", rows(name, seed), initial_eval=0.5)
    # another experiment: a plain run (no source: part of the control), one at temperature 2 (a source: left out)
    plain = [{**r, "mismatch_logp_diff_max": 9e-6} for r in rows("fp32", 0)]
    write_run(cfg, "other__plain__s0", plain, initial_eval=0.5)
    write_run(cfg, "other__hot__s0", rows("stale2", 0), initial_eval=0.5)
    ctx = Context(cfg)
    return {
        **rollout_mismatch.tables(ctx, ROLES),
        "diagnostics_mismatch_runs": ctx.run_table("diagnostics_mismatch_runs"),
    }


def test_the_summary_reads_step_means_and_the_runs_largest_gap(t):
    s = t["diagnostics_mismatch"].set_index("setting")
    assert s.loc["bf16", "logp_diff_mean_mean"] == pytest.approx(3e-3 * 1.5)  # mean of steps 1 and 2
    assert s.loc["bf16", "logp_diff_max_mean"] == pytest.approx(0.04)  # step 2's is the run's largest
    assert s.loc["stale2", "ess_min_mean"] == pytest.approx(1 - 0.4)
    assert s.loc["stale2", "sample_seconds_mean"] == pytest.approx(0.15)
    assert s.loc["fp32", "gain_mean"] == pytest.approx(0.12)  # finals 0.60, 0.64 from 0.5
    assert math.isnan(s.loc["fp32", "corrected_frac_mean"])
    assert s.loc["stale2_tis", "corrected_frac_mean"] == pytest.approx(0.05)
    assert s.loc["fp32", "n"] == 2 and s.loc["fp32", "gain_lo"] < 0.12 < s.loc["fp32", "gain_hi"]


def test_the_run_table_lists_the_experiments_runs_with_their_measures(t):
    r = t["diagnostics_mismatch_runs"]
    assert list(r["setting"]) == [name for name in GAPS for _ in (0, 1)] and list(r["seed"]) == [0, 1] * 4
    assert list(r["steps_done"]) == [2] * 8 and list(r["final_eval"][:2]) == pytest.approx([0.60, 0.64])


def test_accuracy_differences_are_paired_by_seed_against_the_control_and_the_remedied(t):
    a = t["diagnostics_mismatch_accuracy"].set_index(["setting", "against"])
    assert a.loc[("bf16", "fp32"), "difference"] == pytest.approx(-0.01)  # (0 - 0.02) / 2
    assert a.loc[("stale2", "fp32"), "difference"] == pytest.approx(-0.11)  # (-0.10 - 0.12) / 2
    # stale2_tis - stale2: +0.06, +0.08; mean 0.07, sd of the differences 0.0141, t(1) 12.71 -> half-width 0.127
    row = a.loc[("stale2_tis", "stale2")]
    assert row["difference"] == pytest.approx(0.07) and row["n"] == 2
    assert row["hi"] - row["difference"] == pytest.approx(12.7062 * 0.01414214 / math.sqrt(2), rel=1e-4)
    assert ("fp32", "fp32") not in a.index and len(a) == 4


def test_the_control_at_scale_reads_every_run_without_a_source(t):
    c = t["diagnostics_mismatch_control"].iloc[0]
    assert c["runs"] == 3  # fp32 seeds 0 and 1, and other/plain; the temperature-2 run has a source
    assert c["tokens_max"] == pytest.approx(9e-6)
    assert c["mean_gap_mean"] == pytest.approx(1.5e-7)


def test_steps_figure_and_template(t, cfg, tmp_path):
    steps = t["diagnostics_mismatch_steps"]
    assert set(steps["setting"]) == set(GAPS)
    assert list(steps[steps.setting == "bf16"]["mismatch_logp_diff_mean_mean"]) == pytest.approx([3e-3, 6e-3])
    out = tmp_path / "tables"
    out.mkdir()
    for name, df in t.items():
        df.to_csv(out / f"{name}.csv", index=False)
    tables = Tables({**cfg, "results": str(tmp_path)})
    assert "diagnostics_mismatch" in rollout_mismatch.figures(tables)
    html = (
        environment().get_template("sections/mismatch.html.j2").render(ctx=rollout_mismatch.section(tables), figures={})
    )
    assert "stale2_tis" in html and "The rollout/trainer mismatch" in html and "No data" not in html


def test_the_diagnostics_study_carries_the_mismatch_tables(cfg):
    names = diagnostics.tables(Context(cfg))
    assert {"diagnostics_mismatch", "diagnostics_mismatch_accuracy", "diagnostics_mismatch_control"} <= set(names)
