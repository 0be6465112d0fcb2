"""The SDK worker boot of a Flink cluster (``beam-pipeline-worker``, ``--environment_type=PROCESS``).

A TaskManager runs ``<command> --id=<worker id> --provision_endpoint=<host:port> ...``; the boot
asks the provision service (as that worker) for the job's options and endpoints and starts Beam's
``sdk_worker_main`` with the environment it reads. Here against a provision service of our own;
tests/test_flink.py runs it on a real two-TaskManager cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent import futures

import grpc
from apache_beam.portability.api import beam_provision_api_pb2, beam_provision_api_pb2_grpc, endpoints_pb2
from google.protobuf import struct_pb2, text_format

from beam_pipeline.options import LocalRunnerDefaults, sdk_worker


class Provision(beam_provision_api_pb2_grpc.ProvisionServiceServicer):
    def __init__(self):
        self.asked_by = []

    def GetProvisionInfo(self, request, context):
        self.asked_by.append(dict(context.invocation_metadata()).get("worker_id"))
        options = struct_pb2.Struct()
        options.update({"beam:option:job_name:v1": "corpus", "beam:option:parallelism:v1": 2})
        return beam_provision_api_pb2.GetProvisionInfoResponse(info=beam_provision_api_pb2.ProvisionInfo(
            pipeline_options=options,
            control_endpoint=endpoints_pb2.ApiServiceDescriptor(url="localhost:40001"),
            logging_endpoint=endpoints_pb2.ApiServiceDescriptor(url="localhost:40002"),
            runner_capabilities=["beam:protocol:a:v1", "beam:protocol:b:v1"],
            metadata={"job_id": "job-7"}))


def provision_server():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = Provision()
    beam_provision_api_pb2_grpc.add_ProvisionServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("localhost:0")
    server.start()
    return server, servicer, f"localhost:{port}"


def test_the_boot_gives_sdk_worker_main_the_jobs_options_and_endpoints_asked_as_its_worker():
    server, servicer, endpoint = provision_server()
    try:
        args = sdk_worker._arguments(["--id=2-1", f"--provision_endpoint={endpoint}", "--semi_persist_dir=/tmp/x",
                                      "--logging_endpoint=localhost:1", "--control_endpoint=localhost:2"])
        env = sdk_worker.worker_environment(args, sdk_worker.provision_info(endpoint, args.id), base={})
    finally:
        server.stop(0)
    assert servicer.asked_by == ["2-1"]
    assert env["WORKER_ID"] == "2-1" and env["SEMI_PERSISTENT_DIRECTORY"] == "/tmp/x"
    assert json.loads(env["PIPELINE_OPTIONS"]) == {"beam:option:job_name:v1": "corpus",
                                                   "beam:option:parallelism:v1": 2.0}
    # the provisioned endpoints win over the arguments (as in Beam's boot)
    control = text_format.Parse(env["CONTROL_API_SERVICE_DESCRIPTOR"], endpoints_pb2.ApiServiceDescriptor())
    logging_ = text_format.Parse(env["LOGGING_API_SERVICE_DESCRIPTOR"], endpoints_pb2.ApiServiceDescriptor())
    assert (control.url, logging_.url) == ("localhost:40001", "localhost:40002")
    assert env["RUNNER_CAPABILITIES"] == "beam:protocol:a:v1 beam:protocol:b:v1" and env["JOB_ID"] == "job-7"


def test_the_boot_is_the_installed_console_script_of_this_environment():
    path = sdk_worker.command_path()
    assert path == os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "beam-pipeline-worker")
    assert os.access(path, os.X_OK), "reinstall the package (`pip install -e .`; `make venv` does)"
    usage = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=120)
    assert usage.returncode == 0 and "--provision_endpoint" in usage.stdout
    assert json.loads(sdk_worker.environment_config()) == {"command": path}


def test_a_cluster_gets_the_process_environment_unless_one_is_given():
    args = LocalRunnerDefaults.apply(["--runner=FlinkRunner", "--flink_master=jobmanager:8081"])
    assert "--environment_type=PROCESS" in args
    assert f"--environment_config={sdk_worker.environment_config()}" in args
    own = LocalRunnerDefaults.apply(["--runner=FlinkRunner", "--flink_master=jobmanager:8081",
                                     "--environment_type=EXTERNAL", "--environment_config=localhost:50000"])
    assert [a for a in own if a.startswith(("--environment_type", "--environment_config"))] == [
        "--environment_type=EXTERNAL", "--environment_config=localhost:50000"]
    embedded = LocalRunnerDefaults.apply(["--runner=FlinkRunner"])
    assert "--environment_type=LOOPBACK" in embedded
