"""Snapshots pin the inputs: ids are content-derived, and a changed input stops the run."""
import json
import os
import shutil

import pytest

from beam_pipeline import cli
from beam_pipeline.config import load_config
from beam_pipeline.snapshot import InputChangedError, check_unchanged, load_snapshot, snapshot_id_of
from conftest import IN_PROCESS, REPO

SAMPLE = os.path.join(REPO, "sample")


@pytest.fixture
def small_corpus(tmp_path):
    """A two-source corpus made of files copied from the sample."""
    data = tmp_path / "data"
    (data / "legal").mkdir(parents=True)
    copyright_files = sorted(os.listdir(os.path.join(SAMPLE, "data", "debian-copyright")))[:6]
    for name in copyright_files:
        shutil.copy(os.path.join(SAMPLE, "data", "debian-copyright", name), data / "legal" / name)
    shutil.copytree(os.path.join(SAMPLE, "data", "python-docs-mirror"), data / "docs")
    config = tmp_path / "corpus.yaml"
    config.write_text(f"""
name: small
output_root: out
sources:
  - {{name: legal, uri: "data/legal/*.txt", format: text, rank: 1, license: x, domain: legal}}
  - {{name: docs, uri: "data/docs/*.jsonl.gz", format: jsonl, rank: 2, license: PSF-2.0, domain: docs}}
tokenize: {{tokenizer: {os.path.join(SAMPLE, 'tokenizer', 'tokenizer.json')}, seq_len: 1024, shard_tokens: 65536}}
""")
    return tmp_path


def snapshot(corpus, capsys):
    assert cli.main(["snapshot", "--config", str(corpus / "corpus.yaml"), *IN_PROCESS]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("snapshot "))
    return line.split()[1].rstrip(":")


def test_snapshot_is_content_derived(small_corpus, capsys):
    first = snapshot(small_corpus, capsys)
    assert snapshot(small_corpus, capsys) == first
    manifest = load_snapshot(str(small_corpus / "out"), first)
    assert snapshot_id_of(manifest) == first
    files = manifest["sources"]["legal"]["files"]
    assert len(files) == 6 and all(f["checksum"].startswith("sha256:") for f in files)
    assert [f["path"] for f in files] == sorted(f["path"] for f in files)
    victim = small_corpus / "data" / "legal" / os.path.basename(files[0]["path"])
    victim.write_bytes(victim.read_bytes() + b"\nappended line\n")
    assert snapshot(small_corpus, capsys) != first


def test_edited_snapshot_is_refused(small_corpus, capsys):
    snapshot_id = snapshot(small_corpus, capsys)
    path = small_corpus / "out" / "snapshots" / f"{snapshot_id}.json"
    manifest = json.loads(path.read_text())
    manifest["total_bytes"] += 1
    path.write_text(json.dumps(manifest))
    with pytest.raises(Exception, match="does not hash to its id"):
        load_snapshot(str(small_corpus / "out"), snapshot_id)


def test_size_change_is_caught_before_any_job(small_corpus, capsys):
    snapshot_id = snapshot(small_corpus, capsys)
    manifest = load_snapshot(str(small_corpus / "out"), snapshot_id)
    victim = manifest["sources"]["legal"]["files"][1]["path"]
    with open(victim, "ab") as f:
        f.write(b"more")
    with pytest.raises(InputChangedError, match="size"):
        check_unchanged(manifest)
    code = cli.main(["run", "--config", str(small_corpus / "corpus.yaml"), "--snapshot_id", snapshot_id, *IN_PROCESS])
    assert code == 1
    assert "input changed since its snapshot" in capsys.readouterr().err


def test_same_size_edit_is_caught_by_the_reader(small_corpus, capsys):
    snapshot_id = snapshot(small_corpus, capsys)
    manifest = load_snapshot(str(small_corpus / "out"), snapshot_id)
    victim = manifest["sources"]["legal"]["files"][2]["path"]
    data = bytearray(open(victim, "rb").read())
    data[10] = ord("X") if data[10] != ord("X") else ord("Y")
    open(victim, "wb").write(bytes(data))
    code = cli.main(["run", "--config", str(small_corpus / "corpus.yaml"), "--snapshot_id", snapshot_id, *IN_PROCESS])
    err = capsys.readouterr().err
    assert code == 1
    assert "stage ingest failed" in err and "input changed since its snapshot" in err and victim in err
    assert not os.path.exists(small_corpus / "out" / "datasets")


def test_glob_matching_nothing_is_a_clear_error(small_corpus, capsys):
    config = small_corpus / "corpus.yaml"
    config.write_text(config.read_text().replace("data/legal/*.txt", "data/nowhere/*.txt"))
    assert cli.main(["run", "--config", str(config), *IN_PROCESS]) == 1
    err = capsys.readouterr().err
    assert "source 'legal'" in err and "matched no files" in err


def test_pinned_snapshot_must_match_the_config_sources(small_corpus, capsys):
    snapshot_id = snapshot(small_corpus, capsys)
    config = small_corpus / "corpus.yaml"
    config.write_text(config.read_text().replace("name: docs", "name: docs2"))
    assert load_config(str(config)).sources[1].name == "docs2"
    assert cli.main(["run", "--config", str(config), "--snapshot_id", snapshot_id, *IN_PROCESS]) == 1
    assert "take a new snapshot" in capsys.readouterr().err
