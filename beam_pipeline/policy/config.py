"""The policy's configuration: the ``policy:`` section of a corpus config, validated on load.

A policy rule names a drop reason and a condition over annotation columns::

    rules:
      - reason: low_quality
        drop_if: "quality.quality_score < 0.3"
      - reason: not_english
        drop_if: "language.lang != 'en' or language.confidence < 0.65"
      - reason: quality_rank            # quantile rule: keep the best 80% of each source
        keep_top: 0.8
        by: quality.quality_score
        floor: 0.5                      # ... but never keep less than 50% of a source overall
    overrides:
      - domain: legal
        disable: [low_quality]
      - source: wikipedia
        rules:
          - {reason: low_quality, drop_if: "quality.quality_score < 0.1"}

:class:`PolicyConfig` holds the built-in rules' settings, the rules
(:class:`RuleConfig`), the overrides (:class:`OverrideConfig`), redaction
(:class:`RedactConfig`) and keep-rate floors (:class:`FloorsConfig`;
docs/policy.md, "Floors"). Conditions and column references are parsed and
type-checked when the config loads (:mod:`beam_pipeline.policy.conditions`).
:func:`expand_policy_file` reads a ``policy:`` given as a file and writes out
the presets before validation; the corpus config
(:mod:`beam_pipeline.config.corpus`) calls it, and checks the rules against the
cascade (:mod:`beam_pipeline.config.scorers`, with :func:`check_rules` and
:func:`floor_problems`).
"""

from __future__ import annotations

import os
import re
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from beam_pipeline.policy.conditions import BASE_LAYERS, parse_condition, parse_reference

REASON = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
BUILTIN_REASONS = frozenset({"exact_duplicate", "near_duplicate", "too_short", "too_long", "too_few_words"})
NOT_SCORED = "not_scored"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _number_reference(value: str | None) -> str | None:
    """A ``by:`` column (``<layer>.<column>`` of a number), checked when the policy loads."""
    if value is not None:
        parse_reference(value, kind="number")
    return value


class RuleConfig(_Strict):
    """One policy rule: a threshold rule (``drop_if``) or a quantile rule (``keep_top`` + ``by``)."""

    reason: str = Field(description="Name of the drop reason (lowercase, digits, '_').")
    drop_if: str | None = Field(None, description="Condition over annotation columns; drop when it is true.")
    keep_top: float | None = Field(None, gt=0, le=1, description="Keep this fraction of each group, best first.")
    by: str | None = Field(None, description="Numeric column that ranks documents for keep_top.")
    higher_is_better: bool = True
    per: Literal["source", "domain"] = "source"
    floor: float = Field(0.0, ge=0, le=1, description="keep_top never lowers a group's overall keep rate below this.")
    sources: list[str] = Field(default_factory=list, description="Apply only to these sources (default: all).")
    domains: list[str] = Field(default_factory=list, description="Apply only to these domains (default: all).")

    @field_validator("reason")
    @classmethod
    def _reason(cls, value: str) -> str:
        if not REASON.match(value):
            raise ValueError("must be 1-64 characters of lowercase letters, digits and '_', starting with a letter")
        if value in BUILTIN_REASONS or value.startswith(NOT_SCORED):
            raise ValueError(f"{value!r} is a built-in reason; choose another name")
        return value

    @field_validator("drop_if")
    @classmethod
    def _condition(cls, value: str | None) -> str | None:
        if value is not None:
            parse_condition(value)
        return value

    @field_validator("by")
    @classmethod
    def _by(cls, value: str | None) -> str | None:
        return _number_reference(value)

    @model_validator(mode="after")
    def _one_kind(self) -> "RuleConfig":
        if (self.drop_if is None) == (self.keep_top is None):
            raise ValueError(
                f"rule {self.reason!r}: give either drop_if (a threshold rule) or keep_top with by (a quantile rule)"
            )
        if self.keep_top is not None and self.by is None:
            raise ValueError(f"rule {self.reason!r}: keep_top needs by: <layer>.<column> to rank documents")
        if self.drop_if is not None and (self.by is not None or self.floor):
            raise ValueError(f"rule {self.reason!r}: by and floor belong to keep_top rules")
        return self

    @property
    def is_quantile(self) -> bool:
        return self.keep_top is not None

    def layers(self) -> frozenset[str]:
        if self.drop_if is not None:
            return parse_condition(self.drop_if).layers
        return frozenset({self.by.split(".", 1)[0]})


class OverrideConfig(_Strict):
    """Per-source or per-domain changes to the rules (a source override beats a domain override)."""

    source: str | None = None
    domain: str | None = None
    disable: list[str] = Field(default_factory=list, description="Reasons of rules that do not apply here.")
    rules: list[RuleConfig] = Field(
        default_factory=list, description="Rules replacing the base rule of the same reason, or added."
    )

    @model_validator(mode="after")
    def _one_target(self) -> "OverrideConfig":
        if (self.source is None) == (self.domain is None):
            raise ValueError("an override names exactly one of source: or domain:")
        return self


