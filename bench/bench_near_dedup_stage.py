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
    .venv/bin/python bench/bench_near_dedup_stage.py --runner flink --sizes 1000000 10000000   # issue 40 item 4

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
mean entries (``near_dedup_groups.group_entries``), and the ledger's
``components_rounds``, ``clusters``, ``clustered_documents`` and
``near_duplicates``. Every run prints the MB/s per core of its CPU seconds.

``--runner flink`` runs the job on embedded Flink with the arguments the CLI gives a FlinkRunner build
(:func:`flink_args`: ``--runner=FlinkRunner`` and ``corpus_options.flink_defaults``: ``[local]``,
LOOPBACK, parallelism = cores; ``--beam_args`` adds more). The work then runs in the job server's JVM
(Flink's TaskManager, a child process) and in the SDK workers (threads of this process), so the run is
also measured as a process tree (:func:`sampled_tree`: bench_scale's ``/proc`` sampler, every 0.5 s):
CPU seconds and peak RSS of the JVM, of this process (its peak reset when the job starts) and of the
tree; CPU ms per document is then the tree's. ``--sizes N1 N2 ...`` generates each size here and runs
the stage in a fresh process of this script (``--generated N`` on those partitions, its own session:
a job idle for ``STALL_SECONDS`` is Flink's batch deadlock and is killed with its JVM), then writes
``bench/results/near-dedup-scale-<runner>-<YYYYMMDD>.md`` and ``.json`` (``--out``): the command, a row
per size, the largest size against the smallest (CPU per document, JVM and driver peak) against
issue 40's 1.2x and ``components_rounds`` against ``ceil(log2(100))`` (:func:`scale_ratios`).

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
import math
import os
import resource
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.append(REPO)
BENCH = os.path.join(REPO, "bench")
if BENCH not in sys.path:
    sys.path.append(BENCH)  # bench_scale (its process-tree sampler), bench_near_dedup

import apache_beam as beam  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402

import beam_pipeline  # noqa: E402
from beam_pipeline.storage import schemas  # noqa: E402
from beam_pipeline.config.corpus import load_config  # noqa: E402
from beam_pipeline.dedup.config import NearDedupConfig
from beam_pipeline.records.hashing import bucket_of  # noqa: E402
from beam_pipeline.storage.layers import Layer, part_name  # noqa: E402
from beam_pipeline.transforms import layer_io, near_dedup, near_dedup_groups, near_dedup_params  # noqa: E402

IN_PROCESS = ["--runner=DirectRunner", "--direct_running_mode=in_memory"]
#: ``--runner flink``: a job whose tree used less than a tenth of a core this long is stuck (bench_scale's
#: stall check: Flink's batch runner deadlocked when one task's output passed ~1 GB, before the reading
#: steps' bundle budget; kept as a guard); it is killed then.
STALL_SECONDS = 900
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


def flink_args(beam_args: list[str] = ()) -> list[str]:
    """``--runner flink``: what the CLI gives a FlinkRunner build (``flink_defaults``: Flink 1.19, the job
    server jar of ``make flink``, ``--flink_master=[local]``, LOOPBACK, parallelism = cores), after
    ``beam_args`` (which win)."""
    from beam_pipeline.options.corpus_options import flink_defaults

    return ["--runner=FlinkRunner", *beam_args, *flink_defaults(list(beam_args))]


def pipeline_args(runner: str, beam_args: list[str] = ()) -> list[str]:
    if runner == "direct":
        return [*IN_PROCESS, *beam_args]
    if runner == "flink":
        return flink_args(beam_args)
    raise ValueError(f"unknown runner {runner!r} (direct or flink)")


def run_stage(root: str, config: NearDedupConfig, paths: list[str], estimate: int | None = None,
              args: list[str] = IN_PROCESS) -> Layer:
    """The stage's job on the documents partitions, its outputs written (and, with this code, committed);
    ``estimate``: the documents the group counts are derived from (the build's: from the text's bytes);
    ``args``: the job's Beam arguments (:func:`pipeline_args`)."""
    layer = Layer(root, near_dedup.STAGE, "bench")
    count = len(paths)
    p = beam.Pipeline(options=PipelineOptions(list(args)))
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
        from beam_pipeline.records.accounting import COUNTS

        spec = layer_io.LayerSpec(layer=layer, version=near_dedup.VERSION, config=near_dedup.stage_config(config),
                                  inputs={}, outputs={**near_dedup.OUTPUTS, "dead_letter": schemas.DEAD_LETTER},
                                  partitions=count, rows_match={near_dedup.ANNOTATIONS: "passed"},
                                  max_dead_letter_fraction=0.01)
        counts = tuple(produced[COUNTS]) | "AllCounts" >> beam.Flatten()
        _ = {**sidecars, "dead_letter": dead_letter, COUNTS: counts} | "Commit" >> layer_io.CommitLayer(spec)
    p.run().wait_until_finish()
    if SPILL_FILE_CODE:  # what the old driver did after the job
        from beam_pipeline.storage.layers import collect_partitions

        layer_io.remove_spills(layer.path)
        for name, schema in near_dedup.OUTPUTS.items():
            collect_partitions(layer.output_path(name), count, schema)
    return layer


def digests(layer: Layer) -> dict[str, list[str]]:
    return {output: [hashlib.sha256(open(path, "rb").read()).hexdigest()
                     for path in sorted(glob.glob(os.path.join(layer.output_path(output), "part-*.parquet")))]
            for output in OUTPUTS}


class _OnePhase:
    """bench_scale.MemorySampler attributes samples to a build's phase; here the job is the one phase."""
    current = "stage"


def _reset_peak_rss() -> bool:
    """Resets this process's ``VmHWM`` to its current RSS (``/proc/self/clear_refs``, Linux >= 4.0), so the
    peak sampled is the job's and not what the process held before it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def sampled_tree(run, stall_seconds: float | None = None, stall_dump: str | None = None) -> tuple:
    """``run()`` with this process's tree sampled every 0.5 s by bench_scale's sampler (``/proc``: VmHWM,
    utime + stime, by role: ``driver`` this process, ``jvm`` Flink's job server, a child ``java ...
    job-server``) -> (what ``run`` returned, {CPU seconds and peak MiB per role and of the tree}). The
    driver's CPU and peak count from here (its CPU before, its RSS before as the floor of its peak)."""
    import bench_scale

    pid = os.getpid()
    reset = _reset_peak_rss()
    driver_cpu0 = bench_scale._cpu_seconds(pid) or 0.0
    driver_rss0 = (bench_scale._status(pid) or {}).get("rss_kb", 0) / 1024
    sampler = bench_scale.MemorySampler(pid, _OnePhase(), stall_seconds=stall_seconds,
                                        stall_dump=Path(stall_dump) if stall_dump else None)
    sampler.sample()
    sampler.start()
    try:
        value = run()
        sampler.sample()  # the job server stays up until this process exits: its CPU so far
    finally:
        sampler.stop()
    cpu = sampler.cpu_by_role()
    cpu["driver"] = max(0.0, cpu["driver"] - driver_cpu0)
    phase = sampler.per_phase.get(_OnePhase.current, {})
    tree = {"tree_cpu_seconds": round(sum(cpu.values()), 2),
            **{f"{role}_cpu_seconds": round(cpu[role], 2) for role in ("driver", "jvm", "worker", "other")},
            **{f"{role}_peak_mib": round(sampler.peak_mb(role), 1) for role in ("driver", "jvm", "worker", "other")},
            "tree_peak_mib": round(phase.get("tree_rss_kb", 0) / 1024, 1),  # the largest sampled sum
            "driver_rss_before_mib": round(driver_rss0, 1), "driver_peak_reset": reset,
            "jvm_processes": sum(1 for proc in sampler.processes.values() if proc["role"] == "jvm"),
            "samples": phase.get("samples", 0)}
    if sampler.killed_at:
        tree["killed"] = sampler.killed_at
    return value, tree


def measure(root: str, config: NearDedupConfig, paths: list[str], estimate: int | None = None,
            profile: str | None = None, args: list[str] = IN_PROCESS, sample_tree: bool = False) -> dict:
    """One run's CPU and wall seconds and digests; with ``profile``, the run under ``cProfile`` with
    ``time.process_time`` as its timer (the profiler's per-call cost inflates Python-heavy code), the
    stats dumped there (``python -m pstats``). ``sample_tree``: also the CPU seconds and peak memory of
    the process tree (:func:`sampled_tree`; on Flink the work runs in the job server's JVM too)."""
    started, cpu, usage = time.monotonic(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
    tree = {}
    if profile:
        import cProfile

        profiler = cProfile.Profile(time.process_time)
        layer = profiler.runcall(run_stage, root, config, paths, estimate, args)
        profiler.dump_stats(profile)
    elif sample_tree:
        stall = os.path.join(REPO, "bench", "work", "logs", f"near-dedup-scale-{os.getpid()}")
        os.makedirs(os.path.dirname(stall), exist_ok=True)
        layer, tree = sampled_tree(lambda: run_stage(root, config, paths, estimate, args), STALL_SECONDS, stall)
    else:
        layer = run_stage(root, config, paths, estimate, args)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {**tree, "root": root, "cpu_seconds": round(time.process_time() - cpu, 2), "wall_seconds": round(time.monotonic() - started, 2),
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


def _generated_shares(count: int) -> tuple[int, int, int]:
    """(documents alone, in planted clusters, in chains) of ``count`` generated documents."""
    singles = count * 3 // 5
    in_clusters = (count // 5) // GENERATED_CLUSTER_SIZE * GENERATED_CLUSTER_SIZE
    return singles, in_clusters, count - singles - in_clusters


def _generated_words(count: int, seed: int = 0) -> Iterator[list[int]]:
    """The words of each of ``count`` generated documents, in index order (see :func:`generated_rows`)."""
    import numpy as np

    rng = np.random.Generator(np.random.PCG64(seed))
    singles, in_clusters, _ = _generated_shares(count)
    made = 0
    for _ in range(singles):
        yield rng.integers(0, GENERATED_VOCABULARY, GENERATED_WORDS).tolist()
    made += singles
    for _ in range(in_clusters // GENERATED_CLUSTER_SIZE):  # an original and its copies, one word changed each
        original = rng.integers(0, GENERATED_VOCABULARY, GENERATED_WORDS).tolist()
        yield original
        for _ in range(GENERATED_CLUSTER_SIZE - 1):
            copy = list(original)
            copy[int(rng.integers(0, GENERATED_WORDS))] = int(rng.integers(0, GENERATED_VOCABULARY))
            yield copy
    made += in_clusters
    while made < count:  # chains: each link one word away from the one before
        link = rng.integers(0, GENERATED_VOCABULARY, GENERATED_WORDS).tolist()
        for _ in range(min(GENERATED_CHAIN_LENGTH, count - made)):
            yield link
            made += 1
            link = list(link)
            link[int(rng.integers(0, GENERATED_WORDS))] = int(rng.integers(0, GENERATED_VOCABULARY))


def _generated_doc_id(seed: int, index: int) -> str:
    return hashlib.sha256(f"gen:{seed}:{index}".encode()).hexdigest()


def _generated_row(seed: int, index: int, words) -> dict:
    lines = [" ".join(f"w{w}" for w in words[i:i + GENERATED_LINE_WORDS])
             for i in range(0, len(words), GENERATED_LINE_WORDS)]
    return {"doc_id": _generated_doc_id(seed, index), "source": "gen", "source_rank": 1, "date": None,
            "text": "\n".join(lines)}


def _print_generated(count: int) -> None:
    singles, in_clusters, in_chains = _generated_shares(count)
    print(f"generated: {count} documents, {singles} alone, {in_clusters} in clusters of {GENERATED_CLUSTER_SIZE}, "
          f"{in_chains} in chains of up to {GENERATED_CHAIN_LENGTH}", flush=True)


def generated_rows(count: int, seed: int = 0) -> list[dict]:
    """``count`` documents made here, not stored: 60% alone, 20% in planted clusters of
    :data:`GENERATED_CLUSTER_SIZE` (an original and copies with one word changed each) and 20% in
    chains of :data:`GENERATED_CHAIN_LENGTH` (each document the previous one with one word changed: a
    path of near duplicates whose ends share nothing, what the components' rounds must cross). Words are
    drawn by a seeded numpy generator (PCG64) from a vocabulary of ``w<number>`` tokens; doc_ids are the
    sha256 of ``gen:<seed>:<index>``, sorted. Returns the rows and prints the planted counts. (All in
    memory, ~3 KB per document: :func:`generated_partitions` writes the same rows without holding them.)"""
    rows = [_generated_row(seed, index, words) for index, words in enumerate(_generated_words(count, seed))]
    rows.sort(key=lambda d: d["doc_id"])
    _print_generated(count)
    return rows


#: What :func:`generated_partitions` writes beside the partitions: documents, partitions, text bytes, seed.
GENERATED_META = "generated.json"


def generated_partitions(count: int, directory: str, partitions: int | None, seed: int = 0) -> list[str]:
    """:func:`generated_rows` as ``partitions`` documents partitions (None: as many as a build would make
    of their text with the default layout), byte for byte what :func:`_write_partitions` makes of them,
    without holding the rows: the words go to a numpy file on disk (4 bytes a word, removed after), the
    text's bytes are counted from the words' lengths, and each partition's rows are made, sorted and
    written alone (the peak is one partition, not the ~3 KB per document of ``generated_rows``: 30 GB
    at 10^7). Writes :data:`GENERATED_META` beside them."""
    import numpy as np

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(beam_pipeline.__file__)), "bench"))
    import bench_near_dedup

    from beam_pipeline.build.corpus_build import partition_count
    from beam_pipeline.config.corpus import LayoutConfig

    os.makedirs(directory, exist_ok=True)
    words_path = os.path.join(directory, "words.npy")
    words = np.lib.format.open_memmap(words_path, mode="w+", dtype=np.int32, shape=(count, GENERATED_WORDS))
    try:
        for index, row in enumerate(_generated_words(count, seed)):
            words[index] = row
        lengths = np.array([len(f"w{w}") for w in range(GENERATED_VOCABULARY)], dtype=np.int64)
        chunk = 1 << 18
        text = sum(int(lengths[words[i:i + chunk]].sum()) for i in range(0, count, chunk))
        text += count * (GENERATED_WORDS - 1)  # the spaces and newlines between words
        if partitions is None:
            layout = LayoutConfig()
            partitions = partition_count(text, layout.target_partition_bytes, layout.min_partitions)
        buckets = np.fromiter((bucket_of(_generated_doc_id(seed, i), partitions) for i in range(count)),
                              dtype=np.int32, count=count)
        paths = [os.path.join(directory, part_name(i, partitions)) for i in range(partitions)]
        for part, path in enumerate(paths):
            rows = [_generated_row(seed, int(i), words[i].tolist()) for i in np.flatnonzero(buckets == part)]
            rows.sort(key=lambda d: d["doc_id"])
            pq.write_table(pa.Table.from_pylist(rows, schema=bench_near_dedup.DOCS_SCHEMA), path)
            del rows
    finally:
        del words
        os.remove(words_path)
    _print_generated(count)
    with open(os.path.join(directory, GENERATED_META), "w", encoding="utf-8") as f:
        json.dump({"documents": count, "partitions": partitions, "text_bytes": text, "seed": seed}, f)
    return paths


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


# --- --sizes: one fresh process per size, a results file ---------------------------------------------

#: Issue 40 item 4: largest against smallest size, CPU per document and peak worker memory within this.
TARGET_RATIO = 1.2
#: docs/scale.md, "Near-dedup shuffle volumes": "a chain of near-copies needs about log2(length) rounds to
#: converge" (docs/near_dedup.md: a path of 10,000 nodes in random order, 12); ``components_rounds`` counts
#: the rounds that changed edges plus one (connected_components.py).
PROMISED_ROUNDS = math.ceil(math.log2(GENERATED_CHAIN_LENGTH))


def outputs_digest(digests: dict) -> str:
    """One sha256 over every output partition's sha256 (``digests``: {output: [sha256 per partition]})."""
    return hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()


def planted(count: int) -> dict:
    """What ``count`` generated documents plant: clustered documents and clusters (a cluster per planted
    cluster and per chain)."""
    _, in_clusters, in_chains = _generated_shares(count)
    return {"clustered_documents": in_clusters + in_chains,
            "clusters": in_clusters // GENERATED_CLUSTER_SIZE + math.ceil(in_chains / GENERATED_CHAIN_LENGTH)}


def scale_ratios(runs: list[dict]) -> dict:
    """The largest run against the smallest (of those that finished): {"documents": (small, large),
    "cpu_per_document" | "jvm_peak" | "driver_peak": {"small", "large", "ratio", "met"}, "rounds":
    {"values", "promised", "met"}}; {} with fewer than two finished runs."""
    done = sorted((run for run in runs if "failed" not in run), key=lambda run: run["documents"])
    if len(done) < 2:
        return {}
    small, large = done[0], done[-1]
    ratios = {"documents": (small["documents"], large["documents"])}
    for name, key in (("cpu_per_document", "cpu_ms_per_document"), ("jvm_peak", "jvm_peak_mib"),
                      ("driver_peak", "driver_peak_mib")):
        if key == "driver_peak_mib" and key not in small:  # --runner direct: the process's ru_maxrss
            key = "peak_rss_mb"
        a, b = small.get(key), large.get(key)
        ratio = b / a if a and b is not None else None
        ratios[name] = {"small": a, "large": b, "ratio": None if ratio is None else round(ratio, 3),
                        "met": None if ratio is None else ratio <= TARGET_RATIO}  # None: not measured
    rounds = [run.get("components_rounds") for run in done]
    ratios["rounds"] = {"values": rounds, "promised": PROMISED_ROUNDS,
                        "met": all(r is not None and r <= PROMISED_ROUNDS for r in rounds)}
    return ratios


def _met(ok: bool | None) -> str:
    return "not measured" if ok is None else "met" if ok else "**not met**"


def _num(value, fmt: str = "{:,.1f}") -> str:
    return "-" if value is None else fmt.format(value)


def scale_markdown(result: dict) -> str:
    """The results file of ``--sizes``: command, the per-size table, the ratios against the targets."""
    runs, ratios = result["runs"], scale_ratios(result["runs"])
    lines = [f"# Near-dedup stage alone on generated documents, {result['runner']} runner (issue 40 item 4), "
             f"{result['date']}", "", "Command:", "", f"    {result['command']}", "",
             f"Runner: {result['runner_description']}. Beam arguments: `{' '.join(result['beam_args'])}`.", "",
             f"Machine: {result['machine']}. Each size ran in a fresh process (its peak memory its own), one "
             "after the other; the documents were generated beforehand by the parent process (not stored: "
             "`generated_rows`: 60% alone, 20% in planted clusters of 5, 20% in chains of 100), so what is "
             "measured is the stage's job alone. " + (
                 "CPU: utime + stime of the process tree (`/proc`, sampled every 0.5 s by bench_scale's sampler): "
                 "the driver (this process; with LOOPBACK the SDK workers are its threads) and Flink's job server "
                 "JVM (the TaskManager). Peak: each process's `VmHWM` (the driver's reset when the job starts). "
                 if result["runner"] == "flink" else
                 "CPU: the process's `time.process_time` (the runner runs every step in it); peak: its "
                 "`ru_maxrss` (every shuffle is in its memory: the local runner's ceiling, not a worker's). ")
             + "MiB = 2^20 bytes.", "",
             "| documents | text MB | partitions | key groups | wall s | tree CPU s | JVM CPU s | driver CPU s "
             "| CPU ms / doc | JVM peak MiB | driver peak MiB | components_rounds | clusters | clustered "
             "| near_duplicates | load (start/end) | outputs sha256 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        if "failed" in run:
            lines.append(f"| {run['documents']:,} | failed: {run['failed']} |" + " |" * 15)
            continue
        cpu = run.get("tree_cpu_seconds", run.get("cpu_seconds"))
        lines.append(
            f"| {run['documents']:,} | {_num(run.get('text_mb'))} | {run.get('partitions', '-')} "
            f"| {run.get('groups', '-')} | {_num(run.get('wall_seconds'))} | {_num(cpu)} "
            f"| {_num(run.get('jvm_cpu_seconds'))} | {_num(run.get('driver_cpu_seconds'))} "
            f"| {_num(run.get('cpu_ms_per_document'), '{:.3f}')} | {_num(run.get('jvm_peak_mib'), '{:,.0f}')} "
            f"| {_num(run.get('driver_peak_mib', run.get('peak_rss_mb')), '{:,.0f}')} "
            f"| {run.get('components_rounds', '-')} | {_num(run.get('clusters'), '{:,}')} "
            f"| {_num(run.get('clustered_documents'), '{:,}')} | {_num(run.get('near_duplicates'), '{:,}')} "
            f"| {run.get('load_average_start', '-')} / {run.get('load_average', '-')} "
            f"| `{outputs_digest(run['digests'])[:16]}` |")
    lines += ["", "Planted (`generated_rows`): " + "; ".join(
        f"{run['documents']:,}: {planted(run['documents'])['clusters']:,} clusters, "
        f"{planted(run['documents'])['clustered_documents']:,} clustered documents" for run in runs) + ".", ""]
    if not ratios:
        lines += ["Fewer than two sizes finished: no ratios.", ""]
        return "\n".join(lines)
    small, large = ratios["documents"]
    lines += [f"## Largest ({large:,}) against smallest ({small:,})", "",
              "| measure | smallest | largest | ratio | target | |", "|---|---|---|---|---|---|"]
    for name, label, fmt in (("cpu_per_document", "tree CPU ms per document", "{:.3f}"),
                             ("jvm_peak", "JVM (job server, TaskManager) peak MiB", "{:,.0f}"),
                             ("driver_peak", "driver peak MiB (on Flink: with the SDK workers, LOOPBACK)", "{:,.0f}")):
        entry = ratios[name]
        lines.append(f"| {label} | {_num(entry['small'], fmt)} | {_num(entry['large'], fmt)} "
                     f"| {_num(entry['ratio'], '{:.2f}x')} | <= {TARGET_RATIO}x | {_met(entry['met'])} |")
    rounds = ratios["rounds"]
    lines.append(f"| components_rounds (chains of {GENERATED_CHAIN_LENGTH}) | {rounds['values'][0]} "
                 f"| {rounds['values'][-1]} | | <= {rounds['promised']} (ceil(log2({GENERATED_CHAIN_LENGTH}))) "
                 f"| {_met(rounds['met'])} |")
    lines += ["", "The rounds' promise: docs/scale.md (\"a chain of near-copies needs about `log2(length)` rounds "
              "to converge\"); `components_rounds` counts the rounds that changed edges plus one.", ""]
    return "\n".join(lines)


def machine_description() -> str:
    import platform

    memory = ""
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            memory = f", {int(f.readline().split()[1]) / 2**20:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return f"{os.cpu_count()} cores{memory}, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def run_sizes(args, argv: list[str]) -> int:
    """``--sizes``: per size, the documents generated here, the stage run in a fresh process of this script
    (its own session: a stalled job is killed with its JVM), its result read back; then the results file."""
    import datetime
    import subprocess

    if args.runner == "flink":
        from beam_pipeline.options.corpus_options import FLINK_JOB_SERVER_BEAM, FLINK_VERSION

        given = [a for a in shlex.split(args.beam_args) if a.startswith("--parallelism")]
        description = (f"embedded Flink {FLINK_VERSION} (Beam's Flink job server {FLINK_JOB_SERVER_BEAM} in a JVM "
                       f"started by the driver, `--flink_master=[local]`, LOOPBACK: the Python SDK workers run "
                       f"inside the driver process, {given[-1] if given else f'parallelism {os.cpu_count()}'})")
    else:
        description = "the in-process DirectRunner (`in_memory`): every shuffle in the driver's memory"
    date = datetime.date.today().strftime("%Y%m%d")
    out = args.out or os.path.join(REPO, "bench", "results", f"near-dedup-scale-{args.runner}-{date}")
    command = " ".join([".venv/bin/python", "bench/bench_near_dedup_stage.py", *map(shlex.quote, argv)])
    runs = []
    for count in args.sizes:
        work = tempfile.mkdtemp(prefix=f"bench-near-dedup-scale-{count}-")
        try:
            started = time.monotonic()
            generated_partitions(count, os.path.join(work, "generated"), args.partitions)
            print(f"[sizes] {count}: generated in {time.monotonic() - started:.0f} s; the stage in a fresh process",
                  flush=True)
            child = [sys.executable, os.path.abspath(__file__), "--generated", str(count), "--generated-dir",
                     os.path.join(work, "generated"), "--runner", args.runner, "--beam_args", args.beam_args,
                     "--json", os.path.join(work, "result.json")]
            # its temporary files (the stage's outputs, Beam's artifacts) under ``work``, removed below
            done = subprocess.run(child, start_new_session=True, env={**os.environ, "TMPDIR": work})
            if done.returncode != 0:
                runs.append({"documents": count, "failed": f"exit status {done.returncode}"})
                print(f"[sizes] {count}: FAILED (exit status {done.returncode})", flush=True)
                continue
            with open(os.path.join(work, "result.json"), encoding="utf-8") as f:
                run = json.load(f)["results"][f"generated {count}"][0]
            run["outputs_sha256"] = outputs_digest(run["digests"])
            run["planted"] = planted(count)
            runs.append(run)
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
    result = {"command": command, "date": date, "runner": args.runner, "runner_description": description,
              "beam_args": runs[0].get("beam_args", []) if runs else [], "machine": machine_description(),
              "runs": runs, "ratios": scale_ratios(runs), "target_ratio": TARGET_RATIO,
              "promised_rounds": PROMISED_ROUNDS}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out + ".json", "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    with open(out + ".md", "w", encoding="utf-8") as f:
        f.write(scale_markdown(result))
    print(f"[sizes] wrote {out}.md and .json", flush=True)
    return 0 if all("failed" not in run for run in runs) else 1


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
    parser.add_argument("--runner", choices=("direct", "flink"), default="direct",
                        help="direct: the in-process DirectRunner (in_memory); flink: embedded Flink as the CLI "
                        "runs it (--runner=FlinkRunner and corpus_options.flink_defaults: [local], LOOPBACK), "
                        "CPU and peak memory of the whole process tree (driver and the job server's JVM)")
    parser.add_argument("--beam_args", default="", help="more Beam arguments (shell words), after the runner's, "
                        "e.g. '--parallelism=4'")
    parser.add_argument("--sizes", type=int, nargs="+", help="generated documents per run, each run in a fresh "
                        "process (its peak memory its own), and a results file: the per-size table and the "
                        "ratios of the largest to the smallest against issue 40's 1.2x")
    parser.add_argument("--out", help="--sizes: results prefix (.md and .json; default "
                        "bench/results/near-dedup-scale-<runner>-<YYYYMMDD>)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (generated partitions, outputs)")
    parser.add_argument("--generated-dir", help=argparse.SUPPRESS)  # --sizes: the partitions, made by the parent
    args = parser.parse_args(argv)
    beam_args = shlex.split(args.beam_args)
    if args.sizes:
        return run_sizes(args, sys.argv[1:] if argv is None else list(argv))
    if not args.documents and not args.labeled and not args.recall and not args.corpus and not args.generated:
        parser.error("give --documents, --labeled, --recall, --corpus, --generated or --sizes")
    if args.runner != "direct" and (args.labeled or args.recall or args.against_signature_only):
        parser.error("--runner flink takes --documents, --corpus or --generated")
    job_args = pipeline_args(args.runner, beam_args)
    load_start = round(os.getloadavg()[0], 1)
    work = tempfile.mkdtemp(prefix="bench-near-dedup-stage-")
    try:
        return run_in(work, args, parser, job_args, load_start)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def run_in(work: str, args, parser, job_args: list[str], load_start: float) -> int:
    """The runs ``args`` asks for, their files under ``work`` (removed by the caller unless --keep)."""
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
        directory = args.generated_dir or os.path.join(work, "generated")
        if not args.generated_dir:
            generated_partitions(args.generated, directory, args.partitions)
        runs.append((f"generated {args.generated}", NearDedupConfig(enabled=True),
                     sorted(glob.glob(os.path.join(directory, "part-*.parquet")))))
    results = {}
    for index, (name, config, paths) in enumerate(runs):
        meta = os.path.join(os.path.dirname(paths[0]), GENERATED_META) if paths else ""
        if name.startswith("generated") and os.path.exists(meta):  # counted when made: no need to read the text
            with open(meta, encoding="utf-8") as f:
                megabytes = json.load(f)["text_bytes"] / 1e6
        else:
            megabytes = text_megabytes(paths)
        for attempt in range(args.repeat):
            estimate = (near_dedup_groups.estimated_documents(int(megabytes * 1e6)) if name.startswith("generated")
                        else None)
            result = measure(os.path.join(work, f"run-{index}-{attempt}"), config, paths, estimate, args.profile,
                             job_args, sample_tree=args.runner != "direct")
            result["text_mb"] = round(megabytes, 2)
            result["mb_per_cpu_second"] = round(megabytes / result["cpu_seconds"], 2)
            result["load_average"] = round(os.getloadavg()[0], 1)
            if name.startswith("generated"):
                params = near_dedup_params.NearDedupParams.from_config(config)
                groups = near_dedup_groups.stage_groups(params, len(paths), estimate)
                # on Flink the stage runs in the job server's JVM too: CPU per document of the whole tree
                cpu = result["tree_cpu_seconds"] if "tree_cpu_seconds" in result else result["cpu_seconds"]
                result.update(documents=args.generated, estimated_documents=estimate, groups=groups,
                              partitions=len(paths), runner=args.runner, beam_args=job_args,
                              load_average_start=load_start,
                              mean_group_entries=round(near_dedup_groups.group_entries(
                                  args.generated, near_dedup_groups.entries_per_document(params), groups)),
                              cpu_ms_per_document=round(1000 * cpu / args.generated, 3),
                              peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                              **{counter: ledger_counts(Layer(result["root"], near_dedup.STAGE, "bench"), counter)
                                 for counter in ("components_rounds", "clustered_documents", "near_duplicates",
                                                 "clusters")})
                print(f"{name}: {json.dumps({k: v for k, v in result.items() if k != 'digests'})}", flush=True)
            results.setdefault(name, []).append(result)
            if "tree_cpu_seconds" in result:
                print(f"{name}: tree CPU {result['tree_cpu_seconds']:.2f} s (JVM {result['jvm_cpu_seconds']:.2f}, "
                      f"driver {result['driver_cpu_seconds']:.2f}), peak JVM {result['jvm_peak_mib']:.0f} MiB, "
                      f"driver {result['driver_peak_mib']:.0f} MiB", flush=True)
            print(f"{name}: CPU {result['cpu_seconds']:.2f} s ({result['mb_per_cpu_second']:.2f} MB/s per core "
                  f"on {megabytes:.1f} MB), wall {result['wall_seconds']:.2f} s, load {result['load_average']}, "
                  f"digests {json.dumps(result['digests'])}", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"code": code, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
