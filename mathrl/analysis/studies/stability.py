"""Batch size, fixed against dynamic hyperparameters, clipping: rl-stability-batch-and-hyperparameters.md.

The document's argument: policy-gradient noise falls as 1/N, so a large batch alone makes
training smooth enough that fixed hyperparameters beat schedules and controllers; gradient
clipping and value-loss clipping are cheap insurance. Each table below puts our measurement
beside the document's own numbers (columns `doc_*`), which come from a 1.5B model on AIME
and are compared by direction and ranking, never by absolute value.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd

import mathrl.analysis.kit as kit
from mathrl.analysis import section_verdicts
from mathrl.analysis.figure_style import COLORS, band_panels, bands, placeholder, plt
from mathrl.analysis.kit import NAN
from mathrl.analysis.measures.clipping import max_norm, spike, value_clip
from mathrl.analysis.measures.hyperparameters import BIG_SWING, SMALL_SWING, largest_drop
from mathrl.analysis.measures.series import end_over_start
from mathrl.analysis.measures.tables import run_table
from mathrl.analysis.measures.training_challenges import frac_zero_std, kl_max
from mathrl.analysis.results import warmup
from mathrl.engine.monitor import ALERT_KINDS, StabilityMonitor, precision_recall, sustained_drops
from mathrl.pipeline.config import expand_runs

NAME = "stability"
TITLE = "Batch size and hyperparameters against training stability"
DOCUMENT = "rl-stability-batch-and-hyperparameters.md"

# the document's numbers (sections 2.2, 3.3, 4.1, 5.2, 5.3, 8): config/documents.yaml
DOC = kit.document_facts("stability")

FVD = "fixed_vs_dynamic"
FVD_ROLES = ("A", "B", "C")  # the document's methods: A fixed at the large batch, B step-decayed LR, C adaptive KL
FRACTIONS = (0.2, 0.4, 0.6, 0.8, 1.0)
SERIES = {
    "batch": ["eval_accuracy", "entropy"],
    "fixed_vs_dynamic": ["eval_accuracy", "lr", "kl_coef"],
    "clipping": ["eval_accuracy"],
    "value_clip": ["value_rmse", "eval_accuracy"],
}


# ---- reading runs (pure) ------------------------------------------------------------------
def curve_points(run) -> list[dict]:
    """Eval accuracy (nearest evaluation), entropy and reward at 20..100% of the steps."""
    out = []
    for k, f in enumerate(FRACTIONS):
        step = round(f * run.settings["steps"])
        row = {"point": k + 1, "step": step, "eval_step": NAN, "eval_accuracy": NAN, "entropy": NAN, "reward": NAN}
        if run.ok and step <= run.metrics["step"].max():  # a run that stopped early has no value here
            ev, m = run.evals, run.metrics.set_index("step")
            i = (ev["step"] - step).abs().idxmin()
            row.update(eval_step=ev["step"][i], eval_accuracy=ev["eval_accuracy"][i])
            row.update(entropy=m["entropy"].get(step, NAN), reward=m["reward_mean"].get(step, NAN))
        out.append(row)
    return out


def series(runs: list, metrics: list[str]) -> pd.DataFrame:
    """Mean, std and n across seeds of each metric at each step, per setting (eval from step 0)."""
    frames, order = [], {}
    for run in runs:
        name = kit.setting(run.spec)
        order.setdefault(name, len(order))  # the settings in the order of their runs
        if run.ok:
            frames += [f.assign(order=order[name], setting=name) for f in kit.metric_frames(run, metrics)]
    return kit.metric_curves(frames, ["order", "setting"])


def document_columns(df: pd.DataFrame, names: list[str], facts: list) -> None:
    """Columns `names` of `df`: the document's numbers per row (`facts`: a sequence per row, or None for NaN)."""
    for j, name in enumerate(names):
        df[name] = [NAN if f is None else f[j] for f in facts]


