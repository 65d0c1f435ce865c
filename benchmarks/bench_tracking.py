"""Tracking's cost to training: hyperfleet's sink against plain ``mlflow.log_metric`` calls.

1. **Reporting 20 metrics per step**, the time the training thread spends in it, side by side
   on the same store: plain MLflow (``mlflow.log_metric`` 20 times, each a synchronous write),
   MLflow's own asynchronous logging (``synchronous=False``) and hyperfleet
   (``MetricSink.log_metrics``: an append; a background thread batches, spools and ships).
   Also the time until every point is in MLflow, end to end.
2. **Tracking's share of a charlm step**: charlm's GPT (its default size) trains on the CPU,
   reporting its metrics through the sink at every step (the worst case: ``eval_every: 1``),
   then every 50 steps (charlm's default ``eval_every``), with system metrics on, after as
   many steps without tracking. The share is
   tracking's CPU time (the sink's and the sampler's threads, read from ``/proc``, plus the
   training thread's time in ``log_metrics``; after their one-off start, importing MLflow)
   over the training thread's CPU time per step;
   wall-clock medians of both kinds of steps are printed too (on a shared machine their
   difference is mostly load).

The store is a real ``mlflow server`` with ``--server`` (started here, on loopback; slow to
start on a loaded machine), else a local SQLite store. Usage:
``python benchmarks/bench_tracking.py [--quick] [--server]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlflow
import torch
from mlflow.tracking import MlflowClient
from torch.nn import functional as F  # noqa: N812

from hyperfleet.platform.tracking import MetricSink
from hyperfleet.spec.trial import TrialConfig
from hyperfleet.trials.models.gpt import GPT, GPTConfig

KEYS = [f"metric_{i:02d}" for i in range(20)]


def start_server(root: Path) -> tuple[str, subprocess.Popen[bytes]]:
    from hyperfleet.platform.launcher.torchrun import free_port
    from hyperfleet.platform.tracking.server import mlflow_executable, server_env

    port = free_port()
    cmd = [
        mlflow_executable(),
        "server",
        "--backend-store-uri",
        f"sqlite:///{root / 'mlflow.db'}",
        "--serve-artifacts",
        "--artifacts-destination",
        str(root / "artifacts"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=server_env()
    )
    uri = f"http://127.0.0.1:{port}"
    import urllib.request

    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{uri}/health", timeout=2)
            return uri, proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("mlflow server did not start")


def _plain(client: MlflowClient, exp: str, steps: int, synchronous: bool) -> tuple[float, float]:
    """Seconds per step on the training thread, and until the points are in MLflow."""
    run = client.create_run(exp).info.run_id
    t0 = time.perf_counter()
    with mlflow.start_run(run_id=run):
        for step in range(steps):
            for i, key in enumerate(KEYS):
                mlflow.log_metric(key, step + i / 100, step=step, synchronous=synchronous)
        per_step = (time.perf_counter() - t0) / steps
        mlflow.flush_async_logging()
    return per_step, time.perf_counter() - t0


def per_step_cost(uri: str, steps: int, root: Path) -> dict[str, tuple[float, float]]:
    """Seconds per step on the training thread and end to end: plain MLflow, MLflow's own
    asynchronous logging, hyperfleet's sink."""
    client = MlflowClient(uri)
    exp = client.create_experiment(f"bench-{time.time_ns()}")
    mlflow.set_tracking_uri(uri)
    out: dict[str, tuple[float, float]] = {}
    # hyperfleet's first: MLflow's asynchronous logging leaves threads that compete for the GIL
    ours = client.create_run(exp).info.run_id
    t0 = time.perf_counter()
    sink = MetricSink(uri, ours, root / "spool")
    sink.opened.wait()  # its one-off start (opening the client) overlaps a trial's own start
    spent = 0.0
    for step in range(steps):
        metrics = {key: step + i / 100 for i, key in enumerate(KEYS)}
        t = time.perf_counter()
        sink.log_metrics(step, metrics)
        spent += time.perf_counter() - t
    sink.close()
    out["hyperfleet"] = (spent / steps, time.perf_counter() - t0)
    assert all(len(client.get_metric_history(ours, k)) == steps for k in KEYS[:3])
    out["plain"] = _plain(client, exp, steps, True)
    out["async"] = _plain(client, exp, steps, False)
    return out


