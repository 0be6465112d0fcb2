"""The SDK worker boot of a Flink cluster: ``--environment_type=PROCESS`` without Docker.

A Flink TaskManager starts the Python SDK workers of a portable job in the
job's *environment*. ``DOCKER`` (Beam's default) needs a Docker daemon on every
TaskManager; ``LOOPBACK`` runs every worker inside the submitting process and
fails as soon as two TaskManagers ask it for workers; ``EXTERNAL`` with one
``worker_pool_main`` shared by several TaskManagers fails too (the pool keys
its workers by id, and every TaskManager numbers its workers ``1-1``, ``2-1``
... from one: the second TaskManager's request replaces the first one's
worker, and stopping one stops the other's; docs/flink.md).

``PROCESS`` has each TaskManager start its own workers as child processes,
with ids its own control service keys: nothing is shared between
TaskManagers. The command is this module's console script, installed with
the package (``<venv>/bin/beam-pipeline-worker``)::

    --environment_type=PROCESS --environment_config='{"command": "<venv>/bin/beam-pipeline-worker"}'

It does what Beam's Go ``boot`` of the SDK container does, minus installing
staged packages: the worker runs the package and the dependencies installed
in the virtual environment the command belongs to (the same locked versions
on every TaskManager; ``requirements/runtime.txt``). Given ``--id`` and
``--provision_endpoint`` (the TaskManager passes them, and the logging,
artifact and control endpoints), it asks the provision service for the job's
pipeline options and endpoints, sets the environment Beam's
``sdk_worker_main`` reads (``PIPELINE_OPTIONS``, ``CONTROL_API_SERVICE_DESCRIPTOR``,
``LOGGING_API_SERVICE_DESCRIPTOR``, ``SEMI_PERSISTENT_DIRECTORY``, ``WORKER_ID``,
``RUNNER_CAPABILITIES`` ...) and replaces itself with
``python -m apache_beam.runners.worker.sdk_worker_main`` on the same
interpreter. A worker ends when its TaskManager closes (or loses) the control
connection.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile

#: The console script (setup.py) whose path ``--environment_config`` names.
COMMAND = "beam-pipeline-worker"
SDK_WORKER_MAIN = "apache_beam.runners.worker.sdk_worker_main"

_LOGGER = logging.getLogger(__name__)


def command_path(python: str | None = None) -> str:
    """The boot command beside ``python`` (this interpreter by default): ``<venv>/bin/beam-pipeline-worker``."""
    return os.path.join(os.path.dirname(os.path.abspath(python or sys.executable)), COMMAND)


def environment_config(python: str | None = None) -> str:
    """``--environment_config`` of a PROCESS environment whose workers run :func:`command_path`."""
    return json.dumps({"command": command_path(python)})


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--id", required=True, help="the worker id the runner gave (required)")
    parser.add_argument("--provision_endpoint", required=True, help="the runner's provision service (required)")
    parser.add_argument("--logging_endpoint", default="")
    parser.add_argument("--artifact_endpoint", default="")
    parser.add_argument("--control_endpoint", default="")
    parser.add_argument("--semi_persist_dir", default=tempfile.gettempdir())
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _LOGGER.warning("%s: ignoring arguments %s", COMMAND, unknown)
    return args


def provision_info(endpoint: str, worker_id: str, timeout: float = 60.0):
    """The job's ``ProvisionInfo`` from the runner's provision service, asked as worker ``worker_id``."""
    import grpc
    from apache_beam.portability.api import beam_provision_api_pb2, beam_provision_api_pb2_grpc

    with grpc.insecure_channel(endpoint) as channel:
        grpc.channel_ready_future(channel).result(timeout=timeout)
        stub = beam_provision_api_pb2_grpc.ProvisionServiceStub(channel)
        response = stub.GetProvisionInfo(
            beam_provision_api_pb2.GetProvisionInfoRequest(), metadata=[("worker_id", worker_id)], timeout=timeout
        )
    return response.info


def worker_environment(args: argparse.Namespace, info, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment ``sdk_worker_main`` reads, from the boot's arguments and the provision info."""
    from apache_beam.portability.api import endpoints_pb2
    from google.protobuf import json_format, text_format

    def descriptor(url: str) -> str:
        return text_format.MessageToString(endpoints_pb2.ApiServiceDescriptor(url=url))

    logging_url = info.logging_endpoint.url or args.logging_endpoint
    control_url = info.control_endpoint.url or args.control_endpoint
    if not control_url:
        raise SystemExit(f"{COMMAND}: no control endpoint (neither provisioned nor --control_endpoint)")
    env = dict(os.environ if base is None else base)
    env.update(
        {
            "WORKER_ID": args.id,
            "PIPELINE_OPTIONS": json_format.MessageToJson(info.pipeline_options),
            "SEMI_PERSISTENT_DIRECTORY": args.semi_persist_dir,
            "CONTROL_API_SERVICE_DESCRIPTOR": descriptor(control_url),
            "RUNNER_CAPABILITIES": " ".join(info.runner_capabilities),
        }
    )
    if logging_url:
        env["LOGGING_API_SERVICE_DESCRIPTOR"] = descriptor(logging_url)
    if info.HasField("status_endpoint"):
        env["STATUS_API_SERVICE_DESCRIPTOR"] = text_format.MessageToString(info.status_endpoint)
    for key, name in (("job_name", "JOB_NAME"), ("job_id", "JOB_ID")):
        if key in info.metadata:
            env[name] = info.metadata[key]
    return env


def main(argv: list[str] | None = None) -> int:
    """Boot one TaskManager's SDK worker (and its siblings, when the runner asks for several)."""
    logging.basicConfig(level=logging.INFO, format=f"{COMMAND} %(levelname)s %(message)s")
    args = _arguments(list(sys.argv[1:] if argv is None else argv))
    info = provision_info(args.provision_endpoint, args.id)
    env = worker_environment(args, info)
    staged = [a.type_urn for a in info.dependencies]
    if staged:
        _LOGGER.info("%s: not installing %d staged artifacts; the worker runs %s", COMMAND, len(staged), sys.prefix)
    command = [sys.executable, "-m", SDK_WORKER_MAIN]
    siblings = list(info.sibling_worker_ids)
    if not siblings:
        os.execve(sys.executable, command, env)  # the runner's process is the worker itself
    children = [subprocess.Popen(command, env={**env, "WORKER_ID": worker_id}) for worker_id in [args.id, *siblings]]

    def forward(signum, _frame):
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    return max(child.wait() for child in children)


if __name__ == "__main__":
    sys.exit(main())
