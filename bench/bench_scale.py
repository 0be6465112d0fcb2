#!/usr/bin/env python3
"""End to end at scale: the whole cascade as one Beam job on 250 MB, 500 MB and 1 GB of real text.

Part of ``make bench`` (``make bench-scale``: the local runner); alone:
``.venv/bin/python bench/bench_scale.py [--runner local|flink] [--sizes 250 500 1000]``.

1. ``build_corpus.ensure_corpus(spec=SCALE)``: >= 1 GB of text from 16 pinned
   Debian documentation packages (~half distinct pages, the rest mirror copies,
   verbatim or with a header line), and a config running every stage of the
   sample's (near dedup with boilerplate lines, the seven-scorer cascade, policy
   rules, redaction, 13-gram index, tokenize/pack/shard); ``--corpus
   scale-large``: the same pages with eight mirror hosts (2.1 GB), for the local
   runner's ceiling; ``--corpus scale-xl``: seventeen mirror hosts (> 4 GB), for
   1 GB against 4 GB on embedded Flink (``make bench-scale-flink``; there is no
   more distinct real text offline, so the larger sizes are more mirror copies of
   the same ~381 MB of pages);
2. one subset per size: the first files of each source in proportion (records are
   ordered by ``sha256(id)`` inside a source, so a prefix of its files is a uniform
   sample of it), hard-linked into ``bench/work/scale/subsets/<MB>/`` with the
   same config;
3. per subset, ``python -m beam_pipeline run`` in a child process, exactly as a
   user runs it, a fresh output root, one Beam job: ``--runner local`` =
   DirectRunner, ``multi_processing``, 2 workers (its FnApiRunner runs every
   shuffle in the driver process); ``--runner flink`` =
   ``--runner=FlinkRunner --flink_master=[local]``, which the CLI completes
   (Flink 1.19, the job server ``make flink`` assembled, LOOPBACK: the SDK
   workers run inside the driver process, parallelism = cores). A sampler
   (:class:`MemorySampler`) reads ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``)
   and ``/proc/<pid>/stat`` (CPU) of the child and of every process it starts,
   every 0.5 s, by role: ``driver`` (the child), ``worker`` (``sdk_worker_main``),
   ``jvm`` (Flink's job server, ``java ... job-server``). Samples are attributed
   to the **phase** (:class:`Phases`): the first stage in build order whose layer
   is not committed yet, from the build's ``[stage] runs in this job`` and
   ``[stage] committed after`` lines, so a stage's phase is the span
   ``metrics.json`` times for it (commit to commit);
4. per run: wall seconds, CPU seconds of the whole process tree (per role and
   per phase), seconds and CPU seconds per MB, peak RSS per role and per phase,
   the load average at start and end, the dataset id, which must equal the one
   the other runner gave at the same size (its newest results file); per stage:
   seconds (``metrics.json``), documents in, docs/s and corpus MB/s per core. A
   failed build (lost records beyond the retries, memory) is recorded with its
   message, its retries and its peak memory;
5. ``bench/results/scale-<runner>-<YYYYMMDD>[-<corpus>].json`` and ``.md`` (with
   two sizes or more, the ratios of the largest to the smallest run: what the
   scale targets are stated in); ``--compare``
   writes ``scale-compare-<YYYYMMDD>.md``: the runners side by side, the
   pre-rewrite results, fixed and marginal cost, the local runner's ceiling
   (:func:`local_ceiling`).

MB = 10^6 bytes of UTF-8 text (the ``text`` field of the input records); memory
in MiB.
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
import subprocess
import sys
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
SCALE_WORK = BENCH / "work" / "scale"
RESULTS = BENCH / "results"
LOGS = BENCH / "work" / "logs"
WORKERS = 2  # SDK worker processes (--workers); rates are per core of the machine
CORES = os.cpu_count() or 1
SIZES_MB = (250, 500, 1000)
MB = 1e6
SAMPLE_SECONDS = 0.5
REPORT_PHASE = "_report"  # the sampler's phase after the build, while the run report is written

sys.path.insert(0, str(BENCH))
import jvm_heap_phases  # noqa: E402 - bench/jvm_heap_phases.py
from run_all import descendants, machine_busy_seconds  # noqa: E402 - bench/run_all.py, the spine benchmark


def log(msg: str) -> None:
    print(f"[bench_scale] {msg}", flush=True)


# --------------------------------------------------------------------------
# Subsets


def file_text_bytes(info: dict, work: Path = SCALE_WORK) -> dict[str, dict]:
    """{file: {"text_bytes", "records"}} of every corpus file (cached by the file's sha256)."""
    import zstandard

    cache_path = work / "file_stats.json"
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    stats = {}
    for name, digest in sorted(info["files"].items()):
        if cache.get(name, {}).get("sha256") != digest:
            text = records = 0
            reader = zstandard.ZstdDecompressor().stream_reader(open(work / name, "rb"))
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


def make_subset(size_mb: int, files: list[str], work: Path = SCALE_WORK) -> Path:
    folder = work / "subsets" / str(size_mb)
    shutil.rmtree(folder, ignore_errors=True)
    for name in files:
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(work / name, target)
    shutil.copy(work / "corpus.yaml", folder / "corpus.yaml")
    return folder / "corpus.yaml"


# --------------------------------------------------------------------------
# Runners


#: Beam arguments per ``--runner``; the CLI completes them (beam_pipeline/options/corpus_options.py,
#: LocalRunnerDefaults): Flink gets --flink_version=1.19, the job server jar of ``make flink``,
#: --environment_type=LOOPBACK and --parallelism=<cores>.
def runner_args(runner: str, workers: int = WORKERS, mode: str = "multi_processing") -> list[str]:
    if runner == "local":
        return ["--runner=DirectRunner", f"--direct_running_mode={mode}", f"--direct_num_workers={workers}"]
    if runner == "flink":
        return ["--runner=FlinkRunner", "--flink_master=[local]"]
    raise ValueError(f"unknown runner {runner!r} (local or flink)")


def runner_description(runner: str, workers: int = WORKERS, mode: str = "multi_processing",
                       beam_args: str = "") -> str:
    if runner == "local":
        return (f"DirectRunner (its FnApiRunner), {mode}, {workers} SDK worker processes on {CORES} cores; "
                "the driver process runs the shuffles")
    given = re.search(r"--parallelism[= ](\d+)", beam_args)  # the CLI's default is the cores
    parallelism = f"parallelism {given.group(1)} (--beam_args)" if given else f"parallelism {CORES}"
    return (f"embedded Flink 1.19 (`--runner=FlinkRunner --flink_master=[local]`: Beam's Flink job server "
            f"{FLINK_JOB_SERVER} in a JVM started by the driver, LOOPBACK: the Python SDK workers run inside "
            f"the driver process, {parallelism})")


def gc_log_path(runner: str, beam_args: tuple[str, ...], path: Path) -> Path | None:
    """Where the job server's GC log goes (Flink runs whose ``--beam_args`` set no ``-Xlog`` of their own),
    else None."""
    if runner != "flink" or any("-Xlog" in arg for arg in beam_args):
        return None
    path.unlink(missing_ok=True)
    return path


def gc_log_args(path: Path | None) -> list[str]:
    """The job server's GC log (``bench/jvm_heap_phases.py`` reads it): one line per pause, with the uptime."""
    return [] if path is None else [f"--job_server_jvm_properties=-Xlog:gc:file={path}:time,uptime"]


FLINK_JOB_SERVER = "2.62.0"  # beam_pipeline.options.corpus_options.FLINK_JOB_SERVER_BEAM (read in main)

#: ``--corpus``: the build_corpus recipe it names (same pages; 3, 8 or 17 mirror hosts).
CORPORA = {"scale": "SCALE", "scale-large": "SCALE_LARGE", "scale-xl": "SCALE_XL"}


# --------------------------------------------------------------------------
# One run, sampled


START_PHASE = "_start"      # snapshot and job graph, until the job's plan is printed
PUBLISH_PHASE = "_publish"  # after the last layer's commit: publish, lineage, metrics, report, exit
ROLES = ("driver", "worker", "jvm", "other")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

_LINE = re.compile(r"^\s*[\d.]+s \[([^\]]+)\] (.*)$")
_ATTEMPT = re.compile(r"WARNING: attempt (\d+) of (\d+): (.*?)(?:\. Nothing uncommitted is kept|$)")


class Phases:
    """Which phase of the build is running, from the lines the build prints.

    The build prints ``[stage] runs in this job -> ...`` for every stage it
    computes, in build order, before the job starts, and ``[stage] committed
    after Ns`` when the stage's ledger appears. The phase is the **first stage
    in build order that is not committed yet**: the stage the build is waiting
    for. Its span ends at the stage's commit and begins when every earlier stage
    has committed, which is how ``metrics.json`` times a stage (commit to
    commit: ``beam_pipeline/transforms/publish.py``, ``run_metrics``), so the
    memory of a phase and the stage's seconds describe the same interval. In one
    job stages overlap: a phase's memory includes what later stages already
    run alongside it (and, on the driver, what earlier stages left allocated).
    Before the plan: ``_start``; after the last commit: ``_publish``. A job that
    runs again after a stage lost records prints the plan of the stages not yet
    committed again; the phase stays at the first uncommitted stage.
    """

    def __init__(self):
        self.order: list[str] = []
        self.committed: dict[str, float] = {}  # stage -> seconds since the run started
        self.job_started: float | None = None
        self.attempt_failures: list[dict] = []

    def feed(self, line: str, t: float) -> None:
        match = _LINE.match(line)
        if not match:
            return
        stage, rest = match.groups()
        if rest.startswith("runs in this job"):
            if stage not in self.order:
                self.order.append(stage)
            if self.job_started is None:
                self.job_started = t
        elif rest.startswith("committed after"):
            self.committed.setdefault(stage, t)
        elif rest.startswith("WARNING: attempt"):
            attempt = _ATTEMPT.search(rest)
            self.attempt_failures.append({"stage": stage, "seconds": round(t, 1), "message": rest if not attempt else
                                          attempt.group(3), "attempt": int(attempt.group(1)) if attempt else None})

    @property
    def current(self) -> str:
        if not self.order:
            return START_PHASE
        return next((stage for stage in self.order if stage not in self.committed), PUBLISH_PHASE)

    def spans(self) -> dict[str, float]:
        """Seconds of each stage's phase, from the commit lines (as ``run_metrics``, but measured here)."""
        spans, previous = {}, self.job_started or 0.0
        for stage in self.order:
            if stage not in self.committed:
                break
            spans[stage] = max(0.0, self.committed[stage] - previous)
            previous = max(previous, self.committed[stage])
        return spans


def _status(pid: int) -> dict | None:
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if ":" in line)
        return {"rss_kb": int(fields["VmRSS"].split()[0]), "hwm_kb": int(fields["VmHWM"].split()[0])}
    except (OSError, KeyError, ValueError):
        return None  # exited, or a zombie without memory fields


