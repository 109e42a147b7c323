"""Lab 04, the core challenges of RL training: entropy collapse, vanishing gradients when
every reward of a batch is equal, and reward hacking; on the 3-armed bandit (mathrl.engine.bandit)
and on the GPT (experiment `lab04_gpt`, where DAPO is tried as the remedy).

The bandit tables claims read (lab04_entropy, lab04_vanishing, lab04_hacking: one row per setting and seed, then a
pooled row per setting with seed `all`) are declared with their measures in mathrl.analysis.measures.bandit_seeds;
the GPT runs' measures are registered in mathrl.analysis.measures.training_challenges (the run table
lab04_gpt_runs). Here: the report's summaries of them (the local optima per setting; the GPT table per variant
follows `mean_spread`: `{v}_mean`, `{v}_std`, `n` (runs with a result) and `expected`), the bandit's curves and
the figures.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

import mathrl.analysis.kit as kit
from mathrl.analysis import section_verdicts
from mathrl.analysis.figure_style import BAND_NOTE, COLORS, band_panels, placeholder, plt, table_band
from mathrl.analysis.measures.bandit_seeds import (
    BANDIT_WINDOW,
    DOMINANT,
    SETTLED_MOVE,
    SETTLED_SPAN,
    SEVERITY_DEFINITION,
    hacked,
)
from mathrl.analysis.measures.series import WINDOW, known
from mathrl.analysis.measures.tables import role_of
from mathrl.analysis.measures.training_challenges import GPT_MEASURES
from mathrl.analysis.results import mean_spread
from mathrl.analysis.verdict import OUTCOMES
from mathrl.pipeline import bandit_config as bandit  # the study's settings; no torch for tables and figures

NAME = "lab04"
TITLE = "Lab 04: entropy collapse, vanishing gradients and reward hacking"
DOCUMENT = "lab04-training-challenges.md"

EXPERIMENT = "lab04_gpt"
ROLES = ("normal", "aggressive", "proxy", "random_policy", "perfect_policy")  # every config names these
# the exploding-KL setting and its remedies (rl-stability-batch-and-hyperparameters.md, 八), several epochs against one,
# the function-based reward; and, where a config runs them (config/full.yaml), the entropy remedies
KL_ROLES = ("kl_failing", "kl_clip", "kl_epochs", "kl_batch")
OTHER_ROLES = ("epochs_one", "epochs_four", "function", "entropy_failing", "clip_higher", "remedy", "low_temperature")
# Optional roles: the covariance remedies of arXiv 2505.22617, judged like clip-higher (config/claims.yaml) where an
# experiment names them (config/full.yaml does; the default leaves them out of its budget).
COV_REMEDIES = ("clip_cov", "kl_cov")
# Optional roles: the troubleshooting table's remedies (rl-stability-batch-and-hyperparameters.md 八) for collapsing
# entropy and for an exploding KL, judged on the same failing setting where an experiment names them.
TABLE_REMEDIES = ("entropy_bonus", "temperature")
# the logged per-step metrics the figures draw (p3 where a study has a fourth arm; not the settings lr, entropy_coef)
METRICS = "entropy p0 p1 p2 p3 loss grad_norm reward_std reward_mean proxy_reward true_reward".split()


# ---- tables: from the bandit tables, the run table and the files ------------------------
def local_optima_table(ent: pd.DataFrame) -> pd.DataFrame:
    """Per setting: how many seeds ended at the global optimum, a local one or neither, how many were
    still moving at the end (the measure `moving`), and the local-optimum rate with its 95% Wilson interval."""
    rows = []
    for setting, g in _seeds(ent).groupby("setting", sort=False):
        counts = {x: int((g["converged_to"] == x).sum()) for x in ("global", "local", "none")}
        n = sum(counts.values())
        rows.append(
            {
                "setting": setting,
                "n": n,
                **counts,
                **kit.wilson_columns("local_rate", counts["local"], n),
                "moving": int((g["moving"] == 1).sum()) if "moving" in g else 0,
                "initial_best_prob": g["initial_best_prob"].mean(),
            }
        )
    columns = "setting n global local none moving local_rate local_rate_lo local_rate_hi initial_best_prob"
    return pd.DataFrame(rows, columns=columns.split())


POINT_COLUMNS = ["setting", "seed", "step", "phase", "grad_norm", "reward_std"]  # the vanishing study's scatter


def vanishing_points(ctx) -> pd.DataFrame:
    """Every step of every seed of the gradient-vanishing study: its phase, gradient norm and reward std."""
    found = [s.frame[POINT_COLUMNS] for s in ctx.bandit_seeds("gradient_vanishing") if len(s.frame)]
    return pd.concat(found, ignore_index=True) if found else pd.DataFrame(columns=POINT_COLUMNS)


def bandit_curves(ctx) -> pd.DataFrame:
    """Per study, setting and step: mean and std of every metric across seeds (for the figures)."""
    frames = []
    for study in bandit.BANDIT_STUDIES:
        df = ctx.bandit(study)
        if df is not None and len(df):
            df = df.assign(phase=df["phase"].astype(object).fillna(""))
            frames.append(mean_spread(df, ["study", "setting", "step", "phase"], [m for m in METRICS if m in df]))
    empty = pd.DataFrame(columns=["study", "setting", "step", "phase", "n"])
    return pd.concat(frames, ignore_index=True) if frames else empty


def differences(settings: dict, against: dict) -> list[tuple[str, object, object]]:
    """(key, value, other value) for every run setting but the seed where `settings` differ from `against`, by key."""
    keys = sorted((set(settings) | set(against)) - {"seed"})
    return [(k, settings.get(k), against.get(k)) for k in keys if settings.get(k) != against.get(k)]


# roles set beside aggressive
COMPARED_TO_FAILURE = (
    "kl_clip",
    "kl_epochs",
    "kl_batch",
    "clip_higher",
    "remedy",
    "entropy_bonus",
    "temperature",
    "clip_cov",
    "kl_cov",
)


def _shown(value) -> str:
    """A setting's value as the report prints it: "unset" for None (a CSV would read "None" back as missing)."""
    return "unset" if value is None else str(value)


