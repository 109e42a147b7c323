"""The style every figure is drawn in, and its rendering to a small PNG (Agg backend, no display).

`STYLE` (matplotlib rcParams) and `COLORS` are what the studies' figures, `mathrl compare`'s and an imported set's
are drawn with; `png` lays a figure out, draws it once at the report's column width and redraws it with a palette
that keeps every colour the figures use exactly (`palette`). Every band a figure draws is the 95% t interval of the
mean across seeds, clipped to its metric's range in `BOUNDS` (a share within [0, 1], an entropy or a KL at least 0):
`table_band` draws one from a table's mean, std and n columns, `bands` a whole panel of them with its legend, axis
labels and title, `band_panels` a figure of such panels. `interval_bars` draws bars with their intervals,
`interval_points` points with theirs.
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from mathrl.analysis.verdict import t_halfwidth  # noqa: E402

STYLE = {
    "figure.dpi": 100,
    "savefig.dpi": 100,
    "figure.figsize": (7.0, 4.0),
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "lines.linewidth": 1.5,
}
COLORS = plt.get_cmap("tab10").colors
PLAIN = ("white", "black", "0.2", "0.3", "0.4", "0.45", "0.5", "0.6", "0.8")  # the greys the figures draw with


def png(fig) -> bytes:
    """`fig` as PNG, laid out once and drawn once: its layout engine (constrained) places the panels,
    `tight_layout` those of a figure without one; the engine is then taken off, since with one (or
    with bbox_inches="tight") savefig draws the whole figure twice, once only to measure it."""
    engine = fig.get_layout_engine()
    if engine is None:
        fig.tight_layout()
    else:
        engine.execute(fig)
    fig.set_layout_engine(None)  # under STYLE (no autolayout, no constrained_layout.use): no engine at all
    buf = io.BytesIO()
    saved = plt.rcParams["savefig.dpi"]  # a number, or "figure": the figure's own
    dpi = min(fig.dpi if saved == "figure" else float(saved), MAX_WIDTH_PX / float(fig.get_size_inches()[0]))
    fig.savefig(buf, format="png", dpi=dpi)
    return palette(buf.getvalue())


MAX_WIDTH_PX = 1040  # the report's column (main's max-width in style.html.j2): a wider figure is only scaled down there


def exact_colors() -> list[tuple[int, int, int]]:
    """The colours a palette PNG keeps exactly: the plot colours and greys, and each plot colour over white at the
    band's opacity and at the coverages of an anti-aliased edge."""
    rgb = [matplotlib.colors.to_rgb(x) for x in [*COLORS, *PLAIN]]
    blends = [[a * c + (1 - a) for c in matplotlib.colors.to_rgb(x)] for x in COLORS for a in (0.18, 0.35, 0.5, 0.7)]
    return [tuple(round(255 * c) for c in color) for color in [*rgb, *blends]]


