"""The seed plan from a pilot tree: `python -m bench.seed_plan --pilot DIR --commit SHA [--write]`.

Reads the pilot's claims.csv (a tree of config/seed_pilot.yaml: every planned experiment at two seeds from each of
the five warm-ups) and, for every claim on the GPT whose smallest effect that matters is declared (config/claims.yaml's
rules: 3 points of held-out accuracy, 20 points of a rate of runs, a scale-free size the document states, a margin),
the seeds per warm-up that detect it with 80% power (mathrl/analysis/plan.py). Each experiment's arms get the most its
claims
ask for, within the budget (at most two seeds per warm-up: the pilot's count). Prints the plan claim by claim; with
`--write`, config/seed_plan.yaml. The plan uses the pilot's variances and the declared effects, never the pilot's
estimates, and it is written before the runs it plans.
"""

from __future__ import annotations

import argparse
import datetime
import math
from pathlib import Path

import pandas as pd
import yaml

from bench.common import ROOT, table
from mathrl.analysis import claims as claims_engine
from mathrl.analysis import plan
from mathrl.pipeline.config import load_config

WARMUPS = 5
PILOT_PER_WARMUP = 2
ALLOWED = (1, 2)  # seeds per warm-up the budget allows
MINIMAL_RATE = 0.20  # 20 points of a rate of runs


def effect_of(row, spec) -> float:
    """The smallest effect that matters for a claim (config/claims.yaml's rules), NaN where none is declared."""
    if row.get("expected", "").startswith(("no difference", "at least as good")):
        return float(row["margin"])
    if spec.size is not None:
        return min(abs(x) for x in spec.size) or math.nan
    if spec.compare == "rate" or row.get("design") == "rates":
        return MINIMAL_RATE
    if spec.unit == "pts":
        return 0.03
    return math.nan


def experiment_of(spec) -> str | None:
    return spec.experiment or plan.TABLE_EXPERIMENT.get(spec.table)


def claim_plans(pilot: Path, cfg: dict) -> pd.DataFrame:
    judged = pd.read_csv(pilot / "tables" / "claims.csv").set_index("claim_id")
    specs = {s.id: s for s in claims_engine.load(cfg, {name: _table(pilot, name) for name in _tables(pilot)})}
    rows = []
    for cid, spec in specs.items():
        exp = experiment_of(spec)
        if cid not in judged.index or exp not in (cfg.get("experiments") or {}):
            continue
        r = judged.loc[cid].to_dict()
        if r.get("n_of") != "warm-ups" or not r.get("sd") == r.get("sd"):
            continue
        effect = effect_of(r, spec)
        design = "unpaired" if r.get("design") == "unpaired" else "paired"
        if not effect == effect:
            m, need = None, None
        else:
            m = plan.seeds_per_warmup(effect, r["sd"], r["between_share"], PILOT_PER_WARMUP, WARMUPS, design, ALLOWED)
            need = None if m else plan.warmups_needed(effect, r["sd"], r["between_share"], PILOT_PER_WARMUP, design, 2)
        rows.append({"claim_id": cid, "kind": spec.kind, "experiment": exp, "effect": effect, "design": design,
                     "sd_pilot": r["sd"], "between_share": r["between_share"], "seeds_per_warmup": m,
                     "warmups_needed": need})  # fmt: skip
    return pd.DataFrame(rows)


def _tables(pilot: Path) -> list[str]:
    return [p.stem for p in (pilot / "tables").glob("*.csv")]


def _table(pilot: Path, name: str) -> pd.DataFrame:
    try:
        return pd.read_csv(pilot / "tables" / f"{name}.csv")
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def experiment_seeds(plans: pd.DataFrame, cfg: dict) -> dict[str, int]:
    """Seeds per arm of each planned experiment: WARMUPS times the most seeds per warm-up its claims ask for (one
    where none asks: no claim of it can be decided within the budget, or none declares its effect)."""
    out = {}
    for name, exp in (cfg.get("experiments") or {}).items():
        if len(exp["seeds"]) < WARMUPS:
            continue  # the calibration's single validation run is not planned
        asked = plans.loc[plans["experiment"] == name, "seeds_per_warmup"].dropna() if len(plans) else []
        out[name] = WARMUPS * int(max(asked, default=1))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.seed_plan", description=__doc__.splitlines()[0])
    p.add_argument("--pilot", type=Path, required=True, help="the pilot's results directory")
    p.add_argument("--commit", required=True, help="the commit the pilot was trained with")
    p.add_argument("--note", help="what else the pilot's tree holds, e.g. arms trained at a later commit")
    p.add_argument("--write", action="store_true", help="write config/seed_plan.yaml")
    args = p.parse_args(argv)
    cfg = load_config()
    plans = claim_plans(args.pilot, cfg)
    seeds = experiment_seeds(plans, cfg)
    cols = ["claim_id", "experiment", "effect", "design", "sd_pilot", "between_share", "seeds_per_warmup",
            "warmups_needed"]  # fmt: skip
    print(table(cols, [[_fmt(r[c]) for c in cols] for r in plans.to_dict("records")]))
    print("\n" + ", ".join(f"{e}: {n} seeds" for e, n in seeds.items()))
    if args.write:
        record = {
            "pilot": {"commit": args.commit, "config": "config/config.yaml + config/seed_pilot.yaml",
                      "date": datetime.date.today().isoformat(), **({"note": args.note} if args.note else {})},
            "method": " ".join((plan.__doc__ or "").split("\n\n")[1].split()),
            "warmups": WARMUPS, "seeds_per_warmup_allowed": list(ALLOWED),
            "experiments": seeds,
            "claims": {r["claim_id"]: {k: _plain(r[k]) for k in cols[1:]} for r in plans.to_dict("records")},
        }  # fmt: skip
        header = (
            "# The seed plan, written by `python -m bench.seed_plan` from the pilot named below, before the runs it\n"
            "# plans; config/config.yaml's seeds follow it (a test checks). Not to be edited by hand.\n"
        )
        text = yaml.safe_dump(record, sort_keys=False, width=110, allow_unicode=True)
        (ROOT / "config" / "seed_plan.yaml").write_text(header + text)
    return 0


def _fmt(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def _plain(x):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return round(float(x), 6) if isinstance(x, float) else x


if __name__ == "__main__":
    raise SystemExit(main())
