"""The report's headline findings: declared in `report/headlines.yaml`, filled from the run's claims.csv and tables.

Which findings lead the page is data, not code. Each headline names the section it summarises and binds names to
what it reads: a claim of claims.csv (`claims`), a cell of a table with its interval (`cells`), the outcomes of a
group of claims (`groups`), or the comparison with the documents' scale (`scale: true`). Its `text` is a Jinja
sentence over those names; every number in it comes from them, so the text itself holds no digit.

A headline that reads a claim or table row the run does not have, or a claim that was not judged, is left out, and
the page says so; one that names a claim declared nowhere (the claim ids change as the science does), a table column
or a section that does not exist is left out with a warning of `mathrl report`. The page never shows a headline with
a number missing or typed in.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import pandas as pd
from jinja2 import StrictUndefined, TemplateError
from jinja2.sandbox import SandboxedEnvironment
from markupsafe import Markup, escape

from mathrl.analysis.measures.series import known
from mathrl.analysis.verdict import interval_numbers, number, t_halfwidth
from mathrl.pipeline.config import ROOT, read_yaml
from mathrl.pipeline.errors import ConfigError

HEADLINES_FILE = ROOT / "report" / "headlines.yaml"
OUTCOMES = ("agrees", "disagrees", "inconclusive", "not judged")
KEYS = {"id", "section", "text", "claims", "cells", "groups", "scale"}
CELL_KEYS = {"table", "where", "value", "lo", "hi", "std", "n", "unit"}


@dataclass
class Measured:
    """A number a headline reads, with its interval and n, as the page prints them; `link` points at its verdict."""

    value: str
    interval: str
    n: str
    outcome: str = ""
    statement: str = ""
    anchor: str = ""

    @property
    def link(self) -> Markup:
        """The outcome as a link to the verdict (plain text where there is none)."""
        if not self.anchor:
            return Markup(escape(self.outcome))
        return Markup(f'<a href="#{escape(self.anchor)}">{escape(self.outcome)}</a>')

    def __str__(self) -> str:
        return f"{self.value} ({self.interval}, {self.n})"

    def __html__(self) -> str:
        return str(escape(str(self)))


@dataclass
class Outcomes:
    """The outcomes of a group of claims: counts by outcome and links to each verdict."""

    rows: list[dict] = field(default_factory=list)

    def count(self, outcome: str) -> int:
        return sum(r["outcome"] == outcome for r in self.rows)

    @property
    def total(self) -> int:
        return len(self.rows)

    @property
    def decided(self) -> int:
        return self.count("agrees") + self.count("disagrees")

    @property
    def links(self) -> Markup:
        """Each claim as a link to its verdict, with its outcome."""
        return Markup(", ").join(
            Markup(f'<a href="#claim-{escape(r["claim_id"])}">{escape(r["claim_id"])}</a> ({escape(r["outcome"])})')
            for r in self.rows
        )


@dataclass
class ScaleComparison:
    """The claims judged both here and in the documents'-scale tree, and those whose outcome differs there."""

    compared: int
    changed: list[dict]

    @property
    def differ(self) -> int:
        return len(self.changed)

    @property
    def links(self) -> Markup:
        return Markup(", ").join(
            Markup(
                f'<a href="#claim-{escape(r["claim_id"])}">{escape(r["claim_id"])}</a> '
                f"({escape(r['outcome'])} here, {escape(r['full'])} there)"
            )
            for r in self.changed
        )


def load(path=None) -> list[dict]:
    """The declared headlines, checked: a mapping with a `headlines` list, each with an id, a section and a text
    without digits (numbers come from the run), and bindings of the known kinds."""
    path = path or HEADLINES_FILE
    if not path.is_file():
        return []
    data = read_yaml(path) or {}
    items = data.get("headlines")
    if not isinstance(items, list):
        raise ConfigError(f"{path}: `headlines` must be a list of headlines (id, section, text, and what each reads)")
    seen = set()
    for i, h in enumerate(items):
        where = f"{path}: headline {h.get('id', i) if isinstance(h, dict) else i}"
        if not isinstance(h, dict) or not {"id", "section", "text"} <= set(h):
            raise ConfigError(f"{where}: needs `id`, `section` and `text`")
        if set(h) - KEYS:
            raise ConfigError(f"{where}: unknown key(s) {sorted(set(h) - KEYS)}; allowed: {sorted(KEYS)}")
        if h["id"] in seen:
            raise ConfigError(f"{where}: id declared twice")
        seen.add(h["id"])
        words = re.sub(r"{{.*?}}|{%.*?%}", "", str(h["text"]), flags=re.S)
        if re.search(r"\d", words):
            raise ConfigError(
                f"{where}: a digit in its text ({words.strip()[:80]!r}): numbers come from the run, "
                "through the names it binds"
            )
        for name, cell in (h.get("cells") or {}).items():
            if not isinstance(cell, dict) or "table" not in cell or "value" not in cell or set(cell) - CELL_KEYS:
                raise ConfigError(
                    f"{where}: cell {name} needs `table` and `value` (and may give where, lo, hi, std, n, "
                    f"unit), got {cell!r}"
                )
    return items


