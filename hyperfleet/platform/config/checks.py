"""Semantic checks of a structurally valid sweep: what pydantic can't see field by field.

Each check returns one line per problem, naming the field path, the value and the fix:
the scheduler against the budget and objectives, the searched system knobs
(:mod:`hyperfleet.platform.config.knobs`), the devices against the parallel layout, precision
and communication against the backend, the batch against its split, and the params against
what the workload declares. A sampled combination that breaks a layout rule is caught again
by :func:`layout_problems` before its launch and recorded as a FAIL with the reason.
"""

from __future__ import annotations

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config.knobs import KNOB_PREFIX, knob_problems
from hyperfleet.platform.config.model import SweepConfig
from hyperfleet.platform.pool import count_gpus
from hyperfleet.platform.probe import fp16_problem
from hyperfleet.platform.schedulers.mutation import _check_initial
from hyperfleet.spec.layout import validate_comm, validate_layout
from hyperfleet.spec.trial import TrialConfig
from hyperfleet.trials.workloads.registry import BUILTIN, declared_params, load_workload


def _workload_problems(cfg: SweepConfig) -> list[str]:
    trial = cfg.trial
    fn = None
    if trial.workload not in BUILTIN:
        try:
            fn = load_workload(trial.workload)
        except ConfigError as exc:
            return exc.problems
    known = declared_params(trial.workload, fn)
    searched = [n for n in cfg.space if not n.startswith(KNOB_PREFIX)]
    problems = [
        f"trial.params.{name}: also in space; a parameter is either fixed or searched"
        for name in trial.params
        if name in cfg.space
    ]
    if known is None:
        return problems
    expected = ", ".join(sorted(known))
    for where, names in (("trial.params", list(trial.params)), ("space", searched)):
        problems += [
            f"{where}.{name}: unknown parameter of workload {trial.workload!r}; "
            f"expected one of {expected}"
            for name in names
            if name not in known
        ]
    return problems


def layout_problems(cfg: SweepConfig, trial: TrialConfig | None = None) -> list[str]:
    """Devices vs the parallel layout, precision vs the backend, async-ps constraints."""
    t = trial or cfg.trial
    devices = t.resources.devices
    if devices == 0:
        if t.sync.mode == "async-ps":
            return [
                "trial.resources.devices: 0 runs the trial in-process, which has no parameter "
                "server; give devices >= 2 for sync.mode async-ps or use allreduce"
            ]
        if t.parallel.data * t.parallel.pipeline != 1:
            return [
                "trial.resources.devices: 0 runs the trial in-process, which has no parallel "
                "layout; set parallel.data and parallel.pipeline to 1 or give devices"
            ]
        return []
    backend = "nccl" if count_gpus() else "gloo"
    n_layers = None
    if t.workload == "charlm":
        n_layers = int({**(BUILTIN["charlm"].params or {}), **t.params}["n_layer"]) + 2
    problems = [
        f"trial.{line}"  # the parallel module names fields relative to the trial section
        for line in validate_layout(
            devices,
            t.parallel,
            t.precision,
            n_layers,
            backend,
            grad_accum=t.grad_accum,
            fp16_check=fp16_problem,
        )
        + validate_comm(t.comm, t.parallel, backend)
    ]
    if "batch_size" not in cfg.space:  # a searched batch size is checked when it is launched
        problems += _batch_problems(t)
    if t.sync.mode == "async-ps":
        if devices < 2 or t.parallel.pipeline != 1:
            problems.append(
                "trial.sync.mode: async-ps needs 1 server + >= 1 worker (devices >= 2) and no "
                "pipeline; add devices or use allreduce"
            )
        if t.workload != "digits":
            problems.append(
                f"trial.sync.mode: async-ps is built into the digits workload, not "
                f"{t.workload!r}; use allreduce"
            )
        problems += _async_ps_problems(t)
    return problems


def _async_ps_problems(t: TrialConfig) -> list[str]:
    """Options of the all-reduce step that the parameter server's RPC backend doesn't have."""
    problems = []
    if t.precision == "fp16":
        problems.append(
            "trial.precision: fp16 is not supported on backend 'rpc' (sync.mode async-ps): "
            "workers push gradients independently, so no overflow verdict can be shared "
            "before a step; use precision: bf16 or fp32, or sync.mode: allreduce"
        )
    if t.grad_accum > 1:
        problems.append(
            f"trial.grad_accum: {t.grad_accum} with sync.mode async-ps, where every push is "
            f"one step; raise params.batch_size instead or use sync.mode: allreduce"
        )
    if t.grad_clip is not None:
        problems.append(
            "trial.grad_clip: not applied by the async-ps parameter server; remove it or use "
            "sync.mode: allreduce"
        )
    if t.comm.hook != "allreduce":
        problems.append(
            f"trial.comm.hook: {t.comm.hook} applies to DDP's all-reduce, which async-ps "
            f"doesn't use (gradients go to the server over RPC); use hook: allreduce"
        )
    return problems


def _batch_problems(t: TrialConfig) -> list[str]:
    """Built-in workloads split their global batch over data replicas, accumulation steps
    and pipeline micro-batches: it must divide evenly."""
    if t.workload not in BUILTIN or t.sync.mode == "async-ps":
        return []
    batch = int({**(BUILTIN[t.workload].params or {}), **t.params}["batch_size"])
    if t.workload == "digits" and t.parallel.pipeline > 1:
        return ["trial.parallel.pipeline: digits has no pipeline form; use parallel.data"]
    parts = t.parallel.data * t.grad_accum
    if batch % parts:
        return [
            f"trial.params.batch_size: {batch} is not divisible by parallel.data x grad_accum "
            f"= {parts}; use a multiple of {parts}"
        ]
    micro = t.parallel.n_microbatches if t.parallel.pipeline > 1 else 1
    if (batch // t.parallel.data) % micro:
        return [
            f"trial.params.batch_size: {batch // t.parallel.data} per data replica is not "
            f"divisible by parallel.microbatches = {micro}; use a multiple of "
            f"{micro * t.parallel.data}"
        ]
    return []


def _scheduler_problems(cfg: SweepConfig) -> list[str]:
    problems: list[str] = []
    budget = cfg.budget
    if cfg.is_population:
        population = cfg.scheduler.population
        if budget.trials is not None and budget.trials != population:
            problems.append(
                f"budget.trials: {budget.trials} differs from scheduler.population "
                f"({population}); omit it for PBT"
            )
        if cfg.trial.checkpoint.every is not None:
            problems.append(
                "trial.checkpoint.every: PBT keeps a checkpoint at every report; remove it"
            )
        if cfg.pruner.type != "none":
            problems.append("pruner: PBT decides by itself; use pruner: {type: none}")
        if cfg.objectives is not None:
            problems.append("objectives: PBT ranks members by one objective; use objective")
        space = {n: s.model_dump() for n, s in cfg.space.items()}
        problems += _check_initial(cfg.scheduler.initial, space)
    elif budget.trials is None and budget.timeout is None:
        problems.append("budget: give trials or timeout (or both), or the sweep would never end")
    if cfg.objectives is not None and cfg.pruner.type != "none":
        problems.append("pruner: Optuna prunes single-objective sweeps only; use type: none")
    return problems


def semantic_problems(cfg: SweepConfig) -> list[str]:
    problems = _scheduler_problems(cfg) + knob_problems(cfg)
    if not problems:
        problems = layout_problems(cfg)
    return problems + _workload_problems(cfg)
