"""Batch size, fixed against dynamic hyperparameters, clipping: rl-stability-batch-and-hyperparameters.md.

The document's argument: policy-gradient noise falls as 1/N, so a large batch alone makes
training smooth enough that fixed hyperparameters beat schedules and controllers; gradient
clipping and value-loss clipping are cheap insurance. Each table below puts our measurement
beside the document's own numbers (columns `doc_*`), which come from a 1.5B model on AIME
and are compared by direction and ranking, never by absolute value.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

import mathrl.analysis.kit as kit
from mathrl.analysis.figure_style import COLORS, band_panels, bands, interval_bars, placeholder, plt
from mathrl.analysis.kit import NAN
from mathrl.analysis.measures import hyperparameters as hp
from mathrl.analysis.measures import monitor_alerts as ma
from mathrl.analysis.measures.clipping import max_norm, spike, value_clip
from mathrl.analysis.measures.gradient_noise import gradvar_tables
from mathrl.analysis.measures.symptoms import diagnosis_table
from mathrl.analysis.measures.tables import run_table
from mathrl.pipeline.config import expand_runs

NAME = "stability"
TITLE = "Batch size and hyperparameters against training stability"
DOCUMENT = "rl-stability-batch-and-hyperparameters.md"

# the document's numbers (sections 2.2, 3.3, 4.1, 5.2, 5.3, 8): config/documents.yaml
DOC = kit.document_facts("stability")

FVD = "fixed_vs_dynamic"
FVD_ROLES = ("A", "B", "C")  # the document's methods: A fixed at the large batch, B step-decayed LR, C adaptive KL
SERIES = {
    "batch": ["eval_accuracy", "entropy"],
    "fixed_vs_dynamic": ["eval_accuracy", "lr", "kl_coef"],
    "clipping": ["eval_accuracy"],
    "value_clip": ["value_rmse", "eval_accuracy"],
}


def series(runs: list, metrics: list[str]) -> pd.DataFrame:
    """Mean, std and n across seeds of each metric at each step, per setting (eval from step 0)."""
    frames, order = [], {}
    for run in runs:
        name = kit.setting(run.spec)
        order.setdefault(name, len(order))  # the settings in the order of their runs
        if run.ok:
            frames += [f.assign(order=order[name], setting=name) for f in kit.metric_frames(run, metrics)]
    return kit.metric_curves(frames, ["order", "setting"])


# The document's numbers beside a table's rows: per set of DOC's facts, the columns they fill and the row's columns
# that key them (its batch size, with the curve's point; its method's role); a row the document has no numbers for
# reads NaN. The curve's facts are a list per batch size, one entry per point.
DOC_COLUMNS = {
    "curve": (["doc_accuracy", "doc_entropy", "doc_reward"], ["batch_size", "point"]),
    "case": (["doc_final_reward", "doc_reward_std", "doc_collapses", "doc_time"], ["batch_size"]),
    "methods": (["doc_final_accuracy", "doc_stability", "doc_reproducibility", "doc_rank"], ["role"]),
}
DOC_FACTS = {**DOC, "curve": {(b, p): f for b, points in DOC["curve"].items() for p, f in enumerate(points, 1)}}


def document_columns(df: pd.DataFrame, facts: str) -> None:
    """The columns of `facts` (DOC_COLUMNS) in `df`: the document's numbers for each row."""
    names, keys = DOC_COLUMNS[facts]
    found = [DOC_FACTS[facts].get(key[0] if len(key) == 1 else key) for key in zip(*(df[k] for k in keys))]
    for j, name in enumerate(names):
        df[name] = [NAN if f is None else f[j] for f in found]


