"""examples/script/: the unchanged DDP training script swept by its sweep file (made small):
each trial runs under torchrun as 2 ranks, its values come from its output, a pruned trial is
stopped within 2 s of the decision, and the MLflow child runs hold the curves."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from hyperfleet.platform.storage import Storage
from hyperfleet.spec.states import TrialState
from tests.integration.cli import ROOT, cli, invoke

pytestmark = [pytest.mark.slow, pytest.mark.long]
EXAMPLE = ROOT / "examples" / "script"


def test_example_script_is_unchanged_by_hyperfleet() -> None:
    text = (EXAMPLE / "train.py").read_text()
    assert not re.search(r"^\s*(import|from)\s+hyperfleet", text, re.M)
    assert "import torch.distributed" in text and "argparse" in text


def test_example_sweep_runs_the_script_under_torchrun(tmp_path: Path, runs_dir: Path) -> None:
    runs = runs_dir
    data = yaml.safe_load((EXAMPLE / "sweep.yaml").read_text())
    assert data["trial"]["resources"]["devices"] == 2 and data["pruner"]["type"] == "median"
    data["budget"] = {"trials": 4, "max_concurrent": 1}
    data["pruner"].update(n_startup_trials=1, n_warmup_steps=0)
    data["trial"].update(steps=30, eval_every=10)
    data["storage"] = f"sqlite:///{runs / 'hf.db'}"
    data["tracking"] = {"uri": f"sqlite:///{runs / 'mlflow.db'}", "log_model": False}
    data["workdir"] = str(runs)
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    # a good point first, then a poor one the median pruner stops at its first report
    for point in ({"lr": 0.2, "hidden": 64}, {"lr": 0.001, "hidden": 16}):
        queued = invoke("sweep", "enqueue", str(path), "--params", json.dumps(point))
        assert queued.exit_code == 0, queued.output

    proc = cli("sweep", "run", str(path), "--json", "--devices", "cpu:2", cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    counts = result["state_counts"]
    assert counts["FAIL"] == 0 and counts["PRUNED"] >= 1 and sum(counts.values()) == 4, counts

    storage = Storage(data["storage"], create=False)
    trials = storage.trials.of(data["name"])
    storage.close()
    client = MlflowClient(data["tracking"]["uri"])
    for t in trials:
        assert t.trial_dir is not None and t.mlflow_run_id is not None
        log = (Path(t.trial_dir) / "log.txt").read_text()
        assert "torch.distributed.run" in log and "--nproc-per-node=2" in log
        assert "[rank0]:rank 0 of 2" in log and "[rank1]:rank 1 of 2" in log, log
        printed = [  # what rank 0 printed, step by step
            (int(s), float(v))
            for s, v in re.findall(r"\[rank0\]:step=(\d+) val_loss=([0-9.]+)", log)
        ]
        curve = [(m.step, m.value) for m in client.get_metric_history(t.mlflow_run_id, "val_loss")]
        if t.state == TrialState.COMPLETE:
            assert [s for s, _ in printed] == [10, 20, 30]
            assert t.metrics["val_loss"] == pytest.approx(printed[-1][1])
            assert curve == pytest.approx(printed)  # the child run holds the curve
        else:
            assert t.state == TrialState.PRUNED
            assert curve == pytest.approx(printed[: len(curve)]) and curve
            took = re.search(r"pruned at step \d+; the program ended ([0-9.]+) s after", log)
            assert took is not None and float(took.group(1)) < 2.0, log