class RedactConfig(_Strict):
    """PII redaction applied by select when it writes the gold text."""

    enabled: bool = False
    kinds: list[Literal["email", "phone", "ip", "credit_card", "ssn", "iban", "secret"]] = Field(
        default_factory=lambda: ["email", "phone", "ip", "credit_card", "ssn", "iban", "secret"]
    )
    tokens: dict[str, str] = Field(default_factory=dict, description="Replacement per kind (default <EMAIL>, ...).")

    @field_validator("tokens")
    @classmethod
    def _token_kinds(cls, value: dict[str, str]) -> dict[str, str]:
        from beam_pipeline.filters.pii import KINDS

        unknown = sorted(set(value) - set(KINDS))
        if unknown:
            raise ValueError(f"unknown PII kind(s) {', '.join(unknown)}; kinds: {', '.join(KINDS)}")
        return value


#: Slice kinds a floor can name, in the order a rescued document's reason names them.
FLOOR_KINDS = ("source", "domain", "language")


class FloorsConfig(_Strict):
    """Policy-level keep-rate floors: per slice, the least share of its documents ``select`` keeps
    whatever rule or dedup drops them (docs/policy.md, "Floors")."""

    source: dict[str, float] = Field(default_factory=dict, description="Floor per source: {name: share}.")
    domain: dict[str, float] = Field(default_factory=dict, description="Floor per domain bucket: {name: share}.")
    language: dict[str, float] = Field(
        default_factory=dict, description="Floor per language (the language layer's lang): {code: share}."
    )
    from_mixture: bool = Field(
        False, description="Derive per-domain floors from report.mixture and report.target_tokens."
    )
    mixture: dict[str, float] = Field(
        default_factory=dict,
        description="Weight per domain bucket (normalized); from report.mixture with from_mixture.",
    )
    target_tokens: int | None = Field(
        None, ge=1, description="Token budget the mixture is drawn from; from report.target_tokens with from_mixture."
    )
    chars_per_token: float = Field(4.0, gt=0, description="Characters per token, to estimate a slice's tokens.")
    epochs: float = Field(1.0, gt=0, description="Times the training run may repeat a domain's documents.")
    by: str | None = Field(None, description="Numeric column ranking dropped documents for rescue (best first).")
    higher_is_better: bool = True
    never_rescue: list[str] = Field(default_factory=list, description="Drop reasons a floor never overrides.")

    @field_validator("source", "domain", "language")
    @classmethod
    def _shares(cls, value: dict[str, float]) -> dict[str, float]:
        bad = sorted(name for name, share in value.items() if not 0 <= share <= 1)
        if bad:
            raise ValueError(f"a floor is a share of the slice's documents, in [0, 1]; got {', '.join(bad)}")
        return dict(sorted(value.items()))

    @field_validator("mixture")
    @classmethod
    def _weights(cls, value: dict[str, float]) -> dict[str, float]:
        if any(weight < 0 for weight in value.values()):
            raise ValueError("mixture weights must not be negative")
        return dict(sorted(value.items()))

    @field_validator("by")
    @classmethod
    def _by(cls, value: str | None) -> str | None:
        return _number_reference(value)

    @model_validator(mode="after")
    def _budget(self) -> "FloorsConfig":
        if bool(self.mixture) != (self.target_tokens is not None) or (
            self.from_mixture and not (self.mixture and self.target_tokens)
        ):
            raise ValueError(
                "floors from the mixture need both mixture weights and target_tokens "
                "(from_mixture: true reads report.mixture and report.target_tokens)"
            )
        return self

    @property
    def active(self) -> bool:
        """Does any slice have a floor?"""
        return bool(self.source or self.domain or self.language or self.mixture)

    def columns_read(self) -> list[tuple[str, str]]:
        """(layer, column) the floors read besides the rules': the language of language slices, ``by``."""
        out = [("language", "lang")] if self.language else []
        if self.by is not None:
            layer, column = self.by.split(".", 1)
            out.append((layer, column))
        return out

    def share(self, kind: str, name: str) -> float:
        """The explicit floor of slice ``kind=name`` (0 when none)."""
        return float(getattr(self, kind).get(name, 0.0))

    def mixture_share(self, domain: str) -> float | None:
        """The domain's normalized mixture weight, or None when the floors do not come from a mixture."""
        total = sum(self.mixture.values())
        if not self.mixture or domain not in self.mixture or not total:
            return None
        return self.mixture[domain] / total


