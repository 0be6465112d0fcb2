"""Stage 7, select: apply the policy; write the gold text and every decision.

Inputs: ``documents`` of the ingest layer and ``annotations`` of every scoring
stage (exact dedup, near dedup, the cascade), joined on ``doc_id`` partition
by partition without a shuffle (:class:`beam_pipeline.transforms.layer_io.PartitionInputs`).
Boilerplate lines and repeated spans that near dedup marked are stripped from
the text before the policy judges it and before it is written
(``repetition.stripped_document``). Outputs, written by the task of each
partition: ``gold`` rows (:data:`beam_pipeline.storage.schemas.GOLD`) for kept
documents and one ``decisions`` row per document
(:data:`beam_pipeline.storage.schemas.DECISION`) with its reason::

    partitions ─┬─────────────────────────────────────────────── judge + write ─> gold, decisions
                └─ ranking scores ─ quantile thresholds (tiny) ──┘ (side input; only with keep_top rules)

With quantile rules (``keep_top``) a first pass over the partitions sends only
the ranking scores of the surviving documents (no text) to compute each
group's threshold (:mod:`beam_pipeline.transforms.select_rules`); the second
pass judges every document with the thresholds in hand. Keep-rate floors
(``policy.floors``) take the same first pass: per slice, counts and a histogram
of the dropped documents' rescue keys give where the rescue stops
(:mod:`beam_pipeline.transforms.select_floors`), and the second pass keeps the
dropped documents before that cut with reason ``floor:<slice>``.

The decision itself is :func:`beam_pipeline.policy.decision.decide` and the rules of
:class:`~beam_pipeline.transforms.select_rules.PolicyRules`, pure functions;
this module only carries the data flow. Counts (as data, per source too):
``in``, ``passed`` and ``filtered:<reason>``, ``redacted:<kind>``, and with floors ``floor:<slice>`` and
``rescued:<reason>`` (plus, once per job, ``floor_short:<slice>`` and the like for floors not met).
"""

from __future__ import annotations

from typing import Iterator

import apache_beam as beam

from beam_pipeline.dedup.repetition import stripped_document
from beam_pipeline.policy.config import PolicyConfig
from beam_pipeline.policy.decision import decide
from beam_pipeline.records.accounting import Tally
from beam_pipeline.storage import schemas
from beam_pipeline.transforms.layer_io import (
    TASK_RECORDS,
    PartitionIndexes,
    PartitionInputs,
    write_layer_partition,
)
from beam_pipeline.transforms.select_floors import FLOOR_CANDIDATES, FLOOR_PREFIX, FloorCuts, Floors, candidate
from beam_pipeline.transforms.select_rules import DOCUMENT_GROUPS, PolicyRules, QuantileThresholds, quantile_reason
from beam_pipeline.transforms.task_ledger import TaskLedger

STAGE = "select"
VERSION = "1"
GOLD, DECISIONS = "gold", "decisions"
RANKED = "ranked"


class ApplyPolicy(beam.PTransform):
    """pbegin -> {"task_records": one per partition, whose task wrote its gold and decisions partitions under
    ``directories[output]``}, once every layer of ``after`` (Committed collections) is committed."""

    def __init__(self, policy: PolicyConfig, plan, inputs: PartitionInputs, directories: dict[str, str], after=()):
        super().__init__()
        rules = PolicyRules(policy, plan)
        floors = getattr(policy, "floors", None)
        self._judge = Judge(policy, rules, Floors(floors, policy, rules.plan) if floors and floors.active else None)
        self._inputs = inputs
        self._directories = directories
        self._after = tuple(after)

    def expand(self, pbegin):
        partitions = pbegin | "Partitions" >> PartitionIndexes(self._inputs.count, self._after)
        thresholds, side_inputs = None, {}
        if self._judge.rules.quantile_reasons or self._judge.floors is not None:
            ranked = partitions | "RankingScores" >> beam.ParDo(
                RankingScoresFn(self._judge, self._inputs)
            ).with_outputs(DOCUMENT_GROUPS, FLOOR_CANDIDATES, main=RANKED)
            if self._judge.rules.quantile_reasons:
                thresholds = {"candidates": ranked[RANKED], "documents": ranked[DOCUMENT_GROUPS]} | (
                    "QuantileThresholds" >> QuantileThresholds(self._judge.rules)
                )
                side_inputs["thresholds"] = beam.pvalue.AsDict(thresholds)
            if self._judge.floors is not None:  # select_floors.py: per slice, where the rescue stops
                side_inputs["cuts"] = beam.pvalue.AsDict(
                    ranked[FLOOR_CANDIDATES]
                    | "FloorCuts" >> FloorCuts(self._judge.floors, self._judge.rules, thresholds)
                )
        records = partitions | "JudgeAndWrite" >> beam.ParDo(
            JudgePartitionFn(self._judge, self._inputs, self._directories), **side_inputs
        )
        return {TASK_RECORDS: records}


