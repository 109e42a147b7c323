"""Lab 04, the core challenges of RL training: entropy collapse, vanishing gradients when
every reward of a batch is equal, and reward hacking; on the 3-armed bandit (mathrl.bandit)
and on the GPT (experiment `lab04_gpt`, where DAPO is tried as the remedy).

Bandit tables hold one row per (setting, seed), then a pooled row per setting with seed
`all`: there the value columns hold the mean across seeds, `{v}_std` their sample std and
`n` the seeds found (a missing seed is a row of NaN with n = 0). GPT tables follow
`mean_spread`: `{v}_mean`, `{v}_std`, `n` (runs with a result) and `expected`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from mathrl import bandit_config as bandit  # the study's settings; no torch for tables and figures
from mathrl.results import mean_spread
from mathrl.studies.kit import COLORS, band, engaged, judged, known, per_seed, placeholder, plt, power_note, roles, verdict_frame, verdict_rows
from mathrl.verdict import Claim, Estimate, Verdict, difference, mean_interval, rate_difference, wilson

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NAME = "lab04"
TITLE = "Lab 04: entropy collapse, vanishing gradients and reward hacking"
DOCUMENT = "lab04-training-challenges.md"

EXPERIMENT = "lab04_gpt"
ROLES = ("normal", "aggressive", "clip_higher", "remedy", "proxy", "random_policy", "perfect_policy")
ENTROPY_FALL = 0.10  # the aggressive setting shows entropy collapse: token entropy falls by at least this share...
CLIP_BINDS = 0.01  # an upper clip binds: at least this share of tokens clipped by it (clip_frac_high)
COV_ACTS = 1e-4  # Clip-Cov / KL-Cov acted: at least this share of answer tokens chosen by the covariance rule (cov_frac)
# Optional roles: the covariance remedies of arXiv 2505.22617, judged like clip-higher where an experiment names them
# (config/full.yaml does; the default leaves them out of its budget).
COV_REMEDIES = {"clip_cov": "Clip-Cov", "kl_cov": "KL-Cov"}
DYNAMIC = 1.05  # dynamic sampling acted: at least this many rollouts drawn per rollout kept
EQUAL_SAMPLES = (0.75, 1.33)  # "equal samples": the remedy's total rollouts within this ratio of the reference's
NONINFERIOR_MARGIN = 0.02  # accuracy that counts as "no worse" (1.3 standard errors at 50% on 1000 problems)
BANDIT_WINDOW = 10  # bandit steps averaged for a start or end value, and the rolling window of the peak
GPT_WINDOW = 5  # GPT steps averaged for the start or end of a per-step metric; at most half a run, so the two never overlap
DOMINANT = 0.9  # an arm holding this much probability is where the policy converged (bandit.converged_to)
NO_SIGNAL = 0.95  # frac_zero_std at or above this: (almost) no group carries a learning signal
SEVERITY_DEFINITION = "mild: the mean gradient norm fell by less than 50%; moderate: by 50-90%; severe: by more than 90%"
METRICS = ["entropy", "p0", "p1", "p2", "p3", "loss", "grad_norm", "reward_std", "reward_mean", "proxy_reward", "true_reward"]


# ---- verdicts: small pure functions of table values ------------------------------------
def reduction(start: float, end: float) -> float:
    """Relative decrease from start to end: 1 when it fell to zero, NaN when start is 0 or unknown."""
    return math.nan if (not known(start)) or (not known(end)) or start == 0 else 1 - end / start


def severity(red: float) -> str:
    """The gradient-vanishing severity of a reduction (SEVERITY_DEFINITION)."""
    return "unknown" if (not known(red)) else "severe" if red > 0.9 else "moderate" if red >= 0.5 else "mild"


def check(value: float, test) -> bool | None:
    """test(value), or None when the value could not be measured."""
    return None if (not known(value)) else bool(test(value))


def hacked(proxy_start: float, proxy_end: float, true_start: float, true_end: float) -> bool | None:
    """Reward hacking: the optimised (proxy) score rose while the true reward fell."""
    if any((not known(x)) for x in (proxy_start, proxy_end, true_start, true_end)):
        return None
    return proxy_end > proxy_start and true_end < true_start


def as_passed(v) -> bool | None:
    """A `passed` cell read back from CSV: True, False or None (not measured)."""
    return None if (not known(v)) or v == "" else str(v).lower() in ("true", "1", "1.0")


def global_found(labels: list[str]) -> str:
    """The lab report's 'global optimum found' box from per-seed converged_to labels."""
    labels = [x for x in labels if x in ("global", "local", "none")]
    k = sum(x == "global" for x in labels)
    word = "no data" if not labels else "yes" if k == len(labels) else "no" if k == 0 else "partly"
    return f"{word} ({k} of {len(labels)} seeds)"


def num(x, spec: str = ".3g") -> str:
    """A number in a generated sentence; a dash when it is missing."""
    return "–" if (not known(x)) else format(x, spec)


# ---- tables: from the files alone ------------------------------------------------------
def _pooled(per: pd.DataFrame, by: list[str], values: list[str]) -> pd.DataFrame:
    """Per-seed rows followed, per group, by a row with seed 'all' (mean, {v}_std, n)."""
    per = per.assign(n=per[values[0]].notna().astype(int))
    parts = []
    for _, g in per.groupby(by, sort=False):
        s = mean_spread(g, by, values).rename(columns={f"{v}_mean": v for v in values})
        parts += [g, s.assign(seed="all")]
    return pd.concat(parts, ignore_index=True) if parts else per


def _expected(ctx, study: str, df: pd.DataFrame | None) -> list[tuple[str, int, pd.DataFrame]]:
    """(setting, seed, its rows by step) for every setting and seed the config asks of a study;
    an empty frame where the study's CSV lacks them."""
    cfg = bandit.resolve(ctx.cfg.get("bandit"))
    out = []
    for setting in cfg["studies"][study]["settings"]:
        for seed in bandit.study_seeds(cfg, study):
            g = pd.DataFrame() if df is None else df[(df["setting"] == setting) & (df["seed"] == int(seed))]
            out.append((setting, int(seed), g.sort_values("step") if len(g) else g))
    return out