def _cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process (all its threads), from /proc/<pid>/stat."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    except (OSError, IndexError, ValueError):
        return None


MIN_AVAILABLE_MB = 1536  # with a memory limit: kill the build before the machine's MemAvailable falls below this
#: A build whose process tree used less than STALL_CPU_SHARE of one core for ``--stall_seconds`` is stuck:
#: a build that works keeps at least one core busy (Flink's plan optimizer too), while a deadlocked one
#: only ticks (gRPC keepalives, Flink heartbeats: ~0.04 of a core in the 4 GB hang of 2026-12-07).
STALL_CPU_SHARE = 0.1
STALL_SECONDS = 900


def _mem_available_kb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    return 1 << 40


def role_of(pid: int, root: int) -> str:
    """driver (the build process), worker (an SDK worker process), jvm (Flink's job server) or other."""
    if pid == root:
        return "driver"
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "other"
    cmdline = b" ".join(argv).decode(errors="replace")
    program = os.path.basename(argv[0].decode(errors="replace")) if argv else ""
    if program in ("sh", "bash", "dash"):
        return "other"  # the shell a worker is started through (a few MiB)
    if "sdk_worker_main" in cmdline:
        return "worker"
    if program == "java" and "job-server" in cmdline:
        return "jvm"
    return "other"


class LiveHeapProbe:
    """The job server's live Java heap per phase: every ``every`` seconds, ``jcmd <pid> GC.class_histogram``
    (a full collection, then the objects still reachable, by class) of each JVM the sampler has seen.

    The RSS and the GC log's sizes after a pause both count garbage G1 has not collected yet (a young pause
    leaves the old generation as it is); after a full collection, what is left is what the job holds. Per
    phase: the largest live total and the classes at that moment (the largest ``TOP_CLASSES``). A full
    collection of a few GB takes about a second of the JVM's time; ``--jvm_live_seconds 0`` turns it off.
    """

    TOP_CLASSES = 8

    def __init__(self, sampler: "MemorySampler", every: float, gc_log: Path | None = None):
        self.sampler = sampler
        self.every = every
        self.gc_log = gc_log
        self.per_phase: dict[str, dict] = {}
        self.skipped = 0  # readings left out: the JVM skipped the collection before the histogram
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-heap", daemon=True)

    def start(self) -> "LiveHeapProbe":
        if self.every > 0 and shutil.which("jcmd"):
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            for pid, proc in list(self.sampler.processes.items()):
                if proc["role"] == "jvm":
                    self.probe(pid)

    def probe(self, pid: int) -> None:
        phase = self.sampler.phases.current
        skips_before = self._skipped_collections()
        try:
            done = subprocess.run(["jcmd", str(pid), "GC.class_histogram"], capture_output=True, text=True,
                                  timeout=120)
        except (OSError, subprocess.SubprocessError):
            return
        histogram = parse_class_histogram(done.stdout)
        if histogram is None:
            return
        if self._skipped_collections() > skips_before:  # garbage counted too: not a live reading
            self.skipped += 1
            return
        entry = self.per_phase.setdefault(phase, {"probes": 0, "live_peak_mib": 0.0, "top_classes": []})
        entry["probes"] += 1
        if histogram["total_bytes"] / MIB >= entry["live_peak_mib"]:
            entry["live_peak_mib"] = histogram["total_bytes"] / MIB
            entry["top_classes"] = histogram["classes"][: self.TOP_CLASSES]


    def _skipped_collections(self) -> int:
        """How many times the GC log says a histogram's collection was skipped (``GC locker is held; pre-dump
        GC was skipped``: a thread was in a JNI critical section, and the histogram then counts garbage)."""
        try:
            return self.gc_log.read_text().count("pre-dump GC was skipped") if self.gc_log else 0
        except OSError:
            return 0


def parse_class_histogram(text: str) -> dict | None:
    """``jcmd <pid> GC.class_histogram`` output -> {total_bytes, classes: [(class, MiB), ...] largest first},
    or None when it has no ``Total`` line (the JVM was gone)."""
    classes, total = [], None
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[0].endswith(":") and fields[0][:-1].isdigit():
            classes.append((fields[3], int(fields[2]) / MIB))
        elif len(fields) == 3 and fields[0] == "Total":
            total = int(fields[2])
    return None if total is None else {"total_bytes": total, "classes": classes}


MIB = 1024 * 1024


