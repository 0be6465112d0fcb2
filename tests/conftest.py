"""Shared fixtures: the bundled sample, runner arguments, a fresh output root."""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE_CONFIG = os.path.join(REPO, "sample", "corpus.yaml")
SAMPLE_TOKENIZER = os.path.join(REPO, "sample", "tokenizer", "tokenizer.json")


def tiny_corpus(tmp_path, name: str, texts: list[str], extra_yaml: str = "") -> str:
    """A one-source JSONL corpus of ``texts`` scored by the heuristics only; returns its config path."""
    (tmp_path / "data").mkdir()
    with open(tmp_path / "data" / "docs.jsonl", "w") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"id": str(i), "text": text}) + "\n")
    config = tmp_path / "corpus.yaml"
    config.write_text(
        f"name: {name}\noutput_root: out\n"
        "sources: [{name: docs, uri: 'data/*.jsonl', format: jsonl, rank: 1, license: x, domain: d}]\n"
        "cascade: [heuristics]\n"
        f"tokenize: {{tokenizer: {SAMPLE_TOKENIZER}, seq_len: 256, shard_tokens: 65536}}\n" + extra_yaml)
    return str(config)

#: Every process the suite starts inherits this mark in its environment (JVMs, SDK workers, a Flink
#: cluster's daemons), so that the session's end can tell what the tests left running from what other
#: programs on the machine run (:func:`pytest_sessionfinish`).
SESSION_MARK = "BEAM_PIPELINE_TEST_SESSION"
if "PYTEST_XDIST_WORKER" not in os.environ:  # xdist's workers keep their controller's mark
    os.environ[SESSION_MARK] = f"{os.getpid()}-{time.time_ns()}"
#: Processes no test may leave behind: JVMs (Flink job servers, a cluster's JobManager and TaskManagers),
#: Beam SDK workers and their boot, worker pools.
LEFTOVER_KINDS = ("java", "sdk_worker_main", "beam-pipeline-worker", "worker_pool_main")


def marked_processes(kinds=LEFTOVER_KINDS) -> dict[int, str]:
    """{pid: command line} of the running processes of ``kinds`` that carry this session's mark."""
    mark = f"{SESSION_MARK}={os.environ[SESSION_MARK]}".encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if mark not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone, or not ours to read
            continue
        if any(kind in command for kind in kinds):
            found[int(entry)] = command
    return found


@pytest.hookimpl(trylast=True)  # after pytest-xdist's, which stops the workers
def pytest_sessionfinish(session, exitstatus):
    """The suite fails if a JVM, an SDK worker or a worker pool it started outlives it (then killed)."""
    if hasattr(session.config, "workerinput") or not os.path.isdir("/proc"):
        return  # an xdist worker: the controller looks once every worker has ended
    deadline = time.monotonic() + 30  # what is shutting down gets the time to finish
    while (left := marked_processes()) and time.monotonic() < deadline:
        time.sleep(1)
    if left:
        lines = "\n".join(f"  {pid} {command[:200]}" for pid, command in sorted(left.items()))
        print(f"\n{len(left)} processes started by the tests outlived them (now killed):\n{lines}", file=sys.stderr)
        for pid in left:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def _stop_job_servers(monkeypatch):
    """A job server the FlinkRunner starts for a build run in this process (a JVM, with embedded Flink
    ~1.6 GB) is stopped by Beam only when the process exits (``StopOnExitJobServer``): a pytest worker
    kept every one until the end of the suite. Each test's are stopped when the test ends."""
    try:
        from apache_beam.runners.portability import job_server
    except ImportError:
        yield
        return
    started = []
    start = job_server.StopOnExitJobServer.start

    def recorded_start(self):
        started.append(self)
        return start(self)

    monkeypatch.setattr(job_server.StopOnExitJobServer, "start", recorded_start)
    yield
    for server in started:
        server.stop()


#: The modules that take longest (`pytest --durations`), slowest first: ``make test`` runs the suite on two
#: workers module by module (``--dist loadfile --no-loadscope-reorder``), and starting the long ones first
#: keeps one worker from getting a long module at the end while the other idles.
SLOW_MODULES_FIRST = ("test_flink", "test_operations_install", "test_heuristics_reference", "test_flink_embedded",
                      "test_arrivals_flink", "test_console_flink", "test_resume", "test_s3", "test_lease",
                      "test_full_disk", "test_retried_bundles", "test_snapshot", "test_arrivals", "test_determinism",
                      "test_arrivals_s3", "test_loader", "test_portable_runner", "test_lost_records",
                      "test_progress", "test_end_to_end")


