"""Beyond the documents: pass@k before and after RL, the entropy-performance law,
advantage scaling by difficulty, the gradient noise scale, and the per-step update diagnostics.

Everything is computed from files the runs wrote: `pass_at_k.csv` (runs with `pass_at_k`),
`heldout.csv` (every run: greedy correctness per held-out problem at the start and at the
end), `metrics.csv`, and the gradient probe's JSON. The maths is `mathrl.analysis.estimators`;
intervals come from scipy.stats.bootstrap (over problems) and `mathrl.analysis.verdict` (over seeds).
Five parts live in modules of their own: the rollout/trainer mismatch (`rollout_mismatch`), compute-performance curves
(`compute_curves`), the negative controls (`negative_controls`), the policy losses of 2025 (`loss_comparison`) and the
token selection by entropy (`high_entropy_tokens`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

import mathrl.analysis.kit as kit
import mathrl.analysis.studies.compute_curves as compute_curves
import mathrl.analysis.studies.high_entropy_tokens as high_entropy_tokens
import mathrl.analysis.studies.loss_comparison as loss_comparison
import mathrl.analysis.studies.negative_controls as negative_controls
import mathrl.analysis.studies.rollout_mismatch as rollout_mismatch
from mathrl.analysis import estimators as dx
from mathrl.analysis import section_verdicts

# modules, not `from mathrl.analysis.studies import ...`: the package's __init__ imports this module
from mathrl.analysis.figure_style import COLORS, NONNEGATIVE, SHARE, bands, placeholder, plt
from mathrl.analysis.kit import NAN
from mathrl.analysis.measures import MEASURES
from mathrl.analysis.measures.general import final_eval, gain
from mathrl.analysis.measures.series import known
from mathrl.analysis.results import mean_spread, read_csv, warmup
from mathrl.analysis.studies.generic import setting
from mathrl.analysis.verdict import mean_interval
from mathrl.pipeline import layout

NAME = "diagnostics"
TITLE = "Beyond the documents: pass@k, the entropy law, advantage scaling, noise scale"
DOCUMENT = ""

EXPERIMENT = "adv_scaling"  # the advantage-scaling experiment (its roles name the four variants)
KS = (1, 2, 4, 8, 16, 32, 64)
LAW_R2 = 0.5  # the law "holds" in a run when its fit explains at least half the variance ...
LAW_RMSE = 0.05  # ... and the first half's fit predicts the second half within 5 points (RMSE)
REACHED_STEPS = 5  # the accuracy a run reached: the mean sampled accuracy of its last this many steps
RUN_KEYS = ["experiment", "setting", "seed"]


def ok_runs(ctx):
    """Every complete run, with the columns that name it in the per-run tables: experiment, setting and seed."""
    for exp in ctx.cfg.get("experiments", {}):
        for run in ctx.experiment(exp):
            if run.ok:
                yield (
                    {"experiment": exp, "setting": setting(run.spec), "seed": run.spec.seed, "warmup": warmup(run)},
                    run,
                )


def bootstrap_mean(x: np.ndarray) -> tuple[float, float]:
    """95% percentile-bootstrap interval of a mean over problems (scipy.stats.bootstrap)."""
    if np.ptp(x) == 0:  # one problem, or all alike: nothing to resample
        return float(np.mean(x)), float(np.mean(x))
    res = stats.bootstrap((x,), np.mean, n_resamples=2000, method="percentile", random_state=np.random.default_rng(0))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def run_file_csv(run, path):
    """One of a run's CSV files, checked whole against what its summary.json recorded of it (results.read_csv)."""
    return read_csv(path, ((run.summary or {}).get("files") or {}).get(path.name))


# ----------------------------------------------------------------------------- pass@k
def pass_at_k_runs(ctx) -> pd.DataFrame:
    rows = []
    for keys, run in ok_runs(ctx):
        path = ctx.run_file(run, layout.RUN_DIR) / "pass_at_k.csv"
        if not path.exists():
            continue
        for phase, g in run_file_csv(run, path).groupby("phase", sort=False):
            n, c = g["samples"].to_numpy(), g["correct"].to_numpy()
            for k in (k for k in KS if k <= n.min()):
                p = dx.pass_at_k(n, c, k)
                lo, hi = bootstrap_mean(p)
                rows.append(
                    {
                        **keys,
                        "phase": phase,
                        "k": k,
                        "problems": len(p),
                        "pass_at_k": float(p.mean()),
                        "boot_lo": lo,
                        "boot_hi": hi,
                    }
                )
    return pd.DataFrame(rows, columns=PASS_AT_K)