def entropy_table(ctx) -> pd.DataFrame:
    """Per setting and seed: entropy at the first and last step, its reduction, the dominant
    action at the last step and where the policy converged (bandit.converged_to)."""
    best = int(np.argmax(bandit.resolve(ctx.cfg.get("bandit"))["arm_rewards"]))  # the global optimum (action 1 in the document)
    rows = []
    for setting, seed, g in _expected(ctx, "entropy_collapse", ctx.bandit("entropy_collapse")):
        row = {"setting": setting, "seed": seed, "initial_entropy": math.nan, "final_entropy": math.nan, "reduction": math.nan,
               "dominant_action": math.nan, "dominant_prob": math.nan, "global_share": math.nan, "initial_best_prob": math.nan, "converged_to": "missing"}  # fmt: skip
        if len(g):
            first, last = g.iloc[0], g.iloc[-1]
            probs = [float(last[f"p{i}"]) for i in range(3)]
            top = int(np.argmax(probs))
            label = bandit.converged_to(*probs, threshold=DOMINANT, best_arm=best)
            row.update(initial_entropy=first["entropy"], final_entropy=last["entropy"], dominant_action=top, dominant_prob=probs[top], initial_best_prob=float(first[f"p{best}"]),
                       reduction=reduction(first["entropy"], last["entropy"]), converged_to=label, global_share=float(label == "global"))  # fmt: skip
        rows.append(row)
    out = _pooled(pd.DataFrame(rows), ["setting"], ["initial_entropy", "final_entropy", "reduction", "dominant_prob", "global_share", "initial_best_prob"])
    for setting, g in out[out["seed"] != "all"].groupby("setting", sort=False):
        labels = g["converged_to"].tolist()
        pooled = (out["setting"] == setting) & (out["seed"] == "all")
        out.loc[pooled, "converged_to"] = ", ".join(f"{k} {labels.count(k)}" for k in ("global", "local", "none") if k in labels) or "missing"
        actions = g["dominant_action"].dropna().unique()
        out.loc[pooled, "dominant_action"] = actions[0] if len(actions) == 1 else math.nan
    return out


BIASED = ("aggressive_biased", "normal_biased")  # the entropy-collapse settings that start away from the global optimum
BIASED_START = 0.05  # a start is biased when the global arm's initial probability is at most this


def local_optima_table(ent: pd.DataFrame) -> pd.DataFrame:
    """Per setting: how many seeds ended at the global optimum, a local one or neither, and the
    local-optimum rate with its 95% Wilson interval."""
    per = _per_seed_rows(ent)
    rows = []
    for setting, g in per.groupby("setting", sort=False):
        labels = g["converged_to"].tolist()
        n = sum(x in ("global", "local", "none") for x in labels)
        k = labels.count("local")
        lo, hi = wilson(k, n)
        rows.append({"setting": setting, "n": n, "global": labels.count("global"), "local": k, "none": labels.count("none"),
                     "local_rate": k / n if n else math.nan, "local_rate_lo": lo, "local_rate_hi": hi,
                     "initial_best_prob": g["initial_best_prob"].mean()})  # fmt: skip
    return pd.DataFrame(rows, columns=["setting", "n", "global", "local", "none", "local_rate", "local_rate_lo", "local_rate_hi", "initial_best_prob"])


def vanishing_table(ctx) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per seed and pooled: mean gradient norm and reward std per phase, their correlation; and the points."""
    df = ctx.bandit("gradient_vanishing")
    rows, points = [], []
    for setting, seed, g in _expected(ctx, "gradient_vanishing", df):
        row = {"setting": setting, "seed": seed}
        for phase in ("homogeneous", "diverse"):
            ph = g[g["phase"] == phase] if len(g) else g
            row[f"grad_norm_{phase}"] = ph["grad_norm"].mean() if len(ph) else math.nan
            row[f"reward_std_{phase}"] = ph["reward_std"].mean() if len(ph) else math.nan
        row["reduction"] = reduction(row["grad_norm_diverse"], row["grad_norm_homogeneous"])
        row["corr_grad_reward_std"] = g["grad_norm"].corr(g["reward_std"]) if len(g) > 2 else math.nan
        rows.append(row)
        if len(g):
            points.append(g[["setting", "seed", "step", "phase", "grad_norm", "reward_std"]])
    values = ["grad_norm_homogeneous", "grad_norm_diverse", "reduction", "reward_std_homogeneous", "reward_std_diverse", "corr_grad_reward_std"]
    out = _pooled(pd.DataFrame(rows), ["setting"], values)
    pts = pd.concat(points, ignore_index=True) if points else pd.DataFrame(columns=["setting", "seed", "step", "phase", "grad_norm", "reward_std"])
    for setting, p in pts.groupby("setting"):  # the pooled correlation is over every step of every seed
        out.loc[(out["setting"] == setting) & (out["seed"] == "all"), "corr_grad_reward_std"] = p["grad_norm"].corr(p["reward_std"])
    out["severity"] = out["reduction"].map(severity)
    return out, pts


def hacking_table(ctx) -> pd.DataFrame:
    """Per seed: proxy score and true reward at the start and end, the true reward's rolling
    peak, the overrated arm's final share, and whether the proxy was exploited."""
    study = bandit.resolve(ctx.cfg.get("bandit"))["studies"]["reward_hacking"]
    proxy = bandit.proxy_scores(study["arm_lengths"], study["true_rewards"], study["labelled_arms"])
    unlabelled = [a for a in range(len(proxy)) if a not in study["labelled_arms"]] or list(range(len(proxy)))
    hack_arm = max(unlabelled, key=proxy.__getitem__)  # the arm the proxy overrates: never labelled, scored highest
    rows = []
    for setting, seed, g in _expected(ctx, "reward_hacking", ctx.bandit("reward_hacking")):
        row = {"setting": setting, "seed": seed, "hack_arm": hack_arm}
        if len(g):
            head, tail = g.head(BANDIT_WINDOW), g.tail(BANDIT_WINDOW)
            rolling = g["true_reward"].rolling(BANDIT_WINDOW, min_periods=1).mean()
            row.update(proxy_start=head["proxy_reward"].mean(), proxy_end=tail["proxy_reward"].mean(), true_start=head["true_reward"].mean(),
                       true_peak=rolling.max(), true_peak_step=float(g["step"].iloc[int(np.argmax(rolling.to_numpy()))]),
                       true_end=tail["true_reward"].mean(), hack_share_end=float(g[f"p{hack_arm}"].iloc[-1]))  # fmt: skip
        rows.append(row)
    values = ["proxy_start", "proxy_end", "true_start", "true_peak", "true_peak_step", "true_end", "hack_share_end"]
    out = _pooled(pd.DataFrame(rows).reindex(columns=["setting", "seed", "hack_arm", *values]), ["setting"], values)
    out["hack_arm"] = hack_arm
    out["hacked"] = [hacked(r.proxy_start, r.proxy_end, r.true_start, r.true_end) for r in out.itertuples()]
    return out


