"""Training collapse on sparse-reward multiplication (training-collapse-analysis.md).

The document lists why RL fine-tuning collapses (a learning rate too large, no gradient
clipping, sparse binary rewards, no entropy bonus) and the remedies: shaped rewards with a
format bonus and an invalid-output penalty, reward and advantage normalisation with
clipping, a decaying entropy bonus, a decaying LR, a curriculum; the troubleshooting table of
rl-stability-batch-and-hyperparameters.md adds, for a reward that suddenly falls, a tenth of the
LR, a KL coefficient of 0.1 and gradient clipping. The `collapse` experiment first shows a failure
(from the warm-up, a learning rate ten times the reference without clipping loses most of its
held-out accuracy) and changes one thing of it per remedy; the reward designs and the curriculum
run from a random policy (every answer malformed, every exact-match reward 0), judged by the share
of well-formed answers; a huge learning rate without clipping must trip the non-finite guard.
Each verdict is judged only where the failure was shown and the remedy's mechanism engaged (the
checks of config/claims.yaml).
"""

from __future__ import annotations

import pandas as pd

import mathrl.analysis.kit as kit
import mathrl.analysis.measures.collapse_remedies as remedies
from mathrl.analysis.figure_style import BAND_NOTE, COLORS, SHARE, band_panels, interval_bars, placeholder, plt
from mathrl.analysis.measures.tables import role_of
from mathrl.analysis.results import mean_spread
from mathrl.analysis.verdict import difference

NAME = "collapse"
TITLE = "Training collapse: causes and remedies"
DOCUMENT = "training-collapse-analysis.md"

EXPERIMENT = "collapse"
# the roles a config must name (it may leave out the others)
REQUIRED = ("baseline", "lr_tenth", *remedies.REWARD_DESIGNS, "curriculum", "nonfinite")


# ----------------------------------------------------------------------------- tables
def variants_table(per_run: pd.DataFrame, settings: dict, against: dict[str, str]) -> pd.DataFrame:
    """Per variant: its settings, mean, std, 95% interval and n of every statistic, and for a remedy the difference
    in final accuracy from the failing setting it changes one thing of (`against`: {variant: its failing variant}),
    with its 95% interval (paired by seed: the same warm-up and prompts)."""
    stats = ["final_eval", *(s for s in remedies.STATS if s != "final_eval")]  # n counts final evaluations
    out = kit.summarise(per_run, ["variant", "role", "algorithm"], stats, "n_runs")
    described = (", ".join(f"{k}={val}" for k, val in (settings.get(x) or {}).items()) for x in out["variant"])
    out.insert(2, "settings", [d or "defaults" for d in described])
    out.insert(4, "against", [against.get(x, "") for x in out["variant"]])
    out = kit.add_intervals(out, ["final_eval", "gain"], bounds={"final_eval": SHARE})
    out = kit.add_outcomes(out, per_run, "variant", judged=True)
    final = lambda x: kit.per_seed(per_run, "final_eval", variant=x)  # noqa: E731
    diffs = [difference(final(x), final(against[x])) if x in against else kit.NO_DIFFERENCE for x in out["variant"]]
    for column, field in (("diff_vs_failing", "estimate"), ("diff_lo", "lo"), ("diff_hi", "hi")):
        out[column] = [getattr(d, field) for d in diffs]
    return out


def curve_table(runs, named: dict[str, str]) -> pd.DataFrame:
    """Per variant and step: the mean and std across seeds of each logged metric (step 0 is the evaluation before
    RL); n is the number of runs that reached the step."""
    by = ["variant", "role", "step"]
    frames = [remedies.curve_points(r, named.get(r.spec.variant, "")) for r in runs if r.ok]
    long = pd.concat(frames or [pd.DataFrame(columns=by)], ignore_index=True)
    return mean_spread(long, by, remedies.CURVE_VALUES).assign(n=long.groupby(by, sort=False).size().values)


def tables(ctx) -> dict[str, pd.DataFrame]:
    runs = ctx.experiment(EXPERIMENT)
    role = kit.roles(ctx.cfg, EXPERIMENT, REQUIRED) if runs else {}
    # the calibration's `reference` shares the baseline's variant: the baseline names it
    named = role_of(role, remedies.ROLES)
    per_run = ctx.run_table("collapse_per_run")
    variants = ctx.cfg["experiments"].get(EXPERIMENT, {}).get("variants") or {}
    against = {role[r]: role[f] for r, f in remedies.REMEDIES if r in role and f in role}
    design = remedies.design_points(runs, named)
    return {
        "collapse_variants": variants_table(per_run, variants, against),
        "collapse_reward_design": mean_spread(design, ["variant", "role", "point", "step"], remedies.POINT_VALUES),
        "collapse_nonfinite": remedies.guard_runs(per_run),
        "collapse_curves": curve_table(runs, named),
    }


