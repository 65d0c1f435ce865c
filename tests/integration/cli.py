"""Running the ``hyperfleet`` command as a user would: a real subprocess (``cli``), or, for a
command that starts no process (status, enqueue, validation errors), in this process through
typer's ``CliRunner`` (``invoke``), which saves an interpreter start per call."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from click.testing import Result

ROOT = Path(__file__).resolve().parents[2]


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a CLI run: the repository on PYTHONPATH (tests' custom workloads)."""
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def cli(
    *args: str, timeout: float = 900, cwd: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """``hyperfleet ARGS`` in a subprocess; its exit status, stdout and stderr."""
    return subprocess.run(
        [sys.executable, "-m", "hyperfleet.platform", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
        env=cli_env(**env),
    )


def python_module(
    module: str, *args: str, timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m MODULE ARGS`` in the repository's root (a tool: mypy, mkdocs); its exit
    status, stdout and stderr."""
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)  # fmt: skip


def invoke(*args: str, **env: str) -> Result:
    """``hyperfleet ARGS`` in this process; ``.exit_code``, ``.stdout`` and ``.stderr``."""
    from typer.testing import CliRunner

    from hyperfleet.platform.cli import app

    return CliRunner().invoke(app, list(args), env=env or None)


def wait_until(
    cond: Callable[[], bool],
    what: str,
    proc: subprocess.Popen[str] | None = None,
    timeout: float = 300.0,
    every: float = 0.05,
) -> None:
    """Poll the condition ``cond`` every ``every`` seconds until it holds: a short interval
    for a cheap one (a file), a longer one for a query of a store (:data:`STORE_POLL_S`).

    AssertionError if ``proc`` (a ``sweep run`` in the background) exits first, or after
    ``timeout`` seconds; ``proc`` is killed then, and its stderr tail is in the message.
    """
    deadline = time.monotonic() + timeout
    while not cond():
        ended = proc is not None and proc.poll() is not None
        if ended or time.monotonic() > deadline:
            tail = ""
            if proc is not None:
                if proc.poll() is None:
                    proc.kill()
                tail = "\n" + (proc.communicate()[1] or "")[-3000:]
            why = f"the sweep exited ({proc.returncode})" if ended else f"{timeout:.0f}s passed"
            raise AssertionError(f"{why} before {what}{tail}")
        time.sleep(every)


#: how often a test asks MLflow or the storage for what it waits on: each question costs the
#: store (and the machine the sweep under test shares) more than a file's existence does
STORE_POLL_S = 0.5


def in_mlflow(
    tracking_uri: str, storage: Any, sweep: str, number: int, key: str, step: int
) -> Callable[[], bool]:
    """A condition for ``wait_until``: trial ``number``'s MLflow run holds metric ``key`` at
    ``step``.

    A test that stops a trial waits for this after the trial is held: the trial's metric sink
    has then opened MLflow (an import of seconds on a busy machine, done by a background thread
    the trial joins when it stops), so the trial is in its steady state when it is signalled.
    The run id is read from storage each time: a trial launches with a placeholder id until
    the controller has created its run.
    """
    from mlflow.tracking import MlflowClient

    from hyperfleet.platform.tracking.spool import is_pending

    client = MlflowClient(tracking_uri=tracking_uri)

    def logged() -> bool:
        record = storage.trials.get(sweep, number)
        run_id = None if record is None else record.mlflow_run_id
        if is_pending(run_id):
            return False
        return any(m.step == step for m in client.get_metric_history(run_id, key))

    return logged


def interrupt_when_logged(
    cmd: list[str], env: dict[str, str], runs: Path, sweep: str, held: Path, logged: tuple[str, int]
) -> Any:
    """Start the ``sweep run`` ``cmd`` (its stores under ``runs``) and stop it (SIGTERM) once
    trial 1 is held (``held``, its marker file) and its metric ``logged`` (name, step) is in
    MLflow; it exits 130, as an interrupted run does. The sweep's ``Storage``, open."""
    import signal

    from hyperfleet.platform.storage import Storage

    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    storage = Storage(f"sqlite:///{runs / 'hf.db'}")
    key, step = logged
    wait_until(held.exists, f"trial 1 held after its report at step {step}", proc)
    reached = in_mlflow(f"sqlite:///{runs / 'mlflow.db'}", storage, sweep, 1, key, step)
    wait_until(reached, f"trial 1's step {step} to reach MLflow", proc, every=STORE_POLL_S)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    return storage


def trials_by_number(url: str, sweep: str) -> dict[int, Any]:
    """The sweep's trials in the store at ``url``, by number (read-only)."""
    from hyperfleet.platform.storage import Storage

    st = Storage.open_readonly(url)
    try:
        return {t.number: t for t in st.trials.of(sweep)}
    finally:
        st.close()
