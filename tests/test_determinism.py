"""Same snapshot + config + code => the same bytes, whatever the runner mode or hash seed.

The reference (``built``) runs in-process under pytest's own hash seed; this
run uses worker processes and another fixed PYTHONHASHSEED. The resume tests
add more in-process runs under random hash seeds, compared layer by layer.
"""
import os

import pytest

from conftest import IN_PROCESS, SAMPLE_CONFIG, dataset_id_from_output, layer_digests, run_cli

pytestmark = pytest.mark.slow


def test_multi_process_run_matches_in_process_run(built, tmp_path):
    root = str(tmp_path / "out")
    env = {**os.environ, "PYTHONHASHSEED": "271828"}
    result = run_cli(["run", "--config", SAMPLE_CONFIG, "--output_root", root, "--runner=DirectRunner",
                      "--direct_running_mode=multi_processing", "--direct_num_workers=2"], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert dataset_id_from_output(result.stdout) == built["manifest"]["dataset_id"]
    # not only the shards: every layer partition is byte-identical
    assert layer_digests(root) == layer_digests(built["root"])

