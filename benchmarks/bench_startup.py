"""A process's start-up with the garbage collector running vs held off, side by side.

Each hyperfleet entry point pauses CPython's cyclic collector while it imports what it needs
and resumes it (freezing what start-up made) once started: :mod:`hyperfleet.startup`. This
measures that start-up as each kind of process does it, in fresh interpreters, alternating
the two settings round by round: the CPU time (user + system, from ``getrusage``) of

* ``rank``: a trial rank's imports (the trial runtime with torch, and rank 0's recorder:
  storage, Optuna, the schedulers);
* ``controller``: a ``sweep run`` or ``hyperfleet worker`` before its loop (the CLI, the
  controller, MLflow's client and SQLite store, Optuna).

CPU time, not wall time, so the figures hold on a busy machine; the median of ``--rounds``.
Usage: ``python benchmarks/bench_startup.py [--rounds 8]``.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys

IMPORTS = {
    "rank": "import hyperfleet.trials.runtime, hyperfleet.platform.recorder",
    "controller": (
        "import hyperfleet.platform.cli, hyperfleet.platform.worker, mlflow.tracking, "
        "mlflow.store.tracking.sqlalchemy_store, optuna"
    ),
}
# both end as hyperfleet's processes do, without the interpreter's teardown (os._exit)
SETTINGS = {
    "collector running": "import os\n{imports}\nos._exit(0)",
    "held off (startup)": (
        "import os\nfrom hyperfleet import startup\nstartup.pause()\n{imports}\n"
        "startup.resume()\nos._exit(0)"
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
    cpu: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for kind, imports in IMPORTS.items():
            for setting, template in SETTINGS.items():
                code = template.format(imports=imports)
                cpu.setdefault((kind, setting), []).append(cpu_of(code))
    print(f"start-up CPU seconds, median of {args.rounds} alternating rounds")
    print(f"{'process':<12}{'collector running':>20}{'held off':>12}{'ratio':>8}")
    for kind in IMPORTS:
        on = statistics.median(cpu[kind, "collector running"])
        off = statistics.median(cpu[kind, "held off (startup)"])
        print(f"{kind:<12}{on:>20.2f}{off:>12.2f}{off / on:>8.2f}")


if __name__ == "__main__":
    main()
