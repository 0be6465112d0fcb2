"""Generate ``beam_pipeline/filters/reference_rules.py`` from the pinned spaCy and datatrove (test-only).

datatrove 0.10.1 splits English text into words and sentences with
``spacy.blank("en")`` plus spaCy's rule-based ``sentencizer``.
:mod:`beam_pipeline.filters.reference_tokenizer` reproduces that tokenizer
without spaCy at run time; the data it needs (the prefix, suffix and infix
patterns, the URL pattern, the special cases and the sentencizer's
punctuation) are copied from the installed spaCy, and the constants of
datatrove's filters (stop words, punctuation sets, C4's citation pattern and
policy phrases) from the installed datatrove, byte for byte, so that the
pipeline and its Dataflow image import neither.

    .venv/bin/python -m tests.helpers.reference_rules            # rewrite the module
    .venv/bin/python -m tests.helpers.reference_rules --check    # exit 1 if it is stale

``tests/test_heuristics_reference.py`` runs the check, so a spaCy upgrade in
``requirements/test.txt`` that changes a rule fails a test until the module is
regenerated.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

TARGET = Path(__file__).resolve().parents[2] / "beam_pipeline" / "filters" / "reference_rules.py"
DATATROVE_VERSION = "0.10.1"


def rules() -> dict:
    import spacy
    from spacy.attrs import ORTH
    from spacy.pipeline.sentencizer import Sentencizer

    tokenizer = spacy.blank("en").tokenizer
    assert tokenizer.token_match is None, "spaCy's English token_match is expected to be unset"
    special = {}
    for string, tokens in sorted(tokenizer.rules.items()):
        special[string] = tuple(token[ORTH] for token in tokens)
    import importlib.metadata

    from datatrove.pipeline.filters import c4_filters, gopher_quality_filter
    from datatrove.utils import text

    version = importlib.metadata.version("datatrove")
    assert version == DATATROVE_VERSION, f"datatrove {version} installed; the reference is {DATATROVE_VERSION}"
    return {
        "SPACY_VERSION": spacy.__version__,
        "DATATROVE_VERSION": version,
        "PREFIX": tokenizer.prefix_search.__self__.pattern,
        "SUFFIX": tokenizer.suffix_search.__self__.pattern,
        "INFIX": tokenizer.infix_finditer.__self__.pattern,
        "URL_MATCH": tokenizer.url_match.__self__.pattern,
        "SPECIAL_CASES": special,
        "SENTENCE_PUNCT_CHARS": tuple(sorted(Sentencizer.default_punct_chars)),
        "GOPHER_STOP_WORDS": tuple(gopher_quality_filter.STOP_WORDS),
        "PUNCTUATION": text.PUNCTUATION,
        "TERMINAL_PUNCTUATION": tuple(sorted(text.TERMINAL_PUNCTUATION)),
        "C4_CITATION": c4_filters.CITATION_REGEX.pattern,
        "C4_END_PUNCTUATION": tuple(c4_filters.END_PUNCTUATION),
        "C4_ELLIPSIS": c4_filters.ELLIPSIS,
        "C4_POLICY_SUBSTRINGS": tuple(c4_filters.POLICY_SUBSTRINGS),
    }


def render(values: dict) -> str:
    lines = [
        '"""The data of the reference definitions, copied from spaCy and datatrove (generated: do not edit).',
        "",
        f"spaCy {values['SPACY_VERSION']}'s English tokenizer rules and sentencizer punctuation",
        "(``spacy.blank('en')``; MIT License, Copyright (C) 2016-2024 ExplosionAI GmbH, 2016 spaCy",
        "GmbH, 2015 Matthew Honnibal), read by :mod:`beam_pipeline.filters.reference_affixes` and",
        ":mod:`beam_pipeline.filters.reference_tokenizer`; the constants of datatrove",
        f"{values['DATATROVE_VERSION']}'s filters (Apache License 2.0, Copyright Hugging Face), read by",
        ":mod:`beam_pipeline.filters.heuristics_reference`. Written by ``python -m tests.helpers.reference_rules``;",
        "a test checks it against the pinned packages.",
        "",
        "Why one long module: it is generated data, rewritten whole by the generator and compared with its",
        "output byte for byte; most of its lines are spaCy's special cases, one per line.",
        '"""',
        "# flake8: noqa",
        "",
    ]
    for name, value in values.items():
        if name == "SPECIAL_CASES":
            lines.append(f"{name} = {{")
            for key, tokens in value.items():
                lines.append(f"    {key!r}: {tokens!r},")
            lines.append("}")
        else:
            lines.append(f"{name} = {value!r}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the module differs from spaCy's rules")
    args = parser.parse_args(argv)
    text = render(rules())
    if args.check:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            print(f"{TARGET} is stale: run python -m tests.helpers.reference_rules", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET} ({len(text):,} characters)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
