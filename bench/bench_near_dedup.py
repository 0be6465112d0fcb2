#!/usr/bin/env python3
"""Near-dedup benchmark: quality on a labeled set of real text, signature throughput, components at scale.

Usage::

    .venv/bin/python bench/bench_near_dedup.py            # everything, ~10 minutes on 2 cores
    .venv/bin/python bench/bench_near_dedup.py --quick    # smaller scales, for a smoke run

Writes ``bench/results/near_dedup-<YYYYMMDD>.md`` (and prints it).

1. **Labeled set** from the bundled sample (``sample/data``): originals are the
   first 300-700 words of Wikipedia articles and Python doc pages; each gets
   1-4 planted variants of graded strength (whitespace/Unicode changes, header
   and footer changes, 1% and 3% word edits, ~10% of sentences dropped, two
   paragraphs trading places, a combination). Hard negatives: distinct paragraphs
   that share a long site header/footer (one group above the line-dedup
   threshold, one below it), and short distinct documents. Natural near
   duplicates among the base texts (true Jaccard >= 0.5) are removed first so
   that the labels are clean. The stage runs with its defaults (MinHash, then
   SimHash, then both) and is scored by pairwise precision / recall / F1 over
   "same cluster" pairs, documents wrongly removed, and hard negatives merged.
2. **Throughput**: ``sign_document`` in a plain loop (the bare numpy rate) vs
   the stage's ``Sign`` step inside a Beam job on the in-process runner (CPU
   seconds of a job that reads the documents and signs them, minus the same
   job without signing), on the sample's Wikipedia and Python docs text.
3. **Components at scale**: the labeled set at 1x, 4x and 16x (replica k
   shuffles the words of every sentence with seed k, so replicas share no
   shingles but keep the cluster structure), verified edges computed once,
   then the Beam ``ConnectedComponents`` transform timed on them, plus long
   paths that need many rounds.
"""
from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import random
import re
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import apache_beam as beam  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402

from beam_pipeline.records.accounting import COUNTS, SumCounts, stage_counts  # noqa: E402
from beam_pipeline.dedup import minhash  # noqa: E402
from beam_pipeline.config.corpus import NearDedupConfig  # noqa: E402
from beam_pipeline.dedup.shingling import shingle_hashes  # noqa: E402
from beam_pipeline.records.hashing import bucket_of  # noqa: E402
from beam_pipeline.storage.layers import part_name  # noqa: E402
from beam_pipeline.transforms import near_dedup, near_dedup_groups, near_dedup_signing  # noqa: E402
from beam_pipeline.transforms.layer_io import ReadLayerRows, WriteLayerOutput  # noqa: E402
from beam_pipeline.transforms.connected_components import LABELS, ConnectedComponents  # noqa: E402
from beam_pipeline.transforms.bundle_budget import UNBOUNDED, BundleBudget  # noqa: E402
from beam_pipeline.transforms.gate import DocumentPartitions  # noqa: E402
from beam_pipeline.transforms.near_dedup import build_stage  # noqa: E402
from beam_pipeline.transforms.near_dedup_params import NearDedupParams  # noqa: E402
from beam_pipeline.transforms.near_dedup_signing import SignPartitionFn, sign_document  # noqa: E402

DATA = os.path.join(REPO, "sample", "data")
IN_PROCESS = ["--runner=DirectRunner", "--direct_running_mode=in_memory"]
DOCS_SCHEMA = pa.schema([("doc_id", pa.string()), ("source", pa.string()), ("source_rank", pa.int32()),
                         ("date", pa.string()), ("text", pa.string())])
KINDS = ("spacing", "header_footer", "edits1", "edits3", "dropped", "reordered", "combo")


# --- real text ------------------------------------------------------------------------

def wikipedia() -> list[str]:
    table = pq.read_table(os.path.join(DATA, "wikipedia", "part-0000.parquet"), columns=["text"])
    return table.column("text").to_pylist()


def python_docs() -> list[str]:
    texts = []
    for name in sorted(os.listdir(os.path.join(DATA, "python-docs"))):
        raw = zstandard.ZstdDecompressor().stream_reader(open(os.path.join(DATA, "python-docs", name), "rb")).read()
        texts += [json.loads(line)["text"] for line in raw.decode("utf-8").splitlines() if line.strip()]
    return texts


def license_lines() -> list[str]:
    lines = []
    for name in ("bash.txt", "coreutils.txt", "grep.txt"):
        text = open(os.path.join(DATA, "debian-copyright", name), encoding="utf-8").read()
        lines += [line.strip() for line in text.split("\n") if len(line.strip()) >= 40]
    return lines


