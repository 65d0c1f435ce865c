"""Workloads: functions ``main(ctx)`` that train one trial.

The catalogue in :mod:`hyperfleet.spec.workloads` names the built-in ones and their
parameters without importing torch, so the control plane can validate a sweep cheaply.
"""
