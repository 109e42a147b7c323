"""Measures of gradient-norm clipping and of PPO's value-loss clipping (rl-stability-batch-and-hyperparameters.md,
5.2 and 5.3), and the run tables those claims read.

A clipping run is placed in its cell by its max norm and whether a gradient spike was injected (as text: `none`
where it does not clip); it is measured by how far held-out accuracy fell after the spike, the spike's size against
the run's other gradient norms, and how often the clip cut. A value-clipping run by its critic: the value RMSE
against its targets, the share of the returns it explains, how far one update moved its values and how often the
value clip cut.
"""

from __future__ import annotations

import pandas as pd

from mathrl.analysis.measures.catalog import CHANGE, SHARE, measure
from mathrl.analysis.measures.series import NAN, known, logged

CRITIC_BY = 20  # the step by which the critic must explain part of the returns (its check is in config/claims.yaml)


def as_text(value) -> str:
    """A setting as a cell names it: `none` where it is unset."""
    return "none" if value is None else str(value)


def spike_ratio_of(grad_norms: pd.Series, steps: pd.Series, spike_step) -> float:
    """Gradient norm (before clipping) at the spike step over the median of the other steps; NaN without a spike."""
    if not known(spike_step):
        return NAN
    at, rest = grad_norms[steps == spike_step], grad_norms[steps != spike_step].dropna()
    if not len(at) or not len(rest) or not known(at.iloc[0]) or rest.median() <= 0:
        return NAN
    return float(at.iloc[0] / rest.median())


def clipped_share(grad_norms: pd.Series, max_norm) -> float:
    """The share of steps whose gradient norm (logged before clipping) exceeded the max norm: how often the clip
    acted (NaN without a clip)."""
    norms = grad_norms.dropna()
    return float((norms > float(max_norm)).mean()) if max_norm is not None and len(norms) else NAN


def critic_ev(metrics: pd.DataFrame) -> float:
    """Mean explained variance of the value head over the 5 steps ending at step CRITIC_BY (or the run's last)."""
    return float(metrics[metrics["step"] <= CRITIC_BY].tail(5)["explained_variance"].mean())


# ---- gradient-norm clipping (5.2) ---------------------------------------------------------
@measure("max_norm", "the gradient-norm clip's max norm, as text (none: no clipping)")
def max_norm(run) -> str:
    return as_text(run.settings["grad_clip"])


@measure("spike", "yes where a gradient spike was injected (fault_grad_spike_step), else no")
def spike(run) -> str:
    return "yes" if run.settings.get("fault_grad_spike_step") is not None else "no"


@measure(
    "drop_after_spike",
    "held-out accuracy before RL − its lowest at an evaluation from the spike's step on (from the start without one)",
    bounds=CHANGE,
)
def drop_after_spike(run) -> float:
    e = run.evals
    after = e[e["step"] >= (run.settings.get("fault_grad_spike_step") or 0)]["eval_accuracy"]
    return float(run.initial_eval - after.min()) if len(after) else NAN


@measure("spike_ratio", "gradient norm at the injected spike's step over the median of the run's other steps")
def spike_ratio(run) -> float:
    m = run.metrics
    return spike_ratio_of(m["grad_norm"], m["step"], run.settings.get("fault_grad_spike_step"))


@measure("spike_norm", "gradient norm (before clipping) at the injected spike's step")
def spike_norm(run) -> float:
    m, at = run.metrics, run.settings.get("fault_grad_spike_step")
    norms = m.loc[m["step"] == at, "grad_norm"] if at is not None else pd.Series(dtype=float)
    return float(norms.iloc[0]) if len(norms) and known(norms.iloc[0]) else NAN


@measure("clip_bound", "share of steps whose gradient norm exceeded the max norm (the clip cut it)", bounds=SHARE)
def clip_bound(run) -> float:
    return clipped_share(run.metrics["grad_norm"], run.settings["grad_clip"])


# ---- value-loss clipping and weight (5.3) -------------------------------------------------
@measure("value_clip", "the value-loss clip range, as text (none: no clipping)")
def value_clip(run) -> str:
    return as_text(run.settings["value_clip"])


@measure("final_rmse", "value RMSE against its targets at the last step that logged it")
def final_rmse(run) -> float:
    return logged(run, "value_rmse")


@measure("mean_rmse", "mean value RMSE against its targets over training")
def mean_rmse(run) -> float:
    return logged(run, "value_rmse", "mean")


@measure("final_explained_variance", "explained variance of the value head at the last step that logged it")
def final_explained_variance(run) -> float:
    return logged(run, "explained_variance")


@measure("ev_by_20", f"mean explained variance of the value head over the 5 steps ending at step {CRITIC_BY}")
def ev_by_20(run) -> float:
    return critic_ev(run.metrics)


@measure("ev_min", "lowest explained variance of the value head at a step")
def ev_min(run) -> float:
    return logged(run, "explained_variance", "min")


@measure("value_delta_max", "largest mean |v − v_old| after one update (a batch's first epoch)")
def value_delta_max(run) -> float:
    return logged(run, "value_delta", "max")


@measure("clip_share_max", "largest share of value predictions the value clip cut on a step", bounds=SHARE)
def clip_share_max(run) -> float:
    return logged(run, "value_clip_frac", "max")


RUN_TABLES = {
    "stability_clipping_runs": {
        "experiment": "clipping",
        "keys": ["variant", "optimizer", "seed", "warmup"],
        "measures": [
            "max_norm",
            "spike",
            "collapsed",
            "initial_eval",
            "final_eval",
            "gain",
            "drop_after_spike",
            "spike_ratio",
            "spike_norm",
            "clip_bound",
        ],
    },
    "stability_value_clip_runs": {
        "experiment": "value_clip",
        "keys": ["value_coef", "seed", "warmup", "setting"],
        "measures": [
            "value_clip",
            "final_rmse",
            "mean_rmse",
            "final_explained_variance",
            "ev_by_20",
            "ev_min",
            "value_delta_max",
            "clip_share_max",
            "final_eval",
        ],
    },
}
