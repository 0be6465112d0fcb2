"""The declarative policy: a small rule language over annotation columns.

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

Grammar (no ``eval``: a hand-written tokenizer and recursive-descent parser)::

    expr       := and_expr ("or" and_expr)*
    and_expr   := not_expr ("and" not_expr)*
    not_expr   := "not" not_expr | "(" expr ")" | test
    test       := ref [op literal | "is" ["not"] "null" | ["not"] "in" "[" literal ("," literal)* "]"]
    ref        := layer "." column
    op         := "<" | "<=" | ">" | ">=" | "==" | "!="
    literal    := number | 'string' | "string" | true | false

A bare ``ref`` tests a boolean column. At most ``MAX_NESTING`` (100) levels of
``not`` and ``(`` may be open at once. References are checked when the
config is loaded: the layer must exist, the column must exist in its schema
(:mod:`beam_pipeline.storage.schemas`), and the literal must have the column's type
(numbers for numeric columns, strings for text, true/false for flags).
Errors point at the rule and the column of the expression.

Absent values (a layer that did not score a document, or a score that is
undefined for it) follow SQL's three-valued logic: a comparison with an
absent value is *unknown*, ``not unknown`` is unknown, and a rule drops a
document only when its condition is *true*. Absent scores never drop.

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
import functools
import os
import re
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from beam_pipeline.storage import schemas

REASON = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
BUILTIN_REASONS = frozenset({"exact_duplicate", "near_duplicate", "too_short", "too_long", "too_few_words"})
NOT_SCORED = "not_scored"
DOCUMENT_COLUMNS = ("source", "domain", "url", "license", "date", "n_chars")
BASE_LAYERS = ("document", "exact", "near")
#: Cascade stages whose rows go by another layer name in rules and joins: the dedup stages.
ROW_OF_STAGE = {"exact_dedup": "exact", "near_dedup": "near"}


class RuleError(ValueError):
    """An invalid rule expression; the message shows where."""

    def __init__(self, message: str, expression: str, position: int):
        self.position = position
        caret = " " * position + "^"
        super().__init__(f"{message} at column {position + 1}:\n      {expression}\n      {caret}")


# --- layers and their columns -------------------------------------------------


def _scalar(arrow_type) -> bool:
    import pyarrow as pa

    return not (pa.types.is_list(arrow_type) or pa.types.is_struct(arrow_type) or pa.types.is_binary(arrow_type))


def _kind(arrow_type) -> str:
    import pyarrow as pa

    if pa.types.is_boolean(arrow_type):
        return "bool"
    if pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type):
        return "number"
    return "string"


@functools.lru_cache(maxsize=1)
def layer_columns() -> dict[str, dict[str, str]]:
    """{layer: {column: 'number' | 'string' | 'bool'}} for every layer a rule may read."""
    layers = {
        "document": {name: _kind(schemas.DOCUMENT.field(name).type) for name in DOCUMENT_COLUMNS},
        "exact": {f.name: _kind(f.type) for f in schemas.EXACT_DEDUP if f.name != "doc_id"},
    }
    near = getattr(schemas, "NEAR_DEDUP", None)
    if near is not None:
        layers["near"] = {f.name: _kind(f.type) for f in near if f.name != "doc_id" and _scalar(f.type)}
    for stage, schema in getattr(schemas, "SCORES", {}).items():
        layers[stage] = {f.name: _kind(f.type) for f in schema if f.name not in ("doc_id", "source")}
    return layers


# --- tokenizer ----------------------------------------------------------------

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<number>-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<string>'[^']*'|"[^"]*")
  | (?P<ref>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)
  | (?P<op><=|>=|==|!=|<|>)
  | (?P<punct>[()\[\],])
""",
    re.VERBOSE,
)
KEYWORDS = {"and", "or", "not", "in", "is", "null", "true", "false"}
MAX_NESTING = 100  # 'not' and '(' levels: a deeper expression is a RuleError, not Python's RecursionError


@dataclasses.dataclass(frozen=True)
class Token:
    kind: str  # number, string, ref, keyword, op, punct, end
    text: str
    position: int


