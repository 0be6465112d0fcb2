"""Paragraphs of a document: blocks of text separated by blank lines.

Shared by the language identifier (it labels paragraphs) and the heuristics
(paragraph-level repetition); a module of its own so that each layer's code
digest (beam_pipeline/build/code_version.py) holds only what it uses.
"""

from __future__ import annotations

import re

_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n")


def split_paragraphs(text: str) -> list[str]:
    """Non-empty paragraphs (blocks separated by blank lines), stripped."""
    return [p for p in (raw.strip() for raw in _PARAGRAPH_BREAK.split(text)) if p]