def first_words(text: str, n: int) -> str:
    kept, out = 0, []
    for paragraph in re.split(r"\n\s*\n", text):
        take = paragraph.split()[: n - kept]
        if take:
            out.append(" ".join(take))
        kept += len(take)
        if kept >= n:
            break
    return "\n\n".join(out)


# --- planted variants ------------------------------------------------------------------

HEADERS = ["Home | News | About | Contact", "Skip to main content", "Posted by admin on March 3",
           "Menu Search Sign in Subscribe"]
FOOTERS = ["Share this article: Facebook Twitter Email", "Copyright 2021 Example Media. All rights reserved.",
           "Related posts: more articles like this one", "Cookies help us deliver our services."]


def make_variant(text: str, kind: str, rng: random.Random) -> str:
    if kind == "spacing":
        return (text.replace(" ", rng.choice(["  ", " \u00a0", "\u2009 "]), 1 + len(text) // 40)
                .replace('"', "\u201c").replace("'", "\u2019") + "\u200b\n")
    if kind == "header_footer":
        return rng.choice(HEADERS) + "\n\n" + text + "\n\n" + rng.choice(FOOTERS)
    if kind in ("edits1", "edits3"):
        rate = 0.01 if kind == "edits1" else 0.03
        words = text.split(" ")
        for i in range(len(words)):
            if rng.random() < rate:
                words[i] = rng.choice(["the", "a", "new", "old", "big", "small", "[citation needed]", "very"])
        return " ".join(words)
    if kind == "dropped":
        sentences = re.split(r"(?<=[.!?])\s+", text)
        return " ".join(s for s in sentences if rng.random() >= 0.1)
    if kind == "reordered":  # two blocks trade places (a moved sidebar, a reordered section)
        paragraphs = text.split("\n\n")
        if len(paragraphs) > 1:
            i, j = rng.sample(range(len(paragraphs)), 2)
            paragraphs[i], paragraphs[j] = paragraphs[j], paragraphs[i]
        return "\n\n".join(paragraphs)
    if kind == "combo":
        return make_variant(make_variant(make_variant(text, "edits1", rng), "header_footer", rng), "spacing", rng)
    raise ValueError(kind)


def scramble(text: str, replica: int) -> str:
    """Replica ``k`` of a real text: the words of each sentence shuffled with seed k (k = 0: the text)."""
    if replica == 0:
        return text
    rng = random.Random(replica * 7919 + len(text))
    out = []
    for paragraph in text.split("\n\n"):
        sentences = []
        for sentence in re.split(r"(?<=[.!?])\s+", paragraph):
            words = sentence.split()
            rng.shuffle(words)
            sentences.append(" ".join(words))
        out.append(" ".join(sentences))
    return "\n\n".join(out)


def base_texts(limit: int) -> list[tuple[str, str]]:
    """(source, text) of distinct long real texts, natural near duplicates removed (true J >= 0.5)."""
    candidates = [("wiki", first_words(t, 700)) for t in wikipedia() if len(t.split()) >= 300]
    candidates += [("pydocs", first_words(t, 600)) for t in python_docs() if len(t.split()) >= 300]
    rng = random.Random(1)
    rng.shuffle(candidates)
    kept, shingle_sets, buckets = [], [], {}
    for source, text in candidates:
        shingles = np.unique(shingle_hashes(text))
        keys = minhash.band_keys(minhash.signature(shingles, 112, 0), 22, 5, 0)  # a low threshold (~0.5)
        near = {i for k in keys for i in buckets.get(k, ())}
        if any(minhash.jaccard(shingles, shingle_sets[i]) >= 0.5 for i in near):
            continue
        for k in keys:
            buckets.setdefault(k, []).append(len(kept))
        kept.append((source, text))
        shingle_sets.append(shingles)
        if len(kept) >= limit:
            break
    return kept


def labeled_set(originals: int = 150, singles: int = 150, replica: int = 0) -> tuple[list[dict], dict]:
    """Documents and labels: {doc_id: (true cluster id or None, kind)}."""
    rng = random.Random(42 + replica)
    bases = base_texts(originals + singles)
    documents, labels = [], {}
    prefix = f"r{replica:02d}-"

    def add(doc_id, text, source, rank, cluster, kind):
        documents.append({"doc_id": prefix + doc_id, "source": source, "source_rank": rank, "date": None,
                          "text": text})
        labels[prefix + doc_id] = (cluster and prefix + cluster, kind)

    for i, (source, text) in enumerate(bases[:originals]):
        text = scramble(text, replica)
        cluster = f"c{i:04d}"
        add(f"orig{i:04d}", text, source, 1, cluster, "original")
        for kind in rng.sample(KINDS, rng.randint(1, 4)):
            add(f"var{i:04d}-{kind}", make_variant(text, kind, rng), "web", 5, cluster, kind)
    for j, (source, text) in enumerate(bases[originals:]):
        add(f"single{j:04d}", scramble(text, replica), source, 2, None, "single")
    paragraphs = [p.strip() for t in wikipedia() for p in t.split("\n\n") if 60 <= len(p.split()) <= 150]
    rng.shuffle(paragraphs)
    lines = license_lines()
    big_footer = "\n".join(lines[:8])      # ~110 words, in 300 documents: above the line-dedup threshold
    small_footer = "\n".join(lines[8:15])   # ~100 words, in 60 documents: below it, verification must hold
    for k, paragraph in enumerate(paragraphs[:300]):
        add(f"hub-a{k:04d}", scramble(paragraph, replica) + "\n" + big_footer, "forum", 5, None, "boilerplate")
    for k, paragraph in enumerate(paragraphs[300:360]):
        add(f"hub-b{k:04d}", scramble(paragraph, replica) + "\n" + small_footer, "forum", 5, None, "boilerplate")
    sentences = [s for p in paragraphs[360:] for s in re.split(r"(?<=[.!?])\s+", p) if 3 <= len(s.split()) <= 20]
    for k, sentence in enumerate(sentences[:200]):
        add(f"short{k:04d}", scramble(sentence, replica), "forum", 5, None, "short")
    return documents, labels


# --- running the stage and scoring --------------------------------------------------------

#: Partitions of the documents in the quality runs (a small build's count: every shuffle is exercised).
PARTITIONS = 4


def run_stage(documents: list[dict], config: NearDedupConfig, workdir: str) -> tuple[list[dict], dict, float, float]:
    """The stage on ``documents`` in one job: (annotation rows, counts["other"], wall seconds, CPU seconds).

    CPU seconds are the process's (the in-process runner runs every step in it).
    """
    os.makedirs(os.path.join(workdir, "documents"), exist_ok=True)
    rows = sorted(documents, key=lambda d: d["doc_id"])
    paths = [os.path.join(workdir, "documents", part_name(i, PARTITIONS)) for i in range(PARTITIONS)]
    for i, path in enumerate(paths):
        pq.write_table(pa.Table.from_pylist([r for r in rows if bucket_of(r["doc_id"], PARTITIONS) == i],
                                            schema=DOCS_SCHEMA), path)
    started, cpu = time.monotonic(), time.process_time()
    p = beam.Pipeline(options=PipelineOptions(IN_PROCESS))
    outputs = build_stage(p, config, paths, [], os.path.join(workdir, "layer"))
    _ = outputs[near_dedup.ANNOTATIONS] | WriteLayerOutput(os.path.join(workdir, "annotations"),
                                                           near_dedup.OUTPUTS[near_dedup.ANNOTATIONS], PARTITIONS)
    counts_path = os.path.join(workdir, "counts.json")
    _ = (tuple(outputs[COUNTS]) | "AllCounts" >> beam.Flatten() | beam.CombineGlobally(SumCounts())
         | beam.Map(_write_counts, counts_path))
    p.run().wait_until_finish()
    seconds, cpu = time.monotonic() - started, time.process_time() - cpu
    rows = []
    for name in sorted(os.listdir(os.path.join(workdir, "annotations"))):
        if name.endswith(".parquet"):
            rows += pq.read_table(os.path.join(workdir, "annotations", name)).to_pylist()
    with open(counts_path, encoding="utf-8") as f:
        counts = json.load(f)
    return rows, counts.get("other", {}), seconds, cpu


def _write_counts(summed: dict, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(stage_counts(near_dedup.STAGE, summed), f)


def pairs_of(groups: dict) -> set:
    out = set()
    for members in groups.values():
        out.update(itertools.combinations(sorted(members), 2))
    return out


def score(rows: list[dict], labels: dict) -> dict:
    truth, predicted = {}, {}
    for doc_id, (cluster, _) in labels.items():
        if cluster:
            truth.setdefault(cluster, set()).add(doc_id)
    for row in rows:
        if row["cluster_id"]:
            predicted.setdefault(row["cluster_id"], set()).add(row["doc_id"])
    true_pairs, predicted_pairs = pairs_of(truth), pairs_of(predicted)
    tp = len(true_pairs & predicted_pairs)
    precision = tp / len(predicted_pairs) if predicted_pairs else 1.0
    recall = tp / len(true_pairs) if true_pairs else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    by_id = {r["doc_id"]: r for r in rows}
    wrongly_removed = [r["doc_id"] for r in rows if r["is_duplicate"] and (
        labels[r["doc_id"]][0] is None or labels[r["doc_id"]][0] != labels[r["representative"]][0])]
    negatives_merged = [r["doc_id"] for r in rows
                        if labels[r["doc_id"]][1] in ("boilerplate", "short", "single") and r["cluster_id"]]
    recall_by_kind = {}
    for kind in KINDS:
        members = [d for d, (_, k) in labels.items() if k == kind]
        if members:
            recall_by_kind[kind] = sum(by_id[d]["is_duplicate"] for d in members) / len(members)
    return {"precision": precision, "recall": recall, "f1": f1, "true_pairs": len(true_pairs),
            "predicted_pairs": len(predicted_pairs), "wrongly_removed": wrongly_removed,
            "negatives_merged": negatives_merged, "recall_by_kind": recall_by_kind,
            "removed": sum(r["is_duplicate"] for r in rows)}


# --- throughput ---------------------------------------------------------------------------

class _Identity(beam.DoFn):
    def process(self, document):
        yield document["doc_id"], document


def throughput(documents: list[dict], config: NearDedupConfig, workdir: str) -> dict:
    params = NearDedupParams.from_config(config)
    megabytes = sum(len(d["text"].encode("utf-8")) for d in documents) / 1e6
    started = time.process_time()
    for document in documents:
        sign_document(document, params)
    bare = time.process_time() - started
    path = os.path.join(workdir, "throughput", "part-00000-of-00001.parquet")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.Table.from_pylist(sorted(documents, key=lambda d: d["doc_id"]), schema=DOCS_SCHEMA), path)

    def job(make_step) -> float:
        started = time.process_time()
        with beam.Pipeline(options=PipelineOptions(IN_PROCESS)) as p:
            _ = p | "Step" >> make_step() | beam.combiners.Count.Globally()
        return time.process_time() - started

    def read():
        return ReadLayerRows([path], near_dedup_signing.INPUT_COLUMNS)

    def sign():
        return _Sign(params, path, os.path.join(workdir, "throughput-layer"))

    job(read)  # warm-up: imports, caches
    baseline = min(job(read) for _ in range(2))
    signing = min(job(sign) for _ in range(2))
    step = max(signing - baseline, 1e-9)
    return {"documents": len(documents), "megabytes": megabytes, "bare_seconds": bare, "baseline_seconds": baseline,
            "beam_seconds": signing, "bare_mb_s": megabytes / bare, "beam_step_mb_s": megabytes / step,
            "ratio": bare / step}


class _Sign(beam.PTransform):
    """The stage's signing task: read a partition, sign, write its signatures partition, emit members and keys."""

    def __init__(self, params, path: str, layer: str):
        super().__init__()
        self._params = params
        self._path = path
        self._layer = layer

    def expand(self, pbegin):
        documents = DocumentPartitions.of((self._path,))
        groups = near_dedup_groups.stage_groups(self._params, documents.count,
                                                near_dedup_groups.DOCUMENTS_PER_PARTITION)
        signed = (pbegin | beam.Create([0]) | beam.ParDo(SignPartitionFn(
            self._params, documents, os.path.join(self._layer, near_dedup.SIGNATURES), groups,
            BundleBudget(UNBOUNDED, "Sign")))
            .with_outputs(near_dedup.SIGNATURES, near_dedup.DEAD_LETTER, COUNTS, "payloads", "shingles", "bands",
                          "blocks", main="members"))
        return signed["members"]


# --- components at scale -------------------------------------------------------------------

def verified_edges(documents: list[dict], params: NearDedupParams) -> list[tuple[str, str]]:
    """The stage's candidate + verification logic in memory (same functions), for timing components alone."""
    signatures, buckets = {}, {}
    for document in documents:
        _, row = sign_document(document, params)
        if row is None:
            continue
        signatures[row["doc_id"]] = minhash.from_bytes(row["minhash"])
        for key in row["band_keys"]:
            buckets.setdefault(key, []).append(row["doc_id"])
    edges = set()
    for members in buckets.values():
        members = sorted(set(members))
        for other in members[1:]:
            if minhash.estimate_jaccard(signatures[members[0]], signatures[other]) >= params.verify_threshold:
                edges.add((members[0], other))
    return sorted(edges)


def time_components(edges: list[tuple[str, str]], max_rounds: int) -> tuple[float, int]:
    started = time.monotonic()
    p = beam.Pipeline(options=PipelineOptions(IN_PROCESS))
    found = (p | beam.Create(edges)) | ConnectedComponents(max_rounds, near_dedup.STAGE)
    _ = found[LABELS] | beam.combiners.Count.Globally()
    result = p.run()
    result.wait_until_finish()
    seconds = time.monotonic() - started
    rounds = next(c.committed for c in result.metrics().query()["counters"]
                  if c.key.metric.name == "components_rounds")
    return seconds, rounds


def time_empty_pipeline() -> float:
    started = time.monotonic()
    with beam.Pipeline(options=PipelineOptions(IN_PROCESS)) as p:
        _ = p | beam.Create([("a", "b")]) | beam.combiners.Count.Globally()
    return time.monotonic() - started


# --- report ---------------------------------------------------------------------------------

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller scales (1x, 2x) for a smoke run")
    parser.add_argument("--out", default=None, help="markdown report path")
    args = parser.parse_args(argv)
    today = datetime.date.today().isoformat()
    out_path = args.out or os.path.join(REPO, "bench", "results", f"near_dedup-{today.replace('-', '')}.md")
    work = tempfile.mkdtemp(prefix="bench-near-dedup-")
    lines = [f"# Near-dedup benchmark ({today})", "",
             f"Command: `.venv/bin/python bench/bench_near_dedup.py{' --quick' if args.quick else ''}`. "
             f"Machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, numpy {np.__version__}, "
             f"apache-beam {beam.__version__}; Beam DirectRunner in_memory (one process). Load average at the "
             f"start: {os.getloadavg()[0]:.1f} (the machine is shared: wall seconds are inflated, CPU seconds less so).",
             ""]

    # 1. quality
    documents, labels = labeled_set()
    kinds = {}
    for _, kind in labels.values():
        kinds[kind] = kinds.get(kind, 0) + 1
    lines += ["## 1. Quality on the labeled set", "",
              f"{len(documents)} documents of real text from `sample/data`: " +
              ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) + ".", "",
              "| method | precision | recall | F1 | true pairs | predicted pairs | removed | wrongly removed "
              "| hard negatives merged | stage wall s | stage CPU s |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    per_kind = {}
    runs = [("minhash (default)", {"method": "minhash"}),
            ("minhash, equal FP/FN weights (22 x 5)", {"minhash": {"fp_weight": 0.5, "fn_weight": 0.5}}),
            ("minhash, verify: signature (16 x 7, the default before issue 20)",
             {"verify": "signature", "lines": {"signature_min_repeats": None}}),
            ("minhash, verify: jaccard (16 x 7)", {"verify": "jaccard"}),
            ("simhash (default, k=3)", {"method": "simhash"}),
            ("simhash k=6, 7 blocks", {"method": "simhash", "simhash": {"max_hamming": 6}}),
            ("simhash k=8, 9 blocks", {"method": "simhash", "simhash": {"max_hamming": 8}}),
            ("both (default)", {"method": "both"})]
    for index, (method, overrides) in enumerate(runs):
        config = NearDedupConfig(enabled=True, **overrides)
        rows, metrics, seconds, cpu = run_stage(documents, config, os.path.join(work, f"quality-{index}"))
        s = score(rows, labels)
        per_kind[method] = s["recall_by_kind"]
        lines.append(f"| {method} | {s['precision']:.4f} | {s['recall']:.4f} | {s['f1']:.4f} | {s['true_pairs']} | "
                     f"{s['predicted_pairs']} | {s['removed']} | {len(s['wrongly_removed'])} | "
                     f"{len(s['negatives_merged'])} | {seconds:.1f} | {cpu:.1f} |")
        print(lines[-1], flush=True)
        if s["wrongly_removed"] or s["negatives_merged"]:
            print("  wrongly removed:", s["wrongly_removed"][:10], "merged:", s["negatives_merged"][:10])
    params = NearDedupParams.from_config(NearDedupConfig(enabled=True))
    lines += ["", "Pairwise scores count a pair of documents as predicted when they share a cluster, true when they "
              "were planted from the same original. Wrongly removed: marked duplicate, but the representative is not "
              "from its planted cluster. Hard negatives merged: a boilerplate, short or single document in any "
              "cluster.", "", f"Defaults: word 5-gram shingles, MinHash {params.num_perm} permutations, {params.bands} bands x "
              f"{params.rows} rows (chosen for two_tier.lsh_threshold 0.5), candidates verified in two tiers "
              f"(estimated Jaccard >= {params.verify_threshold}, or >= {params.low_threshold} with containment >= "
              f"{params.containment_threshold}; texts under {params.short_shingles} shingles >= "
              f"{params.short_threshold}); SimHash 64 bits, Hamming <= {params.max_hamming} in {params.blocks} "
              "blocks; line dedup on, lines in more than 10 documents out of signatures when at most half of one.",
              "", "Recall of the planted variants (share marked duplicate), by kind:", "",
              "| kind | " + " | ".join(per_kind) + " |", "|---|" + "---:|" * len(per_kind)]
    for kind in KINDS:
        lines.append(f"| {kind} | " + " | ".join(f"{per_kind[m].get(kind, 0):.3f}" for m in per_kind) + " |")
    lines += ["", "SimHash with 64 bits flips each bit with probability arccos(cosine) / pi: 3 bits only catch "
              "formatting-level copies; larger k finds edits but needs shorter block keys (more random "
              "collisions per bucket) or many more keys per document, which is why MinHash is the default."]
    print("\n".join(lines[-10:]), flush=True)

    # 2. throughput
    corpus = [{"doc_id": f"t{i:05d}", "source": "s", "source_rank": 1, "date": None, "text": t}
              for i, t in enumerate(wikipedia() + python_docs())]
    t = throughput(corpus, NearDedupConfig(enabled=True), work)
    lines += ["", "## 2. Signature throughput (one core)", "",
              f"{t['documents']} documents, {t['megabytes']:.1f} MB (the sample's Wikipedia and Python docs). "
              "CPU seconds (`time.process_time`, the runner is in-process).", "",
              "| measure | CPU s | MB/s |", "|---|---:|---:|",
              f"| bare: `sign_document` in a loop (normalize, shingle, MinHash, band keys) | {t['bare_seconds']:.2f} | "
              f"{t['bare_mb_s']:.2f} |",
              f"| Beam job: read the partition (baseline) | {t['baseline_seconds']:.2f} | |",
              f"| Beam job: `SignPartitionFn` (read, sign, write signatures, emit members, payloads, band keys) | "
              f"{t['beam_seconds']:.2f} | |",
              f"| signing step (job minus baseline) | {t['beam_seconds'] - t['baseline_seconds']:.2f} | "
              f"{t['beam_step_mb_s']:.2f} |", "",
              f"Beam step rate / bare rate: **{t['ratio']:.0%}** (goal >= 70%)."]
    print("\n".join(lines[-12:]), flush=True)

    # 3. components at scale
    scales = (1, 2) if args.quick else (1, 4, 16)
    empty = time_empty_pipeline()
    lines += ["", "## 3. Connected components as the corpus grows", "",
              "Replica k of the labeled set shuffles the words of every sentence (seed k): replicas share no "
              "shingles, so the graph grows with the corpus. Edges: verified MinHash star edges. Time: the Beam "
              f"`ConnectedComponents` job alone (max_rounds 8), wall seconds; an empty job costs {empty:.1f} s here.",
              "", "| scale | documents | edges | nodes | rounds | seconds |", "|---:|---:|---:|---:|---:|---:|"]
    for scale in scales:
        docs = [d for k in range(scale) for d in labeled_set(replica=k)[0]]
        edges = verified_edges(docs, params)
        nodes = len({n for e in edges for n in e})
        seconds, rounds = time_components(edges, 8)
        lines.append(f"| {scale}x | {len(docs)} | {len(edges)} | {nodes} | {rounds} | {seconds:.1f} |")
        print(lines[-1], flush=True)
    lines += ["", "Long paths (the worst case for star contraction; nodes in random order):", "",
              "| path length | rounds | seconds |", "|---:|---:|---:|"]
    for length in ((100, 1000) if args.quick else (100, 1000, 10000)):
        order = list(range(length))
        random.Random(length).shuffle(order)
        edges = [(f"{order[i]:06d}", f"{order[i + 1]:06d}") for i in range(length - 1)]
        seconds, rounds = time_components(edges, 20)
        lines.append(f"| {length} | {rounds} | {seconds:.1f} |")
        print(lines[-1], flush=True)

    report = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(report)
    print(f"\nwritten to {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
