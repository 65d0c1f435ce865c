"""Script trials end to end: a program that knows nothing of hyperfleet, run by ``sweep run``
with its params as flags; its output lines are its reports; a pruned one is stopped within
2 s of the decision (SIGKILL when it ignores SIGTERM); a crash, or no objective, is one FAIL
with the reason; a program logging with MLflow is read from its run, pruned there, and loses
nothing when MLflow is away at its start."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from mlflow.tracking import MlflowClient
from sqlalchemy.exc import OperationalError

from hyperfleet.platform.storage import Storage
from hyperfleet.spec.states import TrialState
from hyperfleet.testing.sweeps import minimal_sweep
from tests.integration.cli import cli, invoke
from tests.tracking.readback import start_sweep, wait_for
from tests.tracking.server import MlflowServer, mlflow_server_factory  # noqa: F401

pytestmark = pytest.mark.slow
PROGRAMS = Path(__file__).resolve().parents[1] / "launcher" / "programs"


def script_sweep(tmp_path: Path, mlflow_template: Path, **changes: Any) -> Path:
    """A sweep file of a script trial (``trial`` changes merge into a one-process trial of
    ``programs/report.py``), its stores under ``tmp_path/runs``."""
    runs = tmp_path / "runs"
    runs.mkdir(exist_ok=True)
    shutil.copy(mlflow_template, runs / "mlflow.db")
    trial = {
        "workload": None,
        "command": ["python", str(PROGRAMS / "report.py"), "${args}", "--out", "${trial_dir}"],
        "params": {"x": 0.5},
        "steps": 3,
        **changes.pop("trial", {}),
    }
    changes.setdefault("objective", {"metric": "val_loss", "mode": "min"})
    data = minimal_sweep(
        storage=f"sqlite:///{runs / 'hf.db'}",
        tracking={"uri": f"sqlite:///{runs / 'mlflow.db'}", "log_model": False},
        workdir=str(runs),
        trial=trial,
        **changes,
    )
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_json(path: Path) -> dict[str, Any]:
    proc = cli("sweep", "run", str(path), "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


#: a sweep of two trials, one at a time, whose second a median pruner may prune
PRUNED_PAIR: dict[str, Any] = {
    "scheduler": {"type": "random", "seed": 0},
    "pruner": {"type": "median", "n_startup_trials": 1, "n_warmup_steps": 0},
    "budget": {"trials": 2, "max_concurrent": 1},
}


def run_pruned_pair(path: Path, xs: tuple[float, float]) -> tuple[dict[str, Any], list[Any]]:
    """Enqueue ``xs`` in this order (the first is the median's history) and run the sweep of
    ``path`` (:data:`PRUNED_PAIR`): one COMPLETE, one PRUNED; its summary and its trials."""
    for x in xs:
        queued = invoke("sweep", "enqueue", str(path), "--params", json.dumps({"x": x}))
        assert queued.exit_code == 0, queued.output
    result = run_json(path)
    assert result["state_counts"] == {"COMPLETE": 1, "PRUNED": 1, "FAIL": 0}
    data = yaml.safe_load(path.read_text())
    storage = Storage(data["storage"], create=False)
    trials = sorted(storage.trials.of(data["name"]), key=lambda t: t.number)
    storage.close()
    return result, trials


def test_program_outcomes_and_its_mlflow_run(tmp_path: Path, mlflow_template: Path) -> None:
    path = script_sweep(
        tmp_path,
        mlflow_template,
        name="outcomes",
        scheduler={"type": "grid"},
        budget={"trials": 3, "max_concurrent": 1, "max_retries": 0},
        space={"mode": {"type": "categorical", "choices": ["ok", "crash", "silent"]}},
    )
    result = run_json(path)
    assert result["state_counts"] == {"COMPLETE": 1, "PRUNED": 0, "FAIL": 2}
    storage = Storage(f"sqlite:///{tmp_path / 'runs' / 'hf.db'}", create=False)
    trials = {t.params["mode"]: t for t in storage.trials.of("outcomes")}
    storage.close()
    ok, crash, silent = trials["ok"], trials["crash"], trials["silent"]
    assert ok.state == TrialState.COMPLETE
    assert ok.metrics["val_loss"] == pytest.approx(0.5 + 1 / 3, abs=1e-4)
    assert crash.state == TrialState.FAIL and crash.error is not None
    assert "report.py exited with code 3" in crash.error
    # its stderr's exception is the failure line: quoted last
    assert crash.error.rstrip().endswith("ValueError: the data file is corrupt")
    assert silent.error is not None
    assert silent.error.rstrip().endswith(  # what it printed instead: "starting with x=0.5"
        "no val_loss reported; looked for val_loss=… on stdout (it printed x)"
    )

    seen = json.loads((Path(ok.trial_dir) / "seen.json").read_text())
    assert seen["argv"] == ["--x", "0.5", "--mode", "ok", "--out", ok.trial_dir]
    assert seen["env"]["MLFLOW_RUN_ID"] == ok.mlflow_run_id
    assert seen["env"]["HYPERFLEET_SPEC"] == str(Path(ok.trial_dir) / "spec.json")
    client = MlflowClient(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    assert seen["env"]["MLFLOW_EXPERIMENT_ID"] == result["mlflow"]["experiment_id"]
    curve = client.get_metric_history(ok.mlflow_run_id, "val_loss")
    assert [(m.step, round(m.value, 4)) for m in curve] == [(1, 1.5), (2, 1.0), (3, 0.8333)]
    assert [m.step for m in client.get_metric_history(ok.mlflow_run_id, "train_loss")] == [1, 2, 3]


def test_pruned_program_is_killed_within_2s(tmp_path: Path, mlflow_template: Path) -> None:
    path = script_sweep(
        tmp_path,
        mlflow_template,
        name="pruned",
        scheduler={"type": "random", "seed": 0},
        pruner={"type": "median", "n_startup_trials": 1, "n_warmup_steps": 0},
        budget={"trials": 2, "max_concurrent": 1},
        space={"mode": {"type": "categorical", "choices": ["ok", "stubborn"]}},
    )
    for mode in ("ok", "stubborn"):  # in this order: the first is the median's history
        queued = invoke("sweep", "enqueue", str(path), "--params", json.dumps({"mode": mode}))
        assert queued.exit_code == 0, queued.output
    result = run_json(path)
    assert result["state_counts"] == {"COMPLETE": 1, "PRUNED": 1, "FAIL": 0}
    storage = Storage(f"sqlite:///{tmp_path / 'runs' / 'hf.db'}", create=False)
    pruned = next(t for t in storage.trials.of("pruned") if t.params["mode"] == "stubborn")
    storage.close()
    assert pruned.state == TrialState.PRUNED and pruned.last_step == 1
    log = (Path(pruned.trial_dir) / "log.txt").read_text()
    took = re.search(r"pruned at step 1; the program ended ([0-9.]+) s after the decision", log)
    assert took is not None, log
    # it ignores SIGTERM: the SIGKILL after the grace ended it, within 2 s of the decision
    assert 0.9 <= float(took.group(1)) < 2.0, log
    pid = json.loads((Path(pruned.trial_dir) / "seen.json").read_text())["pid"]
    assert not os.path.exists(f"/proc/{pid}"), "the pruned program outlived its trial"


def test_program_logging_to_mlflow_reports_through_its_child_run(
    tmp_path: Path, mlflow_template: Path
) -> None:
    path = script_sweep(
        tmp_path,
        mlflow_template,
        name="logs",
        trial={
            "command": [
                "python", str(PROGRAMS / "mlflow_logs.py"), "${args}", "--linger-above", "0.5"
            ],
            "params": {},
            "metrics": {"from": "mlflow"},
        },
        space={"x": {"type": "float", "low": 0.0, "high": 1.0}},
        **PRUNED_PAIR,
    )  # fmt: skip
    result, (done, pruned) = run_pruned_pair(path, (0.2, 0.9))
    client = MlflowClient(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    runs = client.search_runs([result["mlflow"]["experiment_id"]])
    parent = result["mlflow"]["parent_run_id"]
    assert len(runs) == 3, "no run beyond the sweep's and its trials'"
    children = {r.info.run_id for r in runs if r.data.tags.get("mlflow.parentRunId") == parent}
    assert children == {done.mlflow_run_id, pruned.mlflow_run_id}
    assert done.mlflow_run_id is not None and pruned.mlflow_run_id is not None
    history = client.get_metric_history(done.mlflow_run_id, "val_loss")
    assert [(m.step, m.value) for m in history] == pytest.approx(
        [(1, 1.2), (2, 0.7), (3, 0.2 + 1 / 3)]
    ), "each point once: the program's, none added by the platform"
    assert done.state == TrialState.COMPLETE and done.last_step == 3  # read from the run
    assert done.metrics["val_loss"] == pytest.approx(0.2 + 1 / 3)
    assert done.metrics["val_accuracy"] == pytest.approx(0.8)
    # the second logs a worse step 1, then lingers: pruned at the step read from its run
    assert pruned.state == TrialState.PRUNED and pruned.last_step == 1
    assert pruned.metrics["val_loss"] == pytest.approx(1.9)
    assert pruned.trial_dir is not None
    log = (Path(pruned.trial_dir) / "log.txt").read_text()
    took = re.search(r"pruned at step 1; the program ended ([0-9.]+) s after the decision", log)
    assert took is not None and float(took.group(1)) < 2.0, log
    assert "training done" not in log


@pytest.mark.long
def test_mlflow_away_at_a_programs_start_loses_nothing(
    tmp_path: Path,
    mlflow_template: Path,
    mlflow_server_factory: Callable[[], MlflowServer],  # noqa: F811
) -> None:
    """The tracking server stops while trial 0 runs, so trial 1's run cannot be created: its
    program logs into a run of its own in the trial's directory (its calls neither fail nor
    wait), its objective is read from there, its reports are recorded and spooled; once the
    server is back, ``hyperfleet mlflow sync`` gives it its run with the curve."""
    server = mlflow_server_factory()
    server.start()
    go = tmp_path / "go"
    program = [str(PROGRAMS / "mlflow_logs.py"), "${args}", "--wait-for", str(go)]
    path = script_sweep(
        tmp_path,
        mlflow_template,
        name="away",
        trial={"command": ["python", *program], "params": {}, "metrics": {"from": "mlflow"}},
        space={"x": {"type": "categorical", "choices": [0.2, 0.4]}},
        scheduler={"type": "grid"},
        budget={"trials": 2, "max_concurrent": 1},
    )
    data = yaml.safe_load(path.read_text())
    data["tracking"]["uri"] = server.uri
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    storage = Storage(data["storage"], create=False)
    proc = start_sweep(path, HYPERFLEET_MLFLOW_WAIT_S="1")

    def first_done() -> bool:
        try:
            return any(t.last_step == 3 for t in storage.trials.of("away"))
        except OperationalError:  # the sweep has not made its tables yet
            return False

    wait_for(first_done, proc, "trial 0's last step read from its run")
    server.stop()
    go.touch()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert "hyperfleet mlflow sync" in err
    first, late = sorted(storage.trials.of("away"), key=lambda t: t.number)
    assert (first.state, late.state) == (TrialState.COMPLETE, TrialState.COMPLETE)
    assert late.metrics["val_loss"] == pytest.approx(late.params["x"] + 1 / 3)
    assert late.trial_dir is not None
    log = (Path(late.trial_dir) / "log.txt").read_text()
    local = re.search(r"the program's own MLflow calls go to (\S+) \(run (\w+)\)", log)
    assert local is not None, log
    kept = MlflowClient(local.group(1)).get_metric_history(local.group(2), "val_loss")
    assert [m.step for m in kept] == [1, 2, 3], "the program's own points, kept"

    server.start()
    synced = invoke("mlflow", "sync", "--storage", data["storage"], "--sweep", "away")
    assert synced.exit_code == 0, synced.output
    (late,) = [t for t in storage.trials.of("away") if t.number == late.number]
    storage.close()
    assert late.mlflow_run_id is not None
    curve = MlflowClient(server.uri).get_metric_history(late.mlflow_run_id, "val_loss")
    x = late.params["x"]
    assert [(m.step, m.value) for m in curve] == pytest.approx(
        [(1, x + 1), (2, x + 0.5), (3, x + 1 / 3)]
    ), "the reports read while MLflow was away, each once in the trial's run"
