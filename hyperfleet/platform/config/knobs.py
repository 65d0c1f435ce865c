"""System knobs: space keys that search the trial configuration instead of a workload param.

A space key such as ``trial.precision`` or ``trial.parallel.pipeline`` samples a value of the
``trial`` section by its dotted path; the sampled params are split (:func:`split_params`) into
the workload's and the knobs, and the knobs are applied to a copy of the trial config before
launch (:func:`apply_overrides`). Every choice that can be checked statically is checked when
the sweep file is validated (:func:`knob_problems`); a sampled combination that breaks a layout
rule is caught again before its launch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config.model import SweepConfig
from hyperfleet.platform.config.space import CategoricalParam
from hyperfleet.spec.trial import TrialConfig

KNOB_PREFIX = "trial."


def split_params(params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Sampled values as (workload params, trial-config overrides by dotted path)."""
    workload = {k: v for k, v in params.items() if not k.startswith(KNOB_PREFIX)}
    knobs = {k: v for k, v in params.items() if k.startswith(KNOB_PREFIX)}
    return workload, knobs


def apply_overrides(trial: TrialConfig, knobs: Mapping[str, Any]) -> TrialConfig:
    """A copy of ``trial`` with ``{"trial.a.b": v}`` set; ``ConfigError`` naming the key."""
    data = trial.model_dump(mode="json")
    for key, value in knobs.items():
        node = data
        *parents, last = key[len(KNOB_PREFIX) :].split(".")
        for part in parents:
            if not isinstance(node.get(part), dict):
                raise ConfigError(f"space.{key}: trial config has no section {part!r}")
            node = node[part]
        if last not in node:
            raise ConfigError(f"space.{key}: trial config has no key {last!r}")
        node[last] = value
    try:
        return TrialConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(p) for p in first["loc"])
        raise ConfigError(
            f"space: trial.{path} = {first.get('input')!r} is invalid: {first['msg']}"
        ) from None


def knob_problems(cfg: SweepConfig) -> list[str]:
    """Searched knobs that PBT can't explore, that aren't searchable, or whose values (every
    choice, or both ends of a range) make an invalid trial config."""
    problems: list[str] = []
    for name, spec in cfg.dims.items():
        if not name.startswith(KNOB_PREFIX):
            continue
        if cfg.is_population:
            problems.append(f"space.{name}: PBT explores workload params only; fix it in trial")
            continue
        if name == "trial.resources.devices":
            problems.append(
                f"space.{name}: devices are leased per sweep, not searched; search layouts "
                f"(trial.parallel.*) of the same device count instead"
            )
            continue
        values = spec.values if isinstance(spec, CategoricalParam) else [spec.low, spec.high]
        for value in values:
            try:
                apply_overrides(cfg.trial, {name: value})
            except ConfigError as exc:
                problems.append(exc.problems[0])
                break
    return problems
