"""What a build's console shows, and where Beam's own log lines go.

By default the console (stdout, stderr) carries the stage lines, the progress
display (:mod:`beam_pipeline.build.progress`) and the warnings about the user's data
(dead letters, rules that could not judge documents, the project's own
``beam_pipeline.*`` warnings). Every log record of the process (Apache Beam's
runner and job service, and the SDK workers' records the local job service
relays as ``Worker: ...``) goes to ``<run folder>/beam.log``, the run folder
being ``runs/<run_id>/`` (or ``runs/<run_id>/rerun-N/``, ``beam_pipeline/storage/runs.py``);
``--verbose`` puts them on stderr too.

The run folder is known only once the snapshot is taken (the run id is a digest
of it), so the records before that are kept in memory and written first. A run
folder on remote storage (``s3://``, ``gs://``) gets the log when the command
ends; the lines are written to a local temporary file until then.

The progress display is a bar redrawn in place (``\\r``) when stdout is a
terminal, and a plain line every ``--progress_interval`` seconds when it is not
(a pipe, a file, CI logs).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import threading

#: The log file of a run, in its run folder.
LOG_FILE = "beam.log"
#: Loggers whose warnings are the project's own and always reach the console.
PROJECT_LOGGER = "beam_pipeline"
#: Whether this command was given ``--verbose`` (tracebacks; Beam's log lines on the console too); set by
#: the command line, read by every command that opens a :class:`Console`.
VERBOSE: list = [False]
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class RunLogHandler(logging.Handler):
    """Writes every record to the run folder's ``beam.log``, keeping them in memory until the folder is
    known (:meth:`open`)."""

    #: Records kept in memory until the run folder is known.
    BUFFERED = 100_000

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter(FORMAT))
        self.path: str | None = None  # where the log ends up (local path or URI)
        self._buffer: list[str] = []
        self._file = None
        self._local: str | None = None  # the local file written (the log itself, or a temporary copy)
        self.write_error: BaseException | None = None  # the write that ended the log file (a full disk)
        self.lost = 0  # records not written (after write_error, or beyond BUFFERED before the folder is known)

    def open(self, run_dir: str) -> None:
        from beam_pipeline.storage.layers import join

        self.acquire()
        try:
            if self._file is not None:
                return
            self.path = join(run_dir, LOG_FILE)
            if "://" in run_dir:
                handle, self._local = tempfile.mkstemp(prefix="beam-", suffix=".log")
                os.close(handle)
            else:
                os.makedirs(run_dir, exist_ok=True)
                self._local = self.path
            buffered, self._buffer = self._buffer, []
            try:
                self._file = open(self._local, "a", encoding="utf-8")
                self._file.writelines(buffered)
                self._file.flush()
            except OSError as err:  # a full disk: the build reports it (its own writes fail too)
                self.lost += len(buffered)
                if self._file is not None:
                    self._failed(err)
                else:
                    self.write_error = err
        finally:
            self.release()

    def emit(self, record: logging.LogRecord) -> None:
        """Never raises: a record is logged from any thread of the job (the local job service relays the
        workers' records from a gRPC stream that a raising handler would end, and the job would wait
        for it forever: seen with a full disk). A write that fails (``ENOSPC``) ends the log file: the
        records after it are counted (:attr:`lost`), not written, and the first error is kept
        (:attr:`write_error`)."""
        try:
            line = self.format(record) + "\n"
        except Exception:  # noqa: BLE001 - a record that cannot be formatted must not stop the build
            return
        if self.write_error is not None:
            self.lost += 1
        elif self._file is None:
            if len(self._buffer) < self.BUFFERED:
                self._buffer.append(line)
            else:
                self.lost += 1
        else:
            try:
                self._file.write(line)
                self._file.flush()
            except Exception as err:  # noqa: BLE001 - a full or failing disk must not stop the build here
                self._failed(err)

    def _failed(self, err: BaseException) -> None:
        self.write_error = err
        self.lost += 1
        file, self._file = self._file, None
        try:
            file.close()
        except Exception:  # noqa: BLE001 - its buffer cannot be written either
            pass

    def close(self) -> None:
        self.acquire()
        try:
            if self._file is not None:
                try:
                    self._file.close()
                except OSError as err:
                    self.write_error = err
                if self._local is not None and self._local != self.path:  # a remote run folder: copy the log there
                    try:
                        from apache_beam.io.filesystems import FileSystems

                        with open(self._local, "rb") as source, FileSystems.create(self.path) as target:
                            shutil.copyfileobj(source, target)
                    finally:
                        os.remove(self._local)
                self._file = None
        finally:
            self.release()
        super().close()


class ConsoleFilter(logging.Filter):
    """Lets through the project's warnings (``beam_pipeline.*``, WARNING and above); with ``verbose``,
    every record."""

    def __init__(self, verbose: bool):
        super().__init__()
        self.verbose = verbose

    def filter(self, record: logging.LogRecord) -> bool:
        if self.verbose:
            return True
        return record.levelno >= logging.WARNING and (
            record.name == PROJECT_LOGGER or record.name.startswith(PROJECT_LOGGER + ".")
        )


#: The SDK harness module that prints a failed bundle's traceback on stderr (and logs it too).
SDK_WORKER_MODULE = "apache_beam.runners.worker.sdk_worker"


def _worker_print(*values, sep=" ", end="\n", file=None, flush=False) -> None:
    """``print`` for the SDK harness: what it prints on stderr (a failed bundle's traceback, which it
    also logs at ERROR, "Error processing instruction ...") goes to the log at DEBUG instead."""
    if file is None or file is sys.stdout:
        print(*values, sep=sep, end=end, file=file, flush=flush)
        return
    logging.getLogger(SDK_WORKER_MODULE).debug("%s", sep.join(str(value) for value in values))


def quiet_worker_tracebacks(on: bool = True) -> None:
    """Keep the SDK harness's tracebacks of failed bundles off stderr (``on=False``: put them back).

    Beam's ``sdk_worker`` prints every failed instruction's traceback on the process's stderr before it
    logs it: a worker process of the local runner inherits the console's stderr, and a worker in the
    driver's process (``in_memory``, Flink's ``LOOPBACK``) is the console: 60-200 lines before the
    build's one ``error:`` block. The logged copy reaches ``beam.log`` (relayed by the job service for a
    worker process); ``--verbose`` shows it. Called by the :class:`Console` (the driver) and at this
    package's import in SDK worker processes (``beam_pipeline/__init__.py``)."""
    module = sys.modules.get(SDK_WORKER_MODULE)
    if module is None:
        if not on:
            return
        import importlib

        module = importlib.import_module(SDK_WORKER_MODULE)
    if on:
        vars(module)["print"] = _worker_print  # the module's globals come before the builtins
    elif vars(module).get("print") is _worker_print:
        del vars(module)["print"]


