"""Every stage of the sample build translates to a well-formed Dataflow job, offline.

Stages read the layers of the stages before them, so each stage's graph can
only be assembled once those layers exist. The test takes a copy of the
reference build (the session fixture ``built``), and builds again with
``CorpusBuild(before_run=..., assemble_reused=True)``: every layer is complete,
so nothing runs, but the driver assembles each stage's pipeline exactly as it
would before running it and hands it to the hook. The hook translates a copy
of that pipeline with Beam's ``DataflowRunner`` in ``--dry_run`` mode with
dummy project values: Dataflow's own graph passes (overrides, side-input and
combiner checks, deterministic key coders for every GroupByKey, Runner v2
environment resolution, pickling of every DoFn) run, and the job request is
assembled as ``DataflowApplicationClient.create_job_description`` does,
minus the upload of the staged files. No network is used: ``dry_run`` returns
before any GCS or Dataflow call.
"""
from __future__ import annotations

import json
import os
import re
import shutil

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner
from apache_beam.runners.dataflow.internal import apiclient
from google.protobuf import json_format

from beam_pipeline.build import CorpusBuild
from beam_pipeline.config import load_config
from conftest import IN_PROCESS, SAMPLE_CONFIG

IMAGE = "us-central1-docker.pkg.dev/dummy-project/corpus/beam-pipeline:dry-run"
DATAFLOW_DRY_RUN = ["--runner=DataflowRunner", "--dry_run=True", "--project=dummy-project",
                    "--region=us-central1", "--temp_location=gs://dummy/tmp", f"--sdk_container_image={IMAGE}"]
JOB_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")  # Dataflow's rule for job names


def dataflow_job(pipeline: beam.Pipeline) -> tuple[dict, beam_runner_api_pb2.Pipeline]:
    """(the Dataflow job request as JSON, the portable pipeline it carries) for ``pipeline``."""
    options = PipelineOptions(DATAFLOW_DRY_RUN)
    copy = beam.Pipeline.from_runner_api(pipeline.to_runner_api(), DataflowRunner(), options)
    result = DataflowRunner().run_pipeline(copy, options)
    job = result.job
    apiclient.DataflowApplicationClient._apply_sdk_environment_overrides(job.proto_pipeline, {}, job.options)
    job.proto.environment = apiclient.Environment(
        packages=[], options=job.options, environment_version=apiclient._FNAPI_ENVIRONMENT_MAJOR_VERSION,
        proto_pipeline_staged_url="gs://dummy/tmp/staging/pipeline.pb",
        proto_pipeline=job.proto_pipeline).proto
    return json.loads(json_format.MessageToJson(job.proto._pb)), job.proto_pipeline


@pytest.fixture(scope="module")
def translated(built, tmp_path_factory):
    root = str(tmp_path_factory.mktemp("dry-run") / "out")
    shutil.copytree(built["root"], root)
    config = load_config(SAMPLE_CONFIG).model_copy(update={"output_root": root})
    jobs, lines = {}, []

    def translate(stage, pipeline):
        jobs[stage] = dataflow_job(pipeline)

    build = CorpusBuild(config, PipelineOptions([*IN_PROCESS, "--progress_interval=0"]),
                        snapshot_id=built["manifest"]["snapshot_id"], log=lines.append,
                        before_run=translate, assemble_reused=True)
    result = build.run()
    return {"jobs": jobs, "result": result, "lines": lines}


def test_every_stage_of_the_sample_translates_to_a_dataflow_job(translated, built):
    stages = [s["name"] for s in built["metrics"]["stages"]]
    assert list(translated["jobs"]) == stages and len(stages) >= 4
    for stage, (job, proto) in translated["jobs"].items():
        assert job["type"] == "JOB_TYPE_BATCH" and JOB_NAME.match(job["name"]), stage
        environment = job["environment"]
        assert "use_runner_v2" in environment["experiments"], stage
        (pool,) = environment["workerPools"]
        assert {c["containerImage"] for c in pool["sdkHarnessContainerImages"]} == {IMAGE}, stage
        sdk_options = environment["sdkPipelineOptions"]["options"]
        assert (sdk_options["project"], sdk_options["region"]) == ("dummy-project", "us-central1")
        json.dumps(job)  # the request body is plain JSON


def test_translated_pipelines_are_complete_and_run_only_in_the_sdk_container(translated, built):
    docker = common_urns.environments.DOCKER.urn
    for stage, (_, proto) in translated["jobs"].items():
        key = built["stages"][stage]["layer_key"]
        ledger = json.load(open(os.path.join(built["root"], "layers", stage, key, "_LEDGER.json")))
        components = proto.components
        assert components.environments, stage
        for env_id, env in components.environments.items():
            assert env.urn == docker, (stage, env_id, env.urn)
            assert beam_runner_api_pb2.DockerPayload.FromString(env.payload).container_image == IMAGE
        for pcoll_id, pcoll in components.pcollections.items():
            assert pcoll.coder_id in components.coders, (stage, pcoll_id)
        labels = [t.unique_name for t in components.transforms.values()]
        gbks = [t for t in components.transforms.values()
                if t.spec.urn == common_urns.primitives.GROUP_BY_KEY.urn]
        assert gbks, f"{stage}: no GroupByKey (every layer is partitioned by one)"
        # every Parquet output of the layer has its writer in the job: a Write_<output> step, or the
        # stage's partition tasks write their partitions themselves (layer_io.WrittenPartitions: a
        # task that reads and writes its partition, or WriteSpilledPartitions' WritePartition)
        partition_tasks = [name for name in labels
                           if name.rsplit("/", 1)[-1].endswith("AndWrite") or name.endswith("/WritePartition")]
        for output in ledger["outputs"]:
            assert any(name.startswith(f"Write_{output}") for name in labels) or partition_tasks, \
                f"{stage}: no writer of {output}"
        for transform in components.transforms.values():
            if transform.spec.urn == common_urns.primitives.PAR_DO.urn:
                payload = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload)
                assert payload.do_fn.payload, f"{stage}: {transform.unique_name} has no serialized DoFn"


def test_translation_runs_nothing_and_changes_nothing(translated, built):
    assert translated["result"].dataset_id == built["manifest"]["dataset_id"]
    assert all(stage.reused for stage in translated["result"].stages)
    assert not any("running ->" in line for line in translated["lines"])
