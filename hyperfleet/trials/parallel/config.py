"""Configuration of a trial's parallel layout, gradient communication and numeric precision.

A trial's ranks form a ``data x pipeline`` grid (torchtitan's ``ParallelDims`` idea): ``data``
replicas each hold the whole model (or a whole pipeline) and average gradients; ``pipeline``
stages each hold a contiguous slice of the model's layers and pass activations forward and
gradients backward. ``validate_layout`` checks a layout against the devices, the model and the
backend *before* any process starts, and returns one line per problem.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from hyperfleet.errors import ConfigError

Precision = Literal["fp32", "bf16", "fp16"]
"""Numeric precision of forward/backward: ``fp32`` (no autocast), ``bf16`` (autocast, no loss
scaling), ``fp16`` (autocast and ``torch.amp.GradScaler``; wherever torch runs both: CUDA, and
CPU, where chips without native fp16 arithmetic emulate it)."""

Schedule = Literal["gpipe", "1f1b", "interleaved-1f1b"]

BF16_COMPRESS_BACKENDS = frozenset({"nccl"})
"""Backends that torch's ``bf16_compress_hook`` accepts (it refuses gloo)."""

DEVICE_TYPES = {"gloo": "cpu", "nccl": "cuda"}
"""The device type of a process-group backend's ranks, as the platform launches them."""


class ParallelConfig(BaseModel):
    """Layout of the trial's ranks: ``data * pipeline`` must equal the trial's devices."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data: int = Field(1, ge=1, description="Data-parallel replicas (DDP across the data axis).")
    pipeline: int = Field(1, ge=1, description="Pipeline stages (one per rank on the axis).")
    microbatches: int | None = Field(
        None,
        ge=1,
        description="Micro-batches per pipeline step; default = pipeline (the minimum for 1F1B).",
    )
    schedule: Schedule = Field("1f1b", description="Pipeline schedule.")
    virtual_stages: int = Field(
        2, ge=2, description="Stages per rank for interleaved-1f1b (ignored otherwise)."
    )

    @property
    def n_microbatches(self) -> int:
        return self.microbatches if self.microbatches is not None else self.pipeline

    @property
    def n_stages(self) -> int:
        """Total pipeline stages (``pipeline * virtual_stages`` when interleaved)."""
        if self.pipeline > 1 and self.schedule == "interleaved-1f1b":
            return self.pipeline * self.virtual_stages
        return self.pipeline


class CommConfig(BaseModel):
    """How DDP averages gradients across the data axis."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hook: Literal["allreduce", "ring", "fp16", "bf16", "powersgd"] = Field(
        "allreduce",
        description="allreduce: backend all-reduce; ring: explicit ring all-reduce over "
        "point-to-point sends; fp16/bf16: torch's compression hooks; powersgd: PowerSGD.",
    )
    bucket_mb: float = Field(25, gt=0, description="DDP gradient bucket size (bucket_cap_mb).")
    powersgd_rank: int = Field(1, ge=1, description="PowerSGD matrix approximation rank.")
    powersgd_start_iter: int = Field(
        10, ge=2, description="Steps of plain all-reduce before PowerSGD compression starts."
    )


def validate_layout(
    devices: int,
    parallel: ParallelConfig,
    precision: Precision,
    n_layers: int | None,
    backend: str,
    grad_accum: int = 1,
) -> list[str]:
    """One line per problem with this layout (empty when it is valid).

    ``n_layers`` is the length of the model's flat layer list (``None`` when unknown: a custom
    workload), ``backend`` the process-group backend (``gloo``, ``nccl``) or device type.
    """
    problems: list[str] = []
    d, p = parallel.data, parallel.pipeline
    if devices != d * p:
        problems.append(
            f"resources.devices: {devices} != parallel.data * parallel.pipeline = {d}*{p} = "
            f"{d * p}; expected the devices to be exactly data x pipeline"
        )
    if n_layers is not None and p > 1 and parallel.n_stages > n_layers:
        what = "stages" if parallel.schedule != "interleaved-1f1b" else "stages (pipeline*virtual)"
        problems.append(
            f"parallel.pipeline: {parallel.n_stages} {what} > {n_layers} model layers; "
            f"expected at most one stage per layer"
        )
    m = parallel.n_microbatches
    if p > 1 and parallel.schedule in ("1f1b", "interleaved-1f1b") and m < p:
        problems.append(
            f"parallel.microbatches: {m} < parallel.pipeline {p} with schedule "
            f"{parallel.schedule}; expected microbatches >= pipeline (or schedule: gpipe)"
        )
    if p > 1 and parallel.schedule == "interleaved-1f1b":
        rounds = max(1, m // p)
        if m % rounds:
            problems.append(
                f"parallel.microbatches: {m} is not a multiple of {rounds} rounds of "
                f"{p} for interleaved-1f1b; expected a multiple of parallel.pipeline"
            )
    if precision == "fp16":
        from hyperfleet.trials.parallel.precision import fp16_problem

        why = fp16_problem(DEVICE_TYPES.get(backend, backend))
        if why:
            problems.append(
                f"precision: fp16 is not supported on backend {backend!r}: {why}; "
                f"use precision: bf16 or fp32"
            )
    if grad_accum < 1:
        problems.append(f"grad_accum: {grad_accum}; expected an integer >= 1")
    elif grad_accum > 1 and p > 1:
        problems.append(
            f"grad_accum: {grad_accum} with parallel.pipeline {p}; a pipeline already "
            f"accumulates over its micro-batches: raise parallel.microbatches instead"
        )
    return problems


def validate_comm(comm: CommConfig, parallel: ParallelConfig, backend: str) -> list[str]:
    """One line per problem with this communication setup (empty when valid)."""
    problems: list[str] = []
    if comm.hook == "bf16" and backend not in BF16_COMPRESS_BACKENDS:
        problems.append(
            f"comm.hook: bf16 needs CUDA with nccl (torch's bf16_compress_hook), backend is "
            f"{backend!r}; use comm.hook: fp16 or allreduce"
        )
    if comm.hook != "allreduce" and parallel.data == 1:
        problems.append(
            f"comm.hook: {comm.hook} has no effect with parallel.data 1; expected data > 1 "
            f"or hook: allreduce"
        )
    return problems


def check_layout(
    devices: int,
    parallel: ParallelConfig,
    precision: Precision,
    n_layers: int | None,
    backend: str,
    grad_accum: int = 1,
) -> None:
    """Raise :class:`ConfigError` listing every problem of :func:`validate_layout`."""
    problems = validate_layout(devices, parallel, precision, n_layers, backend, grad_accum)
    if problems:
        raise ConfigError(problems)
