"""`mathrl figures`: every figure from the tables, in one consistent style (Agg backend)."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from mathrl.snapshot import atomic_write_bytes  # noqa: E402

STYLE = {
    "figure.dpi": 110, "savefig.dpi": 110, "figure.figsize": (7.0, 4.0), "font.size": 9,
    "axes.titlesize": 10, "axes.labelsize": 9, "legend.fontsize": 8, "axes.grid": True,
    "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False, "lines.linewidth": 1.5,
}  # fmt: skip
COLORS = plt.get_cmap("tab10").colors


def band(ax, x, mean, std, label, color):
    """A mean line with a +-1 std band across seeds."""
    ax.plot(x, mean, label=label, color=color)
    ax.fill_between(x, mean - std.fillna(0), mean + std.fillna(0), color=color, alpha=0.18, linewidth=0)


def placeholder(ax, text: str) -> None:
    """An honest empty panel when the data a figure needs is missing."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def figures(cfg: dict, out_dir: Path | None = None) -> list[str]:
    """Write results/figures/{name}.png for every study's figures; returns the names."""
    from mathrl.studies import STUDIES  # late: the study modules import this module's helpers
    from mathrl.studies.context import Tables

    out = Path(out_dir) if out_dir else Path(cfg["results"]) / "figures"
    t = Tables(cfg)
    names = []
    with plt.rc_context(STYLE):
        for study in STUDIES:
            for name, fig in study.figures(t).items():
                buf = io.BytesIO()
                fig.savefig(buf, format="png", bbox_inches="tight")
                plt.close(fig)
                atomic_write_bytes(out / f"{name}.png", buf.getvalue())
                names.append(name)
    return names
