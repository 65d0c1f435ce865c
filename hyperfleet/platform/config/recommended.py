"""The recommended sweep for a workload: what ``hyperfleet init`` writes.

``tpe`` with ``asha`` (``min_resource: auto``: a trial's first report) on warm trials, two at
a time; the README's "Which scheduler" says why, from ``benchmarks/bench_anytime.py``. The
built-in workloads get a search space over their main hyperparameters; another workload
(``package.module:function``) gets ``lr`` only, to edit.
"""

from __future__ import annotations

import re
from typing import Any

from hyperfleet.errors import ConfigError
from hyperfleet.platform.urls import local_storage, local_tracking

_LR = {"type": "float", "low": 1.0e-4, "high": 1.0e-1, "log": True}
_DECAY = {"type": "float", "low": 1.0e-6, "high": 1.0e-1, "log": True}
#: the search space and trial length of each built-in workload
SPACES: dict[str, tuple[dict[str, Any], int]] = {
    "digits": ({"lr": _LR, "hidden": {"type": "int", "low": 16, "high": 256, "log": True},
                "weight_decay": _DECAY,
                "act": {"type": "categorical", "choices": ["relu", "gelu", "tanh"]}}, 300),
    "charlm": ({"lr": {**_LR, "low": 3.0e-4, "high": 3.0e-2}, "n_embd":
                {"type": "categorical", "choices": [32, 64, 128]},
                "dropout": {"type": "float", "low": 0.0, "high": 0.3},
                "weight_decay": _DECAY}, 150),
}  # fmt: skip
_REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def recommended_sweep(workload: str, name: str) -> dict[str, Any]:
    """The recommended sweep file's content for ``workload`` (a built-in name or
    ``package.module:function``), named ``name``."""
    if workload in SPACES:
        space, steps = SPACES[workload]
    elif _REFERENCE.match(workload):
        space, steps = {"lr": _LR}, 300
    else:
        known = ", ".join(sorted(SPACES))
        raise ConfigError(f"--workload: {workload!r} is not {known} or package.module:function")
    return {
        "name": name,
        "objective": {"metric": "val_loss", "mode": "min"},
        "scheduler": {"type": "tpe", "seed": 0},
        "pruner": {"type": "asha"},
        "budget": {"timeout": "30m", "max_concurrent": 2},
        "space": space,
        "trial": {"workload": workload, "steps": steps, "eval_every": max(1, steps // 12),
                  "resources": {"devices": 1}},
        "storage": local_storage(),
        "tracking": {"uri": local_tracking(), "experiment": name},
    }  # fmt: skip
