#!/usr/bin/env python3
"""End to end at scale: the whole cascade on 250 MB, 500 MB and 1 GB of real text.

Part of ``make bench`` (``bench/run_all.py --scale``); alone:
``.venv/bin/python bench/bench_scale.py [--sizes 250 500 1000]``.

1. ``build_corpus.ensure_corpus(spec=SCALE)``: >= 1 GB of text from 16 pinned
   Debian documentation packages (~half distinct pages, the rest mirror copies,
   verbatim or with a header line), and a config running every stage of the
   sample's (near dedup with boilerplate lines, the seven-scorer cascade, policy
   rules, redaction, 13-gram index, tokenize/pack/shard);
2. one subset per size: the first files of each source in proportion (records are
   ordered by ``sha256(id)`` inside a source, so a prefix of its files is a uniform
   sample of it), hard-linked into ``bench/work/scale/subsets/<MB>/`` with the
   same config;
3. per subset, ``python -m beam_pipeline run`` in a child process, exactly as a
   user runs it: DirectRunner, ``multi_processing``, 2 workers, a fresh output
   root. A sampler reads ``/proc/<pid>/status`` of the child and of every
   process it starts, every 0.5 s: ``VmRSS`` (attributed to the stage whose
   ``[stage] running`` line came last) and ``VmHWM`` (the process's lifetime
   peak, which also catches peaks between two samples). Processes whose
   command line runs ``sdk_worker_main`` are the SDK workers (one per worker
   per stage job); the child itself is the driver, which on the DirectRunner
   also holds every GroupByKey's data (Dataflow and Flink shuffle outside the
   workers);
4. per stage: wall seconds (the run's ``metrics.json``), documents in, docs/s
   per core and corpus MB/s per core (``text MB of the subset / (seconds x 2)``:
   the rate at which the stage gets through the corpus), peak worker RSS; the
   slowest stage; per size: seconds per MB (linear time means a flat column) and
   peak memory (bounded memory means a flat worker column);
5. ``bench/results/scale-<YYYYMMDD>.json`` and ``.md``.

MB = 10^6 bytes of UTF-8 text (the ``text`` field of the input records).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
SCALE_WORK = BENCH / "work" / "scale"
SUBSETS = SCALE_WORK / "subsets"
RESULTS = BENCH / "results"
WORKERS = 2  # SDK worker processes (--workers); rates are per core of the machine
CORES = os.cpu_count() or 1
SIZES_MB = (250, 500, 1000)
MB = 1e6
SAMPLE_SECONDS = 0.5
REPORT_PHASE = "_report"  # the sampler's phase after the build, while the run report is written

sys.path.insert(0, str(BENCH))
from run_all import descendants, machine_busy_seconds  # noqa: E402 - bench/run_all.py, the spine benchmark


def log(msg: str) -> None:
    print(f"[bench_scale] {msg}", flush=True)


# --------------------------------------------------------------------------
# Subsets


def file_text_bytes(info: dict) -> dict[str, dict]:
    """{file: {"text_bytes", "records"}} of every corpus file (cached by the file's sha256)."""
    import zstandard

    cache_path = SCALE_WORK / "file_stats.json"
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    stats = {}
    for name, digest in sorted(info["files"].items()):
        if cache.get(name, {}).get("sha256") != digest:
            text = records = 0
            reader = zstandard.ZstdDecompressor().stream_reader(open(SCALE_WORK / name, "rb"))
            import io
            for line in io.TextIOWrapper(reader, encoding="utf-8"):
                text += len(json.loads(line)["text"].encode("utf-8"))
                records += 1
            cache[name] = {"sha256": digest, "text_bytes": text, "records": records}
        stats[name] = cache[name]
    cache_path.write_text(json.dumps(cache, indent=1, sort_keys=True) + "\n")
    return stats


def choose_files(stats: dict[str, dict], size_mb: int) -> list[str]:
    """The first files of each source, in proportion, until the text reaches ``size_mb``."""
    by_source: dict[str, list[str]] = {}
    for name in sorted(stats):
        by_source.setdefault(name.split("/")[1], []).append(name)
    # Interleave the sources by the fraction of each one taken so far.
    order = sorted((i / len(files), source, name) for source, files in by_source.items()
                   for i, name in enumerate(files))
    chosen, total = [], 0
    for _, _, name in order:
        if total >= size_mb * MB:
            break
        chosen.append(name)
        total += stats[name]["text_bytes"]
    if total < size_mb * MB:
        raise SystemExit(f"the scale corpus holds {total / MB:.0f} MB of text, less than {size_mb} MB")
    return sorted(chosen)


def make_subset(size_mb: int, files: list[str]) -> Path:
    folder = SUBSETS / str(size_mb)
    shutil.rmtree(folder, ignore_errors=True)
    for name in files:
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(SCALE_WORK / name, target)
    shutil.copy(SCALE_WORK / "corpus.yaml", folder / "corpus.yaml")
    return folder / "corpus.yaml"


# --------------------------------------------------------------------------
# One run, sampled


def _status(pid: int) -> dict | None:
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if ":" in line)
        return {"rss_kb": int(fields["VmRSS"].split()[0]), "hwm_kb": int(fields["VmHWM"].split()[0])}
    except (OSError, KeyError, ValueError):
        return None  # exited, or a zombie without memory fields