def tokenize(expression: str) -> list[Token]:
    tokens, position = [], 0
    while position < len(expression):
        match = _TOKEN.match(expression, position)
        if match is None:
            hint = " (compare with '==')" if expression[position] == "=" else ""
            raise RuleError(f"unexpected character {expression[position]!r}{hint}", expression, position)
        kind = match.lastgroup
        text = match.group(0)
        if kind == "string" and text[0] not in "'\"":
            kind = "string"
        if kind == "ref" and text.lower() in KEYWORDS:
            kind, text = "keyword", text.lower()
        if kind != "space":
            tokens.append(Token(kind, text, position))
        position = match.end()
    tokens.append(Token("end", "", len(expression)))
    return tokens


# --- parser -------------------------------------------------------------------


class _Parser:
    def __init__(self, expression: str, columns: dict[str, dict[str, str]]):
        self.expression = expression
        self.tokens = tokenize(expression)
        self.at = 0
        self.columns = columns
        self.layers_used: set[str] = set()
        self.depth = 0  # 'not' and '(' levels open

    def error(self, message: str, token: Token | None = None):
        token = token or self.tokens[self.at]
        raise RuleError(message, self.expression, token.position)

    def peek(self) -> Token:
        return self.tokens[self.at]

    def take(self) -> Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def accept(self, kind: str, text: str | None = None) -> Token | None:
        token = self.peek()
        if token.kind == kind and (text is None or token.text == text):
            self.at += 1
            return token
        return None

    def parse(self):
        if self.peek().kind == "end":
            self.error("empty condition")
        node = self.or_expr()
        if self.peek().kind != "end":
            self.error(f"unexpected {self.peek().text!r}; expected 'and', 'or' or the end")
        return node

    def or_expr(self):
        parts = [self.and_expr()]
        while self.accept("keyword", "or"):
            parts.append(self.and_expr())
        return parts[0] if len(parts) == 1 else ("or", tuple(parts))

    def and_expr(self):
        parts = [self.not_expr()]
        while self.accept("keyword", "and"):
            parts.append(self.not_expr())
        return parts[0] if len(parts) == 1 else ("and", tuple(parts))

    def not_expr(self):
        if self.peek().text in ("not", "(") and self.peek().kind in ("keyword", "punct"):
            if self.depth == MAX_NESTING:
                self.error(f"more than {MAX_NESTING} levels of 'not' and '('")
            self.depth += 1
            node = self.nested()
            self.depth -= 1
            return node
        return self.test()

    def nested(self):
        if self.accept("keyword", "not"):
            return ("not", self.not_expr())
        self.take()  # "("
        node = self.or_expr()
        if not self.accept("punct", ")"):
            self.error("expected ')'")
        return node

    def reference(self) -> tuple[str, str, str]:
        token = self.peek()
        if token.kind != "ref":
            what = "the end" if token.kind == "end" else repr(token.text)
            self.error(f"expected <layer>.<column>, got {what}")
        self.take()
        if "." not in token.text:
            self.error(f"{token.text!r} is not <layer>.<column>; layers: {', '.join(sorted(self.columns))}", token)
        layer, column = token.text.split(".", 1)
        if layer not in self.columns:
            self.error(f"unknown layer {layer!r}; layers: {', '.join(sorted(self.columns))}", token)
        if column not in self.columns[layer]:
            self.error(
                f"layer {layer!r} has no column {column!r}; it has: {', '.join(sorted(self.columns[layer]))}", token
            )
        self.layers_used.add(layer)
        return layer, column, self.columns[layer][column]

    def literal(self, kind: str, column: str):
        token = self.take()
        if token.kind == "number":
            value, got = float(token.text), "number"
        elif token.kind == "string":
            value, got = token.text[1:-1], "string"
        elif token.kind == "keyword" and token.text in ("true", "false"):
            value, got = token.text == "true", "bool"
        else:
            what = "the end" if token.kind == "end" else repr(token.text)
            self.at -= 1
            self.error(f"expected a {_describe_kind(kind)} to compare {column} with, got {what}")
        if got != kind:
            self.at -= 1
            self.error(f"{column} is a {_describe_kind(kind)} column; got a {_describe_kind(got)}")
        return value

    def test(self):
        layer, column, kind = self.reference()
        name = f"{layer}.{column}"
        if self.accept("keyword", "is"):
            negated = bool(self.accept("keyword", "not"))
            if not self.accept("keyword", "null"):
                self.error("expected 'null' after 'is'")
            return ("null", layer, column, negated)
        negated_in = False
        if (
            self.peek().kind == "keyword"
            and self.peek().text == "not"
            and self.tokens[self.at + 1].kind == "keyword"
            and self.tokens[self.at + 1].text == "in"
        ):
            self.take()
            negated_in = True
        if self.accept("keyword", "in"):
            if not self.accept("punct", "["):
                self.error("expected '[' after 'in'")
            values = [self.literal(kind, name)]
            while self.accept("punct", ","):
                values.append(self.literal(kind, name))
            if not self.accept("punct", "]"):
                self.error("expected ',' or ']'")
            node = ("in", layer, column, tuple(values))
            return ("not", node) if negated_in else node
        op = self.accept("op")
        if op is None:
            if kind != "bool":
                self.error(
                    f"{name} is a {_describe_kind(kind)} column: compare it (e.g. {name} "
                    f"{'< 0.5' if kind == 'number' else chr(61) * 2 + ' ' + repr('x')})"
                )
            return ("bool", layer, column)
        if kind != "number" and op.text not in ("==", "!="):
            self.at -= 1
            self.error(f"{name} is a {_describe_kind(kind)} column: only == and != apply")
        return ("cmp", layer, column, op.text, self.literal(kind, name))


