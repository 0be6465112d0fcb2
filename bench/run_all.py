#!/usr/bin/env python3
"""`make bench`: pipeline cost vs bare library cost of the spine, same run, same corpus.

1. ``build_corpus.ensure_corpus()`` (cached after the first run);
2. **pipeline**: in a child process, ``beam_pipeline.build.corpus_build.CorpusBuild`` on
   ``bench/work/corpus.yaml`` with ``--runner=DirectRunner
   --direct_running_mode=multi_processing --direct_num_workers=2`` and a fresh
   output root ``bench/work/out/run``. Wall seconds per stage come from the run's
   ``runs/<run_id>/metrics.json`` (``timing_seconds``), documents from the stage
   counts. CPU seconds per stage (driver process + the SDK worker processes it
   spawns and reaps) come from ``getrusage`` sampled in ``before_run``;
3. **bare**: in a child process pinned to one CPU (``sched_setaffinity``),
   tokenizers' thread pool off (``TOKENIZERS_PARALLELISM=false``), no Beam:

   * ingest: ``readers.iter_records`` + ``ingest.make_document`` (that is
     ``normalize.normalize_text`` + ``hashing.doc_id``/``content_hash``) over the
     snapshot's files, first occurrence per ``doc_id`` kept in a dict;
   * exact_dedup: the documents' content hashes grouped in a dict and
     ``exact_dedup.annotate_group`` (min representative) per group;
   * tokenize: the gold texts read back from the select layer's Parquet (read
     time reported apart), ``Tokenizer.encode_batch`` in batches of
     ``tokenize.batch_size``, ids to numpy, one ``np.concatenate`` with EOS;
4. per stage: pipeline MB/s per core = bytes / (wall seconds x 2 workers), bare
   MB/s on one core, overhead = bare rate / pipeline rate - 1 (goal <= 50%), and the
   same overhead from CPU seconds (robust when other processes share the cores);
5. ``bench/results/spine-<YYYYMMDD>.json`` and ``.md``; the table also goes into
   ``bench/README.md`` between the ``results`` markers.

``--profile`` adds a second, separate pipeline run (its timings are not used)
under ``py-spy`` (``pip install py-spy`` into the venv; not a project
requirement): one sampling profile per stage of the driver and its workers,
summarised by category in ``bench/results/spine-<YYYYMMDD>-profile.md``.

MB = 10^6 bytes of UTF-8 text: the ``text`` field of the input records for
ingest, the normalized text of the documents for exact_dedup (which itself only
reads their hashes), the gold text for tokenize.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
WORK = BENCH / "work"
RESULTS = BENCH / "results"
OUT = WORK / "out"
README = BENCH / "README.md"
WORKERS = 2
PIPELINE_ARGS = ["--runner=DirectRunner", "--direct_running_mode=multi_processing",
                 f"--direct_num_workers={WORKERS}"]
COMPARED = ("ingest", "exact_dedup", "tokenize")  # stages with a bare counterpart
MB = 1e6
GOAL = 0.5
MARK_START, MARK_END = "<!-- results:start -->", "<!-- results:end -->"

sys.path.insert(0, str(BENCH))


def log(msg: str) -> None:
    print(f"[bench] {msg}", flush=True)


def machine_busy_seconds() -> float:
    """CPU seconds all processes of the machine have used since boot (/proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def cpu_now() -> dict:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"driver": me.ru_utime + me.ru_stime, "workers": kids.ru_utime + kids.ru_stime,
            "machine": machine_busy_seconds(), "t": time.monotonic(),
            "driver_maxrss_kb": me.ru_maxrss, "workers_maxrss_kb": kids.ru_maxrss}


def others_share(start: dict, end: dict, own_cpu: float) -> float:
    """Share of the machine's cores used by other processes between two cpu_now() samples."""
    elapsed = (end["t"] - start["t"]) * (os.cpu_count() or 1)
    return max(0.0, (end["machine"] - start["machine"] - own_cpu) / elapsed) if elapsed > 0 else 0.0


def descendants(root: int) -> list[int]:
    """``root`` and every process it started, transitively (from /proc/<pid>/task/<tid>/children)."""
    pids, i = [root], 0
    while i < len(pids):
        pid, i = pids[i], i + 1
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    pids += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return pids


