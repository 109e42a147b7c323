"""The math RL training system (math-rl-training-system.md): its two configurations, measured.

The document describes a REINFORCE trainer with a moving-average baseline for 3-digit
addition (AdderRLConfig) and 2-digit multiplication (MultiplierRLConfig) and expects
90-95% and 80-90% accuracy after 200 steps. The `system` experiment runs both tasks with
REINFORCE and, beside it, PPO and GRPO; the warm-up summaries give the models.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.transforms import blended_transform_factory

from mathrl import layout
from mathrl.console import console_line
from mathrl.results import collapsed, degraded, mean_spread
from mathrl.studies.kit import pm as interval
from mathrl.studies.kit import BAND_NOTE, COLORS, SHARE, add_intervals, add_wilson, band, bounds, by_key, cell, claim_frame, known, placeholder, power_note, t_halfwidth, verdict_rows

NAME = "system"
TITLE = "The math RL training system: configurations and results"
DOCUMENT = "math-rl-training-system.md"

ALGORITHMS = ("reinforce", "ppo", "grpo")
# The document's configurations, stated as its claims (its "performance benchmarks" and
# "configuration parameters" sections); NaN where the document gives no value.
DOC = {
    "add": {"config": "AdderRLConfig", "n_layer": 4, "n_head": 8, "n_embd": 256, "expected": (0.90, 0.95)},
    "mul": {"config": "MultiplierRLConfig", "n_layer": 6, "n_head": 8, "n_embd": 256, "expected": (0.80, 0.90)},
}
# rl_batch_size 64 with rl_ga_steps 2: 128 sequences per optimizer step, in micro-batches of 64.
DOC_RL = {"steps": 200, "lr": 1e-4, "batch_size": 128, "micro_batch_size": 64, "group_size": 8, "grad_clip": 1.0, "weight_decay": 0.01,
          "adam_beta1": 0.9, "adam_beta2": 0.99, "temperature": 1.0, "baseline_decay": 0.9}  # fmt: skip
# What each algorithm run beside the document's REINFORCE is, for the section's text.
BESIDE = {"ppo": "PPO (a value head on the shared trunk, GAE advantages, clipped ratio)",
          "grpo": "GRPO (advantages normalised within each group of rollouts of one prompt)"}
SETTING_NAMES = {
    "n_layer": "layers", "n_head": "attention heads", "n_embd": "embedding dim", "n_params": "parameters",
    "sft_steps": "warm-up steps", "sft_accuracy": "warm-up held-out accuracy", "steps": "RL steps", "lr": "learning rate",
    "batch_size": "sequences per step", "micro_batch_size": "sequences per micro-batch", "group_size": "rollouts per prompt", "grad_clip": "gradient clip (max norm)",
    "weight_decay": "weight decay", "adam_beta1": "Adam beta1", "adam_beta2": "Adam beta2", "temperature": "sampling temperature",
    "baseline_decay": "REINFORCE baseline decay",
}  # fmt: skip


# ----------------------------------------------------------------------------- tables
def per_micro_batch(settings: dict, world_size: int = 1) -> float:
    """Sequences per backward pass on a rank: micro_batch_size, or with 0 (no accumulation) the rank's whole batch."""
    return float(settings["micro_batch_size"] or settings["batch_size"] // max(1, world_size))


def configs_table(ctx, runs) -> pd.DataFrame:
    """Per task: our model (from the warm-up summary) and RL settings beside the document's."""
    rows = []
    for task, doc in DOC.items():
        sft = ctx.sft(task) or {}
        model = sft.get("model", {})
        spec = next((r for r in runs if r.settings["task"] == task and r.settings["algorithm"] == "reinforce"), None)
        ours = {**{k: model.get(k, math.nan) for k in ("n_layer", "n_head", "n_embd")}, "n_params": sft.get("n_params", math.nan),
                "sft_steps": sft.get("steps", math.nan), "sft_accuracy": sft.get("eval_accuracy", math.nan),
                **{k: (spec.settings[k] if spec else math.nan) for k in DOC_RL}}  # fmt: skip
        if spec:
            world = ((spec.summary or {}).get("resolved") or {}).get("world_size", 1)
            ours["micro_batch_size"] = per_micro_batch(spec.settings, world)
        theirs = {**{k: doc[k] for k in ("n_layer", "n_head", "n_embd")}, **DOC_RL}
        preset = sft.get("settings", {}).get("preset", "missing")
        for key, label in SETTING_NAMES.items():
            value = ours[key]
            rows.append({"task": task, "config": doc["config"], "preset": preset, "key": key, "setting": label,
                         "ours": math.nan if value is None else float(value), "document": float(theirs.get(key, math.nan))})  # fmt: skip
    return pd.DataFrame(rows)


def run_stats(run) -> dict:
    """One run's outcome and throughput (sequences sampled per second of step time)."""
    s = run.settings
    row = {"task": s["task"], "algorithm": s["algorithm"], "seed": run.spec.seed, "run_id": run.spec.run_id, "status": run.status}
    if run.ok:
        m = run.metrics
        row.update(final_eval=run.summary["final"]["eval_accuracy"], initial_eval=run.initial_eval,
                   best_eval=run.summary["best"]["eval_accuracy"], steps_done=float(len(m)), wall_seconds=float(m["seconds"].sum()),
                   seq_per_s=float(m["samples"].iloc[-1] / m["seconds"].sum()), collapsed=float(collapsed(run)), degraded=float(degraded(run)))  # fmt: skip
        row["gain"] = row["final_eval"] - row["initial_eval"]
    return row


def reached(final_mean: float, low: float) -> bool | None:
    """Did the mean final accuracy reach the lower end of the document's expected range?"""
    return None if final_mean is None or math.isnan(final_mean) else bool(final_mean >= low)


STATS = ["final_eval", "initial_eval", "best_eval", "gain", "steps_done", "wall_seconds", "seq_per_s", "collapsed", "degraded"]


def per_run_table(runs) -> pd.DataFrame:
    return pd.DataFrame([run_stats(r) for r in runs], columns=["task", "algorithm", "seed", "run_id", "status"] + STATS)


def results_table(runs) -> pd.DataFrame:
    per_run = per_run_table(runs)
    out = mean_spread(per_run, ["task", "algorithm"], STATS)  # n counts runs with a final evaluation
    out = add_intervals(out, ["final_eval", "gain"], bounds={"final_eval": SHARE})
    g = per_run.groupby(["task", "algorithm"], sort=False)
    out.insert(3, "n_runs", g.size().values if len(per_run) else [])
    out["collapses"] = g["collapsed"].sum(min_count=1).values if len(per_run) else []
    out["degradations"] = g["degraded"].sum(min_count=1).values if len(per_run) else []
    out = add_wilson(out, "collapses")
    out["rl_steps"] = [next((r.settings["steps"] for r in runs if r.settings["task"] == t), math.nan) for t in out["task"]]
    out["expected_low"] = [DOC.get(t, {}).get("expected", (math.nan,) * 2)[0] for t in out["task"]]
    out["expected_high"] = [DOC.get(t, {}).get("expected", (math.nan,) * 2)[1] for t in out["task"]]
    out["reached"] = [reached(m, lo) for m, lo in zip(out["final_eval_mean"], out["expected_low"])]
    return out


def curves_table(runs) -> pd.DataFrame:
    """Held-out accuracy per task, algorithm and evaluation step (step 0: before RL)."""
    frames = [r.evals.assign(task=r.settings["task"], algorithm=r.settings["algorithm"]) for r in runs if r.ok]
    long = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return mean_spread(long, ["task", "algorithm", "step"], ["eval_accuracy"])


def console_table(ctx, runs) -> pd.DataFrame:
    """Per task and algorithm, the last console line of its first run with a result: from the
    run's log when there is one, else rebuilt from its last metrics row."""
    rows = []
    for task in DOC:
        for algorithm in ALGORITHMS:
            run = next((r for r in runs if r.ok and r.settings["task"] == task and r.settings["algorithm"] == algorithm), None)
            if run is None:
                continue
            log = layout.at(ctx.cfg, layout.STAGES["train"].log, run_id=run.spec.run_id)
            lines = [x.strip() for x in log.read_text(errors="replace").splitlines() if x.startswith("Step ")] if log.is_file() else []
            line, source = (lines[-1], "log") if lines else (console_line(run.metrics.iloc[-1].to_dict(), run.settings["steps"]), "metrics.csv")
            rows.append({"task": task, "algorithm": algorithm, "run_id": run.spec.run_id, "source": source, "line": line})
    return pd.DataFrame(rows, columns=["task", "algorithm", "run_id", "source", "line"])


def tables(ctx) -> dict[str, pd.DataFrame]:
    runs = ctx.experiment("system")
    res = results_table(runs)
    return {"system_configs": configs_table(ctx, runs), "system_results": res, "system_curves": curves_table(runs),
            "system_console": console_table(ctx, runs), "system_runs": per_run_table(runs)}


# ----------------------------------------------------------------------------- figures
def target(ax, lo: float, hi: float, last_step: float) -> None:
    """The document's expected range, at the document's step: a bar there when the runs reach it,
    else a bar at the right edge of the axes, labelled with the step it belongs to."""
    step = DOC_RL["steps"]
    label = f"document: {lo:.0%}–{hi:.0%} at step {step}"
    if known(last_step) and last_step >= step:
        ax.plot([step, step], [lo, hi], color="0.45", lw=6, solid_capstyle="butt", label=label)
        return
    edge = blended_transform_factory(ax.transAxes, ax.transData)  # x in axes fractions, y in accuracy
    ax.plot([0.985, 0.985], [lo, hi], color="0.45", lw=6, solid_capstyle="butt", transform=edge, clip_on=False,
            label=f"{label} (beyond these {last_step:g} steps)" if known(last_step) else label)  # fmt: skip
    ax.text(0.97, hi, f"step {step}", transform=edge, ha="right", va="bottom", fontsize=7, color="0.3")


def fig_curves(t) -> plt.Figure:
    c, res = t["system_curves"], t["system_results"]
    fig, axes = plt.subplots(1, len(DOC), figsize=(10, 3.8), sharey=True, layout="constrained")
    for ax, task in zip(axes, DOC):
        d = c[c["task"] == task] if len(c) else c
        for i, algorithm in enumerate(ALGORITHMS):
            a = d[d["algorithm"] == algorithm] if len(d) else d
            if len(a):
                band(ax, a["step"], a["eval_accuracy_mean"], a["eval_accuracy_std"], algorithm, COLORS[i], n=a["n"],
                     bounds=bounds("eval_accuracy"))
        lo, hi = cell(res, "expected_low", task=task), cell(res, "expected_high", task=task)
        if not math.isnan(lo):
            target(ax, lo, hi, d["step"].max() if len(d) else math.nan)
        if d.empty:
            placeholder(ax, f"no data: the {task} runs are missing")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="lower right")
        ax.set(title=f"{task} ({DOC[task]['config']})", xlabel="RL step", ylabel="held-out accuracy", ylim=(0, 1))
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
            vals = [cell(res, "seq_per_s_mean", task=k, algorithm=algorithm) for k in DOC]
            stds = [cell(res, "seq_per_s_std", task=k, algorithm=algorithm) for k in DOC]
            ns = [cell(res, "n", task=k, algorithm=algorithm) for k in DOC]
            errs = [0.0 if not known(v, sd, n) else float(t_halfwidth(sd, n)) for v, sd, n in zip(vals, stds, ns)]
            errs = [0.0 if math.isnan(e) else e for e in errs]  # one seed: no interval
            x = [j + (i - 1) * width for j in range(len(DOC))]
            ax.bar(x, [0 if math.isnan(v) else v for v in vals], width, capsize=3, color=COLORS[i], label=algorithm,
                   yerr=[[min(e, 0 if math.isnan(v) else v) for e, v in zip(errs, vals)], errs])  # never below 0
            for xi, v in zip(x, vals):
                if math.isnan(v):  # a missing bar says so rather than reading as zero throughput
                    ax.annotate("missing", (xi, 0), ha="center", va="bottom", rotation=90, fontsize=7, color="0.4")
        ax.set_xticks(range(len(DOC)), list(DOC))
        ax.legend()
    ax.set(title="Training throughput (mean and 95% t interval across seeds)", xlabel="task",
           ylabel="sequences per second")
    return fig


