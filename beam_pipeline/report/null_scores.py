"""The run report's warnings about rules that could not judge a source (null scores).

Separate from :mod:`beam_pipeline.report.gather` so that the one call there
stays a line: ``data["warnings"].extend(report_warnings(config, ledgers))``.
"""

from __future__ import annotations

from beam_pipeline.scoring.null_scores import warnings_from_ledgers


def report_warnings(config: dict, ledgers: dict[str, dict]) -> list[str]:
    """Warning lines for the report: one per rule, column and source whose score is null for every document."""
    if not config:
        return []
    return [warning.message for warning in warnings_from_ledgers(config, ledgers)]
