"""The coverage table as the report shows it: what each document claims, section by section, and what became of it.

`results/tables/coverage.csv` (written by `mathrl aggregate` where the operationalisation is declared) has one row
per claim-bearing row of the four documents: its sentence (`quote`, in the document's language, and `translation`),
how the testbed tests it and the claim ids of claims.csv that do (`claim_ids`, separated by ";"), or why it cannot be
tested at this scale. The report joins it to claims.csv: each row with the outcome of each of its claims here and,
where a tree of the documents' scale is given, there, and a caveat derived from what claims.csv records of the claim
(its status, whether it is the document's own design, the warm-ups it rests on).

Without coverage.csv (a tree made before it existed) the rows are claims.csv's document claims, grouped by their
`source` (the document's file name and section), each in our words. A document claim no coverage row names is
listed under its source all the same, so every document claim of claims.csv appears in the table.
"""

from __future__ import annotations

import re

import pandas as pd

from mathrl.analysis.coverage import TESTED, document_and_section
from mathrl.analysis.measures.series import known
from mathrl.analysis.verdict import number

COVERAGE_TABLE = "coverage"  # results/tables/coverage.csv (mathrl.analysis.coverage writes it)


def text(value) -> str:
    """A CSV cell as text: empty for a missing one."""
    return value.strip() if isinstance(value, str) else ""


def caveats(claim: dict) -> list[str]:
    """What a reader must know before reading a claim's verdict, from its row of claims.csv: its status where it is
    not plainly tested, a secondary design, the warm-ups its estimate rests on and the share of its variance between
    them. Columns an older claims.csv lacks give nothing."""
    out = []
    status = text(claim.get("status"))
    if status and status != TESTED:
        out.append(status)
    if text(claim.get("line")) == "secondary":
        out.append("secondary design (adjusted from the document's; not counted in its family)")
    warmups, share = claim.get("warmups"), claim.get("between_share")
    if known(warmups) and warmups != "":
        k = int(float(warmups))
        words = "depends on one warm-up" if k == 1 else f"rests on {k} warm-ups"
        if known(share) and share != "":
            words += f", {float(share):.0%} of its variance between them"
        out.append(words)
    return out


def claim_cell(claim_id: str, claims: dict, full: dict | None) -> dict:
    """One claim of a coverage row: its outcome and difference here, its outcome in the documents'-scale tree (None
    without one), whether the two differ, and its caveats."""
    row = claims.get(claim_id)
    if row is None:
        return {
            "claim_id": claim_id,
            "outcome": "missing",
            "value": "not in claims.csv",
            "full": None,
            "differs": False,
            "caveats": [],
            "statement": "",
        }
    unit = row.get("unit") if isinstance(row.get("unit"), str) else "num"
    value = number(row.get("difference"), unit) if row["outcome"] != "not judged" else ""
    there = None if full is None else (full.get(claim_id) or {}).get("outcome", "not in that tree")
    return {
        "claim_id": claim_id,
        "outcome": row["outcome"],
        "value": value,
        "full": there,
        "differs": there is not None and there != row["outcome"],
        "caveats": caveats(row),
        "statement": text(row.get("statement")),
    }


def document_rows(claims: pd.DataFrame) -> pd.DataFrame:
    """Coverage rows made from claims.csv alone: one per document claim, under its source's document and section."""
    doc = claims[claims["kind"] == "document"] if len(claims) else claims
    rows = []
    for r in doc.to_dict("records"):
        document, section = document_and_section(text(r.get("source")))
        rows.append(
            {
                "document": document,
                "section": section,
                "row_id": r["claim_id"],
                "claim_ids": r["claim_id"],
                "quote": text(r.get("quote")),
                "translation": text(r.get("translation")) or text(r["statement"]),
                "status": text(r.get("status")),
                "why": "",
            }
        )
    return pd.DataFrame(
        rows, columns=["document", "section", "row_id", "claim_ids", "quote", "translation", "status", "why"]
    )


def ids_of(value) -> list[str]:
    """The claim ids of a coverage row's `claim_ids` cell ("a;b", spaces allowed)."""
    return [c.strip() for c in text(value).split(";") if c.strip()]


def table(coverage: pd.DataFrame, claims: pd.DataFrame, full: pd.DataFrame | None = None) -> list[dict]:
    """The coverage table as the template reads it: documents (by file name), each with its sections in the order
    they first appear, each with its rows; a row's claims (`claim_cell`) and its own caveats (its status and why).
    The document claims of claims.csv that no row names are added under their source."""
    by_id = {r["claim_id"]: r for r in claims.to_dict("records")} if len(claims) else {}
    there = None if full is None else ({r["claim_id"]: r for r in full.to_dict("records")} if len(full) else {})
    rows = coverage.copy() if coverage is not None and len(coverage) else document_rows(claims.iloc[0:0])
    named = {c for v in rows.get("claim_ids", pd.Series(dtype=object)) for c in ids_of(v)}
    unnamed = claims[(claims["kind"] == "document") & ~claims["claim_id"].isin(named)] if len(claims) else claims
    rows = pd.concat([rows, document_rows(unnamed)], ignore_index=True) if len(unnamed) else rows
    documents: dict[str, dict[str, list]] = {}
    for r in rows.to_dict("records"):
        status = text(r.get("status"))
        own = [status + (f": {text(r.get('why'))}" if text(r.get("why")) else "")] if status not in ("", TESTED) else []
        cells = [claim_cell(c, by_id, there) for c in ids_of(r.get("claim_ids"))]
        documents.setdefault(text(r["document"]), {}).setdefault(text(r.get("section")), []).append(
            {
                "row_id": text(str(r.get("row_id", ""))),
                "quote": text(r.get("quote")),
                "translation": text(r.get("translation")),
                "claims": cells,
                "caveats": own
                + [c for c in dict.fromkeys(x for cell in cells for x in cell["caveats"]) if c != status],
            }
        )
    out = [
        {
            "document": d,
            "sections": [{"section": s, "rows": sections[s]} for s in sorted(sections, key=order(sections))],
        }
        for d, sections in sorted(documents.items())
    ]
    seen: set[str] = set()
    for cell in (c for d in out for s in d["sections"] for r in s["rows"] for c in r["claims"]):
        # a claim that tests several rows: a verdict's source links to its first
        cell["anchor"] = cell["claim_id"] not in seen
        seen.add(cell["claim_id"])
    return out


CHINESE_NUMERALS = {c: i for i, c in enumerate("一二三四五六七八九十", 1)}


def order(headings) -> callable:
    """A sort key for a document's section headings: numbered ones ("2.1", "八 (troubleshooting)") by their numbers,
    then the others in the order they first appear (the documents' own order, as coverage.csv lists its rows)."""
    first = {h: i for i, h in enumerate(headings)}

    def key(heading: str):
        number = re.match(r"\d+(?:\.\d+)*", heading)
        if number:
            return (0, tuple(int(x) for x in number.group().split(".")), first[heading])
        if heading[:1] in CHINESE_NUMERALS and (len(heading) == 1 or not heading[1:2].isalnum()):
            return (0, (CHINESE_NUMERALS[heading[0]],), first[heading])
        return (1, (), first[heading])

    return key


def counts(documents: list[dict]) -> dict:
    """Rows, rows with a claim, and claims of the table, for its opening sentence."""
    rows = [r for d in documents for s in d["sections"] for r in s["rows"]]
    return {
        "rows": len(rows),
        "tested": sum(bool(r["claims"]) for r in rows),
        "claims": sum(len(r["claims"]) for r in rows),
        "differ": sum(c["differs"] for r in rows for c in r["claims"]),
    }
