"""Keep-rate floors of ``select`` (``policy.floors``, docs/policy.md "Floors").

A *slice* is ``source=<name>``, ``domain=<name>`` or ``language=<code>`` (the
language layer's ``lang``). A slice with a floor ``F`` keeps at least
``ceil(F * n)`` of its ``n`` documents entering select, whatever rule, dedup
or quantile rule dropped them: when the policy keeps fewer, select *rescues*
the best-ranked dropped documents of the slice and records each as kept with
reason ``floor:<slice>``. The rescue order is a total order, ascending::

    (duplicate?, rules that fire, cascade stages without a row, -score, doc_id)

* duplicates last: a document dropped as an exact or near duplicate is a copy
  of another document (its representative, kept unless dropped itself), so
  every other dropped document goes first;
* then the fewest failed rules (built-in rules, every ``drop_if`` rule that is
  true, and 1 for a quantile rule's drop): the mildest violations first;
* then the most evidence: a document the cascade stopped early was never
  scored by the later stages (safety, PII, decontamination...), so one judged
  by every stage goes first;
* then ``floors.by`` (a numeric column, best first; absent: after every
  score), then doc_id.

Documents dropped for a reason in ``floors.never_rescue`` are never rescued.

Floors from the mixture: with ``mixture`` weights per domain and
``target_tokens``, a domain must supply ``w * target_tokens / epochs``
tokens; its tokens are estimated as its characters entering select divided by
``chars_per_token``, and its floor is the share of its documents that holds
that many tokens, capped at 1 (a capped floor is reported: the domain cannot
supply its weight).

Beam shape: the same two passes as the quantile rules
(:mod:`beam_pipeline.transforms.select_rules`). The first pass sends, per
document of a floored slice, its slices, first reason and rescue key (no
text); with the quantile thresholds as a side input each slice's counts and a
histogram of its dropped documents' keys are combined per slice
(``CombinePerKey``), giving the key cell where the rescue stops. Within that
cell a second, bounded histogram over the doc_id's first
:data:`PREFIX_CHARS` characters gives the doc_id cut. Every rescued document
ranks before the cut, so the floor is met exactly up to documents that tie on
the whole key and the doc_id prefix (all rescued). What one worker holds per
slice is bounded like a quantile rule's histogram: distinct keys (flags and
small counts times scores quantized to 1e-6), and at most ``16^4`` prefixes.
"""

from __future__ import annotations

import math
from typing import Iterable

import apache_beam as beam

from beam_pipeline.policy.decision import violations
from beam_pipeline.transforms.keys import StrKeyed
from beam_pipeline.transforms.select_rules import QUANTUM, quantile_reason

FLOOR_CANDIDATES = "floor_candidates"
DEDUP_REASONS = ("exact_duplicate", "near_duplicate")
NO_SCORE = 1 << 62  # the key of a document without the floors.by score: after every score
PREFIX_CHARS = 4
EVERY_PREFIX = "\U0010ffff"  # the cut that rescues the whole cell
FLOOR_PREFIX = "floor:"