def differences_table(ctx, role: dict[str, str]) -> pd.DataFrame:
    """Per remedy compared with the failing setting of its cause (role kl_failing: the exploding KL; where a config runs
    the entropy remedies, entropy_failing): each run setting it changes, from the config's expansion of the
    experiment (seed 0's run of each variant)."""
    spec = {run.spec.variant or "": run.spec.settings.as_dict() for run in reversed(ctx.experiment(EXPERIMENT))}
    failing_of = {r: "kl_failing" if r in KL_ROLES else "entropy_failing" for r in COMPARED_TO_FAILURE}
    rows = [
        {
            "role": r,
            "variant": role[r],
            "against": role[failing_of[r]],
            "setting": key,
            "value": _shown(value),
            "failing": _shown(other),
        }
        for r in COMPARED_TO_FAILURE
        if role.get(r) in spec and role.get(failing_of[r]) in spec
        for key, value, other in differences(spec[role[r]], spec[role[failing_of[r]]])
    ]
    return pd.DataFrame(rows, columns=["role", "variant", "against", "setting", "value", "failing"])


def gpt_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per variant: mean and std across seeds; n counts runs with a result, expected all of them."""
    out = mean_spread(runs, ["variant"], GPT_MEASURES)
    if len(runs):
        g = runs.groupby("variant", sort=False)
        out["n"] = out["variant"].map(g["status"].agg(lambda s: int(s.isin(["complete", "stopped_nonfinite"]).sum())))
        out["expected"] = out["variant"].map(g.size())
    return out


def _seeds(df: pd.DataFrame, pooled: bool = False) -> pd.DataFrame:
    """The per-seed rows of a bandit table, or (`pooled`) its rows with seed 'all', one per setting."""
    return df[(df["seed"].astype(str) == "all") == pooled] if len(df) and "seed" in df else df


def tables(ctx) -> dict[str, pd.DataFrame]:
    """The report's tables; the bandit tables claims read are declared in mathrl.analysis.measures.bandit_seeds."""
    runs = ctx.run_table("lab04_gpt_runs")
    gpt = gpt_table(runs)
    role = kit.roles(ctx.cfg, EXPERIMENT, ROLES) if len(runs) else {}
    named = role_of(role, (*ROLES, *KL_ROLES, *OTHER_ROLES, *COV_REMEDIES, *TABLE_REMEDIES))
    gpt.insert(1, "role", gpt["variant"].map(named).fillna("") if len(gpt) else [])
    return {
        "lab04_gpt_differences": differences_table(ctx, role),
        "lab04_local_optima": local_optima_table(ctx.bandit_table("lab04_entropy")),
        "lab04_vanishing_points": vanishing_points(ctx),
        "lab04_bandit_curves": bandit_curves(ctx),
        "lab04_gpt": gpt,
    }


# ---- figures: from the tables alone ----------------------------------------------------
def _bandit(t, study: str) -> pd.DataFrame:
    c = t["lab04_bandit_curves"]
    # by step, stably: each setting's rows in step order, the settings in the config's order (not alphabetical)
    return c[c["study"] == study].sort_values("step", kind="stable") if "study" in c else pd.DataFrame()


