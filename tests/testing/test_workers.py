"""``hyperfleet.testing.workers`` starts a real worker with the flags it is given, and
``running_worker`` stops it as an operator does: the worker deregisters (state ``stopped``)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from hyperfleet.platform.storage import Storage
from hyperfleet.testing.workers import running_worker, worker_command
from tests.integration.cli import STORE_POLL_S, cli_env


def test_the_command_carries_the_flags_given() -> None:
    cmd = worker_command("sqlite:///x.db", "--max-trials", "3", devices="cpu:2",
                         heartbeat="1s", verbose=False, prefix=["nice"])  # fmt: skip
    assert cmd == ["nice", sys.executable, "-m", "hyperfleet.platform", "worker", "--storage",
                   "sqlite:///x.db", "--devices", "cpu:2", "--heartbeat", "1s",
                   "--max-trials", "3"]  # fmt: skip
    assert worker_command("u")[3] == "-v"


def test_a_running_worker_registers_and_is_stopped_on_exit(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hf.db'}"
    log = tmp_path / "worker.log"
    cmd = worker_command(url, devices="cpu:1", heartbeat="1s")
    with running_worker(cmd, log=log, cwd=tmp_path, env=cli_env()) as proc:
        end = time.monotonic() + 120
        while not (tmp_path / "hf.db").exists() or not _workers(url):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < end, f"no worker registered:\n{log.read_text()}"
            time.sleep(STORE_POLL_S)
    assert proc.returncode == 130, log.read_text()  # stopped by a signal, as the CLI says
    assert [w.state for w in _workers(url)] == ["stopped"], log.read_text()


def _workers(url: str) -> list[Any]:
    st = Storage.open_readonly(url)
    try:
        return list(st.workers.all())
    finally:
        st.close()
