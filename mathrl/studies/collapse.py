"""Training collapse on sparse-reward multiplication (training-collapse-analysis.md).

The document lists why RL fine-tuning collapses (a learning rate too large, no gradient
clipping, sparse binary rewards, no entropy bonus) and the remedies: shaped rewards with a
format bonus and an invalid-output penalty, reward and advantage normalisation with
clipping, a decaying entropy bonus, a decaying LR, a curriculum. The `collapse` experiment
runs each remedy as a variant of the plain exact-match run on 2-digit multiplication (the
baseline `exact`), plus a huge learning rate without clipping that must trip the
non-finite guard.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd

from mathrl.results import COLLAPSE_DEFINITION, collapsed, mean_spread, summed_drops

NAME = "collapse"
TITLE = "Training collapse: causes and remedies"
DOCUMENT = "training-collapse-analysis.md"

BASELINE = "exact"
REWARD_DESIGNS = ("exact", "shaped", "shaped_penalty")
FRACTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)  # "the five points of a run", as shares of its steps
NOISE_FLOOR = 0.01  # a difference in accuracy below one point is never called an effect
STATS = ["initial_eval", "final_eval", "best_eval", "gain", "mid_gain", "drops", "late_drops", "collapsed",
         "final_format_rate", "final_entropy", "early_entropy", "skipped"]  # fmt: skip
NONFINITE_COLUMNS = ["run_id", "seed", "status", "steps_done", "skipped", "first_skipped_step", "weights_finite", "initial_eval", "final_eval"]
CURVE_VALUES = ["eval_accuracy", "format_rate", "entropy", "entropy_coef", "lr", "ndigit", "skipped", "frac_zero_std"]


# ----------------------------------------------------------------------------- statistics
def five_points(evals: pd.DataFrame, steps: int) -> pd.DataFrame:
    """The evaluations nearest to 0, 25, 50, 75 and 100% of a run's `steps`."""
    idx = [(evals["step"] - f * steps).abs().idxmin() for f in FRACTIONS]
    out = evals.loc[idx, ["step", "eval_accuracy"]].reset_index(drop=True)
    out.insert(0, "point", range(len(FRACTIONS)))
    return out


def run_stats(run) -> dict:
    """One run's outcome; a run without a result keeps NaN statistics (never invented)."""
    spec = run.spec
    row = {"variant": spec.variant, "seed": spec.seed, "run_id": spec.run_id, "status": run.status, "algorithm": spec.settings["algorithm"]}
    if not run.ok:
        return row
    m, e, half = run.metrics, run.evals, spec.settings["steps"] / 2
    mid = five_points(e, spec.settings["steps"]).loc[2, "eval_accuracy"]
    row.update(
        initial_eval=run.initial_eval, final_eval=run.summary["final"]["eval_accuracy"],
        best_eval=run.summary["best"]["eval_accuracy"], drops=summed_drops(e["eval_accuracy"]),
        late_drops=summed_drops(e.loc[e["step"] >= half, "eval_accuracy"]), collapsed=float(collapsed(run)),
        final_format_rate=float(m["format_rate"].iloc[-1]), final_entropy=float(m["entropy"].iloc[-1]),
        early_entropy=float(m.loc[m["step"] <= half, "entropy"].mean()), skipped=float(m["skipped"].fillna(0).sum()),
    )  # fmt: skip
    row["gain"], row["mid_gain"] = row["final_eval"] - row["initial_eval"], mid - row["initial_eval"]
    return row


def effect(diff: float, se: float) -> str:
    """A plain word for a difference of means: beyond two standard errors (and one point)."""
    if diff is None or math.isnan(diff):
        return "no data"
    noise = max(2 * se if se == se else 0.0, NOISE_FLOOR)
    return "higher" if diff > noise else "lower" if diff < -noise else "no clear difference"


