"""Beyond the documents: the rollout/trainer mismatch (experiment `rollout_mismatch`), a part of
the diagnostics section.

Each run's metrics.csv holds the mismatch between the sampler's log-probs of the sampled tokens
and the trainer's (`mathrl.engine.mismatch`). The tables give, per variant, the mismatch (step means,
and the largest per-token gap of the run), the held-out accuracy change and its difference from
the fp32 control paired by seed, and the gap along training; one more table reads every run of
the pipeline without a source of mismatch (the exact control at scale). Tables only: which claims
they support is for the claims engine.
"""

from __future__ import annotations

import pandas as pd

from mathrl.analysis.results import mean_spread, warmup
from mathrl.analysis.studies.kit import COLORS, add_intervals, over_seeds, placeholder, plt
from mathrl.analysis.verdict import difference
from mathrl.pipeline.layout import MISMATCH_COLUMNS as MISMATCH

EXPERIMENT = "rollout_mismatch"
# per-run summaries of the metrics.csv columns: the step mean, and for the largest gap the maximum over steps
RUN_VALUES = [
    "logp_diff_mean",
    "logp_diff_max",
    "kl_k3",
    "chi2",
    "ess",
    "ess_min",
    "logp_corr",
    "corrected_frac",
    "sample_seconds",
    "update_seconds",
    "initial",
    "final",
    "gain",
]
STEP_VALUES = ["mismatch_logp_diff_mean", "mismatch_logp_diff_max", "mismatch_kl_k3"]
# a run samples exactly as it trains (no source of mismatch) under these settings
NO_SOURCE = {
    "sampler_dtype": "float32",
    "rollout_staleness": 0,
    "sample_top_k": 0,
    "sample_top_p": 1.0,
    "temperature": 1.0,
}


def variant(run) -> str:
    """The run's variant ("default" for none), not its grid point: the mismatch claims name variants."""
    return run.spec.variant or "default"


def run_row(run) -> dict:
    """One run's mismatch summary (step means; the largest gap and the smallest ESS over steps) and held-out accuracy
    at the start and the end."""
    m = run.metrics.reindex(columns=[*MISMATCH, "sample_seconds", "update_seconds"])  # NaN where a column is absent
    m.columns = [c.removeprefix("mismatch_") for c in m.columns]
    initial, final = float(run.initial_eval), float(run.evals["eval_accuracy"].iloc[-1])
    return {
        "setting": variant(run),
        "seed": run.spec.seed,
        "warmup": warmup(run),
        "steps": len(m),
        **{c: float(m[c].mean()) for c in m},
        "logp_diff_max": float(m["logp_diff_max"].max()),
        "ess_min": float(m["ess"].min()),
        "initial": initial,
        "final": final,
        "gain": final - initial,
    }


def accuracy_differences(runs: pd.DataFrame, roles: dict) -> pd.DataFrame:
    """Final held-out accuracy of each setting minus the control's, and of the remedy minus the
    setting it remedies, paired by seed (the same prompts and sampling noise), with 95% intervals."""
    cols = ["setting", "against", "difference", "lo", "hi", "n"]
    control = roles.get("control")
    if runs.empty or control is None:
        return pd.DataFrame(columns=cols)
    final = {name: dict(zip(g["seed"], g["final"])) for name, g in runs.groupby("setting", sort=False)}
    pairs = [(name, control) for name in final if name != control]
    if roles.get("remedy") in final and roles.get("remedied") in final:
        pairs.append((roles["remedy"], roles["remedied"]))
    rows = []
    for a, b in pairs:
        est = difference(final[a], final.get(b, {}))
        rows.append({"setting": a, "against": b, "difference": est.estimate, "lo": est.lo, "hi": est.hi, "n": est.n})
    return pd.DataFrame(rows, columns=cols)


def mismatch_steps(runs: list) -> pd.DataFrame:
    """Per setting and step: the mismatch over seeds (mean and std), for the figure."""
    frames = [run.metrics.assign(setting=variant(run), seed=run.spec.seed) for run in runs]
    return over_seeds([f for f in frames if set(STEP_VALUES) <= set(f)], ["setting"], STEP_VALUES)


