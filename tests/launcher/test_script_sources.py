"""The script trials' metric sources: one table, one protocol, each source read as the runner
reads it (start, lines, polls)."""

from __future__ import annotations

import shutil
import typing
from pathlib import Path

import pytest

from hyperfleet.platform.launcher.script.sources import (
    SOURCES,
    MetricSource,
    MlflowSource,
    ProgramRun,
    PushSource,
    StdoutSource,
    metric_source,
)
from hyperfleet.spec.trial import MetricsConfig

OBJECTIVES = ["val_loss"]


def _config(source: str, pattern: str | None = None) -> MetricsConfig:
    return MetricsConfig.model_validate({"from": source, "pattern": pattern})


def test_the_table_has_one_row_per_name_the_config_accepts() -> None:
    names = typing.get_args(MetricsConfig.model_fields["source"].annotation)
    assert set(SOURCES) == set(names)
    assert {name: type(metric_source(OBJECTIVES, _config(name))) for name in names} == {
        "stdout": StdoutSource,
        "mlflow": MlflowSource,
        "push": PushSource,
    }


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_every_source_satisfies_the_protocol(name: str) -> None:
    source = metric_source(OBJECTIVES, _config(name))
    assert isinstance(source, MetricSource)
    assert isinstance(source.read_on_host, bool) and isinstance(source.program_logs_run, bool)
    assert source.poll_s is None or source.poll_s > 0
    source.start(None)  # no MLflow: every source still reads what it can
    assert source.poll() == []
    assert source.looked_for().startswith("no val_loss reported; looked for ")


def test_a_class_without_the_protocols_methods_is_not_a_source() -> None:
    class LinesOnly:
        read_on_host = False
        program_logs_run = False
        poll_s = None

        def read_line(self, line: str) -> list[tuple[int, dict[str, float]]]:
            return []

    assert not isinstance(LinesOnly(), MetricSource)


def test_stdout_reads_lines_and_starts_over_with_the_program() -> None:
    source = metric_source(OBJECTIVES, _config("stdout"))
    source.start(None)
    assert source.read_line("loading") == []
    assert source.read_line("val_loss=0.5") == [(1, {"val_loss": 0.5})]
    assert source.read_line("val_loss=0.4") == [(2, {"val_loss": 0.4})]
    source.start(None)  # the program started again: steps count from its start
    assert source.read_line("val_loss=0.3") == [(1, {"val_loss": 0.3})]
    custom = metric_source(OBJECTIVES, _config("stdout", r"loss (?P<val_loss>\S+)"))
    custom.start(None)
    assert custom.read_line("val_loss=0.2") == [] and custom.read_line("loss 0.2") == [
        (1, {"val_loss": 0.2})
    ]
    assert custom.looked_for() == (
        "no val_loss reported; looked for lines matching 'loss (?P<val_loss>\\\\S+)' on stdout"
    )


def test_push_reads_nothing_itself() -> None:
    source = metric_source(OBJECTIVES, _config("push"))
    source.start(None)
    assert source.read_line("step=1 val_loss=0.5") == [] and source.poll() == []
    assert source.looked_for() == (
        "no val_loss reported; looked for reports through hyperfleet.trial()"
    )


def test_mlflow_reads_the_runs_new_steps(tmp_path: Path, mlflow_template: Path) -> None:
    from mlflow import MlflowClient

    store = tmp_path / "mlflow.db"
    shutil.copy(mlflow_template, store)
    uri = f"sqlite:///{store}"
    client = MlflowClient(uri)
    run_id = client.create_run(client.create_experiment("e")).info.run_id
    source = metric_source(OBJECTIVES, _config("mlflow"))
    assert source.read_on_host and source.program_logs_run
    source.start(ProgramRun(uri, run_id))
    assert source.read_line("step=1 val_loss=0.5") == []  # lines are not this source's
    assert source.poll() == []
    client.log_metric(run_id, "val_loss", 0.5, step=1)
    client.log_metric(run_id, "acc", 0.7, step=1)
    assert source.poll() == [(1, {"val_loss": 0.5, "acc": 0.7})]
    assert source.poll() == []
    client.log_metric(run_id, "val_loss", 0.4, step=2)
    assert source.poll() == [(2, {"val_loss": 0.4})]
    source.start(None)  # the program's run is gone: nothing more is read
    client.log_metric(run_id, "val_loss", 0.3, step=3)
    assert source.poll() == []
    assert source.looked_for() == (
        "no val_loss reported; looked for metric val_loss in the trial's MLflow run"
    )
