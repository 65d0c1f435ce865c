"""Types shared by the control plane and the trial processes: torch-free, platform-free.

``hyperfleet.spec.trial`` is the ``trial:`` section of a sweep file (layout, precision,
accumulation, communication, synchronisation, checkpoints) with the checks that need no torch;
``hyperfleet.spec.wire`` holds what travels between the two sides: the trial spec a launcher
hands to a trial, the restore point of a resumed trial and the decision after a report;
``hyperfleet.spec.workloads`` is the workload catalogue (the built-ins, what a workload declares
it supports: ``WorkloadSupports``), ``hyperfleet.spec.steps`` the check of a report's step and
``hyperfleet.spec.recorder`` the contract between the two sides: the recorder protocol, rank
0's side of a report, which the platform implements and the runtime calls.

Rule (checked by ``tests/test_architecture.py``): this package imports neither
``hyperfleet.platform`` nor ``hyperfleet.trials`` nor torch, so both sides may import it.
"""
