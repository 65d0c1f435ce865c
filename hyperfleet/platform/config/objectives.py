"""The sweep's objectives against the metrics its trials can report, checked at validation.

A workload that declares its metrics (``hyperfleet_supports = {"metrics": [...]}``, and every
built-in: :mod:`hyperfleet.spec.workloads`) reports no other names, so an objective it does
not declare would fail every trial at its end: it is refused here, with the closest declared
name. A script trial read through a ``trial.metrics.pattern`` reports the pattern's named
groups only. Whatever is declared, a trial whose first report lacks the objective fails at
that report (:mod:`hyperfleet.platform.recorder`), not after its last step.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from hyperfleet.platform.config.model import SweepConfig
from hyperfleet.platform.config.suggest import did_you_mean

#: a report's step, never a metric (the stdout reader's ``step=`` / ``epoch=``)
STEP_NAMES = frozenset({"step", "epoch"})


def _paths(cfg: SweepConfig) -> list[tuple[str, str]]:
    """``(field path, metric)`` of each objective."""
    if cfg.objectives is None:
        return [("objective.metric", cfg.all_objectives[0].metric)]
    return [(f"objectives.{i}.metric", o.metric) for i, o in enumerate(cfg.objectives)]


def undeclared_objectives(cfg: SweepConfig, declared: Collection[str], source: str) -> list[str]:
    """One line per objective whose metric is not in ``declared``, the metrics that
    ``source`` reports (``workload 'digits' reports``), with the closest declared name and
    all of them."""
    shown = ", ".join(sorted(declared))
    problems = []
    for path, metric in _paths(cfg):
        if metric in declared:
            continue
        hint = did_you_mean(metric, declared)
        problems.append(
            f"{path}: {metric!r} is not a metric {source}; "
            f"{hint + ' ' if hint else ''}expected one of {shown}"
        )
    return problems


def pattern_metrics(pattern: str) -> set[str]:
    """The metric names a ``trial.metrics.pattern`` can read: its named groups but the
    step's."""
    return set(re.compile(pattern).groupindex) - STEP_NAMES
