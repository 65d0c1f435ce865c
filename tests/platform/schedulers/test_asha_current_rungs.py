"""ASHA decides on the current rungs of every trial, also the rungs other trials reached
after this trial's scheduler first read the history.

Each trial's rank 0 builds its own scheduler on the sweep's storage (its recorder's), whose
cache reads the history at the trial's first decision and keeps it. Four trials interleave
their reports as trials in flight do; the last one reaches rung 1 after the three others,
with a far worse value, and must be pruned against their rung-1 values. On a cache that
re-read a running trial only when its state changed, its scheduler still held the others as
they were at rung 0 (no ``completed_rung_1``), so it was promoted alone.
"""

from __future__ import annotations

from typing import Any

from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.schedulers import DecisionKind, Scheduler, build_scheduler
from hyperfleet.platform.storage import Storage
from hyperfleet.testing.sweeps import minimal_sweep

SPACE: dict[str, Any] = {"x": {"type": "float", "low": 0.0, "high": 1.0}}


def test_asha_prunes_on_the_rungs_other_trials_reached_since(db_url: str) -> None:
    # rungs at steps 2, 4, 8 (min_resource 2, reduction factor 2: the better half goes on)
    cfg = parse_sweep(
        minimal_sweep(
            name="asha-rungs", storage=db_url, space=SPACE,
            objective={"metric": "loss", "mode": "min"},
            pruner={"type": "asha", "min_resource": 2, "reduction_factor": 2},
            trial={"steps": 10, "eval_every": 2},
            budget={"trials": 4, "max_concurrent": 4},
        )
    )  # fmt: skip
    storage = Storage(db_url)
    storage.sweeps.create(cfg.name, cfg.model_dump(mode="json"))
    controller = build_scheduler(cfg, storage, create=True)
    numbers = []
    for _ in range(4):
        suggestion = controller.suggest()
        assert suggestion is not None
        numbers.append(suggestion.trial_number)
    # each trial's recorder: its own scheduler on its own storage object, as in its process
    recorders: dict[int, Scheduler] = {
        n: build_scheduler(cfg, Storage(db_url, create=False)) for n in numbers
    }

    def report(n: int, step: int, loss: float) -> DecisionKind:
        recorders[n].report(n, step, {"loss": loss})
        return recorders[n].decide(n, step).kind

    # rung 0 (step 2): each trial better than those before it, so every one goes on
    for n, loss in zip(numbers, [0.4, 0.3, 0.2, 0.1], strict=True):
        assert report(n, 2, loss) is DecisionKind.CONTINUE
    # rung 1 (step 4): the first three, each better than the one before: all go on
    for n, loss in zip(numbers[:3], [0.03, 0.02, 0.01], strict=True):
        assert report(n, 4, loss) is DecisionKind.CONTINUE
    # the last trial reaches rung 1 far worse than the three already there
    assert report(numbers[3], 4, 0.5) is DecisionKind.PRUNE
