"""A ready worker or rank imports what a trial's first optimizer needs on a thread of its own
(``import_ahead``); a fork waits for that thread, so the child has the module and no lock held
by a thread it does not have."""

from __future__ import annotations

import os
import sys

import pytest

from hyperfleet.platform.launcher.trial_process import IMPORT_AHEAD, IMPORT_AHEAD_ENV, import_ahead

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
