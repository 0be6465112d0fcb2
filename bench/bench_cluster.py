#!/usr/bin/env python3
"""The same build on a 2-TaskManager Flink session cluster and on embedded Flink (issue 40, item 4).

Usage (``make bench-cluster``)::

    .venv/bin/python bench/bench_cluster.py [--config bench/work/scale-xl/subsets/1000/corpus.yaml]
        [--embedded bench/results/scale-flink-<date>-scale-xl.json] [--tag TAG]

1. ``scripts/flink_cluster.sh start`` on its own ports (REST :data:`REST_PORT`): a JobManager and two
   TaskManagers of one slot, separate JVMs, Beam's runner in the cluster's ``lib/`` (docs/flink.md);
2. the build of ``--config`` (by default the 1 GB subset ``bench/bench_scale.py --runner flink --corpus
   scale-xl`` makes) with ``bench_scale.run_one`` (a child ``python -m beam_pipeline run``, its process
   tree sampled) and ``--flink_master=localhost:<port> --parallelism=2``: the CLI adds the PROCESS
   environment and ``--environment_cache_millis``;
3. meanwhile :class:`ClusterSampler` samples the cluster's side every 0.5 s: the JobManager and
   TaskManager JVMs and every process they start (the SDK workers and their boot), CPU seconds since the
   build started and peak memory (``VmHWM``) per role;
4. the cluster is stopped; the result is set beside the embedded-Flink run of the same size in
   ``--embedded`` (``bench_scale``'s results JSON; its run of the same text MB): dataset ids (must be
   equal), CPU of the whole job (driver tree + cluster), their ratio (target <= 1.3x), wall seconds,
   per-stage seconds;
5. ``bench/results/cluster-vs-embedded-<YYYYMMDD>[-tag].json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS = BENCH / "results"
SCRIPT = REPO / "scripts" / "flink_cluster.sh"
REST_PORT = 38081
CLUSTER_ENV = {**os.environ, "FLINK_REST_PORT": str(REST_PORT), "FLINK_RPC_PORT": str(REST_PORT - 1958),
               "FLINK_TASKMANAGERS": "2", "FLINK_SLOTS": "1"}
DEFAULT_CONFIG = BENCH / "work" / "scale-xl" / "subsets" / "1000" / "corpus.yaml"
CPU_TARGET = 1.3

sys.path.insert(0, str(BENCH))
import bench_scale  # noqa: E402
from run_all import descendants  # noqa: E402


def script(*args: str) -> str:
    done = subprocess.run([str(SCRIPT), *args], env=CLUSTER_ENV, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"flink_cluster.sh {' '.join(args)} failed: {done.stderr[-3000:]}")
    return done.stdout


def cluster_role(pid: int, roots: dict[int, str]) -> str:
    if pid in roots:
        return roots[pid]
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    return "worker" if "sdk_worker_main" in cmdline else "other"


class ClusterSampler:
    """CPU seconds and peak memory of the cluster's JVMs and of every process they start, from
    ``start()`` on: a JVM counts from its CPU at the first sample (it ran before the build), a process
    started later counts whole. A worker that exits between two samples loses at most 0.5 s."""

    def __init__(self, roots: dict[int, str]):
        self.roots = roots
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.hwm_kb: dict[int, int] = {}
        self.role: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "ClusterSampler":
        self.sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(bench_scale.SAMPLE_SECONDS):
            self.sample()

    def sample(self) -> None:
        for root in self.roots:
            for pid in descendants(root):
                cpu, status = bench_scale._cpu_seconds(pid), bench_scale._status(pid)
                if cpu is None:
                    continue
                if pid not in self.first:
                    self.first[pid] = cpu if pid in self.roots else 0.0
                    self.role[pid] = cluster_role(pid, self.roots)
                self.last[pid] = max(self.last.get(pid, 0.0), cpu)
                if status:
                    self.hwm_kb[pid] = max(self.hwm_kb.get(pid, 0), status["hwm_kb"])

    def cpu_by_role(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for pid, last in self.last.items():
            out[self.role[pid]] = out.get(self.role[pid], 0.0) + last - self.first[pid]
        return {role: round(seconds, 1) for role, seconds in sorted(out.items())}

    def peak_mb_by_role(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for pid, kb in self.hwm_kb.items():
            out[self.role[pid]] = max(out.get(self.role[pid], 0.0), kb / 1024)
        return {role: round(mb) for role, mb in sorted(out.items())}


def wait_for_idle_workers(jvms: list[int], seconds: float = 120) -> None:
    """Until the TaskManagers' SDK workers are gone (they are kept --environment_cache_millis after their
    last task), so their CPU is all sampled; at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not [p for jvm in jvms for p in descendants(jvm)[1:]]:
            return
        time.sleep(1)


