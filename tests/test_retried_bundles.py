"""A bundle attempt that fails and is retried leaves no duplicate record and no stray file.

Runners retry a failed bundle (Dataflow up to 4 times in batch, Flink by
restarting the failed region): the runner discards the failed attempt's
outputs, but not the files the attempt wrote. The FnApiRunner behind the
DirectRunner replays exactly that with ``--direct_runner_bundle_repeat=1``:
every bundle first runs as an attempt whose outputs are thrown away (its
state restored), then runs again for real.

The FnApiRunner itself never retries a failed bundle; the fixture below adds
the retry a distributed runner makes: when the first attempt raises the
injected fault, the attempt is dropped (the runner already restored its state)
and the bundle runs again. The fault hits the writers of every stage in those
first attempts: for about half of the files, the rename after writing the
temporary file raises (the attempt dies with a half-written ``.tmp-`` file
behind it); the other files are renamed into place, so that the retry has to
replace them. The sample must still build to the reference bytes, with the
reference's counts (nothing counted twice) and no half-written file left.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import re

import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.runners.portability.fn_api_runner import fn_runner

from beam_pipeline.cli import commands as cli
from beam_pipeline.storage.layers import TEMPORARY_PREFIX
from conftest import IN_PROCESS, SAMPLE_CONFIG, layer_digests, stages_by_name

pytestmark = pytest.mark.slow
INJECTED = "injected fault"


@pytest.fixture
def failing_first_attempts(monkeypatch):
    faults = {"in_first_attempt": False, "failed_attempts": 0, "failed_stages": set(), "renamed_early": 0}
    replay = fn_runner.FnApiRunner._run_bundle_multiple_times_for_testing

    def first_attempt_then_retry(self, *args, **kwargs):
        faults["in_first_attempt"] = True
        try:
            replay(self, *args, **kwargs)  # the runner restores its state even when this raises
        except Exception as err:  # noqa: BLE001 - only the injected fault is retried
            if INJECTED not in str(err):
                raise
            faults["failed_attempts"] += 1  # dropped; the FnApiRunner now runs the bundle again
        finally:
            faults["in_first_attempt"] = False

    rename = FileSystems.rename

    def failing_rename(sources, destinations):
        if faults["in_first_attempt"] and os.path.basename(sources[0]).startswith(TEMPORARY_PREFIX):
            if hashlib.sha256(os.path.basename(destinations[0]).encode()).digest()[0] % 2:
                layer = re.search(r"/(?:layers|dead_letter)/(\w+)/", destinations[0])
                faults["failed_stages"].add(layer.group(1) if layer else "publish")  # datasets/, runs/
                raise OSError(f"{INJECTED}: crashed before renaming {sources[0]}")
            faults["renamed_early"] += 1
        return rename(sources, destinations)

    monkeypatch.setattr(fn_runner.FnApiRunner, "_run_bundle_multiple_times_for_testing", first_attempt_then_retry)
    monkeypatch.setattr(FileSystems, "rename", staticmethod(failing_rename))
    return faults


def test_failed_first_attempts_leave_no_duplicates(failing_first_attempts, built, tmp_path, capsys):
    root = str(tmp_path / "out")
    assert cli.main(["run", "--config", SAMPLE_CONFIG, "--output_root", root, *IN_PROCESS,
                     "--direct_runner_bundle_repeat=1"]) == 0
    out = capsys.readouterr().out
    faults = failing_first_attempts
    # The fault fired in the writers of every stage: attempts died leaving half-written files behind,
    # and files renamed into place by a failed attempt were replaced by the retry.
    assert faults["failed_stages"] == set(built["stages"]) | {"publish"}, faults  # publish: manifest, lineage
    assert faults["failed_attempts"] >= len(built["stages"]) and faults["renamed_early"] > 0, faults

    assert f"dataset_id  {built['manifest']['dataset_id']}" in out
    assert layer_digests(root) == layer_digests(built["root"])
    (metrics,) = glob.glob(os.path.join(root, "runs", "*", "metrics.json"))
    counts = {name: stage["counts"] for name, stage in stages_by_name(json.load(open(metrics))).items()}
    assert counts == {name: stage["counts"] for name, stage in built["stages"].items()}  # nothing counted twice
    leftovers = [os.path.join(d, f) for d, _, files in os.walk(root) for f in files if f.startswith(TEMPORARY_PREFIX)]
    assert leftovers == []
    shards = sorted(os.path.basename(p) for p in glob.glob(os.path.join(root, "datasets", "*", "shards", "*")))
    assert shards == sorted(os.path.basename(p) for p in glob.glob(os.path.join(built["dataset"], "shards", "*")))
