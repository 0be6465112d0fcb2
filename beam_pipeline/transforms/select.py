"""Stage 7, select: apply the policy; write the gold text and every decision.

Inputs: ``documents`` of the ingest layer and ``annotations`` of every scoring
stage (exact dedup, near dedup), joined on ``doc_id``. Boilerplate lines and
repeated spans that near dedup marked are stripped from the text before the
policy judges it and before it is written (``repetition.stripped_document``).
Outputs: ``gold`` rows (:data:`beam_pipeline.schemas.GOLD`) for kept
documents and one ``decisions`` row per document
(:data:`beam_pipeline.schemas.DECISION`) with its reason.

The decision itself is :func:`beam_pipeline.policy.decide`, a pure function;
this module only carries the data flow. Counters: ``passed`` and
``filtered:<reason>``, per source too.
"""
from __future__ import annotations

from typing import Iterator

import apache_beam as beam

from beam_pipeline.accounting import LOST_IN_JOIN, CountEntering, StageCounters
from beam_pipeline.config import PolicyConfig
from beam_pipeline.policy import decide
from beam_pipeline.dedup.repetition import stripped_document
from beam_pipeline.transforms.keys import StrKeyed
from beam_pipeline.transforms.select_rules import CANDIDATES, PolicyRules, with_quantile_rules

STAGE = "select"
VERSION = "1"
GOLD, DECISIONS = "gold", "decisions"


class ApplyPolicy(beam.PTransform):
    """{"documents": PCollection, "exact"/"near": PCollection (optional)} -> {"gold", "decisions"}."""

    def __init__(self, policy: PolicyConfig, plan=None):
        super().__init__()
        self._policy = policy
        self._rules = PolicyRules(policy, plan)  # declarative rules, quantiles, redaction (select_rules.py)

    def expand(self, inputs):
        documents = inputs["documents"] | "Count" >> CountEntering(STAGE)
        keyed = {"document": documents | "KeyDocuments" >> beam.Map(lambda d: (d["doc_id"], d)).with_output_types(StrKeyed)}
        if "exact" in inputs:
            keyed["exact"] = inputs["exact"] | "KeyExact" >> beam.Map(lambda a: (a["doc_id"], a)).with_output_types(StrKeyed)
        if "near" in inputs:
            keyed["near"] = inputs["near"] | "KeyNear" >> beam.Map(lambda a: (a["doc_id"], a)).with_output_types(StrKeyed)
        for name in sorted(set(inputs) - {"documents", "exact", "near"}):  # cascade scorer layers
            keyed[name] = inputs[name] | f"Key_{name}" >> beam.Map(lambda a: (a["doc_id"], a)).with_output_types(StrKeyed)
        decided = (
            keyed
            | "JoinOnDocId" >> beam.CoGroupByKey()
            | "Decide" >> beam.ParDo(DecideFn(self._policy, self._rules)).with_outputs(DECISIONS, CANDIDATES, main=GOLD)
        )
        if self._rules.quantile_reasons:
            return with_quantile_rules(decided, documents, self._rules, STAGE, GOLD, DECISIONS)
        return {GOLD: decided[GOLD], DECISIONS: decided[DECISIONS]}


class DecideFn(beam.DoFn):
    """(doc_id, {"document": [doc], "exact": [annotation]}) -> gold row + decision row."""

    def __init__(self, policy: PolicyConfig, rules: PolicyRules | None = None):
        self._policy = policy
        self._rules = rules if rules is not None else PolicyRules(policy)

    def setup(self):
        self._counters = StageCounters(STAGE)

    def process(self, joined: tuple[str, dict]) -> Iterator:
        doc_id, parts = joined
        documents = list(parts["document"])
        if not documents:  # an annotation without its document: an upstream bug
            raise ValueError(f"select: annotations for doc_id {doc_id} but no document ({LOST_IN_JOIN})")
        document = documents[0]
        exact = next(iter(parts.get("exact", [])), None)
        near = next(iter(parts.get("near", [])), None)
        if near is not None and (near["boilerplate_lines"] or near["repeated_spans"]):
            document = stripped_document(document, near, strip_lines=self._policy.strip_boilerplate_lines,
                                         strip_spans=self._policy.strip_repeated_spans)
        reason = decide(document, exact, self._policy, near)
        rows = {name: next(iter(values), None) for name, values in parts.items() if name != "document"}
        if reason is None:
            reason = self._rules.reason(document, rows)
        source = document["source"]
        if reason is None and self._rules.quantile_reasons:  # decided after the quantile rules rank it
            yield beam.pvalue.TaggedOutput(CANDIDATES, self._rules.candidate(document, rows, self._gold(document)))
            return
        yield beam.pvalue.TaggedOutput(DECISIONS, {
            "doc_id": doc_id, "source": source, "kept": reason is None, "reason": reason})
        if reason is not None:
            self._counters.filtered(reason, source)
            return
        self._counters.passed(source)
        yield self._gold(document)

    def _gold(self, document: dict) -> dict:
        """The gold row, PII redacted when ``policy.redact.enabled``."""
        return {"doc_id": document["doc_id"], "source": document["source"], "domain": document["domain"],
                "license": document["license"], "url": document["url"],
                "text": self._rules.redact(document["text"], self._counters, document["source"])}