class RunnableSampler:
    """Counts the runnable (state R) threads of this process and its descendants, every interval.

    A thread waiting for the GIL, a lock, I/O or gRPC sleeps (state S), so the
    count is the parallelism the pipeline could use at that moment, whether or
    not other processes let it have the cores: a measure that survives CPU
    contention, unlike wall seconds.
    """

    def __init__(self, interval: float = 0.25):
        import threading

        self.interval = interval
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="runnable-sampler", daemon=True)
        self._me = None

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join()

    def _run(self):
        import threading

        self._me = threading.get_native_id()
        while not self._stop.wait(self.interval):
            self.samples.append((time.monotonic(), self._runnable()))

    def _runnable(self) -> int:
        count = 0
        for pid in descendants(os.getpid()):
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                if int(tid) == self._me:
                    continue
                try:
                    with open(f"/proc/{pid}/task/{tid}/stat") as f:
                        stat = f.read()
                except OSError:
                    continue
                if stat[stat.rindex(")") + 2] == "R":
                    count += 1
        return count


def parallelism(samples: list, start: float, end: float, cap: int = WORKERS) -> dict | None:
    """Mean of min(runnable threads, cap) between two instants, and the share of 0, 1, >= cap."""
    window = [n for t, n in samples if start <= t <= end]
    if not window:
        return None
    return {"mean": sum(min(n, cap) for n in window) / len(window), "samples": len(window),
            "share_0": sum(1 for n in window if n == 0) / len(window),
            "share_1": sum(1 for n in window if 0 < n < cap) / len(window),
            "share_full": sum(1 for n in window if n >= cap) / len(window)}


# --------------------------------------------------------------------------
# Child: the pipeline


