"""examples/pbt_toy.py and .yaml against the public workload contract, on one time-shared slot.

``ToyRuntime`` plays the trial runtime the way the PBT contract asks (see
``hyperfleet.platform.schedulers.pbt.scheduler``): checkpoint, then report, then decide; on
EXPLOIT the workload function restarts in the same "process" with the donor's checkpoint and
the explored params; on PAUSE it returns and the member is resumed later from its checkpoint
pointer.
"""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from hyperfleet.platform.schedulers.base import Decision, DecisionKind, Suggestion, TrialState
from hyperfleet.platform.schedulers.pbt.population import MemoryPopulationStore
from hyperfleet.platform.schedulers.pbt.scheduler import PBTConfig, PBTScheduler

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pbt_toy", EXAMPLES / "pbt_toy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Stop(Exception):  # noqa: N818 - control flow of the stand-in runtime
    def __init__(self, decision: Decision) -> None:
        self.decision = decision


class _Ctx:
    """The public contract: params, load_checkpoint, max_steps, should_eval, report."""

    def __init__(self, rt: ToyRuntime, number: int, params: Mapping[str, Any], state: Any) -> None:
        self.rt, self.number, self.params, self._state = rt, number, dict(params), state
        self.max_steps = rt.max_steps

    def load_checkpoint(self) -> dict[str, Any] | None:
        return copy.deepcopy(self._state)

    def should_eval(self, step: int) -> bool:
        return step % self.rt.eval_every == 0 or step == self.max_steps

    def report(self, step: int, metrics: Mapping[str, float], checkpoint: Any = None) -> None:
        self.rt.checkpoints[(self.number, step)] = copy.deepcopy(checkpoint)
        self.rt.sched.report(self.number, step, metrics)
        d = self.rt.sched.decide(self.number, step)
        if d.kind != DecisionKind.CONTINUE:
            raise _Stop(d)


class ToyRuntime:
    def __init__(self, sched: PBTScheduler, main: Any, max_steps: int, eval_every: int) -> None:
        self.sched, self.main = sched, main
        self.max_steps, self.eval_every = max_steps, eval_every
        self.checkpoints: dict[tuple[int, int], Any] = {}
        self.kinds: list[DecisionKind] = []

    def run_member(self, s: Suggestion) -> None:
        params, state = dict(s.params), None
        if s.resume and s.restore is not None:
            state = self.checkpoints[(s.restore.trial, s.restore.step)]
        while True:
            try:
                self.main(_Ctx(self, s.trial_number, params, state))
            except _Stop as stop:
                d = stop.decision
                self.kinds.append(d.kind)
                if d.kind == DecisionKind.EXPLOIT:  # restart in place from the donor
                    state = self.checkpoints[(d.donor, d.donor_step)]
                    self.checkpoints[(s.trial_number, d.donor_step)] = copy.deepcopy(state)
                    params = dict(d.params)
                    continue
                assert d.kind == DecisionKind.PAUSE
            self.sched.on_trial_end(s.trial_number, TrialState.COMPLETE)
            return

    def run(self) -> None:
        while not self.sched.finished():
            s = self.sched.suggest()
            assert s is not None, "a slot is free but nothing to run"
            self.run_member(s)


def _from_yaml(**overrides: Any) -> tuple[PBTScheduler, dict[str, Any]]:
    raw = yaml.safe_load((EXAMPLES / "pbt_toy.yaml").read_text())
    cfg = PBTConfig(**{**raw["scheduler"], **overrides})
    space = {k: {"log": False, "step": None, **v} for k, v in raw["space"].items()}
    sched = PBTScheduler(
        cfg,
        store=MemoryPopulationStore(),
        sweep=raw["name"],
        space=space,
        metric=raw["objective"]["metric"],
        mode=raw["objective"]["mode"],
        max_steps=raw["trial"]["steps"],
        max_concurrent=1,
    )
    return sched, raw


def _final_qs(rt: ToyRuntime, module: ModuleType) -> list[float]:
    return [module.q(rt.checkpoints[(n, m.step)]["theta"]) for n, m in rt.sched.members().items()]


def test_example_reaches_the_optimum_on_one_time_shared_slot() -> None:
    module = _load_example()
    sched, raw = _from_yaml()
    rt = ToyRuntime(sched, module.main, raw["trial"]["steps"], raw["trial"]["eval_every"])
    rt.run()
    assert max(_final_qs(rt, module)) >= 1.19
    assert DecisionKind.EXPLOIT in rt.kinds and DecisionKind.PAUSE in rt.kinds
    assert all(m.step == raw["trial"]["steps"] for m in sched.members().values())


def test_example_without_exploit_and_explore_stays_below_0_4() -> None:
    module = _load_example()
    sched, raw = _from_yaml(perturbation_interval=10**6)
    rt = ToyRuntime(sched, module.main, raw["trial"]["steps"], raw["trial"]["eval_every"])
    rt.run()
    qs = _final_qs(rt, module)
    assert len(qs) == 2 and max(qs) <= 0.4
    assert DecisionKind.EXPLOIT not in rt.kinds
