"""Elastic pools: workers started by a cluster's batch scheduler as the queue of trials grows,
and gone when it empties; and elastic trials, which grow and shrink within a pool.

* :mod:`.demand` — the decision, pure: the queued work of a storage's sweeps (trials waiting or
  still to be suggested, their device needs, their pool, their priority) against the live and
  pending workers gives how many jobs to submit now; start failures back off exponentially.
* :mod:`.backend` — :class:`~.backend.ClusterBackend`, all a pool knows of a cluster: list the
  pool's jobs with their states, submit one, cancel one.
* :mod:`.slurm` — the first backend: Slurm's own commands through ``subprocess``
  (``sbatch --parsable``, ``squeue -o``, ``scancel``), nothing else of Slurm's.
* :mod:`.resize` — elastic trials' policy, pure: idle devices to the best-ranked running
  elastic trials, devices back from the lowest-ranked ones when a trial waits, at most one
  resize per trial every few reports.
* :mod:`.requests` — a resize decided by a worker (:mod:`hyperfleet.platform.controller.resizing`)
  carried to the trial's rank 0 at its next report, through the trial's directory.
* :mod:`.pool` — ``hyperfleet pool slurm``: reads storage and the backend's jobs, records each
  job in ``hf_workers`` (id, state, reason), submits what the decision asks for, and repeats.

A pool talks to the cluster's tools and to storage, never to a worker's internals: the jobs
run ``hyperfleet worker --exit-when-idle``, which registers itself with its job's id.

A new cluster (Kubernetes Jobs, PBS) is a module of its own here implementing
:class:`~.backend.ClusterBackend` (its own options in its constructor), a subcommand in
``cli/pool.py`` that builds it and hands it to :class:`~.pool.ElasticPool`, and a test that
subclasses ``hyperfleet.testing.cluster.ClusterBackendContract`` (as
``tests/platform/elastic/test_pool.py`` does for Slurm and for the in-memory
``FakeCluster``, on which the pool's own rules are tested).
"""

BACKOFF_BASE_S = 20.0
"""The wait after a first start failure (it doubles with each one in a row)."""
BACKOFF_CAP_S = 1800.0
"""The longest wait between submissions after start failures."""
DECIDE_EVERY_S = 10.0
"""Between two decisions of a long-running pool."""
