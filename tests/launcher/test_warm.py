"""Warm process groups run trial after trial with the metrics each trial has when run cold.

Real processes: a 2-rank gloo group under torchrun (the DDP case) and the launcher's
one-process group, driven through the launcher as the controller drives it, against the
classic cold launcher (one torchrun per trial) as the reference. Trials run without stores
(the runtime's printing recorder prints the last report in full precision), so only the
processes are under test.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hyperfleet.platform.launcher.base import Launcher, TrialHandle
from hyperfleet.platform.launcher.torchrun import TorchrunLauncher
from hyperfleet.platform.launcher.warm import WarmTorchrunLauncher
from hyperfleet.platform.pool import Device, Lease
from hyperfleet.spec.trial import TrialConfig
from hyperfleet.spec.wire import TrialSpec

ROOT = Path(__file__).resolve().parents[2]
AGENT_FAILURE = "ChildFailedError"  # torchrun's agent, when a rank of its group failed
FINAL = re.compile(r"^run complete at step \d+: (\{.*\})$", re.M)
pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the ranks import tests.launcher.workloads


@pytest.fixture
def warm() -> Iterator[WarmTorchrunLauncher]:
    launcher = WarmTorchrunLauncher()
    yield launcher
    launcher.close()
    assert not launcher.groups


def spec(root: Path, number: int, ranks: int, **params: Any) -> TrialSpec:
    trial = TrialConfig.model_validate({
        "workload": "tests.launcher.workloads:probe", "steps": 5, "eval_every": 5,
        "resources": {"devices": ranks}, "parallel": {"data": ranks},
    })  # fmt: skip
    out = TrialSpec(sweep="warm", number=number, trial=trial,
                    params={"seed": 7, "lr": 0.05, **params}, workdir=str(root),
                    trial_dir=str(root / f"trial-{number:04d}"))  # fmt: skip
    out.write()
    return out


def finish(launcher: Launcher | None, handle: TrialHandle) -> int:
    """Wait for the trial's end as the controller does (the launcher's wait, then poll)."""
    while (code := handle.poll()) is None:
        if launcher is None or not launcher.wait(1.0):
            time.sleep(0.1)
    return code


def metrics(s: TrialSpec) -> dict[str, float]:
    found = FINAL.findall(s.log_path.read_text())
    assert found, s.log_path.read_text()[-3000:]
    return json.loads(found[-1])


def lease(ranks: int) -> Lease:
    return Lease(tuple(Device("cpu", i) for i in range(ranks)), 1)


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, float]]:
    """The cold runs (one torchrun each, both at once) of the two 2-rank trials below: seed
    7 and lr 0.05 (key 7), seed 8 and lr 0.1 (key 8)."""
    import os

    root = tmp_path_factory.mktemp("cold")
    os.environ["PYTHONPATH"] = str(ROOT)
    launcher = TorchrunLauncher()
    specs = {7: spec(root, 0, 2), 8: spec(root, 1, 2, seed=8, lr=0.1)}
    cpus = {7: (0, 1), 8: (2, 3)}
    handles = {k: launcher.launch(s, Lease(tuple(Device("cpu", i) for i in cpus[k]), k))
               for k, s in specs.items()}  # fmt: skip
    assert all(finish(None, h) == 0 for h in handles.values())
    cold = {k: metrics(s) for k, s in specs.items()}
    assert all(m["gc_on"] == m["gc_frozen"] == 1.0 for m in cold.values()), cold
    return cold


def close_to(a: dict[str, float], b: dict[str, float]) -> bool:
    return a.keys() == b.keys() and all(abs(a[k] - b[k]) <= 1e-6 for k in a)


def test_back_to_back_trials_match_their_cold_twins(
    warm: WarmTorchrunLauncher, twins: dict[int, dict[str, float]], tmp_path: Path
) -> None:
    first, second = spec(tmp_path, 0, 2), spec(tmp_path, 1, 2, seed=8, lr=0.1)
    assert finish(warm, warm.launch(first, lease(2))) == 0
    assert finish(warm, warm.launch(second, lease(2))) == 0
    assert warm.started == 1, "the second trial did not run in the first one's group"
    got = [metrics(first), metrics(second)]
    assert [m["leaks"] for m in got] == [0.0, 0.0], "the second trial saw the first's state"
    assert all(m["gc_on"] == m["gc_frozen"] == 1.0 for m in got), "the rank never resumed"
    assert close_to(got[0], twins[7]) and close_to(got[1], twins[8]), (got, twins)


def test_a_failed_trial_takes_its_group_down(
    warm: WarmTorchrunLauncher, twins: dict[int, dict[str, float]], tmp_path: Path
) -> None:
    failed = spec(tmp_path, 0, 2, fail=True)
    assert finish(warm, warm.launch(failed, lease(2))) != 0
    after = spec(tmp_path, 1, 2, seed=8, lr=0.1)
    assert finish(warm, warm.launch(after, lease(2))) == 0
    assert warm.started == 2, "the trial after a failure ran in the failed trial's group"
    assert metrics(after)["leaks"] == 0.0
    assert close_to(metrics(after), twins[8])
    warm.close()  # the groups' own logs go with the launcher's temporary directory
    assert not warm.directory.exists()
    # each trial's log holds what every rank said, and the failed one what the agent said
    logs = {s.number: s.log_path.read_text() for s in (failed, after)}
    for text in logs.values():
        assert all(f"probe: rank {r} of 2" in text for r in (0, 1)), text[-3000:]
    assert "injected failure" in logs[0] and AGENT_FAILURE in logs[0], logs[0][-3000:]
    assert len(re.findall(r"^step 5: loss=", logs[1], re.M)) == 1, logs[1][-3000:]


def test_a_layout_change_or_reuse_false_gets_fresh_processes(
    warm: WarmTorchrunLauncher, tmp_path: Path
) -> None:
    one = spec(tmp_path, 0, 1)  # one rank: one process without an agent
    assert finish(warm, warm.launch(one, lease(1))) == 0
    assert metrics(one)["leaks"] == 0.0
    fresh = []
    for number in (1, 2):  # reuse: false on one CPU slot: a forked child of a fork server each
        s = spec(tmp_path, number, 1, seed=8, lr=0.1)
        s = s.model_copy(update={"trial": s.trial.model_copy(update={"reuse": False})})
        assert finish(warm, warm.launch(s, lease(1))) == 0
        fresh.append(metrics(s))
    assert warm.started == 2, "reuse: false ran in the warm group, or not in one fork server"
    assert [m["leaks"] for m in fresh] == [0.0, 0.0], "a forked trial saw the one before"
    assert metrics(one)["gc_on"] == metrics(one)["gc_frozen"] == 1.0
    assert all(m["gc_on"] == m["gc_frozen"] == 1.0 for m in fresh), "a forked child is paused"
    assert close_to(fresh[0], fresh[1])
    assert finish(warm, warm.launch(spec(tmp_path, 3, 2), lease(2))) == 0  # cpu:0 for 2 ranks
    assert warm.started == 3
    assert [g.key.devices for g in warm.groups if g.alive] == [("cpu:0", "cpu:1")]


def test_stop_ends_the_trial_and_its_group(warm: WarmTorchrunLauncher, tmp_path: Path) -> None:
    slow = spec(tmp_path, 0, 2)
    slow = slow.model_copy(update={"trial": slow.trial.model_copy(update={"steps": 10**9})})
    slow.write()
    handle = warm.launch(slow, lease(2))
    group = warm.groups[0]
    while len(group.task.sent if group.task else ()) < 2:  # both ranks have the trial
        assert handle.poll() is None, slow.log_path.read_text()[-2000:]
        warm.wait(1.0)
    assert handle.stop(grace=5.0) != 0
    assert not group.alive


def test_a_group_started_ahead_runs_the_relaunch_and_the_old_size_leaves(
    warm: WarmTorchrunLauncher, tmp_path: Path
) -> None:
    """A resize 1 -> 2 as the controller makes it: the trial runs on cpu:0, a group of two
    ranks is started ahead on cpu:0 and cpu:1, and the relaunch at 2 runs in it; the group
    of one rank leaves then (not when a later trial of its layout would have come)."""
    one = spec(tmp_path, 0, 1)
    handle = warm.launch(one, lease(1))
    two = spec(tmp_path, 1, 2)
    assert warm.start_ahead(lease(2), two.trial)
    assert warm.start_ahead(lease(2), two.trial)  # asked again (a growth enlarged): one group
    assert warm.started == 2
    ahead = warm.groups[1]
    assert ahead.ahead and ahead.key.devices == ("cpu:0", "cpu:1")
    assert not warm.ready_ahead(lease(2), two.trial)  # its interpreters are starting
    deadline = time.monotonic() + 120
    while not warm.ready_ahead(lease(2), two.trial):  # both ranks joined and said hello
        assert ahead.alive and time.monotonic() < deadline, ahead.log_path.read_text()
        time.sleep(0.1)
    assert sorted(ahead.channel.ranks) == [0, 1]
    assert finish(warm, handle) == 0
    old = warm.groups[0]
    relaunch = warm.launch(two, lease(2))
    assert relaunch.group is ahead and warm.started == 2
    assert old.leaving and not old.idle
    assert finish(warm, relaunch) == 0
    assert "2 rank(s) on cpu:0, cpu:1, started ahead), trial 1 in it" in two.log_path.read_text()
    gpus = Lease((Device("cuda", 0), Device("cuda", 1)), 0)
    assert not warm.start_ahead(gpus, two.trial)  # a rank would bind a device the trial uses
    assert warm.started == 2
