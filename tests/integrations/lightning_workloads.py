"""Lightning workloads of the integration's tests: the example's digits module, which also
keeps a log a test reads (``lr.jsonl`` in the trial's directory: each start, with the step it
starts from and its weights right after Lightning restored a checkpoint; each optimizer step,
with the trainer's step before it and the learning rate it steps with; each validation's step
and the optimizer's learning rate then); ``held`` holds after a report (see
``hyperfleet.testing.workloads``); ``paced`` waits after chosen reports for another member's
(:data:`PBT_PACE`); ``ignore_ckpt`` forgets to pass ``ckpt_path``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from examples.lightning.digits import PARAMS, DigitsModule
from hyperfleet.integrations.lightning import HyperfleetCallback
from hyperfleet.testing.workloads import HOLD_PARAMS, with_hold, with_pace
from hyperfleet.trials.context import TrialContext


class Watched(DigitsModule):
    """The example's module, keeping the log of the module docstring (rank 0)."""

    def __init__(self, ctx: TrialContext, **kw: Any) -> None:
        super().__init__(**kw)
        self.ctx = ctx
        self.log_file = ctx.workdir / "lr.jsonl"

    def _write(self, entry: dict[str, Any]) -> None:
        if self.ctx.is_main:
            self.log_file.parent.mkdir(parents=True, exist_ok=True)
            with self.log_file.open("a") as f:
                f.write(json.dumps(entry) + "\n")

    def on_train_start(self) -> None:
        entry: dict[str, Any] = {"event": "start", "step": self.global_step}
        if self.global_step > 0 and self.ctx.is_main:
            n = len(list(self.ctx.workdir.glob("restored-*.pt")))
            path = self.ctx.workdir / f"restored-{n}.pt"
            torch.save({k: v.detach().clone() for k, v in self.state_dict().items()}, path)
            entry["weights"] = str(path)
        self._write(entry)

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        # the step about to be taken (the trainer's count before it) and the lr it steps with
        lr = optimizer.param_groups[0]["lr"]
        self._write({"event": "step", "step": self.global_step, "lr": lr})

    def on_validation_epoch_end(self) -> None:
        super().on_validation_epoch_end()
        lr = self.optimizers().optimizer.param_groups[0]["lr"]
        self._write({"event": "eval", "step": self.global_step, "lr": lr})


def main(ctx: TrialContext) -> None:
    p = {**PARAMS, **ctx.params}
    cb = HyperfleetCallback(ctx)
    trainer = pl.Trainer(callbacks=[cb], max_steps=ctx.max_steps, **cb.trainer_kwargs())
    model = Watched(ctx, lr=float(p["lr"]), hidden=int(p["hidden"]),
                    batch_size=int(p["batch_size"]), seed=int(p["seed"]),
                    decay=float(p["decay"]))  # fmt: skip
    ckpt = cb.ckpt_path
    trainer.fit(model, ckpt_path=None if p.get("ignore_ckpt") else ckpt)


main.hyperfleet_params = {**PARAMS, "ignore_ckpt": 0}  # type: ignore[attr-defined]


def held(ctx: TrialContext) -> None:
    """``main``, held after a report as the ``hold_*`` params ask."""
    with_hold(ctx)
    main(ctx)


held.hyperfleet_params = {**main.hyperfleet_params, **HOLD_PARAMS}  # type: ignore[attr-defined]


#: The PBT test's pace (``with_pace``): member 1 waits after its report at step 2 until member
#: 0 has reported step 4, so member 1's ready check at step 4 ranks it against a member that has
#: reported; member 0 waits at step 6 until member 1 has reported step 6 (after that check), so
#: member 0 has not finished by then either.
PBT_PACE = {(1, 2): (0, 4), (0, 6): (1, 6)}


def paced(ctx: TrialContext) -> None:
    """``main``, paced as :data:`PBT_PACE` says."""
    with_pace(ctx, PBT_PACE)
    main(ctx)


paced.hyperfleet_params = main.hyperfleet_params  # type: ignore[attr-defined]


def lr_log(trial_dir: Path) -> list[dict[str, Any]]:
    """A trial's log: one segment per start (``start``: the step it started from, ``weights``:
    the file of its weights then), with the ``(step, lr)`` of each validation (``evals``) and of
    each optimizer step (``steps``: the trainer's step before it)."""
    segments: list[dict[str, Any]] = []
    for line in (trial_dir / "lr.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if entry["event"] == "start":
            segments.append(
                {"start": entry["step"], "weights": entry.get("weights"), "evals": [], "steps": []}
            )
        elif entry["event"] == "step":
            segments[-1]["steps"].append((entry["step"], entry["lr"]))
        else:
            segments[-1]["evals"].append((entry["step"], entry["lr"]))
    return segments