def claim_measured(row: dict) -> Measured:
    """A judged claim's difference, 95% interval and n, as a headline says them."""
    unit = row.get("unit") if isinstance(row.get("unit"), str) else "num"
    x, lo, hi = row.get("difference"), row.get("ci_low"), row.get("ci_high")
    if known(lo, hi) and hi > lo:
        v, a, b = interval_numbers(x, lo, hi, unit)
        interval = f"95% CI [{a}, {b}]"
    else:
        v, interval = number(x, unit), "no interval" if not known(lo, hi) else "every seed the same"
    n_a, n_b = row.get("n_a"), row.get("n_b")
    if row.get("design") in ("unpaired", "rates") and known(n_a, n_b) and n_b:
        n = f"n={int(n_a)} vs {int(n_b)}"
    else:
        n = f"n={int(row['n']) if known(row.get('n')) else 0}"
    return Measured(v, interval, n, row["outcome"], row.get("statement", ""), f"claim-{row['claim_id']}")


def cell_measured(tables, cell: dict) -> Measured | None:
    """A table row's value with its 95% interval (its `lo` and `hi` columns, or a t interval from `std` and `n`);
    None where the table has no such row or the value is missing."""
    df = tables[cell["table"]]
    where = cell.get("where") or {}
    if df.empty or any(k not in df for k in [*where, cell["value"]]):
        return None
    rows = df[(df[list(where)].astype(str) == [str(v) for v in where.values()]).all(axis=1)] if where else df
    if rows.empty or not known(rows.iloc[0][cell["value"]]):
        return None
    r, unit = rows.iloc[0], cell.get("unit", "num")
    x, n = float(r[cell["value"]]), r.get(cell.get("n", "n"))
    if "lo" in cell and "hi" in cell:
        lo, hi = r.get(cell["lo"]), r.get(cell["hi"])
    elif "std" in cell and known(r.get(cell["std"]), n):
        half = float(t_halfwidth(r[cell["std"]], n))
        lo, hi = x - half, x + half
    else:
        lo = hi = math.nan
    if known(lo, hi) and hi > lo:
        v, a, b = interval_numbers(x, float(lo), float(hi), unit)
        interval = f"95% CI [{a}, {b}]"
    else:
        v, interval = number(x, unit), "no interval"
    return Measured(v, interval, f"n={int(n)}" if known(n) else "n unknown")


def declared_ids(cfg: dict) -> list[re.Pattern]:
    """The claim ids the configuration declares (config/claims.yaml and the experiments' own claims), as patterns: a
    `foreach` declaration's placeholders ("equal_samples_{batch_size}") match any text."""
    from mathrl.analysis.claims import declarations

    ids = [str(d.get("id", "")) for d, _ in declarations(cfg)]
    return [re.compile(".+".join(re.escape(part) for part in re.split(r"{[^}]*}", i))) for i in ids if i]


@dataclass
class Reasons:
    """Why a headline is not shown: `stale`, what report/headlines.yaml names that no longer exists (a claim declared
    nowhere, a table column or a section the page lacks: a warning), and `absent`, what this run does not have (a
    study its config leaves out, a claim not judged, no documents'-scale tree: said on the page)."""

    stale: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)


