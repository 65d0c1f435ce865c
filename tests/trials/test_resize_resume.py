"""An elastic trial's resizes, trial side: the built-in ``digits`` workload trained on one
rank, then resumed from its own checkpoints at 2, 4 and again 2 ranks (what the controller's
resize does at a report: the trial checkpoints, its group ends, it relaunches at the new size
in the same directory), reports the curve of a run that stayed on one rank. The global batch
is kept: each rank's micro-batch is ``batch_size / (ranks x grad_accum)``, and the rows of a
step are the same at every size. Tolerance: 1e-4 relative on the loss and equal accuracies
(the mean over ranks of per-rank means reassociates float sums; nothing else differs). Each
step is reported by one launch only: a launch resumes after the step it checkpointed."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from hyperfleet.spec.trial import TrialConfig
from hyperfleet.spec.wire import CONTINUE, Decision, TrialSpec
from hyperfleet.trials.runtime import PrintRecorder
from tests.dist import run_distributed

pytestmark = pytest.mark.slow

EVERY = 5
#: (ranks, last step) of each launch of the resized trial: grows 1 -> 2 -> 4, shrinks to 2
LAUNCHES = [(1, 10), (2, 20), (4, 30), (2, 40)]


class FileRecorder(PrintRecorder):
    """Rank 0's reports, one JSON line each, in ``reports.jsonl`` of the trial's directory."""

    def __init__(self, spec: TrialSpec | None = None) -> None:
        super().__init__(spec)
        assert spec is not None
        self.path = Path(spec.trial_dir) / "reports.jsonl"

    def __call__(self, step: int, metrics: Mapping[str, float]) -> Decision:
        with self.path.open("a") as f:
            f.write(json.dumps({"step": step, **metrics}) + "\n")
        return CONTINUE


def _spec(root: Path, ranks: int, steps: int) -> TrialSpec:
    trial = TrialConfig.model_validate({
        "workload": "digits", "steps": steps, "eval_every": EVERY,
        "params": {"batch_size": 32, "lr": 0.01},
        "resources": {"devices": ranks}, "parallel": {"data": ranks},
    })  # fmt: skip
    return TrialSpec(sweep="resize", number=0, trial=trial, params={}, workdir=str(root),
                     trial_dir=str(root / "trial-0000"), world_size=ranks)  # fmt: skip


def _rank(rank: int, world: int, root: str, steps: int) -> str:
    from hyperfleet.trials.runtime import run_trial

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    return run_trial(_spec(Path(root), world, steps), FileRecorder, keep_process_group=True)


def _reports(root: Path) -> list[dict[str, Any]]:
    lines = (root / "trial-0000" / "reports.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_a_trial_resized_1_2_4_2_reports_the_curve_of_one_that_stayed_on_one_rank(
    tmp_path: Path,
) -> None:
    fixed, resized = tmp_path / "fixed", tmp_path / "resized"
    (fixed / "trial-0000").mkdir(parents=True)
    (resized / "trial-0000").mkdir(parents=True)
    assert run_distributed(_rank, 1, str(fixed), LAUNCHES[-1][1], timeout=240) == ["complete"]
    for ranks, last in LAUNCHES:
        outcomes = run_distributed(_rank, ranks, str(resized), last, timeout=240)
        assert outcomes == ["complete"] * ranks

    want, got = _reports(fixed), _reports(resized)
    steps = [r["step"] for r in got]
    assert steps == list(range(EVERY, LAUNCHES[-1][1] + 1, EVERY)), "a step twice or lost"
    assert steps == [r["step"] for r in want]
    assert [r["loss"] for r in got] == pytest.approx([r["loss"] for r in want], rel=1e-4)
    assert [r["val_accuracy"] for r in got] == [r["val_accuracy"] for r in want]
    assert want[-1]["loss"] < want[0]["loss"], "the fixed run learnt nothing to compare"
