"""The report's plots: matplotlib (Agg backend) figures as PNG bytes.

Each function takes the gathered numbers (:mod:`beam_pipeline.report.gather`)
and returns a :class:`~beam_pipeline.report.plot_style.Plot`, or None when
there is nothing to draw (the page then says why instead of showing an empty
chart). Colors are fixed per category across every plot of a page: one color
per source, one per domain bucket, one per drop reason
(:class:`~beam_pipeline.report.plot_style.Palette`). PNGs carry no timestamp
or version metadata, so the same numbers give the same bytes. What the plots
share (colors, style, number formatting, saving to PNG) is in
:mod:`beam_pipeline.report.plot_style`.
"""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend is chosen first)
from matplotlib.collections import PolyCollection  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter  # noqa: E402

from beam_pipeline.report.plot_names import by_section, histogram_index, plot_names  # noqa: E402
from beam_pipeline.report.plot_style import (  # noqa: E402
    COLORS,
    HUMAN,
    STYLE,
    Palette,
    Plot,
    finish,
    fold_categories,
    human,
    palette_for,
)

KEPT_COLOR = "#4C72B0"
SCORED_COLOR = "#E69F00"
OTHER_COLOR = "#BBBBBB"  # the folded rest when a plot has more categories than COLORS
CLUSTER_COLORS = ["#D55E00", "#0072B2", "#009E73", "#CC79A7", "#332288"]
ESTIMATE_COLOR = "#9DB7D5"
THRESHOLD_COLORS = {"min": "#C0392B", "max": "#8E44AD"}
#: Threshold lines of one histogram: a color and a dash pattern each, named in the legend below the plot.
THRESHOLD_STYLES = [
    ("#C0392B", (0, (5, 2))),
    ("#8E44AD", (0, (5, 2))),
    ("#117733", (0, (2, 1.5))),
    ("#D55E00", (0, (8, 2, 2, 2))),
    ("#332288", (0, (2, 1.5))),
    ("#882255", (0, (8, 2, 2, 2))),
]


def _log_axis(axis) -> None:
    """Decades labelled 1, 10, 100, 1k, ... instead of powers of ten."""
    axis.set_major_locator(LogLocator(base=10))
    axis.set_major_formatter(HUMAN)
    axis.set_minor_formatter(NullFormatter())


def _bars(edges: list, counts: list) -> PolyCollection:
    """A histogram's bars as one artist: drawn like ``Axes.bar`` (white edges, resting on 0) at a fraction
    of the cost of one patch per bin (46 histograms per sample report)."""
    bars = PolyCollection(
        [[(a, 0), (a, c), (b, c), (b, 0)] for a, b, c in zip(edges[:-1], edges[1:], counts)],
        facecolors=KEPT_COLOR,
        edgecolors="white",
        linewidths=0.5,
    )
    bars.sticky_edges.y.append(0)  # like bar(): no margin below the bars' base
    return bars


# --- the run report ---------------------------------------------------------


