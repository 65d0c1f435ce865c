"""Small trials sharing a device (``trial.resources.per_device``), as real sweeps: real trial
processes on one CPU slot or one GPU, their leases in storage.

Each trial holds after its first report until the test releases it, so the test sees every
share running at once (the leases overlap by construction, not by timing). The GPU test runs
where CUDA is (``pytest -m gpu``): one trial asks more than its quarter of the GPU's memory and
fails with out-of-memory while the three others, on the same GPU, complete.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hyperfleet.platform.storage import LeaseRecord, Storage
from hyperfleet.testing.sweeps import minimal_sweep
from hyperfleet.testing.workloads import held_marker
from tests.integration.cli import STORE_POLL_S, cli_env, wait_until


def _shared_sweep(
    sweep_file: Callable[..., Path], tmp_path: Path, devices: str, trial: dict[str, Any],
    held: list[int], ready: Callable[[Storage], bool] = lambda _: True,
) -> tuple[Storage, list[LeaseRecord], subprocess.CompletedProcess[str]]:  # fmt: skip
    """Run a sweep of four trials on ``devices`` with ``per_device: 4``; once the trials in
    ``held`` hold after their first report and ``ready(storage)``, release them; the storage,
    the sweep's leases and how the command ended."""
    release = tmp_path / "release"
    hold = {"hold_file": str(release), "hold_at": 1}
    path = sweep_file(
        minimal_sweep(
            name="shared",
            budget={"trials": 4, "max_concurrent": 4, "max_retries": 0},
            trial=_trial(trial, hold),
        )
    )
    cmd = [sys.executable, "-m", "hyperfleet.platform", "sweep", "run", str(path)]
    proc = subprocess.Popen(
        [*cmd, "--devices", devices], env=cli_env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    storage = Storage(f"sqlite:///{tmp_path / 'runs' / 'hf.db'}", create=False)
    markers = [held_marker(release, n) for n in held]
    wait_until(lambda: all(m.exists() for m in markers), f"trials {held} held at once", proc)
    wait_until(lambda: ready(storage), "the sweep ready to be released", proc, every=STORE_POLL_S)
    release.touch()
    out, err = proc.communicate(timeout=300)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return storage, storage.leases.all("shared"), done


def _trial(changes: dict[str, Any], hold: dict[str, Any]) -> dict[str, Any]:
    """The trial section: one process per trial, four to a device, holding as ``hold``."""
    rest = {k: v for k, v in changes.items() if k != "params"}
    return {
        "steps": 2,
        "resources": {"devices": 1, "per_device": 4},
        "parallel": {"data": 1},
        "params": {**changes.get("params", {}), **hold},
        **rest,
    }


def _overlap(leases: list[LeaseRecord]) -> bool:
    ends = [x.ended_at for x in leases]
    return all(e is not None for e in ends) and max(x.started_at for x in leases) < min(
        e for e in ends if e is not None
    )


@pytest.mark.long  # four trial processes (warm groups) on one slot; the rule is in test_rules
def test_four_trials_share_one_cpu_slot_at_once_and_the_sweep_finishes(
    sweep_file: Callable[..., Path], tmp_path: Path
) -> None:
    storage, leases, done = _shared_sweep(sweep_file, tmp_path, "cpu:1", {}, held=[0, 1, 2, 3])
    assert done.returncode == 0, done.stderr[-3000:]
    assert [t.state for t in storage.trials.of("shared")] == ["COMPLETE"] * 4
    assert sorted((x.share, x.per_device, tuple(x.devices)) for x in leases) == [
        (i, 4, ("cpu:0",)) for i in range(4)
    ]
    assert _overlap(leases), "the four leases of the one slot overlap in time"
    assert {x.state for x in leases} == {"COMPLETE"}


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA device (pytest -m gpu)")
def test_four_trials_share_one_gpu_and_one_that_over_allocates_fails_alone(
    sweep_file: Callable[..., Path], tmp_path: Path
) -> None:
    def greedy_failed(storage: Storage) -> bool:
        first = storage.trials.get("shared", 0)
        return first is not None and first.state == "FAIL"

    trial = {
        "workload": "tests.integration.workloads:memory_share",
        "params": {"alloc": 0.1, "greedy": 0.5, "greedy_trial": 0, "sharers": 4},
    }
    storage, leases, done = _shared_sweep(
        sweep_file, tmp_path, "cuda:0", trial, held=[1, 2, 3], ready=greedy_failed
    )
    assert done.returncode == 0, done.stderr[-3000:]
    trials = {t.number: t for t in storage.trials.of("shared")}
    assert trials[0].state == "FAIL" and "out of memory" in (trials[0].error or "").lower()
    assert [trials[n].state for n in (1, 2, 3)] == ["COMPLETE"] * 3
    assert sorted(x.share for x in leases) == [0, 1, 2, 3]
    assert {(tuple(x.devices), x.per_device) for x in leases} == {(("cuda:0",), 4)}
    assert _overlap(leases), "the greedy trial failed while the others held their shares"
    assert "out of memory" not in "".join(trials[n].error or "" for n in (1, 2, 3))
