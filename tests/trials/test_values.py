"""Values before state: a report's metrics and a checkpoint's contents are checked before
anything is kept (:mod:`hyperfleet.trials.values`), on every rank alike; reports after the
workload returned change nothing; ``sys.exit()`` in a workload is a named failure."""

from __future__ import annotations

import fractions
import logging
import math
import threading
import time
from collections import OrderedDict, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from hyperfleet.spec.recorder import Recorder
from hyperfleet.spec.trial import TrialConfig
from hyperfleet.spec.wire import CONTINUE, TrialSpec
from hyperfleet.trials.checkpoint import CheckpointManager
from hyperfleet.trials.context import TrialContext
from hyperfleet.trials.runtime import WorkloadExitError, run_trial
from hyperfleet.trials.values import (
    CheckpointContentError,
    ReportValueError,
    loadable,
    metric_values,
)
from tests.dist import run_distributed
from tests.trials.test_reporting import Scripted, make_ctx

# -- metrics ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [3, 2.5, np.float64(2.5), np.float32(2.5), np.int64(3), np.array(2.5), torch.tensor(2.5),
     torch.tensor(3), torch.tensor(2.5, dtype=torch.bfloat16), fractions.Fraction(5, 2)],
)  # fmt: skip
def test_real_numbers_of_every_kind_become_floats(value: Any) -> None:
    step, got = metric_values(np.int64(7), {"loss": value})
    assert step == 7 and type(step) is int
    assert type(got["loss"]) is float and got["loss"] in (2.5, 3.0)


def test_nan_and_infinities_are_floats_and_pass() -> None:
    _, got = metric_values(1, {"a": math.nan, "b": torch.tensor(math.inf), "c": -np.inf})
    assert math.isnan(got["a"]) and got["b"] == math.inf and got["c"] == -math.inf


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("abc", "is a str ('abc'), not a real number"),
        ("1.5", "is a str ('1.5'), not a real number"),
        (None, "is a NoneType (None), not a real number"),
        (10**400, "is an int too large for a float (an int of 401 digits)"),
        (True, "is a bool, not a number"),
        (np.bool_(False), "is a bool, not a number"),
        (1 + 2j, "is a complex ((1+2j)), not a real number"),
        ([1.0], "is a list ([1.0]), not a real number"),
        (torch.ones(1), "is a torch.Tensor of shape (1,), not one number"),
        (np.ones(3), "is a numpy.ndarray of shape (3,), not one number"),
        (torch.tensor(True), "is a torch.Tensor of dtype torch.bool, not a real number"),
    ],
)
def test_anything_else_is_refused_naming_step_metric_and_type(value: Any, said: str) -> None:
    with pytest.raises(ReportValueError) as refused:
        metric_values(2, {"acc": 1.0, "loss": value})
    assert str(refused.value).startswith(f"ctx.report(step 2): metric 'loss' {said}")


def test_a_bad_step_or_metrics_container_is_refused() -> None:
    with pytest.raises(ReportValueError, match=r"the step is a float \(2\.5\); pass an int"):
        metric_values(2.5, {"loss": 1.0})
    with pytest.raises(ReportValueError, match=r"metrics is a list; pass a dict"):
        metric_values(2, [1.0])
    with pytest.raises(ReportValueError, match=r"metric name 3 is not a non-empty str"):
        metric_values(2, {3: 1.0})


def test_a_refused_report_saves_no_checkpoint_and_reaches_no_reporter(tmp_path: Path) -> None:
    reporter = Scripted(CONTINUE)
    ctx = make_ctx(tmp_path, reporter)
    with pytest.raises(ReportValueError, match="metric 'loss' is a NoneType"):
        ctx.report(2, {"loss": None}, checkpoint={"step": 2})  # type: ignore[dict-item]
    assert ctx.checkpoints.steps() == [] and reporter.seen == []
    ctx.report(3, {"loss": np.float32(0.5)}, checkpoint={"step": 3})
    assert ctx.checkpoints.steps() == [3] and reporter.seen == [(3, {"loss": 0.5})]