def pytest_collection_modifyitems(items):
    def rank(item) -> int:
        module = item.path.stem
        return SLOW_MODULES_FIRST.index(module) if module in SLOW_MODULES_FIRST else len(SLOW_MODULES_FIRST)
    items.sort(key=rank)     # stable: each module keeps its own order


#: In-process runner, one thread: the fastest setting for small test inputs.
IN_PROCESS = ["--runner=DirectRunner", "--direct_running_mode=in_memory"]


def run_cli(args: list[str], env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run ``python -m beam_pipeline`` in a fresh interpreter (own PYTHONHASHSEED)."""
    return subprocess.run([sys.executable, "-m", "beam_pipeline", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def dataset_id_from_output(stdout: str) -> str:
    for line in stdout.splitlines():
        if line.startswith("dataset_id"):
            return line.split()[1]
    raise AssertionError(f"no dataset_id in output:\n{stdout}")


@pytest.fixture
def output_root(tmp_path):
    root = tmp_path / "out"
    yield str(root)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """The sample built once in-process: the reference every other run is compared with, read only.

    One build for the whole session, not one per xdist worker: the first worker to ask builds it under a
    file lock in the session's shared temporary folder, the other finds it there (a build that failed
    leaves no ``BUILT`` mark, so the next worker to ask builds again). Tests that need to write into an
    output root copy this one first."""
    from filelock import FileLock

    from beam_pipeline.cli import commands as cli

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = shared / "reference"
    root = str(folder / "out")
    with FileLock(str(shared / "reference.lock")):
        if not (folder / "BUILT").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            assert cli.main(["run", "--config", SAMPLE_CONFIG, "--output_root", root, *IN_PROCESS]) == 0
            (folder / "BUILT").touch()
    (dataset_dir,) = glob.glob(os.path.join(root, "datasets", "*"))
    (metrics_path,) = glob.glob(os.path.join(root, "runs", "*", "metrics.json"))
    return {"root": root, "dataset": dataset_dir,
            "manifest": json.load(open(os.path.join(dataset_dir, "manifest.json"))),
            "metrics": json.load(open(metrics_path)),
            "stages": stages_by_name(json.load(open(metrics_path)))}


def layer_digests(root: str) -> dict:
    """{stage/output: [part sha256...]} from every committed ledger under ``root``."""
    digests = {}
    for ledger_path in sorted(glob.glob(os.path.join(root, "layers", "*", "*", "_LEDGER.json"))):
        ledger = json.load(open(ledger_path))
        for output, spec in ledger["outputs"].items():
            digests[f"{ledger['stage']}/{output}"] = [p["sha256"] for p in spec["parts"]]
    return digests


def stages_by_name(metrics: dict) -> dict:
    """{stage name: stage entry} of a run's metrics.json, in run order."""
    return {stage["name"]: stage for stage in metrics["stages"]}


def grouping_coders(pipeline) -> dict:
    """{GroupByKey transform name: its input's KV coder, as Beam chose it} of a pipeline's portable graph."""
    from apache_beam.portability import common_urns
    from apache_beam.runners import pipeline_context

    proto = pipeline.to_runner_api()
    context = pipeline_context.PipelineContext(proto.components)
    found = {}
    for transform in proto.components.transforms.values():
        if transform.spec.urn == common_urns.primitives.GROUP_BY_KEY.urn:
            (pcoll_id,) = transform.inputs.values()
            found[transform.unique_name] = context.coders.get_by_id(proto.components.pcollections[pcoll_id].coder_id)
    return found


#: Groupings that Beam keys itself, with a key we never make: ``CombineGlobally``/``ToList`` (the
#: constant key None: each stage's ``SumCounts`` or ``AllTasks``, lineage's ``AllParts``, the report's ``AllPlots``,
#: publish's ``Ledgers``, the components' ``RoundTallies``) and the fan-out inside
#: ``CombinePerKey.with_hot_key_fanout`` (``PreCombineFn``/``PostCombineFn``: exact dedup's str
#: content hash, re-keyed without its type hint). Beam gives them ``DeterministicFastPrimitivesCoderV2``,
#: which encodes None and str without pickling.
BEAM_KEYED = re.compile(r"/(SumCounts|AllTasks|AllParts|AllPlots|Ledgers|RoundTallies)/|\((Pre|Post)CombineFn\)/")


