"""Sweep-file validation: every malformed file exits 2 with one line per problem naming the
field, never a traceback, and writes nothing to storage or MLflow."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from hyperfleet.errors import ConfigError
from hyperfleet.platform.cli import app
from hyperfleet.platform.config import load_sweep
from tests.conftest import BASE_SWEEP, deep_update
from tests.integration.test_parallel_trials import LM


def _drop(path: str) -> dict[str, Any]:
    data = deep_update(BASE_SWEEP, {})
    *parents, last = path.split(".")
    node = data
    for p in parents:
        node = node[p]
    del node[last]
    return data


def _set(path: str, value: Any) -> dict[str, Any]:
    data = deep_update(BASE_SWEEP, {})
    *parents, last = path.split(".")
    node = data
    for p in parents:
        node = node[p]
    node[last] = value
    return data


def _async_ps(**changes: Any) -> str:
    """The base sweep as an async-ps trial (1 server + 2 workers) with ``changes``."""
    ps = {"resources": {"devices": 3}, "parallel": {"data": 3}, "sync": {"mode": "async-ps"}}
    return yaml.safe_dump(deep_update(BASE_SWEEP, {"trial": {**ps, **changes}}))


# (case id, file text, a substring the error line must contain)
CASES: list[tuple[str, str, str]] = [
    (
        "async-ps-fp16",
        _async_ps(precision="fp16"),
        "trial.precision: fp16 is not supported on backend 'rpc'",
    ),
    (
        "async-ps-in-process",
        _async_ps(resources={"devices": 0}),
        "trial.resources.devices: 0 runs the trial in-process, which has no parameter server",
    ),
    ("async-ps-grad-accum", _async_ps(grad_accum=2), "trial.grad_accum: 2 with sync.mode async"),
    ("async-ps-grad-clip", _async_ps(grad_clip=1.0), "trial.grad_clip: not applied by the"),
    ("async-ps-comm-hook", _async_ps(comm={"hook": "ring"}), "trial.comm.hook: ring applies to"),
    ("yaml-syntax", "name: t\nspace: {lr: [1, 2\n", "YAML syntax error at line"),
    ("not-a-mapping", "- just\n- a list\n", "expected a mapping"),
    (
        "unknown-top-key",
        yaml.safe_dump(deep_update(BASE_SWEEP, {"bogus": 1})),
        "bogus: unknown key",
    ),
    (
        "unknown-nested-key",
        yaml.safe_dump(deep_update(BASE_SWEEP, {"budget": {"trails": 3}})),
        "budget.trails: unknown key",
    ),
    (
        "misspelled-key",
        yaml.safe_dump(deep_update(BASE_SWEEP, {"budget": {"max_concurent": 2}})),
        "budget.max_concurent: unknown key; did you mean 'max_concurrent'?",
    ),
    (
        "misspelled-param-type",
        yaml.safe_dump(deep_update(BASE_SWEEP, {"space": {"lr": {"type": "flaot"}}})),
        "space.lr.type: unknown type 'flaot'; did you mean 'float'? expected one of float, int",
    ),
    (
        "misspelled-scheduler-type",
        yaml.safe_dump(deep_update(BASE_SWEEP, {"scheduler": {"type": "tpee"}})),
        "scheduler.type: unknown type 'tpee'; did you mean 'tpe'?",
    ),
    (
        "misspelled-pruner-type",
        yaml.safe_dump(deep_update(BASE_SWEEP, {"pruner": {"type": "mediann"}})),
        "pruner.type: unknown type 'mediann'; did you mean 'median'?",
    ),
    (
        "misspelled-workload",
        yaml.safe_dump(deep_update(BASE_SWEEP, {"trial": {"workload": "digts"}})),
        "trial.workload: unknown workload 'digts'; expected one of charlm, digits or "
        "'package.module:function'; did you mean 'digits'?",
    ),
    (
        "misspelled-workload-param",
        yaml.safe_dump(deep_update(BASE_SWEEP, {"trial": {"params": {"batch_sise": 64}}})),
        "trial.params.batch_sise: unknown parameter of workload 'digits'; did you mean "
        "'batch_size'?",
    ),
    (
        "wrong-type",
        yaml.safe_dump(deep_update(BASE_SWEEP, {"trial": {"steps": "many"}})),
        "trial.steps:",
    ),
    (
        "low-gt-high",
        yaml.safe_dump(
            deep_update(BASE_SWEEP, {"space": {"lr": {"type": "float", "low": 1.0, "high": 0.1}}})
        ),
        "space.lr: low (1.0) must be <= high (0.1)",
    ),
    (
        "log-low-nonpositive",
        yaml.safe_dump(
            deep_update(
                BASE_SWEEP,
                {"space": {"lr": {"type": "float", "low": 0.0, "high": 1.0, "log": True}}},
            )
        ),
        "space.lr: log: true needs low > 0",
    ),
    ("empty-space", yaml.safe_dump(_set("space", {})), "space: the search space is empty"),
    (
        "ahead-negative",
        yaml.safe_dump(deep_update(BASE_SWEEP, {"budget": {"ahead": -1}})),
        "budget.ahead:",
    ),
    (
        "ahead-of-pbt",
        yaml.safe_dump(
            deep_update(
                _set("scheduler", {"type": "pbt", "population": 2}), {"budget": {"ahead": 4}}
            )
        ),
        "budget.ahead: a pbt sweep resumes its members instead of making suggestions ahead; "
        "remove budget.ahead",
    ),
    (
        "elastic-min-interval-zero",
        yaml.safe_dump(deep_update(BASE_SWEEP, {"elastic": {"min_interval": 0}})),
        "elastic.min_interval: Input should be greater than or equal to 1 (got 0)",
    ),
    (
        "elastic-share-above-one",
        yaml.safe_dump(deep_update(BASE_SWEEP, {"elastic": {"share": 1.5}})),
        "elastic.share: Input should be less than or equal to 1 (got 1.5)",
    ),
    (
        "elastic-misspelled-knob",
        yaml.safe_dump(deep_update(BASE_SWEEP, {"elastic": {"min_intreval": 2}})),
        "elastic.min_intreval: unknown key; did you mean 'min_interval'?",
    ),
    (
        "unknown-scheduler",
        yaml.safe_dump(deep_update(BASE_SWEEP, {"scheduler": {"type": "magic"}})),
        "scheduler.type: unknown type 'magic'; expected one of tpe, random,",
    ),
    (
        "unknown-param-type",
        yaml.safe_dump(
            deep_update(BASE_SWEEP, {"space": {"lr": {"type": "real", "low": 1, "high": 2}}})
        ),
        "space.lr.type: unknown type 'real'; expected one of float, int, categorical",
    ),
    (
        "unknown-workload",
        yaml.safe_dump(deep_update(BASE_SWEEP, {"trial": {"workload": "nosuchthing"}})),
        "trial.workload: unknown workload 'nosuchthing'",
    ),
    (
        "unimportable-workload",
        yaml.safe_dump(deep_update(BASE_SWEEP, {"trial": {"workload": "no_such_pkg.train:main"}})),
        "trial.workload: cannot import module 'no_such_pkg.train'",
    ),
    (
        "missing-function",
        yaml.safe_dump(deep_update(BASE_SWEEP, {"trial": {"workload": "json:no_such_fn"}})),
        "trial.workload: module 'json' has no function 'no_such_fn'",
    ),
    (
        "devices-zero",
        yaml.safe_dump(deep_update(BASE_SWEEP, {"trial": {"resources": {"devices": -1}}})),
        "trial.resources.devices:",
    ),
    (
        "devices-vs-layout",
        yaml.safe_dump(
            deep_update(
                BASE_SWEEP, {"trial": {"resources": {"devices": 3}, "parallel": {"data": 2}}}
            )
        ),
        "trial.resources.devices: 3 != parallel.data * parallel.pipeline",
    ),
    (
        "duplicate-key",
        "name: t\nname: u\n",
        "name: duplicate key at line 2",
    ),
    (
        "duplicate-param",
        yaml.safe_dump(BASE_SWEEP).replace(
            "  lr:", "  hidden:\n    type: int\n    low: 1\n    high: 2\n  lr:", 1
        ),
        "hidden: duplicate key",
    ),
    (
        "missing-objective",
        yaml.safe_dump(_drop("objective")),
        "objective: required field is missing",
    ),
    (
        "bad-mode",
        yaml.safe_dump(deep_update(BASE_SWEEP, {"objective": {"mode": "maximize"}})),
        "objective.mode:",
    ),
    (
        "unknown-workload-param",
        yaml.safe_dump(
            deep_update(
                BASE_SWEEP, {"space": {"momentum": {"type": "float", "low": 0.1, "high": 0.9}}}
            )
        ),
        "space.momentum: unknown parameter of workload 'digits'",
    ),
    (
        "fixed-and-searched",
        yaml.safe_dump(deep_update(BASE_SWEEP, {"trial": {"params": {"lr": 0.1}}})),
        "trial.params.lr: also in space",
    ),
    (
        "bad-timeout",
        yaml.safe_dump(deep_update(BASE_SWEEP, {"budget": {"timeout": "soon"}})),
        "budget.timeout: expected a duration",
    ),
    (
        "bad-name",
        yaml.safe_dump(deep_update(BASE_SWEEP, {"name": "my sweep!"})),
        "name: expected letters",
    ),
    (
        "no-budget",
        yaml.safe_dump(deep_update(BASE_SWEEP, {"budget": {"trials": None}})),
        "budget: give trials or timeout",
    ),
    (
        "per-device-zero",
        yaml.safe_dump(_set("trial.resources", {"devices": 1, "per_device": 0})),
        "trial.resources.per_device: Input should be greater than or equal to 1",
    ),
    (
        "per-device-fraction",
        yaml.safe_dump(_set("trial.resources", {"devices": 1, "per_device": 0.5})),
        "trial.resources.per_device: Input should be a valid integer",
    ),
    (
        "per-device-two-processes",
        yaml.safe_dump(
            deep_update(
                BASE_SWEEP,
                {"trial": {"resources": {"devices": 2, "per_device": 4}, "parallel": {"data": 2}}},
            )
        ),
        "trial.resources: per_device (4) shares one device among trials of one process; a "
        "trial of 2 processes needs whole devices: use devices: 1 or per_device: 1",
    ),
    (
        "per-device-in-process",
        yaml.safe_dump(_set("trial.resources", {"devices": 0, "per_device": 2})),
        "in-process trials (devices: 0) hold no device: use devices: 1 or per_device: 1",
    ),
    (
        "per-device-nodes",
        yaml.safe_dump(
            deep_update(
                BASE_SWEEP,
                {
                    "trial": {
                        "resources": {"devices": 2, "nodes": 2, "per_device": 2},
                        "parallel": {"data": 2},
                    }
                },
            )
        ),
        "trial.resources: per_device (2) shares one device among small trials; a trial over 2 "
        "nodes needs whole devices: use per_device: 1",
    ),
]


def _write(tmp_path: Path, text: str, rewrite: bool = True) -> Path:
    # every case points its stores into tmp_path/runs so the test can see nothing was written
    if rewrite:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            data = None
        if isinstance(data, dict):
            data["storage"] = f"sqlite:///{tmp_path / 'runs' / 'hf.db'}"
            data["tracking"] = {"uri": f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"}
            data["workdir"] = str(tmp_path / "runs")
            text = yaml.safe_dump(data, sort_keys=False)
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    return path


def test_there_are_at_least_15_malformed_cases() -> None:
    assert len(CASES) >= 15


@pytest.mark.parametrize(("case", "text", "expected"), CASES, ids=[c[0] for c in CASES])
def test_malformed_file_exits_2_with_field_and_writes_nothing(
    case: str, text: str, expected: str, tmp_path: Path, workdir: Path
) -> None:
    path = _write(tmp_path, text, rewrite=not case.startswith("duplicate"))
    runner = CliRunner()
    for args in (["validate", str(path)], ["sweep", "run", str(path)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (case, args, result.output)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert lines, case
        assert all(line.startswith("error: ") for line in lines), lines
        assert any(expected in line for line in lines), (expected, lines)
        assert "Traceback" not in result.output
    assert not (tmp_path / "runs").exists(), f"{case} wrote to the stores"
    assert not (workdir / "hyperfleet-runs").exists()


def test_unreadable_path_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "missing.yaml")])
    assert result.exit_code == 2
    assert "cannot read the sweep file" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_several_problems_are_all_reported(tmp_path: Path) -> None:
    data = deep_update(BASE_SWEEP, {"budget": {"trials": 0}, "trial": {"steps": -1}})
    path = _write(tmp_path, yaml.safe_dump(data))
    with pytest.raises(ConfigError) as info:
        load_sweep(path)
    fields = " ".join(info.value.problems)
    assert "budget.trials" in fields and "trial.steps" in fields


# Layouts the trial runtime cannot run, on a charlm trial: refused by ``validate`` and by
# ``sweep run`` with one line and exit 2, before any process starts or anything is written.

INVALID_LAYOUTS: dict[str, tuple[dict[str, Any], str]] = {
    "devices-not-DxP": (
        {"resources": {"devices": 3}, "parallel": {"data": 2}},
        "error: trial.resources.devices: 3 != parallel.data * parallel.pipeline",
    ),
    "more-stages-than-layers": (
        {"resources": {"devices": 8}, "parallel": {"pipeline": 8, "microbatches": 8}},
        "error: trial.parallel.pipeline: 8 stages > 4 model layers",
    ),
    "1f1b-microbatches-lt-P": (
        {"resources": {"devices": 2}, "parallel": {"pipeline": 2, "microbatches": 1}},
        "error: trial.parallel.microbatches: 1 < parallel.pipeline 2",
    ),
    "fp16-on-the-async-ps-rpc-backend": (
        {"workload": "digits", "params": {}, "resources": {"devices": 3},
         "parallel": {"data": 3}, "sync": {"mode": "async-ps"}, "precision": "fp16"},
        "error: trial.precision: fp16 is not supported on backend 'rpc' (sync.mode async-ps)",
    ),
}  # fmt: skip


def _layout_file(tmp_path: Path, case: str) -> Path:
    changes, _ = INVALID_LAYOUTS[case]
    base = LM
    if "params" in changes:  # another workload: start from none of charlm's parameters
        base = {**LM, "trial": {k: v for k, v in LM["trial"].items() if k != "params"}}
    data = deep_update(base, {"trial": changes})
    data["workdir"] = str(tmp_path / "runs")
    data["storage"] = f"sqlite:///{tmp_path / 'runs' / 'hf.db'}"
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("case", list(INVALID_LAYOUTS))
def test_invalid_layout_is_one_line_and_exit_2_before_anything_starts(
    case: str, tmp_path: Path, workdir: Path
) -> None:
    path, expected = _layout_file(tmp_path, case), INVALID_LAYOUTS[case][1]
    cache = tmp_path / "cache"
    for args in (["validate", str(path)], ["sweep", "run", str(path), "--devices", "cpu:8"]):
        result = CliRunner().invoke(app, args, env={"HYPERFLEET_CACHE": str(cache)})
        assert result.exit_code == 2, (args, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(expected), result.stderr
        assert "Traceback" not in result.output
        assert not (tmp_path / "runs").exists(), "nothing may be written before validation"
        assert not cache.exists()
        assert not (workdir / "hyperfleet-runs").exists()


# The same through a real ``hyperfleet`` process (what the in-process runs above stand for):
# its exit status, its one stderr line, nothing written.
REAL_PROCESS_CASES = {
    "unknown-key": "error: bogus: unknown key; remove it or check its spelling",
    "1f1b-microbatches-lt-P": INVALID_LAYOUTS["1f1b-microbatches-lt-P"][1],
}


@pytest.mark.parametrize("case", list(REAL_PROCESS_CASES))
def test_real_process_exit_code_and_no_traceback(case: str, tmp_path: Path) -> None:
    if case == "unknown-key":
        path = _write(tmp_path, yaml.safe_dump(deep_update(BASE_SWEEP, {"bogus": 1})))
    else:
        path = _layout_file(tmp_path, case)
    cache = tmp_path / "cache"
    proc = subprocess.run(
        [sys.executable, "-m", "hyperfleet.platform", "sweep", "run", str(path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "HYPERFLEET_CACHE": str(cache)},
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(REAL_PROCESS_CASES[case]), proc.stderr
    assert not (tmp_path / "runs").exists(), "nothing may be written before validation"
    assert not (tmp_path / "hyperfleet-runs").exists() and not cache.exists()


def test_valid_file_parses_to_frozen_typed_objects(tmp_path: Path) -> None:
    path = _write(tmp_path, yaml.safe_dump(deep_update(BASE_SWEEP, {"budget": {"timeout": "30m"}})))
    cfg = load_sweep(path)
    assert cfg.budget.timeout == 1800
    assert cfg.trial.parallel.data == 2
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen-instance error
        cfg.name = "other"  # type: ignore[misc]


def test_quickstart_example_is_valid() -> None:
    root = Path(__file__).resolve().parents[2]
    cfg = load_sweep(root / "examples" / "quickstart.yaml")
    assert cfg.budget.trials == 8 and cfg.budget.max_concurrent == 2
    assert cfg.trial.resources.devices == 2
