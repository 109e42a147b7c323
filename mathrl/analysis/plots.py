"""`mathrl figures`: every figure from the tables, in one consistent style (Agg backend).

The style, the bands every figure draws and the rendering live in `mathrl.analysis.figure_style`."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from mathrl.analysis.figure_style import STYLE, png
from mathrl.analysis.studies import STUDIES
from mathrl.analysis.study_inputs import Tables
from mathrl.pipeline import layout
from mathrl.pipeline.atomic import atomic_write


def figures(cfg: dict, out_dir: Path | None = None) -> list[str]:
    """Write results/figures/{name}.png for every study's figures; returns the names."""
    out = Path(out_dir) if out_dir else layout.at(cfg, layout.FIGURES)
    t = Tables(cfg)
    t.require("figures")
    pngs = {}  # drawn first, written after: a figure that fails leaves no half-written set
    with plt.rc_context(STYLE):
        for study in STUDIES:
            for name, fig in study.figures(t).items():
                pngs[name] = png(fig)
                plt.close(fig)
    for name, data in pngs.items():
        atomic_write(out / f"{name}.png", data)
    return list(pngs)