def figures(t) -> dict[str, plt.Figure]:
    return {"system_curves": fig_curves(t), "system_throughput": fig_throughput(t)}


# ----------------------------------------------------------------------------- section
def pm(res: pd.DataFrame, task: str, algorithm: str, col: str = "final_eval") -> str:
    """`mean [95% interval] (n=k)` of an accuracy."""
    m, s, n = (cell(res, c, task=task, algorithm=algorithm) for c in (f"{col}_mean", f"{col}_std", "n"))
    return interval(m, s, n, "pct", bounds=SHARE)


def scale_note(cfgs: pd.DataFrame, task: str) -> str:
    """What differs from the document's setup (model size, steps), read from system_configs."""
    d = cfgs[cfgs["task"] == task] if len(cfgs) else cfgs
    if d.empty:
        return ""
    row = {r.key: (r.ours, r.document) for r in d.itertuples()}
    diffs = [f"{SETTING_NAMES[k]} {o:g} (document {doc:g})" for k, (o, doc) in row.items()
             if k in ("n_layer", "n_embd", "steps", "batch_size") and not (pd.isna(o) or o == doc)]  # fmt: skip
    if not diffs:
        return ""
    return f" Our setup differs in scale: preset {d['preset'].iloc[0]}, " + ", ".join(diffs) + "."


