"""Policy presets: the published Gopher, C4 and FineWeb rules, ready to use.

A policy may list presets instead of writing the rules out::

    policy:
      presets: [gopher_quality, gopher_repetition, c4, fineweb]
      preset_definition: reference      # the default; or: project
      rules:                            # a rule with a preset rule's reason replaces it in place
        - {reason: gopher_stop_words, drop_if: "heuristics.ref_gopher_stop_words < 3"}

An item is a preset name or a mapping ``{name, definition, disable}``
(``disable``: reasons of the preset's rules to leave out). When the config is
loaded (:func:`beam_pipeline.policy.config.expand_policy_file`) the presets
become ordinary ``policy.rules``, so a preset gives exactly the keep/drop (and
the config digest) of the same rules written by hand.

Definitions (``docs/filters.md`` lists every difference):

* ``reference``: the ``ref_*`` columns with the thresholds of HF datatrove
  0.10.1's filters, the implementation FineWeb was built with
  (``GopherQualityFilter``, ``GopherRepetitionFilter``, ``C4QualityFilter``,
  ``FineWebQualityFilter``, default arguments). They reproduce its decisions
  (``tests/test_heuristics_reference.py``).
* ``project``: the project's columns with the thresholds as the papers state
  them (Rae et al. 2021 A.1.1 and Table A1; Raffel et al. 2020 2.2; Penedo
  et al. 2024 3.3), as ``docs/filters.md`` tabulates them.

Rules are listed in the reference implementation's order, so the first rule
that fires names the same check datatrove reports.
"""

from __future__ import annotations

from typing import Any

PRESET_NAMES = ("gopher_quality", "gopher_repetition", "c4", "fineweb")
DEFINITIONS = ("reference", "project")
DEFAULT_DEFINITION = "reference"

_GOPHER_REPETITION_TABLE = (  # (reason, reference column, project column, threshold); drop when >
    ("gopher_dup_para_frac", "ref_rep_dup_para_frac", "rep_dup_para_frac", "0.3"),
    ("gopher_dup_para_char_frac", "ref_rep_dup_para_char_frac", "rep_dup_para_char_frac", "0.2"),
    ("gopher_dup_line_frac", "ref_rep_dup_line_frac", "rep_dup_line_frac", "0.3"),
    ("gopher_dup_line_char_frac", "ref_rep_dup_line_char_frac", "rep_dup_line_char_frac", "0.2"),
    ("gopher_top_2gram", "ref_rep_top_2gram", "rep_top_2gram", "0.2"),
    ("gopher_top_3gram", "ref_rep_top_3gram", "rep_top_3gram", "0.18"),
    ("gopher_top_4gram", "ref_rep_top_4gram", "rep_top_4gram", "0.16"),
    ("gopher_dup_5gram", "ref_rep_dup_5gram", "rep_dup_5gram", "0.15"),
    ("gopher_dup_6gram", "ref_rep_dup_6gram", "rep_dup_6gram", "0.14"),
    ("gopher_dup_7gram", "ref_rep_dup_7gram", "rep_dup_7gram", "0.13"),
    ("gopher_dup_8gram", "ref_rep_dup_8gram", "rep_dup_8gram", "0.12"),
    ("gopher_dup_9gram", "ref_rep_dup_9gram", "rep_dup_9gram", "0.11"),
    ("gopher_dup_10gram", "ref_rep_dup_10gram", "rep_dup_10gram", "0.1"),
)


def _gopher_quality(p: str) -> list[tuple[str, str]]:
    h = f"heuristics.{p}gopher"
    return [
        ("gopher_too_few_words", f"{h}_words < 50"),
        ("gopher_too_many_words", f"{h}_words > 100000"),
        ("gopher_mean_word_length", f"{h}_mean_word_length < 3 or {h}_mean_word_length > 10"),
        ("gopher_hash_ratio", f"{h}_hash_ratio > 0.1"),
        ("gopher_ellipsis_ratio", f"{h}_ellipsis_ratio > 0.1"),
        ("gopher_bullet_lines", f"{h}_bullet_lines > 0.9"),
        ("gopher_ellipsis_lines", f"{h}_ellipsis_lines > 0.3"),
        ("gopher_alpha_words", f"{h}_alpha_words < 0.8"),
        ("gopher_stop_words", f"{h}_stop_words < 2"),
    ]


