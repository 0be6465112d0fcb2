"""The heuristics' fast implementations against straightforward ones, column by column, on real text.

beam_pipeline/filters/heuristics.py and heuristics_reference.py compute
their columns with C-level ``map``/``filter`` passes, numpy arrays, n-gram
hashes counted only where a repeat is possible (a compiled loop,
ngram_repeats.py), and one sentence search per document
(bench/bench_heuristics_reference.py times them). Each test here recomputes
columns the plain way (a loop per line, a Counter of n-gram tuples, one
sentencizer count per line) and asserts the very same values on the bundled
sample's documents (Python docs, Wikipedia, Debian copyright files), so a
faster implementation can never change a score. The compiled n-gram loop is
also compared with the numpy code it replaced, kept here.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from itertools import compress, count

import numpy as np
import pytest

from beam_pipeline.filters import heuristics as h
from beam_pipeline.filters import (
    heuristics_reference,
    ngram_repeats,
    reference_affixes,
    reference_sentencizer,
    reference_tokenizer,
)
from beam_pipeline.filters.paragraphs import split_paragraphs
from beam_pipeline.records.hashing import splitmix64
from tests.helpers import reference_fixture

PUNCTUATION = string.punctuation + "«»“”‘’„‚‹›…–—‐·•¡¿،؛؟۔।॥。、，！？：；（）【】《》〈〉「」『』〔〕"
LETTER = re.compile(r"[^\W\d_]")


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [document["text"] for document in reference_fixture.sample_documents()]


# --- the project's definitions, written plainly --------------------------------------------


def plain_lines(text):
    return [line for line in (raw.strip() for raw in text.split("\n")) if line]


def plain_words(text):
    return [word for word in (token.strip(PUNCTUATION) for token in text.split()) if word]


def plain_repeats(parts):
    seen, dups, chars = set(), 0, 0
    for part in parts:
        if part in seen:
            dups += 1
            chars += len(part)
        else:
            seen.add(part)
    return dups, chars


def fraction(part, whole):
    return None if whole == 0 else part / whole


def plain_ngrams(words):
    """Every n-gram as a tuple of words, counted with a Counter."""
    out = {}
    if not words:
        return dict.fromkeys([f"rep_top_{n}gram" for n in (2, 3, 4)] + [f"rep_dup_{n}gram" for n in range(5, 11)])
    total = sum(map(len, words))
    for n in range(2, 11):
        starts = range(len(words) - n + 1)
        grams = [tuple(words[i : i + n]) for i in starts]
        counts = Counter(grams)
        if n <= 4:
            top = max(counts.values(), default=0)
            if top < 2:
                out[f"rep_top_{n}gram"] = 0.0
            else:
                chars = max(sum(map(len, grams[i])) for i in starts if counts[grams[i]] == top)
                out[f"rep_top_{n}gram"] = min(1.0, top * chars / total)
        else:
            covered = set()
            for i in starts:
                if counts[grams[i]] > 1:
                    covered.update(range(i, i + n))
            out[f"rep_dup_{n}gram"] = sum(len(words[i]) for i in covered) / total
    return out


def plain_project_scores(text, language):
    lines, spaced = plain_lines(text), language not in h.NO_SPACE_LANGUAGES
    words = plain_words(text) if spaced else []
    out = {
        "gopher_bullet_lines": fraction(sum(line.startswith(h.BULLETS) for line in lines), len(lines)),
        "gopher_ellipsis_lines": fraction(sum(line.endswith(h.ELLIPSES) for line in lines), len(lines)),
        "gopher_words": len(words) if spaced else None,
        "gopher_mean_word_length": fraction(sum(map(len, words)), len(words)),
        "gopher_hash_ratio": fraction(text.count("#"), len(words)),
        "gopher_ellipsis_ratio": fraction(text.count("...") + text.count("…"), len(words)),
        "gopher_alpha_words": fraction(sum(1 for w in words if LETTER.search(w)), len(words)),
        "gopher_stop_words": sum(w.lower() in h.GOPHER_STOP_WORDS["en"] for w in words) if language == "en" else None,
    }
    for unit, parts in (("line", lines), ("para", split_paragraphs(text))):
        dups, chars = plain_repeats(parts)
        out[f"rep_dup_{unit}_frac"] = fraction(dups, len(parts))
        out[f"rep_dup_{unit}_char_frac"] = fraction(chars, sum(map(len, parts)))
    out.update(plain_ngrams(words))
    terminal = short = javascript = policy = kept = 0
    for line in lines:
        lower = line.lower()
        ends = line.endswith(h.TERMINAL_PUNCTUATION) and not line.endswith(h.ELLIPSES)
        few = spaced and len(line.split()) < 3
        has_js = "javascript" in lower
        has_policy = any(p in lower for p in h.POLICY_SUBSTRINGS)
        terminal, short, javascript, policy = terminal + ends, short + few, javascript + has_js, policy + has_policy
        kept += ends and not few and not has_js and not has_policy
    out.update(
        {
            "c4_terminal_punct_lines": fraction(terminal, len(lines)),
            "c4_short_lines": fraction(short, len(lines)) if spaced else None,
            "c4_javascript_lines": javascript,
            "c4_policy_lines": policy,
            "c4_lorem_ipsum": "lorem ipsum" in text.lower(),
            "c4_curly_bracket": "{" in text,
            "c4_kept_lines": kept,
            "fw_line_punct_ratio": fraction(sum(line.endswith(h.FINEWEB_STOP_CHARS) for line in lines), len(lines)),
            "fw_short_line_ratio": fraction(sum(len(line) <= 30 for line in lines), len(lines)),
            "fw_dup_line_char_frac": fraction(plain_repeats(lines)[1], len(text) - text.count("\n")),
            "fw_newline_ratio": fraction(text.count("\n"), len(words)) if spaced else None,
        }
    )
    return out


@pytest.mark.parametrize("language", ["en", "de"])
def test_project_columns_equal_the_plain_definitions(texts, language):
    """Every project column of every sample document (English: with stop words; German: without)."""
    for index, text in enumerate(texts):
        fast = h.score(text, language, definitions=("project",))
        plain = plain_project_scores(text, language)
        assert {name: fast[name] for name in plain} == plain, index
        assert all(type(fast[name]) is type(plain[name]) for name in plain), index  # ints stay Python ints


def test_project_line_columns_without_spaces(texts):
    """A no-space language: line and character columns only (the n-grams are None)."""
    for text in texts[::5]:
        fast = h.score(text, "zh", definitions=("project",))
        plain = plain_project_scores(text, "zh")
        assert {name: fast[name] for name in plain} == plain


# --- the reference definitions, written plainly (datatrove's expressions) ------------------------


def test_reference_line_and_stop_word_columns_equal_datatroves_expressions(texts):
    for index, text in enumerate(texts):
        fast = heuristics_reference.score(text, "en")
        lines = text.splitlines()
        words = reference_tokenizer.words(text)
        regex_lines = re.split(r"\n+", text)
        fw_lines = [line for line in text.split("\n") if line.strip()]
        distinct_lines: set[str] = set()
        dup_lines = dup_line_chars = 0
        for line in regex_lines:  # datatrove find_duplicates
            if line in distinct_lines:
                dup_lines += 1
                dup_line_chars += len(line)
            else:
                distinct_lines.add(line)
        plain = {
            "ref_gopher_bullet_lines": fraction(sum(ln.lstrip().startswith(("•", "-")) for ln in lines), len(lines)),
            "ref_gopher_ellipsis_lines": fraction(sum(ln.rstrip().endswith(("...", "…")) for ln in lines), len(lines)),
            "ref_gopher_stop_words": len(set(words) & set(h.GOPHER_STOP_WORDS["en"])),
            "ref_rep_dup_line_frac": dup_lines / len(regex_lines) if text else None,
            "ref_rep_dup_line_char_frac": dup_line_chars / len(text) if text else None,
            "ref_fw_line_punct_ratio": (
                sum(ln.endswith(tuple(heuristics_reference._TERMINAL)) for ln in fw_lines) / len(fw_lines)
                if fw_lines
                else None
            ),
            "ref_fw_short_line_ratio": sum(len(ln) <= 30 for ln in fw_lines) / len(fw_lines) if fw_lines else None,
            "ref_fw_dup_line_char_frac": (
                plain_repeats(fw_lines)[1] / len(text.replace("\n", "")) if fw_lines else None
            ),
            "ref_fw_newline_ratio": fraction(text.count("\n"), len(words)) if fw_lines else None,
            "ref_gopher_ellipsis_ratio": fraction(text.count("...") + text.count("…"), len(words)),
        }
        assert {name: fast[name] for name in plain} == plain, index


def test_sentence_total_is_the_sum_of_line_counts(texts):
    """C4's sentence count: one search over a document's kept lines equals the per-line sentencizer count."""
    checked = 0
    for text in texts:
        kept = [line for line, outcome in heuristics_reference._c4_lines(text.splitlines()) if outcome == "kept"]
        assert reference_sentencizer.sentence_total(kept) == sum(map(reference_sentencizer.sentence_count, kept))
        checked += len(kept)
    assert checked > 10_000
    odd = [
        "",
        "   ",
        "a\tb.  c! d",
        "One. Two. Three",
        "x",
        "Tabs\tand  spaces. Here",
        " lead. Space",
        "a .  .",
        "x.  \t y",
        "end.\u00a0Next",
        "(1) one.) two!  ?three",
        "a . . b",
    ]
    assert reference_sentencizer.sentence_total(odd) == sum(map(reference_sentencizer.sentence_count, odd))


def plain_c4(lines):
    """C4's (kept lines, lorem ipsum, curly bracket) from the per-line loop :func:`_c4_lines`."""
    outcomes = list(heuristics_reference._c4_lines(lines))
    kept = [line for line, outcome in outcomes if outcome == "kept"]
    return kept, any(o == "lorem_ipsum" for _, o in outcomes), any(o == "curly_bracket" for _, o in outcomes)