class PolicyConfig(_Strict):
    """The keep/drop policy applied by ``select``: annotations in, decisions out."""

    drop_exact_duplicates: bool = True
    drop_near_duplicates: bool = True
    strip_boilerplate_lines: bool = Field(True, description="Remove lines the near-dedup stage marked as boilerplate.")
    strip_repeated_spans: bool = Field(True, description="Remove spans the near-dedup stage found repeated.")
    min_chars: int = Field(1, ge=0, description="Drop documents with fewer characters (reason too_short).")
    max_chars: int = Field(1_000_000, ge=1, description="Drop documents with more characters (reason too_long).")
    min_words: int = Field(0, ge=0, description="Drop documents with fewer whitespace-separated words (too_few_words).")
    rules: list[RuleConfig] = Field(default_factory=list, description="Rules over annotation columns (docs/policy.md).")
    overrides: list[OverrideConfig] = Field(default_factory=list, description="Per-source / per-domain rule changes.")
    redact: RedactConfig = RedactConfig()
    floors: FloorsConfig | None = Field(None, description="Keep-rate floors per slice (docs/policy.md, Floors).")

    @model_validator(mode="after")
    def _bounds(self) -> "PolicyConfig":
        if self.min_chars > self.max_chars:
            raise ValueError(f"min_chars ({self.min_chars}) must not exceed max_chars ({self.max_chars})")
        return self


def floor_problems(floors: FloorsConfig | None, sources: set[str], domains: set[str], stages: list[str]) -> list[str]:
    """What is wrong with ``policy.floors`` against the config's sources, domains and cascade."""
    if floors is None:
        return []
    problems = [
        f"policy.floors.{kind}: unknown {kind} {name!r}; {kind}s: {', '.join(sorted(known))}"
        for kind, known in (("source", sources), ("domain", domains))
        for name in getattr(floors, kind)
        if name not in known
    ]
    if floors.language and "language" not in stages:
        problems.append("policy.floors.language: language slices need the language stage in the cascade")
    for layer, _ in floors.columns_read()[1 if floors.language else 0 :]:
        if layer not in BASE_LAYERS and layer not in stages:
            problems.append(f"policy.floors.by reads {layer}, which is not in cascade [{', '.join(stages)}]")
    return problems


def resolve_mixture_floors(data: Any) -> Any:
    """``policy.floors.from_mixture: true`` -> the floors carry ``report.mixture`` and ``report.target_tokens``
    (unless they give their own), so that they are part of the policy, hence of select's layer key."""
    if not isinstance(data, dict) or not isinstance(data.get("policy"), dict):
        return data
    floors = data["policy"].get("floors")
    if not isinstance(floors, dict) or not floors.get("from_mixture"):
        return data
    report: dict = data["report"] if isinstance(data.get("report"), dict) else {}
    filled = dict(floors)
    if "mixture" not in filled and report.get("mixture"):
        filled["mixture"] = report["mixture"]
    if "target_tokens" not in filled and report.get("target_tokens") is not None:
        filled["target_tokens"] = report["target_tokens"]
    return {**data, "policy": {**data["policy"], "floors": filled}}


def check_rules(rules: list[RuleConfig], overrides: list[OverrideConfig]) -> None:
    """Reasons unique, overrides refer to existing reasons (raises ValueError)."""
    reasons = [r.reason for r in rules]
    repeated = sorted({r for r in reasons if reasons.count(r) > 1})
    if repeated:
        raise ValueError(f"policy.rules: each reason may appear once; repeated: {', '.join(repeated)}")
    for i, override in enumerate(overrides):
        unknown = sorted(set(override.disable) - set(reasons))
        if unknown:
            raise ValueError(
                f"policy.overrides[{i}].disable: no rule named {', '.join(unknown)}; "
                f"rules: {', '.join(reasons) or '(none)'}"
            )


def expand_policy_file(data: Any, base_dir: str) -> Any:
    """``policy: path/to/policy.yaml`` -> the file's mapping (the config digest sees the content), and
    ``policy.presets`` -> the preset rules written out (:mod:`beam_pipeline.filters.presets`)."""
    from beam_pipeline.filters.presets import expand_presets

    if not isinstance(data, dict):
        return data
    data = _read_policy_file(data, base_dir)
    if isinstance(data.get("policy"), dict):
        data = {**data, "policy": expand_presets(data["policy"])}
    return _heuristics_definitions(resolve_mixture_floors(data))


def _heuristics_definitions(data: dict) -> dict:
    """``heuristics.definitions`` when the config does not say: the project's, plus the reference when a
    policy rule reads a ``heuristics.ref_*`` column (so existing policies pay for what they read only;
    the resolved list is part of the config, hence of the heuristics layer key)."""
    heuristics = data.get("heuristics")
    if heuristics is None:
        heuristics = {}
    if not isinstance(heuristics, dict) or "definitions" in heuristics:
        return data
    reads_reference = "heuristics.ref_" in repr(data.get("policy"))
    definitions = ["project", "reference"] if reads_reference else ["project"]
    return {**data, "heuristics": {**heuristics, "definitions": definitions}}


def _read_policy_file(data: dict, base_dir: str) -> dict:
    if not isinstance(data.get("policy"), str):
        return data
    path = data["policy"]
    path = path if os.path.isabs(path) else os.path.normpath(os.path.join(base_dir, path))
    try:
        with open(path, encoding="utf-8") as f:
            policy = yaml.safe_load(f)
    except OSError as err:
        raise ValueError(f"policy: cannot read the policy file {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ValueError(f"policy: {path} is not valid YAML: {err}") from None
    return {**data, "policy": policy if policy is not None else {}}