def pass_at_k_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per experiment, setting, phase and k: the mean over seeds with its t interval."""
    out = mean_spread(runs, ["experiment", "setting", "phase", "k"], ["pass_at_k"])
    # a t interval of a share reaches past [0, 1] with 3 seeds near 1: cut to it
    return kit.add_intervals(out, ["pass_at_k"], bounds={"pass_at_k": SHARE})


# ----------------------------------------------------------------------------- the entropy law
def entropy_law_runs(ctx) -> pd.DataFrame:
    """One fit per run: training accuracy (sampled, per step) against policy entropy."""
    rows = []
    for keys, run in ok_runs(ctx):
        m = run.metrics
        if "entropy" not in m or "accuracy" not in m or len(m) < 8:
            continue
        fit = dx.fit_entropy_law(m["entropy"].to_numpy(), m["accuracy"].to_numpy())
        reached = float(m["accuracy"].tail(REACHED_STEPS).mean())
        holds = fit["r2"] >= LAW_R2 and fit["half_rmse"] <= LAW_RMSE
        rows.append(
            {
                **keys,
                "steps": len(m),
                **fit,
                "entropy_start": float(m["entropy"].iloc[0]),
                "entropy_end": float(m["entropy"].iloc[-1]),
                "reached": reached,
                "final_eval": final_eval(run),
                "ceiling_minus_reached": fit["ceiling"] - reached,
                "holds": bool(holds) if known(fit["r2"], fit["half_rmse"]) else None,
            }
        )
    columns = "steps n a b r2 ceiling half_rmse half_mae entropy_start entropy_end reached final_eval".split()
    return pd.DataFrame(rows, columns=[*RUN_KEYS, *columns, "ceiling_minus_reached", "holds"])


LAW_VALUES = ["r2", "a", "b", "ceiling", "reached", "final_eval", "ceiling_minus_reached", "half_rmse", "entropy_drop"]
# The range of each bounded value; the fitted a, b and ceiling stay as fitted (a ceiling above 1 is an extrapolation).
LAW_BOUNDS = {"r2": (None, 1.0), "reached": SHARE, "final_eval": SHARE, "half_rmse": NONNEGATIVE}


def entropy_law_summary(runs: pd.DataFrame) -> pd.DataFrame:
    if runs.empty:
        return pd.DataFrame(columns=["experiment", "setting", "n", "holds"])
    runs = runs.assign(entropy_drop=runs["entropy_start"] - runs["entropy_end"], holds=runs["holds"].astype(float))
    by = runs.groupby(["experiment", "setting"], sort=False)
    # n: the runs fitted; a fit on constant data has no R² (nor a and b), so each value's interval has its own count
    out = mean_spread(runs, ["experiment", "setting"], LAW_VALUES).assign(n=by.size().values)
    out = kit.add_intervals(out, LAW_VALUES, bounds=LAW_BOUNDS, counts=by[LAW_VALUES].count())
    return out.assign(holds=by["holds"].sum().values)


# ----------------------------------------------------------------------------- advantage scaling
def adv_scaling_runs(ctx) -> pd.DataFrame:
    """Per run of the advantage-scaling experiment and number of carries: held-out greedy
    accuracy at the start and the end (heldout.csv)."""
    rows = []
    for run in ctx.experiment(EXPERIMENT):
        path = ctx.run_file(run, layout.RUN_DIR) / "heldout.csv"
        if not run.ok or not path.exists():
            continue
        h = run_file_csv(run, path)
        is_add = ctx.cfg["tasks"].get(run.settings.get("task"), {}).get("op") == "add"
        h["carries"] = dx.carries(h["a"], h["b"]) if is_add else -1  # carries are addition's measure of difficulty
        for c, g in [("all", h), *h.groupby("carries")]:
            rows.append(
                {
                    "setting": setting(run.spec),
                    "seed": run.spec.seed,
                    "warmup": warmup(run),
                    "carries": str(c),
                    "problems": len(g),
                    "initial": float(g["initial"].mean()),
                    "final": float(g["final"].mean()),
                }
            )
    df = pd.DataFrame(rows, columns=["setting", "seed", "warmup", "carries", "problems", "initial", "final"])
    return df.assign(gain=df["final"] - df["initial"])


def adv_scaling_summary(runs: pd.DataFrame) -> pd.DataFrame:
    out = mean_spread(runs, ["setting", "carries"], ["initial", "final", "gain", "problems"])
    # the accuracies are bounded; the gain is a difference
    return kit.add_intervals(out, ["initial", "final", "gain"], bounds={"initial": SHARE, "final": SHARE})


# ----------------------------------------------------------------------------- noise scale
def noise_scale_table(ctx) -> pd.DataFrame:
    """The gradient probe's noise scale beside the batch study's outcome per batch size."""
    gains = pd.DataFrame(
        [
            {"batch_size": r.settings["batch_size"], "lr": r.settings["lr"], "gain": gain(r)}
            for r in ctx.experiment("batch")
            if r.ok
        ],
        columns=["batch_size", "lr", "gain"],
    )
    sizes, rows = sorted(set(gains["batch_size"])) or [NAN], []
    for task in ctx.cfg.get("gradvar", {}).get("tasks", []):
        ns = (ctx.gradvar(task) or {}).get("noise_scale") or {}
        b_noise = ns.get("noise_scale", NAN)
        for b in sizes:
            g = gains[gains["batch_size"] == b]
            est = mean_interval(g["gain"].tolist())
            rows.append(
                {
                    "task": task,
                    "grad_sq": ns.get("grad_sq", NAN),
                    "trace_sigma": ns.get("trace_sigma", NAN),
                    "noise_scale": b_noise,
                    "batch_size": b,
                    "lr": float(g["lr"].iloc[0]) if len(g) else NAN,
                    **kit.estimate_columns("gain", est),
                    "n": est.n,
                    # McCandlish et al.: the best step size grows as B / (B + B_noise); relative to the largest B
                    "lr_scale": (b / (b + b_noise)) / (max(sizes) / (max(sizes) + b_noise))
                    if known(b, b_noise)
                    else NAN,
                }
            )
    columns = "task grad_sq trace_sigma noise_scale batch_size lr gain_mean gain_lo gain_hi n lr_scale".split()
    return pd.DataFrame(rows, columns=columns)


def noise_scale_steps(ctx) -> pd.DataFrame:
    """Runs that logged the squared gradient norms (grad_noise_scale: true): B_noise over the
    first and the last quarter of the steps, from the squared norms averaged over those steps
    (McCandlish et al. average |G|² and tr(Σ) before taking their ratio; one step's is noisy)."""
    rows = []
    for keys, run in ok_runs(ctx):
        m = run.metrics
        if "grad_sq_micro" not in m or m["grad_sq_micro"].notna().sum() < 4:
            continue
        q, b, big = max(1, len(m) // 4), run.settings.get("micro_batch_size"), run.settings.get("batch_size")
        est = {
            part: dx.noise_scale(b, big, float(w["grad_sq_micro"].mean()), float(w["grad_sq_batch"].mean()))[
                "noise_scale"
            ]
            for part, w in (("early", m.head(q)), ("late", m.tail(q)))
        }
        rows.append({**keys, "batch_size": big, **est, "undefined_steps": int(m["grad_noise_scale"].isna().sum())})
    df = pd.DataFrame(rows, columns=[*RUN_KEYS, "batch_size", "early", "late", "undefined_steps"])
    out = mean_spread(df, ["experiment", "setting", "batch_size"], ["early", "late", "undefined_steps"])
    return kit.add_intervals(out, ["early", "late"])


# ----------------------------------------------------------------------------- update diagnostics
# A run with a fault injected by the trainer's test hooks (a gradient spike, a NaN) shows the fault's dynamics,
# not training's.
FAULT_STEPS = ("fault_grad_spike_step", "fault_nan_step")
UPDATE = ["clip_frac_low", "clip_frac_high", "ppo_kl", "adv_std", "adv_abs_max", "logp_adv_cov", "cov_entropy_corr"]
UPDATE_BOUNDS = {
    "clip_frac_low": SHARE,
    "clip_frac_high": SHARE,
    "adv_std": NONNEGATIVE,
    "adv_abs_max": NONNEGATIVE,
    "cov_entropy_corr": (-1.0, 1.0),
}


def update_runs(ctx) -> pd.DataFrame:
    """Per run of any experiment that logged the update diagnostics: their step means, and the Spearman correlation
    between the log-prob/advantage covariance at step t and the entropy change H(t+1) − H(t) (the Entropy Mechanism
    paper: entropy falls where the covariance is positive; measures/policy_updates.py)."""
    rows = [
        {
            **keys,
            "fault_injected": "yes" if any(run.settings.get(k) is not None for k in FAULT_STEPS) else "no",
            **{c: MEASURES[c][1](run) for c in UPDATE},
        }
        for keys, run in ok_runs(ctx)
        if "logp_adv_cov" in run.metrics
    ]
    return pd.DataFrame(rows, columns=CLAIM_TABLES["diagnostics_update_runs"])


def update_summary(runs: pd.DataFrame) -> pd.DataFrame:
    # n: every run counts, also where its loss has no PPO clip (clip_frac_low empty, as under CISPO)
    out = mean_spread(runs, ["experiment", "setting"], UPDATE)
    out["n"] = runs.groupby(["experiment", "setting"], sort=False).size().values
    return kit.add_intervals(out, UPDATE, bounds=UPDATE_BOUNDS)


# ----------------------------------------------------------------------------- the study
# The tables claims read that the run tables (mathrl.analysis.measures) cannot give, and their columns, stated once:
# the tables are made with them, and mathrl.analysis.claim_names reads this assignment from the source (without
# importing the module) to check a claim's names when the config is read. pass@k and the advantage scaling have a row
# per run and k or number of carries, from files of the run's directory; the update diagnostics read every experiment
# of the configuration, the runs that logged them.
PASS_AT_K = [*RUN_KEYS, "phase", "k", "problems", "pass_at_k", "boot_lo", "boot_hi"]
CLAIM_TABLES = {
    "diagnostics_pass_at_k_runs": PASS_AT_K,
    # the negative controls' rows of pass_at_k_runs, apart: their claims are not the other runs'
    "diagnostics_negative_controls_pass_at_k_runs": PASS_AT_K,
    "diagnostics_update_runs": [*RUN_KEYS, "fault_injected", *UPDATE],
    "diagnostics_adv_scaling_runs": ["setting", "seed", "warmup", "carries", "problems", "initial", "final", "gain"],
}


def tables(ctx) -> dict[str, pd.DataFrame]:
    pk, law, adv, upd = pass_at_k_runs(ctx), entropy_law_runs(ctx), adv_scaling_runs(ctx), update_runs(ctx)
    is_control = pk["experiment"] == negative_controls.EXPERIMENT  # their pass@k has claims of its own
    controls, pk = pk[is_control], pk[~is_control]
    return {
        "diagnostics_pass_at_k_runs": pk,
        "diagnostics_pass_at_k": pass_at_k_summary(pk),
        "diagnostics_entropy_law_runs": law,
        "diagnostics_entropy_law": entropy_law_summary(law),
        "diagnostics_adv_scaling_runs": adv,
        "diagnostics_adv_scaling": adv_scaling_summary(adv),
        "diagnostics_noise_scale": noise_scale_table(ctx),
        "diagnostics_noise_scale_steps": noise_scale_steps(ctx),
        "diagnostics_update_runs": upd,
        "diagnostics_update": update_summary(upd),
        **rollout_mismatch.tables(
            ctx, kit.roles(ctx.cfg, rollout_mismatch.EXPERIMENT, ("control",))
        ),  # the rollout/trainer mismatch
        **compute_curves.tables(((k["experiment"], k["setting"], run) for k, run in ok_runs(ctx)), ctx.cfg),
        **negative_controls.tables(
            ctx.run_table("diagnostics_negative_controls_runs"),
            controls,
            kit.roles(ctx.cfg, negative_controls.EXPERIMENT, ("reference",)),
        ),
        **loss_comparison.tables(ctx, kit.roles(ctx.cfg, loss_comparison.EXPERIMENT, (loss_comparison.BASELINE,))),
        **high_entropy_tokens.tables(ctx),
    }


def figures(t) -> dict[str, plt.Figure]:
    out = {}
    pk = t["diagnostics_pass_at_k"]
    fig, ax = plt.subplots(figsize=(6, 3.6), layout="constrained")
    cells = pk.groupby(["experiment", "setting", "phase"], sort=False) if len(pk) else []
    groups = [(f"{exp}/{name} {phase}", g) for (exp, name, phase), g in cells]
    labels = dict(xlabel="k", ylabel="pass@k (held-out)", title="pass@k before and after RL (95% interval over seeds)")
    bands(ax, groups, "pass_at_k", "no run asked for pass@k", x="k", legend={"fontsize": 7}, **labels)
    if len(pk):
        ax.set_xscale("log", base=2)
    out["diagnostics_pass_at_k"] = fig

    law = t["diagnostics_entropy_law_runs"]
    fig, ax = plt.subplots(figsize=(6, 3.6), layout="constrained")
    if len(law):
        colors = [COLORS[i % len(COLORS)] for i in pd.factorize(law["experiment"])[0]]
        ax.scatter(law["r2"], law["half_rmse"] * 100, s=12, c=colors)
        ax.axvline(LAW_R2, color="0.5", ls=":")
        ax.axhline(LAW_RMSE * 100, color="0.5", ls=":")
        for i, exp in enumerate(pd.unique(law["experiment"])):
            ax.scatter([], [], color=COLORS[i % len(COLORS)], label=exp, s=12)
        ax.legend(fontsize=7)
    else:
        placeholder(ax, "no runs to fit")
    ax.set(
        xlabel="R² of R = −a·exp(H) + b",
        ylabel="first-half fit's error on the second half (RMSE, points)",
        title="The entropy law per run (lower right: it holds)",
    )
    out["diagnostics_entropy_law"] = fig

    adv = t["diagnostics_adv_scaling"]
    fig, ax = plt.subplots(figsize=(6, 3.6), layout="constrained")
    adv = adv[adv["carries"].astype(str) != "all"] if len(adv) else adv
    if len(adv):
        for i, (name, g) in enumerate(adv.groupby("setting", sort=False)):
            x = g["carries"].astype(int).to_numpy() + (i - (adv["setting"].nunique() - 1) / 2) * 0.18
            ax.errorbar(
                x,
                g["gain_mean"] * 100,
                yerr=[(g["gain_mean"] - g["gain_lo"]) * 100, (g["gain_hi"] - g["gain_mean"]) * 100],
                fmt="o",
                color=COLORS[i % len(COLORS)],
                label=name,
                capsize=2,
            )
        ax.axhline(0, color="0.5", lw=0.8)
        ax.legend(fontsize=7)
    else:
        placeholder(ax, "no advantage-scaling runs")
    title = "Advantage scaling by difficulty (95% interval over seeds)"
    ax.set(xlabel="carries in the problem", ylabel="held-out gain (points)", title=title)
    out["diagnostics_adv_scaling"] = fig
    out.update(rollout_mismatch.figures(t))  # the rollout/trainer mismatch
    out["diagnostics_curves"] = compute_curves.figure(t)
    out["diagnostics_policy_losses"] = loss_comparison.figure(t)
    out["diagnostics_token_selection"] = high_entropy_tokens.figure(t)
    return out


def section(t) -> dict:
    rows = section_verdicts.verdicts(t, NAME)
    apart = (loss_comparison.PART, high_entropy_tokens.PART)  # shown in their own parts of the section
    return {
        "pass_at_k": t["diagnostics_pass_at_k"],
        "pass_at_k_runs": t["diagnostics_pass_at_k_runs"],
        "law": t["diagnostics_entropy_law"],
        "law_runs": t["diagnostics_entropy_law_runs"],
        "adv": t["diagnostics_adv_scaling"],
        "noise": t["diagnostics_noise_scale"],
        "noise_steps": t["diagnostics_noise_scale_steps"],
        "updates": t["diagnostics_update"],
        "verdicts": rows,
        "other_verdicts": [r for r in rows if r.get("part") not in apart],
        "ks": KS,
        "law_r2": LAW_R2,
        "law_rmse": LAW_RMSE,
        "reached_steps": REACHED_STEPS,
        "experiment": EXPERIMENT,
        "mismatch": rollout_mismatch.section(t),  # the rollout/trainer mismatch (sections/mismatch.html.j2)
        **compute_curves.section(t),
        **negative_controls.section(t),
        **loss_comparison.section(t),
        "losses_verdicts": section_verdicts.verdicts(t, NAME, loss_comparison.PART),
        **high_entropy_tokens.section(t),
        "tokens_verdicts": section_verdicts.verdicts(t, NAME, high_entropy_tokens.PART),
    }
