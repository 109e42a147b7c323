"""Lab 04, the core challenges of RL training: entropy collapse, vanishing gradients when every reward of a batch is
equal, and reward hacking; on the 3-armed bandit (mathrl.engine.bandit) and on the GPT (experiment `lab04_gpt`, where
DAPO is tried as the remedy).

The bandit tables claims read (one row per setting and seed, then a pooled row per setting with seed `all`) and the
tables across seeds are built in mathrl.analysis.measures.bandit_seeds; the GPT runs' table (lab04_gpt_runs), its
summary per variant and the remedies' differences in mathrl.analysis.measures.training_challenges. Here: the
report's tables from them, the figures and the section.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

import mathrl.analysis.kit as kit
from mathrl.analysis.figure_style import BAND_NOTE, COLORS, band_panels, bands, placeholder, plt, table_band
from mathrl.analysis.measures.bandit_seeds import (
    BANDIT_WINDOW,
    DOMINANT,
    SETTLED_MOVE,
    SETTLED_SPAN,
    SEVERITY_DEFINITION,
    bandit_curves,
    hacked,
    local_optima,
    seed_rows,
    vanishing_points,
)
from mathrl.analysis.measures.series import WINDOW, known
from mathrl.analysis.measures.tables import role_of
from mathrl.analysis.measures.training_challenges import differences_table, gpt_summary
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


# ---- tables: from the bandit tables, the run table and the files ------------------------
def tables(ctx) -> dict[str, pd.DataFrame]:
    """The report's tables; the bandit tables claims read are declared in mathrl.analysis.measures.bandit_seeds."""
    runs = ctx.run_table("lab04_gpt_runs")
    gpt = gpt_summary(runs)
    role = kit.roles(ctx.cfg, EXPERIMENT, ROLES) if len(runs) else {}
    # each variant's run settings, those of its first run (seed 0): the runs are read last to first
    settings = {run.spec.variant or "": run.spec.settings.as_dict() for run in reversed(ctx.experiment(EXPERIMENT))}
    named = role_of(role, (*ROLES, *KL_ROLES, *OTHER_ROLES, *COV_REMEDIES, *TABLE_REMEDIES))
    gpt.insert(1, "role", gpt["variant"].map(named).fillna("") if len(gpt) else [])
    return {
        "lab04_gpt_differences": differences_table(settings, role),
        "lab04_local_optima": local_optima(ctx.bandit_table("lab04_entropy")),
        "lab04_vanishing_points": vanishing_points(ctx.bandit_seeds("gradient_vanishing")),
        "lab04_bandit_curves": bandit_curves([ctx.bandit(study) for study in bandit.BANDIT_STUDIES]),
        "lab04_gpt": gpt,
    }


# ---- figures: from the tables alone ----------------------------------------------------
def _bandit(t, study: str) -> pd.DataFrame:
    c = t["lab04_bandit_curves"]
    # by step, stably: each setting's rows in step order, the settings in the config's order (not alphabetical)
    return c[c["study"] == study].sort_values("step", kind="stable") if "study" in c else pd.DataFrame()


COMPARED = ("normal", "aggressive", *KL_ROLES, "clip_higher", "remedy", *COV_REMEDIES, *TABLE_REMEDIES)  # drawn
ACTION_COLORS = (COLORS[4], COLORS[5], COLORS[9])  # the bandit's actions, in colours no setting of the panels uses
NO_COLLAPSE = "no entropy-collapse data"
STARTS = ("random_policy", "perfect_policy")  # GPT roles starting from a random or a near-perfect policy: drawn apart
THRESHOLDS = ((1e-4, "document: < 1e-4 when homogeneous"), (1e-3, "document: > 1e-3 when diverse"))  # grad_norm's
# The six-panel figure's bottom row, by step: (metric, title, y label, the document's thresholds) of each panel
PHASE_PANELS = (
    ("grad_norm", "Gradient norm (vanishing gradients)", "gradient norm (symlog)", THRESHOLDS),
    ("reward_std", "Reward std within the batch", "reward std", ()),
)
# The GPT figure's panels: (the roles drawn, the metric, its title, its y label); the random and near-perfect starts
# are drawn apart, since their entropy would stretch the axis
STARTS_TITLE, ENTROPY_LABEL = "Random and near-perfect starts: ", "mean per-token entropy"
GPT_PANELS = (
    (COMPARED, "entropy", "Token entropy", ENTROPY_LABEL),
    (COMPARED, "eval_accuracy", "Held-out accuracy (step 0: before RL)", "greedy exact-match accuracy"),
    (COMPARED, "kl", "KL to the warm-up (the documents' alarm: 0.5)", "per-token KL (k3)"),
    (STARTS, "frac_zero_std", STARTS_TITLE + "groups with equal rewards", "frac_zero_std"),
    (STARTS, "entropy", STARTS_TITLE + "token entropy", ENTROPY_LABEL),
)