def funnel(data: dict, colors: Palette) -> Plot | None:
    steps = data.get("funnel", {}).get("steps") or []
    if not steps:
        return None
    with plt.rc_context(STYLE):
        fig, (ax_docs, ax_tokens) = plt.subplots(1, 2, figsize=(9.6, 0.55 * len(steps) + 2.1), sharey=True)
        labels = [s["label"] for s in steps]
        y = list(range(len(steps)))[::-1]
        docs = [s["documents"] for s in steps]
        ax_docs.barh(y, docs, color=KEPT_COLOR, height=0.62)
        scored = [(yi, s["scored"]) for yi, s in zip(y, steps) if s.get("scored") is not None]
        if scored:
            ax_docs.barh([yi for yi, _ in scored], [n for _, n in scored], color=SCORED_COLOR, height=0.26)
        for yi, n, step in zip(y, docs, steps):
            label = f" {n:,} ({n / docs[0]:.0%})" if docs[0] else f" {n:,}"
            if step.get("scored") is not None:
                label += f" · scored {step['scored']:,}"
            ax_docs.text(n, yi, label, va="center", fontsize=9)
        ax_docs.set_yticks(y, labels)
        ax_docs.set_xlabel("documents (exact, run counts)")
        ax_docs.set_title("Documents in the flow")
        ax_docs.set_xlim(0, max(docs) * (1.9 if scored else 1.45) if max(docs) else 1)
        ax_docs.xaxis.set_major_locator(MaxNLocator(nbins=4))
        ax_docs.xaxis.set_major_formatter(HUMAN)
        tokens = [s.get("tokens") or 0 for s in steps]
        estimated = [s.get("estimated", False) for s in steps]
        for yi, t, est in zip(y, tokens, estimated):
            ax_tokens.barh(
                yi,
                t,
                color=ESTIMATE_COLOR if est else KEPT_COLOR,
                height=0.62,
                hatch="///" if est else None,
                edgecolor="white" if est else None,
            )
            ax_tokens.text(t, yi, f" {'≈' if est else ''}{human(t)}", va="center", fontsize=9)
        ax_tokens.set_xlabel("tokens (≈ estimated before tokenize)")
        ax_tokens.set_title("Tokens in the flow")
        ax_tokens.set_xlim(0, max(tokens) * 1.3 if max(tokens) else 1)
        ax_tokens.xaxis.set_major_locator(MaxNLocator(nbins=4))
        ax_tokens.xaxis.set_major_formatter(HUMAN)
        for ax in (ax_docs, ax_tokens):
            ax.grid(axis="y", visible=False)
        handles = [Patch(color=KEPT_COLOR, label="in the flow after the step")]
        if scored:
            handles.append(Patch(color=SCORED_COLOR, label="scored by the stage (the cascade gates the rest)"))
        if any(estimated):
            handles.append(Patch(facecolor=ESTIMATE_COLOR, hatch="///", edgecolor="white", label="tokens estimated"))
        fig.legend(handles=handles, loc="lower center", ncol=len(handles), bbox_to_anchor=(0.5, 0.0))
        fig.suptitle("Cascade funnel: what each stage passed on", fontweight="bold", fontsize=13)
        fig.tight_layout(rect=(0, 0.06, 1, 1), w_pad=2.5)
    return finish(fig, "funnel", "Cascade funnel", "Documents and tokens remaining after each stage of the cascade")


def drops_by_source(data: dict, colors: Palette) -> Plot | None:
    drops = data.get("drops_by_source") or {}
    sources = [s for s in data.get("sources", []) if drops.get(s)]
    seen = {r for per_source in drops.values() for r in per_source}
    in_stage_order = [f"{st['name']}:{r}" for st in data.get("stages", []) for r in st.get("dropped", {})]
    reasons = [r for r in in_stage_order if r in seen] + sorted(seen - set(in_stage_order))
    if not sources or not reasons:
        return None
    shown, folded = fold_categories(reasons, {r: sum(drops[s].get(r, 0) for s in sources) for r in reasons})
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(9.6, max(0.5 * len(sources) + 1.9, 0.24 * len(shown) + 1.6)))
        y = list(range(len(sources)))[::-1]
        left = [0] * len(sources)
        for reason in shown + (["other"] if folded else []):
            values = [
                sum(drops[s].get(r, 0) for r in folded) if reason == "other" else drops[s].get(reason, 0)
                for s in sources
            ]
            color = OTHER_COLOR if reason == "other" else colors("reason", reason)
            label = f"other ({len(folded)} reasons)" if reason == "other" else reason
            ax.barh(y, values, left=left, color=color, label=label, height=0.62)
            left = [a + b for a, b in zip(left, values)]
        top = max(left) or 1
        labels = drop_bar_labels(data)
        for yi, s, total in zip(y, sources, left):
            ax.text(total + top * 0.01, yi, labels[s], va="center", fontsize=9)
        ax.set_yticks(y, sources)
        ax.set_xlim(0, top * 1.6)
        ax.set_xlabel("records dropped (stage:reason)")
        ax.set_title("Drops by reason per source")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=6))
        ax.xaxis.set_major_formatter(HUMAN)
        ax.grid(axis="y", visible=False)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), title="stage:reason")
        fig.tight_layout()
    return finish(
        fig,
        "drops",
        "Drops by reason per source",
        "Stacked bars: records dropped per source, colored by stage and reason",
    )


def drop_bar_labels(data: dict) -> dict[str, str]:
    """The label at the end of each source's bar: ``dropped of read (share)``."""
    labels = {}
    for source, per in (data.get("drops_by_source") or {}).items():
        total, read = sum(per.values()), (data.get("read_by_source") or {}).get(source)
        labels[source] = f"{total:,} of {read:,} read ({total / read:.1%})" if read else f"{total:,}"
    return labels