# ---- tables ------------------------------------------------------------------------------
def batch_tables(ctx) -> dict[str, pd.DataFrame]:
    runs = ctx.experiment("batch")
    if not runs:
        return {}
    rows = ctx.run_table("stability_batch_runs")
    values = "final_eval peak_eval roughness drawdown largest_drop share_above_10 share_below_3 collapsed".split()
    batch = kit.collapse_columns(kit.summarise(rows, ["batch_size", "lr"], values), rows, "batch_size")
    batch["doc_curve"] = batch["batch_size"].map(DOC["batch"])
    pts = pd.DataFrame([{"batch_size": r.settings["batch_size"], **p} for r in runs for p in hp.curve_points(r)])
    curve = kit.summarise(pts, ["batch_size", "point", "step"], ["eval_accuracy", "entropy", "reward"])
    curve.insert(3, "eval_step", pts.groupby(["batch_size", "point", "step"], sort=False)["eval_step"].max().values)
    document_columns(curve, "curve")
    ends = rows[rows["batch_size"].isin([rows["batch_size"].min(), rows["batch_size"].max()])]
    case = kit.summarise(ends, ["batch_size"], ["final_reward", "final_eval", "wall_seconds", "alerts"])
    case["collapses"] = kit.group_sums(ends, "batch_size", "collapsed")
    document_columns(case, "case")
    return {"stability_batch_curve": curve, "stability_batch": batch, "stability_case_study": case}


def fixed_vs_dynamic_table(ctx) -> pd.DataFrame:
    """Per method (its role in the config: A, B, C, or the equal-batch control) across seeds."""
    if not ctx.experiment(FVD):
        return pd.DataFrame()
    rows = ctx.run_table("stability_fvd_runs")
    values = "final_eval roughness drawdown largest_drop lr_last kl_coef_last lr_ratio kl_coef_range".split()
    out = kit.summarise(rows, ["role", "variant"], values)
    # the document's "reproducibility": spread of the final result across seeds
    out["reproducibility_std"] = out["final_eval_std"]
    out["rank"] = out["final_eval_mean"].rank(ascending=False)
    document_columns(out, "methods")
    return out


# the remedies experiment's runs (a run table read here alone): each variant's settings, and the registered measures
# its table gives across seeds
REMEDY_SETTINGS = ["variant", "batch_size", "kl_coef", "lr"]
REMEDIES = {
    "experiment": "remedies",
    "keys": [*REMEDY_SETTINGS, "seed", "warmup"],
    "measures": ["drawdown", "kl_end", "accuracy_gain", "gain", "final_eval"],
}


def remedies_table(ctx) -> pd.DataFrame:
    """Per variant of the remedies experiment (KL grid, and the LR and batch remedies at batch 64): its batch,
    KL coefficient and LR, and across seeds the drawdown, the KL to the reference at the end, the sampled
    training-accuracy gain, the held-out accuracy's gain over RL and the final held-out accuracy."""
    if not ctx.experiment(REMEDIES["experiment"]):
        return pd.DataFrame()
    rows = run_table(REMEDIES, ctx.runs, ctx.cfg)
    return kit.summarise(rows, REMEDY_SETTINGS, REMEDIES["measures"])


SPIKE_FACTOR = 10.0  # the spike "was injected" when the gradient norm at its step is this many times the run's median


def clipping_table(ctx) -> pd.DataFrame:
    """Per cell (optimizer and LR x max norm x spike): collapse rate with its 95% Wilson interval, and across seeds the
    largest fall below the start after the spike, the final accuracy and the spike's measured size."""
    if not (runs := ctx.experiment("clipping")):
        return pd.DataFrame()
    rows = ctx.run_table("stability_clipping_runs")
    # every run's cell from its settings (the run table's labels are NaN without a result): expected there all the same
    rows["max_norm"], rows["spike"] = [max_norm(r) for r in runs], [spike(r) for r in runs]
    rows["lr"] = [r.settings["lr"] for r in runs]  # the spike check's runs train at another LR than the grid's
    cells = zip(rows["optimizer"], rows["lr"], rows["max_norm"], rows["spike"])
    rows["cell"] = [f"{o} at LR {lr:g}, clip {m}, {'spike' if s == 'yes' else 'no spike'}" for o, lr, m, s in cells]
    values = ["collapsed", "drop_after_spike", "final_eval", "spike_ratio"]
    out = kit.summarise(rows, ["cell", "optimizer", "lr", "max_norm", "spike"], values)
    out = kit.collapse_columns(out, rows, "cell", before="n")
    out = kit.add_wilson(out, "collapses")  # the rate, collapses/n (the mean of `collapsed`), with its interval
    out["doc_collapse_rate"] = out["max_norm"].map(lambda m: DOC["clipping"].get(m, (NAN, ""))[0])
    return out