def bandit_curves(ctx) -> pd.DataFrame:
    """Per study, setting and step: mean and std of every metric across seeds (for the figures)."""
    frames = []
    for study in bandit.BANDIT_STUDIES:
        df = ctx.bandit(study)
        if df is not None and len(df):
            df = df.assign(phase=df["phase"].astype(object).fillna(""))
            frames.append(mean_spread(df, ["study", "setting", "step", "phase"], [m for m in METRICS if m in df]))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["study", "setting", "step", "phase", "n"])


GPT_VALUES = ["accuracy_start", "accuracy_end", "eval_start", "eval_end", "entropy_start", "entropy_end", "entropy_reduction",
              "frac_zero_std", "grad_norm", "reward_start", "reward_end", "accuracy_gain", "clip_frac", "clip_frac_high", "samples", "draws_per_rollout", "cov_frac"]  # fmt: skip


def gpt_runs(ctx) -> pd.DataFrame:
    """One row per lab04_gpt run (missing ones included, with NaN values)."""
    rows = []
    for run in ctx.experiment(EXPERIMENT):
        row = {"run_id": run.spec.run_id, "variant": run.spec.variant or "", "seed": run.spec.seed, "status": run.status}
        if run.ok:
            m = run.metrics.sort_values("step")
            window = max(1, min(GPT_WINDOW, len(m) // 2))  # DAPO's 8-step runs: steps 1-4 against 5-8
            head, tail, evals = m.head(window), m.tail(window), run.evals["eval_accuracy"]
            row.update(accuracy_start=head["accuracy"].mean(), accuracy_end=tail["accuracy"].mean(), eval_start=evals.iloc[0], eval_end=evals.iloc[-1],
                       entropy_start=head["entropy"].mean(), entropy_end=tail["entropy"].mean(), frac_zero_std=m["frac_zero_std"].mean(),
                       grad_norm=m["grad_norm"].mean(), reward_start=head["reward_mean"].mean(), reward_end=tail["reward_mean"].mean())  # fmt: skip
            row["entropy_reduction"] = reduction(row["entropy_start"], row["entropy_end"])
            st = run.settings
            row.update(accuracy_gain=row["accuracy_end"] - row["accuracy_start"], clip_frac=m["clip_frac"].mean(),
                       clip_frac_high=m["clip_frac_high"].mean() if "clip_frac_high" in m else math.nan, samples=float(m["samples"].iloc[-1]),
                       draws_per_rollout=float(m["samples"].iloc[-1]) / (len(m) * st["batch_size"]),
                       cov_frac=m["cov_frac"].mean() if "cov_frac" in m else math.nan)  # fmt: skip
        rows.append(row)
    return pd.DataFrame(rows).reindex(columns=["run_id", "variant", "seed", "status", *GPT_VALUES])


def gpt_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per variant: mean and std across seeds; n counts runs with a result, expected all of them."""
    out = mean_spread(runs, ["variant"], GPT_VALUES)
    if len(runs):
        g = runs.groupby("variant", sort=False)
        out["n"] = out["variant"].map(g["status"].agg(lambda s: int(s.isin(["complete", "stopped_nonfinite"]).sum())))
        out["expected"] = out["variant"].map(g.size())
    return out


def _row(df: pd.DataFrame, **where) -> dict:
    """The one row matching `where` as a dict (empty when absent)."""
    if df.empty or any(k not in df for k in where):
        return {}
    mask = np.logical_and.reduce([df[k].astype(str) == str(v) for k, v in where.items()])
    return df[mask].iloc[0].to_dict() if mask.any() else {}


def _per_seed(df: pd.DataFrame, setting: str) -> pd.DataFrame:
    """The per-seed rows (not the pooled one) of one setting."""
    return df[(df["seed"].astype(str) != "all") & (df["setting"] == setting)] if len(df) else pd.DataFrame(columns=["converged_to"])


def _get(d: dict, key: str) -> float:
    """A value of a `_row` dict; NaN when the row or the column is missing."""
    return d.get(key, math.nan)


def _shift(values: dict, by: float) -> dict:
    return {k: v - by for k, v in values.items()}


def verdicts(ent, van, hack, runs, role: dict) -> list[Verdict]:
    """The document's expectations, each as a mean or a paired difference over seeds with its 95% interval."""
    seeds = lambda df, col, **w: per_seed(_per_seed_rows(df), col, **w)  # noqa: E731
    out = []

    def add(part, key, text, measure, est, **claim):
        out.append(Verdict(Claim(key, text, measure, **claim), est, extra={"part": part}))

    aggr = lambda col: seeds(ent, col, setting="aggressive")  # noqa: E731
    add("entropy", "bandit_initial_entropy", "Bandit, aggressive: initial policy entropy about 1.1", "initial entropy − 1.1 (equivalence within ±0.1)",
        mean_interval(_shift(aggr("initial_entropy"), 1.1)), kind="equivalence", margin=0.1)
    add("entropy", "bandit_final_entropy", "Bandit, aggressive: final policy entropy about 0.1", "final entropy − 0.2", mean_interval(_shift(aggr("final_entropy"), 0.2)), direction=-1)
    labels = _per_seed(ent, "aggressive")["converged_to"].tolist()
    k, n = sum(x == "global" for x in labels), sum(x in ("global", "local", "none") for x in labels)
    lo, hi = wilson(k, n)
    add("entropy", "bandit_global", "Bandit, aggressive: the policy settles on action 1, the global optimum",
        f"share of seeds at the global optimum ({k} of {n}, Wilson interval) − 1/2", Estimate(k / n - 0.5, lo - 0.5, hi - 0.5, n, "one-sample", n) if n else None, unit="pts")
    add("entropy", "bandit_keeps_entropy", "Bandit: the gentle setting keeps more entropy than the aggressive one", "final entropy: normal − aggressive",
        difference(seeds(ent, "final_entropy", setting="normal"), aggr("final_entropy")))
    loc = local_optima_table(ent) if len(ent) else pd.DataFrame(columns=["setting"])
    counts = {r.setting: (int(r.local), int(r.n), r.initial_best_prob) for r in loc.itertuples()}
    if all(b in counts for b in BIASED):
        (ka, na, pa), (kn, nn, pn) = counts[BIASED[0]], counts[BIASED[1]]
        start = [engaged(f"biased start ({b})", "initial probability of the global arm", [p], BIASED_START, direction=-1) for b, p in zip(BIASED, (pa, pn))]
        lo, hi = wilson(ka, na)
        out.append(judged(Claim("bandit_local_reached", "Bandit, aggressive from a biased start: some seeds settle on a local optimum",
                                f"local-optimum rate of {BIASED[0]} ({ka} of {na}, Wilson interval)", unit="pts"),
                          Estimate(ka / na, lo, hi, na, "one-sample", na) if na else None, start[0], extra={"part": "entropy"}))
        out.append(judged(Claim("bandit_local_aggressive", "Bandit, biased start: the aggressive setting settles on a local optimum more often than the normal one",
                                f"local-optimum rate: {BIASED[0]} − {BIASED[1]}", unit="pts"), rate_difference(ka, na, kn, nn), *start,
                          note=f"{ka} of {na} seeds local under the aggressive setting, {kn} of {nn} under the normal one", extra={"part": "entropy"}))  # fmt: skip
    vs = lambda col: seeds(van, col)  # noqa: E731
    add("vanishing", "bandit_homogeneous", "Bandit: the gradient vanishes when every reward of a batch is equal", "mean gradient norm, homogeneous phases − 1e-4",
        mean_interval(_shift(vs("grad_norm_homogeneous"), 1e-4)), direction=-1)
    add("vanishing", "bandit_diverse", "Bandit: the gradient is clearly non-zero when rewards differ", "mean gradient norm, diverse phases − 1e-3",
        mean_interval(_shift(vs("grad_norm_diverse"), 1e-3)))
    add("vanishing", "bandit_reduction", "Bandit: the gradient norm falls by more than 90% with equal rewards", "reduction, homogeneous against diverse, − 90%",
        mean_interval(_shift(vs("reduction"), 0.9)), unit="pct")
    add("vanishing", "bandit_correlation", "Bandit: the gradient norm follows the reward spread", "correlation of gradient norm with reward std (per seed)",
        mean_interval(vs("corr_grad_reward_std")))
    hs = lambda a, b: {s: v - seeds(hack, b).get(s, math.nan) for s, v in seeds(hack, a).items()}  # noqa: E731
    add("hacking", "bandit_proxy_rises", "Bandit: the proxy score rises", "proxy score: end − start", mean_interval(hs("proxy_end", "proxy_start")))
    add("hacking", "bandit_true_falls", "Bandit: the true reward falls", "true reward: end − start", mean_interval(hs("true_end", "true_start")), direction=-1)
    g = lambda r, col: per_seed(runs, col, variant=role[r]) if r in role else {}  # noqa: E731
    gd = lambda r, a, b: {s: v - g(r, b).get(s, math.nan) for s, v in g(r, a).items()}  # noqa: E731
    add("hacking", "gpt_proxy_rises", "GPT with the proxy reward: the training reward (the proxy score) rises", "training reward: end − start",
        mean_interval(gd("proxy", "reward_end", "reward_start")))
    add("hacking", "gpt_accuracy_falls", "GPT with the proxy reward: exact-match accuracy falls", "sampled exact-match accuracy: end − start",
        mean_interval(gd("proxy", "accuracy_end", "accuracy_start")), direction=-1, unit="pts")
    add("gpt", "gpt_entropy_collapse", "GPT: the aggressive setting loses more token entropy than the normal one", "entropy reduction: aggressive − normal",
        difference(g("aggressive", "entropy_reduction"), g("normal", "entropy_reduction")), unit="pct")
    # DAPO's remedies are judged only on a setting that shows the problem (entropy falls while sampled accuracy rises) and where their mechanism acted.
    problem = [engaged("entropy collapse (aggressive)", "token-entropy reduction over the run", g("aggressive", "entropy_reduction"), ENTROPY_FALL),
               engaged("learning (aggressive)", "sampled accuracy, end − start", g("aggressive", "accuracy_gain"), 0.0)]
    def binds(r):  # the upper clip's own share; all clipped tokens (clip_frac) for a metrics file without it
        high = g(r, "clip_frac_high")
        col = "clip_frac_high" if high else "clip_frac"
        return engaged(f"upper clip ({role.get(r, r)})", f"share of tokens clipped ({col})", high or g(r, "clip_frac"), CLIP_BINDS)

    ratio = {s_: v / g("aggressive", "samples")[s_] for s_, v in g("remedy", "samples").items() if g("aggressive", "samples").get(s_)}
    equal = [engaged("equal samples", "rollouts drawn: DAPO / aggressive", ratio, EQUAL_SAMPLES[0]), engaged("equal samples", "rollouts drawn: DAPO / aggressive", ratio, EQUAL_SAMPLES[1], -1)]
    dynamic = engaged("dynamic sampling", "rollouts drawn per rollout kept", g("remedy", "draws_per_rollout"), DYNAMIC)

    def gated(key, text, measure, est, *checks, **claim):
        out.append(judged(Claim(key, text, measure, **claim), est, *checks, extra={"part": "gpt"}))

    gated("gpt_clip_higher_entropy", "GPT: clip-higher keeps more entropy than aggressive GRPO", "final token entropy: clip-higher − aggressive GRPO",
          difference(g("clip_higher", "entropy_end"), g("aggressive", "entropy_end")), *problem, binds("clip_higher"))
    gated("gpt_dapo_entropy", "GPT: DAPO keeps more entropy than aggressive GRPO", "final token entropy: DAPO − aggressive GRPO",
          difference(g("remedy", "entropy_end"), g("aggressive", "entropy_end")), *problem, binds("remedy"), dynamic)
    gated("gpt_dapo_accuracy", "GPT: DAPO is at least as accurate as aggressive GRPO at about equal samples", "final held-out accuracy: DAPO − aggressive GRPO",
          difference(g("remedy", "eval_end"), g("aggressive", "eval_end")), *problem, binds("remedy"), dynamic, *equal,
          kind="noninferior", margin=NONINFERIOR_MARGIN, unit="pts")
    out += cov_verdicts(g, role, problem)
    add("gpt", "gpt_random_no_signal", "GPT from a random policy: (almost) every group has equal rewards", f"share of groups with equal rewards − {NO_SIGNAL}",
        mean_interval(_shift(g("random_policy", "frac_zero_std"), NO_SIGNAL)), unit="pts")
    add("gpt", "gpt_perfect_no_signal", "GPT near-perfect policy: most groups have equal rewards", "share of groups with equal rewards − 1/2",
        mean_interval(_shift(g("perfect_policy", "frac_zero_std"), 0.5)), unit="pts")
    return out


def cov_verdicts(g, role: dict, problem: list) -> list[Verdict]:
    """Clip-Cov and KL-Cov against aggressive GRPO, for the roles a config names; gated like
    clip-higher on the problem being shown and on the covariance rule having acted."""
    out = []
    for r, name in COV_REMEDIES.items():
        if r not in role:
            continue
        acts = engaged(f"covariance rule ({role[r]})", "share of answer tokens it acted on (cov_frac)", g(r, "cov_frac"), COV_ACTS)
        out.append(judged(Claim(f"gpt_{r}_entropy", f"GPT: {name} keeps more entropy than aggressive GRPO", f"final token entropy: {name} − aggressive GRPO"),
                          difference(g(r, "entropy_end"), g("aggressive", "entropy_end")), *problem, acts, extra={"part": "gpt"}))
        out.append(judged(Claim(f"gpt_{r}_accuracy", f"GPT: {name} is at least as accurate as aggressive GRPO", f"final held-out accuracy: {name} − aggressive GRPO",
                                kind="noninferior", margin=NONINFERIOR_MARGIN, unit="pts"),
                          difference(g(r, "eval_end"), g("aggressive", "eval_end")), *problem, acts, extra={"part": "gpt"}))
    return out


def _pooled_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The pooled rows (seed 'all') of a bandit table: one per setting."""
    return df[df["seed"].astype(str) == "all"] if len(df) and "seed" in df else df


def _per_seed_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["seed"].astype(str) != "all"] if len(df) and "seed" in df else df


def _pm(d: dict, key: str, spec: str = ".3g") -> str:
    """'mean ± std' of a pooled row; `key` may be a mean_spread `{v}_mean` column."""
    return f"{num(d.get(key), spec)} ± {num(d.get(key.removesuffix('_mean') + '_std'), spec)}"


def findings(ent, van, hack, gpt) -> list[str]:
    """The lab report's three key findings, written from the measurements (also the
    section's 'measured' sentences of its first three parts)."""
    a, n = _row(ent, setting="aggressive", seed="all"), _row(ent, setting="normal", seed="all")
    keeps = {True: "the normal setting kept more entropy on average", False: "the normal setting did not keep more entropy on average",
             None: "which setting kept more entropy is unknown"}  # fmt: skip
    one = (f"Entropy collapse: the aggressive setting's policy entropy went from {_pm(a, 'initial_entropy')} to {_pm(a, 'final_entropy')} "
           f"({num(a.get('reduction'), '.1%')} lower, n={num(a.get('n'), '.0f')}), the normal setting's to {_pm(n, 'final_entropy')} "
           f"({num(n.get('reduction'), '.1%')} lower, n={num(n.get('n'), '.0f')}): {keeps[check(_get(n, 'final_entropy') - _get(a, 'final_entropy'), lambda x: x > 0)]}; "
           f"global optimum found (aggressive): {global_found(_per_seed(ent, 'aggressive')['converged_to'].tolist())}.")  # fmt: skip
    v = _row(van, seed="all")
    two = (f"Vanishing gradients: with every reward of a batch equal the mean gradient norm was {_pm(v, 'grad_norm_homogeneous')} against "
           f"{_pm(v, 'grad_norm_diverse')} with varied rewards (n={num(v.get('n'), '.0f')} seeds), {num(v.get('reduction'), '.1%')} lower "
           f"({v.get('severity', 'unknown')}); gradient norm and reward std correlated at r = {num(v.get('corr_grad_reward_std'), '.2f')} over all steps.")  # fmt: skip
    h, p = _row(hack, seed="all"), _row(gpt, role="proxy")
    gpt_hacked = hacked(*(p.get(k, math.nan) for k in ("reward_start_mean", "reward_end_mean", "accuracy_start_mean", "accuracy_end_mean")))
    word = {True: "exploited, judging by the means", False: "not exploited, judging by the means", None: "not measured"}
    three = (f"Reward hacking: on the bandit the proxy score went from {_pm(h, 'proxy_start')} to {_pm(h, 'proxy_end')} while the true reward "
             f"went from {_pm(h, 'true_start')} (rolling peak {num(h.get('true_peak'))} near step {num(h.get('true_peak_step'), '.0f')}) to "
             f"{_pm(h, 'true_end')}, the overrated arm {num(h.get('hack_arm'), '.0f')} holding {num(h.get('hack_share_end'), '.1%')} of the policy "
             f"at the end (n={num(h.get('n'), '.0f')}): {word[as_passed(h.get('hacked'))]}. On the GPT (proxy_reward, n={num(p.get('n'), '.0f')}) "
             f"the training reward (proxy score) went from {_pm(p, 'reward_start_mean')} to {_pm(p, 'reward_end_mean')} and sampled "
             f"exact-match accuracy from {_pm(p, 'accuracy_start_mean')} to {_pm(p, 'accuracy_end_mean')}: {word[gpt_hacked]}.")  # fmt: skip
    return [one, two, three]


def report_template(ent, van, hack, gpt) -> pd.DataFrame:
    """The document's lab-report template, filled in (aggressive bandit setting, pooled seeds)."""
    a, v, per = _row(ent, setting="aggressive", seed="all"), _row(van, seed="all"), _per_seed(ent, "aggressive")
    dom = "; ".join(f"seed {r.seed}: action {num(r.dominant_action, '.0f')} (p = {num(r.dominant_prob, '.3f')})" for r in per.itertuples())
    n = f" (n={num(a.get('n'), '.0f')})"
    rows = [
        ("Entropy collapse", "Initial entropy", _pm(a, "initial_entropy", ".3f") + n, a.get("initial_entropy")),
        ("Entropy collapse", "Final entropy", _pm(a, "final_entropy", ".3f") + n, a.get("final_entropy")),
        ("Entropy collapse", "Entropy reduction", _pm(a, "reduction", ".1%") + n, a.get("reduction")),
        ("Entropy collapse", "Final dominant action (probability)", dom or "no data", a.get("dominant_prob")),
        ("Entropy collapse", "Global optimum found", global_found(per["converged_to"].tolist()), a.get("global_share")),
        ("Vanishing gradients", "Mean gradient norm, homogeneous rewards", _pm(v, "grad_norm_homogeneous"), v.get("grad_norm_homogeneous")),
        ("Vanishing gradients", "Mean gradient norm, diverse rewards", _pm(v, "grad_norm_diverse"), v.get("grad_norm_diverse")),
        ("Vanishing gradients", "Gradient-norm reduction", _pm(v, "reduction", ".1%"), v.get("reduction")),
        ("Vanishing gradients", "Severity", v.get("severity", "unknown"), math.nan),
    ] + [("Key findings", str(i), text, math.nan) for i, text in enumerate(findings(ent, van, hack, gpt), 1)]  # fmt: skip
    return pd.DataFrame(rows, columns=["part", "item", "value", "number"])


def tables(ctx) -> dict[str, pd.DataFrame]:
    ent, (van, points), hack = entropy_table(ctx), vanishing_table(ctx), hacking_table(ctx)
    runs = gpt_runs(ctx)
    gpt = gpt_table(runs)
    role = roles(ctx.cfg, EXPERIMENT, ROLES) if len(runs) else {}
    role_of = {v: r for r, v in role.items()}
    gpt.insert(1, "role", gpt["variant"].map(role_of).fillna("") if len(gpt) else [])
    return {
        "lab04_entropy": ent, "lab04_local_optima": local_optima_table(ent), "lab04_vanishing": van, "lab04_vanishing_points": points, "lab04_hacking": hack,
        "lab04_bandit_curves": bandit_curves(ctx), "lab04_gpt_runs": runs, "lab04_gpt": gpt,
        "lab04_report_template": report_template(ent, van, hack, gpt), "lab04_verdicts": verdict_frame(verdicts(ent, van, hack, runs, role)),
    }  # fmt: skip


# ---- figures: from the tables alone ----------------------------------------------------
def _bandit(t, study: str) -> pd.DataFrame:
    c = t["lab04_bandit_curves"]
    return c[c["study"] == study].sort_values(["setting", "step"]) if "study" in c else pd.DataFrame()


def seed_band(curves: pd.DataFrame, variant: str, metric: str) -> pd.DataFrame:
    """Per step of one lab04_gpt variant: mean, std and n across seeds of `metric` (read from
    the `curves` table); eval_accuracy starts at step 0 with the accuracy before RL."""
    if curves.empty or metric not in curves:
        return pd.DataFrame(columns=["step", "mean", "std", "n"])
    c = curves[(curves["experiment"] == EXPERIMENT) & (curves["variant"] == variant)]
    c = c[["run_id", "step", metric]]
    if metric == "eval_accuracy":
        first = curves.loc[c.index].drop_duplicates("run_id")
        c = pd.concat([pd.DataFrame({"run_id": first["run_id"], "step": 0, metric: first["initial_eval"]}), c])
    g = c.dropna(subset=[metric]).groupby("step")[metric]
    return pd.DataFrame({"mean": g.mean(), "std": g.std(), "n": g.count()}).reset_index()


def _label(ax, title: str, xlabel: str, ylabel: str) -> None:
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()


def _settings(ax, c: pd.DataFrame, metric: str, label: str) -> None:
    """One band per setting of a bandit study (labelled `label` when there is only one)."""
    groups = list(c.groupby("setting", sort=False))
    for i, (setting, g) in enumerate(groups):
        band(ax, g["step"], g[f"{metric}_mean"], g[f"{metric}_std"], setting if len(groups) > 1 else label, COLORS[i])


def _shade_homogeneous(ax, c: pd.DataFrame) -> None:
    steps = c.drop_duplicates("step")
    hom = steps.loc[steps["phase"] == "homogeneous", "step"].to_numpy()
    cuts = np.where(np.diff(hom) > 1)[0]
    for i, (a, b) in enumerate(zip(np.r_[hom[:1], hom[cuts + 1]], np.r_[hom[cuts], hom[-1:]])):
        ax.axvspan(a - 0.5, b + 0.5, color="0.6", alpha=0.15, lw=0, label="homogeneous rewards" if i == 0 else None)


def six_panel(t) -> "Figure":
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    ec, gv, pts = _bandit(t, "entropy_collapse"), _bandit(t, "gradient_vanishing"), t["lab04_vanishing_points"]
    (a_ent, a_prob, a_loss), (a_grad, a_std, a_scatter) = axes
    for ax, metric in ((a_ent, "entropy"), (a_loss, "loss")):
        _settings(ax, ec, metric, metric) if len(ec) else placeholder(ax, "no entropy-collapse data")
    aggr, other = ec[ec["setting"] == "aggressive"] if len(ec) else ec, ec[ec["setting"] != "aggressive"] if len(ec) else ec
    if len(aggr):
        for i in range(3):
            band(a_prob, aggr["step"], aggr[f"p{i}_mean"], aggr[f"p{i}_std"], f"action {i} (aggressive)", COLORS[i])
            for setting, g in other.groupby("setting"):
                a_prob.plot(g["step"], g[f"p{i}_mean"], ls="--", color=COLORS[i], lw=1, label=f"action {i} ({setting})")
    else:
        placeholder(a_prob, "no aggressive-setting data")
    if len(gv):
        for ax, metric in ((a_grad, "grad_norm"), (a_std, "reward_std")):
            _shade_homogeneous(ax, gv)
            _settings(ax, gv, metric, metric.replace("_", " "))
        a_grad.set_yscale("symlog", linthresh=1e-6)  # exact zeros (equal rewards) stay visible
        for y, name in ((1e-4, "document: < 1e-4 when homogeneous"), (1e-3, "document: > 1e-3 when diverse")):
            a_grad.axhline(y, color="0.3", ls=":", lw=1, label=name)
    else:
        placeholder(a_grad, "no gradient-vanishing data")
        placeholder(a_std, "no gradient-vanishing data")
    if len(pts):
        for i, (phase, g) in enumerate(pts.groupby("phase")):
            a_scatter.scatter(g["reward_std"], g["grad_norm"], s=8, alpha=0.5, color=COLORS[i + 3], label=f"{phase} ({len(g)} steps)")
        a_scatter.set_yscale("symlog", linthresh=1e-6)
    else:
        placeholder(a_scatter, "no gradient-vanishing data")
    _label(a_ent, "Policy entropy (entropy collapse)", "step", "entropy (nats)")
    _label(a_prob, "Action probabilities", "step", "probability")
    _label(a_loss, "Training loss", "step", "loss")
    _label(a_grad, "Gradient norm (vanishing gradients)", "step", "gradient norm (symlog)")
    _label(a_std, "Reward std within the batch", "step", "reward std")
    _label(a_scatter, "Gradient norm against reward std", "reward std", "gradient norm (symlog)")
    fig.suptitle("Lab 04 on the bandit: mean ± std across seeds")
    fig.tight_layout()
    return fig


def hacking_figure(t) -> "Figure":
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2))
    rh = _bandit(t, "reward_hacking")
    if len(rh):
        band(left, rh["step"], rh["proxy_reward_mean"], rh["proxy_reward_std"], "proxy score (optimised)", COLORS[3])
        band(left, rh["step"], rh["true_reward_mean"], rh["true_reward_std"], "true reward", COLORS[2])
    else:
        placeholder(left, "no reward-hacking bandit data")
    proxy = _row(t["lab04_gpt"], role="proxy").get("variant", "")
    series = [(seed_band(t["curves"], proxy, m), label, COLORS[k]) for m, label, k in
              (("reward_mean", "training reward = proxy score", 3), ("accuracy", "exact-match accuracy (sampled)", 2))]  # fmt: skip
    for s, label, color in series:
        if len(s):
            band(right, s["step"], s["mean"], s["std"], label, color)
    if not any(len(s) for s, _, _ in series):
        placeholder(right, "no proxy_reward GPT runs")
    _label(left, "Bandit: proxy score and true reward", "step", "mean reward of the batch")
    _label(right, "GPT, proxy_reward variant", "step", "reward / accuracy")
    fig.suptitle("Reward hacking: mean ± std across seeds")
    fig.tight_layout()
    return fig


