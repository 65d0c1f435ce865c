"""A conditional space swept through the platform (storage, Optuna, MLflow, in-process trials of
``examples/conditional.py``, which fails a trial handed a param of the optimizer it didn't
choose): a TPE sweep of 30 trials records no parameter of a branch a trial did not take, at
two levels of branches; every other scheduler type runs it or refuses the file with one line."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient

from hyperfleet.platform.config import SweepConfig, active, parse_sweep
from hyperfleet.platform.config.schedulers import CONDITIONAL_TYPES
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.population import SqlPopulationStore
from hyperfleet.platform.storage.results import SweepSummary, summarize
from hyperfleet.platform.sweeps.run import SweepRunner
from tests.integration.cli import ROOT, invoke

pytestmark = pytest.mark.slow
EXAMPLE = ROOT / "examples" / "conditional.yaml"
REFUSED = ("cmaes", "gp", "nsga2", "skopt")


def example(root: Path, mlflow_template: Path, **changes: Any) -> dict[str, Any]:
    """``examples/conditional.yaml`` with its stores under ``root`` and ``changes`` applied."""
    shutil.copy(mlflow_template, root / "mlflow.db")
    data = yaml.safe_load(EXAMPLE.read_text())
    data.update(
        storage=f"sqlite:///{root / 'hf.db'}",
        tracking={"uri": f"sqlite:///{root / 'mlflow.db'}", "log_model": False},
        workdir=str(root),
        **changes,
    )
    return data


def run(data: dict[str, Any]) -> tuple[SweepConfig, SweepSummary, Storage]:
    cfg = parse_sweep(data)
    assert cfg.storage is not None and cfg.tracking.uri is not None
    SweepRunner(cfg, cfg.storage, cfg.tracking.uri).run()
    storage = Storage(cfg.storage)
    return cfg, summarize(storage, cfg.name), storage


def only_chosen(cfg: SweepConfig, params: dict[str, Any]) -> bool:
    """``params`` hold exactly the dimensions their choices open."""
    return set(params) == set(active(cfg.space, params))


def test_tpe_over_30_trials_records_only_the_chosen_branches(
    tmp_path: Path, mlflow_template: Path
) -> None:
    cfg, summary, storage = run(example(tmp_path, mlflow_template))
    assert summary.state_counts == {"COMPLETE": 30, "PRUNED": 0, "FAIL": 0}
    study = optuna.load_study(study_name=cfg.name, storage=storage.optuna)
    records = {r.number: r for r in storage.trials.of(cfg.name)}
    rows = {t.number: t for t in summary.trials}  # what ``sweep status`` prints
    assert len(records) == len(study.trials) == len(rows) == 30
    for trial in study.trials:
        assert only_chosen(cfg, trial.params), trial.params
        assert records[trial.number].params == trial.params  # storage: absent, not null
        assert rows[trial.number].params == trial.params
    status = invoke("sweep", "status", cfg.name, "--storage", cfg.storage_url).stdout
    table = "\n".join(line for line in status.splitlines() if not line.startswith("best: "))
    counts = {n: sum(n in t.params for t in study.trials) for n in ("momentum", "beta2", "decay")}
    assert {n: table.count(f"{n}=") for n in counts} == counts  # no "beta2=None" on sgd rows
    taken = {(t.params["optimizer"], t.params.get("schedule")) for t in study.trials}
    assert taken == {("sgd", "constant"), ("sgd", "step"), ("adamw", None)}  # depth 2

    client = MlflowClient(cfg.tracking_uri)
    adamw = next(r for r in records.values() if r.params["optimizer"] == "adamw")
    assert adamw.mlflow_run_id is not None
    logged = client.get_run(adamw.mlflow_run_id).data.params
    assert set(logged) == {"lr", "optimizer", "beta2"}
    assert float(logged["beta2"]) == adamw.params["beta2"]


@pytest.mark.parametrize("kind", REFUSED)
def test_a_scheduler_type_without_conditional_support_refuses_the_file_in_one_line(
    tmp_path: Path, mlflow_template: Path, kind: str
) -> None:
    data = example(tmp_path, mlflow_template, scheduler={"type": kind})
    path = tmp_path / "conditional.yaml"
    path.write_text(yaml.safe_dump(data))
    result = invoke("validate", str(path), PYTHONPATH=str(ROOT))
    assert result.exit_code == 2
    supported = ", ".join(sorted(CONDITIONAL_TYPES))
    assert result.stderr.strip().splitlines() == [
        f"error: scheduler.type: {kind!r} searches a fixed set of parameters, but "
        f"space.optimizer has sub-spaces under its choices; use one of {supported}, or a "
        f"flat space"
    ]
    assert not (tmp_path / "hf.db").exists()  # nothing written


@pytest.mark.parametrize("kind", ["random", "qmc"])
def test_random_and_qmc_run_a_conditional_space(
    tmp_path: Path, mlflow_template: Path, kind: str
) -> None:
    cfg, summary, _ = run(
        example(
            tmp_path, mlflow_template, scheduler={"type": kind, "seed": 0}, budget={"trials": 4}
        )
    )
    assert summary.state_counts["COMPLETE"] == 4
    assert all(only_chosen(cfg, t.params) for t in summary.trials)


def test_grid_runs_each_branch_cell_once(tmp_path: Path, mlflow_template: Path) -> None:
    half = {"type": "float", "low": 0.0, "high": 0.5, "step": 0.5}
    space = {
        "lr": {"type": "categorical", "choices": [0.05]},
        "optimizer": {
            "type": "categorical",
            "choices": {
                "sgd": {
                    "momentum": half,
                    "schedule": {
                        "type": "categorical",
                        "choices": {"constant": {}, "step": {"decay": {**half, "low": 0.5}}},
                    },
                },
                "adamw": {"beta2": {"type": "categorical", "choices": [0.99]}},
            },
        },
    }
    data = example(tmp_path, mlflow_template, scheduler={"type": "grid", "seed": 0}, space=space)
    cfg, summary, _ = run({**data, "budget": {"trials": 20, "max_concurrent": 1}})
    # sgd: 2 momenta x (constant, step with 1 decay), adamw: 1 -> 5 cells, then exhausted
    assert summary.state_counts == {"COMPLETE": 5, "PRUNED": 0, "FAIL": 0}
    assert all(only_chosen(cfg, t.params) for t in summary.trials)
    assert len({repr(sorted(t.params.items())) for t in summary.trials}) == 5


@pytest.mark.parametrize("kind", ["pbt", "pb2"])
def test_population_explore_keeps_members_inside_a_valid_branch(
    tmp_path: Path, mlflow_template: Path, kind: str
) -> None:
    scheduler = {
        "type": kind,
        "population": 3,
        "perturbation_interval": 10,
        "resample_probability": 0.5,
        "quantile_fraction": 0.5,
        "synchronous": True,  # every member waits at each interval: exploits, whatever the timing
        "seed": 0,
        "initial": [{"optimizer": "sgd"}, {"optimizer": "adamw"}],
    }
    data = example(tmp_path, mlflow_template, scheduler=scheduler, budget={"max_concurrent": 3})
    cfg, summary, storage = run(data)
    assert summary.state_counts["COMPLETE"] == 3  # a foreign param would have failed one
    assert all(only_chosen(cfg, t.params) for t in summary.trials)
    exploits = SqlPopulationStore(storage.engine).lineage(cfg.name)
    assert exploits, "no member exploited another"
    for event in exploits:
        assert only_chosen(cfg, event.new_params), event
