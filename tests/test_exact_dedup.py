import glob
import hashlib

import pyarrow as pa
import pyarrow.parquet as pq

from beam_pipeline.storage import schemas
from beam_pipeline.records.hashing import bucket_of
from beam_pipeline.storage.layers import write_partition
from beam_pipeline.transforms.exact_dedup import STAGE, AnnotateExactDuplicates, annotate_group, member_of, \
    representative_order
from beam_pipeline.transforms.layer_io import partition_index_of
from conftest import run_stage_job

DOCUMENTS = pa.schema([("doc_id", pa.string()), ("content_hash", pa.string()), ("source", pa.string()),
                       ("source_rank", pa.int32()), ("date", pa.string())])

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


def run_stage(tmp_path, documents, partitions: int, options=OPTIONS, name="run") -> dict:
    """Documents, split into partitions by xxh3(doc_id) as ingest writes them -> annotation files and counters."""
    root = tmp_path / name
    paths = []
    for i in range(partitions):
        rows = sorted((d for d in documents if bucket_of(d["doc_id"], partitions) == i), key=lambda d: d["doc_id"])
        meta = write_partition(str(root / "documents"), i, partitions, rows, DOCUMENTS)
        paths.append(str(root / "documents" / meta["name"]))
    ledger = run_stage_job(str(root), STAGE, lambda p, _layer: p | AnnotateExactDuplicates(paths),
                           {"annotations": schemas.EXACT_DEDUP}, partitions, {"annotations": "passed"},
                           options=options)
    files = sorted(glob.glob(str(root / "layers" / STAGE / "test" / "annotations" / "*.parquet")))
    counts = ledger["counts"]
    metrics = {name: counts[name] for name in ("in", "passed", "dead_letter") if counts[name]}
    return {"files": files, "rows": [r for f in files for r in pq.read_table(f).to_pylist()],
            "digests": [hashlib.sha256(open(f, "rb").read()).hexdigest() for f in files], "metrics": metrics}


def test_stage_annotates_every_document(tmp_path):
    documents = [doc("a1", "x", "curated", 0), doc("b1", "x", "web", 1), doc("b2", "y", "web", 1),
                 doc("b3", "x", "web", 1)]
    expected = [
        {"doc_id": "a1", "content_hash": "x", "duplicate_count": 3, "representative": "a1", "is_duplicate": False},
        {"doc_id": "b1", "content_hash": "x", "duplicate_count": 3, "representative": "a1", "is_duplicate": True},
        {"doc_id": "b2", "content_hash": "y", "duplicate_count": 1, "representative": "b2", "is_duplicate": False},
        {"doc_id": "b3", "content_hash": "x", "duplicate_count": 3, "representative": "a1", "is_duplicate": True},
    ]
    out = run_stage(tmp_path, documents, partitions=1)
    assert out["rows"] == expected
    assert out["metrics"] == {"in": 4, "passed": 4}


def test_partition_i_of_the_annotations_holds_partition_i_of_the_documents(tmp_path):
    documents = [doc(f"d{i:03d}", f"h{i % 17}", "web" if i % 3 else "curated", i % 3, f"2020-01-{1 + i % 28:02d}")
                 for i in range(120)]
    one = run_stage(tmp_path, documents, partitions=1, name="one")
    three = run_stage(tmp_path, documents, partitions=3, name="three")
    assert sorted(three["rows"], key=lambda r: r["doc_id"]) == one["rows"]
    assert len(three["files"]) == 3
    for path in three["files"]:
        index, count = partition_index_of(path)
        assert {bucket_of(r["doc_id"], count) for r in pq.read_table(path).to_pylist()} == {index}
    assert one["metrics"] == three["metrics"] == {"in": 120, "passed": 120}
    for row in one["rows"]:  # the representative of each hash is the minimum of its members
        group = [member_of(d) for d in documents if d["content_hash"] == row["content_hash"]]
        assert row["representative"] == min(group, key=representative_order)[3]
        assert row["duplicate_count"] == len(group)