C4_ODD_LINES = [
    "Plain prose with three words.",
    "  Indented line, stripped first.  ",
    "Two words.",
    "A line ending in an ellipsis...",
    "A cited sentence goes here[1].",
    "A sentence cited at the end. [12]",
    "A line that [edit] never ends",
    "Citation [citation needed] and yet it ends!",
    "Our [2]Privacy Policy applies here.",
    "java[1]script turned on, please.",
    "This site uses cookies to work.",
    "Read the TERMS OF USE first.",
    "We use of cookies sometimes, it says.",
    "Lorem ipsum dolor sit amet.",
    "LOREM IPSUM in capitals, surely.",
    "int main() { return 0; } is C.",
    "Turn on JavaScript to see this page.",
    "Quotes end it \"here\"",
    "Apostrophes end it 'here'",
    "\u0130stanbul lowers to two characters, fine.",
    "A Kelvin sign \u212a lowers to k, fine.",
    "Greek \u039f\u0394\u039f\u03a3 ends in a capital sigma.",
    "x " * 600 + "end.",
    "a " + "y" * 1001 + " long word.",
    "short " + "z" * 999 + " word under the limit.",
    "[1] [2] [3]",
    "",
    "   ",
    "\u3002\u3002\u3002",
]


def test_c4_kept_equals_the_per_line_loop(texts):
    """C4's map passes (:func:`heuristics_reference._c4_kept_at`) keep and flag what the per-line loop does,
    on every sample document, on crafted lines, and on every pair of crafted lines as a document (with
    and without a ``[`` or ``{`` elsewhere in the text)."""
    for text in texts:
        lines = text.splitlines()
        assert heuristics_reference._c4_kept_at(lines, text)[:3] == plain_c4(lines)
    documents = [[line] for line in C4_ODD_LINES] + [[a, b] for a in C4_ODD_LINES for b in C4_ODD_LINES]
    for lines in documents:
        for extra in ("", "\n[", "\n{", "\n[ {"):
            text = "\n".join(lines) + extra
            all_lines = text.splitlines()
            assert heuristics_reference._c4_kept_at(all_lines, text)[:3] == plain_c4(all_lines), lines
    flags = {name: 0 for name in ("lorem", "curly", "policy", "kept")}
    for text in texts + ["\n".join(C4_ODD_LINES)]:
        kept, lorem, curly, _ = heuristics_reference._c4_kept_at(text.splitlines(), text)
        flags["lorem"] += lorem
        flags["curly"] += curly
        flags["kept"] += bool(kept)
        flags["policy"] += heuristics_reference._POLICY(text.lower()) is not None
    assert all(flags.values()), flags  # every outcome occurs


def test_c4_policy_words_cover_every_phrase():
    """The lowered kept lines are searched for these words only: each policy phrase holds one."""
    for phrase in heuristics_reference._rules.C4_POLICY_SUBSTRINGS:
        assert any(word in phrase for word in heuristics_reference._POLICY_WORDS), phrase


