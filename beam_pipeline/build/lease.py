"""One build per output root at a time: the root's lease.

A build takes ``<root>/_BUILD_LEASE.json`` before it does anything else (before
the snapshot), renews it from a heartbeat thread while it runs and deletes it
when it ends, however it ends. A second build on the same root finds the lease
and refuses with one line naming the holder (host, pid, start time), exit
:data:`~beam_pipeline.errors.EXIT_BUSY`; with ``--wait_for_lease SECONDS`` it
waits that long for the lease to be released first.

A build that died without releasing it (killed, its machine lost) leaves a
*stale* lease: one not renewed for :data:`TIMEOUT_SECONDS`, or, on the same
host, one whose process no longer exists. The next build takes a stale lease
over (and says so); its layers are reused as after any interrupted build.

The lease is taken atomically:

* local (and mounted) filesystems: created with ``O_CREAT | O_EXCL``; a
  renewal, a takeover and the release compare and write under ``flock`` on the
  root folder, so two builds that both find a stale lease cannot both take it;
* ``s3://``: a conditional create (``PutObject`` with ``If-None-Match: *``);
  renewals and takeovers are ``PutObject`` with ``If-Match: <ETag>`` of the
  lease they read, so only one of two contenders succeeds; the release reads
  the lease and deletes it only if it is still this build's;
* other schemes (``gs://``, ``hdfs://``): Beam's filesystem, check then write
  then read back: two builds started in the same second can both pass. Use
  one scheduler per root there.

The lease lives outside ``layers/`` and ``datasets/`` and is gone after the
build: it never changes a layer, a dataset or its id.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import json
import os
import socket
import threading
import time
import uuid
from typing import Callable

from beam_pipeline.errors import EXIT_BUSY, UserError

LEASE = "_BUILD_LEASE.json"
#: A lease not renewed for this long is stale: its build is taken to be gone.
TIMEOUT_SECONDS = 120.0
#: How often the heartbeat renews the lease (well inside the timeout).
RENEW_SECONDS = 20.0
#: How often a build told to wait (``--wait_for_lease``) looks at the lease again.
POLL_SECONDS = 2.0


class LeaseHeld(UserError):
    """Another build holds the root's lease (the message names it, and what to do); exit 75."""

    exit_code = EXIT_BUSY


#: The leases this process holds (released on Ctrl-C before the process ends: :func:`release_all`).
_HELD: list[Lease] = []


def release_all() -> None:
    """Release every lease this process holds (Ctrl-C: the process ends without unwinding)."""
    for lease in list(_HELD):
        lease.release()


@dataclasses.dataclass
class Holder:
    """What a lease says about the build holding it."""

    token: str
    host: str
    pid: int
    started: str  # ISO-8601 UTC
    renewed: float  # seconds since the epoch, when the holder last renewed it
    timeout: float

    @classmethod
    def new(cls, timeout: float) -> Holder:
        now = time.time()
        return cls(uuid.uuid4().hex, socket.gethostname(), os.getpid(), _iso(now), now, timeout)

    @classmethod
    def parse(cls, data: bytes) -> Holder | None:
        try:
            value = json.loads(data)
            return cls(
                str(value["token"]),
                str(value["host"]),
                int(value["pid"]),
                str(value["started"]),
                float(value["renewed"]),
                float(value.get("timeout", TIMEOUT_SECONDS)),
            )
        except (ValueError, KeyError, TypeError):
            return None  # half-written or foreign: judged by its age (see Lease._stale)

    def encode(self) -> bytes:
        return (json.dumps(dataclasses.asdict(self), sort_keys=True, indent=1) + "\n").encode()

    def describe(self) -> str:
        return f"host {self.host}, pid {self.pid}, started {self.started}"


def _iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- stores: create if absent, compare and replace, compare and delete -----------------------------------


