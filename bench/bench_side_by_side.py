#!/usr/bin/env python3
"""This project against datatrove (0.10.1, test-only), side by side, on the same real text.

``whole`` (the default ``--steps``): each side runs the whole job a user runs, in a fresh subprocess,
charged the CPU seconds of its process tree (children included):

* datatrove: its ``LocalPipelineExecutor`` (2 tasks, 2 workers, ``fork``) in the shape of the FineWeb
  recipe: ``JsonlReader`` -> ``GopherRepetitionFilter`` -> ``GopherQualityFilter`` -> ``C4QualityFilter``
  -> ``FineWebQualityFilter`` -> ``PIIFormatter`` -> ``JsonlWriter`` (uncompressed) ->
  ``MinhashDedupSignature``; ``MinhashDedupBuckets`` (14 tasks); ``MinhashDedupCluster``; then
  ``JsonlReader`` of the kept documents -> ``MinhashDedupFilter`` -> ``DocumentTokenizer``.
* ours: ``python -m beam_pipeline run`` (the local runner on every core, as a user runs it) with
  :data:`WHOLE_CONFIG`: heuristics with datatrove's definitions and the policy presets of its four
  filter families, PII counted and redacted (emails and IPs, what ``PIIFormatter`` replaces), MinHash with
  datatrove's 14 x 8 bands on word 5-grams (candidates verified on their signatures), every kept document
  tokenized, packed and sharded; plus what datatrove's job does not do (exact dedup, layers, ledgers,
  the dataset's manifest). Our per-stage CPU seconds come from the run's ``metrics.json``.

The per-step comparison (``--steps filters,minhash,tokenize``) is kept and labelled as such:
three comparable steps, each run as a fresh subprocess per side (so the CPU seconds are those of the
whole process tree: ``resource.getrusage(RUSAGE_CHILDREN)`` around the child, which counts every
process the child waited for, datatrove's worker pool included):

* ``filters``: heuristic filters + PII.
  datatrove: ``JsonlReader`` -> ``GopherRepetitionFilter`` -> ``GopherQualityFilter`` ->
  ``C4QualityFilter`` -> ``FineWebQualityFilter`` -> ``PIIFormatter`` (2 tasks, 2 workers; each
  filter sees what the one before kept, as in a datatrove pipeline).
  ours: the functions the ``heuristics`` and ``pii`` scorer stages call
  (``filters.heuristics.score`` with the default options, ``filters.pii.counts``) plus the redaction
  ``select`` applies (``filters.pii.redact``), on every document of the same JSONL. The default
  options compute the project's definitions; ``--definitions reference`` (or ``both``) computes
  the ``ref_*`` columns, datatrove's own definitions (spaCy's words and sentences), which is the
  same work as datatrove's filters.
* ``minhash``: near dedup with MinHash LSH on word 5-grams, 14 bands x 8 rows (112 values).
  datatrove: its four stages (signatures, buckets, cluster, filter + a ``JsonlWriter``) with its
  default ``MinhashConfig`` (5-grams, 14 x 8).
  ours: the ``near_dedup`` stage's job (``bench/bench_near_dedup_stage.py::run_stage``) on the same
  documents as 2 partitions, ``minhash`` with ``num_perm: 112, threshold: 0.7`` (14 x 8), word
  5-grams, ``verify: signature`` (datatrove does not verify candidates either), boilerplate lines off.
* ``tokenize``: the same ``tokenizer.json`` (the sample's, a byte-level BPE of 8,192 tokens).
  datatrove: ``JsonlReader`` -> ``DocumentTokenizer`` (EOS after each document, its default
  shuffle, 2 tasks, 2 workers).
  ours: the ``tokenize`` stage's job (``TokenizePackShard``: tokenize, global shuffle, pack into
  8,192-token sequences, shard files + index) on the same documents as 2 gold partitions.

datatrove's local executor runs with ``start_method="fork"`` (see ``datatrove_step``). Our jobs run on Beam's in-process DirectRunner (``in_memory``), as the stage benchmarks do.
Runs are interleaved (run 1: every step, both sides, then run 2, ...; the side that goes first
alternates) and the table gives medians; MB are MB (10^6 bytes) of UTF-8 text in, MB/s per core
is MB / CPU seconds. Peak RSS is the largest resident set of any one process of the tree (at least the
bench's own parent process's, which a forked child starts from: ~60 MB).

The corpus: ``bench/build_corpus.py``'s (Debian documentation pages and their mirrored copies,
built from pinned packages; ``--corpus scale-xl``: ``build_corpus.py --scale-xl``'s, with 381 MB of distinct
pages), its first ``--mb`` MB of text in file order, each text once: a record whose
text (in our ingest's normal form, :func:`beam_pipeline.records.normalize.normalize_text`) came before is left
out, so that both sides filter, dedup and tokenize the same documents (our ingest would drop such verbatim
repeats before the filters, and datatrove's filters would score them: a third of the records of the mirrored
corpus). ``--keep-repeats`` keeps them, as earlier results did.

``--near-dedup-defaults`` adds a third side to the whole job, ``ours-defaults``: the same job with near
dedup's own defaults for verification and line handling (two-tier verification on exact shingle sets,
template lines) instead of datatrove's signature-only check, interleaved with the other two; the report then
gives what the defaults cost over signature-only verification, whole job and near-dedup stage (issue 42,
item 4), and what each decided.

Usage::

    .venv/bin/python bench/bench_side_by_side.py [--mb 20] [--runs 3] [--steps whole,filters,minhash,tokenize]
                                                 [--definitions project|reference|both]
                                                 [--near-dedup-defaults] [--keep-repeats]

Results: bench/results/side-by-side-<date>.md and .json (with this command).
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: ``--corpus`` -> (its folder, build_corpus.py's flag): the bench corpus (about 143 MB of distinct text), or the
#: scale-xl one (381 MB of distinct text, for the whole job at >= 200 MB of distinct text)
CORPORA = {"bench": (REPO / "bench" / "work" / "corpus", None),
           "scale-xl": (REPO / "bench" / "work" / "scale-xl" / "corpus", "--scale-xl")}
WORK = REPO / "bench" / "work" / "side-by-side"
RESULTS = REPO / "bench" / "results"
TOKENIZER = REPO / "sample" / "tokenizer" / "tokenizer.json"
STEPS = ("filters", "minhash", "tokenize")  # the per-step comparison (each step alone)
WHOLE = "whole"  # each side a whole job: filters + PII, MinHash dedup, tokenization of what is kept
SIDES = ("datatrove", "ours")
DEFAULTS_SIDE = "ours-defaults"  # our whole job with near dedup's default verification and line handling
PARTITIONS = 2  # = cores: datatrove's tasks and workers, our partitions
DEFINITIONS_VARIABLE = "SIDE_BY_SIDE_DEFINITIONS"  # --definitions, for our filters child


# --- the corpus -------------------------------------------------------------------------------------------


def prepared_folder(mb: float, keep_repeats: bool, corpus: str = "bench") -> Path:
    return WORK / f"{'' if corpus == 'bench' else corpus + '-'}{mb:g}mb{'' if keep_repeats else '-unique'}"


def prepare(mb: float, keep_repeats: bool = False, corpus: str = "bench") -> Path:
    """The first ``mb`` MB of ``corpus`` as ``input/docs.jsonl`` (datatrove), ``documents/`` and ``gold/``
    partitions (ours), each text once unless ``keep_repeats``; reused when present."""
    folder = prepared_folder(mb, keep_repeats, corpus)
    source_folder, build_flag = CORPORA[corpus]
    done = folder / "PREPARED.json"
    if done.exists():
        return folder
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    from beam_pipeline.records.hashing import bucket_of, content_hash
    from beam_pipeline.storage.layers import part_name
    from beam_pipeline.records.normalize import normalize_text
    from beam_pipeline.storage.schemas import GOLD

    if not (source_folder / "BUILD.json").exists():
        subprocess.run([sys.executable, str(REPO / "bench" / "build_corpus.py"), *([build_flag] if build_flag else [])],
                       check=True)
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "input").mkdir(parents=True)
    files = sorted(glob.glob(str(source_folder / "*" / "*.jsonl.zst")))
    budget, rows, seen, repeats = int(mb * 1e6), [], set(), 0
    for path in files:
        source = os.path.basename(os.path.dirname(path))
        with open(path, "rb") as f:
            data = zstandard.ZstdDecompressor().stream_reader(f).read()
        for line in data.splitlines():
            record = json.loads(line)
            if not keep_repeats:
                key = content_hash(normalize_text(record["text"]))  # exact dedup's key
                if key in seen:
                    repeats += 1
                    continue
                seen.add(key)
            rows.append({"doc_id": f"{source}/{record['id']}", "source": source, "text": record["text"]})
            budget -= len(record["text"].encode("utf-8"))
            if budget <= 0:
                break
        if budget <= 0:
            break
    if budget > 0:
        raise SystemExit(f"{corpus} holds only {(int(mb * 1e6) - budget) / 1e6:.1f} MB of "
                         f"{'' if keep_repeats else 'distinct '}text, less than --mb {mb:g}")
    with open(folder / "input" / "docs.jsonl", "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps({"id": row["doc_id"], "text": row["text"]}) + "\n")
    rows.sort(key=lambda r: r["doc_id"])
    documents_schema = pa.schema([("doc_id", pa.string()), ("source", pa.string()), ("source_rank", pa.int32()),
                                  ("date", pa.string()), ("text", pa.string())])
    for name, schema, extra in (("documents", documents_schema, {"source_rank": 1, "date": None}),
                                ("gold", GOLD, {"domain": "docs"})):
        (folder / name).mkdir()
        for i in range(PARTITIONS):
            part = [{**{k: r[k] for k in ("doc_id", "source", "text")}, **extra}
                    for r in rows if bucket_of(r["doc_id"], PARTITIONS) == i]
            table = pa.Table.from_pylist(part, schema=schema) if name == "documents" else pa.Table.from_pylist(
                [{f.name: r.get(f.name) for f in schema} for r in part], schema=schema)
            pq.write_table(table, folder / name / part_name(i, PARTITIONS))
    stats = {"documents": len(rows), "bytes": sum(len(r["text"].encode("utf-8")) for r in rows),
             "repeats_left_out": None if keep_repeats else repeats,
             "corpus_build": json.loads((source_folder / "BUILD.json").read_text()).get("corpus_digest")}
    done.write_text(json.dumps(stats))
    return folder


# --- one side of one step, in the child process --------------------------------------------------------------


def datatrove_step(step: str, folder: Path, out: Path) -> None:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader

    def run(pipeline, tasks=PARTITIONS, name="x"):
        # "fork", not its default "forkserver": the pool's workers are then this process's children, waited
        # for when the pool closes, so their CPU seconds reach RUSAGE_CHILDREN (a forkserver's do not); it
        # also spares each worker the imports a forkserver child repeats (less CPU for datatrove)
        LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=min(tasks, PARTITIONS),
                              logging_dir=str(out / "logs" / name), start_method="fork").run()

    def reader():
        # two files would let 2 tasks read in parallel: split the JSONL in 2 once
        return JsonlReader(str(folder / "input" / "split"), glob_pattern="*.jsonl")

    split_input(folder)
    if step == "filters":
        from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter, GopherQualityFilter,
                                                GopherRepetitionFilter)
        from datatrove.pipeline.formatters import PIIFormatter

        run([reader(), GopherRepetitionFilter(), GopherQualityFilter(), C4QualityFilter(), FineWebQualityFilter(),
             PIIFormatter()])
    elif step == "minhash":
        from datatrove.pipeline.dedup import (MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupFilter,
                                              MinhashDedupSignature)
        from datatrove.pipeline.dedup.minhash import MinhashConfig
        from datatrove.pipeline.writers import JsonlWriter

        config = MinhashConfig()  # 5-grams, 14 buckets x 8 hashes
        run([reader(), MinhashDedupSignature(output_folder=str(out / "signatures"), config=config)], name="sig")
        run([MinhashDedupBuckets(input_folder=str(out / "signatures"), output_folder=str(out / "buckets"),
                                 config=config)], tasks=config.num_buckets, name="buckets")
        run([MinhashDedupCluster(input_folder=str(out / "buckets"), output_folder=str(out / "remove_ids"),
                                 config=config)], tasks=1, name="cluster")
        run([reader(), MinhashDedupFilter(input_folder=str(out / "remove_ids")),
             JsonlWriter(str(out / "deduped"))], name="filter")
    elif step == WHOLE:
        from datatrove.pipeline.dedup import (MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupFilter,
                                              MinhashDedupSignature)
        from datatrove.pipeline.dedup.minhash import MinhashConfig
        from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter, GopherQualityFilter,
                                                GopherRepetitionFilter)
        from datatrove.pipeline.formatters import PIIFormatter
        from datatrove.pipeline.readers import JsonlReader as Reader
        from datatrove.pipeline.tokens import DocumentTokenizer
        from datatrove.pipeline.writers import JsonlWriter

        config = MinhashConfig()  # 5-grams, 14 buckets x 8 hashes
        kept = str(out / "filtered")
        # the FineWeb recipe's shape: filter + PII, write what is kept and sign it (one pass), buckets, clusters,
        # then read the kept documents again, drop the duplicates and tokenize the rest. Uncompressed JSONL in
        # between (its default, gzip, would cost datatrove more CPU).
        run([reader(), GopherRepetitionFilter(), GopherQualityFilter(), C4QualityFilter(), FineWebQualityFilter(),
             PIIFormatter(), JsonlWriter(kept, compression=None),
             MinhashDedupSignature(output_folder=str(out / "signatures"), config=config)], name="filter-sign")
        run([MinhashDedupBuckets(input_folder=str(out / "signatures"), output_folder=str(out / "buckets"),
                                 config=config)], tasks=config.num_buckets, name="buckets")
        run([MinhashDedupCluster(input_folder=str(out / "buckets"), output_folder=str(out / "remove_ids"),
                                 config=config)], tasks=1, name="cluster")
        run([Reader(kept, glob_pattern="*.jsonl"), MinhashDedupFilter(input_folder=str(out / "remove_ids")),
             DocumentTokenizer(output_folder=str(out / "tokens"), tokenizer_name_or_path=str(TOKENIZER),
                               eos_token="<|endoftext|>")], name="dedup-tokenize")
    elif step == "tokenize":
        from datatrove.pipeline.tokens import DocumentTokenizer

        run([reader(), DocumentTokenizer(output_folder=str(out / "tokens"), tokenizer_name_or_path=str(TOKENIZER),
                                         eos_token="<|endoftext|>")])


#: Our whole job's config: the work of datatrove's (``datatrove_step(WHOLE)``) as a user writes it. The
#: heuristics stage computes datatrove's definitions (``reference``) and the policy's presets apply its four
#: filter families with its thresholds; PII counted (``pii``) and redacted in the gold text (``select``);
#: MinHash with datatrove's 14 x 8 bands on word 5-grams, candidates verified on their signatures
#: (datatrove verifies none), no line counting; every kept document tokenized, packed and sharded. Our job
#: also does what datatrove's does not: exact dedup, layers and ledgers, the dataset's manifest.
WHOLE_CONFIG = """\
name: side-by-side
output_root: {root}
seed: 20261202
sources:
  - name: docs
    uri: {inputs}/*.jsonl
    format: jsonl
    rank: 1
    license: mixed
    domain: docs
near_dedup:
  enabled: true
  method: minhash
  shingles: {{kind: word, size: 5}}
  minhash: {{num_perm: 112, threshold: 0.7, bands: 14, rows: 8}}
{verification}policy:
  drop_exact_duplicates: true
  drop_near_duplicates: true
  min_chars: 1
  max_chars: 100000000
  redact: {{enabled: true, kinds: [email, ip]}}
  presets: [gopher_repetition, gopher_quality, c4, fineweb]
  preset_definition: reference
cascade: [heuristics, pii]
heuristics: {{default_language: en, definitions: [reference]}}
pii: {{kinds: [email, ip]}}
layout:
  min_partitions: {partitions}
"""


#: ``near_dedup``'s verification and line handling in :data:`WHOLE_CONFIG`: datatrove's check (candidates
#: verified on their signatures only, no line counting), or (``ours-defaults``) the project's defaults.
SIGNATURE_ONLY = "  verify: signature\n  lines: {enabled: false}\n"
NEAR_DEDUP_DEFAULTS = ""


def whole_config(folder: Path, out: Path, near_dedup_defaults: bool = False) -> Path:
    sys.path.insert(0, str(REPO / "bench"))
    from build_corpus import TOKENIZE_BLOCK  # the bench corpus's tokenize settings (8,192-token sequences)

    path = out / "corpus.yaml"
    verification = NEAR_DEDUP_DEFAULTS if near_dedup_defaults else SIGNATURE_ONLY
    path.write_text(WHOLE_CONFIG.format(root=out / "root", inputs=folder / "input" / "split", partitions=PARTITIONS,
                                        verification=verification)
                    + TOKENIZE_BLOCK.format(tokenizer=TOKENIZER))
    return path


def split_input(folder: Path) -> Path:
    """The JSONL in ``PARTITIONS`` files (every PARTITIONS-th line): datatrove's tasks read one each, and our
    job reads the same files."""
    split = folder / "input" / "split"
    if not split.exists():
        split.mkdir()
        lines = (folder / "input" / "docs.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
        for i in range(PARTITIONS):
            (split / f"part-{i}.jsonl").write_text("".join(lines[i::PARTITIONS]), encoding="utf-8")
    return split


def ours_step(step: str, folder: Path, out: Path, near_dedup_defaults: bool = False) -> None:
    if step == WHOLE:
        split_input(folder)
        # what a user runs: the CLI in its own process (its DirectRunner's worker processes are its children)
        config = whole_config(folder, out, near_dedup_defaults)
        done = subprocess.run([sys.executable, "-m", "beam_pipeline", "run", "--config", str(config),
                               "--progress_interval", "0"], cwd=REPO, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"beam_pipeline run failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        metrics = json.loads(sorted((out / "root" / "runs").glob("*/metrics.json"))[-1].read_text())
        (out / "metrics.json").write_text(json.dumps(metrics))
    elif step == "filters":
        from beam_pipeline.config.corpus import HeuristicsConfig, PiiConfig
        from beam_pipeline.filters import heuristics, pii

        definitions = {"project": ("project",), "reference": ("reference",), "both": ("project", "reference")}
        options = {**HeuristicsConfig().score_options(),
                   "definitions": definitions[os.environ.get(DEFINITIONS_VARIABLE, "project")]}
        kinds = PiiConfig().kinds
        with open(folder / "input" / "docs.jsonl", encoding="utf-8") as f:
            for line in f:
                text = json.loads(line)["text"]
                heuristics.score(text, "en", **options)
                pii.counts(text, kinds)
                pii.redact(text)
    elif step == "minhash":
        sys.path.insert(0, str(REPO / "bench"))
        from bench_near_dedup_stage import run_stage

        from beam_pipeline.dedup.config import NearDedupConfig

        config = NearDedupConfig.model_validate({
            "enabled": True, "method": "minhash", "shingles": {"kind": "word", "size": 5},
            "minhash": {"num_perm": 112, "threshold": 0.7}, "verify": "signature", "lines": {"enabled": False}})
        run_stage(str(out), config, sorted(glob.glob(str(folder / "documents" / "part-*.parquet"))))
    elif step == "tokenize":
        import apache_beam as beam
        from apache_beam.options.pipeline_options import PipelineOptions

        from beam_pipeline.build.build_graph import StageTransform
        from beam_pipeline.config.corpus import TokenizeConfig
        from beam_pipeline.storage.layers import Layer
        from beam_pipeline.transforms.layer_io import LayerSpec
        from beam_pipeline.transforms.tokenize_shard import SHARDS, TokenizePackShard, inspect_tokenizer

        config = TokenizeConfig(tokenizer=str(TOKENIZER), eos_token="<|endoftext|>", pad_token="<|pad|>",
                                seq_len=8192)
        info = inspect_tokenizer(config)
        gold = tuple(sorted(glob.glob(str(folder / "gold" / "part-*.parquet"))))
        layer = Layer(str(out), "tokenize", "bench")
        spec = LayerSpec(layer=layer, version="bench", config={}, inputs={}, outputs={}, partitions=len(gold),
                         rows_match={}, max_dead_letter_fraction=1.0, finalize=None)

        def expand(pbegin, layer):
            return pbegin | TokenizePackShard(config, info, seed=0, directory=layer.output_path(SHARDS),
                                              gold_paths=gold)

        options = PipelineOptions(["--runner=DirectRunner", "--direct_running_mode=in_memory"])
        with beam.Pipeline(options=options) as p:
            _ = p | "Stage" >> StageTransform(spec, expand)


