"""A PBT member that will resume from a donor's checkpoint finds it there, whatever the donor
did meanwhile: the donor's runtime never prunes a checkpoint the scheduler pins, and the member
copies it in before training (the real trial runtime, one process, the sweep's SQL stores)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy.exc import OperationalError

from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.recorder import RankZeroRecorder
from hyperfleet.platform.schedulers import build_scheduler
from hyperfleet.platform.schedulers.base import DecisionKind, RestorePoint, TrialState
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.paths import checkpoint_dir, trial_dir
from hyperfleet.spec.wire import TrialSpec
from hyperfleet.trials.checkpoint import CheckpointManager
from tests.integration.test_pbt import cli_env, toy_sweep

pytestmark = pytest.mark.slow  # a real trial process, like the rest of tests/integration
STEPS = 40


def _spec(cfg: SweepConfig, url: str, number: int, params: dict[str, Any], **kw: Any) -> TrialSpec:
    return TrialSpec(
        sweep=cfg.name,
        number=number,
        trial=cfg.trial,
        params={**cfg.trial.params, **params},
        workdir=cfg.workdir,
        trial_dir=str(trial_dir(cfg.workdir, cfg.name, number)),
        storage=url,
        sweep_config=cfg.model_dump(mode="json"),
        **kw,
    )


def test_pinned_donor_checkpoint_survives_pruning_and_is_adopted(tmp_path: Path) -> None:
    path = toy_sweep(tmp_path, "pins", {
        "trial": {"steps": STEPS, "checkpoint": {"keep": 1}},
    })  # fmt: skip
    cfg = SweepConfig.model_validate(yaml.safe_load(path.read_text()))
    url = str(cfg.storage)
    Path(cfg.workdir).mkdir(parents=True)
    storage = Storage(url)
    sched = build_scheduler(cfg, storage)
    a, b = sched.suggest(), sched.suggest()
    assert a is not None and b is not None
    sched.report(a.trial_number, 4, {"Q": 0.1})
    sched.report(b.trial_number, 4, {"Q": 0.3})
    decision = sched.decide(a.trial_number, 4)
    assert decision.kind == DecisionKind.EXPLOIT and decision.donor == b.trial_number
    # member a dies before it copies the donor's weights: it will resume from (b, 4)
    sched.on_trial_end(a.trial_number, TrialState.FAIL, error="killed")
    assert (b.trial_number, 4) in sched.pinned_checkpoints()

    # the donor trains on with keep: 1; its runtime asks the scheduler what is pinned
    donor = RankZeroRecorder(_spec(cfg, url, b.trial_number, b.params))
    assert donor.pinned_steps() == {4}
    donor_ckpts = CheckpointManager(
        checkpoint_dir(cfg.workdir, cfg.name, b.trial_number), keep=1, protect=donor.pinned_steps
    )
    theta = {4: [0.5, 0.2], 8: [0.4, 0.1], 12: [0.3, 0.05], 16: [0.2, 0.02]}
    for step, th in theta.items():
        donor_ckpts.save(step, {"theta": th, "step": step})  # saved, then reported
        sched.report(b.trial_number, step, {"Q": 0.3})  # below what member a will reach
    # 4 is pinned by member a, 12 by the donor itself (its last report, where it would resume
    # if it died before reporting 16); 8 is pruned
    assert donor_ckpts.steps() == [4, 12, 16]

    # member a resumes in the real runtime from the donor's step 4, not from its latest
    s = sched.suggest()
    assert s is not None and s.trial_number == a.trial_number
    assert s.restore == RestorePoint(trial=1, step=4)
    spec = _spec(cfg, url, a.trial_number, dict(s.params), reported_through=4, restore=s.restore)
    tdir = trial_dir(cfg.workdir, cfg.name, a.trial_number)
    spec.write()
    proc = subprocess.run(
        [sys.executable, "-m", "hyperfleet.platform.trial_entry", str(tdir / "spec.json")],
        env=cli_env(), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resumes from its checkpoint at step 4" in proc.stderr
    assert "is gone" not in proc.stderr
    record = storage.trials.get(cfg.name, a.trial_number)
    assert record is not None and record.outcome == "complete" and record.last_step == STEPS
    # it trained from the donor's theta at step 4 (h = the explored params)
    h0, h1, lr = float(s.params["h0"]), float(s.params["h1"]), float(cfg.trial.params["lr"])
    t0, t1 = theta[4]
    for _ in range(STEPS - 4):
        t0, t1 = t0 - lr * 2 * h0 * t0, t1 - lr * 2 * h1 * t1
    assert abs(record.metrics["theta0"] - t0) < 1e-9 and abs(record.metrics["theta1"] - t1) < 1e-9
    # having reported, the member holds its own weights: the donor's step 4 is free again
    assert sched.members()[a.trial_number].ckpt_member == a.trial_number
    assert donor.pinned_steps() == {16}

    def unreachable() -> set[tuple[int, int]]:
        raise OperationalError("SELECT ...", {}, Exception("database is locked"))

    donor.scheduler.pinned_checkpoints = unreachable  # type: ignore[method-assign]
    assert donor.pinned_steps() is None  # unknown: the runtime prunes nothing
