"""The example's tiny GPT-2 workload with a probe the sweep tests read (``probe.jsonl`` in the
trial's directory, rank 0): what the Trainer ran with, seen from inside the trial.

* ``begin``: the step the Trainer starts at, the world size it and the process group see, and
  (when it resumed) a digest of the model's weights right after its restore, over the tensors
  of the checkpoint's ``model.safetensors``;
* ``step``: at each optimizer step, the Trainer's global step before it and the learning rate
  it steps with;
* ``eval``: at each report step, the learning rate of the optimizer's last step;
* ``save``: a digest of the ``model.safetensors`` the Trainer just saved (before
  ``HyperfleetCallback`` files it as the trial's checkpoint);
* ``end``: the Trainer's global step when training ended.

``paced`` is ``main`` with the PBT test's pace (:data:`PBT_PACE`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from safetensors.torch import load_file
from transformers import TrainerCallback

from examples.transformers import byte_gpt2
from hyperfleet.integrations.transformers import HyperfleetCallback
from hyperfleet.testing.workloads import HOLD_PARAMS, with_hold, with_pace

PROBE = "probe.jsonl"
SMALL = {"corpus_bytes": 1 << 18, "seq_len": 32, "n_embd": 32, "batch_size": 4, "eval_windows": 8}


def digest(tensors: Mapping[str, torch.Tensor], names: Iterable[str]) -> str:
    h = hashlib.sha256()
    for name in sorted(names):
        h.update(name.encode())
        h.update(tensors[name].detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


def file_digest(folder: Path) -> str:
    saved = load_file(folder / "model.safetensors")
    return digest(saved, saved)


class Probe(TrainerCallback):
    """Writes the probe's lines (see the module docstring); runs before HyperfleetCallback
    in ``on_save`` and ``on_evaluate``, after it in ``on_train_begin`` (it is added twice)."""

    def __init__(self, ctx: Any, cb: HyperfleetCallback) -> None:
        self.ctx, self.cb, self.lr = ctx, cb, None
        self.path = Path(ctx.workdir) / PROBE

    def write(self, **line: Any) -> None:
        if self.ctx.is_main:
            with self.path.open("a") as f:
                f.write(json.dumps({**line, "time": time.time()}) + "\n")

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.lr = kw["optimizer"].param_groups[0]["lr"]
        self.write(event="step", step=state.global_step, lr=self.lr)

    def on_evaluate(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.write(event="eval", step=state.global_step, lr=self.lr)

    def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if self.ctx.is_main:
            self.write(event="save", step=state.global_step, weights=file_digest(folder))

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.write(event="end", step=state.global_step)  # a pruned trial's too


class After(TrainerCallback):
    """The probe's events that must see what HyperfleetCallback did first."""

    def __init__(self, probe: Probe) -> None:
        self.probe = probe

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        weights = None
        if self.probe.cb.ckpt_path is not None:
            names = load_file(Path(self.probe.cb.ckpt_path) / "model.safetensors")
            weights = digest(kw["model"].state_dict(), names)
        world = dist.get_world_size() if dist.is_initialized() else 1
        self.probe.write(
            event="begin",
            step=state.global_step,
            world=world,
            trainer_world=args.world_size,
            lr=kw["optimizer"].param_groups[0]["lr"],
            weights=weights,
        )


def main(ctx: Any) -> None:
    """The example's workload, probed; holds after a report as ``hold_*`` ask."""
    with_hold(ctx)
    cb = HyperfleetCallback(ctx)
    probe = Probe(ctx, cb)
    trainer = byte_gpt2.trainer(ctx, cb, extra=[probe])
    trainer.add_callback(After(probe))  # after HyperfleetCallback
    trainer.train(resume_from_checkpoint=cb.ckpt_path)


main.hyperfleet_params = {**byte_gpt2.PARAMS, **SMALL, **HOLD_PARAMS}  # type: ignore[attr-defined]


#: The PBT test's pace (``with_pace``): member 0 waits after its report at step 2 until member
#: 1 has reported step 4, so member 0's ready check at step 4 ranks it against a member that has
#: reported; member 1 waits at step 6 until member 0 has reported step 6 (after that check), so
#: member 1 has not finished by then either.
PBT_PACE = {(0, 2): (1, 4), (1, 6): (0, 6)}


def paced(ctx: Any) -> None:
    """``main``, paced as :data:`PBT_PACE` says."""
    with_pace(ctx, PBT_PACE)
    main(ctx)


paced.hyperfleet_params = main.hyperfleet_params  # type: ignore[attr-defined]