class MemorySampler:
    """Peak memory and CPU of a process tree, per process, per role and per phase (:class:`Phases`).

    Every ``SAMPLE_SECONDS``: ``VmRSS`` and ``VmHWM`` (the process's lifetime
    peak, which also catches peaks between two samples) of the build process and
    every process it started, and their CPU seconds (the growth since the last
    sample is attributed to the phase now running). Per phase: the largest RSS of
    one process of each role, the sum over the workers, and the sum over the
    whole tree. ``limit_mb``: a tree whose RSS passes it, or that leaves the
    machine less than ``MIN_AVAILABLE_MB`` available, is killed (SIGKILL to its
    process group), so that a build that outgrows the machine fails here, not in
    someone else's process; the sample that passed it is kept. ``stall_seconds``:
    a tree that used less than ``STALL_CPU_SHARE`` of a core over that long is
    stuck (a deadlock waits forever, and ``make bench-scale-flink`` would with
    it): the stacks of its JVMs go to ``bench/work/logs/`` (``jstack``), then it
    is killed the same way and the run records why.
    """

    def __init__(self, root_pid: int, phases: Phases, limit_mb: float | None = None,
                 stall_seconds: float | None = None, stall_dump: Path | None = None):
        self.root = root_pid
        self.phases = phases
        self.limit_kb = limit_mb * 1024 if limit_mb else None
        self.stall_seconds = stall_seconds
        self.stall_dump = stall_dump  # prefix of the jstack files written when the tree stalls
        self._cpu_marks: list[tuple[float, float]] = []  # (seconds, the tree's CPU seconds so far)
        self.killed_at: dict | None = None
        self.processes: dict[int, dict] = {}
        self.per_phase: dict[str, dict] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)
        self._t0 = time.monotonic()

    def start(self) -> "MemorySampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _phase_entry(self, phase: str) -> dict:
        return self.per_phase.setdefault(phase, {
            **{f"{role}_rss_kb": 0 for role in ROLES}, "workers_total_rss_kb": 0, "tree_rss_kb": 0,
            **{f"{role}_cpu_s": 0.0 for role in ROLES}, "samples": 0})

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self.sample()

    def sample(self) -> None:
        phase = self.phases.current
        entry = self._phase_entry(phase)
        entry["samples"] += 1
        worker_total = tree_total = 0
        for pid in descendants(self.root):
            status, cpu = _status(pid), _cpu_seconds(pid)
            if status is None:
                continue
            proc = self.processes.setdefault(pid, {"role": role_of(pid, self.root), "hwm_kb": 0, "cpu_s": 0.0,
                                                   "phases": []})
            role = proc["role"]
            proc["hwm_kb"] = max(proc["hwm_kb"], status["hwm_kb"])
            if cpu is not None:
                entry[f"{role}_cpu_s"] += max(0.0, cpu - proc["cpu_s"])
                proc["cpu_s"] = max(proc["cpu_s"], cpu)
            if phase not in proc["phases"]:
                proc["phases"].append(phase)
            entry[f"{role}_rss_kb"] = max(entry[f"{role}_rss_kb"], status["rss_kb"])
            if role == "worker":
                worker_total += status["rss_kb"]
            tree_total += status["rss_kb"]
        entry["workers_total_rss_kb"] = max(entry["workers_total_rss_kb"], worker_total)
        entry["tree_rss_kb"] = max(entry["tree_rss_kb"], tree_total)
        available_kb = _mem_available_kb()
        entry["min_available_kb"] = min(entry.get("min_available_kb", available_kb), available_kb)
        over = self.limit_kb and tree_total > self.limit_kb
        short = self.limit_kb and available_kb < MIN_AVAILABLE_MB * 1024  # the machine is about to run out
        stalled = self._stalled()
        if (over or short or stalled) and self.killed_at is None:
            self.killed_at = {"phase": phase, "seconds": round(time.monotonic() - self._t0, 1),
                              "tree_rss_mb": tree_total / 1024, "machine_available_mb": available_kb / 1024,
                              "why": "the tree passed the limit" if over else
                                     f"the machine had less than {MIN_AVAILABLE_MB} MiB available" if short else
                                     stalled}
            if stalled:
                self.killed_at["stacks"] = self._dump_stacks()
            try:
                os.killpg(self.root, 9)  # the build runs in its own session (its own process group)
            except OSError:
                pass

    def _stalled(self) -> str | None:
        """Why the tree counts as stuck (see the class), or None."""
        if not self.stall_seconds:
            return None
        now = time.monotonic() - self._t0
        cpu = sum(p["cpu_s"] for p in self.processes.values())
        self._cpu_marks.append((now, cpu))
        while len(self._cpu_marks) > 1 and self._cpu_marks[1][0] <= now - self.stall_seconds:
            self._cpu_marks.pop(0)  # keep one mark at or before the window's start
        since, cpu0 = self._cpu_marks[0]
        if now - since < self.stall_seconds or cpu - cpu0 >= STALL_CPU_SHARE * (now - since):
            return None
        return (f"stalled: the tree used {cpu - cpu0:.1f} CPU s in the last {now - since:.0f} s "
                f"(less than {STALL_CPU_SHARE:.0%} of a core)")

    def _dump_stacks(self) -> list[str]:
        """``jstack`` of every JVM of the tree (where the Flink side of a deadlock waits), as files."""
        written = []
        jstack = shutil.which("jstack")
        for pid, proc in self.processes.items():
            if proc["role"] != "jvm" or jstack is None or self.stall_dump is None:
                continue
            path = self.stall_dump.with_name(f"{self.stall_dump.name}-jstack-{pid}.txt")
            try:
                with path.open("w") as out:
                    subprocess.run([jstack, str(pid)], stdout=out, stderr=subprocess.STDOUT, timeout=120)
                written.append(str(path.relative_to(REPO)))
            except (OSError, subprocess.SubprocessError):
                pass
        return written

    def peak_mb(self, role: str) -> float:
        return max((p["hwm_kb"] for p in self.processes.values() if p["role"] == role), default=0) / 1024

    def cpu_by_role(self) -> dict[str, float]:
        return {role: sum(p["cpu_s"] for p in self.processes.values() if p["role"] == role) for role in ROLES}


def phase_memory(entry: dict | None) -> dict:
    """A phase's sampled figures in MB and seconds (None: the phase was shorter than one sample)."""
    if not entry:
        return {"driver_rss_mb": None, "worker_rss_mb": None, "workers_total_rss_mb": None, "jvm_rss_mb": None,
                "tree_rss_mb": None, "machine_min_available_mb": None, "cpu_seconds": None}
    return {"driver_rss_mb": entry["driver_rss_kb"] / 1024, "worker_rss_mb": entry["worker_rss_kb"] / 1024,
            "workers_total_rss_mb": entry["workers_total_rss_kb"] / 1024, "jvm_rss_mb": entry["jvm_rss_kb"] / 1024,
            "tree_rss_mb": entry["tree_rss_kb"] / 1024,
            "machine_min_available_mb": entry.get("min_available_kb", 0) / 1024,
            "cpu_seconds": sum(entry[f"{role}_cpu_s"] for role in ROLES)}


def is_error_line(line: str) -> bool:
    """An error the build printed: ``SomeError: ...``, the CLI's ``error: ...``, a logged ``ERROR:``."""
    line = line.strip()
    return bool(re.match(r"^([\w.]*(Error|Exception|RecordsLost)\b|error: |ERROR:)", line))