def refused_on_rank_0(rank: int, world: int, root: str) -> list[str]:
    """Rank 0 refuses the report of step 2; every rank raises, none waits at a collective,
    and the ranks still meet afterwards (the group is intact)."""
    ctx = make_ctx(Path(root), Scripted(CONTINUE) if rank == 0 else None, rank=rank, world=world)
    seen = []
    try:
        ctx.report(2, {"loss": "abc"}, checkpoint={"step": 2} if rank == 0 else None)
    except ReportValueError as exc:
        seen.append(f"{type(exc).__name__}: {exc}")
    try:
        ctx.report(3, {"loss": 1.0}, checkpoint={"fn": print} if rank == 0 else None)
    except CheckpointContentError as exc:
        seen.append(f"{type(exc).__name__}: {exc}")
    ctx.report(4, {"loss": 0.5}, checkpoint={"step": 4} if rank == 0 else None)
    seen.append("met again")
    return seen


def test_every_rank_fails_with_rank_0s_refusal(tmp_path: Path) -> None:
    out = run_distributed(refused_on_rank_0, 2, str(tmp_path), timeout=120)
    assert out[0] == out[1] and out[0][-1] == "met again"
    assert out[0][0].startswith("ReportValueError: ctx.report(step 2): metric 'loss' is a str")
    assert out[0][1].startswith('CheckpointContentError: checkpoint["fn"]: builtin_function')
    assert CheckpointManager(tmp_path / "ck").steps() == [4]


def test_reports_after_close_are_refused_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reporter = Scripted(CONTINUE)
    ctx = make_ctx(tmp_path, reporter)
    ctx.close()
    with caplog.at_level(logging.WARNING):
        ctx.report(5, {"loss": 999.0}, checkpoint={"step": 5})
        assert ctx.record(6, {"loss": 999.0}, {"step": 6}) is CONTINUE
    assert reporter.seen == [] and ctx.checkpoints.steps() == []
    assert "ctx.report(step 5) after the workload returned is refused" in caplog.text


# -- checkpoints --------------------------------------------------------------------------


def test_numpy_values_are_converted_and_load_with_weights_only(tmp_path: Path) -> None:
    sd = torch.nn.Linear(2, 2).state_dict()
    state = {
        "step": np.int64(3),
        "opt": {"extra": [1, 2, np.float64(0.25)], "m": (np.float32(1.5), "x")},
        "arr": np.arange(4, dtype=np.float32),
        "mask": np.array([True, False]),
        "names": np.array(["a", "b"]),
        "by_id": {np.int64(1): "one"},
        "model": sd,
        "plain": {"kept": [1, 2]},
    }
    mgr = CheckpointManager(tmp_path / "ck")
    mgr.save(3, state)
    back = mgr.load(3)  # torch.load(weights_only=True)
    assert back["step"] == 3 and type(back["step"]) is int
    assert back["opt"] == {"extra": [1, 2, 0.25], "m": (1.5, "x")}
    assert type(back["opt"]["extra"][2]) is float
    assert torch.equal(back["arr"], torch.arange(4, dtype=torch.float32))
    assert back["mask"].tolist() == [True, False] and back["names"] == ["a", "b"]
    assert back["by_id"] == {1: "one"}
    assert isinstance(state["opt"]["extra"][2], np.float64), "the workload's dict is unchanged"
    out = loadable(state)
    assert out["model"] is sd and out["plain"] is state["plain"], "unchanged parts not copied"
    assert out["model"]._metadata == sd._metadata  # type: ignore[attr-defined]
    nested = loadable({"sd": OrderedDict(w=np.float64(1.0))})["sd"]
    assert type(nested) is OrderedDict and nested == {"w": 1.0}


class Opaque:
    pass


@dataclass
class Point:
    x: float


@pytest.mark.parametrize(
    ("state", "where"),
    [
        ({"opt": {"extra": [1, 2, Opaque()]}}, 'checkpoint["opt"]["extra"][2]: tests.'),
        ({"f": lambda: 1}, 'checkpoint["f"]: function'),
        ({"d": defaultdict(list)}, 'checkpoint["d"]: collections.defaultdict'),
        ({"p": Path("x")}, 'checkpoint["p"]: pathlib.PosixPath'),
        ({"k": {Opaque(): 1}}, 'checkpoint["k"][<tests.'),
        ({"o": np.array([Opaque()], dtype=object)}, 'checkpoint["o"][0]: tests.'),
    ],
)
def test_what_weights_only_loading_cannot_read_is_refused_with_its_path(
    tmp_path: Path, state: dict[str, Any], where: str
) -> None:
    mgr = CheckpointManager(tmp_path / "ck")
    with pytest.raises(CheckpointContentError) as refused:
        mgr.save(7, state)
    assert str(refused.value).startswith(where), str(refused.value)
    assert "torch.load(weights_only=True)" in str(refused.value)
    assert not (tmp_path / "ck").exists() or not any((tmp_path / "ck").iterdir())