def test_multi_process_runner_writes_the_same_bytes(tmp_path):
    documents = [doc(f"d{i:03d}", f"h{i % 7}", date=None if i % 5 else "2021-06-01") for i in range(60)]
    local = run_stage(tmp_path, documents, partitions=2, name="local")
    multi = run_stage(tmp_path, documents, partitions=2, name="multi", options=[
        "--runner=DirectRunner", "--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    assert local["digests"] == multi["digests"] and len(local["digests"]) == 2


def test_a_hot_hash_is_combined_through_the_fanout_and_every_copy_is_annotated(tmp_path):
    """One content hash held by far more documents than the rest (a boilerplate page copied everywhere)
    goes through CombinePerKey's hot-key fan-out; every copy still names the one representative."""
    documents = [doc(f"hot{i:04d}", "boilerplate", "web", 1 + i % 3, f"2020-{1 + i % 12:02d}-01") for i in range(500)]
    documents += [doc(f"u{i:03d}", f"unique{i}") for i in range(40)]
    out = run_stage(tmp_path, documents, partitions=4)
    hot = [r for r in out["rows"] if r["content_hash"] == "boilerplate"]
    best = min((member_of(d) for d in documents if d["content_hash"] == "boilerplate"), key=representative_order)
    assert len(hot) == 500 and {r["representative"] for r in hot} == {best[3]}
    assert {r["duplicate_count"] for r in hot} == {500} and sum(not r["is_duplicate"] for r in hot) == 1
    assert out["metrics"] == {"in": 540, "passed": 540}


# --- a refresh against an earlier build (exact_dedup.against) ----------------------------------------------

def _version(tmp_path, name: str, texts: dict[str, str], against: list[str]) -> str:
    """A config ``<name>.yaml`` over ``data/<name>/docs.jsonl`` (record id -> text), output root ``out``."""
    import json

    from conftest import SAMPLE_TOKENIZER

    folder = tmp_path / "data" / name
    folder.mkdir(parents=True)
    with open(folder / "docs.jsonl", "w") as f:
        for record_id, text in texts.items():
            f.write(json.dumps({"id": record_id, "text": text}) + "\n")
    config = tmp_path / f"{name}.yaml"
    config.write_text(
        f"name: {name}\noutput_root: out\n"
        f"sources: [{{name: docs, uri: 'data/{name}/*.jsonl', format: jsonl, rank: 1, license: x, domain: d}}]\n"
        f"exact_dedup: {{against: {json.dumps(against)}}}\n"
        f"tokenize: {{tokenizer: {SAMPLE_TOKENIZER}, seq_len: 256, shard_tokens: 65536}}\n")
    return str(config)


def _build(tmp_path, config: str):
    import subprocess
    import sys

    from conftest import IN_PROCESS

    return subprocess.run([sys.executable, "-m", "beam_pipeline", "run", "--config", config, *IN_PROCESS],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)


def _layer_rows(root, stage: str, key: str, output: str) -> list[dict]:
    return [r for path in sorted(glob.glob(str(root / "layers" / stage / key / output / "*.parquet")))
            for r in pq.read_table(path).to_pylist()]


def _manifest(root, dataset_id: str) -> dict:
    import json

    return json.load(open(root / "datasets" / dataset_id / "manifest.json"))


def test_a_refresh_drops_the_texts_an_earlier_build_holds(tmp_path):
    from conftest import dataset_id_from_output

    texts = {t: f"The {t} report of the river town library lists new books, opening hours and the reading "
                f"room rules for the {t} season, with notes on local history." for t in
             ("spring", "summer", "autumn", "winter", "harvest")}
    first = _build(tmp_path, _version(tmp_path, "v1", {"a": texts["spring"], "b": texts["summer"],
                                                        "c": texts["autumn"]}, []))
    assert first.returncode == 0, first.stderr[-3000:]
    v1 = dataset_id_from_output(first.stdout)
    root = tmp_path / "out"
    v1_exact = next(s for s in _manifest(root, v1)["stages"] if s["name"] == "exact_dedup")
    v1_rows = {r["content_hash"]: r for r in _layer_rows(root, "exact_dedup", v1_exact["layer_key"], "annotations")}

    # the refresh: two texts of v1 again (one under a new record id) and two new texts
    refresh = {"a": texts["spring"], "z": texts["autumn"], "d": texts["winter"], "e": texts["harvest"]}
    second = _build(tmp_path, _version(tmp_path, "v2", refresh, [v1]))
    assert second.returncode == 0, second.stderr[-3000:]
    manifest = _manifest(root, dataset_id_from_output(second.stdout))
    exact = next(s for s in manifest["stages"] if s["name"] == "exact_dedup")
    assert exact["counts"]["in"] == exact["counts"]["passed"] == 4  # this build's documents only
    assert exact["counts"]["other"]["previous_version_copies"] == 2
    rows = _layer_rows(root, "exact_dedup", exact["layer_key"], "annotations")
    documents = {r["doc_id"]: r for r in _layer_rows(root, "ingest", next(
        s for s in manifest["stages"] if s["name"] == "ingest")["layer_key"], "documents")}
    by_record = {documents[r["doc_id"]]["record_id"]: r for r in rows}
    for record in ("a", "z"):  # copies of v1's content: duplicates of v1's representative
        row = by_record[record]
        assert row["is_duplicate"] and row["representative"] == v1_rows[row["content_hash"]]["representative"]
    assert not by_record["d"]["is_duplicate"] and not by_record["e"]["is_duplicate"]
    select = next(s for s in manifest["stages"] if s["name"] == "select")
    assert select["counts"]["passed"] == 2 and select["counts"]["filtered"] == {"exact_duplicate": 2}

    # without `against` the same texts are all new
    alone = _build(tmp_path, _version(tmp_path, "v2-alone", refresh, []))
    assert alone.returncode == 0, alone.stderr[-3000:]
    select = next(s for s in _manifest(root, dataset_id_from_output(alone.stdout))["stages"] if s["name"] == "select")
    assert select["counts"]["passed"] == 4


def test_against_a_missing_dataset_is_a_one_line_error(tmp_path):
    result = _build(tmp_path, _version(tmp_path, "v2", {"a": "some text " * 20}, ["0" * 64]))
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and errors[0].startswith(f"error: exact_dedup.against: dataset {'0' * 64} not found under ")


# --- seed 000 §6: whitespace and case normalized for the hash only (exact_dedup.normalize) ------------------

TEXT_DOCUMENTS = pa.schema([*DOCUMENTS, ("text", pa.string())])


def test_normalized_key_catches_case_and_spacing_variants_when_on(tmp_path):
    from beam_pipeline.records.hashing import content_hash
    from beam_pipeline.transforms.exact_dedup import dedup_key

    texts = {"a": "The River Town\nlibrary opens  at nine.", "b": "the river town library opens at nine.",
             "c": "  THE RIVER TOWN\tLIBRARY OPENS AT NINE.\n", "d": "The river town library opens at ten."}
    assert dedup_key(texts["a"], False) == content_hash(texts["a"])  # off: the ingest layer's content_hash
    assert len({dedup_key(t, True) for t in texts.values()}) == 2
    documents = [{**doc(k, content_hash(t)), "text": t} for k, t in texts.items()]

    def annotate(normalize: bool, name: str) -> dict:
        root = tmp_path / name
        meta = write_partition(str(root / "documents"), 0, 1, documents, TEXT_DOCUMENTS)
        path = str(root / "documents" / meta["name"])
        run_stage_job(str(root), STAGE, lambda p, _layer: p | AnnotateExactDuplicates([path], normalize=normalize),
                      {"annotations": schemas.EXACT_DEDUP}, 1, {"annotations": "passed"}, options=OPTIONS)
        files = sorted(glob.glob(str(root / "layers" / STAGE / "test" / "annotations" / "*.parquet")))
        return {r["doc_id"]: r for f in files for r in pq.read_table(f).to_pylist()}

    off = annotate(False, "off")
    assert not any(r["is_duplicate"] for r in off.values())  # the default: only identical texts
    on = annotate(True, "on")
    assert {k for k, r in on.items() if r["is_duplicate"]} == {"b", "c"}
    assert {on[k]["representative"] for k in "abc"} == {"a"} and on["a"]["duplicate_count"] == 3
    assert not on["d"]["is_duplicate"]


def test_the_normalization_is_off_by_default_and_keeps_the_layer_key():
    from beam_pipeline.dedup.config import ExactDedupConfig
    from beam_pipeline.transforms.exact_dedup import stage_config

    assert ExactDedupConfig().normalize is False
    assert stage_config(ExactDedupConfig()) == {"enabled": True}  # as before the option: same layer key
    assert stage_config(ExactDedupConfig(normalize=True)) == {"enabled": True, "normalize": "whitespace_case"}
