"""``trial.resources.devices: {min, max}``: accepted for trials that resume at another size,
refused in one line (exit 2, nothing written) for malformed ranges and for trials that do not."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from hyperfleet.platform.cli import app
from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.config.elastic import elastic_sizes
from hyperfleet.spec.resources import Resources
from hyperfleet.spec.workloads import WorkloadSupports, workload_supports
from tests.conftest import BASE_SWEEP

RESIZABLE = """
def main(ctx):
    pass

main.hyperfleet_supports = {"resizable": True}
"""
FIXED = RESIZABLE.replace('{"resizable": True}', '{"global_batch": True}')


def _sweep(tmp_path: Path, devices: Any, **trial: Any) -> dict[str, Any]:
    """The tests' digits sweep with ``resources.devices: devices`` and ``trial`` changes; its
    stores in ``tmp_path/runs`` (which a refused file must not create)."""
    data = copy.deepcopy(BASE_SWEEP)
    data["trial"].pop("parallel")
    data["trial"]["resources"] = {"devices": devices}
    for key, value in trial.items():
        if isinstance(value, dict) and isinstance(data["trial"].get(key), dict):
            data["trial"][key] = {**data["trial"][key], **value}
        else:
            data["trial"][key] = value
    data["storage"] = f"sqlite:///{tmp_path / 'runs' / 'hf.db'}"
    data["tracking"] = {"uri": f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"}
    data["workdir"] = str(tmp_path / "runs")
    return data


def _other(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` for a workload other than digits: a space over lr, val_loss minimised."""
    data["space"] = {"lr": {"type": "float", "low": 1e-3, "high": 1e-2}}
    data["trial"]["params"] = {}
    data["objective"] = {"metric": "val_loss", "mode": "min"}
    return data


def _script(tmp_path: Path, **trial: Any) -> dict[str, Any]:
    data = _sweep(tmp_path, {"min": 1, "max": 2}, **trial)
    for key in ("workload", "params"):
        data["trial"].pop(key, None)
    data["trial"]["command"] = [
        "python",
        str(Path("examples/script/train.py").resolve()),
        "${args}",
    ]
    return data


def _validate(tmp_path: Path, data: dict[str, Any]) -> tuple[int, list[str]]:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert "Traceback" not in result.output
    return result.exit_code, [line for line in result.stderr.splitlines() if line.strip()]


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two custom workloads on the import path: one declares it resumes at any size."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "elastic_ok.py").write_text(RESIZABLE)
    (tmp_path / "mods" / "elastic_fixed.py").write_text(FIXED)
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    return tmp_path


def test_a_range_is_stored_as_its_first_size_and_its_largest(tmp_path: Path) -> None:
    cfg = parse_sweep(_sweep(tmp_path, {"min": 2, "max": 4}))
    resources = cfg.trial.resources
    assert (resources.devices, resources.max_devices, resources.elastic) == (2, 4, True)
    assert list(resources.sizes) == [2, 3, 4]
    assert cfg.trial.parallel.data == 2  # the layout at its first size
    again = parse_sweep(cfg.model_dump(mode="json"))  # what storage keeps and workers read
    assert again.trial.resources == resources


def test_an_int_keeps_a_fixed_size(tmp_path: Path) -> None:
    resources = parse_sweep(_sweep(tmp_path, 2)).trial.resources
    assert (resources.devices, resources.max_devices, resources.elastic) == (2, None, False)
    assert list(resources.sizes) == [2]
    assert not Resources.model_validate({"devices": {"min": 3, "max": 3}}).elastic


def test_builtins_and_declared_workloads_and_declared_programs_are_accepted(
    modules: Path,
) -> None:
    cases = [
        _sweep(modules, {"min": 1, "max": 4}),
        _other(_sweep(modules, {"min": 1, "max": 2}, workload="charlm", steps=10)),
        _other(_sweep(modules, {"min": 1, "max": 2}, workload="elastic_ok:main")),
        _other(_script(modules, resizable=True)),
    ]
    for data in cases:
        code, lines = _validate(modules, data)
        assert code == 0, (data["trial"], lines)


