"""Reading a sweep back from MLflow, as a user's script would, through ``MlflowClient``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from hyperfleet.testing.sweeps import minimal_sweep
from tests.conftest import deep_update
from tests.integration.cli import ROOT, cli_env, wait_until

SWEEP_TIMEOUT_S = 600


def sweep_file(directory: Path, name: str, tracking_uri: str, changes: dict[str, Any]) -> Path:
    """A sweep of ``gated`` in-process trials, its stores under ``directory``."""
    base = minimal_sweep(
        name=name,
        trial={
            "workload": "tests.integration.mlflow_workloads:gated",
            "params": {"gates": str(directory / "gates")},
        },
        storage=f"sqlite:///{directory / 'hf.db'}",
        tracking={"uri": tracking_uri, "experiment": name},
        workdir=str(directory / "runs"),
    )
    data = deep_update(base, changes)
    if "space" in changes:  # a given space, or params, replace the base ones
        data["space"] = changes["space"]
    if "params" in changes.get("trial", {}):
        data["trial"]["params"] = changes["trial"]["params"]
    (directory / "gates").mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def sweep_env(**extra: str) -> dict[str, str]:
    return cli_env(MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL="1", **extra)


def start_sweep(path: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    """``hyperfleet sweep run PATH --json ARGS`` started, with :func:`sweep_env`."""
    cmd = [sys.executable, "-m", "hyperfleet.platform", "sweep", "run", str(path), "--json", *args]
    return subprocess.Popen(
        cmd,
        cwd=path.parent,
        env=sweep_env(**env),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def run_sweep(path: Path, **env: str) -> tuple[dict[str, Any], str]:
    """``hyperfleet sweep run PATH --json``; its last JSON line and its stderr (exit 0)."""
    proc = start_sweep(path, **env)
    out, err = proc.communicate(timeout=SWEEP_TIMEOUT_S)
    assert proc.returncode == 0, f"sweep run exited {proc.returncode}:\n{err[-4000:]}"
    return json.loads(out.strip().splitlines()[-1]), err


def wait_for(
    cond: Callable[[], bool], proc: subprocess.Popen[str], what: str, every: float = 0.05
) -> None:
    """:func:`~tests.integration.cli.wait_until` with a sweep running and ``SWEEP_TIMEOUT_S``."""
    wait_until(cond, what, proc, timeout=SWEEP_TIMEOUT_S, every=every)


def runs(client: MlflowClient, experiment_id: str) -> list[Run]:
    return list(client.search_runs([experiment_id], max_results=1000))


def children(client: MlflowClient, experiment_id: str, parent: str) -> dict[int, Run]:
    """The sweep's trial runs by trial number."""
    return {
        int(r.data.tags["hyperfleet.trial"]): r
        for r in runs(client, experiment_id)
        if r.data.tags.get("mlflow.parentRunId") == parent
    }


def history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    """``(step, value)`` of ``key`` in the order they were reported (timestamps)."""
    points = sorted(client.get_metric_history(run_id, key), key=lambda m: (m.timestamp, m.step))
    return [(m.step, m.value) for m in points]


def assert_unique_steps(client: MlflowClient, run: Run) -> None:
    """Every metric of the run has each step once, and steps grow in reporting order."""
    for key in run.data.metrics:
        steps = [s for s, _ in history(client, run.info.run_id, key)]
        assert len(steps) == len(set(steps)), f"{key}: a step logged twice: {steps}"
        assert steps == sorted(steps), f"{key}: steps out of order: {steps}"


def snapshot(client: MlflowClient, experiment_id: str) -> dict[str, Any]:
    """Everything MLflow shows of an experiment's runs (for 'nothing changed' checks)."""
    out: dict[str, Any] = {}
    for r in runs(client, experiment_id):
        rid = r.info.run_id
        out[rid] = {
            "status": r.info.status,
            "start": r.info.start_time,
            "end": r.info.end_time,
            "tags": dict(r.data.tags),
            "params": dict(r.data.params),
            "metrics": {
                k: sorted((m.step, m.value, m.timestamp) for m in client.get_metric_history(rid, k))
                for k in r.data.metrics
            },
            "artifacts": sorted(a.path for a in client.list_artifacts(rid)),
        }
    return out


def download_json(client: MlflowClient, run_id: str, path: str, into: Path) -> Any:
    into.mkdir(parents=True, exist_ok=True)
    return json.loads(Path(client.download_artifacts(run_id, path, str(into))).read_text())


def hyperfleet(
    *args: str, timeout: float = SWEEP_TIMEOUT_S, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperfleet.platform", *args],
        cwd=ROOT,
        env=sweep_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
