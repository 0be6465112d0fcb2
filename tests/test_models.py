"""The model cache (beam_pipeline/filters/models.py): a cached model is used only with its pinned sha256."""
import hashlib
import os
import subprocess
import sys

import pytest

from beam_pipeline.filters import models
from beam_pipeline.filters import language
from conftest import SAMPLE_CONFIG


def _model(content: bytes) -> models.ModelFile:
    return models.ModelFile(name="tiny.ftz", sha256=hashlib.sha256(content).hexdigest(),
                            wheel="unused==0", wheel_sha256="0" * 64, member="unused")


def test_a_file_with_the_pinned_hash_is_used(tmp_path):
    model = _model(b"model bytes")
    (tmp_path / "tiny.ftz").write_bytes(b"model bytes")
    assert models.cached_path(model, str(tmp_path)) == str(tmp_path / "tiny.ftz")


def test_a_file_with_another_hash_is_refused_naming_the_fetch_command(tmp_path):
    model = _model(b"model bytes")
    (tmp_path / "tiny.ftz").write_bytes(b"model bytes, one byte more")
    with pytest.raises(models.ModelCacheError) as error:
        models.cached_path(model, str(tmp_path))
    message = str(error.value)
    assert "\n" not in message and model.sha256 in message and models.FETCH_COMMAND in message
    assert hashlib.sha256(b"model bytes, one byte more").hexdigest() in message


def test_a_missing_file_is_a_one_line_error_naming_the_fetch_command(tmp_path):
    with pytest.raises(models.ModelCacheError) as error:
        models.cached_path(_model(b"x"), str(tmp_path))
    assert "\n" not in str(error.value) and models.FETCH_COMMAND in str(error.value)


def test_a_build_without_the_model_stops_with_one_line(tmp_path):
    env = dict(os.environ, BEAM_PIPELINE_MODELS=str(tmp_path / "empty"))
    result = subprocess.run([sys.executable, "-m", "beam_pipeline", "run", "--config", SAMPLE_CONFIG,
                             "--output_root", str(tmp_path / "out")], env=env, capture_output=True, text=True)
    assert result.returncode == 3, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: model lid.176.ftz is not in the model cache ({tmp_path / 'empty' / 'lid.176.ftz'}): "
        f"run `{models.FETCH_COMMAND}`"]


def test_the_cache_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path))
    assert models.cache_dir() == str(tmp_path)
    (tmp_path / "lid.176.ftz").write_bytes(b"not the lid.176 model")  # a real file, the wrong bytes
    with pytest.raises(models.ModelCacheError, match="expected " + models.LID_176.sha256):
        language.builtin_lid_path()
    monkeypatch.delenv(models.CACHE_ENV)
    assert models.cache_dir() == os.path.join(os.path.expanduser("~"), ".cache", "beam_pipeline", "models")


def test_fetch_keeps_a_cached_file_with_the_right_hash_without_the_network(tmp_path):
    model = _model(b"model bytes")
    (tmp_path / "tiny.ftz").write_bytes(b"model bytes")
    assert models.fetch(model, str(tmp_path)) == str(tmp_path / "tiny.ftz")  # wheel "unused==0" is never asked for
