"""Elastic pools: workers started by a cluster's batch scheduler as the queue of trials grows,
and gone when it empties.

* :mod:`.demand` — the decision, pure: the queued work of a storage's sweeps (trials waiting or
  still to be suggested, their device needs, their pool, their priority) against the live and
  pending workers gives how many jobs to submit now; start failures back off exponentially.
* :mod:`.slurm` — Slurm's own commands through ``subprocess`` (``sbatch --parsable``,
  ``squeue -o``, ``scancel``), nothing else of Slurm's.
* :mod:`.pool` — ``hyperfleet pool slurm``: reads storage and ``squeue``, records each job in
  ``hf_workers`` (id, state, reason), submits what the decision asks for, and repeats.

A pool talks to the cluster's tools and to storage, never to a worker's internals: the jobs
run ``hyperfleet worker --exit-when-idle``, which registers itself with its job's id.
"""

BACKOFF_BASE_S = 20.0
"""The wait after a first start failure (it doubles with each one in a row)."""
BACKOFF_CAP_S = 1800.0
"""The longest wait between submissions after start failures."""
DECIDE_EVERY_S = 10.0
"""Between two decisions of a long-running pool."""
