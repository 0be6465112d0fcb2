"""Decontamination: n-gram overlap (filters/decontamination.py), the stage's hits on the sample,
and contamination-report against the retained index of a finished dataset."""
import glob
import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from beam_pipeline.cli import commands as cli
from beam_pipeline.filters import decontamination as dc
from beam_pipeline.filters.code_points import code_point_table
from beam_pipeline.filters.lowered_words import distinct_words, lowered_words

PASSAGE = ("The aardwolf (Proteles cristata) is a small, insectivorous mammal, native to East and Southern "
           "Africa. Its name means earth wolf in Afrikaans and Dutch.")


def test_normalization_ignores_case_punctuation_and_spacing():
    a = dc.ngram_hashes(PASSAGE, 13)
    b = dc.ngram_hashes(PASSAGE.upper().replace(" ", "  \n").replace(",", " ;"), 13)
    assert a.dtype == np.uint64 and np.array_equal(a, b)
    assert len(a) == len(dc.words(PASSAGE)) - 12


def test_hit_and_miss():
    evalset = dc.build_evalset("wiki", [("q1", PASSAGE), ("q2", "too short to check")], 13)
    assert evalset.items == 2 and evalset.short_items == 1
    document = "Intro line.\n" + PASSAGE + "\nMore text after the passage."
    hit = dc.score([evalset], document, 13)
    assert hit["contaminated"] is True and hit["evalsets"] == "wiki" and hit["ngrams"] == len(evalset.hashes)
    # twelve shared words are not a 13-gram
    near = " ".join(dc.words(PASSAGE)[:12]) + " but then something else entirely different follows here"
    assert dc.score([evalset], near, 13) == {"contaminated": False, "evalsets": None, "ngrams": 0}
    assert dc.score([evalset], "", 13)["contaminated"] is False
    assert dc.score([evalset], document, 13, min_overlap=len(evalset.hashes) + 1)["contaminated"] is False


def test_several_evalsets_are_named():
    a = dc.build_evalset("a", [("1", PASSAGE)], 8)
    b = dc.build_evalset("b", [("1", PASSAGE[40:])], 8)
    assert dc.score([b, a], PASSAGE, 8)["evalsets"] == "a,b"


def test_read_items(tmp_path):
    jsonl = tmp_path / "e.jsonl"
    jsonl.write_text(json.dumps({"id": "x1", "question": PASSAGE}) + "\n\n")
    assert dc.read_items(str(jsonl), "question") == [("x1", PASSAGE)]
    txt = tmp_path / "e.txt"
    txt.write_text("first item\nsecond item\n")
    assert dc.read_items(str(txt)) == [("1", "first item"), ("2", "second item")]
    with pytest.raises(ValueError, match="e.jsonl:1"):
        dc.read_items(str(jsonl), "text")


def test_index_rows_are_sorted_and_distinct():
    hashes, doc_ids = dc.index_rows([("b", PASSAGE), ("a", PASSAGE + " " + PASSAGE)], 13)
    assert np.all(hashes[:-1] <= hashes[1:])
    pairs = list(zip(hashes.tolist(), doc_ids))
    assert len(pairs) == len(set(pairs)) and pairs == sorted(pairs)


# --- the compiled word split: compared with the plain twin (findall and a hash per word) ------------------

def _plain_ngram_hashes(text, n):
    """ngram_hashes as it was defined before the compiled split: the on-disk index format."""
    import re

    import xxhash

    from beam_pipeline.records.hashing import splitmix64

    tokens = re.findall(r"\w+", text.lower())
    if len(tokens) < n:
        return np.empty(0, dtype=np.uint64)
    base = np.array([xxhash.xxh3_64_intdigest(w.encode("utf-8"), seed=dc.WORD_SEED) for w in tokens], dtype=np.uint64)
    with np.errstate(over="ignore"):
        rolling = base[: len(base) - n + 1].copy()
        for i in range(1, n):
            rolling = rolling * np.uint64(0x100000001B3) + base[i : len(base) - n + 1 + i]
        return splitmix64(rolling)


