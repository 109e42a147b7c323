"""The math RL training system (math-rl-training-system.md): its two configurations, measured.

The document describes a REINFORCE trainer with a moving-average baseline for 3-digit
addition (AdderRLConfig) and 2-digit multiplication (MultiplierRLConfig) and expects
90-95% and 80-90% accuracy after 200 steps. The `system` experiment runs both tasks with
REINFORCE (and, in config/full.yaml, PPO and GRPO) from the warm-up's band and from further
starts (`init: start_PCT`, the warm-up continued to that validation accuracy); beside each
start the supervised control, the warm-up's cross-entropy continued from the same checkpoint
for an RL run's samples (results/sft/TASK/starts/starts.json). The document does not say how
far its warm-up goes, so its accuracy is judged at the start a rule picks on the validation
split (`pick_start`): the most-trained start still below the document's range.
"""

from __future__ import annotations

import functools
import itertools
import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.transforms import blended_transform_factory

import mathrl.analysis.kit as kit
from mathrl.analysis.figure_style import BAND_NOTE, COLORS, SHARE, bands, interval_bars, interval_points, placeholder
from mathrl.analysis.measures import training_system
from mathrl.analysis.measures.series import known
from mathrl.analysis.results import mean_spread
from mathrl.analysis.verdict import t_halfwidth
from mathrl.pipeline import layout

NAME = "system"
TITLE = "The math RL training system: configurations and results"
DOCUMENT = "math-rl-training-system.md"

ALGORITHMS = ("reinforce", "reinforce_no_baseline", "ppo", "grpo")
# The document's configurations ("performance benchmarks", "configuration parameters"): config/documents.yaml
FACTS = kit.document_facts("system")
DOC, DOC_RL = FACTS["tasks"], FACTS["rl"]
# The settings the configurations table sets beside the document's: key -> (its label, where our value is read in the
# warm-up's summary; None: a setting of the task's first REINFORCE run)
SETTINGS = {
    "n_layer": ("layers", "model.n_layer"),
    "n_head": ("attention heads", "model.n_head"),
    "n_embd": ("embedding dim", "model.n_embd"),
    "n_params": ("parameters", "n_params"),
    "sft_steps": ("warm-up steps", "steps"),
    "sft_accuracy": ("warm-up held-out accuracy", "eval_accuracy"),
    "steps": ("RL steps", None),
    "lr": ("learning rate", None),
    "batch_size": ("sequences per step", None),
    "micro_batch_size": ("sequences per micro-batch", None),
    "group_size": ("rollouts per prompt", None),
    "grad_clip": ("gradient clip (max norm)", None),
    "weight_decay": ("weight decay", None),
    "adam_beta1": ("Adam beta1", None),
    "adam_beta2": ("Adam beta2", None),
    "temperature": ("sampling temperature", None),
    "baseline_decay": ("REINFORCE baseline decay", None),
}


def expected(task: str) -> tuple[float, float]:
    """The document's expected accuracy range of a task after its RL steps (NaN for a task it does not name)."""
    return tuple(DOC.get(task, {}).get("expected", (math.nan, math.nan)))


# ----------------------------------------------------------------------------- tables
def configs_table(ctx, runs) -> pd.DataFrame:
    """Per task: our model (from the warm-up summary) and RL settings (its first REINFORCE run's, with the sequences
    of a backward pass on a rank) beside the document's, one row per setting of `SETTINGS`."""
    rows = []
    for task, doc in DOC.items():
        sft = ctx.sft(task) or {}
        spec = next((r for r in runs if r.settings["task"] == task and r.settings["algorithm"] == "reinforce"), None)
        rl = {**spec.settings, "micro_batch_size": training_system.micro_batch_sequences(spec)} if spec else {}
        theirs, preset = {**doc, **DOC_RL}, sft.get("settings", {}).get("preset", "missing")
        for key, (label, path) in SETTINGS.items():
            ours = functools.reduce(lambda d, k: (d or {}).get(k), path.split("."), sft) if path else rl.get(key)
            values = (math.nan if ours is None else float(ours), float(theirs.get(key, math.nan)))
            rows.append((task, doc["config"], preset, key, label, *values))
    return pd.DataFrame(rows, columns=["task", "config", "preset", "key", "setting", "ours", "document"])


