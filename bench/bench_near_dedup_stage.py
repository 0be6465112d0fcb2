#!/usr/bin/env python3
"""Near-dedup stage cost: CPU seconds of the stage's job and the sha256 of its outputs.

Usage::

    .venv/bin/python bench/bench_near_dedup_stage.py --documents '<root>/layers/ingest/<key>/documents/part-*.parquet'
    .venv/bin/python bench/bench_near_dedup_stage.py --labeled        # bench_near_dedup's labeled set, 6 configs
    .venv/bin/python bench/bench_near_dedup_stage.py --recall         # near_dup_recall's labeled set, defaults
    .venv/bin/python bench/bench_near_dedup_stage.py --corpus bench/work/corpus --corpus-mb 100   # bench/build_corpus.py
    .venv/bin/python bench/bench_near_dedup_stage.py --generated 1000000   # made here: clusters and chains
    .venv/bin/python bench/bench_near_dedup_stage.py --corpus bench/work/corpus --corpus-mb 50 \
        --against-signature-only --rounds 3 --json out.json   # the defaults' cost over signature-only

Each run builds the stage and writes its outputs in one job on the in-process
DirectRunner (``in_memory``), and reports the process's CPU seconds
(``time.process_time``: the runner runs every step in this process; wall
seconds are printed too but depend on the machine's load) and the sha256 of
every partition of ``annotations``, ``signatures`` and ``large_clusters``.

``--documents`` takes the partitions of an ingest layer (the sample's: 4) and
the ``near_dedup`` section of ``--config`` (default: the sample's).
``--labeled`` writes bench_near_dedup's labeled set (1,203 documents of real
text with planted near duplicates) as 4 partitions and runs it with
``method`` minhash, ``verify: jaccard``, simhash, both, both with
``max_cluster_size: 3`` and ``verify: none`` (large clusters), and repeated
spans. ``--recall`` writes the labeled set of ``bench/near_dup_recall.py``
(773 documents: planted copies of graded strength and hard negatives) as 4
partitions and runs it with the defaults (``near_dedup: {enabled: true}``).
``--corpus`` takes the corpus of ``bench/build_corpus.py`` (both sources, files
in name order, records in file order, up to ``--corpus-mb`` MB of UTF-8 text),
writes it as 4 documents partitions (doc_id: sha256 of the record id, source:
the source directory, ranks 1 and 2, no date) and runs the ``near_dedup``
section of ``--config``. ``--generated N`` makes N documents of 80 words (one line) here
(:func:`generated_rows`: 60% alone, 20% in planted clusters of 5, 20% in chains
of 100 whose links are one word apart), as many partitions as a build would
make of their text, and runs the defaults with the group counts a build
derives from their size; it adds CPU ms per document, the process's peak RSS
(the in-process runner holds every shuffle in memory, so this grows with N:
it is the local runner's ceiling, not a worker's bound), the groups and their
mean entries (``near_dedup.group_entries``), and the ledger's
``components_rounds``, ``clusters``, ``clustered_documents`` and
``near_duplicates``. Every run prints the MB/s per core of its CPU seconds.

``--against-signature-only`` (with ``--documents`` or ``--corpus``) measures what the defaults of
issue 42 item 4 cost: the ``near_dedup`` section of ``--config`` as it is, and the same with
``verify: signature`` and ``lines.signature_min_repeats: null`` (:func:`signature_only`), each run in a
fresh process (``--variant``; the numba cache is warmed by one untimed run of each first), ``--rounds``
rounds with the order reversed every other round, so both see the same machine load. It prints and
writes (``--json``) the CPU seconds of every run, the medians, the overhead
``median(config) / median(signature-only) - 1`` and the digests of each variant (equal across the
runs of a variant, or it says so).

The spill-file implementation this stage replaced can be measured with the
same script: export its code (``git archive 1d4bd26 | tar -x -C /tmp/old``)
and run with ``PYTHONPATH=/tmp/old``; the script then wires the old stage
(no commit step; the driver's part is done here). Equal digests mean
byte-identical layers. Results: ``bench/results/near-dedup-runner-native-*.md``.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import resource
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.append(REPO)

import apache_beam as beam  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402

import beam_pipeline  # noqa: E402
from beam_pipeline import schemas  # noqa: E402
from beam_pipeline.config import NearDedupConfig, load_config  # noqa: E402
from beam_pipeline.hashing import bucket_of  # noqa: E402
from beam_pipeline.layers import Layer, part_name  # noqa: E402
from beam_pipeline.transforms import layer_io, near_dedup  # noqa: E402

IN_PROCESS = ["--runner=DirectRunner", "--direct_running_mode=in_memory"]
SAMPLE_CONFIG = os.path.join(REPO, "sample", "corpus.yaml")
OUTPUTS = ("annotations", "signatures", "large_clusters")
LABELED_RUNS = [("minhash", {"method": "minhash"}), ("jaccard", {"verify": "jaccard"}),
                ("simhash", {"method": "simhash"}), ("both", {"method": "both"}),
                ("both, max_cluster_size 3, verify none", {"method": "both", "max_cluster_size": 3, "verify": "none"}),
                ("minhash + spans of forum and web", {"substrings": {"sources": ["forum", "web"], "min_words": 30}})]
SPILL_FILE_CODE = hasattr(layer_io, "remove_spills")  # the implementation before the runner's shuffles


def _dead_letter_order(row: dict) -> tuple:
    return (row["file"] or "", row["position"] if row["position"] is not None else -1,
            row["doc_id"] or "", row["error"])


def _dead_letter_partition(row: dict) -> str:
    return row["file"] or ""


def run_stage(root: str, config: NearDedupConfig, paths: list[str], estimate: int | None = None) -> Layer:
    """The stage's job on the documents partitions, its outputs written (and, with this code, committed);
    ``estimate``: the documents the group counts are derived from (the build's: from the text's bytes)."""
    layer = Layer(root, near_dedup.STAGE, "bench")
    count = len(paths)
    p = beam.Pipeline(options=PipelineOptions(IN_PROCESS))
    if SPILL_FILE_CODE:
        produced = near_dedup.build_stage(p, config, paths, [], layer.path)
    else:
        extra = {"estimated_documents": estimate} if estimate is not None else {}
        produced = near_dedup.build_stage(p, config, paths, [], layer.path, after=[], **extra)
    sidecars = {}
    for name, schema in near_dedup.OUTPUTS.items():
        if isinstance(produced[name], layer_io.WrittenPartitions):
            sidecars[name] = produced[name].sidecars
        else:
            sidecars[name] = produced[name] | f"Write_{name}" >> layer_io.WriteLayerOutput(
                layer.output_path(name), schema, count)
    dead_letter = produced[near_dedup.DEAD_LETTER] | "Write_dead_letter" >> layer_io.WriteLayerOutput(
        layer.dead_letter_path, schemas.DEAD_LETTER, 1, sort_key=_dead_letter_order,
        partition_key=_dead_letter_partition)
    if not SPILL_FILE_CODE:
        from beam_pipeline.accounting import COUNTS

        spec = layer_io.LayerSpec(layer=layer, version=near_dedup.VERSION, config=near_dedup.stage_config(config),
                                  inputs={}, outputs={**near_dedup.OUTPUTS, "dead_letter": schemas.DEAD_LETTER},
                                  partitions=count, rows_match={near_dedup.ANNOTATIONS: "passed"},
                                  max_dead_letter_fraction=0.01)
        counts = tuple(produced[COUNTS]) | "AllCounts" >> beam.Flatten()
        _ = {**sidecars, "dead_letter": dead_letter, COUNTS: counts} | "Commit" >> layer_io.CommitLayer(spec)
    p.run().wait_until_finish()
    if SPILL_FILE_CODE:  # what the old driver did after the job
        from beam_pipeline.layers import collect_partitions

        layer_io.remove_spills(layer.path)
        for name, schema in near_dedup.OUTPUTS.items():
            collect_partitions(layer.output_path(name), count, schema)
    return layer


def digests(layer: Layer) -> dict[str, list[str]]:
    return {output: [hashlib.sha256(open(path, "rb").read()).hexdigest()
                     for path in sorted(glob.glob(os.path.join(layer.output_path(output), "part-*.parquet")))]
            for output in OUTPUTS}


def measure(root: str, config: NearDedupConfig, paths: list[str], estimate: int | None = None,
            profile: str | None = None) -> dict:
    """One run's CPU and wall seconds and digests; with ``profile``, the run under ``cProfile`` with
    ``time.process_time`` as its timer (the profiler's per-call cost inflates Python-heavy code), the
    stats dumped there (``python -m pstats``)."""
    started, cpu, usage = time.monotonic(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
    if profile:
        import cProfile

        profiler = cProfile.Profile(time.process_time)
        layer = profiler.runcall(run_stage, root, config, paths, estimate)
        profiler.dump_stats(profile)
    else:
        layer = run_stage(root, config, paths, estimate)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {"root": root, "cpu_seconds": round(time.process_time() - cpu, 2), "wall_seconds": round(time.monotonic() - started, 2),
            # of the CPU seconds, the kernel's (page faults of the runner's buffers count there) and the faults
            "system_seconds": round(after.ru_stime - usage.ru_stime, 2), "minor_faults": after.ru_minflt - usage.ru_minflt,
            "digests": digests(layer)}


def labeled_partitions(directory: str, partitions: int = 4) -> list[str]:
    # the labeled set of the bench_near_dedup.py next to the code measured (it imports that code's stage)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(beam_pipeline.__file__)), "bench"))
    import bench_near_dedup

    documents, _ = bench_near_dedup.labeled_set()
    rows = sorted(documents, key=lambda d: d["doc_id"])
    return _write_partitions(rows, directory, partitions, bench_near_dedup.DOCS_SCHEMA)


def _write_partitions(rows: list[dict], directory: str, partitions: int, schema) -> list[str]:
    """``rows`` (sorted by doc_id) as ``partitions`` documents partitions, placed by bucket_of(doc_id)."""
    os.makedirs(directory, exist_ok=True)
    paths = [os.path.join(directory, part_name(i, partitions)) for i in range(partitions)]
    for i, path in enumerate(paths):
        pq.write_table(pa.Table.from_pylist([r for r in rows if bucket_of(r["doc_id"], partitions) == i],
                                            schema=schema), path)
    return paths


def recall_partitions(directory: str, partitions: int = 4) -> list[str]:
    """near_dup_recall's labeled set (its defaults: 120 originals) as ``partitions`` documents partitions."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(beam_pipeline.__file__)), "bench"))
    import bench_near_dedup
    import near_dup_recall

    documents, _ = near_dup_recall.labeled_set(120)
    ranks = {"originals": 1, "negatives": 2, "copies": 5}
    rows = sorted(({"doc_id": d["label"], "source": d["source"], "source_rank": ranks[d["source"]], "date": None,
                    "text": d["text"]} for d in documents), key=lambda d: d["doc_id"])
    return _write_partitions(rows, directory, partitions, bench_near_dedup.DOCS_SCHEMA)


def corpus_partitions(corpus: str, megabytes: float, directory: str, partitions: int = 4) -> list[str]:
    """The first ``megabytes`` MB of text of a bench/build_corpus.py corpus as documents partitions."""
    import io

    import zstandard

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(beam_pipeline.__file__)), "bench"))
    import bench_near_dedup

    rows, total, limit = [], 0, megabytes * 1e6
    for rank, source in enumerate(("debian-docs", "docs-mirror"), 1):
        for path in sorted(glob.glob(os.path.join(corpus, source, "*.jsonl.zst"))):
            with open(path, "rb") as raw:
                for line in io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(raw), encoding="utf-8"):
                    if total >= limit:
                        break
                    record = json.loads(line)
                    total += len(record["text"].encode("utf-8"))
                    rows.append({"doc_id": hashlib.sha256(f"{source}:{record['id']}".encode()).hexdigest(),
                                 "source": source, "source_rank": rank, "date": None, "text": record["text"]})
    rows.sort(key=lambda d: d["doc_id"])
    print(f"corpus: {len(rows)} documents, {total / 1e6:.1f} MB of text")
    return _write_partitions(rows, directory, partitions, bench_near_dedup.DOCS_SCHEMA)


