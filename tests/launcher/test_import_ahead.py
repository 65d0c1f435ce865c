"""A ready worker or rank imports what a trial's first optimizer needs on a thread of its own
(``import_ahead``); a fork waits for that thread, so the child has the module and no lock held
by a thread it does not have. In-process workers get it from their fork server."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hyperfleet.platform.launcher.trial_process import IMPORT_AHEAD, IMPORT_AHEAD_ENV, import_ahead
from hyperfleet.platform.storage import Storage
from tests.integration.cli import cli

#: small standard-library modules the test process has not imported (checked below)
MODULES = ("tabnanny", "this")


def test_the_default_is_what_torch_optim_imports_first(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "torch._dynamo" in IMPORT_AHEAD
    monkeypatch.setenv(IMPORT_AHEAD_ENV, "")
    assert import_ahead() is None


def test_imports_on_a_thread_and_a_fork_waits_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not set(MODULES) & set(sys.modules)
    monkeypatch.setenv(IMPORT_AHEAD_ENV, ",".join(MODULES))
    thread = import_ahead()
    assert thread is not None and thread.daemon
    pid = os.fork()  # the registered before-fork handler joins the thread
    if pid == 0:
        os._exit(0 if set(MODULES) <= set(sys.modules) else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not thread.is_alive() and set(MODULES) <= set(sys.modules)
    for name in MODULES:  # leave the test process as it was
        sys.modules.pop(name, None)


def test_a_fork_waits_for_every_import_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two calls (two threads), one handler registered when the module loaded, none per call
    (a process that imports ahead again does not pile up handlers): a fork waits for both."""
    first, second = MODULES[:1], MODULES[1:]
    assert first and second and not set(MODULES) & set(sys.modules)
    registered: list[Any] = []
    monkeypatch.setattr(os, "register_at_fork", lambda **kw: registered.append(kw))
    threads = []
    for names in (first, second):
        monkeypatch.setenv(IMPORT_AHEAD_ENV, ",".join(names))
        threads.append(import_ahead())
    pid = os.fork()
    if pid == 0:
        os._exit(0 if set(MODULES) <= set(sys.modules) else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert all(t is not None and not t.is_alive() for t in threads)
    assert registered == [], "no fork handler registered per call"
    for name in MODULES:
        sys.modules.pop(name, None)


@pytest.mark.slow
def test_inprocess_workers_share_the_fork_servers_import(
    sweep_file: Callable[..., Path], tmp_path: Path
) -> None:
    """The fork server imports what workers would import ahead, once: a worker's trial finds
    the module there before its first optimizer, imported by the server, not by itself."""
    path = sweep_file({
        "name": "ahead",
        "objective": {"metric": "loss", "mode": "min"},
        "budget": {"trials": 2, "max_concurrent": 2},
        "trial": {"workload": "tests.launcher.workloads:imported_here", "steps": 1,
                  "eval_every": 1, "resources": {"devices": 0}, "parallel": {"data": 1}},
    })  # fmt: skip
    ahead = {IMPORT_AHEAD_ENV: "tests.launcher.ahead_probe"}
    proc = cli("sweep", "run", str(path), "--json", "--devices", "cpu:2", **ahead)
    assert proc.returncode == 0, proc.stderr[-2000:]
    trials = Storage(f"sqlite:///{tmp_path / 'runs' / 'hf.db'}").trials.of("ahead")
    assert [t.metrics["loss"] for t in trials] == [0.0, 0.0]