# ---- tables ------------------------------------------------------------------------------
def batch_tables(ctx) -> dict[str, pd.DataFrame]:
    runs = ctx.experiment("batch")
    if not runs:
        return {}
    rows = ctx.run_table("stability_batch_runs")
    values = "final_eval peak_eval roughness drawdown largest_drop share_above_10 share_below_3 collapsed".split()
    batch = kit.summarise(rows, ["batch_size", "lr"], values)
    batch = batch.drop(columns="collapsed_std").rename(columns={"collapsed_mean": "collapse_rate"})
    batch["collapses"] = kit.group_sums(rows, "batch_size", "collapsed")
    batch["doc_curve"] = batch["batch_size"].map(DOC["batch"])
    pts = pd.DataFrame([{"batch_size": r.settings["batch_size"], **p} for r in runs for p in curve_points(r)])
    curve = kit.summarise(pts, ["batch_size", "point", "step"], ["eval_accuracy", "entropy", "reward"])
    curve.insert(3, "eval_step", pts.groupby(["batch_size", "point", "step"], sort=False)["eval_step"].max().values)
    document_columns(
        curve,
        ["doc_accuracy", "doc_entropy", "doc_reward"],
        [DOC["curve"][b][p - 1] if b in DOC["curve"] else None for b, p in zip(curve["batch_size"], curve["point"])],
    )
    ends = rows[rows["batch_size"].isin([rows["batch_size"].min(), rows["batch_size"].max()])]
    case = kit.summarise(ends, ["batch_size"], ["final_reward", "final_eval", "wall_seconds", "alerts"])
    case["collapses"] = kit.group_sums(ends, "batch_size", "collapsed")
    document_columns(
        case,
        ["doc_final_reward", "doc_reward_std", "doc_collapses", "doc_time"],
        [DOC["case"].get(b) for b in case["batch_size"]],
    )
    return {
        "stability_batch_curve": curve,
        "stability_batch": batch,
        "stability_case_study": case,
    }


def equal_samples_table(runs: list) -> pd.DataFrame:
    """Held-out accuracy per batch size, seed and number of rollouts sampled, at every
    evaluation: the batch study's comparison at equal samples beside its equal steps."""
    rows = [
        {
            "batch_size": r.settings["batch_size"],
            "seed": r.spec.seed,
            "warmup": warmup(r),
            "samples": int(s),
            "eval_accuracy": acc,
        }
        for r in runs
        if r.ok
        for s, acc in zip(r.metrics["samples"], r.metrics["eval_accuracy"])
        if pd.notna(acc) and s > 0
    ]
    return pd.DataFrame(rows, columns=["batch_size", "seed", "warmup", "samples", "eval_accuracy"])


def equal_samples_pairs(es: pd.DataFrame) -> pd.DataFrame:
    """Per smaller batch and seed: held-out accuracy of the largest batch and of the smaller one at
    the largest number of rollouts both were evaluated at (the comparison at equal samples)."""
    hi, rows = es["batch_size"].max() if len(es) else None, []
    samples = {b: set(g["samples"]) for b, g in es.groupby("batch_size")}
    for small in sorted(set(samples) - {hi}):
        if common := samples[hi] & samples[small]:
            at = es[es["samples"] == max(common)]
            large = kit.per_seed(at, "eval_accuracy", batch_size=hi)
            mine = at[at["batch_size"] == small]
            rows += [
                {
                    "batch_size": small,
                    "large_batch": hi,
                    "seed": seed,
                    "warmup": warmup,
                    "samples": max(common),
                    "large": large.get(seed, NAN),
                    "small": acc,
                }
                for seed, warmup, acc in zip(mine["seed"], mine["warmup"], mine["eval_accuracy"])
            ]
    return pd.DataFrame(rows, columns=CLAIM_TABLES["stability_equal_samples_pairs"])


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
    document_columns(
        out,
        ["doc_final_accuracy", "doc_stability", "doc_reproducibility", "doc_rank"],
        [DOC["methods"].get(m) for m in out["role"]],
    )
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


def gradvar_tables(ctx) -> dict[str, pd.DataFrame]:
    g, var_rows, acc_rows = ctx.cfg["gradvar"], [], []
    for task in g["tasks"]:
        probe = ctx.gradvar(task)
        status = {"task": task, "status": "complete" if probe else "missing"}
        found = {v["batch_size"]: v["variance"] for v in probe["variance"]} if probe else {}
        sizes = sorted(found or g["batch_sizes"])
        var_rows += [
            {
                **status,
                "batch_size": n,
                "variance": found.get(n, NAN),
                "ratio_to_largest": found.get(n, NAN) / found[sizes[-1]] if found.get(sizes[-1]) else NAN,
                "theory_ratio": sizes[-1] / n,
                "doc_variance": DOC["variance"].get(n, NAN),
                "doc_ratio": DOC["variance"].get(n, NAN) / DOC["variance"][512],
            }
            for n in sizes
        ]
        acc = probe["accumulation"] if probe else dict(zip(["batch_size", "micro_batch_size"], g["accumulation"]))
        acc_rows.append({**status, **{k: acc.get(k, NAN) for k in ACCUMULATION}})
    return {"stability_gradvar": pd.DataFrame(var_rows), "stability_accumulation": pd.DataFrame(acc_rows)}


