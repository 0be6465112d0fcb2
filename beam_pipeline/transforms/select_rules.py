"""The declarative part of ``select``: rule evaluation, quantile rules, PII redaction.

``select`` (:mod:`beam_pipeline.transforms.select`) joins every annotation
layer on doc_id and asks :class:`PolicyRules` for the first threshold rule
that fires (:meth:`beam_pipeline.policy.rules.Plan.first_reason`). Documents
that survive go through the quantile rules, if the policy has any. Their
thresholds are computed from the ranking scores alone (no text)::

    ranked (survivors' scores) ─┬─ per group: histogram of the quantized score ┐
                                ├─ per group: documents reaching the rule       ├─ threshold per group
    documents' groups ──────────┴─ per group: all documents (for the floor)     ┘
    ranked ── keep score >= threshold ──> next rule's histogram ...

and select applies them to every document (:func:`quantile_reason`).

A *group* is the rule's ``per`` value (source or domain) and the rule
itself (overrides can give sources different ``keep_top``). Scores are
quantized to 1e-6 and counted exactly (a mergeable histogram, so the
threshold does not depend on bundling or worker count); ties at the
threshold are all kept. Documents without the score are not ranked and are
kept (absent scores never drop). The number kept of the ``r`` ranked
documents of a group is::

    k = min(r, max(ceil(keep_top * r), ceil(floor * n) - u))

with ``n`` the group's documents entering select and ``u`` its unranked
survivors: the floor guarantees the group's overall keep rate after this
rule is at least ``floor`` (as far as documents reach the rule).

Gold text is redacted here when ``policy.redact.enabled``
(:func:`beam_pipeline.filters.pii.redact_spans`); counters ``redacted:<kind>``.
"""

from __future__ import annotations

import math
from typing import Iterable

import apache_beam as beam

from beam_pipeline.policy.rules import Plan
from beam_pipeline.records.accounting import Tally
from beam_pipeline.records.hashing import digest_json
from beam_pipeline.transforms.keys import StrKeyed

DOCUMENT_GROUPS = "document_groups"
QUANTUM = 1_000_000
DROP_ALL = 1 << 62


class PolicyRules:
    """Rules of the declarative policy for one select job (picklable)."""

    def __init__(self, policy, plan: Plan | None = None):
        self.policy = policy
        self.plan = (
            plan
            if plan is not None
            else Plan(cascade=(), rules=list(policy.rules), overrides=list(policy.overrides), domains={})
        )
        self.quantile_reasons = self.plan.quantile_reasons()
        every_rule = list(policy.rules) + [r for o in policy.overrides for r in o.rules]
        self._by_id = {_rule_id(r): r for r in every_rule if r.is_quantile}

    def rule_of_group(self, key: str):
        """The quantile rule of a group key (``reason|rule id|per=value``)."""
        return self._by_id[key.split("|")[1]]

    def ranked(self, document: dict, rows: dict) -> dict:
        """What the quantile rules need of a surviving document: its groups and ranking scores."""
        return {
            "doc_id": document["doc_id"],
            "source": document["source"],
            "domain": document["domain"],
            "scores": self.quantile_values(document, rows),
        }

    def reason(self, document: dict, rows: dict) -> str | None:
        return self.plan.first_reason(document["source"], {**rows, "document": document})

    def quantile_values(self, document: dict, rows: dict) -> dict:
        """{reason: the ranking score of each quantile rule that applies to the document}."""
        out = {}
        for reason in self.quantile_reasons:
            rule = self.plan.quantile_rule(document["source"], reason)
            if rule is None:
                continue
            layer, column = rule.by.split(".", 1)
            row = document if layer == "document" else rows.get(layer)
            out[reason] = None if row is None else row.get(column)
        return out

    def group(self, source: str, domain: str, reason: str) -> str | None:
        rule = self.plan.quantile_rule(source, reason)
        if rule is None:
            return None
        return f"{reason}|{_rule_id(rule)}|{rule.per}={source if rule.per == 'source' else domain}"

    def redact(self, text: str, counters: Tally, source: str) -> str:
        redact = getattr(self.policy, "redact", None)
        if redact is None or not redact.enabled:
            return text
        from beam_pipeline.filters.pii import redact_spans

        redacted, kinds = redact_spans(text, redact.kinds, redact.tokens)
        for kind in kinds:
            counters.inc(f"redacted:{kind}", source)
        return redacted


def _rule_id(rule) -> str:
    return digest_json(rule.model_dump(mode="json"))[:12]


