"""What the report cannot show, from what the pipeline knows: the facts behind the limitations section.

Each function returns the numbers and lists one paragraph of `report/templates/limitations.html.j2` is written from
(the sentences are in the template, as a study's are): the warm-ups each claim rests on, the seed plan and when it
was fixed (`config/seed_plan.yaml`), where the testbed's design departs from the documents', what was not testable
or not judged and why, the documents' scale, and the machines the runs were trained on.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mathrl.analysis.coverage import FULL_ONLY, NOT_TESTABLE
from mathrl.pipeline.config import ROOT, read_yaml
from mathrl.pipeline.errors import ConfigError

SEED_PLAN = ROOT / "config" / "seed_plan.yaml"
PLAN_KEYS = ("pilot", "method", "experiments")  # as `python -m bench.seed_plan --write` writes them
# Settings of the system study whose difference from the document's changes nothing the runs compute: accumulated
# micro-batches give the whole batch's gradient (the stability study's accumulation check).
SAME_MATHS = ("micro_batch_size",)


def warmups(claims: pd.DataFrame, sft: pd.DataFrame, spread: pd.DataFrame | None = None) -> dict:
    """The warm-ups behind the claims: from claims.csv's `warmups` column where it has one (the judged document
    claims by their number of warm-ups, and the largest share of variance between warm-ups), else the warm-up
    checkpoints trained per task (the sft table's rows); and how far apart each task's warm-ups start RL (the
    sft_spread table)."""
    per_task = sft.groupby("task", sort=False).size().to_dict() if len(sft) and "task" in sft else {}
    out = {
        "recorded": "warmups" in claims,
        "per_task": per_task,
        "spread": spread.to_dict("records") if spread is not None and len(spread) else [],
        "by_count": {},
        "claims": 0,
        "unrecorded": 0,
        "largest_share": None,
    }
    if not out["recorded"] or claims.empty:
        return out
    doc = claims[(claims["kind"] == "document") & (claims["outcome"] != "not judged")]
    k = pd.to_numeric(doc["warmups"], errors="coerce").dropna().astype(int)
    out["by_count"] = {int(n): int(c) for n, c in k.value_counts().sort_index().items()}
    out["claims"], out["unrecorded"] = len(doc), len(doc) - len(k)
    if "between_share" in doc:
        share = pd.to_numeric(doc["between_share"], errors="coerce").dropna()
        if len(share):
            i = share.idxmax()
            out["largest_share"] = {"share": float(share[i]), "claim_id": doc.loc[i, "claim_id"]}
    return out


def planned_seeds(value) -> int | None:
    """A plan's seeds for one experiment as a count: a number, a list of seeds, or a mapping with `seeds`."""
    if isinstance(value, dict):
        value = value.get("seeds")
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return len(value) if isinstance(value, list) else None


def seed_plan(cfg: dict, path: Path | None = None) -> dict:
    """The seed plan (`config/seed_plan.yaml`: the pilot's commit and date, the method, each experiment's planned
    seeds) against the seeds each experiment of the config runs; without the file, each experiment's seeds alone
    (`exists` False)."""
    path = Path(path or SEED_PLAN)
    run = {name: len(exp.get("seeds") or []) for name, exp in (cfg.get("experiments") or {}).items()}
    if not path.is_file():
        counts = sorted(set(run.values()))
        return {
            "exists": False,
            "path": _shown(path),
            "run": run,
            "fewest": counts[0] if counts else 0,
            "most": counts[-1] if counts else 0,
        }
    data = read_yaml(path) or {}
    pilot = data.get("pilot") if isinstance(data.get("pilot"), dict) else {}
    missing = [k for k in PLAN_KEYS if k not in data] + [f"pilot.{k}" for k in ("commit", "date") if k not in pilot]
    if missing:
        raise ConfigError(
            f"{path}: missing key(s) {', '.join(missing)} (a seed plan names the pilot's commit and date, "
            "its method, then each experiment's planned seeds)"
        )
    planned = {name: planned_seeds(v) for name, v in (data.get("experiments") or {}).items()}
    rows = [{"experiment": name, "planned": planned.get(name), "run": n} for name, n in run.items()]
    return {
        "exists": True,
        "path": _shown(path),
        "pilot_commit": str(pilot["commit"]),
        "date": str(pilot["date"]),
        "method": " ".join(str(data["method"]).split()),
        "rows": rows,
        "unplanned": [r["experiment"] for r in rows if r["planned"] is None],
        "differ": [r for r in rows if r["planned"] is not None and r["planned"] != r["run"]],
    }


def _shown(path: Path) -> str:
    """A path as the page names it: relative to the repository where it lies inside it."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def design_changes(configs: pd.DataFrame, claims: pd.DataFrame) -> dict:
    """Where the testbed departs from the documents: the system study's settings that differ from the document's
    configurations (both known), and the claims judged on an adjusted, secondary design (`line`)."""
    rows = []
    if len(configs):
        known_both = configs[configs["ours"].notna() & configs["document"].notna()]
        differ = known_both[(known_both["ours"] != known_both["document"]) & ~known_both["key"].isin(SAME_MATHS)]
        rows = differ[["task", "config", "setting", "ours", "document"]].to_dict("records")
    secondary = claims.loc[claims["line"].astype(str) == "secondary", "claim_id"].tolist() if "line" in claims else []
    return {"system": rows, "secondary": secondary, "lines_recorded": "line" in claims}


def untested(coverage: list[dict], claims: pd.DataFrame) -> dict:
    """What was not tested or not judged: the coverage rows not testable at this scale or tested at the documents'
    scale only (with why), and the document claims not judged, by the kind of reason (the words before its first
    colon: "failure not established", "no data", ...)."""
    rows = [
        {
            "document": d["document"],
            "section": s["section"],
            "quote": r["quote"],
            "translation": r["translation"],
            "caveats": r["caveats"],
        }
        for d in coverage
        for s in d["sections"]
        for r in s["rows"]
        if any(c.startswith((NOT_TESTABLE, FULL_ONLY)) for c in r["caveats"])
    ]
    doc = claims[claims["kind"] == "document"] if len(claims) else claims
    judged_not = doc[doc["outcome"] == "not judged"] if len(doc) else doc
    kinds = judged_not["reason"].fillna("").map(lambda s: s.split(":")[0].strip() or "no reason given")
    return {
        "rows": rows,
        "not_judged": len(judged_not),
        "documents": len(doc),
        "reasons": kinds.value_counts().to_dict() if len(kinds) else {},
    }


def documents_scale(claims: pd.DataFrame, full: pd.DataFrame | None, full_dir: str | None) -> dict:
    """The documents' scale: whether a tree of it was given, and how many claims are tested there only."""
    only = int((claims["status"].astype(str) == FULL_ONLY).sum()) if "status" in claims else None
    out = {"given": full is not None, "dir": full_dir, "only_there": only}
    if full is not None:
        from mathrl.analysis.headlines import compare_scales

        cmp = compare_scales(claims, full)
        out.update(compared=cmp.compared, changed=cmp.differ, links=cmp.links)
    return out


def facts(
    cfg: dict,
    t,
    claims: pd.DataFrame,
    coverage: list[dict],
    full: pd.DataFrame | None = None,
    full_dir: str | None = None,
    plan: Path | None = None,
    machines: list | None = None,
) -> dict:
    """Every limitation's facts, for the template."""
    return {
        "warmups": warmups(claims, t["sft"], t["sft_spread"]),
        "seeds": seed_plan(cfg, plan),
        "design": design_changes(t["system_configs"], claims),
        "untested": untested(coverage, claims),
        "scale": documents_scale(claims, full, full_dir),
        "machines": machines or [],
    }
