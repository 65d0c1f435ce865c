"""The report protocol on the trial side: typed decisions, followed by every rank alike.

Rank 0's reporter returns a :class:`~hyperfleet.spec.wire.Decision`; ``ctx.report`` broadcasts
it and every rank returns, or raises ``TrialPruned``, ``Exploit`` or ``Pause`` at the same
step. The context reads its configuration as a typed ``TrialConfig``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

from hyperfleet.errors import TrialPruned
from hyperfleet.spec.trial import TrialConfig
from hyperfleet.spec.wire import CONTINUE, Decision, DecisionKind
from hyperfleet.trials import context
from hyperfleet.trials.checkpoint import CheckpointManager
from hyperfleet.trials.context import Exploit, Pause, ScheduleChange, TrialContext
from hyperfleet.trials.distributed import DistEnv
from tests.dist import run_distributed

EXPLOIT = Decision(
    DecisionKind.EXPLOIT, donor=3, params={"lr": 0.1}, reason="worse than 3", donor_step=20
)


def make_ctx(
    root: Path,
    reporter: Any = None,
    rank: int = 0,
    world: int = 1,
    config: Any = None,
    every: int | None = None,
) -> TrialContext:
    trial = config or TrialConfig.model_validate(
        {"workload": "digits", "steps": 40, "resources": {"devices": world}}
    )
    return TrialContext(
        params={"lr": 0.01}, env=DistEnv(rank, world, rank, torch.device("cpu"), "gloo"),
        max_steps=40, eval_every=10, trial_number=0, sweep="t", config=trial, workdir=root,
        checkpoints=CheckpointManager(root / "ck"), checkpoint_every=every, reporter=reporter,
    )  # fmt: skip


class Scripted:
    """A reporter that answers each report with the next decision of a script."""

    def __init__(self, *decisions: Decision) -> None:
        self.decisions = list(decisions)
        self.seen: list[tuple[int, dict[str, float]]] = []

    def __call__(self, step: int, metrics: Mapping[str, float]) -> Decision:
        self.seen.append((step, dict(metrics)))
        return self.decisions.pop(0)


def test_the_runtimes_names_are_importable_from_the_context() -> None:
    assert context.CONTINUE is CONTINUE
    assert issubclass(Exploit, ScheduleChange) and issubclass(Pause, ScheduleChange)


def test_each_decision_kind_is_followed(tmp_path: Path) -> None:
    prune = Decision(DecisionKind.PRUNE, reason="pruned by median at step 20")
    pause = Decision(DecisionKind.PAUSE, reason="time-sharing")
    reporter = Scripted(CONTINUE, prune, EXPLOIT, pause, Decision(DecisionKind.PRUNE))
    ctx = make_ctx(tmp_path, reporter)
    ctx.report(10, {"loss": 1})
    with pytest.raises(TrialPruned, match="pruned by median at step 20"):
        ctx.report(20, {"loss": 2})
    with pytest.raises(Exploit) as exploit:
        ctx.report(20, {"loss": 2})
    assert exploit.value.decision == EXPLOIT and str(exploit.value) == "worse than 3"
    assert exploit.value.decision.donor_step == 20
    with pytest.raises(Pause) as paused:
        ctx.report(30, {"loss": 3})
    assert paused.value.decision is pause
    with pytest.raises(TrialPruned, match="pruned at step 40"):  # no reason: the step
        ctx.report(40, {"loss": 4})
    assert reporter.seen[0] == (10, {"loss": 1.0})
    assert all(isinstance(v, float) for _, m in reporter.seen for v in m.values())


def test_record_saves_a_due_checkpoint_and_returns_the_decision(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, Scripted(EXPLOIT, CONTINUE), every=20)
    assert ctx.record(10, {"loss": 1.0}, {"step": 10}) == EXPLOIT  # not due: not saved
    assert ctx.record(20, {"loss": 1.0}, {"step": 20}) is CONTINUE
    assert ctx.checkpoints.steps() == [20]
    assert make_ctx(tmp_path / "none").record(10, {"loss": 1.0}) is CONTINUE  # no reporter


def test_a_reporter_returning_a_dict_is_refused(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, lambda step, metrics: {"kind": "continue", "reason": ""})
    with pytest.raises(
        TypeError, match=re.escape("returned a dict; expected a hyperfleet.spec.wire.Decision")
    ):
        ctx.report(10, {"loss": 1.0})


def test_the_context_takes_a_typed_trial_config(tmp_path: Path) -> None:
    with pytest.raises(
        TypeError, match=re.escape("takes a hyperfleet.spec.trial.TrialConfig, got dict")
    ):
        make_ctx(tmp_path, config={"workload": "digits", "steps": 40})
    hybrid = TrialConfig.model_validate({
        "workload": "charlm", "steps": 40, "resources": {"devices": 4},
        "parallel": {"data": 2, "pipeline": 2}, "precision": "bf16", "grad_accum": 1,
    })  # fmt: skip
    ctx = make_ctx(tmp_path, rank=3, world=4, config=hybrid)
    assert (ctx.data_size, ctx.data_rank, ctx.pipelined) == (2, 1, True)
    ctx = make_ctx(tmp_path, config=TrialConfig(workload="w", steps=4, grad_accum=3))
    assert (ctx.data_size, ctx.data_rank, ctx.pipelined) == (1, 0, False)
    assert ctx.parallelism.precision.metrics() == {}  # fp32: no loss scale to report
    assert ctx.config.grad_accum == 3


def follow_on_every_rank(rank: int, world: int, root: str) -> list[Any]:
    """Rank 0 alone is asked; every rank acts on its answer at the same step."""
    reporter = Scripted(CONTINUE, EXPLOIT) if rank == 0 else None
    ctx = make_ctx(Path(root), reporter, rank=rank, world=world)
    seen: list[Any] = []
    ctx.report(10, {"loss": 1.0})
    seen.append("continued")
    try:
        ctx.report(20, {"loss": 0.5})
    except Exploit as change:
        seen.append(change.decision)
    return seen


def test_rank_zeros_decision_reaches_every_rank(tmp_path: Path) -> None:
    out = run_distributed(follow_on_every_rank, 2, str(tmp_path), timeout=120)
    assert out == [["continued", EXPLOIT], ["continued", EXPLOIT]]
    assert isinstance(out[1][1].kind, DecisionKind)
