"""The sweep file's structure: typed, frozen pydantic models of every section.

``SweepConfig`` is the whole file: its name, one objective (or several), the scheduler and
pruner, the budget, the search space (``FloatParam``, ``IntParam``, ``CategoricalParam`` by
``type``, with conditional sub-spaces: :mod:`hyperfleet.platform.config.space`), the
``trial`` section (:class:`hyperfleet.spec.trial.TrialConfig`, shared with the trial
processes), storage, tracking and the working directory. Unknown keys are rejected and
every field names what it expects; what needs more than one field at a time (the workload knows
the params, the devices fit the layout) is :mod:`hyperfleet.platform.config.checks`'s.
A password in ``storage`` or ``tracking.uri`` is kept in the process's environment and left
out of the model (:mod:`hyperfleet.platform.credentials`): no dump of a config holds it.
"""

from __future__ import annotations

import typing
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hyperfleet.platform.clock import DEFAULT_RETRY_S
from hyperfleet.platform.config.registry import SCHEDULERS, Builder, scheduler_union
from hyperfleet.platform.config.schedulers import (
    POPULATION_TYPES,
    NoPrunerConfig,
    PrunerConfig,
    TPEConfig,
)
from hyperfleet.platform.config.space import ParamSpec
from hyperfleet.platform.config.space import dims as space_dims
from hyperfleet.platform.config.values import SWEEP_NAME, control_problem, key_problem
from hyperfleet.platform.credentials import keep
from hyperfleet.platform.urls import (
    DEFAULT_WORKDIR,
    local_storage,
    local_tracking,
    storage_problem,
    tracking_problem,
)
from hyperfleet.spec.trial import Seconds, TrialConfig


def _free_name(value: str | None) -> str | None:
    """A name that may hold anything but a control character."""
    problem = None if value is None else control_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# -- sweep sections -------------------------------------------------------------------------


class Objective(_Frozen):
    metric: str = Field(min_length=1)
    mode: Literal["min", "max"]

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str) -> str:
        problem = key_problem(v)
        if problem is not None:
            raise ValueError(f"metric name {problem}")
        return v


class Budget(_Frozen):
    trials: int | None = Field(None, ge=1)
    max_concurrent: int = Field(1, ge=1)
    timeout: Seconds | None = Field(
        None,
        gt=0,
        description="no trial starts after this long (90s, 30m, 2h); running ones finish, "
        "unless stop_at_timeout",
    )
    stop_at_timeout: bool = Field(
        False, description="at budget.timeout, stop running trials too (they are requeued)"
    )
    max_retries: int = Field(
        2,
        ge=0,
        description="relaunches of a trial after lost workers or crashed processes; a launch "
        "that raises the same exception (type and message) as the trial's previous failure "
        "is not relaunched",
    )
    stop_after_alike_failures: int = Field(
        3,
        ge=0,
        description="stop the sweep when its first N trials to end all failed with the same "
        "failure line (the last exception the workload or program raised): no more trials "
        "start, running ones finish, and `sweep run` exits 6 naming the cause "
        "(`hyperfleet.run` raises `SweepStoppedError`); 0: never stop for this",
    )
    priority: int = Field(0, description="workers serve sweeps of higher priority first")
    ahead: int | None = Field(
        None,
        ge=0,
        description="suggestions kept made ahead of the claims that take them, so that a "
        "fleet's claims do not queue for the scheduler (default: one per 32 live workers on "
        "PostgreSQL, one per live worker for random, qmc and grid, and as many for "
        "max_concurrent workers made when the sweep is created; none on SQLite; not for "
        "pbt/pb2)",
    )


class TrackingConfig(_Frozen):
    uri: str | None = Field(None, description="MLflow tracking URI")
    experiment: str | None = Field(None, description="MLflow experiment; default: sweep name")
    register_model: str | None = Field(
        None, description="register the best trial's model under this name in MLflow"
    )
    log_model: bool = Field(
        True,
        description="log the best trial's model to MLflow when the sweep ends (false: skip "
        "the export process, e.g. for quick sweeps whose models nobody loads)",
    )

    @field_validator("experiment", "register_model")
    @classmethod
    def _names(cls, v: str | None) -> str | None:
        return _free_name(v)

    @field_validator("uri")
    @classmethod
    def _uri(cls, v: str | None) -> str | None:
        problem = None if v is None else tracking_problem(v)
        if problem is not None:
            raise ValueError(problem.removeprefix("tracking.uri: "))
        return None if v is None else keep(v)  # kept for connections, off the stored config