#: Filters the handlers a :class:`Console` gives back (Beam's ``logging.basicConfig()`` one, on stderr):
#: what Beam logs after the command, while the process exits (the Flink job server it stops then, "Really
#: destroying service ..."), reaches the console only with ``--verbose``, as during the command.
_AFTER_COMMAND = ConsoleFilter(verbose=False)


def _on_console(handler: logging.Handler) -> bool:
    """Whether a handler writes to the process's stderr or stdout (not a file, not a test's capture)."""
    stream = getattr(handler, "stream", None)
    return (
        isinstance(handler, logging.StreamHandler)
        and stream is not None
        and (stream in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__))
    )


def is_worker_hangup(exc: BaseException | None) -> bool:
    """A gRPC stream the runner cancelled: how an SDK worker's threads end when Flink releases the
    worker's environment at the end of a task ("Multiplexer hanging up"); nothing is lost."""
    try:
        import grpc
    except ImportError:  # pragma: no cover - grpc comes with apache-beam
        return False
    if not isinstance(exc, grpc.RpcError):
        return False
    code = getattr(exc, "code", None)
    return callable(code) and code() == grpc.StatusCode.CANCELLED


class Console:
    """The console of one command: log routing (:meth:`install`), stage lines (:meth:`line`) and the
    terminal's progress bar (:meth:`show`, :meth:`clear`)."""

    def __init__(self, verbose: bool = False, stream=None, tty: bool | None = None):
        self.verbose = verbose
        self.stream = stream if stream is not None else sys.stdout
        self.tty = self.stream.isatty() if tty is None else tty
        self.run_log = RunLogHandler()
        self._console_handler: logging.Handler | None = None
        self._saved: tuple | None = None
        self._bar_width = 0
        self._lock = threading.Lock()
        self._saved_excepthook = threading.excepthook

    # --- log routing --------------------------------------------------------------------------

    def install(self) -> "Console":
        """Route every log record to the run log; the project's warnings (or, verbose, all) to stderr."""
        root = logging.getLogger()
        self._saved = (list(root.handlers), root.level)
        for handler in list(root.handlers):
            root.removeHandler(handler)
        console = logging.StreamHandler(sys.stderr)
        console.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
        console.addFilter(ConsoleFilter(self.verbose))
        self._console_handler = console
        root.addHandler(self.run_log)
        root.addHandler(console)
        root.setLevel(logging.INFO)
        self._saved_excepthook = threading.excepthook
        threading.excepthook = self._thread_exception
        if not self.verbose:
            quiet_worker_tracebacks()
        return self

    def _thread_exception(self, args) -> None:
        """A thread's uncaught exception: a worker hang-up (:func:`is_worker_hangup`) goes to the run
        log only, anything else to the hook that was there before (a traceback on stderr)."""
        if is_worker_hangup(args.exc_value):
            logging.getLogger("apache_beam.runners.worker").info(
                "SDK worker thread %s ended: the runner closed its stream (%s)",
                getattr(args.thread, "name", "?"),
                args.exc_value.details() if hasattr(args.exc_value, "details") else args.exc_value,
            )
            return
        self._saved_excepthook(args)

    def open_log(self, run_dir: str) -> None:
        """The run folder is known: the run log goes to ``<run_dir>/beam.log`` from now on."""
        self.run_log.open(run_dir)

    def uninstall(self) -> None:
        root = logging.getLogger()
        for handler in (self.run_log, self._console_handler):
            if handler is not None:
                root.removeHandler(handler)
                handler.close()
        if self._saved is not None:
            handlers, level = self._saved
            _AFTER_COMMAND.verbose = self.verbose
            for handler in handlers:
                root.addHandler(handler)
                if _on_console(handler) and _AFTER_COMMAND not in handler.filters:  # the job server stopped at exit
                    handler.addFilter(_AFTER_COMMAND)
            root.setLevel(level)
            self._saved = None
            threading.excepthook = self._saved_excepthook
            quiet_worker_tracebacks(on=False)

    def __enter__(self):
        return self.install()

    def __exit__(self, *_):
        self.uninstall()
        return False

    # --- lines and the bar --------------------------------------------------------------------

    def line(self, text: str) -> None:
        """A stage line (the bar, if shown, is cleared first and redrawn by the next refresh)."""
        with self._lock:
            self._clear()
            print(text, file=self.stream, flush=True)

    def show(self, text: str) -> None:
        """Redraw the terminal's progress bar (one line, ``\\r``, cut to the terminal's width)."""
        columns = shutil.get_terminal_size((100, 20)).columns - 1
        text = text[:columns]
        with self._lock:
            self.stream.write("\r" + text + " " * max(0, self._bar_width - len(text)))
            self.stream.flush()
            self._bar_width = len(text)

    def clear(self) -> None:
        with self._lock:
            self._clear()

    def _clear(self) -> None:
        if self._bar_width:
            self.stream.write("\r" + " " * self._bar_width + "\r")
            self.stream.flush()
            self._bar_width = 0

    @property
    def bar(self):
        """What :class:`beam_pipeline.build.progress.BuildProgress` draws its bar on: this console on a
        terminal, None (plain progress lines) otherwise."""
        return self if self.tty else None