def test_sentence_total_of_joined_lines_equals_the_per_line_search(texts):
    """The one search over all lines' cached classes (:func:`reference_sentencizer.sentence_total`) counts
    what the per-line search does and what each line's sentencizer count adds up to, on every sample
    document's kept lines and on lines with runs of spaces, tabs, trailing spaces, uncached chunks."""
    fast_path = 0
    for text in texts:
        kept = heuristics_reference._c4_kept_at(text.splitlines(), text)[0]
        reference_tokenizer.word_ids(text)  # the document's chunks cached, as in score()
        total = reference_sentencizer.sentence_total(kept)
        assert total == reference_sentencizer._sentence_total_by_line(kept)
        assert total == sum(map(reference_sentencizer.sentence_count, kept))
        classes = reference_tokenizer.VOCABULARY.classes
        fast_path += all(piece == "\n" or piece in classes for piece in " \n ".join(kept).split(" "))
    assert fast_path > 500
    odd = [
        ["One. Two"],
        ["One.", "Two"],  # no break across lines
        ["One. ", "Two"],  # a line's trailing single space is no token
        ["One.  ", "Two. x"],
        ["One.  Two", " Three. four", "five.   six"],
        ["One. Two ", "x"],
        ["a\tb. c", "d. e"],
        ["new-chunk-never-seen-1. Next", "x. y"],
        ["(1) one.) two!  ?three", "a . . b"],
        ["", "a. b", "   ", " "],
        ["end.\u00a0Next", "x.  \t y"],
    ]
    for lines in odd:
        for line in lines:  # cached chunks for some, not for others
            if "never" not in line:
                reference_tokenizer.word_ids(line)
        total = reference_sentencizer.sentence_total(lines)  # first: before sentence_count caches the chunks
        expected = sum(map(reference_sentencizer.sentence_count, lines))
        assert total == expected, lines
        assert reference_sentencizer.sentence_total(lines) == expected, lines
        assert reference_sentencizer._sentence_total_by_line(lines) == expected, lines


ODD_LINES_TEXTS = [
    "",
    "\n",
    "One. Two\nThree. four\n",
    "  lead. Space  \n\tTab. xx  yy.  zz\n\n\nend",
    "aa\r\nbb. cc\rdd. ee\x0bff. gg\x0chh. ii\x1cjj. kk\x1dll. mm\x1enn. oo\x85pp. qq\u2028rr. ss\u2029tt. uu",
    "xx.\x1fyy. zz\u00a0ww. vv\u3000uu",  # whitespace that breaks no line
    "One.  ) two!  ?three\n(1) one.) two!\t?three. \u00a0 xx",
    "a . . b\n. . .\n...\n!? xx",
    "Ünïcode. Line\n日本語。次の文\na\u2026 b? c\nx\u0964 y",
    "\ud800 lone. surrogate \udfff. xx",
    "\r\n\r\nxx. yy\r\r\nzz. ww",
    "end.\u2003Next. \u205fmore",
]


def test_separator_table_is_str_split_and_splitlines():
    """The compiled sentence loop's separators: ``str.isspace`` and ``str.splitlines``' line breaks, and no
    code point above the table is either."""
    table = reference_sentencizer._SEPARATORS
    for code in range(0x110000):
        character = chr(code)
        expected = (character.isspace()) + (len(f"a{character}a".splitlines()) == 2)
        assert (table[code] if code < len(table) else 0) == expected, hex(code)


def plain_kept_sentences(text, numbers):
    """The sentencizer's count of the stripped lines ``numbers`` of ``text``, from their strings."""
    lines = text.splitlines()
    return sum(plain_sentences(lines[number].strip()) for number in numbers)


def document_tokens(text):
    """A document's tokens with their chunk ends, as ``heuristics_reference.score`` makes them."""
    vocabulary = reference_tokenizer.VOCABULARY
    return heuristics_reference._Tokens(*vocabulary.tokens_of(vocabulary.chunk_ids_of(text.split())))


def test_line_sentences_from_tokens_equal_the_lines_strings(texts):
    """The compiled count over a document's tokens (:func:`reference_sentencizer.line_sentences`) equals the
    sentencizer's count of each chosen line's string: all lines, every other one, C4's kept lines, on every
    sample document and texts with every line break, whitespace that is not a space, runs of spaces."""
    checked = 0
    for text in texts + ODD_LINES_TEXTS:
        tokens = document_tokens(text)
        n_lines = len(text.splitlines())
        for numbers in (list(range(n_lines)), list(range(0, n_lines, 2)), list(range(1, n_lines, 3))):
            assert tokens.line_sentences(text, numbers) == plain_kept_sentences(text, numbers), (text[:80], numbers)
            checked += len(numbers)
        kept, _, _, numbers = heuristics_reference._c4_kept_at(text.splitlines(), text)
        assert [text.splitlines()[number].strip() for number in numbers] == kept or "[" in text
    assert checked > 50_000
    for text in ODD_LINES_TEXTS[2:]:  # a count per line, each line alone
        tokens = document_tokens(text)
        for number in range(len(text.splitlines())):
            assert tokens.line_sentences(text, [number]) == plain_kept_sentences(text, [number]), (text, number)


def test_line_sentences_refuse_chunks_of_another_text():
    """Chunk ends that do not match the text's chunks give None (the caller counts from strings)."""
    tokens = document_tokens("One. Two three. four")
    assert tokens.line_sentences("One. Two three.", [0]) is None
    assert tokens.line_sentences("One. Two three. four five", [0]) is None
    assert heuristics_reference._Tokens(tokens.ids).line_sentences("One. Two three. four", [0]) is None


def test_c4_sentences_from_tokens_equal_the_kept_lines_count(texts):
    """C4's columns from the document's tokens equal those from the kept lines' strings (``sentence_total``),
    citations removed from some lines or not."""
    cited = [
        "A line with a citation.[1] And more. Here [2].\nPlain line. With two. Sentences here.",
        "Cited [3]. x. y z.\nNot cited. a b c.\n[4] Only. a citation. here!",
        "[edit] A heading? yes. no.\nSome text here. and there.",
    ]
    for text in texts + ODD_LINES_TEXTS + cited:
        expected = heuristics_reference.c4(text)
        assert heuristics_reference.c4(text, tokens=document_tokens(text)) == expected, text[:80]


def plain_suffix_length(string):
    """The suffix pattern's leftmost match in the whole string, searched (no tail, no memo, no shortcut)."""
    match = re.search(reference_tokenizer._rules.SUFFIX, string)
    return match.end() - match.start() if match is not None else 0


def test_suffix_length_by_last_character_equals_the_search(texts):
    """The suffix length decided by the last character (:func:`reference_affixes._suffix_endings`) or by
    the memoized tail search equals a search of the whole string: on every chunk of the sample (and every
    string the affix loop looks at in them), every code point alone and after a word or a number, and
    crafted ones (units, currencies, 's, ellipses, degrees); chunks hold no whitespace, so none here."""
    assert reference_affixes._SUFFIX_ENDS is not None and len(reference_affixes._SUFFIX_ONE) > 100
    strings = {chunk for text in texts for chunk in text.split()}
    strings |= {chunk[i:] for chunk in list(strings) for i in range(1, min(len(chunk), 4))}
    strings |= {chunk[:-i] for chunk in list(strings) for i in range(1, min(len(chunk), 4))}
    # chunks hold no whitespace (and the pattern's $ would match before a final newline)
    characters = [chr(code) for code in range(0x110000) if not chr(code).isspace()]
    strings.update(characters)
    for character in set(characters[:0x3000]) | reference_affixes._SUFFIX_ENDS:
        strings.update(("word" + character, "10" + character, "x." + character, "'" + character))
    strings.update(["", ".", "..", "...", "a..", "…", "……", "x…", "10km", "10km²", "5m/s", "3kg,", "10$", "10US$",
                    "5C$", "US$", "x's", "X'S", "it’s", "IT’S", "°F.", "30°c.", "word.", "Word.", "3.", "10%",
                    "5+", "a+", "x)", "x),", "(x)", "'", "''", "x'", "ok!", "¶", "x¶", "10K", "10M", "ab10km"])
    for chunk in sorted(strings):
        assert reference_affixes._suffix_length(chunk) == plain_suffix_length(chunk), repr(chunk)
        assert reference_affixes._suffix_length_searched(chunk) == plain_suffix_length(chunk), repr(chunk)


