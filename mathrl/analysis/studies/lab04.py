"""Lab 04, the core challenges of RL training: entropy collapse, vanishing gradients when
every reward of a batch is equal, and reward hacking; on the 3-armed bandit (mathrl.engine.bandit)
and on the GPT (experiment `lab04_gpt`, where DAPO is tried as the remedy).

Bandit tables hold one row per (setting, seed), then a pooled row per setting with seed
`all`: there the value columns hold the mean across seeds, `{v}_std` their sample std and
`n` the seeds found (a missing seed is a row of NaN with n = 0). The GPT runs' measures are registered in
mathrl.analysis.measures.training_challenges (the run table lab04_gpt_runs); the GPT table per variant follows
`mean_spread`: `{v}_mean`, `{v}_std`, `n` (runs with a result) and `expected`.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

import mathrl.analysis.studies.kit as kit
from mathrl.analysis.measures.series import WINDOW
from mathrl.analysis.measures.training_challenges import GPT_MEASURES, reduction
from mathrl.analysis.results import mean_spread
from mathrl.analysis.studies.kit import BAND_NOTE, COLORS, plt
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
BANDIT_WINDOW = 10  # bandit steps averaged for a start or end value, and the rolling window of the peak
DOMINANT = 0.9  # an arm holding this much probability is where the policy converged (bandit.converged_to)
# a bandit policy is still moving if an arm's probability changed by more than 0.05 over the last 10% of steps
SETTLED_SPAN, SETTLED_MOVE = 0.1, 0.05
SEVERITY_DEFINITION = (
    "mild: the mean gradient norm fell by less than 50%; moderate: by 50-90%; severe: by more than 90%"
)
# the logged per-step metrics the figures draw (p3 where a study has a fourth arm; not the settings lr, entropy_coef)
METRICS = "entropy p0 p1 p2 p3 loss grad_norm reward_std reward_mean proxy_reward true_reward".split()


# ---- small pure functions of table values -----------------------------------------------
def severity(red: float) -> str:
    """The gradient-vanishing severity of a reduction (SEVERITY_DEFINITION)."""
    return "unknown" if (not kit.known(red)) else "severe" if red > 0.9 else "moderate" if red >= 0.5 else "mild"


def hacked(proxy_start: float, proxy_end: float, true_start: float, true_end: float) -> bool | None:
    """Reward hacking: the optimised (proxy) score rose while the true reward fell."""
    known = kit.known(proxy_start, proxy_end, true_start, true_end)
    return proxy_end > proxy_start and true_end < true_start if known else None


# ---- tables: from the files alone ------------------------------------------------------
def _pooled(per: pd.DataFrame, values: list[str]) -> pd.DataFrame:
    """Per-seed rows followed, per setting, by a row with seed 'all' (mean, {v}_std, n)."""
    per = per.assign(n=per[values[0]].notna().astype(int))
    parts = []
    for _, g in per.groupby("setting", sort=False):
        s = mean_spread(g, ["setting"], values).rename(columns={f"{v}_mean": v for v in values})
        parts += [g, s.assign(seed="all")]
    return pd.concat(parts, ignore_index=True) if parts else per


def _expected(ctx, study: str):
    """(setting, seed, its rows by step) for every setting and seed the config asks of a bandit study;
    an empty frame where the study's CSV lacks them."""
    cfg, df = bandit.resolve(ctx.cfg.get("bandit")), ctx.bandit(study)
    df = pd.DataFrame(columns=bandit.COLUMNS) if df is None else df
    # one grouping for the whole study, not one filter per setting and seed
    runs = {(str(k[0]), int(k[1])): g for k, g in df.groupby(["setting", "seed"], sort=False)}
    for setting in cfg["studies"][study]["settings"]:
        for seed in map(int, bandit.study_seeds(cfg, study)):
            yield setting, seed, runs.get((setting, seed), df.iloc[:0]).sort_values("step")


def still_moving(probs: np.ndarray, span: float = SETTLED_SPAN, move: float = SETTLED_MOVE) -> bool:
    """Whether a bandit policy was still moving at its end: some arm's probability changed by more
    than `move` over the last `span` of its steps (probs: steps x arms, in step order)."""
    back = max(1, int(round(span * len(probs))))
    return bool(len(probs) > back and np.abs(probs[-1] - probs[-1 - back]).max() > move)