class MemorySampler:
    """Peak memory of a process tree per process and per stage (see the module docstring)."""

    def __init__(self, root_pid: int):
        self.root = root_pid
        self.stage = "_start"
        self.processes: dict[int, dict] = {}
        self.per_stage: dict[str, dict] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)

    def start(self) -> "MemorySampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _role(self, pid: int) -> str:
        if pid == self.root:
            return "driver"
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return "other"
        return "worker" if "sdk_worker_main" in cmdline else "other"

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            stage = self.stage
            worker_total = 0
            for pid in descendants(self.root):
                status = _status(pid)
                if status is None:
                    continue
                proc = self.processes.setdefault(pid, {"role": self._role(pid), "hwm_kb": 0, "stages": []})
                proc["hwm_kb"] = max(proc["hwm_kb"], status["hwm_kb"])
                if stage not in proc["stages"]:
                    proc["stages"].append(stage)
                entry = self.per_stage.setdefault(stage, {"driver_rss_kb": 0, "worker_rss_kb": 0,
                                                          "workers_total_rss_kb": 0, "worker_hwm_kb": 0})
                if proc["role"] == "driver":
                    entry["driver_rss_kb"] = max(entry["driver_rss_kb"], status["rss_kb"])
                elif proc["role"] == "worker":
                    entry["worker_rss_kb"] = max(entry["worker_rss_kb"], status["rss_kb"])
                    entry["worker_hwm_kb"] = max(entry["worker_hwm_kb"], status["hwm_kb"])
                    worker_total += status["rss_kb"]
            if stage in self.per_stage:
                entry = self.per_stage[stage]
                entry["workers_total_rss_kb"] = max(entry["workers_total_rss_kb"], worker_total)


