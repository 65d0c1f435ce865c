"""Elastic trials under PBT and a Bayesian scheduler, on the real path: trial processes on CPU
slots, the worker's policy deciding, each resize made at the trial's next report.

* PBT (``run_worker``, three slots): two members of the PBT paper's toy, ``devices: {min: 1,
  max: 2}``, beside a one-slot ``filler`` sweep. Once the filler ends, its slot goes to the
  better-ranked member (``h = (1, 1)``, whose ``Q`` leads from its first step; the other's
  ``h = (0, 0)`` never moves theta), which grows to 2; the worse member, at 1, later exploits
  it at its ready step, 60, and so leaves ``Q = -0.42``: an exploit of a member that was
  relaunched at another size (the donor's checkpoint is the one of its latest report, written
  at 1 or 2 ranks as the timing of the growth has it).
* skopt, GP and TPE (``sweep run --devices cpu:3``): three trials of a script program
  (``tests/launcher/programs/resumable.py``), two at a time: the idle slot makes a trial grow,
  the relaunch is the same Optuna trial (RUNNING throughout, a pending point of the optimizer),
  so the study holds three trials, three distinct points, each value told once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient

from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.controller.pace import Timing
from hyperfleet.platform.controller.sources import Until
from hyperfleet.platform.pool import LocalPool
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.sweeps.run import submit_sweep
from hyperfleet.platform.worker import run_worker
from hyperfleet.spec.states import TrialState
from hyperfleet.testing.sweeps import minimal_sweep
from tests.integration.cli import cli

pytestmark = pytest.mark.slow
RESIZER = "hyperfleet.platform.controller.resizing"
TOY = "tests.integration.elastic_workloads:paced_pbt_toy"
PROGRAM = Path(__file__).resolve().parents[1] / "launcher" / "programs" / "resumable.py"
PBT_STEPS = 160  # 80 reports 0.5 s apart: room for a growth's group to start under load


def _stores(runs: Path) -> dict[str, Any]:
    return {
        "storage": f"sqlite:///{runs / 'hf.db'}",
        "tracking": {"uri": f"sqlite:///{runs / 'mlflow.db'}", "log_model": False},
        "workdir": str(runs),
    }


def _toy(name: str, runs: Path, steps: int, **changes: Any) -> dict[str, Any]:
    return minimal_sweep(
        name=name,
        objective={"metric": "Q", "mode": "max"},
        space={"h0": {"type": "float", "low": 0.0, "high": 1.0},
               "h1": {"type": "float", "low": 0.0, "high": 1.0}},
        trial={"workload": TOY, "steps": steps, "eval_every": 2,
               "params": {"lr": 0.05, "report_wait": 0.5}},
        **_stores(runs),
        **changes,
    )  # fmt: skip


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture()
def resizer_log() -> Iterator[_Records]:
    handler, logger = _Records(), logging.getLogger(RESIZER)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _runs(client: MlflowClient, sweep: str) -> list[Any]:
    exp = client.get_experiment_by_name(sweep)
    assert exp is not None
    return [
        r for r in client.search_runs([exp.experiment_id]) if "mlflow.parentRunId" in r.data.tags
    ]


def test_pbt_the_better_member_gets_the_idle_slot_and_exploits_go_on(
    tmp_path: Path, resizer_log: _Records
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    pbt = _toy(
        "pbt", runs, PBT_STEPS,
        scheduler={"type": "pbt", "population": 2, "perturbation_interval": 60,
                   "quantile_fraction": 0.5, "resample_probability": 0.0,
                   "perturbation_factors": [0.8, 1.2], "seed": 0,
                   "initial": [{"h0": 1.0, "h1": 1.0}, {"h0": 0.0, "h1": 0.0}]},
        budget={"max_concurrent": 2},
    )  # fmt: skip
    pbt["trial"]["resources"] = {"devices": {"min": 1, "max": 2}}
    filler = _toy(
        "filler", runs, 16, scheduler={"type": "random", "seed": 0},
        budget={"trials": 1, "max_concurrent": 1},
    )  # fmt: skip
    url = pbt["storage"]
    for data in (pbt, filler):
        cfg = parse_sweep(data)
        submit_sweep(cfg, url, cfg.tracking.uri)
    run_worker(
        url, LocalPool.slots(3), tracking_uri=pbt["tracking"]["uri"],
        until=Until(done=False, idle=3.0), timing=Timing(rescan_every=0.5),
    )  # fmt: skip

    storage = Storage(url, create=False)
    members = {t.number: t for t in storage.trials.of("pbt")}
    lineage = storage.population.lineage("pbt")
    storage.close()
    assert {n: (t.state, t.last_step) for n, t in members.items()} == {
        0: (TrialState.COMPLETE, PBT_STEPS), 1: (TrialState.COMPLETE, PBT_STEPS),
    }  # fmt: skip
    # the first growth is the better member's, once the filler's slot is free
    grown = [m for m in resizer_log.messages if "resizes 1 -> 2" in m]
    assert grown and grown[0].startswith("sweep pbt trial 0:"), resizer_log.messages
    assert [r for _, r in members[0].sizes or []][:2] == [1, 2], members[0].sizes
    assert (members[1].sizes or [[0, 0]])[0][1] == 1
    # the worse member exploited the better one, and left Q = -0.42 behind
    exploits = [e for e in lineage if e.kind == "exploit"]
    assert exploits and exploits[0].member == 1 and exploits[0].donor == 0
    assert exploits[0].step == 60 and exploits[0].member_score == pytest.approx(-0.42)
    assert members[1].metrics["Q"] > 0.0
    # each member one MLflow run, each step logged once
    client = MlflowClient(pbt["tracking"]["uri"])
    children = _runs(client, "pbt")
    assert sorted(r.info.run_id for r in children) == sorted(
        t.mlflow_run_id for t in members.values()
    )
    for run in children:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "Q")]
        assert len(steps) == len(set(steps)), steps


@pytest.mark.parametrize(
    "scheduler",
    [
        {"type": "skopt", "seed": 0, "n_initial_points": 2},
        {"type": "gp", "seed": 0, "n_startup_trials": 2},
        {"type": "tpe", "seed": 0, "n_startup_trials": 2},
    ],
    ids=["skopt", "gp", "tpe"],
)
def test_bayesian_a_resized_trial_is_one_point_in_flight(
    scheduler: dict[str, Any], tmp_path: Path, mlflow_template: Path
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "mlflow.db").write_bytes(mlflow_template.read_bytes())
    data = minimal_sweep(
        name="bo",
        objective={"metric": "val_loss", "mode": "min"},
        scheduler=scheduler,
        space={"x": {"type": "float", "low": 0.0, "high": 1.0}},
        budget={"trials": 3, "max_concurrent": 2},
        trial={
            "workload": None,
            "command": ["python", str(PROGRAM), "--steps", "${steps}", "--checkpoint-dir",
                        "${checkpoint_dir}", "--wait", "0.3", "--finish-on-sigterm", "${args}"],
            "steps": 24,
            "resizable": True,
            "resources": {"devices": {"min": 1, "max": 2}},
        },
        **_stores(runs),
    )  # fmt: skip
    path = tmp_path / "bo.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = cli("sweep", "run", str(path), "--devices", "cpu:3", "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["state_counts"]["COMPLETE"] == 3

    storage = Storage(data["storage"], create=False)
    trials = sorted(storage.trials.of("bo"), key=lambda t: t.number)
    study = optuna.load_study(study_name="bo", storage=storage.optuna)
    told = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    storage.close()
    resized = [t for t in trials if len(t.sizes or []) > 1]
    assert resized, [t.sizes for t in trials]
    for t in resized:
        assert [r for _, r in t.sizes or []] == [1, 2] and t.attempts == 2 and t.retries == 0
    # three trials, three points, each value told once: the one its last report carried
    assert [t.state.name for t in told] == ["COMPLETE"] * 3
    assert len({t.params["x"] for t in told}) == 3
    for mine, theirs in zip(trials, told, strict=True):
        assert theirs.values == [mine.metrics["val_loss"]]
        assert theirs.params["x"] == mine.params["x"]
        assert sorted(theirs.intermediate_values) == list(range(1, 25))
    client = MlflowClient(data["tracking"]["uri"])
    assert len(_runs(client, "bo")) == 3