def run_one(size_mb: int, config: Path, text_bytes: int, records: int, workers: int = WORKERS,
            mode: str = "multi_processing", label: str = "scale", runner: str = "local",
            memory_limit_mb: float | None = None, allow_failure: bool = False,
            stall_seconds: float | None = STALL_SECONDS,
            beam_args: tuple[str, ...] = (), jvm_live_seconds: float = 0.0) -> dict:
    """Build ``config`` in a child process (a fresh output root ``bench/work/out/<label>-<size_mb>``),
    sampling memory and CPU; the run's numbers, per stage too.

    A build that fails (or passes ``memory_limit_mb``) raises SystemExit, or with
    ``allow_failure`` returns what was measured until then with ``failure`` set:
    the exit code, the last error lines, retries after lost records, peak memory."""
    root = BENCH / "work" / "out" / f"{label}-{size_mb}"
    shutil.rmtree(root, ignore_errors=True)
    LOGS.mkdir(parents=True, exist_ok=True)
    gc_log = gc_log_path(runner, beam_args, LOGS / f"{label}-{runner}-{size_mb}.gc.log")
    cmd = [sys.executable, "-m", "beam_pipeline", "run", "--config", str(config), "--output_root", str(root),
           *runner_args(runner, workers, mode), *beam_args, *gc_log_args(gc_log)]
    log(f"{size_mb} MB on {runner}: {' '.join(cmd[1:])}")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy0, load0, t0 = machine_busy_seconds(), os.getloadavg(), time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    phases = Phases()
    log_path = LOGS / f"{label}-{runner}-{size_mb}.log"  # the build's whole output (bench/work: not committed)
    sampler = MemorySampler(proc.pid, phases, memory_limit_mb, stall_seconds, log_path.with_suffix("")).start()
    live_heap = LiveHeapProbe(sampler, jvm_live_seconds, gc_log).start()
    tail, errors = [], []
    build_log = log_path.open("w")
    for line in proc.stdout:
        build_log.write(f"{time.monotonic() - t0:8.1f} {line}")
        build_log.flush()
        phases.feed(line, time.monotonic() - t0)
        if ("runs in this job" in line or "committed after" in line or "WARNING" in line
                or line.startswith(("report ", "dataset_id ", "error"))):
            log(f"{size_mb} MB {runner} | {line.rstrip()}")
        if is_error_line(line):
            errors.append(line.strip()[:2000])
        tail = (tail + [line])[-80:]
    returncode = proc.wait()
    wall = time.monotonic() - t0
    build_log.close()
    sampler.sample()  # nothing left but what the tree has not reaped
    sampler.stop()
    live_heap.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy1, load1 = machine_busy_seconds(), os.getloadavg()
    # CPU of the whole tree: what the kernel added up for the reaped tree (rusage), or the per-process
    # samples where they saw more (a process that was never reaped, e.g. a job server left running).
    rusage_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    cpu_by_role = sampler.cpu_by_role()
    own_cpu = max(rusage_cpu, sum(cpu_by_role.values()))
    others = max(0.0, (busy1 - busy0 - own_cpu) / (wall * CORES))
    metrics_paths = sorted(root.glob("runs/*/metrics.json"))
    failure = None
    if returncode != 0 or not metrics_paths:
        failure = {"exit": returncode, "log": str(log_path.relative_to(REPO)), "errors": errors[-5:],
                   "tail": "".join(tail[-25:]),
                   "attempt_failures": phases.attempt_failures, "killed_at_memory_limit": sampler.killed_at,
                   "last_phase": phases.current, "seconds": wall}
        log(f"{size_mb} MB on {runner}: FAILED (exit {returncode}) in phase {phases.current} after {wall:.0f} s; "
            f"driver peak {sampler.peak_mb('driver'):.0f} MB" + (f"; killed by the bench: {sampler.killed_at}"
                                                                  if sampler.killed_at else ""))
        if not allow_failure:
            raise SystemExit(f"the {size_mb} MB build failed (exit {returncode}):\n" + "".join(tail))
    metrics = json.loads(metrics_paths[0].read_text()) if metrics_paths else None
    spans = phases.spans()
    timing = metrics["timing_seconds"] if metrics else {**spans, "total": wall}
    stages = []
    for name in (s["name"] for s in metrics["stages"]) if metrics else phases.order:
        entry = next((s for s in metrics["stages"] if s["name"] == name), None) if metrics else None
        seconds = timing.get(name)
        counts = entry["counts"] if entry else None
        stages.append({
            "stage": name, "seconds": seconds, "seconds_measured": spans.get(name),
            "in": counts["in"] if counts else None, "passed": counts["passed"] if counts else None,
            "counts": counts, "attempts": entry.get("attempts", 1) if entry else None,
            "docs_per_s_per_core": counts["in"] / (seconds * CORES) if counts and seconds else None,
            "corpus_mb_per_s_per_core": text_bytes / MB / (seconds * CORES) if seconds else None,
            # the processes' lifetime peak up to the end of this phase is in "processes"; these are the phase's
            **phase_memory(sampler.per_phase.get(name)),
            "worker_peak_mb": phase_memory(sampler.per_phase.get(name))["worker_rss_mb"],
        })
    report = {
        "runner": runner, "runner_args": runner_args(runner, workers, mode) + list(beam_args),
        "size_mb": size_mb, "text_bytes": text_bytes, "records": records,
        "wall_seconds": wall, "build_seconds": timing["total"],
        "seconds_per_mb": wall / (text_bytes / MB),
        "mb_per_s_per_core": text_bytes / MB / (wall * CORES),
        "cpu_seconds": own_cpu, "cpu_seconds_rusage": rusage_cpu, "cpu_seconds_by_role": cpu_by_role,
        "cpu_seconds_per_mb": own_cpu / (text_bytes / MB),
        "others_share": others, "load_start": list(load0), "load_end": list(load1),
        "driver_peak_mb": sampler.peak_mb("driver"), "worker_peak_mb": sampler.peak_mb("worker"),
        "jvm_peak_mb": sampler.peak_mb("jvm"), "other_peak_mb": sampler.peak_mb("other"),
        "tree_peak_mb": max((e["tree_rss_kb"] for e in sampler.per_phase.values()), default=0) / 1024,
        "worker_processes": sum(1 for p in sampler.processes.values() if p["role"] == "worker"),
        "jvm_processes": sum(1 for p in sampler.processes.values() if p["role"] == "jvm"),
        "phases": {phase: phase_memory(entry) for phase, entry in sampler.per_phase.items()},
        "phase_seconds": {START_PHASE: phases.job_started,
                          PUBLISH_PHASE: wall - max(phases.committed.values()) if phases.committed else None},
        "processes": [{"role": p["role"], "peak_mb": p["hwm_kb"] / 1024, "cpu_seconds": p["cpu_s"],
                       "phases": p["phases"]} for p in sampler.processes.values()],
        "report_driver_rss_mb": (phase_memory(sampler.per_phase.get(PUBLISH_PHASE))["driver_rss_mb"] or 0),
        # the job server's Java heap per phase (its GC log): what it holds, beside the RSS it has committed
        "jvm_heap": jvm_heap_phases.heap_by_phase(log_path.read_text(), gc_log.read_text())
        if gc_log is not None and gc_log.exists() else None,
        "jvm_live_heap": live_heap.per_phase or None, "jvm_live_seconds": jvm_live_seconds,
        "jvm_live_skipped": live_heap.skipped,
        "stages": stages, "failure": failure, "attempt_failures": phases.attempt_failures,
        "dataset_id": metrics["dataset_id"] if metrics else None,
        "slowest_stage": max((s for s in stages if s["seconds"] is not None), key=lambda s: s["seconds"],
                             default={"stage": None})["stage"],
    }
    ledgers = sorted(root.glob("layers/ingest/*/_LEDGER.json"))
    if ledgers:
        parts = json.loads(ledgers[0].read_text())["outputs"]["documents"]["parts"]
        report.update(partitions=len(parts), text_mb_per_partition=text_bytes / MB / len(parts),
                      # what a partition-wise task holds is set by the largest partition, not the mean
                      largest_partition_parquet_mb=max(part["bytes"] for part in parts) / MB)
    if not failure:
        log(f"{size_mb} MB on {runner}: {wall:.0f} s wall, {own_cpu:.0f} CPU s, {report['seconds_per_mb']:.2f} s/MB, "
            f"driver peak {report['driver_peak_mb']:.0f} MB, worker peak {report['worker_peak_mb']:.0f} MB, "
            f"JVM peak {report['jvm_peak_mb']:.0f} MB, slowest {report['slowest_stage']}, "
            f"dataset {report['dataset_id']}")
    shutil.rmtree(root, ignore_errors=True)  # ~2x the subset on disk; the numbers are in the report
    return report


# --------------------------------------------------------------------------
# Results


def _mb(value) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _s(value) -> str:
    return "-" if value is None else f"{value:,.0f}"


def phase_names(runs: list[dict]) -> list[str]:
    """The stages of the runs in build order (a failed run may have stopped early), with the phases
    before and after them."""
    names: list[str] = []
    for run in runs:
        for stage in run["stages"]:
            if stage["stage"] not in names:
                names.append(stage["stage"])
    return [START_PHASE, *names, PUBLISH_PHASE]


def stage_entry(run: dict, name: str) -> dict | None:
    return next((s for s in run["stages"] if s["stage"] == name), None)


def per_stage_by_size(title: str, runs: list[dict], cell) -> list[str]:
    """A table with a row per stage and a column per run; ``cell(run, stage entry)`` ("-" where a run has
    no such stage)."""
    lines = ["", f"## {title}", "",
             "| stage | " + " | ".join(f"{r['text_bytes'] / MB:.0f} MB" for r in runs) + " |",
             "|---|" + "---:|" * len(runs)]
    for name in phase_names(runs)[1:-1]:
        lines.append(f"| {name} | " + " | ".join(
            "-" if stage_entry(r, name) is None else cell(r, stage_entry(r, name)) for r in runs) + " |")
    return lines


def per_phase_by_size(title: str, runs: list[dict], key: str, fmt=_mb) -> list[str]:
    """A row per phase (``_start``, the stages, ``_publish``), a column per run: ``phases[phase][key]``."""
    lines = ["", f"## {title}", "",
             "| phase | " + " | ".join(f"{r['text_bytes'] / MB:.0f} MB" for r in runs) + " |",
             "|---|" + "---:|" * len(runs)]
    for name in phase_names(runs):
        lines.append(f"| {name} | " + " | ".join(fmt((r["phases"].get(name) or {}).get(key)) for r in runs) + " |")
    return lines


def killed_text(killed: dict) -> str:
    """Why and when a build was killed (memory limit, machine short of memory, stalled), for the .md."""
    details = [killed.get("why", "the memory limit")]
    if killed.get("tree_rss_mb") is not None:
        details.append(f"tree {killed['tree_rss_mb']:,.0f} MiB")
    if killed.get("stacks"):
        details.append("stacks: " + ", ".join(f"`{path}`" for path in killed["stacks"]))
    return f"; killed after {killed['seconds']:,.0f} s in phase `{killed['phase']}` ({'; '.join(details)})"


def _load(run: dict) -> str:
    return f"{run['load_start'][0]:.2f} / {run['load_end'][0]:.2f}"


#: Issue 40's scale targets, stated for 1 GB against 4 GB of text on embedded Flink: the TaskManager's
#: peak memory (embedded Flink: the job server JVM, which runs the mini cluster) within 1.2x, and CPU
#: within 4.4x, i.e. 1.1 times linear. The CPU target is applied as 1.1 x the runs' own text ratio (the
#: subsets are not exactly 1,000 and 4,000 MB), which is the stricter reading when that ratio is below 4.
MEMORY_TARGET_RATIO = 1.2
CPU_TARGET_PER_TEXT_RATIO = 1.1


def _ratio(large, small) -> str:
    return "-" if not large or not small else f"{large / small:.2f}x"


