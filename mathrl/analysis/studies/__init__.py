"""The documents' studies, one module per source document, and a generic view of every experiment.

Each module defines:
- `NAME` (used in file names: tables and figures are prefixed `{NAME}_`), `TITLE`, `DOCUMENT`
  (the seed document it reproduces; empty for `generic`);
- `tables(ctx: Context) -> dict[str, DataFrame]`: computed from the files under results/
  (runs, bandit CSVs, gradvar JSON), written by `mathrl aggregate` to results/tables/;
- `figures(t: Tables) -> dict[str, Figure]`: drawn from the tables alone (read back from
  CSV), written by `mathrl figures` to results/figures/;
- `section(t: Tables) -> dict`: the context of its report template
  `report/templates/sections/{NAME}.html.j2` (its verdict rows, and the tables, rows and numbers
  the template's sentences are written from: no sentence is built here).

What they read is `mathrl.analysis.study_inputs` (the results tree, and the tables read back); what they share
(roles, per-seed values, summaries across seeds, the documents' numbers) `mathrl.analysis.kit`; the style and bands of
their figures `mathrl.analysis.figure_style`; the statistics `mathrl.analysis.verdict`; the functions their templates
write sentences with `mathrl.analysis.report`'s.
"""

from mathrl.analysis.studies import calibration, collapse, diagnostics, generic, lab04, stability, system

STUDIES = [calibration, lab04, stability, collapse, system, diagnostics, generic]