def histogram(h: dict, index: int) -> Plot:
    edges, counts = h["edges"], h["counts"]
    thresholds = sorted(h["thresholds"], key=lambda t: (t["kind"] != "min", t["value"]))[: len(THRESHOLD_STYLES)]
    legend_height = 0.24 * len(thresholds) + (0.1 if thresholds else 0)
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(6.8, 3.4 + legend_height))
        ax.add_collection(_bars(edges, counts))
        if h["log"]:
            ax.set_xscale("log")
            _log_axis(ax.xaxis)
        lo, hi = edges[0], edges[-1]
        handles = []
        for t, (color, dashes) in zip(thresholds, THRESHOLD_STYLES):
            ax.axvline(t["value"], color=color, linestyle=dashes, linewidth=1.8)
            value = f"{t['value']:,}" if isinstance(t["value"], int) else f"{t['value']:g}"
            named = f"{t['name']} {value}" if t["name"][-1:] in "<>=" else f"{t['name']} = {value}"  # a rule: x >= v
            handles.append(
                Line2D(
                    [],
                    [],
                    color=color,
                    linestyle=dashes,
                    linewidth=1.8,
                    label=f"{named} ({'drops below' if t['kind'] == 'min' else 'drops above'})",
                )
            )
            lo, hi = min(lo, t["value"]), max(hi, t["value"])
        if h["log"]:
            ax.set_xlim(max(lo, edges[0] / 10 if lo <= 0 else lo) / 1.3, hi * 1.3)
        else:
            pad = (hi - lo) * 0.03 or 0.5
            ax.set_xlim(lo - pad, hi + pad)
        ax.set_xlabel(f"{h['column']}{' (log scale)' if h['log'] else ''}")
        ax.set_ylabel("documents")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_formatter(HUMAN)
        if not h["log"]:
            ax.xaxis.set_major_formatter(HUMAN)
            ax.xaxis.set_major_locator(MaxNLocator(nbins=7, integer=bool(h.get("integer"))))
        ax.set_title(f"{h['column']}  ·  {h['layer']}")
        height = 3.4 + legend_height
        if handles:  # below the axes, one line each: labels never cross the bars or each other
            fig.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.02, 0.0), fontsize=8.5)
        fig.subplots_adjust(
            left=0.1, right=0.98, top=1 - 0.34 / height, bottom=(0.51 + legend_height) / height
        )  # fixed: many histograms, no layout solve
    return finish(
        fig,
        f"hist-{index}",
        f"{h['layer']} {h['column']}",
        f"Histogram of {h['column']} in {h['layer']} with policy thresholds",
    )


def language(data: dict, colors: Palette) -> Plot | None:
    mix = data.get("language")
    if not mix:
        return None
    names = list(mix["documents"])
    values = [mix["documents"][n] for n in names]
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(7.2, 0.35 * len(names) + 1.6))
        y = list(range(len(names)))[::-1]
        ax.barh(y, values, color=[colors("language", n) for n in names], height=0.65)
        for yi, v in zip(y, values):
            ax.text(v, yi, f" {v:,} ({v / mix['total']:.1%})", va="center", fontsize=9)
        ax.set_yticks(y, names)
        ax.set_xlim(0, max(values) * 1.35)
        ax.set_xlabel(f"documents ({mix['column']} in {mix['layer']})")
        ax.set_title("Language mix")
        ax.xaxis.set_major_formatter(HUMAN)
        ax.grid(axis="y", visible=False)
        fig.tight_layout()
    return finish(fig, "language", "Language mix", "Documents per detected language")


