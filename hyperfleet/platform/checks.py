"""Semantic checks of a structurally valid sweep: what pydantic can't see field by field."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyperfleet.errors import ConfigError
from hyperfleet.trials.workloads.registry import BUILTIN, declared_params, load_workload

if TYPE_CHECKING:
    from hyperfleet.platform.config import SweepConfig


def _workload_problems(cfg: SweepConfig) -> list[str]:
    trial = cfg.trial
    fn = None
    if trial.workload not in BUILTIN:
        try:
            fn = load_workload(trial.workload)
        except ConfigError as exc:
            return exc.problems
    known = declared_params(trial.workload, fn)
    problems: list[str] = []
    for name in trial.params:
        if name in cfg.space:
            problems.append(
                f"trial.params.{name}: also in space; a parameter is either fixed or searched"
            )
    if known is None:
        return problems
    expected = ", ".join(sorted(known))
    for where, names in (("trial.params", trial.params), ("space", cfg.space)):
        for name in names:
            if name not in known:
                problems.append(
                    f"{where}.{name}: unknown parameter of workload {trial.workload!r}; "
                    f"expected one of {expected}"
                )
    return problems


def _layout_problems(cfg: SweepConfig) -> list[str]:
    devices = cfg.trial.resources.devices
    data = cfg.trial.parallel.data
    if devices != data:
        return [
            f"trial.resources.devices: {devices} does not match the parallel layout "
            f"(parallel.data={data} needs {data} devices); make them equal"
        ]
    return []


def _budget_problems(cfg: SweepConfig) -> list[str]:
    if cfg.budget.trials is None and cfg.budget.timeout is None:
        return ["budget: give trials or timeout (or both), or the sweep would never end"]
    return []


def semantic_problems(cfg: SweepConfig) -> list[str]:
    return _budget_problems(cfg) + _layout_problems(cfg) + _workload_problems(cfg)
