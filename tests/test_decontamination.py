"""Decontamination: n-gram overlap (filters/decontamination.py), the stage's hits on the sample,
and contamination-report against the retained index of a finished dataset."""
import glob
import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from beam_pipeline import cli
from beam_pipeline.filters import decontamination as dc

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