def variants_table(per_run: pd.DataFrame, settings: dict) -> pd.DataFrame:
    """Per variant: its settings, mean, std and n of every statistic, and the comparison with `exact`."""
    out = mean_spread(per_run, ["variant"], STATS[1:2] + STATS[:1] + STATS[2:])  # n counts final evals
    out.insert(1, "settings", [", ".join(f"{k}={val}" for k, val in (settings.get(x) or {}).items()) or "defaults" for x in out["variant"]])
    g = per_run.groupby("variant", sort=False)
    out.insert(2, "algorithm", g["algorithm"].first().values if len(per_run) else [])
    out.insert(4, "n_runs", g.size().values if len(per_run) else [])
    out["collapses"] = g["collapsed"].sum(min_count=1).values if len(per_run) else []
    base = out[out["variant"] == BASELINE]
    b_mean, b_std, b_n = (base.iloc[0][k] for k in ("final_eval_mean", "final_eval_std", "n")) if len(base) else (math.nan,) * 3
    out["diff_vs_exact"] = out["final_eval_mean"] - b_mean
    se = ((out["final_eval_std"] ** 2 / out["n"]) + (b_std**2 / b_n)) ** 0.5 if b_n else math.nan
    out["effect"] = [effect(d, s) for d, s in zip(out["diff_vs_exact"], pd.Series(se, index=out.index))]
    out.loc[out["variant"] == BASELINE, "effect"] = "baseline"
    return out


def segment_rows(run) -> list[dict]:
    """Each of the five points with the rollouts behind it: format rate and the share of
    zero-std groups over the steps since the previous point (point 0: step 1's rollouts,
    which the warm-up policy sampled)."""
    pts, m, rows, prev = five_points(run.evals, run.spec.settings["steps"]), run.metrics, [], -1
    for p in pts.itertuples():
        seg = m[m["step"] == 1] if p.step == 0 else m[(m["step"] > prev) & (m["step"] <= p.step)]
        rows.append({"variant": run.spec.variant, "seed": run.spec.seed, "point": p.point, "step": p.step,
                     "eval_accuracy": p.eval_accuracy, "format_rate": seg["format_rate"].mean(),
                     "frac_zero_std": seg["frac_zero_std"].mean()})  # fmt: skip
        prev = p.step
    return rows


def curve_table(runs) -> pd.DataFrame:
    """Per variant and step: the mean and std across seeds of each logged metric (step 0 is
    the evaluation before RL); n is the number of runs that reached the step."""
    frames = []
    for r in runs:
        if r.ok:
            m = r.metrics.reindex(columns=["step"] + CURVE_VALUES)
            m = pd.concat([pd.DataFrame({"step": [0], "eval_accuracy": [r.initial_eval]}), m], ignore_index=True)
            frames.append(m.assign(variant=r.spec.variant, seed=r.spec.seed))
    if not frames:
        return mean_spread(pd.DataFrame(), ["variant", "step"], CURVE_VALUES)
    long = pd.concat(frames, ignore_index=True)
    out = mean_spread(long, ["variant", "step"], CURVE_VALUES)
    out["n"] = long.groupby(["variant", "step"], sort=False).size().values
    return out


def nonfinite_table(runs) -> pd.DataFrame:
    """The huge-LR runs one by one: did the guard skip updates, and did the weights stay finite?

    Weights count as finite when the run ended with a result and its final evaluation and
    last step's entropy (a forward pass through the final weights) are finite numbers."""
    rows = []
    for r in runs:
        row = {"run_id": r.spec.run_id, "seed": r.spec.seed, "status": r.status, "steps_done": math.nan, "skipped": math.nan,
               "first_skipped_step": math.nan, "weights_finite": None, "initial_eval": math.nan, "final_eval": math.nan}  # fmt: skip
        if r.ok:
            m, final = r.metrics, r.summary["final"]["eval_accuracy"]
            hits = m.loc[m["skipped"].fillna(0) > 0, "step"]
            row.update(steps_done=len(m), skipped=int(len(hits)), first_skipped_step=float(hits.iloc[0]) if len(hits) else math.nan,
                       weights_finite=bool(math.isfinite(final) and math.isfinite(m["entropy"].iloc[-1])),
                       initial_eval=r.initial_eval, final_eval=final)  # fmt: skip
        rows.append(row)
    return pd.DataFrame(rows, columns=NONFINITE_COLUMNS)


# ----------------------------------------------------------------------------- verdicts
def _get(v: pd.DataFrame, variant: str, col: str) -> float:
    hit = v.loc[v["variant"] == variant, col] if len(v) and col in v else pd.Series(dtype=float)
    return float(hit.iloc[0]) if len(hit) and pd.notna(hit.iloc[0]) else math.nan


def compare(a: float, b: float, strict: bool = False) -> tuple[float, bool | None]:
    """(a − b, whether a ≥ b, or a > b when strict); None when either is missing."""
    d = a - b
    return d, None if math.isnan(d) else bool(d > 0 if strict else d >= 0)