def bind(h: dict, claims: pd.DataFrame, tables, full, known_id, reasons: Reasons) -> dict:
    """The names a headline's text reads, each from claims.csv or a table; what cannot be bound goes to `reasons`."""
    names = {}
    by_id = {r["claim_id"]: r for r in claims.to_dict("records")} if len(claims) else {}
    for name, claim_id in (h.get("claims") or {}).items():
        row = by_id.get(claim_id)
        if not known_id(claim_id):
            reasons.stale.append(f"claim {claim_id} is declared nowhere (config/claims.yaml or an experiment's claims)")
        elif row is None:
            reasons.absent.append(f"claim {claim_id} is not in this run's claims.csv")
        elif row["outcome"] == "not judged" or not known(row.get("difference")):
            reasons.absent.append(f"claim {claim_id} was not judged")
        else:
            names[name] = claim_measured(row)
    for name, cell in (h.get("cells") or {}).items():
        df = tables[cell["table"]]
        wanted = [*(cell.get("where") or {}), *(cell[k] for k in ("value", "lo", "hi", "std", "n") if k in cell)]
        if len(df.columns) and set(wanted) - set(df.columns):
            reasons.stale.append(
                f"table {cell['table']} has no column {', '.join(sorted(set(wanted) - set(df.columns)))}"
            )
        elif (m := cell_measured(tables, cell)) is None:
            reasons.absent.append(f"table {cell['table']} has no value {cell['value']} where {cell.get('where') or {}}")
        else:
            names[name] = m
    for name, ids in (h.get("groups") or {}).items():
        if unknown := [i for i in ids if not known_id(i)]:
            reasons.stale.append(f"claim(s) {', '.join(unknown)} declared nowhere")
        elif missing := [i for i in ids if i not in by_id]:
            reasons.absent.append(f"claim(s) {', '.join(missing)} not in this run's claims.csv")
        names[name] = Outcomes([by_id[i] for i in ids if i in by_id])
    if h.get("scale"):
        if full is None:
            reasons.absent.append("no documents'-scale tree was given (mathrl report --full-results DIR)")
        else:
            names["scale"] = compare_scales(claims, full)
    return names


def fill(
    headlines: list[dict],
    claims: pd.DataFrame,
    tables,
    full: pd.DataFrame | None = None,
    declared: list[re.Pattern] | None = None,
    sections=None,
):
    """Each declared headline as {"id", "section", "text"} (the text as Markup); those not shown as {"id", "why"}; and
    the warnings: a headline naming a claim declared nowhere (every claim missing from claims.csv, without
    `declared`), a table column or a section (`sections`: the page's anchors) that does not exist."""
    env = SandboxedEnvironment(autoescape=True, undefined=StrictUndefined)
    by_id = {r["claim_id"]: r for r in claims.to_dict("records")} if len(claims) else {}
    known_id = (lambda i: any(p.fullmatch(i) for p in declared)) if declared is not None else (lambda i: i in by_id)
    shown, skipped, warnings = [], [], []
    for h in headlines:
        reasons = Reasons()
        if sections is not None and h["section"] not in sections:
            reasons.stale.append(f"section {h['section']} is not a section of the page")
        names = bind(h, claims, tables, full, known_id, reasons)
        if not reasons.stale and not reasons.absent:
            try:
                text = env.from_string(str(h["text"]).strip()).render(**names)
            except TemplateError as e:
                reasons.stale.append(f"its text does not render: {e}")
        if reasons.stale:
            warnings.append(f"{shown_path(HEADLINES_FILE)}: headline {h['id']} skipped: {'; '.join(reasons.stale)}")
        if reasons.stale or reasons.absent:
            skipped.append({"id": h["id"], "why": "; ".join(reasons.stale + reasons.absent)})
            continue
        shown.append({"id": h["id"], "section": h["section"], "text": Markup(text)})
    return shown, skipped, warnings


def shown_path(path) -> str:
    """A path as a message names it: relative to the repository where it lies inside it."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def compare_scales(claims: pd.DataFrame, full: pd.DataFrame) -> ScaleComparison:
    """The claims judged (agrees, disagrees, inconclusive) in both trees, and those whose outcome differs."""
    judged = ("agrees", "disagrees", "inconclusive")
    here = claims[claims["outcome"].isin(judged)].set_index("claim_id")["outcome"] if len(claims) else pd.Series()
    there = full[full["outcome"].isin(judged)].set_index("claim_id")["outcome"] if len(full) else pd.Series()
    both = [c for c in here.index if c in there.index]
    changed = [{"claim_id": c, "outcome": here[c], "full": there[c]} for c in both if here[c] != there[c]]
    return ScaleComparison(len(both), changed)
