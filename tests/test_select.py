from beam_pipeline.policy.config import PolicyConfig
from conftest import apply_policy


def document(doc_id, text, source="web"):
    return {"doc_id": doc_id, "source": source, "domain": "d", "license": "L", "url": None,
            "text": text, "n_chars": len(text)}


def by_doc_id(rows):
    return sorted(rows, key=lambda r: r["doc_id"])


def test_gold_and_decisions(tmp_path):
    docs = [document("a", "kept text here"), document("b", "kept text here", "mirror"), document("c", "x")]
    exact = [{"doc_id": "a", "is_duplicate": False}, {"doc_id": "b", "is_duplicate": True},
             {"doc_id": "c", "is_duplicate": False}]
    gold, decisions, counts = apply_policy(tmp_path, PolicyConfig(min_chars=2), docs, {"exact": exact})
    assert gold == [{"doc_id": "a", "source": "web", "domain": "d", "license": "L", "url": None,
                     "text": "kept text here"}]
    assert by_doc_id(decisions) == [
        {"doc_id": "a", "source": "web", "kept": True, "reason": None},
        {"doc_id": "b", "source": "mirror", "kept": False, "reason": "exact_duplicate"},
        {"doc_id": "c", "source": "web", "kept": False, "reason": "too_short"},
    ]
    assert counts["in"] == 3 and counts["passed"] == 1
    assert counts["filtered"] == {"exact_duplicate": 1, "too_short": 1}


def test_without_exact_annotations_nothing_is_a_duplicate(tmp_path):
    gold, _, _ = apply_policy(tmp_path, PolicyConfig(), [document("a", "same"), document("b", "same")])
    assert sorted(r["doc_id"] for r in gold) == ["a", "b"]


def test_each_partition_is_sorted_by_doc_id(tmp_path):
    docs = [document(f"doc{i:03d}", f"text number {i} " * 3) for i in range(40)]
    gold, decisions, counts = apply_policy(tmp_path, PolicyConfig(), docs, partitions=3)
    assert counts["in"] == 40 and len(decisions) == 40 and len(gold) == 40
    assert sorted(r["doc_id"] for r in gold) == [d["doc_id"] for d in docs]
    for rows in (gold, decisions):  # three partitions, each in doc_id order
        runs = [i for i in range(1, len(rows)) if rows[i]["doc_id"] < rows[i - 1]["doc_id"]]
        assert len(runs) <= 2


def test_quantile_rules_rank_across_partitions_in_rule_order(tmp_path):
    """keep_top thresholds are global per group, whatever partition a document is in; the second
    quantile rule ranks only what the first one kept."""
    from beam_pipeline.policy.config import RuleConfig
    from beam_pipeline.policy.rules import Plan

    docs = [document(f"w{i:02d}", f"web text number {i} " * 2) for i in range(20)] + \
        [document(f"c{i:02d}", f"curated text number {i} " * 2, "curated") for i in range(4)]
    quality = [{"doc_id": d["doc_id"], "score": (int(d["doc_id"][1:]) + 0.5) / 20} for d in docs]
    # even numbers are the least toxic
    safety = [{"doc_id": d["doc_id"], "toxicity": 0.0 if int(d["doc_id"][1:]) % 2 == 0 else 1.0} for d in docs]
    rules = [RuleConfig(reason="low_quality", by="quality.score", keep_top=0.5),
             RuleConfig(reason="less_safe", by="safety.toxicity", higher_is_better=False, keep_top=0.5,
                        floor=0.25)]
    policy = PolicyConfig(min_chars=2, rules=rules)
    plan = Plan(cascade=("quality", "safety"), rules=rules, overrides=[], domains={"web": "d", "curated": "d"})
    gold, decisions, counts = apply_policy(tmp_path, policy, docs, {"quality": quality, "safety": safety},
                                           plan, partitions=3)
    reasons = {d["doc_id"]: d["reason"] for d in decisions}
    # low_quality keeps the top half per source: w10..w19 and c02, c03
    assert {k for k, r in reasons.items() if r == "low_quality"} == \
        {f"w{i:02d}" for i in range(10)} | {"c00", "c01"}
    # less_safe ranks the 10 web survivors: the 5 even ones (toxicity 0) are kept, the odd ones go
    # (the floor, 25% of 20 = 5 documents, is met); of curated's c02 and c03 it keeps c02
    assert {k for k, r in reasons.items() if r == "less_safe"} == {"w11", "w13", "w15", "w17", "w19", "c03"}
    assert sorted(g["doc_id"] for g in gold) == ["c02", "w10", "w12", "w14", "w16", "w18"]
    assert counts["in"] == 24 and counts["passed"] == 6
    assert counts["filtered"] == {"low_quality": 12, "less_safe": 6}


def test_a_binding_floor_keeps_more_than_keep_top_would(tmp_path):
    """floor 0.4 of 20 web documents = 8 must survive less_safe, where keep_top 0.5 of the 10 that reach it
    would keep 5; curated's floor (ceil(0.4 * 4) = 2) keeps both of its survivors."""
    from beam_pipeline.policy.config import RuleConfig
    from beam_pipeline.policy.rules import Plan

    docs = [document(f"w{i:02d}", f"web text number {i} " * 2) for i in range(20)] + \
        [document(f"c{i:02d}", f"curated text number {i} " * 2, "curated") for i in range(4)]
    quality = [{"doc_id": d["doc_id"], "score": (int(d["doc_id"][1:]) + 0.5) / 20} for d in docs]
    # distinct values: ties at a keep_top threshold are all kept (docs/policy.md)
    safety = [{"doc_id": d["doc_id"], "toxicity": 0.0 if int(d["doc_id"][1:]) % 2 == 0 else int(d["doc_id"][1:]) / 100}
              for d in docs]
    kept = {}
    for floor in (0.0, 0.4):
        rules = [RuleConfig(reason="low_quality", by="quality.score", keep_top=0.5),
                 RuleConfig(reason="less_safe", by="safety.toxicity", higher_is_better=False, keep_top=0.5,
                            floor=floor)]
        plan = Plan(cascade=("quality", "safety"), rules=rules, overrides=[],
                    domains={"web": "d", "curated": "d"})
        gold, _, counts = apply_policy(tmp_path / str(floor), PolicyConfig(min_chars=2, rules=rules), docs,
                                       {"quality": quality, "safety": safety}, plan, partitions=3)
        kept[floor] = {g["doc_id"] for g in gold}
        assert counts["filtered"]["low_quality"] == 12
    assert kept[0.0] == {"c02", "w10", "w12", "w14", "w16", "w18"}
    web = {d for d in kept[0.4] if d.startswith("w")}
    assert web == {"w10", "w12", "w14", "w16", "w18", "w11", "w13", "w15"}      # the least toxic first
    assert {d for d in kept[0.4] if d.startswith("c")} == {"c02", "c03"}
