"""``verify``: a clean dataset passes; every kind of corruption is named."""
import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_pipeline.cli import commands as cli
from beam_pipeline.dataset.verify import verify_dataset


@pytest.fixture
def copy(built, tmp_path):
    """A private copy of the reference dataset, at <tmp>/datasets/<dataset_id>."""
    target = tmp_path / "datasets" / os.path.basename(built["dataset"])
    shutil.copytree(built["dataset"], target)
    return str(target)


def shard(manifest, domain="docs", n=1):
    return [s for s in manifest["shards"] if s["domain"] == domain][n]


def problems(dataset):
    return {(p.where, p.check) for p in verify_dataset(dataset).problems}


def test_the_reference_dataset_verifies(built, capsys):
    assert cli.main(["verify", built["dataset"]]) == 0
    out = capsys.readouterr().out
    assert "OK" in out and f"{len(built['manifest']['shards'])} shards" in out
    report = verify_dataset(built["dataset"])
    assert report.ok and report.documents == sum(s["documents"] for s in built["manifest"]["shards"])


def test_a_flipped_byte_in_a_bin_is_named(copy, built, capsys):
    target = shard(built["manifest"])
    path = os.path.join(copy, target["tokens_file"])
    data = bytearray(open(path, "rb").read())
    data[1001] ^= 0x01
    open(path, "wb").write(bytes(data))
    assert cli.main(["verify", copy]) == 1
    out = capsys.readouterr().out
    assert f"{target['name']}: tokens sha256" in out
    assert "dataset: merkle root: recomputed" in out
    assert (target["name"], "index sha256") not in problems(copy)  # only what is wrong is named


def test_an_edited_index_is_named(copy, built, capsys):
    target = shard(built["manifest"], "encyclopedic", 2)
    path = os.path.join(copy, target["index_file"])
    table = pq.read_table(path)
    starts = table.column("token_start").to_pylist()
    starts[3] += 5
    table = table.set_column(table.schema.get_field_index("token_start"), "token_start", pa.array(starts, pa.int64()))
    pq.write_table(table, path)
    assert cli.main(["verify", copy]) == 1
    out = capsys.readouterr().out
    found = problems(copy)
    assert (target["name"], "index sha256") in found
    assert (target["name"], "index") in found  # the start no longer follows the previous EOS
    assert (target["name"], "eos") in found    # and no EOS at the new start + count
    assert ("dataset", "merkle root") in found
    assert ("lineage", "placement") in found
    assert "row 3" in out


def test_padding_eos_and_counts_are_checked(copy, built):
    manifest = built["manifest"]
    target = shard(manifest, "legal", 0)
    path = os.path.join(copy, target["tokens_file"])
    tokens = np.fromfile(path, dtype="<u2")
    first = pq.read_table(os.path.join(copy, target["index_file"])).to_pylist()[0]
    tokens[first["token_start"] + first["token_count"]] = 7   # the first EOS
    tokens[-1] = 7                                             # a pad token
    tokens.tofile(path)
    other = shard(manifest, "docs", 0)
    edited = json.load(open(os.path.join(copy, "manifest.json")))
    for s in edited["shards"]:
        if s["name"] == other["name"]:
            s["pad_tokens"] += 1
    json.dump(edited, open(os.path.join(copy, "manifest.json"), "w"))
    found = problems(copy)
    assert {(target["name"], "eos"), (target["name"], "padding"), (target["name"], "tokens sha256")} <= found
    assert (other["name"], "token count") in found
    assert not any(where == other["name"] and check.endswith("sha256") for where, check in found)


def test_a_missing_file_and_a_wrong_folder_name(copy, built, tmp_path):
    target = shard(built["manifest"], "docs", 4)
    os.remove(os.path.join(copy, target["index_file"]))
    found = problems(copy)
    assert (target["name"], "index file") in found and ("dataset", "merkle root") in found
    renamed = tmp_path / "datasets" / ("0" * 64)
    shutil.copytree(built["dataset"], renamed)
    assert ("dataset", "folder") in problems(str(renamed))


def test_json_output(built, capsys):
    assert cli.main(["verify", built["dataset"], "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["problems"] == [] and report["dataset_id"] == built["manifest"]["dataset_id"]