DROP, HORIZON = 0.05, 10  # an alert should precede a sustained 5-point drop of held-out accuracy within 10 steps
# the document's fixed reward-swing threshold, and ours in standard errors of the batch mean
FIXED_SWING, SWING_SIGMAS = 0.3, 6.0


def replay(run, **monitor) -> list[int]:
    """The alert steps of a monitor with these thresholds (the others off) replayed over a run's logged metrics."""
    mon = StabilityMonitor(**{"entropy_min": None, "kl_max": None, "reward_swing": None, **monitor})
    m = run.metrics
    for step, entropy, kl, reward_mean in zip(m["step"], m["entropy"], m["kl"], m["reward_mean"]):
        mon.check(step, entropy, kl, reward_mean)
    return [a["step"] for a in mon.alerts]


def detectors(run) -> dict[str, list[int]]:
    """Alert steps per detector on one run: the document's fixed reward swing, the noise-scaled one,
    and the run's own KL and entropy thresholds."""
    st = run.settings
    return {
        "fixed_swing": replay(run, reward_swing=FIXED_SWING, window=st["monitor_window"]),
        "scaled_swing": replay(
            run, window=st["monitor_window"], swing_sigmas=SWING_SIGMAS, batch_size=st["batch_size"]
        ),
        "high_kl": replay(run, kl_max=st["monitor_kl_max"]),
        "low_entropy": replay(run, entropy_min=st["monitor_entropy_min"]),
    }


DETECTORS = {
    "fixed_swing": f"reward_swing, fixed {FIXED_SWING:g}",
    "scaled_swing": f"reward_swing, {SWING_SIGMAS:g} standard errors of the batch mean",
    "high_kl": "high_kl",
    "low_entropy": "low_entropy",
}


def followed_by_drop(step, drops: list) -> float:
    """1.0 when a sustained drop (`drops`: their onsets) starts within HORIZON steps after `step`, else 0."""
    return float(any(step < d <= step + HORIZON for d in drops))


def watched(run) -> Callable[[int], bool]:
    """Whether the HORIZON after a step lies wholly where a drop could still be seen: a sustained drop is known at
    its second low evaluation, so its onset must come by the run's second-to-last evaluation. Later steps (most of
    a short run) are censored: scoring them would count as 'no drop' what the run ended too soon to show."""
    evals = list(run.evals["step"])
    last_onset = evals[-2] if len(evals) >= 2 else -math.inf
    return lambda step: step + HORIZON <= last_onset


def alert_runs(events: pd.DataFrame) -> pd.DataFrame:
    """Per detector, source and run: the share of its events (`alert_tables`) followed by a sustained drop, and their
    number. The run is the unit the monitor's precision claims compare: a run's steps, and the alerts around one
    drop, are not independent draws."""
    columns = CLAIM_TABLES["stability_alert_runs"]
    if events.empty:
        return pd.DataFrame(columns=columns)
    by_run = events.groupby(["detector", "source", "run_id"], sort=False)["followed_by_drop"]
    return by_run.agg(followed_by_drop="mean", events="size").reset_index()[columns]


