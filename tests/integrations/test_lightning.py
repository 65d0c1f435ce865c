"""The Lightning callback in the real trial runtime, one process, a scripted recorder for the
scheduler's decisions: reports at the trainer's step, a prune ends the trial PRUNED at that
step, Lightning's checkpoints land in the trial's directory (``keep`` honoured, readable with
``weights_only``), a resumed trial continues the uninterrupted curve exactly, and after an
exploit the member trains from the donor's weights with its own explored learning rate (the
LR schedule continuing at the donor's step)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

from hyperfleet.errors import ConfigError, HyperfleetError
from hyperfleet.spec.states import Outcome
from hyperfleet.spec.trial import TrialConfig
from hyperfleet.spec.wire import CONTINUE, Decision, DecisionKind, RestorePoint, TrialSpec
from hyperfleet.testing.launchers import QuietRecorder
from hyperfleet.trials.runtime import run_trial
from tests.integrations.lightning_workloads import lr_log

WORKLOAD = "tests.integrations.lightning_workloads:main"
FIXED = {"hidden": 16, "batch_size": 16, "seed": 0}


class Scripted(QuietRecorder):
    """Rank 0's recorder: keeps every report, answers ``decisions[step]`` (else CONTINUE)."""

    def __init__(self, decisions: Mapping[int, Decision] | None = None) -> None:
        super().__init__()
        self.decisions = dict(decisions or {})
        self.reports: list[tuple[int, dict[str, float]]] = []

    def __call__(self, step: int, metrics: Mapping[str, float]) -> Decision:
        self.reports.append((step, dict(metrics)))
        return self.decisions.pop(step, CONTINUE)


def spec(root: Path, number: int, steps: int, params: dict[str, Any], **kw: Any) -> TrialSpec:
    trial = TrialConfig.model_validate({
        "workload": WORKLOAD, "steps": steps, "eval_every": 2, "params": FIXED,
        "resources": {"devices": 0}, "checkpoint": {"keep": 2},
    })  # fmt: skip
    return TrialSpec(
        sweep="lit", number=number, trial=trial,
        params={**FIXED, "lr": 0.02, "decay": 1.0, **params},
        workdir=str(root), trial_dir=str(root / "lit" / f"trial-{number:04d}"), **kw,
    )  # fmt: skip


def run(s: TrialSpec, decisions: Mapping[int, Decision] | None = None) -> Scripted:
    rec = Scripted(decisions)
    assert run_trial(s, lambda _spec: rec) == rec.outcome
    return rec


def ckpts(s: TrialSpec) -> list[int]:
    return sorted(int(p.stem[5:]) for p in (Path(s.trial_dir) / "checkpoints").glob("step-*.pt"))


def test_reports_checkpoints_and_resume_continue_the_curve(tmp_path: Path) -> None:
    whole = run(spec(tmp_path / "a", 0, 8, {}))
    assert whole.outcome == Outcome.COMPLETE
    assert [s for s, _ in whole.reports] == [2, 4, 6, 8]
    assert {"loss", "accuracy", "train_loss", "lr"} <= set(whole.reports[0][1])

    first = spec(tmp_path / "b", 0, 4, {})
    assert run(first).outcome == Outcome.COMPLETE
    assert ckpts(first) == [2, 4]
    state = torch.load(Path(first.trial_dir) / "checkpoints" / "step-000000004.pt",
                       weights_only=True)  # fmt: skip
    assert state["global_step"] == 4 and {"state_dict", "optimizer_states", "loops"} <= set(state)

    # the same trial with more steps continues from its checkpoint at 4 on the same curve
    resumed = run(spec(tmp_path / "b", 0, 8, {}))
    assert [s for s, _ in resumed.reports] == [6, 8]
    assert ckpts(first) == [6, 8]  # keep: 2
    assert resumed.reports == whole.reports[2:]  # exactly, every metric


def test_prune_stops_training_at_its_decision(tmp_path: Path) -> None:
    s = spec(tmp_path, 0, 8, {})
    rec = run(s, {4: Decision(DecisionKind.PRUNE, reason="asha")})
    assert rec.outcome == Outcome.PRUNED
    assert [step for step, _ in rec.reports] == [2, 4]


