"""The cost of the cascade order: dedup before every filter against the seed's order (issue 25).

Builds the bundled sample from scratch (a fresh output root each time) with each variant and reports
the CPU seconds of the whole process tree, the wall time, and the documents each stage handled.

* ``before``: the code before dedup joined the cascade (``--before <tree>``, e.g. a ``git archive`` of
  the commit before it): exact and near dedup over every document, ungated.
* ``dedup-first``: this code with ``cascade: [exact_dedup, near_dedup, language, ...]`` (dedup first,
  gated by the built-in length rules only).
* ``seed``: this code with the sample's config as it is (dedup after language, heuristics and the
  blocklist: the seed's order, the default).

Runs are interleaved (variant after variant, ``--repeat`` times); the medians are reported.

    git archive <commit before> | tar -x -C /tmp/before-cascade
    .venv/bin/python bench/bench_cascade_order.py --before /tmp/before-cascade --repeat 3
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "sample")
OLD_ORDER = ["exact_dedup", "near_dedup"]


def variant_config(workdir: str, cascade_prefix: list[str] | None) -> str:
    """The sample's config in ``workdir`` (the sample's files linked in), its cascade optionally prefixed."""
    for entry in os.listdir(SAMPLE):
        if entry != "corpus.yaml":
            os.symlink(os.path.join(SAMPLE, entry), os.path.join(workdir, entry))
    config = yaml.safe_load(open(os.path.join(SAMPLE, "corpus.yaml")))
    if cascade_prefix:
        config["cascade"] = cascade_prefix + list(config["cascade"])
    path = os.path.join(workdir, "corpus.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    return path


def run_build(config: str, output_root: str, pythonpath: str | None) -> dict:
    """One build in a fresh process (its folder as working directory: ``-m`` must not import this checkout's
    package ahead of ``pythonpath``)."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "beam_pipeline", "run", "--config", config, "--output_root", output_root],
        env=env,
        cwd=os.path.dirname(config),
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    metrics = max(glob.glob(os.path.join(output_root, "runs", "*", "metrics.json")), key=os.path.getmtime)
    stages = {s["name"]: s["counts"] for s in json.load(open(metrics))["stages"]}
    dataset_id = next(line.split()[1] for line in out.stdout.splitlines() if line.startswith("dataset_id"))
    return {"cpu_s": round(cpu, 2), "wall_s": round(wall, 2), "dataset_id": dataset_id, "stages": stages}


def handled(counts: dict) -> int:
    """Documents a stage did its work on: scored / judged (``passed``) plus dead letters."""
    return counts["passed"] + counts["dead_letter"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", help="a tree of the code before the change (PYTHONPATH for 'before')")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(REPO, "bench", "results", "cascade-order.json"))
    args = parser.parse_args()
    variants = {"dedup-first": (OLD_ORDER, None), "seed": (None, None)}
    if args.before:
        variants = {"before": (None, os.path.abspath(args.before)), **variants}
    results: dict[str, list[dict]] = {name: [] for name in variants}
    for attempt in range(args.repeat):
        for name, (prefix, pythonpath) in variants.items():
            work = tempfile.mkdtemp(prefix=f"bench-cascade-{name}-")
            try:
                config = variant_config(work, prefix)
                result = run_build(config, os.path.join(work, "out"), pythonpath)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            results[name].append(result)
            print(f"{name} #{attempt + 1}: {result['cpu_s']} CPU s, {result['wall_s']} wall s", flush=True)
    summary = {}
    for name, runs in results.items():
        stages = runs[0]["stages"]
        summary[name] = {
            "cpu_s": [r["cpu_s"] for r in runs],
            "wall_s": [r["wall_s"] for r in runs],
            "median_cpu_s": statistics.median(r["cpu_s"] for r in runs),
            "median_wall_s": statistics.median(r["wall_s"] for r in runs),
            "dataset_id": sorted({r["dataset_id"] for r in runs}),
            "handled": {stage: handled(counts) for stage, counts in stages.items()},
            "signed": stages.get("near_dedup", {}).get("other", {}).get("signed"),
        }
    with open(args.out, "w") as f:
        json.dump({"load_average": os.getloadavg(), "variants": summary}, f, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