def alert_tables(runs: list) -> dict[str, pd.DataFrame]:
    """The detectors scored over every run with a result. `stability_alert_events`: one row per alert of each detector
    (source `alert`) and per logged step (source `step`, the base rate, repeated under each detector) whose HORIZON is
    watched (`watched`), with `followed_by_drop`: 1 when a sustained drop starts within HORIZON steps after it; the
    monitor's precision claim compares the two shares. `stability_alert_scores`: per detector, how often an alert was
    followed by a sustained drop within HORIZON steps (precision, over the alerts whose HORIZON is watched, beside the
    base rate of such a step), and how many drops an alert announced (recall, over every alert); Wilson intervals."""
    events, counts, base = [], [], []
    for run in runs:
        drops, seen = sustained_drops(run.evals["step"], run.evals["eval_accuracy"], DROP), watched(run)
        steps = [("step", s, followed_by_drop(s, drops)) for s in run.metrics["step"] if seen(s)]
        base += [hit for *_, hit in steps]
        for name, alerts in detectors(run).items():
            scored = [a for a in alerts if seen(a)]
            marks = [("alert", a, followed_by_drop(a, drops)) for a in scored] + steps
            events += [(name, source, run.spec.run_id, s, hit) for source, s, hit in marks]
            hit, n = precision_recall(scored, drops, HORIZON)[:2]  # precision: the watched alerts; recall: every one
            counts.append((name, hit, n, *precision_recall(alerts, drops, HORIZON)[2:]))
    per = pd.DataFrame(counts, columns=["detector", "hit", "alerts", "caught", "drops"])
    rows = [
        {
            "detector": DETECTORS[c.Index],
            "alerts": c.alerts,
            "followed_by_drop": c.hit,
            **kit.wilson_columns("precision", c.hit, c.alerts),
            "drops": c.drops,
            "announced": c.caught,
            **kit.wilson_columns("recall", c.caught, c.drops),
            "base_rate": sum(base) / len(base) if base else NAN,
        }
        for c in per.groupby("detector", sort=False).sum().itertuples()
    ]
    columns = "detector alerts followed_by_drop precision precision_lo precision_hi drops announced recall recall_lo"
    events = pd.DataFrame(events, columns=["detector", "source", "run_id", "step", "followed_by_drop"])
    return {
        "stability_alert_scores": pd.DataFrame(rows, columns=[*columns.split(), "recall_hi", "base_rate"]),
        "stability_alert_events": events,
        "stability_alert_runs": alert_runs(events),
    }


def alerts_table(ctx) -> pd.DataFrame:
    rows = []
    for exp in ctx.cfg["experiments"]:
        # a run two experiments share is counted under the one that trains it
        runs = [r for r in ctx.experiment(exp) if r.spec.same_as is None]
        ok = [r for r in runs if r.ok]
        for kind in ALERT_KINDS:
            steps = [[a["step"] for a in r.summary["alerts"] if a["kind"] == kind] for r in ok]
            firsts = [min(s) for s in steps if s]
            rows.append(
                {
                    "experiment": exp,
                    "kind": kind,
                    "runs": len(ok),
                    "expected": len(runs),
                    "runs_with_alert": len(firsts),
                    "first_step_median": float(pd.Series(firsts).median()) if firsts else NAN,
                    "alerts": sum(map(len, steps)),
                }
            )
    return pd.DataFrame(rows)


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
    out = out.drop(columns="collapsed_std").rename(columns={"collapsed_mean": "collapse_rate"})
    out.insert(out.columns.get_loc("n"), "collapses", kit.group_sums(rows, "cell", "collapsed"))
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


# The calibrated reference (docs/notebook/2026-11-23-calibration-pilot.md); "too large" is a multiple of it.
REFERENCE_LR = 3.0e-4


def run_signals(run) -> dict:
    m = run.metrics
    ev, ent = run.evals, m["entropy"].dropna()
    d = ev["eval_accuracy"].diff()
    i = d.idxmin() if d.notna().any() else None
    return {
        "zero_std": frac_zero_std(run),
        "drop": largest_drop(run),
        "drop_at": (ev["step"][i - 1], ev["step"][i], ev["eval_accuracy"][i - 1], ev["eval_accuracy"][i])
        if i is not None
        else None,
        "ent_ratio": end_over_start(ent),
        "ent": (ent.iloc[0], ent.iloc[-1]) if len(ent) else None,
        "kl": kl_max(run),
        "kl_at": m.loc[m["kl"].idxmax(), "step"] if m["kl"].notna().any() else NAN,
        "kl_max": run.settings.get("monitor_kl_max") or np.inf,
        "skipped": int(m["skipped"].fillna(0).sum()) + (run.status == "stopped_nonfinite"),
    }