def run_one(size_mb: int, config: Path, text_bytes: int, records: int, workers: int = WORKERS,
            mode: str = "multi_processing", label: str = "scale") -> dict:
    """Build ``config`` in a child process (a fresh output root ``bench/work/out/<label>-<size_mb>``),
    sampling memory; the run's numbers, per stage too."""
    root = BENCH / "work" / "out" / f"{label}-{size_mb}"
    shutil.rmtree(root, ignore_errors=True)
    cmd = [sys.executable, "-m", "beam_pipeline", "run", "--config", str(config), "--output_root", str(root),
           "--runner=DirectRunner", f"--direct_running_mode={mode}", f"--direct_num_workers={workers}"]
    log(f"{size_mb} MB: {' '.join(cmd[1:])}")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy0, load0, t0 = machine_busy_seconds(), os.getloadavg()[0], time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = MemorySampler(proc.pid).start()
    running = re.compile(r"^\s*[\d.]+s \[(\w+)\] (running|layer .* is complete)")
    tail = []
    for line in proc.stdout:
        match = running.match(line)
        if match:
            sampler.stage = match.group(1)
        elif line.startswith("dataset_id "):  # the build is done; the run report is written next
            sampler.stage = REPORT_PHASE
        if line.startswith(("report ", "dataset_id ")) or "done in" in line or "running" in line:
            log(f"{size_mb} MB | {line.rstrip()}")
        tail = (tail + [line])[-60:]
    returncode = proc.wait()
    wall = time.monotonic() - t0
    sampler.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy1, load1 = machine_busy_seconds(), os.getloadavg()[0]
    if returncode != 0:
        raise SystemExit(f"the {size_mb} MB build failed (exit {returncode}):\n" + "".join(tail))
    metrics_path = next(iter(sorted(root.glob("runs/*/metrics.json"))))
    metrics = json.loads(metrics_path.read_text())
    own_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    others = max(0.0, (busy1 - busy0 - own_cpu) / (wall * (os.cpu_count() or 1)))
    workers = [p for p in sampler.processes.values() if p["role"] == "worker"]
    driver = [p for p in sampler.processes.values() if p["role"] == "driver"]
    timing = metrics["timing_seconds"]
    stages = []
    for stage in metrics["stages"]:
        name, seconds = stage["name"], timing.get(stage["name"], 0.0)
        mem = sampler.per_stage.get(name, {})
        stages.append({
            "stage": name, "seconds": seconds, "in": stage["counts"]["in"], "passed": stage["counts"]["passed"],
            "counts": stage["counts"],
            "attempts": stage.get("attempts", 1),
            # each run of the stage's job (all but the last lost records and were discarded)
            "attempt_seconds": stage.get("attempt_seconds") or [seconds],
            "docs_per_s_per_core": stage["counts"]["in"] / (seconds * CORES) if seconds else None,
            "corpus_mb_per_s_per_core": text_bytes / MB / (seconds * CORES) if seconds else None,
            "worker_peak_mb": mem.get("worker_hwm_kb", 0) / 1024,
            "workers_total_rss_mb": mem.get("workers_total_rss_kb", 0) / 1024,
            "driver_rss_mb": mem.get("driver_rss_kb", 0) / 1024,
        })
    dataset_id = metrics["dataset_id"]
    ingest_ledger = json.loads(next(iter(root.glob("layers/ingest/*/_LEDGER.json"))).read_text())
    parts = ingest_ledger["outputs"]["documents"]["parts"]
    partitions = len(parts)
    report = {
        "size_mb": size_mb, "text_bytes": text_bytes, "records": records, "wall_seconds": wall,
        "build_seconds": timing["total"], "seconds_per_mb": timing["total"] / (text_bytes / MB),
        "mb_per_s_per_core": text_bytes / MB / (timing["total"] * CORES),
        "cpu_seconds": own_cpu, "others_share": others, "load_start": load0, "load_end": load1,
        "worker_peak_mb": max((p["hwm_kb"] for p in workers), default=0) / 1024,
        "worker_processes": len(workers),
        "driver_peak_mb": max((p["hwm_kb"] for p in driver), default=0) / 1024,
        "report_driver_rss_mb": sampler.per_stage.get(REPORT_PHASE, {}).get("driver_rss_kb", 0) / 1024,
        "partitions": partitions, "text_mb_per_partition": text_bytes / MB / partitions,
        # what a partition-wise task holds is set by the largest partition, not the mean
        "largest_partition_parquet_mb": max(part["bytes"] for part in parts) / MB,
        "dataset_id": dataset_id, "stages": stages,
        "slowest_stage": max(stages, key=lambda s: s["seconds"])["stage"],
    }
    log(f"{size_mb} MB: {timing['total']:.0f} s, {report['seconds_per_mb']:.2f} s/MB, worker peak "
        f"{report['worker_peak_mb']:.0f} MB, driver peak {report['driver_peak_mb']:.0f} MB, "
        f"slowest {report['slowest_stage']}")
    shutil.rmtree(root, ignore_errors=True)  # ~2x the subset on disk; the numbers are in the report
    return report