def cluster_sizes(data: dict, colors: Palette) -> Plot | None:
    found = [c for c in data.get("clusters") or [] if c["sizes"]]
    if not found:
        return None
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(7.2, 3.6))
        markers = "os^Dv"
        for i, c in enumerate(found):
            sizes = sorted(int(k) for k in c["sizes"])
            counts = [c["sizes"][k] if k in c["sizes"] else c["sizes"][str(k)] for k in sizes]
            ax.plot(
                sizes,
                counts,
                marker=markers[i % len(markers)],
                linestyle=("-", "--", ":")[i % 3],
                linewidth=1.4,
                markersize=8 - 2 * (i % 3),
                color=CLUSTER_COLORS[i % len(CLUSTER_COLORS)],
                label=f"{c['layer']} ({c['size_column'] or 'cluster_id'}): {c['clusters']:,} clusters "
                f"of 2+, largest {c['largest']:,}",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        _log_axis(ax.xaxis)
        _log_axis(ax.yaxis)
        ax.set_xlabel("cluster size (documents sharing the cluster; 1 = unique)")
        ax.set_ylabel("clusters")
        ax.set_title("Duplicate cluster sizes (log-log)")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2))
        xs = [int(k) for c in found for k in c["sizes"]]
        ax.set_xlim(0.7, max(xs) * 1.6 if max(xs) > 1 else 3)
        ticks = [
            m * 10**e for e in range(int(math.log10(max(xs))) + 2) for m in (1, 2, 5) if m * 10**e <= max(xs) * 1.6
        ]
        ax.set_xticks(ticks, [human(t) for t in ticks])
        ys = [n for c in found for n in c["sizes"].values()]
        ax.set_ylim(0.7, max(ys) * 3)
        fig.tight_layout()
    return finish(fig, "clusters", "Duplicate cluster sizes", "Number of clusters per cluster size, log-log")


def mixture(data: dict, colors: Palette) -> Plot | None:
    mix = data.get("mixture") or {}
    buckets = mix.get("buckets") or {}
    if not buckets:
        return None
    names = list(buckets)
    budget = data.get("budget") or {}
    with_budget = bool(budget.get("target_tokens"))
    with plt.rc_context(STYLE):
        if with_budget:
            fig, (ax, ax_epochs) = plt.subplots(1, 2, figsize=(10.4, 3.9), gridspec_kw={"width_ratios": [3, 2]})
        else:
            fig, ax = plt.subplots(figsize=(7.2, 3.8))
        x = list(range(len(names)))
        width = 0.38 if mix.get("has_target") else 0.6
        shares = [buckets[n]["share"] for n in names]
        offset = -width / 2 if mix.get("has_target") else 0
        bars = ax.bar(
            [i + offset for i in x],
            shares,
            width=width,
            color=[colors("bucket", n) for n in names],
            label="actual (unique tokens)",
        )
        for bar, n in zip(bars, names):
            ax.text(
                bar.get_x() + bar.get_width() / 2,
                bar.get_height(),
                human(buckets[n]["tokens"]),
                ha="center",
                va="bottom",
                fontsize=9,
            )
        if mix.get("has_target"):
            targets = [buckets[n]["target_share"] or 0 for n in names]
            ax.bar(
                [i + width / 2 for i in x],
                targets,
                width=width,
                facecolor="white",
                edgecolor=[colors("bucket", n) for n in names],
                hatch="//",
                linewidth=1.5,
                label="target (report.mixture)",
            )
            ax.legend(loc="upper right")
        ax.set_xticks(x, names)
        ax.set_ylabel("share of tokens")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:.0%}"))
        ax.set_ylim(0, max(shares + [b["target_share"] or 0 for b in buckets.values()]) * 1.25 or 1)
        ax.set_title(
            "Tokens per domain bucket vs target mixture" if mix.get("has_target") else "Tokens per domain bucket"
        )
        ax.grid(axis="x", visible=False)
        if with_budget:
            rows = budget["rows"]
            epochs = [r["epochs"] if r["epochs"] is not None and math.isfinite(r["epochs"]) else 0 for r in rows]
            ax_epochs.bar(range(len(rows)), epochs, color=[colors("bucket", r["bucket"]) for r in rows], width=0.6)
            ax_epochs.axhline(
                budget["max_epochs"],
                color=THRESHOLD_COLORS["min"],
                linestyle="--",
                linewidth=1.8,
                label=f"{budget['max_epochs']:g} epochs (Muennighoff et al. 2023)",
            )
            for i, (r, e) in enumerate(zip(rows, epochs)):
                label = "no data" if r["epochs"] is not None and not math.isfinite(r["epochs"]) else f"{e:.2g}×"
                ax_epochs.annotate(
                    label,
                    (i, e),
                    xytext=(0, 3),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize=9,
                    fontweight="bold",
                )
            ax_epochs.set_xticks(range(len(rows)), [r["bucket"] for r in rows])
            ax_epochs.set_ylabel("epochs over unique tokens")
            ax_epochs.set_ylim(0, max(epochs + [budget["max_epochs"]]) * 1.3)
            ax_epochs.set_title(f"Epochs for {human(budget['target_tokens'])} target tokens")
            ax_epochs.legend(loc="upper left")
            ax_epochs.grid(axis="x", visible=False)
        fig.tight_layout()
    return finish(
        fig,
        "mixture",
        "Tokens per domain bucket",
        "Share of tokens per domain bucket, target mixture and implied epochs",
    )