# Per symptom of the document's diagnosis table (DOC["symptoms"], in its order): a test of a run's settings for the
# cause named in its `cause_shown` (the evidence is picked among the runs that carry it, never among arbitrary runs);
# the signal of `run_signals` that shows the symptom, and whether its largest value is the most extreme; whether the
# most extreme run shows the symptom; and its evidence as text. None: no run of this pipeline can show the symptom.
SYMPTOM_TESTS = [
    (
        lambda st: st.get("init") == "random" and st.get("reward") == "exact",
        "zero_std",
        True,
        lambda g: g["zero_std"] >= 0.9,
        lambda g: f"mean frac_zero_std {g['zero_std']:.2f}",
    ),
    (
        lambda st: st.get("grad_clip") is None,
        "drop",
        True,
        lambda g: g["drop"] > BIG_SWING,
        lambda g: (
            "eval accuracy {2:.1%} at step {0:g} -> {3:.1%} at step {1:g}".format(*g["drop_at"])
            if g["drop_at"]
            else "no drop"
        ),
    ),
    (
        lambda st: 0 < st.get("entropy_coef", 0.0) < 0.01 and st.get("init") != "random",
        "ent_ratio",
        False,
        lambda g: g["ent_ratio"] < 0.8,
        lambda g: f"entropy {g['ent'][0]:.3f} at the first step -> {g['ent'][1]:.3f} at the last",
    ),
    (
        lambda st: st.get("ppo_epochs", 1) > 1 or st.get("clip_eps_high") is not None,
        "kl",
        True,
        lambda g: g["kl"] > g["kl_max"],
        lambda g: f"KL {g['kl']:.3g} at step {g['kl_at']:g} (monitor threshold {g['kl_max']:g})",
    ),
    None,  # out of memory
    (
        lambda st: st.get("grad_clip") is None and st.get("lr", 0) > 1e3 * REFERENCE_LR,
        "skipped",
        True,
        lambda g: g["skipped"] > 0,
        lambda g: f"{g['skipped']} update(s) skipped by the non-finite guard",
    ),
]


def evidence(runs: dict, signals: dict, test) -> tuple[str, str]:
    """The run that shows a symptom (its SYMPTOM_TESTS entry), and the evidence: the most extreme run by the signal
    among those with the document's cause; "not observed" when it does not show the symptom."""
    if test is None:
        return "", "not observed in this pipeline"
    cause, col, largest, passes, text = test
    v = pd.Series({rid: signals[rid][col] for rid, r in runs.items() if cause(r.settings)}, dtype=float).dropna()
    if v.empty:
        return "", "no run of this pipeline has this cause"
    rid = v.idxmax() if largest else v.idxmin()
    if passes(signals[rid]):
        return rid, text(signals[rid])
    return "", f"not observed in this pipeline (most extreme run with this cause, {rid}: {text(signals[rid])})"


def troubleshooting_table(ctx) -> pd.DataFrame:
    ok = {rid: r for rid, r in ctx.runs.items() if r.ok}
    signals = {rid: run_signals(r) for rid, r in ok.items()}
    columns = ["symptom", "cause", "fix", "rule", "cause_shown"]
    found = [evidence(ok, signals, test) for test in SYMPTOM_TESTS]
    return pd.DataFrame(
        [
            {**{c: row[c] for c in columns}, "evidence_run": run, "evidence": text}
            for row, (run, text) in zip(DOC["symptoms"], found)
        ]
    )


ACCUMULATION = ["batch_size", "micro_batch_size", "steps", "max_abs_difference", "max_abs_gradient", "relative"]
# The study's tables that claims read and are not one row per run (the run tables are declared in
# mathrl.analysis.measures), and their columns, stated once: the tables are made with them, and
# mathrl.analysis.claim_names reads this assignment from the source (without importing the module) to check a claim's
# names when the config is read.
CLAIM_TABLES = {
    "stability_gradvar": [
        "task",
        "status",
        "batch_size",
        "variance",
        "ratio_to_largest",
        "theory_ratio",
        "doc_variance",
        "doc_ratio",
    ],
    "stability_accumulation": ["task", "status", *ACCUMULATION],
    "stability_equal_samples_pairs": ["batch_size", "large_batch", "seed", "warmup", "samples", "large", "small"],
    "stability_alert_runs": ["detector", "source", "run_id", "followed_by_drop", "events"],
}


def tables(ctx) -> dict[str, pd.DataFrame]:
    batch = ctx.experiment("batch")
    out = {**batch_tables(ctx), **gradvar_tables(ctx)}
    out["stability_fixed_vs_dynamic"] = fixed_vs_dynamic_table(ctx)
    out["stability_equal_samples"] = equal_samples_table(batch)
    out["stability_remedies"] = remedies_table(ctx)
    out["stability_equal_samples_pairs"] = equal_samples_pairs(out["stability_equal_samples"])
    out["stability_clipping"] = clipping_table(ctx)
    out["stability_value_clip"] = value_clip_table(ctx)
    out["stability_alerts"] = alerts_table(ctx)
    # the monitor scores each trained run once: a run two experiments read (same_as) is one unit, not two
    out.update(alert_tables([r for r in ctx.runs.values() if r.ok and r.spec.same_as is None]))
    out["stability_troubleshooting"] = troubleshooting_table(ctx)
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
        x = np.arange(len(c))
        err = np.vstack([c["collapse_rate"] - c["collapse_rate_lo"], c["collapse_rate_hi"] - c["collapse_rate"]])
        colors = [COLORS[0] if o == "sgd" else COLORS[1] for o in c["optimizer"]]
        axes[0].bar(x, c["collapse_rate"], width=0.6, color=colors, yerr=err, capsize=3)
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
CLIPPING_ORDER = [
    "clipping_spike_collapses",
    "clipping_sgd",
    "clipping_sgd_2.0",
    "clipping_sgd_0.5",
    "clipping_dose_order",
    "clipping_adamw",
]


