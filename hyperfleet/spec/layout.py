"""Checks of a trial's layout that need no torch: run before any process starts.

Each returns one line per problem, naming the field (relative to the ``trial`` section), the
bad value and what is expected. Whether fp16 works on a device type is torch's to say: the
caller passes ``fp16_check`` (the control plane asks a torch subprocess, the trial side asks
torch directly); without it fp16 is not checked here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec

from hyperfleet.errors import ConfigError
from hyperfleet.spec.trial import CommConfig, ParallelConfig, Precision

P = ParamSpec("P")

BF16_COMPRESS_BACKENDS = frozenset({"nccl"})
"""Backends that torch's ``bf16_compress_hook`` accepts (it refuses gloo)."""

DEVICE_TYPES = {"gloo": "cpu", "nccl": "cuda"}
"""The device type of a process-group backend's ranks, as the platform launches them."""

Fp16Check = Callable[[str], "str | None"]
"""``device type -> None`` when fp16 autocast and loss scaling work there, else the reason."""


def validate_layout(
    devices: int,
    parallel: ParallelConfig,
    precision: Precision,
    n_layers: int | None,
    backend: str,
    grad_accum: int = 1,
    fp16_check: Fp16Check | None = None,
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
    if precision == "fp16" and fp16_check is not None:
        why = fp16_check(DEVICE_TYPES.get(backend, backend))
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


def raising(validate: Callable[P, list[str]]) -> Callable[P, None]:
    """``validate`` as a check: :class:`ConfigError` listing its problems, if it finds any."""

    def check(*args: P.args, **kwargs: P.kwargs) -> None:
        problems = validate(*args, **kwargs)
        if problems:
            raise ConfigError(problems)

    return check


check_layout = raising(validate_layout)
"""Raise :class:`ConfigError` listing every problem of :func:`validate_layout`."""
