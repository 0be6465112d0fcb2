import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from beam_pipeline.transforms.exact_dedup import AnnotateExactDuplicates, annotate_group, member_of

OPTIONS = ["--runner=DirectRunner", "--direct_running_mode=in_memory"]


def doc(doc_id, content_hash, source="web", rank=1, date=None):
    return {"doc_id": doc_id, "content_hash": content_hash, "source": source, "source_rank": rank, "date": date}


def test_representative_is_lowest_rank_then_earliest_then_doc_id():
    members = [member_of(d) for d in (
        doc("d3", "h", rank=2, date="2020-01-01"),
        doc("d2", "h", rank=1, date="2023-05-01"),
        doc("d1", "h", rank=1, date=None),
        doc("d4", "h", rank=1, date="2021-01-01"),
    )]
    rows = annotate_group("h", members)
    assert {r["representative"] for r in rows} == {"d4"}  # rank 1, earliest known date
    assert [r["is_duplicate"] for r in rows] == [True, True, True, False]
    assert all(r["duplicate_count"] == 4 for r in rows)


def test_tie_break_by_doc_id_and_order_independence():
    members = [member_of(doc(i, "h")) for i in ("b", "c", "a")]
    assert annotate_group("h", members)[0]["representative"] == "a"
    assert annotate_group("h", members[::-1])[0]["representative"] == "a"


def test_transform_annotates_every_document():
    documents = [doc("a1", "x", "curated", 0), doc("b1", "x", "web", 1), doc("b2", "y", "web", 1),
                 doc("b3", "x", "web", 1)]
    expected = [
        {"doc_id": "a1", "content_hash": "x", "duplicate_count": 3, "representative": "a1", "is_duplicate": False},
        {"doc_id": "b1", "content_hash": "x", "duplicate_count": 3, "representative": "a1", "is_duplicate": True},
        {"doc_id": "b3", "content_hash": "x", "duplicate_count": 3, "representative": "a1", "is_duplicate": True},
        {"doc_id": "b2", "content_hash": "y", "duplicate_count": 1, "representative": "b2", "is_duplicate": False},
    ]
    with TestPipeline(options=beam.options.pipeline_options.PipelineOptions(OPTIONS)) as p:
        out = p | beam.Create(documents) | AnnotateExactDuplicates()
        assert_that(out, equal_to(expected))
