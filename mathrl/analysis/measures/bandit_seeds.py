"""Measures of a bandit seed: one seed's trajectory in one setting of a bandit study of lab 04 (mathrl.engine.bandit:
entropy collapse, vanishing gradients with equal rewards, reward hacking of a proxy reward model), and the three
bandit tables claims read (BANDIT_TABLES, built by `tables.bandit_table`); and the study's tables across seeds:
where each setting's seeds converged (`local_optima`), the gradient-vanishing study's steps (`vanishing_points`) and
each study's curves (`bandit_curves`).

Each measure reads a `tables.BanditSeed`: its rows by step (entropy, the arms' probabilities p0.., the gradient norm,
the batch's reward std, the proxy score and true reward) and the resolved `bandit:` block (which arm is the global
optimum, which arms the proxy was fitted on). A start or an end value is the mean over the first or last `window`
steps.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from mathrl.analysis.measures.catalog import among, seed_measure
from mathrl.analysis.measures.series import known, window
from mathrl.analysis.measures.tables import BanditSeed
from mathrl.analysis.measures.training_challenges import reduction
from mathrl.analysis.results import mean_spread
from mathrl.analysis.verdict import wilson_columns
from mathrl.pipeline import bandit_config as bandit

BANDIT_WINDOW = 10  # bandit steps averaged for a start or end value, and the rolling window of the peak
DOMINANT = 0.9  # an arm holding this much probability is where the policy converged (bandit.converged_to)
# a bandit policy is still moving if an arm's probability changed by more than 0.05 over the last 10% of steps
SETTLED_SPAN, SETTLED_MOVE = 0.1, 0.05
SEVERITY_DEFINITION = (
    "mild: the mean gradient norm fell by less than 50%; moderate: by 50-90%; severe: by more than 90%"
)
PROBS = ["p0", "p1", "p2"]  # the entropy-collapse study's three arms
# the logged per-step metrics the curves summarise (p3 where a study has a fourth arm; not the settings lr and
# entropy_coef)
METRICS = "entropy p0 p1 p2 p3 loss grad_norm reward_std reward_mean proxy_reward true_reward".split()
POINT_COLUMNS = ["setting", "seed", "step", "phase", "grad_norm", "reward_std"]  # the gradient-vanishing steps


# ---- pure functions of values ------------------------------------------------------------
def still_moving(probs: np.ndarray, span: float = SETTLED_SPAN, move: float = SETTLED_MOVE) -> bool:
    """Whether a bandit policy was still moving at its end: some arm's probability changed by more
    than `move` over the last `span` of its steps (probs: steps x arms, in step order)."""
    back = max(1, int(round(span * len(probs))))
    return bool(len(probs) > back and np.abs(probs[-1] - probs[-1 - back]).max() > move)


def severity(red: float) -> str:
    """The gradient-vanishing severity of a reduction (SEVERITY_DEFINITION)."""
    return "unknown" if (not known(red)) else "severe" if red > 0.9 else "moderate" if red >= 0.5 else "mild"


def hacked(proxy_start: float, proxy_end: float, true_start: float, true_end: float) -> bool | None:
    """Reward hacking: the optimised (proxy) score rose while the true reward fell."""
    ok = known(proxy_start, proxy_end, true_start, true_end)
    return proxy_end > proxy_start and true_end < true_start if ok else None


def at_others_peak(curve: pd.Series, others: list[pd.Series]) -> float:
    """`curve`'s value at the step where the mean of `others` (the other seeds' curves of its setting, by step) peaks:
    a peak found without the curve's own noise, so that a curve that does not rise reads no rise on average."""
    if not others:
        return math.nan
    return float(curve.get(pd.concat(others, axis=1).mean(axis=1).idxmax(), math.nan))


def common(values: pd.Series, seeds: list[BanditSeed]):
    """A pooled row's value of a label: the seeds' one value where they agree, else NaN."""
    found = values.dropna().unique()
    return found[0] if len(found) == 1 else math.nan


def counted(values: pd.Series, seeds: list[BanditSeed]) -> str:
    """A pooled row's count of each place the seeds converged to ("global 3, local 1"), or "missing"."""
    labels = values.tolist()
    return ", ".join(f"{k} {labels.count(k)}" for k in ("global", "local", "none") if k in labels) or "missing"


