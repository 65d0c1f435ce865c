"""A PBT member's reports through its trial's recorder, on real SQLite storage: a retry after
a lost answer is the same report (its exploit is answered again, not done twice); the
member's first report at a step it trains again after an exploit from behind is new, even
with the same score (replayed, that exploit would repeat forever)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
import yaml

from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.recorder import RankZeroRecorder
from hyperfleet.platform.schedulers.base import DecisionKind
from hyperfleet.platform.storage import Storage
from hyperfleet.spec.wire import TrialSpec, trial_dir
from tests.conftest import deep_update

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pbt_toy.yaml"


def _member_recorder(tmp_path: Path, number: int) -> RankZeroRecorder:
    url = f"sqlite:///{tmp_path / 'hf.db'}"
    data = deep_update(yaml.safe_load(EXAMPLE.read_text()), {"storage": url,
                       "workdir": str(tmp_path / "runs")})  # fmt: skip
    cfg = parse_sweep(data)
    Storage(url).sweeps.create(cfg.name, cfg.model_dump(mode="json"))
    spec = TrialSpec(
        sweep=cfg.name, number=number, trial=cfg.trial, params={"h0": 0.0, "h1": 1.0},
        workdir=str(tmp_path / "runs"),
        trial_dir=str(trial_dir(tmp_path / "runs", cfg.name, number)), storage=url,
        sweep_config=cfg.model_dump(mode="json"),
    )  # fmt: skip
    return RankZeroRecorder(spec)


def test_a_retry_is_answered_again_and_a_report_trained_again_is_new(tmp_path: Path) -> None:
    rec = _member_recorder(tmp_path, 1)
    sched = rec.scheduler
    assert [sched.suggest().trial_number for _ in range(2)] == [0, 1]  # type: ignore[union-attr]
    assert rec(4, {"Q": 0.5}).kind == DecisionKind.CONTINUE  # member 0 has no score yet
    sched.report_and_decide(0, 4, {"Q": 0.9}, first_try=True)

    # member 1's report at step 8 is committed, and its answer lost: the recorder retries
    # (a PBT scheduler is asked for its decision and pinned checkpoints in one call)
    real, tries = sched.report_decide_and_pin, []

    def answer_lost(*args: Any, first_try: bool = False) -> Any:
        tries.append(first_try)
        answer = real(*args, first_try=first_try)
        if len(tries) == 1:
            lost = ConnectionResetError("server closed the connection unexpectedly")
            raise sa.exc.OperationalError("COMMIT", {}, lost)
        return answer

    sched.report_decide_and_pin = answer_lost  # type: ignore[method-assign]
    exploit = rec(8, {"Q": 0.1})
    assert tries == [True, False]
    assert exploit.kind == DecisionKind.EXPLOIT and (exploit.donor, exploit.donor_step) == (0, 4)
    assert [e.generation for e in sched.store.lineage(rec.sweep) if e.kind == "exploit"] == [1]
    sched.report_decide_and_pin = real  # type: ignore[method-assign]

    # the runtime adopts member 0's step 4 and trains to step 8 again: the same score there
    assert exploit.params is not None
    rec.rewind(4, exploit.params, donor=0)
    again = rec(8, {"Q": 0.1})
    member = sched.members()[1]
    assert member.steps_trained == 12, "the report trained again is recorded"
    generations = [e.generation for e in sched.store.lineage(rec.sweep) if e.kind == "exploit"]
    assert generations == [1, 2], "a new decision (another exploit), not the first replayed"
    assert again.kind == DecisionKind.EXPLOIT and again.params != exploit.params