class Floors:
    """The floors of one select job (picklable): slices, rescue keys, the rescue test."""

    def __init__(self, config, policy, plan):
        self.config = config
        self.policy = policy
        self.plan = plan

    def slices(self, document: dict, rows: dict) -> list[str]:
        """The floored slices of a document, in source, domain, language order."""
        c = self.config
        out = []
        if document["source"] in c.source:
            out.append(f"source={document['source']}")
        if document["domain"] in c.domain or c.mixture_share(document["domain"]) is not None:
            out.append(f"domain={document['domain']}")
        if c.language:
            row = rows.get("language")
            lang = None if row is None else row.get("lang")
            if lang in c.language:
                out.append(f"language={lang}")
        return out

    def base_key(self, document: dict, rows: dict) -> list[int]:
        """(duplicate?, rules that fire, stages without a row, quantized -score) without the quantile term."""
        exact, near = rows.get("exact"), rows.get("near")
        builtins = violations(document, exact, self.policy, near)
        duplicate = int(any(reason in DEDUP_REASONS for reason in builtins))
        context = {**rows, "document": document}
        fired = len(builtins) + sum(
            1
            for rule in self.plan.rules_for(document["source"])
            if rule.condition is not None and rule.condition.evaluate(context) is True
        )
        unscored = sum(1 for i in range(len(self.plan.cascade)) if rows.get(self.plan.row_name(i)) is None)
        return [duplicate, fired, unscored, self._score(document, rows)]

    def _score(self, document: dict, rows: dict) -> int:
        by = self.config.by
        if by is None:
            return NO_SCORE
        layer, column = by.split(".", 1)
        row = document if layer == "document" else rows.get(layer)
        value = None if row is None else row.get(column)
        if value is None:
            return NO_SCORE
        q = int(round(float(value) * QUANTUM))
        return -q if self.config.higher_is_better else q

    def rescue_key(self, base: list[int], reason: str | None, quantile_reasons) -> tuple | None:
        """The rescue key of a document dropped for ``reason`` (None: kept, or never to be rescued)."""
        if reason is None or reason in self.config.never_rescue:
            return None
        duplicate, fired, unscored, score = base
        return (duplicate, fired + (1 if reason in quantile_reasons else 0), unscored, score)

    def rescued_by(self, slices: list[str], key: tuple | None, doc_id: str, cuts: dict) -> str | None:
        """The first slice whose floor rescues the document, or None."""
        if key is None:
            return None
        for name in slices:
            cut = cuts.get(name)
            if cut is None or cut["cell"] is None:
                continue
            cell = tuple(cut["cell"])
            if key < cell or (key == cell and doc_id[:PREFIX_CHARS] <= cut["prefix"]):
                return name
        return None

    def floor_of(self, name: str, stats: dict) -> tuple[float, int | None, int | None]:
        """(floor share, wanted tokens or None, tokens short of them or None) of a slice from its stats."""
        kind, value = name.split("=", 1)
        share = self.config.share(kind, value)
        wanted = short = None
        weight = self.config.mixture_share(value) if kind == "domain" else None
        if weight is not None and self.config.target_tokens:
            wanted = math.ceil(weight * self.config.target_tokens / self.config.epochs)
            tokens = stats["chars"] / self.config.chars_per_token
            derived = wanted / tokens if tokens else (1.0 if wanted else 0.0)
            if derived > 1:
                short = math.ceil(round(wanted - tokens, 6))
                derived = 1.0
            share = max(share, derived)
        return share, wanted, short

    def job_warnings(self, cuts: dict) -> list[tuple[str, int]]:
        """(counter name, value) of the floors a slice cannot meet, counted once per job (partition 0)."""
        out = []
        for name, cut in sorted(cuts.items()):
            if cut["short"]:
                out += [(f"floor_short:{name}", cut["short"]), (f"floor_target:{name}", cut["target"])]
            if cut["tokens_short"]:
                out += [(f"floor_tokens_short:{name}", cut["tokens_short"]), (f"floor_wanted:{name}", cut["wanted"])]
        for domain, weight in sorted(self.config.mixture.items()):
            if weight > 0 and f"domain={domain}" not in cuts:
                out.append((f"floor_empty:domain={domain}", 1))
        return out


def candidate(floors: Floors, document: dict, rows: dict, reason: str | None, ranked: dict | None) -> dict | None:
    """What the floors need of a document (no text), or None when it is in no floored slice."""
    slices = floors.slices(document, rows)
    if not slices:
        return None
    return {
        "doc_id": document["doc_id"],
        "slices": slices,
        "reason": reason,
        "ranked": ranked,
        "base": floors.base_key(document, rows),
        "n_chars": document["n_chars"],
    }