# --------------------------------------------------------------------------
# Results


def last_attempt(stage: dict) -> float:
    """Seconds of the run of the stage's job that was kept (the stage's seconds if it ran once)."""
    if stage.get("attempts", 1) == 1:
        return stage["seconds"]
    return (stage.get("attempt_seconds") or [stage.get("last_attempt_seconds", stage["seconds"])])[-1]


def discarded_seconds(run: dict) -> float:
    """Seconds spent in runs of stage jobs that lost records and were thrown away."""
    return sum(stage["seconds"] - last_attempt(stage) for stage in run["stages"])


def largest_partition(run: dict) -> str:
    """The largest documents partition of a run, as the table shows it ("-" for older results)."""
    mb = run.get("largest_partition_parquet_mb")
    return "-" if mb is None else f"{mb:.1f}"


def markdown(result: dict) -> str:
    runs = result["runs"]
    lines = [
        f"# End-to-end scale run ({result['date']})",
        "",
        f"`{result['command']}` on {result['machine']}. Corpus: {result['corpus']['description']}",
        f"(digest `{result['corpus']['corpus_digest'][:16]}`). DirectRunner, {result.get('mode', 'multi_processing')}, "
        f"{result.get('workers', WORKERS)} workers on {CORES} cores; every stage of the sample's config (near dedup, seven scorers, policy, "
        "redaction, 13-gram index, tokenize/pack/shard). MB = 10^6 bytes of input text.",
        "",
        "## Per size",
        "",
        "| text MB | records | partitions | text MB per partition | largest partition (Parquet MB) | build s "
        "| s per MB (without reruns) | MB/s per core "
        "| worker peak MB | driver peak MB | slowest stage | others' load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in runs:
        discarded = discarded_seconds(r)
        build = f"{r['build_seconds']:.0f}" + (f" ({discarded:.0f} of them reruns)" if discarded else "")
        seconds_per_mb = (r["build_seconds"] - discarded) / (r["text_bytes"] / MB)
        lines.append(f"| {r['text_bytes'] / MB:.0f} | {r['records']:,} | {r['partitions']} | "
                     f"{r['text_mb_per_partition']:.0f} | {largest_partition(r)} | {build} | "
                     f"{seconds_per_mb:.2f} | {r['mb_per_s_per_core']:.3f} | {r['worker_peak_mb']:.0f} | "
                     f"{r['driver_peak_mb']:.0f} | {r['slowest_stage']} | {r['others_share']:.0%} |")
    reruns = [f"{s['stage']} at {r['text_bytes'] / MB:.0f} MB ({s['attempts']} attempts)"
              for r in runs for s in r["stages"] if s.get("attempts", 1) > 1]
    lines += ["", "Stage jobs rerun because their records did not balance (the runner lost records; "
              "`docs/operations.md`): " + (", ".join(reruns) if reruns else "none") + "."]
    lines += ["", "Linear time shows as a flat s-per-MB column; bounded worker memory as a flat worker column. "
              "What the pipeline itself holds in a worker is one layer partition (about constant: "
              "`layout.target_partition_bytes`); the DirectRunner's FnApiRunner adds each worker's whole share "
              "of every GroupByKey, delivered as one message, and the driver holds all of it "
              "(bench/README.md, 'End to end at scale').", ""]
    largest = runs[-1]
    lines += [f"## Per stage at {largest['text_bytes'] / MB:.0f} MB", "",
              "| stage | seconds | runs | share | docs in | docs/s per core | corpus MB/s per core | worker peak MB "
              "| driver RSS MB |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    total = sum(s["seconds"] for s in largest["stages"])
    for s in largest["stages"]:
        lines.append(f"| {s['stage']} | {s['seconds']:.0f} | {s.get('attempts', 1)} | {s['seconds'] / total:.0%} | "
                     f"{s['in']:,} | "
                     f"{(s['docs_per_s_per_core'] or 0):.0f} | {(s['corpus_mb_per_s_per_core'] or 0):.2f} | "
                     f"{s['worker_peak_mb']:.0f} | {s['driver_rss_mb']:.0f} |")
    lines += per_stage_by_size("Stage seconds per MB at each size (the run of the job that was kept)", runs,
                               lambda r, st: f"{last_attempt(st) / (r['text_bytes'] / MB):.3f}")
    lines += per_stage_by_size("Worker peak MB per stage at each size", runs,
                               lambda r, st: f"{st['worker_peak_mb']:.0f}")
    lines += per_stage_by_size("Driver RSS MB per stage at each size (the driver is one process for the "
                               "whole build: a stage's figure includes what earlier stages left allocated)", runs,
                               lambda r, st: f"{st['driver_rss_mb']:.0f}")
    if all("report_driver_rss_mb" in r for r in runs):
        lines.append("| (run report, after the build) | "
                     + " | ".join(f"{r['report_driver_rss_mb']:.0f}" for r in runs) + " |")
    return "\n".join(lines) + "\n"


def per_stage_by_size(title: str, runs: list[dict], cell) -> list[str]:
    """A table with a row per stage and a column per corpus size; ``cell(run, stage entry)``."""
    lines = ["", f"## {title}", "",
             "| stage | " + " | ".join(f"{r['text_bytes'] / MB:.0f} MB" for r in runs) + " |",
             "|---|" + "---:|" * len(runs)]
    for i, stage in enumerate(runs[-1]["stages"]):
        lines.append(f"| {stage['stage']} | " + " | ".join(cell(r, r["stages"][i]) for r in runs) + " |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES_MB), help="subset sizes in MB of text")
    parser.add_argument("--render", metavar="JSON", help="only rewrite the .md of an earlier results .json")
    parser.add_argument("--workers", type=int, default=WORKERS, help="SDK worker processes (--direct_num_workers)")
    parser.add_argument("--mode", default="multi_processing", choices=["multi_processing", "in_memory"],
                        help="--direct_running_mode; in_memory runs one worker inside the driver process")
    args = parser.parse_args()
    if args.render:
        Path(args.render).with_suffix(".md").write_text(markdown(json.loads(Path(args.render).read_text())))
        return 0
    import build_corpus

    info = build_corpus.ensure_corpus(spec=build_corpus.SCALE)
    stats = file_text_bytes(info)
    runs = []
    for size in sorted(args.sizes):
        files = choose_files(stats, size)
        text = sum(stats[f]["text_bytes"] for f in files)
        records = sum(stats[f]["records"] for f in files)
        config = make_subset(size, files)
        log(f"{size} MB subset: {len(files)} files, {text / MB:.1f} MB of text, {records:,} records")
        runs.append(run_one(size, config, text, records, args.workers, args.mode))
        write_results(info, runs, args)
    return 0


def write_results(info: dict, runs: list[dict], args) -> None:
    stats = info["stats"]
    date = (datetime.date.today().strftime("%Y%m%d") + ("" if args.workers == WORKERS else f"-w{args.workers}")
            + ("" if args.mode == "multi_processing" else f"-{args.mode}"))
    result = {
        "date": date, "command": "make bench (bench/bench_scale.py --sizes " + " ".join(map(str, args.sizes)) + ")",
        "machine": f"{os.cpu_count()} cores, {platform.python_version()}, {platform.machine()}",
        "workers": args.workers, "mode": args.mode,
        "corpus": {"corpus_digest": info["corpus_digest"], "recipe_digest": info["recipe_digest"],
                   "description": f"{stats['pages']:,} pages of {len(info['recipe']['pins'])} Debian doc packages, "
                                  f"{stats['unique_text_bytes'] / MB:.0f} MB distinct + mirror copies = "
                                  f"{stats['text_bytes']['total'] / MB:.0f} MB of text"},
        "runs": runs,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"scale-{date}.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    (RESULTS / f"scale-{date}.md").write_text(markdown(result))
    log(f"results in bench/results/scale-{date}.md")


if __name__ == "__main__":
    sys.exit(main())