def control_at_scale(ctx) -> pd.DataFrame:
    """Every run of the pipeline without a source of mismatch: how large float rounding between
    the sampling path and the training forward makes the per-token log-prob gap."""
    cols = CLAIM_TABLES["diagnostics_mismatch_control"]
    runs = [r for r in ctx.runs.values() if r.ok and r.spec.same_as is None and "mismatch_logp_diff_max" in r.metrics]
    runs = [r for r in runs if all(r.settings.get(k, v) == v for k, v in NO_SOURCE.items())]
    if not runs:
        return pd.DataFrame(columns=cols)
    per_run = pd.DataFrame([run_row(r) for r in runs])
    maxes, means = per_run["logp_diff_max"], per_run["logp_diff_mean"]
    row = {
        "runs": len(runs),
        "tokens_max": maxes.max(),
        "run_max_median": maxes.median(),
        "mean_gap_mean": means.mean(),
        "mean_gap_max": means.max(),
        "ess_min": per_run["ess_min"].min(),
    }
    return pd.DataFrame([row], columns=cols)


# The tables of per-run rows that claims read, and their columns, stated once: the tables are made with them, and
# mathrl.analysis.claim_names reads this assignment from the source (without importing the module) to check a claim's
# names
# when the config is read.
CLAIM_TABLES = {
    "diagnostics_mismatch_runs": ["setting", "seed", "warmup", "steps", *RUN_VALUES],
    # one row: the runs without a source of mismatch, pooled
    "diagnostics_mismatch_control": [
        "runs",
        "tokens_max",
        "run_max_median",
        "mean_gap_mean",
        "mean_gap_max",
        "ess_min",
    ],
}


def tables(ctx, roles: dict) -> dict[str, pd.DataFrame]:
    complete = [run for run in ctx.experiment(EXPERIMENT) if run.ok]
    runs = pd.DataFrame([run_row(run) for run in complete], columns=CLAIM_TABLES["diagnostics_mismatch_runs"])
    # per setting: the mean over seeds of each run summary, with its 95% t interval
    summary = add_intervals(mean_spread(runs, ["setting"], RUN_VALUES), RUN_VALUES)
    return {
        "diagnostics_mismatch_runs": runs,
        "diagnostics_mismatch": summary,
        "diagnostics_mismatch_accuracy": accuracy_differences(runs, roles),
        "diagnostics_mismatch_steps": mismatch_steps(complete),
        "diagnostics_mismatch_control": control_at_scale(ctx),
    }


def figures(t) -> dict[str, plt.Figure]:
    """The per-token log-prob gap along training per setting (mean over seeds): mean per token
    (solid) and the step's largest (dashed), on a log scale that shows the control's rounding."""
    steps = t["diagnostics_mismatch_steps"]
    fig, ax = plt.subplots(figsize=(7.2, 3.8), layout="constrained")
    if len(steps):
        for i, (name, g) in enumerate(steps.groupby("setting", sort=False)):
            color = COLORS[i % len(COLORS)]
            ax.plot(g["step"], g["mismatch_logp_diff_mean_mean"], color=color, label=f"{name}: mean")
            ax.plot(g["step"], g["mismatch_logp_diff_max_mean"], color=color, ls="--", lw=1, label=f"{name}: max")
        ax.set_yscale("log")
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        placeholder(ax, f"no runs of {EXPERIMENT}")
    title = "The rollout/trainer log-prob gap (mean over seeds)"
    ax.set(xlabel="step", ylabel="|trainer − sampler log-prob| per token", title=title)
    return {"diagnostics_mismatch": fig}


def section(t) -> dict:
    return {
        "summary": t["diagnostics_mismatch"],
        "accuracy": t["diagnostics_mismatch_accuracy"],
        "runs": t["diagnostics_mismatch_runs"],
        "control": t["diagnostics_mismatch_control"],
        "experiment": EXPERIMENT,
    }
