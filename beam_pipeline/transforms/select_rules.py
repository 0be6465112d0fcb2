"""The declarative part of ``select``: rule evaluation, quantile rules, PII redaction.

``select`` (:mod:`beam_pipeline.transforms.select`) joins every annotation
layer on doc_id and asks :class:`PolicyRules` for the first threshold rule
that fires (:meth:`beam_pipeline.policy_rules.Plan.first_reason`). Documents
that survive go through the quantile rules, if the policy has any:

    candidates ─┬─ per group: histogram of the quantized score ┐
                ├─ per group: documents reaching the rule       ├─ threshold per group (side input)
    documents ──┴─ per group: all documents (for the floor)     ┘
    candidates ── keep score >= threshold ──> next rule / gold;  below ──> decision "<reason>"

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
(:func:`beam_pipeline.filters.pii.redact`); counters ``redacted:<kind>``.
"""
from __future__ import annotations

import math
from typing import Iterable, Iterator

import apache_beam as beam

from beam_pipeline.accounting import StageCounters
from beam_pipeline.hashing import digest_json
from beam_pipeline.policy_rules import Plan
from beam_pipeline.transforms.keys import StrKeyed

CANDIDATES = "candidates"
QUANTUM = 1_000_000
DROP_ALL = 1 << 62


class PolicyRules:
    """Rules of the declarative policy for one select job (picklable)."""

    def __init__(self, policy, plan: Plan | None = None):
        self.policy = policy
        self.plan = plan if plan is not None else Plan(cascade=(), rules=list(policy.rules),
                                                       overrides=list(policy.overrides), domains={})
        self.quantile_reasons = self.plan.quantile_reasons()
        every_rule = list(policy.rules) + [r for o in policy.overrides for r in o.rules]
        self._by_id = {_rule_id(r): r for r in every_rule if r.is_quantile}

    def rule_of_group(self, key: str):
        """The quantile rule of a group key (``reason|rule id|per=value``)."""
        return self._by_id[key.split("|")[1]]

    def candidate(self, document: dict, rows: dict, gold: dict) -> dict:
        """What the quantile rules need of a surviving document (its gold row rides along)."""
        return {"doc_id": document["doc_id"], "source": document["source"], "domain": document["domain"],
                "gold": gold, "scores": self.quantile_values(document, rows)}

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

    def redact(self, text: str, counters: StageCounters, source: str) -> str:
        redact = getattr(self.policy, "redact", None)
        if redact is None or not redact.enabled:
            return text
        from beam_pipeline.filters.pii import detect, DEFAULT_TOKENS

        spans = detect(text, redact.kinds)
        if not spans:
            return text
        tokens = {**DEFAULT_TOKENS, **redact.tokens}
        pieces, position = [], 0
        for start, end, kind in spans:
            pieces.append(text[position:start])
            pieces.append(tokens[kind])
            position = end
            counters.inc(f"redacted:{kind}", source)
        pieces.append(text[position:])
        return "".join(pieces)


def _rule_id(rule) -> str:
    return digest_json(rule.model_dump(mode="json"))[:12]


def with_quantile_rules(decided, documents, rules: PolicyRules, stage: str, gold_tag: str, decisions_tag: str,
                        candidates_tag: str = CANDIDATES) -> dict:
    """Finish select when the policy has quantile rules: rank the candidates, then write gold and decisions."""
    applied = {"candidates": decided[candidates_tag], "documents": documents} | "QuantileRules" >> \
        ApplyQuantileRules(rules, stage)
    kept = applied["kept"] | "EmitKept" >> beam.ParDo(_EmitKeptFn(stage, decisions_tag)).with_outputs(
        decisions_tag, main=gold_tag)
    decisions = (decided[decisions_tag], applied["dropped"], kept[decisions_tag]) | "AllDecisions" >> beam.Flatten()
    return {gold_tag: kept[gold_tag], decisions_tag: decisions}


