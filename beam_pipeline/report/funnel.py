"""The report's cascade funnel: documents and tokens in the flow after each stage.

Documents are the run's counts read as a flow
(:func:`beam_pipeline.report.stage_counts.stage_flow`); tokens are exact for
the dataset (:func:`final_tokens_by_source`, from the shard index files) and
estimated before tokenization from the dropped documents' characters
(:func:`funnel`). Used by :func:`beam_pipeline.report.gather.gather` (and
``docs/report.md``, "Cascade funnel").
"""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
import pyarrow.compute as pc

from beam_pipeline.report.locate import RunRef
from beam_pipeline.report.run_layers import DROP_RECORD_OUTPUTS, Layout, joined_by_doc_id, read_table
from beam_pipeline.storage.layers import join


def final_tokens_by_source(ref: RunRef) -> dict[str, dict]:
    """Tokens (with one EOS each) and documents per source, from the shard index files."""
    out: dict[str, dict] = {}
    for shard in ref.manifest["shards"]:
        table = read_table(join(ref.dataset_dir, shard["index_file"]), ["source", "token_count"])
        grouped = table.group_by("source").aggregate([("token_count", "sum"), ("token_count", "count")])
        for row in grouped.to_pylist():
            mine = out.setdefault(row["source"], {"tokens": 0, "documents": 0})
            mine["tokens"] += row["token_count_sum"] + row["token_count_count"]
            mine["documents"] += row["token_count_count"]
    return dict(sorted(out.items()))


def _dropped_chars(layout: Layout) -> dict[tuple[str, str, str], dict]:
    """{(stage, reason, source): {"documents", "chars"}} for every per-record drop the layers hold."""
    docs = layout.documents()
    out: dict[tuple[str, str, str], dict] = defaultdict(lambda: {"documents": 0, "chars": 0})
    if docs is None or not docs.has("n_chars", "source"):
        return out
    for output in layout.outputs:
        if output.has("reason"):
            reason_of = None
            columns = ["doc_id", "reason"] + (["kept"] if output.has("kept") else [])
        elif output.name in DROP_RECORD_OUTPUTS and output.has("doc_id"):
            reason_of = DROP_RECORD_OUTPUTS[output.name]
            columns = ["doc_id"]
        else:
            continue
        for table in joined_by_doc_id(output, columns, docs, ["doc_id", "source", "n_chars"]):
            if reason_of is None:
                table = table.filter(pc.is_valid(table["reason"]))
                if "kept" in table.column_names:
                    table = table.filter(pc.invert(table["kept"]))
            else:
                table = table.append_column("reason", pa.array([reason_of] * table.num_rows, pa.string()))
            if not table.num_rows:
                continue
            grouped = table.group_by(["reason", "source"]).aggregate([("n_chars", "sum"), ("doc_id", "count")])
            for row in grouped.to_pylist():
                slot = out[(output.stage, row["reason"], row["source"])]
                slot["documents"] += row["doc_id_count"]
                slot["chars"] += row["n_chars_sum"] or 0
    return out


def funnel(stages: list[dict], layout: Layout, tokens_by_source: dict, manifest: dict) -> dict:
    """Documents (exact, from the counts) and tokens in the flow after each stage (:func:`stage_flow`).

    A step's documents are the records still in the flow: only stages that
    drop records lower them; a scoring stage adds ``scored`` (the documents
    the cascade let it score). Tokens are exact for the dataset (shard
    indexes). Documents dropped before tokenization were never tokenized: their
    tokens are estimated from their characters (documents layer) times their
    source's tokens per character among kept documents (all sources pooled
    for a source with none kept), plus one EOS each; records without a
    per-document record (dead letters) are estimated at the mean tokens per
    kept document of the source. Estimates are flagged.
    """
    dropped = _dropped_chars(layout)
    kept_chars = _kept_chars(layout)
    total_tokens = sum(s["tokens"] for s in manifest["shards"])
    ratio = {}
    pooled_chars = sum(kept_chars.values())
    pooled_tokens = sum(v["tokens"] - v["documents"] for v in tokens_by_source.values())
    pooled = pooled_tokens / pooled_chars if pooled_chars else None
    for source, v in tokens_by_source.items():
        chars = kept_chars.get(source, 0)
        ratio[source] = (v["tokens"] - v["documents"]) / chars if chars else pooled
    per_doc = {s: v["tokens"] / v["documents"] for s, v in tokens_by_source.items() if v["documents"]}
    pooled_per_doc = total_tokens / sum(s["documents"] for s in manifest["shards"]) if manifest["shards"] else 0

    def estimate(stage: dict) -> float:
        tokens = 0.0
        for source, counts in stage["by_source"].items():
            r = ratio.get(source, pooled) or 0.0
            for reason, n in counts["dropped"].items():
                known = dropped.get((stage["name"], reason, source))
                if known and known["documents"]:
                    tokens += known["chars"] * r + known["documents"]
                    n -= known["documents"]
                tokens += max(n, 0) * per_doc.get(source, pooled_per_doc)
        return tokens

    steps = []
    if stages:
        steps.append(
            {"label": "records read", "stage": stages[0]["name"], "documents": stages[0]["in"], "scored": None}
        )
    for stage in stages:
        steps.append(
            {
                "label": f"after {stage['name']}",
                "stage": stage["name"],
                "documents": stage["after"],
                "scored": stage["scored"],
            }
        )
    # tokens: walk back from the dataset, adding what each stage dropped
    tokens_after = float(total_tokens)
    estimated_after = False
    for i in range(len(stages) - 1, -1, -1):
        steps[i + 1]["tokens"] = tokens_after
        steps[i + 1]["estimated"] = estimated_after
        dropped_here = estimate(stages[i])
        if dropped_here:
            estimated_after = True
        tokens_after += dropped_here
    if steps:
        steps[0]["tokens"] = tokens_after
        steps[0]["estimated"] = estimated_after
    return {
        "steps": steps,
        "tokens_per_char": ratio,
        "dropped": [{"stage": k[0], "reason": k[1], "source": k[2], **v} for k, v in sorted(dropped.items())],
    }


def _kept_chars(layout: Layout) -> dict[str, int]:
    """Characters of kept documents per source (documents joined with the decisions)."""
    docs = layout.documents()
    decisions = next((o for o in layout.outputs if o.has("doc_id", "kept")), None)
    out: dict[str, int] = defaultdict(int)
    if docs is None or decisions is None or not docs.has("n_chars"):
        return out
    for table in joined_by_doc_id(decisions, ["doc_id", "kept"], docs, ["doc_id", "source", "n_chars"]):
        table = table.filter(table["kept"])
        for row in table.group_by("source").aggregate([("n_chars", "sum")]).to_pylist():
            out[row["source"]] += row["n_chars_sum"] or 0
    return out
