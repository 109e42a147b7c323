"""`mathrl report`: one self-contained HTML page from the tables and figures.

Jinja2 with autoescaping; CSS inline, figures embedded as data URIs, nothing fetched from
the network, so the page opens from disk. Every number comes from results/tables/*.csv
(or the files named in the reproducibility section), none is typed in.
"""

from __future__ import annotations

import base64
import glob
import json
import math
import numbers
import os
import platform
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import yaml
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup, escape

from mathrl import cpu_model
from mathrl.analysis.figure_style import NONNEGATIVE, SHARE, band_limits
from mathrl.analysis.kit import records
from mathrl.analysis.measures.series import known
from mathrl.analysis.results import COLLAPSE_DEFINITION
from mathrl.analysis.section_verdicts import verdicts
from mathrl.analysis.studies import STUDIES
from mathrl.analysis.study_inputs import Tables
from mathrl.analysis.verdict import OUTCOMES, interval_numbers, number, seeds_text, t_halfwidth
from mathrl.pipeline import layout
from mathrl.pipeline.atomic import atomic_write
from mathrl.pipeline.config import ROOT, config_hash
from mathrl.pipeline.errors import ConfigError

TEMPLATES = ROOT / "report" / "templates"


def fmt(value, spec: str = ".3g") -> str:
    """A number for people: NaN and None show as a dash, floats with `spec`."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, numbers.Integral):  # numpy integers too; never in e-notation
        return f"{int(value):,}" if spec == ".3g" else format(int(value), spec)
    if isinstance(value, numbers.Real):
        if float(value).is_integer() and abs(value) < 1e6 and spec == ".3g":
            return f"{int(value):,}"
        return format(float(value), spec)
    return str(value)


def pct(value, digits: int = 1) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.{digits}f}%"


def seeds(value) -> str:
    """Seeds per arm a claim needs, as the verdicts say it ("more than 1000" past the power calculation's cap)."""
    known = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    return seeds_text(float(value)) if known else "–"


def cell(value, spec: str = ".3g") -> str:
    """A table cell's text: `spec` is a format for fmt(), "pct" (a share as %), "pts" (a difference of shares,
    in accuracy points) or "seeds" (seeds a claim needs)."""
    if spec == "pct":
        return pct(value)
    if spec == "seeds":
        return seeds(value)
    if spec == "pts" and isinstance(value, numbers.Real) and not isinstance(value, bool):
        return number(float(value), "pts", sign=False)
    return fmt(value, ".3g" if spec == "pts" else spec)


def trained(runs: pd.DataFrame) -> pd.Series:
    """Rows of the run index that are trained runs (not a second experiment's read of one)."""
    if "same_as" not in runs:
        return pd.Series(True, index=runs.index)
    return runs["same_as"].isna() | runs["same_as"].eq("")  # read from CSV, an all-empty column is float NaN


def run_machines(runs: pd.DataFrame) -> list[dict]:
    """The CPUs and CPU kernels the finished runs were trained with (each summary's versions), with
    how many runs each: [{"cpu", "cpu_kernels", "runs"}], "not recorded" where a summary has none."""
    done = runs[trained(runs) & runs["status"].eq("complete")]
    if done.empty:
        return []
    # A column missing, empty or all-NaN (as CSV reads an all-empty one back) is "not recorded".
    named = done.reindex(columns=["cpu", "cpu_kernels"]).astype(object).fillna("").replace("", "not recorded")
    counts = named.value_counts(["cpu", "cpu_kernels"]).rename("runs").reset_index()
    counts = counts.sort_values(["runs", "cpu", "cpu_kernels"], ascending=[False, True, True])
    return [{"cpu": r.cpu, "cpu_kernels": r.cpu_kernels, "runs": int(r.runs)} for r in counts.itertuples()]


def html_table(
    df: pd.DataFrame, columns: list[str] | dict | None = None, formats: dict | None = None, caption: str = ""
) -> Markup:
    """A DataFrame as an escaped HTML table; `columns` may map column names to headers.

    `formats` maps columns to a spec of cell(); an empty frame says so instead of vanishing."""
    if df is None or df.empty:
        return Markup('<p class="missing">No data: the runs this table needs are missing or unreadable.</p>')
    if columns is None:
        columns = list(df.columns)
    headers = columns if isinstance(columns, dict) else {c: c for c in columns}
    formats = formats or {}
    out = ['<div class="tablewrap"><table>']
    if caption:
        out.append(f"<caption>{escape(caption)}</caption>")
    out.append("<thead><tr>" + "".join(f"<th>{escape(h)}</th>" for h in headers.values()) + "</tr></thead><tbody>")
    for _, row in df.iterrows():
        cells = []
        for col in headers:
            value = row.get(col)
            text = escape(cell(value, formats.get(col, ".3g")))
            numeric = (
                isinstance(value, numbers.Real)
                and not isinstance(value, bool)
                and not (isinstance(value, float) and math.isnan(value))
            )
            cells.append(f'<td class="{"num" if numeric else ""}">{text}</td>')
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table></div>")
    return Markup("".join(out))


def figure_uris(cfg: dict) -> dict[str, str]:
    uris = {}
    for path in sorted(layout.at(cfg, layout.FIGURES).glob("*.png")):
        uris[path.stem] = "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()
    return uris


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def stage_times(cfg: dict) -> pd.DataFrame:
    """Per-stage wall times from Snakemake's benchmark files (results/benchmarks/{rule}/...)."""
    rows = []
    for path in glob.glob(str(layout.at(cfg, layout.BENCHMARKS) / "**" / "*.tsv"), recursive=True):
        try:
            b = pd.read_csv(path, sep="\t")
        except (OSError, ValueError):
            continue
        rule = Path(path).relative_to(layout.at(cfg, layout.BENCHMARKS)).parts[0]
        rows.append(
            {
                "stage": rule,
                "job": Path(path).stem,
                "seconds": float(b["s"].iloc[0]),
                "max_rss_mb": float(b.get("max_rss", pd.Series([math.nan])).iloc[0]),
            }
        )
    df = pd.DataFrame(rows, columns=["stage", "job", "seconds", "max_rss_mb"])
    if df.empty:
        return df
    return (
        df.groupby("stage")
        .agg(
            jobs=("job", "count"),
            total_seconds=("seconds", "sum"),
            max_seconds=("seconds", "max"),
            max_rss_mb=("max_rss_mb", "max"),
        )
        .reset_index()
    )


def gpu_names() -> str:
    """The GPUs nvidia-smi lists on this machine, or "none" (torch is not imported for this)."""
    names = _run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]) if shutil.which("nvidia-smi") else ""
    return ", ".join(line.strip() for line in names.splitlines() if line.strip()) or "none"


