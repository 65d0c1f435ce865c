"""The pieces :class:`hyperfleet.integrations.lightning.HyperfleetCallback` hands to Lightning.

* :class:`TrialCheckpointIO` — Lightning's ``CheckpointIO`` plugin for the trial. Lightning
  builds its own checkpoint (model, optimizers, LR schedulers, loops, callbacks, precision
  plugin) in ``trainer.save_checkpoint``; for a path the callback announced, the plugin keeps
  that dict instead of writing it, and the callback hands it to ``ctx.report``, whose checkpoint
  manager writes it atomically and checksummed into the trial's checkpoint directory, copies it
  to the replica and prunes beyond ``keep`` except the steps a PBT member will still load. For
  the path of the checkpoint the trial resumes from it returns the state ``ctx.load_checkpoint``
  already read (the primary copy, or the replica's when the primary is gone), so it is read
  once; any other path is Lightning's plain file.
* :class:`TrialEnvironment` — a Lightning ``ClusterEnvironment`` over the trial's ranks: the
  processes exist already (torchrun started them) and so does the process group, so
  Lightning's DDP joins it and launches nothing.
* :class:`FreshHyperparameters` — what a restored checkpoint must not override. Lightning
  restores the optimizers' param groups (the learning rate with them) and the LR schedulers'
  state from the checkpoint after ``configure_optimizers`` built them from this run's
  hyperparameters, so a PBT member that exploits would train on with its donor's learning
  rate. The values as built are captured before that restore (``on_fit_start``) and put back
  after it (``on_train_start``): every param group's hyperparameters, then each scheduler's
  own state as built with the restored step count replayed, so the schedule continues at its
  step from the new base values (a ``ReduceLROnPlateau`` keeps its restored counters and
  starts again from the new learning rate).
"""

from __future__ import annotations

import copy
import os
import warnings
from collections import OrderedDict
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric.plugins.environments.cluster_environment import ClusterEnvironment
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch.plugins.io import TorchCheckpointIO

from hyperfleet.trials.context import TrialContext


class TrialCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint file I/O, with the trial's checkpoints going through hyperfleet
    (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self._expected: str | None = None
        self._kept: dict[str, Any] | None = None
        self._resume: tuple[str, dict[str, Any]] | None = None

    def expect(self, path: _PATH) -> None:
        """The next save to ``path`` is kept for the callback rather than written."""
        self._expected = os.fspath(path)
        self._kept = None

    def take(self) -> dict[str, Any] | None:
        """The checkpoint Lightning saved to the expected path (rank 0; None elsewhere)."""
        kept, self._kept, self._expected = self._kept, None, None
        return kept

    def offer(self, path: _PATH, state: dict[str, Any]) -> None:
        """The state of the checkpoint at ``path`` the trial resumes from, read already."""
        self._resume = (os.fspath(path), state)

    @property
    def offered(self) -> bool:
        """Whether a resume state is still waiting for Lightning to load it."""
        return self._resume is not None

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: _PATH, storage_options: Any | None = None
    ) -> None:
        if self._expected is not None and os.fspath(path) == self._expected:
            self._kept = _plain(checkpoint)
            return
        super().save_checkpoint(checkpoint, path, storage_options)

    def load_checkpoint(
        self, path: _PATH, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        if self._resume is not None and os.fspath(path) == self._resume[0]:
            state = self._resume[1]
            self._resume = None
            return state
        return super().load_checkpoint(path, map_location, weights_only)


def _plain(value: Any) -> Any:
    """Lightning's checkpoint with dict subclasses (``AttributeDict`` hyperparameters) as
    plain dicts, which ``torch.load(weights_only=True)`` reads back; ``OrderedDict`` state
    dicts keep their type and ``_metadata``."""
    if isinstance(value, dict):
        items = {k: _plain(v) for k, v in value.items()}
        if type(value) is dict or isinstance(value, OrderedDict):
            if all(items[k] is value[k] for k in value):
                return value
            out = copy.copy(value)
            out.update(items)
            return out
        return items
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class TrialEnvironment(ClusterEnvironment):
    """The trial's ranks as Lightning's cluster environment (processes started outside)."""

    def __init__(self, ctx: TrialContext) -> None:
        super().__init__()
        self._ctx = ctx
        nodes = ctx.config.resources.nodes
        self._per_node = max(1, ctx.world_size // nodes)

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @property
    def main_address(self) -> str:
        return os.environ.get("MASTER_ADDR", "127.0.0.1")

    @property
    def main_port(self) -> int:
        return int(os.environ.get("MASTER_PORT", "0"))

    @staticmethod
    def detect() -> bool:
        return True

    def world_size(self) -> int:
        return self._ctx.world_size

    def set_world_size(self, size: int) -> None:
        if size != self._ctx.world_size:
            raise ValueError(
                f"Lightning asked for {size} processes; the trial runs {self._ctx.world_size} "
                f"(pass **callback.trainer_kwargs() to the Trainer for its devices and nodes)"
            )

    def global_rank(self) -> int:
        return self._ctx.rank

    def set_global_rank(self, rank: int) -> None:
        if rank != self._ctx.rank:
            raise ValueError(
                f"Lightning computed rank {rank}; the trial's rank is {self._ctx.rank}"
            )

    def local_rank(self) -> int:
        return self._ctx.local_rank

    def node_rank(self) -> int:
        return self._ctx.rank // self._per_node

    @property
    def processes_per_node(self) -> int:
        return self._per_node


class FreshHyperparameters:
    """The optimizers' and LR schedulers' hyperparameters as this run built them, put back
    after Lightning restored a checkpoint's (see the module docstring)."""

    def __init__(self, trainer: pl.Trainer) -> None:
        self.groups = [
            [{k: copy.deepcopy(v) for k, v in g.items() if k != "params"} for g in o.param_groups]
            for o in trainer.optimizers
        ]
        self.schedulers = [
            copy.deepcopy(c.scheduler.state_dict()) for c in trainer.lr_scheduler_configs
        ]

    def apply(self, trainer: pl.Trainer) -> None:
        """Put the built hyperparameters back; each scheduler continues at its restored step."""
        for optimizer, groups in zip(trainer.optimizers, self.groups, strict=True):
            for group, fresh in zip(optimizer.param_groups, groups, strict=True):
                group.update(copy.deepcopy(fresh))
        for config, fresh in zip(trainer.lr_scheduler_configs, self.schedulers, strict=True):
            _replay(config.scheduler, fresh)


def _replay(scheduler: Any, fresh: dict[str, Any]) -> None:
    """``scheduler`` back to its state as built, then stepped to where it was restored."""
    from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

    if isinstance(scheduler, ReduceLROnPlateau) or not isinstance(scheduler, LRScheduler):
        return  # its restored counters stay; the param groups hold the built learning rates
    steps = int(scheduler.last_epoch) - int(fresh.get("last_epoch", 0))
    scheduler.load_state_dict(copy.deepcopy(fresh))
    with warnings.catch_warnings():  # "lr_scheduler.step() before optimizer.step()"
        warnings.simplefilter("ignore", UserWarning)
        for _ in range(max(0, steps)):
            scheduler.step()


def precision_of(ctx: TrialContext) -> str:
    """The trial's ``precision`` as Lightning's: fp32 ``32-true``, bf16 ``bf16-mixed``, fp16
    ``16-mixed`` (autocast, with loss scaling for fp16)."""
    return {"fp32": "32-true", "bf16": "bf16-mixed", "fp16": "16-mixed"}[ctx.config.precision]


def devices_of(ctx: TrialContext) -> dict[str, Any]:
    """Accelerator, devices and nodes of the trial's ranks (one process per device), DDP's
    strategy when there are several, and (``env``) the trial's cluster environment."""
    cuda = ctx.device.type == "cuda"
    accelerator = "gpu" if cuda else "cpu"
    env = TrialEnvironment(ctx)  # never one Lightning detects (a SLURM allocation's)
    if not ctx.env.distributed:
        devices: Any = [ctx.device.index or 0] if cuda else 1
        return {"accelerator": accelerator, "devices": devices, "num_nodes": 1, "env": env}
    return {
        "accelerator": accelerator,
        "devices": env.processes_per_node,
        "num_nodes": ctx.config.resources.nodes,
        "strategy": pl.strategies.DDPStrategy(process_group_backend=ctx.env.backend),
        "env": env,
    }


def scalar_metrics(metrics: dict[str, Any], names: tuple[str, ...] | None) -> dict[str, float]:
    """The one-element metrics Lightning collected (``names``: only those)."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if names is not None and key not in names:
            continue
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                continue
            out[key] = float(value.detach().item())
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = float(value)
    return out
