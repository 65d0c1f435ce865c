"""The ``trial:`` section of a sweep file, in one torch-free home.

What one trial runs and how: the workload and its fixed params, steps and evaluation cadence,
the devices it leases, the parallel layout of its ranks (``parallel``), numeric precision,
gradient accumulation and clipping, how data-parallel ranks communicate (``comm``) or
synchronise through a parameter server (``sync``), and its checkpoints. The control plane
validates it; the trial processes receive it inside their :class:`~hyperfleet.spec.wire.TrialSpec`.

A trial's ranks form a ``data x pipeline`` grid (torchtitan's ``ParallelDims`` idea): ``data``
replicas each hold the whole model (or a whole pipeline) and average gradients; ``pipeline``
stages each hold a contiguous slice of the model's layers and pass activations forward and
gradients backward. :mod:`hyperfleet.spec.layout` checks a layout before any process starts.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urlparse

from pydantic import ConfigDict, Field, field_validator, model_validator

from hyperfleet.spec.resources import Resources
from hyperfleet.spec.sections import Seconds, Section

MAX_STEP = 2**31 - 1
"""The largest step a trial may reach or report: PostgreSQL's ``integer``, the type of the
platform's step columns (``hf_trials.last_step`` and the others) and of Optuna's
``trial_intermediate_values.step``."""

Precision = Literal["fp32", "bf16", "fp16"]
"""Numeric precision of forward/backward: ``fp32`` (no autocast), ``bf16`` (autocast, no loss
scaling), ``fp16`` (autocast and ``torch.amp.GradScaler``; wherever torch runs both: CUDA, and
CPU, where chips without native fp16 arithmetic emulate it)."""

Schedule = Literal["gpipe", "1f1b", "interleaved-1f1b"]


class ParallelConfig(Section):
    """Layout of the trial's ranks: ``data * pipeline`` must equal the trial's devices."""

    data: int = Field(
        1,
        ge=1,
        description="Data-parallel replicas (DDP across the data axis); not given, a function "
        "trial's resources.devices / pipeline",
    )
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


class CommConfig(Section):
    """How DDP averages gradients across the data axis."""

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


class SyncConfig(Section):
    """How data-parallel ranks combine their gradients (see :mod:`hyperfleet.trials.async_ps`)."""

    mode: Literal["allreduce", "async-ps"] = Field(
        "allreduce", description="allreduce (DDP) or async-ps (rank 0 serves parameters)"
    )
    staleness: int | None = Field(
        4, ge=0, description="async-ps: updates a worker may fall behind before it re-pulls"
    )


#: URL schemes of object stores a replica may name, each served by its fsspec package
#: (``s3fs``: S3 and compatible stores such as MinIO; ``gcsfs``; ``adlfs``)
OBJECT_STORE_SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss")


#: an object store replica's default seconds to connect, and to wait for an answer, per attempt
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 20.0


def replica_is_remote(location: str | os.PathLike[str]) -> bool:
    """Whether ``location`` names an object store (``s3://bucket/prefix``) rather than a
    directory (a plain path or a ``file://`` URI)."""
    return urlparse(os.fspath(location)).scheme.lower() in OBJECT_STORE_SCHEMES


def replica_path(location: str | os.PathLike[str]) -> Path:
    """The directory a replica location names: a plain path or a ``file://`` URI."""
    text = os.fspath(location)
    parsed = urlparse(text)
    if parsed.scheme in ("", "file") or len(parsed.scheme) == 1:  # 1 letter: a Windows drive
        if parsed.scheme == "file":
            if parsed.netloc not in ("", "localhost"):
                raise ValueError(f"file URI with a host is not supported: {text!r}")
            return Path(unquote(parsed.path))
        return Path(text)
    raise ValueError(
        f"expected a directory, a file:// URI or an object store URL "
        f"({', '.join(s + '://' for s in OBJECT_STORE_SCHEMES)}), got scheme {parsed.scheme!r}"
    )


def check_replica(location: str) -> None:
    """Raise ``ValueError`` (one line, never echoing a secret) unless ``location`` is a usable
    replica: a directory, a ``file://`` URI, or an object store URL with a bucket, no
    credentials in it (they come from the store's standard environment or files, e.g.
    ``AWS_ACCESS_KEY_ID`` or ``~/.aws/credentials``) and its fsspec package installed."""
    if not replica_is_remote(location):
        replica_path(location)
        return
    parsed = urlparse(location)
    if "@" in parsed.netloc or parsed.query or parsed.fragment or "?" in location:
        # user-info or a query (?key=...&secret=...): either would reach the database,
        # spec.json, MLflow and the object keys; a URL names only the bucket and prefix
        raise ValueError(
            "credentials in the URL are refused (no user-info, query or fragment): give them "
            "through the store's standard environment or files (AWS_ACCESS_KEY_ID / "
            "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws) and name only scheme://bucket/prefix"
        )
    if not parsed.netloc:
        raise ValueError(f"{location!r} names no bucket; expected {parsed.scheme}://bucket/prefix")
    import importlib.util

    from fsspec.registry import known_implementations

    known = known_implementations.get(parsed.scheme.lower(), {})
    module = str(known.get("class", "")).split(".")[0]
    if not module or importlib.util.find_spec(module) is None:
        hint = known.get("err") or f"install the fsspec package for {parsed.scheme}://"
        extra = " (pip install 'hyperfleet[s3]')" if module == "s3fs" else ""
        raise ValueError(
            f"{parsed.scheme}:// needs the {module or 'fsspec'} package: {hint}{extra}"
        )


def replica_join(location: str, name: str) -> str:
    """``location``/``name``: a URL stays a URL, a directory a path."""
    if replica_is_remote(location):
        return f"{location.rstrip('/')}/{name}"
    return str(replica_path(location) / name)


class CheckpointConfig(Section):
    """Where and how often a trial keeps checkpoints (see :mod:`hyperfleet.trials.checkpoint`)."""

    every: int | None = Field(None, ge=1, description="steps between checkpoints")
    keep: int = Field(2, ge=1, description="checkpoints kept (newest), in each location")
    replica: str | None = Field(
        None,
        description="second location: a directory, a file:// URI or an object store URL "
        "(s3://bucket/prefix, gs://, az://; uploaded in the background)",
    )

    connect_timeout: float = Field(
        CONNECT_TIMEOUT_S, gt=0, description="object store replica: seconds to connect, per attempt"
    )
    read_timeout: float = Field(
        READ_TIMEOUT_S, gt=0, description="object store replica: seconds to an answer, per attempt"
    )

    @field_validator("replica")
    @classmethod
    def _replica(cls, v: str | None) -> str | None:
        if v is not None:
            check_replica(v)
        return v


class MetricsConfig(Section):
    """Where a script trial's reports come from (``trial.command``; see
    :mod:`hyperfleet.platform.launcher.script.sources`: a new source is a class and a row of
    its table, and its name here)."""

    source: Literal["stdout", "mlflow", "push"] = Field(
        "stdout",
        alias="from",
        description="stdout: lines of rank 0's output carrying name=value tokens (a line with "
        "the objective is a report; step= or epoch= gives its step); mlflow: the metrics the "
        "program logs to its trial's MLflow run; push: the program reports through "
        "hyperfleet.trial() (which any source allows), the only one PBT can drive",
    )
    pattern: str | None = Field(
        None,
        description="stdout: a regular expression with named groups; a line it matches is "
        "read from its groups instead of from name=value tokens",
    )

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                compiled = re.compile(v)
            except re.error as exc:
                raise ValueError(f"not a regular expression ({exc})") from None
            if not compiled.groupindex:
                raise ValueError("give named groups, e.g. 'loss (?P<val_loss>[0-9.e+-]+)'")
        return v


class TrialConfig(Section):
    workload: str | None = Field(
        None, min_length=1, description="built-in name or 'package.module:function'"
    )
    command: list[str] | None = Field(
        None,
        min_length=1,
        description="a program to run instead of a workload, e.g. [python, train.py, "
        "'${args}']: ${args} is --name value for every param, ${name} one param's value, "
        "${trial_dir} and ${checkpoint_dir} the trial's directories",
    )
    metrics: MetricsConfig = Field(
        default_factory=MetricsConfig, description="where a command's reports come from"
    )
    code: str | None = Field(
        None,
        description="the workload function shipped by value (cloudpickle, base64), set by "
        "hyperfleet.run/submit for a function defined in __main__ or a notebook cell; then "
        "workload only names it ('__main__:fn') and no module is imported",
    )
    code_hash: str | None = Field(
        None,
        description="fingerprint of the workload function's code, set by hyperfleet.run/submit "
        "for a function; a later run of the sweep with other code is refused unless it says "
        "resume=True or overwrite=True",
    )
    params: dict[str, Any] = Field(default_factory=dict, description="fixed workload params")
    steps: int | None = Field(
        None,
        ge=1,
        description="training steps (ctx.max_steps); a script trial's program may decide its "
        "own length and leave it out, unless PBT or ${steps} in its command needs it",
    )
    eval_every: int = Field(50, ge=1, description="steps between evaluations/reports")
    resources: Resources = Field(default_factory=Resources)
    parallel: ParallelConfig = Field(default_factory=ParallelConfig)
    precision: Precision = Field("fp32", description="fp32 | bf16 | fp16 (autocast)")
    grad_accum: int = Field(1, ge=1, description="micro-batches accumulated per optimizer step")
    grad_clip: float | None = Field(None, gt=0, description="clip the gradient norm to this")
    comm: CommConfig = Field(default_factory=CommConfig)
    sync: SyncConfig = Field(default_factory=SyncConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    timeout: Seconds | None = Field(
        None, gt=0, description="a launch of a trial running longer is stopped and FAIL (90s, 2h)"
    )
    reuse: bool = Field(
        True,
        description="run this trial in a warm process group left by an earlier trial of the "
        "same devices and layout (torch, the process group and the workload's module already "
        "loaded); false: fresh processes for every trial, for workloads that keep state in "
        "module globals, threads or native libraries that outlive a trial",
    )

    resizable: bool = Field(
        False,
        description="a script trial's program resumes at another size (from ${checkpoint_dir} "
        "at any WORLD_SIZE): what resources.devices: {min, max} needs; a workload declares "
        "it in hyperfleet_supports instead",
    )

    @model_validator(mode="before")
    @classmethod
    def _data_parallel_by_default(cls, data: Any) -> Any:
        """A function trial's ``resources.devices: N`` without ``parallel.data`` is
        ``parallel.data: N / parallel.pipeline``: its devices are data-parallel replicas unless
        the file says otherwise (a layout it gives is kept, and checked)."""
        if not isinstance(data, dict) or data.get("workload") is None:
            return data
        parallel, resources = data.get("parallel", {}), data.get("resources", {})
        if not isinstance(parallel, dict) or "data" in parallel:
            return data
        if isinstance(resources, Resources):
            devices: Any = resources.devices
        else:
            devices = resources.get("devices", 1) if isinstance(resources, dict) else None
        if isinstance(devices, dict):  # an elastic trial: its layout at its first size
            devices = devices.get("min")
        pipeline = parallel.get("pipeline", 1)
        if not (isinstance(devices, int) and isinstance(pipeline, int)) or pipeline < 1:
            return data  # left to the fields' own checks
        if devices > 1 and devices % pipeline == 0:
            return {**data, "parallel": {**parallel, "data": devices // pipeline}}
        return data

    @model_validator(mode="after")
    def _one_program(self) -> TrialConfig:
        if (self.workload is None) == (self.command is None):
            raise ValueError(
                "give exactly one of workload (a function main(ctx)) and command (a program "
                "as a list, e.g. [python, train.py, '${args}'])"
            )
        return self

    @property
    def length(self) -> int:
        """``steps``, or, for a script trial that leaves them out, the largest step a report
        may carry (the program ends when it is done)."""
        return MAX_STEP if self.steps is None else self.steps

    @property
    def entry(self) -> str:
        """The workload of a function trial (a script trial has none: an assertion)."""
        assert self.workload is not None, "a script trial (trial.command) has no workload"
        return self.workload
