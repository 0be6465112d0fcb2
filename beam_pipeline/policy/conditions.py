"""The condition language of policy rules: tokenizer, parser and three-valued evaluation.

A threshold rule's ``drop_if`` is a condition over annotation columns
(``quality.quality_score < 0.3``); a quantile rule's ``by`` is one column
reference. The rule configs that hold them are in
:mod:`beam_pipeline.policy.config` (their validators parse them here), and
the compiled policy that evaluates them in order is
:class:`beam_pipeline.policy.rules.Plan` (docs/policy.md).

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
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

from beam_pipeline.storage import schemas

DOCUMENT_COLUMNS = ("source", "domain", "url", "license", "date", "n_chars")
BASE_LAYERS = ("document", "exact", "near")


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


def references(tree) -> list[tuple[str, str]]:
    """(layer, column) of every column a parsed condition reads, in order."""
    kind = tree[0]
    if kind in ("and", "or"):
        return [ref for part in tree[1] for ref in references(part)]
    if kind == "not":
        return references(tree[1])
    return [(tree[1], tree[2])]