def gpt_figure(t) -> "Figure":
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    gpt = t["lab04_gpt"]
    variants = gpt["variant"].tolist() if "variant" in gpt else []
    panels = ((axes[0], "entropy", variants), (axes[1], "eval_accuracy", variants),
              (axes[2], "frac_zero_std", [v for v, r in zip(variants, gpt["role"]) if r in ("random_policy", "perfect_policy")]))  # fmt: skip
    for ax, metric, names in panels:
        drawn = 0
        for v in names:
            s = seed_band(t["curves"], v, metric)
            if len(s):
                band(ax, s["step"], s["mean"], s["std"], v, COLORS[variants.index(v) % len(COLORS)])
                drawn += 1
        if not drawn:
            placeholder(ax, "no lab04_gpt runs")
    _label(axes[0], "Token entropy", "RL step", "mean per-token entropy")
    _label(axes[1], "Held-out accuracy (step 0: before RL)", "RL step", "greedy exact-match accuracy")
    axes[2].set_ylim(-0.02, 1.02)  # a share
    _label(axes[2], "Groups with equal rewards", "RL step", "frac_zero_std")
    fig.suptitle("Lab 04 on the GPT: mean ± std across seeds")
    fig.tight_layout()
    return fig


def figures(t) -> dict[str, "Figure"]:
    return {"lab04_six_panel": six_panel(t), "lab04_hacking": hacking_figure(t), "lab04_gpt": gpt_figure(t)}


