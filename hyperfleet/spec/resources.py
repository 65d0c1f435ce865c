"""A trial's resources (``trial.resources``), and its devices given as a range,
``devices: {min: M, max: N}``: an elastic trial.

An int keeps a trial at one size from its first step to its last. A range makes the trial
*elastic*: it starts at ``min`` devices and may be grown up to ``max`` on devices that fall
idle, or shrunk back towards ``min`` when another trial waits (the policy:
:mod:`hyperfleet.platform.elastic.resize`). The range is read here, torch-free, so both sides
see one rule: :class:`Resources` stores it as ``devices: M`` (the size
a trial is launched at first, which every fixed-size reader keeps using) and
``max_devices: N``.

Only a trial that resumes exactly at another size may be elastic: a function workload whose
state goes through ``ctx.state``/``ctx.restore`` and that declares
``hyperfleet_supports = {"resizable": True}`` (the built-ins do), or a script trial whose sweep
says ``trial.resizable: true`` (its program resumes from ``${checkpoint_dir}`` at any
``WORLD_SIZE``). :mod:`hyperfleet.platform.config.elastic` refuses the others in one line.

A trial over several hosts may give its **nodes** as a range, ``nodes: {min: M, max: N}``: it is
launched as a gang of ``N`` nodes (``devices / N`` processes each) and, when a node is lost
(its host, its worker or its agent gone), continues on the nodes that survive as long as they
are at least ``M``, from its checkpoint and without a requeue (torchrun's elastic rendezvous,
``--nnodes M:N``). It is stored as ``nodes: N`` and ``min_nodes: M``, and needs the same
resumable workload as a device range.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, ValidationInfo, field_validator, model_validator

from hyperfleet.spec.sections import Seconds, Section

RANGE_KEYS = ("min", "max")
FORM = "devices: {min: M, max: N} with 1 <= M <= N"
NODES_FORM = "nodes: {min: M, max: N} with 1 <= M <= N"
# the field given as a range -> (its other field, which end the field keeps, the other's end)
_RANGES = {"devices": ("max_devices", "min", "max"), "nodes": ("min_nodes", "max", "min")}


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def range_problem(value: Mapping[Any, Any], what: str = "devices") -> str | None:
    """Why ``value`` is not a range of ``what`` (devices or nodes; one line, without the
    field's path), or None."""
    form = FORM if what == "devices" else NODES_FORM
    unknown = [str(k) for k in value if k not in RANGE_KEYS]
    if unknown:
        return f"unknown key {unknown[0]!r} in the range; give {form}"
    missing = [k for k in RANGE_KEYS if k not in value]
    if missing:
        return f"the range lacks {missing[0]}; give {form}"
    low, high = value["min"], value["max"]
    for key, v in (("min", low), ("max", high)):
        if not _is_count(v):
            return f"{key} must be a whole number of {what} (got {v!r}); give {form}"
    if low < 1:
        return f"min ({low}) must be at least 1 (an elastic trial holds {what}); give {form}"
    if low > high:
        return f"min ({low}) is above max ({high}); give {form}"
    return None


def split_range(data: Any) -> Any:
    """A ``resources`` mapping with a well-formed ``devices`` range as ``devices: min,
    max_devices: max``, and a ``nodes`` range as ``nodes: max, min_nodes: min``; anything
    else as is (the field validators then name the problem)."""
    if not isinstance(data, Mapping):
        return data
    for what, (other, keep, rest) in _RANGES.items():
        value = data.get(what)
        if not isinstance(value, Mapping) or range_problem(value, what) is not None:
            continue
        if other in data:
            continue  # given twice: refused by the field's own check
        data = {**data, what: value[keep], other: value[rest]}
    return data


def devices_problem(value: Any, what: str = "devices") -> str | None:
    """Why a ``devices`` (or ``nodes``) value still a mapping after :func:`split_range` is
    refused."""
    if not isinstance(value, Mapping):
        return None
    problem = range_problem(value, what)
    if problem is not None:
        return problem
    other = _RANGES[what][0]
    return f"give the range either as {what}: {{min, max}} or as {what} and {other}, not both"


class Resources(Section):
    devices: int = Field(
        1,
        ge=0,
        description="processes of one trial (GPUs, or CPU slots); 0: in-process; "
        "{min: M, max: N}: an elastic trial, launched at M and resized between M and N at its "
        "reports (stored as devices: M, max_devices: N; see Elastic trials)",
    )
    max_devices: int | None = Field(
        None,
        ge=1,
        description="an elastic trial's most devices (devices is then its fewest); written "
        "devices: {min: M, max: N}; None: a fixed size",
    )
    nodes: int = Field(
        1,
        ge=1,
        description="hosts a trial spans (devices per node = devices / nodes); {min: M, max: "
        "N}: launched on N, it continues on the nodes left after one is lost, down to M "
        "(stored as nodes: N, min_nodes: M; see Elastic trials)",
    )
    min_nodes: int | None = Field(
        None,
        ge=1,
        description="a multi-node trial's fewest nodes: it continues on the nodes that survive "
        "the loss of others, down to this; written nodes: {min: M, max: N}; None: every node",
    )
    gang_timeout: Seconds = Field(
        300.0, gt=0, description="a multi-node trial not joined by every node by then is let go"
    )
    pool: str | None = Field(
        None, description="only workers started with --pool NAME run it; None: any worker"
    )
    per_device: int = Field(
        1,
        ge=1,
        description="trials that may share one device (a GPU or a CPU slot); each holds a "
        "share and, on a GPU, at most 1/per_device of its memory; for trials of devices: 1",
    )

    @model_validator(mode="before")
    @classmethod
    def _device_range(cls, data: Any) -> Any:
        return split_range(data)

    @field_validator("devices", "nodes", mode="before")
    @classmethod
    def _range_form(cls, value: Any, info: ValidationInfo) -> Any:
        problem = devices_problem(value, str(info.field_name))
        if problem is not None:
            raise ValueError(problem)
        return value

    @property
    def elastic(self) -> bool:
        """The trial may run at more than one size (``devices: {min, max}`` with min < max)."""
        return self.max_devices is not None and self.max_devices > self.devices

    @property
    def elastic_nodes(self) -> bool:
        """The trial continues on fewer nodes after one is lost (``nodes: {min, max}``)."""
        return self.min_nodes is not None and self.min_nodes < self.nodes

    @property
    def sizes(self) -> range:
        """Every size the trial may run at (one for a fixed-size trial)."""
        return range(self.devices, (self.max_devices or self.devices) + 1)

    @model_validator(mode="after")
    def _elastic_range(self) -> Resources:
        if self.max_devices is None:
            return self
        if self.devices < 1 or self.max_devices < self.devices:
            raise ValueError(
                f"max_devices ({self.max_devices}) needs devices between 1 and it (got "
                f"{self.devices}); give devices: {{min: M, max: N}} with 1 <= M <= N"
            )
        if self.nodes > 1 or self.per_device > 1:
            field = "nodes" if self.nodes > 1 else "per_device"
            value = self.nodes if self.nodes > 1 else self.per_device
            raise ValueError(
                f"{field} ({value}): an elastic trial (devices: {{min, max}}) runs on whole "
                f"devices of one host for now; use {field}: 1 or give devices an int"
            )
        return self

    @model_validator(mode="after")
    def _node_range(self) -> Resources:
        if self.min_nodes is None:
            return self
        if self.min_nodes > self.nodes:
            raise ValueError(
                f"min_nodes ({self.min_nodes}) is above nodes ({self.nodes}); give {NODES_FORM}"
            )
        return self

    @model_validator(mode="after")
    def _nodes_divide_devices(self) -> Resources:
        if self.nodes > 1 and (self.devices == 0 or self.devices % self.nodes):
            raise ValueError(
                f"devices ({self.devices}) must be a positive multiple of nodes ({self.nodes}): "
                f"each node runs devices / nodes processes"
            )
        if self.per_device > 1 and self.nodes > 1:
            raise ValueError(
                f"per_device ({self.per_device}) shares one device among small trials; a trial "
                f"over {self.nodes} nodes needs whole devices: use per_device: 1"
            )
        if self.per_device > 1 and self.devices != 1:
            what = (
                "in-process trials (devices: 0) hold no device"
                if self.devices == 0
                else (f"a trial of {self.devices} processes needs whole devices")
            )
            raise ValueError(
                f"per_device ({self.per_device}) shares one device among trials of one process; "
                f"{what}: use devices: 1 or per_device: 1"
            )
        return self
