"""Takedown: a new version without the documents; only their shards change."""
import hashlib
import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_pipeline.cli import commands as cli
from beam_pipeline.dataset.lineage import read_lineage
from beam_pipeline.transforms.lineage import conform, parquet_bytes, shard_placement, sort_lineage
from beam_pipeline.dataset.takedown import TAKEDOWN_COLUMNS
from beam_pipeline.records.hashing import bucket_of, sha256_bytes
from beam_pipeline.dataset.loader import SupersededDatasetError, TokenLoader
from beam_pipeline.dataset.verify import verify_dataset


@pytest.fixture
def copy(built, tmp_path):
    """A private copy of the reference dataset (with its lineage) under <tmp>/out/datasets/."""
    target = tmp_path / "out" / "datasets" / os.path.basename(built["dataset"])
    shutil.copytree(built["dataset"], target)
    return str(target)


def sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def index(dataset, shard):
    return pq.read_table(os.path.join(dataset, shard["index_file"])).to_pylist()


def new_dataset(stdout):
    return next(line.split()[1] for line in stdout.splitlines() if line.startswith("dataset "))


def test_takedown_by_url_rebuilds_only_the_affected_shards(copy, built, tmp_path, capsys):
    old = built["manifest"]
    rows = read_lineage(copy).to_pylist()
    victim = next(r for r in rows if r["source"] == "wikipedia" and r["shard"])
    urls = tmp_path / "urls.txt"
    urls.write_text(f"# legal request 42\n{victim['url']}\n")
    assert cli.main(["takedown", "--dataset", copy, "--urls", str(urls), "--reason", "request 42"]) == 0
    new_dir = new_dataset(capsys.readouterr().out)
    new = json.load(open(os.path.join(new_dir, "manifest.json")))

    assert new["previous_dataset_id"] == old["dataset_id"] != new["dataset_id"] == os.path.basename(new_dir)
    assert new["tombstones"] == [{"doc_id": victim["doc_id"], "reason": "request 42", "shard": victim["shard"]}]
    assert verify_dataset(new_dir).ok  # digests, leaves, Merkle root = new id, packing, no tombstone left
    old_shards = {s["name"]: s for s in old["shards"]}
    assert [s["name"] for s in new["shards"]] == sorted(old_shards)
    # exactly the victim's shard was rebuilt; every other shard's files are hard links to the old version's
    assert new["takedown"]["rebuilt_shards"] == [victim["shard"]] and new["takedown"]["dropped_shards"] == []
    linked = {shard["name"] for shard in new["shards"]
              if all(os.path.samefile(os.path.join(copy, old_shards[shard["name"]][field]),
                                      os.path.join(new_dir, shard[field])) for field in ("tokens_file", "index_file"))}
    assert linked == set(old_shards) - {victim["shard"]}, sorted(set(old_shards) - linked)
    for shard in new["shards"]:
        before = old_shards[shard["name"]]
        for field in ("tokens_file", "index_file"):
            same = sha(os.path.join(copy, before[field])) == sha(os.path.join(new_dir, shard[field]))
            assert same == (shard["name"] != victim["shard"]), (shard["name"], field)
        if shard["name"] != victim["shard"]:
            assert shard == before
    # the rebuilt shard: the other documents, same order, same tokens, same packing rules
    rebuilt = next(s for s in new["shards"] if s["name"] == victim["shard"])
    kept_before = [r for r in index(copy, old_shards[victim["shard"]]) if r["doc_id"] != victim["doc_id"]]
    after = index(new_dir, rebuilt)
    assert [r["doc_id"] for r in after] == [r["doc_id"] for r in kept_before]
    old_tokens = np.fromfile(os.path.join(copy, old_shards[victim["shard"]]["tokens_file"]), dtype="<u2")
    new_tokens = np.fromfile(os.path.join(new_dir, rebuilt["tokens_file"]), dtype="<u2")
    for a, b in zip(kept_before, after):
        assert np.array_equal(old_tokens[a["token_start"]: a["token_start"] + a["token_count"]],
                              new_tokens[b["token_start"]: b["token_start"] + b["token_count"]])
    assert new_tokens.size % new["seq_len"] == 0 and rebuilt["pad_tokens"] < new["seq_len"]
    assert rebuilt["tokens"] == old_shards[victim["shard"]]["tokens"] - victim["token_count"] - 1

    # the old version is superseded: the loader refuses it; the lineage of the new one says why
    assert json.load(open(os.path.join(copy, "SUPERSEDED_BY")))["dataset_id"] == new["dataset_id"]
    with pytest.raises(SupersededDatasetError):
        TokenLoader(copy)
    TokenLoader(copy, allow_superseded=True)
    assert sum(1 for _ in TokenLoader(new_dir)) == sum(s["sequences"] for s in new["shards"])
    row = next(r for r in read_lineage(new_dir, [victim["doc_id"]]).to_pylist() if not r["is_repeat"])
    assert row["takedown__removed"] and row["takedown__reason"] == "request 42" and row["shard"] is None
    assert cli.main(["takedown", "--dataset", copy, "--urls", str(urls)]) == 1  # apply to the newest version
    assert "already superseded" in capsys.readouterr().err


