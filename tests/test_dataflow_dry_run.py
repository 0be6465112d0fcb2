"""The sample build's job translates to a well-formed Dataflow job, offline.

The build is one job: the driver assembles it (nothing is run) and the test
translates it with Beam's ``DataflowRunner`` in ``--dry_run`` mode with dummy
project values: Dataflow's own graph passes (overrides, side-input and
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

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability import common_urns, python_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner
from apache_beam.runners.dataflow.internal import apiclient
from google.protobuf import json_format

from beam_pipeline.build.build_graph import title
from beam_pipeline.build.corpus_build import CorpusBuild
from beam_pipeline.config.corpus import load_config
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
def translated(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("dry-run") / "out")
    config = load_config(SAMPLE_CONFIG).model_copy(update={"output_root": root})
    build = CorpusBuild(config, PipelineOptions(IN_PROCESS), log=lambda m: None)
    graph = build.assemble(*build._prepare())
    job, proto = dataflow_job(graph.pipeline)
    return {"job": job, "proto": proto, "graph": graph, "root": root}


def test_the_whole_build_translates_to_one_dataflow_job(translated):
    job = translated["job"]
    assert job["type"] == "JOB_TYPE_BATCH" and JOB_NAME.match(job["name"])
    environment = job["environment"]
    assert "use_runner_v2" in environment["experiments"]
    (pool,) = environment["workerPools"]
    assert {c["containerImage"] for c in pool["sdkHarnessContainerImages"]} == {IMAGE}
    sdk_options = environment["sdkPipelineOptions"]["options"]
    assert (sdk_options["project"], sdk_options["region"]) == ("dummy-project", "us-central1")
    json.dumps(job)  # the request body is plain JSON


def test_every_stage_writes_and_commits_its_layer_in_the_job(translated):
    proto, graph = translated["proto"], translated["graph"]
    components = proto.components
    docker = common_urns.environments.DOCKER.urn
    assert components.environments
    for env_id, env in components.environments.items():
        assert env.urn == docker, (env_id, env.urn)
        assert beam_runner_api_pb2.DockerPayload.FromString(env.payload).container_image == IMAGE
    for pcoll_id, pcoll in components.pcollections.items():
        assert pcoll.coder_id in components.coders, pcoll_id
    labels = [t.unique_name for t in components.transforms.values()]
    computed = [ref.stage for ref in graph.refs if not ref.reused]
    assert len(computed) >= 10 and "ingest" in computed and "tokenize" in computed
    for stage in computed:  # each layer's commit step (its ledger is written by the job)
        assert any(name.endswith("/Commit/CheckAndWriteLedger") and name.split("/")[0] in
                   (title(stage), f"{title(stage)}Commit") for name in labels), stage
    assert any(name.startswith("Publish/WriteManifest") for name in labels)
    assert any(name.startswith("Publish/WriteLineage") for name in labels)
    for transform in components.transforms.values():
        if transform.spec.urn == common_urns.primitives.PAR_DO.urn:
            payload = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload)
            if payload.do_fn.urn == python_urns.PICKLED_DOFN_INFO:  # Beam's own (KeyWithVoid) have a URN only
                assert payload.do_fn.payload, f"{transform.unique_name} has no serialized DoFn"


def test_translation_runs_nothing(translated):
    assert not os.path.exists(os.path.join(translated["root"], "datasets"))
    assert not os.path.exists(os.path.join(translated["root"], "layers", "ingest"))
