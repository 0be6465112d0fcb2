"""Builds on S3: inputs read from and every output written to ``s3://`` (docs/s3.md).

A ``moto_server`` (an S3-protocol server, pinned in requirements/dev.txt)
runs on 127.0.0.1 on a free port for the module. The corpus files are
uploaded with boto3; the build reaches them only through Beam's S3
filesystem, configured by the usual options (``--s3_endpoint_url``,
``--s3_access_key_id``, ``--s3_secret_access_key``, ``--s3_region_name``).
The driver's own calls (snapshot listing, ledgers, the manifest) use the same
options because the CLI hands them to ``FileSystems.set_options``.

Beam's S3 filesystem builds a new boto3 session for every call, which parses
botocore's JSON service models again (~1 s per call here, docs/s3.md). The
tests hand Beam one cached client per set of options (``fast_boto3``): the
same requests, without re-reading the models for each, so the module takes
a few minutes instead of more than ten.
"""
from __future__ import annotations

import glob
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from beam_pipeline.cli import commands as cli
from beam_pipeline.config.corpus import load_config
from beam_pipeline.sources.snapshot import InputChangedError, source_base, take_snapshot, verify_file
from conftest import IN_PROCESS, REPO, dataset_id_from_output

boto3 = pytest.importorskip("boto3")
pytest.importorskip("moto")

SAMPLE = os.path.join(REPO, "sample")
BUCKET = "corpus"
KEYS = {"access": "testing-key", "secret": "testing-secret", "region": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def moto_endpoint():
    """A moto S3 server on 127.0.0.1:<free port>, stopped after the module."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not start (exit code {process.poll()})")
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(autouse=True)
def fast_boto3(monkeypatch):
    """Beam's S3 clients, created from one shared botocore session (see the module docstring)."""
    from apache_beam.io.aws.clients.s3 import boto3_client

    shared = boto3.session.Session()
    clients = {}
    real_client = shared.client

    def client(*args, **kwargs):  # boto3 clients are thread-safe; Beam keeps its stream state elsewhere
        key = (args, tuple(sorted(kwargs.items())))
        if key not in clients:
            clients[key] = real_client(*args, **kwargs)
        return clients[key]

    shared.client = client
    monkeypatch.setattr(boto3_client.boto3.session, "Session", lambda: shared)


def s3_args(endpoint: str) -> list[str]:
    return [f"--s3_endpoint_url={endpoint}", f"--s3_access_key_id={KEYS['access']}",
            f"--s3_secret_access_key={KEYS['secret']}", f"--s3_region_name={KEYS['region']}"]


def s3_client(endpoint: str):
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=KEYS["access"],
                        aws_secret_access_key=KEYS["secret"], region_name=KEYS["region"])


SMALL_FILES = {  # a small corpus from the sample: three formats, two compressions
    "legal": ("debian-copyright", "*.txt", 6, "text"),
    "docs": ("python-docs-mirror", "*.jsonl.gz", 1, "jsonl"),
    "docs-zst": ("python-docs", "*.jsonl.zst", 1, "jsonl"),
    "wiki": ("wikipedia", "*.parquet", 1, "parquet"),
}


def write_config(path, root: str, uri_of, tokenizer: str, checksum: str = "sha256") -> str:
    sources = "\n".join(
        f'  - {{name: {name}, uri: "{uri_of(name, pattern)}", format: {fmt}, rank: {rank}, license: x, '
        f'domain: {name}}}'
        for rank, (name, (_, pattern, _, fmt)) in enumerate(SMALL_FILES.items(), 1))
    path.write_text(f"""
name: small-s3
output_root: {root}
snapshot: {{checksum: {checksum}}}
sources:
{sources}
tokenize: {{tokenizer: "{tokenizer}", seq_len: 1024, shard_tokens: 65536}}
layout: {{min_partitions: 1}}
""")
    return str(path)


@pytest.fixture(scope="module")
def small_local(tmp_path_factory):
    """The small corpus on local disk, and its dataset id built in-process."""
    base = tmp_path_factory.mktemp("small")
    for name, (folder, pattern, count, _) in SMALL_FILES.items():
        (base / "data" / name).mkdir(parents=True)
        for path in sorted(glob.glob(os.path.join(SAMPLE, "data", folder, pattern)))[:count]:
            shutil.copy(path, base / "data" / name / os.path.basename(path))
    tokenizer = os.path.join(SAMPLE, "tokenizer", "tokenizer.json")
    config = write_config(base / "corpus.yaml", str(base / "out"),
                          lambda name, pattern: str(base / "data" / name / pattern), tokenizer)
    return {"base": base, "tokenizer": tokenizer, "config": config}