class ElasticPolicyConfig(_Frozen):
    """The resize policy of elastic trials (``platform/elastic/resize.py``'s ``ElasticKnobs``):
    a worker's, over every sweep it serves. ``sweep run`` takes it from the sweep's file;
    ``hyperfleet worker`` from its options (``--elastic-*``); ``ElasticKnobs.of`` makes the
    policy's settings of it."""

    enabled: bool = Field(
        True, description="false: no resize is decided (elastic trials stay at their min)"
    )
    min_interval: int = Field(
        3, ge=1, description="reports a trial makes between two of its resizes (at least 1)"
    )
    share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="of the idle devices offered, the most one trial grows by while a "
        "lower-ranked one could take some too (above 0, at most 1: 1 gives the best all)",
    )


if TYPE_CHECKING:  # a union built at run time is opaque to a type checker
    AnyScheduler = Any
else:
    AnyScheduler = scheduler_union()


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
    storage_retry: Seconds = Field(
        DEFAULT_RETRY_S,
        gt=0,
        description="how long a storage outage is ridden out before the sweep stops (90s, 5m)",
    )
    tracking: TrackingConfig = Field(default_factory=lambda: TrackingConfig())
    workdir: str = Field(DEFAULT_WORKDIR, description="logs, checkpoints, default stores")
    elastic: ElasticPolicyConfig = Field(default_factory=lambda: ElasticPolicyConfig())

    @field_validator("storage")
    @classmethod
    def _storage_password(cls, v: str | None) -> str | None:
        return None if v is None else keep(v)  # kept for connections, off the stored config

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not SWEEP_NAME.fullmatch(v):
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
        for name in v:
            problem = key_problem(name)
            if problem is not None:
                raise ValueError(f"parameter name {problem}")
        return v  # names under a choice: config.space.space_problems, naming their path

    @field_validator("storage")
    @classmethod
    def _storage(cls, v: str | None) -> str | None:
        problem = None if v is None else storage_problem(v)
        if problem is not None:
            raise ValueError(problem.removeprefix("storage: "))
        return v

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, v: str) -> str:
        _free_name(v)
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

    @model_validator(mode="after")
    def _ahead_of_suggestions(self) -> SweepConfig:
        if self.budget.ahead and self.is_population:
            raise ValueError(
                f"budget.ahead: a {self.scheduler.type} sweep resumes its members instead of "
                f"making suggestions ahead; remove budget.ahead"
            )
        return self

    @property
    def all_objectives(self) -> list[Objective]:
        return [self.objective] if self.objective is not None else list(self.objectives or [])

    @property
    def dims(self) -> dict[str, ParamSpec]:
        """Every dimension of the space, those under a categorical's choices too."""
        return space_dims(self.space)

    @property
    def is_population(self) -> bool:
        """A population-based scheduler (``POPULATION_TYPES``: its trials are PBT members)."""
        return self.scheduler.type in POPULATION_TYPES

    @property
    def storage_url(self) -> str:
        """``storage``, else the default store in ``workdir`` (``urls.local_storage``)."""
        return self.storage or local_storage(self.workdir)

    @property
    def tracking_uri(self) -> str:
        """``tracking.uri``, else the default MLflow store in ``workdir``."""
        return self.tracking.uri or local_tracking(self.workdir)


def register_scheduler(config: type[BaseModel], builder: str | Builder) -> None:
    """Add a scheduler at run time (a plugin, a test): its configuration class (a frozen model
    with ``type: Literal["name"]``) and its builder (``config/registry.py``); from now on the
    sweep file accepts ``scheduler: {type: name, ...}`` and ``build_scheduler`` builds it."""
    SCHEDULERS[config] = builder
    _rebuild_scheduler_field()


def unregister_scheduler(config: type[BaseModel]) -> None:
    """Take a scheduler added by :func:`register_scheduler` out again."""
    del SCHEDULERS[config]
    _rebuild_scheduler_field()


def _rebuild_scheduler_field() -> None:
    union = typing.get_args(scheduler_union())[0]  # the field keeps its discriminator
    SweepConfig.model_fields["scheduler"].annotation = union
    SweepConfig.model_rebuild(force=True)