def value_clip_table(ctx) -> pd.DataFrame:
    """Per cell (value clip x value weight), across seeds: the critic's error (value RMSE against its targets), how
    much of the returns it explains, how far one update moved its values and the share of value predictions the clip
    cut on its busiest step."""
    if not (runs := ctx.experiment("value_clip")):
        return pd.DataFrame()
    rows = ctx.run_table("stability_value_clip_runs")
    rows["value_clip"] = [value_clip(r) for r in runs]  # from its settings: a run without a result has a cell too
    values = [c for c in rows.columns if c not in ("value_clip", "value_coef", "seed", "warmup", "setting")]
    out = kit.summarise(rows, ["value_clip", "value_coef"], values)
    doc_rmse = {(clip, coef): rmse for clip, coef, rmse in DOC["value_rmse"]}
    out["doc_rmse"] = [doc_rmse.get(cell, NAN) for cell in zip(out["value_clip"], out["value_coef"])]
    return out


def tables(ctx) -> dict[str, pd.DataFrame]:
    probes = {task: ctx.gradvar(task) for task in ctx.cfg["gradvar"]["tasks"]}
    out = {**batch_tables(ctx), **gradvar_tables(probes, ctx.cfg["gradvar"], DOC["variance"])}
    out["stability_fixed_vs_dynamic"] = fixed_vs_dynamic_table(ctx)
    out["stability_equal_samples"] = hp.equal_samples_table(ctx.experiment("batch"))
    out["stability_remedies"] = remedies_table(ctx)
    out["stability_equal_samples_pairs"] = hp.equal_samples_pairs(out["stability_equal_samples"])
    out["stability_clipping"] = clipping_table(ctx)
    out["stability_value_clip"] = value_clip_table(ctx)
    out["stability_alerts"] = ma.alerts_raised({e: ctx.experiment(e) for e in ctx.cfg["experiments"]})
    # the monitor scores each trained run once: a run two experiments read (same_as) is one unit, not two
    events, counts = ma.alert_events([r for r in ctx.runs.values() if r.ok and r.spec.same_as is None])
    out["stability_alert_scores"] = ma.alert_scores(events, counts)
    out["stability_alert_events"], out["stability_alert_runs"] = events, ma.alert_runs(events)
    out["stability_troubleshooting"] = diagnosis_table(DOC["symptoms"], ctx.runs)
    out["stability_series"] = pd.concat(
        [series(ctx.experiment(e), ms).assign(experiment=e) for e, ms in SERIES.items()], ignore_index=True
    )
    return out


# ---- figures (from the tables alone) ------------------------------------------------------
def _curves(t, experiment: str, metric: str, ylabel: str, title: str) -> dict:
    """The `bands` panel of one metric: a band per setting of an experiment (its `stability_series` rows)."""
    s = t["stability_series"]
    s = s[(s["experiment"] == experiment) & (s["metric"] == metric)].sort_values(["order", "step"]) if len(s) else s
    groups = [(g["setting"].iloc[0], g) for _, g in s.groupby("order", sort=True)] if not s.empty else []
    return dict(groups=groups, metric=metric, empty="no run with a result", value="", ylabel=ylabel, title=title)