def _settings(c: pd.DataFrame, label: str) -> list[tuple[str, pd.DataFrame]]:
    """The `bands` groups of a bandit study: one per setting (labelled `label` when there is only one)."""
    groups = list(c.groupby("setting", sort=False)) if len(c) else []
    return [(setting if len(groups) > 1 else label, g) for setting, g in groups]


def by_horizon(c: pd.DataFrame) -> list[tuple[int, pd.DataFrame]]:
    """A study's curves split by how many steps its settings run (the document's 200-step settings apart from the
    1,500-step biased ones), shortest first: one time axis per panel."""
    if c.empty:
        return []
    last = c.groupby("setting", sort=False)["step"].transform("max")
    return [(int(h), c[last == h]) for h in sorted(last.unique())]


def _horizon_panels(fig, cell, c: pd.DataFrame, metric: str, title: str, ylabel: str) -> None:
    """One panel of `metric` per horizon of the entropy-collapse settings (`by_horizon`), stacked in `cell`."""
    horizons = by_horizon(c)
    grid = cell.subgridspec(len(horizons), 1, hspace=0.6) if horizons else None
    for k, (steps, g) in enumerate(horizons or [(0, c)]):
        named = f"{title}: the {steps:,}-step settings" if len(horizons) > 1 else title
        labels = dict(xlabel="step", ylabel=ylabel, title=named)
        bands(fig.add_subplot(grid[k, 0] if grid else cell), _settings(g, metric), metric, NO_COLLAPSE, **labels)


def _phase_panel(ax, c: pd.DataFrame, metric: str, title: str, ylabel: str, lines: tuple) -> None:
    """A metric of the gradient-vanishing study by step with its homogeneous phases shaded, one band per setting;
    with `lines` (the document's thresholds: (y, label)) on a symlog axis, where exact zeros stay visible."""
    if len(c):
        steps = c.drop_duplicates("step")
        hom = steps.loc[steps["phase"] == "homogeneous", "step"].to_numpy()
        cuts = np.where(np.diff(hom) > 1)[0]
        for i, (a, b) in enumerate(zip(np.r_[hom[:1], hom[cuts + 1]], np.r_[hom[cuts], hom[-1:]])):
            ax.axvspan(a - 0.5, b + 0.5, color="0.6", alpha=0.15, lw=0, label="homogeneous rewards" if i == 0 else None)
    labels = dict(xlabel="step", ylabel=ylabel, title=title)
    bands(ax, _settings(c, metric.replace("_", " ")), metric, "no gradient-vanishing data", **labels)
    if len(c) and lines:
        ax.set_yscale("symlog", linthresh=1e-6)
        for y, name in lines:
            ax.axhline(y, color="0.3", ls=":", lw=1, label=name)
        ax.legend()  # the thresholds among the settings


def _probabilities(fig, cell, ec: pd.DataFrame) -> None:
    """The action probabilities, one small panel per entropy-collapse setting (a colour per action)."""
    settings = list(ec.groupby("setting", sort=False)) if len(ec) else []
    if not settings:
        labels = dict(title="Action probabilities", xlabel="step", ylabel="probability")
        return bands(fig.add_subplot(cell), [], "p0", NO_COLLAPSE, **labels)  # its placeholder
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
    *phase_axes, a_scatter = (fig.add_subplot(grid[1, k]) for k in range(3))
    ec, gv, pts = _bandit(t, "entropy_collapse"), _bandit(t, "gradient_vanishing"), t["lab04_vanishing_points"]
    _horizon_panels(fig, grid[0, 0], ec, "entropy", "Policy entropy (entropy collapse)", "entropy (nats)")
    _probabilities(fig, grid[0, 1], ec)
    _horizon_panels(fig, grid[0, 2], ec, "loss", "Training loss", "loss")
    for ax, panel in zip(phase_axes, PHASE_PANELS):
        _phase_panel(ax, gv, *panel)
    if len(pts):
        for i, (phase, g) in enumerate(pts.groupby("phase")):
            label = f"{phase} ({len(g)} steps)"
            a_scatter.scatter(g["reward_std"], g["grad_norm"], s=8, alpha=0.5, color=COLORS[i + 3], label=label)
        a_scatter.set_yscale("symlog", linthresh=1e-6)
        a_scatter.legend()
    else:
        placeholder(a_scatter, "no gradient-vanishing data")
    a_scatter.set(title="Gradient norm against reward std", xlabel="reward std", ylabel="gradient norm (symlog)")
    fig.suptitle(f"Lab 04 on the bandit: {BAND_NOTE}")
    fig.tight_layout()
    return fig


