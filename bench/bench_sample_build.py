"""How long ``make demo``'s build of the bundled sample takes, and where the time goes (issue 26: 30 s or less
on 2 cores).

Each run is the demo's command (``python -m beam_pipeline run --config sample/corpus.yaml``, the default
local runner: one SDK worker per core) into a fresh output root, in a fresh process. Reported per variant:
wall seconds from the process start to its exit, CPU seconds of the whole process tree, and the phases
read from the console's timestamps:

* ``graph``: from the build's start to its first ``runs in this job`` line (imports are before the
  build's clock starts and are in ``wall`` only): the snapshot and the job's graph;
* ``stages``: from there to the last stage's commit line (the job's start, the workers' start and every
  stage);
* ``after``: from the last commit to the process's exit (publishing, the run report, the workers' stop).

``--before <tree>`` runs a copy of the code before a change too (``git archive <commit> | tar -x -C
<tree>``), interleaved with this checkout's, run after run; medians are reported. The dataset id of every
run is checked to be the same.

    .venv/bin/python bench/bench_sample_build.py --repeat 3 [--before /tmp/before-tree] [--suffix after]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "bench", "results")
STAMP = re.compile(r"^ *(?P<t>[\d.]+)s \[(?P<stage>\w+)\] (?P<what>.*)$")


def run_build(tree: str, output_root: str) -> dict:
    """One build of the sample with the code in ``tree`` (its folder as working directory, so ``-m`` imports
    that tree's package)."""
    env = dict(os.environ, PYTHONPATH=tree)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "beam_pipeline", "run", "--config", os.path.join(tree, "sample", "corpus.yaml"),
         "--output_root", output_root, "--progress_interval", "0"],
        cwd=tree, env=env, capture_output=True, text=True, check=False,
    )
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"the build failed in {tree}:\n{done.stderr[-3000:]}")
    stamps = [m for m in map(STAMP.match, done.stdout.splitlines()) if m]
    planned = min(float(m["t"]) for m in stamps if m["what"].startswith("runs in this job"))
    last_commit = max(float(m["t"]) for m in stamps if m["what"].startswith("committed after"))
    (dataset_id,) = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("dataset_id ")]
    return {
        "wall": round(wall, 2),
        "cpu": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2),
        "graph": round(planned, 2),
        "stages": round(last_commit - planned, 2),
        "after": round(wall - last_commit, 2),  # includes the imports before the build's clock started
        "dataset_id": dataset_id,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", help="a tree of the code before a change")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--suffix", default="", help="appended to the results' file name")
    args = parser.parse_args()
    variants = {"this checkout": REPO}
    if args.before:
        variants = {"before": os.path.abspath(args.before), **variants}
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    loads = [os.getloadavg()[0]]
    for _ in range(args.repeat):
        for name, tree in variants.items():
            root = tempfile.mkdtemp(prefix="bench-sample-build-")
            try:
                runs[name].append(run_build(tree, root))
            finally:
                shutil.rmtree(root, ignore_errors=True)
            print(name, runs[name][-1], flush=True)
            loads.append(os.getloadavg()[0])
    ids = {run["dataset_id"] for results in runs.values() for run in results}
    date = time.strftime("%Y%m%d", time.gmtime())
    name = f"sample-build-{date}{'-' + args.suffix if args.suffix else ''}"
    command = "bench/bench_sample_build.py " + " ".join(sys.argv[1:])
    lines = [
        f"# The sample's build time, {time.strftime('%Y-%m-%d', time.gmtime())}",
        "",
        f"Command: `.venv/bin/python {command}`. The demo's build (`make demo`: the default local runner, one SDK "
        f"worker per core) into a fresh output root, {os.cpu_count()} cores, Python "
        f"{sys.version.split()[0]}; {args.repeat} runs per variant, interleaved; medians (every run in brackets). "
        f"Load average (1 min) at each run's end: {', '.join(f'{x:.2f}' for x in loads)}.",
        "",
        f"Dataset id of every run: {', '.join(sorted(ids))}" + (" (the same)" if len(ids) == 1 else " (DIFFERENT)"),
        "",
        "| variant | wall s | CPU s (process tree) | graph s | stages s | after the last commit s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for variant, results in runs.items():
        cells = []
        for field in ("wall", "cpu", "graph", "stages", "after"):
            values = [r[field] for r in results]
            cells.append(f"{statistics.median(values):.2f} ({', '.join(f'{v:.1f}' for v in values)})")
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "`graph`: the build's start to its first `runs in this job` line (snapshot, the job's graph); `stages`: "
        "to the last stage's commit line (the job's start, the workers' start, every stage); `after the last "
        "commit`: to the process's exit (publishing, the run report, the workers' stop, and the imports before "
        "the build's clock starts).",
    ]
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, name + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(RESULTS, name + ".json"), "w") as f:
        json.dump({"command": command, "loads": loads, "runs": runs}, f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
