"""Workloads declare what they support; the semantic checks read the declarations, never names.

Built-ins declare their capabilities in the registry; a custom workload declares them as a
``hyperfleet_supports`` attribute of its function. The checks here run on workloads defined in
this module, referenced as ``tests.platform.test_capabilities:<name>``.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config import parse_sweep
from hyperfleet.spec.workloads import (
    BUILTIN,
    WorkloadSupports,
    load_workload,
    parse_supports,
    workload_supports,
)
from tests.conftest import BASE_SWEEP, deep_update

ROOT = Path(__file__).resolve().parents[2]


def stacked(ctx: Any) -> None:
    """A custom workload whose flat layer list is ``depth + 1`` long (blocks and a head)."""


stacked.hyperfleet_params = {"depth": 2, "lr": 0.01, "hidden": 8, "batch_size": 8}  # type: ignore[attr-defined]
stacked.hyperfleet_supports = {"pipeline_layers": lambda p: int(p["depth"]) + 1}  # type: ignore[attr-defined]


def flat(ctx: Any) -> None:
    """No pipeline form; splits its global batch; runs the parameter-server loop itself."""


flat.hyperfleet_supports = {"pipeline": False, "global_batch": True, "async_ps": True}  # type: ignore[attr-defined]


def plain(ctx: Any) -> None:
    """Declares nothing: only what every workload gets is checked."""


def bogus(ctx: Any) -> None:
    """A malformed declaration."""


bogus.hyperfleet_supports = {"async_ps": "yes"}  # type: ignore[attr-defined]


def ref(fn: Any) -> str:
    return f"{__name__}:{fn.__name__}"


def problems(trial: dict[str, Any], space: dict[str, Any] | None = None) -> list[str]:
    """The problems of the base sweep with ``trial`` changes (empty when it is valid)."""
    data = deep_update(BASE_SWEEP, {"trial": trial})
    if space is not None:
        data["space"] = space
    try:
        parse_sweep(data)
    except ConfigError as exc:
        return exc.problems
    return []


def layout(devices: int, data: int = 1, pipeline: int = 1) -> dict[str, Any]:
    return {"resources": {"devices": devices}, "parallel": {"data": data, "pipeline": pipeline}}


ASYNC_PS = {**layout(3, data=3), "sync": {"mode": "async-ps"}}


# -- declarations -----------------------------------------------------------------------------


def test_builtins_declare_their_capabilities() -> None:
    digits, charlm = workload_supports("digits"), workload_supports("charlm")
    assert (digits.has_pipeline, digits.async_ps, digits.global_batch) == (False, True, True)
    assert (charlm.has_pipeline, charlm.async_ps, charlm.global_batch) == (True, False, True)
    assert charlm.pipeline_layers is not None
    assert charlm.pipeline_layers({"n_layer": 2}) == 4  # embedding, 2 blocks, head
    assert charlm.pipeline_layers({"n_layer": 6}) == 8


def test_a_custom_declaration_is_read_from_the_function() -> None:
    supports = workload_supports(ref(stacked), load_workload(ref(stacked)))
    assert supports.has_pipeline is True and supports.pipeline_layers is not None
    assert supports.pipeline_layers({"depth": 5}) == 6
    assert not supports.async_ps and not supports.global_batch
    undeclared = workload_supports(ref(plain), load_workload(ref(plain)))
    assert undeclared == WorkloadSupports() and undeclared.has_pipeline is None


def test_a_fixed_layer_count_and_a_capabilities_object_are_accepted() -> None:
    fixed = parse_supports({"pipeline_layers": 5}, "w")
    assert fixed.pipeline_layers is not None and fixed.pipeline_layers({}) == 5
    given = WorkloadSupports(async_ps=True)
    assert parse_supports(given, "w") is given


@pytest.mark.parametrize(
    ("declared", "needle"),
    [
        ({"async_ps": "yes"}, "async_ps = 'yes'; expected True or False"),
        ({"pipeline_layers": 0}, "pipeline_layers = 0; expected an int >= 1"),
        ({"pipeline_layers": True}, "pipeline_layers = True; expected an int >= 1"),
        ({"pipelines": True}, "unknown key 'pipelines'; expected one of pipeline, "),
        ({"pipeline": False, "pipeline_layers": 4}, "pipeline_layers given with pipeline False"),
        (["async_ps"], "is a list; expected a dict"),
    ],
)
def test_a_malformed_declaration_is_one_line_naming_the_workload(
    declared: Any, needle: str
) -> None:
    with pytest.raises(ConfigError) as err:
        parse_supports(declared, "pkg.train:main")
    (line,) = err.value.problems
    assert line.startswith("trial.workload: hyperfleet_supports of 'pkg.train:main'")
    assert needle in line


def test_a_contradictory_capabilities_object_cannot_be_built() -> None:
    with pytest.raises(ValueError, match="pipeline_layers given with pipeline False"):
        WorkloadSupports(pipeline=False, pipeline_layers=lambda p: 4)


def test_a_malformed_declaration_fails_validation() -> None:
    found = problems({"workload": ref(bogus)})
    assert any("hyperfleet_supports of" in p and "async_ps = 'yes'" in p for p in found), found


# -- checks driven by the declarations ----------------------------------------------------------


def test_a_declared_layer_count_bounds_the_pipeline_stages() -> None:
    ok = problems({"workload": ref(stacked), **layout(3, pipeline=3)})
    assert ok == []
    too_many = problems({"workload": ref(stacked), **layout(4, pipeline=4)})
    assert too_many == [
        "trial.parallel.pipeline: 4 stages > 3 model layers; expected at most one stage per layer"
    ]
    deeper = problems({"workload": ref(stacked), "params": {"depth": 3}, **layout(4, pipeline=4)})
    assert deeper == []  # the fixed params win over the declared defaults


def test_no_pipeline_form_refuses_a_pipeline() -> None:
    assert problems({"workload": ref(flat), **layout(2, pipeline=2)}) == [
        f"trial.parallel.pipeline: {ref(flat)} has no pipeline form; use parallel.data"
    ]
    assert problems({"workload": "digits", **layout(2, pipeline=2)}) == [
        "trial.parallel.pipeline: digits has no pipeline form; use parallel.data"
    ]


def test_an_undeclared_pipeline_form_is_not_checked() -> None:
    assert problems({"workload": ref(plain), **layout(8, pipeline=8)}) == []


def test_async_ps_needs_a_workload_that_declares_it() -> None:
    assert problems({"workload": ref(flat), "params": {}, **ASYNC_PS}) == []
    (line,) = problems({"workload": ref(plain), **ASYNC_PS})
    assert line.startswith(
        f"trial.sync.mode: async-ps is built into the digits workload, not {ref(plain)!r}"
    )
    assert "hyperfleet_supports = {'async_ps': True}" in line


def test_a_declared_global_batch_must_divide_over_its_split() -> None:
    uneven = {"workload": ref(flat), "params": {"batch_size": 10}, **layout(4, data=4)}
    assert problems(uneven) == [
        "trial.params.batch_size: 10 is not divisible by parallel.data x grad_accum = 4; "
        "use a multiple of 4"
    ]
    assert problems({**uneven, "workload": ref(plain)}) == []  # not declared: not checked


def test_checks_follow_the_declaration_not_the_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same built-in name, declared otherwise, gets the other verdicts."""
    assert problems({"workload": "digits", "params": {}, **ASYNC_PS}) == []
    declared = WorkloadSupports(pipeline_layers=lambda p: 2, global_batch=True)
    monkeypatch.setitem(
        BUILTIN, "digits", dataclasses.replace(BUILTIN["digits"], supports=declared)
    )
    (line,) = problems({"workload": "digits", "params": {}, **ASYNC_PS})
    assert line.startswith("trial.sync.mode: async-ps is built into the ")
    assert "workload, not 'digits'" in line
    assert problems({"workload": "digits", **layout(2, pipeline=2)}) == []
    assert problems({"workload": "digits", **layout(4, pipeline=4)}) == [
        "trial.parallel.pipeline: 4 stages > 2 model layers; expected at most one stage per layer"
    ]


def test_no_check_names_a_workload() -> None:
    """No string in the control plane is a built-in workload's name: the checks ask the
    workload's declaration, so a new workload needs no change to validation."""
    named = []
    for path in sorted((ROOT / "hyperfleet" / "platform").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in BUILTIN:
                named.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert named == []


def test_the_former_path_names_the_same_catalogue() -> None:
    """Workload authors imported ``hyperfleet.trials.workloads.registry.Capabilities`` (the
    workloads page named it): it is the catalogue in ``hyperfleet.spec.workloads``, under its
    former name too."""
    from hyperfleet.trials.workloads import registry

    assert registry.Capabilities is registry.WorkloadSupports is WorkloadSupports
    assert registry.BUILTIN is BUILTIN and registry.load_workload is load_workload