class Judge:
    """Everything select decides about one document but the quantile rules (picklable)."""

    def __init__(self, policy: PolicyConfig, rules: PolicyRules, floors: Floors | None = None):
        self.policy = policy
        self.rules = rules
        self.floors = floors

    def judge(self, document: dict, rows: dict) -> tuple[dict, str | None]:
        """(the document as it would be written, the first reason to drop it or None)."""
        near = rows.get("near")
        document = stripped_document(
            document,
            near,
            strip_lines=self.policy.strip_boilerplate_lines,
            strip_spans=self.policy.strip_repeated_spans,
        )
        reason = decide(document, rows.get("exact"), self.policy, near)
        if reason is None:
            reason = self.rules.reason(document, rows)
        return document, reason


class RankingScoresFn(beam.DoFn):
    """partition index -> the ranking scores of its surviving documents (no text), and the quantile
    groups of every document (the floors count them). Counts nothing: the second pass does."""

    def __init__(self, judge: Judge, inputs: PartitionInputs):
        self._judge = judge
        self._inputs = inputs

    def process(self, index: int) -> Iterator:
        rules, floors = self._judge.rules, self._judge.floors
        for document, rows in self._inputs.joined(index, STAGE):
            if rules.quantile_reasons:
                yield beam.pvalue.TaggedOutput(
                    DOCUMENT_GROUPS, {"source": document["source"], "domain": document["domain"]}
                )
            document, reason = self._judge.judge(document, rows)
            ranked = rules.ranked(document, rows) if reason is None and rules.quantile_reasons else None
            if ranked is not None:
                yield ranked
            if floors is not None:
                wanted = candidate(floors, document, rows, reason, ranked)
                if wanted is not None:
                    yield beam.pvalue.TaggedOutput(FLOOR_CANDIDATES, wanted)


class JudgePartitionFn(beam.DoFn):
    """partition index (+ quantile thresholds) -> its task record: the sidecars of its gold and decisions
    partitions (written here) and its counts (transforms/task_ledger.py)."""

    def __init__(self, judge: Judge, inputs: PartitionInputs, directories: dict[str, str]):
        self._judge = judge
        self._inputs = inputs
        self._directories = directories

    def setup(self):
        self._counters = Tally(STAGE)

    def process(self, index: int, thresholds: dict | None = None, cuts: dict | None = None) -> Iterator:
        count = self._inputs.count
        ledger = TaskLedger(self._directories[GOLD].rsplit("/", 1)[0], count)
        record = ledger.done(index)
        if record is not None:  # finished by an earlier, killed run of this layer (transforms/task_ledger.py)
            yield record
            return
        rules, floors = self._judge.rules, self._judge.floors
        gold, decisions = [], []
        for document, rows in self._inputs.joined(index, STAGE):
            source = document["source"]
            self._counters.entered(source)
            document, reason = self._judge.judge(document, rows)
            if reason is None and rules.quantile_reasons:
                reason = quantile_reason(rules, rules.ranked(document, rows), thresholds or {})
            if reason is not None and floors is not None:
                reason = self._rescue(floors, document, rows, reason, cuts or {})
            kept = reason is None or reason.startswith(FLOOR_PREFIX)
            decisions.append({"doc_id": document["doc_id"], "source": source, "kept": kept, "reason": reason})
            if not kept:
                self._counters.filtered(reason, source)
                continue
            self._counters.passed(source)
            gold.append(self._gold(document))
        if floors is not None and index == 0:  # the job's floors that cannot be met, counted once
            for name, value in floors.job_warnings(cuts or {}):
                self._counters.inc(name, None, value)
        written = {
            GOLD: write_layer_partition(self._directories[GOLD], index, count, gold, schemas.GOLD),
            DECISIONS: write_layer_partition(self._directories[DECISIONS], index, count, decisions, schemas.DECISION),
        }
        yield ledger.write(index, written, self._counters.take(), [])

    def _rescue(self, floors: Floors, document: dict, rows: dict, reason: str, cuts: dict) -> str:
        """``floor:<slice>`` when a slice's floor rescues the dropped document, else its reason (counted
        ``floor:<slice>`` and ``rescued:<reason>`` per source)."""
        key = floors.rescue_key(floors.base_key(document, rows), reason, self._judge.rules.quantile_reasons)
        name = floors.rescued_by(floors.slices(document, rows), key, document["doc_id"], cuts)
        if name is None:
            return reason
        self._counters.inc(f"{FLOOR_PREFIX}{name}", document["source"])
        self._counters.inc(f"rescued:{reason}", document["source"])
        return f"{FLOOR_PREFIX}{name}"

    def _gold(self, document: dict) -> dict:
        """The gold row, PII redacted when ``policy.redact.enabled``."""
        return {
            "doc_id": document["doc_id"],
            "source": document["source"],
            "domain": document["domain"],
            "license": document["license"],
            "url": document["url"],
            "text": self._judge.rules.redact(document["text"], self._counters, document["source"]),
        }
