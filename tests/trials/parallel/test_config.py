"""Validation of layouts and the parallel config models."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from hyperfleet.errors import ConfigError
from hyperfleet.spec.layout import check_layout, validate_comm
from hyperfleet.spec.layout import validate_layout as _validate_layout
from hyperfleet.spec.trial import CommConfig, ParallelConfig
from hyperfleet.trials.parallel import Layout
from hyperfleet.trials.parallel.precision import fp16_problem


def validate_layout(*args: Any, **kw: Any) -> list[str]:
    """The layout checks with fp16 asked of torch in this process (the trial side's probe)."""
    return _validate_layout(*args, fp16_check=fp16_problem, **kw)


def test_a_valid_layout_has_no_problems() -> None:
    p = ParallelConfig(data=2, pipeline=2, microbatches=4)
    assert validate_layout(4, p, "bf16", n_layers=4, backend="gloo") == []
    assert validate_layout(1, ParallelConfig(), "fp16", n_layers=None, backend="nccl") == []
    assert validate_layout(2, ParallelConfig(data=2), "fp16", n_layers=4, backend="gloo") == []
    assert (
        validate_layout(
            2, ParallelConfig(pipeline=2, schedule="gpipe", microbatches=1), "fp32", 4, "gloo"
        )
        == []
    )


@pytest.mark.parametrize(
    ("devices", "parallel", "precision", "n_layers", "backend", "needle"),
    [
        (3, ParallelConfig(data=2), "fp32", 4, "gloo", "resources.devices: 3 != parallel.data"),
        (4, ParallelConfig(pipeline=4), "fp32", 3, "gloo", "parallel.pipeline: 4 stages > 3"),
        (
            2,
            ParallelConfig(pipeline=2, schedule="interleaved-1f1b", microbatches=2),
            "fp32",
            3,
            "gloo",
            "stages (pipeline*virtual) > 3",
        ),
        (
            2,
            ParallelConfig(pipeline=2, microbatches=1),
            "fp32",
            4,
            "gloo",
            "parallel.microbatches: 1 < parallel.pipeline 2 with schedule 1f1b",
        ),
        (1, ParallelConfig(), "fp16", None, "xpu", "fp16 is not supported on backend 'xpu'"),
    ],
)
def test_invalid_layouts_give_one_line_per_problem(
    devices: int,
    parallel: ParallelConfig,
    precision: str,
    n_layers: int | None,
    backend: str,
    needle: str,
) -> None:
    problems = validate_layout(devices, parallel, precision, n_layers, backend)  # type: ignore[arg-type]
    assert len(problems) == 1, problems
    assert needle in problems[0]
    assert "\n" not in problems[0]
    with pytest.raises(ConfigError) as err:
        check_layout(devices, parallel, precision, n_layers, backend, fp16_check=fp16_problem)  # type: ignore[arg-type]
    assert err.value.problems == problems


def test_every_problem_is_reported_at_once() -> None:
    p = ParallelConfig(data=1, pipeline=3, microbatches=2)
    problems = validate_layout(2, p, "fp16", 2, "xpu", grad_accum=2)
    assert len(problems) == 5, problems


def test_fp16_support_is_what_torch_can_run() -> None:
    """The probe runs fp16 autocast and loss scaling on the device type itself."""
    assert fp16_problem("cpu") is None  # autocast to float16 and a CPU GradScaler
    assert fp16_problem("cuda") is None  # taken on trust: no GPU context in the control plane
    assert "no autocast for device type 'meta'" in str(fp16_problem("meta"))
    missing = fp16_problem("xpu")  # this torch build has no XPU support
    assert missing is not None and "can't run fp16 loss scaling on 'xpu'" in missing
    assert "\n" not in missing
    assert "can't run fp16" in str(fp16_problem("mpi"))  # not a device type: a line, no crash


def test_grad_accum_with_a_pipeline_points_at_microbatches() -> None:
    p = ParallelConfig(pipeline=2, microbatches=2)
    (problem,) = validate_layout(2, p, "fp32", 4, "gloo", grad_accum=4)
    assert "raise parallel.microbatches" in problem


def test_comm_validation() -> None:
    assert validate_comm(CommConfig(hook="ring"), ParallelConfig(data=2), "gloo") == []
    (bf16,) = validate_comm(CommConfig(hook="bf16"), ParallelConfig(data=2), "gloo")
    assert "comm.hook: bf16" in bf16
    (useless,) = validate_comm(CommConfig(hook="ring"), ParallelConfig(), "gloo")
    assert "no effect" in useless


def test_models_are_strict_and_frozen() -> None:
    with pytest.raises(ValidationError):
        ParallelConfig(data=0)
    with pytest.raises(ValidationError):
        ParallelConfig(schedule="zero-bubble")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        ParallelConfig(tensor=2)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        CommConfig(bucket_mb=0)
    with pytest.raises(ValidationError):
        CommConfig(hook="gossip")  # type: ignore[arg-type]
    p = ParallelConfig(pipeline=2)
    with pytest.raises(ValidationError):
        p.data = 2  # type: ignore[misc]
    assert p.n_microbatches == 2
    assert ParallelConfig(pipeline=2, schedule="interleaved-1f1b").n_stages == 4


def test_layout_coordinates() -> None:
    layout = Layout(data=2, pipeline=3, world_size=6)
    assert [layout.coords(r) for r in range(6)] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    with pytest.raises(ConfigError):
        Layout(data=2, pipeline=2, world_size=3)
