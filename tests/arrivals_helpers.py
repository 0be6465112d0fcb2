"""Helpers of the arrivals tests (tests/test_arrivals*.py): configs, landing runs, bronze views.

Run as a script, it is ``python -m beam_pipeline`` with Beam's S3 clients
built from one shared botocore session (the ``fast_boto3`` approach of
tests/test_s3.py), for landing jobs the tests start as processes so that
they can ``kill -9`` them: ``python tests/arrivals_helpers.py land ...``.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TOKENIZER = os.path.join(REPO, "sample", "tokenizer", "tokenizer.json")


def landing_config(path, root: str, sources: dict[str, dict], *, fmt: str = "text", extra: str = "") -> str:
    """A config whose sources land from ``sources[name]["uri"]`` with ``sources[name]["landing"]``."""
    lines = []
    for rank, (name, spec) in enumerate(sources.items(), 1):
        landing = json.dumps(spec["landing"])
        lines.append(f'  - {{name: {name}, uri: "{spec["uri"]}", format: {spec.get("format", fmt)}, rank: {rank}, '
                     f'license: x, domain: d, landing: {landing}}}')
    text = (f"name: arrivals\noutput_root: {root}\nsources:\n" + "\n".join(lines) + "\n"
            "cascade: [heuristics]\n"
            f"tokenize: {{tokenizer: {TOKENIZER}, seq_len: 256, shard_tokens: 65536}}\n" + extra)
    with open(path, "w") as f:
        f.write(text)
    return str(path)


def write_text(path, text: str, mtime: float | None = None) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def pseudo_text(seed: str, size: int) -> bytes:
    """``size`` bytes of printable text derived from ``seed`` (deterministic, no RNG)."""
    out, counter = bytearray(), 0
    while len(out) < size:
        digest = hashlib.sha256(f"{seed}/{counter}".encode()).hexdigest()
        out += (" ".join(digest[i:i + 8] for i in range(0, 64, 8)) + "\n").encode()
        counter += 1
    return bytes(out[:size])


def local_objects(root: str) -> dict[str, str]:
    """Bronze objects under a local root: key relative to <root>/bronze -> sha256 of the bytes."""
    base = os.path.join(root, "bronze")
    found = {}
    for folder, _, names in os.walk(base):
        rel = os.path.relpath(folder, base)
        if rel.split(os.sep)[0] in ("_arrivals", "_tmp"):
            continue
        for name in names:
            with open(os.path.join(folder, name), "rb") as f:
                found[os.path.join(rel, name)] = hashlib.sha256(f.read()).hexdigest()
    return found


def two_roots(tmp_path, landing_spec: dict) -> tuple:
    """A landing folder with three early files, and two configs over it: one for the job that will be
    killed, one for the uninterrupted reference -> (landing, killed_root, killed, reference_root, reference)."""
    landing = tmp_path / "landing"
    for i in range(3):
        write_text(landing / f"early-{i}.txt", f"early file {i}\n", mtime=1_600_000_000 + i)
    killed_root, reference_root = str(tmp_path / "killed"), str(tmp_path / "reference")
    spec = {"docs": {"uri": str(landing / "*.txt"), "landing": landing_spec}}
    return (landing, killed_root, landing_config(tmp_path / "killed.yaml", killed_root, spec),
            reference_root, landing_config(tmp_path / "reference.yaml", reference_root, spec))


def segments(root: str) -> dict[str, bytes]:
    """The arrivals-log segments under a local root, with their bytes."""
    return {p: open(p, "rb").read() for p in glob.glob(os.path.join(root, "bronze", "_arrivals", "*"))}


def landed_but_not_logged(root: str) -> list[str]:
    """Objects under a local root that no committed arrival names: copies of a window not committed yet."""
    from beam_pipeline.storage.arrivals_log import read_log

    logged = {e["object"] for e in read_log(root).entries}
    names = glob.glob(os.path.join(root, "bronze", "docs", "*", "*"))
    return [p for p in names if os.path.relpath(p, os.path.join(root, "bronze")) not in logged]


def start_land(args: list[str], log_path: str, env: dict | None = None) -> subprocess.Popen:
    """``land`` in its own process group (so a kill -9 takes its job server and workers along)."""
    log = open(log_path, "wb")
    return subprocess.Popen([sys.executable, os.path.join(HERE, "arrivals_helpers.py"), "land", *args],
                            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, **(env or {})})


def kill_group(process: subprocess.Popen) -> None:
    """kill -9 the landing process and everything it started (its own process group)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=60)


def wait_for(predicate, timeout: float, interval: float = 0.02, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def fast_boto3_patch() -> None:
    """Beam's S3 clients from one shared botocore session (tests/test_s3.py, ``fast_boto3``)."""
    import boto3
    from apache_beam.io.aws.clients.s3 import boto3_client

    shared = boto3.session.Session()
    clients = {}
    real_client = shared.client

    def client(*args, **kwargs):
        key = (args, tuple(sorted(kwargs.items())))
        if key not in clients:
            clients[key] = real_client(*args, **kwargs)
        return clients[key]

    shared.client = client
    boto3_client.boto3.session.Session = lambda: shared


if __name__ == "__main__":
    sys.path.insert(0, REPO)
    if os.environ.get("ARRIVALS_FAST_BOTO3") == "1":
        fast_boto3_patch()
    from beam_pipeline.cli import commands as cli
    sys.exit(cli.main(sys.argv[1:]))
