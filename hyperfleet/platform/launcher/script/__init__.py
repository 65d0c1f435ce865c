"""Script trials: a user's program run as it is, its reports read from outside.

The room's modules, in the order a trial meets them:

* :mod:`.launcher` — :class:`~.launcher.ScriptLauncher` starts
  ``python -m hyperfleet.platform.launcher.script.runner SPEC``, the *runner*, where a
  function trial's launcher starts the trial entry point: in a session of its own, with the
  trial's log as its output, as :class:`~hyperfleet.platform.launcher.torchrun.TorchrunLauncher`
  starts torchrun's agent (its handle is that one's).
* :mod:`.program` — the program itself: its command line (placeholders filled in, wrapped in
  torchrun for ``devices`` > 1 or ``nodes`` > 1: :mod:`~hyperfleet.platform.config.command`),
  its environment (the trial's MLflow run: ``MLFLOW_TRACKING_URI``, ``MLFLOW_RUN_ID``,
  ``MLFLOW_EXPERIMENT_ID``; the spec's path ``HYPERFLEET_SPEC`` for ``hyperfleet.trial()``),
  its output copied line by line to the trial's log (:mod:`.readers`: a ``\\r`` ends a line, a
  line longer than 64 KiB is cut, with a note in the log), its stop.
* :mod:`.runner` — the runner's loop: each report the trial's *metric source* reads is
  recorded as a function trial's rank 0 records it, through
  :class:`~hyperfleet.platform.recorder.RankZeroRecorder` (storage, the scheduler's decision,
  MLflow); a decision that stops the trial ends the program; the outcome is recorded.
* :mod:`.sources` — the metric sources (``trial.metrics.from``) behind one protocol,
  :class:`~.sources.MetricSource`, chosen from one table (:data:`~.sources.SOURCES`):
  ``stdout`` (rank 0's output lines), ``mlflow`` (the program's own MLflow run), ``push``
  (the program reports through ``hyperfleet.trial()``).
* :mod:`.push` — ``hyperfleet.trial()``, which runs inside the program: the program reports
  itself, and the runner reads nothing of its own.

What the runner guarantees:

1. on a PRUNE (or a stop: SUPERSEDED, SIGTERM) it ends the program: SIGTERM to its process
   group and every process of its launch, then SIGKILL after
   :data:`~.program.PRUNE_GRACE_S`, so it is gone within 2 s of the decision;
2. once the program's main process exited, it reads what is left of its output for up to
   :data:`~.program.DRAIN_S`, then ends everything the program left running: its process
   group, every process of its launch, and every descendant of the runner, which is their
   *subreaper* (:func:`~hyperfleet.platform.launcher.procs.hold_descendants`, as an in-process
   worker is), so a daemon that left the program's session (``setsid``, a double fork) is ended
   too, and a child that still holds the program's output pipe does not hold the trial;
3. the outcome is COMPLETE when the program exits 0 having reported its objective, PRUNED,
   PAUSED when the controller resized the trial at a report (the program is stopped as a
   pruned one is, the reports it printed before it ended are recorded, and the trial is
   relaunched at its new size to resume from ``${checkpoint_dir}``), else FAIL, its failure
   line the last exception in the log: the program's own (its stderr's last lines are quoted
   last, so ``RuntimeError: loss diverged`` is the trial's reason), else
   ``ScriptError:`` with the exit code, or with what its metric source looked for when no
   objective came.

This package's ``__init__`` imports nothing: ``hyperfleet.trial()`` (:mod:`.push`) runs in
the user's program and loads only what it needs.
"""
