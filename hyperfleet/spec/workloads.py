"""The workload catalogue: built-in names and ``package.module:function`` references.

A workload declares what the control plane checks before any process starts, so that validation
never needs to know a workload by name:

* its **parameters** (name -> default), so that a sweep naming an unknown one fails at
  validation. A custom workload declares them as a ``hyperfleet_params`` dict attribute on its
  function (or in its module); without it, any names are accepted.
* a **search space to start from** and its trial length (``space``, ``steps``: what
  ``hyperfleet init`` writes for it; built-ins only);
* what it **supports** (:class:`WorkloadSupports`): whether it has a pipeline form and how many
  layers its flat layer list has for given params (a layout with more stages than layers is
  refused), whether it runs the asynchronous parameter-server loop (``sync.mode: async-ps``),
  and whether its ``batch_size`` is the global batch of one optimizer step, split over data
  replicas x ``grad_accum`` x pipeline micro-batches (a batch that doesn't divide is refused),
  and the **metrics** its reports carry (an objective it does not report is refused at
  validation, with the closest name). A custom workload declares them as a
  ``hyperfleet_supports`` attribute on its function (or in its module), a dict with any of the
  keys ``pipeline`` (bool), ``pipeline_layers`` (an int, or a function of the merged params
  returning one; implies ``pipeline``), ``async_ps`` (bool), ``global_batch`` (bool),
  ``resizable`` (bool: its state goes through ``ctx.state``/``ctx.restore``, so it resumes at
  another size and may be an elastic trial) and ``metrics`` (a list of names), or a
  :class:`WorkloadSupports`::

      main.hyperfleet_supports = {"pipeline_layers": lambda p: p["n_layer"] + 2,
                                  "metrics": ["loss", "val_loss"]}

  Undeclared: no async-ps, and neither the pipeline form, the batch split nor the objective
  is checked (a trial whose first report lacks the objective still fails at that report).

Built-ins declare both here, torch-free, since the control plane reads them.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hyperfleet.errors import ConfigError

LayerCount = Callable[[Mapping[str, Any]], int]
"""The length of a workload's flat layer list (what ``ctx.pipeline`` splits) for its params."""


@dataclass(frozen=True)
class WorkloadSupports:
    """What a workload runs beyond one data-parallel loop (see the module docstring)."""

    pipeline: bool | None = None
    """Has a pipeline form (``ctx.pipeline``); None: not declared, so not checked."""
    pipeline_layers: LayerCount | None = None
    """Layers of the flat list for the merged params (at most one stage per layer)."""
    async_ps: bool = False
    """Runs the parameter-server loop of ``sync.mode: async-ps`` (ranks 1.. push gradients)."""
    global_batch: bool = False
    """``params.batch_size`` is split over data x grad_accum x micro-batches: it must divide."""
    resizable: bool = False
    """Resumes exactly at another number of devices: its whole state goes through
    ``ctx.state``/``ctx.restore`` (saved at any size, loaded at any size), which an elastic
    trial (``trial.resources.devices: {min, max}``) needs."""
    metrics: frozenset[str] | None = None
    """Every metric name its reports may carry (one report may carry fewer: ``loss_scale``
    with fp16 only); None: not declared, so an objective is not checked against it."""

    def __post_init__(self) -> None:
        if self.pipeline is False and self.pipeline_layers is not None:
            raise ValueError("pipeline_layers given with pipeline False; drop one of them")
        if self.metrics is not None and not isinstance(self.metrics, frozenset):
            object.__setattr__(self, "metrics", frozenset(self.metrics))  # a list declared

    @property
    def has_pipeline(self) -> bool | None:
        return True if self.pipeline_layers is not None else self.pipeline


def _gpt_layers(params: Mapping[str, Any]) -> int:
    """The embedding, ``n_layer`` transformer blocks and the head."""
    return int(params["n_layer"]) + 2


@dataclass(frozen=True)
class WorkloadInfo:
    entry: str  # "package.module:function"
    params: Mapping[str, Any] | None = None  # name -> default; None: not declared
    doc: Mapping[str, str] = field(default_factory=dict)
    supports: WorkloadSupports = field(default_factory=WorkloadSupports)
    space: Mapping[str, Any] | None = None  # a sweep's space over its main hyperparameters
    steps: int | None = None  # a trial's length for that space


DEFAULT_WORKLOAD = "digits"  # what ``hyperfleet init`` writes a sweep for unless told
# what ``ctx.throughput``'s meter and ``ctx.precision_metrics`` (fp16 only) add to a report
_THROUGHPUT = ("samples_per_s", "step_time_s")
_FP16 = ("loss_scale", "skipped_steps")
_LR = {"type": "float", "low": 1.0e-4, "high": 1.0e-1, "log": True}
_DECAY = {"type": "float", "low": 1.0e-6, "high": 1.0e-1, "log": True}

