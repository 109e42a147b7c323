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

import math

import pandas as pd

import mathrl.analysis.studies.kit as kit
from mathrl.analysis.measures.general import lowest_change
from mathrl.analysis.results import collapsed, degraded, max_drawdown, mean_spread, roughness
from mathrl.analysis.studies.kit import BAND_NOTE, COLORS, SHARE, plt
from mathrl.analysis.verdict import difference

NAME = "collapse"
TITLE = "Training collapse: causes and remedies"
DOCUMENT = "training-collapse-analysis.md"

EXPERIMENT = "collapse"
# Each remedy against the failure of its own cause: (remedy, the failing setting it changes one thing of)
REMEDIES = (
    ("lr_tenth", "baseline"),
    ("reward_norm", "scale_failing"),
    ("adv_norm_clip", "scale_failing"),
    ("signed", "binary"),
    ("few_problems", "all_problems"),
)
REWARD_DESIGNS = ("random_baseline", "shaped", "penalty")
# What each run of the experiment is for; the config's `roles` block names the variant of each.
PAIRED = tuple(dict.fromkeys(r for pair in REMEDIES for r in pair))
ROLES = (*PAIRED, *REWARD_DESIGNS, "curriculum", "nonfinite")
REQUIRED = ("baseline", "lr_tenth", *REWARD_DESIGNS, "curriculum", "nonfinite")  # a config may leave the others out
FRACTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)  # "the five points of a run", as shares of its steps
STATS = [
    "initial_eval",
    "final_eval",
    "best_eval",
    "gain",
    "mid_gain",
    "drawdown",
    "late_drawdown",
    "roughness",
    "collapsed",
    "degraded",
    "final_format_rate",
    "final_entropy",
    "early_entropy",
    "skipped",
    "initial_format_rate",
    "zero_std",
    "entropy_fall",
    "lr_ratio",
    "first_stage_accuracy",
    "adv_abs_max",
    "adv_clip_ratio",
    "adv_clip_binding",
    "clip_binding",
    "entropy_coef_ratio",
    "mean_lr",
    "mean_kl_coef",
    "mean_kl",
    "late_format_rate",
    "format_gain",
    "lowest_change",
    "adv_mean",
    "adv_mean_abs",
]
NONFINITE_COLUMNS = [
    "run_id",
    "seed",
    "warmup",
    "status",
    "steps_done",
    "skipped",
    "first_skipped_step",
    "weights_finite",
    "caught",
    "initial_eval",
    "final_eval",
]
POINT_VALUES = ["eval_accuracy", "format_rate", "frac_zero_std"]  # at each of the five points of a run
CURVE_VALUES = "eval_accuracy format_rate entropy entropy_coef lr ndigit skipped frac_zero_std accuracy".split()


# ----------------------------------------------------------------------------- statistics
def five_points(evals: pd.DataFrame, steps: int) -> pd.DataFrame:
    """The evaluations nearest to 0, 25, 50, 75 and 100% of a run's `steps`."""
    idx = [(evals["step"] - f * steps).abs().idxmin() for f in FRACTIONS]
    out = evals.loc[idx, ["step", "eval_accuracy"]].reset_index(drop=True)
    out.insert(0, "point", range(len(FRACTIONS)))
    return out


def run_stats(run, role: str) -> dict:
    """One run's outcome; a run without a result keeps NaN statistics (never invented)."""
    spec, settings = run.spec, run.settings
    row = {
        "variant": spec.variant,
        "role": role,
        "seed": spec.seed,
        "warmup": kit.warmup(run),
        "run_id": spec.run_id,
        "status": run.status,
        "algorithm": settings["algorithm"],
    }
    if not run.ok:
        return row
    m, e, half, initial = run.metrics, run.evals, settings["steps"] / 2, run.initial_eval
    final, mid = run.summary["final"]["eval_accuracy"], five_points(e, settings["steps"]).loc[2, "eval_accuracy"]
    curriculum = settings.get("curriculum_start")
    return {
        **row,
        "initial_eval": initial,
        "final_eval": final,
        "gain": final - initial,
        "mid_gain": mid - initial,
        "best_eval": run.summary["best"]["eval_accuracy"],
        "drawdown": max_drawdown(e["eval_accuracy"]),
        "late_drawdown": max_drawdown(e.loc[e["step"] >= half, "eval_accuracy"]),
        "roughness": roughness(e["step"], e["eval_accuracy"]),
        "collapsed": float(collapsed(run)),
        "degraded": float(degraded(run)),
        "final_format_rate": float(m["format_rate"].iloc[-1]),
        "final_entropy": float(m["entropy"].iloc[-1]),
        "early_entropy": float(m.loc[m["step"] <= half, "entropy"].mean()),
        "skipped": float(m["skipped"].fillna(0).sum()),
        "initial_format_rate": float(m["format_rate"].iloc[0]),
        "zero_std": float(m["frac_zero_std"].mean()),
        "entropy_fall": 1 - kit.end_over_start(m["entropy"]),
        "lr_ratio": kit.end_over_start(m["lr"]),
        "adv_abs_max": kit.step_mean(m, "adv_abs_max"),
        "lowest_change": lowest_change(run),
        "adv_mean": kit.step_mean(m, "adv_mean"),
        "adv_mean_abs": abs(kit.step_mean(m, "adv_mean")),
        "first_stage_accuracy": float(m.loc[m["ndigit"] == m["ndigit"].min(), "accuracy"].mean())
        if curriculum
        else math.nan,
        **mechanisms(m, settings),
    }


