"""A trial's full state: everything it needs to continue exactly, saved at one layout and
restored at any other.

``ctx.state(step, model=..., optimizer=..., loader=...)`` gathers the model, the optimizer, the
fp16 loss scaler, an LR scheduler, the data position, ``extra`` and every rank's RNG states into
one dict on rank 0 (None on the other ranks), for ``ctx.report(..., checkpoint=...)``;
``ctx.restore(state, ...)`` loads it on every rank and returns its step. The dict doesn't
depend on the world size, so a trial resumes at another data-parallel width or pipeline depth:

* **without a pipeline** both go through :mod:`hyperfleet.trials.reshard` (torch's distributed
  state-dict API: rank 0 gets the consolidated, unwrapped state; loading broadcasts it);
* **with one**, each rank holds a slice of the model's layers. The stages' states are gathered
  under the unsplit model's layer indices (``layers()[i]`` is key prefix ``i.``, optimizer state
  keyed by those names: :mod:`hyperfleet.trials.stage_state`), which are an unsplit model's
  keys, so checkpoints move between pipelined and plain layouts;
* **local**: this rank's objects alone (a parameter server, whose model lives on rank 0).

Restoring keeps the optimizer hyperparameters (lr, weight decay, ...) that this run built from
``ctx.params``: loading an optimizer state would otherwise put back the checkpoint's, and a PBT
member's explored values must win. With an LR scheduler the checkpoint's are kept, since the
scheduler owns them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from hyperfleet.trials.checkpoint import capture_rng_state
from hyperfleet.trials.stage_state import (
    assemble_state,
    fqn_optimizer_state,
    load_fqn_optimizer,
    merge_stage_states,
    stage_layers,
    to_cpu,
)

if TYPE_CHECKING:
    from hyperfleet.trials.distributed import DistEnv
    from hyperfleet.trials.parallel.pipeline import PipelineRunner


def gather_state(
    step: int,
    *,
    model: nn.Module | PipelineRunner,
    optimizer: torch.optim.Optimizer | None,
    parts: dict[str, Any],
    env: DistEnv,
    data_rank: int | None,
    local: bool = False,
) -> dict[str, Any] | None:
    """The full state at ``step`` on rank 0, None elsewhere (see the module docstring).

    ``parts`` holds the ``scaler``, ``scheduler``, ``loader`` and ``extra``. With a pipeline,
    ``model`` is the runner (its optimizer the default) and ``data_rank`` this rank's replica
    on the data axis; without one ``data_rank`` is None. Collective unless ``local``.
    """
    from hyperfleet.trials import reshard

    if local:
        box = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
        assert isinstance(box, nn.Module)
        own = {"model": to_cpu(box.state_dict()), "optimizer": None}
        if optimizer is not None:
            own["optimizer"] = fqn_optimizer_state(box, optimizer)
        return assemble_state(step, 1, own, [capture_rng_state()], parts)
    if data_rank is None:
        return reshard.build_trial_state(step, model=model, optimizer=optimizer, **parts)
    runner: Any = model
    box = stage_layers(runner)
    opt = optimizer or runner.optimizer
    mine = None
    if data_rank == 0:  # one replica's stages hold every layer
        mine = {"model": to_cpu(box.state_dict()), "optimizer": fqn_optimizer_state(box, opt)}
    gathered: list[Any] | None = [None] * env.world_size if env.is_main else None
    dist.gather_object((capture_rng_state(), mine), gathered, dst=0)
    if gathered is None:
        return None
    merged = merge_stage_states([g[1] for g in gathered])
    return assemble_state(step, env.world_size, merged, [g[0] for g in gathered], parts)


def _hyper(group: Mapping[str, Any]) -> dict[str, Any]:
    """An optimizer param group's hyperparameters (everything but its params)."""
    return {k: v for k, v in group.items() if k != "params"}


def restore_state(
    state: dict[str, Any] | None,
    *,
    model: nn.Module | PipelineRunner,
    optimizer: torch.optim.Optimizer | None,
    scaler: Any,
    scheduler: Any,
    loader: Any,
    rank: int,
    pipelined: bool,
) -> int:
    """Load a state of :func:`gather_state` (saved at any layout); its step. Collective.

    Every rank passes what ``load_checkpoint`` returned. This run's optimizer hyperparameters
    win over the checkpoint's unless a ``scheduler`` owns them (see the module docstring).
    """
    opt = optimizer if optimizer is not None else getattr(model, "optimizer", None)
    built = [] if opt is None else [_hyper(g) for g in opt.param_groups]
    parts = {"scaler": scaler, "scheduler": scheduler, "loader": loader}
    if pipelined:
        step = _restore_stages(state, model, optimizer, parts, rank)
    else:
        from hyperfleet.trials import reshard

        step, _ = reshard.restore_trial_state(state, model=model, optimizer=optimizer, **parts)
    if opt is not None and scheduler is None:
        for group, hyper in zip(opt.param_groups, built, strict=True):
            group.update(hyper)
    return step


def _restore_stages(
    state: dict[str, Any] | None,
    model: Any,
    optimizer: torch.optim.Optimizer | None,
    parts: dict[str, Any],
    rank: int,
) -> int:
    """This rank's stages (and optimizer) from a state under the unsplit model's keys."""
    from hyperfleet.trials import reshard

    if state is None:
        raise ValueError("a pipelined trial restores on every rank: pass the state everywhere")
    box = stage_layers(model)
    box.load_state_dict({k: state["model"][k] for k in box.state_dict()})
    if state.get("optimizer") is not None:
        load_fqn_optimizer(box, optimizer or model.optimizer, state["optimizer"])
    for key, obj in parts.items():
        saved = state.get("data" if key == "loader" else key)
        if obj is not None and saved is not None:
            obj.load_state_dict(saved)
    step = int(state["step"])
    reshard._restore_rng(state["rng"], step, rank)
    return step
