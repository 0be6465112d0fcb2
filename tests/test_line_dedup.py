"""Boilerplate lines and repeated spans: keys, stripping, and the Beam composites on real text."""
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from beam_pipeline.dedup.repetition import (
    countable_line_keys,
    line_key,
    line_keys,
    merge_ranges,
    strip_text,
    stripped_document,
    word_windows,
)
from beam_pipeline.transforms.line_dedup import (
    RepeatedLines,
    RepeatedSpans,
    SumCountBlocksFn,
    non_first_occurrences,
    partition_line_counts,
)

OPTIONS = PipelineOptions(["--runner=DirectRunner", "--direct_running_mode=in_memory"])
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIKI = os.path.join(REPO, "sample", "data", "wikipedia", "part-0000.parquet")
GPL_NOTICE = open(os.path.join(REPO, "sample", "data", "debian-copyright", "bash.txt"), encoding="utf-8").read()


def paragraphs(min_words: int = 40) -> list[str]:
    texts = pq.read_table(WIKI, columns=["text"]).column("text").to_pylist()
    return [p.strip() for t in texts for p in t.split("\n\n") if len(p.split()) >= min_words]


def doc(doc_id, text, rank=1, date=None, source="web"):
    return {"doc_id": doc_id, "source": source, "source_rank": rank, "date": date, "text": text}


# --- lines -----------------------------------------------------------------------------

def test_vectorised_line_keys_equal_the_reference_per_line():
    text = "\n".join(["  Hello\tWorld  ", "A\u00a0B\u2003C", "x\x1cy", "", "   ", "Stra\u00dfe  ISt", "a\u2028b",
                      "tab\x0bvt\x0cff", "\r stuff \r"] + GPL_NOTICE.split("\n")[:50])
    keys, lengths = line_keys(text)
    assert keys.tolist() == [line_key(line) for line in text.split("\n")]
    assert lengths.tolist()[:2] == [11, 5]
    assert line_key("Copyright (C) 2020  The Authors ") == line_key("copyright (c) 2020 the authors")
    assert all(0 <= k < 2**63 for k in keys.tolist())


def test_countable_keys_skip_short_lines():
    assert countable_line_keys("short\n" + "a line long enough to count here", 20) == {
        line_key("a line long enough to count here")}


def test_strip_text_removes_marked_lines_and_spans():
    text = "keep me\nBOILER plate\nkeep too\nboilerplate  plate\nend"
    key = line_key("boiler plate")
    assert strip_text(text, [key]) == "keep me\nkeep too\nboilerplate  plate\nend"
    assert strip_text(text, [], [(0, 8)]) == "BOILER plate\nkeep too\nboilerplate  plate\nend"
    assert strip_text(text, [key], [{"start": 0, "end": 8}]) == "keep too\nboilerplate  plate\nend"
    assert strip_text(text) == text
    assert merge_ranges([(5, 9), (0, 3), (3, 4), (8, 12), (20, 20)]) == [(0, 4), (5, 12)]


def test_stripped_document_judges_the_written_text():
    document = {"doc_id": "a", "text": "body\nFOOTER LINE", "n_chars": 16}
    near = {"boilerplate_lines": [line_key("footer line")], "repeated_spans": []}
    assert stripped_document(document, near) == {"doc_id": "a", "text": "body", "n_chars": 4}
    assert stripped_document(document, near, strip_lines=False) is document
    assert stripped_document(document, None) is document


def partitions_of(tmp_path, documents, count):
    """The documents as ``count`` Parquet partitions (split by position: any split counts the same)."""
    paths = []
    for i in range(count):
        path = str(tmp_path / f"part-{i:05d}-of-{count:05d}.parquet")
        pq.write_table(pa.Table.from_pylist(documents[i::count] or [doc("empty", "")]), path)
        paths.append(path)
    return tuple(paths)


