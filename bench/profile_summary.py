"""Summarise per-stage py-spy profiles (``--format raw``) of a pipeline run by category.

``bench/run_all.py --profile`` starts ``py-spy record --pid <driver> --subprocesses``
for each stage (from ``CorpusBuild``'s ``before_run`` hook to the next one), so
each ``<stage>.txt`` holds the on-CPU samples of the driver (the DirectRunner's
control and data plane, which also buffers every GroupByKey) and of the SDK
worker processes it spawns. Each sample is attributed to the first recognised
frame walking from the leaf towards the root (a stack that is importing a
module counts as startup whatever else it holds); samples / rate = CPU seconds.

Usage:  .venv/bin/python bench/profile_summary.py <profile dir> [rate]
"""
from __future__ import annotations

import collections
import sys
from pathlib import Path

# (category, substrings of a frame "func (file:line)"); first match from the leaf wins.
CATEGORIES = [
    # encode_batch is native code: its leaf Python frame is the DoFn line calling it. Its rayon
    # threads have no Python thread state and are invisible to py-spy (see the header).
    ("tokenizer DoFn (encode_batch, ids -> numpy)", ("encode_batch", "TokenizePartitionFn.process")),
    ("normalize_text", ("beam_pipeline/records/normalize.py",)),
    ("doc_id / content_hash", ("beam_pipeline/records/hashing.py",)),
    ("json.loads (reader)", ("json/decoder.py", "json/__init__.py", "_record_from_json")),
    ("zstd + line split (reader)", ("beam_pipeline/sources/byte_streams.py", "beam_pipeline/sources/readers.py")),
    ("sha256 input verification", ("beam_pipeline/sources/snapshot.py",)),
    ("Parquet write (layer partitions, shards)", ("table_bytes", "write_partition", "write_shard")),
    ("Parquet read (layer partitions)", ("read_partition_rows",)),
    ("pack + sort shard (numpy)", ("pack_documents", "WriteShardFn")),
    ("sort rows of a partition", ("layer_io.py",)),
    ("Beam coders (encode/decode elements)", ("apache_beam/coders/", "DataInputOperation.process_encoded",
                                              "DataOutputOperation.process")),
    ("pickle / dill", ("pickle", "dill")),
    ("Beam data plane / gRPC", ("data_plane.py", "grpc", "channel.py")),
    ("Beam runner (driver: stages, GroupByKey buffers)", ("fn_api_runner/",)),
    ("Beam SDK worker (bundle processing, operations)", ("apache_beam/runners/worker/",)),
    ("Beam transforms / metrics / windowing", ("apache_beam/transforms/", "apache_beam/metrics/",
                                               "apache_beam/utils/windowed_value", "apache_beam/typehints")),
    ("stage code (beam_pipeline)", ("beam_pipeline/",)),
    ("threading / queues", ("threading.py", "queue.py", "concurrent/futures")),
]
STARTUP = ("_find_and_load", "_call_with_frames_removed")
# A running thread without Python frames: gRPC core, tokenizers' rayon pool, Arrow's thread pool.
NATIVE = "native threads (no Python frame: gRPC core, rayon, Arrow)"


# Leaf frames where a thread blocks with the GIL released: py-spy's idle detection
# misses some of them (under CPU contention especially), so they are dropped here.
IDLE_LEAVES = ("Condition.wait (", "Event.wait (", "Popen._try_wait (", "_serve (grpc/", "Queue.get (",
               "sleep (", "select (", "poll (", "ProgressRequester.run (", "_RequestIterator._next (",
               "channel_spin (grpc/", "Thread.join (", "Lock.acquire (", "_wait_for_tstate_lock (",
               "_consume_request_iterator (", "next (grpc/")


def is_idle(frames: list[str]) -> bool:
    return bool(frames) and any(marker in frames[-1] for marker in IDLE_LEAVES)


def categorize(frames: list[str]) -> str:
    if not frames:
        return NATIVE
    if any(marker in frame for frame in frames for marker in STARTUP):
        return "process startup / imports"
    for frame in reversed(frames):
        for name, needles in CATEGORIES:
            if any(n in frame for n in needles):
                return name
    return "other"


def parse(path: Path):
    """Yield (role, frames, count) of a py-spy raw file."""
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        process = ""
        while frames and frames[0].startswith("process "):  # the process tree, driver first
            process, frames = frames[0], frames[1:]
        if "py-spy" in process:
            continue
        yield ("worker" if "sdk_worker_main" in process else "driver"), frames, int(count)


def summarize(directory: Path, rate: int = 100) -> str:
    out = ["### Where the time goes, per stage (py-spy, separate profiled run)", "",
           f"Sampled seconds = non-idle samples / {rate} Hz of the Python threads of the driver process "
           "(DirectRunner control and data plane, GroupByKey buffers) and of the SDK worker processes; each "
           "sample goes to the first recognised frame from the leaf up; known blocking calls (condition "
           "waits, gRPC polling) are dropped. Read the shares, not the seconds: a runnable thread that waits "
           "for a core counts as busy, so on a loaded machine the seconds exceed the CPU seconds of "
           "getrusage; and native threads without a Python thread state (tokenizers' rayon pool) are not "
           "sampled at all, so the tokenize profile shows the Beam side of that stage, not the tokenizer.", ""]
    files = sorted(Path(directory).glob("*.txt"), key=lambda p: p.stat().st_mtime)
    for path in files:
        totals = collections.Counter()
        by_role = collections.Counter()
        leaves = collections.Counter()
        for role, frames, count in parse(path):
            if is_idle(frames):
                continue
            category = categorize(frames)
            totals[category] += count
            by_role[(category, role)] += count
            leaves[(role, frames[-1] if frames else NATIVE)] += count
        grand = sum(totals.values()) or 1
        out += [f"#### {path.stem}: {grand / rate:.0f} sampled s "
                f"(driver {sum(v for (c, r), v in by_role.items() if r == 'driver') / rate:.0f} s, "
                f"workers {sum(v for (c, r), v in by_role.items() if r == 'worker') / rate:.0f} s)", "",
                "| category | driver s | workers s | share |", "|---|---:|---:|---:|"]
        for category, count in totals.most_common():
            if count / grand < 0.005:
                continue
            out.append(f"| {category} | {by_role[(category, 'driver')] / rate:.1f} | "
                       f"{by_role[(category, 'worker')] / rate:.1f} | {count / grand:.0%} |")
        out += ["", "Hottest leaf frames: " + "; ".join(
            f"{frame} [{role}] {count / grand:.0%}" for (role, frame), count in leaves.most_common(8)), ""]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(summarize(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 100))
