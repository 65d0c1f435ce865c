"""A relaunch of a trial ends an older copy of it still alive on this host (left by a controller
that died); a trial's first attempt has none, and its launch leaves every process alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hyperfleet.platform.launcher.procs import TRIAL_VAR, end_older_copies, tag_launch, trial_tag
from hyperfleet.spec.trial import TrialConfig
from hyperfleet.spec.wire import TrialSpec


def _spec(tmp_path: Path, attempt: int) -> TrialSpec:
    return TrialSpec(
        sweep="s", number=3, trial=TrialConfig(workload="quadratic"), params={},
        workdir=str(tmp_path), trial_dir=str(tmp_path / "trial-0003"),
        storage=f"sqlite:///{tmp_path / 'hf.db'}", attempt=attempt,
    )  # fmt: skip


@pytest.fixture
def older_copy(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A process tagged as trial 3's copy, as a launch by a dead controller left it."""
    spec = _spec(tmp_path, 1)
    env = {**os.environ, TRIAL_VAR: trial_tag(spec.storage, spec.sweep, spec.number)}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env)
    yield proc
    proc.kill()
    proc.wait()


def test_a_relaunch_ends_the_older_copy(tmp_path: Path, older_copy: subprocess.Popen) -> None:
    tags = tag_launch(_spec(tmp_path, 2))
    assert older_copy.wait(timeout=30) != 0, "the older copy was left running"
    assert tags[TRIAL_VAR] == trial_tag(f"sqlite:///{tmp_path / 'hf.db'}", "s", 3)


def test_a_first_attempt_leaves_every_process_alone(
    tmp_path: Path, older_copy: subprocess.Popen
) -> None:
    """No launch of the trial came before its first attempt: a process carrying its tag is
    none of its copies (the scan of every process is skipped)."""
    assert end_older_copies(_spec(tmp_path, 1)) == []
    assert older_copy.poll() is None
