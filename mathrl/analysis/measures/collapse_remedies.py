"""Measures of training-collapse-analysis.md's runs: how far held-out accuracy fell, what the rollouts looked like
(well-formed answers, groups without reward spread, entropy), what each remedy changes as the run logged it (the LR,
the gradient and advantage clips, the entropy bonus, the KL penalty, the advantages' mean), whether the non-finite
guard caught a huge learning rate, and the run table the collapse claims read; and the rows of runs the collapse
tables summarise across seeds (a run's five points with the rollouts behind them, its curve, the huge-LR runs).

The `collapse` experiment names its runs by role (the config's `roles` block): each remedy changes one thing of the
failing setting of its own cause (REMEDIES); the reward designs and the curriculum start from a random policy.
"""

from __future__ import annotations

import math

import pandas as pd

from mathrl.analysis.measures.catalog import CHANGE, SHARE, measure
from mathrl.analysis.measures.policy_updates import adv_abs_max, adv_mean
from mathrl.analysis.measures.series import NAN, end_over_start, step_mean
from mathrl.analysis.results import degraded, max_drawdown

# Each remedy against the failure of its own cause: (remedy, the failing setting it changes one thing of)
REMEDIES = (
    ("lr_tenth", "baseline"),
    ("reward_norm", "scale_failing"),
    ("adv_norm_clip", "scale_failing"),
    ("signed", "binary"),
    ("few_problems", "all_problems"),
)
REWARD_DESIGNS = ("random_baseline", "shaped", "penalty")
# What each run of the experiment is for, in the order a variant holding several roles is named by
PAIRED = tuple(dict.fromkeys(r for pair in REMEDIES for r in pair))
ROLES = (*PAIRED, *REWARD_DESIGNS, "curriculum", "nonfinite")
FRACTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)  # "the five points of a run", as shares of its steps


def five_points(evals: pd.DataFrame, steps: int) -> pd.DataFrame:
    """The evaluations nearest to 0, 25, 50, 75 and 100% of a run's `steps`."""
    idx = [(evals["step"] - f * steps).abs().idxmin() for f in FRACTIONS]
    out = evals.loc[idx, ["step", "eval_accuracy"]].reset_index(drop=True)
    out.insert(0, "point", range(len(FRACTIONS)))
    return out