def test_infix_spans_equal_finditer(texts):
    """The infix spans searched from the characters an infix starts with (for an ASCII string, from the
    class's ASCII characters: :func:`reference_affixes._ascii_class`) equal ``re.finditer`` of the infix
    pattern, on every chunk of the sample, each ASCII and non-ASCII character between letters or digits,
    and crafted code-like chunks."""
    infix = re.compile(reference_tokenizer._rules.INFIX)
    ascii_class = reference_affixes._INFIX_START_ASCII
    for code in range(128):
        expected = reference_affixes._INFIX_START.fullmatch(chr(code)) is not None
        assert (ascii_class.fullmatch(chr(code)) is not None) == expected, code
    chunks = {chunk for text in texts for chunk in text.split()}
    for code in list(range(33, 0x3000, 7)) + list(range(33, 128)):
        for context in ("a{}b", "1{}2", "A{}z", "é{}a", "a{}{}b", "{}a", "a{}"):
            chunks.add(context.format(chr(code), chr(code)))
    chunks.update(["", "a.b.c", "sqlalchemy.sql.Select()", "a-b", "1-2", "x=y", "a:b", "a/b", "1.5e-3", "a...b",
                   "a…b", "a--b", "a^b", "a~b", "a<b>c", "re.sub('-{1,2}',", "--stat[=<width>[,<name-width>]]",
                   "naïve-word", "日本-語", "a©b", "x😀y"])
    for chunk in sorted(chunks):
        assert reference_affixes._infix_spans(chunk) == [m.span() for m in infix.finditer(chunk)], repr(chunk)


def test_chunk_cache_cleared_when_full_gives_the_same_words(texts, monkeypatch):
    """A full chunk cache is cleared between documents (a new generation) and the words stay the same."""
    sample = texts[:40]
    expected = [reference_tokenizer.words(text) for text in sample]
    monkeypatch.setattr(reference_tokenizer, "VOCABULARY", reference_tokenizer._Vocabulary())
    monkeypatch.setattr(reference_tokenizer, "CACHE_SIZE", 2_000)
    generation = reference_tokenizer.VOCABULARY.generation
    assert [reference_tokenizer.words(text) for text in sample] == expected
    assert reference_tokenizer.VOCABULARY.generation > generation + 1


def _tokenized_with_renewals(sample, monkeypatch, renew=True):
    """Every document's words through a small chunk cache (new generations), the chunks tokenized, and how
    many chunks met again a new generation kept."""
    vocabulary = reference_tokenizer._Vocabulary()
    monkeypatch.setattr(reference_tokenizer, "VOCABULARY", vocabulary)
    monkeypatch.setattr(reference_tokenizer, "CACHE_SIZE", 4_000)
    if not renew:
        monkeypatch.setattr(reference_tokenizer._Vocabulary, "_renew", lambda self, chunks: self.clear())
    tokenized = []
    original = reference_tokenizer._tokenize_chunk
    monkeypatch.setattr(reference_tokenizer, "_tokenize_chunk", lambda chunk: tokenized.append(chunk) or original(chunk))
    words, kept, generation = [], 0, vocabulary.generation
    for text in sample:
        before = vocabulary.generation
        reused = set(compress(vocabulary.chunk_ids, vocabulary.reused[: len(vocabulary.chunk_ids)].tolist()))
        words.append(reference_tokenizer.words(text))
        if vocabulary.generation != before:
            kept += len(reused & set(vocabulary.chunk_ids) - set(text.split()))  # not the document's own
            for chunk in vocabulary.chunk_ids:  # the carried-over tokens and classes are the chunk's
                tokens = reference_tokenizer.chunk_tokens(chunk)
                assert tokens == original(chunk), chunk
                assert vocabulary.classes[chunk] == "".join(map(reference_tokenizer.token_class, tokens)), chunk
    assert vocabulary.generation > generation + 1
    return words, len(tokenized), kept


def test_a_new_generation_keeps_the_chunks_met_again(texts, monkeypatch):
    """When the chunk cache is full, the new generation starts with the chunks a later document met again,
    their tokens carried over instead of tokenized again; every document's words stay the same."""
    sample = texts[:80]
    expected = [reference_tokenizer.words(text) for text in sample]
    words, tokenized, kept = _tokenized_with_renewals(sample, monkeypatch)
    assert words == expected and kept > 500
    cleared_words, cleared_tokenized, cleared_kept = _tokenized_with_renewals(sample, monkeypatch, renew=False)
    assert cleared_words == expected and cleared_kept == 0 and tokenized < cleared_tokenized


def plain_sentences(line):
    """The sentencizer's count of one line from its tokens, each token classed on its own (no cache)."""
    classes = "".join(map(reference_tokenizer.token_class, reference_tokenizer.tokens(line)))
    return 1 + len(re.findall("F[FP]*W", classes))


def test_sentence_counts_equal_the_per_token_classes(texts):
    """The per-token-id class table and the ASCII shortcut for one-sentence lines count what classing every
    token of every kept line does."""
    lines = [
        line
        for text in texts
        for line, outcome in heuristics_reference._c4_lines(text.splitlines())
        if outcome == "kept"
    ]
    lines += ["Ünïcode. Line", "日本語。次の文", "a\u2026 b? c", "x\u0964 y", "ascii only? yes! sure. ok"]
    assert len(lines) > 10_000
    assert [reference_sentencizer.sentence_count(line) for line in lines] == list(map(plain_sentences, lines))
    assert reference_sentencizer.sentence_total(lines) == sum(map(plain_sentences, lines))


@pytest.mark.parametrize("cache_size", [reference_tokenizer.CACHE_SIZE, 3_000])
def test_word_ids_equal_each_chunks_tokens(texts, monkeypatch, cache_size):
    """A document's token ids come from flat per-chunk arrays (and survive the cache's new generations):
    they are the ids of each chunk's tokens, tokenized one chunk at a time."""
    monkeypatch.setattr(reference_tokenizer, "VOCABULARY", reference_tokenizer._Vocabulary())
    monkeypatch.setattr(reference_tokenizer, "CACHE_SIZE", cache_size)
    for text in texts[:300]:
        ids = reference_tokenizer.word_ids(text).tolist()
        strings = reference_tokenizer.VOCABULARY.strings
        plain = [token for chunk in text.split() for token in reference_tokenizer._tokenize_chunk(chunk)]
        assert [strings[i] for i in ids] == plain