def mechanisms(m: pd.DataFrame, settings: dict) -> dict:
    """What each remedy changes, as the run logged it: the share of steps whose gradient norm (logged
    before clipping) exceeded the clip; the entropy bonus's last / first weight; the mean LR, KL
    coefficient and KL; the share of well-formed rollouts over the last quarter of the steps, and its
    rise over step 1's. The advantage clip's ratio is the mean largest |advantage| over the clip (1: the
    clip bound at every step, logged after it); its binding counts the steps with any advantage (a step whose
    groups all had equal rewards has none to clip) whose largest |advantage|, logged after the clip, reached it."""
    clip, q, adv_clip = settings.get("grad_clip"), max(1, len(m) // 4), settings.get("adv_clip")
    adv = m["adv_abs_max"].dropna() if "adv_abs_max" in m else pd.Series(dtype=float)
    adv = adv[adv > 0]
    late = float(m["format_rate"].tail(q).mean())
    return {
        "clip_binding": float((m["grad_norm"] > float(clip)).mean()) if clip and "grad_norm" in m else math.nan,
        "entropy_coef_ratio": kit.end_over_start(m["entropy_coef"]) if "entropy_coef" in m else math.nan,
        "adv_clip_binding": float((adv >= float(adv_clip) * (1 - 1e-6)).mean()) if adv_clip and len(adv) else math.nan,
        "adv_clip_ratio": kit.step_mean(m, "adv_abs_max") / float(adv_clip) if adv_clip else math.nan,
        "mean_lr": float(m["lr"].mean()),
        "mean_kl_coef": kit.step_mean(m, "kl_coef"),
        "mean_kl": kit.step_mean(m, "kl"),
        "late_format_rate": late,
        "format_gain": late - float(m["format_rate"].iloc[0]),
    }


def variants_table(per_run: pd.DataFrame, settings: dict, against: dict[str, str]) -> pd.DataFrame:
    """Per variant: its settings, mean, std, 95% interval and n of every statistic, and for a remedy the difference
    in final accuracy from the failing setting it changes one thing of (`against`: {variant: its failing variant}),
    with its 95% interval (paired by seed: the same warm-up and prompts)."""
    out = kit.summarise(per_run, ["variant"], STATS[1:2] + STATS[:1] + STATS[2:], "n_runs")  # n counts final evals
    out = kit.add_intervals(out, ["final_eval", "gain"], bounds={"final_eval": SHARE})
    g = per_run.groupby("variant", sort=False)
    out.insert(1, "role", g["role"].first().values)
    described = [", ".join(f"{k}={val}" for k, val in (settings.get(x) or {}).items()) for x in out["variant"]]
    out.insert(2, "settings", [d or "defaults" for d in described])
    out.insert(3, "algorithm", g["algorithm"].first().values)
    out.insert(4, "against", [against.get(x, "") for x in out["variant"]])
    out = kit.add_outcomes(out, per_run, "variant", judged=True)
    diffs = [
        difference(kit.per_seed(per_run, "final_eval", variant=x), kit.per_seed(per_run, "final_eval", variant=b))
        if (b := against.get(x))
        else kit.NO_DIFFERENCE
        for x in out["variant"]
    ]
    for column, field in (("diff_vs_failing", "estimate"), ("diff_lo", "lo"), ("diff_hi", "hi")):
        out[column] = [getattr(d, field) for d in diffs]
    return out


def segment_rows(run, role: str) -> list[dict]:
    """Each of the five points with the rollouts behind it: format rate and the share of
    zero-std groups over the steps since the previous point (point 0: step 1's rollouts,
    which the warm-up policy sampled). An evaluation nearest to two of the points (a run
    with fewer than five evaluations after step 0) is one row, under the first."""
    pts, m, rows, prev = five_points(run.evals, run.settings["steps"]).drop_duplicates("step"), run.metrics, [], -1
    for p in pts.itertuples():
        seg = m[m["step"] == 1] if p.step == 0 else m[(m["step"] > prev) & (m["step"] <= p.step)]
        rows.append(
            {
                "variant": run.spec.variant,
                "role": role,
                "seed": run.spec.seed,
                "point": p.point,
                "step": p.step,
                "eval_accuracy": p.eval_accuracy,
                "format_rate": seg["format_rate"].mean(),
                "frac_zero_std": seg["frac_zero_std"].mean(),
            }
        )
        prev = p.step
    return rows


def curve_table(runs, role_of: dict) -> pd.DataFrame:
    """Per variant and step: the mean and std across seeds of each logged metric (step 0 is
    the evaluation before RL); n is the number of runs that reached the step."""
    by = ["variant", "role", "step"]
    frames = [
        pd.concat(
            [
                pd.DataFrame({"step": [0], "eval_accuracy": [r.initial_eval]}),
                r.metrics.reindex(columns=["step"] + CURVE_VALUES),
            ],
            ignore_index=True,
        ).assign(variant=r.spec.variant, role=role_of.get(r.spec.variant, ""), seed=r.spec.seed)
        for r in runs
        if r.ok
    ]
    if not frames:
        return mean_spread(pd.DataFrame(), by, CURVE_VALUES)
    long = pd.concat(frames, ignore_index=True)
    return mean_spread(long, by, CURVE_VALUES).assign(n=long.groupby(by, sort=False).size().values)


def nonfinite_table(runs) -> pd.DataFrame:
    """The huge-LR runs one by one: did the guard skip updates, and did the weights stay finite?

    Weights count as finite when the run ended with a result and its final evaluation and
    last step's entropy (a forward pass through the final weights) are finite numbers; a run
    without a result keeps NaN for everything it did not get to measure."""
    rows = []
    for r in runs:
        row = {"run_id": r.spec.run_id, "seed": r.spec.seed, "warmup": kit.warmup(r), "status": r.status}
        if r.ok:
            m, final = r.metrics, r.summary["final"]["eval_accuracy"]
            hits = m.loc[m["skipped"].fillna(0) > 0, "step"]
            finite = bool(math.isfinite(final) and math.isfinite(m["entropy"].iloc[-1]))
            row.update(
                steps_done=len(m),
                skipped=int(len(hits)),
                first_skipped_step=float(hits.iloc[0]) if len(hits) else math.nan,
                weights_finite=finite,
                caught=float(len(hits) > 0 and finite),  # the guard skipped an update, the weights stayed finite
                initial_eval=r.initial_eval,
                final_eval=final,
            )
        rows.append(row)
    return pd.DataFrame(rows, columns=CLAIM_TABLES["collapse_nonfinite"])


# The tables of per-run rows that claims read, and their columns, stated once: the tables are made with them, and
# mathrl.analysis.claim_names reads this assignment from the source (without importing the module) to check a claim's
# names
# when the config is read.
CLAIM_TABLES = {
    "collapse_per_run": ["variant", "role", "seed", "warmup", "run_id", "status", "algorithm", *STATS],
    "collapse_nonfinite": NONFINITE_COLUMNS,
}


def tables(ctx) -> dict[str, pd.DataFrame]:
    runs = ctx.experiment(EXPERIMENT)
    role = kit.roles(ctx.cfg, EXPERIMENT, REQUIRED) if runs else {}
    # the calibration's `reference` shares the baseline's variant: the baseline names it
    named = kit.role_of(role, ROLES)
    per_run = pd.DataFrame(
        [run_stats(r, named.get(r.spec.variant, "")) for r in runs], columns=CLAIM_TABLES["collapse_per_run"]
    )
    variants = ctx.cfg["experiments"].get(EXPERIMENT, {}).get("variants") or {}
    design = pd.DataFrame(
        [
            row
            for r in runs
            if r.ok and named.get(r.spec.variant) in REWARD_DESIGNS
            for row in segment_rows(r, named[r.spec.variant])
        ],
        columns=["variant", "role", "seed", "point", "step", *POINT_VALUES],
    )
    design = mean_spread(design, ["variant", "role", "point", "step"], POINT_VALUES)
    against = {role[r]: role[f] for r, f in REMEDIES if r in role and f in role}
    return {
        "collapse_variants": variants_table(per_run, variants, against),
        "collapse_per_run": per_run,
        "collapse_reward_design": design,
        "collapse_nonfinite": nonfinite_table([r for r in runs if named.get(r.spec.variant) == "nonfinite"]),
        "collapse_curves": curve_table(runs, named),
    }


# ----------------------------------------------------------------------------- figures
# The figures of curves, {name: (suptitle, rows, columns, size, shared y axis, panels)}: each panel a column of
# collapse_curves with a band per role of its `roles` (roles, column, title, ylabel).
CURVE_FIGURES = {
    "collapse_reward_design": (
        "Reward design on 2-digit multiplication",
        1,
        2,
        (10, 3.8),
        False,
        [
            (REWARD_DESIGNS, "eval_accuracy", "Held-out accuracy by reward design", "eval accuracy"),
            (REWARD_DESIGNS, "format_rate", "Well-formed answers in rollouts", "format rate"),
        ],
    ),
    # each remedy against the failing setting of its own cause, one panel each
    "collapse_remedies": (
        "Each remedy against the failure of its own cause",
        2,
        3,
        (12, 6.5),
        True,
        [((r, f), "eval_accuracy", f"{r} against {f}", "eval accuracy") for r, f in REMEDIES],
    ),
    "collapse_curriculum": (
        "The curriculum",
        1,
        2,
        (10, 3.8),
        False,
        [
            (("curriculum",), "ndigit", "Curriculum: operand digits", "ndigit"),
            (("curriculum", "shaped"), "format_rate", "Curriculum: well-formed answers in rollouts", "format rate"),
        ],
    ),
    "collapse_nonfinite": (
        "A huge learning rate without gradient clipping",
        1,
        2,
        (10, 3.8),
        False,
        [
            (("nonfinite",), "skipped", "Updates skipped by the non-finite guard", "share of runs skipping"),
            (("nonfinite", "lr_tenth"), "eval_accuracy", "Held-out accuracy", "eval accuracy"),
        ],
    ),
}


def fig_curves(c: pd.DataFrame, suptitle: str, rows: int, cols: int, size: tuple, sharey: bool, panels: list):
    """One of CURVE_FIGURES: per panel, a band (BAND_NOTE) per role over steps, or a placeholder (the constrained
    layout keeps the suptitle clear of the panels' titles)."""
    drawn = []
    for wanted, col, title, ylabel in panels:
        rows_of = [c[(c["role"] == role) & c[f"{col}_mean"].notna()] if len(c) else c for role in wanted]
        drawn.append(
            dict(
                groups=[(d["variant"].iloc[0] if len(d) else "", d) for d in rows_of],
                metric=col,
                empty=f"no data: {', '.join(wanted)} missing",
                title=title,
                ylabel=ylabel,
            )
        )
    return kit.band_panels(drawn, rows, cols, size, f"{suptitle} ({BAND_NOTE})", sharey=sharey, layout="constrained")


def fig_variants(t) -> plt.Figure:
    v = t["collapse_variants"]
    fig, ax = plt.subplots(figsize=(9, 3.8))
    if v.empty:
        kit.placeholder(ax, "no data: the collapse runs are missing")
    else:
        x = range(len(v))
        lo, hi = v["final_eval_lo"].clip(*SHARE), v["final_eval_hi"].clip(*SHARE)  # an accuracy stays within [0, 1]
        err = [(v["final_eval_mean"] - lo).fillna(0), (hi - v["final_eval_mean"]).fillna(0)]
        label = "final (mean, 95% t interval)"
        ax.bar(x, v["final_eval_mean"].fillna(0), yerr=err, color=COLORS[0], capsize=3, label=label)
        for i, n in zip(x, v["n"]):
            ax.annotate(f"n={int(n)}" if n else "missing", (i, 0), ha="center", va="bottom", fontsize=7, color="0.2")
        ax.set_xticks(list(x), v["variant"], rotation=30, ha="right")
        ax.legend()
    ax.set(title="Final held-out accuracy per variant", xlabel="variant", ylabel="final eval accuracy")
    return fig


def figures(t) -> dict[str, plt.Figure]:
    curves = {name: fig_curves(t["collapse_curves"], *spec) for name, spec in CURVE_FIGURES.items()}
    return {**curves, "collapse_variants": fig_variants(t)}


# ----------------------------------------------------------------------------- section
def section(t) -> dict:
    v, d = t["collapse_variants"], t["collapse_reward_design"]
    rows = kit.verdicts(t, NAME)
    of_role = {r: kit.row_of(v, role=r) for r in ROLES}
    zs = {r.role: r.frac_zero_std_mean for r in d[d["point"] == 0].itertuples()} if len(d) else {}
    z = lambda k: "–" if k not in zs or pd.isna(zs[k]) else f"{100 * zs[k]:.0f}%"  # noqa: E731
    return {
        "of_role": of_role,
        "baseline": of_role["baseline"],
        "algorithm": of_role["baseline"].get("algorithm", "–"),
        "names": {r: row.get("variant", r) for r, row in of_role.items()},
        "settings": {r: row.get("settings", "not run") for r, row in of_role.items()},
        "variants": v,
        "reward_design": d,
        "nonfinite": t["collapse_nonfinite"].reindex(columns=NONFINITE_COLUMNS),
        "zero_std": {"baseline": z("random_baseline"), "shaped": z("shaped")},
        "verdicts": kit.by_key(rows),
        "verdict_list": rows,
    }
