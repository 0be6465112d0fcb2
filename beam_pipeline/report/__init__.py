"""The run report: one self-contained HTML page per run (``runs/<run_id>/report.html``).

Modules, in the order the data flows:

* :mod:`~beam_pipeline.report.locate`   what the user pointed at -> the run's files;
* :mod:`~beam_pipeline.report.gather`   metrics, ledgers, layers, manifest -> numbers, one
  module per section (``stage_counts``, ``mixture``, ``funnel``, ``annotation_scores``,
  ``duplicate_clusters``, ``drop_samples``), reading the layers through ``run_layers``;
* :mod:`~beam_pipeline.report.plots`    numbers -> PNG plots (matplotlib, Agg), named by
  :mod:`~beam_pipeline.report.plot_names`, colored and saved by
  :mod:`~beam_pipeline.report.plot_style`;
* :mod:`~beam_pipeline.report.html`     numbers + plots -> the page;
* :mod:`~beam_pipeline.report.compare`  two runs -> the side-by-side page.

``docs/report.md`` describes every section and where its numbers come from.
"""

from __future__ import annotations

from beam_pipeline.report.locate import ReportError, RunRef, locate, whatif_report_path
from beam_pipeline.storage.layers import join, write_bytes_atomic

__all__ = ["ReportError", "RunRef", "locate", "report_numbers", "write_compare", "write_report", "write_report_page"]


def write_report(target: str, *, output: str | None = None, report_config: dict | None = None) -> str:
    """Write the report of the run or dataset ``target``; return its path."""
    from beam_pipeline.report import plots

    ref, data = report_numbers(target, report_config=report_config)
    if report_config and output is None:  # a what-if: its own file, next to the run's report.html
        output = whatif_report_path(ref, report_config)
    return write_report_page(ref, data, plots.run_plots(data), output=output)


def report_numbers(target, *, report_config: dict | None = None) -> tuple[RunRef, dict]:
    """(the run, its gathered numbers): the first step of :func:`write_report`."""
    from beam_pipeline.report.gather import gather

    ref = target if isinstance(target, RunRef) else locate(target)
    return ref, gather(ref, report_config=report_config)


def write_report_page(ref: RunRef, data: dict, figures: dict, *, output: str | None = None) -> str:
    """The page of the numbers and their plots (``plot_names.by_section``), written; its path. The last step of
    :func:`write_report`."""
    from beam_pipeline.report import html

    path = output or ref.report_path
    write_bytes_atomic(path, html.render_run(data, figures).encode("utf-8"))
    return path


def write_compare(a: str, b: str, *, output: str | None = None) -> tuple[str, str]:
    """Write the comparison page of two runs or datasets; return (its path, a text summary)."""
    from beam_pipeline.report import html, plots
    from beam_pipeline.report.compare import compare, summary_text

    a_ref, b_ref = locate(a), locate(b)
    cmp = compare(a_ref, b_ref)
    labels = (f"A · {cmp['a']['label']}", f"B · {cmp['b']['label']}")
    figures = {
        "counts": plots.compare_bars(
            "counts",
            "Documents passed per stage",
            [r["stage"] for r in cmp["counts"] if r["field"] == "passed"],
            [r["a"] or 0 for r in cmp["counts"] if r["field"] == "passed"],
            [r["b"] or 0 for r in cmp["counts"] if r["field"] == "passed"],
            labels,
            "documents passed",
        ),
        "drops": plots.compare_bars(
            "drops",
            "Records dropped by reason",
            [r["reason"] for r in cmp["drops"]],
            [r["a"] for r in cmp["drops"]],
            [r["b"] for r in cmp["drops"]],
            labels,
            "records dropped",
        ),
        "mixture": plots.compare_bars(
            "mixture",
            "Share of tokens per domain bucket",
            [r["bucket"] for r in cmp["mixture"]],
            [r["a_share"] for r in cmp["mixture"]],
            [r["b_share"] for r in cmp["mixture"]],
            labels,
            "share of the dataset's tokens",
            percent=True,
        ),
    }
    path = output or join(b_ref.run_dir, f"compare-{a_ref.run_id}.html")
    write_bytes_atomic(path, html.render_compare(cmp, figures).encode("utf-8"))
    return path, summary_text(cmp)
