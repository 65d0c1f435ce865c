"""``sweep run`` starts a new sweep's first trials' processes right after reading its file:
what that needs imports none of the stores' libraries, only a sweep new to its storage gets
them that early, and a refusal after that stops them at once, leaving nothing behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.launcher.launchers import prestarted
from hyperfleet.testing.sweeps import minimal_sweep
from tests.integration.cli import invoke

#: what opening a sweep's stores imports (seconds of CPU), and torch (the trials')
STORE_LIBRARIES = ("sqlalchemy", "optuna", "mlflow", "alembic", "torch")


def test_reading_a_sweep_and_starting_its_processes_imports_no_store_library() -> None:
    code = (
        "import sys\n"
        "import hyperfleet.platform.config, hyperfleet.platform.launcher.launchers\n"
        "import hyperfleet.platform.launcher.warm, hyperfleet.platform.pool\n"
        f"print(sorted(m for m in {STORE_LIBRARIES!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _warm_sweep(tmp_path: Path, storage: str) -> object:
    return parse_sweep(minimal_sweep(
        trial={"resources": {"devices": 1}}, storage=storage, workdir=str(tmp_path / "runs"),
    ))  # fmt: skip


@pytest.mark.slow
def test_only_a_sweep_new_to_its_storage_starts_its_processes_that_early(tmp_path: Path) -> None:
    db = tmp_path / "hf.db"
    cfg = _warm_sweep(tmp_path, f"sqlite:///{db}")
    launchers = prestarted(cfg, "cpu:2", f"sqlite:///{db}")  # type: ignore[arg-type]
    assert launchers is not None
    try:
        groups = launchers._warm.groups
        assert len(groups) == 2 and all(g.alive for g in groups)  # one per first trial
    finally:
        launchers.abandon()
    assert not any(g.alive for g in groups) and not launchers._warm
    db.touch()  # a stored sweep may have run its budget: the runner decides, after opening it
    assert prestarted(cfg, "cpu:2", f"sqlite:///{db}") is None  # type: ignore[arg-type]
    inprocess = parse_sweep(minimal_sweep(storage=f"sqlite:///{tmp_path / 'new.db'}"))
    assert prestarted(inprocess, "cpu:2", f"sqlite:///{tmp_path / 'new.db'}") is None


@pytest.mark.slow
def test_a_refusal_after_the_early_start_leaves_no_process(tmp_path: Path) -> None:
    """A bad ``HYPERFLEET_MLFLOW_WAIT_S`` is found after the processes started: one line,
    exit 2, no folder, and no process of the launch left (they carry its tag)."""
    runs = tmp_path / "runs"
    data = minimal_sweep(trial={"resources": {"devices": 1}}, workdir=str(runs),
                         storage=f"sqlite:///{runs / 'hf.db'}")  # fmt: skip
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    before = _hyperfleet_launches()
    result = invoke("sweep", "run", str(path), "--devices", "cpu:2",
                    HYPERFLEET_MLFLOW_WAIT_S="never")  # fmt: skip
    assert result.exit_code == 2, result.output
    assert [line for line in result.stderr.splitlines() if line.strip()] == [
        "error: HYPERFLEET_MLFLOW_WAIT_S: expected a number of seconds above 0, got 'never'; "
        "unset it for the default (120)"
    ]
    assert not runs.exists()
    assert _hyperfleet_launches() == before


def _hyperfleet_launches() -> set[int]:
    """This test process's children that carry a launch tag (``HYPERFLEET_LAUNCH``): a warm
    group's agent or single rank is one."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            env = (entry / "environ").read_bytes() if ppid == os.getpid() else b""
        except (OSError, ValueError, IndexError):
            continue
        if b"HYPERFLEET_LAUNCH=" in env:
            found.add(int(entry.name))
    return found
