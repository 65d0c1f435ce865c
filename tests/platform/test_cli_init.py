"""``hyperfleet init`` writes the recommended sweep (tpe with asha) for a workload, a file
that validates, with a smoke run's budget (a handful of trials, a few minutes); it refuses to
overwrite, and bad input is one line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from hyperfleet.platform.cli import app
from hyperfleet.platform.config import load_sweep


@pytest.mark.parametrize("workload", ["digits", "charlm"])
def test_writes_the_recommended_sweep(tmp_path: Path, workload: str) -> None:
    path = tmp_path / "my-sweep.yaml"
    result = CliRunner().invoke(app, ["init", str(path), "--workload", workload])
    assert result.exit_code == 0, result.output
    cfg = load_sweep(path)
    assert (cfg.name, cfg.scheduler.type, cfg.pruner.type) == ("my-sweep", "tpe", "asha")
    assert cfg.trial.workload == workload and len(cfg.dims) == 4
    budget = cfg.budget  # a smoke run: a handful of trials within a few minutes
    assert budget.trials is not None and 2 <= budget.trials <= 10
    assert budget.timeout is not None and budget.timeout <= 10 * 60
    assert f"smoke budget of {budget.trials} trials" in result.stdout


def test_a_custom_workload_gets_a_space_to_edit(tmp_path: Path) -> None:
    path = tmp_path / "custom.yaml"
    result = CliRunner().invoke(app, ["init", str(path), "--workload", "mypkg.train:main"])
    assert result.exit_code == 0, result.output
    assert "workload: mypkg.train:main" in path.read_text()
    assert "  lr:" in path.read_text()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--workload", "bogus"], "error: --workload: 'bogus' is not charlm, digits"),
        ([], "exists; give a new file name"),
    ],
)
def test_refuses_bad_input_in_one_line(tmp_path: Path, args: list[str], expected: str) -> None:
    path = tmp_path / "sweep.yaml"
    if not args:  # the file is there already: kept as it was
        path.write_text("mine\n")
    result = CliRunner().invoke(app, ["init", str(path), *args])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], lines
    assert (path.read_text() == "mine\n") if not args else not path.exists()


@pytest.mark.parametrize(
    ("module", "metrics", "written"),
    [("reports_loss_acc", ["loss", "acc"], False), ("reports_val_loss", ["val_loss"], True)],
)
def test_the_objective_is_checked_against_a_workload_s_declared_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, metrics: list[str], written: bool
) -> None:
    (tmp_path / f"{module}.py").write_text(
        f"def main(ctx):\n    pass\n\nmain.hyperfleet_supports = {{'metrics': {metrics!r}}}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "sweep.yaml"
    result = CliRunner().invoke(app, ["init", str(path), "--workload", f"{module}:main"])
    assert path.exists() == written
    if written:
        assert result.exit_code == 0 and load_sweep(path).all_objectives[0].metric == "val_loss"
        return
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"error: --workload: '{module}:main' reports acc, loss (its declared metrics), not "
        "val_loss, the objective init writes; add val_loss to its metrics and report it, or "
        "write objective.metric by hand"
    ]