@pytest.mark.parametrize("count", [1, 3])
def test_boilerplate_lines_are_counted_per_document_across_the_corpus(tmp_path, count):
    footer = "Subscribe to our newsletter for weekly updates\nAll rights reserved by the example publisher"
    texts = paragraphs()[:30]
    documents = [doc(f"d{i:02d}", f"{t}\n{footer}") for i, t in enumerate(texts)]
    documents.append(doc("twice", "\n".join([texts[0].split("\n")[0]] * 40)))  # one document, one line 40 times
    paths = partitions_of(tmp_path, documents, count)
    with TestPipeline(options=OPTIONS) as p:
        keys = p | RepeatedLines(paths, min_repeats=25, signature_min_repeats=25, min_chars=20)
        assert_that(keys, equal_to([(tuple(sorted(line_key(line) for line in footer.split("\n"))), ())]))
    with TestPipeline(options=OPTIONS) as p:  # 30 documents hold the footer: not more than 30
        keys = p | RepeatedLines(paths, min_repeats=29, signature_min_repeats=29, min_chars=20)
        assert_that(keys, equal_to([(tuple(sorted(line_key(line) for line in footer.split("\n"))), ())]))
    with TestPipeline(options=OPTIONS) as p:
        keys = p | RepeatedLines(paths, min_repeats=30, signature_min_repeats=30, min_chars=20)
        assert_that(keys, equal_to([]))  # no frequent line: no element (the stage reads it with default ())


def test_repeated_lines_give_boilerplate_and_template_keys_from_one_count(tmp_path):
    """``RepeatedLines``: (lines in more than min_repeats documents, lines in more than
    signature_min_repeats but not more than min_repeats), each sorted."""
    footer = "Subscribe to our newsletter for weekly updates\nAll rights reserved by the example publisher"
    menu = "Home | News | Sport | Weather | Contact the newsroom"
    texts = paragraphs()[:30]
    documents = [doc(f"d{i:02d}", f"{menu}\n{t}\n{footer}" if i < 12 else f"{t}\n{footer}")
                 for i, t in enumerate(texts)]  # the footer in 30 documents, the menu in 12
    paths = partitions_of(tmp_path, documents, 3)
    boilerplate = tuple(sorted(line_key(line) for line in footer.split("\n")))
    with TestPipeline(options=OPTIONS) as p:
        lines = p | RepeatedLines(paths, min_repeats=25, signature_min_repeats=10, min_chars=20)
        assert_that(lines, equal_to([(boilerplate, (line_key(menu),))]))
    with TestPipeline(options=OPTIONS) as p:  # the menu is in 12 documents: not more than 12
        lines = p | RepeatedLines(paths, min_repeats=25, signature_min_repeats=12, min_chars=20)
        assert_that(lines, equal_to([(boilerplate, ())]))
    with TestPipeline(options=OPTIONS) as p:  # both above min_repeats: both boilerplate
        lines = p | RepeatedLines(paths, min_repeats=11, signature_min_repeats=5, min_chars=20)
        assert_that(lines, equal_to([(tuple(sorted(boilerplate + (line_key(menu),))), ())]))


def test_partition_line_counts_count_documents_not_lines():
    keys, counts = partition_line_counts(["a long enough line\na long enough line\nshort", "a long enough line"], 10)
    assert keys.tolist() == [line_key("a long enough line")] and counts.tolist() == [2]


def test_summed_count_blocks_equal_the_per_key_sums():
    """The blocks the runner combines per bucket add up to what summing each key alone gives."""
    texts = [row["text"] for row in pq.read_table(WIKI, columns=["text"]).to_pylist()]
    halves = [partition_line_counts(texts[i::3], 1) for i in range(3)]
    expected = {}
    for keys, counts in halves:
        for key, count in zip(keys.tolist(), counts.tolist()):
            expected[key] = expected.get(key, 0) + count
    assert any(count > 1 for count in expected.values())  # some keys are in more than one block
    combine = SumCountBlocksFn()
    accumulator = combine.add_input(combine.create_accumulator(), halves[0])
    accumulator = combine.merge_accumulators([accumulator, combine.add_input(combine.create_accumulator(), halves[1]),
                                              halves[2]])
    keys, counts = combine.extract_output(accumulator)
    assert keys.tolist() == sorted(expected) and counts.tolist() == [expected[k] for k in sorted(expected)]


