"""`mathrl import`: other frameworks' training logs as a results tree of their own, judged like ours.

A set of logs (TRL checkpoints, TensorBoard folders of verl, OpenRLHF or TRL, verl's console, W&B CSV
exports; `mathrl.analysis.logs` reads them) becomes `OUT/runs/{arm}__s{seed}/` with metrics.csv in the contract's
columns (NaN where the framework logs nothing; unmapped keys kept under their own names) and
summary.json (the source file, its format and framework, the mapping, the keys left unmapped, the
monitor's alerts). Runs are grouped into arms and seeds by the user's YAML (`--arms FILE`) or by their
folder names (`ARM_s0`, `ARM-seed1`, `ARM/seed2`). On them:

- the stability monitor (`mathrl.engine.monitor`) replayed step by step, with thresholds that need nothing of
  the run but its log (`MONITOR`), and the checks only several seeds can make (`arm_alerts`): an arm whose
  token entropy halves across its seeds, or falls further than the reference arm's; an arm whose training
  reward rises while its validation score falls;
- for each alert, the rows of the documents' troubleshooting table it points to, each linked to the
  section of the project's report where the testbed measures that failure and its remedies (`REMEDIES`);
- the user's claims (the grammar of an experiment's `claims:`) judged by the claims engine over
  `run_measures`, and a report (`OUT/report.html`) from the report's own templates and macros.

Everything a set needs is read and checked before anything is written: an unknown format, a file that
is no log, a log without a reward, two runs claiming one arm and seed are each one line naming the file.
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from mathrl.analysis import logs
from mathrl.analysis.results import Run
from mathrl.engine.monitor import StabilityMonitor
from mathrl.pipeline import layout
from mathrl.pipeline.config import RunSpec, read_yaml
from mathrl.pipeline.errors import ConfigError

# Thresholds a log alone allows (no batch size, no reward range): the lab-04 study's collapse line (token
# entropy at half its start), the documents' KL alarm, their fixed reward swing, the trend checks' defaults.
MONITOR = {
    "entropy_fall": 0.5,
    "kl_max": 0.5,
    "reward_swing": 0.3,
    "window": 10,
    "grad_spike": 5.0,
    "entropy_rise": 0.5,
    "zero_std": 0.9,
}
START = 5  # steps whose mean entropy is a run's start
PRECEDENCE = ("trl_state", "tensorboard", "jsonl", "verl_console", "trl_console", "wandb_csv")
GENERIC_STEMS = {"train", "training", "log", "logs", "output", "console", "stdout", "metrics", "history", "events"}
SEEDED = re.compile(r"^(?P<arm>.+?)[_.-]+(?:seed|s)[_-]?(?P<seed>\d+)$")
SEED_ONLY = re.compile(r"^(?:seed|s)?[_-]?(?P<seed>\d+)$")

# Alert kind -> (symptom of the troubleshooting table (config/documents.yaml), the report's section where the
# testbed shows that failure and its remedies measured, what that section measures).
REMEDIES = {
    "low_entropy": (
        "entropy collapses fast",
        "lab04",
        "lab 04 on the GPT: the aggressive setting's entropy and clip-higher, DAPO beside it",
    ),
    "arm_entropy_collapse": (
        "entropy collapses fast",
        "lab04",
        "lab 04 on the GPT: the aggressive setting's entropy and clip-higher, DAPO beside it",
    ),
    "arm_entropy_below_reference": (
        "entropy collapses fast",
        "lab04",
        "lab 04 on the GPT: each remedy's entropy against the failing setting",
    ),
    "high_kl": ("KL explodes", "lab04", "lab 04 on the GPT: clip epsilon 0.1, two PPO epochs, twice the batch"),
    "reward_swing": (
        "reward drops suddenly",
        "collapse",
        "the collapse analysis: a tenth of the LR, KL 0.1, gradient clipping on a failing setting",
    ),
    "grad_norm_spike": (
        "reward drops suddenly",
        "stability",
        "the stability study's clipping against an injected gradient spike",
    ),
    "nonfinite": ("non-finite loss or gradient", "collapse", "the collapse analysis: an overflowing LR"),
    "no_signal": ("reward does not rise", "lab04", "lab 04 on the GPT: RL from a random policy (no reward at all)"),
    "reward_flat": ("reward does not rise", "stability", "the stability study's remedies: an LR ten times higher"),
    "entropy_rise": (None, "stability", "the stability study's monitor: alerts scored against later drops"),
    "arm_reward_hack": (None, "lab04", "lab 04 on the GPT: the proxy reward exploited"),
}
ARM_KINDS = ("arm_entropy_collapse", "arm_entropy_below_reference", "arm_reward_hack")


@dataclass
class ImportedRun:
    """One run of a set: its log, its arm and seed, and the columns its keys map onto."""

    log: logs.Log
    arm: str
    seed: int
    mapping: dict[str, str] = field(default_factory=dict)
    also: list[str] = field(default_factory=list)  # other logs of the same run, not read

    @property
    def run_id(self) -> str:
        return f"{self.arm}__s{self.seed}"


# ----------------------------------------------------------------------------- finding the runs
def run_folder(path: Path, fmt: str) -> Path:
    """The folder that stands for a log's run: a checkpoint's parent, a TRL TensorBoard folder's output
    folder (`OUT/runs/DATE_HOST/`), an event folder, or a log file's folder (its own name when specific)."""
    if fmt == "trl_state":
        return path.parent.parent if re.fullmatch(r"checkpoint-\d+", path.parent.name) else path.parent
    if fmt == "tensorboard":
        folder = path if path.is_dir() else path.parent
        return folder.parent.parent if folder.parent.name == "runs" else folder
    return path.parent if path.stem.lower() in GENERIC_STEMS else path.parent / path.stem


