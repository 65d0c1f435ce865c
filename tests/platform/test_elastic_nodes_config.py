"""``trial.resources.nodes: {min, max}``: a multi-node trial that continues on the nodes left
after one is lost. Stored as ``nodes: max, min_nodes: min``; its agents meet as torchrun's
``--nnodes min:max`` with a restart per node it may lose; refused in one line (exit 2, nothing
written) when malformed or when the trial cannot resume at another size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.launcher.base import Rendezvous
from hyperfleet.platform.launcher.torchrun import rendezvous_args
from tests.platform.test_elastic_config import _other, _script, _sweep, _validate, modules

__all__ = ["modules"]  # the fixture, used by name


def _nodes(tmp_path: Path, nodes: Any, devices: int = 2, **trial: Any) -> dict[str, Any]:
    data = _sweep(tmp_path, devices, **trial)
    data["trial"]["resources"]["nodes"] = nodes
    return data


def test_a_node_range_is_stored_as_its_largest_and_its_fewest(tmp_path: Path) -> None:
    cfg = parse_sweep(_nodes(tmp_path, {"min": 1, "max": 2}, devices=4))
    r = cfg.trial.resources
    assert (r.nodes, r.min_nodes, r.elastic_nodes, r.elastic) == (2, 1, True, False)
    assert cfg.trial.parallel.data == 4  # launched on every node
    again = parse_sweep(cfg.model_dump(mode="json"))  # what storage keeps and workers read
    assert again.trial.resources == r
    fixed = parse_sweep(_nodes(tmp_path, 2)).trial.resources
    assert (fixed.nodes, fixed.min_nodes, fixed.elastic_nodes) == (2, None, False)


def test_the_agents_of_a_node_range_meet_elastically_and_may_restart_once_per_node() -> None:
    def args(low: int | None) -> list[str]:
        return rendezvous_args("x", Rendezvous("10.0.0.1:29400", "r-1", 3, True, 60.0, low))

    assert "--nnodes=1:3" in args(1) and "--max-restarts=2" in args(1)
    assert "--nnodes=2:3" in args(2) and "--max-restarts=1" in args(2)
    for fixed in (None, 3):  # every node to the end: no restart, a node lost fails the trial
        assert "--nnodes=3" in args(fixed) and "--max-restarts=0" in args(fixed)
    alone = rendezvous_args("x")
    assert "--nnodes=1" in alone and "--max-restarts=0" in alone


N = "give nodes: {min: M, max: N} with 1 <= M <= N"
MALFORMED = {
    "min-above-max": (
        {"min": 3, "max": 2},
        f"trial.resources.nodes: min (3) is above max (2); {N}",
    ),
    "no-max": ({"min": 1}, f"trial.resources.nodes: the range lacks max; {N}"),
    "not-a-number": ({"min": 1, "max": "2"}, "max must be a whole number of nodes"),
    "min-zero": ({"min": 0, "max": 2}, "trial.resources.nodes: min (0) must be at least 1"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_node_range_is_one_line_naming_the_field_and_exit_2(
    case: str, tmp_path: Path
) -> None:
    nodes, expected = MALFORMED[case]
    code, lines = _validate(tmp_path, _nodes(tmp_path, nodes))
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: ") and expected in lines[0], lines
    assert not (tmp_path / "runs").exists()


def test_a_node_range_given_twice_or_with_a_device_range_is_refused(tmp_path: Path) -> None:
    twice = _nodes(tmp_path, {"min": 1, "max": 2})
    twice["trial"]["resources"]["min_nodes"] = 1
    both = _nodes(tmp_path, {"min": 1, "max": 2})
    both["trial"]["resources"]["devices"] = {"min": 2, "max": 4}
    for data, expected in (
        (twice, "give the range either as nodes: {min, max} or as nodes and min_nodes"),
        (both, "an elastic trial (devices: {min, max}) runs on whole devices of one host"),
    ):
        code, lines = _validate(tmp_path, data)
        assert code == 2 and len(lines) == 1 and expected in lines[0], lines
        assert not (tmp_path / "runs").exists()


def test_trials_that_cannot_continue_on_fewer_nodes_are_refused_in_one_line(
    modules: Path,
) -> None:
    where = "trial.resources.nodes: {min: 1, max: 2}"
    undeclared = _other(_nodes(modules, {"min": 1, "max": 2}, workload="elastic_fixed:main"))
    program = _script(modules)
    program["trial"]["resources"] = {"devices": 2, "nodes": {"min": 1, "max": 2}}
    uneven = _nodes(modules, {"min": 2, "max": 3}, devices=6)  # 6 ranks, or 4 after a loss
    uneven["trial"]["params"]["batch_size"] = 30  # splits over 6, not over 4
    cases = [
        (undeclared, f"{where} needs a workload that resumes at another size"),
        (program, f"{where} relaunches the program at other sizes"),
        (uneven, "trial.params.batch_size: 30 is not divisible by 4 ranks x grad_accum 1"),
    ]
    for data, expected in cases:
        code, lines = _validate(modules, data)
        assert code == 2 and len(lines) == 1, lines
        assert lines[0].startswith("error: ") and expected in lines[0], lines
        assert "or give nodes an int" in lines[0] or "use a multiple of 12" in lines[0], lines
        assert not (modules / "runs").exists()
    accepted = [
        _nodes(modules, {"min": 1, "max": 2}),
        _other(_nodes(modules, {"min": 1, "max": 2}, workload="elastic_ok:main")),
    ]
    for data in accepted:
        code, lines = _validate(modules, data)
        assert code == 0, lines
