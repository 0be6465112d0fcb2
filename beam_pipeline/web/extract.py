"""HTML to training text: main content, title, and what lists, tables and code become.

:func:`html_to_text` returns the page title and the text of the page. Two
extractors (``extract.extractor``; docs/web.md shows the output of both on the
same pages):

``resiliparse`` (default)
    ``resiliparse.extract.html2text.extract_plain_text`` (J. Bevendorff,
    Webis group, ChatNoir; DCLM-Baseline extracts Common Crawl with it) with ``main_content`` (its heuristics drop
    navigation, headers, footers, sidebars, comments, hidden elements) and
    ``preserve_formatting``: block elements end a line, a paragraph is followed
    by a blank line, ``<br>`` is a newline. Ordered list items become lines
    ``  1. item``; **unordered lists (``<ul>``) are dropped in main-content
    mode** (resiliparse treats them as navigation, even with long items), and
    kept as ``  • item`` lines with ``main_content: false`` (which keeps the
    navigation too). A table becomes one line per row, cells (header cells
    alike) separated by two tab characters. ``<pre>`` (code blocks) keeps its
    lines and indentation verbatim; inline ``<code>`` stays inline. Alt texts,
    link targets, form fields and ``<noscript>`` are
    left out. About 300 pages (10 MB of HTML) per second per core on the
    benchmark's documentation pages (``bench/results/warc-*.md``).
``trafilatura``
    ``trafilatura.extract`` (A. Barbaresi, ACL 2021 demo; FineWeb's extractor) with tables kept, no
    comments, no links, no images, no formatting markup, no deduplication
    cache (its LRU cache would make the output depend on the order of pages).
    Better article bodies on news-like pages, ~16x slower on the benchmark's pages. Lists of both
    kinds become one ``- item`` line per item, a table becomes Markdown-like
    rows (``| a | 1 |``, a ``|---|`` line after the header row), code blocks
    keep their lines, paragraphs are separated by one newline (no blank
    line). It drops an inline ``<code>`` that starts a paragraph together with
    the text before it (seen on DocBook pages), and returns nothing
    for pages it does not consider to have a main text: the document is then
    empty and filtered as ``empty_text``.

The title (``<title>``, whitespace collapsed) is taken from resiliparse's DOM
for both extractors and becomes the **first line** of the document, followed
by a blank line, unless the text already starts with it (white space compared
loosely; most pages repeat the title as their ``<h1>``). The document schema has no title column: the
title is part of the text a model trains on, and every later stage sees it.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree

EXTRACTORS = ("resiliparse", "trafilatura")
_SPACE = re.compile(r"\s+")


class Extracted(NamedTuple):
    title: str | None
    text: str


def html_to_text(
    html: str, *, extractor: str = "resiliparse", main_content: bool = True, title: bool = True
) -> Extracted:
    """Title and text of an HTML page (see the module docstring for the format)."""
    tree = HTMLTree.parse(html)
    page_title = _SPACE.sub(" ", tree.title or "").strip() or None
    if extractor == "resiliparse":
        text = extract_plain_text(
            tree,
            main_content=main_content,
            preserve_formatting=True,
            list_bullets=True,
            alt_texts=False,
            links=False,
            form_fields=False,
            noscript=False,
            comments=False,
        )
    elif extractor == "trafilatura":
        text = _trafilatura(html, main_content)
    else:
        raise ValueError(f"unknown extractor {extractor!r}; expected one of {EXTRACTORS}")
    text = text.strip()
    if title and page_title and text and not _starts_with(text, page_title):  # a title alone is no document
        text = f"{page_title}\n\n{text}"
    return Extracted(page_title, text)


def _starts_with(text: str, title: str) -> bool:
    """Whether the text begins with the title, any run of white space (NBSP too) matching any other."""
    return _SPACE.sub(" ", text[: 4 * len(title) + 16]).startswith(title)


def _trafilatura(html: str, main_content: bool) -> str:
    import trafilatura  # imported here: workers of resiliparse sources never load lxml and its models

    text = trafilatura.extract(
        html,
        output_format="txt",
        include_tables=True,
        include_comments=False,
        include_links=False,
        include_images=False,
        include_formatting=False,
        deduplicate=False,
        with_metadata=False,
        no_fallback=not main_content,
        favor_recall=not main_content,
    )
    return text or ""