@pytest.fixture(scope="module")
def bucket(moto_endpoint, small_local):
    """The small corpus and the tokenizer uploaded to s3://corpus/ with boto3."""
    client = s3_client(moto_endpoint)
    client.create_bucket(Bucket=BUCKET)
    for path in sorted(glob.glob(str(small_local["base"] / "data" / "*" / "*"))):
        client.upload_file(path, BUCKET, "input/" + os.path.relpath(path, small_local["base"] / "data"))
    client.upload_file(small_local["tokenizer"], BUCKET, "tokenizer/tokenizer.json")
    return client


def s3_config(tmp_path, checksum="sha256", root=f"s3://{BUCKET}/out") -> str:
    return write_config(tmp_path / "s3.yaml", root, lambda name, pattern: f"s3://{BUCKET}/input/{name}/{pattern}",
                        f"s3://{BUCKET}/tokenizer/tokenizer.json", checksum)


def keys(client, prefix: str) -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


@pytest.mark.timeout(900)
def test_build_on_s3_has_the_local_dataset_id(small_local, bucket, moto_endpoint, tmp_path, capsys):
    assert cli.main(["run", "--config", small_local["config"], *IN_PROCESS]) == 0
    local_id = dataset_id_from_output(capsys.readouterr().out)

    started = time.monotonic()
    assert cli.main(["run", "--config", s3_config(tmp_path), *IN_PROCESS, *s3_args(moto_endpoint)]) == 0
    out = capsys.readouterr().out
    print(f"S3 build: {time.monotonic() - started:.1f}s", file=sys.__stderr__)
    assert dataset_id_from_output(out) == local_id
    assert f"dataset     s3://{BUCKET}/out/datasets/{local_id}" in out

    written = keys(bucket, "out/")
    for prefix in ("out/snapshots/", "out/layers/ingest/", "out/layers/tokenize/", "out/runs/",
                   f"out/datasets/{local_id}/manifest.json", f"out/datasets/{local_id}/shards/"):
        assert any(k.startswith(prefix) for k in written), f"nothing under s3://{BUCKET}/{prefix}"
    assert not any(".tmp-" in k for k in written), "a temporary object was left behind"
    local_files = glob.glob(str(tmp_path / "**" / "*.parquet"), recursive=True)
    assert not local_files, "the S3 build wrote layers to local disk"

    # The snapshot checksums are sha256 of the objects' bytes, as for local files.
    (snapshot_key,) = [k for k in written if k.startswith("out/snapshots/") and k.endswith(".json")]
    import json
    manifest = json.loads(bucket.get_object(Bucket=BUCKET, Key=snapshot_key)["Body"].read())
    entry = manifest["sources"]["legal"]["files"][0]  # its path is relative to the source's base (docs/format.md)
    base = source_base(load_config(s3_config(tmp_path)).source("legal").uri)
    body = bucket.get_object(Bucket=BUCKET, Key=f"{base}/{entry['path']}"[len(f"s3://{BUCKET}/"):])["Body"].read()
    assert entry["checksum"] == "sha256:" + hashlib.sha256(body).hexdigest()

    # A fresh driver pinned to that snapshot reads s3:// before any pipeline exists (CorpusBuild
    # hands its options to FileSystems, as the CLI does) and reuses every layer.
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions
    from beam_pipeline.build.corpus_build import CorpusBuild

    FileSystems.set_options(None)  # as in a fresh process
    snapshot_id = snapshot_key.rsplit("/", 1)[1][:-len(".json")]
    lines = []
    again = CorpusBuild(load_config(s3_config(tmp_path)), PipelineOptions([*IN_PROCESS, *s3_args(moto_endpoint)]),
                        snapshot_id=snapshot_id, log=lines.append).run()
    assert f"[snapshot] using pinned snapshot {snapshot_id}" in lines
    assert all(stage.reused for stage in again.stages) and again.dataset_id == local_id
    assert not any("/_spill/" in k or "/_placement/" in k for k in written)  # spill and staging files deleted

    # A takedown on the object store: a verified new version, and nothing of its staging left behind
    # (an object store has no folders: every staged object is deleted by name).
    from beam_pipeline.dataset.lineage import read_lineage
    from beam_pipeline.dataset.takedown import takedown
    from beam_pipeline.dataset.verify import verify_dataset

    dataset = f"s3://{BUCKET}/out/datasets/{local_id}"
    victim = next(r["doc_id"] for r in read_lineage(dataset, columns=["doc_id", "shard"]).to_pylist() if r["shard"])
    result = takedown(dataset, doc_ids=[victim], include_duplicates=False, log=lambda m: None)
    assert result.removed == [victim] and verify_dataset(result.dataset_path).ok
    left = [k for k in keys(bucket, "out/") if k not in written]
    assert any(k.startswith(f"out/datasets/{result.dataset_id}/lineage/") for k in left)
    assert not [k for k in left if ".tmp-" in k or "/_placement/" in k], left