def test_a_cycle_and_a_non_dict_are_refused() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    with pytest.raises(CheckpointContentError, match=r'^checkpoint\["l"\]\[1\]: list .*itself'):
        loadable({"l": loop})
    with pytest.raises(CheckpointContentError, match="the checkpoint is a list; pass a dict"):
        loadable([1])  # type: ignore[arg-type]


def test_a_type_registered_as_safe_is_kept(tmp_path: Path) -> None:
    with torch.serialization.safe_globals([Point]):
        mgr = CheckpointManager(tmp_path / "ck")
        mgr.save(1, {"p": Point(1.5)})
        assert mgr.load(1)["p"] == Point(1.5)
    with pytest.raises(CheckpointContentError, match=r'checkpoint\["p"\]: tests\.'):
        loadable({"p": Point(2.0)})


# -- the runtime: sys.exit() and a late thread --------------------------------------------


def exits(ctx: TrialContext) -> None:
    ctx.report(1, {"loss": 1.0})
    ctx.report(2, {"loss": 0.5})
    raise SystemExit(0)


RETURNED = threading.Event()  # set by the test once run_trial has returned


def leaves_a_thread(ctx: TrialContext) -> None:
    ctx.report(1, {"loss": 0.25})

    def late() -> None:
        RETURNED.wait(30)  # reports only after the trial ended, however slow the machine
        ctx.report(2, {"loss": 999.0}, checkpoint={"step": 2})
        ctx.workdir.mkdir(parents=True, exist_ok=True)
        (ctx.workdir / "late-done").touch()

    threading.Thread(target=late).start()


class Kept(Recorder):
    """A recorder that keeps what it is told."""

    def __init__(self, spec: TrialSpec) -> None:
        self.reports: list[tuple[int, dict[str, float]]] = []
        self.outcome: str | None = None

    def __call__(self, step: int, metrics: Any) -> Any:
        self.reports.append((step, dict(metrics)))
        return CONTINUE

    def rewind(self, step: int, params: Any, donor: int) -> None: ...

    def finish(self, outcome: str) -> None:
        self.outcome = outcome

    def pinned_steps(self) -> set[int]:
        return set()

    def note(self, message: str, restart: bool = True) -> None: ...

    def check(self) -> None: ...


def _spec(root: Path, workload: str) -> TrialSpec:
    trial = TrialConfig.model_validate({"workload": f"{__name__}:{workload}", "steps": 2})
    return TrialSpec(sweep="v", number=0, trial=trial, params={}, workdir=str(root),
                     trial_dir=str(root / "trial-0000"))  # fmt: skip


def test_sys_exit_in_a_workload_is_a_named_failure(tmp_path: Path) -> None:
    kept: list[Kept] = []
    with pytest.raises(WorkloadExitError) as failed:
        run_trial(_spec(tmp_path, "exits"), lambda s: kept.append(Kept(s)) or kept[-1])
    assert str(failed.value) == (
        "the workload called sys.exit(0) (SystemExit) at step 2; a workload returns instead"
    )
    assert kept[0].outcome == "fail"


def test_a_report_after_the_workload_returned_changes_nothing(tmp_path: Path) -> None:
    kept: list[Kept] = []
    RETURNED.clear()
    outcome = run_trial(
        _spec(tmp_path, "leaves_a_thread"), lambda s: kept.append(Kept(s)) or kept[-1]
    )
    RETURNED.set()
    assert outcome == "complete"
    deadline = time.monotonic() + 30
    while not (tmp_path / "trial-0000" / "late-done").exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert kept[0].reports == [(1, {"loss": 0.25})]
    assert CheckpointManager(tmp_path / "trial-0000" / "checkpoints").steps() == []