def task_text(res: pd.DataFrame, cfgs: pd.DataFrame, task: str, rows: dict) -> dict:
    """REINFORCE's final accuracy against the document's range, with the other algorithms beside it, and its verdicts."""
    lo, hi = DOC[task]["expected"]
    planned = set(zip(res["task"], res["algorithm"])) if len(res) else set()  # one the config does not run is left out
    others = "".join(f"; {a} {pm(res, task, a)}" for a in ALGORITHMS if a != "reinforce" and (task, a) in planned)
    text = (f"On {task}, REINFORCE ended at {pm(res, task, 'reinforce')} held-out accuracy (from {pm(res, task, 'reinforce', 'initial_eval')} "
            f"before RL{others}), against the document's {lo:.0%}–{hi:.0%}.")  # fmt: skip
    acc = rows.get(f"{task}_accuracy")
    if acc and acc["outcome"] == "disagrees":
        text += " At this scale the document's accuracy is not reached; that is a finding." + scale_note(cfgs, task)
    return {"text": text, "rows": [rows[k] for k in (f"{task}_accuracy", f"{task}_gain", f"{task}_stable") if k in rows]}


def configs_wide(cfgs: pd.DataFrame) -> pd.DataFrame:
    """system_configs with one row per setting: each task's value, ours beside the document's."""
    if cfgs.empty:
        return cfgs
    wide = cfgs.pivot_table(index="key", columns="task", values=["ours", "document"], aggfunc="first", dropna=False, sort=False)
    wide.columns = [f"{task}_{side}" for side, task in wide.columns]
    wide = wide.reindex(list(dict.fromkeys(cfgs["key"]))).reset_index()
    wide.insert(0, "setting", wide["key"].map(SETTING_NAMES))
    return wide


def section(t) -> dict:
    res, cfgs = t["system_results"], t["system_configs"]
    claims = claim_frame(t, NAME)
    rows = verdict_rows(claims)
    decay = cell(cfgs, "ours", task="add", key="baseline_decay")
    presets = cfgs.drop_duplicates("task")[["task", "config", "preset"]].to_dict("records") if len(cfgs) else []
    return {
        "configs": configs_wide(cfgs), "presets": presets, "results": res, "console": t["system_console"],
        "baseline_decay": "–" if math.isnan(decay) else f"{decay:g}", "verdict_list": rows, "power": power_note(claims),
        "verdicts": [task_text(res, cfgs, task, by_key(rows)) for task in DOC], "doc_steps": DOC_RL["steps"],
        "beside": [BESIDE[a] for a in ALGORITHMS if a in BESIDE and len(res) and (res["algorithm"] == a).any()],
        "doc_console": "Step 50/200 | Loss: 0.234 | Acc: 0.750 | Reward: 0.750 | LR: 1.00e-04",  # the document's example
    }
