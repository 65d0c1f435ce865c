"""Sweep configs for tests: the smallest valid one, and the merge that changes it.

``minimal_sweep(**overrides)`` is the sweep a test starts from: one float dimension ``x`` on
``[0, 1]``, random search with seed 0, two trials two at a time, and the in-process workload
:func:`hyperfleet.testing.workloads.quadratic` (no devices, four steps, a report at each), so
that it validates and runs in well under a second a trial. A test names only what it is
about::

    minimal_sweep(name="crashy", budget={"trials": 3}, trial={"params": {"fail_first": True}})

Overrides merge into it as nested mappings (:func:`deep_update`): ``budget={"trials": 3}``
keeps ``max_concurrent``; a value that is not a mapping replaces. Two sections are replaced
whole instead of merged, because their keys belong together: ``space`` (the dimensions
given are the whole space) and ``scheduler`` (which keys a scheduler takes depends on its
``type``). The result is a plain dict, as a sweep file's YAML loads; pass it to
:func:`hyperfleet.platform.config.parse_sweep` or write it out with ``yaml.safe_dump``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hyperfleet.platform.urls import TRACKING_FILE

__all__ = [
    "DIGITS",
    "MINIMAL_SWEEP",
    "QUADRATIC",
    "api_sweep",
    "deep_update",
    "digits_sweep",
    "minimal_sweep",
    "write_sweep",
]

#: the workload of :data:`MINIMAL_SWEEP` (``(x - 0.3)^2 + 1/step``, in-process)
QUADRATIC = "hyperfleet.testing.workloads:quadratic"

MINIMAL_SWEEP: Mapping[str, Any] = {
    "name": "minimal",
    "objective": {"metric": "loss", "mode": "min"},
    "scheduler": {"type": "random", "seed": 0},
    "budget": {"trials": 2, "max_concurrent": 2},
    "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
    "trial": {
        "workload": QUADRATIC,
        "steps": 4,
        "eval_every": 1,
        "resources": {"devices": 0},
    },
}

#: sections an override replaces whole rather than merges into
REPLACED = ("space", "scheduler")


def deep_update(base: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of ``base`` with ``changes`` merged in: mappings merge key by key, any other
    value replaces (``base`` is left as it was; values from ``changes`` are not copied)."""
    out = copy.deepcopy(dict(base))
    for key, value in changes.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_update(out[key], value)
        else:
            out[key] = value
    return out


def minimal_sweep(**overrides: Any) -> dict[str, Any]:
    """:data:`MINIMAL_SWEEP` with ``overrides`` merged in (``space`` and ``scheduler``
    replaced whole); see the module docstring."""
    whole = {k: overrides.pop(k) for k in REPLACED if k in overrides}
    data = deep_update(MINIMAL_SWEEP, overrides)
    data.update(whole)
    return data


def write_sweep(data: Mapping[str, Any], directory: Path, **tracking: Any) -> Path:
    """``data`` with its stores under ``directory/runs`` (the storage ``hf.db``, the MLflow
    store ``mlflow.db`` with ``tracking``'s other keys, the trials' files), written as
    ``directory/<name>.yaml``; its path. Needs PyYAML (a dependency of hyperfleet)."""
    import yaml

    runs = directory / "runs"
    out = dict(data)
    out["storage"] = f"sqlite:///{runs / 'hf.db'}"
    out["tracking"] = {"uri": f"sqlite:///{runs / TRACKING_FILE}", **tracking}
    out["workdir"] = str(runs)
    path = directory / f"{out['name']}.yaml"
    path.write_text(yaml.safe_dump(out, sort_keys=False))
    return path


#: what :func:`digits_sweep` changes in :data:`MINIMAL_SWEEP`: the built-in ``digits``
#: workload (a small MLP on scikit-learn's digits, torch) searched over its learning rate
DIGITS: Mapping[str, Any] = {
    "objective": {"metric": "val_accuracy", "mode": "max"},
    "space": {"lr": {"type": "float", "low": 3e-3, "high": 3e-2, "log": True}},
    "trial": {"workload": "digits", "params": {"batch_size": 64}, "steps": 60, "eval_every": 10},
}


def digits_sweep(**overrides: Any) -> dict[str, Any]:
    """:func:`minimal_sweep` of the built-in ``digits`` workload (:data:`DIGITS`), with
    ``overrides`` merged in as there (``space`` and ``scheduler`` replaced whole)."""
    whole = {k: overrides.pop(k) for k in REPLACED if k in overrides}
    return minimal_sweep(**{**deep_update(DIGITS, overrides), **whole})


def api_sweep(runs: Path, **overrides: Any) -> dict[str, Any]:
    """:func:`minimal_sweep` with its stores under ``runs`` (SQLite ``hf.db``, MLflow's store,
    the trials' files) and no ``trial.workload``: what a test of the Python API starts from,
    handing ``hyperfleet.run`` its own function."""
    data = minimal_sweep(
        workdir=str(runs),
        storage=f"sqlite:///{runs / 'hf.db'}",
        tracking={"uri": f"sqlite:///{runs / TRACKING_FILE}", "log_model": False},
        **overrides,
    )
    del data["trial"]["workload"]
    return data
