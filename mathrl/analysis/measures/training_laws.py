"""Two laws fitted on one run's steps: the entropy-performance law R = −a·exp(H) + b (Cui et al. 2025) of its
training accuracy against its policy entropy, and the gradient noise scale B_noise (McCandlish et al. 2018) early and
late in the run, from the squared gradient norms it logged (grad_noise_scale: true), and the gradient probe's
B_noise beside the batch study's runs. The maths is `mathrl.analysis.estimators`.

Each builder of a law per run takes the runs a study passes in (its `keys`, the columns that name it, with the run)
and makes one row per run that logged what the law needs.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from mathrl.analysis import estimators as dx
from mathrl.analysis.measures.general import final_eval, gain
from mathrl.analysis.measures.series import NAN, known
from mathrl.analysis.results import Run
from mathrl.analysis.verdict import estimate_columns, mean_interval

LAW_R2 = 0.5  # the law "holds" in a run when its fit explains at least half the variance ...
LAW_RMSE = 0.05  # ... and the first half's fit predicts the second half within 5 points (RMSE)
LAW_STEPS = 8  # the steps a run needs for a fit (4 per half)
REACHED_STEPS = 5  # the accuracy a run reached: the mean sampled accuracy of its last this many steps
RUN_KEYS = ["experiment", "setting", "seed"]
FIT = "n a b r2 ceiling half_rmse half_mae".split()  # `estimators.fit_entropy_law`'s values
LAW_COLUMNS = [
    *RUN_KEYS,
    "steps",
    *FIT,
    *["entropy_start", "entropy_end", "reached", "final_eval", "ceiling_minus_reached", "holds"],
]
NOISE_COLUMNS = [*RUN_KEYS, "batch_size", "early", "late", "undefined_steps"]
NOISE_STEPS = 4  # the steps with squared gradient norms a run needs for its early and late noise scale


def entropy_law_row(keys: dict, run: Run) -> dict | None:
    """A run's fit of the law (`estimators.fit_entropy_law` over its steps: sampled training accuracy against policy
    entropy), its entropy at the first and the last step, the accuracy it reached (the mean of its last REACHED_STEPS
    steps) and its final held-out accuracy, how far the fitted ceiling lies above what it reached, and whether the law
    holds (R² at least LAW_R2 and the half-run error at most LAW_RMSE; None where either is unknown). None for a run
    without entropy, accuracy or LAW_STEPS steps."""
    m = run.metrics
    if "entropy" not in m or "accuracy" not in m or len(m) < LAW_STEPS:
        return None
    fit = dx.fit_entropy_law(m["entropy"].to_numpy(), m["accuracy"].to_numpy())
    reached = float(m["accuracy"].tail(REACHED_STEPS).mean())
    holds = fit["r2"] >= LAW_R2 and fit["half_rmse"] <= LAW_RMSE
    return {
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


def entropy_law_runs(runs: Iterable[tuple[dict, Run]]) -> pd.DataFrame:
    """One fit of the law per run that has what it needs (`entropy_law_row`)."""
    rows = [entropy_law_row(keys, run) for keys, run in runs]
    return pd.DataFrame([row for row in rows if row is not None], columns=LAW_COLUMNS)


def noise_scale_row(keys: dict, run: Run) -> dict | None:
    """A run's B_noise over the first and the last quarter of its steps, from the squared gradient norms at its micro
    and its full batch averaged over those steps (McCandlish et al. average |G|² and tr(Σ) before taking their ratio;
    one step's is noisy), with its batch size and the steps whose own B_noise is undefined. None for a run with fewer
    than NOISE_STEPS steps that logged the norms."""
    m = run.metrics
    if "grad_sq_micro" not in m or m["grad_sq_micro"].notna().sum() < NOISE_STEPS:
        return None
    q, b, big = max(1, len(m) // 4), run.settings.get("micro_batch_size"), run.settings.get("batch_size")
    est = {
        part: dx.noise_scale(b, big, float(w["grad_sq_micro"].mean()), float(w["grad_sq_batch"].mean()))["noise_scale"]
        for part, w in (("early", m.head(q)), ("late", m.tail(q)))
    }
    return {**keys, "batch_size": big, **est, "undefined_steps": int(m["grad_noise_scale"].isna().sum())}


def noise_scale_runs(runs: Iterable[tuple[dict, Run]]) -> pd.DataFrame:
    """B_noise early and late per run that logged the squared gradient norms (`noise_scale_row`)."""
    rows = [noise_scale_row(keys, run) for keys, run in runs]
    return pd.DataFrame([row for row in rows if row is not None], columns=NOISE_COLUMNS)


NOISE_SCALE = "task grad_sq trace_sigma noise_scale batch_size lr gain_mean gain_lo gain_hi n lr_scale".split()


def noise_scale_beside_batches(probes: dict[str, dict], runs: Iterable[Run]) -> pd.DataFrame:
    """Per task the gradient probe measured (`probes`: {task: the probe's `noise_scale` block, empty where it wrote
    none}) and batch size of the batch study's runs with a result (`runs`): the probe's |G|², tr(Σ) and B_noise beside
    the runs' LR and held-out gain (mean with its 95% t interval over seeds), and the LR scale McCandlish et al.
    predict: the best step size grows as B / (B + B_noise), here relative to the largest B."""
    done = [r for r in runs if r.ok]
    gains = pd.DataFrame(
        [{"batch_size": r.settings["batch_size"], "lr": r.settings["lr"], "gain": gain(r)} for r in done],
        columns=["batch_size", "lr", "gain"],
    )
    sizes, rows = sorted(set(gains["batch_size"])) or [NAN], []
    for task, ns in probes.items():
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
                    **estimate_columns("gain", est),
                    "n": est.n,
                    "lr_scale": (b / (b + b_noise)) / (max(sizes) / (max(sizes) + b_noise))
                    if known(b, b_noise)
                    else NAN,
                }
            )
    return pd.DataFrame(rows, columns=NOISE_SCALE)