def ratio_section(result: dict) -> list[str]:
    """The largest successful run against the smallest: totals, peaks by role and per phase, the targets.

    The scale targets are ratios between two sizes, so they are printed here from the
    recorded runs, not worked out by hand. Memory is judged on the job server JVM's
    peak (the TaskManager on embedded Flink); the driver's peak is printed beside it
    because under LOOPBACK the SDK workers (on a cluster: processes next to each
    TaskManager) run inside the driver.
    """
    ok = [r for r in result["runs"] if not r.get("failure")]
    if len({r["text_bytes"] for r in ok}) < 2:
        if len(result["runs"]) >= 2:
            return ["", "## Ratios, largest vs smallest", "",
                    "Fewer than two sizes succeeded: no ratios (the failures are below)."]
        return []
    small, large = min(ok, key=lambda r: r["text_bytes"]), max(ok, key=lambda r: r["text_bytes"])
    text = large["text_bytes"] / small["text_bytes"]
    cpu = large["cpu_seconds"] / small["cpu_seconds"]
    cpu_target = CPU_TARGET_PER_TEXT_RATIO * text
    flink = result["runner"] == "flink"
    size = f"{large['text_bytes'] / MB:,.0f} MB vs {small['text_bytes'] / MB:,.0f} MB"
    lines = ["", f"## Ratios, largest vs smallest ({size})", "",
             "| measure | " + f"{small['text_bytes'] / MB:,.0f} MB | {large['text_bytes'] / MB:,.0f} MB | ratio |",
             "|---|---:|---:|---:|"]
    rows = [("text MB", small["text_bytes"] / MB, large["text_bytes"] / MB),
            ("records", small["records"], large["records"]),
            ("wall s", small["wall_seconds"], large["wall_seconds"]),
            ("CPU s (tree)", small["cpu_seconds"], large["cpu_seconds"])]
    rows += [(f"CPU s, {role}", small["cpu_seconds_by_role"].get(role, 0), large["cpu_seconds_by_role"].get(role, 0))
             for role in ROLES if max(small["cpu_seconds_by_role"].get(role, 0), large["cpu_seconds_by_role"].get(role, 0))
             >= 0.5]
    if flink:
        rows.append(("JVM peak MiB (job server = TaskManager)", small["jvm_peak_mb"], large["jvm_peak_mb"]))
    rows.append(("driver peak MiB" + (" (with the SDK workers: LOOPBACK)" if flink else ""),
                 small["driver_peak_mb"], large["driver_peak_mb"]))
    if small["worker_processes"] or large["worker_processes"]:
        rows.append(("largest SDK worker peak MiB", small["worker_peak_mb"], large["worker_peak_mb"]))
    rows.append(("tree peak MiB (all processes at one moment)", small["tree_peak_mb"], large["tree_peak_mb"]))
    for label, a, b in rows:
        fmt = (lambda v: f"{v:,.0f}") if label != "text MB" else (lambda v: f"{v:,.1f}")
        lines.append(f"| {label} | {fmt(a)} | {fmt(b)} | {_ratio(b, a)} |")
    verdict = lambda ok_: "**met**" if ok_ else "**not met**"  # noqa: E731
    lines += ["", f"Text {text:.2f}x. Targets (issue 40, 1 GB vs 4 GB on embedded Flink): CPU within "
              f"{CPU_TARGET_PER_TEXT_RATIO:.1f} x the text ratio = {cpu_target:.2f}x here (4.4x at exactly 4x): "
              f"{cpu:.2f}x, {verdict(cpu <= cpu_target)}."]
    if flink:
        jvm = large["jvm_peak_mb"] / small["jvm_peak_mb"] if small["jvm_peak_mb"] else None
        driver = large["driver_peak_mb"] / small["driver_peak_mb"] if small["driver_peak_mb"] else None
        lines[-1] += (f" Peak TaskManager memory (the job server JVM, which runs embedded Flink's mini cluster) "
                      f"within {MEMORY_TARGET_RATIO:.1f}x: "
                      + ("not measured" if jvm is None else f"{jvm:.2f}x, {verdict(jvm <= MEMORY_TARGET_RATIO)}")
                      + ". The driver, which under LOOPBACK also runs the SDK workers (on a cluster they run next "
                      "to the TaskManagers), "
                      + ("-" if driver is None else f"{driver:.2f}x: "
                         + ("within" if driver <= MEMORY_TARGET_RATIO else "over") + f" {MEMORY_TARGET_RATIO:.1f}x")
                      + ".")
    else:
        lines[-1] += " The memory target is the TaskManager's: it applies to Flink runs, not to this runner."
    # per phase: which stage's memory grows
    roles = (["jvm"] if flink else []) + ["driver"] + (["worker"] if not flink else []) + ["tree"]
    names = {"jvm": "JVM", "driver": "driver", "worker": "largest worker", "tree": "tree"}
    lines += ["", "Peak RSS per phase (MiB), smallest and largest run, and the ratio: which stage's memory grows.", "",
              "| phase | " + " | ".join(f"{names[role]} {small['text_bytes'] / MB:,.0f} | "
                                        f"{names[role]} {large['text_bytes'] / MB:,.0f} | ratio" for role in roles)
              + " |", "|---|" + "---:|---:|---:|" * len(roles)]
    for phase in phase_names([small, large]):
        cells = []
        for role in roles:
            a = (small["phases"].get(phase) or {}).get(f"{role}_rss_mb")
            b = (large["phases"].get(phase) or {}).get(f"{role}_rss_mb")
            cells.append(f"{_mb(a)} | {_mb(b)} | {_ratio(b, a)}")
        lines.append(f"| {phase} | " + " | ".join(cells) + " |")
    return lines


def markdown(result: dict) -> str:
    runs = result["runs"]
    runner = result["runner"]
    lines = [
        f"# End-to-end scale run on {runner} ({result['date']})",
        "",
        f"`{result['command']}` on {result['machine']}. Corpus: {result['corpus']['description']} "
        f"(digest `{result['corpus']['corpus_digest'][:16]}`). Runner: {result['runner_description']}. "
        "One Beam job per build; every stage of the sample's config (near dedup, seven scorers, policy, "
        "redaction, 13-gram index, tokenize/pack/shard). MB of text = 10^6 bytes of input text; memory in "
        "MiB (2^20 bytes).",
        "",
        "## Per size",
        "",
        "| text MB | records | partitions | wall s | CPU s (tree) | s per MB | CPU s per MB | driver peak MiB "
        "| worker peak MiB | JVM peak MiB | tree peak MiB | slowest stage | others' load | load avg start / end "
        "| dataset id |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---|",
    ]
    for r in runs:
        failed = " (FAILED)" if r.get("failure") else ""
        lines.append(
            f"| {r['text_bytes'] / MB:.0f} | {r['records']:,} | {r.get('partitions', '-')} | "
            f"{r['wall_seconds']:.0f}{failed} | {r['cpu_seconds']:.0f} | {r['seconds_per_mb']:.2f} | "
            f"{r['cpu_seconds_per_mb']:.2f} | {_mb(r['driver_peak_mb'])} | {_mb(r['worker_peak_mb'])} | "
            f"{_mb(r['jvm_peak_mb'])} | {_mb(r['tree_peak_mb'])} | {r['slowest_stage']} | {r['others_share']:.0%} | "
            f"{_load(r)} | `{(r['dataset_id'] or '-')[:16]}` |")
    lines += ratio_section(result)
    lines += ["", "CPU seconds by process role (driver / SDK worker processes / job server JVM / other): " + "; ".join(
        f"{r['text_bytes'] / MB:.0f} MB: "
        + " / ".join(f"{r['cpu_seconds_by_role'].get(role, 0):.0f}" for role in ROLES)
        for r in runs) + "."]
    retries = [f"{r['text_bytes'] / MB:.0f} MB: {a['stage']} at {a['seconds']:.0f} s ({a['message']})"
               for r in runs for a in r.get("attempt_failures", [])]
    lines += ["", "Runs of the job repeated because a stage's records did not balance (the runner lost records; "
              "`docs/operations.md`): " + ("; ".join(retries) if retries else "none") + "."]
    for r in runs:
        if r.get("failure"):
            f = r["failure"]
            lines += ["", f"**The {r['text_bytes'] / MB:.0f} MB build failed** (exit {f['exit']}) in phase "
                      f"`{f['last_phase']}` after {f['seconds']:.0f} s; driver peak {_mb(r['driver_peak_mb'])} MiB, "
                      f"tree peak {_mb(r['tree_peak_mb'])} MiB"
                      + (killed_text(f["killed_at_memory_limit"]) if f.get("killed_at_memory_limit") else "")
                      + ". Errors:", "",
                      "```", *(f["errors"] or [line.strip() for line in f.get("tail", "").splitlines()
                                               if is_error_line(line)] or ["(none printed)"]), "```"]
    lines += ["", "Phases: a stage's phase runs from the commit of the stages before it in build order to its own "
              "commit (the stage the build waits for; `bench_scale.Phases`); its seconds are `metrics.json`'s "
              "`timing_seconds`. `_start`: snapshot and job graph, until the job's plan is printed; `_publish`: "
              "after the last commit (publish, lineage, run metrics and report, the runner's shutdown). Stages "
              "overlap in one job, so a phase's memory includes what runs alongside the awaited stage."]
    lines += per_stage_by_size("Seconds per stage (commit to commit)", runs,
                               lambda r, st: _s(st["seconds"]))
    lines += per_stage_by_size("Stage seconds per MB of text", runs,
                               lambda r, st: "-" if st["seconds"] is None else
                               f"{st['seconds'] / (r['text_bytes'] / MB):.3f}")
    lines += per_phase_by_size("CPU seconds per phase (whole process tree)", runs, "cpu_seconds")
    lines += per_phase_by_size("Driver RSS MiB per phase (peak of the phase's samples; one process for the whole "
                               "build: it includes what earlier phases left allocated)", runs, "driver_rss_mb")
    if any(r["worker_processes"] for r in runs):
        lines += per_phase_by_size("Largest SDK worker RSS MiB per phase", runs, "worker_rss_mb")
    if any(r["jvm_processes"] for r in runs):
        lines += per_phase_by_size("Job server JVM RSS MiB per phase (embedded Flink runs in it)", runs, "jvm_rss_mb")
    heaps = [(f"{r['text_bytes'] / MB:,.0f} MB", r["jvm_heap"]) for r in runs if r.get("jvm_heap")]
    if heaps:
        lines += ["", "## Job server Java heap per phase, MiB (its GC log: `bench/jvm_heap_phases.py`)", "",
                  "Per phase: the peak after a full collection (the live heap; `-` where none ran) / the peak "
                  "after any pause (an upper bound: a young pause leaves the old generation's garbage) / the peak "
                  "committed heap (what G1 has taken from the OS, most of the JVM's RSS). G1 commits heap as the "
                  "allocation rate asks, up to `-Xmx`, and seldom returns it: the RSS of a longer build can grow "
                  "with the same live data.",
                  "", jvm_heap_phases.markdown(heaps, phase_names(runs))]
    live = [r for r in runs if r.get("jvm_live_heap")]
    if live:
        largest = live[-1]
        peak_phase = max(largest["jvm_live_heap"], key=lambda ph: largest["jvm_live_heap"][ph]["live_peak_mib"])
        top = largest["jvm_live_heap"][peak_phase]["top_classes"]
        skipped = sum(r.get("jvm_live_skipped") or 0 for r in live)
        lines += ["", f"Live heap: `jcmd GC.class_histogram` every {live[0]['jvm_live_seconds']:g} s runs a full "
                      "collection, so the table's first figure (the peak after a full collection) is what the job "
                      "held at those moments. The largest classes at the "
                      f"{largest['text_bytes'] / MB:,.0f} MB run's largest histogram (phase `{peak_phase}`, "
                      f"{largest['jvm_live_heap'][peak_phase]['live_peak_mib']:,.0f} MiB): "
                      + ", ".join(f"`{name}` {mib:,.0f} MiB" for name, mib in top) + "."
                      + (f" {skipped} histogram(s) left out: the JVM skipped their collection (`GC locker is held`),"
                         " so they counted garbage." if skipped else "")]
    lines += per_phase_by_size("Whole process tree RSS MiB per phase", runs, "tree_rss_mb")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# Comparison across runners and with the pre-rewrite build; the local runner's ceiling

