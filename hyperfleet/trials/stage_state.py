"""The state of a pipelined trial, gathered under the unsplit model's keys.

Each pipeline rank holds a slice of ``layers()``. Its parameters are named by their index in
the full layer list (``layers()[i]`` is key prefix ``i.``), and its optimizer state is keyed by
those names rather than by position (the ``torch.distributed.checkpoint`` form). So the stages'
parts merge into one state with an unsplit model's keys, which loads into a plain model or into
a pipeline cut differently.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from hyperfleet.trials.parallel.pipeline import PipelineRunner


def stage_layers(runner: PipelineRunner) -> nn.Module:
    """A container of this rank's layers named by their index in the full layer list."""
    box = nn.Module()
    for s in runner.stage_ids:
        for i in range(runner.bounds[s], runner.bounds[s + 1]):
            box.add_module(str(i), runner.layers[i])
    return box


def to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    return value


def fqn_optimizer_state(box: nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    """``opt.state_dict()`` keyed by parameter names (the ``torch.distributed.checkpoint``
    form), so states of different stages merge and load into any split."""
    names = {id(p): n for n, p in box.named_parameters()}
    order = [names[id(p)] for g in opt.param_groups for p in g["params"]]
    sd = opt.state_dict()
    groups = [{**g, "params": [order[i] for i in g["params"]]} for g in sd["param_groups"]]
    return {"state": {order[i]: to_cpu(v) for i, v in sd["state"].items()}, "param_groups": groups}


def load_fqn_optimizer(box: nn.Module, opt: torch.optim.Optimizer, saved: dict) -> None:
    names = {id(p): n for n, p in box.named_parameters()}
    order = [names[id(p)] for g in opt.param_groups for p in g["params"]]
    owner = {n: g for g in saved["param_groups"] for n in g["params"]}
    groups = []
    for g in opt.state_dict()["param_groups"]:
        src = owner[order[g["params"][0]]]
        groups.append({**{k: v for k, v in src.items() if k != "params"}, "params": g["params"]})
    state = {i: saved["state"][n] for i, n in enumerate(order) if n in saved["state"]}
    opt.load_state_dict({"state": state, "param_groups": groups})


def merge_stage_states(parts: list[dict[str, Any] | None]) -> dict[str, Any]:
    model: dict[str, Any] = {}
    state: dict[str, Any] = {}
    groups: list[dict[str, Any]] = []
    for part in parts:
        if part is None:
            continue  # a data replica other than the first: same weights
        model.update(part["model"])
        state.update(part["optimizer"]["state"])
        for i, g in enumerate(part["optimizer"]["param_groups"]):
            if i < len(groups):
                groups[i]["params"] = groups[i]["params"] + g["params"]
            else:
                groups.append(dict(g))
    return {"model": model, "optimizer": {"state": state, "param_groups": groups}}


def assemble_state(step: int, world: int, weights: dict, rngs: list, parts: dict) -> dict[str, Any]:
    """A state in :mod:`hyperfleet.trials.reshard`'s format."""
    from hyperfleet.trials.reshard import STATE_VERSION

    objs = {"scaler": parts["scaler"], "scheduler": parts["scheduler"], "data": parts["loader"]}
    sds = {k: (o.state_dict() if o is not None else None) for k, o in objs.items()}
    head = {"version": STATE_VERSION, "step": step, "world_size": world}
    return {**head, **weights, **sds, "rng": rngs, "extra": dict(parts["extra"] or {})}
