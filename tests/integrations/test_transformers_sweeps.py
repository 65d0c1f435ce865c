"""Sweeps of ``transformers.Trainer`` trials through ``HyperfleetCallback``, end to end (the
``hyperfleet sweep run`` command, real trial processes): the tiny GPT-2 of
``examples/transformers`` with the probe of :mod:`tests.integrations.transformers_workload`.

* ASHA with ``devices: 2``: the Trainer and the process group see a world size of 2 (DDP in
  the trial's own torchrun group); a pruned trial ends PRUNED at the step of its decision, the
  Trainer stopped there.
* An interrupted trial (``sweep run`` stopped while the trial holds after its report of step 5)
  resumes from its checkpoint of step 4 on the curve of an uninterrupted trial of the same
  params (``eval_loss`` per step in MLflow, as the function workloads' resume test checks).
* PBT of 4 members: after every exploit the learning rate the optimizer steps with (probed at
  each evaluation) is the member's explored value in the lineage the platform recorded, and
  the weights right after the Trainer's restore equal the donor's saved checkpoint exactly.
* PBT of 3 members on one slot, one exploit relaunched from the donor's checkpoint and one in
  place: the learning rate of every optimizer step after each exploit, from the first, is the
  member's explored value on its own (linear) schedule, never the donor's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.population import SqlPopulationStore
from hyperfleet.spec.states import TrialState
from hyperfleet.spec.wire import trial_dir
from hyperfleet.testing.workloads import held_marker
from tests.integration.cli import cli_env, interrupt_when_logged

pytestmark = pytest.mark.long
WORKLOAD = "tests.integrations.transformers_workload:main"
PACED = "tests.integrations.transformers_workload:paced"
PROBE = "probe.jsonl"  # what the workload's probe writes in the trial's directory
ENV = cli_env(HF_HUB_OFFLINE="1")


def sweep_cmd(path: Path, devices: int) -> list[str]:
    return [sys.executable, "-m", "hyperfleet.platform", "sweep", "run", str(path), "--json",
            "--devices", f"cpu:{devices}"]  # fmt: skip


def run_sweep(path: Path, devices: int) -> None:
    proc = subprocess.run(sweep_cmd(path, devices), env=ENV, capture_output=True, text=True,
                          timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_asha_with_ddp_of_2_prunes_at_its_decisions(
    sweep_file: Callable[..., Path], tmp_path: Path
) -> None:
    path = sweep_file({
        "name": "tf-asha", "objective": {"metric": "eval_loss", "mode": "min"},
        "scheduler": {"type": "grid", "seed": 0},  # its order: 1e-2 first, worse ones follow
        "pruner": {"type": "asha", "min_resource": 2, "reduction_factor": 2},
        "budget": {"trials": 3, "max_concurrent": 1},
        "space": {"lr": {"type": "categorical", "choices": [1.0e-6, 1.0e-5, 1.0e-2]}},
        "trial": {"workload": WORKLOAD, "params": {"batch_size": 4}, "steps": 8, "eval_every": 2,
                  "resources": {"devices": 2}, "parallel": {"data": 2}},
    })  # fmt: skip
    run_sweep(path, 2)
    storage = Storage(f"sqlite:///{tmp_path / 'runs' / 'hf.db'}")
    trials = storage.trials.of("tf-asha")
    assert len(trials) == 3
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    assert pruned, [(t.number, t.state, t.params) for t in trials]
    for t in trials:
        lines = probe_lines(trial_dir(tmp_path / "runs", "tf-asha", t.number))
        begin = [x for x in lines if x["event"] == "begin"]
        assert [(b["world"], b["trainer_world"]) for b in begin] == [(2, 2)]
        evals = [x["step"] for x in lines if x["event"] == "eval"]
        end = [x["step"] for x in lines if x["event"] == "end"]
        assert evals == list(range(2, t.last_step + 1, 2)) and end == [t.last_step]
        if t.state == TrialState.COMPLETE:
            assert t.last_step == 8
    assert all(t.last_step < 8 for t in pruned)


def test_interrupted_trial_resumes_on_the_uninterrupted_curve(
    sweep_file: Callable[..., Path], tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    release = tmp_path / "release"
    path = sweep_file({
        "name": "tf-resume", "objective": {"metric": "eval_loss", "mode": "min"},
        "scheduler": {"type": "random", "seed": 0},
        "budget": {"trials": 2, "max_concurrent": 1},
        "space": {"lr": {"type": "categorical", "choices": [3.0e-3]}},
        "trial": {"workload": WORKLOAD, "steps": 8, "eval_every": 1,
                  "params": {"batch_size": 4, "hold_file": str(release), "hold_at": 5,
                             "hold_trial": 1},
                  "resources": {"devices": 1}, "parallel": {"data": 1},
                  "checkpoint": {"every": 2, "keep": 2}},
    })  # fmt: skip
    storage = interrupt_when_logged(sweep_cmd(path, 1), ENV, tmp_path / "runs", "tf-resume",
                                    held_marker(release, 1), ("eval_loss", 5))  # fmt: skip
    mlflow_uri = f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"
    assert storage.trials.get("tf-resume", 1).last_step == 5

    release.touch()
    run_sweep(path, 1)
    resumed = storage.trials.get("tf-resume", 1)
    assert resumed.state == TrialState.COMPLETE and resumed.last_step == 8 and resumed.attempts == 2
    lines = probe_lines(trial_dir(tmp_path / "runs", "tf-resume", 1))
    assert [x["step"] for x in lines if x["event"] == "begin"] == [0, 4]

    client = MlflowClient(tracking_uri=mlflow_uri)

    def curve(number: int) -> dict[int, float]:
        run = storage.trials.get("tf-resume", number).mlflow_run_id
        history = client.get_metric_history(run, "eval_loss")
        assert len({m.step for m in history}) == len(history), "a step logged twice"
        return {m.step: m.value for m in history}

    reference, continued = curve(0), curve(1)
    assert sorted(continued) == sorted(reference) == list(range(1, 9))
    diff = max(abs(continued[s] - reference[s]) for s in reference)
    assert diff <= 1e-6, f"max abs eval_loss difference {diff}"


def pbt_sweep(
    name: str,
    lrs: list[float],
    interval: int,
    quantile: float,
    budget: dict[str, Any],
    trial: dict[str, Any],
) -> dict[str, Any]:
    """A PBT sweep over ``lr`` minimising ``eval_loss``, its members starting at ``lrs`` (no
    resampling, seed 0), in-process trials evaluated every 2 steps; ``trial`` merges into its
    trial section."""
    return {
        "name": name, "objective": {"metric": "eval_loss", "mode": "min"},
        "scheduler": {"type": "pbt", "population": len(lrs), "perturbation_interval": interval,
                      "quantile_fraction": quantile, "resample_probability": 0.0, "seed": 0,
                      "initial": [{"lr": lr} for lr in lrs]},
        "budget": budget,
        "space": {"lr": {"type": "float", "low": 1.0e-5, "high": 3.0e-2, "log": True}},
        "trial": {"eval_every": 2, "resources": {"devices": 0}, "parallel": {"data": 1}, **trial},
    }  # fmt: skip


def test_pbt_exploits_step_with_the_explored_lr_from_the_donors_weights(
    sweep_file: Callable[..., Path], tmp_path: Path
) -> None:
    # Two slots: members 0 and 1 run first, together. Member 0 starts at an lr far below
    # member 1's, and the paced workload makes sure member 1 has reported and not finished
    # when member 0 makes its ready check at step 4 (left to timing, a member that started
    # late could find nobody to copy: asynchronous PBT ranks against the latest reports, and
    # a member at the last step is no donor).
    path = sweep_file(pbt_sweep(
        "tf-pbt", [1.0e-4, 1.0e-3, 3.0e-3, 1.0e-2], interval=2, quantile=0.25,
        budget={"trials": 4, "max_concurrent": 4},
        trial={"workload": PACED, "params": {"batch_size": 4}, "steps": 12,
               "checkpoint": {"keep": 2}},
    ))  # fmt: skip
    run_sweep(path, 2)
    storage = Storage(f"sqlite:///{tmp_path / 'runs' / 'hf.db'}")
    events = SqlPopulationStore(storage.engine).lineage("tf-pbt")
    explores = [e for e in events if e.kind == "explore"]
    trials = storage.trials.of("tf-pbt")
    assert explores, ("PBT never exploited", [(t.number, t.state, t.last_step) for t in trials])
    assert any(e.member == 0 for e in explores), explores  # the member far behind copied
    lines = {
        t.number: probe_lines(trial_dir(tmp_path / "runs", "tf-pbt", t.number)) for t in trials
    }
    for member, probe in lines.items():
        mine = sorted((e for e in explores if e.member == member), key=lambda e: e.generation)
        segments = split_at_begin(probe)
        assert len(segments) == len(mine) + 1, (member, [x["event"] for x in probe])
        for event, segment in zip(mine, segments[1:], strict=True):
            begin, evals = segment[0], [x for x in segment if x["event"] == "eval"]
            lr = event.new_params["lr"]
            assert begin["step"] == event.donor_step
            assert evals and all(x["lr"] == pytest.approx(lr, rel=1e-9) for x in evals)
            saved = [
                x["weights"] for x in lines[event.donor]
                if x["event"] == "save" and x["step"] == event.donor_step
                and x["time"] < begin["time"]
            ]  # fmt: skip
            assert saved and begin["weights"] == saved[-1]


def test_pbt_exploits_step_with_the_explored_lr_from_their_first_step(
    sweep_file: Callable[..., Path], tmp_path: Path
) -> None:
    # One slot, so the decisions follow from the scores alone (no timing). Member 0 (the best
    # lr) pauses at its ready check at step 4 (time-sharing: member 2 is not born yet). Member 1
    # ranks last at step 4, exploits member 0 and pauses too: it goes on later, in a new launch,
    # from member 0's checkpoint. Member 2 ranks last at step 4 with every member born and none
    # behind it: it exploits member 0 and goes on in place, in the same process.
    path = sweep_file(pbt_sweep(
        "tf-pbt-steps", [1.0e-2, 1.0e-5, 3.0e-5], interval=4, quantile=0.5,
        budget={"trials": None, "max_concurrent": 1},
        trial={"workload": WORKLOAD, "params": {"batch_size": 4, "schedule": "linear"},
               "steps": 8, "checkpoint": {"keep": 4}},
    ))  # fmt: skip
    run_sweep(path, 2)
    storage = Storage(f"sqlite:///{tmp_path / 'runs' / 'hf.db'}")
    events = SqlPopulationStore(storage.engine).lineage("tf-pbt-steps")
    explores = sorted((e for e in events if e.kind == "explore"), key=lambda e: e.member)
    trials = storage.trials.of("tf-pbt-steps")
    story = [(t.number, t.state, t.attempts, t.last_step, t.params.get("lr")) for t in trials]
    assert [(e.member, e.step, e.donor, e.donor_step) for e in explores] == [
        (1, 4, 0, 4),
        (2, 4, 0, 4),
    ], (explores, story)
    attempts = {t.number: t.attempts for t in trials}
    assert (attempts[1], attempts[2]) == (2, 1), story  # 1 relaunched, 2 exploited in place
    for e in explores:
        lr = float(e.new_params["lr"])
        assert lr != 1.0e-2, e  # explored: the donor's lr would not tell the two apart
        segments = split_at_begin(probe_lines(trial_dir(tmp_path / "runs", "tf-pbt-steps",
                                                        e.member)))  # fmt: skip
        assert [seg[0]["step"] for seg in segments] == [0, e.donor_step], (e, segments)
        # (the Trainer's step before it, the lr it stepped with) of each optimizer step
        steps = [(x["step"], x["lr"]) for x in segments[1] if x["event"] == "step"]
        assert [step for step, _ in steps] == list(range(e.donor_step, 8)), (e, steps)
        # every optimizer step from the first after the exploit: the member's explored lr on
        # its own linear schedule (to 0 at step 8) at the donor's step count
        expected = [lr * (8 - step) / 8 for step, _ in steps]
        assert [got for _, got in steps] == pytest.approx(expected, rel=1e-9), (e, steps)


def probe_lines(directory: Path) -> list[dict[str, Any]]:
    path = directory / PROBE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def split_at_begin(lines: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    out: list[list[dict[str, Any]]] = []
    for line in lines:
        if line["event"] == "begin":
            out.append([])
        if out:
            out[-1].append(line)
    return out