def hacking_figure(t) -> plt.Figure:
    """The bandit's proxy score against its true reward, and the GPT's proxy_reward variant: its training reward (the
    proxy score) against its exact-match accuracy; each band within its own metric's range."""
    rh, proxy = _bandit(t, "reward_hacking"), kit.row_of(t["lab04_gpt"], role="proxy").get("variant", "")
    gpt = {m: kit.seed_band(t["curves"], EXPERIMENT, proxy, m) for m in ("reward_mean", "accuracy")}
    shown = dict(colors=[COLORS[3], COLORS[2]], xlabel="step")  # the optimised score, then the true measure
    bandit = [("proxy score (optimised)", rh), ("true reward", rh)]
    gpt_lines = [
        ("training reward = proxy score", gpt["reward_mean"]),
        ("exact-match accuracy (sampled)", gpt["accuracy"]),
    ]
    panels = [
        dict(groups=bandit, metric=["proxy_reward", "true_reward"], empty="no reward-hacking bandit data", **shown),
        dict(groups=gpt_lines, metric=list(gpt), value="", empty="no proxy_reward GPT runs", **shown),
    ]
    panels[0].update(title="Bandit: proxy score and true reward", ylabel="mean reward of the batch")
    panels[1].update(title="GPT, proxy_reward variant", ylabel="reward / accuracy")
    fig = band_panels(panels, 1, 2, (12, 4.2), f"Reward hacking: {BAND_NOTE}")
    fig.tight_layout()
    return fig


def _gpt_panel(t, names: list[str], colour: dict, metric: str, title: str, ylabel: str) -> dict:
    """The `bands` panel of one metric: a band per lab04_gpt variant of `names`, each in its colour."""
    groups = [(v, kit.seed_band(t["curves"], EXPERIMENT, v, metric)) for v in names]
    colors, labels = [colour[v] for v in names], dict(title=title, ylabel=ylabel)
    return dict(groups=groups, metric=metric, empty="no lab04_gpt runs", value="", colors=colors, **labels)


def gpt_figure(t) -> plt.Figure:
    """Top: entropy, held-out accuracy and KL to the warm-up of the settings the section compares; bottom, apart: the
    random and near-perfect starts (GPT_PANELS, each panel of the variants whose roles it draws)."""
    gpt = t["lab04_gpt"]
    variants = gpt["variant"].tolist() if "variant" in gpt else []
    role = dict(zip(variants, gpt["role"])) if "role" in gpt else {}
    colour = {v: COLORS[k % len(COLORS)] for k, v in enumerate(variants)}
    drawn = {roles: [v for v in variants if role.get(v) in roles] for roles in (COMPARED, STARTS)}
    panels = [_gpt_panel(t, drawn[roles], colour, *panel) for roles, *panel in GPT_PANELS]
    fig = band_panels(panels, 2, 3, (16, 7.5), f"Lab 04 on the GPT: {BAND_NOTE}")
    fig.axes[2].axhline(0.5, color="0.3", ls=":", lw=1)
    fig.axes[3].set_ylim(-0.02, 1.02)  # a share
    fig.tight_layout()
    return fig


def figures(t) -> dict[str, plt.Figure]:
    return {"lab04_six_panel": six_panel(t), "lab04_hacking": hacking_figure(t), "lab04_gpt": gpt_figure(t)}


# ---- section: the template's context, from the tables ----------------------------------
PARTS = ("entropy", "vanishing", "hacking", "gpt")  # the section's parts (the document's claims: its template)


def section(t) -> dict:
    """The verdicts per part and the rows the template's measured sentences and lab report read."""
    ent = t["lab04_entropy"]
    a, n = (kit.row_of(ent, setting=setting, seed="all") for setting in ("aggressive", "normal"))
    hack = kit.row_of(t["lab04_hacking"], seed="all")
    gpt = {r: kit.row_of(t["lab04_gpt"], role=r) for r in (*ROLES, *KL_ROLES, *OTHER_ROLES, *COV_REMEDIES)}
    seeds = seed_rows(ent) if len(ent) else pd.DataFrame(columns=["setting", "converged_to"])
    # the entropy the normal setting kept beyond the aggressive one
    kept = n.get("final_policy_entropy", math.nan) - a.get("final_policy_entropy", math.nan)
    bandit_ends = ("proxy_start", "proxy_end", "true_start", "true_end")
    gpt_ends = ("reward_start_mean", "reward_end_mean", "accuracy_start_mean", "accuracy_end_mean")
    return {
        **kit.section_context(t, NAME, PARTS),
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
        "aggressive_seeds": seeds[seeds["setting"] == "aggressive"],
        "normal_keeps_more": bool(kept > 0) if known(kept) else None,
        "bandit_hacked": hacked(*(hack.get(k, math.nan) for k in bandit_ends)),
        "gpt_hacked": hacked(*(gpt["proxy"].get(k, math.nan) for k in gpt_ends)),
        "gpt": gpt,
        "cov_remedies": COV_REMEDIES,
        "entropy_pooled": seed_rows(ent, pooled=True),
    }