def seed_band(curves: pd.DataFrame, variant: str, metric: str) -> pd.DataFrame:
    """Per step of one lab04_gpt variant: mean, std and n across seeds of `metric` (read from
    the `curves` table); eval_accuracy starts at step 0 with the accuracy before RL."""
    if curves.empty or metric not in curves:
        return pd.DataFrame(columns=["step", "mean", "std", "n"])
    c = curves.loc[(curves["experiment"] == EXPERIMENT) & (curves["variant"] == variant), ["run_id", "step", metric]]
    if metric == "eval_accuracy":
        first = curves.loc[c.index].drop_duplicates("run_id")
        c = pd.concat([pd.DataFrame({"run_id": first["run_id"], "step": 0, metric: first["initial_eval"]}), c])
    g = c.dropna(subset=[metric]).groupby("step")[metric]
    return pd.DataFrame({"mean": g.mean(), "std": g.std(), "n": g.count()}).reset_index()


def _label(ax, title: str, xlabel: str, ylabel: str) -> None:
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()


COMPARED = ("normal", "aggressive", *KL_ROLES, "clip_higher", "remedy", *COV_REMEDIES, *TABLE_REMEDIES)  # drawn
ACTION_COLORS = (COLORS[4], COLORS[5], COLORS[9])  # the bandit's actions, in colours no setting of the panels uses
STARTS = ("random_policy", "perfect_policy")  # GPT roles starting from a random or a near-perfect policy: drawn apart


def _settings(ax, c: pd.DataFrame, metric: str, label: str) -> None:
    """One band per setting of a bandit study (labelled `label` when there is only one)."""
    groups = list(c.groupby("setting", sort=False))
    for i, (setting, g) in enumerate(groups):
        table_band(ax, g, metric, setting if len(groups) > 1 else label, COLORS[i])


def by_horizon(c: pd.DataFrame) -> list[tuple[int, pd.DataFrame]]:
    """A study's curves split by how many steps its settings run (the document's 200-step settings apart from the
    1,500-step biased ones), shortest first: one time axis per panel."""
    if c.empty:
        return []
    last = c.groupby("setting", sort=False)["step"].transform("max")
    return [(int(h), c[last == h]) for h in sorted(last.unique())]


def _horizon_panels(fig, cell, c: pd.DataFrame, metric: str, title: str, ylabel: str) -> list:
    """One panel of `metric` per horizon of the entropy-collapse settings (`by_horizon`), stacked in `cell`."""
    groups = by_horizon(c)
    if not groups:
        ax = fig.add_subplot(cell)
        placeholder(ax, "no entropy-collapse data")
        _label(ax, title, "step", ylabel)
        return [ax]
    grid = cell.subgridspec(len(groups), 1, hspace=0.6)
    axes = []
    for k, (steps, g) in enumerate(groups):
        ax = fig.add_subplot(grid[k, 0])
        _settings(ax, g, metric, metric)
        _label(ax, f"{title}: the {steps:,}-step settings" if len(groups) > 1 else title, "step", ylabel)
        axes.append(ax)
    return axes


def _shade_homogeneous(ax, c: pd.DataFrame) -> None:
    steps = c.drop_duplicates("step")
    hom = steps.loc[steps["phase"] == "homogeneous", "step"].to_numpy()
    cuts = np.where(np.diff(hom) > 1)[0]
    for i, (a, b) in enumerate(zip(np.r_[hom[:1], hom[cuts + 1]], np.r_[hom[cuts], hom[-1:]])):
        ax.axvspan(a - 0.5, b + 0.5, color="0.6", alpha=0.15, lw=0, label="homogeneous rewards" if i == 0 else None)


