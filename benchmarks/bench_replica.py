"""A report's cost with an S3 replica against a local write alone (100 MB checkpoints).

Two trials' checkpoint managers report side by side, alternating: ``local`` (the trial's
directory only) and ``s3`` (the same, plus ``trial.checkpoint.replica: s3://...``, uploaded
in the background). Each report is ``hyperfleet.trials.reporting.record``: the checkpoint
saved (``torch.save``, fsync, SHA-256, atomic rename) and the older ones pruned, as
``ctx.report`` runs it on rank 0. Between reports each trial "trains" for ``--interval``
seconds (a sleep: the time a real trial computes between checkpoints, in which the upload
runs). The S3 API server is moto's (``moto_server``, a process of its own on loopback, in
memory), so the upload is real HTTP but not a real network. Prints the median report time
of each, their ratio, and the wait for the uploads at the trial's end.

    python benchmarks/bench_replica.py [--quick] [--mb 100] [--rounds 6] [--interval 4]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import torch

from hyperfleet.platform.services.ports import free_port
from hyperfleet.trials.checkpoint import CheckpointManager
from hyperfleet.trials.reporting import record


def state_of(mb: int) -> dict[str, Any]:
    """Weights and two Adam moments, ``mb`` MB in all."""
    n = (mb << 20) // 4 // 3
    return {"model": {"w": torch.randn(n)},
            "optimizer": {"exp_avg": torch.randn(n), "exp_avg_sq": torch.rand(n)}}  # fmt: skip


def start_s3(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``moto_server`` on a free loopback port; the process and its endpoint URL."""
    port = free_port()
    exe = Path(sys.executable).with_name("moto_server")
    with log.open("wb") as out:
        proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(port)], stdout=out,
                                stderr=subprocess.STDOUT)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    end = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{url}/moto-api/", timeout=2)
            return proc, url
        except OSError as exc:
            if proc.poll() is not None or time.monotonic() > end:
                tail = log.read_text()[-2000:]
                raise RuntimeError(f"moto_server did not start: {tail}") from exc
            time.sleep(0.2)


def report_time(mgr: CheckpointManager, step: int, state: dict[str, Any]) -> float:
    start = time.perf_counter()
    record(step, {"loss": 1.0 / step}, state, checkpoints=mgr, due=True, reporter=None)
    return time.perf_counter() - start


def run(mb: int, rounds: int, interval: float, root: Path, endpoint: str) -> dict[str, Any]:
    from s3fs import S3FileSystem

    S3FileSystem().mkdir("bench")
    state = state_of(mb)
    managers = {
        "local": CheckpointManager(root / "local", keep=2),
        "s3": CheckpointManager(root / "s3", keep=2, replica="s3://bench/trial-0000"),
    }
    times: dict[str, list[float]] = {name: [] for name in managers}
    order = list(managers)
    for step in range(1, rounds + 1):
        for name in order:  # alternating which goes first
            times[name].append(report_time(managers[name], step, state))
            time.sleep(interval)
        order.reverse()
    start = time.perf_counter()
    managers["s3"].close()  # the trial's end waits for its uploads
    end_wait = time.perf_counter() - start
    size = managers["local"].path(rounds).stat().st_size / 1e6
    uploaded = managers["s3"].steps()
    med = {name: statistics.median(t) for name, t in times.items()}
    return {
        "mb": round(size, 1),
        "rounds": rounds,
        "interval_s": interval,
        "report_s": {name: round(v, 4) for name, v in med.items()},
        "report_s_all": {name: [round(x, 4) for x in t] for name, t in times.items()},
        "ratio_s3_over_local": round(med["s3"] / med["local"], 3),
        "end_wait_s": round(end_wait, 3),
        "steps_in_s3": uploaded,
        "endpoint": endpoint,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20 MB, 3 rounds, 1 s apart")
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--interval", type=float, default=4.0, help="seconds between reports")
    ap.add_argument("--json", type=Path, help="write the raw results here")
    args = ap.parse_args()
    if args.quick:
        args.mb, args.rounds, args.interval = 20, 3, 1.0
    root = Path(tempfile.mkdtemp(prefix="hf-bench-replica-"))
    server, endpoint = start_s3(root / "moto.log")
    os.environ.update({
        "AWS_ENDPOINT_URL": endpoint, "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": secrets.token_hex(8),
    })  # fmt: skip
    try:
        result = run(args.mb, args.rounds, args.interval, root, endpoint)
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(root, ignore_errors=True)
    result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    result["load_1m"] = round(os.getloadavg()[0], 2)
    r = result["report_s"]
    print(f"checkpoint {result['mb']} MB, {args.rounds} reports each, {args.interval} s apart")
    print(f"  report, local write alone : {r['local'] * 1000:8.1f} ms (median)")
    print(f"  report, with S3 replica   : {r['s3'] * 1000:8.1f} ms (median)")
    print(f"  ratio s3 / local          : {result['ratio_s3_over_local']:.3f}")
    print(f"  trial's end waits         : {result['end_wait_s'] * 1000:8.1f} ms for its uploads")
    print(f"  steps in S3 at the end    : {result['steps_in_s3']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