def candidates(root: Path) -> list[Path]:
    """The log files and event folders under `root` (itself where it is one)."""
    if root.is_file():
        return [root]
    found = []
    for p in sorted(root.rglob("*")):
        if p.is_dir() and any(p.glob("events.out.tfevents.*")):
            found.append(p)
        elif p.is_file() and (p.name == "trainer_state.json" or p.suffix.lower() in (".jsonl", ".ndjson", ".csv")):
            found.append(p)
        elif p.is_file() and p.suffix.lower() in (".log", ".txt") and logs.guess_format(p) != "console":
            found.append(p)
    return found


def discover(paths: list[Path]) -> tuple[dict[str, tuple[logs.Log, list[str]]], Path]:
    """{run name: (its log, the other logs found for it)} of every log under `paths`; the run name is its folder
    relative to the common root (a chart export's run: its prefix). Of a run's several logs the most complete
    format is read (PRECEDENCE: trainer_state.json, then event files, ...); of its checkpoints the latest."""
    paths = [Path(p) for p in paths]
    for p in paths:
        if not p.exists():
            raise ConfigError(f"{p}: no such file or folder")
    root = Path(_common([p if p.is_dir() else p.parent for p in paths]))
    per_run: dict[str, list[tuple[str, Path]]] = {}
    for p in paths:
        for c in candidates(p):
            fmt = logs.guess_format(c)
            if fmt is None:
                raise ConfigError(
                    f"{c}: no known log (by name: trainer_state.json, *.jsonl, events.out.tfevents.*, "
                    f"*.log/*.txt, *.csv)"
                )
            name = _relative(run_folder(c, fmt), root)
            per_run.setdefault(name, []).append((fmt, c))
    out = {}
    for name, found in per_run.items():
        found.sort(key=lambda fc: (PRECEDENCE.index(fc[0]) if fc[0] in PRECEDENCE else 99, -_checkpoint(fc[1])))
        fmt, chosen = found[0]
        others = [str(c) for _, c in found[1:]]
        for log in logs.read(chosen, fmt):
            run = f"{name}/{log.name}" if log.name else name
            log.name = run
            out[run] = (log, others)
    if not out:
        raise ConfigError(f"{', '.join(map(str, paths))}: no training log found")
    return out, root


def _checkpoint(path: Path) -> int:
    m = re.fullmatch(r"checkpoint-(\d+)", path.parent.name)
    return int(m.group(1)) if m else 0


def _common(folders: list[Path]) -> Path:
    import os

    return Path(os.path.commonpath([str(f.resolve()) for f in folders]))


def _relative(folder: Path, root: Path) -> str:
    rel = folder.resolve().relative_to(root) if folder.resolve().is_relative_to(root) else folder
    return str(rel) if str(rel) != "." else root.name