def plain_reference_ngrams(words, text):
    """datatrove's n-gram scores written out: a Counter's most common n-gram (the first seen among equals)
    and ``find_all_duplicate``'s scan over every position (n-grams as tuples of tokens)."""
    out = {}
    for n in heuristics_reference.TOP_NGRAM_SIZES:
        grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
        if not grams:
            out[f"ref_rep_top_{n}gram"] = 0.0
            continue
        gram, count = Counter(grams).most_common(1)[0]
        out[f"ref_rep_top_{n}gram"] = len(" ".join(gram)) * count / len(text)
    for n in heuristics_reference.DUP_NGRAM_SIZES:
        seen, chars, at = set(), 0, 0
        while at < len(words) - n + 1:
            gram = tuple(words[at : at + n])
            if gram in seen:
                chars += sum(map(len, gram))
                at += n
            else:
                seen.add(gram)
                at += 1
        out[f"ref_rep_dup_{n}gram"] = chars / len(text)
    return out


def test_reference_ngram_columns_equal_the_plain_scan(texts):
    """Top and duplicate n-grams (candidates only, no sort once nothing repeats) against the plain scan, on
    sample documents and on texts where nothing, or only short n-grams, repeat."""
    for text in texts[::6] + ["one two three four five six", "a b a b c d e f g h i j k", "x y", "lone"]:
        fast = heuristics_reference.score(text, "en")
        plain = plain_reference_ngrams(reference_tokenizer.words(text), text)
        assert {name: fast[name] for name in plain} == plain, text[:60]


# --- the compiled n-gram loop against the numpy code it replaced ---------------------------------
#
# beam_pipeline/filters/ngram_repeats.py computes both definitions' n-gram scores in one compiled loop
# (numba). The functions below are the numpy versions it replaced (heuristics.ngram_repetition and
# heuristics_reference._ngram_scores with _occurrences and _skipping_duplicates, as of 936e466), taking
# word ids and lengths; the one change is that a word's count comes from np.unique rather than
# np.bincount(ids), the same counts for any ids (the crafted collisions below use ids near 2^64). Every
# float must be the very same: the same hashes, tie-breaking and operation order.

MULTIPLIER = np.uint64(0x100000001B3)
NGRAM_NAMES = [f"rep_top_{n}gram" for n in (2, 3, 4)] + [f"rep_dup_{n}gram" for n in range(5, 11)]
REFERENCE_NGRAM_NAMES = ["ref_" + name for name in NGRAM_NAMES]


def word_repeats(ids):
    """Position i starts a repeated 1-gram (``np.bincount(ids)[ids] > 1`` for any int64 ids)."""
    _, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
    return counts[inverse] > 1


def first_occurrence_ids(words):
    """heuristics.ngram_repetition's word ids: the position of each word's first occurrence."""
    vocabulary: dict[str, int] = {}
    return np.fromiter(map(vocabulary.setdefault, words, count()), dtype=np.int64, count=len(words))


def numpy_project_ngrams(ids, lengths):
    """heuristics.ngram_repetition's numpy code (936e466), from its word ids and lengths."""
    names = NGRAM_NAMES
    if not len(ids):
        return dict.fromkeys(names)
    n_words = len(ids)
    total_chars = int(lengths.sum())
    cumulative = np.concatenate(([0], np.cumsum(lengths)))
    base = splitmix64(ids.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15))
    repeats = word_repeats(ids)
    out = {}
    rolling = base
    with np.errstate(over="ignore"):
        for n in range(2, 11):
            if n_words < n:
                out[names[n - 2]] = 0.0
                continue
            rolling = rolling[:-1] * MULTIPLIER + base[n - 1 :]
            candidates = np.flatnonzero(repeats[:-1] & repeats[1:])
            repeats = np.zeros(len(rolling), dtype=bool)
            if candidates.size:
                _, inverse, counts = np.unique(rolling[candidates], return_inverse=True, return_counts=True)
                occurrences = counts[inverse]
                repeated_mask = occurrences > 1
                repeated = candidates[repeated_mask]
                repeats[repeated] = True
            else:
                repeated = candidates
            if n <= 4:
                if repeated.size == 0:
                    out[names[n - 2]] = 0.0
                else:
                    top = int(occurrences.max())
                    at = candidates[occurrences == top]
                    chars = (cumulative[at + n] - cumulative[at]).max()
                    out[names[n - 2]] = min(1.0, top * int(chars) / total_chars)
            else:
                if repeated.size == 0:
                    out[names[n - 2]] = 0.0
                    continue
                marks = np.zeros(n_words + 1, dtype=np.int64)
                marks[repeated] = 1
                marks[repeated + n] -= 1
                covered = np.cumsum(marks[:-1]) > 0
                out[names[n - 2]] = int(lengths[covered].sum()) / total_chars
    return {name: out[name] for name in names}


def numpy_occurrences(keys):
    size = len(keys)
    order = keys.argsort()
    ordered = keys[order]
    starts = np.empty(size + 1, dtype=bool)
    starts[0] = starts[size] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:size])
    bounds = starts.nonzero()[0]
    run_sizes = bounds[1:] - bounds[:-1]
    occurrences = np.empty(size, dtype=np.int64)
    occurrences[order] = run_sizes.repeat(run_sizes)
    return occurrences


def numpy_skipping_duplicates(hashes, repeated, cumulative, n):
    seen: set[int] = set()
    counted: list[int] = []
    resume = 0
    for position, value in zip(repeated.tolist(), hashes[repeated].tolist()):
        if position >= resume:
            if value in seen:
                counted.append(position)
                resume = position + n
            else:
                seen.add(value)
    if not counted:
        return 0
    at = np.array(counted, dtype=np.int64)
    return int((cumulative[at + n] - cumulative[at]).sum())


def numpy_reference_ngrams(ids, lengths, text_length):
    """heuristics_reference._ngram_scores's numpy code (936e466), from token ids and lengths."""
    names = REFERENCE_NGRAM_NAMES
    out = {}
    n_tokens = len(ids)
    cumulative = np.concatenate(([0], np.cumsum(lengths)))
    base = splitmix64(ids.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15))
    repeats = word_repeats(ids) if n_tokens else np.zeros(0, bool)
    rolling = base
    with np.errstate(over="ignore"):
        for n in range(2, 11):
            name = names[n - 2]
            if n_tokens < n:
                out[name] = 0.0
                continue
            candidates = (repeats[:-1] & repeats[1:]).nonzero()[0]
            if not candidates.size:
                for size in range(n, 11):
                    if size >= 5 or n_tokens < size:
                        out[names[size - 2]] = 0.0
                    else:
                        out[names[size - 2]] = (int(cumulative[size]) + size - 1) / text_length
                break
            rolling = rolling[:-1] * MULTIPLIER + base[n - 1 :]
            repeats = np.zeros(len(rolling), dtype=bool)
            occurrences = numpy_occurrences(rolling[candidates])
            repeated = candidates[occurrences > 1]
            repeats[repeated] = True
            if n <= 4:
                if repeated.size:
                    first_top = int(occurrences.argmax())
                    top, at = int(occurrences[first_top]), int(candidates[first_top])
                else:
                    top, at = 1, 0
                chars = int(cumulative[at + n] - cumulative[at]) + n - 1
                out[name] = chars * top / text_length
            else:
                out[name] = numpy_skipping_duplicates(rolling, repeated, cumulative, n) / text_length
    return out


