"""``hyperfleet train``: one run of the trial configuration, no search, no stores."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.cli import invoke

pytestmark = pytest.mark.slow


def train(path: Path, *args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HYPERFLEET_CACHE": str(cache)}
    return subprocess.run(
        [sys.executable, "-m", "hyperfleet.platform", "train", str(path), *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
    )


def losses(output: str, key: str) -> list[float]:
    return [float(m) for m in re.findall(rf"{key}=([0-9.eE+-]+)", output)]


def test_charlm_ddp_trains_on_the_stdlib_corpus(
    sweep_file: Callable[..., Path], tmp_path: Path
) -> None:
    path = sweep_file(
        {
            "name": "lm",
            "objective": {"metric": "val_loss", "mode": "min"},
            "space": {"lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True}},
            "trial": {
                "workload": "charlm",
                "params": {
                    "corpus_bytes": 300_000,
                    "batch_size": 8,
                    "n_embd": 32,
                    "eval_batches": 2,
                },
                "steps": 60,
                "eval_every": 20,
            },
        }
    )
    mlflow_db = tmp_path / "runs" / "mlflow.db"
    before = mlflow_db.stat().st_mtime_ns
    proc = train(path, "--devices", "cpu:2", "--param", "lr=0.005", cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr[-3000:]
    val = losses(proc.stdout, "val_loss")
    assert len(val) == 3
    assert val[-1] < val[0] < 5.6  # below the uniform 256-way loss ln(256) = 5.55 and falling
    assert "run complete" in proc.stdout
    # the corpus was cached once as a memory-mapped token file
    assert list((tmp_path / "cache").rglob("index.json"))
    assert not (tmp_path / "runs" / "hf.db").exists(), "train must not write to the storage"
    assert mlflow_db.stat().st_mtime_ns == before, "train must not write to MLflow"


def test_train_rejects_unknown_param(sweep_file: Callable[..., Path], tmp_path: Path) -> None:
    result = invoke(
        "train", str(sweep_file()), "--param", "momentum=0.9", HYPERFLEET_CACHE=str(tmp_path / "c")
    )
    assert result.exit_code == 2
    assert result.stderr.strip().startswith("error: --param: unknown parameter momentum")
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "c").exists()