def _word_cases():
    import random

    atoms = ["a", "B", "ab", "Ab", "x_y", "_", "__", "12", "\u0661\u0662", "\u00b2", "\u00bd", "\u00e9", "E\u0301",
             "\u00df", "\u0130", "\u212a", "\ufb01", "\u03a3", "\u03c3\u03c2", "\u4e2d\u6587", "\U0001f600",
             "\U00010400", "\ud800", "\udfff", " ", "  ", "\n", "\t", ".", ",", "-", "'", "\u00a0", "\u200b",
             "\u0301", "\x00", "\u2028"]
    rng = random.Random(13)
    cases = ["", " ", "a", "a b", PASSAGE, PASSAGE.upper()] + atoms
    for _ in range(2000):
        cases.append("".join(rng.choice(atoms) for _ in range(rng.randint(1, 60))))
    # many distinct words of one length, so that words share hash-table slots
    cases.append(" ".join(f"{a}{b}{c}" for a in "abcdefghij" for b in "klmnopqrst" for c in "uvwxyz0123"))
    return cases


def test_word_characters_are_those_of_the_regex():
    table = code_point_table(r"\w")
    assert table.shape == (0x110000,)
    assert table.tolist() == [chr(c).isalnum() or c == 95 for c in range(0x110000)]


def test_distinct_words_rebuild_words():
    for text in _word_cases():
        lowered = text.lower()
        distinct, ids = distinct_words(lowered)
        assert len(set(distinct)) == len(distinct) and list(dict.fromkeys(dc.words(text))) == distinct
        assert [distinct[i] for i in ids.tolist()] == dc.words(text), text


def test_ngram_hashes_match_the_plain_twin():
    cache = {}
    for text in _word_cases():
        for n in (1, 2, 13):
            expected = _plain_ngram_hashes(text, n).tolist()
            assert dc.ngram_hashes(text, n).tolist() == expected, text
            assert dc.ngram_hashes(text, n, cache).tolist() == expected, text
    assert all(dc.word_hash(w) == h for w, h in cache.items())


def test_ngram_hashes_are_pinned():
    """The hash is the index format (INDEX_FORMAT): these values must never change."""
    assert dc.INDEX_FORMAT == "ngram-xxh3w-poly-splitmix64-v1"
    assert dc.ngram_hashes("a b c d a b c", 2).tolist() == [
        11082540707977493286, 1370234709057745135, 7016634405026243004, 7121778298288418089,
        11082540707977493286, 1370234709057745135]
    assert dc.ngram_hashes("The aardwolf, the AARDWOLF: \u00df \u0130 x_y 12", 3).tolist() == [
        2465611928486026304, 12718748255492758860, 6572411227992394955, 7168524201874418658,
        14135293005813294940, 18319107307023283848]


# --- on the sample (the session build of tests/conftest.py) -----------------------------

def test_the_sample_evalset_leaks_on_purpose(built):
    """sample/evalsets/passages.jsonl copies 8 Wikipedia passages: exactly those 8 articles are flagged."""
    stage = built["stages"]["decontamination"]
    layer = os.path.join(built["root"], "layers", "decontamination", stage["layer_key"], "annotations")
    rows = [r for p in sorted(glob.glob(os.path.join(layer, "*.parquet"))) for r in pq.read_table(p).to_pylist()]
    flagged = [r for r in rows if r["contaminated"]]
    assert len(flagged) == 8 and {r["source"] for r in flagged} == {"wikipedia"}
    assert all(r["evalsets"] == "passages" and r["ngrams"] > 0 for r in flagged)
    assert built["stages"]["select"]["counts"]["filtered"]["eval_contamination"] == 8


