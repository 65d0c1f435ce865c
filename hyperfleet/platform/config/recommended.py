"""The recommended sweep for a workload: what ``hyperfleet init`` writes.

``tpe`` with ``asha`` (``min_resource: auto``: a trial's first report) on warm trials, two at
a time; docs/schedulers.md, "Which scheduler", says why, from ``benchmarks/bench_anytime.py``. The
built-in workloads get the search space they declare (``WorkloadInfo.space``); another workload
(``package.module:function``) gets ``lr`` only, to edit.

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
from hyperfleet.spec.workloads import BUILTIN

#: the budget ``init`` writes: a smoke run (module docstring)
SMOKE_BUDGET = {"trials": 8, "timeout": "5m", "max_concurrent": 2}
_LR = {"type": "float", "low": 1.0e-4, "high": 1.0e-1, "log": True}
_REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


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
    return {
        "name": name,
        "objective": {"metric": "val_loss", "mode": "min"},
        "scheduler": {"type": "tpe", "seed": 0},
        "pruner": {"type": "asha"},
        "budget": dict(SMOKE_BUDGET),
        "space": space,
        "trial": {"workload": workload, "steps": steps, "eval_every": max(1, steps // 12),
                  "resources": {"devices": 1}},
        "storage": local_storage(),
        "tracking": {"uri": local_tracking(), "experiment": name},
    }  # fmt: skip
