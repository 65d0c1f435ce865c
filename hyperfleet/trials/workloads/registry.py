"""The workload catalogue's former path, kept for workload authors who import from it.

The catalogue lives in :mod:`hyperfleet.spec.workloads`, which both the control plane and the
trial processes read; ``Capabilities`` is the former name of
:class:`~hyperfleet.spec.workloads.WorkloadSupports`.
"""

from __future__ import annotations

from hyperfleet.spec.workloads import (
    BUILTIN,
    WorkloadInfo,
    WorkloadSupports,
    declared_params,
    load_workload,
    merged_params,
    resolve_entry,
)

Capabilities = WorkloadSupports

__all__ = [
    "BUILTIN",
    "Capabilities",
    "WorkloadInfo",
    "WorkloadSupports",
    "declared_params",
    "load_workload",
    "merged_params",
    "resolve_entry",
]