def test_filesystem_checksums_on_s3_use_the_etag(bucket, moto_endpoint, tmp_path):
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    options = PipelineOptions([*IN_PROCESS, *s3_args(moto_endpoint)])
    FileSystems.set_options(options)
    config = load_config(s3_config(tmp_path, checksum="filesystem", root=f"s3://{BUCKET}/fs-out"))
    snapshot_id, manifest = take_snapshot(config, options)
    files = [f for s in manifest["sources"].values() for f in s["files"]]
    assert len(files) == sum(count for _, _, count, _ in SMALL_FILES.values())
    for entry in files:
        key = entry["path"][len(f"s3://{BUCKET}/"):]
        etag = bucket.head_object(Bucket=BUCKET, Key=key)["ETag"]  # md5 of the bytes, in quotes
        assert entry["checksum"] == f"fs:{etag}"
        verify_file(entry["path"], entry["checksum"])  # what ingest checks per file
    assert FileSystems.exists(f"s3://{BUCKET}/fs-out/snapshots/{snapshot_id}.json")

    victim = files[0]["path"][len(f"s3://{BUCKET}/"):]
    original = bucket.get_object(Bucket=BUCKET, Key=victim)["Body"].read()
    try:
        bucket.put_object(Bucket=BUCKET, Key=victim, Body=original + b"\nchanged\n")
        with pytest.raises(InputChangedError, match="input changed since its snapshot"):
            verify_file(files[0]["path"], files[0]["checksum"])
    finally:
        bucket.put_object(Bucket=BUCKET, Key=victim, Body=original)


@pytest.mark.timeout(900)
def test_models_and_lists_on_s3_load_where_the_scorers_run(small_local, bucket, moto_endpoint, tmp_path, capsys):
    """fastText reads local files only: a quality model on s3:// is copied to the worker in setup()
    (layers.local_copy); blocklists and eval sets are read through Beam's filesystems. The scores equal
    those of the same files on local disk."""
    sample = os.path.join(REPO, "sample")
    side = {"models/quality.bin": os.path.join(sample, "models", "quality.bin"),
            "lists/domains.txt": os.path.join(sample, "blocklists", "domains.txt"),
            "evalsets/passages.jsonl": os.path.join(sample, "evalsets", "passages.jsonl")}
    for key, path in side.items():
        bucket.upload_file(path, BUCKET, key)
    scoring = ("cascade: [language, blocklist, quality, decontamination]\n"
               "quality: {{model: {quality}}}\nblocklist: {{domain_files: [{domains}]}}\n"
               "decontamination: {{evalsets: [{{name: passages, path: {evalset}}}]}}\n")
    local = tmp_path / "local.yaml"
    local.write_text(open(small_local["config"]).read().replace(str(small_local["base"] / "out"),
                                                                 str(tmp_path / "local-out"))
                     + scoring.format(quality=side["models/quality.bin"], domains=side["lists/domains.txt"],
                                      evalset=side["evalsets/passages.jsonl"]))
    (tmp_path / "r").mkdir()
    remote = tmp_path / "remote.yaml"
    remote.write_text(open(s3_config(tmp_path / "r")).read().replace(f"s3://{BUCKET}/out", f"s3://{BUCKET}/scored")
                      + scoring.format(quality=f"s3://{BUCKET}/models/quality.bin",
                                       domains=f"s3://{BUCKET}/lists/domains.txt",
                                       evalset=f"s3://{BUCKET}/evalsets/passages.jsonl"))
    cache = tmp_path / "worker-cache"
    os.environ["BEAM_PIPELINE_CACHE"] = str(cache)  # the in-process workers' local copies go here
    try:
        assert cli.main(["run", "--config", str(local), *IN_PROCESS]) == 0
        local_out = capsys.readouterr().out
        assert cli.main(["run", "--config", str(remote), *IN_PROCESS, *s3_args(moto_endpoint)]) == 0
        remote_out = capsys.readouterr().out
    finally:
        del os.environ["BEAM_PIPELINE_CACHE"]
    assert dataset_id_from_output(remote_out) == dataset_id_from_output(local_out)
    assert [os.path.basename(p) for p in glob.glob(str(cache / "side_files" / "*" / "*"))] == ["quality.bin"]
    for stage in ("quality", "blocklist", "decontamination"):
        line = next(l for l in remote_out.splitlines() if l.startswith(stage + " "))
        assert line.split()[1:5] == next(l for l in local_out.splitlines() if l.startswith(stage + " ")).split()[1:5]