# ---- reading a seed ----------------------------------------------------------------------
def start(seed: BanditSeed, column: str) -> float:
    """The mean of `column` over the seed's first `window` steps."""
    return seed.frame[column].head(window(len(seed.frame), BANDIT_WINDOW)).mean()


def end(seed: BanditSeed, column: str) -> float:
    """The mean of `column` over the seed's last `window` steps."""
    return seed.frame[column].tail(window(len(seed.frame), BANDIT_WINDOW)).mean()


def best_arm(seed: BanditSeed) -> int:
    """The global optimum: the arm of the highest reward (action 1 in the document)."""
    return int(np.argmax(seed.config["arm_rewards"]))


def last_probs(seed: BanditSeed) -> np.ndarray:
    return seed.frame[PROBS].to_numpy()[-1]


def dominant(seed: BanditSeed) -> int:
    return int(np.argmax(last_probs(seed)))


def phase_mean(seed: BanditSeed, column: str, phase: str) -> float:
    return seed.frame.loc[seed.frame["phase"] == phase, column].mean()


def rolling_true(seed: BanditSeed, frame: pd.DataFrame | None = None) -> pd.Series:
    """The true reward's rolling mean over BANDIT_WINDOW steps (of `frame`, by default the seed's), by step."""
    g = seed.frame if frame is None else frame
    rolling = g["true_reward"].rolling(BANDIT_WINDOW, min_periods=1).mean()
    return pd.Series(rolling.to_numpy(), index=g["step"].to_numpy())


# ---- entropy collapse ----------------------------------------------------------------------
@seed_measure("initial_entropy", "bandit policy entropy over the first 10 steps (at most half the run)")
def initial_entropy(seed: BanditSeed) -> float:
    return start(seed, "entropy")


@seed_measure("final_policy_entropy", "bandit policy entropy over the last 10 steps (at most half the run)")
def final_policy_entropy(seed: BanditSeed) -> float:
    return end(seed, "entropy")


@seed_measure("policy_entropy_reduction", "share of the bandit policy's entropy lost from the start to the end")
def policy_entropy_reduction(seed: BanditSeed) -> float:
    return reduction(initial_entropy(seed), final_policy_entropy(seed))


@seed_measure("dominant_action", "the bandit's most probable action at the last step", pooled=common)
def dominant_action(seed: BanditSeed) -> float:
    return float(dominant(seed))


@seed_measure("dominant_prob", "the probability of the bandit's most probable action at the last step")
def dominant_prob(seed: BanditSeed) -> float:
    return last_probs(seed)[dominant(seed)]


@seed_measure(
    "converged_to",
    f"where the bandit policy converged at the last step: 'global' if the global optimum holds at least {DOMINANT}, "
    "'local' if another action does, 'none' otherwise (pooled: the seeds counted by label)",
    pooled=counted,
    missing="missing",
)
def converged_to(seed: BanditSeed) -> str:
    return bandit.converged_to(*last_probs(seed), threshold=DOMINANT, best_arm=best_arm(seed))


@seed_measure("global_share", "1 where the bandit policy converged to the global optimum (pooled: share of seeds)")
def global_share(seed: BanditSeed) -> float:
    return float(converged_to(seed) == "global")


@seed_measure("local_share", "1 where the bandit policy converged to a local optimum (pooled: share of seeds)")
def local_share(seed: BanditSeed) -> float:
    return float(converged_to(seed) == "local")


@seed_measure("initial_best_prob", "the probability of the bandit's global optimum at step 0")
def initial_best_prob(seed: BanditSeed) -> float:
    return seed.frame[PROBS].to_numpy()[0, best_arm(seed)]


@seed_measure(
    "moving",
    f"1 where some action's probability moved by more than {SETTLED_MOVE} over the last {SETTLED_SPAN:.0%} of the "
    "bandit's steps (pooled: share of seeds still moving)",
)
def moving(seed: BanditSeed) -> float:
    return float(still_moving(seed.frame[PROBS].to_numpy()))


# ---- vanishing gradients -------------------------------------------------------------------
@seed_measure("grad_norm_homogeneous", "mean gradient norm over the bandit's steps whose rewards were all equal")
def grad_norm_homogeneous(seed: BanditSeed) -> float:
    return phase_mean(seed, "grad_norm", "homogeneous")