def late_share(m: pd.DataFrame, column: str) -> float:
    """The mean of a logged column over the last quarter of a run's steps (at least one step)."""
    return float(m[column].tail(max(1, len(m) // 4)).mean())


def clip_binding_of(m: pd.DataFrame, clip) -> float:
    """The share of steps whose gradient norm (logged before clipping) exceeded the clip; NaN without a clip."""
    return float((m["grad_norm"] > float(clip)).mean()) if clip and "grad_norm" in m else NAN


def adv_clip_binding_of(m: pd.DataFrame, adv_clip) -> float:
    """The share of steps with any advantage (a step whose groups all had equal rewards has none to clip) whose
    largest |advantage|, logged after the clip, reached it; NaN without a clip."""
    adv = m["adv_abs_max"].dropna() if "adv_abs_max" in m else pd.Series(dtype=float)
    adv = adv[adv > 0]
    return float((adv >= float(adv_clip) * (1 - 1e-6)).mean()) if adv_clip and len(adv) else NAN


# ---- held-out accuracy ---------------------------------------------------------------------------
@measure("mid_gain", "held-out accuracy at the evaluation nearest half the steps − before RL", bounds=CHANGE)
def mid_gain(run) -> float:
    return five_points(run.evals, run.settings["steps"]).loc[2, "eval_accuracy"] - run.initial_eval


@measure("late_drawdown", "largest fall of held-out accuracy from an earlier peak over the second half", SHARE)
def late_drawdown(run) -> float:
    e = run.evals
    return max_drawdown(e.loc[e["step"] >= run.settings["steps"] / 2, "eval_accuracy"])


@measure("degraded", "1 when the run did not collapse but ended more than 5 points below its start", bounds=SHARE)
def degrade(run) -> float:
    d = degraded(run)
    return NAN if d is None else float(d)


# ---- the rollouts --------------------------------------------------------------------------------
@measure("initial_format_rate", "share of well-formed rollouts at step 1", bounds=SHARE)
def initial_format_rate(run) -> float:
    return float(run.metrics["format_rate"].iloc[0])


@measure("final_format_rate", "share of well-formed rollouts at the last step", bounds=SHARE)
def final_format_rate(run) -> float:
    return float(run.metrics["format_rate"].iloc[-1])


@measure("late_format_rate", "share of well-formed rollouts over the last quarter of the steps", bounds=SHARE)
def late_format_rate(run) -> float:
    return late_share(run.metrics, "format_rate")


@measure("format_gain", "share of well-formed rollouts: the last quarter of the steps − step 1", bounds=CHANGE)
def format_gain(run) -> float:
    return late_format_rate(run) - initial_format_rate(run)


@measure("first_stage_accuracy", "sampled training accuracy over the curriculum's first stage (NaN without one)")
def first_stage_accuracy(run) -> float:
    m = run.metrics
    return (
        float(m.loc[m["ndigit"] == m["ndigit"].min(), "accuracy"].mean())
        if run.settings.get("curriculum_start")
        else NAN
    )


@measure("early_entropy", "mean token entropy over the first half of the steps")
def early_entropy(run) -> float:
    m = run.metrics
    return float(m.loc[m["step"] <= run.settings["steps"] / 2, "entropy"].mean())


@measure("entropy_fall_ends", "share of token entropy lost from the first step that logged it to the last")
def entropy_fall_ends(run) -> float:
    return 1 - end_over_start(run.metrics["entropy"])


# ---- what each remedy changes, as the run logged it ------------------------------------------------
@measure("mean_lr", "mean learning rate over the steps")
def mean_lr(run) -> float:
    return float(run.metrics["lr"].mean())


@measure("clip_binding", "share of steps whose gradient norm (before clipping) exceeded the clip", bounds=SHARE)
def clip_binding(run) -> float:
    return clip_binding_of(run.metrics, run.settings.get("grad_clip"))


@measure("adv_clip_ratio", "mean largest |advantage| of a step over the advantage clip (1: the clip bound)")
def adv_clip_ratio(run) -> float:
    clip = run.settings.get("adv_clip")
    return adv_abs_max(run) / float(clip) if clip else NAN


@measure("adv_clip_binding", "share of steps with an advantage whose largest |advantage| reached the clip", SHARE)
def adv_clip_binding(run) -> float:
    return adv_clip_binding_of(run.metrics, run.settings.get("adv_clip"))


@measure("adv_mean_abs", "|mean advantage over answer tokens|, over the steps")
def adv_mean_abs(run) -> float:
    return abs(adv_mean(run))


@measure("entropy_coef_ratio", "entropy bonus at the last step that logged it / at the first")
def entropy_coef_ratio(run) -> float:
    m = run.metrics
    return end_over_start(m["entropy_coef"]) if "entropy_coef" in m else NAN


@measure("mean_kl_coef", "mean KL coefficient over the steps")
def mean_kl_coef(run) -> float:
    return step_mean(run.metrics, "kl_coef")


@measure("mean_kl", "mean KL to the reference policy over the steps")
def mean_kl(run) -> float:
    return step_mean(run.metrics, "kl")


# ---- the non-finite guard ------------------------------------------------------------------------
def skipped_steps(m: pd.DataFrame) -> pd.Series:
    """The steps whose update the non-finite guard skipped."""
    return m.loc[m["skipped"].fillna(0) > 0, "step"]


@measure("skipped", "updates the non-finite guard skipped")
def skipped(run) -> float:
    return float(run.metrics["skipped"].fillna(0).sum())


@measure("first_skipped_step", "the first step whose update the non-finite guard skipped (NaN for none)")
def first_skipped_step(run) -> float:
    hits = skipped_steps(run.metrics)
    return float(hits.iloc[0]) if len(hits) else NAN


@measure("weights_finite", "the final evaluation and last step's entropy (a forward pass of the final weights) finite")
def weights_finite(run) -> bool:
    return bool(math.isfinite(run.summary["final"]["eval_accuracy"]) and math.isfinite(run.metrics["entropy"].iloc[-1]))


@measure("caught", "1 when the guard skipped an update and the weights stayed finite", bounds=SHARE)
def caught(run) -> float:
    return float(len(skipped_steps(run.metrics)) > 0 and weights_finite(run))


# ---- a run's points and curve, and the guard's runs: the rows the collapse tables summarise across seeds ---------
POINT_VALUES = ["eval_accuracy", "format_rate", "frac_zero_std"]  # at each of the five points of a run
CURVE_VALUES = "eval_accuracy format_rate entropy entropy_coef lr ndigit skipped frac_zero_std accuracy".split()
NONFINITE_COLUMNS = [  # collapse_nonfinite: the huge-LR runs one by one
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


def segment_rows(run, role: str) -> list[dict]:
    """Each of the five points with the rollouts behind it: format rate and the share of zero-std groups over the
    steps since the previous point (point 0: step 1's rollouts, which the warm-up policy sampled). An evaluation
    nearest to two of the points (a run with fewer than five evaluations after step 0) is one row, under the first."""
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


def design_points(runs: list, named: dict[str, str]) -> pd.DataFrame:
    """The five points (`segment_rows`) of every run with a result whose role (`named`: {variant: role}) is one of
    REWARD_DESIGNS, one row each."""
    designs = [r for r in runs if r.ok and named.get(r.spec.variant) in REWARD_DESIGNS]
    rows = [row for r in designs for row in segment_rows(r, named[r.spec.variant])]
    return pd.DataFrame(rows, columns=["variant", "role", "seed", "point", "step", *POINT_VALUES])


def curve_points(run, role: str) -> pd.DataFrame:
    """A run's curve, one row per step with its variant, role and seed: held-out accuracy before RL (step 0), then
    each logged step's CURVE_VALUES (NaN where the run did not log one)."""
    start = pd.DataFrame({"step": [0], "eval_accuracy": [run.initial_eval]})
    logged = pd.concat([start, run.metrics.reindex(columns=["step"] + CURVE_VALUES)], ignore_index=True)
    return logged.assign(variant=run.spec.variant, role=role, seed=run.spec.seed)


def guard_runs(per_run: pd.DataFrame) -> pd.DataFrame:
    """The huge-LR runs of collapse_per_run one by one: did the guard skip updates, and did the weights stay finite?
    A run without a result keeps NaN for everything it did not get to measure; its warm-up, steps and skipped updates
    are integers where every run's are known."""
    out = per_run.loc[per_run["role"] == "nonfinite", NONFINITE_COLUMNS].reset_index(drop=True)
    return out.astype({c: int for c in ("warmup", "steps_done", "skipped") if out[c].notna().all()})


STATS = [
    "initial_eval",
    "final_eval",
    "peak_eval",
    "gain",
    "mid_gain",
    "drawdown",
    "late_drawdown",
    "roughness",
    "collapsed",
    "degraded",
    "final_format_rate",
    "entropy_last",
    "early_entropy",
    "skipped",
    "initial_format_rate",
    "frac_zero_std",
    "entropy_fall_ends",
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
GUARD = ["steps_done", "first_skipped_step", "weights_finite", "caught"]
RUN_TABLES = {
    "collapse_per_run": {
        "experiment": "collapse",
        "keys": ["variant", "role", "seed", "warmup", "run_id", "status", "algorithm"],
        "measures": [*STATS, *GUARD],
        "roles": ROLES,
    },
}