STAGE_GROUPS = (("ingest", ("ingest",)), ("exact + near dedup", ("exact_dedup", "near_dedup")),
                ("scorers + select", ("language", "heuristics", "blocklist", "quality", "safety", "pii",
                                      "decontamination", "select")),
                ("n-gram index + tokenize", ("ngram_index", "tokenize")))
MACHINE_MIB = 24 * 1024  # this machine's memory (the workplace's machines: 2 cores, 24 GiB)
HEADROOM_MIB = 4 * 1024  # left to the OS, the page cache and whatever else runs


def linear_fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares (intercept, slope) of y on x; two points give the line through them."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
    return mean_y - slope * mean_x, slope


def local_ceiling(local_runs: list[dict]) -> dict | None:
    """Text size at which the local build's process tree would pass the machine's memory.

    Model, per phase p: the tree's RSS in p (driver + SDK workers, MiB) = a_p + b_p x, x =
    MB of text, fitted by least squares over the successful local runs (two sizes: the line
    through them). The driver runs every shuffle (FnApiRunner) and a worker receives its
    share of a grouping as one message, so the phases with shuffles of per-document data
    grow with x; the build's peak at x is the largest a_p + b_p x. The ceiling is the
    smallest x at which some phase reaches the budget: the machine's memory, and the
    memory less a headroom for the OS, the page cache and whatever else runs.
    """
    runs = [r for r in local_runs if not r.get("failure")]
    if len({r["text_bytes"] for r in runs}) < 2:
        return None
    fits = {}
    for phase in phase_names(runs):
        points = [(r["text_bytes"] / MB, (r["phases"].get(phase) or {}).get("tree_rss_mb")) for r in runs]
        driver = [(r["text_bytes"] / MB, (r["phases"].get(phase) or {}).get("driver_rss_mb")) for r in runs]
        if any(y is None for _, y in points) or len({x for x, _ in points}) < 2:
            continue
        a, b = linear_fit(points)
        da, db = linear_fit(driver)
        fits[phase] = {"points": points, "intercept_mib": a, "mib_per_mb": b,
                       "driver_points": driver, "driver_intercept_mib": da, "driver_mib_per_mb": db}

    def crossing(budget: float) -> tuple[float, str] | None:
        found = [((budget - f["intercept_mib"]) / f["mib_per_mb"], phase) for phase, f in fits.items()
                 if f["mib_per_mb"] > 0]
        return min(found) if found else None

    machine, ceiling = crossing(MACHINE_MIB), crossing(MACHINE_MIB - HEADROOM_MIB)
    if ceiling is None:
        return {"fits": fits, "ceiling_mb": None}
    return {"fits": fits, "machine_mib": MACHINE_MIB, "headroom_mib": HEADROOM_MIB,
            "machine_mb": machine[0], "ceiling_mb": ceiling[0], "binding_phase": ceiling[1],
            "predict": {phase: f"{f['intercept_mib']:.0f} + {f['mib_per_mb']:.2f} x" for phase, f in fits.items()}}


def predicted_tree_mib(ceiling: dict, text_mb: float) -> tuple[float, str]:
    """The model's peak tree RSS at ``text_mb`` and the phase it falls in."""
    return max((f["intercept_mib"] + f["mib_per_mb"] * text_mb, phase) for phase, f in ceiling["fits"].items())


def result_label(result: dict) -> str:
    """The runner, and what sets a results file apart from the day's plain one (``-scale-large``, a tag)."""
    suffix = result["date"][8:].lstrip("-")
    return result["runner"] + (f" ({suffix})" if suffix else "")


