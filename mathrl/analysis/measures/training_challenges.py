"""Measures of lab04-training-challenges.md's GPT runs (experiment `lab04_gpt`): entropy collapse read at points,
reward hacking, the exploding KL and its remedies, and DAPO compared at equal samples; the run table its claims
read and its summary per variant (`gpt_summary`); and what each remedy changes against the failing setting of its
cause (`differences_table`).

Token entropy is read at points, not over windows, so that arms of different lengths or sampling rates are compared
where they match: at step 1 (the policy before any update, the same warm-up for every arm of a seed), at the last
step (equal updates where the arms run the same steps), and at `equal_samples_step`, where a run that draws more
rollouts per step (dynamic sampling) has drawn what a run without it draws in all (equal samples). Sampled accuracy
and the training reward, which one batch measures noisily, are means over the first or last steps (`series.WINDOW`).
"""

from __future__ import annotations

import math

import pandas as pd

from mathrl.analysis.measures.catalog import SHARE, measure
from mathrl.analysis.measures.series import WINDOW, head_mean, known, step_mean, tail_mean
from mathrl.analysis.results import Run, mean_spread


def reduction(start: float, end: float) -> float:
    """Relative decrease from start to end: 1 when it fell to zero, NaN when start is 0 or unknown."""
    return math.nan if not known(start, end) or start == 0 else 1 - end / start


def equal_samples_step(steps, samples, budget: float) -> int:
    """The last step whose cumulative rollouts drawn (`samples`, per step) are at most `budget`: where a run that
    draws more per step (dynamic sampling) has drawn what a run without it draws in all; a run without it reaches
    its budget at its last step. 0 where none is."""
    return max((int(st) for st, n in zip(steps, samples) if n <= budget), default=0)


def last_eval_by(evals: pd.DataFrame, step: int) -> tuple[float, int]:
    """(held-out accuracy, its step) of the last evaluation at or before `step` (step 0: before RL)."""
    e = evals[evals["step"] <= step]
    return (float(e["eval_accuracy"].iloc[-1]), int(e["step"].iloc[-1])) if len(e) else (math.nan, 0)


def by_step(run: Run) -> pd.DataFrame:
    """A run's logged steps, in step order."""
    return run.metrics.sort_values("step")


def budget_step(run: Run) -> int:
    """`equal_samples_step` at the budget of a run without dynamic sampling: steps x batch_size rollouts."""
    m, st = by_step(run), run.settings
    return equal_samples_step(m["step"], m["samples"], float(st["steps"]) * float(st["batch_size"]))


def at_budget(run: Run, column: str) -> float:
    """A logged column at `budget_step` (NaN where no step is at or under the budget)."""
    m = by_step(run)
    row = m[m["step"] == budget_step(run)]
    return float(row[column].iloc[0]) if len(row) else math.nan


@measure("accuracy_start", f"mean sampled training accuracy over the first {WINDOW} steps", bounds=SHARE)
def accuracy_start(run: Run) -> float:
    return head_mean(run, "accuracy")


@measure("accuracy_end", f"mean sampled training accuracy over the last {WINDOW} steps", bounds=SHARE)
def accuracy_end(run: Run) -> float:
    return tail_mean(run, "accuracy")


@measure("equal_samples_step", "the last step by which the run drew at most steps x batch_size rollouts")
def equal_samples_step_of(run: Run) -> float:
    return float(budget_step(run))


@measure("samples_at_equal", "rollouts drawn by the equal-samples step")
def samples_at_equal(run: Run) -> float:
    return at_budget(run, "samples")


@measure("entropy_equal_samples", "token entropy at the equal-samples step")
def entropy_equal_samples(run: Run) -> float:
    return at_budget(run, "entropy")


@measure("eval_equal_samples", "held-out accuracy at the last evaluation by the equal-samples step", bounds=SHARE)
def eval_equal_samples(run: Run) -> float:
    return last_eval_by(run.evals, budget_step(run))[0]


@measure("eval_equal_samples_step", "the step of the last evaluation by the equal-samples step")
def eval_equal_samples_step(run: Run) -> float:
    return float(last_eval_by(run.evals, budget_step(run))[1])


@measure("frac_zero_std", "share of groups whose rewards are all equal, mean over the run's steps", bounds=SHARE)
def frac_zero_std(run: Run) -> float:
    return step_mean(run.metrics, "frac_zero_std")


@measure("grad_norm", "gradient norm, mean over the run's steps")
def grad_norm(run: Run) -> float:
    return step_mean(run.metrics, "grad_norm")


@measure("kl_max", "largest per-step KL to the reference policy")
def kl_max(run: Run) -> float:
    return float(run.metrics["kl"].max())