R = "give devices: {min: M, max: N} with 1 <= M <= N"
MALFORMED = {
    "min-above-max": (
        {"min": 3, "max": 2},
        {},
        f"trial.resources.devices: min (3) is above max (2); {R}",
    ),
    "min-zero": ({"min": 0, "max": 2}, {}, "trial.resources.devices: min (0) must be at least 1"),
    "no-max": ({"min": 1}, {}, f"trial.resources.devices: the range lacks max; {R}"),
    "unknown-key": ({"min": 1, "max": 2, "step": 1}, {}, "unknown key 'step' in the range"),
    "not-a-number": ({"min": 1, "max": "4"}, {}, "max must be a whole number of devices"),
    "twice": (
        {"min": 1, "max": 2},
        {"max_devices": 2},
        "trial.resources.devices: give the range either as devices: {min, max} or as devices "
        "and max_devices, not both",
    ),
    "nodes": (
        {"min": 2, "max": 4},
        {"nodes": 2},
        "trial.resources: nodes (2): an elastic trial (devices: {min, max}) runs on whole "
        "devices of one host for now; use nodes: 1 or give devices an int",
    ),
    "shares": ({"min": 1, "max": 2}, {"per_device": 2}, "per_device (2): an elastic trial"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_range_is_one_line_naming_the_field_and_exit_2(
    case: str, tmp_path: Path
) -> None:
    devices, resources, expected = MALFORMED[case]
    data = _sweep(tmp_path, devices)
    data["trial"]["resources"].update(resources)
    code, lines = _validate(tmp_path, data)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: ") and expected in lines[0], lines
    assert not (tmp_path / "runs").exists()


def _refused(modules: Path) -> dict[str, tuple[dict[str, Any], str]]:
    custom = _other(_sweep(modules, {"min": 1, "max": 2}, workload="elastic_fixed:main"))
    charlm = {"workload": "charlm", "steps": 10, "parallel": {"pipeline": 2}}
    return {
        "workload-undeclared": (
            custom,
            "trial.resources.devices: {min: 1, max: 2} needs a workload that resumes at another "
            "size; 'elastic_fixed:main' does not declare it: keep its state in "
            "ctx.state/ctx.restore and declare hyperfleet_supports = {'resizable': True}",
        ),
        "program-undeclared": (
            _script(modules),
            "trial.resources.devices: {min: 1, max: 2} relaunches the program at other sizes, "
            "which it must resume at (from ${checkpoint_dir}, at any WORLD_SIZE); say so with "
            "trial.resizable: true, or give devices an int",
        ),
        "resizable-on-a-workload": (
            _sweep(modules, 2, resizable=True),
            "trial.resizable: declares that a program (trial.command) resumes at another size",
        ),
        "async-ps": (
            _sweep(modules, {"min": 3, "max": 4}, sync={"mode": "async-ps"}),
            "trial.resources.devices: {min: 3, max: 4}: async-ps gives its ranks fixed roles",
        ),
        "pipeline": (
            _other(_sweep(modules, {"min": 2, "max": 4}, **charlm)),
            "trial.resources.devices: {min: 2, max: 4}: an elastic trial's size is its data "
            "axis; use parallel.pipeline: 1",
        ),
        "batch-at-max": (
            _sweep(modules, {"min": 1, "max": 3}),
            "trial.params.batch_size: 64 is not divisible by max devices x grad_accum = 3",
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "workload-undeclared",
        "program-undeclared",
        "resizable-on-a-workload",
        "async-ps",
        "pipeline",
        "batch-at-max",
    ],
)
def test_a_trial_that_cannot_resume_at_another_size_is_refused_in_one_line(
    case: str, modules: Path
) -> None:
    data, expected = _refused(modules)[case]
    code, lines = _validate(modules, data)
    assert code == 2, lines
    assert any(line.startswith("error: ") and expected in line for line in lines), lines
    assert len(lines) == 1, lines
    assert not (modules / "runs").exists()


def test_the_sizes_an_elastic_trial_may_run_at_are_those_its_global_batch_splits_over(
    tmp_path: Path,
) -> None:
    cfg = parse_sweep(_sweep(tmp_path, {"min": 1, "max": 8}))
    supports = workload_supports("digits")
    assert elastic_sizes(cfg.trial, supports, {"batch_size": 64}) == (1, 2, 4, 8)
    assert elastic_sizes(cfg.trial, supports, {"batch_size": 48}) == (1, 2, 3, 4, 6, 8)
    accum = parse_sweep(_sweep(tmp_path, {"min": 1, "max": 8}, grad_accum=4)).trial
    assert elastic_sizes(accum, supports, {"batch_size": 48}) == (1, 2, 3, 4, 6)
    # a workload without a global batch runs at every size of its range
    assert elastic_sizes(cfg.trial, WorkloadSupports(), {"batch_size": 7}) == tuple(range(1, 9))