def palette(data: bytes, colors: int = 256) -> bytes:
    """A PNG redrawn with a palette of `colors` colours, about a third of the bytes of the full-colour PNG (a figure
    has few colours: lines, bands, text, white). The palette holds every colour the figures draw with exactly (the
    plot colours, black, greys, white) and each plot colour's blends with white (a thin line's anti-aliased edge, a
    band), so a line or a legend's swatch keeps its hue; then the most common other colours of the image by median
    cut. Each pixel takes its nearest palette colour, computed here exactly (Pillow's own mapping looks colours up at
    6 bits a channel, which turned white into 252 grey); no dithering."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        rgb = im.convert("RGB")
    fixed = list(dict.fromkeys(exact_colors()))
    adaptive = rgb.quantize(colors=colors - len(fixed), method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    found = np.array(adaptive.getpalette()[: 3 * (colors - len(fixed))], dtype=np.int64).reshape(-1, 3)
    table = np.concatenate([np.array(fixed, dtype=np.int64), found])  # (colors, 3)
    pixels = np.asarray(rgb, dtype=np.int64).reshape(-1, 3)
    unique, inverse = np.unique((pixels[:, 0] << 16) | (pixels[:, 1] << 8) | pixels[:, 2], return_inverse=True)
    shades = np.stack([unique >> 16, (unique >> 8) & 255, unique & 255], axis=1)  # (distinct colours, 3)
    nearest = ((shades[:, None, :] - table[None, :, :]) ** 2).sum(axis=2).argmin(axis=1)
    flat = Image.fromarray(nearest[inverse].reshape(rgb.size[1], rgb.size[0]).astype(np.uint8), "P")
    flat.putpalette(table.astype(np.uint8).ravel().tolist())
    out = io.BytesIO()
    flat.save(out, format="png", optimize=True)
    return out.getvalue()


# ----------------------------------------------------------------------------- bands
BAND_NOTE = "mean and 95% t interval of the mean across seeds"  # what every band of every figure is

# The range of each bounded quantity a figure draws (None: unbounded on that side); a band never leaves it.
SHARE = (0.0, 1.0)
NONNEGATIVE = (0.0, None)
BOUNDS = {
    "eval_accuracy": SHARE,
    "accuracy": SHARE,
    "format_rate": SHARE,
    "frac_zero_std": SHARE,
    "pass_at_k": SHARE,
    "skipped": SHARE,
    "p0": SHARE,
    "p1": SHARE,
    "p2": SHARE,
    "p3": SHARE,
    "clip_frac": SHARE,
    "cov_frac": SHARE,
    "entropy": NONNEGATIVE,
    "kl": NONNEGATIVE,
    "grad_norm": NONNEGATIVE,
    "reward_std": NONNEGATIVE,
    "value_rmse": NONNEGATIVE,
    "lr": NONNEGATIVE,
    "kl_coef": NONNEGATIVE,
    "entropy_coef": NONNEGATIVE,
}


def bounds(metric: str) -> tuple[float | None, float | None] | None:
    """The range of a logged metric (BOUNDS), or None for a quantity without one (a loss, a reward)."""
    return BOUNDS.get(metric)


def band_limits(mean, std, n, bounds=None) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper edge of the 95% t interval of a mean across seeds (n seeds per point), clipped
    to `bounds` (lo, hi; either None) so a share never leaves [0, 1]; where n < 2 both edges are the mean."""
    mean = np.asarray(mean, dtype=float)
    half = np.nan_to_num(np.broadcast_to(t_halfwidth(std, n), mean.shape), nan=0.0)
    lo, hi = mean - half, mean + half
    if bounds is not None:
        lo, hi = np.clip(lo, bounds[0], bounds[1]), np.clip(hi, bounds[0], bounds[1])
    return lo, hi


DENSE = 10  # a series measured at fewer steps than this is drawn at those steps alone, never as a line through them


def band(ax, x, mean, std, label, color, n, bounds=None, offset=0.0, measured=True, **line):
    """A mean line with its band, the 95% t interval of the mean across seeds (n: seeds per point),
    clipped to `bounds` (see `bounds()`); `line` goes to the line (a linestyle, say).

    A `measured` series with fewer than DENSE distinct x values (three evaluations of a run, say) is drawn where it
    was measured and nowhere else: a marker per point with its interval as a bar, moved `offset` along x so that
    series measured at the same steps stay apart (`offsets`); a line would suggest values between the measurements.
    A dashed or dotted line's series gets square or triangular markers instead. A fitted curve is not `measured`."""
    lo, hi = band_limits(mean, std, n, bounds)
    x, mean = np.asarray(x, dtype=float), np.asarray(mean, dtype=float)
    if measured and len(np.unique(x[~np.isnan(x)])) < DENSE:
        style = line.pop("linestyle", line.pop("ls", "-"))
        marker = line.pop("marker", {"--": "s", "dashed": "s", ":": "^", "dotted": "^"}.get(style, "o"))
        size = line.pop("markersize", line.pop("ms", 4))
        ax.plot(x + offset, mean, linestyle="none", marker=marker, markersize=size, label=label, color=color, **line)
        ax.vlines(x + offset, lo, hi, color=color, linewidth=1.2, alpha=0.7)
        return
    ax.plot(x, mean, label=label, color=color, **line)
    ax.fill_between(x, lo, hi, color=color, alpha=0.18, linewidth=0)


def offsets(xs: list, width: float = 0.5) -> list[float]:
    """Sideways shifts that keep series measured at the same few x values apart: each series (an array of its x values)
    by its place among them, spread over `width` of the smallest gap between measured values; 0 for every series
    when there is only one, or when the series are dense enough to be drawn as lines."""
    values = np.unique(np.concatenate([np.asarray(x, dtype=float) for x in xs])) if xs else np.array([])
    values = values[~np.isnan(values)]
    if len(xs) < 2 or len(values) < 2 or len(values) >= DENSE:
        return [0.0] * len(xs)
    step = width * float(np.diff(values).min()) / len(xs)
    return [(i - (len(xs) - 1) / 2) * step for i in range(len(xs))]


