"""What crosses each shuffle of a job: elements and encoded bytes per GroupByKey, per input document.

A Beam runner moves a GroupByKey's input through its shuffle (Flink's blocking results and spills,
Dataflow Shuffle); the bytes are what that costs in network and local disk. This script runs a job on
the local runner with :class:`MeasuringRunner`, Beam's FnApiRunner (the DirectRunner's engine, in one
process) that keeps the job's pipeline proto and its monitoring infos. The SDK counts every
PCollection's elements (``beam:metric:element_count:v1``) and samples their encoded sizes with the
PCollection's coder (``beam:metric:sampled_byte_size:v1``: a sample's mean, so sizes are estimates); the
input of every ``beam:transform:group_by_key:v1`` is one shuffle. A ``CombinePerKey`` is measured at its
input, before the runner lifts its combiner (an upper bound on what crosses).

    .venv/bin/python bench/shuffle_bytes.py --config sample/corpus.yaml --out bench/results/shuffle-bytes-sample-<date>
    .venv/bin/python bench/shuffle_bytes.py --generated 100000 --out bench/results/shuffle-bytes-near-dedup-<date>

The first runs the whole build (``python -m beam_pipeline run``, in this process) into a temporary
output root; the second runs the near-dedup stage alone on generated documents
(``bench/bench_near_dedup_stage.py --generated N``, in a child process). Both write ``<out>.json`` and
``<out>.md``. Any job run with ``--runner=bench.shuffle_bytes.MeasuringRunner`` and ``SHUFFLE_BYTES_JSON``
set appends its shuffles to that file. The sizes are Beam's coders' bytes: a runner may compress them
(Flink's LZ4 by default) or add its own framing and sorted runs.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from apache_beam.metrics import monitoring_infos  # noqa: E402
from apache_beam.runners.portability.fn_api_runner import FnApiRunner  # noqa: E402

GROUP_BY_KEY = "beam:transform:group_by_key:v1"
COMBINE_PER_KEY = "beam:transform:combine_per_key:v1"
#: Where MeasuringRunner appends each job's shuffles (a JSON list), when set.
OUTPUT_VARIABLE = "SHUFFLE_BYTES_JSON"


class MeasuringRunner(FnApiRunner):
    """The FnApiRunner, which afterwards appends the job's shuffles to ``$SHUFFLE_BYTES_JSON``."""

    def run_via_runner_api(self, pipeline_proto, options=None):
        result = super().run_via_runner_api(pipeline_proto, options)
        path = os.environ.get(OUTPUT_VARIABLE)
        if path:
            jobs = json.load(open(path, encoding="utf-8")) if os.path.exists(path) else []
            jobs.append({"shuffles": shuffles(pipeline_proto, result.monitoring_infos())})
            with open(path, "w", encoding="utf-8") as f:
                json.dump(jobs, f, indent=1)
        return result


def shuffles(pipeline_proto, infos) -> list[dict]:
    """Per GroupByKey (and CombinePerKey, at its input) of the proto: its name, the stage it belongs to
    (the first part of its name), elements and estimated encoded bytes of its input."""
    counts: dict[str, int] = {}
    sizes: dict[str, tuple[int, int]] = {}  # pcollection -> (sampled bytes, samples)
    for info in infos:
        pcollection = info.labels.get("PCOLLECTION")
        if pcollection is None:
            continue
        value = monitoring_infos.extract_metric_result_map_value(info)
        if info.urn == monitoring_infos.ELEMENT_COUNT_URN:
            counts[pcollection] = counts.get(pcollection, 0) + value
        elif info.urn == monitoring_infos.SAMPLED_BYTE_SIZE_URN:
            total, samples = sizes.get(pcollection, (0, 0))
            sizes[pcollection] = (total + value.sum, samples + value.count)
    transforms = pipeline_proto.components.transforms
    inside_combine = {sub for t in transforms.values() if t.spec.urn == COMBINE_PER_KEY for sub in _descendants(t, transforms)}
    found = []
    for transform_id, transform in transforms.items():
        if transform.spec.urn not in (GROUP_BY_KEY, COMBINE_PER_KEY) or transform_id in inside_combine:
            continue
        (pcollection,) = transform.inputs.values()
        elements = counts.get(pcollection, 0)
        sampled, samples = sizes.get(pcollection, (0, 0))
        mean = sampled / samples if samples else 0.0
        found.append({"name": transform.unique_name, "stage": transform.unique_name.split("/", 1)[0],
                      "kind": "combine (input)" if transform.spec.urn == COMBINE_PER_KEY else "group",
                      "elements": elements, "mean_bytes": round(mean, 1), "bytes": round(elements * mean)})
    return sorted(found, key=lambda s: s["name"])