def test_documents_without_text_are_counted_as_empty(tmp_path):
    """A document with no text (the signing step dead-letters it) does not stop the line count."""
    line = "a line long enough to be counted as boilerplate"
    paths = partitions_of(tmp_path, [doc("a", line), doc("b", None), doc("c", line)], 1)
    with TestPipeline(options=OPTIONS) as p:
        assert_that(p | RepeatedLines(paths, min_repeats=1, signature_min_repeats=1, min_chars=20), equal_to([((line_key(line),), ())]))


# --- spans -----------------------------------------------------------------------------

def test_word_windows_hash_equal_spans_equally_and_locate_them():
    text = "alpha beta  gamma\tdelta epsilon"
    hashes, starts, ends = word_windows(text, 2)
    assert [text[s:e] for s, e in zip(starts, ends)] == ["alpha beta", "beta  gamma", "gamma\tdelta", "delta epsilon"]
    other, _, _ = word_windows("zeta beta  gamma delta", 2)
    assert hashes[1] == other[1]  # "beta gamma" in both, whatever the spacing
    assert hashes[2] != word_windows("gamma Delta", 2)[0][0]  # exact words: case matters
    assert word_windows("one two", 3)[0].size == 0
    assert word_windows("", 3)[0].size == 0
    assert np.all(hashes < 2**63)


@pytest.mark.parametrize("count", [1, 3])
def test_repeated_spans_are_kept_in_the_first_document_and_cut_elsewhere(tmp_path, count):
    texts = paragraphs(60)
    shared = " ".join(GPL_NOTICE.split()[:80])  # an 80-word span from a real license notice
    documents = [
        doc("curated", f"{texts[0]}\n{shared}", rank=0),
        doc("web1", f"{texts[1]}\n{shared}\n{texts[2]}", rank=5),
        doc("web2", f"{shared} {texts[3]}", rank=5),
        doc("alone", texts[4], rank=5),
        doc("other", f"{shared} {texts[5]}", rank=0, source="books"),  # not a listed source: no effect
    ]
    expected = {}
    for d in documents[1:3]:
        start = d["text"].index(shared)
        expected[d["doc_id"]] = [(start, start + len(shared))]

    def check(cuts):  # (doc_id, (start, end)) pairs
        found = {}
        for doc_id, span in cuts:
            found.setdefault(doc_id, []).append(span)
        assert {doc_id: merge_ranges(spans) for doc_id, spans in found.items()} == expected

    with TestPipeline(options=OPTIONS) as p:
        cuts = p | RepeatedSpans(partitions_of(tmp_path, documents, count), ["web"], min_words=50, seed=0)
        assert_that(cuts, check)
    web1 = documents[1]
    start = web1["text"].index(shared)
    assert strip_text(web1["text"], [], [(start, start + len(shared))]) == f"{texts[1]}\n\n{texts[2]}"


def test_the_first_occurrence_of_a_window_is_the_first_document_in_order_and_kept():
    occurrences = [(5, False, "2020-01-01", "late", 0, 10), (5, True, "", "undated", 3, 13),
                   (1, False, "2024-01-01", "curated", 7, 17), (5, False, "2019-06-01", "early", 2, 12)]
    for order in (occurrences, occurrences[::-1]):
        assert sorted(non_first_occurrences((42, order))) == [("early", (2, 12)), ("late", (0, 10)),
                                                               ("undated", (3, 13))]
    assert list(non_first_occurrences((42, occurrences[:1]))) == []