class FloorCuts(beam.PTransform):
    """PCollection[candidate] (+ the quantile thresholds) -> PCollection[(slice, cut)].

    A cut: ``{"cell", "prefix"}`` (rescue every dropped document of the slice whose key is below ``cell``,
    or equal with a doc_id prefix up to ``prefix``; ``cell`` None: no rescue) and the slice's numbers
    (``n``, ``kept``, ``target``, ``short``, ``wanted``, ``tokens_short``) for the warnings.
    """

    def __init__(self, floors: Floors, rules, thresholds=None):
        super().__init__()
        self._floors = floors
        self._rules = rules
        self._thresholds = thresholds

    def expand(self, candidates):
        floors, rules = self._floors, self._rules
        quantile = tuple(rules.quantile_reasons)
        side = [beam.pvalue.AsDict(self._thresholds)] if self._thresholds is not None else []

        def decided(c, thresholds=None):
            reason = c["reason"]
            if reason is None and quantile and c["ranked"] is not None:
                reason = quantile_reason(rules, c["ranked"], thresholds or {})
            return {
                "doc_id": c["doc_id"],
                "slices": c["slices"],
                "n_chars": c["n_chars"],
                "kept": reason is None,
                "key": floors.rescue_key(c["base"], reason, quantile),
            }

        final = candidates | "FloorDecided" >> beam.Map(decided, *side)
        stats = (
            final
            | "FloorSlices" >> beam.FlatMap(lambda d: [(name, d) for name in d["slices"]]).with_output_types(StrKeyed)
            | "FloorStats" >> beam.CombinePerKey(_SliceStatsFn())
        )
        first = stats | "FloorCell" >> beam.Map(lambda kv: (kv[0], first_cut(floors, kv[0], kv[1])))
        prefixes = (
            final
            | "FloorTies"
            >> beam.FlatMap(
                lambda d, cuts: [
                    f"{name}\x00{d['doc_id'][:PREFIX_CHARS]}"
                    for name in d["slices"]
                    if d["key"] is not None
                    and cuts[name]["cell"] is not None
                    and cuts[name]["within"] is not None
                    and tuple(d["key"]) == tuple(cuts[name]["cell"])
                ],
                beam.pvalue.AsDict(first),
            ).with_output_types(str)
            | "FloorTieHistogram" >> beam.combiners.Count.PerElement()
            | "FloorTieKey"
            >> beam.Map(lambda kv: (kv[0].split("\x00", 1)[0], (kv[0].split("\x00", 1)[1], kv[1]))).with_output_types(
                StrKeyed
            )
        )
        return (
            {"first": first, "prefixes": prefixes}
            | "FloorJoin" >> beam.CoGroupByKey()
            | "FloorCut" >> beam.Map(lambda kv: (kv[0], last_cut(next(iter(kv[1]["first"])), kv[1]["prefixes"])))
        )


class _SliceStatsFn(beam.CombineFn):
    """Decided candidates of a slice -> {n, chars, kept, cells: {rescue key: documents}}."""

    def create_accumulator(self):
        return {"n": 0, "chars": 0, "kept": 0, "cells": {}}

    def add_input(self, acc, d):
        acc["n"] += 1
        acc["chars"] += d["n_chars"]
        if d["kept"]:
            acc["kept"] += 1
        elif d["key"] is not None:
            key = tuple(d["key"])
            acc["cells"][key] = acc["cells"].get(key, 0) + 1
        return acc

    def merge_accumulators(self, accs: Iterable[dict]):
        out = self.create_accumulator()
        for acc in accs:
            for name in ("n", "chars", "kept"):
                out[name] += acc[name]
            for key, count in acc["cells"].items():
                out["cells"][key] = out["cells"].get(key, 0) + count
        return out

    def extract_output(self, acc):
        return acc


def first_cut(floors: Floors, name: str, stats: dict) -> dict:
    """The key cell where the rescue of slice ``name`` stops, and how many it takes of that cell
    (``within``; None: all of it)."""
    share, wanted, tokens_short = floors.floor_of(name, stats)
    target = math.ceil(round(share * stats["n"], 9))
    need = target - stats["kept"]
    out = {
        "n": stats["n"],
        "kept": stats["kept"],
        "target": target,
        "cell": None,
        "within": None,
        "short": 0,
        "wanted": wanted,
        "tokens_short": tokens_short,
    }
    if need <= 0:
        return out
    seen = 0
    for key in sorted(stats["cells"]):
        count = stats["cells"][key]
        if seen + count >= need:
            out["cell"], out["within"] = list(key), need - seen
            return out
        seen += count
    if stats["cells"]:  # not enough to rescue: every rescuable document
        out["cell"] = list(max(stats["cells"]))
    out["short"] = need - seen
    return out


def last_cut(first: dict, prefixes: Iterable[tuple[str, int]]) -> dict:
    """The doc_id prefix where the rescue stops inside the cell (:data:`EVERY_PREFIX`: the whole cell)."""
    out = {**first, "prefix": EVERY_PREFIX}
    if first["cell"] is None or first["within"] is None:
        return out
    seen = 0
    for prefix, count in sorted(prefixes):
        seen += count
        if seen >= first["within"]:
            out["prefix"] = prefix
            break
    return out