# ----------------------------------------------------------------------------- arms and seeds
def by_names(names: list[str]) -> dict[str, tuple[str, int]]:
    """{run name: (arm, seed)} from folder names: `ARM_s0`, `ARM-seed1`, `ARM/seed2`; a name with no seed is
    seed 0 of an arm named after it."""
    out = {}
    for name in names:
        parts = name.split("/")
        last = parts[-1]
        if m := SEEDED.match(last):
            out[name] = (m.group("arm"), int(m.group("seed")))
        elif (m := SEED_ONLY.match(last)) and len(parts) > 1:
            out[name] = (parts[-2], int(m.group("seed")))
        else:
            out[name] = (last, 0)
    return out


def by_yaml(names: list[str], arms: dict, where: str) -> dict[str, tuple[str, int]]:
    """{run name: (arm, seed)} from the YAML's `arms:`: each arm a list of run-name patterns (seeds from the
    names, else their order) or a {seed: pattern} map. A run no arm names is left out."""
    out: dict[str, tuple[str, int]] = {}
    for arm, spec in arms.items():
        items = spec.items() if isinstance(spec, dict) else enumerate(spec if isinstance(spec, list) else [spec])
        explicit = isinstance(spec, dict)
        matched_any = False
        for key, pattern in items:
            hits = sorted(n for n in names if fnmatch.fnmatch(n, str(pattern)) or n == str(pattern))
            if not hits:
                raise ConfigError(f"{where}: arms.{arm}: {pattern!r} matches no run; runs found: {', '.join(names)}")
            matched_any = True
            for i, name in enumerate(hits):
                named = by_names([name])[name][1] if SEEDED.match(name.split("/")[-1]) else None
                seed = int(key) if explicit else (named if named is not None else int(key) + i)
                if name in out:
                    raise ConfigError(f"{where}: run {name} is in arm {out[name][0]} and in arm {arm}")
                out[name] = (str(arm), seed)
        if not matched_any:
            raise ConfigError(f"{where}: arms.{arm}: no runs")
    return out