#: preset -> definition -> [(reason, drop_if)], in the reference implementation's order.
PRESETS: dict[str, dict[str, list[tuple[str, str]]]] = {
    "gopher_quality": {"reference": _gopher_quality("ref_"), "project": _gopher_quality("")},
    "gopher_repetition": {
        "reference": [(reason, f"heuristics.{ref} > {t}") for reason, ref, _, t in _GOPHER_REPETITION_TABLE],
        "project": [(reason, f"heuristics.{own} > {t}") for reason, _, own, t in _GOPHER_REPETITION_TABLE],
    },
    "c4": {
        "reference": [
            ("c4_lorem_ipsum", "heuristics.ref_c4_lorem_ipsum"),
            ("c4_curly_bracket", "heuristics.ref_c4_curly_bracket"),
            ("c4_too_few_sentences", "heuristics.ref_c4_sentences < 5"),
        ],
        "project": [  # no sentence splitter: the lines that survive C4's line rules stand in
            ("c4_lorem_ipsum", "heuristics.c4_lorem_ipsum"),
            ("c4_curly_bracket", "heuristics.c4_curly_bracket"),
            ("c4_too_few_sentences", "heuristics.c4_kept_lines < 5"),
        ],
    },
    "fineweb": {
        "reference": [  # datatrove's FineWebQualityFilter defaults (char_duplicates_ratio 0.01)
            ("fineweb_line_punct", "heuristics.ref_fw_line_punct_ratio < 0.12"),
            ("fineweb_short_lines", "heuristics.ref_fw_short_line_ratio > 0.67"),
            ("fineweb_dup_line_chars", "heuristics.ref_fw_dup_line_char_frac > 0.01"),
            ("fineweb_newlines", "heuristics.ref_fw_newline_ratio > 0.3"),
        ],
        "project": [  # the paper's wording (section 3.3)
            ("fineweb_line_punct", "heuristics.fw_line_punct_ratio <= 0.12"),
            ("fineweb_short_lines", "heuristics.fw_short_line_ratio >= 0.67"),
            ("fineweb_dup_line_chars", "heuristics.fw_dup_line_char_frac >= 0.1"),
            ("fineweb_newlines", "heuristics.fw_newline_ratio > 0.3"),
        ],
    },
}


def preset_rules(name: str, definition: str = DEFAULT_DEFINITION) -> list[dict]:
    """The rules of one preset as ``policy.rules`` entries."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; presets: {', '.join(PRESET_NAMES)}")
    if definition not in DEFINITIONS:
        raise ValueError(f"preset {name}: unknown definition {definition!r}; definitions: {', '.join(DEFINITIONS)}")
    return [{"reason": reason, "drop_if": condition} for reason, condition in PRESETS[name][definition]]


def _items(presets: Any, default_definition: Any) -> list[tuple[str, str, list[str]]]:
    if default_definition not in DEFINITIONS:
        raise ValueError(f"policy.preset_definition: {default_definition!r} is not one of {', '.join(DEFINITIONS)}")
    if not isinstance(presets, list):
        raise ValueError(
            f"policy.presets: a list of preset names or {{name, definition, disable}} mappings, "
            f"got {type(presets).__name__}"
        )
    items = []
    for i, item in enumerate(presets):
        where = f"policy.presets[{i}]"
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict):
            raise ValueError(f"{where}: a preset name or a mapping, got {type(item).__name__}")
        unknown = sorted(set(item) - {"name", "definition", "disable"})
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}; fields: name, definition, disable")
        name, definition = item.get("name"), item.get("definition", default_definition)
        if name not in PRESETS:
            raise ValueError(f"{where}: unknown preset {name!r}; presets: {', '.join(PRESET_NAMES)}")
        if definition not in DEFINITIONS:
            raise ValueError(f"{where} ({name}): definition {definition!r} is not one of {', '.join(DEFINITIONS)}")
        disable = item.get("disable", [])
        if not isinstance(disable, list) or not all(isinstance(r, str) for r in disable):
            raise ValueError(f"{where} ({name}).disable: a list of rule reasons")
        reasons = [reason for reason, _ in PRESETS[name][definition]]
        missing = sorted(set(disable) - set(reasons))
        if missing:
            raise ValueError(
                f"{where} ({name}).disable: no rule named {', '.join(missing)} in this preset; "
                f"its rules: {', '.join(reasons)}"
            )
        items.append((name, definition, disable))
    names = [name for name, _, _ in items]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"policy.presets: each preset may appear once; repeated: {', '.join(repeated)}")
    return items


def expand_presets(policy: Any) -> Any:
    """A policy mapping with ``presets`` (and ``preset_definition``) turned into ``rules``.

    The presets' rules come first, in preset order; a rule of ``policy.rules``
    whose reason is a preset rule's replaces it at its place; the other rules
    follow in their order. Anything but a mapping is returned unchanged (the
    config validation reports it).
    """
    if not isinstance(policy, dict) or ("presets" not in policy and "preset_definition" not in policy):
        return policy
    policy = dict(policy)
    presets = policy.pop("presets", [])
    default_definition = policy.pop("preset_definition", DEFAULT_DEFINITION)
    own = policy.get("rules") or []
    if not isinstance(own, list):
        return {**policy, "rules": own}  # the validation reports the shape
    own_by_reason = {rule.get("reason"): rule for rule in own if isinstance(rule, dict)}
    expanded, used = [], set()
    for name, definition, disable in _items(presets, default_definition):
        for rule in preset_rules(name, definition):
            reason = rule["reason"]
            if reason in disable:
                continue
            if reason in used:
                raise ValueError(f"policy.presets: rule {reason!r} is in two presets")
            used.add(reason)
            expanded.append(own_by_reason.get(reason, rule))
    expanded.extend(rule for rule in own if not (isinstance(rule, dict) and rule.get("reason") in used))
    policy["rules"] = expanded
    return policy