def word_lengths(words):
    return np.fromiter(map(len, words), dtype=np.int64, count=len(words))


def assert_project_ngrams(words):
    """The compiled project scores equal the numpy code's and the plain Counter's, float for float."""
    compiled = h.ngram_repetition(words)
    assert list(compiled) == NGRAM_NAMES
    assert compiled == numpy_project_ngrams(first_occurrence_ids(words), word_lengths(words)), words[:12]
    assert compiled == plain_ngrams(words), words[:12]
    assert all(type(value) is (float if words else type(None)) for value in compiled.values())


def assert_reference_ngrams(words, ids=None):
    """The compiled datatrove scores of ``words`` (a text of them joined by spaces; token ids: ``ids`` or
    sparse ones) equal the numpy code's and datatrove's expressions written plainly."""
    text = " ".join(words)
    if ids is None:  # ids far apart, unrelated to the positions (the tokenizer's vocabulary ids are global)
        vocabulary = {word: 7919 * rank + 3 for rank, word in enumerate(sorted(set(words), reverse=True))}
        ids = np.array([vocabulary[word] for word in words], dtype=np.int64)
    tokens = heuristics_reference._Tokens.__new__(heuristics_reference._Tokens)
    tokens.count, tokens.ids, tokens.lengths = len(words), ids, word_lengths(words)
    compiled = heuristics_reference._ngram_scores(tokens, len(text))
    assert list(compiled) == REFERENCE_NGRAM_NAMES
    assert compiled == numpy_reference_ngrams(ids, tokens.lengths, len(text)), words[:12]
    if text:
        assert compiled == plain_reference_ngrams(words, text), words[:12]
    assert all(type(value) is float for value in compiled.values())


def test_compiled_ngrams_equal_the_numpy_code_on_every_sample_document(texts):
    """Both definitions, every sample document: the project's words, and the reference tokenizer's tokens."""
    for index, text in enumerate(texts):
        words = h.split_words(text)
        assert h.ngram_repetition(words) == numpy_project_ngrams(first_occurrence_ids(words), word_lengths(words)), index
        tokens = heuristics_reference._Tokens(reference_tokenizer.word_ids(text))
        expected = numpy_reference_ngrams(tokens.ids, tokens.lengths, len(text))
        assert heuristics_reference._ngram_scores(tokens, len(text)) == expected, index


