"""Semantic checks of a structurally valid sweep: what pydantic can't see field by field.

Each check returns one line per problem, naming the field path, the value and the fix:
the scheduler against the budget, objectives and space (what its sampler would refuse once
the sweep is stored: a grid over a float without step), the searched system knobs
(:mod:`hyperfleet.platform.config.knobs`), the devices against the parallel layout, precision
and communication against the backend, the batch against its split, and the params and
objectives against what the workload declares (:mod:`.objectives`). A sampled combination
that breaks a layout rule is caught again by :func:`layout_problems` before its launch and
recorded as a FAIL with the reason.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config.command import command_problems
from hyperfleet.platform.config.elastic import elastic_layout_problems, resizable_problems
from hyperfleet.platform.config.knobs import KNOB_PREFIX, knob_problems
from hyperfleet.platform.config.model import SweepConfig
from hyperfleet.platform.config.objectives import pattern_metrics, undeclared_objectives
from hyperfleet.platform.config.pbt import check_initial
from hyperfleet.platform.config.probe import fp16_problem
from hyperfleet.platform.config.schedulers import CONDITIONAL_TYPES, MULTI_OBJECTIVE_TYPES
from hyperfleet.platform.config.space import (
    CategoricalParam,
    grid_problems,
    is_conditional,
    space_problems,
)
from hyperfleet.platform.config.suggest import did_you_mean
from hyperfleet.platform.config.values import control_problem, key_problem
from hyperfleet.platform.pool import count_gpus
from hyperfleet.spec.layout import validate_comm, validate_layout
from hyperfleet.spec.trial import TrialConfig
from hyperfleet.spec.workloads import (
    BUILTIN,
    WorkloadSupports,
    declared_params,
    load_workload,
    merged_params,
    workload_supports,
)


def _entry_problem(fn: Any, workload: str) -> str | None:
    """Why the imported ``fn`` can't be a workload: it must be a Python function (or an object
    with a Python ``__call__``) that takes one argument, the trial context. A builtin such as
    ``os:system`` or a class would otherwise run, or fail, with whatever it is handed."""
    plain = inspect.isfunction(fn) or inspect.ismethod(fn)
    if not plain and (isinstance(fn, type) or not inspect.isfunction(type(fn).__call__)):
        kind = "a class" if isinstance(fn, type) else f"a {type(fn).__name__}"
        kind = "a builtin" if inspect.isbuiltin(fn) else kind
        return (
            f"trial.workload: {workload!r} is {kind}, not a Python function; point it at "
            f"def main(ctx) in your module"
        )
    try:
        inspect.signature(fn).bind(None)
    except (TypeError, ValueError):
        return (
            f"trial.workload: {workload!r} does not take one argument (the trial context); "
            f"point it at def main(ctx) in your module"
        )
    return None


def _workload_problems(cfg: SweepConfig) -> list[str]:
    trial = cfg.trial
    fn = None
    problems: list[str] = []
    if trial.workload not in BUILTIN:
        try:
            fn = load_workload(trial.entry, trial.code)
        except ConfigError as exc:
            hint = "" if ":" in trial.entry else did_you_mean(trial.entry, BUILTIN)
            return [f"{exc.problems[0]}; {hint}", *exc.problems[1:]] if hint else exc.problems
        entry = _entry_problem(fn, trial.entry)
        if entry is not None:
            return [entry]
    try:
        supports = workload_supports(trial.workload, fn)
        metrics = supports.metrics
        problems += resizable_problems(trial, supports)
    except ConfigError as exc:
        metrics, problems = None, problems + exc.problems
    if metrics is not None:
        problems += undeclared_objectives(cfg, metrics, f"workload {trial.entry!r} reports")
    known = declared_params(trial.workload, fn)
    searched = [n for n in cfg.dims if not n.startswith(KNOB_PREFIX)]
    problems += [
        f"trial.params.{name}: also in space; a parameter is either fixed or searched"
        for name in trial.params
        if name in cfg.dims
    ]
    if known is None:
        return problems
    expected = ", ".join(sorted(known))
    for where, names in (("trial.params", list(trial.params)), ("space", searched)):
        problems += [
            f"{where}.{name}: unknown parameter of workload {trial.workload!r}; "
            f"{_hint(did_you_mean(name, known))}expected one of {expected}"
            for name in names
            if name not in known
        ]
    return problems


def _hint(text: str) -> str:
    return f"{text} " if text else ""


def _declared(t: TrialConfig) -> tuple[WorkloadSupports, dict[str, Any]]:
    """What the trial's workload declares it supports, and its params over the defaults it
    declares. A workload that can't be loaded, or whose declaration is malformed, declares
    nothing here: :func:`_workload_problems` reports it."""
    try:
        fn = None if t.workload in BUILTIN else load_workload(t.entry, t.code)
        return workload_supports(t.workload, fn), merged_params(t.workload, t.params, {}, fn)
    except ConfigError:
        return WorkloadSupports(), dict(t.params)


def _in_process_problems(t: TrialConfig) -> list[str]:
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


def layout_problems(cfg: SweepConfig, trial: TrialConfig | None = None) -> list[str]:
    """Devices vs the parallel layout and the workload's pipeline form, precision vs the
    backend, the batch vs its split, async-ps constraints."""
    t = trial or cfg.trial
    if t.command is not None:  # a program's layout is its own
        return []
    if t.resources.devices == 0:
        return _in_process_problems(t)
    supports, params = _declared(t)
    backend = "nccl" if count_gpus() else "gloo"
    problems, n_layers = _pipeline_problems(t, supports, params)
    problems += [
        f"trial.{line}"  # the layout checks name fields relative to the trial section
        for line in validate_layout(
            t.resources.devices,
            t.parallel,
            t.precision,
            n_layers,
            backend,
            grad_accum=t.grad_accum,
            # async-ps refuses fp16 whatever torch can do (below): torch is not asked
            fp16_check=None if t.sync.mode == "async-ps" else fp16_problem,
        )
        + validate_comm(t.comm, t.parallel, backend)
    ]
    if "batch_size" not in cfg.dims:  # a searched batch size is checked when it is launched
        problems += _batch_problems(t, supports, params)
    else:
        params = {k: v for k, v in params.items() if k != "batch_size"}
    problems += elastic_layout_problems(t, supports, params)
    if t.sync.mode == "async-ps":
        problems += _async_ps_problems(t, supports)
    return problems


def _pipeline_problems(
    t: TrialConfig, supports: WorkloadSupports, params: Mapping[str, Any]
) -> tuple[list[str], int | None]:
    """A pipeline asked of a workload without a pipeline form; else the length of its flat
    layer list, when it declares one (None: unknown, the stage count is not checked)."""
    if t.parallel.pipeline == 1 or t.sync.mode == "async-ps":
        return [], None  # async-ps refuses any pipeline itself
    if supports.has_pipeline is False:
        return [
            f"trial.parallel.pipeline: {t.workload} has no pipeline form; use parallel.data"
        ], None
    if supports.pipeline_layers is None:
        return [], None
    try:
        return [], int(supports.pipeline_layers(params))
    except Exception as exc:  # noqa: BLE001 - the declaration is the user's to fix
        return [
            f"trial.params: the layer count of workload {t.workload!r} can't be computed "
            f"from its params ({type(exc).__name__}: {exc}); check the params it reads"
        ], None


def _async_ps_problems(t: TrialConfig, supports: WorkloadSupports) -> list[str]:
    """A workload without the parameter-server loop, a layout without a server and a worker,
    and options of the all-reduce step that the server's RPC backend doesn't have."""
    problems = []
    if t.resources.devices < 2 or t.parallel.pipeline != 1:
        problems.append(
            "trial.sync.mode: async-ps needs 1 server + >= 1 worker (devices >= 2) and no "
            "pipeline; add devices or use allreduce"
        )
    if not supports.async_ps:
        have = ", ".join(name for name, info in BUILTIN.items() if info.supports.async_ps)
        problems.append(
            f"trial.sync.mode: async-ps is built into the {have} workload, not "
            f"{t.workload!r} (a custom workload that runs it declares hyperfleet_supports = "
            f"{{'async_ps': True}}); use allreduce"
        )
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


def _batch_problems(
    t: TrialConfig, supports: WorkloadSupports, params: Mapping[str, Any]
) -> list[str]:
    """A workload whose ``batch_size`` is the global batch of one optimizer step splits it
    over data replicas, accumulation steps and pipeline micro-batches: it must divide evenly."""
    if not supports.global_batch or t.sync.mode == "async-ps":
        return []
    if t.parallel.pipeline > 1 and supports.has_pipeline is False:
        return []  # no pipeline form: reported by _pipeline_problems
    try:
        batch = int(params["batch_size"])
    except (KeyError, TypeError, ValueError):
        return []  # not declared, or not a number: the workload's own check says so
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
        problems += check_initial(cfg.scheduler.initial, space)
    else:
        problems += _sampler_problems(cfg)
        if budget.trials is None and budget.timeout is None:
            problems.append(
                "budget: give trials or timeout (or both), or the sweep would never end"
            )
    if is_conditional(cfg.space) and cfg.scheduler.type not in CONDITIONAL_TYPES:
        branched = next(
            n for n, s in cfg.space.items() if isinstance(s, CategoricalParam) and s.branches
        )
        problems.append(
            f"scheduler.type: {cfg.scheduler.type!r} searches a fixed set of parameters, but "
            f"space.{branched} has sub-spaces under its choices; use one of "
            f"{', '.join(sorted(CONDITIONAL_TYPES))}, or a flat space"
        )
    if cfg.objectives is not None and cfg.pruner.type != "none":
        problems.append("pruner: Optuna prunes single-objective sweeps only; use type: none")
    return problems


def _sampler_problems(cfg: SweepConfig) -> list[str]:
    """What the sweep's Optuna sampler would refuse when it is built (a grid over a dimension
    it cannot enumerate, several objectives for a single-objective type): found here, before
    anything is stored (``schedulers/optuna/samplers.py`` keeps the same refusals)."""
    kind = cfg.scheduler.type
    problems = grid_problems(cfg.space) if kind == "grid" else []
    if cfg.objectives is not None and kind not in MULTI_OBJECTIVE_TYPES:
        allowed = ", ".join(sorted(MULTI_OBJECTIVE_TYPES))
        problems.append(
            f"scheduler.type: {kind!r} optimises a single objective, but the sweep has "
            f"{len(cfg.objectives)} objectives; use one of {allowed}"
        )
    return problems


def _name_problems(cfg: SweepConfig) -> list[str]:
    """Fixed param names that MLflow can't key (``fixed.NAME``), a pool name with a control
    character (:mod:`hyperfleet.platform.config.values`)."""
    found = [(name, key_problem(name)) for name in cfg.trial.params]
    problems = [f"trial.params: parameter name {p}" for _, p in found if p is not None]
    pool = cfg.trial.resources.pool
    problem = None if pool is None else control_problem(pool)
    if problem is not None:
        problems.append(f"trial.resources.pool: {problem}")
    return problems


def _script_problems(cfg: SweepConfig) -> list[str]:
    """A script trial (``trial.command``): its placeholders and program
    (:mod:`hyperfleet.platform.config.command`), and what a program reporting on its
    output cannot follow (a population method's exploits and pauses)."""
    problems = [
        f"trial.params.{name}: also in space; a parameter is either fixed or searched"
        for name in cfg.trial.params
        if name in cfg.space
    ]
    if cfg.is_population and cfg.trial.steps is None:
        problems.append(
            f"trial.steps: {cfg.scheduler.type} needs a member's length (its steps between "
            f"exploits end there); give steps"
        )
    if cfg.is_population and cfg.trial.metrics.source != "push":
        problems.append(
            f"scheduler: {cfg.scheduler.type} exploits and pauses trials, which a program "
            f"reporting on {cfg.trial.metrics.source} cannot follow; report through "
            f"hyperfleet.trial() with trial.metrics: {{from: push}}, or use trial.workload"
        )
    elif cfg.is_population and cfg.trial.resources.nodes > 1:
        problems.append(
            f"trial.resources.nodes: a program's exploits under {cfg.scheduler.type} restart "
            f"it on one host; use nodes: 1, or trial.workload for a population across hosts"
        )
    pattern = cfg.trial.metrics.pattern
    if cfg.trial.metrics.source == "stdout" and pattern is not None:
        reads = "trial.metrics.pattern reads (its named groups)"
        problems += undeclared_objectives(cfg, pattern_metrics(pattern), reads)
    problems += resizable_problems(cfg.trial, None)
    return problems + command_problems(cfg.trial, cfg.space)


def semantic_problems(cfg: SweepConfig) -> list[str]:
    problems = (
        space_problems(cfg.space)
        + _scheduler_problems(cfg)
        + knob_problems(cfg)
        + _name_problems(cfg)
    )
    if cfg.trial.command is not None:  # the program's own layout: nothing to check here
        return problems + _script_problems(cfg)
    if cfg.trial.steps is None:
        return [*problems, "trial.steps: required for a workload function (its ctx.max_steps)"]
    if not problems:
        problems = layout_problems(cfg)
    return problems + _workload_problems(cfg)