def reached(final_mean: float, low: float) -> bool | None:
    """Did the mean final accuracy reach the lower end of the document's expected range?"""
    return None if final_mean is None or math.isnan(final_mean) else bool(final_mean >= low)


def results_table(runs, per_run: pd.DataFrame) -> pd.DataFrame:
    by = ["task", "start", "algorithm"]
    out = mean_spread(per_run, by, training_system.STATS)  # n counts runs with a final evaluation
    out = kit.add_intervals(out, ["final_eval", "gain"], bounds={"final_eval": SHARE})
    out.insert(3, "n_runs", per_run.groupby(by, sort=False).size().values)
    out = kit.add_outcomes(out, per_run, by)
    out["rl_steps"] = out["task"].map({r.settings["task"]: r.settings["steps"] for r in reversed(runs)})
    out["expected_low"] = [expected(t)[0] for t in out["task"]]
    out["expected_high"] = [expected(t)[1] for t in out["task"]]
    out["reached"] = [reached(m, lo) for m, lo in zip(out["final_eval_mean"], out["expected_low"])]
    return out


def curves_table(runs, cfg: dict) -> pd.DataFrame:
    """Held-out accuracy per task, start, algorithm and evaluation step (step 0: before RL)."""
    frames = [
        r.evals.assign(
            task=r.settings["task"], start=training_system.start_of(cfg, r.settings), algorithm=r.settings["algorithm"]
        )
        for r in runs
        if r.ok
    ]
    return kit.over_seeds(frames, ["task", "start", "algorithm"], ["eval_accuracy"])


def console_table(ctx, runs) -> pd.DataFrame:
    """Per task and algorithm, the last console line of its first run with a result (`training_system.console_of`)."""
    rows = []
    first = {(r.settings["task"], r.settings["algorithm"]): r for r in reversed(runs) if r.ok}  # each pair's first run
    for task, algorithm in (k for k in itertools.product(DOC, ALGORITHMS) if k in first):
        run = first[task, algorithm]
        line, source = training_system.console_of(run, ctx.run_text(run, layout.STAGES["train"].log))
        rows.append(dict(task=task, algorithm=algorithm, run_id=run.spec.run_id, source=source, line=line))
    return pd.DataFrame(rows, columns=["task", "algorithm", "run_id", "source", "line"])


def tables(ctx) -> dict[str, pd.DataFrame]:
    runs = ctx.experiment("system")
    per_run = ctx.run_table("system_runs")
    per_run.insert(1, "start", [training_system.start_of(ctx.cfg, ctx.runs[i].settings) for i in per_run["run_id"]])
    starts = {task: training_system.warmup_starts(ctx.cfg, task, ctx.sft_starts(task)) for task in DOC}
    start_runs = training_system.start_runs(per_run, starts, {task: expected(task)[0] for task in DOC})
    return {
        "system_configs": configs_table(ctx, runs),
        "system_results": results_table(runs, per_run),
        "system_curves": curves_table(runs, ctx.cfg),
        "system_console": console_table(ctx, runs),
        "system_start_runs": start_runs,
        "system_starts": training_system.start_summary(starts, start_runs, {task: expected(task) for task in DOC}),
    }


# ----------------------------------------------------------------------------- figures
RANGE_BAR = {"color": "0.45", "lw": 6, "solid_capstyle": "butt"}  # the document's expected range
CONTROL_MARK = {"fmt": "D", "ms": 6, "markeredgecolor": "black", "capsize": 3, "zorder": 4}  # a supervised control


