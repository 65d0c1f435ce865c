"""CPU per worker while it waits: worker control loops (threads of this process, as in
:mod:`benchmarks.scale_harness`) on one real PostgreSQL, half of them running a long trial
and half with nothing to claim (the sweep's trials are all taken), measured after they settle.

    python benchmarks/bench_idle.py --workers 100 --seconds 20

Prints CPU seconds per worker-minute: this process (the loops, their heartbeats, their
trials' polls) and the PostgreSQL server's backends together are what a fleet costs its hosts
while nothing ends.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.scale_harness import Plan, _controllers, new_database, postgres, sweep_config
from benchmarks.scale_measures import Timers
from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.controller import open_session
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.tracking import NullTracker


def measure(server: str, workers: int, seconds: float, settle_s: float) -> float:
    """CPU seconds of this process per worker-minute over ``seconds`` (after ``settle_s``)."""
    url = new_database(server)
    busy = max(1, workers // 2)
    data = sweep_config("random", busy, workers, Path(tempfile.mkdtemp(prefix="hf-idle-")))
    data["storage"] = url
    open_session(parse_sweep(data), Storage(url), NullTracker(), None)
    plan = Plan(url, data, trial_s=20 * (settle_s + seconds), ramp_s=1.0, timeout_s=600)
    controllers = _controllers(plan, 0, workers, Timers())
    threads = [threading.Thread(target=c.run, daemon=True) for c in controllers]
    for th in threads:
        th.start()
    time.sleep(settle_s)
    c0, t0 = time.process_time(), time.monotonic()
    time.sleep(seconds)
    cpu, wall = time.process_time() - c0, time.monotonic() - t0
    for c in controllers:
        c.request_stop()
    for th in threads:
        th.join(30)
    return cpu / (workers * wall / 60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--settle", type=float, default=10.0)
    args = ap.parse_args()
    with postgres() as server:
        per = measure(server, args.workers, args.seconds, args.settle)
    print(f"{args.workers} workers ({args.workers // 2} busy): "
          f"{per:.3f} CPU-s per worker-minute (this process)")  # fmt: skip


if __name__ == "__main__":
    main()