def _describe_kind(kind: str) -> str:
    return {"number": "number", "string": "string", "bool": "true/false"}[kind]


@dataclasses.dataclass(frozen=True)
class Condition:
    """A parsed, type-checked condition."""

    text: str
    tree: Any
    layers: frozenset[str]

    def evaluate(self, rows: dict[str, dict | None]) -> bool | None:
        return _evaluate(self.tree, rows)


def parse_condition(expression: str, columns: dict[str, dict[str, str]] | None = None) -> Condition:
    parser = _Parser(expression, layer_columns() if columns is None else columns)
    tree = parser.parse()
    return Condition(expression, tree, frozenset(parser.layers_used))


def parse_reference(
    text: str, columns: dict[str, dict[str, str]] | None = None, kind: str | None = None
) -> tuple[str, str]:
    parser = _Parser(text, layer_columns() if columns is None else columns)
    layer, column, found = parser.reference()
    if parser.peek().kind != "end":
        parser.error("expected only <layer>.<column>")
    if kind is not None and found != kind:
        raise RuleError(f"{text} is a {_describe_kind(found)} column; a {_describe_kind(kind)} is needed", text, 0)
    return layer, column


_COMPARE = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


def _value(rows: dict, layer: str, column: str):
    row = rows.get(layer)
    return None if row is None else row.get(column)


def _evaluate(node, rows) -> bool | None:
    kind = node[0]
    if kind == "cmp":
        value = _value(rows, node[1], node[2])
        return None if value is None else _COMPARE[node[3]](value, node[4])
    if kind in ("and", "or"):  # Kleene logic: one decisive part settles it, else any unknown part is unknown
        decisive = kind == "or"
        unknown = False
        for part in node[1]:
            result = _evaluate(part, rows)
            if result is decisive:
                return decisive
            unknown |= result is None
        return None if unknown else not decisive
    if kind == "not":
        result = _evaluate(node[1], rows)
        return None if result is None else not result
    if kind == "bool":
        value = _value(rows, node[1], node[2])
        return None if value is None else bool(value)
    if kind == "null":
        is_null = _value(rows, node[1], node[2]) is None
        return not is_null if node[3] else is_null
    if kind == "in":
        value = _value(rows, node[1], node[2])
        return None if value is None else value in node[3]
    raise ValueError(f"unknown node {kind}")


# --- config models --------------------------------------------------------------


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


def references(tree) -> list[tuple[str, str]]:
    """(layer, column) of every column a parsed condition reads, in order."""
    kind = tree[0]
    if kind in ("and", "or"):
        return [ref for part in tree[1] for ref in references(part)]
    if kind == "not":
        return references(tree[1])
    return [(tree[1], tree[2])]


_references = references
