"""Dedup as members of the cascade (issue 25): the seed's order by default, gated like the scorers.

The seed (DESIGN.md) runs language ID and the cheap heuristics first, then dedup, then the learned
classifier, then safety and PII, so each expensive step sees the smallest surviving corpus, and a
duplicate is only ever the copy of a document that survived the rules before dedup.
"""
import glob
import json
import os

import pyarrow.parquet as pq
import pytest
import yaml
from conftest import IN_PROCESS, REPO, stages_by_name

from beam_pipeline.cli import commands as cli
from beam_pipeline.config.corpus import ConfigError, load_config
from beam_pipeline.config.scorers import resolved_stages

BLOCKED = "https://blocked.example/"
FINE = "https://fine.example/"


# --- where dedup goes --------------------------------------------------------------------------


@pytest.mark.parametrize("stages, expected", [
    (["language", "heuristics", "blocklist", "quality", "safety", "pii", "decontamination"],
     ["language", "heuristics", "blocklist", "exact_dedup", "near_dedup", "quality", "safety", "pii",
      "decontamination"]),
    (["language", "heuristics"], ["language", "heuristics", "exact_dedup", "near_dedup"]),
    ([], ["exact_dedup", "near_dedup"]),
    (["language", "quality", "select", "tokenize"], ["language", "exact_dedup", "near_dedup", "quality", "select",
                                                     "tokenize"]),
    (["exact_dedup", "language", "heuristics"], ["exact_dedup", "near_dedup", "language", "heuristics"]),
    (["language", "near_dedup", "heuristics"], ["language", "exact_dedup", "near_dedup", "heuristics"]),
    (["near_dedup", "language", "exact_dedup"], None),
])
def test_enabled_dedup_takes_the_seeds_place_unless_the_cascade_names_it(stages, expected):
    if expected is None:
        with pytest.raises(ValueError, match="exact_dedup must come before near_dedup"):
            from beam_pipeline.config.scorers import check_order
            check_order(stages)
        return
    assert resolved_stages(stages, True, True) == expected


def test_disabled_dedup_is_left_out_and_naming_it_is_an_error(tmp_path):
    assert resolved_stages(["language", "quality"], True, False) == ["language", "exact_dedup", "quality"]
    assert resolved_stages(["language", "quality"], False, False) == ["language", "quality"]
    config = _config(tmp_path, ["exact_dedup", "near_dedup", "blocklist"], near=False)
    with pytest.raises(ConfigError, match="near_dedup.enabled is false"):
        load_config(config)


# --- what the order changes --------------------------------------------------------------------


def _prose() -> list[str]:
    """Real paragraphs (Wikipedia articles of the sample), each over 80 words."""
    texts = pq.read_table(sorted(glob.glob(os.path.join(REPO, "sample/data/wikipedia/*.parquet")))[0],
                          columns=["text"]).column("text").to_pylist()
    paragraphs = [p for t in texts for p in t.split("\n\n") if len(p.split()) > 80]
    return paragraphs[:8]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Two originals on a blocked domain, each with a copy in a mirror elsewhere (one exact, one with a word
    changed), and six unrelated documents; the originals' source ranks first, so dedup picks them."""
    base = tmp_path_factory.mktemp("cascade_order")
    prose = _prose()
    near_copy = prose[1].split()
    near_copy[40] = "changed"
    web = [
        {"id": "exact-original", "text": prose[0], "url": BLOCKED + "a"},
        {"id": "near-original", "text": prose[1], "url": BLOCKED + "b"},
    ] + [{"id": f"other-{i}", "text": text, "url": FINE + f"o{i}"} for i, text in enumerate(prose[2:])]
    mirror = [
        {"id": "exact-copy", "text": prose[0], "url": FINE + "a"},
        {"id": "near-copy", "text": " ".join(near_copy), "url": FINE + "b"},
    ]
    for name, records in (("web", web), ("mirror", mirror)):
        os.makedirs(base / name)
        with open(base / name / "part-0.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
    (base / "domains.txt").write_text("blocked.example\n")
    return base


def _config(base, cascade, near=True) -> str:
    config = {
        "name": "cascade-order", "output_root": str(base / "out"),
        "sources": [{"name": name, "uri": str(base / name / "*.jsonl"), "format": "jsonl", "rank": rank,
                     "license": "CC-BY-SA-3.0", "domain": "general"} for name, rank in (("web", 1), ("mirror", 2))],
        "near_dedup": {"enabled": near},
        "cascade": cascade,
        "blocklist": {"domain_files": [str(base / "domains.txt")]},
        "policy": {"min_words": 3, "rules": [{"reason": "blocked_url", "drop_if": "blocklist.blocked"}]},
        "tokenize": {"tokenizer": os.path.join(REPO, "sample/tokenizer/tokenizer.json"), "pad_token": "<|pad|>",
                     "seq_len": 64, "shard_tokens": 4096},
        "layout": {"min_partitions": 1},
    }
    path = base / f"{'-'.join(cascade) or 'default'}.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _build(base, cascade) -> tuple[dict, dict]:
    """(doc_id -> drop reason or None, stage -> metrics entry) of a build with this cascade."""
    assert cli.main(["run", "--config", _config(base, cascade), *IN_PROCESS]) == 0
    root = str(base / "out")
    latest = max(glob.glob(os.path.join(root, "runs", "**", "metrics.json"), recursive=True), key=os.path.getmtime)
    stages = stages_by_name(json.load(open(latest)))
    select_key = stages["select"]["layer_key"]
    rows = [r for p in glob.glob(os.path.join(root, "layers", "select", select_key, "decisions", "*.parquet"))
            for r in pq.read_table(p).to_pylist()]
    ids = {r["doc_id"]: r["record_id"] for r in _documents(root, stages["ingest"]["layer_key"])}
    return {ids[r["doc_id"]]: r["reason"] for r in rows}, stages


def _documents(root, ingest_key):
    for path in glob.glob(os.path.join(root, "layers", "ingest", ingest_key, "documents", "*.parquet")):
        yield from pq.read_table(path, columns=["doc_id", "record_id"]).to_pylist()


def test_a_copy_survives_when_a_rule_before_dedup_drops_its_original(corpus):
    seed, stages = _build(corpus, ["blocklist"])  # dedup after the blocklist: the seed's order
    assert list(stages)[:4] == ["ingest", "blocklist", "exact_dedup", "near_dedup"]
    assert seed["exact-original"] == seed["near-original"] == "blocked_url"
    assert seed["exact-copy"] is None and seed["near-copy"] is None
    assert all(seed[f"other-{i}"] is None for i in range(6))

    # dedup before every rule (the order before issue 25): the copies go with their blocked originals
    first, _ = _build(corpus, ["exact_dedup", "near_dedup", "blocklist"])
    assert first["exact-original"] == first["near-original"] == "blocked_url"
    assert first["exact-copy"] == "exact_duplicate"
    assert first["near-copy"] == "near_duplicate"


def test_dedup_accounts_for_the_documents_its_gate_stops(corpus):
    _, stages = _build(corpus, ["blocklist"])
    for stage in ("exact_dedup", "near_dedup"):
        counts = stages[stage]["counts"]
        assert counts["in"] == 10, stage
        assert counts["filtered"] == {"blocked_url": 2}, stage
        assert counts["passed"] == 8, stage
    # the near stage signs only the documents its gate keeps
    assert stages["near_dedup"]["counts"]["other"]["signed"] == 8