BUILTIN: dict[str, WorkloadInfo] = {
    "digits": WorkloadInfo(
        entry="hyperfleet.trials.workloads.digits:main",
        params={
            "lr": 1e-2,
            "hidden": 64,
            "act": "relu",
            "batch_size": 64,
            "weight_decay": 0.0,
            "seed": 0,
        },
        doc={
            "lr": "Adam learning rate",
            "hidden": "width of the two hidden layers",
            "act": "activation: relu | gelu | tanh",
            "batch_size": "rows per optimizer step over all data replicas and grad_accum "
            "micro-batches; with sync async-ps, rows per worker push",
            "weight_decay": "AdamW weight decay",
            "seed": "seed of the initialisation, the data split and the batch order",
        },
        supports=WorkloadSupports(
            pipeline=False,
            async_ps=True,
            global_batch=True,
            resizable=True,
            metrics=frozenset({"loss", "val_loss", "val_accuracy", *_THROUGHPUT, *_FP16}),
        ),
        space={
            "lr": _LR,
            "hidden": {"type": "int", "low": 16, "high": 256, "log": True},
            "weight_decay": _DECAY,
            "act": {"type": "categorical", "choices": ["relu", "gelu", "tanh"]},
        },
        steps=300,
    ),
    "charlm": WorkloadInfo(
        entry="hyperfleet.trials.workloads.charlm:main",
        params={
            "lr": 3e-3,
            "batch_size": 16,
            "seq_len": 64,
            "n_layer": 2,
            "n_head": 2,
            "n_embd": 64,
            "dropout": 0.0,
            "weight_decay": 0.0,
            "seed": 0,
            "corpus": "",
            "corpus_bytes": 4_000_000,
            "eval_batches": 8,
        },
        doc={
            "lr": "AdamW learning rate",
            "batch_size": "sequences per optimizer step over all data replicas and "
            "grad_accum micro-batches (a multiple of parallel.data * grad_accum)",
            "seq_len": "context length in bytes",
            "n_layer": "transformer blocks",
            "n_head": "attention heads",
            "n_embd": "embedding width",
            "dropout": "dropout probability",
            "weight_decay": "AdamW weight decay",
            "seed": "seed of the initialisation and the batch order",
            "corpus": "directory of *.py text files; empty: the Python standard library",
            "corpus_bytes": "bytes of the corpus to use",
            "eval_batches": "held-out windows per evaluation, in units of batch_size",
        },
        supports=WorkloadSupports(
            pipeline_layers=_gpt_layers,
            global_batch=True,
            resizable=True,
            # tokens_per_s with every report, mfu on CUDA only
            metrics=frozenset({"loss", "val_loss", "tokens_per_s", "mfu", *_THROUGHPUT, *_FP16}),
        ),
        space={
            "lr": {**_LR, "low": 3.0e-4, "high": 3.0e-2},
            "n_embd": {"type": "categorical", "choices": [32, 64, 128]},
            "dropout": {"type": "float", "low": 0.0, "high": 0.3},
            "weight_decay": _DECAY,
        },
        steps=150,
    ),
}


def resolve_entry(workload: str) -> str:
    if workload in BUILTIN:
        return BUILTIN[workload].entry
    return workload


def _declared(fn: Callable[..., Any], name: str) -> Any:
    """The attribute ``name`` of the workload function, or else of its module (None)."""
    declared = getattr(fn, name, None)
    if declared is None:
        try:
            module = importlib.import_module(fn.__module__)
        except ImportError:  # shipped by value (``trial.code``): its module stayed with the caller
            return None
        declared = getattr(module, name, None)
    return declared


def declared_params(
    workload: str | None, fn: Callable[..., Any] | None = None
) -> Mapping[str, Any] | None:
    if workload in BUILTIN:
        return BUILTIN[workload].params
    if fn is None:
        return None
    declared: Mapping[str, Any] | None = _declared(fn, "hyperfleet_params")
    return declared


def workload_supports(
    workload: str | None, fn: Callable[..., Any] | None = None
) -> WorkloadSupports:
    """What the workload declares it supports (:class:`WorkloadSupports`; undeclared: defaults).

    ``ConfigError`` naming ``trial.workload`` when a custom declaration is malformed.
    """
    if workload in BUILTIN:
        return BUILTIN[workload].supports
    if fn is None:
        return WorkloadSupports()
    name = workload if workload is not None else getattr(fn, "__name__", "the shipped function")
    return parse_supports(_declared(fn, "hyperfleet_supports"), name)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_names(value: Any) -> bool:
    names = isinstance(value, (list, tuple, set, frozenset)) and len(value) > 0
    return names and all(isinstance(v, str) and v for v in value)


def _is_layers(value: Any) -> bool:
    count = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    return count or callable(value)


