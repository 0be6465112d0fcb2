"""The near-dedup stage on real text: planted clusters, hubs, short documents, chains, incremental, determinism."""
import glob
import hashlib
import os
import random
import re

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline import schemas
from beam_pipeline.config import ConfigError, NearDedupConfig, PolicyConfig, parse_config
from beam_pipeline.hashing import bucket_of
from beam_pipeline.layers import commit_layer, Layer, part_name, write_partition
from beam_pipeline.dedup.minhash import jaccard
from beam_pipeline.policy import decide
from beam_pipeline.dedup.repetition import line_key
from beam_pipeline.dedup.shingling import shingle_hashes, words
from beam_pipeline.transforms import near_dedup
from beam_pipeline.transforms.layer_io import WriteLayerOutput, WrittenPartitions
from beam_pipeline.transforms.near_dedup import (NearDedupParams, build_stage, member_of, representative_order,
                                                 resolve_against, sign_document)
from conftest import apply_policy, grouping_coders, unexplained_flattens, unexplained_groupings

IN_PROCESS = ["--runner=DirectRunner", "--direct_running_mode=in_memory"]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIKI = os.path.join(REPO, "sample", "data", "wikipedia", "part-0000.parquet")
GPL_NOTICE = open(os.path.join(REPO, "sample", "data", "debian-copyright", "bash.txt"), encoding="utf-8").read()
DOCS_SCHEMA = pa.schema([("doc_id", pa.string()), ("source", pa.string()), ("source_rank", pa.int32()),
                         ("date", pa.string()), ("text", pa.string())])
FAST = {"max_rounds": 3}  # these small graphs converge in 1-2 rounds
LEAN = {**FAST, "lines": {"enabled": False}}  # fewer Beam stages where line counts play no part


# --- real text and planted variants ----------------------------------------------------

def articles() -> list[str]:
    return [t for t in pq.read_table(WIKI, columns=["text"]).column("text").to_pylist() if len(t.split()) >= 500]


def paragraphs(min_words: int = 40) -> list[str]:
    texts = pq.read_table(WIKI, columns=["text"]).column("text").to_pylist()
    return [p.strip() for t in texts for p in t.split("\n\n") if len(p.split()) >= min_words]


def first_words(text: str, n: int) -> str:
    """The first ``n`` words of ``text``, keeping its paragraphs."""
    kept, out = 0, []
    for paragraph in text.split("\n\n"):
        take = paragraph.split()[: n - kept]
        if take:
            out.append(" ".join(take))
        kept += len(take)
        if kept >= n:
            break
    return "\n\n".join(out)


