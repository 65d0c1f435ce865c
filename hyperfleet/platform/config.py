"""The sweep file: YAML validated into typed, frozen pydantic objects.

Validation runs in two passes. The first is structural (pydantic: types, ranges, unknown keys);
the second is semantic (the workload exists and knows every parameter name, the device count
matches the parallel layout). Both report every problem at once, one line each, naming the field
path, the bad value and what is expected; ``load_sweep`` raises a single ``ConfigError`` holding
those lines. Nothing is written anywhere before a file has passed both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hyperfleet.errors import ConfigError
from hyperfleet.platform.schedulers.configs import (
    NoPrunerConfig,
    PrunerConfig,
    SchedulerConfig,
    TPEConfig,
)
from hyperfleet.platform.schedulers.pb2 import PB2Config
from hyperfleet.platform.schedulers.pbt_config import PBTConfig
from hyperfleet.spec.trial import TrialConfig, parse_duration

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# -- search space --------------------------------------------------------------------------


class FloatParam(_Frozen):
    type: Literal["float"]
    low: float
    high: float
    log: bool = False
    step: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _check(self) -> FloatParam:
        _check_range(self.low, self.high, self.log)
        if self.log and self.step is not None:
            raise ValueError("step cannot be combined with log: true; drop one of them")
        return self


class IntParam(_Frozen):
    type: Literal["int"]
    low: int
    high: int
    log: bool = False
    step: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _check(self) -> IntParam:
        _check_range(self.low, self.high, self.log)
        if self.log and self.step != 1:
            raise ValueError("step cannot be combined with log: true; drop one of them")
        return self


Choice = str | int | float | bool | None


class CategoricalParam(_Frozen):
    type: Literal["categorical"]
    choices: list[Choice] = Field(min_length=1)

    @field_validator("choices")
    @classmethod
    def _unique(cls, v: list[Choice]) -> list[Choice]:
        if len({repr(c) for c in v}) != len(v):
            raise ValueError(f"choices must be distinct, got {v}")
        return v


def _check_range(low: float, high: float, log: bool) -> None:
    if low > high:
        raise ValueError(f"low ({low}) must be <= high ({high})")
    if log and low <= 0:
        raise ValueError(f"log: true needs low > 0, got low={low}")


ParamSpec = Annotated[FloatParam | IntParam | CategoricalParam, Field(discriminator="type")]


# -- sweep sections -------------------------------------------------------------------------


class Objective(_Frozen):
    metric: str = Field(min_length=1)
    mode: Literal["min", "max"]


class Budget(_Frozen):
    trials: int | None = Field(None, ge=1)
    max_concurrent: int = Field(1, ge=1)
    timeout: float | None = Field(None, gt=0, description="seconds; YAML accepts 90s, 30m, 2h")

    @field_validator("timeout", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> Any:
        return parse_duration(v)


class TrackingConfig(_Frozen):
    uri: str | None = Field(None, description="MLflow tracking URI")
    experiment: str | None = Field(None, description="MLflow experiment; default: sweep name")
    register_model: str | None = Field(
        None, description="register the best trial's model under this name in MLflow"
    )


def _scheduler_union() -> Any:
    """Optuna-based scheduler configs plus the population-based ones, by ``type``."""
    import typing

    optuna_based = typing.get_args(typing.get_args(SchedulerConfig)[0])
    members = (*optuna_based, PBTConfig, PB2Config)
    return Annotated[typing.Union[members], Field(discriminator="type")]  # noqa: UP007


if TYPE_CHECKING:  # a union built at run time is opaque to a type checker
    AnyScheduler = Any
else:
    AnyScheduler = _scheduler_union()


class SweepConfig(_Frozen):
    name: str
    objective: Objective | None = None
    objectives: list[Objective] | None = Field(None, min_length=2)
    scheduler: AnyScheduler = Field(default_factory=lambda: TPEConfig(type="tpe"))
    pruner: PrunerConfig = Field(default_factory=NoPrunerConfig)
    budget: Budget = Field(default_factory=Budget)
    space: dict[str, ParamSpec]
    trial: TrialConfig
    storage: str | None = None
    tracking: TrackingConfig = Field(default_factory=lambda: TrackingConfig())
    workdir: str = Field("hyperfleet-runs", description="logs, checkpoints, default stores")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(
                f"expected letters, digits, '_', '.', '-' (1-100 chars, not starting with "
                f"a symbol), got {v!r}"
            )
        return v

    @field_validator("space")
    @classmethod
    def _space(cls, v: dict[str, Any]) -> dict[str, Any]:
        if not v:
            raise ValueError("the search space is empty; add at least one parameter")
        return v

    @model_validator(mode="after")
    def _one_objective_key(self) -> SweepConfig:
        if (self.objective is None) == (self.objectives is None):
            raise ValueError(
                "objective: required field is missing; give objective: {metric, mode} "
                "(or objectives: [...] for several)"
                if self.objective is None
                else "objectives: given beside objective; keep one of them"
            )
        return self

    @property
    def all_objectives(self) -> list[Objective]:
        return [self.objective] if self.objective is not None else list(self.objectives or [])

    @property
    def is_population(self) -> bool:
        return self.scheduler.type in ("pbt", "pb2")


# -- loading --------------------------------------------------------------------------------


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that rejects a key given twice in one mapping."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            line = key_node.start_mark.line + 1
            raise ConfigError(f"{key}: duplicate key at line {line}; give each name once")
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot read the sweep file ({exc.strerror}); check the path"
        ) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: YAML syntax error{where}: {problem}; fix the YAML") from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: expected a mapping of sweep settings, got {type(data).__name__}"
        )
    return data


def _loc_path(loc: tuple[Any, ...], data: Any) -> str:
    """Dotted field path of a pydantic error, without discriminated-union tags."""
    parts: list[str] = []
    node = data
    for item in loc:
        if isinstance(node, Mapping) and item not in node and node.get("type") == item:
            continue  # the union's tag, not a field
        parts.append(str(item))
        if isinstance(node, Mapping):
            node = node.get(item)
        elif isinstance(node, list) and isinstance(item, int) and item < len(node):
            node = node[item]
        else:
            node = None
    return ".".join(parts) or "(file)"


def _problem(err: Mapping[str, Any], data: Any) -> str:
    msg = str(err["msg"]).removeprefix("Value error, ")
    if not err["loc"]:
        return msg  # a whole-file rule; its message starts with the field it is about
    path = _loc_path(tuple(err["loc"]), data)
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"{path}: unknown key; remove it or check its spelling"
    if kind == "missing":
        return f"{path}: required field is missing"
    value = err.get("input")
    shown = "" if isinstance(value, (dict, list)) or value is None else f" (got {value!r})"
    return f"{path}: {msg}{shown}"


def parse_sweep(data: Mapping[str, Any]) -> SweepConfig:
    """Structural and semantic validation of a sweep mapping."""
    try:
        cfg = SweepConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError([_problem(e, data) for e in exc.errors()]) from None
    from hyperfleet.platform.checks import semantic_problems

    problems = semantic_problems(cfg)
    if problems:
        raise ConfigError(problems)
    return cfg


def load_sweep(path: str | Path) -> SweepConfig:
    return parse_sweep(read_yaml(path))
