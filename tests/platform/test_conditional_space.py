"""Conditional search spaces: sub-spaces under a categorical's choices, parsed, validated with
one line per problem naming its path, sampled define-by-run by Optuna's samplers, enumerated
as a grid of branch cells, and explored by PBT inside a valid branch."""

from __future__ import annotations

import random
from typing import Any

import optuna
import pytest

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config import SweepConfig, active, parse_sweep
from hyperfleet.platform.config.pbt import check_initial
from hyperfleet.platform.config.schedulers import GridConfig
from hyperfleet.platform.schedulers.optuna import space as space_mod
from hyperfleet.platform.schedulers.optuna.samplers import build_sampler
from hyperfleet.platform.schedulers.pbt.mutation import explore_params, sample_params
from hyperfleet.platform.sweeps.enqueue import check_point
from hyperfleet.spec.workloads import merged_params
from hyperfleet.testing.sweeps import minimal_sweep

FLOAT = {"type": "float", "low": 0.0, "high": 0.99}
#: two levels of branches: optimizer -> sgd -> schedule -> step -> decay
SPACE: dict[str, Any] = {
    "lr": {"type": "float", "low": 0.001, "high": 0.3, "log": True},
    "optimizer": {
        "type": "categorical",
        "choices": {
            "sgd": {
                "momentum": FLOAT,
                "schedule": {
                    "type": "categorical",
                    "choices": {"constant": None, "step": {"decay": FLOAT}},
                },
            },
            "adamw": {"beta2": {"type": "float", "low": 0.9, "high": 0.999}},
        },
    },
}
BRANCHES = {
    ("sgd", "constant"): {"lr", "optimizer", "momentum", "schedule"},
    ("sgd", "step"): {"lr", "optimizer", "momentum", "schedule", "decay"},
    ("adamw", None): {"lr", "optimizer", "beta2"},
}


def parse(space: dict[str, Any], **changes: Any) -> SweepConfig:
    return parse_sweep(minimal_sweep(space=space, **changes))


def problems(space: dict[str, Any], **changes: Any) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse(space, **changes)
    return info.value.problems


def valid_branch(params: dict[str, Any]) -> bool:
    """``params`` hold exactly the names of the branches their choices take."""
    key = (params.get("optimizer"), params.get("schedule"))
    return BRANCHES.get(key) == set(params)


# -- the sweep file ----------------------------------------------------------------------------


def test_a_conditional_space_parses_and_round_trips_through_its_dump() -> None:
    cfg = parse(SPACE)
    assert set(cfg.dims) == {"lr", "optimizer", "momentum", "schedule", "decay", "beta2"}
    again = SweepConfig.model_validate(cfg.model_dump(mode="json"))
    assert again == cfg
    optimizer = cfg.space["optimizer"]
    assert optimizer.values == ["sgd", "adamw"]  # type: ignore[union-attr]
    assert optimizer.branches["sgd"]["schedule"].branches["constant"] == {}  # type: ignore


def test_a_list_of_choices_stays_as_it_was() -> None:
    cfg = parse({"act": {"type": "categorical", "choices": ["relu", 1, None]}})
    assert cfg.space["act"].values == ["relu", 1, None]  # type: ignore[union-attr]
    assert cfg.space["act"].branches == {}  # type: ignore[union-attr]


def test_active_follows_the_choices_a_trial_made() -> None:
    cfg = parse(SPACE)
    assert (
        set(active(cfg.space, {"optimizer": "sgd", "schedule": "step"}))
        == BRANCHES[("sgd", "step")]
    )
    assert set(active(cfg.space, {"optimizer": "adamw"})) == BRANCHES[("adamw", None)]


def _nested(sub: dict[str, Any]) -> dict[str, Any]:
    return {"optimizer": {"type": "categorical", "choices": {"sgd": sub, "adam": {}}}}