def table_band(
    ax, df: pd.DataFrame, metric: str, label: str, color, x="step", value=None, scale=1.0, limits=None, **line
) -> None:
    """`band` of a table's `{value}_mean` and `{value}_std` (value: `metric`; "" for plain `mean` and `std`) over
    `n` seeds against column `x`, within `limits` (default: the range of `metric`); `scale` multiplies both (100: a
    share in percent) and the range."""
    prefix = metric if value is None else value
    mean, std = (f"{prefix}_mean", f"{prefix}_std") if prefix else ("mean", "std")
    limits = bounds(metric) if limits is None else limits
    limits = None if limits is None else tuple(None if b is None else b * scale for b in limits)
    band(ax, df[x], df[mean] * scale, df[std] * scale, label, color, n=df["n"], bounds=limits, **line)


def bands(
    ax,
    groups,
    metric,
    empty: str,
    value=None,
    *,
    x="step",
    scale=1.0,
    colors=None,
    limits=None,
    legend=None,
    line=None,
    **labels,
) -> None:
    """One panel: `table_band` of each (label, table) of `groups` with a row, of `metric` (a name, or one per group),
    in `colors` (one per group; default: the palette's order over the groups drawn), within `limits` (one range per
    group; default: its metric's) and with `line` (a linestyle, a marker), and a legend (`legend`: its keywords;
    False: none), or `empty` in a placeholder when none has a row; then `labels` (xlabel, default "RL step"; ylabel,
    title) on the axes. Groups measured at the same few steps are moved apart (`offsets`)."""
    each = lambda given: [given] * len(groups) if given is None or isinstance(given, str) else given  # noqa: E731
    drawn = [(*group, *rest) for group, *rest in zip(groups, each(metric), each(colors), each(limits)) if len(group[1])]
    shifts = offsets([g[x] for _, g, *_ in drawn])
    for i, ((label, g, m, color, lims), shift) in enumerate(zip(drawn, shifts)):
        color = COLORS[i % len(COLORS)] if color is None else color
        table_band(ax, g, m, label, color, x=x, value=value, scale=scale, limits=lims, offset=shift, **(line or {}))
    if not drawn:
        placeholder(ax, empty)
    elif legend is not False:
        ax.legend(**(legend or {}))
    ax.set(**{"xlabel": "RL step", **labels})


def band_panels(panels: list[dict], rows: int, cols: int, figsize: tuple, suptitle: str = "", **subplots):
    """A figure of `bands` panels in reading order (each a dict of `bands`' arguments, `ax` aside); cells beyond
    the panels are removed. `subplots` goes to `plt.subplots` (sharey, layout)."""
    fig, axes = plt.subplots(rows, cols, figsize=figsize, squeeze=False, **subplots)
    for ax, panel in zip(axes.flat, panels):
        bands(ax, **panel)
    for ax in axes.flat[len(panels) :]:
        fig.delaxes(ax)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def interval_bars(ax, x, mean, lo, hi, bounds=None, notes=None, note=None, **bar) -> None:
    """Bars of `mean` at `x`, capped error bars to each one's interval [lo, hi] clipped to `bounds` (lo, hi; either
    None); `bar` goes to `ax.bar` (width, colour, label). A missing mean (NaN) draws a bar of height 0 with "missing"
    at its foot, so that it does not read as a zero; a missing edge draws no error bar on its side. `notes`: the text
    at each bar's foot instead (None or "": none); `note`: the text's keywords (a rotation, a colour)."""
    mean, lo, hi = (np.asarray(a, dtype=float) for a in (mean, lo, hi))
    if bounds is not None:
        lo, hi = np.clip(lo, bounds[0], bounds[1]), np.clip(hi, bounds[0], bounds[1])
    ax.bar(x, np.nan_to_num(mean), yerr=[np.nan_to_num(mean - lo), np.nan_to_num(hi - mean)], capsize=3, **bar)
    notes = ["missing" if np.isnan(m) else None for m in mean] if notes is None else notes
    for xi, text in zip(x, notes):
        if text:
            ax.annotate(
                text, (xi, 0), **{"ha": "center", "va": "bottom", "fontsize": 7, "color": "0.4", **(note or {})}
            )


def interval_points(ax, x, mean, lo, hi, scale: float = 1.0, **style) -> None:
    """Points of `mean` at `x`, each with error bars to its interval [lo, hi], all three times `scale` (100: a share in
    points); `style` goes to `ax.errorbar` (a marker, colour, label, cap size)."""
    mean, lo, hi = (np.asarray(a, dtype=float) * scale for a in (mean, lo, hi))
    ax.errorbar(x, mean, yerr=[mean - lo, hi - mean], **style)


def placeholder(ax, text: str) -> None:
    """An honest empty panel when the data a figure needs is missing."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])