def read_arms_file(path: Path) -> dict:
    """The user's YAML: `name`, `description`, `arms`, `roles` (`baseline: ARM` too), `metrics` (column -> key)
    and `claims` (an experiment's grammar); unknown keys are an error naming them."""
    try:
        spec = read_yaml(path) or {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot be read as YAML ({exc})") from None
    allowed = {"name", "description", "arms", "roles", "baseline", "metrics", "claims"}
    if not isinstance(spec, dict) or set(spec) - allowed:
        extra = sorted(set(spec) - allowed) if isinstance(spec, dict) else ["(not a mapping)"]
        raise ConfigError(f"{path}: unknown key(s) {', '.join(extra)}; allowed: {', '.join(sorted(allowed))}")
    for key in ("arms", "roles", "metrics"):
        if spec.get(key) is not None and not isinstance(spec[key], dict):
            raise ConfigError(f"{path}: {key} must be a mapping")
    unknown = sorted(set(spec.get("metrics") or {}) - set(logs.COLUMN_KEYS))
    if unknown:
        raise ConfigError(
            f"{path}: metrics: {', '.join(unknown)} is not a column; allowed: {', '.join(logs.COLUMN_KEYS)}"
        )
    return spec


def assemble(paths: list[Path], spec: dict, where: str) -> list[ImportedRun]:
    """Every run of the set with its arm, seed and column mapping, checked: a reward in each, one run per arm
    and seed, every role an arm."""
    found, _ = discover(paths)
    names = list(found)
    groups = by_yaml(names, spec["arms"], where) if spec.get("arms") else by_names(names)
    runs, seen = [], {}
    for name, (arm, seed) in groups.items():
        log, others = found[name]
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", arm):
            raise ConfigError(
                f"{log.source}: arm name {arm!r} (from {name}) has characters other than letters, "
                f"digits and _ . -; name the arms in an --arms file"
            )
        key = (arm, seed)
        if key in seen:
            raise ConfigError(
                f"{log.source}: run {name} claims arm {arm} seed {seed}, as {seen[key]} does; give "
                f"them different arms or seeds (--arms FILE)"
            )
        seen[key] = f"{name} ({log.source})"
        mapping = logs.columns(log.keys, spec.get("metrics"))
        if logs.REWARD_COLUMN not in mapping:
            tried = [k for k in logs.COLUMN_KEYS[logs.REWARD_COLUMN] if isinstance(k, str)]
            raise ConfigError(
                f"{log.source}: no reward logged (none of {', '.join(tried)}; {len(log.keys)} keys "
                f"read); name its key with `metrics: {{reward_mean: KEY}}` in an --arms file"
            )
        runs.append(ImportedRun(log, arm, seed, mapping, others))
    roles = roles_of(spec)
    arms = {r.arm for r in runs}
    for role, arm in roles.items():
        if arm not in arms:
            raise ConfigError(f"{where}: roles.{role}: {arm!r} is not an arm; arms: {', '.join(sorted(arms))}")
    return sorted(runs, key=lambda r: (r.arm, r.seed))


def roles_of(spec: dict) -> dict[str, str]:
    roles = dict(spec.get("roles") or {})
    if spec.get("baseline"):
        roles.setdefault("baseline", spec["baseline"])
    return {str(k): str(v) for k, v in roles.items()}


# ----------------------------------------------------------------------------- the monitor
def run_alerts(m: pd.DataFrame) -> list[dict]:
    """The stability monitor replayed over one run's metrics, with MONITOR's thresholds: low entropy (below
    half its mean over the first START steps), high KL, reward swing, gradient-norm spike, entropy rise; a
    non-finite logged value; no learning signal (the share of groups with equal rewards at MONITOR's level,
    averaged over the window); a reward that does not rise over the run (`reward_flat`)."""
    col = lambda c: m[c] if c in m else pd.Series(math.nan, index=m.index)  # noqa: E731
    entropy = col("entropy").dropna()
    start = float(entropy.head(START).mean()) if len(entropy) else math.nan
    mon = StabilityMonitor(
        entropy_min=MONITOR["entropy_fall"] * start if math.isfinite(start) else None,
        kl_max=MONITOR["kl_max"],
        reward_swing=MONITOR["reward_swing"],
        window=MONITOR["window"],
    )
    for step, e, kl, reward, g in zip(m["step"], col("entropy"), col("kl"), col("reward_mean"), col("grad_norm")):
        bad = [
            name
            for name, x in (("entropy", e), ("kl", kl), ("reward", reward), ("grad_norm", g))
            if x == x and not math.isfinite(x)
        ]
        if bad:
            mon.record(step, "nonfinite", math.inf, f"non-finite {', '.join(bad)} logged")
        finite = lambda x: x if x == x and math.isfinite(x) else math.nan  # noqa: E731
        mon.check(step, finite(e), finite(kl), finite(reward))
        # a zero gradient norm (no update: TRL's second pass over a batch, or every reward of a batch equal) is no
        # reference for a spike: against a median of 0 any update would be one
        mon.check_trends(step, finite(g) if g else math.nan, finite(e), MONITOR["grad_spike"], MONITOR["entropy_rise"])
    alerts = mon.alerts
    zero = col("frac_zero_std").rolling(MONITOR["window"], min_periods=MONITOR["window"]).mean()
    high = zero >= MONITOR["zero_std"]
    for i in high[high & ~high.shift(1, fill_value=False)].index:
        step = int(m["step"][i])
        alerts.append(
            {
                "step": step,
                "kind": "no_signal",
                "value": float(zero[i]),
                "threshold": MONITOR["zero_std"],
                "message": f"{zero[i]:.0%} of groups had equal rewards over the last {MONITOR['window']} "
                f"logged steps: no learning signal",
            }
        )
    flat = reward_flat(m["step"], col("reward_mean"))
    return sorted(alerts + ([flat] if flat else []), key=lambda a: a["step"])


def reward_flat(steps: pd.Series, reward: pd.Series) -> dict | None:
    """`reward_flat` at the last step: the training reward over the last k logged steps is not above its first k by
    two standard errors of the difference (k a third of the steps logged, at most the window, at least 3): the
    troubleshooting table's "reward does not rise", told apart from the noise of the run's own steps."""
    r = reward[reward.notna() & reward.map(math.isfinite)]
    k = min(MONITOR["window"], len(r) // 3)
    if k < 3:
        return None
    first, last = r.iloc[:k], r.iloc[-k:]
    rise = float(last.mean() - first.mean())
    se = math.sqrt(first.var() / k + last.var() / k)
    if rise >= 2 * se and rise > 0:
        return None
    return {
        "step": int(steps[r.index[-1]]),
        "kind": "reward_flat",
        "value": rise,
        "threshold": 2 * se,
        "message": f"training reward over the last {k} logged steps {rise:+.3g} from the first {k}, not above "
        f"two standard errors ({2 * se:.3g}): the reward does not rise",
    }


def arm_alerts(measures: pd.DataFrame, roles: dict[str, str]) -> list[dict]:
    """What several seeds and a reference arm show and one run cannot: per arm, from `run_measures`' rows,
    - `arm_entropy_collapse`: token entropy falls by at least half on average over the arm's seeds, with the
      95% interval of the fall above 0 (n >= 2);
    - `arm_entropy_below_reference`: the arm's entropy falls further than the reference arm's (role
      `baseline` or `reference`), by at least a quarter of its start, the interval of the difference (paired by
      seed where they share seeds) above 0;
    - `arm_reward_hack`: the training reward rises (its end − start, interval above 0) while the validation
      score falls (its last − first reading, interval below 0)."""
    from mathrl.analysis.verdict import difference, mean_interval

    out = []
    if measures.empty:
        return out
    reference = roles.get("baseline") or roles.get("reference")
    by_arm = {arm: g.set_index("seed") for arm, g in measures.groupby("variant", sort=True)}
    for arm, g in by_arm.items():
        fall = g["entropy_fall"].dropna().to_dict()
        est = mean_interval(fall) if len(fall) >= 2 else None
        if est is not None and est.estimate >= MONITOR["entropy_fall"] and est.lo > 0:
            out.append(
                _arm(
                    arm,
                    "arm_entropy_collapse",
                    est,
                    len(fall),
                    f"token entropy fell by {est.estimate:.0%} on average over {len(fall)} seeds "
                    f"(95% interval {est.lo:.0%} to {est.hi:.0%})",
                )
            )
        if reference and arm != reference and reference in by_arm:
            ref = by_arm[reference]["entropy_fall"].dropna().to_dict()
            if len(fall) >= 2 and len(ref) >= 2:
                d = difference(fall, ref)
                if d.estimate >= MONITOR["entropy_fall"] / 2 and d.lo > 0:
                    out.append(
                        _arm(
                            arm,
                            "arm_entropy_below_reference",
                            d,
                            d.n,
                            f"token entropy fell {d.estimate:.0%} of its start further than in {reference} "
                            f"(95% interval {d.lo:.0%} to {d.hi:.0%}, n={d.n})",
                        )
                    )
        rise = (g["reward_end"] - g["reward_start"]).dropna().to_dict()
        val = g["eval_change"].dropna().to_dict() if "eval_change" in g else {}
        if len(rise) >= 2 and len(val) >= 2:
            r, v = mean_interval(rise), mean_interval(val)
            if r.lo > 0 and v.hi < 0:
                out.append(
                    _arm(
                        arm,
                        "arm_reward_hack",
                        v,
                        len(val),
                        f"training reward rose {r.estimate:+.3g} (95% interval {r.lo:+.3g} to {r.hi:+.3g}) "
                        f"while the validation score changed {v.estimate:+.3g} ({v.lo:+.3g} to {v.hi:+.3g}), "
                        f"n={len(val)}",
                    )
                )
    return out


def _arm(arm: str, kind: str, est, n: int, message: str) -> dict:
    return {
        "arm": arm,
        "kind": kind,
        "value": float(est.estimate),
        "ci_low": float(est.lo),
        "ci_high": float(est.hi),
        "n": int(n),
        "message": message,
    }


def remedies(kinds: list[str], symptoms: list[dict], report: str) -> pd.DataFrame:
    """Per alert kind raised: the troubleshooting table's row for its symptom (likely causes, fixes) and the link
    to the report's section where the testbed measures that failure and its remedies."""
    rows = []
    for kind in dict.fromkeys(kinds):
        symptom, section, what = REMEDIES.get(kind, (None, "stability", "the stability monitor"))
        row = next((s for s in symptoms if s["symptom"] == symptom), None)
        rows.append(
            {
                "kind": kind,
                "symptom": symptom or "(no row of the troubleshooting table)",
                "cause": row["cause"] if row else "",
                "fix": row["fix"] if row else "",
                "measured": what,
                "link": f"{report}#{section}",
                "section": section,
            }
        )
    return pd.DataFrame(rows, columns=["kind", "symptom", "cause", "fix", "measured", "link", "section"])


# ----------------------------------------------------------------------------- the set as a results tree
def metrics_of(run: ImportedRun) -> tuple[pd.DataFrame, float]:
    """metrics.csv's rows of a run and its validation score before training (a reading at step 0 or before,
    as verl's `val_before_train` logs it; NaN where none)."""
    from mathrl.pipeline.layout import METRIC_COLUMNS

    m = logs.frame(run.log, run.mapping, METRIC_COLUMNS)
    initial = math.nan
    before = m["step"] <= 0
    if before.any() and m.loc[before, "eval_accuracy"].notna().any():
        initial = float(m.loc[before, "eval_accuracy"].dropna().iloc[-1])
    m = m[~before | m["reward_mean"].notna()].reset_index(drop=True)
    return m, initial


def summary(run: ImportedRun, m: pd.DataFrame, initial: float, name: str, alerts: list[dict]) -> dict:
    """summary.json of an imported run: what `mathrl.analysis.results` reads (`initial`, `final`, `best`, `alerts`,
    `status`) and where the run came from."""
    evals = m[["step", "eval_accuracy"]].dropna()
    final = float(evals["eval_accuracy"].iloc[-1]) if len(evals) else math.nan
    best = evals.loc[evals["eval_accuracy"].idxmax()] if len(evals) else None
    mapped = set(run.mapping.values())
    return {
        "run_id": run.run_id,
        "experiment": name,
        "variant": run.arm,
        "seed": run.seed,
        "status": "complete",
        "framework": framework(run.log),
        "format": run.log.format,
        "source": run.log.source,
        "also_found": run.also,
        "truncated": run.log.truncated,
        "columns": run.mapping,
        "unmapped": [k for k in run.log.keys if k not in mapped],
        "ignored": run.log.ignored,
        "steps": len(m),
        "initial": {"eval_accuracy": initial},
        "final": {"eval_accuracy": final, "step": int(m["step"].iloc[-1])},
        "best": {
            "eval_accuracy": float(best["eval_accuracy"]) if best is not None else math.nan,
            "step": int(best["step"]) if best is not None else None,
        },
        "wall_seconds": math.nan,
        "config": {},
        "alerts": alerts,
    }


def framework(log: logs.Log) -> str:
    """The framework that wrote a log, from its keys: TRL, verl, OpenRLHF or unknown."""
    keys = set(log.keys)
    if keys & {
        "frac_reward_zero_std",
        "completions/mean_length",
        "train/frac_reward_zero_std",
        "clip_ratio/low_mean",
        "train/completions/mean_length",
    }:
        return "trl"
    if any(k.startswith(("actor/", "critic/score", "response_length/")) for k in keys):
        return "verl"
    if keys & {"train/policy_loss", "train/actor_lr", "train/ppo_clip_ratio"}:
        return "openrlhf"
    return "transformers" if log.format == "trl_state" else "unknown"


def as_runs(written: dict[str, tuple[dict, pd.DataFrame]], name: str) -> dict[str, Run]:
    """The set's runs as `mathrl.analysis.results` reads them, from what `write` puts in their folders."""
    out = {}
    for run_id, (sm, m) in written.items():
        spec = RunSpec(run_id, name, sm["variant"], {}, int(sm["seed"]), settings={})
        out[run_id] = Run(spec, "complete", sm, m)
    return out


def config(spec: dict, name: str, out: Path, runs: list[ImportedRun]) -> dict:
    """The configuration the studies, the claims engine and `mathrl compare` read for the set: one experiment
    named after it, its arms as variants, its roles and claims."""
    experiment = {
        "description": spec.get("description") or f"imported logs: {len(runs)} runs",
        "variants": {r.arm: {} for r in runs},
        "roles": roles_of(spec),
        "seeds": sorted({r.seed for r in runs}),
        "claims": list(spec.get("claims") or []),
    }
    return {"results": str(out), "experiments": {name: experiment}, "verdicts": {"adjustment": "bh"}}


IMPORT_FILE = "import.json"  # beside the runs: the set's configuration and the runs' sources


def load_set(out: Path) -> tuple[dict, dict[str, Run]]:
    """An imported set's configuration and runs, from its folder (for `mathrl compare --imported`)."""
    try:
        made = json.loads((Path(out) / IMPORT_FILE).read_text())
    except (OSError, ValueError):
        raise ConfigError(
            f"{out}: no imported set ({IMPORT_FILE} missing or unreadable); `mathrl import` makes one"
        ) from None
    cfg, name = made["config"], made["name"]
    written = {}
    for run_id in made["runs"]:
        folder = layout.at(cfg, layout.RUN_DIR, run_id=run_id)
        written[run_id] = (
            json.loads((folder / layout.SUMMARY_FILE).read_text()),
            pd.read_csv(folder / layout.METRICS_FILE),
        )
    return cfg, as_runs(written, name)


# ----------------------------------------------------------------------------- tables, figures, report
class SetContext:
    """What `mathrl.analysis.studies.generic` reads of a results tree (`Context`'s interface), for an imported set."""

    def __init__(self, cfg: dict, runs: dict[str, Run]):
        self.cfg, self.runs = cfg, runs

    def experiment(self, name: str) -> list[Run]:
        return [r for r in self.runs.values() if r.spec.experiment == name]


ARM_VALUES = ["entropy_start", "entropy_end", "entropy_fall", "reward_start", "reward_end", "kl_end", "eval_change"]


def tables(cfg: dict, runs: dict[str, Run], report: str) -> dict[str, pd.DataFrame]:
    """The set's tables: the runs and where they came from, every measure per run, each arm's means with 95%
    intervals, the generic section's curves and summary, the alerts (per run and per arm), the remedies they point
    to, and claims.csv (the user's claims, judged)."""
    from mathrl.analysis import claims, kit
    from mathrl.analysis.aggregate import as_read_back
    from mathrl.analysis.kit import document_facts
    from mathrl.analysis.measures import run_measures
    from mathrl.analysis.studies import generic

    name = next(iter(cfg["experiments"]))
    measures = run_measures(runs)
    source = pd.DataFrame(
        [
            {
                "run_id": rid,
                "arm": r.spec.variant,
                "seed": r.spec.seed,
                "framework": r.summary["framework"],
                "format": r.summary["format"],
                "source": r.summary["source"],
                "steps": r.summary["steps"],
                "mapped": len(r.summary["columns"]),
                "unmapped": len(r.summary["unmapped"]),
                "truncated": r.summary["truncated"],
                "alerts": len(r.summary["alerts"]),
            }
            for rid, r in runs.items()
        ]
    )
    arm_rows = arm_alerts(measures, cfg["experiments"][name]["roles"])
    per_run = [
        {"run_id": rid, "arm": r.spec.variant, "seed": r.spec.seed, **a}
        for rid, r in runs.items()
        for a in r.summary["alerts"]
    ]
    kinds = [a["kind"] for a in per_run] + [a["kind"] for a in arm_rows]
    values = [v for v in ARM_VALUES if v in measures]
    arms = kit.add_intervals(kit.summarise(measures.assign(arm=measures["variant"]), ["arm"], values), values)
    out = {
        "imported_runs": source,
        "run_measures": measures,
        "imported_arms": arms,
        "imported_alerts": pd.DataFrame(
            per_run, columns=["run_id", "arm", "seed", "step", "kind", "value", "threshold", "message"]
        ),
        "imported_arm_alerts": pd.DataFrame(
            arm_rows, columns=["arm", "kind", "value", "ci_low", "ci_high", "n", "message"]
        ),
        "imported_remedies": remedies(kinds, document_facts("stability")["symptoms"], report),
        **generic.tables(SetContext(cfg, runs)),
    }
    out["claims"] = claims.judge_all(cfg, as_read_back(out), path=Path(cfg["results"]) / "no-claims-file.yaml")
    return out


def figures(cfg: dict, t: dict[str, pd.DataFrame]) -> dict[str, bytes]:
    """The set's curves per arm (the generic section's figure: validation score, entropy, KL, reward)."""
    import matplotlib.pyplot as plt

    from mathrl.analysis.figure_style import STYLE, png
    from mathrl.analysis.studies import generic

    name = next(iter(cfg["experiments"]))
    with plt.rc_context(STYLE):
        fig = generic.figure(t["generic_curves"], name)
        data = png(fig)
        plt.close(fig)
    return {f"generic_{name}": data}


def render(cfg: dict, t: dict[str, pd.DataFrame], pngs: dict[str, bytes], command: str) -> str:
    """The set's report: one page from the report's environment, macros and generic section."""
    import base64
    from datetime import UTC, datetime

    from mathrl.analysis.report import environment
    from mathrl.analysis.section_verdicts import verdicts
    from mathrl.analysis.studies import generic

    name = next(iter(cfg["experiments"]))
    figures_uri = {k: "data:image/png;base64," + base64.b64encode(v).decode() for k, v in pngs.items()}
    return (
        environment()
        .get_template("imported.html.j2")
        .render(
            name=name,
            cfg=cfg,
            T=t,
            figures=figures_uri,
            ctx=generic.section(_Tables(t, cfg)),
            verdict_rows=verdicts(_Tables(t, cfg), "generic", name),
            monitor=MONITOR,
            start=START,
            command=command,
            generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        )
    )


class _Tables(dict):
    """Tables by name (an absent one empty) with the config beside them: what a study's `section` reads."""

    def __init__(self, tables: dict, cfg: dict):
        super().__init__(tables)
        self.cfg = cfg

    def __missing__(self, key):
        return pd.DataFrame()


def build(paths: list[Path], arms_file: Path | None, out: Path, report_link: str, command: str) -> dict:
    """Read, check, then write the set: run folders, tables, the figure and report.html; what was written."""
    from mathrl.analysis import claims
    from mathrl.analysis.measures import EVERY_RUN
    from mathrl.pipeline.atomic import atomic_write

    where = str(arms_file) if arms_file else "the log folder names"
    spec = read_arms_file(arms_file) if arms_file else {}
    name = str(spec.get("name") or out.name)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ConfigError(f"{where}: name {name!r}: use letters, digits and _ . -")
    runs = assemble(paths, spec, where)
    written = {}
    for run in runs:
        m, initial = metrics_of(run)
        written[run.run_id] = (summary(run, m, initial, name, run_alerts(m)), m)
    cfg = config(spec, name, out, runs)
    for spec_claim in claims.load(cfg, None, path=out / "no-claims-file.yaml"):  # the grammar, checked up front
        if spec_claim.measure not in EVERY_RUN:  # an imported run's claims read run_measures
            raise ConfigError(
                f"{where}: claim {spec_claim.id}: measure {spec_claim.measure!r} is not a measure of every run; "
                f"allowed: {', '.join(EVERY_RUN)}"
            )
    loaded = as_runs(written, name)
    t = tables(cfg, loaded, report_link)
    pngs = figures(cfg, t)
    html = render(cfg, t, pngs, command)
    if (out / IMPORT_FILE).is_file():  # a set imported again: the runs it no longer has go
        import shutil

        for old in json.loads((out / IMPORT_FILE).read_text()).get("runs", []):
            if old not in written:
                shutil.rmtree(layout.at(cfg, layout.RUN_DIR, run_id=old), ignore_errors=True)
    for run_id, (sm, m) in written.items():  # nothing is written before every check above has passed
        folder = layout.at(cfg, layout.RUN_DIR, run_id=run_id)
        atomic_write(folder / layout.METRICS_FILE, m.to_csv(index=False))
        atomic_write(folder / layout.SUMMARY_FILE, json.dumps(sm, indent=1, default=str) + "\n")
    for table, df in t.items():
        atomic_write(layout.at(cfg, layout.TABLES) / f"{table}.csv", df.to_csv(index=False))
    for fig, data in pngs.items():
        atomic_write(layout.at(cfg, layout.FIGURES) / f"{fig}.png", data)
    atomic_write(out / IMPORT_FILE, json.dumps({"name": name, "config": cfg, "runs": list(written)}, indent=1))
    report = atomic_write(layout.at(cfg, layout.REPORT), html)
    return {"name": name, "runs": runs, "tables": t, "report": report, "cfg": cfg}
