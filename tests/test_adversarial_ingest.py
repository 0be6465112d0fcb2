"""Every bad-input fixture goes through the whole build (near dedup and every scorer included)
with exact, expected counts.

Fixture files and their reader-level counts come from
``scripts/make_adversarial_fixtures.py`` (``EXPECTED.json``); this test adds
what normalization and the policy do with the records that survive reading.
"""
import glob
import json
import os
import shutil

import pyarrow.parquet as pq
import pytest

from beam_pipeline.cli import commands as cli
from conftest import IN_PROCESS, REPO, stages_by_name

FIXTURES = os.path.join(REPO, "tests", "fixtures", "adversarial")
EXPECTED = json.load(open(os.path.join(FIXTURES, "EXPECTED.json")))
SAMPLE = os.path.join(REPO, "sample")
TOKENIZER = os.path.join(SAMPLE, "tokenizer", "tokenizer.json")

# Documents that reach the gold layer, by fixture: the reader's good records
# minus those whose text is empty after normalization (empty_text: "" and
# whitespace-only; mixed: one "" text), and minus verbatim
# repeats inside one file.
KEPT = {
    "bad_byte.txt": 1, "bare_number.jsonl": 2, "broken_json.jsonl": 2, "crlf.jsonl": 4,
    "empty_text.jsonl": 1, "huge_line.jsonl": 2, "invalid_utf8.jsonl": 4, "json_array.jsonl": 2,
    "missing_text.jsonl": 2, "missing_text_column.parquet": 0, "mixed.jsonl": 5,
    "multi_frame.jsonl.zst": 20, "multi_member.jsonl.gz": 30, "not_parquet.parquet": 0,
    "nul_bytes.jsonl": 2, "null_text.parquet": 5, "truncated.jsonl.gz": 8, "truncated.jsonl.zst": 10,
    "truncated.txt.gz": 0,
}


def source_name(filename: str) -> str:
    return filename.lower().replace("_", "-")


@pytest.fixture(scope="module")
def adversarial_build(tmp_path_factory):
    base = tmp_path_factory.mktemp("adversarial")
    sources = []
    for filename, spec in sorted(EXPECTED.items()):
        folder = base / "data" / source_name(filename)
        folder.mkdir(parents=True)
        shutil.copy(os.path.join(FIXTURES, filename), folder / filename)
        sources.append(f"  - {{name: {source_name(filename)}, uri: 'data/{source_name(filename)}/*', "
                       f"format: {spec['format']}, rank: 1, license: test, domain: adversarial}}")
    (base / "corpus.yaml").write_text(
        "name: adversarial\noutput_root: out\nsources:\n" + "\n".join(sources) + "\n"
        "ingest: {max_record_bytes: 1048576}\n"
        # every scorer of the cascade and near dedup run over what survives reading; no rule drops
        # anything, so the kept counts below are the reader's and normalization's alone
        "near_dedup: {enabled: true}\n"
        "cascade: [language, heuristics, blocklist, quality, safety, pii, decontamination]\n"
        f"blocklist: {{domain_files: [{SAMPLE}/blocklists/domains.txt]}}\n"
        f"quality: {{model: {SAMPLE}/models/quality.bin}}\n"
        f"decontamination: {{evalsets: [{{name: passages, path: {SAMPLE}/evalsets/passages.jsonl}}]}}\n"
        "policy: {drop_exact_duplicates: false, drop_near_duplicates: false}\n"
        "accounting: {max_dead_letter_fraction: 1.0}\n"
        f"tokenize: {{tokenizer: {TOKENIZER}, seq_len: 256, shard_tokens: 65536}}\n")
    assert cli.main(["run", "--config", str(base / "corpus.yaml"), *IN_PROCESS]) == 0
    (metrics,) = glob.glob(str(base / "out" / "runs" / "*" / "metrics.json"))
    return base / "out", stages_by_name(json.load(open(metrics)))


def test_fixture_list_is_complete():
    assert set(KEPT) == set(EXPECTED)


@pytest.mark.parametrize("filename", sorted(EXPECTED))
def test_reader_counts_hold_end_to_end(adversarial_build, filename):
    _, stages = adversarial_build
    spec = EXPECTED[filename]
    ingest = stages["ingest"]["counts"]["by_source"][source_name(filename)]
    assert ingest["in"] == spec["records"] + spec["bad"]
    assert ingest["dead_letter"] == spec["bad"]
    assert ingest["passed"] + sum(ingest["filtered"].values()) == spec["records"]
    kept = stages["select"]["counts"]["by_source"].get(source_name(filename), {"passed": 0})["passed"]
    assert kept == KEPT[filename]
    tokenized = stages["tokenize"]["counts"]["by_source"].get(source_name(filename), {"passed": 0})["passed"]
    assert tokenized == kept


def test_every_stage_balances(adversarial_build):
    _, stages = adversarial_build
    assert list(stages) == ["ingest", "language", "heuristics", "blocklist", "exact_dedup", "near_dedup", "quality",
                            "safety", "pii", "decontamination", "select", "tokenize"]
    for name, stage in stages.items():
        for c in [stage["counts"], *stage["counts"]["by_source"].values()]:
            assert c["in"] == c["passed"] + sum(c["filtered"].values()) + c["dead_letter"], name


def test_dead_letters_carry_their_origin(adversarial_build):
    root, stages = adversarial_build
    key = next(iter(glob.glob(str(root / "dead_letter" / "ingest" / "*"))))
    rows = pq.read_table(glob.glob(os.path.join(key, "*.parquet"))[0]).to_pylist()
    assert len(rows) == sum(spec["bad"] for spec in EXPECTED.values()) == stages["ingest"]["counts"]["dead_letter"]
    for row in rows:
        assert row["stage"] == "ingest" and row["file"] and row["error"] and row["position"] is not None
        assert len(row["raw_prefix"]) <= 256
    truncated = [r for r in rows if r["file"].endswith("truncated.jsonl.gz")]
    assert len(truncated) == 1 and "truncated" in truncated[0]["error"]


def test_dead_letter_rate_above_threshold_fails_the_run(tmp_path, capsys):
    folder = tmp_path / "data"
    folder.mkdir()
    shutil.copy(os.path.join(FIXTURES, "broken_json.jsonl"), folder / "broken_json.jsonl")
    (tmp_path / "corpus.yaml").write_text(
        "name: broken\noutput_root: out\n"
        "sources: [{name: broken, uri: 'data/*.jsonl', format: jsonl, rank: 1, license: x, domain: d}]\n"
        "accounting: {max_dead_letter_fraction: 0.5}\n"
        f"tokenize: {{tokenizer: {TOKENIZER}, seq_len: 256, shard_tokens: 65536}}\n")
    assert cli.main(["run", "--config", str(tmp_path / "corpus.yaml"), *IN_PROCESS]) == 1
    err = capsys.readouterr().err
    spec = EXPECTED["broken_json.jsonl"]
    assert f"stage ingest: {spec['bad']} of {spec['bad'] + spec['records']} records" in err
    assert "max_dead_letter_fraction=50.00%" in err
    # the dead letters are written for inspection, but the layer is not committed
    assert glob.glob(str(tmp_path / "out" / "dead_letter" / "ingest" / "*" / "*.parquet"))
    assert not glob.glob(str(tmp_path / "out" / "layers" / "ingest" / "*" / "_LEDGER.json"))