def no_collapse(collapses: float, n: float) -> bool | None:
    return None if math.isnan(collapses) or not n else bool(collapses == 0)


def guard_works(nonfinite: pd.DataFrame) -> bool | None:
    """Every huge-LR run with a result skipped at least one update and kept finite weights."""
    ok = nonfinite[nonfinite["status"].isin(["complete", "stopped_nonfinite"])] if len(nonfinite) else nonfinite
    if ok.empty:
        return None
    return bool((ok["skipped"] > 0).all() and ok["weights_finite"].astype(str).eq("True").all())


def criteria(v: pd.DataFrame, nonfinite: pd.DataFrame) -> pd.DataFrame:
    """The document's expectations as checks over the variants and the huge-LR runs."""
    g = lambda variant, col: _get(v, variant, col)  # noqa: E731
    coll = g("reward_norm", "collapses") + g("adv_norm_clip", "collapses")
    ok = nonfinite[nonfinite["status"].isin(["complete", "stopped_nonfinite"])] if len(nonfinite) else nonfinite
    rows = [
        ("shaping", "shaped reward learns at least as fast as binary exact-match reward",
         "mid-run eval-accuracy gain: shaped − exact ≥ 0", *compare(g("shaped", "mid_gain_mean"), g(BASELINE, "mid_gain_mean"))),
        ("penalty", "an invalid-output penalty reduces invalid output",
         "final format rate: with penalty − without ≥ 0", *compare(g("shaped_penalty", "final_format_rate_mean"), g("shaped", "final_format_rate_mean"))),
        ("normalisation", "reward normalisation and advantage normalisation + clipping avoid collapse",
         "0 collapsed runs (reward_norm + adv_norm_clip)", coll, no_collapse(coll, g("reward_norm", "n") + g("adv_norm_clip", "n"))),
        ("entropy", "a decaying entropy bonus keeps entropy higher early",
         "first-half mean entropy: schedule − exact > 0", *compare(g("entropy_schedule", "early_entropy_mean"), g(BASELINE, "early_entropy_mean"), strict=True)),
        ("lr", "cosine LR decay avoids late instability",
         "second-half summed eval drops: constant − cosine ≥ 0", *compare(g(BASELINE, "late_drops_mean"), g("cosine_lr", "late_drops_mean"))),
        ("curriculum", "a curriculum (1 digit first, then 2) helps",
         "final eval accuracy: curriculum − exact > 0", *compare(g("curriculum", "final_eval_mean"), g(BASELINE, "final_eval_mean"), strict=True)),
        ("guard", "a huge LR without clipping produces non-finite values; the guard catches them",
         "fewest skipped updates of a huge_lr run > 0, weights finite", float(ok["skipped"].min()) if len(ok) else math.nan,
         guard_works(nonfinite)),
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=["key", "criterion", "expected", "measured", "passed"])


def tables(ctx) -> dict[str, pd.DataFrame]:
    runs = ctx.experiment("collapse")
    per_run = pd.DataFrame([run_stats(r) for r in runs], columns=["variant", "seed", "run_id", "status", "algorithm"] + STATS)
    v = variants_table(per_run, ctx.cfg["experiments"].get("collapse", {}).get("variants") or {})
    design = pd.DataFrame([row for r in runs if r.ok and r.spec.variant in REWARD_DESIGNS for row in segment_rows(r)],
                          columns=["variant", "seed", "point", "step", "eval_accuracy", "format_rate", "frac_zero_std"])  # fmt: skip
    design = mean_spread(design, ["variant", "point", "step"], ["eval_accuracy", "format_rate", "frac_zero_std"])
    nonfinite = nonfinite_table([r for r in runs if r.spec.variant == "huge_lr"])
    return {"collapse_variants": v, "collapse_reward_design": design, "collapse_nonfinite": nonfinite,
            "collapse_curves": curve_table(runs), "collapse_criteria": criteria(v, nonfinite)}  # fmt: skip


# ----------------------------------------------------------------------------- figures
def band(*args):
    from mathrl.plots import band as draw  # imported late: mathrl.plots imports the studies

    draw(*args)


def placeholder(ax, text):
    from mathrl.plots import placeholder as draw

    draw(ax, text)


