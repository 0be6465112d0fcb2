"""Every benchmark script still imports and parses its arguments.

The benchmarks run outside ``make test`` (they take minutes to hours), so a
rename inside ``beam_pipeline`` could break one silently: ``bench_near_dedup``
imported ``beam_pipeline.minhash`` for weeks after it moved to
``beam_pipeline.dedup``. ``--help`` imports everything a script needs and
exits before any work.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if p.name != "profile_summary.py")  # no argparse: a usage line


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_bench_script_imports_and_parses_help(script):
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout


def test_profile_summary_imports():
    done = subprocess.run([sys.executable, "-c", "import runpy, sys; sys.argv = ['x']; "
                           f"runpy.run_path({str(BENCH / 'profile_summary.py')!r}, run_name='not_main')"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def _load(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_near_dedup_scale_ratios_come_from_the_rows():
    """``--sizes``: the results file's ratios are the largest run's over the smallest's, judged against 1.2x,
    and the rounds against ceil(log2(chain length)); a failed size is left out of the ratios."""
    stage = _load("bench_near_dedup_stage")
    digests = {"annotations": ["a"], "signatures": ["b"], "large_clusters": []}

    def run(documents, ms, jvm, driver, rounds):
        return {"documents": documents, "partitions": 4, "groups": 64, "wall_seconds": 1.0, "text_mb": 1.0,
                "tree_cpu_seconds": ms * documents / 1000, "jvm_cpu_seconds": 1.0, "driver_cpu_seconds": 1.0,
                "cpu_ms_per_document": ms, "jvm_peak_mib": jvm, "driver_peak_mib": driver,
                "components_rounds": rounds, "clusters": 1, "clustered_documents": 1, "near_duplicates": 1,
                "digests": digests}

    runs = [run(10_000_000, 0.5, 3000.0, 1100.0, 8), {"documents": 5, "failed": "exit status 1"},
            run(1_000_000, 0.45, 2000.0, 1000.0, 7)]
    ratios = stage.scale_ratios(runs)
    assert ratios["documents"] == (1_000_000, 10_000_000)
    assert ratios["cpu_per_document"]["ratio"] == round(0.5 / 0.45, 3) and ratios["cpu_per_document"]["met"]
    assert ratios["jvm_peak"]["ratio"] == 1.5 and not ratios["jvm_peak"]["met"]
    assert ratios["driver_peak"]["ratio"] == 1.1 and ratios["driver_peak"]["met"]
    assert stage.PROMISED_ROUNDS == 7 and ratios["rounds"]["values"] == [7, 8] and not ratios["rounds"]["met"]
    text = stage.scale_markdown({"runs": runs, "runner": "flink", "date": "20261207", "command": "cmd",
                                 "runner_description": "embedded Flink", "beam_args": [], "machine": "2 cores"})
    assert "| 1.11x | <= 1.2x | met |" in text and "| 1.50x | <= 1.2x | **not met** |" in text
    assert "failed: exit status 1" in text and stage.outputs_digest(digests)[:16] in text
    assert stage.scale_ratios(runs[:2]) == {}


def test_side_by_side_near_dedup_defaults_cost_comes_from_the_runs():
    """``--near-dedup-defaults``: the defaults' cost is the medians' ratio, of the whole job and of the stage's
    ``metrics.json`` CPU; the counts show every distinct outcome (a run that decided otherwise would show)."""
    side_by_side = _load("bench_side_by_side")

    def run(tree, stage, removed):
        return {"cpu_seconds": tree, "detail": {"cpu_seconds": {"near_dedup": stage, "total": tree - 1},
                                                "stages": {"near_dedup": {"in": 10, "passed": 10, "filtered": {"x": 1},
                                                                          "other": {"near_duplicates": removed}}}}}

    signature_only = [run(100.0, 4.0, 3), run(120.0, 5.0, 3), run(90.0, 3.0, 3)]
    defaults = [run(110.0, 6.0, 2), run(99.0, 6.5, 2), run(130.0, 7.0, 2)]
    cost = side_by_side.defaults_cost(signature_only, defaults)
    assert cost["whole_cpu_seconds"] == {"signature_only": 100.0, "defaults": 110.0}
    assert cost["whole_overhead"] == 0.1
    assert cost["near_dedup_cpu_seconds"] == {"signature_only": 4.0, "defaults": 6.5}
    assert cost["near_dedup_overhead"] == 0.625
    assert cost["near_dedup_counts"]["signature_only"] == ['{"in": 10, "other": {"near_duplicates": 3}, "passed": 10}']
    defaults[1]["detail"]["stages"]["near_dedup"]["other"]["near_duplicates"] = 1
    assert len(side_by_side.defaults_cost(signature_only, defaults)["near_dedup_counts"]["defaults"]) == 2
    table = "\n".join(side_by_side.defaults_table(cost))
    assert "| whole job | 100.0 | 110.0 | +10.0% |" in table
    assert "| near_dedup stage (metrics.json) | 4.0 | 6.5 | +62.5% |" in table


#: Lines of a Java 17 job server's ``-Xlog:gc:file=...:time,uptime`` log (embedded Flink, a 1 GB build).
GC_LOG = """\
[2026-12-07T16:29:32.166+0000][0.003s] Using G1
[2026-12-07T16:29:34.775+0000][2.612s] GC(6) Pause Remark 21M->21M(88M) 3.088ms
[2026-12-07T16:29:34.779+0000][2.617s] GC(6) Pause Cleanup 21M->21M(88M) 0.048ms
[2026-12-07T16:29:35.968+0000][3.806s] GC(12) Pause Full (System.gc()) 50M->24M(94M) 23.950ms
[2026-12-07T16:31:27.610+0000][115.447s] GC(165) Pause Young (Normal) (G1 Evacuation Pause) 1342M->186M(1850M) 14.229ms
[2026-12-07T16:31:28.030+0000][125.867s] GC(166) Pause Young (Concurrent Start) (G1 Humongous Allocation) 1382M->985M(1850M) 17.036ms
[2026-12-07T16:31:28.497+0000][126.335s] GC(167) Concurrent Mark Cycle
[2026-12-07T16:31:28.497+0000][300.335s] GC(168) Pause Young (Normal) (G1 Evacuation Pause) 1337M->184M(2050M) 76.245ms
"""
#: The same build's output (``bench/work/logs/<label>-flink-<size>.log``: the bench's clock, then the build's line).
BUILD_LOG = """\
     3.7     1.7s [ingest] runs in this job -> /out/layers/ingest/70f5d105c1c10c14c427bf98
     3.7     1.7s [near_dedup] runs in this job -> /out/layers/near_dedup/e8537251d3defd9bd67aa45f
     3.7     1.7s [tokenize] runs in this job -> /out/layers/tokenize/d9de4e3896693f4d1075ad6a
   121.1   121.1s [ingest] committed after 119.3s (in 208050, passed 162101, filtered 45949, dead letter 0)
   290.0   290.0s [tokenize] committed after 288.2s (in 162101, passed 162101, filtered 0, dead letter 0)
   299.0   299.0s [near_dedup] committed after 297.2s (in 162101, passed 160000, filtered 2101, dead letter 0)