@measure(
    "clip_higher_freed",
    "share of tokens clip-higher freed (advantage > 0, ratio in (1 + clip_eps, 1 + clip_eps_high]), mean over steps",
    bounds=SHARE,
)
def clip_higher_freed(run: Run) -> float:
    return step_mean(run.metrics, "clip_higher_freed")


@measure(
    "clip_tighter_cut",
    "share of tokens a clip tighter than 0.2 cut whose ratio lies within [0.8, 1.2], mean over steps",
    bounds=SHARE,
)
def clip_tighter_cut(run: Run) -> float:
    return step_mean(run.metrics, "clip_tighter_cut")


@measure("draws_per_rollout", "rollouts drawn per rollout kept (above 1 under dynamic sampling)")
def draws_per_rollout(run: Run) -> float:
    m = by_step(run)
    return float(m["samples"].iloc[-1]) / (len(m) * run.settings["batch_size"])


@measure("cov_frac", "share of answer tokens the covariance rule acted on, mean over the run's steps", bounds=SHARE)
def cov_frac(run: Run) -> float:
    return step_mean(run.metrics, "cov_frac")


@measure("entropy_coef", "entropy bonus coefficient, mean over the run's steps")
def entropy_coef(run: Run) -> float:
    return step_mean(run.metrics, "entropy_coef")


@measure("temperature", "sampling temperature of the run's rollouts")
def temperature(run: Run) -> float:
    return float(run.settings.get("temperature", math.nan))


GPT_MEASURES = [
    "accuracy_start",
    "accuracy_end",
    "initial_eval",
    "final_eval",
    "gain",
    "entropy_first",
    "entropy_last",
    "entropy_reduction",
    "equal_samples_step",
    "samples_at_equal",
    "entropy_equal_samples",
    "eval_equal_samples",
    "eval_equal_samples_step",
    "frac_zero_std",
    "grad_norm",
    "reward_start",
    "reward_end",
    "accuracy_gain",
    "kl_max",
    "ppo_kl",
    "clip_frac",
    "clip_frac_high",
    "clip_higher_freed",
    "clip_tighter_cut",
    "samples",
    "draws_per_rollout",
    "cov_frac",
    "entropy_coef",
    "temperature",
]
RUN_TABLES = {
    # every lab04_gpt run, those without a result as rows of NaN
    "lab04_gpt_runs": {
        "experiment": "lab04_gpt",
        "keys": ["run_id", "variant", "seed", "warmup", "status"],
        "measures": GPT_MEASURES,
    },
}


def gpt_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per variant of lab04_gpt_runs: the mean and std across seeds of GPT_MEASURES (`mean_spread`); n counts its runs
    with a result (complete, or stopped at a non-finite value), expected all of them."""
    out = mean_spread(runs, ["variant"], GPT_MEASURES)
    if len(runs):
        g = runs.groupby("variant", sort=False)
        out["n"] = out["variant"].map(g["status"].agg(lambda s: int(s.isin(["complete", "stopped_nonfinite"]).sum())))
        out["expected"] = out["variant"].map(g.size())
    return out


# The remedies compared with the failing setting of their cause, by that setting's role: the exploding KL (kl_failing)
# and, where a config runs the entropy remedies, entropy collapse (entropy_failing); rows in this order.
REMEDIES_OF = {
    "kl_failing": ("kl_clip", "kl_epochs", "kl_batch"),
    "entropy_failing": ("clip_higher", "remedy", "entropy_bonus", "temperature", "clip_cov", "kl_cov"),
}


def differences(settings: dict, against: dict) -> list[tuple[str, object, object]]:
    """(key, value, other value) for every run setting but the seed where `settings` differ from `against`, by key."""
    keys = sorted((set(settings) | set(against)) - {"seed"})
    return [(k, settings.get(k), against.get(k)) for k in keys if settings.get(k) != against.get(k)]


def shown(value) -> str:
    """A setting's value as the report prints it: "unset" for None (a CSV would read "None" back as missing)."""
    return "unset" if value is None else str(value)


def differences_table(settings: dict[str, dict], role: dict[str, str]) -> pd.DataFrame:
    """Per remedy of REMEDIES_OF whose variant and failing variant both ran: each run setting it changes against the
    failing one (`settings`: {variant: its run settings}; `role`: {role: variant})."""
    rows = [
        {
            "role": r,
            "variant": role[r],
            "against": role[failing],
            "setting": key,
            "value": shown(value),
            "failing": shown(other),
        }
        for failing, remedies in REMEDIES_OF.items()
        for r in remedies
        if role.get(r) in settings and role.get(failing) in settings
        for key, value, other in differences(settings[role[r]], settings[role[failing]])
    ]
    return pd.DataFrame(rows, columns=["role", "variant", "against", "setting", "value", "failing"])
