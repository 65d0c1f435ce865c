"""An idle ``mlflow server``'s cost, with and without MLflow's job runners, side by side.

Every ``mlflow server`` hyperfleet starts (``hyperfleet stack up``, ``hyperfleet mlflow``, the
compose file, the tests' servers) runs with ``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false``
(:func:`hyperfleet.platform.tracking.server.server_env`); MLflow's default starts its job runners
too. For each setting, in alternating rounds, a server on a fresh SQLite store in a temporary
directory (loopback, a free port) is started, and once ``/health`` answers this prints the
processes in its group and their CPU time (from ``/proc``), then the CPU time they use over
``--idle`` seconds of doing nothing. CPU time, not wall time: the figures hold on a busy
machine. Usage: ``python benchmarks/bench_mlflow_server.py [--idle 20] [--rounds 2]``.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from hyperfleet.platform.launcher.torchrun import free_port
from hyperfleet.platform.services.processes import group_members
from hyperfleet.platform.tracking.server import mlflow_executable, server_env

TICK = os.sysconf("SC_CLK_TCK")


def group_cpu(pgid: int) -> float:
    """CPU seconds (user + system) of the live processes of group ``pgid``."""
    total = 0
    for pid in group_members(pgid):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / TICK


def one(jobs: bool, idle_s: float) -> tuple[int, float, float]:
    """(processes, CPU s until healthy, CPU s over ``idle_s`` idle) of one server."""
    env = server_env()
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "true" if jobs else "false"
    with tempfile.TemporaryDirectory(prefix="hf-bench-mlflow-") as tmp:
        port = free_port()
        cmd = [mlflow_executable(), "server", "--backend-store-uri", f"sqlite:///{tmp}/m.db",
               "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]  # fmt: skip
        proc = subprocess.Popen(cmd, env=env, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            deadline = time.monotonic() + 600
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("mlflow server did not start") from None
                    time.sleep(0.2)
            time.sleep(2.0)  # let the job runners finish starting, if any
            procs, started = len(group_members(proc.pid)), group_cpu(proc.pid)
            time.sleep(idle_s)
            return procs, started, group_cpu(proc.pid) - started
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--idle", type=float, default=20.0, help="idle seconds measured")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    results: dict[bool, list[tuple[int, float, float]]] = {True: [], False: []}
    for _ in range(args.rounds):
        for jobs in (True, False):
            results[jobs].append(one(jobs, args.idle))
    print(f"idle mlflow server, {args.rounds} rounds, medians (CPU seconds, all its processes)")
    print(f"{'job runners':<14}{'processes':>10}{'CPU to healthy':>16}{'CPU per idle s':>16}")
    per = {}
    for jobs in (True, False):
        rows = results[jobs]
        procs = statistics.median(r[0] for r in rows)
        start = statistics.median(r[1] for r in rows)
        per[jobs] = statistics.median(r[2] for r in rows) / args.idle
        print(f"{'on' if jobs else 'off':<14}{procs:>10.0f}{start:>16.2f}{per[jobs]:>16.3f}")
    print(f"idle CPU, on / off: {per[True] / max(per[False], 1e-3):.0f}x "
          f"(off: {per[False] * 100:.1f} % of a core; on: {per[True] * 100:.1f} %)")  # fmt: skip


if __name__ == "__main__":
    main()