def variants(text: str, seed: int) -> dict[str, str]:
    """Planted near duplicates of graded strength (what crawls produce)."""
    rng = random.Random(seed)
    word_list = text.split(" ")
    edited = [("[edit]" if rng.random() < 0.01 else w) for w in word_list]
    sentences = re.split(r"(?<=[.!?])\s+", text)
    dropped = [s for i, s in enumerate(sentences) if i != len(sentences) // 2]
    paras = text.split("\n\n")
    return {
        "spacing": text.replace(" ", "  ").replace(", ", ",\u00a0").replace('"', "\u201c") + "\u200b",
        "header": "Posted by admin | Home > Articles\n\n" + text + "\n\nShare this: Facebook Twitter Email",
        "edits": " ".join(edited),
        "dropped": " ".join(dropped),
        "reordered": "\n\n".join(paras[1:] + paras[:1]),
    }


def doc(doc_id, text, source="web", rank=5, date=None):
    return {"doc_id": doc_id, "source": source, "source_rank": rank, "date": date, "text": text}


def planted_corpus(originals: int = 8, singles: int = 25):
    texts = [first_words(t, 400) for t in articles()]
    documents, clusters = [], []
    for i in range(originals):
        members = {f"orig{i:02d}"}
        documents.append(doc(f"orig{i:02d}", texts[i], source="wiki", rank=1))
        for name, text in variants(texts[i], i).items():
            documents.append(doc(f"var{i:02d}-{name}", text))
            members.add(f"var{i:02d}-{name}")
        clusters.append(frozenset(members))
    for j in range(originals, originals + singles):
        documents.append(doc(f"single{j:02d}", texts[j]))
    return documents, set(clusters)


# --- running the stage's job ---------------------------------------------------------

def run_stage(tmp_path, documents, config: NearDedupConfig, previous=(), options=IN_PROCESS, name="run",
              partitions=1):
    """Documents -> the stage's outputs, written and read back as the build does.

    The documents are split into ``partitions`` files by ``xxh3(doc_id) % partitions``, as ingest writes them.
    """
    root = tmp_path / name
    docs_dir = str(root / "documents")
    os.makedirs(docs_dir, exist_ok=True)
    rows = sorted(documents, key=lambda d: d["doc_id"])
    paths = [os.path.join(docs_dir, part_name(i, partitions)) for i in range(partitions)]
    for i, path in enumerate(paths):
        pq.write_table(pa.Table.from_pylist([r for r in rows if bucket_of(r["doc_id"], partitions) == i],
                                            schema=DOCS_SCHEMA), path)
    p = beam.Pipeline(options=PipelineOptions(options))
    layer = root / "layer"
    outputs = build_stage(p, config, paths, list(previous), str(layer))
    # only file names and a few small records go through the runner (conftest.GROUPINGS, FLATTENS)
    assert unexplained_flattens(p) == [] and unexplained_groupings(grouping_coders(p)) == []
    for output, schema in near_dedup.OUTPUTS.items():
        if not isinstance(outputs[output], WrittenPartitions):  # annotations, signatures: written by the stage
            outputs[output] | f"Write{output}" >> WriteLayerOutput(str(layer / output), schema, 2)
    result = p.run()
    result.wait_until_finish()
    read = {}
    for output in near_dedup.OUTPUTS:
        parts = sorted(glob.glob(str(layer / output / "*.parquet")))
        read[output] = [r for part in parts for r in pq.read_table(part).to_pylist()]
        read[output + "_digests"] = [hashlib.sha256(open(part, "rb").read()).hexdigest() for part in parts]
    read["metrics"] = {c.key.metric.name: c.committed for c in result.metrics().query()["counters"]
                       if c.key.metric.namespace == near_dedup.STAGE}
    return read


def clusters_of(annotations) -> set:
    grouped = {}
    for row in annotations:
        if row["cluster_id"] is not None:
            grouped.setdefault(row["cluster_id"], set()).add(row["doc_id"])
    return {frozenset(m) for m in grouped.values()}


def by_id(annotations) -> dict:
    return {row["doc_id"]: row for row in annotations}


# --- tests ------------------------------------------------------------------------

def test_planted_clusters_are_recovered_exactly(tmp_path):
    documents, expected = planted_corpus()
    out = run_stage(tmp_path, documents, NearDedupConfig(enabled=True, **FAST))
    annotations = out["annotations"]
    assert len(annotations) == len(documents)
    assert clusters_of(annotations) == expected
    rows = by_id(annotations)
    for members in expected:
        representative = next(m for m in members if m.startswith("orig"))  # rank 1 beats the web copies
        for member in members:
            row = rows[member]
            assert row["representative"] == representative
            assert row["is_duplicate"] == (member != representative)
            assert row["cluster_id"] == min(members) and row["cluster_size"] == len(members)
            assert row["signed"] and not row["large_cluster"]
    singles = [r for r in annotations if r["doc_id"].startswith("single")]
    assert all(r["cluster_id"] is None and not r["is_duplicate"] and r["representative"] == r["doc_id"]
               for r in singles)
    assert len(out["signatures"]) == len(documents)
    assert out["metrics"]["near_duplicates"] == sum(len(c) - 1 for c in expected)
    assert out["metrics"]["components_rounds"] >= 1


def test_simhash_finds_the_closest_variants(tmp_path):
    documents, expected = planted_corpus(originals=4, singles=10)
    out = run_stage(tmp_path, documents, NearDedupConfig(enabled=True, method="simhash", **LEAN), name="simhash")
    found = clusters_of(out["annotations"])
    # SimHash at 3 bits finds the formatting-only copies; every cluster it makes is a true one
    assert all(any(c <= e for e in expected) for c in found)
    assert sum(len(c) for c in found) >= 2 * len(expected)
    assert all(r["minhash"] is None and len(r["simhash_keys"]) == 4 for r in out["signatures"])


def test_a_shared_footer_does_not_collapse_1000_unrelated_documents(tmp_path):
    """Real paragraphs + one long real footer (150 words of a license notice, more than half of each
    document's shingles): nothing is dropped."""
    footer = " ".join(GPL_NOTICE.split()[:150])
    texts = paragraphs(60)[:1000]
    documents = [doc(f"p{i:04d}", f"{t}\n\n{footer}") for i, t in enumerate(texts)]
    probe = [shingle_hashes(d["text"]) for d in documents[:2]]
    assert 0.5 < jaccard(*probe) < 0.7
    # defaults: the footer line is in more than 100 documents, so it is boilerplate and out of the signatures
    out = run_stage(tmp_path, documents, NearDedupConfig(enabled=True, **FAST))
    assert len(out["annotations"]) == 1000
    assert not any(r["is_duplicate"] or r["cluster_id"] for r in out["annotations"])
    assert all(r["boilerplate_lines"] == [line_key(footer)] for r in out["annotations"])
    # without line dedup the footer makes LSH candidates (a hub); exact verification rejects every one
    exact = NearDedupConfig(enabled=True, verify="jaccard", **LEAN)
    out = run_stage(tmp_path, documents[:400], exact, name="jaccard")
    assert not any(r["is_duplicate"] for r in out["annotations"])
    assert out["metrics"]["candidate_rejected"] > 20 and "candidate_verified" not in out["metrics"]


def test_a_footer_longer_than_the_documents_is_boilerplate(tmp_path):
    """With a footer of ~4x the content, by Jaccard the documents *are* near duplicates; line dedup
    recognises the footer lines as boilerplate, leaves them out of the signatures, and select strips them."""
    notice = [line for line in GPL_NOTICE.split("\n") if len(line) >= 40][:40]
    footer = "\n".join(notice)
    texts = [" ".join(p.split()[:40]) for p in paragraphs(40)[:120]]
    documents = [doc(f"p{i:04d}", f"{t}\n{footer}") for i, t in enumerate(texts)]
    probe = [shingle_hashes(d["text"]) for d in documents[:2]]
    assert jaccard(*probe) > 0.7
    config = NearDedupConfig(enabled=True, lines={"enabled": True, "min_repeats": 100, "min_chars": 20}, **FAST)
    out = run_stage(tmp_path, documents, config)
    assert not any(r["is_duplicate"] for r in out["annotations"])
    footer_keys = sorted({line_key(line) for line in notice})
    assert all(r["boilerplate_lines"] == footer_keys for r in out["annotations"])


def test_unverified_hubs_become_large_clusters_checked_against_the_representative(tmp_path):
    """Without candidate verification, a hub of documents sharing band keys forms one component; above
    max_cluster_size it is reported, and only members similar to the representative are duplicates."""
    base = words(" ".join(articles()[:3]))[:3000]
    documents = [doc("hub-000", " ".join(base[:1000]), rank=0)]
    for i in range(1, 12):  # each shares the hub's first 600 words, then its own 400
        documents.append(doc(f"hub-{i:03d}", " ".join(base[:600] + base[1000 + 150 * i: 1400 + 150 * i])))
    documents.append(doc("copy-of-hub", " ".join(base[:1000]).replace(" ", "  ") + " (mirror)"))
    config = NearDedupConfig(enabled=True, verify="none", max_cluster_size=5,
                             minhash={"num_perm": 100, "bands": 25, "rows": 4}, **LEAN)
    out = run_stage(tmp_path, documents, config)
    (report,) = out["large_clusters"]
    assert report["doc_id"] == "hub-000" and report["size"] == len(documents)
    assert 1 <= len(report["sampled_members"]) <= 10
    rows = by_id(out["annotations"])
    assert rows["copy-of-hub"]["is_duplicate"] and rows["copy-of-hub"]["large_cluster"]
    assert [d for d, r in rows.items() if r["is_duplicate"]] == ["copy-of-hub"]
    assert all(r["cluster_id"] == report["cluster_id"] for r in rows.values())


def test_short_documents_get_no_signature_and_are_never_near_duplicates(tmp_path):
    shorts = ["Thanks!", "Great post", "Great post", "See you soon.", "ok", "", "Click to read more",
              "Read more", "1 2 3 4", "Click to read more"]
    documents = [doc(f"s{i:02d}", text) for i, text in enumerate(shorts)]
    documents += [doc(f"long{i}", t) for i, t in enumerate(paragraphs(60)[:5])]
    out = run_stage(tmp_path, documents, NearDedupConfig(enabled=True, method="both", **LEAN))
    rows = by_id(out["annotations"])
    for i in range(len(shorts)):
        row = rows[f"s{i:02d}"]
        assert not row["signed"] and row["cluster_id"] is None and not row["is_duplicate"]
    assert {r["doc_id"] for r in out["signatures"]} == {f"long{i}" for i in range(5)}
    assert out["metrics"]["unsigned_too_short"] == len(shorts)


def test_chains_merge_into_one_cluster_but_large_clusters_check_against_the_representative(tmp_path):
    """A~B and B~C but not A~C. Connected components are transitive: one cluster, one kept. Above
    max_cluster_size the rule is stricter: only members verified against the representative go."""
    base = words(" ".join(articles()))[:400]
    a, b, c = (" ".join(base[s:s + 300]) for s in (0, 30, 60))
    sets = [shingle_hashes(t) for t in (a, b, c)]
    assert jaccard(sets[0], sets[1]) > 0.8 and jaccard(sets[1], sets[2]) > 0.8 and jaccard(sets[0], sets[2]) < 0.7
    documents = [doc("a", a, rank=0), doc("b", b), doc("c", c)]
    exact = dict(verify="jaccard", minhash={"num_perm": 100, "bands": 20, "rows": 5, "threshold": 0.7}, **LEAN)
    rows = by_id(run_stage(tmp_path, documents, NearDedupConfig(enabled=True, **exact))["annotations"])
    assert [rows[d]["is_duplicate"] for d in "abc"] == [False, True, True]
    assert {rows[d]["representative"] for d in "abc"} == {"a"}
    capped = run_stage(tmp_path, documents, NearDedupConfig(enabled=True, max_cluster_size=2, **exact), name="cap")
    rows = by_id(capped["annotations"])
    assert [rows[d]["is_duplicate"] for d in "abc"] == [False, True, False]
    assert all(rows[d]["large_cluster"] for d in "abc")
    assert capped["large_clusters"][0]["size"] == 3


def test_incremental_dedup_finds_duplicates_of_a_previous_version(tmp_path):
    texts = [first_words(t, 200) for t in articles()[:24]]
    config = NearDedupConfig(enabled=True, **LEAN)
    old = [doc(f"v1-{i:02d}", texts[i], source="wiki", rank=3) for i in range(12)]
    first = run_stage(tmp_path, old, config, name="v1")
    # persist v1 as a layer on disk, exactly as the build commits it
    layer = Layer(str(tmp_path / "root"), near_dedup.STAGE, "v1layerkey")
    parts = [write_partition(layer.output_path(near_dedup.SIGNATURES), 0, 1, sorted(first["signatures"],
                             key=lambda r: r["doc_id"]), schemas.NEAR_SIGNATURE)]
    commit_layer(layer, version=near_dedup.VERSION, config=near_dedup.stage_config(config), inputs={},
                 outputs={near_dedup.SIGNATURES: parts}, counts={})
    previous = resolve_against(str(tmp_path / "root"), layer.path, config)
    assert previous.key == "v1layerkey"

    new = [doc(f"v2-var{i:02d}", variants(texts[i], i)["edits"], rank=1) for i in range(5)]   # copies of v1 docs
    new += [doc("v1-07", texts[7], source="wiki", rank=3)]                                   # the same document again
    new += [doc(f"v2-new{i:02d}", texts[i]) for i in range(15, 24)]                           # new documents
    new += [doc("v2-new15-copy", variants(texts[15], 15)["header"])]                          # a cluster inside v2
    second = run_stage(tmp_path, new, config, previous=[previous], name="v2")
    rows = by_id(second["annotations"])
    assert set(rows) == {d["doc_id"] for d in new}  # previous documents get no rows of their own
    for i in range(5):
        assert rows[f"v2-var{i:02d}"]["is_duplicate"] and rows[f"v2-var{i:02d}"]["representative"] == f"v1-{i:02d}"
    assert rows["v1-07"]["is_duplicate"]  # already in the previous version
    assert [d for d, r in rows.items() if r["is_duplicate"] and d.startswith("v2-new")] == ["v2-new15-copy"]
    assert not rows["v2-new15"]["is_duplicate"]
    assert {r["doc_id"] for r in second["signatures"]} == set(rows)  # only the new corpus is signed again


def test_against_rejects_missing_and_incompatible_layers(tmp_path):
    config = NearDedupConfig(enabled=True)
    with pytest.raises(ConfigError, match="not a complete near_dedup layer"):
        resolve_against(str(tmp_path), str(tmp_path / "nowhere"), config)
    with pytest.raises(ConfigError, match="dataset " + "a" * 64 + " not found"):
        resolve_against(str(tmp_path), "a" * 64, config)
    layer = Layer(str(tmp_path), near_dedup.STAGE, "k")
    other = NearDedupConfig(enabled=True, minhash={"num_perm": 128})
    commit_layer(layer, version="1", config=near_dedup.stage_config(other), inputs={},
                 outputs={near_dedup.SIGNATURES: []}, counts={})
    with pytest.raises(ConfigError, match="other signature settings.*minhash"):
        resolve_against(str(tmp_path), layer.path, config)


def test_cluster_ids_and_representatives_are_the_same_in_process_and_multi_process(tmp_path):
    documents, expected = planted_corpus(originals=2, singles=4)
    documents = [{**d, "text": d["text"] + "\nA footer line that every page of this site carries"} for d in documents]
    config = NearDedupConfig(enabled=True, method="both", lines={"enabled": True, "min_repeats": 10},
                             substrings={"sources": ["web"], "min_words": 30}, max_rounds=2)
    one = run_stage(tmp_path, documents, config, name="one")
    assert clusters_of(one["annotations"]) == expected
    assert all(len(r["boilerplate_lines"]) == 1 for r in one["annotations"])
    assert any(r["repeated_spans"] for r in one["annotations"])
    two = run_stage(tmp_path, documents, config, name="two", options=[
        "--runner=DirectRunner", "--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    for output in near_dedup.OUTPUTS:
        assert one[output + "_digests"] == two[output + "_digests"], output
    assert one["annotations"] and one["signatures"]


def test_partitioned_documents_give_the_same_annotations_and_signatures(tmp_path):
    documents, expected = planted_corpus(originals=3, singles=6)
    config = NearDedupConfig(enabled=True, method="both", max_cluster_size=3)
    one = run_stage(tmp_path, documents, config, name="one")
    three = run_stage(tmp_path, documents, config, name="three", partitions=3)
    assert clusters_of(one["annotations"]) == expected
    assert one["large_clusters"] == three["large_clusters"] and one["large_clusters"]
    for output in (near_dedup.ANNOTATIONS, near_dedup.SIGNATURES):
        assert one[output] == sorted(three[output], key=lambda r: r["doc_id"]), output
        assert len(three[output + "_digests"]) == 3, output  # partition i of the documents -> partition i
    assert one["metrics"] == three["metrics"]


def test_a_document_in_the_wrong_partition_fails_the_stage(tmp_path):
    documents, _ = planted_corpus(originals=1, singles=3)
    docs_dir = tmp_path / "documents"
    os.makedirs(docs_dir)
    paths = [str(docs_dir / part_name(i, 2)) for i in range(2)]
    for path in paths:  # every document in both partitions: half of them are misplaced
        pq.write_table(pa.Table.from_pylist(sorted(documents, key=lambda d: d["doc_id"]), schema=DOCS_SCHEMA), path)
    p = beam.Pipeline(options=PipelineOptions(IN_PROCESS))
    _ = build_stage(p, NearDedupConfig(enabled=True), paths, [], str(tmp_path / "layer"))
    with pytest.raises(Exception, match=r"its doc_id belongs to partition"):
        p.run().wait_until_finish()


# --- pure pieces: representative, signing, policy, select, config -----------------------------

def test_representative_order():
    members = [member_of(doc("d3", "", rank=2, date="2020-01-01")), member_of(doc("d2", "", rank=1, date="2023-05-01")),
               member_of(doc("d1", "", rank=1)), member_of(doc("d4", "", rank=1, date="2021-01-01"))]
    assert min(members, key=representative_order)[6] == "d4"  # rank 1, earliest known date
    previous = member_of(doc("z9", "", rank=9), previous=True)
    assert min(members + [previous], key=representative_order)[6] == "z9"  # a previous version wins
    graded = member_of(doc("d0", "", rank=1, date="2024-01-01"), quality=0.9)
    assert min(members + [graded], key=representative_order)[6] == "d0"  # known quality beats unknown


def test_sign_document_leaves_boilerplate_lines_out():
    params = NearDedupParams.from_config(NearDedupConfig(enabled=True))
    body = paragraphs(60)[0]
    footer = "All rights reserved by the example publisher"
    import numpy as np
    member, row = sign_document(doc("x", f"{body}\n{footer}"), params, np.array([line_key(footer)]))
    _, plain = sign_document(doc("x", body), params)
    assert row["minhash"] == plain["minhash"] and member[9] == (line_key(footer),)
    member, row = sign_document(doc("y", "too short"), params)
    assert row is None and member[8] is False


def test_policy_drops_near_duplicates_after_exact_ones():
    document = {"n_chars": 40, "text": "A sentence with exactly seven words here."}
    near = {"is_duplicate": True}
    assert decide(document, None, PolicyConfig(), near) == "near_duplicate"
    assert decide(document, {"is_duplicate": True}, PolicyConfig(), near) == "exact_duplicate"
    assert decide(document, None, PolicyConfig(drop_near_duplicates=False), near) is None
    assert decide(document, None, PolicyConfig(), {"is_duplicate": False}) is None


def test_select_drops_near_duplicates_and_strips_boilerplate(tmp_path):
    footer = "Subscribe to our newsletter for weekly updates"
    docs = [{"doc_id": d, "source": "web", "domain": "d", "license": "L", "url": None, "text": t, "n_chars": len(t)}
            for d, t in (("a", f"first text\n{footer}"), ("b", "first text!"), ("c", footer))]
    near = [{"doc_id": "a", "is_duplicate": False, "boilerplate_lines": [line_key(footer)], "repeated_spans": []},
            {"doc_id": "b", "is_duplicate": True, "boilerplate_lines": [], "repeated_spans": []},
            {"doc_id": "c", "is_duplicate": False, "boilerplate_lines": [line_key(footer)], "repeated_spans": []}]
    gold, decisions, _ = apply_policy(tmp_path, PolicyConfig(), docs, {"near": near})
    assert [(r["doc_id"], r["text"]) for r in gold] == [("a", "first text")]
    assert sorted((r["doc_id"], r["reason"]) for r in decisions) == [
        ("a", None), ("b", "near_duplicate"), ("c", "too_short")]


def test_config_validation():
    base = {"name": "c", "output_root": "o", "tokenize": {"tokenizer": "t"},
            "sources": [{"name": "web", "uri": "x", "format": "jsonl", "rank": 1, "license": "L", "domain": "d"}]}
    config = parse_config({**base, "near_dedup": {"enabled": True}})
    assert config.near_dedup.minhash.num_perm == 112 and config.policy.drop_near_duplicates
    with pytest.raises(ConfigError, match="bands and rows"):
        parse_config({**base, "near_dedup": {"minhash": {"bands": 4}}})
    with pytest.raises(ConfigError, match="must not exceed num_perm"):
        parse_config({**base, "near_dedup": {"minhash": {"bands": 20, "rows": 10}}})
    with pytest.raises(ConfigError, match="unknown sources: forum"):
        parse_config({**base, "near_dedup": {"substrings": {"sources": ["forum"]}}})
    with pytest.raises(ConfigError, match="must exceed max_hamming"):
        parse_config({**base, "near_dedup": {"simhash": {"max_hamming": 3, "blocks": 3}}})
    stage = near_dedup.stage_config(config.near_dedup)
    assert stage["signature"]["normalization"].startswith("sh-v1") and "against" not in stage


def test_assembly_fails_on_a_record_spilled_to_the_wrong_partition(tmp_path):
    from beam_pipeline.transforms.lsh_files import keyed_record, write_keyed_spills
    from beam_pipeline.transforms.near_dedup import AssemblePartitionFn, SpillDirectory

    doc_id = next(f"d{i}" for i in range(100) if bucket_of(f"d{i}", 3) == 1)
    member = member_of({"doc_id": doc_id, "source": "web", "source_rank": 1, "date": None})
    (_, path), = write_keyed_spills({1: [keyed_record(doc_id, "member", member)]}, str(tmp_path), "member")
    fn = AssemblePartitionFn(SpillDirectory(str(tmp_path), 3))
    fn.setup()
    assert [o.tag for o in fn.process((1, [path]))] == ["rows"]  # alone: its row, in its own partition
    with pytest.raises(ValueError, match=f"document {doc_id} was spilled to partition 2"):
        list(fn.process((2, [path])))


def test_a_document_named_by_several_previous_versions_takes_the_first_in_representative_order():
    from beam_pipeline.transforms.near_dedup import AssembleFn

    old = {"doc_id": "d1", "source": "web", "date": "2020-01-01"}
    members = [member_of({**old, "source_rank": rank}, previous=True) for rank in (3, 1, 2)]
    fn = AssembleFn()
    fn.setup()
    for order in (members, members[::-1]):
        assert list(fn.process(("d1", {"previous": order, "label": ["d0", "d1"]}))) == [("d0", (members[1], False, ()))]
