"""Rules that could not judge a source: a score they read is null for every document of it.

A comparison with an absent score is *unknown* and never drops a document
(:mod:`beam_pipeline.policy.conditions`), so a rule over a score that a stage could
not compute for a whole source silently never fires there: the Gopher
stop-word rule with the ``language`` stage off (no language, no stop-word
list), a bad-word rule on a language without a list, a URL rule on documents
without URLs. :func:`null_score_warnings` finds those from the scorer ledgers'
histograms (per column and source: ``rows`` and ``null``, written by
``transforms/score.py``) and says how many documents each rule could not
judge and what would give it a score. The console prints them at the end of a
build and the run report lists them with its warnings
(:func:`report_warnings`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from beam_pipeline.policy.conditions import parse_reference, references
from beam_pipeline.policy.config import OverrideConfig, RuleConfig
from beam_pipeline.policy.rules import Plan


@dataclasses.dataclass(frozen=True)
class NullScoreWarning:
    rule: str  # the rule's reason
    column: str  # <layer>.<column>
    source: str
    documents: int  # documents of the source the layer scored; the column is null for all of them
    hint: str

    @property
    def message(self) -> str:
        return (
            f"rule {self.rule!r} could not judge {self.documents:,} documents of source {self.source!r}: "
            f"{self.column} is null for all of them ({self.hint})"
        )


def _hint(layer: str, column: str, context: dict) -> str:
    if layer == "heuristics" and column.endswith("stop_words"):
        if not context.get("language_known"):
            return (
                "the heuristics stage had no document language: put language before heuristics in the "
                "cascade, or set heuristics.default_language (e.g. en) for a corpus in one language"
            )
        return "no heuristics.stop_words list for the documents' language"
    if layer == "heuristics":
        return (
            "word-based scores are null for languages written without spaces (zh, ja, th, ...)"
            if not column.startswith("ref_")
            else "the documents have no text to score"
        )
    if layer == "safety" and column.startswith("badword"):
        return "no bad-word list for the documents' language (or language is not in the cascade)"
    if layer == "blocklist":
        return "the documents have no URL"
    return f"the {layer} stage gave no value for them"


def null_score_warnings(plan: Plan, histograms: dict[str, dict], context: dict | None = None) -> list[NullScoreWarning]:
    """One warning per (source, rule, column) where the rule reads a column that is null for every
    document of the source the column's stage scored.

    ``histograms``: stage -> the ``histograms`` of its ledger. ``context``:
    what the hints may use (``language_known``: the heuristics stage had a
    document language, from the ``language`` stage or
    ``heuristics.default_language``). Sorted by source, then rule order.
    """
    context = context or {}
    out = []
    for source in sorted(plan.domains):
        for rule in plan.rules_for(source):
            if rule.condition is not None:
                columns = references(rule.condition.tree)
            elif rule.config.by:
                columns = [parse_reference(rule.config.by)]
            else:
                continue
            for layer, column in dict.fromkeys(columns):
                if layer not in plan.cascade:
                    continue
                summary = ((histograms.get(layer) or {}).get(column) or {}).get("by_source", {}).get(source)
                if summary and summary["rows"] > 0 and summary["null"] == summary["rows"]:
                    out.append(
                        NullScoreWarning(
                            rule.reason, f"{layer}.{column}", source, summary["rows"], _hint(layer, column, context)
                        )
                    )
    return out


def plan_from_config(config: Any) -> tuple[Plan, dict]:
    """(Plan, hint context) from a :class:`~beam_pipeline.config.corpus.CorpusConfig` or its JSON dump (a run
    manifest's ``config``)."""
    if not isinstance(config, dict):
        config = config.model_dump(mode="json")
    cascade = config.get("cascade") or {}
    stages = tuple(cascade.get("stages", []) if isinstance(cascade, dict) else cascade)
    policy = config.get("policy") or {}
    plan = Plan(
        cascade=stages,
        rules=[RuleConfig.model_validate(r) for r in policy.get("rules", [])],
        overrides=[OverrideConfig.model_validate(o) for o in policy.get("overrides", [])],
        domains={s["name"]: s.get("domain", "") for s in config.get("sources", [])},
    )
    heuristics = config.get("heuristics") or {}
    language_known = bool(heuristics.get("default_language")) or (
        "language" in stages and "heuristics" in stages and stages.index("language") < stages.index("heuristics")
    )
    return plan, {"language_known": language_known}


def warnings_from_ledgers(config: Any, ledgers: dict[str, dict]) -> list[NullScoreWarning]:
    """:func:`null_score_warnings` for a build: its config and its stage ledgers (stage -> ledger dict)."""
    plan, context = plan_from_config(config)
    histograms = {stage: ledger.get("histograms") or {} for stage, ledger in ledgers.items()}
    return null_score_warnings(plan, histograms, context)


def report_warnings(config: dict, ledgers: dict[str, dict]) -> list[str]:
    """Warning lines for the report: one per rule, column and source whose score is null for every document."""
    if not config:
        return []
    return [warning.message for warning in warnings_from_ledgers(config, ledgers)]