def thread_cpu(native_id: int) -> float:
    """CPU seconds a thread of this process has used (Linux: /proc/self/task/ID/stat)."""
    fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def charlm_share(uri: str, steps: int, root: Path, every: int = 1) -> dict[str, tuple[float, ...]]:
    """Per charlm step, ``steps`` steps without tracking, then ``steps`` with it (a report every
    ``every`` steps): median wall seconds (machine load shows in it), and CPU seconds: the
    training thread's, and tracking's (the sink's and the system sampler's threads, plus the
    training thread's time in ``log_metrics``) while the tracked steps ran."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    cfg = GPTConfig()
    model = GPT(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.randint(0, 256, (16, cfg.seq_len + 1))
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment(f"charlm-{time.time_ns()}")).info.run_id
    wall: dict[bool, list[float]] = {False: [], True: []}
    train_cpu = {False: 0.0, True: 0.0}
    in_sink = 0.0
    sink: MetricSink | None = None
    for step in range(1, 2 * steps + 1):
        tracked = step > steps
        if tracked and sink is None:
            sink = MetricSink(uri, run, root / f"charlm-spool-{every}", system_metrics=True)
            assert sink.system is not None
            sink.opened.wait()  # the one-off costs (importing MLflow, psutil) are not a step's
            sink.system._ready.wait()
            tracking_threads = (sink._thread, sink.system._thread)
            start = [thread_cpu(t.native_id or 0) for t in tracking_threads]
        t, c = time.perf_counter(), time.thread_time()
        loss = F.cross_entropy(model(data[:, :-1]).flatten(0, 1), data[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        train_cpu[tracked] += time.thread_time() - c
        if sink is not None and step % every == 0:  # what the recorder hands the sink
            c = time.thread_time()
            value = float(loss.detach())
            sink.log_metrics(
                step,
                {
                    "loss": value,
                    "val_loss": value,
                    "tokens_per_s": 1e4,
                    "samples_per_s": 1e2,
                    "step_time_s": 0.05,
                    "hp/lr": 3e-3,
                },
            )
            in_sink += time.thread_time() - c
        wall[tracked].append(time.perf_counter() - t)
    assert sink is not None
    used = [thread_cpu(t.native_id or 0) - s for t, s in zip(tracking_threads, start, strict=True)]
    sink.close()
    return {
        "wall": (statistics.median(wall[False]), statistics.median(wall[True])),
        "cpu": (train_cpu[True] / steps, (train_cpu[True] + sum(used) + in_sink) / steps),
        "parts": (in_sink / steps, used[0] / steps, used[1] / steps),
    }


def report_part(uri: str, store: str, quick: bool, root: Path) -> None:
    steps = 30 if quick else 100
    cost = per_step_cost(uri, steps, root)
    ours = cost["hyperfleet"][0]
    print(f"\nReporting 20 metrics per step, {steps} steps, {store}:")
    print("                                    training thread    all points in MLflow")
    rows = [
        ("plain mlflow.log_metric x20", "plain"),
        ("mlflow.log_metric x20, synchronous=False", "async"),
        ("hyperfleet MetricSink.log_metrics", "hyperfleet"),
    ]
    for label, key in rows:
        per_step, total = cost[key]
        ratio = "" if key == "hyperfleet" else f"  ({per_step / ours:,.0f}x hyperfleet's)"
        print(f"  {label:41} {per_step * 1e3:9.3f} ms/step {total:8.2f} s{ratio}")
    print(f"  plain / hyperfleet: {cost['plain'][0] / ours:,.0f}x  (goal >= 20x)")


def charlm_part(uri: str, quick: bool, root: Path) -> None:
    steps = 60 if quick else 500
    default_every = TrialConfig.model_fields["eval_every"].default
    for every in (1, default_every):
        share = charlm_share(uri, steps, root, every)
        print(f"\ncharlm step (GPT {GPTConfig()}), {steps} steps without tracking, then with,")
        when = "every step (the worst case)" if every == 1 else f"every {every} steps (default)"
        print(f"metrics reported {when}, system metrics on:")
        (w0, w1), (c0, c1) = share["wall"], share["cpu"]
        print(
            f"  wall per step (median): without {w0 * 1e3:7.2f} ms, with {w1 * 1e3:7.2f} ms "
            f"({100 * (w1 - w0) / w0:+.2f} %: machine load included)"
        )
        print(f"  CPU per step: training {c0 * 1e3:7.3f} ms, tracking {(c1 - c0) * 1e3:7.3f} ms")
        calls, sink, sampler = share["parts"]
        print(
            f"    of which log_metrics calls {calls * 1e3:.3f} ms, the sink's thread "
            f"{sink * 1e3:.3f} ms, the system-metrics thread {sampler * 1e3:.3f} ms"
        )
        print(f"  tracking's share of a step: {100 * (c1 - c0) / c0:.2f} %  (goal < 1%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--server", action="store_true", help="a real mlflow server")
    parser.add_argument("--part", choices=["all", "report", "charlm"], default="all")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-tracking-"))
    server = None
    try:
        if args.server:
            uri, server = start_server(root)
        else:
            uri = f"sqlite:///{root / 'mlflow.db'}"
            MlflowClient(uri).search_experiments()  # create the store before timing anything
        store = "mlflow server (HTTP)" if args.server else "SQLite store"
        if args.part in ("all", "report"):
            report_part(uri, store, args.quick, root)
        if args.part in ("all", "charlm"):
            charlm_part(uri, args.quick, root)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
