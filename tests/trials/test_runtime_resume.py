"""Every rank of a trial continues from the same checkpoint, whenever it looks.

Rank 0 names the step when the attempt starts (``_Run.start``): a rank that reaches
``ctx.load_checkpoint()`` after rank 0 has already written this attempt's first checkpoint
(a warm group's rank taking its task late) must not resume from that one. ``racing`` makes
that ordering certain: rank 1 looks only once rank 0 has saved a later step.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from hyperfleet.spec.trial import TrialConfig
from hyperfleet.spec.wire import TrialSpec
from hyperfleet.trials.checkpoint import CheckpointManager
from hyperfleet.trials.context import TrialContext
from tests.dist import run_distributed

WRITTEN_BY_THIS_ATTEMPT = 10


def racing(ctx: TrialContext) -> None:
    """Rank 0 loads, then saves step 10 as a running trial would; rank 1 loads after that."""
    saved = ctx.workdir / "rank0-saved"
    if ctx.rank == 0:
        ctx.load_checkpoint()
        ctx.checkpoints.save(WRITTEN_BY_THIS_ATTEMPT, {"step": WRITTEN_BY_THIS_ATTEMPT})
        saved.touch()
    else:
        deadline = time.monotonic() + 30
        while not saved.exists():
            assert time.monotonic() < deadline, "rank 0 never saved"
            time.sleep(0.01)
        ctx.load_checkpoint()
    (ctx.workdir / f"rank{ctx.rank}.json").write_text(json.dumps(ctx.resumed_from))


def _spec(root: Path) -> TrialSpec:
    trial = TrialConfig.model_validate({
        "workload": f"{__name__}:racing", "steps": 20, "eval_every": 10,
        "resources": {"devices": 2}, "parallel": {"data": 2},
    })  # fmt: skip
    return TrialSpec(sweep="race", number=0, trial=trial, params={}, workdir=str(root),
                     trial_dir=str(root / "trial-0000"))  # fmt: skip


def _rank(rank: int, world: int, root: str) -> str:
    from hyperfleet.trials.runtime import run_trial

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    return run_trial(_spec(Path(root)), keep_process_group=True)


def _resumed(root: Path) -> list[Any]:
    trial = root / "trial-0000"
    return [json.loads((trial / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.parametrize("earlier", [None, 4], ids=["fresh", "resumed"])
def test_every_rank_continues_from_the_step_rank_0_found_at_the_start(
    tmp_path: Path, earlier: int | None
) -> None:
    if earlier is not None:  # a checkpoint of an earlier attempt
        CheckpointManager(tmp_path / "trial-0000" / "checkpoints").save(earlier, {"step": earlier})
    outcomes = run_distributed(_rank, 2, str(tmp_path))
    assert outcomes == ["complete", "complete"]
    assert _resumed(tmp_path) == [earlier, earlier]
    # and the step rank 0 wrote meanwhile is there: rank 1 could have found it
    assert (
        WRITTEN_BY_THIS_ATTEMPT
        in CheckpointManager(tmp_path / "trial-0000" / "checkpoints").steps()
    )
