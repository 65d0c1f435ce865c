"""The recommended sweep for a workload: what ``hyperfleet init`` writes.

``tpe`` with ``asha`` (``min_resource: auto``: a trial's first report) on warm trials, two at
a time; docs/schedulers.md, "Which scheduler", says why, from ``benchmarks/bench_anytime.py``. The
built-in workloads get the search space they declare (``WorkloadInfo.space``); another workload
(``package.module:function``) gets ``lr`` only, to edit. Its objective, ``val_loss``, is
checked against the metrics the workload declares, if it declares them (and imports here).

Its budget is a smoke run's (:data:`SMOKE_BUDGET`: a handful of trials, a few minutes): the
first run shows the workload, the stores and the search working end to end within minutes;
a real search raises ``budget.trials`` and ``budget.timeout`` in the file (or per run:
``sweep run --trials N --timeout D``).
"""

from __future__ import annotations

import re
from typing import Any

from hyperfleet.errors import ConfigError
from hyperfleet.platform.urls import local_storage, local_tracking
from hyperfleet.spec.workloads import BUILTIN, load_workload, workload_supports

#: the budget ``init`` writes: a smoke run (module docstring)
SMOKE_BUDGET = {"trials": 8, "timeout": "5m", "max_concurrent": 2}
_LR = {"type": "float", "low": 1.0e-4, "high": 1.0e-1, "log": True}
_REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
OBJECTIVE = "val_loss"  # the metric the recommended sweep minimises


def _check_objective(workload: str, metric: str) -> None:
    """``ConfigError`` when ``workload`` declares its metrics (a custom one that imports
    here: its ``hyperfleet_supports``) and ``metric`` is not one of them."""
    try:
        fn = None if workload in BUILTIN else load_workload(workload)
        declared = workload_supports(workload, fn).metrics
    except ConfigError:
        return  # not importable here, or its declaration malformed: `validate` says which
    if declared is None or metric in declared:
        return
    raise ConfigError(
        f"--workload: {workload!r} reports {', '.join(sorted(declared))} (its declared "
        f"metrics), not {metric}, the objective init writes; add {metric} to its metrics "
        f"and report it, or write objective.metric by hand"
    )


def recommended_sweep(workload: str, name: str) -> dict[str, Any]:
    """The recommended sweep file's content for ``workload`` (a built-in name or
    ``package.module:function``), named ``name``."""
    info = BUILTIN.get(workload)
    if info is not None and info.space is not None:
        space, steps = dict(info.space), info.steps or 300
    elif _REFERENCE.match(workload):
        space, steps = {"lr": _LR}, 300
    else:
        known = ", ".join(sorted(BUILTIN))
        raise ConfigError(f"--workload: {workload!r} is not {known} or package.module:function")
    _check_objective(workload, OBJECTIVE)
    return {
        "name": name,
        "objective": {"metric": OBJECTIVE, "mode": "min"},
        "scheduler": {"type": "tpe", "seed": 0},
        "pruner": {"type": "asha"},
        "budget": dict(SMOKE_BUDGET),
        "space": space,
        "trial": {"workload": workload, "steps": steps, "eval_every": max(1, steps // 12),
                  "resources": {"devices": 1}},
        "storage": local_storage(),
        "tracking": {"uri": local_tracking(), "experiment": name},
    }  # fmt: skip