def target(ax, lo: float, hi: float, last_step: float) -> None:
    """The document's expected range, at the document's step: a bar there when the runs reach it,
    else a bar at the right edge of the axes, labelled with the step it belongs to."""
    step = DOC_RL["steps"]
    label = f"document: {lo:.0%}–{hi:.0%} at step {step}"
    if known(last_step) and last_step >= step:
        ax.plot([step, step], [lo, hi], label=label, **RANGE_BAR)
        return
    edge = blended_transform_factory(ax.transAxes, ax.transData)  # x in axes fractions, y in accuracy
    beyond = f"{label} (beyond these {last_step:g} steps)" if known(last_step) else label
    ax.plot([0.985, 0.985], [lo, hi], transform=edge, clip_on=False, label=beyond, **RANGE_BAR)
    ax.text(0.97, hi, f"step {step}", transform=edge, ha="right", va="bottom", fontsize=7, color="0.3")


def controls(ax, starts: pd.DataFrame, task: str, curves: pd.DataFrame, colors: dict[str, tuple]) -> None:
    """The supervised control from each start of `task`: its final held-out accuracy with its 95% t interval, a
    diamond at the last RL step of the runs from that start (the control trains for as many samples as they draw),
    in the colour of the first RL line from the start; nothing where the start has no control."""
    d = starts[starts["task"] == task] if len(starts) and "sup_final" in starts else pd.DataFrame()
    for r in d.itertuples():
        steps = curves.loc[curves["start"] == r.start, "step"] if len(curves) else pd.Series(dtype=float)
        if not known(r.sup_final) or steps.empty:
            continue
        lo, hi = (r.sup_lo, r.sup_hi) if known(r.sup_lo, r.sup_hi) else (r.sup_final, r.sup_final)
        label, color = f"supervised control from {r.start} (as many samples)", colors.get(r.start, "0.2")
        interval_points(ax, [float(steps.max())], [r.sup_final], [lo], [hi], color=color, label=label, **CONTROL_MARK)


def fig_curves(t) -> plt.Figure:
    c, res = t["system_curves"], t["system_results"]
    fig, axes = plt.subplots(1, len(DOC), figsize=(10, 3.8), sharey=True, layout="constrained")
    for ax, task in zip(axes, DOC):
        d = c[c["task"] == task] if len(c) else c
        keys = [(st, a) for st in (dict.fromkeys(d["start"]) if len(d) else []) for a in ALGORITHMS]
        groups = [(f"{a} from {st}", d[(d["algorithm"] == a) & (d["start"] == st)]) for st, a in keys]
        # a line keeps its colour where another is missing
        colors = [COLORS[i % len(COLORS)] for i in range(len(groups))]
        labels = dict(title=f"{task} ({DOC[task]['config']})", ylabel="held-out accuracy", ylim=(0, 1))
        bands(ax, groups, "eval_accuracy", f"no data: the {task} runs are missing", colors=colors, **labels)
        drawn = [(st, color) for (st, _), (_, g), color in zip(keys, groups, colors) if len(g)]
        first = {st: color for st, color in reversed(drawn)}  # each start's colour: that of its first line drawn
        controls(ax, t["system_starts"], task, d, first)
        lo, hi = kit.cell(res, "expected_low", task=task), kit.cell(res, "expected_high", task=task)
        if not math.isnan(lo):
            target(ax, lo, hi, d["step"].max() if len(d) else math.nan)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="lower right")  # the document's range among the lines
    fig.suptitle(f"Held-out accuracy during RL ({BAND_NOTE})")
    return fig