def generated_documents():
    """Word lists at the edges of the loop: no words, fewer than n, one word repeated, short periods, top
    counts tied between n-grams of different lengths (the project takes the longest, datatrove the first),
    random documents over small vocabularies (many repeats, jumps in datatrove's scan) and long ones."""
    yield []
    yield ["lone"]
    for size in range(2, 12):
        yield [f"w{i}" for i in range(size)]  # fewer words than n for some n, nothing repeats
        yield ["a", "bb"] * (size // 2) + ["ccc"] * (size % 2)
    yield ["spam"] * 20
    yield ["spam"] * 3
    for period in (2, 3, 4, 5, 7, 11):
        words = [f"{'x' * (i + 1)}" for i in range(period)]
        yield words * 6
        yield words * 3 + ["stop"] + words * 2
        yield ["intro", "words"] + words * 4 + words[:-1]
    # ties: two 2-grams twice each, short one first / long one first; 3- and 4-grams the same way
    yield ["a", "b", "a", "b", "long", "longer", "x", "long", "longer"]
    yield ["long", "longer", "a", "b", "long", "longer", "x", "a", "b"]
    yield ["p", "q", "r", "s", "p", "q", "r", "s", "t", "uuuu", "vvvv", "wwww", "zzzz", "uuuu", "vvvv", "wwww", "zzzz"]
    yield ["uuuu", "vvvv", "wwww", "zzzz", "p", "q", "uuuu", "vvvv", "wwww", "zzzz", "r", "p", "q"]
    yield ["a", "b"] * 3 + ["cc", "dd"] * 3 + ["a", "b"]  # (a b) 4 times, (cc dd) 3 times
    yield ["", "x", "", "x", "y"]  # an empty word weighs nothing
    rng = np.random.default_rng(20261206)
    for trial in range(300):
        vocabulary = ["a", "bb", "ccc", "d", "eeeee", "ff", "g", "hhhhhhh"][: int(rng.integers(1, 9))]
        size = int(rng.integers(1, 60 if trial < 200 else 2_000))
        yield [vocabulary[i] for i in rng.integers(0, len(vocabulary), size)]
    for _ in range(20):  # long documents: mostly distinct words, with copied spans
        words = [f"t{i}" for i in rng.integers(0, 5_000, 3_000)]
        for _ in range(int(rng.integers(0, 20))):
            start, length, to = (int(v) for v in rng.integers(0, 2_900, 3))
            length = length % 40 + 1
            words[to : to + length] = words[start : start + length]
        yield words


def test_compiled_project_ngrams_on_generated_documents():
    checked = 0
    for words in generated_documents():
        assert_project_ngrams(words)
        checked += 1
    assert checked > 350


def test_compiled_reference_ngrams_on_generated_documents():
    for words in generated_documents():
        assert_reference_ngrams(words)
        ids = first_occurrence_ids(words)  # other ids, other hashes: the same scores
        assert_reference_ngrams(words, ids)


def test_compiled_ngrams_hand_checked_ties():
    """A tie of top counts: the project scores the longest n-gram, datatrove the first seen."""
    words = ["a", "b", "a", "b", "long", "longer", "x", "long", "longer"]  # 25 characters
    assert h.ngram_repetition(words)["rep_top_2gram"] == 2 * 10 / 25
    text = " ".join(words)
    tokens = heuristics_reference._Tokens.__new__(heuristics_reference._Tokens)
    tokens.count, tokens.ids, tokens.lengths = len(words), first_occurrence_ids(words), word_lengths(words)
    assert heuristics_reference._ngram_scores(tokens, len(text))["ref_rep_top_2gram"] == 2 * 3 / len(text)


def test_empty_words_only_divide_by_zero_as_before():
    """Words of no characters (split_words never makes them): nothing repeats, 0; a repeat, division by 0."""
    assert h.ngram_repetition(["", ""]) == numpy_project_ngrams(np.array([0, 0]), np.array([0, 0]))
    with pytest.raises(ZeroDivisionError):
        numpy_project_ngrams(np.array([0, 0, 0]), np.array([0, 0, 0]))
    with pytest.raises(ZeroDivisionError):
        h.ngram_repetition(["", "", ""])


def unmix(value):
    """The inverse of splitmix64(id + 0x9E3779B97F4A7C15) over Python ints: the id of a given base hash."""
    mask = (1 << 64) - 1

    def unshift(y, shift):
        x = y
        for _ in range(64 // shift + 1):
            x = y ^ (x >> shift)
        return x

    x = unshift(value, 31)
    x = (x * pow(0x94D049BB133111EB, -1, 1 << 64)) & mask
    x = unshift(x, 27)
    x = (x * pow(0xBF58476D1CE4E5B9, -1, 1 << 64)) & mask
    x = unshift(x, 30)
    return (x - 0x9E3779B97F4A7C15) & mask


def colliding_document(n):
    """Token ids where two different n-grams X and Y have the same rolling hash, and their inner
    (n-1)-grams repeat (so both are candidates); each n-gram occurs once as a tuple."""
    mask = (1 << 64) - 1

    def base(i):
        return int(splitmix64(np.array([i], dtype=np.int64).astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15))[0])

    def rolling(gram):
        value = 0
        for i in gram:
            value = (value * int(MULTIPLIER) + base(i)) & mask
        return value

    x = [10 + i for i in range(n)]
    y = [40 + i for i in range(n - 1)]
    wanted = (rolling(x) - rolling(y) * int(MULTIPLIER)) & mask
    last = unmix(wanted)
    y.append(last - (1 << 64) if last >= 1 << 63 else last)
    assert rolling(y) == rolling(x) and y[-1] not in x + y[:-1]
    separators = iter(range(100, 200))
    parts = [x, x[:-1], x[1:], y, y[:-1], y[1:]]
    ids = [i for part in parts for i in [*part, next(separators)]]
    return np.array(ids, dtype=np.int64), x, y


@pytest.mark.parametrize("n", range(2, 11))
def test_compiled_ngrams_use_the_same_hashes(n):
    """A crafted 64-bit collision between two n-grams: counted as one n-gram by the numpy code and by the
    compiled loop alike (the same splitmix64 bases, multiplier and wraparound), not by a tuple count."""
    ids, x, y = colliding_document(n)
    lengths = (np.abs(ids) % 5 + 1).astype(np.int64)
    project = ngram_repeats.project_scores(ids, lengths)
    assert project == list(numpy_project_ngrams(ids, lengths).values())
    reference = ngram_repeats.datatrove_scores(ids, lengths, int(lengths.sum()) + len(ids) - 1)
    assert reference == list(numpy_reference_ngrams(ids, lengths, int(lengths.sum()) + len(ids) - 1).values())
    other_ids = first_occurrence_ids(ids.tolist())  # the same document, other hashes: no collision
    assert project != ngram_repeats.project_scores(other_ids, lengths)
    assert reference != ngram_repeats.datatrove_scores(other_ids, lengths, int(lengths.sum()) + len(ids) - 1)


def assert_word_ids(words):
    ids, lengths = ngram_repeats.word_ids(words)
    assert ids.dtype == lengths.dtype == np.int64
    assert ids.tolist() == first_occurrence_ids(words).tolist(), words[:12]
    assert lengths.tolist() == list(map(len, words)), words[:12]


def test_word_ids_equal_a_dict_of_the_words(texts):
    """The compiled word ids (first occurrence of equal strings) and lengths, on every sample document's
    words, the generated documents, and words the join by spaces must not confuse."""
    for text in texts:
        assert_word_ids(h.split_words(text))
    for words in generated_documents():
        assert_word_ids(words)
    odd = [
        [""],
        ["", ""],
        ["", "a", "", "a", ""],
        ["a b", "a", "b", "a b"],  # a space inside a word: the dict path
        [" ", " ", ""],
        ["ab", "a", "b", "ba", "ab", "abc", "abd", "abc"],
        ["é", "e\u0301", "é", "e\u0301"],  # different code points, the same look: different words
        ["\U0001f600x", "\U0001f600", "\U0001f600x", "x"],
        ["\ud800", "\udc00", "\ud800\udc00", "\U00010000", "\ud800"],  # lone surrogates (JSON \ud800)
        ["日本語", "日本", "語", "日本語"],
        [f"w{i % 37}" for i in range(5_000)],
    ]
    for words in odd:
        assert_word_ids(words)
        if any(words):  # (no characters at all: test_empty_words_only_divide_by_zero_as_before)
            assert_project_ngrams(words)


def test_distinct_stop_words_from_the_vocabulary_mask_equal_the_id_comparisons(texts, monkeypatch):
    """Gopher's distinct stop words from one masked pass over a document's token ids equal one comparison
    per stop word's id, through new generations of the vocabulary, for lists given anew each time."""
    monkeypatch.setattr(reference_tokenizer, "VOCABULARY", reference_tokenizer._Vocabulary())
    monkeypatch.setattr(reference_tokenizer, "CACHE_SIZE", 5_000)
    lists = [h.GOPHER_STOP_WORDS["en"], ("the", "of", "The", "(", "zzz-not-a-token"), ()]
    checked = 0
    for index, text in enumerate(texts[:200]):
        tokens = heuristics_reference._Tokens(reference_tokenizer.word_ids(text))
        for words in lists + [list(h.GOPHER_STOP_WORDS["en"])]:  # the last one a new list each time
            ids = reference_tokenizer.VOCABULARY.ids
            expected = sum(1 for i in set(map(ids.get, words)) if i is not None and bool((tokens.ids == i).any()))
            assert tokens.distinct_members(words) == expected, index
            checked += expected
    assert reference_tokenizer.VOCABULARY.generation > 2 and checked > 1000


# --- the reference tokenizer's affix loop, infixes and special-case pass, written as spaCy's --------------


def plain_split_affixes(string, specials):
    """spaCy's ``_split_affixes`` as written: the whole patterns tried at every iteration, no early exit."""
    rules, special_cases = reference_tokenizer._rules, reference_affixes.SPECIALS
    prefixes, suffixes, last_size = [], [], 0
    while string and len(string) != last_size:
        if specials and string in special_cases:
            break
        last_size = len(string)
        match = re.match(rules.PREFIX, string)
        pre_len = match.end() if match is not None else 0
        if pre_len:
            prefix, minus_pre = string[:pre_len], string[pre_len:]
            if minus_pre and specials and minus_pre in special_cases:
                string = minus_pre
                prefixes.append(prefix)
                break
        match = re.search(rules.SUFFIX, string[pre_len:])
        suf_len = match.end() - match.start() if match is not None else 0
        if suf_len:
            suffix, minus_suf = string[-suf_len:], string[:-suf_len]
            if minus_suf and specials and minus_suf in special_cases:
                string = minus_suf
                suffixes.append(suffix)
                break
        if pre_len and suf_len and pre_len + suf_len <= len(string):
            string = string[pre_len:-suf_len]
            prefixes.append(prefix)
            suffixes.append(suffix)
        elif pre_len:
            string = minus_pre
            prefixes.append(prefix)
        elif suf_len:
            string = minus_suf
            suffixes.append(suffix)
    return prefixes, string, suffixes


def plain_split_chunk(string, specials):
    """spaCy's ``_split_affixes`` + ``_attach_tokens``: the URL pattern tried before the infixes."""
    special_cases = reference_affixes.SPECIALS
    if specials and string in special_cases:
        return list(special_cases[string])
    tokens, string, suffixes = plain_split_affixes(string, specials)
    if string:
        if specials and string in special_cases:
            tokens.extend(special_cases[string])
        elif re.match(reference_tokenizer._rules.URL_MATCH, string):
            tokens.append(string)
        else:
            start = 0
            for match in re.finditer(reference_tokenizer._rules.INFIX, string):
                if match.start() == 0:
                    continue
                if match.start() != start:
                    tokens.append(string[start : match.start()])
                tokens.append(match.group())
                start = match.end()
            if string[start:]:
                tokens.append(string[start:])
    tokens.extend(reversed(suffixes))
    return tokens


def plain_matcher_patterns():
    """First token -> [(pattern tokens, special case)], in the order of the special cases (spaCy's matcher)."""
    patterns = {}
    for case in reference_affixes.SPECIALS:
        tokens = []
        for index, match in enumerate(re.finditer(r"\s+|\S+", case)):
            run = match.group()
            if run[0].isspace():
                run = run[1:] if index and run[0] == " " else run
                tokens += [run] if run else []
            else:
                tokens += plain_split_chunk(run, specials=False)
        if len(tokens) > 1 and "".join(tokens) == case:
            patterns.setdefault(tokens[0], []).append((tuple(tokens), case))
    return patterns


def plain_special_cases(tokens, patterns):
    """spaCy's special-case matcher pass inside one chunk, every pattern of a token's first token tried."""
    matches = []
    for start, token in enumerate(tokens):
        for pattern, case in patterns.get(token, ()):
            if tuple(tokens[start : start + len(pattern)]) == pattern:
                matches.append((start, start + len(pattern), case))
    matches.sort(key=lambda m: (m[1] - m[0], -m[0]))
    seen, chosen = set(), []
    for start, end, case in reversed(matches):
        if start not in seen and end - 1 not in seen:
            chosen.append((start, end, case))
        seen.update(range(start, end))
    out, at = [], 0
    for start, end, case in sorted(chosen):
        out += tokens[at:start] + list(reference_affixes.SPECIALS[case])
        at = end
    return out + tokens[at:]


#: Chunks for the loops' early exits: URLs with and without an infix (``.X``), dotted and hyphenated
#: names, numbers, apostrophes, units, emoticons and abbreviations the special-case pass re-joins.
CRAFTED_CHUNKS = [
    "http://docs.python.org/Library.html", "www.Example.com", "mail.falcot.com", "sqlalchemy.orm.PropComparator",
    "a.B", "a.b", "x.Y.", "(see:Foo.Bar),", "Queue.task_done()", "one-time", "Wi-Fi.", "8.1.", "4.2.19.",
    "10km", "10km.", "5m/s,", "(10US$)", "it's", "IT’S", "you’re", "don't.", "LD_PRELOAD", "name¶", "(hd0,msdos1),",
    ":)", "(:", "x:)", ":-)", "<3", "(Mr.", "e.g.", "(e.g.,", "a.m.", "10a.m.", "°C.", "w/", "and/or", "'s", "''",
    "--stat[=<width>[,<name-width>]]", "a...b", "word…", "..", "...", "-", "—", "x", "(", ")", "verá", "आकारकरिता",
    "168.192.in-addr.arpa", "%{HTTP:X-Forwarded-Proto}",  # a URL with an infix; a special case's pair inside
]


def test_affix_and_infix_loops_equal_spacys(texts):
    """The affix loop (stopping where no prefix can start and no suffix end), the infix split (the URL
    pattern tried only when an infix would cut) and the special-case pass (patterns looked up by their first
    two tokens) give the tokens of spaCy's loops as written, with and without special cases, on crafted chunks
    and on every eighth of the ~440,000 distinct chunks of the sample and the reference fixture in sorted order
    (all of them take ~40 s)."""
    patterns = plain_matcher_patterns()
    assert {first for first, _ in reference_affixes._PATTERNS} == set(patterns)
    chunks = {chunk for text in texts for chunk in text.split()}
    chunks.update(chunk for document in reference_fixture.documents() for chunk in document["text"].split())
    chunks = set(sorted(chunks)[::8]) | set(CRAFTED_CHUNKS)
    exits = 0
    for chunk in sorted(chunks):
        for specials in (True, False):
            assert reference_affixes.split_chunk(chunk, specials) == plain_split_chunk(chunk, specials), chunk
        split = plain_split_chunk(chunk, specials=True)
        expected = tuple(plain_special_cases(split, patterns) if len(split) > 1 else split)
        assert reference_tokenizer._tokenize_chunk(chunk) == expected, chunk
        exits += chunk[0] not in reference_affixes._PREFIX_START and chunk[-1] not in reference_affixes._SUFFIX_ENDS
    assert len(chunks) > 30_000 and exits > 5_000


def numpy_tokens_of(vocabulary, chunk_ids):
    """The token ids of a sequence of chunks and where each chunk's end, gathered with numpy (the code the
    compiled gather replaced)."""
    sizes = vocabulary.sizes[chunk_ids]
    if not sizes.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    ends = np.cumsum(sizes)
    shift = np.repeat(vocabulary.first[chunk_ids] - (ends - sizes), sizes)
    shift += np.arange(int(ends[-1]))
    return vocabulary.flat[shift], ends


def test_gathered_tokens_equal_the_numpy_gather(texts, monkeypatch):
    """The compiled gather of a document's token ids (and its chunks' ends) equals the numpy gather, on every
    sample document through new generations of the vocabulary, and on empty and repeated chunk sequences."""
    vocabulary = reference_tokenizer._Vocabulary()
    monkeypatch.setattr(reference_tokenizer, "VOCABULARY", vocabulary)
    monkeypatch.setattr(reference_tokenizer, "CACHE_SIZE", 5_000)
    sequences = []
    for text in texts:
        chunk_ids = vocabulary.chunk_ids_of(text.split())
        sequences.append(chunk_ids)
        sequences += [chunk_ids[::-1], np.repeat(chunk_ids[:3], 4), chunk_ids[:0]]
        for chunk_ids in sequences[-4:]:
            ids, ends = vocabulary.tokens_of(chunk_ids)
            expected_ids, expected_ends = numpy_tokens_of(vocabulary, chunk_ids)
            assert ids.dtype == ends.dtype == np.int64
            assert ids.tolist() == expected_ids.tolist() and ends.tolist() == expected_ends.tolist()
    assert vocabulary.generation > 2 and sum(map(len, sequences)) > 100_000