def child_pipeline(root: str, result_path: str, profile_dir: str | None) -> None:
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_pipeline.build.corpus_build import CorpusBuild
    from beam_pipeline.config.corpus import load_config

    config = load_config(str(WORK / "corpus.yaml")).model_copy(update={"output_root": root})
    marks = [{"stage": "_start", "event": "start", **cpu_now()}]
    spy = {"proc": None}
    done = re.compile(r"^\[(\w+)\] done in ")

    def on_log(message: str) -> None:
        log(f"pipeline: {message}")
        match = done.match(message)
        if match:
            marks.append({"stage": match.group(1), "event": "done", **cpu_now()})

    def stop_spy():
        if spy["proc"] is not None:
            spy["proc"].send_signal(signal.SIGINT)
            try:
                spy["proc"].wait(timeout=120)
            except subprocess.TimeoutExpired:
                spy["proc"].kill()
            spy["proc"] = None

    def before_run(stage, _pipeline):
        stop_spy()
        marks.append({"stage": stage, "event": "run", **cpu_now()})
        if profile_dir:
            spy["proc"] = subprocess.Popen(
                [py_spy(), "record", "--pid", str(os.getpid()), "--subprocesses",
                 "--rate", "100", "--format", "raw", "--output", os.path.join(profile_dir, f"{stage}.txt")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)  # let py-spy attach before the job starts

    build = CorpusBuild(config, PipelineOptions(PIPELINE_ARGS), before_run=before_run, log=on_log)
    sampler = RunnableSampler().start()
    result = build.run()
    sampler.stop()
    stop_spy()
    marks.append({"stage": "_end", "event": "end", **cpu_now()})
    metrics = json.loads(Path(result.metrics_path).read_text())
    layers = {s.stage: s.layer.path for s in result.stages}
    Path(result_path).write_text(json.dumps({
        "run_id": result.run_id, "snapshot_id": result.snapshot_id, "dataset_id": result.dataset_id,
        "metrics_path": result.metrics_path, "metrics": metrics, "marks": marks, "layers": layers,
        "runnable_samples": sampler.samples,
        "shard_documents": sum(shard["documents"] for shard in result.manifest["shards"]),
        "tokenize_batch_size": config.tokenize.batch_size}, indent=1))


def py_spy() -> str:
    found = shutil.which("py-spy", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if not found:
        raise SystemExit("--profile needs py-spy: .venv/bin/pip install py-spy (not a project requirement)")
    return found


# --------------------------------------------------------------------------
# Child: the bare library cost


BARE_LOAD: dict[str, float] = {}


def timed(fn, label: str | None = None):
    before = cpu_now()
    t0, c0 = time.perf_counter(), time.process_time()
    value = fn()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if label:
        BARE_LOAD[label] = others_share(before, cpu_now(), cpu)
    return value, wall, cpu


def child_bare(root: str, pipeline_path: str, result_path: str) -> None:
    import numpy as np
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer

    from beam_pipeline.config.corpus import load_config
    from beam_pipeline.sources.readers import BadRecord, iter_records
    from beam_pipeline.sources.snapshot import verify_file
    from beam_pipeline.transforms.exact_dedup import annotate_group, member_of
    from beam_pipeline.transforms.ingest import make_document

    run = json.loads(Path(pipeline_path).read_text())
    config = load_config(str(WORK / "corpus.yaml"))
    sources = {s.name: s for s in config.sources}
    manifest = json.loads(Path(root, "snapshots", f"{run['snapshot_id']}.json").read_text())
    files = [(name, entry) for name, src in sorted(manifest["sources"].items()) for entry in src["files"]]
    out = {"cpu_affinity": sorted(os.sched_getaffinity(0)),
           "env": {k: os.environ.get(k) for k in ("TOKENIZERS_PARALLELISM", "RAYON_NUM_THREADS")}}

    # -- ingest ---------------------------------------------------------------
    _, verify_s, _ = timed(lambda: [verify_file(e["path"], e["checksum"]) for _, e in files])

    def ingest():
        stats = {"records": 0, "bad": 0, "empty": 0, "text_bytes": 0}
        documents = {}
        for name, entry in files:
            source, path = sources[name], entry["path"]
            for record in iter_records(lambda: open(path, "rb"), path, source.format,
                                       text_field=source.fields.text, url_field=source.fields.url,
                                       date_field=source.fields.date, license_field=source.fields.license,
                                       id_field=source.fields.id,
                                       max_record_bytes=config.ingest.max_record_bytes):
                stats["records"] += 1
                if isinstance(record, BadRecord):
                    stats["bad"] += 1
                    continue
                stats["text_bytes"] += len(record.text.encode("utf-8"))
                document = make_document(record, source, path)
                if document is None:
                    stats["empty"] += 1
                    continue
                documents.setdefault(document["doc_id"], document)  # files and lines in order: first wins
        return stats, documents

    log("bare: ingest ...")
    (stats, documents), wall, cpu = timed(ingest, "ingest")
    out["ingest"] = {**stats, "documents": len(documents), "seconds": wall, "cpu_seconds": cpu,
                     "verify_sha256_seconds": verify_s}

    # -- exact dedup ----------------------------------------------------------
    doc_text_bytes = sum(len(d["text"].encode("utf-8")) for d in documents.values())

    def exact():
        groups = {}
        for d in documents.values():
            groups.setdefault(d["content_hash"], []).append(member_of(d))
        rows = [row for key, members in groups.items() for row in annotate_group(key, members)]
        return len(groups), sum(1 for r in rows if r["is_duplicate"]), len(rows)

    log("bare: exact_dedup ...")
    (n_groups, n_dups, n_rows), wall, cpu = timed(exact, "exact_dedup")
    out["exact_dedup"] = {"documents": n_rows, "groups": n_groups, "duplicates": n_dups,
                          "text_bytes": doc_text_bytes, "seconds": wall, "cpu_seconds": cpu}
    del documents

    # -- tokenize -------------------------------------------------------------
    select_layer = Path(run["layers"]["select"])
    ledger = json.loads((select_layer / "_LEDGER.json").read_text())
    parts = [select_layer / "gold" / p["name"] for p in ledger["outputs"]["gold"]["parts"]]
    texts, read_s, _ = timed(lambda: [t for p in parts for t in pq.read_table(p, columns=["text"])
                                      .column("text").to_pylist()])
    tokenizer = Tokenizer.from_file(config.tokenize.tokenizer)
    eos = np.asarray([tokenizer.token_to_id(config.tokenize.eos_token)], dtype=np.uint32)
    batch = run["tokenize_batch_size"]
    dtype = np.uint16 if tokenizer.get_vocab_size(with_added_tokens=True) <= 1 << 16 else np.uint32

    def tokenize():
        pieces = []
        for i in range(0, len(texts), batch):
            for encoding in tokenizer.encode_batch(texts[i:i + batch], add_special_tokens=False):
                pieces.append(np.asarray(encoding.ids, dtype=np.uint32))
                pieces.append(eos)
        return np.concatenate(pieces).astype(dtype)

    log(f"bare: tokenize {len(texts)} gold documents ...")
    stream, wall, cpu = timed(tokenize, "tokenize")
    out["tokenize"] = {"documents": len(texts), "text_bytes": sum(len(t.encode("utf-8")) for t in texts),
                       "tokens_with_eos": int(stream.size), "seconds": wall, "cpu_seconds": cpu,
                       "read_gold_parquet_seconds": read_s, "batch_size": batch}
    for stage, share in BARE_LOAD.items():
        out[stage]["others_load"] = share
    Path(result_path).write_text(json.dumps(out, indent=1))


# --------------------------------------------------------------------------
# Parent


def sh(cmd: str) -> str:
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, cwd=REPO).stdout.strip()
    except OSError:
        return ""


def machine() -> dict:
    import apache_beam
    import pyarrow
    import tokenizers

    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines()
                  if line.startswith("model name")), platform.processor())
    mem_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                  if line.startswith("MemTotal"))
    import hashlib

    code = hashlib.sha256()
    for path in sorted((REPO / "beam_pipeline").rglob("*.py")):
        code.update(path.relative_to(REPO).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return {"nproc": os.cpu_count(), "cpu_model": model, "ram_gib": round(mem_kb / 2**20, 1),
            "os": sh(". /etc/os-release && echo $PRETTY_NAME"), "kernel": platform.release(),
            "python": platform.python_version(), "apache_beam": apache_beam.__version__,
            "pyarrow": pyarrow.__version__, "tokenizers": tokenizers.__version__,
            "git_commit": sh("git rev-parse HEAD"),
            "git_dirty_files": len([l for l in sh("git status --porcelain").splitlines() if l.strip()]),
            "beam_pipeline_code_sha256": code.hexdigest()}


def run_child(args: list[str], *, env: dict | None = None, pin_cpu: int | None = None, label: str) -> float:
    cmd = [sys.executable, str(Path(__file__).resolve()), *args]
    preexec = (lambda: os.sched_setaffinity(0, {pin_cpu})) if pin_cpu is not None else None
    started = time.monotonic()
    proc = subprocess.run(cmd, env={**os.environ, **(env or {})}, preexec_fn=preexec, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"[bench] {label} failed (exit {proc.returncode}): {shlex.join(cmd)}")
    return time.monotonic() - started


def stage_rows(pipe: dict, bare: dict) -> list[dict]:
    timing = pipe["metrics"]["timing_seconds"]
    counts = {s["name"]: s["counts"] for s in pipe["metrics"]["stages"]}
    marks = pipe["marks"]
    cpu, load, par = {}, {}, {}
    for i, mark in enumerate(marks):
        if mark["event"] != "run":
            continue
        done = next(m for m in marks[i + 1:] if m["event"] == "done" and m["stage"] == mark["stage"])
        following = next(m for m in marks[i + 1:] if m["event"] in ("run", "end"))
        # driver: until the stage is done; workers: until the next job starts (they are reaped late)
        cpu[mark["stage"]] = {"driver": done["driver"] - mark["driver"],
                              "workers": following["workers"] - mark["workers"]}
        load[mark["stage"]] = others_share(mark, done, sum(cpu[mark["stage"]].values()))
        par[mark["stage"]] = parallelism(pipe.get("runnable_samples", []), mark["t"], done["t"])
    rows = []
    for stage in [s["name"] for s in pipe["metrics"]["stages"]]:
        row = {"stage": stage, "wall_seconds": timing.get(stage), "docs_in": counts[stage]["in"],
               "docs_passed": counts[stage]["passed"], "cpu_seconds": cpu.get(stage),
               "others_load": load.get(stage), "parallelism": par.get(stage),
               "core_utilization": sum(cpu[stage].values()) / (timing[stage] * WORKERS) if stage in cpu else None}
        if stage in COMPARED:
            b = bare[stage]
            nbytes = b["text_bytes"]
            wall = timing[stage]
            pipe_rate = nbytes / MB / (wall * WORKERS)
            bare_rate = nbytes / MB / b["seconds"]
            pipe_cpu = sum(cpu[stage].values())
            row.update({
                "bytes": nbytes, "docs": counts[stage]["in"],
                "pipeline_docs_per_s_per_core": counts[stage]["in"] / (wall * WORKERS),
                "pipeline_mb_per_s_per_core": pipe_rate,
                "bare_seconds": b["seconds"], "bare_cpu_seconds": b["cpu_seconds"],
                "bare_docs_per_s": b["documents"] / b["seconds"] if stage != "ingest" else
                b["records"] / b["seconds"],
                "bare_mb_per_s": bare_rate,
                "overhead": bare_rate / pipe_rate - 1,
                "pipeline_cpu_seconds": pipe_cpu,
                "overhead_cpu": pipe_cpu / b["cpu_seconds"] - 1,
                "bare_others_load": b.get("others_load"),
            })
            if par.get(stage):
                # On an idle machine the pipeline would run its CPU seconds at about this
                # parallelism, and the bare run its CPU seconds on one core: a rough projection.
                projected = pipe_cpu / max(par[stage]["mean"], 1e-9)
                row["projected_idle_wall_seconds"] = projected
                row["projected_overhead"] = projected * WORKERS / b["cpu_seconds"] - 1
        rows.append(row)
    return rows


def check_consistency(pipe: dict, bare: dict) -> list[str]:
    """The bare pass must have done the same work as the pipeline: compare the counts."""
    counts = {s["name"]: s["counts"] for s in pipe["metrics"]["stages"]}
    problems = []

    def same(what, a, b):
        if a != b:
            problems.append(f"{what}: pipeline {a} != bare {b}")

    same("ingest records", counts["ingest"]["in"], bare["ingest"]["records"])
    same("ingest documents", counts["ingest"]["passed"], bare["ingest"]["documents"])
    same("exact_dedup documents", counts["exact_dedup"]["in"], bare["exact_dedup"]["documents"])
    same("tokenize documents", counts["tokenize"]["in"], bare["tokenize"]["documents"])
    if "shard_documents" in pipe:  # the tokenize counters are taken before the shuffle to the shards
        same("documents in the published shards vs tokenize passed", pipe["shard_documents"],
             counts["tokenize"]["passed"])
    if "select" in counts:
        same("exact duplicates dropped", counts["select"]["filtered"].get("exact_duplicate", 0),
             bare["exact_dedup"]["duplicates"])
    return problems


def fmt(value, digits=2) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def markdown(report: dict) -> str:
    m, c = report["machine"], report["corpus"]
    rows = report["stages"]
    dirty = f" + {m['git_dirty_files']} uncommitted files" if m["git_dirty_files"] else ""
    lines = [
        f"### Spine benchmark, {report['date']}",
        "",
        f"Command: `{report['command']}` (pipeline options: `{' '.join(PIPELINE_ARGS)}`; "
        f"bare: one process pinned to one CPU, `TOKENIZERS_PARALLELISM=false`).",
        "",
        f"Machine: {m['nproc']} cores ({m['cpu_model']}), {m['ram_gib']} GiB RAM, {m['os']}, "
        f"Python {m['python']}, apache-beam {m['apache_beam']}, pyarrow {m['pyarrow']}, "
        f"tokenizers {m['tokenizers']}; git {m['git_commit'][:12]}{dirty}. "
        f"Load average (1 min) at start / end: {report['load_average']['start']} / "
        f"{report['load_average']['end']}.",
        "",
        f"Corpus: {c['stats']['text_bytes']['total'] / MB:.1f} MB of text "
        f"({c['stats']['unique_text_bytes'] / MB:.1f} MB unique pages + "
        f"{c['stats']['text_bytes']['docs-mirror'] / MB:.1f} MB mirror copies), "
        f"{sum(c['stats']['records'].values()):,} records in {len(c['files'])} JSONL.zst files, "
        f"digest `{c['corpus_digest'][:16]}`"
        f"{'' if c['matches_reference'] else ' (**differs from the reference corpus**)'}.",
        "",
        "**Wall clock** (what the brief asks): pipeline rates are per core, bytes / (stage wall seconds x "
        f"{WORKERS} workers); overhead = bare rate (one core) / pipeline rate per core - 1; goal <= {GOAL:.0%}.",
        "",
        "| stage | docs in | MB | pipeline wall s | pipeline docs/s/core | pipeline MB/s/core | bare s | "
        "bare docs/s | bare MB/s (1 core) | overhead |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    compared = [r for r in rows if r["stage"] in COMPARED]
    for r in compared:
        flag = "" if r["overhead"] <= GOAL else " ❌"
        lines.append(
            f"| {r['stage']} | {r['docs']:,} | {r['bytes'] / MB:.1f} | {fmt(r['wall_seconds'], 1)} | "
            f"{fmt(r['pipeline_docs_per_s_per_core'], 0)} | {fmt(r['pipeline_mb_per_s_per_core'])} | "
            f"{fmt(r['bare_seconds'], 1)} | {fmt(r['bare_docs_per_s'], 0)} | {fmt(r['bare_mb_per_s'])} | "
            f"{r['overhead']:+.0%}{flag} |")
    lines += [
        "",
        "**CPU seconds** (robust when other processes share the cores): pipeline = driver process + "
        "its SDK worker processes (getrusage); CPU overhead = pipeline CPU s / bare CPU s - 1. Runnable "
        f"threads = mean number of the pipeline's threads in state R (sampled every 0.25 s, capped at {WORKERS}): "
        "the parallelism it could use, even when it did not get the cores. Projected idle-machine wall = "
        "pipeline CPU s / runnable threads, and projected overhead = projected wall x "
        f"{WORKERS} / bare CPU s - 1 (a rough estimate). Others' load = CPU the rest of the machine used "
        "during the stage, as a share of all cores (/proc/stat).",
        "",
        "| stage | pipeline CPU s (driver + workers) | bare CPU s | CPU overhead | runnable threads (of 2) | "
        "projected idle wall s | projected overhead | others' load (pipeline / bare) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in compared:
        cpu = r["cpu_seconds"]
        flag = "" if r["overhead_cpu"] <= GOAL else " ❌"
        par = r.get("parallelism")
        proj = r.get("projected_overhead")
        lines.append(
            f"| {r['stage']} | {cpu['driver'] + cpu['workers']:.1f} ({cpu['driver']:.1f} + {cpu['workers']:.1f}) | "
            f"{r['bare_cpu_seconds']:.1f} | {r['overhead_cpu']:+.0%}{flag} | "
            f"{fmt(par['mean'] if par else None)} | {fmt(r.get('projected_idle_wall_seconds'), 1)} | "
            f"{'–' if proj is None else f'{proj:+.0%}'}{'' if proj is None or proj <= GOAL else ' ❌'} | "
            f"{r['others_load']:.0%} / {r['bare_others_load']:.0%} |")
    others = [r for r in rows if r["stage"] not in COMPARED]
    timing = report["pipeline"]["metrics"]["timing_seconds"]
    lines += ["", "Other pipeline stages (no bare counterpart): " + "; ".join(
        f"{r['stage']} {fmt(r['wall_seconds'], 1)} s wall"
        + (f", {sum(r['cpu_seconds'].values()):.0f} CPU s" if r["cpu_seconds"] else "")
        for r in others) + f". Whole build incl. snapshot: {fmt(timing['total'], 1)} s wall."]
    b = report["bare"]
    lines += ["", f"Bare details: ingest read {b['ingest']['records']:,} records "
              f"({b['ingest']['text_bytes'] / MB:.1f} MB) into {b['ingest']['documents']:,} documents "
              f"(sha256 verification of the inputs, not counted: {b['ingest']['verify_sha256_seconds']:.1f} s); "
              f"exact_dedup: {b['exact_dedup']['groups']:,} groups, {b['exact_dedup']['duplicates']:,} duplicates; "
              f"tokenize: {b['tokenize']['tokens_with_eos']:,} tokens incl. EOS, reading the gold Parquet "
              f"(not counted) took {b['tokenize']['read_gold_parquet_seconds']:.1f} s."]
    if report["consistency_problems"]:
        lines += ["", "**Consistency problems** (bare and pipeline did not do the same work): "
                  + "; ".join(report["consistency_problems"])]
    return "\n".join(lines) + "\n"


def update_readme(table: str) -> None:
    if not README.exists():
        return
    text = README.read_text()
    if MARK_START not in text or MARK_END not in text:
        return
    head, rest = text.split(MARK_START, 1)
    _, tail = rest.split(MARK_END, 1)
    README.write_text(f"{head}{MARK_START}\n{table}{MARK_END}{tail}")


def main() -> int:
    parser = argparse.ArgumentParser(description="Spine benchmark: pipeline vs bare library cost.")
    parser.add_argument("--profile", action="store_true",
                        help="also profile a second pipeline run with py-spy (per stage, by category)")
    parser.add_argument("--child", choices=["pipeline", "bare"], help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--pipeline-result", help=argparse.SUPPRESS)
    parser.add_argument("--profile-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "pipeline":
        child_pipeline(args.root, args.result, args.profile_dir)
        return 0
    if args.child == "bare":
        child_bare(args.root, args.pipeline_result, args.result)
        return 0

    started = time.monotonic()
    today = datetime.date.today().strftime("%Y%m%d")
    import build_corpus

    corpus = build_corpus.ensure_corpus()
    load_start = round(os.getloadavg()[0], 2)
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    root = OUT / "run"
    pipe_json, bare_json = OUT / "pipeline.json", OUT / "bare.json"

    log(f"pipeline: CorpusBuild with {' '.join(PIPELINE_ARGS)} -> {root.relative_to(REPO)}")
    run_child(["--child", "pipeline", "--root", str(root), "--result", str(pipe_json)], label="pipeline run")
    pipe = json.loads(pipe_json.read_text())
    log(f"pipeline timings: {pipe['metrics']['timing_seconds']}")

    cpu = sorted(os.sched_getaffinity(0))[0]
    log(f"bare: one process pinned to CPU {cpu}")
    run_child(["--child", "bare", "--root", str(root), "--pipeline-result", str(pipe_json),
               "--result", str(bare_json)],
              env={"TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1"}, pin_cpu=cpu,
              label="bare run")
    bare = json.loads(bare_json.read_text())
    load_end = round(os.getloadavg()[0], 2)

    corpus_summary = {k: corpus[k] for k in ("corpus_digest", "reference_digest", "matches_reference",
                                             "files", "stats", "python", "zstandard")}
    corpus_summary["packages"] = [{"package": p["package"], "version": p["version"], "sha256": p["sha256"]}
                                  for p in corpus["recipe"]["pins"]]
    report = {
        "date": datetime.date.today().isoformat(),
        "command": "make bench  (= .venv/bin/python bench/run_all.py"
                   + (" --profile" if args.profile else "") + ")",
        "machine": machine(),
        "load_average": {"start": load_start, "end": load_end},
        "workers": WORKERS,
        "pipeline_options": PIPELINE_ARGS,
        "goal_max_overhead": GOAL,
        "mb": "10^6 bytes of UTF-8 text",
        "corpus": corpus_summary,
        "pipeline": pipe,
        "bare": bare,
        "stages": stage_rows(pipe, bare),
        "consistency_problems": check_consistency(pipe, bare),
    }
    report["duration_seconds"] = round(time.monotonic() - started, 1)
    for problem in report["consistency_problems"]:
        log(f"WARNING: {problem}")

    RESULTS.mkdir(exist_ok=True)
    table = markdown(report)
    (RESULTS / f"spine-{today}.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    (RESULTS / f"spine-{today}.md").write_text(table)
    update_readme(table)
    print(table)
    log(f"wrote bench/results/spine-{today}.json and .md in {report['duration_seconds']:.0f}s")

    if args.profile:
        import profile_summary

        profile_dir = OUT / "profile"
        profile_dir.mkdir()
        log("profile: second pipeline run under py-spy (timings of this run are not used)")
        run_child(["--child", "pipeline", "--root", str(OUT / "profiled"), "--result",
                   str(OUT / "pipeline-profiled.json"), "--profile-dir", str(profile_dir)], label="profiled run")
        summary = profile_summary.summarize(profile_dir, rate=100)
        (RESULTS / f"spine-{today}-profile.md").write_text(summary)
        print(summary)
        log(f"wrote bench/results/spine-{today}-profile.md")
    if report["consistency_problems"]:
        log("the pipeline did not do the same work as the bare pass (see the results): exit status 3")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