def shard_sizes(data: dict, colors: Palette) -> Plot | None:
    shards = data.get("shards") or []
    if not shards:
        return None
    target = data.get("shard_tokens_target")
    domains = sorted({s["domain"] for s in shards})
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(8.4, 0.45 * len(domains) + 2.0))
        if len(shards) <= 400:
            for i, domain in enumerate(domains):
                mine = [s for s in shards if s["domain"] == domain]
                jitter = [((j * 0.618) % 1 - 0.5) * 0.5 for j in range(len(mine))]
                ax.scatter(
                    [s["tokens"] for s in mine],
                    [i + d for d in jitter],
                    s=28,
                    alpha=0.85,
                    color=colors("bucket", domain),
                    label=f"{domain}: {len(mine)} shard{'s' if len(mine) != 1 else ''}",
                    edgecolor="none",
                )
            ax.set_yticks(range(len(domains)), domains)
            ax.set_ylim(-0.6, len(domains) - 0.4)
            ax.grid(axis="y", visible=False)
            ax.set_ylabel("domain bucket")
        else:
            ax.hist(
                [[s["tokens"] for s in shards if s["domain"] == d] for d in domains],
                bins=40,
                stacked=True,
                color=[colors("bucket", d) for d in domains],
                label=domains,
            )
            ax.set_ylabel("shards")
        if target:
            ax.axvline(
                target,
                color=THRESHOLD_COLORS["max"],
                linestyle="--",
                linewidth=1.5,
                label=f"tokenize.shard_tokens = {target:,}",
            )
        ax.set_xlim(0, max([s["tokens"] for s in shards] + [target or 0]) * 1.08)
        ax.set_xlabel("tokens per shard (documents + EOS, without padding)")
        ax.xaxis.set_major_formatter(HUMAN)
        ax.set_title(f"Shard sizes ({len(shards)} shards)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
    return finish(fig, "shards", "Shard sizes", "Tokens per shard, by domain bucket")


#: The run report's plots other than the histograms, by section (``plot_names.SECTION_NAMES``, in that order).
SECTIONS = {
    "funnel": funnel,
    "drops": drops_by_source,
    "language": language,
    "clusters": cluster_sizes,
    "mixture": mixture,
    "shards": shard_sizes,
}


def run_plots(data: dict) -> dict[str, object]:
    """Every plot of a run report by section; histograms as a list."""
    return by_section({name: draw(name, data) for name in plot_names(data)}, data)


def draw(name: str, data: dict) -> Plot | None:
    """One plot of a run report (a name of ``plot_names.plot_names``). Its colors come from a fresh
    :func:`palette_for`, so its bytes do not depend on which plots were drawn before it, or where."""
    index = histogram_index(name)
    if index is not None:
        return histogram(data["histograms"][index], index)
    return SECTIONS[name](data, palette_for(data))


# --- the comparison ---------------------------------------------------------


def compare_bars(
    plot_id: str,
    title: str,
    categories: list[str],
    a: list[float],
    b: list[float],
    labels: tuple[str, str],
    xlabel: str,
    percent: bool = False,
) -> Plot | None:
    if not categories:
        return None
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(9.6, 0.5 * len(categories) + 1.8))
        y = list(range(len(categories)))[::-1]
        h = 0.38
        for values, shift, color, label in ((a, h / 2, COLORS[4], labels[0]), (b, -h / 2, COLORS[0], labels[1])):
            ax.barh([i + shift for i in y], values, height=h, color=color, label=label)
            for yi, v in zip(y, values):
                ax.text(v, yi + shift, f" {v:.1%}" if percent else f" {human(v)}", va="center", fontsize=8)
        ax.set_yticks(y, categories)
        top = max(a + b) if (a or b) else 1
        ax.set_xlim(0, (top or 1) * 1.25)
        ax.set_xlabel(xlabel)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:.0%}") if percent else HUMAN)
        ax.set_title(title)
        ax.grid(axis="y", visible=False)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
    return finish(fig, plot_id, title, title)
