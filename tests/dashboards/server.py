"""``hyperfleet dashboard`` as a subprocess on a free port, for the tests that need a real
Streamlit server: its output goes to a log file; it is up once Streamlit prints its URL (which
it does once it listens). A port another process took first costs another try
(:func:`hyperfleet.platform.services.ports.start_on_free_port`); a server that does not start
raises with its log's last lines."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from hyperfleet.platform.services.ports import log_size, log_tail, log_text, start_on_free_port
from tests.integration.cli import cli_env

START_TIMEOUT_S = 120.0


@dataclass
class Dashboard:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return log_text(self.log)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def start_at(args: list[str], cwd: Path, log: Path, port: int) -> Dashboard:
    """``hyperfleet dashboard *args --port port``, once it serves; RuntimeError with the log's
    last lines if it exits or does not print its URL within ``START_TIMEOUT_S``."""
    since = log_size(log)
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "hyperfleet.platform", "dashboard", *args,
                                 "--port", str(port)], cwd=cwd, env=cli_env(), stdout=out,
                                stderr=subprocess.STDOUT)  # fmt: skip
    deadline = time.monotonic() + START_TIMEOUT_S
    while f"URL: http://127.0.0.1:{port}" not in log_text(log, since):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait(timeout=30)
            raise RuntimeError(f"dashboard did not start on port {port}: {log_tail(log, 5, since)}")
        time.sleep(0.2)  # polling readiness, bounded by the deadline
    return Dashboard(proc, port, log)


def start(args: list[str], cwd: Path, log: Path) -> Dashboard:
    """The dashboard on a free port (see the module docstring)."""
    return start_on_free_port(lambda port: start_at(args, cwd, log, port), log)
