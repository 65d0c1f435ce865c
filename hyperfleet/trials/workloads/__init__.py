"""Workloads: functions ``main(ctx)`` that train one trial.

The registry in :mod:`hyperfleet.trials.workloads.registry` names the built-in ones and their
parameters without importing torch, so the control plane can validate a sweep cheaply.
"""
