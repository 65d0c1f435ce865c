"""What a contributor or plugin author tests against, as Optuna's ``optuna.testing`` is for
samplers and storages. Importing this package imports nothing else; each module is imported
on its own:

* ``sweeps`` — ``minimal_sweep(**overrides)``, the smallest valid sweep config as a dict, with
  the test's changes merged in (nested mappings merge; ``space`` and ``scheduler`` replace);
  ``digits_sweep``, the same on the built-in ``digits`` workload; ``deep_update``, the merge
  itself; and ``write_sweep``, a sweep written to a file with its stores under a directory
  (PyYAML; the rest needs nothing but the standard library).
* ``workloads`` — trial workloads for tests: ``quadratic`` (in-process, no torch: the workload
  of ``minimal_sweep``) and ``with_hold``, which holds a trial after a given report until the
  test creates a file, so that a test acts on a trial known to be mid-run.
* ``schedulers`` — the scheduler contract as a pytest class to subclass, ``SchedulerContract``:
  reports idempotent, decisions repeatable, requeue, failures, the budget, a scheduler rebuilt
  from storage. Needs pytest (the ``dev`` extra).
* ``launchers`` — the launcher contract as a pytest class to subclass, ``LauncherContract``
  (with a ``launcher`` fixture of yours): a trial runs to exit 0, a trial that cannot start
  ends non-zero with its reason in the log, ``stop`` and ``kill`` end the trial and its
  children, ``wait`` keeps its timeout; ``launcher_workloads`` holds its torch-free trials.
  Every built-in launcher passes it (``tests/launcher/test_contract.py``).
* ``controller`` — ``Sim``: the controller over simulated trials on a virtual clock, with
  real storage and schedulers and no processes, for tests of controller rules in milliseconds.
* ``workers`` — ``worker_command`` (a ``hyperfleet worker`` command line with the usual flags
  as keywords), ``start_worker`` (a real worker process, its output in a log file) and
  ``running_worker`` (the same as a context manager that stops it as an operator does).
* ``postgres`` — ``throwaway_server`` (a PostgreSQL server of its own on loopback, removed on
  exit; needs Debian's ``postgresql`` package) and ``new_database`` (a fresh database on it).
* ``functions`` — known test functions for samplers (Branin, Hartmann-6, six-hump camel) and
  ``run_concurrent``, which drives an Optuna sampler on one with trials in flight.

Testing your own scheduler, in a test module of yours (``pytest`` runs its seven tests)::

    from hyperfleet.testing.schedulers import SchedulerContract

    class TestMyScheduler(SchedulerContract):
        def build(self, cfg, storage, create=False):
            return MyScheduler(cfg, storage, create=create)
"""