@pytest.mark.parametrize(
    ("space", "line"),
    [
        (
            _nested({"momentum": {"type": "float", "low": 1.0, "high": 0.5}}),
            "space.optimizer.choices.sgd.momentum: low (1.0) must be <= high (0.5)",
        ),
        (
            _nested({"momentum": {**FLOAT, "hgih": 1}}),
            "space.optimizer.choices.sgd.momentum.hgih: unknown key; did you mean 'high'?",
        ),
        (
            _nested({"momentum": {"type": "float", "low": 0.0}}),
            "space.optimizer.choices.sgd.momentum.high: required field is missing",
        ),
        (
            _nested(
                {"s": {"type": "categorical", "choices": {"a": {"d": {"type": "int", "high": 3}}}}}
            ),
            "space.optimizer.choices.sgd.s.choices.a.d.low: required field is missing",
        ),
        (
            {"optimizer": {"type": "categorical", "choices": {1: {"m": FLOAT}}}},
            "space.optimizer.choices: a choice with a sub-space is named by a string, got 1; "
            "quote it in YAML ('1':)",
        ),
        (
            {"optimizer": {"type": "categorical", "choices": {}}},
            "space.optimizer.choices: give at least one choice",
        ),
        (
            _nested({"bad name!": FLOAT}),
            "space.optimizer.choices.sgd.bad name!: parameter name 'bad name!' is not a usable "
            "name",
        ),
    ],
)
def test_a_bad_sub_space_is_one_line_naming_its_path(space: dict[str, Any], line: str) -> None:
    found = problems(space)
    assert len(found) == 1 and found[0].startswith(line), found


def test_a_name_two_dimensions_of_one_trial_could_have_is_refused() -> None:
    found = problems({"lr": FLOAT, **_nested({"lr": FLOAT})})
    assert found == [
        "space.optimizer.choices.sgd.lr: 'lr' is also space.lr, and a trial can have both; "
        "rename one of them"
    ]
    two_categoricals = {
        "a": {"type": "categorical", "choices": {"x": {"m": FLOAT}}},
        "b": {"type": "categorical", "choices": {"y": {"m": FLOAT}}},
    }
    assert problems(two_categoricals) == [
        "space.b.choices.y.m: 'm' is also space.a.choices.x.m, and a trial can have both; "
        "rename one of them"
    ]


def test_a_name_under_exclusive_choices_is_one_dimension_when_its_spec_is_the_same() -> None:
    same = {"optimizer": {"type": "categorical", "choices": {"a": {"m": FLOAT}, "b": {"m": FLOAT}}}}
    assert set(parse(same).dims) == {"optimizer", "m"}
    other = {**FLOAT, "high": 0.5}
    different = {
        "optimizer": {"type": "categorical", "choices": {"a": {"m": FLOAT}, "b": {"m": other}}}
    }
    assert problems(different) == [
        "space.optimizer.choices.b.m: differs from space.optimizer.choices.a.m; a name under "
        "several choices is one dimension: give it the same spec or another name"
    ]


def test_a_branch_param_beside_a_fixed_one_of_the_same_name_is_refused() -> None:
    found = problems(SPACE, trial={"params": {"beta2": 0.99}})
    assert found == ["trial.params.beta2: also in space; a parameter is either fixed or searched"]


def test_enqueue_refuses_a_param_of_a_branch_the_point_does_not_take() -> None:
    cfg = parse(SPACE)
    assert check_point(cfg, {"optimizer": "sgd", "momentum": 0.5}) == []
    assert check_point(cfg, {"optimizer": "adamw", "momentum": 0.5}) == [
        "--params.momentum: under a choice the point does not take; give that choice or drop "
        "momentum"
    ]


def test_declared_defaults_never_stand_in_for_a_searched_name() -> None:
    from examples.conditional import main

    sampled = {"lr": 0.1, "optimizer": "adamw", "beta2": 0.95}
    name = "examples.conditional:main"
    assert merged_params(name, {}, sampled, main)["momentum"] == 0.9  # the workload's default
    searched = set(parse(SPACE).dims)
    assert merged_params(name, {}, sampled, main, searched) == sampled


# -- sampling ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["tpe", "random", "qmc"])
def test_samplers_ask_only_for_the_chosen_branch(kind: str) -> None:
    cfg = parse(SPACE, scheduler={"type": kind, "seed": 3})
    study = optuna.create_study(sampler=build_sampler(cfg.scheduler, cells=[]))
    taken = set()
    for _ in range(24):
        trial = study.ask()
        params = space_mod.sample(trial, cfg.space)
        study.tell(trial, params["lr"])
        assert valid_branch(params), params
        assert study.trials[-1].params == params  # Optuna records these and no others
        taken.add((params["optimizer"], params.get("schedule")))
    assert taken == set(BRANCHES)  # both levels of branches were taken


def test_tpe_groups_a_conditional_space_unless_told() -> None:
    cfg = parse(SPACE, scheduler={"type": "tpe"})
    grouped = build_sampler(cfg.scheduler, cells=[])
    flat = build_sampler(cfg.scheduler)
    told = build_sampler(
        parse(SPACE, scheduler={"type": "tpe", "group": False}).scheduler, cells=[]
    )
    tpe = [getattr(s, "inner", s) for s in (grouped, flat, told)]  # under the history cap
    assert [s._group for s in tpe] == [True, False, False]


