"""Snapshots pin the inputs: ids are content-derived, and a changed input stops the run."""
import json
import os
import shutil

import pytest

from beam_pipeline.cli import commands as cli
from beam_pipeline.config.corpus import load_config
from beam_pipeline.sources.snapshot import (InputChangedError, check_unchanged, load_snapshot, resolve_snapshot, snapshot_id_of,
                                    source_base)
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


def loaded(corpus, snapshot_id: str) -> dict:
    """The stored snapshot with its files' full paths (as a build sees it)."""
    return resolve_snapshot(load_config(str(corpus / "corpus.yaml")), load_snapshot(str(corpus / "out"), snapshot_id))


def test_stored_snapshot_holds_no_location_of_the_checkout(small_corpus, capsys):
    snapshot_id = snapshot(small_corpus, capsys)
    stored = (small_corpus / "out" / "snapshots" / f"{snapshot_id}.json").read_text()
    assert str(small_corpus) not in stored
    manifest = json.loads(stored)
    assert manifest["format"] == 2
    assert manifest["sources"]["legal"].keys() == {"format", "files"}  # not the uri: where the files are
    assert [f["path"] for f in manifest["sources"]["docs"]["files"]] == sorted(
        os.listdir(small_corpus / "data" / "docs"))
    full = loaded(small_corpus, snapshot_id)
    assert all(os.path.isfile(f["path"]) and f["path"].startswith(str(small_corpus / "data" / "legal") + "/")
               for f in full["sources"]["legal"]["files"])
    assert snapshot_id_of(load_snapshot(str(small_corpus / "out"), snapshot_id)) == snapshot_id
    assert resolve_snapshot(load_config(str(small_corpus / "corpus.yaml")), json.loads(json.dumps(full))) == full


@pytest.mark.parametrize("uri, base", [("/a/b/*.txt", "/a/b"), ("s3://bucket/x/*/y.jsonl", "s3://bucket/x"),
                                       ("/a/b/file.jsonl", "/a/b"), ("/a/b[12]/c", "/a"), ("data/*.txt", "data")])
def test_source_base_is_the_folder_before_the_first_wildcard(uri, base):
    assert source_base(uri) == base


def test_size_change_is_caught_before_any_job(small_corpus, capsys):
    snapshot_id = snapshot(small_corpus, capsys)
    manifest = loaded(small_corpus, snapshot_id)
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
    manifest = loaded(small_corpus, snapshot_id)
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
    assert cli.main(["run", "--config", str(config), *IN_PROCESS]) == 3  # not there (docs/config.md, exit codes)
    err = capsys.readouterr().err
    assert "source 'legal'" in err and "matched no files" in err


def test_pinned_snapshot_files_must_match_the_config_globs(small_corpus, capsys):
    snapshot_id = snapshot(small_corpus, capsys)
    config = small_corpus / "corpus.yaml"
    config.write_text(config.read_text().replace("data/legal/*.txt", "data/legal/a*.txt"))
    assert cli.main(["run", "--config", str(config), "--snapshot_id", snapshot_id, *IN_PROCESS]) == 1
    err = capsys.readouterr().err
    assert "source 'legal'" in err and "is not matched by the config's uri" in err


def test_pinned_snapshot_must_match_the_config_sources(small_corpus, capsys):
    snapshot_id = snapshot(small_corpus, capsys)
    config = small_corpus / "corpus.yaml"
    config.write_text(config.read_text().replace("name: docs", "name: docs2"))
    assert load_config(str(config)).sources[1].name == "docs2"
    assert cli.main(["run", "--config", str(config), "--snapshot_id", snapshot_id, *IN_PROCESS]) == 1
    assert "take a new snapshot" in capsys.readouterr().err


def test_the_same_sample_in_two_checkouts_has_the_same_ids(built, tmp_path):
    """The sample and its config copied to another folder: the snapshot id, config digest, run id and
    dataset id of the reference build (made in this checkout, the first folder)."""
    import glob

    folder = tmp_path / "elsewhere" / "two"
    shutil.copytree(SAMPLE, folder / "sample")
    root = folder / "out"
    assert cli.main(["run", "--config", str(folder / "sample" / "corpus.yaml"), "--output_root", str(root),
                     *IN_PROCESS]) == 0
    ids = []
    for checkout, out in ((os.path.dirname(SAMPLE), built["root"]), (str(folder), str(root))):
        (metrics,) = glob.glob(os.path.join(out, "runs", "*", "metrics.json"))
        metrics = json.load(open(metrics))
        manifest = json.load(open(os.path.join(out, "datasets", metrics["dataset_id"], "manifest.json")))
        (snapshot_file,) = glob.glob(os.path.join(out, "snapshots", "*.json"))
        assert checkout not in open(snapshot_file).read()
        assert load_config(os.path.join(checkout, "sample", "corpus.yaml")).digest() == manifest["config_digest"]
        ids.append((metrics["snapshot_id"], manifest["config_digest"], metrics["run_id"], metrics["dataset_id"]))
    assert ids[0] == ids[1]