def window(steps: int) -> int:
    """Bandit steps averaged for a start or an end value: BANDIT_WINDOW, at most half the run (the two never
    overlap)."""
    return max(1, min(BANDIT_WINDOW, steps // 2))


ENTROPY_COLUMNS = [
    "initial_entropy",
    "final_entropy",
    "reduction",
    "dominant_action",
    "dominant_prob",
    "global_share",
    "local_share",
    "initial_best_prob",
    "moving",
]


def entropy_table(ctx) -> pd.DataFrame:
    """Per setting and seed: entropy over the first and last BANDIT_WINDOW steps, its reduction, the
    initial probability of the global arm (step 0), the dominant action at the last step and where
    the policy converged (bandit.converged_to)."""
    # the global optimum (action 1 in the document)
    best = int(np.argmax(bandit.resolve(ctx.cfg.get("bandit"))["arm_rewards"]))
    rows = []
    for setting, seed, g in _expected(ctx, "entropy_collapse"):
        row = {"setting": setting, "seed": seed, **dict.fromkeys(ENTROPY_COLUMNS, math.nan), "converged_to": "missing"}
        if len(g):
            k, probs = window(len(g)), g[["p0", "p1", "p2"]].to_numpy()
            start, end = g["entropy"].head(k).mean(), g["entropy"].tail(k).mean()
            top, label = int(np.argmax(probs[-1])), bandit.converged_to(*probs[-1], threshold=DOMINANT, best_arm=best)
            row.update(
                initial_entropy=start,
                final_entropy=end,
                reduction=reduction(start, end),
                dominant_action=top,
                dominant_prob=probs[-1, top],
                initial_best_prob=probs[0, best],
                converged_to=label,
                global_share=float(label == "global"),
                local_share=float(label == "local"),
                moving=float(still_moving(probs)),
            )
        rows.append(row)
    out = _pooled(pd.DataFrame(rows), [c for c in ENTROPY_COLUMNS if c != "dominant_action"])
    for setting, g in _seeds(out).groupby("setting", sort=False):
        labels = g["converged_to"].tolist()
        pooled = (out["setting"] == setting) & (out["seed"] == "all")
        counted = ", ".join(f"{k} {labels.count(k)}" for k in ("global", "local", "none") if k in labels)
        out.loc[pooled, "converged_to"] = counted or "missing"
        actions = g["dominant_action"].dropna().unique()
        out.loc[pooled, "dominant_action"] = actions[0] if len(actions) == 1 else math.nan
    return out


def local_optima_table(ent: pd.DataFrame) -> pd.DataFrame:
    """Per setting: how many seeds ended at the global optimum, a local one or neither, how many were
    still moving at the end (`still_moving`), and the local-optimum rate with its 95% Wilson interval."""
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
VANISHING_VALUES = [
    "grad_norm_homogeneous",
    "grad_norm_diverse",
    "reduction",
    "reward_std_homogeneous",
    "reward_std_diverse",
    "corr_grad_reward_std",
]
HACKING_VALUES = [
    "proxy_start",
    "proxy_end",
    "true_start",
    "true_peak",
    "true_peak_step",
    "true_at_others_peak",
    "true_end",
    "hack_share_end",
]


def vanishing_table(ctx) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per seed and pooled: mean gradient norm and reward std per phase, their correlation; and the points."""
    rows, points = [], []
    for setting, seed, g in _expected(ctx, "gradient_vanishing"):
        row = {"setting": setting, "seed": seed}
        for phase in ("homogeneous", "diverse"):
            ph = g[g["phase"] == phase]
            row[f"grad_norm_{phase}"], row[f"reward_std_{phase}"] = ph["grad_norm"].mean(), ph["reward_std"].mean()
        row["reduction"] = reduction(row["grad_norm_diverse"], row["grad_norm_homogeneous"])
        row["corr_grad_reward_std"] = g["grad_norm"].corr(g["reward_std"]) if len(g) > 2 else math.nan
        rows.append(row)
        if len(g):
            points.append(g[POINT_COLUMNS])
    out = _pooled(pd.DataFrame(rows), VANISHING_VALUES)
    pts = pd.concat(points, ignore_index=True) if points else pd.DataFrame(columns=POINT_COLUMNS)
    for setting, p in pts.groupby("setting"):  # the pooled correlation is over every step of every seed
        pooled = (out["setting"] == setting) & (out["seed"] == "all")
        out.loc[pooled, "corr_grad_reward_std"] = p["grad_norm"].corr(p["reward_std"])
    out["severity"] = out["reduction"].map(severity)
    return out, pts


def at_others_peak(curves: dict, key) -> float:
    """Curve `key`'s value at the step where the mean of the other curves of its setting (`key[0]`) peaks: a peak
    found without the curve's own noise, so that a curve that does not rise reads no rise on average."""
    others = [c for k, c in curves.items() if k != key and k[0] == key[0]]
    if key not in curves or not others:
        return math.nan
    return float(curves[key].get(pd.concat(others, axis=1).mean(axis=1).idxmax(), math.nan))


def hacking_table(ctx) -> pd.DataFrame:
    """Per seed: proxy score and true reward at the start and end, the true reward's rolling
    peak (its own, and where the other seeds' peak), the overrated arm's final share, and whether
    the proxy was exploited."""
    study = bandit.resolve(ctx.cfg.get("bandit"))["studies"]["reward_hacking"]
    proxy = bandit.proxy_scores(study["arm_lengths"], study["true_rewards"], study["labelled_arms"])
    unlabelled = [a for a in range(len(proxy)) if a not in study["labelled_arms"]] or list(range(len(proxy)))
    hack_arm = max(unlabelled, key=proxy.__getitem__)  # the arm the proxy overrates: never labelled, scored highest
    rows, curves = [], {}
    for setting, seed, g in _expected(ctx, "reward_hacking"):
        row = {"setting": setting, "seed": seed, "hack_arm": hack_arm}
        if len(g):
            head, tail = g.head(window(len(g))), g.tail(window(len(g)))
            rolling = g["true_reward"].rolling(BANDIT_WINDOW, min_periods=1).mean()
            curves[(setting, seed)] = pd.Series(rolling.to_numpy(), index=g["step"].to_numpy())
            row.update(
                proxy_start=head["proxy_reward"].mean(),
                proxy_end=tail["proxy_reward"].mean(),
                true_start=head["true_reward"].mean(),
                true_peak=rolling.max(),
                true_peak_step=float(g["step"].iloc[int(np.argmax(rolling.to_numpy()))]),
                true_end=tail["true_reward"].mean(),
                hack_share_end=float(g[f"p{hack_arm}"].iloc[-1]),
            )
        rows.append(row)
    for row in rows:
        row["true_at_others_peak"] = at_others_peak(curves, (row["setting"], row["seed"]))
    out = _pooled(pd.DataFrame(rows).reindex(columns=["setting", "seed", "hack_arm", *HACKING_VALUES]), HACKING_VALUES)
    out["hack_arm"] = hack_arm
    out["hacked"] = [hacked(r.proxy_start, r.proxy_end, r.true_start, r.true_end) for r in out.itertuples()]
    return out


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


# The bandit tables claims read, and their columns, stated once: the tables are made with them, and
# mathrl.analysis.claim_names reads this assignment from the source (without importing the module) to check a claim's
# names when the config is read. The GPT runs' table, lab04_gpt_runs, is a run table
# (mathrl.analysis.measures.training_challenges).
CLAIM_TABLES = {
    # per setting and seed, then per setting a pooled row (seed `all`) with n and each value's spread across seeds
    "lab04_entropy": [
        "setting",
        "seed",
        *ENTROPY_COLUMNS,
        "converged_to",
        "n",
        *(f"{c}_std" for c in ENTROPY_COLUMNS if c != "dominant_action"),
    ],
    "lab04_vanishing": ["setting", "seed", *VANISHING_VALUES, "n", *(f"{c}_std" for c in VANISHING_VALUES), "severity"],
    "lab04_hacking": [
        "setting",
        "seed",
        "hack_arm",
        *HACKING_VALUES,
        "n",
        *(f"{c}_std" for c in HACKING_VALUES),
        "hacked",
    ],
}


def tables(ctx) -> dict[str, pd.DataFrame]:
    ent, (van, points), hack = entropy_table(ctx), vanishing_table(ctx), hacking_table(ctx)
    runs = ctx.run_table("lab04_gpt_runs")
    gpt = gpt_table(runs)
    role = kit.roles(ctx.cfg, EXPERIMENT, ROLES) if len(runs) else {}
    named = kit.role_of(role, (*ROLES, *KL_ROLES, *OTHER_ROLES, *COV_REMEDIES, *TABLE_REMEDIES))
    gpt.insert(1, "role", gpt["variant"].map(named).fillna("") if len(gpt) else [])
    return {
        "lab04_gpt_differences": differences_table(ctx, role),
        "lab04_entropy": ent,
        "lab04_local_optima": local_optima_table(ent),
        "lab04_vanishing": van,
        "lab04_vanishing_points": points,
        "lab04_hacking": hack,
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
        kit.table_band(ax, g, metric, setting if len(groups) > 1 else label, COLORS[i])


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
        kit.placeholder(ax, "no entropy-collapse data")
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
        kit.placeholder(ax, "no entropy-collapse data")
        return _label(ax, "Action probabilities", "step", "probability")
    cols = min(2, len(settings))
    grid = cell.subgridspec(-(-len(settings) // cols), cols, hspace=0.95, wspace=0.3)
    axes = []
    for k, (setting, g) in enumerate(settings):
        ax = fig.add_subplot(grid[k // cols, k % cols], sharey=axes[0] if axes else None)
        for i in range(3):
            kit.table_band(ax, g, f"p{i}", f"action {i}", ACTION_COLORS[i])
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
            kit.placeholder(ax, "no gradient-vanishing data")
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
        kit.placeholder(a_scatter, "no gradient-vanishing data")
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
        kit.table_band(left, rh, "proxy_reward", "proxy score (optimised)", COLORS[3])
        kit.table_band(left, rh, "true_reward", "true reward", COLORS[2])
    else:
        kit.placeholder(left, "no reward-hacking bandit data")
    proxy = kit.row_of(t["lab04_gpt"], role="proxy").get("variant", "")
    lines = (("reward_mean", "training reward = proxy score", 3), ("accuracy", "exact-match accuracy (sampled)", 2))
    series = [(seed_band(t["curves"], proxy, m), m, label, COLORS[k]) for m, label, k in lines]
    for s, metric, label, color in series:
        if len(s):
            kit.table_band(right, s, metric, label, color, value="")
    if not any(len(s) for s, *_ in series):
        kit.placeholder(right, "no proxy_reward GPT runs")
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
    fig = kit.band_panels(panels, 2, 3, (16, 7.5), f"Lab 04 on the GPT: {BAND_NOTE}")
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
    rows = kit.verdicts(t, NAME)
    grouped = kit.by_part(rows)
    ent = t["lab04_entropy"]
    a, n = (kit.row_of(ent, setting=setting, seed="all") for setting in ("aggressive", "normal"))
    hack = kit.row_of(t["lab04_hacking"], seed="all")
    gpt = {r: kit.row_of(t["lab04_gpt"], role=r) for r in (*ROLES, *KL_ROLES, *OTHER_ROLES, *COV_REMEDIES)}
    kept = n.get("final_entropy", math.nan) - a.get("final_entropy", math.nan)  # by the normal setting over aggressive
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
        "normal_keeps_more": bool(kept > 0) if kit.known(kept) else None,
        "bandit_hacked": hacked(*(hack.get(k, math.nan) for k in bandit_ends)),
        "gpt_hacked": hacked(*(gpt["proxy"].get(k, math.nan) for k in gpt_ends)),
        "gpt": gpt,
        "cov_remedies": COV_REMEDIES,
        "tables": {"entropy_pooled": _seeds(ent, pooled=True), **{k: t[f"lab04_{k}"] for k in SHOWN}},
    }