_EXPECTED: dict[str, tuple[Callable[[Any], bool], str]] = {
    "pipeline": (_is_bool, "True or False"),
    "pipeline_layers": (_is_layers, "an int >= 1 or a function of the params returning one"),
    "async_ps": (_is_bool, "True or False"),
    "global_batch": (_is_bool, "True or False"),
    "resizable": (_is_bool, "True or False"),
    "metrics": (_is_names, "a non-empty list of metric names (strings)"),
}
assert set(_EXPECTED) == {f.name for f in fields(WorkloadSupports)}


def parse_supports(declared: Any, workload: str) -> WorkloadSupports:
    """A ``hyperfleet_supports`` declaration (None, a dict or a :class:`WorkloadSupports`), checked;
    ``ConfigError`` naming ``trial.workload`` when it is malformed."""
    where = f"trial.workload: hyperfleet_supports of {workload!r}"
    if declared is None:
        return WorkloadSupports()
    if isinstance(declared, WorkloadSupports):
        return declared
    keys = ", ".join(_EXPECTED)
    if not isinstance(declared, Mapping):
        raise ConfigError(
            f"{where} is a {type(declared).__name__}; expected a dict with keys from {keys}"
        )
    for key, value in declared.items():
        if key not in _EXPECTED:
            raise ConfigError(f"{where} has unknown key {key!r}; expected one of {keys}")
        check, expected = _EXPECTED[key]
        if not check(value):
            raise ConfigError(f"{where}: {key} = {value!r}; expected {expected}")
    layers = declared.get("pipeline_layers")
    if layers is not None and declared.get("pipeline") is False:
        raise ConfigError(f"{where}: pipeline_layers given with pipeline False; drop one of them")
    if isinstance(layers, int):
        declared = {**declared, "pipeline_layers": lambda _params: layers}
    return WorkloadSupports(**declared)


def unpickle_workload(code: str) -> Callable[..., Any]:
    """The workload function shipped by value in ``trial.code`` (base64 of its cloudpickle
    bytes: a function defined in ``__main__`` or a notebook cell, with what it closes over);
    ``ConfigError`` naming ``trial.code`` if this interpreter can't rebuild it."""
    import base64
    import pickle

    try:
        fn = pickle.loads(base64.b64decode(code.encode(), validate=True))
    except Exception as exc:  # noqa: BLE001 - a missing module, a version skew, bad base64
        raise ConfigError(
            f"trial.code: cannot unpickle the shipped workload ({type(exc).__name__}: {exc}); "
            f"run trials with the Python and packages it was defined with"
        ) from None
    if not callable(fn):
        kind = type(fn).__name__
        raise ConfigError(f"trial.code: the shipped workload is a {kind}, not a function")
    return fn  # type: ignore[no-any-return]


def add_import_path(*folders: str | Path) -> None:
    """Put ``folders`` (in this order) at the front of this process's import path and of
    ``PYTHONPATH``, which the processes it starts (a sweep's trials) inherit, each once: a
    workload ``module:function`` in a sweep file's directory or in the current one is found
    without the user setting ``PYTHONPATH`` (what ``hyperfleet`` does for the file it is
    given and the directory it runs in)."""
    paths = [str(Path(f).resolve()) for f in folders]
    for path in reversed(paths):
        if path not in sys.path:
            sys.path.insert(0, path)
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    added = [p for p in paths if p not in inherited]
    if added:
        os.environ["PYTHONPATH"] = os.pathsep.join([*added, *inherited])


def load_workload(workload: str, code: str | None = None) -> Callable[..., Any]:
    """The workload function: unpickled from ``code`` when the sweep shipped it by value, else
    imported; ``ConfigError`` naming ``trial.workload`` (or ``trial.code``) if it can't."""
    if code is not None:
        return unpickle_workload(code)
    entry = resolve_entry(workload)
    if ":" not in entry:
        known = ", ".join(sorted(BUILTIN))
        raise ConfigError(
            f"trial.workload: unknown workload {workload!r}; expected one of {known} "
            f"or 'package.module:function'"
        )
    module_name, _, attr = entry.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's to fix
        raise ConfigError(
            f"trial.workload: cannot import module {module_name!r} "
            f"({type(exc).__name__}: {exc}); check the name (the sweep file's directory, the "
            f"current one and PYTHONPATH are searched)"
        ) from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(
            f"trial.workload: module {module_name!r} has no function {attr!r}; "
            f"expected 'package.module:function'"
        )
    return fn


def merged_params(
    workload: str | None,
    fixed: Mapping[str, Any],
    sampled: Mapping[str, Any],
    fn: Any = None,
    searched: Collection[str] = (),
) -> dict[str, Any]:
    """Defaults, overridden by fixed params, overridden by sampled ones. A default of a name
    in ``searched`` (the sweep's space) is left out: a trial that did not sample it took
    another branch of a conditional space, and has no such param."""
    declared = declared_params(workload, fn) or {}
    params = {k: v for k, v in declared.items() if k not in searched}
    params.update(fixed)
    params.update(sampled)
    return params
