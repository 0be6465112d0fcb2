"""The names of a run report's plots, and where each goes on the page; no matplotlib.

The build's job lists the plot tasks and assembles the page with these, so
only the workers that draw (:mod:`beam_pipeline.report.plots`) import
matplotlib (~0.3 s per process once Beam is loaded), and they do it in parallel.
"""

from __future__ import annotations

#: The run report's plots other than the histograms, in page order (drawn by ``plots.SECTIONS``).
SECTION_NAMES = ("funnel", "drops", "language", "clusters", "mixture", "shards")
HISTOGRAM_PREFIX = "hist-"


def plot_names(data: dict) -> list[str]:
    """The names of a run report's plots: its sections, then ``hist-<i>`` per histogram. Each is drawn
    on its own (``plots.draw``), so the build's job draws them in parallel."""
    return [*SECTION_NAMES, *(f"{HISTOGRAM_PREFIX}{i}" for i in range(len(data.get("histograms") or [])))]


def histogram_index(name: str) -> int | None:
    """``hist-<i>`` -> i; None for a section's plot."""
    return int(name[len(HISTOGRAM_PREFIX) :]) if name.startswith(HISTOGRAM_PREFIX) else None


def by_section(drawn: dict, data: dict) -> dict[str, object]:
    """{plot name: Plot} -> what the page renders: each section's plot, and the histograms as a list."""
    count = len(data.get("histograms") or [])
    return {
        **{name: drawn[name] for name in SECTION_NAMES},
        "histograms": [drawn[f"{HISTOGRAM_PREFIX}{i}"] for i in range(count)],
    }