# ---- section: the template's context, from the tables ----------------------------------
CLAIMS = {
    "entropy": "A three-armed bandit pays 0.3, 1.0 and 0.5 (action 1 is the global optimum). Trained for 200 steps with five times the "
               "normal learning rate (5e-3) and a tenth of the entropy bonus (0.001), its policy entropy should fall from about 1.1 to about 0.1. "
               "Settling on action 1 is the success case; settling on action 0 or 2, a local optimum, the failure case.",
    "vanishing": "When every reward in a batch is the same (all 1.0), advantages are zero and so is the gradient. Alternating such phases "
                 "with varied rewards, the document expects a gradient norm below 1e-4 in the homogeneous phases, above 1e-3 in the diverse "
                 "ones, a fall of more than 90%, and a gradient norm that follows the reward std.",
    "hacking": "The document's results show a reward-model score that keeps climbing while the true reward (human preference) rises "
               "briefly and then falls, even below zero: the agent learns the reward model's flaws instead of the goal.",
    "gpt": "The document names DAPO (clip-higher, dynamic sampling) as the cure for entropy collapse. On the GPT we repeat the challenges "
           "from the calibrated reference: a multiple of its learning rate and a tenth of the entropy bonus, a proxy reward that favours large digits, "
           "RL from a random policy (all answers wrong) and from a near-perfect one (all right), and DAPO's remedies at the aggressive settings. The "
           "normal, aggressive and remedy settings all take two PPO epochs per batch, so that the ratio moves and a clip can bind (with one epoch the "
           "ratio is always 1), and a remedy differs from the aggressive setting by nothing but itself. Full DAPO runs half the steps, "
           "since dynamic sampling draws about twice the rollouts per step: the comparison is at about equal samples. A remedy is judged only "
           "where the aggressive setting shows the problem (entropy falls while sampled accuracy rises) and the remedy's mechanism acted.",
}  # fmt: skip
def gpt_sentence(gpt: pd.DataFrame) -> str:
    """The measured sentence of the GPT part."""
    g = {name: _row(gpt, role=role) for name, role in
         (("normal", "normal"), ("aggressive", "aggressive"), ("clip_higher", "clip_higher"), ("dapo_aggressive", "remedy"),
          ("random_init", "random_policy"), ("near_perfect", "perfect_policy"))}  # fmt: skip
    n = {k: f"n={num(d.get('n'), '.0f')} of {num(d.get('expected'), '.0f')}" for k, d in g.items()}
    return (f"Token entropy fell by {_pm(g['aggressive'], 'entropy_reduction_mean', '.1%')} under the aggressive settings ({n['aggressive']}), "
            f"sampled accuracy changing by {_pm(g['aggressive'], 'accuracy_gain_mean')}, against {_pm(g['normal'], 'entropy_reduction_mean', '.1%')} "
            f"under the normal ones ({n['normal']}). Clip-higher with two PPO epochs ({n['clip_higher']}) clipped {_pm(g['clip_higher'], 'clip_frac_mean')} "
            f"of tokens and ended at entropy {_pm(g['clip_higher'], 'entropy_end_mean')}; DAPO ({n['dapo_aggressive']}) clipped "
            f"{_pm(g['dapo_aggressive'], 'clip_frac_mean')}, drew {_pm(g['dapo_aggressive'], 'draws_per_rollout_mean')} rollouts per rollout kept, "
            f"{_pm(g['dapo_aggressive'], 'samples_mean', '.0f')} in all against {_pm(g['aggressive'], 'samples_mean', '.0f')} for aggressive GRPO, and ended at "
            f"entropy {_pm(g['dapo_aggressive'], 'entropy_end_mean')} and held-out accuracy {_pm(g['dapo_aggressive'], 'eval_end_mean', '.1%')}, against "
            f"{_pm(g['aggressive'], 'entropy_end_mean')} and {_pm(g['aggressive'], 'eval_end_mean', '.1%')} for aggressive GRPO. Share of groups with equal rewards: "
            f"{_pm(g['random_init'], 'frac_zero_std_mean')} from a random policy ({n['random_init']}), "
            f"{_pm(g['near_perfect'], 'frac_zero_std_mean')} from a near-perfect one ({n['near_perfect']}).") + cov_sentence(gpt)  # fmt: skip


