"""What storage hands back: frozen, typed copies of its rows, never the ORM rows themselves.

* :class:`SweepRecord` — an ``hf_sweeps`` row, its configuration parsed once by the sweep
  file's own models (:class:`~hyperfleet.platform.config.model.SweepConfig`);
* :class:`TrialRecord`, :class:`LeaseRecord`, :class:`WorkerRecord`, :class:`GangRecord` —
  ``hf_trials``, ``hf_leases``, ``hf_workers`` and ``hf_gangs`` rows;
* :class:`TrialFields` — the fields a write of a trial's row may set (``storage.trials.upsert``,
  ``storage.trials.start_attempt``), each with its type; :class:`SweepFields` the same for a sweep's
  (``storage.sweeps.update``).

States are the enums of :mod:`hyperfleet.spec.states`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from pydantic import ValidationError

from hyperfleet.errors import ConfigError
from hyperfleet.spec.states import GangState, SweepStatus, TrialState, WorkerState

if TYPE_CHECKING:
    from hyperfleet.platform.config.model import SweepConfig

logger = logging.getLogger(__name__)

R = TypeVar("R")


@dataclass(frozen=True)
class SweepRecord:
    """A read-only copy of a ``hf_sweeps`` row."""

    name: str
    study_name: str
    stored_config: Mapping[str, Any]
    """The configuration as stored (the sweep file's model, dumped to JSON)."""
    config: SweepConfig | None
    """``stored_config`` parsed by the sweep file's models; None when it no longer parses
    (a row written by another hyperfleet version, or by hand): readers then fall back on
    ``stored_config`` or say the sweep cannot be read."""
    status: SweepStatus
    created_at: float
    updated_at: float
    mlflow_experiment_id: str | None = None
    mlflow_parent_run_id: str | None = None

    def parsed(self) -> SweepConfig:
        """``config``; ``ConfigError`` (one line) when the stored one does not parse."""
        if self.config is None:
            raise ConfigError(
                f"sweep {self.name!r}: its stored configuration does not parse with this "
                f"hyperfleet version; open it with the version that ran it"
            )
        return self.config

    @classmethod
    def of(cls, row: Any) -> SweepRecord:
        stored = dict(row.config)
        return cls(
            name=row.name,
            study_name=row.study_name,
            stored_config=stored,
            config=parse_stored(row.name, stored),
            status=SweepStatus(row.status),
            created_at=row.created_at,
            updated_at=row.updated_at,
            mlflow_experiment_id=row.mlflow_experiment_id,
            mlflow_parent_run_id=row.mlflow_parent_run_id,
        )


def parse_stored(name: str, stored: Mapping[str, Any]) -> SweepConfig | None:
    """A stored sweep config parsed by the sweep file's models; None when it does not parse."""
    # Imported here, not at the top: the config's models import the schedulers, and those
    # import storage's submodules, so the storage package is often mid-import when the config
    # package is (not a cycle of modules: of package initialisation order).
    from hyperfleet.platform.config.model import SweepConfig

    try:
        return SweepConfig.model_validate(stored)
    except ValidationError as exc:
        logger.debug("sweep %s: its stored config does not parse: %s", name, exc)
        return None


@dataclass(frozen=True, kw_only=True)
class TrialRecord:
    """A read-only copy of a ``hf_trials`` row (the fields a write may set, :class:`TrialFields`,
    and its key)."""

    sweep: str
    number: int
    params: Mapping[str, Any]
    # how it stands, and how its last launch ended
    state: TrialState
    outcome: str | None
    last_step: int | None
    metrics: Mapping[str, Any]
    error: str | None
    notes: str | None = None
    # its launches: how many, how many retried after a failure, the latest one's times
    attempts: int
    retries: int = 0
    started_at: float | None
    heartbeat_at: float | None
    ended_at: float | None
    # where the latest launch ran and wrote
    worker: str | None = None
    host: str | None
    pid: int | None
    trial_dir: str | None
    log_path: str | None
    mlflow_run_id: str | None
    # the ranks its reports ran at: ``[first step, ranks]`` pairs, by step (None: unrecorded)
    sizes: list[list[int]] | None = None

    def size_at(self, step: int) -> int | None:
        """The number of ranks the report of ``step`` ran at; None when unrecorded."""
        held = [ranks for first, ranks in self.sizes or [] if first <= step]
        return held[-1] if held else None

    @classmethod
    def of(cls, row: Any) -> TrialRecord:
        return copy(cls, row, state=TrialState(row.state))

    @classmethod
    def of_mapping(cls, row: Mapping[Any, Any]) -> TrialRecord:
        """From a row's columns; those a database of an older schema lacks keep defaults."""
        values = {f.name: row[f.name] for f in fields(cls) if f.name in row}
        return cls(**{**values, "state": TrialState(values["state"])})


class SweepFields(TypedDict, total=False):
    """The fields of a sweep's row that ``storage.sweeps.update`` may set."""

    config: Mapping[str, Any]
    status: SweepStatus
    mlflow_experiment_id: str | None
    mlflow_parent_run_id: str | None


class TrialFields(TypedDict, total=False):
    """The fields of a trial's row that a write may set (its key is the call's). A field left
    out keeps its value; ``None`` clears it."""

    state: TrialState
    params: Mapping[str, Any]
    host: str | None
    pid: int | None
    heartbeat_at: float | None
    started_at: float | None
    ended_at: float | None
    last_step: int | None
    metrics: Mapping[str, Any]
    outcome: str | None
    error: str | None
    mlflow_run_id: str | None
    log_path: str | None
    trial_dir: str | None
    worker: str | None
    retries: int
    notes: str | None
    attempts: int  # :meth:`.TrialStore.start_attempt` counts them; set only to reset
    sizes: list[list[int]] | None  # :meth:`.TrialStore.record_size` adds to them


TRIAL_FIELDS = frozenset(TrialFields.__annotations__)


@dataclass(frozen=True)
class LeaseRecord:
    """A read-only copy of a ``hf_leases`` row: devices held by one launch of a trial."""

    id: int
    sweep: str
    trial: int
    host: str
    pid: int
    devices: list[str]
    started_at: float
    ended_at: float | None
    state: TrialState | None  # how the launch ended (None: still open)
    worker: str | None = None
    share: int = 0  # its lane on a shared device (0: whole devices)
    per_device: int = 1  # the device was shared this many ways (1: held whole)

    @classmethod
    def of(cls, row: Any) -> LeaseRecord:
        return copy(cls, row, state=None if row.state is None else TrialState(row.state))

    @classmethod
    def of_mapping(cls, row: Mapping[Any, Any]) -> LeaseRecord:
        """From a row's columns; those a database of an older schema lacks keep defaults."""
        values = {f.name: row[f.name] for f in fields(cls) if f.name in row}
        state = values.get("state")
        values["state"] = None if state is None else TrialState(state)
        return cls(**values)


@dataclass(frozen=True)
class WorkerRecord:
    """A read-only copy of a ``hf_workers`` row."""

    id: str
    host: str
    pid: int
    pool: str
    devices: list[str]
    address: str | None
    sweeps: list[str] | None
    started_at: float
    heartbeat_at: float
    state: WorkerState
    job_id: str | None = None
    """The batch job that runs it (Slurm's ``SLURM_JOB_ID``), if any."""
    job_state: str | None = None
    """The job's state as the scheduler last said it (:class:`~hyperfleet.spec.states.JobState`
    values, kept as written)."""
    job_reason: str | None = None
    """Why the job waits or ended, as the scheduler says it (``squeue -o %r``)."""

    @classmethod
    def of_mapping(cls, row: Mapping[Any, Any]) -> WorkerRecord:
        """From a row's columns; those a database of an older schema lacks keep defaults."""
        values = {f.name: row[f.name] for f in fields(cls) if f.name in row}
        return cls(**{**values, "state": WorkerState(values["state"])})


@dataclass(frozen=True)
class GangRecord:
    """A read-only copy of a ``hf_gangs`` row."""

    id: int
    sweep: str
    trial: int
    attempt: int
    nodes: int
    per_node: int
    endpoint: str
    rdzv_id: str
    spec: dict[str, Any]
    members: list[str]
    deadline: float
    state: GangState

    @classmethod
    def of(cls, row: Any) -> GangRecord:
        return copy(cls, row, state=GangState(row.state))


def copy(cls: type[R], row: Any, **typed: Any) -> R:
    """A record of type ``cls`` with the fields of ``row`` of the same names (``typed``: the
    ones given their type here)."""
    values = {f.name: getattr(row, f.name) for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{**values, **typed})


def json_safe(value: Any) -> Any:
    """``value`` with non-finite floats as the strings ``"nan"``, ``"inf"``, ``"-inf"``: JSON
    (and PostgreSQL's json type) has no NaN or infinity, and a reported NaN must be kept."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, Mapping):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
