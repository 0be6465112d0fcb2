"""What every plot of the report shares: the :class:`Plot`, its colors, style, numbers and PNG.

A plot is a matplotlib (Agg backend) figure saved as PNG bytes with no
timestamp or version metadata, so the same numbers give the same bytes
(:func:`finish`). Colors are fixed per category across every plot of a page:
one color per source, one per domain bucket, one per drop reason
(:class:`Palette`, :func:`palette_for`), from Okabe & Ito's colour-blind-safe
palette; a plot with more categories than colors folds the rest into one
"other" (:func:`fold_categories`). Numbers on axes and labels read ``1.23M``
(:func:`human`). Inside :func:`checking_overlaps` (the tests) a plot lists its
labels drawn on top of each other. Used by the drawings of
:mod:`beam_pipeline.report.plots`.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import dataclasses
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend is chosen first)
from matplotlib.text import Text  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

#: Okabe & Ito's colour-blind-safe palette, then a few more distinct hues.
COLORS = [
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#CC79A7",
    "#56B4E9",
    "#D55E00",
    "#F0E442",
    "#332288",
    "#44AA99",
    "#882255",
    "#999933",
    "#AA4499",
    "#117733",
    "#6699CC",
    "#888888",
]
DPI = 100

STYLE = {
    "font.family": "DejaVu Sans",
    "font.size": 10,
    "axes.titlesize": 12,
    "axes.titleweight": "bold",
    "axes.titley": 1.0,
    "axes.labelsize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#E5E5E5",
    "grid.linewidth": 0.8,
    "axes.axisbelow": True,
    "legend.fontsize": 9,
    "legend.frameon": False,
    "figure.facecolor": "white",
    "axes.facecolor": "white",
}


@dataclasses.dataclass
class Plot:
    id: str
    title: str
    png: bytes
    alt: str
    #: Pairs of texts drawn on top of each other; None when not looked for (see :func:`checking_overlaps`).
    overlaps: list | None = None

    @property
    def data_uri(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


class Palette:
    """Stable colors: the i-th name of a sorted category gets the i-th color."""

    def __init__(self, **categories: list[str]):
        self._maps = {
            kind: {name: COLORS[i % len(COLORS)] for i, name in enumerate(sorted(set(names)))}
            for kind, names in categories.items()
        }

    def __call__(self, kind: str, name: str) -> str:
        mapping = self._maps.setdefault(kind, {})
        if name not in mapping:
            mapping[name] = COLORS[len(mapping) % len(COLORS)]
        return mapping[name]


def palette_for(data: dict) -> Palette:
    reasons = {r for per_source in data.get("drops_by_source", {}).values() for r in per_source}
    if len(reasons) > len(COLORS) - 1:  # only the reasons drawn in a color of their own (fold_categories)
        drops = data.get("drops_by_source", {})
        ordered = sorted(reasons)
        reasons = set(fold_categories(ordered, {r: sum(p.get(r, 0) for p in drops.values()) for r in ordered})[0])
    return Palette(
        source=data.get("sources", []), bucket=list(data.get("mixture", {}).get("buckets", {})), reason=sorted(reasons)
    )


def fold_categories(names: list[str], sizes: dict[str, float], limit: int | None = None) -> tuple[list, list]:
    """(shown, folded): at most ``limit`` names keep a color of their own (default: every color but one).

    The largest are shown, in their given order; the rest are folded into one
    grey "other", so no two categories of a plot ever share a color.
    """
    limit = len(COLORS) - 1 if limit is None else limit
    if len(names) <= limit + 1:
        return list(names), []
    keep = set(sorted(names, key=lambda n: (-sizes.get(n, 0), names.index(n)))[:limit])
    return [n for n in names if n in keep], [n for n in names if n not in keep]


def human(n: float) -> str:
    """1234567 -> '1.23M'."""
    n = float(n)
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.0f}" if n == int(n) else f"{n:.3g}"


HUMAN = FuncFormatter(lambda v, _pos: human(v))


_CHECKING_OVERLAPS = contextvars.ContextVar("checking_overlaps", default=False)


@contextlib.contextmanager
def checking_overlaps():
    """Plots drawn inside this block list their overlapping texts (:attr:`Plot.overlaps`).

    A check for the tests (no plot may draw labels on top of each other), not part of the page: it
    measures every text of the figure again, ~7% of a histogram's cost, so a build's report skips it.
    """
    token = _CHECKING_OVERLAPS.set(True)
    try:
        yield
    finally:
        _CHECKING_OVERLAPS.reset(token)


def finish(fig, plot_id: str, title: str, alt: str) -> Plot:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    overlaps = overlapping_texts(fig) if _CHECKING_OVERLAPS.get() else None
    plt.close(fig)
    return Plot(plot_id, title, buffer.getvalue(), alt, overlaps)


def overlapping_texts(fig) -> list[tuple[str, str]]:
    """Pairs of drawn texts whose boxes overlap (labels on top of each other), from the last draw.

    Every visible, non-empty text of the figure counts: titles, tick labels
    inside the axis limits, bar labels, legend entries. The tests require none.
    """
    renderer = fig.canvas.get_renderer()
    frame = fig.bbox
    boxes = []
    for text in fig.findobj(Text):
        if not text.get_visible() or not text.get_text().strip():
            continue
        box = text.get_window_extent(renderer)
        if box.width <= 0 or box.height <= 0 or not box.overlaps(frame):
            continue
        axes = text.axes
        if (
            axes is not None
            and text in axes.get_xticklabels() + axes.get_yticklabels()
            and not box.overlaps(axes.bbox.expanded(1.5, 1.5))
        ):
            continue
        boxes.append((text.get_text(), box.shrunk(0.98, 0.9)))
    return [(a, b) for i, (a, box_a) in enumerate(boxes) for b, box_b in boxes[i + 1 :] if box_a.overlaps(box_b)]