def _probabilities(fig, cell, ec: pd.DataFrame) -> None:
    """The action probabilities, one small panel per entropy-collapse setting (a colour per action)."""
    settings = list(ec.groupby("setting", sort=False)) if len(ec) else []
    if not settings:
        ax = fig.add_subplot(cell)
        placeholder(ax, "no entropy-collapse data")
        return _label(ax, "Action probabilities", "step", "probability")
    cols = min(2, len(settings))
    grid = cell.subgridspec(-(-len(settings) // cols), cols, hspace=0.95, wspace=0.3)
    axes = []
    for k, (setting, g) in enumerate(settings):
        ax = fig.add_subplot(grid[k // cols, k % cols], sharey=axes[0] if axes else None)
        for i in range(3):
            table_band(ax, g, f"p{i}", f"action {i}", ACTION_COLORS[i])
        ax.set_title(f"Action probabilities: {setting}", fontsize=8)
        ax.set_xlabel("step", fontsize=7)
        ax.set_ylabel("probability", fontsize=7)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7, loc="center right", handlelength=1.2, borderpad=0.3, labelspacing=0.2)
        axes.append(ax)
    axes[0].set_ylim(-0.02, 1.02)


def six_panel(t) -> plt.Figure:
    fig = plt.figure(figsize=(15, 8.5))
    grid = fig.add_gridspec(2, 3)
    a_grad, a_std, a_scatter = (fig.add_subplot(grid[1, k]) for k in range(3))
    ec, gv, pts = _bandit(t, "entropy_collapse"), _bandit(t, "gradient_vanishing"), t["lab04_vanishing_points"]
    _horizon_panels(fig, grid[0, 0], ec, "entropy", "Policy entropy (entropy collapse)", "entropy (nats)")
    _probabilities(fig, grid[0, 1], ec)
    _horizon_panels(fig, grid[0, 2], ec, "loss", "Training loss", "loss")
    for ax, metric in ((a_grad, "grad_norm"), (a_std, "reward_std")):
        if len(gv):
            _shade_homogeneous(ax, gv)
            _settings(ax, gv, metric, metric.replace("_", " "))
        else:
            placeholder(ax, "no gradient-vanishing data")
    if len(gv):
        a_grad.set_yscale("symlog", linthresh=1e-6)  # exact zeros (equal rewards) stay visible
        for y, name in ((1e-4, "document: < 1e-4 when homogeneous"), (1e-3, "document: > 1e-3 when diverse")):
            a_grad.axhline(y, color="0.3", ls=":", lw=1, label=name)
    if len(pts):
        for i, (phase, g) in enumerate(pts.groupby("phase")):
            label = f"{phase} ({len(g)} steps)"
            a_scatter.scatter(g["reward_std"], g["grad_norm"], s=8, alpha=0.5, color=COLORS[i + 3], label=label)
        a_scatter.set_yscale("symlog", linthresh=1e-6)
    else:
        placeholder(a_scatter, "no gradient-vanishing data")
    _label(a_grad, "Gradient norm (vanishing gradients)", "step", "gradient norm (symlog)")
    _label(a_std, "Reward std within the batch", "step", "reward std")
    _label(a_scatter, "Gradient norm against reward std", "reward std", "gradient norm (symlog)")
    fig.suptitle(f"Lab 04 on the bandit: {BAND_NOTE}")
    fig.tight_layout()
    return fig


def hacking_figure(t) -> plt.Figure:
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2))
    rh = _bandit(t, "reward_hacking")
    if len(rh):
        table_band(left, rh, "proxy_reward", "proxy score (optimised)", COLORS[3])
        table_band(left, rh, "true_reward", "true reward", COLORS[2])
    else:
        placeholder(left, "no reward-hacking bandit data")
    proxy = kit.row_of(t["lab04_gpt"], role="proxy").get("variant", "")
    lines = (("reward_mean", "training reward = proxy score", 3), ("accuracy", "exact-match accuracy (sampled)", 2))
    series = [(seed_band(t["curves"], proxy, m), m, label, COLORS[k]) for m, label, k in lines]
    for s, metric, label, color in series:
        if len(s):
            table_band(right, s, metric, label, color, value="")
    if not any(len(s) for s, *_ in series):
        placeholder(right, "no proxy_reward GPT runs")
    _label(left, "Bandit: proxy score and true reward", "step", "mean reward of the batch")
    _label(right, "GPT, proxy_reward variant", "step", "reward / accuracy")
    fig.suptitle(f"Reward hacking: {BAND_NOTE}")
    fig.tight_layout()
    return fig


def _gpt_panel(t, names: list[str], metric: str, colour: dict, title: str, ylabel: str) -> dict:
    """The `bands` panel of one metric: a band per lab04_gpt variant of `names`, each in its colour."""
    groups = [(v, seed_band(t["curves"], v, metric)) for v in names]
    colors, labels = [colour[v] for v in names], dict(title=title, ylabel=ylabel)
    return dict(groups=groups, metric=metric, empty="no lab04_gpt runs", value="", colors=colors, **labels)


def gpt_figure(t) -> plt.Figure:
    """Top: entropy, held-out accuracy and KL to the warm-up of the settings the section compares; bottom, apart
    (their entropy would stretch the axis): the random and near-perfect starts."""
    gpt = t["lab04_gpt"]
    variants = gpt["variant"].tolist() if "variant" in gpt else []
    role = dict(zip(variants, gpt["role"])) if "role" in gpt else {}
    colour = {v: COLORS[k % len(COLORS)] for k, v in enumerate(variants)}
    compared = [v for v in variants if role.get(v) in COMPARED]
    starts = [v for v in variants if role.get(v) in STARTS]
    entropy, accuracy = "mean per-token entropy", "greedy exact-match accuracy"
    starts_title = "Random and near-perfect starts: "
    panels = [
        _gpt_panel(t, compared, "entropy", colour, "Token entropy", entropy),
        _gpt_panel(t, compared, "eval_accuracy", colour, "Held-out accuracy (step 0: before RL)", accuracy),
        _gpt_panel(t, compared, "kl", colour, "KL to the warm-up (the documents' alarm: 0.5)", "per-token KL (k3)"),
        _gpt_panel(t, starts, "frac_zero_std", colour, starts_title + "groups with equal rewards", "frac_zero_std"),
        _gpt_panel(t, starts, "entropy", colour, starts_title + "token entropy", entropy),
    ]
    fig = band_panels(panels, 2, 3, (16, 7.5), f"Lab 04 on the GPT: {BAND_NOTE}")
    fig.axes[2].axhline(0.5, color="0.3", ls=":", lw=1)
    fig.axes[3].set_ylim(-0.02, 1.02)  # a share
    fig.tight_layout()
    return fig


def figures(t) -> dict[str, plt.Figure]:
    return {"lab04_six_panel": six_panel(t), "lab04_hacking": hacking_figure(t), "lab04_gpt": gpt_figure(t)}


# ---- section: the template's context, from the tables ----------------------------------
PARTS = ("entropy", "vanishing", "hacking", "gpt")  # the section's parts (the document's claims: its template)
SHOWN = ("local_optima", "vanishing", "hacking", "gpt", "gpt_differences")  # the lab04_ tables the template shows


def part_summary(rows: list[dict]) -> str:
    """A part's verdicts counted by outcome; its setup checks (no claims of the document) counted apart."""
    setup = sum(r.get("kind") == "setup" for r in rows)
    counts = {o: sum(r["outcome"] == o and r.get("kind") != "setup" for r in rows) for o in OUTCOMES}
    summary = ", ".join(f"{k} {o}" for o, k in counts.items() if k) or "no verdicts"
    return summary + (f"; and {setup} setup check{'s' * (setup != 1)}, not counted" if setup else "")


def section(t) -> dict:
    """The verdicts per part and the rows the template's measured sentences and lab report read."""
    rows = section_verdicts.verdicts(t, NAME)
    grouped = section_verdicts.by_part(rows)
    ent = t["lab04_entropy"]
    a, n = (kit.row_of(ent, setting=setting, seed="all") for setting in ("aggressive", "normal"))
    hack = kit.row_of(t["lab04_hacking"], seed="all")
    gpt = {r: kit.row_of(t["lab04_gpt"], role=r) for r in (*ROLES, *KL_ROLES, *OTHER_ROLES, *COV_REMEDIES)}
    kept = n.get("final_policy_entropy", math.nan) - a.get(
        "final_policy_entropy", math.nan
    )  # by the normal setting over aggressive
    bandit_ends = ("proxy_start", "proxy_end", "true_start", "true_end")
    gpt_ends = ("reward_start_mean", "reward_end_mean", "accuracy_start_mean", "accuracy_end_mean")
    return {
        "parts": {
            part: {"rows": grouped.get(part, []), "summary": part_summary(grouped.get(part, []))} for part in PARTS
        },
        "verdict_list": rows,
        "severity_definition": SEVERITY_DEFINITION,
        "bandit_window": BANDIT_WINDOW,
        "gpt_window": WINDOW,
        "dominant": DOMINANT,
        "settled_span": SETTLED_SPAN,
        "settled_move": SETTLED_MOVE,
        "aggressive": a,
        "normal": n,
        "vanishing": kit.row_of(t["lab04_vanishing"], seed="all"),
        "hacking": hack,
        "aggressive_seeds": _seeds(ent)[lambda d: d["setting"] == "aggressive"]
        if len(ent)
        else pd.DataFrame(columns=["converged_to"]),
        "normal_keeps_more": bool(kept > 0) if known(kept) else None,
        "bandit_hacked": hacked(*(hack.get(k, math.nan) for k in bandit_ends)),
        "gpt_hacked": hacked(*(gpt["proxy"].get(k, math.nan) for k in gpt_ends)),
        "gpt": gpt,
        "cov_remedies": COV_REMEDIES,
        "tables": {"entropy_pooled": _seeds(ent, pooled=True), **{k: t[f"lab04_{k}"] for k in SHOWN}},
    }