class QuantileThresholds(beam.PTransform):
    """{"candidates": PCollection[ranked], "documents": PCollection[{"source", "domain"}]} ->
    PCollection[(group key, lowest quantized score kept)] over every quantile rule, in rule order.

    A ranked candidate is ``{"doc_id", "source", "domain", "scores": {reason: value}}``
    (:meth:`PolicyRules.ranked`); rule ``j`` ranks the candidates that rules ``0..j-1`` kept.
    """

    def __init__(self, rules: PolicyRules):
        super().__init__()
        self._rules = rules

    def expand(self, inputs):
        rules = self._rules
        candidates = inputs["candidates"]
        documents = inputs["documents"]
        all_thresholds = []
        for i, reason in enumerate(rules.quantile_reasons):
            label = f"Q{i}_{reason}"

            def grouped(c, reason=reason):
                key = rules.group(c["source"], c["domain"], reason)
                return [] if key is None else [(key, c["scores"].get(reason))]

            keyed = candidates | f"{label}_Group" >> beam.FlatMap(grouped).with_output_types(StrKeyed)
            histogram = (
                keyed
                | f"{label}_Quantize"
                >> beam.Map(
                    lambda kv, reason=reason: (kv[0], _quantize(kv[1], rules, reason, kv[0]))
                ).with_output_types(StrKeyed)
                | f"{label}_Histogram" >> beam.CombinePerKey(_HistogramFn())
            )
            totals = (
                documents
                | f"{label}_Totals"
                >> beam.FlatMap(
                    lambda d, reason=reason: (
                        [] if (k := rules.group(d["source"], d["domain"], reason)) is None else [(k, 1)]
                    )
                ).with_output_types(StrKeyed)
                | f"{label}_CountTotals" >> beam.CombinePerKey(sum)
            )
            thresholds = (
                {"histogram": histogram, "total": totals}
                | f"{label}_Join" >> beam.CoGroupByKey()
                | f"{label}_Threshold"
                >> beam.Map(
                    lambda kv, reason=reason: (
                        kv[0],
                        threshold_for(
                            kv[0], next(iter(kv[1]["histogram"]), None), next(iter(kv[1]["total"]), 0), rules, reason
                        ),
                    )
                )
            )
            all_thresholds.append(thresholds)
            candidates = candidates | f"{label}_Survivors" >> beam.Filter(
                lambda c, t, reason=reason: not dropped_by(rules, reason, c, t), beam.pvalue.AsDict(thresholds)
            )
        return tuple(all_thresholds) | "AllThresholds" >> beam.Flatten()


def dropped_by(rules: PolicyRules, reason: str, ranked: dict, thresholds: dict) -> bool:
    """Does quantile rule ``reason`` drop the ranked document, given the groups' thresholds?"""
    key = rules.group(ranked["source"], ranked["domain"], reason)
    value = ranked["scores"].get(reason)
    if key is None or value is None:
        return False
    return _quantize(value, rules, reason, key) < thresholds.get(key, DROP_ALL)


def quantile_reason(rules: PolicyRules, ranked: dict, thresholds: dict) -> str | None:
    """The first quantile rule that drops the ranked document, or None."""
    return next((reason for reason in rules.quantile_reasons if dropped_by(rules, reason, ranked, thresholds)), None)


def _quantize(value, rules: PolicyRules, reason: str, key: str):
    if value is None:
        return None
    q = int(round(float(value) * QUANTUM))
    return q if rules.rule_of_group(key).higher_is_better else -q


class _HistogramFn(beam.CombineFn):
    """{quantized score: documents} plus the count of unranked (null) documents under key None."""

    def create_accumulator(self):
        return {}

    def add_input(self, acc, q):
        key = "null" if q is None else q
        acc[key] = acc.get(key, 0) + 1
        return acc

    def merge_accumulators(self, accs: Iterable[dict]):
        out: dict = {}
        for acc in accs:
            for k, v in acc.items():
                out[k] = out.get(k, 0) + v
        return out

    def extract_output(self, acc):
        return acc


def threshold_for(key: str, histogram: dict | None, total: int, rules: PolicyRules, reason: str) -> int:
    """The lowest quantized score kept in the group (``DROP_ALL`` keeps none of the ranked)."""
    rule = rules.rule_of_group(key)
    histogram = dict(histogram or {})
    unranked = histogram.pop("null", 0)
    ranked = sum(histogram.values())
    target = max(math.ceil(round(rule.keep_top * ranked, 9)), math.ceil(round(rule.floor * total, 9)) - unranked)
    target = min(ranked, target)
    if target <= 0:
        return DROP_ALL
    seen = 0
    for q in sorted(histogram, reverse=True):
        seen += histogram[q]
        if seen >= target:
            return q
    return min(histogram)
