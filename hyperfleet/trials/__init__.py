"""The trial side: what runs in every trial process.

``TrialContext`` (:mod:`hyperfleet.trials.context`), the runtime that starts a workload, the
parallel layouts, precision, data loaders, full-state checkpoints and the built-in workloads.
Importing this package imports nothing; the trial side never imports ``hyperfleet.platform``
at module level (``tests/test_architecture.py``).
"""
