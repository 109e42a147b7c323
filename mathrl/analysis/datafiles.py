"""The tables the report links rather than prints (`report/data_files.yaml`), with their rows and columns' meanings.

The page holds what a person reads; the run index, the alerts, every verdict and the per-run tables are CSV files
under results/tables/, linked from the page by a path relative to it, and listed with the number of rows and what
each column means.
"""

from __future__ import annotations

from mathrl.pipeline.config import ROOT, read_yaml

DATA_FILES = ROOT / "report" / "data_files.yaml"
SUFFIXES = {
    "mean": "mean over runs",
    "std": "sample standard deviation over runs",
    "lo": "lower end of the 95% t interval of the mean",
    "hi": "upper end of the 95% t interval of the mean",
}


def declared(path=None) -> dict:
    """{table name: its declaration (title, row, columns, and optionally measures and other)}."""
    return (read_yaml(path or DATA_FILES) or {}).get("files") or {}


def meaning(column: str, decl: dict) -> str | None:
    """What a column of a declared file means: its own declaration, a declared base with a statistic's suffix, a
    registered run measure (where the file says `measures`), or the file's `other`; None where nothing says."""
    columns = decl.get("columns") or {}
    if column in columns:
        return columns[column]
    base, _, suffix = column.rpartition("_")
    if base in columns and suffix in SUFFIXES:
        return f"{columns[base]}: {SUFFIXES[suffix]}"
    if decl.get("measures"):
        from mathrl.analysis.measures import MEASURES

        if column in MEASURES:
            return MEASURES[column][0]
    return decl.get("other")


def listing(t, tables_href: str, path=None) -> list[dict]:
    """The declared files that the results tree has: name, link, title, what a row is, rows, and each column with
    its meaning (None where nothing describes it)."""
    out = []
    for name, decl in declared(path).items():
        df = t[name]
        if not (t.dir / f"{name}.csv").is_file():
            continue
        out.append(
            {
                "name": name,
                "href": f"{tables_href}/{name}.csv",
                "title": decl.get("title", ""),
                "row": decl.get("row", ""),
                "rows": len(df),
                "columns": [(c, meaning(c, decl)) for c in df.columns],
            }
        )
    return out


def undescribed(files: list[dict]) -> dict[str, list[str]]:
    """{file: its columns no declaration describes}, for the test that keeps the declarations whole."""
    return {
        f["name"]: [c for c, m in f["columns"] if m is None] for f in files if any(m is None for _, m in f["columns"])
    }