class _EmitKeptFn(beam.DoFn):
    def __init__(self, stage: str, decisions_tag: str):
        self._stage = stage
        self._decisions_tag = decisions_tag

    def setup(self):
        self._counters = StageCounters(self._stage)

    def process(self, candidate: dict) -> Iterator:
        self._counters.passed(candidate["source"])
        yield beam.pvalue.TaggedOutput(self._decisions_tag, {"doc_id": candidate["doc_id"], "source": candidate["source"],
                                                     "kept": True, "reason": None})
        yield candidate["gold"]


class ApplyQuantileRules(beam.PTransform):
    """{"candidates": PCollection[candidate], "documents": PCollection[document]} ->
    {"kept": PCollection[candidate], "dropped": PCollection[decision]}.

    A candidate is ``{"doc_id", "source", "domain", "gold": gold row, "scores": {reason: value}}``.
    """

    def __init__(self, rules: PolicyRules, stage: str):
        super().__init__()
        self._rules = rules
        self._stage = stage

    def expand(self, inputs):
        rules = self._rules
        candidates = inputs["candidates"]
        documents = inputs["documents"]
        dropped = []
        for i, reason in enumerate(rules.quantile_reasons):
            label = f"Q{i}_{reason}"

            def grouped(c, reason=reason):
                key = rules.group(c["source"], c["domain"], reason)
                return [] if key is None else [(key, c["scores"].get(reason))]

            keyed = candidates | f"{label}_Group" >> beam.FlatMap(grouped).with_output_types(StrKeyed)
            histogram = (keyed | f"{label}_Quantize" >> beam.Map(
                lambda kv, reason=reason: (kv[0], _quantize(kv[1], rules, reason, kv[0]))).with_output_types(StrKeyed)
                         | f"{label}_Histogram" >> beam.CombinePerKey(_HistogramFn()))
            totals = (documents | f"{label}_Totals" >> beam.FlatMap(
                lambda d, reason=reason: [] if (k := rules.group(d["source"], d["domain"], reason)) is None
                else [(k, 1)]).with_output_types(StrKeyed)
                      | f"{label}_CountTotals" >> beam.CombinePerKey(sum))
            thresholds = (
                {"histogram": histogram, "total": totals}
                | f"{label}_Join" >> beam.CoGroupByKey()
                | f"{label}_Threshold" >> beam.Map(lambda kv, reason=reason: (kv[0], threshold_for(
                    kv[0], next(iter(kv[1]["histogram"]), None), next(iter(kv[1]["total"]), 0), rules, reason))))
            applied = candidates | f"{label}_Apply" >> beam.ParDo(
                _ApplyFn(rules, reason, self._stage), beam.pvalue.AsDict(thresholds)).with_outputs("dropped", main="kept")
            candidates = applied["kept"]
            dropped.append(applied["dropped"])
        if not dropped:
            empty = candidates.pipeline | "NoQuantileDrops" >> beam.Create([])
            return {"kept": candidates, "dropped": empty}
        return {"kept": candidates, "dropped": tuple(dropped) | "FlattenDropped" >> beam.Flatten()}


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


class _ApplyFn(beam.DoFn):
    def __init__(self, rules: PolicyRules, reason: str, stage: str):
        self._rules = rules
        self._reason = reason
        self._stage = stage

    def setup(self):
        self._counters = StageCounters(self._stage)

    def process(self, candidate: dict, thresholds: dict) -> Iterator:
        key = self._rules.group(candidate["source"], candidate["domain"], self._reason)
        value = candidate["scores"].get(self._reason)
        if key is None or value is None:
            yield candidate
            return
        q = _quantize(value, self._rules, self._reason, key)
        if q >= thresholds.get(key, DROP_ALL):
            yield candidate
            return
        self._counters.filtered(self._reason, candidate["source"])
        yield beam.pvalue.TaggedOutput("dropped", {"doc_id": candidate["doc_id"], "source": candidate["source"],
                                                  "kept": False, "reason": self._reason})
