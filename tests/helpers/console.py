"""The console of a command on embedded Flink: what reaches the terminal, and what must not."""
from __future__ import annotations

#: Lines of Beam, its job server (Java, Maven) and gRPC that reached the console.
CHATTER = ("Really destroying service", "Matching Continuously is stateful", "Waiting for grpc channel",
           "\x1b[", "apache_beam", "org.apache", "INFO", "WARNING:", "Traceback", "grpc", "Worker: ", "[main]",
           "downloading dependencies")


def assert_quiet_console(result) -> None:
    """No line of Beam, the job server or gRPC on the console of a finished command, nothing on stderr."""
    console = result.stdout + result.stderr
    for chatter in CHATTER:
        assert chatter not in console, f"{chatter!r} on the console:\n{console[-3000:]}"
    assert result.stderr == "", result.stderr[-3000:]
