"""Object-store output roots checked before any work (docs/s3.md).

``run``, ``snapshot`` and ``select`` check an ``s3://`` output root before the
snapshot, as they check a local one: a listing of the root's prefix and a probe
object written and deleted there, with the same client and options (``--s3_*``,
or boto3's default chain) the build's own calls use. Missing or refused
credentials, a missing bucket, no permission to list or write and an endpoint
that does not answer are each one line naming the fix, exit 4
(:data:`~beam_pipeline.errors.EXIT_NOT_WRITABLE`).
"""

from __future__ import annotations

import os
import uuid

from beam_pipeline.errors import EXIT_NOT_WRITABLE, UserError

#: What to do about credentials, in the words of docs/s3.md.
CREDENTIALS_FIX = (
    "pass --s3_access_key_id and --s3_secret_access_key (and --s3_session_token for temporary ones), or set "
    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the environment; an S3-protocol server also "
    "needs --s3_endpoint_url (docs/s3.md)"
)

_REFUSED_CREDENTIALS = {
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "InvalidToken",
    "ExpiredToken",
    "TokenRefreshRequired",
    "AuthFailure",
    "InvalidClientTokenId",
}
_DENIED = {"AccessDenied", "AllAccessDisabled", "Forbidden", "403"}


def split_s3(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> ("bucket", "a/b")."""
    rest = uri[len("s3://") :]
    bucket, _, key = rest.partition("/")
    return bucket, key


def s3_client(options=None):
    """The boto3 S3 client Beam's S3 filesystem makes from these options (default: the ones
    ``FileSystems.set_options`` was given)."""
    from apache_beam.io.aws.clients.s3.boto3_client import Client
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    if options is None:
        options = FileSystems._pipeline_options or PipelineOptions([])  # noqa: SLF001 - what Beam's calls use
    return Client(options).client


def check_root(root: str, options=None) -> None:
    """Refuse an output root on an object store that this build could not write (one line, exit 4).

    ``s3://`` only; other schemes are checked by their first write."""
    if not root.startswith("s3://"):
        return
    bucket, prefix = split_s3(root.rstrip("/"))
    if not bucket:
        raise UserError(f"the output root {root} names no bucket: pass --output_root s3://<bucket>/<prefix>", 2)
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, PartialCredentialsError

    probe = f"{prefix}/.write-probe-{uuid.uuid4().hex}" if prefix else f".write-probe-{uuid.uuid4().hex}"
    step = "list"
    endpoint = "AWS S3"
    try:
        client = s3_client(options)
        endpoint = client.meta.endpoint_url
        client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/" if prefix else "", MaxKeys=1)
        step = "write"
        client.put_object(Bucket=bucket, Key=probe, Body=b"")
        step = "delete"
        client.delete_object(Bucket=bucket, Key=probe)
    except (NoCredentialsError, PartialCredentialsError) as err:
        raise UserError(
            f"the output root {root} cannot be reached: no S3 credentials ({err}); {CREDENTIALS_FIX}",
            EXIT_NOT_WRITABLE,
        ) from None
    except ClientError as err:
        error = err.response.get("Error", {})
        code = str(error.get("Code", "")) or str(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
        message = _client_error(root, bucket, code, str(error.get("Message") or err), step)
        raise UserError(message, EXIT_NOT_WRITABLE) from None
    except BotoCoreError as err:  # no answer: the endpoint, the network, TLS
        raise UserError(
            f"the output root {root} cannot be reached ({err}): check --s3_endpoint_url (now {endpoint}), "
            f"--s3_region_name, and --s3_verify or --s3_disable_ssl for a server without a public certificate "
            f"(docs/s3.md)",
            EXIT_NOT_WRITABLE,
        ) from None


def _client_error(root: str, bucket: str, code: str, message: str, step: str) -> str:
    if code in ("NoSuchBucket", "404") and step == "list":
        return (
            f"the output root {root} cannot be written: the bucket {bucket!r} does not exist; create it, or pass "
            f"--output_root with an existing bucket (and --s3_endpoint_url if it is on another server; docs/s3.md)"
        )
    if code in _REFUSED_CREDENTIALS:
        return f"the output root {root} cannot be reached: the S3 credentials were refused ({code}); {CREDENTIALS_FIX}"
    if code in _DENIED:
        what = {"list": "list", "write": "write to", "delete": "delete from"}[step]
        return (
            f"the output root {root} cannot be written: these S3 credentials may not {what} it ({code}); a build "
            f"needs s3:ListBucket on the bucket and s3:GetObject, s3:PutObject and s3:DeleteObject under the "
            f"prefix: grant them, or pass credentials that have them ({CREDENTIALS_FIX})"
        )
    return f"the output root {root} cannot be written ({code}: {message}); docs/s3.md"


def check_writable(output_root: str) -> None:
    """Refuse a local output root that cannot be written (before the snapshot job runs).

    Creates the root (as the build would) and writes and removes a probe file
    in it. An ``s3://`` root is listed and a probe object written and deleted
    there (credentials, bucket, permissions: :func:`check_root`);
    other schemes (gs://) are checked by their first write.
    """
    if "://" in output_root:
        check_root(output_root)
        return
    probe = os.path.join(output_root, f".write-probe-{os.getpid()}")
    try:
        os.makedirs(output_root, exist_ok=True)
        with open(probe, "wb") as f:
            f.write(b"")
        os.remove(probe)
    except OSError as err:
        raise UserError(
            f"the output root {output_root} cannot be written ({err.strerror or err}): pass "
            f"--output_root <a folder you can write>",
            EXIT_NOT_WRITABLE,
        ) from None