# --- the output root checked before any work (issue 43, item 2) ----------------------------------------

def clean_env(home) -> dict:
    """No AWS credentials anywhere boto3 looks: environment, files, instance metadata."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(home), AWS_CONFIG_FILE=str(home / "none"), AWS_SHARED_CREDENTIALS_FILE=str(home / "none"),
               AWS_EC2_METADATA_DISABLED="true")
    return env


def refused_before_the_snapshot(result, tmp_path) -> str:
    assert result.returncode == 4, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the output root s3://"), result.stderr[-3000:]
    assert "fingerprinting" not in result.stdout and "Traceback" not in result.stderr
    return lines[0]


def local_inputs_config(small_local, tmp_path, root: str) -> str:
    text = open(small_local["config"]).read().replace(str(small_local["base"] / "out"), root)
    (tmp_path / "to-s3.yaml").write_text(text)
    return str(tmp_path / "to-s3.yaml")


def test_an_s3_root_without_credentials_is_refused_before_the_snapshot(small_local, bucket, moto_endpoint,
                                                                       tmp_path):
    from conftest import run_cli

    config = local_inputs_config(small_local, tmp_path, f"s3://{BUCKET}/no-credentials")
    result = run_cli(["run", "--config", config, *IN_PROCESS, f"--s3_endpoint_url={moto_endpoint}",
                      "--s3_region_name=us-east-1"], env=clean_env(tmp_path), timeout=300)
    line = refused_before_the_snapshot(result, tmp_path)
    assert "no S3 credentials" in line
    assert "--s3_access_key_id and --s3_secret_access_key" in line and "AWS_ACCESS_KEY_ID" in line
    assert "docs/s3.md" in line
    assert not keys(bucket, "no-credentials/")


def test_an_s3_root_in_a_missing_bucket_is_refused_before_the_snapshot(small_local, bucket, moto_endpoint,
                                                                       tmp_path):
    from conftest import run_cli

    config = local_inputs_config(small_local, tmp_path, "s3://no-such-bucket/out")
    result = run_cli(["snapshot", "--config", config, *IN_PROCESS, *s3_args(moto_endpoint)],
                     env=clean_env(tmp_path), timeout=300)
    line = refused_before_the_snapshot(result, tmp_path)
    assert "the bucket 'no-such-bucket' does not exist" in line and "--output_root" in line


@pytest.fixture(scope="module")
def auth_endpoint():
    """A second moto server that checks credentials (after the 4 requests that set it up): a bucket, and
    a user who may only list and read it."""
    import json

    port = free_port()
    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="4")
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not start (exit code {process.poll()})")
                time.sleep(0.2)
        endpoint = f"http://127.0.0.1:{port}"
        setup = {"endpoint_url": endpoint, "region_name": KEYS["region"], "aws_access_key_id": "setup",
                 "aws_secret_access_key": "setup"}
        boto3.client("s3", **setup).create_bucket(Bucket=BUCKET)
        iam = boto3.client("iam", **setup)
        iam.create_user(UserName="reader")
        key = iam.create_access_key(UserName="reader")["AccessKey"]
        iam.put_user_policy(UserName="reader", PolicyName="read-only", PolicyDocument=json.dumps({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": ["s3:ListBucket", "s3:GetObject"], "Resource": "*"}]}))
        yield {"endpoint": endpoint, "reader": (key["AccessKeyId"], key["SecretAccessKey"])}
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_an_s3_root_with_wrong_credentials_is_refused_before_the_snapshot(small_local, auth_endpoint, tmp_path):
    from conftest import run_cli

    config = local_inputs_config(small_local, tmp_path, f"s3://{BUCKET}/out")
    result = run_cli(["run", "--config", config, *IN_PROCESS, f"--s3_endpoint_url={auth_endpoint['endpoint']}",
                      "--s3_region_name=us-east-1", "--s3_access_key_id=AKIAWRONGWRONGWRONG1",
                      "--s3_secret_access_key=wrong"], env=clean_env(tmp_path), timeout=300)
    line = refused_before_the_snapshot(result, tmp_path)
    assert "the S3 credentials were refused (InvalidAccessKeyId)" in line and "--s3_access_key_id" in line


def test_an_s3_root_the_credentials_may_not_write_is_refused_before_the_snapshot(small_local, auth_endpoint,
                                                                                 tmp_path):
    from conftest import run_cli

    access, secret = auth_endpoint["reader"]
    config = local_inputs_config(small_local, tmp_path, f"s3://{BUCKET}/out")
    result = run_cli(["run", "--config", config, *IN_PROCESS, f"--s3_endpoint_url={auth_endpoint['endpoint']}",
                      "--s3_region_name=us-east-1", f"--s3_access_key_id={access}",
                      f"--s3_secret_access_key={secret}"], env=clean_env(tmp_path), timeout=300)
    line = refused_before_the_snapshot(result, tmp_path)
    assert "may not write to it (AccessDenied)" in line and "s3:PutObject" in line
    assert access not in line and secret not in line  # no credential in the message


# --- the root's lease on S3: a conditional create (issue 43, item 3; beam_pipeline/build/lease.py) --------------

LEASE_KEY = "leased/_BUILD_LEASE.json"


def test_the_lease_on_s3_is_a_conditional_create_renewed_and_released(bucket, moto_endpoint):
    import json

    from apache_beam.options.pipeline_options import PipelineOptions
    from botocore.exceptions import ClientError

    from beam_pipeline.build.lease import Lease, LeaseHeld

    options = PipelineOptions(s3_args(moto_endpoint))
    root = f"s3://{BUCKET}/leased"
    with Lease(root, options, renew_every=0.3) as first:
        held = json.loads(bucket.get_object(Bucket=BUCKET, Key=LEASE_KEY)["Body"].read())
        assert held["token"] == first.holder.token
        with pytest.raises(LeaseHeld, match=f"pid {os.getpid()}, started {first.holder.started}"):
            Lease(root, options).acquire()
        with pytest.raises(ClientError, match="PreconditionFailed"):  # what the lease relies on
            bucket.put_object(Bucket=BUCKET, Key=LEASE_KEY, Body=b"mine", IfNoneMatch="*")
        time.sleep(1.0)
        renewed = json.loads(bucket.get_object(Bucket=BUCKET, Key=LEASE_KEY)["Body"].read())["renewed"]
        assert renewed > held["renewed"]
    assert not keys(bucket, "leased/")


def test_a_stale_lease_on_s3_is_taken_over_by_one_build_only(bucket, moto_endpoint):
    import threading

    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_pipeline.build.lease import Holder, Lease, LeaseHeld

    options = PipelineOptions(s3_args(moto_endpoint))
    root = f"s3://{BUCKET}/leased"
    stale = Holder("gone", "elsewhere", 4242, "2026-01-02T03:04:05Z", time.time() - 60, timeout=1.0)
    bucket.put_object(Bucket=BUCKET, Key=LEASE_KEY, Body=stale.encode())
    time.sleep(1.5)  # the object itself is older than the lease's timeout
    outcomes, lines, barrier = [], [], threading.Barrier(3)

    def contend():
        lease = Lease(root, options, log=lines.append)
        barrier.wait()
        try:
            lease.acquire()
            outcomes.append(lease)
        except LeaseHeld:
            outcomes.append(None)

    threads = [threading.Thread(target=contend) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [lease for lease in outcomes if lease is not None]
    assert len(winners) == 1 and len(outcomes) == 3, outcomes
    assert len(lines) == 1 and "took over the stale lease" in lines[0] and "host elsewhere, pid 4242" in lines[0]
    winners[0].release()
    assert not keys(bucket, "leased/")
