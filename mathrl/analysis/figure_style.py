"""The style every figure is drawn in, and its rendering to a small PNG (Agg backend, no display).

`STYLE` (matplotlib rcParams) and `COLORS` are what the studies' figures, `mathrl compare`'s and an imported set's
are drawn with; `png` lays a figure out, draws it once at the report's column width and redraws it with a palette
that keeps every colour the figures use exactly (`palette`).
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

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