"""


def test_jvm_heap_phases_reads_a_java_17_gc_log_by_the_builds_phases():
    """Each pause goes to the first stage in build order not committed at its uptime (tokenize committing
    before near_dedup does not end near_dedup's phase); peaks are the largest after-GC and committed sizes."""
    heap = _load("jvm_heap_phases")
    phases = heap.heap_by_phase(BUILD_LOG, GC_LOG)
    assert list(phases) == ["ingest", "near_dedup", "_publish"]
    assert phases["ingest"] == {"pauses": 4, "after_peak_mib": 186, "committed_peak_mib": 1850, "full_gcs": 1,
                                "live_peak_mib": 24}
    assert phases["near_dedup"] == {"pauses": 1, "after_peak_mib": 985, "committed_peak_mib": 1850, "full_gcs": 0,
                                    "live_peak_mib": None}
    assert phases["_publish"]["committed_peak_mib"] == 2050
    assert heap.overall(phases) == {"after_peak_mib": 985, "committed_peak_mib": 2050, "live_peak_mib": 24,
                                    "pauses": 6, "full_gcs": 1}
    larger = {**phases, "ingest": {**phases["ingest"], "after_peak_mib": 372, "live_peak_mib": 36}}
    table = heap.markdown([("small", phases), ("large", larger)], ["_start", "ingest", "near_dedup", "_publish"])
    assert "| ingest | 24 / 186 / 1,850 | 36 / 372 / 1,850 | 1.50x | 2.00x | 1.00x |" in table
    assert "| near_dedup | - / 985 / 1,850 | - / 985 / 1,850 | - | 1.00x | 1.00x |" in table


def test_live_heap_reads_jcmd_class_histograms():
    """``jcmd <pid> GC.class_histogram`` as Java 17 prints it: the total and the classes, largest first; no
    ``Total`` line (the JVM had exited) is no reading."""
    scale = _load("bench_scale")
    text = """\
24434:
 num     #instances         #bytes  class name (module)
-------------------------------------------------------
   1:        453962      175297312  [B (java.base@17.0.15)
   2:        441523       10596552  java.lang.String (java.base@17.0.15)
   3:         93420        3736800  java.util.LinkedHashMap$Entry (java.base@17.0.15)
5855:             1             16  sun.util.resources.cldr.provider.CLDRLocaleDataMetaInfo (jdk.localedata@17.0.15)
Total       1524125      235676536
"""
    histogram = scale.parse_class_histogram(text)
    assert histogram["total_bytes"] == 235676536
    assert [name for name, _ in histogram["classes"]][:3] == ["[B", "java.lang.String", "java.util.LinkedHashMap$Entry"]
    assert histogram["classes"][0][1] == 175297312 / 2**20
    assert scale.parse_class_histogram("24434:\ncom.sun.tools.attach.AttachNotSupportedException: gone\n") is None


def test_shuffle_bytes_counts_each_grouping_once_from_the_jobs_own_metrics(tmp_path, monkeypatch):
    """``bench/shuffle_bytes.py``: a job on ``MeasuringRunner`` records each GroupByKey's input (elements and
    encoded bytes, estimated from Beam's sampled sizes) and a CombinePerKey at its input, not the
    GroupByKey inside it."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    monkeypatch.syspath_prepend(str(BENCH.parent))
    from bench import shuffle_bytes

    record = tmp_path / "shuffles.json"
    monkeypatch.setenv(shuffle_bytes.OUTPUT_VARIABLE, str(record))
    with beam.Pipeline(options=PipelineOptions(["--runner=bench.shuffle_bytes.MeasuringRunner"])) as p:
        pairs = p | beam.Create([(i % 10, "x" * 200) for i in range(1000)])
        _ = pairs | "Group" >> beam.GroupByKey()
        _ = pairs | "Lengths" >> beam.MapTuple(lambda k, text: (k, len(text))) | "Sum" >> beam.CombinePerKey(sum)
    (job,) = json.loads(record.read_text())
    found = {s["name"]: s for s in job["shuffles"]}
    assert {"Group", "Sum"} <= set(found) and not [name for name in found if name.startswith("Sum/")]
    assert found["Group"]["kind"] == "group" and found["Sum"]["kind"] == "combine (input)"
    assert 200 <= found["Group"]["mean_bytes"] <= 220  # 200 characters, a small int and the pair's framing
    assert 2 <= found["Sum"]["mean_bytes"] <= 20  # two small ints
    for shuffle in (found["Group"], found["Sum"]):
        assert shuffle["elements"] == 1000
        assert shuffle["bytes"] == round(1000 * shuffle["mean_bytes"])
    table = shuffle_bytes.markdown({"what": "t", "date": "d", "command": "c", "documents": 100, **job})
    assert "| Group | `Group` | group | 1,000 |" in table and "| **all** |" in table