KL_GRID = ("kl_none", "kl_low", "kl_default", "kl_high")  # the remedies experiment's KL roles, in the grid's order


def design(cfg: dict) -> dict:
    """The settings the section's prose names, read from the config rather than written into the template: as the
    config resolves them for each experiment's first run (the train block's where the experiment has none)."""
    keys = ("batch_size", "steps", "eval_every", "eval_size")
    specs = list(expand_runs(cfg).values())
    first = {spec.experiment: spec.settings.as_dict() for spec in reversed(specs)}  # the first run wins
    variant = {(spec.experiment, spec.variant): spec.settings.as_dict() for spec in specs}

    def setting(exp: str, role: str) -> dict | None:  # the settings of the variant in `role`, None without one
        name = kit.roles(cfg, exp, ()).get(role)
        return variant.get((exp, name)) if name else None

    b, kl = setting(FVD, "B"), setting("remedies", "kl_default")
    # batch 64's own LR: the batch study's (the square-root rule's) at the KL grid's batch
    own = next(
        (s for (e, _), s in variant.items() if e == "batch" and kl and s["batch_size"] == kl["batch_size"]), None
    )
    return {
        **{exp: {k: first.get(exp, cfg.get("train", {})).get(k) for k in keys} for exp in ("batch", "remedies")},
        "gradvar_batches": (cfg.get("gradvar") or {}).get("num_samples"),
        # B's step schedule (what its LR did, the section reads from the runs: LR last / first)
        "decay": b and {"rate": b["lr_decay_rate"], "every": b["lr_decay_every"]},
        # the KL grid's LR against its batch's own
        "kl_lr_ratio": kl["lr"] / own["lr"] if kl and own else None,
        "kl_grid": [f"{g['kl_coef']:g}" for r in KL_GRID if (g := setting("remedies", r))],
    }


def section(t) -> dict:
    names = [
        "batch_curve",
        "batch",
        "equal_samples",
        "case_study",
        "fixed_vs_dynamic",
        "gradvar",
        "accumulation",
        "alerts",
        "alert_scores",
        "clipping",
        "value_clip",
        "troubleshooting",
        "remedies",
    ]
    tb = {n: t[f"stability_{n}"] for n in names}
    rows = section_verdicts.verdicts(t, NAME)
    parts = section_verdicts.by_part(rows)
    clipping = {r["key"]: r for r in parts.get("clipping", [])}
    parts["clipping"] = [clipping.pop(k) for k in CLIPPING_ORDER if k in clipping] + list(clipping.values())
    al, b, v = tb["alerts"], tb["batch"], tb["value_clip"]
    # the PPO cells by value clip and weight, as `{clip}@{weight}`; None where a cell has no row
    value = {
        f"{c}@{w:g}": kit.row_of(v, value_clip=c, value_coef=w) or None for c in ("none", "0.2") for w in (0.5, 1.0)
    }
    ends = [b["batch_size"].min(), b["batch_size"].max()] if not b.empty else []
    return {
        "tables": {**tb, "alerts_fired": al[al["alerts"] > 0] if not al.empty else al},
        "design": design(t.cfg),
        "spike_factor": SPIKE_FACTOR,
        "big": BIG_SWING,
        "small": SMALL_SWING,
        "drop": DROP,
        "horizon": HORIZON,
        "doc_variance": DOC["variance"],
        "batch_ends": [kit.row_of(b, batch_size=k) for k in ends],
        "fvd": [row for m in FVD_ROLES if (row := kit.row_of(tb["fixed_vs_dynamic"], role=m))],
        "b_lr_ratio": kit.cell(tb["fixed_vs_dynamic"], "lr_ratio_mean", role="B"),
        "value_clip": value,
        "verdict_list": rows,
        "rows": parts,
    }