@seed_measure("reward_std_homogeneous", "mean reward std of the batch over the bandit's equal-reward steps")
def reward_std_homogeneous(seed: BanditSeed) -> float:
    return phase_mean(seed, "reward_std", "homogeneous")


@seed_measure("grad_norm_diverse", "mean gradient norm over the bandit's steps with diverse rewards")
def grad_norm_diverse(seed: BanditSeed) -> float:
    return phase_mean(seed, "grad_norm", "diverse")


@seed_measure("reward_std_diverse", "mean reward std of the batch over the bandit's steps with diverse rewards")
def reward_std_diverse(seed: BanditSeed) -> float:
    return phase_mean(seed, "reward_std", "diverse")


@seed_measure("grad_norm_reduction", "share of the mean gradient norm lost with equal rewards against diverse ones")
def grad_norm_reduction(seed: BanditSeed) -> float:
    return reduction(grad_norm_diverse(seed), grad_norm_homogeneous(seed))


def pooled_correlation(values: pd.Series, seeds: list[BanditSeed]) -> float:
    """The correlation over every step of every seed of a setting."""
    found = [s.frame for s in seeds if len(s.frame)]
    steps = pd.concat(found, ignore_index=True) if found else None
    return steps["grad_norm"].corr(steps["reward_std"]) if steps is not None else math.nan


@seed_measure(
    "corr_grad_reward_std",
    "correlation of the bandit's gradient norm with the batch's reward std over the steps (pooled: over every step "
    "of every seed)",
    pooled=pooled_correlation,
)
def corr_grad_reward_std(seed: BanditSeed) -> float:
    g = seed.frame
    return g["grad_norm"].corr(g["reward_std"]) if len(g) > 2 else math.nan


@among("severity", f"the gradient-vanishing severity of the bandit's grad_norm_reduction ({SEVERITY_DEFINITION})")
def severity_of(rows: pd.DataFrame) -> pd.Series:
    return rows["grad_norm_reduction"].map(severity)


# ---- reward hacking --------------------------------------------------------------------------
def hack_arm_of(config: dict) -> int:
    """The arm the reward-hacking study's proxy overrates: never labelled, scored highest."""
    study = config["studies"]["reward_hacking"]
    proxy = bandit.proxy_scores(study["arm_lengths"], study["true_rewards"], study["labelled_arms"])
    unlabelled = [a for a in range(len(proxy)) if a not in study["labelled_arms"]] or list(range(len(proxy)))
    return max(unlabelled, key=proxy.__getitem__)


@seed_measure(
    "hack_arm", "the bandit arm the proxy overrates (never labelled, scored highest)", pooled=common, rows=False
)
def hack_arm(seed: BanditSeed) -> int:
    return hack_arm_of(seed.config)


@seed_measure("proxy_start", "the bandit's mean proxy score over the first 10 steps (at most half the run)")
def proxy_start(seed: BanditSeed) -> float:
    return start(seed, "proxy_reward")


@seed_measure("proxy_end", "the bandit's mean proxy score over the last 10 steps (at most half the run)")
def proxy_end(seed: BanditSeed) -> float:
    return end(seed, "proxy_reward")


@seed_measure("true_start", "the bandit's mean true reward over the first 10 steps (at most half the run)")
def true_start(seed: BanditSeed) -> float:
    return start(seed, "true_reward")


@seed_measure("true_peak", "the peak of the bandit's true reward, as a rolling mean over 10 steps")
def true_peak(seed: BanditSeed) -> float:
    return rolling_true(seed).max()


@seed_measure("true_peak_step", "the step where the bandit's rolling true reward peaks (the first, if tied)")
def true_peak_step(seed: BanditSeed) -> float:
    return float(seed.frame["step"].iloc[int(np.argmax(rolling_true(seed).to_numpy()))])


@seed_measure(
    "true_at_others_peak",
    "the bandit's rolling true reward at the step where the other seeds of its setting peak on average",
)
def true_at_others_peak(seed: BanditSeed) -> float:
    return at_others_peak(rolling_true(seed), [rolling_true(seed, f) for f in seed.peers])


@seed_measure("true_end", "the bandit's mean true reward over the last 10 steps (at most half the run)")
def true_end(seed: BanditSeed) -> float:
    return end(seed, "true_reward")


@seed_measure("hack_share_end", "the probability of the arm the proxy overrates at the bandit's last step")
def hack_share_end(seed: BanditSeed) -> float:
    return float(seed.frame[f"p{hack_arm(seed)}"].iloc[-1])