def comparison_markdown(results: list[dict], old: dict | None, date: str) -> str:
    """Runners side by side per size, the pre-rewrite local numbers next to them, the local ceiling."""
    runs = [(result_label(res), r) for res in results for r in res["runs"]]
    runs.sort(key=lambda pair: (pair[1]["text_bytes"], pair[0]))
    lines = [f"# Scale runs compared ({date}): local runner and embedded Flink, one job per build", "",
             "From " + ", ".join(f"`bench/results/scale-{res['runner']}-{res['date']}.json`" for res in results)
             + (f" and the pre-rewrite `bench/results/scale-{old['date']}.json` (one Beam job per stage, "
                "spill files; DirectRunner multi_processing, 2 workers)" if old else "")
             + "; written by `bench/bench_scale.py --compare`. Memory in MiB.", "",
             "| build | text MB | wall s | CPU s | s per MB | CPU s per MB | driver peak | worker peak | JVM peak "
             "| tree peak | load avg start / end | dataset id |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    old_runs = [r for r in (old or {}).get("runs", []) if round(r["text_bytes"] / MB) in
                {round(r2["text_bytes"] / MB) for _, r2 in runs}]
    for r in old_runs:
        lines.append(f"| pre-rewrite local | {r['text_bytes'] / MB:.0f} | {r['wall_seconds']:.0f} | "
                     f"{r['cpu_seconds']:.0f} | {r['wall_seconds'] / (r['text_bytes'] / MB):.2f} | "
                     f"{r['cpu_seconds'] / (r['text_bytes'] / MB):.2f} | {r['driver_peak_mb']:.0f} | "
                     f"{r['worker_peak_mb']:.0f} | - | - | {r['load_start']:.2f} / {r['load_end']:.2f} | "
                     f"`{r['dataset_id'][:16]}` |")
    for runner, r in runs:
        lines.append(f"| {runner}{' (FAILED)' if r.get('failure') else ''} | {r['text_bytes'] / MB:.0f} | "
                     f"{r['wall_seconds']:.0f} | {r['cpu_seconds']:.0f} | {r['seconds_per_mb']:.2f} | "
                     f"{r['cpu_seconds_per_mb']:.2f} | {_mb(r['driver_peak_mb'])} | {_mb(r['worker_peak_mb'])} | "
                     f"{_mb(r['jvm_peak_mb'])} | {_mb(r['tree_peak_mb'])} | {_load(r)} | "
                     f"`{(r['dataset_id'] or '-')[:16]}` |")
    # dataset ids per size
    by_size: dict[int, list] = {}
    for _, r in runs:
        if r["dataset_id"]:
            by_size.setdefault(round(r["text_bytes"] / MB), []).append(r["dataset_id"])
    lines += ["", "Same dataset id from every runner at a size: " + ", ".join(
        f"{size} MB {'yes' if len(set(ids)) == 1 else 'NO (' + ', '.join(sorted(set(ids))) + ')'}"
        for size, ids in sorted(by_size.items()) if len(ids) > 1) + "."]
    # stage seconds per MB, every build
    columns = [(f"pre-rewrite {r['text_bytes'] / MB:.0f}", r) for r in old_runs] + [
        (f"{runner} {r['text_bytes'] / MB:.0f}", r) for runner, r in runs]
    names = phase_names([r for _, r in runs])[1:-1]
    lines += ["", "## Stage seconds per MB of text", "",
              "New builds: commit-to-commit spans in one job (stages overlap; `metrics.json`); pre-rewrite: each "
              "stage's own job, one after the other. Totals: wall seconds per MB.", "",
              "| stage | " + " | ".join(label for label, _ in columns) + " |", "|---|" + "---:|" * len(columns)]
    for name in names:
        cells = []
        for _, r in columns:
            st = stage_entry(r, name)
            cells.append("-" if st is None or st["seconds"] is None
                         else f"{st['seconds'] / (r['text_bytes'] / MB):.3f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("| **wall s per MB** | " + " | ".join(
        f"{r['wall_seconds'] / (r['text_bytes'] / MB):.3f}" for _, r in columns) + " |")
    lines.append("| **CPU s per MB** | " + " | ".join(
        f"{r['cpu_seconds'] / (r['text_bytes'] / MB):.3f}" for _, r in columns) + " |")
    # groups of stages: in one job, stages that run side by side share a span (the fused scorers all commit
    # at once; tokenize runs while the n-gram index is built), so the spans compare by group
    lines += ["", "## Seconds per MB of text by group of stages", "",
              "Spans of consecutive stages added up (pre-rewrite: their jobs' seconds); CPU seconds (new builds): "
              "the whole tree's CPU in the group's phases.", "",
              "| group | " + " | ".join(label for label, _ in columns) + " |", "|---|" + "---:|" * len(columns)]
    for group, members in STAGE_GROUPS:
        cells = []
        for _, r in columns:
            seconds = [st["seconds"] for st in (stage_entry(r, m) for m in members) if st and st["seconds"] is not None]
            cells.append(f"{sum(seconds) / (r['text_bytes'] / MB):.3f}" if seconds else "-")
        lines.append(f"| {group} | " + " | ".join(cells) + " |")
    for group, members in STAGE_GROUPS:
        cells = []
        for _, r in columns:
            cpu = [(r.get("phases") or {}).get(m, {}).get("cpu_seconds") for m in members]
            cpu = [c for c in cpu if c is not None]
            cells.append(f"{sum(cpu) / (r['text_bytes'] / MB):.3f}" if cpu and "phases" in r else "-")
        lines.append(f"| {group}, CPU s | " + " | ".join(cells) + " |")
    # growth from the smallest to the largest size per runner
    lines += ["", "## Growth from the smaller to the larger size (x = ratio; linear time: CPU ratio = text ratio)", "",
              "| runner | text | wall | CPU s | driver peak | tree peak |", "|---|---:|---:|---:|---:|---:|"]
    for res in results:
        ok = [r for r in res["runs"] if not r.get("failure") and res.get("corpus_name", "scale") == "scale"]
        if len(ok) >= 2:
            small, large = ok[0], ok[-1]
            lines.append(f"| {result_label(res)} | {large['text_bytes'] / small['text_bytes']:.2f}x | "
                         f"{large['wall_seconds'] / small['wall_seconds']:.2f}x | "
                         f"{large['cpu_seconds'] / small['cpu_seconds']:.2f}x | "
                         f"{large['driver_peak_mb'] / small['driver_peak_mb']:.2f}x | "
                         f"{large['tree_peak_mb'] / small['tree_peak_mb']:.2f}x |")
    # fixed and marginal cost: seconds = c0 + c1 x through the runs on the scale corpus
    builds = ([("pre-rewrite local", old_runs)] if len(old_runs) >= 2 else []) + [
        (result_label(res), [r for r in res["runs"] if not r.get("failure")]) for res in results
        if res.get("corpus_name", "scale") == "scale"]
    lines += ["", "## Fixed and marginal cost", "",
              "`seconds = c0 + c1 x` (x = MB of text) through the runs of each build: c1 is what one more MB "
              "costs, c0 what a build costs whatever its size (start-up, models, the Flink job server and its "
              "plan optimizer, the run report). Least squares; with two sizes the line runs through both points: it splits "
              "the cost, it does not test linearity (the per-stage columns do). CPU seconds are the figures to "
              "trust on a shared machine.", "",
              "| build | CPU c1 (s per MB) | CPU c0 (s) | wall c1 (s per MB) | wall c0 (s) |",
              "|---|---:|---:|---:|---:|"]
    for label, rs in builds:
        if len({r["text_bytes"] for r in rs}) < 2:
            continue
        c0, c1 = linear_fit([(r["text_bytes"] / MB, r["cpu_seconds"]) for r in rs])
        w0, w1 = linear_fit([(r["text_bytes"] / MB, r["wall_seconds"]) for r in rs])
        lines.append(f"| {label} | {c1:.3f} | {c0:.0f} | {w1:.3f} | {w0:.0f} |")
    local = next((res for res in results if res["runner"] == "local" and res.get("corpus_name", "scale") == "scale"),
                 None)
    ceiling = local_ceiling(local["runs"]) if local else None
    if ceiling and ceiling.get("ceiling_mb"):
        binding = ceiling["fits"][ceiling["binding_phase"]]
        lines += ["", "## The local runner's ceiling", "",
                  "Model: per phase, the RSS of the build's process tree (driver + SDK workers) = a + b x, x = MB of "
                  "text, through the local runs; the build's peak is the largest phase (`bench_scale.local_ceiling`). "
                  f"The phase that grows fastest and reaches the budget first is `{ceiling['binding_phase']}`: "
                  + ", ".join(f"{x:.0f} MB: {y:,.0f} MiB" for x, y in binding["points"])
                  + f", so a = {binding['intercept_mib']:,.0f} MiB, b = {binding['mib_per_mb']:.2f} MiB per MB of text "
                  "(the driver alone in that phase: "
                  f"{', '.join(f'{y:,.0f}' for _, y in binding['driver_points'])} MiB, "
                  f"a = {binding['driver_intercept_mib']:,.0f}, b = {binding['driver_mib_per_mb']:.2f}). The tree "
                  f"reaches the machine's {MACHINE_MIB // 1024} GiB at **{ceiling['machine_mb']:,.0f} MB** of text; "
                  f"with {HEADROOM_MIB // 1024} GiB left to the OS, the page cache and other processes, at "
                  f"**{ceiling['ceiling_mb']:,.0f} MB**.", "",
                  "| phase | tree MiB per MB of text (b) | a (MiB) | at the ceiling (MiB) |", "|---|---:|---:|---:|"]
        for phase, f in ceiling["fits"].items():
            lines.append(f"| {phase} | {f['mib_per_mb']:.2f} | {f['intercept_mib']:,.0f} | "
                         f"{f['intercept_mib'] + f['mib_per_mb'] * ceiling['ceiling_mb']:,.0f} |")
        for res in results:
            if res["runner"] != "local" or res is local:
                continue
            for r in res["runs"]:
                x = r["text_bytes"] / MB
                predicted, phase = predicted_tree_mib(ceiling, x)
                outcome = (f"failed ({r['failure'].get('killed_at_memory_limit') or r['failure']['errors'][-1:]})"
                           if r.get("failure") else "succeeded")
                lines += ["", f"Check on `{res.get('corpus_name', 'scale')}` at {x:,.0f} MB of text: the model "
                          f"predicts a tree peak of {predicted:,.0f} MiB (in {phase}); measured "
                          f"{r['tree_peak_mb']:,.0f} MiB (driver {r['driver_peak_mb']:,.0f}, largest worker "
                          f"{r['worker_peak_mb']:,.0f}); the build {outcome}."]
        every = [r for res in results if res["runner"] == "local" for r in res["runs"]]
        if len(every) > len(local["runs"]):
            refit = local_ceiling(every)
            if refit and refit.get("ceiling_mb"):
                f = refit["fits"][refit["binding_phase"]]
                lines += ["", f"Fitted on every local run above ({len([r for r in every if not r.get('failure')])} "
                          f"sizes), the binding phase is `{refit['binding_phase']}` with a = "
                          f"{f['intercept_mib']:,.0f} MiB, b = {f['mib_per_mb']:.2f} MiB per MB: the machine's "
                          f"{MACHINE_MIB // 1024} GiB at **{refit['machine_mb']:,.0f} MB**, {HEADROOM_MIB // 1024} "
                          f"GiB left at **{refit['ceiling_mb']:,.0f} MB** of text."]
    return "\n".join(lines) + "\n"


