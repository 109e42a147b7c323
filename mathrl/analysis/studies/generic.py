"""Every experiment of the configuration, a user's own included, in one generic form.

Per experiment and setting (a variant or a grid point): held-out accuracy, policy entropy,
KL to the reference and training reward over the steps, with 95% interval bands across
seeds; and a table of start, final, best and gain with their 95% intervals. Held-out
accuracy on N problems carries its own sampling error (a standard error of about 1.1 points
at 50% on the default's 2000 problems, 1.6 on 1000), shown beside the final accuracy.
Where the experiment declares a `baseline` role, or else a `reference` role, each setting's probability of
improvement over that setting (rliable.metrics: the share of seed pairs in which it ends higher) is given too.
An experiment's own `claims:` are judged by the claims engine (mathrl.analysis.claims) and shown
under its table.
"""

from __future__ import annotations

import math

import pandas as pd
from rliable import metrics as rly

import mathrl.analysis.kit as kit
from mathrl.analysis import section_verdicts
from mathrl.analysis.figure_style import bands, plt
from mathrl.analysis.measures.general import metric_range, n_eval
from mathrl.analysis.measures.series import known
from mathrl.analysis.measures.tables import value
from mathrl.analysis.results import warmup
from mathrl.analysis.verdict import binomial_halfwidth

NAME = "generic"
TITLE = "Every experiment at a glance"
DOCUMENT = ""

METRICS = {
    "eval_accuracy": "held-out accuracy",
    "entropy": "mean token entropy",
    "kl": "KL to the reference",
    "reward_mean": "training reward",
}
VALUES = {"start": "initial_eval", "final": "final_eval", "best": "peak_eval", "gain": "gain"}  # {column: measure}


def setting(spec) -> str:
    """`kit.setting`, and "default" for a run with neither a variant nor a grid point."""
    return kit.setting(spec) or "default"


def per_run(ctx) -> pd.DataFrame:
    """One row per run of every experiment: its setting, status, the problems an evaluation reads, and held-out
    accuracy at the start and end, its best after the start and its gain (NaN for a run without a result)."""
    rows = [
        {
            "experiment": exp,
            "setting": setting(run.spec),
            "seed": run.spec.seed,
            "warmup": warmup(run),
            "status": run.status,
            "eval_size": n_eval(run) or math.nan,
            **{column: float(value(run, m)) for column, m in VALUES.items()},
        }
        for exp in ctx.cfg["experiments"]
        for run in ctx.experiment(exp)
    ]
    return pd.DataFrame(rows, columns=["experiment", "setting", "seed", "warmup", "status", "eval_size", *VALUES])


def summary_table(runs: pd.DataFrame, cfg: dict) -> pd.DataFrame:
    """Per experiment and setting: n, mean with its 95% t interval of each value, the sampling
    error of one evaluation at the final accuracy, and the probability of improvement over a
    declared baseline."""
    if runs.empty:
        return pd.DataFrame(columns=["experiment", "setting", "n"])
    out = kit.add_intervals(kit.summarise(runs, ["experiment", "setting"], list(VALUES)), list(VALUES))
    sizes = runs.groupby(["experiment", "setting"], sort=False)["eval_size"].max().values
    out["eval_error"] = [
        binomial_halfwidth(p, int(n)) if known(p, n) else math.nan for p, n in zip(out["final_mean"], sizes)
    ]
    out["eval_size"] = sizes
    over = [comparator(cfg["experiments"][e]) or "" for e in out["experiment"]]
    finals = lambda e, s: runs[(runs.experiment == e) & (runs.setting == s)]["final"].dropna().to_numpy()  # noqa: E731
    p_imp = []
    for e, s, base in zip(out["experiment"], out["setting"], over):
        a, b = finals(e, s), finals(e, base)
        compared = base and len(a) and len(b) and s != base
        p_imp.append(float(rly.probability_of_improvement(a[:, None], b[:, None])) if compared else math.nan)
    out["p_improvement"], out["p_improvement_over"] = p_imp, over
    return out


def comparator(experiment: dict) -> str | None:
    """The setting an experiment's settings are compared with by the probability of improvement: the variant of its
    `baseline` role, else of its `reference` role (the setting in which RL learns); None where it declares neither."""
    roles = experiment.get("roles") or {}
    return roles.get("baseline") or roles.get("reference")


def curves_table(ctx) -> pd.DataFrame:
    """Per experiment, setting, metric and step: mean, std and n across seeds (eval from step 0)."""
    frames = [
        f.assign(experiment=exp, setting=setting(run.spec))
        for exp in ctx.cfg["experiments"]
        for run in ctx.experiment(exp)
        if run.ok
        for f in kit.metric_frames(run, METRICS)
    ]
    logged = [pd.concat(frames, ignore_index=True).dropna(subset=["value"])] if frames else []
    return kit.metric_curves(logged, ["experiment", "setting"], sort=False)


def tables(ctx) -> dict[str, pd.DataFrame]:
    return {"generic_summary": summary_table(per_run(ctx), ctx.cfg), "generic_curves": curves_table(ctx)}


def figure(c: pd.DataFrame, experiment: str, settings: dict[str, dict] | None = None) -> plt.Figure:
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6), layout="constrained")
    d = c[c["experiment"] == experiment] if len(c) else c
    for ax, (metric, label) in zip(axes, METRICS.items()):
        m = d[d["metric"] == metric] if len(d) else d
        groups = [(name, g.sort_values("step")) for name, g in (m.groupby("setting", sort=False) if len(m) else [])]
        limits = [metric_range(metric, (settings or {}).get(name)) for name, _ in groups]  # a legend for the figure
        bands(ax, groups, metric, f"no {label} logged", "", limits=limits, legend=False, title=label, ylabel=label)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside right upper", fontsize=7)
    fig.suptitle(f"{experiment}: mean and 95% interval across seeds")
    return fig


def figures(t) -> dict[str, plt.Figure]:
    s, c = t["generic_summary"], t["generic_curves"]
    exps = list(dict.fromkeys(s["experiment"])) if "experiment" in s else []
    return {f"generic_{e}": figure(c, e, kit.first_settings(t.cfg, e, setting)) for e in exps}


def section(t) -> dict:
    """Per experiment of the config: its description, roles, summary rows, figure and verdicts."""
    s = t["generic_summary"]
    return {
        "experiments": [
            {
                "name": e,
                "description": spec.get("description", ""),
                "summary": s[s["experiment"] == e] if "experiment" in s else s.iloc[0:0],
                "figure": f"generic_{e}",
                "roles": spec.get("roles") or {},
                "over": comparator(spec),
                "claims": section_verdicts.verdicts(t, NAME, e),
            }
            for e, spec in t.cfg["experiments"].items()
        ]
    }
