"""A Trainer's checkpoint folder as a trial checkpoint, and the trial's hyperparameters put back.

**Folder ↔ checkpoint.** ``transformers.Trainer`` saves a checkpoint as a folder
(``checkpoint-N/``: the weights, ``optimizer.pt``, ``scheduler.pt``, ``trainer_state.json``, one
``rng_state_R.pth`` per rank, ...). :func:`pack` reads every file of that folder, byte for byte,
into a dict of ``uint8`` tensors keyed by the file's relative path, which the trial's
:class:`~hyperfleet.trials.checkpoint.CheckpointManager` writes like any other checkpoint
(atomically, checksummed, replicated, the last ``keep`` kept, a PBT donor's pinned);
:func:`unpack` writes such a dict back out as a folder the Trainer resumes from. The bytes are
untouched, so weights restored from a donor's checkpoint equal the donor's exactly.

**Hyperparameters after a restore.** Resuming, the Trainer loads the optimizer's and the LR
scheduler's state from the checkpoint, and with them the checkpoint's learning rate, weight
decay, betas and epsilon: after a PBT exploit those are the donor's, not the member's explored
values. :func:`apply_hyperparameters` puts this run's ``TrainingArguments`` back: every
parameter group's ``lr`` is scaled by ``new / old`` base rate (so a warm-up or decay schedule
keeps its position and shape, now around the new rate), the scheduler's ``base_lrs`` and
``_last_lr`` follow, and weight decay (on the groups that decay), betas and epsilon are set.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

__all__ = ["FILES", "apply_hyperparameters", "pack", "packed_step", "unpack"]

FILES = "transformers_checkpoint"
"""The key of a trial checkpoint that holds a Trainer's checkpoint folder, file by file."""
STEP = "global_step"


def pack(folder: Path, step: int) -> dict[str, Any]:
    """Every file under ``folder`` as ``{FILES: {relative path: uint8 tensor}, STEP: step}``."""
    files: dict[str, torch.Tensor] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = bytearray(path.read_bytes())
        files[path.relative_to(folder).as_posix()] = (
            torch.frombuffer(data, dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
        )
    return {FILES: files, STEP: step}


def packed_step(state: Mapping[str, Any]) -> int:
    """The Trainer's global step a packed checkpoint was saved at; ValueError when ``state``
    is not a Trainer's checkpoint (another workload's, in this trial's directory)."""
    if FILES not in state or STEP not in state:
        raise ValueError(
            "the trial's checkpoint holds no transformers.Trainer checkpoint (it has "
            f"{sorted(state)}); HyperfleetCallback resumes only from checkpoints it saved"
        )
    return int(state[STEP])


def unpack(state: Mapping[str, Any], folder: Path) -> Path:
    """Write a packed checkpoint out as ``folder`` (replaced if it exists); returns it."""
    packed_step(state)
    if folder.exists():
        shutil.rmtree(folder)
    for name, data in state[FILES].items():
        path = folder / name
        if not path.resolve().is_relative_to(folder.resolve()):
            raise ValueError(f"checkpoint file {name!r} would be written outside {folder}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.numpy().tobytes())
    return folder


def apply_hyperparameters(optimizer: Any, scheduler: Any, args: Any) -> None:
    """Set ``args``' (a ``TrainingArguments``) learning rate, weight decay, betas and epsilon
    on ``optimizer`` and ``scheduler`` (either may be None); see the module docstring."""
    if optimizer is None:
        return
    groups = optimizer.param_groups
    new_lr = float(args.learning_rate)
    base = list(scheduler.base_lrs) if scheduler is not None else [g["lr"] for g in groups]
    for i, group in enumerate(groups):
        old = float(base[i]) if i < len(base) else float(group.get("initial_lr", group["lr"]))
        ratio = new_lr / old if old else 1.0
        group["lr"] = new_lr if not old else group["lr"] * ratio
        if "initial_lr" in group:
            group["initial_lr"] = new_lr
        if group.get("weight_decay"):  # the Trainer's no-decay group keeps 0
            group["weight_decay"] = float(args.weight_decay)
        if "betas" in group:
            group["betas"] = (float(args.adam_beta1), float(args.adam_beta2))
        if "eps" in group:
            group["eps"] = float(args.adam_epsilon)
    if scheduler is not None:
        scheduler.base_lrs = [new_lr for _ in groups]
        scheduler._last_lr = [g["lr"] for g in groups]