def reproducibility(cfg: dict, t: Tables) -> dict:
    versions = {}
    for name in ("torch", "numpy", "pandas", "matplotlib", "jinja2", "snakemake", "dvc"):
        try:
            from importlib.metadata import version

            versions[name] = version(name)
        except Exception:
            versions[name] = "not installed"
    commit = _run(["git", "rev-parse", "HEAD"]) or "unknown (not a git checkout)"
    dirty = bool(_run(["git", "status", "--porcelain", "--untracked-files=no"]))
    if os.environ.get("DVC_STAGE"):  # inside `dvc repro`, whose lock a nested `dvc status` cannot take
        dvc_status = f"built by dvc repro (stage {os.environ['DVC_STAGE']})"
    elif Path(cfg["results"]).resolve() != (ROOT / "results").resolve():
        dvc_status = f"not checked: {cfg['results']} is not the results tree dvc.yaml tracks"
    elif not (ROOT / "dvc.lock").exists():
        # Without a lock file `dvc status` only lists every stage as changed (and takes seconds).
        dvc_status = "no dvc.lock: this tree was built by Snakemake, not by dvc repro"
    elif (ROOT / "dvc.yaml").exists() and (ROOT / ".dvc").exists():
        lines = (
            _run([sys.executable, "-m", "dvc", "status"]) or "unavailable (dvc status printed nothing)"
        ).splitlines()
        dvc_status = "\n".join(lines[:40] + ([f"... ({len(lines) - 40} more lines)"] if len(lines) > 40 else []))
    else:
        dvc_status = "no dvc.yaml"
    return {
        "commit": commit + (" (with uncommitted changes)" if dirty else ""),
        "config_hash": config_hash(cfg),
        "versions": {"python": platform.python_version(), **versions},
        "hardware": {
            "machine": platform.machine(),
            "processor": cpu_model(),
            "cpus": os.cpu_count(),
            "cuda": gpu_names(),
        },
        "run_machines": run_machines(t["runs"]),
        "stage_times": stage_times(cfg),
        "dvc_status": dvc_status,
        "generated": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def claims_summary(t: Tables, method: str = "bh") -> dict:
    """The report's opening counts (claims_counts.csv), the document family's p-values (raw, Holm,
    Benjamini-Hochberg), the adjustment that decides it and the outcomes under the other, and its
    setup checks, shown apart."""
    from mathrl.analysis import claims
    from mathrl.analysis.section_verdicts import claim_view, verdict_rows

    c = t["claims"]
    words = claims.ADJUSTMENTS[method][1]
    if c.empty:
        return {
            "counts": pd.DataFrame(),
            "setup": [],
            "family": 0,
            "demoted": 0,
            "family_rows": pd.DataFrame(),
            "adjustment": words,
            "other": {},
        }
    doc = c["kind"].eq("document")
    other = next(m for m in claims.ADJUSTMENTS if m != method)
    redone = claims.adjust(c.assign(outcome=c["outcome_unadjusted"]), other)
    return {
        "counts": t["claims_counts"],
        "setup": verdict_rows(claim_view(c[c["kind"].eq("setup")])),
        "family_rows": c[doc & c["p_holm"].notna()].sort_values("p_value"),  # the claims the adjustment covered
        "family": int((doc & c["p_holm"].notna()).sum()),
        "demoted": int((doc & c["outcome"].ne(c["outcome_unadjusted"])).sum()),
        "adjustment": words,
        "other": {
            "adjustment": claims.ADJUSTMENTS[other][1],
            "total": int(doc.sum()),
            "decided": int(redone.loc[doc, "outcome"].isin(["agrees", "disagrees"]).sum()),
            "decided_here": int(c.loc[doc, "outcome"].isin(["agrees", "disagrees"]).sum()),
        },
    }


def power_note(rows) -> str:
    """A section's verdicts in one sentence: the n per arm they rest on and their outcomes (each verdict states the
    smallest effect it could detect and, where inconclusive, the seeds it would need)."""
    df = pd.DataFrame(list(rows))
    if df.empty:
        return "No verdicts: no runs with a result."
    judged = df[df["outcome"] != "not judged"]
    ns = sorted({int(n) for n in judged["n"].dropna()}) if len(judged) else []
    counts = df["outcome"].value_counts()
    outcomes = ", ".join(f"{counts.get(o, 0)} {o}" for o in OUTCOMES)
    return f"n per arm: {', '.join(map(str, ns)) if ns else 'none'}. {outcomes}."


def pm(mean, std, n, unit: str = "pts", bounds: tuple | None = None) -> str:
    """`mean [lo, hi] (n=k)`: a mean with its 95% t interval (clipped to `bounds`), in a unit of
    mathrl.analysis.verdict.number."""
    if not known(mean):
        return "no data"
    h = float(t_halfwidth(std, n)) if known(std, n) else math.nan
    lo, hi = band_limits([mean], [std], n, bounds) if known(h) else ([math.nan], [math.nan])
    return interval_text(mean, lo[0], hi[0], n, unit)


def interval_text(mean, lo, hi, n, unit: str = "pct") -> str:
    """`mean [lo, hi] (n=k)` in a unit of mathrl.analysis.verdict.number; no interval where lo or hi is unknown."""
    if not known(mean):
        return "no data"
    count = f"(n={int(n) if known(n) else 0})"
    if not known(lo, hi):
        return f"{number(mean, unit, sign=False)} {count}"
    x, lo, hi = interval_numbers(mean, lo, hi, unit, sign=False)
    return f"{x} [{lo}, {hi}] {count}"


def spec(value, format_spec: str = ".3g") -> str:
    """A number in a sentence, formatted by `format_spec` as Python's format() does; a dash when missing."""
    return format(value, format_spec) if known(value) else "–"


def ci(row, col: str, kind: str = "pct") -> str:
    """`mean [95% interval] (n=k)` of a summary row's `{col}_mean`, `{col}_std` and `n`; kind: pct (a share,
    interval within [0, 1]), pts (a size in accuracy points, interval at least 0), num (unbounded)."""
    if row is None or not known(row.get(f"{col}_mean")):
        return "no data"
    limits = {"pct": SHARE, "pts": NONNEGATIVE}.get(kind)
    return pm(row[f"{col}_mean"], row.get(f"{col}_std", math.nan), row["n"], kind, bounds=limits)


def sd(row: dict, key: str, format_spec: str = ".3g") -> str:
    """`mean ± std` of a row's `key` (a `{v}_mean` column, or a pooled value `v` beside `v_std`)."""
    return f"{spec(row.get(key), format_spec)} ± {spec(row.get(key.removesuffix('_mean') + '_std'), format_spec)}"


def environment() -> Environment:
    """The report's Jinja environment: its templates, the filters `fmt`, `pct`, `unit` and `spec`, the
    test `startswith`, the functions `table()`, `ci()`, `sd()`, `pm()`, `interval_text()`,
    `power_note()`, `records()` and `known()` and the text `collapse_definition`, with which the
    section templates write their sentences from the numbers their study passes. The study tests
    render their sections with it, so they see what the report does."""
    loader = FileSystemLoader(TEMPLATES)
    env = Environment(loader=loader, autoescape=True, undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)

    def unit(x, u="num", sign=True):
        return number(None if x is None else float(x), u, sign)

    env.filters.update(fmt=fmt, pct=pct, unit=unit, spec=spec, seeds=seeds)
    env.tests.update(startswith=lambda value, prefix: str(value).startswith(prefix))
    env.globals.update(
        table=html_table,
        ci=ci,
        sd=sd,
        interval_text=interval_text,
        records=records,
        known=known,
        pm=pm,
        power_note=power_note,
        collapse_definition=COLLAPSE_DEFINITION,
        tables_href=layout.TABLES,
    )
    return env


def full_claims(results: str | Path | None) -> pd.DataFrame | None:
    """claims.csv of a results tree of the documents' scale (`mathrl report --full-results DIR`), or None without one;
    a directory without it is an error naming the file."""
    if results is None:
        return None
    path = Path(results) / layout.CLAIMS
    if not path.is_file():
        raise ConfigError(
            f"--full-results {results}: no {path} (give the results directory of a config/full.yaml "
            "tree, after its `mathrl aggregate`)"
        )
    return pd.read_csv(path)


CLAIM_ID = re.compile(r'id="claim-([^"]+)"')
LEFTOVERS = (
    '{% from "macros.html.j2" import verdict_table %}<h3>Other verdicts of this section</h3>'
    "<p>The verdicts of this section's claims that its text above does not show.</p>{{ verdict_table(rows) }}"
)


def section_html(env: Environment, study, t: Tables, figures: dict, tables_href: str) -> Markup:
    """A study's section, its verdicts each printed once: its template, then a table of those of its claims the
    template does not show."""
    html = env.get_template(f"sections/{study.NAME}.html.j2").render(
        ctx=study.section(t), figures=figures, tables_href=tables_href
    )
    shown = set(CLAIM_ID.findall(html))
    rest = [r for r in verdicts(t, study.NAME) if r["key"] not in shown]
    if rest:
        html += env.from_string(LEFTOVERS).render(rows=rest)
    return Markup(html)


def printed_twice(parts) -> list[str]:
    """Claim ids whose verdict the page prints more than once (a template showing a verdict its section also shows)."""
    ids = [i for part in parts for i in CLAIM_ID.findall(str(part))]
    return sorted({i for i in ids if ids.count(i) > 1})


def runs_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """The run index in a few rows: per experiment, the runs the config expands into, those trained here (not read
    from another experiment's run), and how many of those completed, stopped or have no result."""
    if runs.empty:
        return pd.DataFrame()
    own = trained(runs)
    status = runs["status"].astype(str)
    rows = runs.assign(
        trained=own,
        complete=own & status.eq("complete"),
        stopped=own & status.str.startswith("stopped"),
        without=own & status.isin(["missing", "unreadable", "stale"]),
        shared=~own,
        seconds=runs["wall_seconds"].where(own),
    )
    out = rows.groupby("experiment", sort=False).agg(
        runs=("run_id", "count"),
        trained=("trained", "sum"),
        shared=("shared", "sum"),
        complete=("complete", "sum"),
        stopped=("stopped", "sum"),
        without=("without", "sum"),
        seconds=("seconds", "sum"),
    )
    return out.reset_index()


def alerts_summary(alerts: pd.DataFrame) -> pd.DataFrame:
    """The stability monitor's alerts in a few rows: per kind, how many fired, in how many runs and experiments."""
    if alerts.empty:
        return pd.DataFrame()
    g = alerts.groupby("kind", sort=True)
    return pd.DataFrame(
        {"alerts": g.size(), "runs": g["run_id"].nunique(), "experiments": g["experiment"].nunique()}
    ).reset_index()


def render(cfg: dict, out: Path | None = None, full_results: str | Path | None = None) -> tuple[str, list[str]]:
    """The page and the warnings of its build (headlines skipped, a verdict printed twice)."""
    from mathrl.analysis import claims as claims_engine
    from mathrl.analysis import coverage_view, datafiles, headlines, limitations

    t = Tables(cfg)
    t.require("report")
    full = full_claims(full_results)
    env = environment()
    out = Path(out) if out else layout.at(cfg, layout.REPORT)
    tables_href = Path(os.path.relpath(layout.at(cfg, layout.TABLES), out.resolve().parent)).as_posix()
    figures = figure_uris(cfg)
    sections = [
        {
            "name": s.NAME,
            "title": s.TITLE,
            "document": s.DOCUMENT,
            "html": section_html(env, s, t, figures, tables_href),
        }
        for s in STUDIES
    ]
    claims = t["claims"]
    covered = coverage_view.table(t[coverage_view.COVERAGE_TABLE], claims, full)
    anchors = {"coverage", "limitations", "claims", *(s.NAME for s in STUDIES)}
    heads, skipped, warnings = headlines.fill(headlines.load(), claims, t, full, headlines.declared_ids(cfg), anchors)
    repro = reproducibility(cfg, t)
    summary = claims_summary(t, claims_engine.adjustment(cfg))
    warnings += [
        f"claim {i}: its verdict is printed more than once" for i in printed_twice([s["html"] for s in sections])
    ]
    runs = t["runs"]
    html = env.get_template("report.html.j2").render(
        claims=summary,
        headlines=heads,
        skipped=skipped,
        coverage=covered,
        coverage_table=not t[coverage_view.COVERAGE_TABLE].empty,
        coverage_counts=coverage_view.counts(covered),
        limits=limitations.facts(
            cfg, t, claims, covered, full, full_results and str(full_results), machines=repro["run_machines"]
        ),
        documents=[s.DOCUMENT for s in STUDIES if s.DOCUMENT],
        tally=document_tally(claims),
        sections=sections,
        section_title={"coverage": "The documents' claims", **{s["name"]: s["title"] for s in sections}},
        figures=figures,
        runs_summary=runs_summary(runs),
        alerts_summary=alerts_summary(t["alerts"]),
        n_runs=len(runs),
        n_alerts=len(t["alerts"]),
        data=datafiles.listing(t, tables_href),
        tables_href=tables_href,
        full_given=full is not None,
        sft=t["sft"],
        repro=repro,
        cfg=cfg,
        config_text=yaml.safe_dump(json.loads(json.dumps(cfg, default=str)), sort_keys=False, width=110),
        n_missing=int((runs["status"].isin(["missing", "unreadable", "stale"]) & trained(runs)).sum())
        if not runs.empty
        else 0,
        # each file that does not read whole, by path: its run is in no table
        unreadable=list(dict.fromkeys(runs.loc[runs["status"] == "unreadable", "problem"])) if not runs.empty else [],
    )
    return html, warnings


def document_tally(claims: pd.DataFrame) -> dict:
    """The document claims of claims.csv by outcome, for the page's opening line."""
    doc = claims[claims["kind"] == "document"] if len(claims) else claims
    counts = doc["outcome"].value_counts() if len(doc) else pd.Series(dtype=int)
    return {"total": len(doc), **{o.replace(" ", "_"): int(counts.get(o, 0)) for o in OUTCOMES}}


def write_report(cfg: dict, out: Path | None = None, full_results: str | Path | None = None) -> tuple[Path, list[str]]:
    """Write the page; returns its path and the warnings of its build."""
    out = Path(out) if out else layout.at(cfg, layout.REPORT)
    html, warnings = render(cfg, out, full_results)
    atomic_write(out, html.encode())
    return out, warnings
