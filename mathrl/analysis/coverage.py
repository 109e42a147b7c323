"""The operationalisation table: every claim-bearing row of the four documents, and how the testbed tests it.

One row per row of a document: its section, the row quoted in the document's language with our translation, the
document's setting and the testbed's translation of it (config/claims.yaml's `designs`), what would make the claim
fail, the smallest effect that matters, and the status: `tested` (by the claims named), `tested at the documents'
scale only` (config/full.yaml), or `not testable at this scale` (with the reason). The rows come from the declared
document claims (grouped by the row they quote) and from config/claims.yaml's `rows`, the documents' other rows.
`mathrl claims --coverage` prints it and `mathrl aggregate` writes it (results/tables/coverage.csv); torch-free.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from mathrl.analysis import claims as claims_engine
from mathrl.pipeline.errors import ConfigError

COLUMNS = [
    "document",
    "section",
    "row_id",
    "claim_ids",
    "quote",
    "translation",
    "document_setting",
    "testbed",
    "fails_if",
    "minimal_effect",
    "status",
    "why",
]
TESTED, FULL_ONLY, NOT_TESTABLE = "tested", "tested at the documents' scale only", "not testable at this scale"
STATUSES = (TESTED, FULL_ONLY, NOT_TESTABLE)


def read(path: Path | None = None) -> dict:
    """config/claims.yaml as data (rules, thresholds, designs, claims, rows)."""
    path = Path(path) if path else claims_engine.default_claims_file()
    return yaml.safe_load(path.read_text()) or {} if path.exists() else {}


def document_and_section(source: str) -> tuple[str, str]:
    """`file.md, section` (the first of several sources separated by ';') as (file, section)."""
    first = source.split(";")[0].strip()
    name, _, section = first.partition(",")
    return name.strip(), section.strip()


def fails_if(spec: claims_engine.ClaimSpec) -> str:
    """What would make a claim fail, from how it is judged."""
    claim = spec.verdict_claim
    if claim.kind == "equivalence":
        return f"the 95% interval reaches beyond ±{claim.margin:g}"
    if claim.kind == "noninferior":
        return f"the 95% interval lies beyond {claim.margin:g} on the losing side"
    side = "below 0" if claim.direction > 0 else "above 0"
    text = f"the 95% interval lies {side}"
    if claim.size is not None:
        text += " or excludes the document's size"
    checks = [c.label for c in spec.checks if c.type == "failure"]
    if checks:
        text += f"; judged only once the failure is shown ({'; '.join(checks)})"
    return text


def minimal_effect(spec: claims_engine.ClaimSpec) -> str:
    """The smallest effect that matters for the claim (config/claims.yaml's rule, stated once)."""
    claim = spec.verdict_claim
    if claim.kind in ("equivalence", "noninferior"):
        return f"the margin, {claim.margin:g}"
    if spec.size_basis:
        return f"the document's own number ({spec.size_basis})"
    if spec.unit == "pts" and spec.compare != "rate":
        return "3 points of held-out accuracy"
    return "what the design resolves (claims.csv's mde)"


def table(cfg: dict, path: Path | None = None) -> pd.DataFrame:
    """The operationalisation table of the declared claims (expanded without tables: a claim over a table's values
    is one row) and the documents' other rows."""
    data = read(path)
    designs = data.get("designs") or {}
    by_row: dict[tuple[str, str, str], dict] = {}
    for spec in (s for decl, _ in claims_engine.declarations(cfg, path) for s in _specs(decl, cfg)):
        if spec.kind != "document":
            continue
        design = designs.get(spec.design) or {}
        document, section = document_and_section(spec.source)
        key = (document, section, spec.quote)
        row = by_row.setdefault(
            key,
            {
                "document": document,
                "section": section,
                "row_id": spec.id,
                "claim_ids": [],
                "quote": spec.quote,
                "translation": spec.translation,
                "document_setting": design.get("document_setting", ""),
                "testbed": design.get("testbed", ""),
                "fails_if": fails_if(spec),
                "minimal_effect": minimal_effect(spec),
                "status": TESTED,
                "why": "" if spec.line != "secondary" else "a secondary line: the testbed's design",
            },
        )
        row["claim_ids"].append(spec.id)
        missing = absent_roles(cfg, spec)
        if missing:
            row["status"] = FULL_ONLY
            row["why"] = (
                f"this config names no role {', '.join(missing)} of {spec.experiment}: judged in config/full.yaml"
            )
    rows = [{**r, "claim_ids": ";".join(r["claim_ids"])} for r in by_row.values()]
    for r in data.get("rows") or []:
        document, section = document_and_section(r.get("source", ""))
        if r.get("status") not in STATUSES:
            allowed = ", ".join(STATUSES)
            raise ConfigError(f"claims.yaml rows ({r.get('id')}): status {r.get('status')!r}; allowed: {allowed}")
        rows.append(
            {
                "document": document,
                "section": section,
                "row_id": r["id"],
                "claim_ids": ";".join(r.get("claims") or []),
                "quote": r.get("quote", ""),
                "translation": r.get("translation", ""),
                "document_setting": "",
                "testbed": "",
                "fails_if": "",
                "minimal_effect": "",
                "status": r["status"],
                "why": r.get("why", ""),
            }
        )
    out = pd.DataFrame(rows, columns=COLUMNS)
    return out.sort_values(["document", "section"], kind="stable").reset_index(drop=True)


def absent_roles(cfg: dict, spec: claims_engine.ClaimSpec) -> list[str]:
    """The optional roles of a claim that this config's experiment does not name (the claim is not judged here)."""
    roles = ((cfg.get("experiments") or {}).get(spec.experiment or "") or {}).get("roles") or {}
    return [r for r in spec.optional_roles if r not in roles]


def _specs(decl: dict, cfg: dict) -> list[claims_engine.ClaimSpec]:
    return [claims_engine.parse(d, "") for d in claims_engine.expand(decl, None, cfg)]