def deterministic_key_coder(name: str, coder) -> bool:
    """A grouping's key coder is one DESIGN.md allows: str, int or bytes, deterministic (or one of
    Beam's own keys, :data:`BEAM_KEYED`)."""
    from apache_beam.coders import coders

    if isinstance(coder, (coders.StrUtf8Coder, coders.VarIntCoder, coders.BytesCoder)):
        return coder.is_deterministic()
    return (bool(BEAM_KEYED.search(name)) and coder.is_deterministic()
            and type(coder).__name__.startswith("DeterministicFastPrimitivesCoder"))


def grouping_key_coders(pipeline) -> dict:
    """{GroupByKey transform name: the key coder Beam chose} of a pipeline's portable graph."""
    return {name: coder.key_coder() for name, coder in grouping_coders(pipeline).items()}


# --- one stage's job, as the build runs it ----------------------------------------------

def run_stage_job(root: str, stage: str, expand, outputs: dict, partitions: int, rows_match: dict | None = None,
                  options: list[str] = IN_PROCESS, max_dead_letter_fraction: float = 1.0, finalize=None) -> dict:
    """Run one stage's transforms alone, written, counted and committed exactly as the build does
    (``build_graph.StageTransform``); return its ledger. ``expand(pbegin, layer)`` returns what the stage
    produces (``build_graph.BuildGraph.stage``)."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_pipeline.build.build_graph import StageTransform
    from beam_pipeline.storage.layers import Layer
    from beam_pipeline.transforms.layer_io import LayerSpec

    layer = Layer(root, stage, "test")
    spec = LayerSpec(layer=layer, version="test", config={}, inputs={}, outputs=dict(outputs),
                     partitions=partitions, rows_match=dict(rows_match or {}),
                     max_dead_letter_fraction=max_dead_letter_fraction, finalize=finalize)
    with beam.Pipeline(options=PipelineOptions(options)) as p:
        _ = p | "Stage" >> StageTransform(spec, expand)
    return layer.ledger()


# --- partition-wise stages on hand-made layers ------------------------------------------

def write_layer_rows(directory: str, rows: list[dict], partitions: int = 2) -> list[str]:
    """``rows`` stored as a layer output is: partition xxh3(doc_id) % n, sorted by doc_id."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from beam_pipeline.records.hashing import bucket_of
    from beam_pipeline.storage.layers import part_name

    schema = pa.Table.from_pylist(rows).schema
    os.makedirs(directory, exist_ok=True)
    paths = []
    for index in range(partitions):
        part = sorted((r for r in rows if bucket_of(r["doc_id"], partitions) == index), key=lambda r: r["doc_id"])
        paths.append(os.path.join(directory, part_name(index, partitions)))
        pq.write_table(pa.Table.from_pylist(part, schema=schema), paths[-1])
    return paths


def read_layer_rows(directory: str) -> list[dict]:
    """Every row of the partitions under ``directory``, in partition order."""
    import pyarrow.parquet as pq

    return [row for path in sorted(glob.glob(os.path.join(directory, "part-*.parquet")))
            for row in pq.read_table(path).to_pylist()]


def apply_policy(tmp_path, policy, documents: list[dict], annotations: dict[str, list[dict]] | None = None,
                 plan=None, partitions: int = 2) -> tuple[list[dict], list[dict], dict]:
    """Run select's ApplyPolicy over hand-made layers: (gold rows, decision rows, select counts)."""
    from beam_pipeline.storage import schemas
    from beam_pipeline.transforms.layer_io import PartitionInputs
    from beam_pipeline.transforms.select import DECISIONS, GOLD, ApplyPolicy

    inputs = PartitionInputs.of(
        write_layer_rows(str(tmp_path / "in" / "documents"), documents, partitions), None,
        {name: (write_layer_rows(str(tmp_path / "in" / name), rows, partitions), None)
         for name, rows in (annotations or {}).items()})
    ledger = run_stage_job(
        str(tmp_path / "out"), "select",
        lambda p, layer: p | ApplyPolicy(policy, plan, inputs, {name: layer.output_path(name) for name in (GOLD, DECISIONS)}),
        {GOLD: schemas.GOLD, DECISIONS: schemas.DECISION}, partitions, {GOLD: "passed", DECISIONS: "in"})
    directory = os.path.join(str(tmp_path / "out"), "layers", "select", "test")
    return (read_layer_rows(os.path.join(directory, GOLD)), read_layer_rows(os.path.join(directory, DECISIONS)),
            ledger["counts"])