def cov_sentence(gpt: pd.DataFrame) -> str:
    """The covariance remedies' part of the measured sentence: empty where no experiment names them."""
    parts = []
    for r, name in COV_REMEDIES.items():
        d = _row(gpt, role=r)
        if d:
            parts.append(f" {name} (n={num(d.get('n'), '.0f')} of {num(d.get('expected'), '.0f')}) acted on {_pm(d, 'cov_frac_mean')} of answer "
                         f"tokens and ended at entropy {_pm(d, 'entropy_end_mean')} and held-out accuracy {_pm(d, 'eval_end_mean', '.1%')}.")  # fmt: skip
    return "".join(parts)


def section(t) -> dict:
    rows = verdict_rows(t["lab04_verdicts"])
    tpl = t["lab04_report_template"]
    found = tpl.loc[tpl["part"] == "Key findings", "value"].tolist() if len(tpl) else []
    sentences = {**dict(zip(("entropy", "vanishing", "hacking"), found + ["no data"] * (3 - len(found)))), "gpt": gpt_sentence(t["lab04_gpt"])}
    parts = {}
    for part in CLAIMS:
        mine = [r for r in rows if r.get("part") == part]
        counts = {o: sum(r["outcome"] == o for r in mine) for o in ("agrees", "disagrees", "inconclusive", "not judged")}
        summary = ", ".join(f"{k} {o}" for o, k in counts.items() if k) or "no verdicts"
        parts[part] = {"claim": CLAIMS[part], "measured": sentences[part], "rows": mine, "summary": summary}
    return {"parts": parts, "verdict_list": rows, "power": power_note(t["lab04_verdicts"]), "severity_definition": SEVERITY_DEFINITION,
            "bandit_window": BANDIT_WINDOW, "gpt_window": GPT_WINDOW, "dominant": DOMINANT,
            "tables": {**{k: t[f"lab04_{k}"] for k in ("entropy", "local_optima", "vanishing", "hacking", "gpt", "report_template")},
                       "entropy_pooled": _pooled_rows(t["lab04_entropy"])}}  # fmt: skip