def _gradvar_figure(t):
    fig, ax = plt.subplots()
    gv, notes = t["stability_gradvar"], []
    gv = gv.dropna(subset=["variance"]) if not gv.empty else gv
    if gv.empty:
        placeholder(ax, "gradient-variance probe missing")
    for k, (task, g) in enumerate(gv.groupby("task", sort=False) if not gv.empty else []):
        x = np.arange(len(g)) + 0.4 * k
        ax.bar(x, g["variance"], width=0.38, color=COLORS[k], label=f"{task}: measured")
        first = g["batch_size"].iloc[0]
        ax.plot(x, g["variance"].iloc[0] * first / g["batch_size"], "k--o", label=f"{task}: 1/N from batch {first}")
        ax.set_xticks(np.arange(len(g)), labels=[str(b) for b in g["batch_size"]])
        notes.append(
            f"{task}: {g['ratio_to_largest'].iloc[0]:.1f}x lower at {g['batch_size'].iloc[-1]} (1/N: "
            f"{g['theory_ratio'].iloc[0]:.0f}x)"
        )
    if notes:
        ax.set_yscale("log")
        # bars need a floor well below the smallest on a log axis
        ax.set_ylim(gv["variance"].min() / 5, gv["variance"].max() * 5)
        ax.legend()
        notes.append(f"document: {DOC['variance'][64] / DOC['variance'][512]:.1f}x from 64 to 512")
    title = "Policy-gradient variance against batch size\n" + "; ".join(notes)
    ax.set(xlabel="batch size (rollouts)", ylabel="mean per-element gradient variance", title=title)
    return fig


def _batch_figure(t):
    title = "Eval accuracy by batch size (mean, 95% interval over seeds)"
    accuracy = _curves(t, "batch", "eval_accuracy", "held-out accuracy", title)
    entropy = _curves(t, "batch", "entropy", "mean token entropy", "Policy entropy by batch size")
    return band_panels([accuracy, entropy], 1, 2, (11, 4))


def _fixed_vs_dynamic_figure(t):
    ylabels = {"eval_accuracy": "held-out accuracy", "lr": "learning rate", "kl_coef": "KL coefficient"}
    panels = [_curves(t, FVD, metric, ylabel, ylabel[0].upper() + ylabel[1:]) for metric, ylabel in ylabels.items()]
    suptitle = "A: fixed at the large batch; B: step-decayed LR; C: adaptive KL (mean, 95% interval over seeds)"
    fig = band_panels(panels, 1, 3, (14, 4), suptitle, layout="constrained")
    fig.axes[1].ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    return fig


def _equal_samples_figure(t):
    fig, ax = plt.subplots()
    es = t["stability_equal_samples"]
    groups = [
        (f"batch {b}", g.groupby("samples")["eval_accuracy"].agg(mean="mean", std="std", n="count").reset_index())
        for b, g in (es.groupby("batch_size") if not es.empty else [])
    ]
    title = "Accuracy against rollouts sampled, per batch size (95% interval over seeds)"
    labels = dict(xlabel="rollouts sampled (log scale)", ylabel="held-out accuracy", title=title)
    bands(ax, groups, "eval_accuracy", "no batch-study runs with a result", "", x="samples", **labels)
    if not es.empty:
        ax.set_xscale("log")
    return fig


def _clipping_figure(t):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    c = t["stability_clipping"]
    if c.empty:
        placeholder(axes[0], "no clipping runs")
    else:
        x, colors = np.arange(len(c)), [COLORS[0] if o == "sgd" else COLORS[1] for o in c["optimizer"]]
        interval_bars(
            axes[0], x, c["collapse_rate"], c["collapse_rate_lo"], c["collapse_rate_hi"], width=0.6, color=colors
        )
        axes[0].set_xticks(x, labels=c["cell"].str.replace(", ", "\n"), fontsize=7)
        axes[0].set_ylim(0, 1.05)
    axes[0].set(
        xlabel="optimizer, max gradient norm, injected spike",
        ylabel="share of runs collapsed",
        title="Collapse rate per cell (95% Wilson interval)",
    )
    bands(axes[1], **_curves(t, "clipping", "eval_accuracy", "held-out accuracy", "Eval accuracy per cell"))
    return fig


def _value_clip_figure(t):
    fig, ax = plt.subplots()
    title = "PPO value error by value clipping and weight"
    bands(ax, **_curves(t, "value_clip", "value_rmse", "value RMSE (against returns)", title))
    vr = t["stability_value_clip_runs"]
    vr = vr.dropna(subset=["value_clip"]) if "setting" in vr else vr  # (a run without a result has no clip here)
    clipped = set(vr.loc[vr["value_clip"].astype(str) != "none", "setting"]) if "setting" in vr else set()
    for line in ax.get_lines():  # clipped dashed, so settings whose curves coincide stay visible
        line.set_linestyle("--" if line.get_label() in clipped else "-")
    if ax.get_legend():
        ax.legend()
    return fig