def fig_throughput(t) -> plt.Figure:
    res = t["system_results"]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    if res.empty or res["seq_per_s_mean"].isna().all():
        placeholder(ax, "no data: the system runs are missing")
    else:
        width = 0.8 / len(ALGORITHMS)
        for i, algorithm in enumerate(ALGORITHMS):
            vals, stds, ns = (
                np.array([kit.cell(res, col, task=k, algorithm=algorithm) for k in DOC])
                for col in ("seq_per_s_mean", "seq_per_s_std", "n")
            )
            half = t_halfwidth(stds, ns)  # one seed or a missing cell: no interval; a missing bar says so
            x = [j + (i - 1) * width for j in range(len(DOC))]
            style = dict(width=width, color=COLORS[i], label=algorithm, note={"rotation": 90})
            interval_bars(ax, x, vals, vals - half, vals + half, (0, None), **style)
        ax.set_xticks(range(len(DOC)), list(DOC))
        ax.legend()
    ax.set(
        title="Training throughput (mean and 95% t interval across seeds)", xlabel="task", ylabel="sequences per second"
    )
    return fig


def figures(t) -> dict[str, plt.Figure]:
    return {"system_curves": fig_curves(t), "system_throughput": fig_throughput(t)}


# ----------------------------------------------------------------------------- section
def task_view(res: pd.DataFrame, cfgs: pd.DataFrame, starts: pd.DataFrame, task: str, rows: dict) -> dict:
    """What the template's sentences on one task read: the start picked on the validation split, each
    algorithm's results from it, every start against its supervised control, our settings, the verdicts."""
    d = starts[starts["task"] == task] if len(starts) else starts
    picked = kit.row_of(d, picked=True).get("start")
    lo = expected(task)[0]
    ids = [f"{task}_accuracy", f"{task}_gain", f"{task}_stable"] + sorted(
        k for k in rows if k.startswith(f"{task}_start") and k.endswith("_rl_vs_supervised")
    )
    return {
        "task": task,
        "expected": expected(task),
        "picked": picked,
        "results": {
            a: kit.row_of(res, task=task, algorithm=a, **({"start": picked} if picked else {})) for a in ALGORITHMS
        },
        "others": [a for a in ALGORITHMS[1:] if kit.row_of(res, task=task, algorithm=a)],  # those the config runs
        "starts": kit.records(d),
        "reaching": d[d["rl_lo"] >= lo]["start"].tolist() if len(d) and "rl_lo" in d else [],
        "configs": kit.records(cfgs[cfgs["task"] == task] if len(cfgs) else cfgs),
        "rows": [rows[k] for k in ids if k in rows],
    }


def configs_wide(cfgs: pd.DataFrame) -> pd.DataFrame:
    """system_configs with one row per setting: each task's value, ours beside the document's."""
    if cfgs.empty:
        return cfgs
    wide = cfgs.pivot_table(
        index="key", columns="task", values=["ours", "document"], aggfunc="first", dropna=False, sort=False
    )
    wide.columns = [f"{task}_{side}" for side, task in wide.columns]
    wide = wide.reindex(list(dict.fromkeys(cfgs["key"]))).reset_index()
    wide.insert(0, "setting", wide["key"].map(dict(zip(cfgs["key"], cfgs["setting"]))))
    return wide


def section(t) -> dict:
    res, cfgs = t["system_results"], t["system_configs"]
    ctx = kit.section_context(t, NAME)
    decay = kit.cell(cfgs, "ours", task="add", key="baseline_decay")
    presets = cfgs.drop_duplicates("task")[["task", "config", "preset"]].to_dict("records") if len(cfgs) else []
    return {
        **ctx,
        "configs": configs_wide(cfgs),
        "presets": presets,
        "baseline_decay": "–" if math.isnan(decay) else f"{decay:g}",
        "tasks": [task_view(res, cfgs, t["system_starts"], task, ctx["verdicts"]) for task in DOC],
        "doc_steps": DOC_RL["steps"],
        "beside": [a for a in ALGORITHMS[1:] if kit.row_of(res, algorithm=a)],  # run beside REINFORCE
        "doc_console": FACTS["console"],
    }
