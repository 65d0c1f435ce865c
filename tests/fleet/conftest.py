"""A fleet on one machine: real ``hyperfleet worker`` processes sharing a real PostgreSQL
storage (and one MLflow store), each with devices of its own."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperfleet.testing.workers import start_worker, worker_command
from tests.conftest import deep_update
from tests.integration.cli import STORE_POLL_S, cli_env, invoke, trials_by_number


@dataclass
class Worker:
    name: str
    proc: subprocess.Popen[str]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def id(self, fleet: Fleet, timeout: float = 120) -> str:
        """This worker's id in ``hf_workers`` (once it registered)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for w in fleet.storage().workers.all():
                if w.pid == self.proc.pid:
                    return w.id
            time.sleep(0.1)
        raise AssertionError(f"worker {self.name} never registered:\n{self.text()[-3000:]}")


@dataclass
class Fleet:
    root: Path
    storage_url: str
    workers: list[Worker] = field(default_factory=list)

    def sweep(self, data: dict[str, Any], name: str = "sweep.yaml") -> Path:
        data = deep_update(data, {})
        data.setdefault("storage", self.storage_url)
        data.setdefault(
            "tracking", {"uri": f"sqlite:///{self.root / 'mlflow.db'}", "log_model": False}
        )
        data.setdefault("workdir", str(self.root / "runs"))
        path = self.root / name
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    def submit(self, path: Path, *args: str) -> None:
        """``hyperfleet sweep submit`` (in this process: it starts no process of its own);
        ``args``: its options (``--trials 2``)."""
        result = invoke("sweep", "submit", str(path), *args)
        assert result.exit_code == 0, result.output[-3000:]

    def start(
        self,
        name: str,
        *args: str,
        host: Sequence[str] = (),
        storage_url: str | None = None,
        cwd: Path | None = None,
    ) -> Worker:
        """A ``hyperfleet worker``; ``host``: a command prefix that runs it elsewhere (another
        network namespace), where the storage is at ``storage_url``; ``cwd``: the directory
        it is started in (default: the fleet's root)."""
        log = self.root / f"worker-{name}.log"
        cmd = worker_command(storage_url or self.storage_url, *args, heartbeat="1s",
                             stale_after="15s", prefix=host)  # fmt: skip
        proc = start_worker(cmd, log=log, env=cli_env(), cwd=cwd or self.root)
        worker = Worker(name, proc, log)
        self.workers.append(worker)
        return worker

    def storage(self) -> Any:
        from hyperfleet.platform.storage import Storage

        return Storage(self.storage_url, create=False)

    def trials(self, sweep: str) -> dict[int, Any]:
        return trials_by_number(self.storage_url, sweep)

    def wait(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while not condition():
            dead = [w for w in self.workers if w.proc.poll() not in (None, 0, 130, -9)]
            assert not dead, f"worker {dead[0].name} crashed:\n{dead[0].text()[-3000:]}"
            if time.monotonic() > end:
                logs = "\n".join(f"--- {w.name}\n{w.text()[-2000:]}" for w in self.workers)
                raise AssertionError(f"timed out waiting for {what}\n{logs}")
            time.sleep(STORE_POLL_S)

    def finish(self, timeout: float = 600) -> None:
        """Every worker exits by itself (``--exit-when-idle``)."""
        for w in self.workers:
            try:
                w.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                raise AssertionError(f"worker {w.name} did not exit:\n{w.text()[-3000:]}") from None
        for w in self.workers:
            clean = [
                line for line in w.text().splitlines() if "Traceback" in line or " ERROR" in line
            ]
            assert not clean, f"worker {w.name} logged errors:\n{w.text()[-3000:]}"

    def stop_all(self) -> None:
        for w in self.workers:
            if w.proc.poll() is None:
                w.proc.send_signal(signal.SIGKILL)
                w.proc.wait()


@pytest.fixture
def fleet(tmp_path: Path, postgres_url: str, mlflow_template: Path) -> Iterator[Fleet]:
    shutil.copy(mlflow_template, tmp_path / "mlflow.db")  # migrated once per session
    f = Fleet(tmp_path, postgres_url)
    try:
        yield f
    finally:
        f.stop_all()


def toy_population(name: str, population: int, trial: dict[str, Any]) -> dict[str, Any]:
    """A PBT sweep of ``population`` members at once on the toy problem of
    ``examples/pbt_toy.py`` (its score ``Q``, two hyperparameters ``h0``, ``h1``), 40 steps of
    in-process trials; ``trial`` merges into its ``trial`` section."""
    base = {"workload": "examples.pbt_toy:main", "params": {"lr": 0.05}, "steps": 40,
            "eval_every": 4, "resources": {"devices": 0}}  # fmt: skip
    return {
        "name": name,
        "objective": {"metric": "Q", "mode": "max"},
        "scheduler": {
            "type": "pbt",
            "population": population,
            "perturbation_interval": 4,
            "seed": 0,
            "resample_probability": 0.5,
        },
        "budget": {"max_concurrent": population},
        "space": {h: {"type": "float", "low": 0.0, "high": 1.0} for h in ("h0", "h1")},
        "trial": deep_update(base, trial),
    }
