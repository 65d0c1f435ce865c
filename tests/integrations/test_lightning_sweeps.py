"""Lightning trials in real sweeps (``hyperfleet sweep run``): the issue's acceptance scenarios.

* ASHA over 2-process trials (the shipped example, smaller): Lightning's DDP joins the trial's
  process group (the model sees a world size of 2), and a pruned trial stops at its rung and
  is PRUNED.
* A 2-process trial stopped by SIGTERM to ``sweep run`` and continued by running it again goes
  on from its Lightning checkpoint on the curve of an uninterrupted trial with the same params.
* PBT of 2 members: the one far behind exploits the other, and after every exploit the learning
  rate the optimizer steps with (logged by the model at each validation) is the member's
  explored value the platform recorded, and the weights right after it equal the donor's
  checkpoint exactly.
* PBT of 3 members on one slot, one exploit relaunched from the donor's checkpoint and one in
  place: the learning rate of every optimizer step after each exploit, from the first, is the
  member's explored value on its own schedule, never the donor's.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.population import SqlPopulationStore
from hyperfleet.spec.states import TrialState
from hyperfleet.testing.sweeps import deep_update
from hyperfleet.testing.workloads import held_marker
from tests.integration.cli import (
    ROOT,
    cli_env,
    interrupt_when_logged,
)
from tests.integrations.lightning_workloads import lr_log

pytestmark = pytest.mark.long

WORKLOAD = "tests.integrations.lightning_workloads:main"
PACED = "tests.integrations.lightning_workloads:paced"
ENV = cli_env(OMP_NUM_THREADS="1")
EXAMPLE = ROOT / "examples" / "lightning" / "sweep.yaml"


def sweep_cmd(path: Path, devices: str) -> list[str]:
    return [sys.executable, "-m", "hyperfleet.platform", "sweep", "run", str(path), "--json",
            "--devices", devices]  # fmt: skip


def run(path: Path, devices: str) -> None:
    proc = subprocess.run(sweep_cmd(path, devices), env=ENV, capture_output=True, text=True,
                          timeout=400, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_asha_over_ddp_trials_prunes_at_rungs(tmp_path: Path, mlflow_template: Path) -> None:
    # the shipped example (examples/lightning/), smaller, with a grid that has poor lrs
    data = deep_update(yaml.safe_load(EXAMPLE.read_text()), {
        "name": "lit-asha",
        "pruner": {"type": "asha", "min_resource": 5, "reduction_factor": 2},
        "budget": {"trials": 4, "max_concurrent": 1},
        "trial": {"params": {"hidden": 16, "batch_size": 16}, "steps": 20, "eval_every": 5},
    })  # fmt: skip
    data["scheduler"] = {"type": "grid"}
    data["space"] = {"lr": {"type": "categorical", "choices": [0.03, 0.00001, 0.01, 0.000003]}}
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(mlflow_template, runs / "mlflow.db")
    data["storage"] = f"sqlite:///{runs / 'hf.db'}"
    data["tracking"] = {"uri": f"sqlite:///{runs / 'mlflow.db'}", "log_model": False}
    data["workdir"] = str(runs)
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    run(path, "cpu:2")
    trials = Storage(f"sqlite:///{tmp_path / 'runs' / 'hf.db'}").trials.of("lit-asha")
    assert len(trials) == 4
    for t in trials:
        assert t.metrics["world_size"] == 2.0, t  # Lightning's DDP over the trial's 2 ranks
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    assert pruned, [(t.params, t.state, t.metrics["loss"]) for t in trials]
    for t in pruned:  # stopped at the rung where it was decided (5, 10), not trained on
        assert t.last_step in (5, 10), t
        log = Path(t.log_path or "").read_text()
        assert f"trial {t.number} pruned" in log
    assert all(t.last_step == 20 for t in trials if t.state == TrialState.COMPLETE)


def test_stopped_trial_resumes_on_the_uninterrupted_curve(
    sweep_file: Callable[..., Path], tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    release = tmp_path / "release"
    path = sweep_file({
        "name": "lit-resume",
        "objective": {"metric": "loss", "mode": "min"},
        "scheduler": {"type": "random", "seed": 0},
        "budget": {"trials": 2, "max_concurrent": 1},
        "space": {"lr": {"type": "categorical", "choices": [0.02]}},
        "trial": {
            "workload": "tests.integrations.lightning_workloads:held",
            "params": {"hidden": 16, "batch_size": 16, "hold_file": str(release),
                       "hold_at": 10, "hold_trial": 1},
            "steps": 16, "eval_every": 2, "resources": {"devices": 2}, "parallel": {"data": 2},
            "checkpoint": {"every": 4, "keep": 2},
        },
    })  # fmt: skip
    storage = interrupt_when_logged(
        sweep_cmd(path, "cpu:2"),
        ENV,
        tmp_path / "runs",
        "lit-resume",
        held_marker(release, 1),
        ("loss", 10),
    )
    mlflow_uri = f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"
    assert storage.trials.get("lit-resume", 1).last_step == 10

    release.touch()
    run(path, "cpu:2")
    resumed = storage.trials.get("lit-resume", 1)
    assert resumed.state == TrialState.COMPLETE and resumed.attempts == 2
    assert "resumes from its checkpoint at step 8" in Path(resumed.log_path or "").read_text()
    client = MlflowClient(tracking_uri=mlflow_uri)
    ref = client.get_metric_history(storage.trials.get("lit-resume", 0).mlflow_run_id, "loss")
    got = client.get_metric_history(resumed.mlflow_run_id, "loss")
    reference = {m.step: m.value for m in ref}
    continued = {m.step: m.value for m in got}
    assert len(got) == len(continued), "a step was logged twice"
    assert sorted(continued) == sorted(reference) == list(range(2, 17, 2))
    diff = max(abs(continued[s] - reference[s]) for s in reference)
    assert diff <= 1e-6, f"max abs loss difference {diff}"


def pbt_sweep(
    name: str,
    lrs: list[float],
    scheduler: dict[str, Any],
    max_concurrent: int,
    trial: dict[str, Any],
) -> dict[str, Any]:
    """A PBT sweep over ``lr`` minimising ``loss``, its members starting at ``lrs`` (ready
    every 4 steps, seed 0; ``scheduler``'s other keys), ``max_concurrent`` at once, with
    in-process trials of a small model evaluated every 2 steps; ``trial`` adds to them."""
    return {
        "name": name, "objective": {"metric": "loss", "mode": "min"},
        "scheduler": {"type": "pbt", "population": len(lrs), "perturbation_interval": 4,
                      "quantile_fraction": 0.5, "seed": 0, **scheduler,
                      "initial": [{"lr": lr} for lr in lrs]},
        "budget": {"trials": None, "max_concurrent": max_concurrent},
        "space": {"lr": {"type": "float", "low": 0.0001, "high": 0.1, "log": True}},
        "trial": {"params": {"hidden": 16, "batch_size": 16, "decay": 0.5}, "eval_every": 2,
                  "resources": {"devices": 0}, "parallel": {"data": 1},
                  "checkpoint": {"keep": 100}, **trial},
    }  # fmt: skip


def test_pbt_members_train_with_their_explored_lr_from_the_donors_weights(
    sweep_file: Callable[..., Path], tmp_path: Path
) -> None:
    # Two members at once, one with an lr far below the other: it ranks last at its ready
    # check at step 4, and the paced workload makes sure the other has reported by then
    # and not finished (asynchronous PBT ranks against the members' latest reports, and
    # a member that reached the last step is no donor: left to timing, a member that
    # started late could find nobody to copy).
    path = sweep_file(pbt_sweep("lit-pbt", [0.05, 0.0001], {}, 2, {"workload": PACED, "steps": 16}))
    run(path, "cpu:2")
    runs = tmp_path / "runs"
    storage = Storage(f"sqlite:///{runs / 'hf.db'}")
    events = SqlPopulationStore(storage.engine).lineage("lit-pbt")
    explores = [e for e in events if e.kind == "explore"]
    assert [(e.member, e.step) for e in explores][:1] == [(1, 4)], _population_story(
        storage, "lit-pbt"
    )  # the member far behind copied the other at its first ready check
    checked = 0
    for member in {e.member for e in explores}:
        mine = [e for e in explores if e.member == member]  # in the order they happened
        segments = lr_log(runs / "lit-pbt" / f"trial-{member:04d}")
        after = [s for s in segments if s["start"] > 0]
        assert [s["start"] for s in after] == [e.donor_step for e in mine]
        for e, seg in zip(mine, after, strict=True):
            lr = float(e.new_params["lr"])
            for step, logged in seg["evals"]:  # the optimizer's lr, the schedule's at step
                assert logged == pytest.approx(lr * 0.5 ** (step / 100), rel=1e-12), (e, seg)
                checked += 1
            donor_ckpt = runs / "lit-pbt" / f"trial-{e.donor:04d}" / "checkpoints"
            donors = torch.load(donor_ckpt / f"step-{e.donor_step:09d}.pt",
                                weights_only=True)["state_dict"]  # fmt: skip
            restored = torch.load(seg["weights"], weights_only=True)
            assert all(torch.equal(restored[k], donors[k]) for k in donors), e
    assert checked > 0, "no validation after an exploit"


def test_pbt_exploits_step_with_the_explored_lr_from_their_first_step(
    sweep_file: Callable[..., Path], tmp_path: Path
) -> None:
    # One slot, so the decisions follow from the scores alone (no timing). Member 0 (the best
    # lr) pauses at its ready check at step 4 (time-sharing: member 2 is not born yet). Member 1
    # ranks last at step 4, exploits member 0 and pauses too: it goes on later, in a new launch,
    # from member 0's checkpoint. Member 2 ranks last at step 4 with every member born and none
    # behind it: it exploits member 0 and goes on in place, in the same processes.
    path = sweep_file(pbt_sweep("lit-pbt-steps", [0.05, 0.0001, 0.0003],
                                {"resample_probability": 0.0}, 1,
                                {"workload": WORKLOAD, "steps": 8}))  # fmt: skip
    run(path, "cpu:2")
    runs = tmp_path / "runs"
    storage = Storage(f"sqlite:///{runs / 'hf.db'}")
    events = SqlPopulationStore(storage.engine).lineage("lit-pbt-steps")
    explores = sorted((e for e in events if e.kind == "explore"), key=lambda e: e.member)
    story = _population_story(storage, "lit-pbt-steps")
    assert [(e.member, e.step, e.donor, e.donor_step) for e in explores] == [
        (1, 4, 0, 4),
        (2, 4, 0, 4),
    ], story
    attempts = {t.number: t.attempts for t in storage.trials.of("lit-pbt-steps")}
    assert (attempts[1], attempts[2]) == (2, 1), story  # 1 relaunched, 2 exploited in place
    for e in explores:
        lr = float(e.new_params["lr"])
        assert lr != 0.05, e  # explored: the donor's lr would not tell the two apart
        segments = lr_log(runs / "lit-pbt-steps" / f"trial-{e.member:04d}")
        assert [s["start"] for s in segments] == [0, e.donor_step], (e, segments)
        steps = segments[1]["steps"]  # (the trainer's step before it, the lr it stepped with)
        assert [step for step, _ in steps] == list(range(e.donor_step, 8)), (e, steps)
        # every optimizer step from the first after the exploit: the member's explored lr on
        # its own schedule (decay 0.5 per 100 steps) at the donor's step count
        expected = [lr * 0.5 ** (step / 100) for step, _ in steps]
        assert [got for _, got in steps] == pytest.approx(expected, rel=1e-12), (e, steps)


def _population_story(storage: Storage, sweep: str) -> str:
    """How a PBT sweep went, for a failure's message: each trial's span and each member's
    last decision."""
    t0 = min((t.started_at or 0.0) for t in storage.trials.of(sweep))
    trials = [
        (t.number, t.state.value, t.attempts, round((t.started_at or t0) - t0, 2),
         round((t.ended_at or t0) - t0, 2), t.last_step, t.params.get("lr"))
        for t in storage.trials.of(sweep)
    ]  # fmt: skip
    members = {
        n: (m.state.value, m.step, m.score, m.last_check, m.decision)
        for n, m in SqlPopulationStore(storage.engine).members(sweep).items()
    }
    return (
        f"trials (number, state, attempts, start, end, last step, lr) {trials}; members {members}"
    )