COLORS = plt.get_cmap("tab10").colors  # the same palette as mathrl.plots.COLORS
def _curves(ax, c, variants, col, title, ylabel):
    """One band per variant of `col` over steps, or a placeholder when none has data."""
    drawn = 0
    for i, variant in enumerate(variants):
        d = c[(c["variant"] == variant) & c[f"{col}_mean"].notna()] if len(c) else c
        if len(d):
            band(ax, d["step"], d[f"{col}_mean"], d[f"{col}_std"], variant, COLORS[i % len(COLORS)])
            drawn += 1
    if not drawn:
        placeholder(ax, f"no data: {', '.join(variants)} missing")
    else:
        ax.legend()
    ax.set(title=title, xlabel="RL step", ylabel=ylabel)


def fig_reward_design(t) -> plt.Figure:
    c = t["collapse_curves"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    _curves(axes[0], c, REWARD_DESIGNS, "eval_accuracy", "Held-out accuracy by reward design", "eval accuracy")
    _curves(axes[1], c, REWARD_DESIGNS, "format_rate", "Well-formed answers in rollouts", "format rate")
    fig.suptitle("Reward design on 2-digit multiplication (mean ± std across seeds)")
    return fig


def fig_variants(t) -> plt.Figure:
    v = t["collapse_variants"]
    fig, ax = plt.subplots(figsize=(9, 3.8))
    if v.empty:
        placeholder(ax, "no data: the collapse runs are missing")
    else:
        x = range(len(v))
        ax.bar(x, v["final_eval_mean"].fillna(0), yerr=v["final_eval_std"].fillna(0), color=COLORS[0], capsize=3, label="final (mean ± std)")
        for i, n in zip(x, v["n"]):
            ax.annotate(f"n={int(n)}" if n else "missing", (i, 0), ha="center", va="bottom", fontsize=7, color="0.2")
        base = _get(v, BASELINE, "final_eval_mean")
        if not math.isnan(base):
            ax.axhline(base, color=COLORS[3], linestyle="--", label=f"{BASELINE} baseline")
        ax.set_xticks(list(x), v["variant"], rotation=30, ha="right")
        ax.legend()
    ax.set(title="Final held-out accuracy per variant", xlabel="variant", ylabel="final eval accuracy")
    return fig


def fig_schedules(t) -> plt.Figure:
    c = t["collapse_curves"]
    fig, axes = plt.subplots(2, 2, figsize=(10, 6.5))
    _curves(axes[0, 0], c, ["entropy_schedule", BASELINE], "entropy", "Policy entropy", "mean token entropy")
    _curves(axes[0, 1], c, ["cosine_lr", BASELINE], "lr", "Learning rate", "lr")
    _curves(axes[1, 0], c, ["curriculum"], "ndigit", "Curriculum: operand digits", "ndigit")
    _curves(axes[1, 1], c, ["entropy_schedule", "cosine_lr", "curriculum", BASELINE], "eval_accuracy", "Held-out accuracy", "eval accuracy")
    fig.suptitle("Entropy bonus schedule, LR schedule and curriculum")
    fig.tight_layout()
    return fig


def fig_nonfinite(t) -> plt.Figure:
    c = t["collapse_curves"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    _curves(axes[0], c, ["huge_lr"], "skipped", "Updates skipped by the non-finite guard", "share of runs skipping")
    _curves(axes[1], c, ["huge_lr", BASELINE], "eval_accuracy", "Held-out accuracy", "eval accuracy")
    fig.suptitle("LR 1.0 without gradient clipping")
    return fig


def figures(t) -> dict[str, plt.Figure]:
    return {"collapse_reward_design": fig_reward_design(t), "collapse_variants": fig_variants(t),
            "collapse_schedules": fig_schedules(t), "collapse_nonfinite": fig_nonfinite(t)}  # fmt: skip


# ----------------------------------------------------------------------------- section
CAUSES = [
    "A learning rate too large for the model: updates overshoot, weights and losses overflow to Inf or NaN.",
    "No gradient clipping: one batch with an outsized gradient is enough to wreck the weights.",
    "Sparse, binary rewards: most groups of rollouts earn the same score, so advantages carry no signal.",
    "No entropy bonus: the policy turns deterministic too early, and its later updates become erratic.",
    "Targets too hard for the model: it never produces a rewarded answer and drifts towards garbage output.",
]


def ms(v: pd.DataFrame, variant: str, col: str, pct: bool = True) -> str:
    """'mean ± std (n=k)' of a variant's statistic, as text for a verdict."""
    m, s, n = _get(v, variant, f"{col}_mean"), _get(v, variant, f"{col}_std"), _get(v, variant, "n")
    if math.isnan(m):
        return "no data"
    f = (lambda x: f"{100 * x:.1f}%") if pct else (lambda x: f"{x:.3g}")
    return f"{f(m)} ± {f(s) if not math.isnan(s) else '–'} (n={int(n)})"


def verdict(passed, text: str) -> dict:
    """A verdict paragraph: the measured numbers, then agrees / disagrees (or no data)."""
    p = True if str(passed) == "True" else False if str(passed) == "False" else None  # bools read back from CSV too
    tail = {True: ": agrees.", False: ": disagrees (a finding, not an error).", None: ": not enough data to judge."}[p]
    return {"text": text + tail, "cls": {True: "agrees", False: "disagrees", None: ""}[p]}


def section(t) -> dict:
    v, crit, d = t["collapse_variants"], t["collapse_criteria"], t["collapse_reward_design"]
    passed = {r.key: r.passed for r in crit.itertuples()} if len(crit) else {}
    zs = {r.variant: r.frac_zero_std_mean for r in d[d["point"] == 0].itertuples()} if len(d) else {}
    z = lambda k: "–" if k not in zs or pd.isna(zs[k]) else f"{100 * zs[k]:.0f}%"  # noqa: E731
    nf = t["collapse_nonfinite"] if len(t["collapse_nonfinite"]) else pd.DataFrame(columns=NONFINITE_COLUMNS)
    ok = nf[nf["status"].isin(["complete", "stopped_nonfinite"])]
    first = ok["first_skipped_step"].min() if len(ok) else math.nan
    texts = {
        "shaping": f"Half-way through the run, shaped reward had gained {ms(v, 'shaped', 'mid_gain')} held-out accuracy against "
                   f"{ms(v, BASELINE, 'mid_gain')} for exact-match; at the start {z('exact')} of exact-match groups had no reward "
                   f"spread against {z('shaped')} with shaping",
        "penalty": f"Final format rate with the penalty {ms(v, 'shaped_penalty', 'final_format_rate')} against "
                   f"{ms(v, 'shaped', 'final_format_rate')} without it",
        "normalisation": f"Collapsed runs: reward_norm {fmt_count(v, 'reward_norm')}, adv_norm_clip {fmt_count(v, 'adv_norm_clip')}, "
                         f"exact {fmt_count(v, BASELINE)}",
        "entropy": f"Mean entropy over the first half: {ms(v, 'entropy_schedule', 'early_entropy', False)} with the schedule against "
                   f"{ms(v, BASELINE, 'early_entropy', False)} without a bonus",
        "lr": f"Summed eval-accuracy drops in the second half: {ms(v, 'cosine_lr', 'late_drops')} with cosine decay against "
              f"{ms(v, BASELINE, 'late_drops')} at a constant LR",
        "curriculum": f"Final held-out accuracy {ms(v, 'curriculum', 'final_eval')} with the curriculum against {ms(v, BASELINE, 'final_eval')}",
        "guard": f"{len(ok)} of {len(nf)} huge_lr runs have a result; skipped updates per run {', '.join(str(int(s)) for s in ok['skipped']) or '–'}"
                 f" (first at step {'–' if pd.isna(first) else int(first)}); weights finite in "
                 f"{int(ok['weights_finite'].astype(str).eq('True').sum()) if len(ok) else 0} of {len(ok)}",
    }  # fmt: skip
    setting = lambda variant: (v.loc[v["variant"] == variant, "settings"].tolist() or ["not run"])[0] if len(v) else "not run"  # noqa: E731
    return {"causes": CAUSES, "algorithm": (v.loc[v["variant"] == BASELINE, "algorithm"].tolist() or ["–"])[0] if len(v) else "–",
            "settings": {k: setting(k) for k in ("shaped", "shaped_penalty", "reward_norm", "adv_norm_clip", "entropy_schedule", "cosine_lr", "curriculum", "huge_lr")}, "collapse_definition": COLLAPSE_DEFINITION, "variants": v, "reward_design": d,
            "nonfinite": nf, "criteria": crit, "verdicts": {k: verdict(passed.get(k), s) for k, s in texts.items()}}  # fmt: skip


def fmt_count(v: pd.DataFrame, variant: str) -> str:
    c, n = _get(v, variant, "collapses"), _get(v, variant, "n")
    return "no data" if math.isnan(c) else f"{int(c)} of {int(n)}"