def _descendants(transform, transforms) -> set[str]:
    out = set()
    for sub in transform.subtransforms:
        out.add(sub)
        out |= _descendants(transforms[sub], transforms)
    return out


def build_documents(root: str) -> int:
    """The documents the build read (the run's metrics: ingest's ``in``)."""
    (metrics_path,) = glob.glob(os.path.join(root, "runs", "*", "metrics.json"))
    metrics = json.load(open(metrics_path, encoding="utf-8"))
    for stage in metrics["stages"]:
        if stage["name"] == "ingest":
            return int(stage["counts"]["in"])
    raise ValueError(f"{metrics_path}: no ingest stage")


def markdown(result: dict) -> str:
    documents = result["documents"]
    lines = [f"# Bytes through each shuffle: {result['what']}, {result['date']}", "",
             "Command:", "", f"    {result['command']}", "",
             f"{documents:,} documents read. Runner: Beam's FnApiRunner in one process (`bench.shuffle_bytes.MeasuringRunner`); "
             "bytes are Beam's coders' (sampled encoded sizes x elements), before any runner compression. "
             "A CombinePerKey is measured at its input, before its combiner is lifted (an upper bound).", "",
             "| stage | shuffle | kind | elements | mean bytes | MB | bytes per document |",
             "|---|---|---|---:|---:|---:|---:|"]
    per_stage: dict[str, int] = collections.Counter()
    for s in result["shuffles"]:
        per_stage[s["stage"]] += s["bytes"]
        lines.append(f"| {s['stage']} | `{s['name']}` | {s['kind']} | {s['elements']:,} | {s['mean_bytes']:,.0f} | "
                     f"{s['bytes'] / 1e6:,.2f} | {s['bytes'] / documents:,.0f} |")
    total = sum(per_stage.values())
    lines += ["", "Per stage:", "", "| stage | MB | bytes per document | share |", "|---|---:|---:|---:|"]
    for stage, size in sorted(per_stage.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {stage} | {size / 1e6:,.2f} | {size / documents:,.0f} | {size / total:.1%} |")
    lines.append(f"| **all** | {total / 1e6:,.2f} | {total / documents:,.0f} | 100% |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=os.path.join("sample", "corpus.yaml"))
    parser.add_argument("--out", help="results path without extension (default bench/results/shuffle-bytes-<date>)")
    parser.add_argument("--generated", type=int, help="the near-dedup stage alone on this many generated documents")
    parser.add_argument("--keep", action="store_true", help="keep the temporary output root")
    args = parser.parse_args(argv)
    from beam_pipeline.cli import commands as cli

    date = datetime.date.today().strftime("%Y%m%d")
    out = args.out or os.path.join(REPO, "bench", "results", f"shuffle-bytes-{date}")
    command = " ".join([".venv/bin/python", "bench/shuffle_bytes.py",
                        *map(shlex.quote, sys.argv[1:] if argv is None else argv)])
    work = tempfile.mkdtemp(prefix="shuffle-bytes-")
    try:
        root, record = os.path.join(work, "out"), os.path.join(work, "shuffles.json")
        os.environ[OUTPUT_VARIABLE] = record
        if args.generated:
            what, documents = f"the near-dedup stage alone on {args.generated:,} generated documents", args.generated
            code = subprocess.run([sys.executable, os.path.join(REPO, "bench", "bench_near_dedup_stage.py"),
                                   "--generated", str(args.generated),
                                   "--beam_args=--runner=bench.shuffle_bytes.MeasuringRunner"],
                                  cwd=REPO, env={**os.environ, "TMPDIR": work}).returncode
        else:
            what = f"the whole build of {args.config}"
            code = cli.main(["run", "--config", args.config, "--output_root", root,
                             "--runner=bench.shuffle_bytes.MeasuringRunner"])
        if code != 0:
            print(f"the job failed (exit status {code})", file=sys.stderr)
            return code
        (job,) = json.load(open(record, encoding="utf-8"))
        documents = documents if args.generated else build_documents(root)
        result = {"what": what, "date": date, "command": command, "documents": documents, **job}
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out + ".json", "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    with open(out + ".md", "w", encoding="utf-8") as f:
        f.write(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