class _LocalStore:
    """A lease file on a local or mounted filesystem; ``version`` is the file's bytes."""

    def __init__(self, root: str):
        self.root = root
        self.path = os.path.join(root, LEASE)

    def create(self, data: bytes) -> object:
        os.makedirs(self.root, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return None
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return data

    def read(self) -> tuple[bytes, object, float] | None:
        """(bytes, version, age in seconds by the file's time) or None."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
                age = time.time() - os.fstat(f.fileno()).st_mtime
        except FileNotFoundError:
            return None
        return data, data, age

    @contextlib.contextmanager
    def _locked(self):
        fd = os.open(self.root, os.O_RDONLY)
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def replace(self, data: bytes, version: object) -> object:
        with self._locked():
            current = self.read()
            if current is None or current[1] != version:
                return None
            temporary = f"{self.path}.tmp-{uuid.uuid4().hex}"
            with open(temporary, "wb") as f:
                f.write(data)
            os.replace(temporary, self.path)
            return data

    def delete(self, version: object) -> bool:
        with self._locked():
            current = self.read()
            if current is None or current[1] != version:
                return False
            os.remove(self.path)
            return True


class _S3Store:
    """A lease object on S3: conditional writes (``If-None-Match: *``, ``If-Match: <ETag>``)."""

    def __init__(self, root: str, options):
        from beam_pipeline.storage.object_store import s3_client, split_s3

        self.uri = f"{root.rstrip('/')}/{LEASE}"
        self.bucket, self.key = split_s3(self.uri)
        self.client = s3_client(options)

    def _put(self, data: bytes, **condition) -> object:
        from botocore.exceptions import ClientError

        try:
            response = self.client.put_object(Bucket=self.bucket, Key=self.key, Body=data, **condition)
        except ClientError as err:
            if _code(err) in ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey", "412", "409"):
                return None
            raise
        return response["ETag"]

    def create(self, data: bytes) -> object:
        return self._put(data, IfNoneMatch="*")

    def read(self) -> tuple[bytes, object, float] | None:
        from botocore.exceptions import ClientError

        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self.key)
        except ClientError as err:
            if _code(err) in ("NoSuchKey", "404"):
                return None
            raise
        age = time.time() - response["LastModified"].timestamp()
        return response["Body"].read(), response["ETag"], age

    def replace(self, data: bytes, version: object) -> object:
        return self._put(data, IfMatch=str(version))

    def delete(self, version: object) -> bool:
        current = self.read()
        if current is None or current[1] != version:
            return False
        self.client.delete_object(Bucket=self.bucket, Key=self.key)
        return True


def _code(err) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


class _BeamStore:
    """Any other Beam filesystem (gs://, hdfs://): check, write, read back (not atomic; see the module doc)."""

    def __init__(self, root: str):
        from beam_pipeline.storage.layers import join

        self.path = join(root, LEASE)

    def create(self, data: bytes) -> object:
        from beam_pipeline.storage.layers import read_bytes, write_bytes_atomic

        if self.read() is not None:
            return None
        write_bytes_atomic(self.path, data)
        return data if read_bytes(self.path) == data else None

    def read(self) -> tuple[bytes, object, float] | None:
        from apache_beam.io.filesystems import FileSystems

        from beam_pipeline.storage.layers import read_bytes

        if not FileSystems.exists(self.path):
            return None
        data = read_bytes(self.path)
        try:
            age = time.time() - FileSystems.match([self.path])[0].metadata_list[0].last_updated_in_seconds
        except Exception:  # noqa: BLE001 - a store without modification times: judged by the lease's own time
            age = 0.0
        return data, data, age

    def replace(self, data: bytes, version: object) -> object:
        from beam_pipeline.storage.layers import write_bytes_atomic

        current = self.read()
        if current is None or current[1] != version:
            return None
        write_bytes_atomic(self.path, data)
        return data

    def delete(self, version: object) -> bool:
        from apache_beam.io.filesystems import FileSystems

        current = self.read()
        if current is None or current[1] != version:
            return False
        FileSystems.delete([self.path])
        return True


def _store(root: str, options):
    if root.startswith("s3://"):
        return _S3Store(root, options)
    if "://" in root:
        return _BeamStore(root)
    return _LocalStore(root)


# --- the lease ------------------------------------------------------------------------------------------


class Lease:
    """The build's hold on an output root: :meth:`acquire`, renewed by a thread, :meth:`release`.

    Use as a context manager. ``wait``: seconds to wait for another build's lease
    to be released (0: refuse at once). ``log``: where a takeover and a lost lease
    are reported."""

    def __init__(
        self,
        root: str,
        options=None,
        *,
        wait: float = 0.0,
        timeout: float = TIMEOUT_SECONDS,
        renew_every: float = RENEW_SECONDS,
        log: Callable[[str], None] = print,
    ):
        self.root = root
        self.location = root.rstrip("/") + "/" + LEASE if "://" in root else os.path.join(root, LEASE)
        self.wait = wait
        self.timeout = timeout
        self.renew_every = renew_every
        self.log = log
        self._store = _store(root, options)
        self.holder = Holder.new(timeout)
        self._version: object = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost = False

    def __enter__(self) -> Lease:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def acquire(self) -> None:
        """Take the lease (or a stale one over); raise :class:`LeaseHeld` if another build holds it."""
        deadline = time.monotonic() + max(self.wait, 0.0)
        waiting = False
        while True:
            other = self._try_take()
            if other is None:
                break
            if time.monotonic() >= deadline:
                raise LeaseHeld(self._held_message(other))
            if not waiting:
                waiting = True
                self.log(
                    f"[lease] another build holds {self.root} ({other.describe()}): waiting up to {self.wait:.0f}s"
                )
            time.sleep(min(POLL_SECONDS, max(deadline - time.monotonic(), 0.05)))
        _HELD.append(self)
        self._thread = threading.Thread(target=self._heartbeat, name="beam_pipeline-lease", daemon=True)
        self._thread.start()

    def _try_take(self) -> Holder | None:
        """None when this build holds the lease now; else the holder that keeps it."""
        data = self.holder.encode()
        for _ in range(3):  # a lease released between our create and our read: try again
            self._version = self._store.create(data)
            if self._version is not None:
                return None
            current = self._store.read()
            if current is None:
                continue
            raw, version, age = current
            other = Holder.parse(raw)
            reason = self._stale(other, age)
            if reason is None:
                return other or _unknown(age, self.timeout)
            self._version = self._store.replace(data, version)
            if self._version is None:
                continue  # another build took it over first: look again
            was = other.describe() if other else "unreadable"
            self.log(f"[lease] took over the stale lease of an earlier build ({was}: {reason}); {self.location}")
            return None
        current = self._store.read()
        return (Holder.parse(current[0]) if current else None) or _unknown(0.0, self.timeout)

    def _stale(self, other: Holder | None, age: float) -> str | None:
        """Why the lease is stale (None: it is not). ``age``: seconds since the store last saw it written."""
        if other is None:
            return f"unreadable and {age:.0f}s old" if age > self.timeout else None
        silent = min(age, time.time() - other.renewed)
        if silent > other.timeout:
            return f"not renewed for {silent:.0f}s"
        if other.host == socket.gethostname() and other.pid != os.getpid() and not _alive(other.pid):
            return f"process {other.pid} is gone"
        return None

    def _held_message(self, other: Holder) -> str:
        silent = max(0.0, time.time() - other.renewed)
        return (
            f"another build is running on the output root {self.root} ({other.describe()}; lease renewed "
            f"{silent:.0f}s ago): wait for it to finish, or pass --wait_for_lease SECONDS to wait; if that "
            f"build is gone, its lease ({self.location}) is taken over {other.timeout:.0f}s after its last "
            f"renewal (at once on its own host)"
        )

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.renew_every):
            try:
                self.holder.renewed = time.time()
                version = self._store.replace(self.holder.encode(), self._version)
                if version is not None:
                    self._version = version
                    continue
                self.lost = True
                self.log(
                    f"[lease] WARNING: the lease {self.location} was taken by another build (this one was "
                    f"silent for more than {self.timeout:.0f}s); two builds may now write this root"
                )
                return
            except Exception as err:  # noqa: BLE001 - a store that did not answer: try again next beat
                self.log(f"[lease] WARNING: could not renew {self.location}: {err}")

    def release(self) -> None:
        """Stop renewing and delete the lease if it is still this build's."""
        self._stop.set()
        if self in _HELD:
            _HELD.remove(self)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
            self._thread = None
        if self._version is None or self.lost:
            return
        try:
            self._store.delete(self._version)
        except Exception as err:  # noqa: BLE001 - the build's outcome stands; the lease goes stale
            self.log(f"[lease] WARNING: could not release {self.location}: {err}")
        self._version = None


def _unknown(age: float, timeout: float) -> Holder:
    return Holder("?", "unknown host", 0, "unknown", time.time() - age, timeout)


def _alive(pid: int) -> bool:
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except OSError as err:
        return err.errno == errno.EPERM
    try:  # a process that ended and waits to be reaped (Linux) is gone too
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X")
    except OSError:
        return True
