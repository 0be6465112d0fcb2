import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from beam_pipeline.config import PolicyConfig
from beam_pipeline.transforms.select import ApplyPolicy

OPTIONS = PipelineOptions(["--runner=DirectRunner", "--direct_running_mode=in_memory"])


def document(doc_id, text, source="web"):
    return {"doc_id": doc_id, "source": source, "domain": "d", "license": "L", "url": None,
            "text": text, "n_chars": len(text)}


def test_gold_and_decisions():
    docs = [document("a", "kept text here"), document("b", "kept text here", "mirror"), document("c", "x")]
    exact = [{"doc_id": "a", "is_duplicate": False}, {"doc_id": "b", "is_duplicate": True},
             {"doc_id": "c", "is_duplicate": False}]
    with TestPipeline(options=OPTIONS) as p:
        out = {"documents": p | "D" >> beam.Create(docs), "exact": p | "E" >> beam.Create(exact)} \
            | ApplyPolicy(PolicyConfig(min_chars=2))
        assert_that(out["gold"], equal_to([{"doc_id": "a", "source": "web", "domain": "d", "license": "L",
                                             "url": None, "text": "kept text here"}]), label="gold")
        assert_that(out["decisions"], equal_to([
            {"doc_id": "a", "source": "web", "kept": True, "reason": None},
            {"doc_id": "b", "source": "mirror", "kept": False, "reason": "exact_duplicate"},
            {"doc_id": "c", "source": "web", "kept": False, "reason": "too_short"},
        ]), label="decisions")


def test_without_exact_annotations_nothing_is_a_duplicate():
    with TestPipeline(options=OPTIONS) as p:
        out = {"documents": p | beam.Create([document("a", "same"), document("b", "same")])} \
            | ApplyPolicy(PolicyConfig())
        assert_that(out["gold"] | beam.Map(lambda r: r["doc_id"]), equal_to(["a", "b"]))