# ----------------------------------------------------------------------------- figures
# The figures of curves: {name: (suptitle, rows, columns, size, shared y axis)} ...
LAYOUTS = {
    "collapse_reward_design": ("Reward design on 2-digit multiplication", 1, 2, (10, 3.8), False),
    "collapse_remedies": ("Each remedy against the failure of its own cause", 2, 3, (12, 6.5), True),
    "collapse_curriculum": ("The curriculum", 1, 2, (10, 3.8), False),
    "collapse_nonfinite": ("A huge learning rate without gradient clipping", 1, 2, (10, 3.8), False),
}
# ... and their panels, each a column of collapse_curves with a band per role of its roles: (roles, column, title,
# ylabel); each remedy against the failing setting of its own cause, one panel each.
PANELS = {
    "collapse_reward_design": [
        (remedies.REWARD_DESIGNS, "eval_accuracy", "Held-out accuracy by reward design", "eval accuracy"),
        (remedies.REWARD_DESIGNS, "format_rate", "Well-formed answers in rollouts", "format rate"),
    ],
    "collapse_remedies": [((r, f), "eval_accuracy", f"{r} against {f}", "eval accuracy") for r, f in remedies.REMEDIES],
    "collapse_curriculum": [
        (("curriculum",), "ndigit", "Curriculum: operand digits", "ndigit"),
        (("curriculum", "shaped"), "format_rate", "Curriculum: well-formed answers in rollouts", "format rate"),
    ],
    "collapse_nonfinite": [
        (("nonfinite",), "skipped", "Updates skipped by the non-finite guard", "share of runs skipping"),
        (("nonfinite", "lr_tenth"), "eval_accuracy", "Held-out accuracy", "eval accuracy"),
    ],
}


def fig_curves(c: pd.DataFrame, name: str) -> plt.Figure:
    """One figure of LAYOUTS: per panel of PANELS, a band (BAND_NOTE) per role over steps, or a placeholder (the
    constrained layout keeps the suptitle clear of the panels' titles)."""
    suptitle, rows, cols, size, sharey = LAYOUTS[name]
    of = lambda role, col: c[(c["role"] == role) & c[f"{col}_mean"].notna()] if len(c) else c  # noqa: E731
    panels = [
        dict(
            groups=[(d["variant"].iloc[0] if len(d) else "", d) for d in (of(role, col) for role in wanted)],
            metric=col,
            empty=f"no data: {', '.join(wanted)} missing",
            title=title,
            ylabel=ylabel,
        )
        for wanted, col, title, ylabel in PANELS[name]
    ]
    return band_panels(panels, rows, cols, size, f"{suptitle} ({BAND_NOTE})", sharey=sharey, layout="constrained")


def fig_variants(t) -> plt.Figure:
    v = t["collapse_variants"]
    fig, ax = plt.subplots(figsize=(9, 3.8))
    if v.empty:
        placeholder(ax, "no data: the collapse runs are missing")
    else:
        x, notes = range(len(v)), [f"n={int(n)}" if n else "missing" for n in v["n"]]
        style = dict(color=COLORS[0], label="final (mean, 95% t interval)", notes=notes, note={"color": "0.2"})
        interval_bars(ax, x, v["final_eval_mean"], v["final_eval_lo"], v["final_eval_hi"], SHARE, **style)
        ax.set_xticks(list(x), v["variant"], rotation=30, ha="right")
        ax.legend()
    ax.set(title="Final held-out accuracy per variant", xlabel="variant", ylabel="final eval accuracy")
    return fig


def figures(t) -> dict[str, plt.Figure]:
    return {**{name: fig_curves(t["collapse_curves"], name) for name in LAYOUTS}, "collapse_variants": fig_variants(t)}


# ----------------------------------------------------------------------------- section
def section(t) -> dict:
    v, d = t["collapse_variants"], t["collapse_reward_design"]
    of_role = {r: kit.row_of(v, role=r) for r in remedies.ROLES}
    start = {"baseline": "random_baseline", "shaped": "shaped"}  # groups without reward spread at the start, by role
    zs = {k: kit.cell(d, "frac_zero_std_mean", role=r, point=0) for k, r in start.items()}
    return {
        **kit.section_context(t, NAME),
        "baseline": of_role["baseline"],
        "algorithm": of_role["baseline"].get("algorithm", "–"),
        "names": {r: row.get("variant", r) for r, row in of_role.items()},
        "settings": {r: row.get("settings", "not run") for r, row in of_role.items()},
        "nonfinite": t["collapse_nonfinite"].reindex(columns=remedies.NONFINITE_COLUMNS),
        "zero_std": {k: "–" if pd.isna(z) else f"{100 * z:.0f}%" for k, z in zs.items()},
    }