def test_after_an_exploit_the_member_trains_with_its_explored_lr(tmp_path: Path) -> None:
    donor = spec(tmp_path, 1, 4, {"lr": 0.05, "decay": 0.5})
    run(donor)
    member = spec(tmp_path, 0, 8, {"lr": 0.001, "decay": 0.5})
    explored = {"lr": 0.003, "decay": 0.5}
    exploit = Decision(DecisionKind.EXPLOIT, donor=1, donor_step=4, params=explored)
    rec = run(member, {2: exploit})
    assert rec.outcome == Outcome.COMPLETE
    assert [s for s, _ in rec.reports] == [2, 6, 8]
    segments = lr_log(Path(member.trial_dir))
    assert [seg["start"] for seg in segments] == [0, 4]
    # the optimizer's lr: the schedule from the explored base value at the donor's step count
    assert segments[1]["evals"] == [(s, 0.003 * 0.5 ** (s / 100)) for s in (6, 8)]
    for step, metrics in rec.reports[1:]:  # reported as Lightning logged it (float32)
        assert metrics["lr"] == pytest.approx(0.003 * 0.5 ** (step / 100), rel=1e-6)
    restored = torch.load(segments[1]["weights"], weights_only=True)
    donors = torch.load(Path(donor.trial_dir) / "checkpoints" / "step-000000004.pt",
                        weights_only=True)["state_dict"]  # fmt: skip
    assert restored.keys() == donors.keys()
    assert all(torch.equal(restored[k], donors[k]) for k in donors)


def test_a_fit_without_ckpt_path_is_refused(tmp_path: Path) -> None:
    first = spec(tmp_path, 0, 2, {})
    run(first)
    again = spec(tmp_path, 0, 4, {"ignore_ckpt": 1})
    with pytest.raises(ConfigError, match=r"ckpt_path=callback\.ckpt_path"):
        run(again)


def test_restore_point_of_a_paused_member(tmp_path: Path) -> None:
    donor = spec(tmp_path, 1, 4, {"lr": 0.05})
    run(donor)
    member = spec(tmp_path, 0, 6, {"lr": 0.004}, restore=RestorePoint(trial=1, step=4))
    rec = run(member)
    assert [s for s, _ in rec.reports] == [6]
    assert lr_log(Path(member.trial_dir))[0]["evals"] == [(6, 0.004)]


def test_trainer_kwargs_map_the_trial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hyperfleet.integrations.lightning import HyperfleetCallback
    from hyperfleet.trials.checkpoint import CheckpointManager
    from hyperfleet.trials.context import TrialContext
    from hyperfleet.trials.distributed import DistEnv

    trial = TrialConfig.model_validate({
        "workload": WORKLOAD, "steps": 10, "eval_every": 5, "precision": "bf16",
        "grad_accum": 2, "grad_clip": 1.0,
    })  # fmt: skip
    ctx = TrialContext(
        params={"seed": 7}, env=DistEnv(0, 1, 0, torch.device("cpu"), "gloo"), max_steps=10,
        eval_every=5, trial_number=0, sweep="t", config=trial, workdir=tmp_path,
        checkpoints=CheckpointManager(tmp_path / "ck"),
    )  # fmt: skip
    kw = HyperfleetCallback(ctx).trainer_kwargs()
    assert kw["precision"] == "bf16-mixed" and kw["accumulate_grad_batches"] == 2
    assert kw["gradient_clip_val"] == 1.0 and kw["val_check_interval"] == 10  # 5 steps of 2
    assert kw["devices"] == 1 and kw["enable_checkpointing"] is False
    assert torch.initial_seed() == 7  # params.seed through seed_everything

    monkeypatch.delenv("HYPERFLEET_SPEC", raising=False)
    with pytest.raises(HyperfleetError, match="HYPERFLEET_SPEC"):
        HyperfleetCallback()  # a script trial's program asks hyperfleet.trial() for its context