def test_contamination_report_against_the_retained_index(built, tmp_path, capsys):
    select_key = built["stages"]["select"]["layer_key"]
    gold = [r for p in sorted(glob.glob(os.path.join(built["root"], "layers", "select", select_key, "gold", "*.parquet")))
            for r in pq.read_table(p, columns=["doc_id", "source", "text"]).to_pylist()]
    leaked = next(r for r in gold if r["source"] == "wikipedia")
    paragraph = next(p for p in leaked["text"].split("\n\n") if len(dc.words(p)) > 40)
    evalset = tmp_path / "new_eval.jsonl"
    evalset.write_text(json.dumps({"id": "new-1", "text": " ".join(dc.words(paragraph)[:40])}) + "\n" +
                       json.dumps({"id": "new-2", "text": "A question written after the dataset was built, about "
                                                          "nothing that the corpus contains at all, in any form."})
                       + "\n" + json.dumps({"id": "new-3", "text": "Too short."}) + "\n")
    out = tmp_path / "report.json"
    assert cli.main(["contamination-report", "--dataset", built["dataset"], "--evalset", str(evalset),
                     "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "contaminated 1 of 3 items" in printed and "new-1" in printed
    report = json.load(open(out))
    by_id = {r["id"]: r for r in report["results"]}
    assert by_id["new-1"]["contaminated"] and leaked["doc_id"] in by_id["new-1"]["doc_ids"]
    assert by_id["new-1"]["matched_ngrams"] == by_id["new-1"]["ngrams"] == 40 - 12
    assert not by_id["new-2"]["contaminated"] and by_id["new-3"]["ngrams"] == 0
    assert report["short_items"] == 1 and report["n"] == 13


def test_contamination_report_needs_an_index(tmp_path, capsys):
    dataset = tmp_path / "datasets" / "abc"
    dataset.mkdir(parents=True)
    (dataset / "manifest.json").write_text(json.dumps({"dataset_id": "abc", "shards": [], "stages": [{"name": "select"}]}))
    (tmp_path / "e.txt").write_text("x\n")
    assert cli.main(["contamination-report", "--dataset", str(dataset), "--evalset", str(tmp_path / "e.txt")]) == 2
    assert "built without decontamination.index: true" in capsys.readouterr().err


def test_the_lowered_words_of_a_text_are_made_once_and_equal_findall():
    """The safety and decontamination scorers share one text's words (filters/lowered_words.py)."""
    text = "Ünïcode WORDS, words\u00a0and_more 42 \ud800 lone \u0130stanbul"
    found = lowered_words(text)
    assert found.lowered == text.lower() and found.words() == dc.words(text)
    assert lowered_words(text) is found  # the same text object: made once
    equal = "".join(list(text))  # equal characters, another object: made again, the same values
    again = lowered_words(equal)
    assert again is not found and again.words() == found.words() and again.distinct == found.distinct
    assert lowered_words("").words() == [] and lowered_words("").ids.size == 0


def test_contamination_report_honours_a_takedowns_tombstones(built, tmp_path, capsys):
    """A report on the version a takedown made does not count the documents taken down (the index is retained)."""
    import shutil

    root = tmp_path / "out"
    copy = root / "datasets" / os.path.basename(built["dataset"])
    shutil.copytree(built["dataset"], copy)
    os.symlink(os.path.join(built["root"], "layers"), root / "layers")  # the retained index, read only
    select_key = built["stages"]["select"]["layer_key"]
    gold = [r for p in sorted(glob.glob(os.path.join(built["root"], "layers", "select", select_key, "gold", "*.parquet")))
            for r in pq.read_table(p, columns=["doc_id", "source", "text"]).to_pylist()]
    leaked = next(r for r in gold if r["source"] == "wikipedia")
    paragraph = next(p for p in leaked["text"].split("\n\n") if len(dc.words(p)) > 40)
    evalset = tmp_path / "new_eval.jsonl"
    evalset.write_text(json.dumps({"id": "new-1", "text": " ".join(dc.words(paragraph)[:40])}) + "\n")

    def report(dataset):
        out = tmp_path / "report.json"
        assert cli.main(["contamination-report", "--dataset", str(dataset), "--evalset", str(evalset),
                         "--json", str(out)]) == 0
        return json.load(open(out))

    before = report(copy)["results"][0]
    assert before["contaminated"] and leaked["doc_id"] in before["doc_ids"]
    ids = tmp_path / "ids.txt"
    ids.write_text(leaked["doc_id"] + "\n")
    capsys.readouterr()  # the report's own "dataset" line
    assert cli.main(["takedown", "--dataset", str(copy), "--doc-ids", str(ids)]) == 0
    new_dir = next(line.split()[1] for line in capsys.readouterr().out.splitlines() if line.startswith("dataset "))
    tombstones = {t["doc_id"] for t in json.load(open(os.path.join(new_dir, "manifest.json")))["tombstones"]}
    assert leaked["doc_id"] in tombstones
    after_report = report(new_dir)
    after = after_report["results"][0]
    assert not tombstones & set(after["doc_ids"])
    assert after["documents"] == before["documents"] - len(tombstones & set(before["doc_ids"]))
    assert after["contaminated"] == (after["documents"] > 0)
    assert after_report["tombstoned_documents"] == len(tombstones)