def figures(t) -> dict:
    return {
        "stability_batch_curves": _batch_figure(t),
        "stability_fixed_vs_dynamic": _fixed_vs_dynamic_figure(t),
        "stability_equal_samples": _equal_samples_figure(t),
        "stability_gradvar": _gradvar_figure(t),
        "stability_clipping": _clipping_figure(t),
        "stability_value_clip": _value_clip_figure(t),
    }


# ---- section (the numbers its template's sentences read, from the tables alone) -----------
# The clipping verdicts in the order the section's text reads them (claims.yaml lists the adamw check second).
CLIPPING_ORDER = ["clipping_spike_collapses", "clipping_sgd", "clipping_sgd_2.0", "clipping_sgd_0.5"]
CLIPPING_ORDER += ["clipping_dose_order", "clipping_adamw"]
KL_GRID = ("kl_none", "kl_low", "kl_default", "kl_high")  # the remedies experiment's KL roles, in the grid's order


def design(cfg: dict) -> dict:
    """The settings the section's prose names, read from the config rather than written into the template: as the
    config resolves them for each experiment's first run (the train block's where the experiment has none)."""
    keys = ("batch_size", "steps", "eval_every", "eval_size")
    b, kl = kit.role_settings(cfg, FVD, "B"), kit.role_settings(cfg, "remedies", "kl_default")
    # batch 64's own LR: the batch study's (the square-root rule's) at the KL grid's batch
    batch = (s.settings for s in expand_runs(cfg).values() if s.experiment == "batch")
    own = next((s.as_dict() for s in batch if kl and s.batch_size == kl["batch_size"]), None)
    return {
        **{
            e: {k: (kit.role_settings(cfg, e) or cfg.get("train", {})).get(k) for k in keys}
            for e in ("batch", "remedies")
        },
        "gradvar_batches": (cfg.get("gradvar") or {}).get("num_samples"),
        # B's step schedule (what its LR did, the section reads from the runs: LR last / first)
        "decay": b and {"rate": b["lr_decay_rate"], "every": b["lr_decay_every"]},
        # the KL grid's LR against its batch's own
        "kl_lr_ratio": kl["lr"] / own["lr"] if kl and own else None,
        "kl_grid": [f"{g['kl_coef']:g}" for r in KL_GRID if (g := kit.role_settings(cfg, "remedies", r))],
    }


def section(t) -> dict:
    ctx = kit.section_context(t, NAME)
    order = {k: i for i, k in enumerate(CLIPPING_ORDER)}  # the others after these, in claims.csv's order
    ctx["parts"].get("clipping", {"rows": []})["rows"].sort(key=lambda r: order.get(r["key"], len(order)))
    al, b, fvd = t["stability_alerts"], t["stability_batch"], t["stability_fixed_vs_dynamic"]
    # the PPO cells by value clip and weight, as `{clip}@{weight}`; None where a cell has no row
    v = t["stability_value_clip"]
    value = {
        f"{c}@{w:g}": kit.row_of(v, value_clip=c, value_coef=w) or None for c in ("none", "0.2") for w in (0.5, 1.0)
    }
    ends = [b["batch_size"].min(), b["batch_size"].max()] if not b.empty else []
    return {
        **ctx,
        "alerts_fired": al[al["alerts"] > 0] if not al.empty else al,
        "design": design(t.cfg),
        "spike_factor": SPIKE_FACTOR,
        "big": hp.BIG_SWING,
        "small": hp.SMALL_SWING,
        "drop": ma.DROP,
        "horizon": ma.HORIZON,
        "doc_variance": DOC["variance"],
        "batch_ends": [kit.row_of(b, batch_size=k) for k in ends],
        "fvd": [row for m in FVD_ROLES if (row := kit.row_of(fvd, role=m))],
        "b_lr_ratio": kit.cell(fvd, "lr_ratio_mean", role="B"),
        "value_clip": value,
    }
