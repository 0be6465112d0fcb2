"""The Beam arguments the CLI adds per runner (beam_pipeline.options.LocalRunnerDefaults)."""
from __future__ import annotations

import os
import tempfile

import pytest

from beam_pipeline.options import corpus_options, job_server_scratch
from beam_pipeline.options.corpus_options import LOCAL_RUNNER_CEILING_BYTES, LocalRunnerDefaults


@pytest.fixture
def jar(tmp_path, monkeypatch):
    """A job server jar where flink_defaults looks for it (the file's bytes do not matter here)."""
    monkeypatch.setenv("FLINK_CACHE", str(tmp_path))
    path = corpus_options.flink_job_server_jar()
    os.makedirs(os.path.dirname(path))
    open(path, "wb").close()
    return path


def test_no_runner_is_the_local_runner_on_every_core_up_to_the_ceiling():
    args = LocalRunnerDefaults.apply([], input_bytes=LOCAL_RUNNER_CEILING_BYTES)
    assert args[:2] == ["--runner=DirectRunner", "--direct_running_mode=multi_processing"]
    assert f"--direct_num_workers={os.cpu_count()}" in args


def test_above_the_ceiling_no_runner_is_embedded_flink_with_the_assembled_job_server(jar):
    args = LocalRunnerDefaults.apply(["--temp_location=/tmp/x"], input_bytes=LOCAL_RUNNER_CEILING_BYTES + 1)
    assert args[:2] == ["--runner=FlinkRunner", "--flink_master=[local]"]
    assert f"--flink_job_server_jar={jar}" in args
    assert {"--flink_version=1.19", "--environment_type=LOOPBACK", "--job_server_jvm_properties=-Xss16m",
            f"--parallelism={os.cpu_count()}", "--temp_location=/tmp/x"} <= set(args)


def test_a_runner_the_user_names_is_kept_above_the_ceiling():
    args = LocalRunnerDefaults.apply(["--runner=DirectRunner"], input_bytes=10 * LOCAL_RUNNER_CEILING_BYTES)
    assert "--runner=FlinkRunner" not in args
    assert args.count("--runner=DirectRunner") == 1


def test_what_the_user_gives_flink_wins(jar):
    given = ["--runner=FlinkRunner", "--job_server_jvm_properties=-Xss64m", "--parallelism=7",
             "--environment_type=DOCKER", "--flink_version=1.18"]
    args = LocalRunnerDefaults.apply(given)
    for flag in ("--parallelism", "--environment_type", "--flink_version"):
        assert len([a for a in args if a.startswith(flag + "=")]) == 1, flag
    properties = [a.split("=", 1)[1] for a in args if a.startswith("--job_server_jvm_properties=")]
    assert properties[0] == "-Xss64m" and not [p for p in properties if p.startswith("-Xss")][1:]
    assert args[:len(given)] == given
    own_tmp = LocalRunnerDefaults.apply([*given, "--job_server_jvm_properties=-Djava.io.tmpdir=/big/disk"])
    assert [a for a in own_tmp if "java.io.tmpdir" in a] == ["--job_server_jvm_properties=-Djava.io.tmpdir=/big/disk"]


def test_flink_keeps_a_jobs_sdk_workers_between_tasks_unless_told_otherwise(jar):
    """docs/flink.md, "SDK workers kept between tasks": Beam's default (0) starts new workers for every task."""
    for master in ("[local]", "jobmanager:8081"):
        args = LocalRunnerDefaults.apply(["--runner=FlinkRunner", f"--flink_master={master}"])
        assert f"--environment_cache_millis={corpus_options.ENVIRONMENT_CACHE_MILLIS}" in args
    own = LocalRunnerDefaults.apply(["--runner=FlinkRunner", "--environment_cache_millis=0"])
    assert [a for a in own if a.startswith("--environment_cache_millis")] == ["--environment_cache_millis=0"]


def test_a_job_server_of_ones_own_gets_the_stack_and_scratch_and_a_running_one_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    os.makedirs(tmp_path / "tmp")
    own = LocalRunnerDefaults.apply(["--runner=FlinkRunner", f"--flink_job_server_jar={tmp_path}/js.jar"])
    assert "--job_server_jvm_properties=-Xss16m" in own
    scratch = job_server_scratch.claim()
    assert scratch.startswith(str(tmp_path / "tmp" / job_server_scratch.ROOT_NAME))
    assert f"--job_server_jvm_properties=-Djava.io.tmpdir={scratch}" in own
    running = LocalRunnerDefaults.apply(["--runner=FlinkRunner", "--job_endpoint=localhost:8099"])
    assert not [a for a in running if a.startswith(("--job_server_jvm", "--flink_job_server_jar"))]


def test_a_missing_job_server_says_make_flink(tmp_path, monkeypatch):
    monkeypatch.setenv("FLINK_CACHE", str(tmp_path))
    with pytest.raises(corpus_options.RunnerError, match="make flink"):
        LocalRunnerDefaults.apply(["--runner=FlinkRunner"])


def test_land_takes_the_flink_defaults_run_takes_and_beams_own_runner_without_one(jar):
    """``land`` (issue 43): `LocalRunnerDefaults.named`, the runner-named part of `apply`."""
    given = ["--runner=FlinkRunner", "--flink_master=[local]"]
    assert LocalRunnerDefaults.named(given) == LocalRunnerDefaults.apply(given)
    assert f"--flink_job_server_jar={jar}" in LocalRunnerDefaults.named(given)
    assert LocalRunnerDefaults.named([]) == []  # no --runner: Beam's (the landing job streams on it)
    assert LocalRunnerDefaults.named(["--runner=DirectRunner"]) == ["--runner=DirectRunner"]
