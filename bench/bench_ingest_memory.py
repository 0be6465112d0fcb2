#!/usr/bin/env python3
"""The job server JVM's memory during ingest on embedded Flink: RSS and native memory tracking, until ingest commits.

``.venv/bin/python bench/bench_ingest_memory.py <config> <output_root> <tag> [Beam options ...]`` runs
``python -m beam_pipeline run`` on ``[local]`` Flink with ``-Xss16m -Xmx3g -XX:NativeMemoryTracking=summary``,
reads the JVM's ``VmRSS`` every 0.5 s and ``jcmd <pid> VM.native_memory summary`` every ~2 s (the heap and
"Other": direct buffers and ``Unsafe`` allocations), and stops the build (its process group, started
here) once the console says ``[ingest] committed``: the rest of the build is not measured. Prints each
NMT sample and a summary line; writes ``/tmp/bench-ingest-memory-<tag>.json`` (every sample). Used for
``bench/results/ingest-memory-20261207.md`` (docs/flink.md, "What one element carries").
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("config", help="the corpus config to build")
parser.add_argument("output_root", help="a fresh output root")
parser.add_argument("tag", help="names the JSON of samples: /tmp/bench-ingest-memory-<tag>.json")
args, extra = parser.parse_known_args()  # anything else goes to the build (Beam options)
config, root, tag = args.config, args.output_root, args.tag
cmd = [sys.executable, "-m", "beam_pipeline", "run", "--config", config, "--output_root", root,
       "--runner=FlinkRunner", "--flink_master=[local]",
       "--job_server_jvm_properties=-Xss16m", "--job_server_jvm_properties=-Xmx3g",
       "--job_server_jvm_properties=-XX:NativeMemoryTracking=summary", "--progress_interval=0", *extra]
print(" ".join(cmd), flush=True)
t0 = time.monotonic()
proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
state = {"ingest_started": None, "committed": None, "lines": []}


def reader():
    for line in proc.stdout:
        state["lines"].append(line)
        if "[ingest]" in line or "error" in line.lower():
            print(f"{time.monotonic() - t0:7.1f} {line.rstrip()}", flush=True)
        if "[ingest] runs in this job" in line:
            state["ingest_started"] = time.monotonic() - t0
        if "[ingest] committed" in line:
            state["committed"] = time.monotonic() - t0


threading.Thread(target=reader, daemon=True).start()


def descendants(pid):
    """Children of every thread of ``pid`` (Beam starts the job server from a thread), recursively."""
    out, kids = [], []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            kids += open(f"/proc/{pid}/task/{tid}/children").read().split()
    except OSError:
        return out
    for kid in kids:
        out.append(int(kid))
        out += descendants(int(kid))
    return out


def jvm_pid():
    for pid in descendants(proc.pid):
        try:
            if b"java" in open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0]:
                return pid
        except OSError:
            pass
    return None


def rss_mb(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def nmt(pid):
    try:
        out = subprocess.run(["jcmd", str(pid), "VM.native_memory", "summary", "scale=MB"], capture_output=True,
                             text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    res = {}
    for name in ("Java Heap", "Other", "Class", "Thread", "Internal", "Arena Chunk"):
        m = re.search(r"-?\s*" + re.escape(name) + r"\s*\(reserved=\d+MB, committed=(\d+)MB\)", out)
        if m:
            res[name] = int(m.group(1))
    m = re.search(r"Total: reserved=\d+MB, committed=(\d+)MB", out)
    if m:
        res["Total"] = int(m.group(1))
    return res


samples = []
peak_rss, peak_other, last_nmt, pid = 0.0, 0, 0.0, None
while proc.poll() is None:
    pid = jvm_pid()
    t = time.monotonic() - t0
    if pid:
        r = rss_mb(pid) or 0
        during = state["ingest_started"] is not None and state["committed"] is None
        if during:
            peak_rss = max(peak_rss, r)
        n = None
        if t - last_nmt > 2:
            n, last_nmt = nmt(pid), t
            if n and during:
                peak_other = max(peak_other, n.get("Other", 0))
        samples.append({"t": round(t, 1), "rss": round(r), "nmt": n})
        if n:
            print(f"{t:7.1f} jvm rss {r:,.0f} MiB nmt {n}", flush=True)
    if state["committed"] is not None:
        n = nmt(pid) if pid else None
        print(f"AT COMMIT {time.monotonic() - t0:.1f}s: rss {rss_mb(pid) if pid else None} nmt {n}", flush=True)
        samples.append({"t": round(time.monotonic() - t0, 1), "rss": rss_mb(pid) if pid else None, "nmt": n,
                        "commit": True})
        break
    time.sleep(0.5)
os.killpg(proc.pid, signal.SIGTERM)
time.sleep(5)
try:
    os.killpg(proc.pid, signal.SIGKILL)
except ProcessLookupError:
    pass
summary = {"tag": tag, "command": cmd, "ingest_started": state["ingest_started"], "committed": state["committed"],
           "peak_jvm_rss_mb_ingest": peak_rss, "peak_nmt_other_mb_ingest": peak_other, "samples": samples}
with open(f"/tmp/bench-ingest-memory-{tag}.json", "w") as f:
    json.dump(summary, f, indent=1)
print("SUMMARY", json.dumps({k: v for k, v in summary.items() if k not in ("samples", "command")}), flush=True)
if state["committed"] is None:
    print("".join(state["lines"][-40:]))
    sys.exit(1)
