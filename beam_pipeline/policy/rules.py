"""The policy compiled against a cascade: which rule drops a document, in which order.

The policy's rules and overrides (:mod:`beam_pipeline.policy.config`)
hold conditions in a small language over annotation columns
(:mod:`beam_pipeline.policy.conditions`: grammar, type checks, three-valued
logic). :class:`Plan` orders them against the cascade, per source, with the
overrides applied.

Order of evaluation -- the first rule that fires names the reason:

1. the built-in rules of ``policy`` (``exact_duplicate``, ``too_short``,
   ``too_long``, ``too_few_words``, and any other built-in of
   :func:`beam_pipeline.policy.decision.decide`);
2. rules over ``document`` columns only (and ``exact``/``near`` when those
   stages are not in the cascade);
3. for each cascade stage in order: ``not_scored:<stage>`` if the stage has
   no row for the document (it never saw it), then the rules whose latest
   referenced layer is that stage, in file order (the dedup stages are
   cascade members whose rows are ``exact`` and ``near``: :data:`ROW_OF_STAGE`);
4. quantile rules, in file order, each over the documents that survived
   everything before it.

Steps 1-3 up to a stage are that stage's *gate*: a stage only scores the
documents its gate keeps (:mod:`beam_pipeline.scoring.cascade`).
"""

from __future__ import annotations

import dataclasses

from beam_pipeline.policy.conditions import Condition, parse_condition, references
from beam_pipeline.policy.config import NOT_SCORED, OverrideConfig, RuleConfig

#: Cascade stages whose rows go by another layer name in rules and joins: the dedup stages.
ROW_OF_STAGE = {"exact_dedup": "exact", "near_dedup": "near"}


# --- compiled policy --------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Rule:
    reason: str
    condition: Condition | None  # threshold rule
    position: int  # -1: document/exact/near only; k: cascade stage k; len(cascade): quantile
    index: int  # order in the file
    config: RuleConfig

    def applies(self, source: str, domain: str) -> bool:
        c = self.config
        return (not c.sources or source in c.sources) and (not c.domains or domain in c.domains)


@dataclasses.dataclass
class Plan:
    """The policy compiled against a cascade: ordered rules per source, gates per stage."""

    cascade: tuple[str, ...]
    rules: list[RuleConfig]
    overrides: list[OverrideConfig]
    domains: dict[str, str]  # source -> domain

    def __post_init__(self):
        self._per_source: dict[str, list[Rule]] = {}
        # layer name in rules and rows -> its place in the cascade (the dedup stages' rows are exact / near)
        self._layer_position = {ROW_OF_STAGE.get(stage, stage): i for i, stage in enumerate(self.cascade)}

    def row_name(self, position: int) -> str:
        """The ``rows`` key of cascade stage ``position``."""
        stage = self.cascade[position]
        return ROW_OF_STAGE.get(stage, stage)

    def position(self, rule: RuleConfig) -> int:
        if rule.is_quantile:
            return len(self.cascade)
        stages = [self._layer_position[layer] for layer in rule.layers() if layer in self._layer_position]
        return max(stages) if stages else -1

    def rules_for(self, source: str) -> list[Rule]:
        """Effective rules of a source, in evaluation order (overrides applied)."""
        cached = self._per_source.get(source)
        if cached is not None:
            return cached
        domain = self.domains.get(source)
        effective = {r.reason: (i, r) for i, r in enumerate(self.rules)}
        appended = len(self.rules)
        # domain overrides first, then source overrides: the more specific wins
        for override in sorted(self.overrides, key=lambda o: o.source is not None):
            if not (
                (override.domain is not None and override.domain == domain)
                or (override.source is not None and override.source == source)
            ):
                continue
            for reason in override.disable:
                effective.pop(reason, None)
            for rule in override.rules:
                if rule.reason in effective:
                    effective[rule.reason] = (effective[rule.reason][0], rule)
                else:
                    effective[rule.reason] = (appended, rule)
                    appended += 1
        compiled = [
            Rule(
                rule.reason,
                parse_condition(rule.drop_if) if rule.drop_if is not None else None,
                self.position(rule),
                index,
                rule,
            )
            for index, rule in effective.values()
        ]
        compiled = [rule for rule in compiled if rule.applies(source, domain)]
        compiled.sort(key=lambda r: (r.position, r.index))
        self._per_source[source] = compiled
        return compiled

    def gate_spec(self, stage_index: int) -> dict:
        """What decides which documents stage ``stage_index`` sees (part of its layer key)."""
        return {
            source: [
                (r.reason, r.condition.text, r.position)
                for r in self.rules_for(source)
                if r.condition is not None and r.position < stage_index
            ]
            for source in sorted(self.domains)
        }

    def layers_read(self, upto: int | None = None) -> dict[str, set[str]]:
        """{cascade stage: columns} the rules before stage ``upto`` (all when None) read."""
        limit = len(self.cascade) + 1 if upto is None else upto
        needed: dict[str, set[str]] = {stage: set() for stage in self.cascade[:limit]}
        for source in self.domains:
            for rule in self.rules_for(source):
                if rule.position >= limit:
                    continue
                if rule.condition is not None:
                    for layer, column in _references(rule.condition.tree):
                        if layer in needed:
                            needed[layer].add(column)
                elif rule.config.by:
                    layer, column = rule.config.by.split(".", 1)
                    if layer in needed:
                        needed[layer].add(column)
        return needed

    def first_reason(self, source: str, rows: dict[str, dict | None], upto: int | None = None) -> str | None:
        """The first threshold rule (or missing score) that drops the document, among those before ``upto``.

        ``rows`` maps layer names (``document``, ``exact``, cascade stages) to the
        document's row in that layer, or None when the layer has no row for it.
        Built-in rules are not evaluated here (see :func:`beam_pipeline.policy.decision.decide`).
        """
        limit = len(self.cascade) if upto is None else upto
        checked = -1
        for rule in self.rules_for(source):
            if rule.condition is None or rule.position >= limit:
                continue
            while checked < rule.position:
                checked += 1
                if checked >= 0 and rows.get(self.row_name(checked)) is None:
                    return f"{NOT_SCORED}:{self.cascade[checked]}"
            if rule.condition.evaluate(rows) is True:
                return rule.reason
        while checked < limit - 1:
            checked += 1
            if rows.get(self.row_name(checked)) is None:
                return f"{NOT_SCORED}:{self.cascade[checked]}"
        return None

    def quantile_reasons(self) -> list[str]:
        """Reasons of quantile rules in evaluation order (over every source's effective rules)."""
        order: dict[str, tuple[int, str]] = {}
        for source in sorted(self.domains):
            for rule in self.rules_for(source):
                if rule.config.is_quantile:
                    order[rule.reason] = min(
                        order.get(rule.reason, (rule.index, rule.reason)), (rule.index, rule.reason)
                    )
        return [reason for reason, _ in sorted(order.items(), key=lambda item: item[1])]

    def quantile_rule(self, source: str, reason: str) -> RuleConfig | None:
        for rule in self.rules_for(source):
            if rule.reason == reason and rule.config.is_quantile:
                return rule.config
        return None


_references = references