def test_the_grid_of_a_conditional_space_runs_each_branch_cell_once() -> None:
    step = {"type": "float", "low": 0.0, "high": 0.5, "step": 0.5}
    space = {
        "lr": {"type": "categorical", "choices": [0.01, 0.1]},
        "optimizer": {
            "type": "categorical",
            "choices": {
                "sgd": {
                    "momentum": step,
                    "schedule": {
                        "type": "categorical",
                        "choices": {"constant": {}, "step": {"decay": step}},
                    },
                },
                "adamw": {"beta2": {"type": "categorical", "choices": [0.99]}},
            },
        },
    }
    cfg = parse(space, scheduler={"type": "grid", "seed": 0})
    cells = space_mod.cells(cfg.space)
    assert cells is not None and len(cells) == 2 * (2 * (1 + 2) + 1)
    study = optuna.create_study(sampler=build_sampler(cfg.scheduler, cells=cells))
    seen = []
    while not study.sampler.inner.is_exhausted(study):  # type: ignore[attr-defined]
        trial = study.ask()
        params = space_mod.sample(trial, cfg.space)
        study.tell(trial, 0.0)
        assert valid_branch(params), params
        seen.append(params)
    assert sorted(map(repr, seen)) == sorted(map(repr, cells))


def test_a_conditional_grid_with_a_continuous_dimension_is_refused() -> None:
    """At validation, each continuous dimension by its path (before anything is stored); the
    grid sampler still refuses a space without cells, should one ever reach it."""
    found = problems(SPACE, scheduler={"type": "grid"})
    assert [line.split(":")[0] for line in found] == [
        "space.lr",
        "space.optimizer.choices.sgd.momentum",
        "space.optimizer.choices.sgd.schedule.choices.step.decay",
        "space.optimizer.choices.adamw.beta2",
    ]
    assert all("a float without step, which scheduler.type 'grid'" in line for line in found)
    assert space_mod.cells(parse(SPACE).space) is None
    with pytest.raises(ConfigError, match="'grid' needs every space dimension"):
        build_sampler(GridConfig(type="grid"), cells=[])


# -- PBT ---------------------------------------------------------------------------------------


def test_pbt_samples_and_explores_inside_a_valid_branch() -> None:
    space = {n: s.model_dump() for n, s in parse(SPACE).space.items()}
    rng = random.Random(0)
    moves = same = 0
    params = sample_params(space, rng)
    for _ in range(300):
        assert valid_branch(params), params
        new = explore_params(params, space, rng, 0.5, (0.8, 1.2))
        if new["optimizer"] == params["optimizer"] == "sgd":
            same += 1
            assert new["momentum"] != params["momentum"]  # the chosen branch's params explored
        moves += new["optimizer"] != params["optimizer"]
        params = new
    assert moves > 10 and same > 10


def test_pbt_initial_members_fix_values_and_their_branch_is_checked() -> None:
    space = {n: s.model_dump() for n, s in parse(SPACE).space.items()}
    fixed = {"optimizer": "sgd", "schedule": "step", "decay": 0.3}
    params = sample_params(space, random.Random(1), fixed)
    assert valid_branch(params) and params["decay"] == 0.3
    assert check_initial([fixed], space) == []
    assert check_initial([{"optimizer": "adamw", "momentum": 0.5}], space) == [
        "scheduler.initial[0].momentum: a parameter under optimizer: sgd; give optimizer: sgd "
        "beside it"
    ]


def test_the_example_file_validates_as_a_conditional_space_two_levels_deep() -> None:
    from pathlib import Path

    from hyperfleet.platform.config import is_conditional, load_sweep

    cfg = load_sweep(Path(__file__).resolve().parents[2] / "examples" / "conditional.yaml")
    assert is_conditional(cfg.space) and set(cfg.dims) == set(BRANCHES[("sgd", "step")]) | {"beta2"}


def test_an_enqueued_point_on_a_conditional_grid_is_completed_from_a_cell_of_its_branch() -> None:
    space = {
        "optimizer": {
            "type": "categorical",
            "choices": {
                "sgd": {"momentum": {"type": "categorical", "choices": [0.0, 0.9]}},
                "adamw": {"beta2": {"type": "categorical", "choices": [0.99]}},
            },
        }
    }
    cfg = parse(space, scheduler={"type": "grid"})
    cells = space_mod.cells(cfg.space)
    study = optuna.create_study(sampler=build_sampler(cfg.scheduler, cells=cells))
    study.enqueue_trial({"optimizer": "adamw"})
    params = space_mod.sample(study.ask(), cfg.space)
    assert params == {"optimizer": "adamw", "beta2": 0.99}
