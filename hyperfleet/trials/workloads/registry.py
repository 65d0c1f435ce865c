"""Workload lookup: built-in names and ``package.module:function`` references.

A workload declares its parameters (name -> default) so that a sweep naming an unknown parameter
fails at validation, before any process starts. Built-ins declare them here, torch-free; a
custom workload may declare them as a ``hyperfleet_params`` dict attribute on its function
(without it, any names are accepted).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hyperfleet.errors import ConfigError


@dataclass(frozen=True)
class WorkloadInfo:
    entry: str  # "package.module:function"
    params: Mapping[str, Any] | None = None  # name -> default; None: not declared
    doc: Mapping[str, str] = field(default_factory=dict)


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
    ),
}


def resolve_entry(workload: str) -> str:
    if workload in BUILTIN:
        return BUILTIN[workload].entry
    return workload


def declared_params(
    workload: str, fn: Callable[..., Any] | None = None
) -> Mapping[str, Any] | None:
    if workload in BUILTIN:
        return BUILTIN[workload].params
    if fn is None:
        return None
    declared = getattr(fn, "hyperfleet_params", None)
    if declared is None:  # or at module level, beside the function
        module = importlib.import_module(fn.__module__)
        declared = getattr(module, "hyperfleet_params", None)
    return declared


def load_workload(workload: str) -> Callable[..., Any]:
    """Import the workload function; ``ConfigError`` naming ``trial.workload`` if it can't."""
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
            f"({type(exc).__name__}: {exc}); check the name and PYTHONPATH"
        ) from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(
            f"trial.workload: module {module_name!r} has no function {attr!r}; "
            f"expected 'package.module:function'"
        )
    return fn


def merged_params(
    workload: str, fixed: Mapping[str, Any], sampled: Mapping[str, Any], fn: Any = None
) -> dict[str, Any]:
    """Defaults, overridden by fixed params, overridden by sampled ones."""
    params = dict(declared_params(workload, fn) or {})
    params.update(fixed)
    params.update(sampled)
    return params
