"""Config sections of the scoring cascade (``cascade``, ``language``, ``heuristics``, ...).

They are fields of :class:`beam_pipeline.config.corpus.CorpusConfig`, validated the
same way (unknown fields are errors). :func:`check_scoring` checks what spans
sections: the cascade order and its true dependencies, that every policy rule
reads a layer the cascade produces, that a stage has what it needs (a model,
a list, an eval set). ``docs/config.md`` and ``docs/filters.md`` describe
every field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from beam_pipeline.filters.language import BUILTIN_LID
from beam_pipeline.storage.paths import resolve_path

#: Every scoring stage, in the default (cost) order.
SCORER_STAGES = ("language", "heuristics", "blocklist", "quality", "safety", "pii", "decontamination")
#: The dedup stages, members of the cascade too: gated like the scorers, exact before near.
DEDUP_STAGES = ("exact_dedup", "near_dedup")
#: Where dedup goes when the cascade does not name it (the seed's order, DESIGN.md): after language ID and
#: the cheap heuristics, before the first of these (the learned classifier, safety, PII, decontamination).
AFTER_DEDUP = ("quality", "safety", "pii", "decontamination")
#: Stages that are always at the end of a build; they may close the list to make that explicit.
TAIL_STAGES = ("select", "tokenize")
#: stage -> stages that must run before it, and why.
REQUIRES = {
    "safety": {"language": "bad-word lists are per language, so safety needs the language layer"},
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CascadeConfig(_Strict):
    """Which scorers run, in which order, and whether each sees only what passed the gates before it."""

    stages: list[str] = Field(
        default_factory=list,
        description=f"Stages in run order, from: {', '.join(SCORER_STAGES + DEDUP_STAGES)}. Enabled dedup "
        f"stages the list does not name go before the first of {', '.join(AFTER_DEDUP)} (the seed's order).",
    )
    gate: bool = Field(
        True,
        description="Each stage scores only documents that pass the policy rules "
        "applicable before it; false scores every document in every stage.",
    )

    @model_validator(mode="before")
    @classmethod
    def _from_list(cls, value: Any) -> Any:
        return {"stages": value} if isinstance(value, list) else value

    @field_validator("stages")
    @classmethod
    def _order(cls, stages: list[str]) -> list[str]:
        check_order(stages)
        return [s for s in stages if s not in TAIL_STAGES]


def check_order(stages: list[str]) -> None:
    """Raise ValueError naming the problem with a cascade order."""
    shown = f"[{', '.join(stages)}]"
    unknown = [s for s in stages if s not in SCORER_STAGES + DEDUP_STAGES + TAIL_STAGES]
    if unknown:
        raise ValueError(
            f"unknown stage(s) {', '.join(map(repr, unknown))} in {shown}; "
            f"stages: {', '.join(SCORER_STAGES + DEDUP_STAGES)}"
        )
    repeated = sorted({s for s in stages if stages.count(s) > 1})
    if repeated:
        raise ValueError(f"{', '.join(repeated)} listed more than once in {shown}")
    if "tokenize" in stages and stages[-1] != "tokenize":
        after = stages[stages.index("tokenize") + 1 :]
        text_stages = [s for s in after if s != "select"]
        why = (
            f"{', '.join(text_stages)} operate(s) on text, which must be final before tokenization"
            if text_stages
            else "select writes the text that tokenize reads"
        )
        raise ValueError(f"tokenize must be last in {shown}: {why}")
    if "select" in stages and any(s in SCORER_STAGES + DEDUP_STAGES for s in stages[stages.index("select") + 1 :]):
        raise ValueError(f"select must come after every scorer in {shown}: it applies the policy to their scores")
    if all(s in stages for s in DEDUP_STAGES) and stages.index("near_dedup") < stages.index("exact_dedup"):
        raise ValueError(
            f"exact_dedup must come before near_dedup in {shown}: near dedup clusters the exact representatives"
        )
    for stage, needs in REQUIRES.items():
        if stage not in stages:
            continue
        for needed, why in needs.items():
            if needed not in stages or stages.index(needed) > stages.index(stage):
                raise ValueError(f"{stage} must come after {needed} in {shown}: {why}")


class LanguageConfig(_Strict):
    model: str = Field(
        BUILTIN_LID,
        description="fastText language-ID model; builtin:lid.176 is the "
        "lid.176.ftz in the model cache (beam_pipeline/filters/models.py).",
    )
    max_chars: int = Field(10_000, ge=0, description="Classify the first N characters of a document (0: all).")
    paragraphs: bool = Field(False, description="Also classify each paragraph (paragraph_share, paragraph_languages).")
    min_paragraph_chars: int = Field(40, ge=1, description="Shorter paragraphs are not classified.")


class HeuristicsConfig(_Strict):
    stop_words: dict[str, list[str]] = Field(
        default_factory=lambda: {"en": ["the", "be", "to", "of", "and", "that", "have", "with"]},
        description="Stop words per language code (Gopher's English list by default).",
    )
    min_words_per_line: int = Field(3, ge=1, description="C4: lines with fewer words count in c4_short_lines.")
    short_line_chars: int = Field(30, ge=1, description="FineWeb: lines this short count in fw_short_line_ratio.")
    default_language: str | None = Field(
        None,
        description="Language of documents the language layer does not label (or of every document when "
        "language is not in the cascade), e.g. en for an English-only corpus: stop words and "
        "no-space scripts then apply without language identification.",
    )
    definitions: list[Literal["project", "reference"]] = Field(
        default_factory=lambda: ["project"],
        description="Which definitions to compute: project (the gopher_*, rep_*, c4_*, fw_* columns) and/or "
        "reference (the ref_* columns, datatrove 0.10.1's filters); the others are null. When a "
        "config file does not say: project, plus reference if a policy rule reads a ref_* column.",
    )

    @field_validator("default_language")
    @classmethod
    def _language_code(cls, value: str | None) -> str | None:
        import re

        if value is not None and not re.fullmatch(r"[a-z]{2,3}(_[A-Za-z]{2,4})?", value):
            raise ValueError(f"{value!r} is not a language code like the language layer's (en, de, zh, ...)")
        return value

    @field_validator("definitions")
    @classmethod
    def _definitions(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("give at least one of project, reference")
        if len(set(value)) != len(value):
            raise ValueError("each definition may appear once")
        return value

    def score_options(self) -> dict:
        """The keyword arguments of :func:`beam_pipeline.filters.heuristics.score` for this config."""
        return {
            "stop_words": self.stop_words,
            "min_words_per_line": self.min_words_per_line,
            "short_line_chars": self.short_line_chars,
            "default_language": self.default_language,
            "definitions": tuple(self.definitions),
        }


class BlocklistConfig(_Strict):
    domain_files: list[str] = Field(
        default_factory=list, description="Files of domains (blocks subdomains too; '=host' blocks one host)."
    )
    url_substring_files: list[str] = Field(default_factory=list, description="Files of URL substrings.")


class QualityConfig(_Strict):
    model: str | None = Field(None, description="fastText classifier from `train-quality`; score = P(positive).")


class SafetyConfig(_Strict):
    builtin_badwords: bool = Field(True, description="Use the LDNOOBW lists shipped in the glin-profanity wheel.")
    badword_files: dict[str, str] = Field(
        default_factory=dict, description="Language code -> word list file (replaces the builtin list)."
    )
    toxicity_model: str | None = Field(None, description="Optional fastText classifier; toxicity = P(positive).")


class PiiConfig(_Strict):
    kinds: list[Literal["email", "phone", "ip", "credit_card", "ssn", "iban", "secret"]] = Field(
        default_factory=lambda: ["email", "phone", "ip", "credit_card", "ssn", "iban", "secret"],
        description="PII kinds counted.",
    )


class EvalSetConfig(_Strict):
    name: str = Field(description="Name reported in decontamination.evalsets.")
    path: str = Field(description=".jsonl (objects with a text field) or .txt (one item per line).")
    field: str = Field("text", description="JSON field holding the item text.")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        import re

        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", value):
            raise ValueError("must be 1-64 characters of letters, digits, '_', '.', '-'")
        return value


class DecontaminationConfig(_Strict):
    ngram: int = Field(13, ge=3, le=64, description="Words per n-gram.")
    min_overlap: int = Field(1, ge=1, description="Shared n-grams that make a document contaminated.")
    evalsets: list[EvalSetConfig] = Field(default_factory=list)
    index: bool = Field(
        False,
        description="Keep an n-gram index of the gold text (layer ngram_index) for "
        "`contamination-report` against future eval sets.",
    )

    @model_validator(mode="after")
    def _unique(self) -> "DecontaminationConfig":
        names = [e.name for e in self.evalsets]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"eval set names must be unique; repeated: {', '.join(repeated)}")
        return self


def resolved_stages(stages: list[str], exact_enabled: bool, near_enabled: bool) -> list[str]:
    """The cascade with every enabled dedup stage in it: where the list names it, else at the seed's place.

    The seed's place (DESIGN.md, "cheap first"): after language ID and the cheap heuristics and lists,
    before the first of :data:`AFTER_DEDUP`; near dedup right after exact dedup. Raises ValueError when the
    list names a dedup stage whose section is disabled.
    """
    enabled = {"exact_dedup": exact_enabled, "near_dedup": near_enabled}
    disabled = [s for s in DEDUP_STAGES if s in stages and not enabled[s]]
    if disabled:
        raise ValueError(
            f"cascade names {', '.join(disabled)}, but {' and '.join(f'{s}.enabled' for s in disabled)} is false: "
            f"enable it or take it out of the cascade"
        )
    resolved = list(stages)
    missing = [s for s in DEDUP_STAGES if enabled[s] and s not in resolved]
    if not missing:
        return resolved
    if "exact_dedup" in resolved:  # near dedup follows exact dedup
        at = resolved.index("exact_dedup") + 1
    elif "near_dedup" in resolved:  # exact dedup precedes near dedup
        at = resolved.index("near_dedup")
    else:
        later = [i for i, s in enumerate(resolved) if s in AFTER_DEDUP or s in TAIL_STAGES]
        at = later[0] if later else len(resolved)
    return resolved[:at] + missing + resolved[at:]


def check_scoring(config) -> None:
    """Cross-section checks of a :class:`CorpusConfig` (raises ValueError with the fields named)."""
    from beam_pipeline.policy.conditions import BASE_LAYERS
    from beam_pipeline.policy.config import check_rules, floor_problems

    stages = [s for s in config.cascade.stages if s not in DEDUP_STAGES]
    policy = config.policy
    check_rules(policy.rules, policy.overrides)
    sources = {s.name for s in config.sources}
    domains = {s.domain for s in config.sources}
    problems = []
    all_rules = [(f"policy.rules[{i}]", r) for i, r in enumerate(policy.rules)] + [
        (f"policy.overrides[{i}].rules[{j}]", r) for i, o in enumerate(policy.overrides) for j, r in enumerate(o.rules)
    ]
    for where, rule in all_rules:
        missing = sorted(layer for layer in rule.layers() if layer not in BASE_LAYERS and layer not in stages)
        if missing:
            problems.append(
                f"{where} ({rule.reason}) reads {', '.join(missing)}, which is not in cascade [{', '.join(stages)}]"
            )
        if "near" in rule.layers() and not getattr(getattr(config, "near_dedup", None), "enabled", False):
            problems.append(f"{where} ({rule.reason}) reads near, but near_dedup is not enabled")
        if "exact" in rule.layers() and not config.exact_dedup.enabled:
            problems.append(f"{where} ({rule.reason}) reads exact, but exact_dedup is not enabled")
        if rule.drop_if and "safety.toxicity" in rule.drop_if and not config.safety.toxicity_model:
            problems.append(f"{where} ({rule.reason}) reads safety.toxicity, but safety.toxicity_model is not set")
        problems.extend(f"{where} ({rule.reason}) {problem}" for problem in _definition_problems(rule, config))
        for name in rule.sources:
            if name not in sources:
                problems.append(f"{where} ({rule.reason}).sources: unknown source {name!r}")
        for name in rule.domains:
            if name not in domains:
                problems.append(f"{where} ({rule.reason}).domains: unknown domain {name!r}")
    for i, override in enumerate(policy.overrides):
        if override.source is not None and override.source not in sources:
            problems.append(
                f"policy.overrides[{i}].source: unknown source {override.source!r}; "
                f"sources: {', '.join(sorted(sources))}"
            )
        if override.domain is not None and override.domain not in domains:
            problems.append(
                f"policy.overrides[{i}].domain: unknown domain {override.domain!r}; "
                f"domains: {', '.join(sorted(domains))}"
            )
    problems.extend(floor_problems(policy.floors, sources, domains, stages))  # policy.floors (docs/policy.md)
    if "quality" in stages and not config.quality.model:
        problems.append("quality.model: required when quality is in the cascade (train one with train-quality)")
    if "decontamination" in stages and not config.decontamination.evalsets:
        problems.append("decontamination.evalsets: required when decontamination is in the cascade")
    if "blocklist" in stages and not (config.blocklist.domain_files or config.blocklist.url_substring_files):
        problems.append("blocklist: give domain_files or url_substring_files when blocklist is in the cascade")
    if problems:
        raise ValueError("; ".join(problems))


def _definition_problems(rule, config) -> list[str]:
    """A rule reading heuristics columns of a definition that heuristics.definitions leaves out."""
    from beam_pipeline.filters.heuristics import definition_of
    from beam_pipeline.policy.conditions import parse_condition, references

    if rule.drop_if is not None:
        refs = references(parse_condition(rule.drop_if).tree)
    else:
        refs = [tuple(rule.by.split(".", 1))]
    computed = set(config.heuristics.definitions)
    problems = []
    for layer, column in refs:
        definition = definition_of(column) if layer == "heuristics" else None
        if definition is not None and definition not in computed:
            problems.append(
                f"reads heuristics.{column} of the {definition} definition, but heuristics.definitions "
                f"is [{', '.join(config.heuristics.definitions)}]"
            )
    return problems


def resolve_paths(config, base_dir: str) -> dict:
    """model_copy updates resolving every path of the scoring sections against ``base_dir``."""
    builtin = BUILTIN_LID

    def path(value):
        return value if value is None or value == builtin else resolve_path(value, base_dir)

    return {
        "language": config.language.model_copy(update={"model": path(config.language.model)}),
        "blocklist": config.blocklist.model_copy(
            update={
                "domain_files": [path(p) for p in config.blocklist.domain_files],
                "url_substring_files": [path(p) for p in config.blocklist.url_substring_files],
            }
        ),
        "quality": config.quality.model_copy(update={"model": path(config.quality.model)}),
        "safety": config.safety.model_copy(
            update={
                "badword_files": {k: path(v) for k, v in config.safety.badword_files.items()},
                "toxicity_model": path(config.safety.toxicity_model),
            }
        ),
        "decontamination": config.decontamination.model_copy(
            update={"evalsets": [e.model_copy(update={"path": path(e.path)}) for e in config.decontamination.evalsets]}
        ),
    }