def child(side: str, step: str, folder: Path, out: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if side == "datatrove":
        datatrove_step(step, folder, out)
    else:
        ours_step(step, folder, out, near_dedup_defaults=side == DEFAULTS_SIDE)
    peak = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    print(json.dumps({"peak_rss_mb": round(peak / 1024), "detail": details(side, step, out)}))


def details(side: str, step: str, out: Path) -> dict:
    """What the whole job did: our per-stage CPU seconds and counts (metrics.json), datatrove's per-stage
    stats (its logging folders)."""
    if step != WHOLE:
        return {}
    if side != "datatrove":
        metrics = json.loads((out / "metrics.json").read_text())
        return {"cpu_seconds": metrics.get("cpu_seconds"), "timing_seconds": metrics.get("timing_seconds"),
                "stages": {stage["name"]: {k: v for k, v in stage.get("counts", {}).items() if k != "by_source"}
                           for stage in metrics.get("stages") or [] if isinstance(stage, dict) and "name" in stage}}
    found = {}
    for stats in sorted((out / "logs").glob("*/stats.json")):
        found[stats.parent.name] = [{"name": s.get("name"), "stats": s.get("stats")}
                                    for s in json.loads(stats.read_text())]
    return found


# --- the parent: interleaved runs, medians, the report ------------------------------------------------------


def measure(side: str, step: str, folder: Path, datatrove_python: str, label: str = "") -> dict:
    out = WORK / "out" / f"{side}-{step}{'-' + label if label else ''}"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    python = datatrove_python if side == "datatrove" else sys.executable
    done = subprocess.run([python, __file__, "--child", side, step, str(folder), str(out)], cwd=REPO,
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{side} {step} failed:\n{done.stderr[-4000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    shutil.rmtree(out, ignore_errors=True)
    reported = json.loads(done.stdout.strip().splitlines()[-1])
    return {"cpu_seconds": round(cpu, 2), "wall_seconds": round(wall, 2), "peak_rss_mb": reported["peak_rss_mb"],
            "detail": reported.get("detail") or {}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=20, help="MB of text from the bench corpus (default 20)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", default=WHOLE,
                        help=f"{WHOLE} (each side's whole job, the default) and/or the steps alone: "
                             f"{','.join(STEPS)} (comma-separated)")
    parser.add_argument("--datatrove-python", default=str(REPO / "bench" / "work" / "datatrove-venv" / "bin" / "python"),
                        help="the bench-only environment with datatrove (make bench-side-by-side installs it)")
    parser.add_argument("--label", default="", help="suffix of the result files (side-by-side-<date>-<label>)")
    parser.add_argument("--definitions", choices=("project", "reference", "both"), default="project",
                        help="the heuristics definitions our filters step computes (default: the stage's default)")
    parser.add_argument("--near-dedup-defaults", action="store_true",
                        help=f"also run our whole job with near dedup's default verification and lines "
                             f"({DEFAULTS_SIDE}), interleaved: what they cost over signature-only verification")
    parser.add_argument("--corpus", choices=sorted(CORPORA), default="bench",
                        help="bench: build_corpus.py's (about 143 MB of distinct text); scale-xl: build_corpus.py "
                             "--scale-xl's (381 MB of distinct text)")
    parser.add_argument("--keep-repeats", action="store_true",
                        help="keep records whose text came before (by default each text is in the input once)")
    parser.add_argument("--child", nargs=4, metavar=("SIDE", "STEP", "FOLDER", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--prepare", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--prepare-keep-repeats", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--prepare-corpus", default="bench", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.prepare:
        prepare(args.prepare, args.prepare_keep_repeats, args.prepare_corpus)
        return 0
    if args.child:
        side, step, folder, out = args.child
        child(side, step, Path(folder), Path(out))
        return 0
    steps = [s for s in args.steps.split(",") if s]
    unknown = set(steps) - {WHOLE, *STEPS}
    if unknown:
        parser.error(f"unknown steps {sorted(unknown)}")
    os.environ[DEFINITIONS_VARIABLE] = args.definitions  # inherited by the children
    if args.near_dedup_defaults and WHOLE not in steps:
        parser.error(f"--near-dedup-defaults needs the {WHOLE} step")
    folder = prepared_folder(args.mb, args.keep_repeats, args.corpus)
    # in a subprocess: a child forked from a parent that held the corpus would inherit its peak RSS
    subprocess.run([sys.executable, __file__, "--prepare", str(args.mb), "--prepare-corpus", args.corpus,
                    *(["--prepare-keep-repeats"] if args.keep_repeats else [])], cwd=REPO, check=True)
    split_input(folder)
    stats = json.loads((folder / "PREPARED.json").read_text())
    stats["corpus_build"] = json.loads((CORPORA[args.corpus][0] / "BUILD.json").read_text()).get("corpus_digest")
    stats["corpus"] = args.corpus
    mb = stats["bytes"] / 1e6
    def sides_of(step: str) -> tuple[str, ...]:
        return (*SIDES, DEFAULTS_SIDE) if step == WHOLE and args.near_dedup_defaults else SIDES

    runs: dict = {step: {side: [] for side in sides_of(step)} for step in steps}
    load = [os.getloadavg()[0]]
    for run in range(args.runs):
        for step in steps:
            for side in (sides_of(step) if run % 2 == 0 else sides_of(step)[::-1]):
                result = measure(side, step, folder, args.datatrove_python, args.label)
                runs[step][side].append(result)
                print(f"run {run + 1} {step:9s} {side:13s} cpu {result['cpu_seconds']:7.1f} s  wall "
                      f"{result['wall_seconds']:6.1f} s  {mb / result['cpu_seconds']:5.2f} MB/s/core  "
                      f"peak {result['peak_rss_mb']} MB", flush=True)
                load.append(os.getloadavg()[0])
    summary = summarize(runs, mb)
    command = " ".join([".venv/bin/python bench/bench_side_by_side.py", *(sys.argv[1:] if argv is None else argv)])
    report = {"command": command, "date": datetime.date.today().isoformat(), "corpus": stats, "mb": round(mb, 2),
              "definitions": args.definitions, "repeats_kept": args.keep_repeats,
              "cores": os.cpu_count(), "load_average_1min": {"min": min(load), "max": max(load)},
              "python": platform.python_version(),
              "versions": {**versions(), "datatrove": datatrove_version(args.datatrove_python)}, "runs": runs, "summary": summary}
    RESULTS.mkdir(exist_ok=True)
    stem = RESULTS / f"side-by-side-{datetime.date.today():%Y%m%d}{'-' + args.label if args.label else ''}"
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    stem.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    return 0


def versions() -> dict:
    from importlib.metadata import version

    return {name: version(name) for name in ("apache-beam", "tokenizers", "tiktoken", "numpy")}


def datatrove_version(python: str) -> str:
    code = "from importlib.metadata import version; print(version('datatrove'))"
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def summarize(runs: dict, mb: float) -> dict:
    summary = {}
    for step, sides in runs.items():
        summary[step] = {side: {key: statistics.median(r[key] for r in results) for key in results[0]
                                if key != "detail"}
                         for side, results in sides.items()}
        for side in sides:
            summary[step][side]["mb_per_core_second"] = round(mb / summary[step][side]["cpu_seconds"], 2)
        summary[step]["cpu_ratio"] = round(summary[step]["datatrove"]["cpu_seconds"]
                                           / summary[step]["ours"]["cpu_seconds"], 2)
        if DEFAULTS_SIDE in sides:
            summary[step]["near_dedup_defaults"] = defaults_cost(sides["ours"], sides[DEFAULTS_SIDE])
    if all(step in runs for step in STEPS):
        total = {side: sum(summary[s][side]["cpu_seconds"] for s in STEPS) for side in SIDES}
        summary["end_to_end"] = {**{side: {"cpu_seconds": round(total[side], 2),
                                           "mb_per_core_second": round(mb / total[side], 2)} for side in SIDES},
                                 "cpu_ratio": round(total["datatrove"] / total["ours"], 2)}
    return summary


def defaults_cost(signature_only: list[dict], defaults: list[dict]) -> dict:
    """What near dedup's defaults cost over signature-only verification: the whole job's CPU (medians) and the
    ``near_dedup`` stage's (metrics.json), and what each removed (the stage's counts, the same in every run)."""
    def stage(results: list[dict], key: str) -> float:
        return statistics.median((r["detail"].get("cpu_seconds") or {}).get(key, 0.0) for r in results)

    def removed(results: list[dict]) -> list:
        counts = [(r["detail"].get("stages") or {}).get("near_dedup") or {} for r in results]
        return sorted({json.dumps({k: c[k] for k in ("in", "passed", "other") if k in c}, sort_keys=True)
                       for c in counts})

    whole = {name: statistics.median(r["cpu_seconds"] for r in results)
             for name, results in (("signature_only", signature_only), ("defaults", defaults))}
    near = {"signature_only": stage(signature_only, "near_dedup"), "defaults": stage(defaults, "near_dedup")}
    return {"whole_cpu_seconds": whole, "whole_overhead": round(whole["defaults"] / whole["signature_only"] - 1, 4),
            "near_dedup_cpu_seconds": near,
            "near_dedup_overhead": round(near["defaults"] / near["signature_only"] - 1, 4) if near["signature_only"]
            else None,
            "near_dedup_counts": {"signature_only": removed(signature_only), "defaults": removed(defaults)}}


def markdown(report: dict) -> str:
    s = report["summary"]
    lines = [f"# Side by side with datatrove, {report['date']}", "",
             f"Command: `{report['command']}`", "",
             f"{report['mb']} MB of text, {report['corpus']['documents']:,} documents (bench/build_corpus.py's {report['corpus'].get('corpus', 'bench')} corpus, "
             f"digest {report['corpus']['corpus_build']}); {report['cores']} cores, shared (1-min load average "
             f"{report['load_average_1min']['min']:.1f}-{report['load_average_1min']['max']:.1f}); "
             + ", ".join(f"{k} {v}" for k, v in report["versions"].items()) + ".",
             "",
             *([f"Each text once: {report['corpus']['repeats_left_out']:,} records whose text (normalized as our "
                "ingest does) came before were left out, so both sides do the same work on the same documents.", ""]
               if report["corpus"].get("repeats_left_out") is not None else
               ["Repeated texts kept (`--keep-repeats`): our ingest drops verbatim repeats before the filters, "
                "datatrove's filters score them.", ""]),
             "Medians of the interleaved runs. CPU: seconds of the whole process tree of each side's fresh "
             "subprocess (children included); MB/s/core = MB of text in / CPU seconds; ratio = datatrove CPU / "
             "our CPU.", ""]
    header = ["| step | datatrove CPU s | ours CPU s | datatrove MB/s/core | ours MB/s/core | ratio | "
              "datatrove wall s | ours wall s | datatrove peak RSS MB | ours peak RSS MB |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    if WHOLE in s:
        lines += ["**Whole job** (what users run): datatrove's executor with its four filter families, "
                  "`PIIFormatter`, the four MinHash stages (14 x 8) and `DocumentTokenizer` on what is kept; ours: "
                  "`python -m beam_pipeline run` with `WHOLE_CONFIG` (the reference definitions' presets, PII, "
                  "MinHash 14 x 8 verified on signatures, tokenize + pack + shard what is kept; also exact dedup, "
                  "layers, ledgers, the dataset).", "", *header]
        lines.append(row(WHOLE, s[WHOLE]))
        lines += ["", *whole_breakdown(report), ""]
        if "near_dedup_defaults" in s[WHOLE]:
            lines += [*defaults_table(s[WHOLE]["near_dedup_defaults"]), ""]
    per_step = [k for k in s if k not in ("end_to_end", WHOLE)]
    if per_step:
        lines += ["**Per step** (each step alone, not a whole job: each side of each step in its own process; our "
                  f"filters compute the `{report.get('definitions', 'project')}` heuristics definitions):", "",
                  *header]
    for step in per_step:
        lines.append(row(step, s[step]))
    if "end_to_end" in s:
        d, o = s["end_to_end"]["datatrove"], s["end_to_end"]["ours"]
        lines.append(f"| sum of the steps (not a whole job) | {d['cpu_seconds']:.1f} | {o['cpu_seconds']:.1f} | "
                     f"{d['mb_per_core_second']:.2f} | {o['mb_per_core_second']:.2f} | "
                     f"{s['end_to_end']['cpu_ratio']:.2f}x | | | | |")
    lines += ["", "Every run:", "", "| run | step | side | CPU s | wall s | peak RSS MB |", "|---|---|---|---:|---:|---:|"]
    for step, sides in report["runs"].items():
        for side, results in sides.items():
            for i, r in enumerate(results):
                lines.append(f"| {i + 1} | {step} | {side} | {r['cpu_seconds']} | {r['wall_seconds']} | "
                             f"{r['peak_rss_mb']} |")
    return "\n".join(lines) + "\n"


def defaults_table(cost: dict) -> list[str]:
    whole, near = cost["whole_cpu_seconds"], cost["near_dedup_cpu_seconds"]
    lines = [f"**Near dedup's defaults against signature-only verification** (`{DEFAULTS_SIDE}`: the same whole "
             "job with near dedup's default `verify` and `lines`; medians of the interleaved runs):", "",
             "| | signature-only CPU s | defaults CPU s | defaults' cost |", "|---|---:|---:|---:|",
             f"| whole job | {whole['signature_only']:.1f} | {whole['defaults']:.1f} | "
             f"{cost['whole_overhead']:+.1%} |"]
    if cost["near_dedup_overhead"] is not None:
        lines.append(f"| near_dedup stage (metrics.json) | {near['signature_only']:.1f} | {near['defaults']:.1f} | "
                     f"{cost['near_dedup_overhead']:+.1%} |")
    lines += ["", "What near dedup counted (metrics.json, every run):", ""]
    for name, counts in cost["near_dedup_counts"].items():
        lines += [f"* {name}: " + "; ".join(f"`{c}`" for c in counts)]
    return lines


def row(step: str, summary: dict) -> str:
    d, o = summary["datatrove"], summary["ours"]
    return (f"| {step} | {d['cpu_seconds']:.1f} | {o['cpu_seconds']:.1f} | {d['mb_per_core_second']:.2f} | "
            f"{o['mb_per_core_second']:.2f} | {summary['cpu_ratio']:.2f}x | {d['wall_seconds']:.1f} | "
            f"{o['wall_seconds']:.1f} | {d['peak_rss_mb']:.0f} | {o['peak_rss_mb']:.0f} |")


def whole_breakdown(report: dict) -> list[str]:
    """Where our whole job's CPU goes: the median over runs of each stage's CPU seconds (metrics.json)."""
    per_run = [r["detail"].get("cpu_seconds") or {} for r in report["runs"][WHOLE]["ours"]]
    stages = sorted({k for run in per_run for k in run if k != "total"},
                    key=lambda k: -statistics.median(run.get(k, 0.0) for run in per_run))
    total = statistics.median(sum(run.values()) - run.get("total", 0.0) for run in per_run) or 1.0
    lines = ["Our whole job's CPU seconds by stage (`runs/<run_id>/metrics.json` `cpu_seconds`, medians; the "
             "driver and its worker processes):", "", "| stage | CPU s | share |", "|---|---:|---:|"]
    for stage in stages:
        value = statistics.median(run.get(stage, 0.0) for run in per_run)
        if value >= 0.05:
            lines.append(f"| {stage} | {value:.1f} | {value / total:.0%} |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