def other_runner_ids(runner: str, exclude: Path | None = None) -> dict[int, tuple[str, str]]:
    """{text bytes: (dataset id, results file)} of the newest results of the other runners."""
    found: dict[int, tuple[str, str]] = {}
    for path in sorted(RESULTS.glob("scale-*.json")):
        if path == exclude:
            continue
        try:
            result = json.loads(path.read_text())
        except ValueError:
            continue
        if result.get("runner") in (None, runner):
            continue
        for r in result["runs"]:
            if r.get("dataset_id"):
                found[r["text_bytes"]] = (r["dataset_id"], path.name)
    return found


def command_options(args) -> str:
    """The options of a run that set its results apart, as the command in the results file gives them."""
    return ((f" --jvm_live_seconds {args.jvm_live_seconds:g}" if args.jvm_live_seconds else "")
            + (f" --beam_args '{args.beam_args}'" if args.beam_args else "")
            + (f" --tag {args.tag}" if args.tag else ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES_MB), help="subset sizes in MB of text")
    parser.add_argument("--runner", default="local", choices=["local", "flink"],
                        help="local: DirectRunner, --direct_running_mode (multi_processing), --workers processes; "
                             "flink: embedded Flink (--runner=FlinkRunner --flink_master=[local]; `make flink` first)")
    parser.add_argument("--workers", type=int, default=WORKERS,
                        help="local: SDK worker processes (--direct_num_workers)")
    parser.add_argument("--mode", default="multi_processing", choices=["multi_processing", "in_memory"],
                        help="local: --direct_running_mode; in_memory runs one worker inside the driver process")
    parser.add_argument("--corpus", default="scale", choices=list(CORPORA),
                        help="scale: the 1 GB corpus (3 mirror hosts); scale-large: 8 mirror hosts, 2.1 GB "
                             "(build_corpus.py --scale-large), for the local runner's ceiling; scale-xl: 17 mirror "
                             "hosts, > 4 GB (build_corpus.py --scale-xl), for 1 GB against 4 GB")
    parser.add_argument("--stall_seconds", type=float, default=STALL_SECONDS,
                        help=f"kill a build whose process tree used less than {STALL_CPU_SHARE * 100:.0f}%% of a core for this "
                             "long (a deadlock; the JVMs' jstack goes to bench/work/logs; 0: never)")
    parser.add_argument("--memory_limit_mb", type=float, default=20 * 1024,
                        help="kill a build whose process tree passes this RSS (MiB; recorded as a failure)")
    parser.add_argument("--beam_args", default="",
                        help="more arguments for the build (shell words), e.g. "
                             "'--job_server_jvm_properties=-Xss16m'; results go to a file tagged with --tag")
    parser.add_argument("--jvm_live_seconds", type=float, default=0.0,
                        help="flink: every this many seconds, the job server's live heap by class "
                             "(jcmd GC.class_histogram: a full collection); 0 (default): never")
    parser.add_argument("--tag", default="", help="suffix of the results files (with --beam_args)")
    parser.add_argument("--render", metavar="JSON", help="only rewrite the .md of an earlier results .json")
    parser.add_argument("--compare", metavar="JSON", nargs="+",
                        help="only write bench/results/scale-compare-<date>.md from these results (one per runner) "
                             "and the pre-rewrite results (--old)")
    parser.add_argument("--old", metavar="JSON", default=str(RESULTS / "scale-20261203.json"),
                        help="pre-rewrite results for --compare")
    args = parser.parse_args()
    if args.render:
        Path(args.render).with_suffix(".md").write_text(markdown(json.loads(Path(args.render).read_text())))
        return 0
    if args.compare:
        results = [json.loads(Path(p).read_text()) for p in args.compare]
        old = json.loads(Path(args.old).read_text()) if args.old and Path(args.old).exists() else None
        date = max(res["date"][:8] for res in results)
        path = RESULTS / f"scale-compare-{date}.md"
        path.write_text(comparison_markdown(results, old, date))
        log(f"written {path.relative_to(REPO)}")
        return 0
    if (args.beam_args or args.jvm_live_seconds) and not args.tag:
        parser.error("--beam_args and --jvm_live_seconds need --tag (their results go to their own file)")
    global FLINK_JOB_SERVER
    from beam_pipeline.options.corpus_options import FLINK_JOB_SERVER_BEAM
    FLINK_JOB_SERVER = FLINK_JOB_SERVER_BEAM
    import build_corpus

    spec = getattr(build_corpus, CORPORA[args.corpus])
    work = spec.config.parent
    info = build_corpus.ensure_corpus(spec=spec)
    stats = file_text_bytes(info, work)
    runs, mismatches = [], []
    results_path = RESULTS / f"scale-{args.runner}-{result_date(args)}.json"
    for size in sorted(args.sizes):
        files = choose_files(stats, size)
        text = sum(stats[f]["text_bytes"] for f in files)
        records = sum(stats[f]["records"] for f in files)
        config = make_subset(size, files, work)
        log(f"{size} MB subset: {len(files)} files, {text / MB:.1f} MB of text, {records:,} records")
        run = run_one(size, config, text, records, args.workers, args.mode, runner=args.runner,
                      memory_limit_mb=args.memory_limit_mb, allow_failure=True, stall_seconds=args.stall_seconds,
                      beam_args=tuple(shlex.split(args.beam_args)), jvm_live_seconds=args.jvm_live_seconds)
        other = other_runner_ids(args.runner, exclude=results_path).get(text)
        if other and run["dataset_id"]:
            run["dataset_id_check"] = {"other": other[0], "results": other[1], "equal": other[0] == run["dataset_id"]}
            if other[0] != run["dataset_id"]:
                mismatches.append(f"{size} MB: {run['dataset_id']} on {args.runner}, {other[0]} in {other[1]}")
            else:
                log(f"{size} MB: same dataset id as {other[1]}")
        runs.append(run)
        write_results(info, runs, args)
    if mismatches:
        raise SystemExit("dataset ids differ between runners: " + "; ".join(mismatches))
    return 1 if any(r.get("failure") for r in runs) else 0


def result_date(args) -> str:
    return (datetime.date.today().strftime("%Y%m%d") + ("" if args.workers == WORKERS else f"-w{args.workers}")
            + ("" if args.mode == "multi_processing" else f"-{args.mode}")
            + ("" if getattr(args, "corpus", "scale") == "scale" else f"-{args.corpus}")
            + (f"-{args.tag}" if getattr(args, "tag", "") else ""))


def write_results(info: dict, runs: list[dict], args) -> None:
    stats = info["stats"]
    date = result_date(args)
    result = {
        "date": date, "runner": args.runner,
        "runner_description": runner_description(args.runner, args.workers, args.mode, args.beam_args),
        "command": f"bench/bench_scale.py --runner {args.runner} --sizes " + " ".join(map(str, args.sizes))
                   + ("" if args.corpus == "scale" else f" --corpus {args.corpus}")
                   + command_options(args),
        "corpus_name": args.corpus,
        "machine": f"{CORES} cores, {platform.python_version()}, {platform.machine()}",
        "workers": args.workers, "mode": args.mode,
        "corpus": {"corpus_digest": info["corpus_digest"], "recipe_digest": info["recipe_digest"],
                   "description": f"{stats['pages']:,} pages of {len(info['recipe']['pins'])} Debian doc packages, "
                                  f"{stats['unique_text_bytes'] / MB:.0f} MB distinct + mirror copies = "
                                  f"{stats['text_bytes']['total'] / MB:.0f} MB of text"},
        "runs": runs,
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"scale-{args.runner}-{date}.json"
    if path.exists():  # runs of the same day, runner and corpus accumulate (a size run again replaces its run)
        earlier = json.loads(path.read_text())
        if earlier.get("corpus", {}).get("corpus_digest") == info["corpus_digest"]:
            sizes = {r["size_mb"] for r in runs}
            kept = [r for r in earlier["runs"] if r["size_mb"] not in sizes]
            result["runs"] = sorted(kept + runs, key=lambda r: r["text_bytes"])
            result["command"] = "bench/bench_scale.py --runner {} --sizes {}".format(
                args.runner, " ".join(str(r["size_mb"]) for r in result["runs"])) + (
                "" if args.corpus == "scale" else f" --corpus {args.corpus}") + command_options(args)
    path.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    (RESULTS / f"scale-{args.runner}-{date}.md").write_text(markdown(result))
    log(f"results in bench/results/scale-{args.runner}-{date}.md")


if __name__ == "__main__":
    sys.exit(main())