def test_a_mirror_url_takes_down_the_kept_original(copy, built, capsys):
    rows = read_lineage(copy).to_pylist()
    mirror = next(r for r in rows if r["source"] == "python-docs-mirror" and r["url"])
    original = next(r for r in rows if r["doc_id"] == mirror["exact_dedup__representative"])
    assert mirror["shard"] is None and original["shard"] is not None
    pattern = "^" + mirror["url"].replace(".", r"\.") + "$"
    assert cli.main(["takedown", "--dataset", copy, "--url-pattern", pattern, "--exact-only"]) == 0
    assert "unchanged" in capsys.readouterr().out and not os.path.exists(os.path.join(copy, "SUPERSEDED_BY"))
    assert cli.main(["takedown", "--dataset", copy, "--url-pattern", pattern]) == 0
    new = json.load(open(os.path.join(new_dataset(capsys.readouterr().out), "manifest.json")))
    assert original["doc_id"] in {t["doc_id"] for t in new["tombstones"]}


def test_doc_ids_and_errors(copy, built, tmp_path, capsys):
    ids = tmp_path / "ids.txt"
    ids.write_text("not-an-id\n")
    assert cli.main(["takedown", "--dataset", copy, "--doc-ids", str(ids)]) == 1
    assert "not doc_ids" in capsys.readouterr().err
    legal = [s for s in built["manifest"]["shards"] if s["domain"] == "legal"][0]
    everything = [r["doc_id"] for r in index(copy, legal)]
    ids.write_text("\n".join(everything) + "\n")
    assert cli.main(["takedown", "--dataset", copy, "--doc-ids", str(ids)]) == 0
    new_dir = new_dataset(capsys.readouterr().out)
    new = json.load(open(os.path.join(new_dir, "manifest.json")))
    assert legal["name"] not in {s["name"] for s in new["shards"]}  # an emptied shard is dropped
    assert new["takedown"]["dropped_shards"] == [legal["name"]]
    assert verify_dataset(new_dir).ok


def whole_table_lineage(old_dir: str, new_dir: str, removed: set, reason: str) -> pa.Table:
    """The new lineage computed on the whole table at once, row by row: the reference the
    part-by-part takedown must equal."""
    old = read_lineage(old_dir)
    schema = old.schema
    for field in TAKEDOWN_COLUMNS:
        if field.name not in schema.names:
            schema = schema.append(field)
    manifest = json.load(open(os.path.join(new_dir, "manifest.json")))
    placement = {r["doc_id"]: r for r in shard_placement(new_dir, manifest).to_pylist()}
    rows = conform(old, schema).to_pylist()
    for row in rows:
        if row["doc_id"] in removed:
            row["takedown__removed"], row["takedown__reason"] = True, reason
        elif row["takedown__removed"] is None:
            row["takedown__removed"] = False
        if not row["is_repeat"]:
            where = placement.get(row["doc_id"], {})
            row["shard"], row["token_start"], row["token_count"] = (
                where.get("shard"), where.get("token_start"), where.get("token_count"))
    return sort_lineage(pa.Table.from_pylist(rows, schema=schema))


def test_two_takedowns_rewrite_the_lineage_part_by_part(copy, built, tmp_path, capsys):
    rows = [r for r in read_lineage(copy).to_pylist() if not r["is_repeat"] and r["shard"]]
    first, second = rows[3]["doc_id"], rows[-3]["doc_id"]
    versions, reasons = [copy], {first: "request 1", second: "request 2"}
    for doc in (first, second):
        ids = tmp_path / f"{doc}.txt"
        ids.write_text(doc + "\n")
        assert cli.main(["takedown", "--dataset", versions[-1], "--doc-ids", str(ids), "--exact-only",
                         "--reason", reasons[doc]]) == 0
        versions.append(new_dataset(capsys.readouterr().out))
        old_dir, new_dir = versions[-2:]
        expected = whole_table_lineage(old_dir, new_dir, {doc}, reasons[doc])
        marker = json.load(open(os.path.join(new_dir, "lineage", "_LINEAGE.json")))
        assert sort_lineage(read_lineage(new_dir)).equals(expected)
        n = len(marker["parts"])
        buckets = np.array([bucket_of(d, n) for d in expected.column("doc_id").to_pylist()])
        assert [sha256_bytes(parquet_bytes(expected.filter(pa.array(buckets == i)).combine_chunks()))
                for i in range(n)] == [p["sha256"] for p in marker["parts"]]
        assert sorted(os.listdir(os.path.join(new_dir, "lineage"))) == sorted(
            [p["name"] for p in marker["parts"]] + ["_LINEAGE.json"])
        assert verify_dataset(new_dir).ok  # includes every document's placement in the lineage
    last = {r["doc_id"]: r for r in read_lineage(versions[-1]).to_pylist() if not r["is_repeat"]}
    assert (last[first]["takedown__reason"], last[second]["takedown__reason"]) == ("request 1", "request 2")
    assert last[first]["shard"] is None and last[second]["shard"] is None
    assert sum(r["takedown__removed"] for r in last.values()) == 2
    assert not [d for d in os.listdir(os.path.dirname(copy)) if d.startswith(".tmp")]
