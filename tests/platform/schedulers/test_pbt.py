"""PBT scheduler tests on a simulated backend with a virtual clock (Syne Tune style).

``SimBackend`` drives a scheduler as the sweep loop and trial runtime would: it fills free slots
from ``suggest()``, advances the running member whose virtual clock is earliest by one report,
keeps every checkpoint by ``(member, step)``, calls ``report`` then ``decide``, and applies the
decision (EXPLOIT: continue from the donor's checkpoint with the new params; PAUSE: give the
slot back). The workload is the toy problem of the PBT paper (Jaderberg et al., 2017, Fig. 2).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from hyperfleet.errors import ConfigError
from hyperfleet.platform.schedulers.base import DecisionKind, TrialState
from hyperfleet.platform.schedulers.pbt.population import (
    Member,
    MemberState,
    MemoryPopulationStore,
)
from hyperfleet.platform.schedulers.pbt.scheduler import (
    PBTConfig,
    PBTScheduler,
    explore_params,
    replay_schedule,
)

# --------------------------------------------------------------------------- the toy problem

TOY_LR = 0.02  # gradient step size on the surrogate (the simulation converges with it)
TOY_SPACE = {
    "h0": {"type": "float", "low": 0.0, "high": 1.0, "log": False},
    "h1": {"type": "float", "low": 0.0, "high": 1.0, "log": False},
}
TOY_INITIAL = ({"h0": 1.0, "h1": 0.0}, {"h0": 0.0, "h1": 1.0})


def toy_q(theta: tuple[float, float]) -> float:
    """The true objective Q(theta) = 1.2 - (theta0^2 + theta1^2)."""
    return 1.2 - (theta[0] ** 2 + theta[1] ** 2)


def toy_step(theta: tuple[float, float], params: Mapping[str, Any]) -> tuple[float, float]:
    """One gradient ascent step on the surrogate 1.2 - (h0 theta0^2 + h1 theta1^2)."""
    h = (params["h0"], params["h1"])
    return (theta[0] - TOY_LR * 2 * h[0] * theta[0], theta[1] - TOY_LR * 2 * h[1] * theta[1])


# --------------------------------------------------------------------------- the backend


@dataclass
class _Running:
    params: dict[str, Any]
    state: Any
    step: int
    clock: float


@dataclass
class SimBackend:
    """The sweep loop and trial runtime, simulated; ``speeds`` are seconds per step."""

    scheduler: PBTScheduler
    slots: int
    init: Any
    step_fn: Callable[[Any, Mapping[str, Any]], Any]
    metric_fn: Callable[[Any], Mapping[str, float]]
    max_steps: int
    speeds: Mapping[int, float] = field(default_factory=dict)
    retry_reports: bool = False
    crash_on_exploit: bool = False
    keep: int | None = None  # prune each member's checkpoints to the last ``keep`` + pinned
    checkpoints: dict[tuple[int, int], Any] = field(default_factory=dict)
    running: dict[int, _Running] = field(default_factory=dict)
    final: dict[int, Any] = field(default_factory=dict)
    decisions: list[tuple[int, int, Any]] = field(default_factory=list)
    max_running: int = 0
    clock: float = 0.0
    crashed: set[tuple[int, int]] = field(default_factory=set)

    def _fill(self) -> None:
        while len(self.running) < self.slots:
            s = self.scheduler.suggest()
            if s is None:
                return
            assert s.trial_number not in self.running
            state, step = self.init, 0
            if s.resume and s.restore is not None:
                step = s.restore.step
                state = self.checkpoints[(s.restore.trial, step)]
                if s.restore.trial != s.trial_number and self.keep is not None:
                    self._adopt(s.trial_number, step, state)
            self.running[s.trial_number] = _Running(dict(s.params), state, step, self.clock)
            self.max_running = max(self.max_running, len(self.running))

    def _save(self, n: int, step: int, state: Any) -> None:
        self.checkpoints[(n, step)] = state
        if self.keep is None:
            return
        pinned = self.scheduler.pinned_checkpoints()
        steps = sorted(s for m, s in self.checkpoints if m == n)
        for old in steps[: -self.keep]:
            if (n, old) not in pinned:
                del self.checkpoints[(n, old)]

    def _adopt(self, n: int, step: int, state: Any) -> None:
        """What the runtime does with a donor's weights (with ``keep``): discard n's
        checkpoints from ``step`` on, then save them as n's at ``step``. None of those may
        be one another member will still load."""
        if self.keep is not None:
            needed = {
                (x.ckpt_member, x.ckpt_step)
                for x in self.scheduler.members().values()
                if x.number != n and x.state != MemberState.DONE
            }
            gone = {k for k in self.checkpoints if k[0] == n and k[1] >= step}
            assert not needed & gone, f"member {n} gives up weights others need: {needed & gone}"
            for k in gone:
                del self.checkpoints[k]
        self._save(n, step, state)

    def _end(self, n: int, state: TrialState) -> None:
        run = self.running.pop(n)
        self.final[n] = run.state
        self.scheduler.on_trial_end(n, state)

    def _advance(self, n: int) -> None:
        run = self.running[n]
        run.state = self.step_fn(run.state, run.params)
        run.step += 1
        run.clock += self.speeds.get(n, 1.0)
        self.clock = run.clock
        self._save(n, run.step, run.state)  # saved before the report
        metrics = self.metric_fn(run.state)
        self.scheduler.report(n, run.step, metrics)
        d = self.scheduler.decide(n, run.step)
        if self.retry_reports:  # the same report and decide again: same answer
            self.scheduler.report(n, run.step, metrics)
            assert self.scheduler.decide(n, run.step) == d
        self.decisions.append((n, run.step, d))
        if d.kind == DecisionKind.EXPLOIT:
            if self.crash_on_exploit and (n, run.step) not in self.crashed:
                self.crashed.add((n, run.step))  # dies before applying it: restart
                self._end(n, TrialState.FAIL)
                return
            run.state = self.checkpoints[(d.donor, d.donor_step)]
            run.params, run.step = dict(d.params), d.donor_step
            self._adopt(n, run.step, run.state)
        elif d.kind == DecisionKind.PAUSE:
            self._end(n, TrialState.COMPLETE)
            return
        if run.step >= self.max_steps:
            self._end(n, TrialState.COMPLETE)

    def run(self, limit: int = 100_000) -> None:
        for _ in range(limit):
            self._fill()
            if not self.running:
                assert self.scheduler.finished(), "nothing runs but the population isn't done"
                return
            n = min(self.running, key=lambda k: (self.running[k].clock, k))
            self._advance(n)
        raise AssertionError("simulation did not finish")


def toy_scheduler(
    store: MemoryPopulationStore | None = None,
    *,
    explore: bool = True,
    max_steps: int = 200,
    **overrides: Any,
) -> PBTScheduler:
    cfg = {
        "type": "pbt",
        "population": 2,
        "perturbation_interval": 4,
        "seed": 0,
        "initial": TOY_INITIAL,
        **overrides,
    }
    if not explore:  # exploit and explore off: members never become ready
        cfg["perturbation_interval"] = 10**9
    return PBTScheduler(
        PBTConfig(**cfg),
        store=store or MemoryPopulationStore(),
        sweep="toy",
        space=TOY_SPACE,
        metric="Q",
        mode="max",
        max_steps=max_steps,
    )


def run_toy(scheduler: PBTScheduler, slots: int = 2, **kw: Any) -> SimBackend:
    backend = SimBackend(
        scheduler,
        slots=slots,
        init=(0.9, 0.9),
        step_fn=toy_step,
        metric_fn=lambda th: {"Q": toy_q(th)},
        max_steps=scheduler.max_steps,
        **kw,
    )
    backend.run()
    return backend


def best_q(backend: SimBackend) -> float:
    return max(toy_q(th) for th in backend.final.values())


# --------------------------------------------------------------------------- the toy problem


def test_toy_pbt_reaches_the_optimum() -> None:
    sched = toy_scheduler()
    backend = run_toy(sched)
    assert best_q(backend) >= 1.19
    assert any(d.kind == DecisionKind.EXPLOIT for _, _, d in backend.decisions)


def test_toy_without_exploit_and_explore_stays_below_0_4() -> None:
    backend = run_toy(toy_scheduler(explore=False))
    qs = [toy_q(th) for th in backend.final.values()]
    assert len(qs) == 2 and max(qs) <= 0.4
    assert not any(d.kind == DecisionKind.EXPLOIT for _, _, d in backend.decisions)


def test_toy_reaches_the_optimum_across_seeds() -> None:
    reached = [best_q(run_toy(toy_scheduler(seed=seed))) >= 1.19 for seed in range(10)]
    assert sum(reached) >= 9


def test_replay_schedule_reproduces_the_best_member() -> None:
    store = MemoryPopulationStore()
    backend = run_toy(toy_scheduler(store))
    best = max(backend.final, key=lambda n: toy_q(backend.final[n]))
    schedule = replay_schedule(store, "toy", best)
    assert schedule[0][0] == 0 and len(schedule) > 1
    assert [s for s, _ in schedule] == sorted({s for s, _ in schedule})
    theta, pieces = (0.9, 0.9), [*schedule, (200, None)]
    for (start, params), (end, _) in itertools.pairwise(pieces):
        for _ in range(start, end):
            theta = toy_step(theta, params)
    assert toy_q(theta) == pytest.approx(toy_q(backend.final[best]), abs=1e-12)


def test_synchronous_exploits_at_common_barriers() -> None:
    store = MemoryPopulationStore()
    sched = toy_scheduler(store, synchronous=True, population=4, initial=())
    backend = run_toy(sched, slots=4, speeds={0: 1.0, 1: 1.7, 2: 0.6, 3: 1.3})
    events = store.lineage("toy")
    assert events, "no exploit happened"
    assert all(e.step % 4 == 0 and e.donor_step == e.step for e in events)
    assert all(m.state == MemberState.DONE for m in sched.members().values())
    assert {th for th in backend.final} == {0, 1, 2, 3}


# --------------------------------------------------------------------------- time-sharing


def test_population_of_6_on_2_slots_finishes_every_member() -> None:
    sched = toy_scheduler(population=6, initial=(), max_steps=60)
    sched.max_concurrent = 2
    assert not sched.exhausted()  # members to start
    backend = run_toy(sched, slots=2, speeds={0: 1.0, 1: 1.3, 2: 0.8, 3: 1.1, 4: 0.9, 5: 1.2})
    members = sched.members()
    assert len(members) == 6
    assert all(m.state == MemberState.DONE and m.step == 60 for m in members.values())
    assert backend.max_running == 2
    assert sum(d.kind == DecisionKind.PAUSE for _, _, d in backend.decisions) >= 4
    assert sched.budget_left() == 0 and sched.exhausted()


def test_exhausted_while_no_member_waits_or_is_paused() -> None:
    """What a worker asks before it counts the sweep as waiting for devices (elastic trials)."""
    store = MemoryPopulationStore()
    sched = toy_scheduler(store, population=2, initial=())
    _put(store, (0, MemberState.RUNNING, 4, 0.5, 4))
    assert not sched.exhausted()  # member 1 is still to start
    _put(store, (1, MemberState.PAUSED, 4, 0.4, 4))
    assert not sched.exhausted()  # member 1 waits to be resumed
    _put(store, (1, MemberState.RUNNING, 4, 0.4, 4))
    assert sched.exhausted()


def _put(store: MemoryPopulationStore, *rows: tuple[int, MemberState, int, float, int]) -> None:
    """Members ``(number, state, step, score, steps trained)``, each on its own checkpoint."""
    with store.transaction("toy") as txn:
        for number, state, step, score, trained in rows:
            txn.put(Member(number, {"h0": 0.5, "h1": 0.5}, {"h0": 0.5, "h1": 0.5}, state=state,
                           step=step, score=score, steps_trained=trained, reports=step // 2,
                           last_check=max(0, step // 4 - 1) * 4, ckpt_member=number,
                           ckpt_step=step))  # fmt: skip


def test_a_member_at_the_last_step_is_finished_neither_ranked_nor_copied() -> None:
    """Member 1 has reported the last step; its trial has not ended yet. Copying it would
    leave member 0 nothing to train (time-shared, paused at the last step: DONE at its
    trial's end, its trial left PAUSED in a finished sweep). Member 0 copies member 2."""
    store = MemoryPopulationStore()
    sched = toy_scheduler(store, population=3, initial=(), max_steps=8)
    sched.max_concurrent = 2
    _put(store, (0, MemberState.RUNNING, 4, 0.1, 4), (1, MemberState.RUNNING, 8, 1.0, 8),
         (2, MemberState.PAUSED, 2, 0.5, 2))  # fmt: skip
    d = sched.decide(0, 4)
    assert d.kind == DecisionKind.PAUSE and (d.donor, d.donor_step) == (2, 2), d
    for number in (1, 0):
        sched.on_trial_end(number, TrialState.COMPLETE)
    states = {n: m.state for n, m in sched.members().items()}
    assert states == {0: MemberState.PAUSED, 1: MemberState.DONE, 2: MemberState.PAUSED}
    assert [sched.suggest().trial_number for _ in range(2)] == [2, 0]  # type: ignore[union-attr]


def test_a_new_report_after_an_exploit_from_behind_is_never_taken_for_a_retry() -> None:
    """Member 1 at step 20 copies member 0 at step 18 and trains to step 20 again. A
    deterministic workload whose params come out unchanged reports the same score there as
    before the exploit: the recorder's first try of that report is recorded, not taken for
    the exploit's report repeated (the exploit would be replayed forever); a retry is."""
    store = MemoryPopulationStore()
    sched = toy_scheduler(store, max_steps=40)
    _put(store, (0, MemberState.RUNNING, 18, 1.0, 18), (1, MemberState.RUNNING, 18, 0.2, 18))
    report = {"Q": 0.1}
    exploit = sched.report_and_decide(1, 20, report, first_try=True)
    assert exploit.kind == DecisionKind.EXPLOIT and (exploit.donor, exploit.donor_step) == (0, 18)
    assert sched.report_and_decide(1, 20, report) == exploit  # a retry: the same answer
    assert sched.members()[1].step == 18
    again = sched.report_and_decide(1, 20, report, first_try=True)  # re-trained from 18
    assert again.kind == DecisionKind.CONTINUE, again
    m = sched.members()[1]
    assert (m.step, m.ckpt_member, m.ckpt_step, m.steps_trained) == (20, 1, 20, 22)
    assert _exploit_events(store) == [(1, 1)]


def test_paused_member_with_least_training_runs_next() -> None:
    sched = toy_scheduler(population=3, initial=(), max_steps=40)
    sched.max_concurrent = 1
    first = sched.suggest()
    assert first is not None and not first.resume and sched.suggest() is None
    for step in range(1, 5):
        sched.report(first.trial_number, step, {"Q": 0.1 * step})
    assert sched.decide(first.trial_number, 4).kind == DecisionKind.PAUSE
    sched.on_trial_end(first.trial_number, TrialState.COMPLETE)
    second = sched.suggest()
    assert second is not None and second.trial_number == 1 and not second.resume
    for step in range(1, 5):
        sched.report(1, step, {"Q": 0.5})
    assert sched.decide(1, 4).kind == DecisionKind.PAUSE  # member 2 has not trained yet
    sched.on_trial_end(1, TrialState.COMPLETE)
    assert sched.suggest().trial_number == 2
    for step in range(1, 5):
        sched.report(2, step, {"Q": 0.6})
    assert sched.decide(2, 4).kind == DecisionKind.CONTINUE  # nobody trained less than 2
    for step in range(5, 9):
        sched.report(2, step, {"Q": 0.6})
    d = sched.decide(2, 8)
    assert d.kind == DecisionKind.PAUSE and d.donor is None  # 0 and 1 trained 4 steps, 2 eight
    sched.on_trial_end(2, TrialState.COMPLETE)
    assert sched.members()[2].state == MemberState.PAUSED
    again = sched.suggest()  # 0 and 1 tie on training: the lower step, then number, goes first
    assert again is not None and again.resume and again.trial_number == 0
    assert (again.restore.trial, again.restore.step) == (0, 4)


# --------------------------------------------------------------------------- crash safety


def _exploit_events(store: MemoryPopulationStore) -> list[tuple[int, int]]:
    return [(e.member, e.generation) for e in store.lineage("toy") if e.kind == "exploit"]


def test_retried_reports_neither_lose_nor_duplicate_lineage() -> None:
    store = MemoryPopulationStore()
    backend = run_toy(toy_scheduler(store, population=4, initial=()), retry_reports=True)
    exploits = [d for _, _, d in backend.decisions if d.kind == DecisionKind.EXPLOIT]
    events = _exploit_events(store)
    assert len(events) == len(set(events)) == len(exploits) > 0
    explores = [e for e in store.lineage("toy") if e.kind == "explore"]
    assert len(explores) == len(events)
    for n in range(4):  # generations count 1, 2, ... without gaps
        gens = sorted(g for m, g in events if m == n)
        assert gens == list(range(1, len(gens) + 1))


def test_member_dying_before_its_exploit_resumes_from_the_donor() -> None:
    store = MemoryPopulationStore()
    sched = toy_scheduler(store)
    backend = run_toy(sched, crash_on_exploit=True)
    assert backend.crashed, "no exploit was interrupted"
    events = _exploit_events(store)
    assert len(events) == len(set(events))
    assert all(m.state == MemberState.DONE for m in sched.members().values())
    assert best_q(backend) >= 1.19


@pytest.mark.parametrize(
    "population,slots,seed,quantile",
    [(2, 2, 0, 0.25), (4, 2, 0, 0.25), (5, 1, 0, 0.25), (6, 3, 4, 0.5), (8, 4, 3, 0.5)],
)
def test_pinned_checkpoints_are_enough_with_keep_1(
    population: int, slots: int, seed: int, quantile: float
) -> None:
    """Each member keeps only its newest checkpoint plus the pinned ones, members of uneven
    speed die before applying exploits and time-share slots: every checkpoint a member loads
    is still there (a pruned one raises KeyError in the backend), and no member gives up
    (discards or overwrites) weights another member will still load."""
    sched = toy_scheduler(population=population, initial=(), seed=seed, quantile_fraction=quantile)
    sched.max_concurrent = slots
    speeds = {n: 1.0 + 0.37 * n for n in range(population)}
    backend = run_toy(sched, slots=slots, keep=1, crash_on_exploit=True, speeds=speeds)
    assert backend.crashed and _exploit_events(sched.store)
    assert all(m.state == MemberState.DONE for m in sched.members().values())
    assert sched.pinned_checkpoints() == set()


def test_interrupted_sweep_resumes_the_population() -> None:
    store = MemoryPopulationStore()
    first = toy_scheduler(store, population=4, initial=())
    backend = SimBackend(first, 2, (0.9, 0.9), toy_step, lambda th: {"Q": toy_q(th)}, max_steps=200)
    first.max_concurrent = 2
    for _ in range(300):  # run a while, then the controller dies with 2 members running
        backend._fill()
        backend._advance(min(backend.running, key=lambda k: (backend.running[k].clock, k)))
    assert len(backend.running) == 2
    again = toy_scheduler(store, population=4, initial=())  # a new controller
    again.max_concurrent = 2
    assert again.suggest() is None  # the store still thinks two members run
    assert again.requeue_all() == 2
    resumed = SimBackend(
        again, 2, (0.9, 0.9), toy_step, lambda th: {"Q": toy_q(th)}, max_steps=200,
        checkpoints=backend.checkpoints,
    )  # fmt: skip
    resumed.run()
    members = again.members()
    assert all(m.state == MemberState.DONE and m.step == 200 for m in members.values())


def test_failing_member_restarts_from_its_checkpoint_then_gives_up() -> None:
    sched = toy_scheduler(max_steps=40)
    s = sched.suggest()
    assert s is not None
    sched.report(s.trial_number, 1, {"Q": -0.3})
    sched.on_trial_end(s.trial_number, TrialState.FAIL, error="boom")
    again = sched.suggest()  # resumed before member 1 starts: its work was interrupted
    assert again is not None and again.resume and again.trial_number == s.trial_number
    assert (again.restore.trial, again.restore.step) == (s.trial_number, 1)
    for _ in range(3):
        sched.on_trial_end(s.trial_number, TrialState.FAIL, error="boom")
        sched.suggest()
    assert sched.members()[s.trial_number].state == MemberState.DONE


# --------------------------------------------------------------------------- config and explore


@pytest.mark.parametrize(
    "bad",
    [
        {"population": 1},
        {"quantile_fraction": 0.6},
        {"quantile_fraction": 0.0},
        {"resample_probability": 1.5},
        {"perturbation_factors": []},
        {"initial": [{}, {}, {}]},
        {"unknown": 1},
    ],
)
def test_config_rejects(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        PBTConfig(**{"type": "pbt", "population": 2, **bad})


def test_initial_params_are_checked_against_the_space() -> None:
    with pytest.raises(ConfigError) as err:
        toy_scheduler(initial=({"h0": 2.0, "h1": 0.0}, {"lr": 0.1}))
    assert err.value.problems == [
        "scheduler.initial[0].h0: expected a number in [0.0, 1.0] (got 2.0)",
        "scheduler.initial[1].lr: not a parameter of the space (['h0', 'h1'])",
    ]


def test_explore_respects_types_and_bounds() -> None:
    import random

    space = {
        "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
        "layers": {"type": "int", "low": 1, "high": 4, "log": False},
        "act": {"type": "categorical", "choices": ["relu", "gelu", "tanh"]},
        "fixed": None,
    }
    space = {k: v for k, v in space.items() if v is not None}
    rng = random.Random(0)
    params = {"lr": 0.09, "layers": 4, "act": "relu", "batch": 32}
    moved_act = set()
    for _ in range(200):
        new = explore_params(params, space, rng, 0.0, (0.8, 1.2))
        assert 1e-4 <= new["lr"] <= 1e-1 and new["lr"] in (0.09 * 0.8, 0.1)
        assert isinstance(new["layers"], int) and new["layers"] in (3, 4)
        moved_act.add(new["act"])
        assert new["batch"] == 32
    assert moved_act == {"gelu"}  # relu's only neighbour
    resampled = [explore_params(params, space, rng, 1.0, (0.8, 1.2)) for _ in range(200)]
    assert {p["act"] for p in resampled} == {"relu", "gelu", "tanh"}
    assert {p["layers"] for p in resampled} == {1, 2, 3, 4}
    logs = [math.log10(p["lr"]) for p in resampled]
    assert min(logs) < -3.5 and max(logs) > -1.5  # log-uniform over the decades