def embedded_run(path: Path, size_mb: int) -> dict:
    """The finished run of ``size_mb`` in bench_scale's results ``path`` (the same subset: its text bytes
    and records are the cluster run's too)."""
    runs = json.loads(path.read_text())["runs"]
    same = [r for r in runs if r["size_mb"] == size_mb and not r.get("failure")]
    if not same:
        raise SystemExit(f"{path} has no finished run of {size_mb} MB: run bench_scale.py --runner flink first")
    return same[0]


def newest_embedded() -> Path | None:
    found = sorted(glob.glob(str(RESULTS / "scale-flink-*-scale-xl.json")))
    return Path(found[-1]) if found else None


def markdown(result: dict) -> str:
    c, e = result["cluster"], result["embedded"]
    mb = c["text_bytes"] / 1e6
    lines = [
        f"# The same build on a 2-TaskManager session cluster and on embedded Flink ({result['date']})",
        "",
        f"Command: `{result['command']}`; the embedded run: `{result['embedded_results']}` "
        f"(`bench/bench_scale.py --runner flink --corpus scale-xl`). {result['machine']}",
        "",
        f"Text: {mb:.0f} MB, {c['records']:,} records (`{result['config']}`). Cluster: "
        "`scripts/flink_cluster.sh start` with 2 TaskManagers of 1 slot (separate JVMs, 3.5 GB each), "
        "`--parallelism=2`, SDK workers `--environment_type=PROCESS` started by each TaskManager, Beam's "
        "runner in the cluster's `lib/` and `--environment_cache_millis=60000` (docs/flink.md). Embedded: "
        "Flink in the job server's JVM, the SDK workers in the driver (LOOPBACK), parallelism 2.",
        "",
        "| | cluster | embedded | cluster / embedded |",
        "|---|---:|---:|---:|",
        f"| dataset id | `{c['dataset_id'][:16]}` | `{e['dataset_id'][:16]}` | "
        f"{'same' if c['dataset_id'] == e['dataset_id'] else '**different**'} |",
        f"| CPU s, the whole job | {c['cpu_seconds']:.0f} | {e['cpu_seconds']:.0f} | **{result['cpu_ratio']:.2f}x** "
        f"(target <= {CPU_TARGET}x: {'met' if result['cpu_ratio'] <= CPU_TARGET else 'not met'}) |",
        f"| wall s | {c['wall_seconds']:.0f} | {e['wall_seconds']:.0f} | "
        f"{c['wall_seconds'] / e['wall_seconds']:.2f}x |",
        f"| load average at start / end | {c['load_start'][0]:.2f} / {c['load_end'][0]:.2f} | "
        f"{e['load_start'][0]:.2f} / {e['load_end'][0]:.2f} | |",
        "",
        "CPU seconds of the cluster run by process: driver tree (the build process, the job server it starts) "
        + ", ".join(f"{role} {s:.0f}" for role, s in c["driver_cpu_by_role"].items())
        + "; cluster " + ", ".join(f"{role} {s:.0f}" for role, s in c["cluster_cpu_by_role"].items())
        + ". Peak memory (MiB, `VmHWM`; the JVMs' since the cluster started): "
        + ", ".join(f"{role} {mb:.0f}" for role, mb in c["cluster_peak_mb_by_role"].items()) + ".",
        "",
        "## Seconds per stage (commit to commit)",
        "",
        "| stage | cluster | embedded |",
        "|---|---:|---:|",
    ]
    embedded_stages = {s["stage"]: s["seconds"] for s in e["stages"]}
    for stage in c["stages"]:
        lines.append(f"| {stage['stage']} | {bench_scale._s(stage['seconds'])} | "
                     f"{bench_scale._s(embedded_stages.get(stage['stage']))} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="the corpus config to build")
    parser.add_argument("--embedded", type=Path, help="bench_scale's embedded-Flink results JSON (default: the "
                        "newest scale-flink-*-scale-xl.json)")
    parser.add_argument("--size", type=int, default=1000, help="the subset's size in MB (bench_scale --sizes)")
    parser.add_argument("--tag", default="", help="suffix of the results files")
    args = parser.parse_args()
    if not args.config.exists():
        raise SystemExit(f"no {args.config}: run `bench/bench_scale.py --runner flink --corpus scale-xl "
                         "--sizes 1000` first (it makes the subset and the embedded run)")
    embedded_path = args.embedded or newest_embedded()
    if embedded_path is None:
        raise SystemExit("no embedded-Flink results (bench/results/scale-flink-*-scale-xl.json): run "
                         "`bench/bench_scale.py --runner flink --corpus scale-xl --sizes 1000` first")
    embedded = embedded_run(embedded_path, args.size)

    started = time.monotonic()
    script("start")
    print(f"cluster up in {time.monotonic() - started:.0f} s", flush=True)
    try:
        taskmanagers = [int(p) for p in script("taskmanager-pids").split()]
        jobmanager = [int(p) for p in script("pids").split() if int(p) not in taskmanagers]
        roots = {**{p: "jobmanager" for p in jobmanager}, **{p: "taskmanager" for p in taskmanagers}}
        sampler = ClusterSampler(roots).start()
        run = bench_scale.run_one(args.size, args.config, embedded["text_bytes"], embedded["records"],
                                  label="cluster", runner="flink",
                                  beam_args=(f"--flink_master=localhost:{REST_PORT}", "--parallelism=2"))
        wait_for_idle_workers(taskmanagers)
        sampler.stop()
    finally:
        script("stop")
    cluster_cpu = sampler.cpu_by_role()
    cpu = run["cpu_seconds"] + sum(cluster_cpu.values())
    date = datetime.date.today().strftime("%Y%m%d")
    result = {
        "date": date,
        "command": "bench/bench_cluster.py" + (f" --config {args.config}" if args.config != DEFAULT_CONFIG else ""),
        "config": shown(args.config),
        "embedded_results": shown(embedded_path),
        "machine": f"{bench_scale.CORES} cores, Python {sys.version.split()[0]}.",
        "cluster": {"text_bytes": run["text_bytes"], "records": run["records"], "dataset_id": run["dataset_id"],
                    "wall_seconds": run["wall_seconds"], "cpu_seconds": cpu,
                    "driver_cpu_by_role": {k: round(v, 1) for k, v in run["cpu_seconds_by_role"].items()},
                    "cluster_cpu_by_role": cluster_cpu, "cluster_peak_mb_by_role": sampler.peak_mb_by_role(),
                    "load_start": run["load_start"], "load_end": run["load_end"], "stages": run["stages"]},
        "embedded": {key: embedded[key] for key in ("text_bytes", "records", "dataset_id", "wall_seconds",
                                                     "cpu_seconds", "stages", "load_start", "load_end")},
    }
    result["cpu_ratio"] = cpu / embedded["cpu_seconds"]
    stem = RESULTS / f"cluster-vs-embedded-{date}{'-' + args.tag if args.tag else ''}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    stem.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0 if result["cluster"]["dataset_id"] == result["embedded"]["dataset_id"] else 1


def shown(path: Path) -> str:
    """A path as the results files name it: relative to the checkout when inside it."""
    path = path.resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


if __name__ == "__main__":
    sys.exit(main())