#: Generated documents (``--generated``): shares of documents alone, in planted clusters and in chains.
GENERATED_CLUSTER_SIZE, GENERATED_CHAIN_LENGTH = 5, 100
#: One line per document: a chain's links share most of their lines otherwise, and lines in more than
#: ``lines.signature_min_repeats`` documents leave the signatures (template lines), which cuts the chains.
GENERATED_WORDS, GENERATED_VOCABULARY, GENERATED_LINE_WORDS = 80, 20_000, 80


def generated_rows(count: int, seed: int = 0) -> list[dict]:
    """``count`` documents made here, not stored: 60% alone, 20% in planted clusters of
    :data:`GENERATED_CLUSTER_SIZE` (an original and copies with one word changed each) and 20% in
    chains of :data:`GENERATED_CHAIN_LENGTH` (each document the previous one with one word changed: a
    path of near duplicates whose ends share nothing, what the components' rounds must cross). Words are
    drawn by a seeded numpy generator (PCG64) from a vocabulary of ``w<number>`` tokens; doc_ids are the
    sha256 of ``gen:<seed>:<index>``, sorted. Returns the rows and prints the planted counts."""
    import numpy as np

    rng = np.random.Generator(np.random.PCG64(seed))
    texts: list[list[int]] = []
    singles = count * 3 // 5
    in_clusters = (count // 5) // GENERATED_CLUSTER_SIZE * GENERATED_CLUSTER_SIZE
    in_chains = count - singles - in_clusters
    for _ in range(singles):
        texts.append(rng.integers(0, GENERATED_VOCABULARY, GENERATED_WORDS).tolist())
    for _ in range(in_clusters // GENERATED_CLUSTER_SIZE):  # an original and its copies, one word changed each
        original = rng.integers(0, GENERATED_VOCABULARY, GENERATED_WORDS).tolist()
        texts.append(original)
        for _ in range(GENERATED_CLUSTER_SIZE - 1):
            copy = list(original)
            copy[int(rng.integers(0, GENERATED_WORDS))] = int(rng.integers(0, GENERATED_VOCABULARY))
            texts.append(copy)
    while len(texts) < count:  # chains: each link one word away from the one before
        link = rng.integers(0, GENERATED_VOCABULARY, GENERATED_WORDS).tolist()
        for _ in range(min(GENERATED_CHAIN_LENGTH, count - len(texts))):
            texts.append(link)
            link = list(link)
            link[int(rng.integers(0, GENERATED_WORDS))] = int(rng.integers(0, GENERATED_VOCABULARY))
    rows = []
    for index, words in enumerate(texts):
        lines = [" ".join(f"w{w}" for w in words[i:i + GENERATED_LINE_WORDS])
                 for i in range(0, len(words), GENERATED_LINE_WORDS)]
        rows.append({"doc_id": hashlib.sha256(f"gen:{seed}:{index}".encode()).hexdigest(), "source": "gen",
                     "source_rank": 1, "date": None, "text": "\n".join(lines)})
    rows.sort(key=lambda d: d["doc_id"])
    print(f"generated: {count} documents, {singles} alone, {in_clusters} in clusters of {GENERATED_CLUSTER_SIZE}, "
          f"{in_chains} in chains of up to {GENERATED_CHAIN_LENGTH}", flush=True)
    return rows


def generated_partitions(count: int, directory: str, partitions: int | None) -> list[str]:
    """:func:`generated_rows` as ``partitions`` documents partitions (None: as many as a build would make
    of their text with the default layout)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(beam_pipeline.__file__)), "bench"))
    import bench_near_dedup

    from beam_pipeline.build import partition_count
    from beam_pipeline.config import LayoutConfig

    rows = generated_rows(count)
    if partitions is None:
        layout = LayoutConfig()
        text = sum(len(row["text"].encode("utf-8")) for row in rows)
        partitions = partition_count(text, layout.target_partition_bytes, layout.min_partitions)
    return _write_partitions(rows, directory, partitions, bench_near_dedup.DOCS_SCHEMA)


def ledger_counts(layer: Layer, name: str) -> int:
    """The sum of counter ``name`` over the committed layer's ledger (0 when absent)."""
    with open(os.path.join(layer.path, "_LEDGER.json"), encoding="utf-8") as f:
        found = []

        def walk(value):
            if isinstance(value, dict):
                for key, inner in value.items():
                    if key == name and isinstance(inner, int):
                        found.append(inner)
                    else:
                        walk(inner)
            elif isinstance(value, list):
                for inner in value:
                    walk(inner)

        walk(json.load(f))
    return sum(found)


def signature_only(config: NearDedupConfig) -> NearDedupConfig:
    """``config`` verified on MinHash signatures alone, without template lines: what the defaults'
    two tiers on exact shingle sets and template lines are measured against (issue 42, item 4)."""
    lines = config.lines.model_copy(update={"signature_min_repeats": None})
    return config.model_copy(update={"verify": "signature", "lines": lines})


VARIANTS = {"config": lambda config: config, "signature-only": signature_only}


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def compare_variants(documents: str, config_path: str, rounds: int, work: str) -> dict:
    """Each variant of :data:`VARIANTS` on the ``documents`` glob, one fresh process per run (this script
    with ``--variant``), ``rounds`` rounds in alternating order after one untimed warm-up run of each
    (numba's cache, the OS's file cache); -> {"runs", "medians", "overhead", "digests_equal"}."""
    import subprocess

    def one(variant: str, label: str) -> dict:
        out = os.path.join(work, f"{label}.json")
        subprocess.run([sys.executable, os.path.abspath(__file__), "--documents", documents, "--config", config_path,
                        "--variant", variant, "--json", out], check=True, stdout=subprocess.DEVNULL)
        with open(out, encoding="utf-8") as f:
            result = json.load(f)["results"]["documents"][0]
        result["load_average"] = round(os.getloadavg()[0], 1)
        return result

    names = list(VARIANTS)
    for name in names:
        one(name, f"warm-{name}")
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for index in range(rounds):
        for name in names if index % 2 == 0 else names[::-1]:
            result = one(name, f"round-{index}-{name}")
            runs[name].append(result)
            print(f"round {index} {name}: CPU {result['cpu_seconds']:.2f} s, wall {result['wall_seconds']:.2f} s, "
                  f"load {result['load_average']}", flush=True)
    medians = {name: median([r["cpu_seconds"] for r in runs[name]]) for name in names}
    overhead = medians["config"] / medians["signature-only"] - 1
    equal = {name: all(r["digests"] == runs[name][0]["digests"] for r in runs[name]) for name in names}
    print(f"medians: {json.dumps(medians)}; overhead of the config over signature-only: {overhead:+.1%}; "
          f"digests equal across runs: {json.dumps(equal)}", flush=True)
    return {"runs": runs, "medians": medians, "overhead": round(overhead, 4), "digests_equal": equal}


def text_megabytes(paths: list[str]) -> float:
    return sum(len((row["text"] or "").encode("utf-8")) for path in paths
               for row in pq.read_table(path, columns=["text"]).to_pylist()) / 1e6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", help="glob of an ingest layer's documents partitions")
    parser.add_argument("--config", default=SAMPLE_CONFIG, help="corpus config whose near_dedup section is used")
    parser.add_argument("--labeled", action="store_true", help="bench_near_dedup's labeled set, 6 configs")
    parser.add_argument("--recall", action="store_true", help="near_dup_recall's labeled set, defaults")
    parser.add_argument("--corpus", help="a bench/build_corpus.py corpus directory (bench/work/corpus)")
    parser.add_argument("--corpus-mb", type=float, default=100.0, help="MB of its text to use")
    parser.add_argument("--generated", type=int, help="this many generated documents (planted clusters, chains)")
    parser.add_argument("--partitions", type=int, help="documents partitions of --generated (default: the build's "
                        "count for its text at the default layout, build.partition_count)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per config (in this process)")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--against-signature-only", action="store_true", help="the config against signature-only "
                        "verification without template lines, interleaved fresh processes (--rounds)")
    parser.add_argument("--profile", help="cProfile each run (process_time timer) into this file")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of --against-signature-only")
    parser.add_argument("--variant", choices=sorted(VARIANTS), default="config",
                        help="the near_dedup section of --config as it is, or signature-only (signature_only)")
    args = parser.parse_args(argv)
    if not args.documents and not args.labeled and not args.recall and not args.corpus and not args.generated:
        parser.error("give --documents, --labeled, --recall, --corpus or --generated")
    work = tempfile.mkdtemp(prefix="bench-near-dedup-stage-")
    code = "spill files" if SPILL_FILE_CODE else "runner shuffles"
    print(f"code: {os.path.dirname(beam_pipeline.__file__)} ({code}); load average {os.getloadavg()[0]:.1f}")
    if args.against_signature_only:
        if not args.documents and not args.corpus:
            parser.error("--against-signature-only takes --documents or --corpus")
        documents = args.documents
        if args.corpus:
            corpus_partitions(args.corpus, args.corpus_mb, os.path.join(work, "corpus"))
            documents = os.path.join(work, "corpus", "part-*.parquet")
        compared = compare_variants(documents, args.config, args.rounds, work)
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump({"code": code, "documents": args.documents or f"{args.corpus} first {args.corpus_mb} MB",
                           "config": args.config, **compared}, f, indent=1)
        return 0
    variant = VARIANTS[args.variant]
    runs = []
    if args.documents:
        paths = sorted(glob.glob(args.documents))
        runs.append(("documents", variant(load_config(args.config).near_dedup), paths))
    if args.labeled:
        paths = labeled_partitions(os.path.join(work, "labeled"))
        runs += [(name, NearDedupConfig(enabled=True, **overrides), paths) for name, overrides in LABELED_RUNS]
    if args.recall:
        runs.append(("recall set, defaults", NearDedupConfig(enabled=True),
                     recall_partitions(os.path.join(work, "recall"))))
    if args.corpus:
        runs.append(("corpus", variant(load_config(args.config).near_dedup),
                     corpus_partitions(args.corpus, args.corpus_mb, os.path.join(work, "corpus"))))
    if args.generated:
        runs.append((f"generated {args.generated}", NearDedupConfig(enabled=True),
                     generated_partitions(args.generated, os.path.join(work, "generated"), args.partitions)))
    results = {}
    for index, (name, config, paths) in enumerate(runs):
        megabytes = text_megabytes(paths)
        for attempt in range(args.repeat):
            estimate = near_dedup.estimated_documents(int(megabytes * 1e6)) if name.startswith("generated") else None
            result = measure(os.path.join(work, f"run-{index}-{attempt}"), config, paths, estimate, args.profile)
            result["text_mb"] = round(megabytes, 2)
            result["mb_per_cpu_second"] = round(megabytes / result["cpu_seconds"], 2)
            result["load_average"] = round(os.getloadavg()[0], 1)
            if name.startswith("generated"):
                params = near_dedup.NearDedupParams.from_config(config)
                groups = near_dedup.stage_groups(params, len(paths), estimate)
                result.update(documents=args.generated, estimated_documents=estimate, groups=groups,
                              mean_group_entries=round(near_dedup.group_entries(
                                  args.generated, near_dedup.entries_per_document(params), groups)),
                              cpu_ms_per_document=round(1000 * result["cpu_seconds"] / args.generated, 3),
                              peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                              **{counter: ledger_counts(Layer(result["root"], near_dedup.STAGE, "bench"), counter)
                                 for counter in ("components_rounds", "clustered_documents", "near_duplicates",
                                                 "clusters")})
                print(f"{name}: {json.dumps({k: v for k, v in result.items() if k != 'digests'})}", flush=True)
            results.setdefault(name, []).append(result)
            print(f"{name}: CPU {result['cpu_seconds']:.2f} s ({result['mb_per_cpu_second']:.2f} MB/s per core "
                  f"on {megabytes:.1f} MB), wall {result['wall_seconds']:.2f} s, load {result['load_average']}, "
                  f"digests {json.dumps(result['digests'])}", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"code": code, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