@among(
    "hacked", "whether the proxy score rose while the true reward fell (proxy_end > proxy_start, true_end < true_start)"
)
def hacked_of(rows: pd.DataFrame) -> pd.Series:
    ends = rows[["proxy_start", "proxy_end", "true_start", "true_end"]].itertuples(index=False)
    return pd.Series([hacked(*r) for r in ends], index=rows.index)


ENTROPY = ["initial_entropy", "final_policy_entropy", "policy_entropy_reduction"]
HACKING = (
    "proxy_start proxy_end true_start true_peak true_peak_step true_at_others_peak true_end hack_share_end".split()
)

# The bandit tables claims read: one row per setting and seed of the study, then a pooled row (seed `all`) per setting
# (mathrl.analysis.measures.tables: `bandit_table`).
BANDIT_TABLES = {
    "lab04_entropy": {
        "study": "entropy_collapse",
        "measures": [*ENTROPY, "dominant_action", "dominant_prob", "global_share", "local_share"]
        + ["initial_best_prob", "moving", "converged_to"],
        "spread": [*ENTROPY, "dominant_prob", "global_share", "local_share", "initial_best_prob", "moving"],
        "among": [],
    },
    "lab04_vanishing": {
        "study": "gradient_vanishing",
        "measures": ["grad_norm_homogeneous", "reward_std_homogeneous", "grad_norm_diverse", "reward_std_diverse"]
        + ["grad_norm_reduction", "corr_grad_reward_std"],
        "spread": ["grad_norm_homogeneous", "grad_norm_diverse", "grad_norm_reduction", "reward_std_homogeneous"]
        + ["reward_std_diverse", "corr_grad_reward_std"],
        "among": ["severity"],
    },
    "lab04_hacking": {
        "study": "reward_hacking",
        "measures": ["hack_arm", *HACKING],
        "spread": HACKING,
        "among": ["hacked"],
    },
}


# ---- the study's tables across seeds -----------------------------------------------------------
def seed_rows(table: pd.DataFrame, pooled: bool = False) -> pd.DataFrame:
    """The per-seed rows of a bandit table, or (`pooled`) its rows with seed 'all', one per setting."""
    return table[(table["seed"].astype(str) == "all") == pooled] if len(table) and "seed" in table else table


def local_optima(entropy: pd.DataFrame) -> pd.DataFrame:
    """Per setting of lab04_entropy (its per-seed rows): how many seeds ended at the global optimum, a local one or
    neither, how many were still moving at the end (the measure `moving`), and the local-optimum rate with its 95%
    Wilson interval."""
    out = []
    for setting, g in seed_rows(entropy).groupby("setting", sort=False):
        counts = {x: int((g["converged_to"] == x).sum()) for x in ("global", "local", "none")}
        n = sum(counts.values())
        out.append(
            {
                "setting": setting,
                "n": n,
                **counts,
                **wilson_columns("local_rate", counts["local"], n),
                "moving": int((g["moving"] == 1).sum()) if "moving" in g else 0,
                "initial_best_prob": g["initial_best_prob"].mean(),
            }
        )
    columns = "setting n global local none moving local_rate local_rate_lo local_rate_hi initial_best_prob"
    return pd.DataFrame(out, columns=columns.split())


def vanishing_points(seeds: list[BanditSeed]) -> pd.DataFrame:
    """Every step of every seed of the gradient-vanishing study: its phase, gradient norm and reward std."""
    found = [s.frame[POINT_COLUMNS] for s in seeds if len(s.frame)]
    return pd.concat(found, ignore_index=True) if found else pd.DataFrame(columns=POINT_COLUMNS)


def bandit_curves(frames: list[pd.DataFrame | None]) -> pd.DataFrame:
    """Per study, setting and step: the mean, std and n across seeds of every metric of METRICS a study logged
    (`frames`: each bandit study's steps, None where it wrote none)."""
    found = []
    for df in frames:
        if df is not None and len(df):
            df = df.assign(phase=df["phase"].astype(object).fillna(""))
            found.append(mean_spread(df, ["study", "setting", "step", "phase"], [m for m in METRICS if m in df]))
    empty = pd.DataFrame(columns=["study", "setting", "step", "phase", "n"])
    return pd.concat(found, ignore_index=True) if found else empty
