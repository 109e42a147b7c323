"""The view of claims.csv a report section shows: its rows under the names the verdict macros read, each with its
sentence (`mathrl.analysis.verdict.sentence`), claims expanded over a table's values folded into one row with the
values as a list, and the rows grouped by the claim's part or keyed by its id.
"""

from __future__ import annotations

import pandas as pd

from mathrl.analysis.measures.series import known
from mathrl.analysis.verdict import interval_numbers, number, sentence


def claim_frame(t, section: str, part: str | None = None) -> pd.DataFrame:
    """A section's rows of claims.csv (the one engine's verdicts, `mathrl.analysis.claims`) under the
    names the report's verdict macros read: key, claim, diff, and the checks' text as `engaged`."""
    from mathrl.analysis.claims import section_rows

    return claim_view(section_rows(t["claims"], section, part))


def claim_view(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of claims.csv under the verdict macros' names."""
    return df.rename(
        columns={
            "claim_id": "key",
            "statement": "claim",
            "difference": "diff",
            "engaged": "engaged_passed",
            "checks": "engaged",
        }
    )


def verdict_rows(df: pd.DataFrame) -> list[dict]:
    """A verdicts table read back from CSV, as dicts for the template macro (with `sentence`)."""
    if df is None or df.empty:
        return []
    text = df.columns.isin(["reason", "note", "outcome", "design", "unit", "engaged"])  # missing text: None, else NaN
    rows = df.astype(object).where(df.notna() | ~text, None).to_dict("records")
    for r in rows:
        r.update({k: r.get(k) or "" for k in ("reason", "note", "engaged")})
        r["sentence"] = sentence(r)
    return fold(rows)


def brief(r: dict) -> str:
    """A verdict in a few words, for its first line: the difference, its 95% interval and n; for a claim not judged,
    the checks that failed by their labels (the full checks follow in `said`)."""
    if r.get("outcome") == "not judged":
        kind, _, rest = str(r.get("reason") or "").partition(": ")
        if kind in NOT_JUDGED_BY:
            return f"{kind}: " + ", ".join(dict.fromkeys(part.split(":")[0] for part in rest.split("; ")))
        return str(r.get("reason") or "no reason recorded")
    unit = r.get("unit") or "num"
    n_a, n_b = r.get("n_a"), r.get("n_b")
    if r.get("design") in ("unpaired", "rates") and known(n_a, n_b) and n_b:
        n = f"n={int(n_a)} vs {int(n_b)}"
    else:
        n = f"n={int(r['n']) if known(r.get('n')) else 0}"
    lo, hi, x = r.get("ci_low"), r.get("ci_high"), r.get("diff")
    if known(lo, hi) and hi > lo:
        value, lo, hi = interval_numbers(x, lo, hi, unit)
        return f"{value} [{lo}, {hi}], {n}"
    return f"{number(x, unit)} ({'every seed the same' if r.get('design') == 'exact' else 'no interval'}), {n}"


NOT_JUDGED_BY = (
    "precondition not met",
    "failure not established",
    "mechanism not engaged",
)  # mathrl.analysis.claims's words


def fold(rows: list[dict]) -> list[dict]:
    """Each verdict's checks and notes folded into its text, each said once: `said` (the verdict in words, then its
    checks and notes) and `remarks` (the same without the numbers a verdicts table has columns for), as Markup.

    A not-judged verdict names the checks that failed and then the others; a check or note that an earlier verdict of
    `rows` already states in full is named by its label alone with a link to that verdict (a failure five remedies
    share is stated under the first)."""
    from markupsafe import Markup, escape

    first: dict[str, str] = {}

    def items(parts: list[str], key: str) -> Markup:
        out = []
        for part in parts:
            if part in first and first[part] != key:
                label = part.split(":")[0]
                label = label.split(" (")[0] if len(label) > 60 else label  # a long note by its first words
                out.append(
                    escape(label)
                    + Markup(f' (as for <a href="#claim-{escape(first[part])}">')
                    + escape(first[part])
                    + Markup("</a>)")
                )
            else:
                first.setdefault(part, key)
                out.append(escape(part))
        return Markup("; ").join(out)

    for r in rows:
        r["short"] = brief(r)
        key, checks = r.get("key", ""), [c for c in str(r.get("engaged") or "").split("; ") if c]
        notes = [n for n in str(r.get("note") or "").split("; ") if n]
        note = Markup(" <em>") + items(notes, key) + Markup(".</em>") if notes else Markup("")
        reason = str(r.get("reason") or "")
        kind, _, rest = reason.partition(": ")
        failed = rest.split("; ") if kind in NOT_JUDGED_BY else []
        if r.get("outcome") == "not judged" and failed and set(failed) <= set(checks):
            others = [c for c in checks if c not in failed]
            text = Markup("Not judged: ") + escape(kind) + Markup(": ") + items(failed, key) + Markup(".")
            if others:
                text += Markup(" Other checks: ") + items(others, key) + Markup(".")
            r["said"] = r["remarks"] = text + note
            continue
        listed = Markup(" Checks: ") + items(checks, key) + Markup(".") if checks else Markup("")
        if r.get("outcome") == "not judged":
            r["said"] = r["remarks"] = escape(r["sentence"]) + listed + note
        else:
            r["said"] = escape(r["sentence"]) + listed + note
            r["remarks"] = (escape(reason[:1].upper() + reason[1:] + ".") if reason else Markup("")) + listed + note
    return rows


def verdicts(t, section: str, part: str | None = None) -> list[dict]:
    """A section's verdict rows, for the template's macros (`power_note` of mathrl.analysis.report states their
    power)."""
    return verdict_rows(claim_frame(t, section, part))


def by_part(rows: list[dict]) -> dict[str, list[dict]]:
    """Verdict rows grouped by their claim's `part`, in claims.csv's order."""
    parts = dict.fromkeys(r.get("part") or "" for r in rows)
    return {part: [r for r in rows if (r.get("part") or "") == part] for part in parts}


def by_key(rows: list[dict]) -> dict[str, dict]:
    return {r["key"]: r for r in rows}
