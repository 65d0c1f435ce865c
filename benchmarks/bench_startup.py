"""A process's start-up with the garbage collector running vs held off, side by side.

Each hyperfleet entry point pauses CPython's cyclic collector while it imports what it needs
and resumes it (freezing what start-up made) once started: :mod:`hyperfleet.startup`. This
measures that start-up as each kind of process does it, in fresh interpreters, alternating
the two settings round by round: the CPU time (user + system, from ``getrusage``) of

* ``rank``: a trial rank's imports (the trial runtime with torch, and rank 0's recorder:
  storage, Optuna, the schedulers);
* ``controller``: a ``sweep run`` or ``hyperfleet worker`` before its loop (the CLI, the
  controller, MLflow's client and SQLite store, Optuna);
* ``agent``: torchrun's agent, ``torch.distributed.run``, whose start-up and end were
  ``python -m torch.distributed.run``'s (the collector running, the interpreter's teardown at
  the end) and are now ``trial_entry --agent``'s (held off, ``os._exit``): the two are
  compared as whole, so this row includes the teardown the others leave out.

CPU time, not wall time, so the figures hold on a busy machine; the median of ``--rounds``.
Usage: ``python benchmarks/bench_startup.py [--rounds 8]``.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys

RANK = "import hyperfleet.trials.runtime, hyperfleet.platform.recorder"
CONTROLLER = (
    "import hyperfleet.platform.cli, hyperfleet.platform.worker, mlflow.tracking, "
    "mlflow.store.tracking.sqlalchemy_store, optuna"
)


def running(imports: str) -> str:
    """The imports with the collector running, ended as hyperfleet ends (``os._exit``)."""
    return f"import os\n{imports}\nos._exit(0)"


def held_off(imports: str) -> str:
    """The imports as hyperfleet's entry points do them."""
    return (
        f"import os\nfrom hyperfleet import startup\nstartup.pause()\n{imports}\n"
        "startup.resume()\nos._exit(0)"
    )


# process -> (code before, code now)
CASES = {
    "rank": (running(RANK), held_off(RANK)),
    "controller": (running(CONTROLLER), held_off(CONTROLLER)),
    "agent": (
        "import torch.distributed.run",  # python -m torch.distributed.run: a teardown at the end
        held_off("import hyperfleet.platform.trial_entry, torch.distributed.run"),
    ),
}


def cpu_of(code: str) -> float:
    """CPU seconds of a fresh interpreter running ``code``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    cpu: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.rounds):
        for kind, codes in CASES.items():
            for i, code in enumerate(codes):
                cpu.setdefault((kind, i), []).append(cpu_of(code))
    print(f"start-up CPU seconds, median of {args.rounds} alternating rounds")
    print(f"{'process':<12}{'collector running':>20}{'held off':>12}{'ratio':>8}")
    for kind in CASES:
        on, off = (statistics.median(cpu[kind, i]) for i in (0, 1))
        print(f"{kind:<12}{on:>20.2f}{off:>12.2f}{off / on:>8.2f}")


if __name__ == "__main__":
    main()
