"""The scale harness: many real worker control loops, simulated trials, one real PostgreSQL.

:func:`run_case` starts ``workers`` controllers (``platform/controller/loop.py``), each a thread
(``PER_PROCESS`` threads to a process, the processes spawned: one interpreter's lock would
otherwise be what is measured) with the parts a ``hyperfleet worker`` has: its own registered
worker row and heartbeat thread, its own open session of the sweep (storage, scheduler), one
device, and the real claim (the sweep's claim lock, the scheduler's suggestion, the RUNNING
record), launch, report and reap path. Only the trials are simulated
(:mod:`hyperfleet.platform.launcher.simulated` on the system clock): each reports twice over
``trial_s`` seconds of wall time through the platform's rank-0 recorder and ends, so every
write a real trial makes is made. A worker loop whose trials run sleeps until their next
report or end (the simulated launcher's ``next_event_in``; a real launcher's loop polls every
``poll_every``): the loops' own ticks would otherwise be what 1,000 of them measure. Each
process starts as a ``hyperfleet worker`` does (:mod:`hyperfleet.startup`): the garbage
collector off while it builds its loops, then what start-up made frozen, so later collections
walk only what the loops make since. Without that, a process's collections walked its 50
loops' start-up objects again and again: at 1,000 workers, one run without it had 24 claims
of the start-up wave over 100 ms, clustered in the wave's last seconds; one run with it, 1.

What it measures, per case:

* **claims**: the time of each claim (waiting for the sweep's claim lock, the scheduler's
  suggestion, the RUNNING record), median and p99, over all claims, over the start-up wave
  (each worker's first claim) and over the steady state (every later claim, whose p99 is
  also split into the lock's wait and the rest); how many trials were claimed twice (held by
  two launches at once: their lease rows in ``hf_leases`` overlap);
* **PostgreSQL**: transactions per second (``pg_stat_database.xact_commit`` deltas),
  connections held (``pg_stat_activity``), lock waits (``pg_locks`` not granted and
  ``wait_event_type = 'Lock'``), sampled every ``sample_s`` by a connection of its own
  (not counted);
* **suggestion time** against the sweep's length (the scheduler's ``suggest`` alone);
* **platform time per trial**: claim + preparation + start + each report's recording and
  decision + the end's records, by the worker's thread, for the first and the last
  ``window`` trials of the sweep;
* **waiting share**: the share of the workers' time spent in those platform calls;
* **slow claims** (over ``SLOW_S``): how many a garbage collection of their own process
  overlapped, the processes' collections, the machine's runnable threads, and a timeline of
  the case in ``TIMELINE_S`` slices (claims, slow claims, collections, sweep closes, the
  machine's busy share), to read a burst against what else the fleet did then.

The harness times the driver's own methods with thin wrappers
(:mod:`benchmarks.scale_measures`); nothing of the claim, heartbeat or report path is replaced.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.scale_measures import (
    Sampler,
    TimedRecorder,
    Timers,
    claim_split,
    claimed_twice,
    gc_pauses,
    launched_again,
    machine_busy,
    slow_claims,
    timed_driver,
    timeline,
)
from benchmarks.scale_measures import pct as _pct
from hyperfleet import startup
from hyperfleet.platform.clock import SystemClock
from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.controller import Controller, FixedSweeps, Timing, Until, open_session
from hyperfleet.platform.launcher.simulated import SimulatedLauncher, curve
from hyperfleet.platform.pool import Device, LocalPool
from hyperfleet.platform.storage import Storage, engine
from hyperfleet.platform.tracking import NullTracker
from hyperfleet.platform.worker import worker_record
from hyperfleet.spec.states import TrialState
from hyperfleet.testing import postgres as testing_postgres
from hyperfleet.testing.postgres import throwaway_server
from hyperfleet.testing.sweeps import minimal_sweep

SCHEDULERS = ("random", "tpe", "gp", "pbt")
SLOW_S = 0.1  # a claim slower than this is told apart (the 1,000-worker target's p99)
TIMELINE_S = 5.0  # the case's timeline in slices this long (the JSON's, for reading bursts)


MAX_CONNECTIONS = 1000  # 20 processes of 50 loops, two pools of at most 10 + 10 each: 800


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    """A throwaway PostgreSQL server (as the tests' ``postgres_server`` fixture starts it,
    with ``max_connections`` raised as ``docs/scale.md`` sizes it for a fleet); yields its
    base URL (no database)."""
    with throwaway_server("hyperfleet-scale-", max_connections=MAX_CONNECTIONS) as url:
        yield url


def new_database(server: str) -> str:
    """A fresh database on ``server``; its URL."""
    return testing_postgres.new_database(server, prefix="scale_")


def sweep_config(
    scheduler: str, trials: int, workers: int, workdir: Path, ahead: int | None = None
) -> dict[str, Any]:
    """The sweep of a case: ``trials`` trials of one float and one log-float dimension, every
    worker busy (``max_concurrent``), two reports a trial; ``ahead``: ``budget.ahead`` (None:
    the default, one suggestion ahead per 32 live workers). PBT: a population of
    ``min(workers, 32)`` members (at least 2) whose segments (a launch up to its next ready
    check) add up to about ``trials``."""
    space = {
        "x": {"type": "float", "low": 0.0, "high": 1.0},
        "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
    }
    sched: dict[str, Any] = {"type": scheduler, "seed": 0}
    budget: dict[str, Any] = {"trials": trials, "max_concurrent": workers}
    if ahead is not None:
        budget["ahead"] = ahead
    steps = 2
    if scheduler == "pbt":
        population = max(2, min(workers, 32))
        segments = max(1, trials // population)
        steps = 2 * segments
        sched.update(population=population, perturbation_interval=2)
        budget = {"trials": population, "max_concurrent": min(workers, population)}
    return minimal_sweep(
        name=f"scale-{scheduler}",
        space=space,
        scheduler=sched,
        budget=budget,
        trial={"steps": steps, "eval_every": 1, "resources": {"devices": 1}},
        storage="sqlite:///unused.db",
        workdir=str(workdir),
    )


@dataclass
class CaseResult:
    scheduler: str
    workers: int
    trials: int
    wall_s: float
    trials_done: int
    claimed_twice: int
    claim_p50_ms: float
    claim_p99_ms: float
    claims: int
    empty_claims: int
    xact_per_s: float
    connections_max: int
    connections_per_worker: float
    lock_wait_samples: float  # share of samples with a session waiting on a lock
    lock_waits_max: int
    suggest_first_ms: float  # mean over the first ``window`` trials
    suggest_last_ms: float  # mean over the last ``window`` trials
    platform_first_ms: float
    platform_last_ms: float
    waiting_share: float
    # the claim lock's wait told apart (the queue, not the history), and row-lock waits
    claim_wait_first_ms: float = float("nan")  # mean wait for the claim lock, first window
    claim_wait_last_ms: float = float("nan")
    platform_nowait_first_ms: float = float("nan")  # platform time less the claim lock's wait
    platform_nowait_last_ms: float = float("nan")
    advisory_wait_samples: float = 0.0  # share of samples with a session waiting on it
    row_wait_samples: float = 0.0  # ... on a row lock (a PBT population's, a trial's row)
    row_waits_max: int = 0
    # the start-up wave (each worker's first claim) told apart from the steady state
    claim_first_p50_ms: float = float("nan")
    claim_first_p99_ms: float = float("nan")
    claim_steady_p50_ms: float = float("nan")
    claim_steady_p99_ms: float = float("nan")
    claims_steady: int = 0
    claim_steady_wait_p99_ms: float = float("nan")  # of the steady claims' lock waits
    claim_steady_inside_p99_ms: float = float("nan")  # of the steady claims less that wait
    in_server_mean: float = float("nan")  # sessions running a statement, mean of samples
    on_client_mean: float = float("nan")  # sessions in a transaction waiting on their client
    trial_s: float = float("nan")  # the trials' mean length
    # the suggestion's CPU (its thread's), first and last window: what it computed, where
    # suggest_*_ms also holds its database round trips and its waits for the interpreter
    suggest_cpu_first_ms: float = float("nan")
    suggest_cpu_last_ms: float = float("nan")
    ramp_s: float = float("nan")  # the workers joined over this long
    # suggestions made ahead (budget.ahead): claims that took one without the claim lock,
    # and the refills after launches (their time is in the platform's time per trial)
    ahead: int | None = None  # budget.ahead (None: the default)
    claims_lockfree: int = 0
    refill_total_s: float = 0.0
    refill_p99_ms: float = float("nan")
    launched_again: int = 0  # launches of a trial launched before (requeued)
    submit_s: float = float("nan")  # the sweep's creation (with its first suggestions ahead)
    # the share of this machine's CPU in use (every worker loop runs on it), on the whole
    # and in the busiest 5 s: near 1, its CPU queue is in every figure above
    cpu_busy_mean: float = float("nan")
    cpu_busy_peak: float = float("nan")
    # worker loops that stopped on an error (reported, not raised: the case's figures stand)
    loops_failed: int = 0
    first_loop_error: str | None = None
    # claims over SLOW_S, and how many a garbage collection of their own process overlapped
    # (it holds the interpreter's lock: every loop of that process waits); the processes'
    # collections of 5 ms or more; the machine's runnable threads, most in a sample
    claims_slow: int = 0
    claims_slow_in_gc: int = 0
    gc_pauses: int = 0
    gc_pause_max_ms: float = 0.0
    gc_pause_total_s: float = 0.0
    runnable_max: float = float("nan")
    slowest_claims: list[dict[str, float | int]] = field(default_factory=list)
    timeline: list[dict[str, float]] = field(default_factory=list)  # every TIMELINE_S

    def row(self) -> dict[str, Any]:
        return asdict(self)


def _mean(samples: list[dict[str, float]], key: str) -> float:
    values = [s[key] for s in samples if key in s]
    return round(statistics.fmean(values), 2) if values else float("nan")


def _mean_ms(pairs: list[tuple[int, float]], first: bool, window: int) -> float:
    ordered = sorted(pairs)
    part = ordered[:window] if first else ordered[-window:]
    return 1000 * statistics.fmean(v for _, v in part) if part else float("nan")


PER_PROCESS = 50  # worker loops per process: more, and one interpreter's lock is the limit
# (at 125, a process's 250 threads held every pooled connection while they waited for the
# interpreter between round trips, and heartbeats timed out waiting for one)
KEPT_PER_LOOPS = 5  # a pool keeps one connection per this many worker loops of its process
BEATS_PER_KEPT = 10  # the heartbeat lane keeps one per this many (2 per 50 churned its overflow)


def _size_pools(loops: int) -> None:
    """A process of ``loops`` worker loops keeps about one pooled connection per
    :data:`KEPT_PER_LOOPS` of them (at least the default ``POOL_SIZE``): its loops and their
    heartbeat threads share one pool, where a real worker process has a pool of its own. With
    the default 5 kept, 250 threads opened and closed overflow connections all the time (a
    PostgreSQL connection set up per heartbeat: a quarter of their CPU at 1,000 workers). The
    heartbeats' own lane keeps one per :data:`BEATS_PER_KEPT` loops (a real worker process
    beats alone on it)."""
    engine.POOL_SIZE = max(engine.POOL_SIZE, -(-loops // KEPT_PER_LOOPS))
    engine.HEARTBEAT_POOL_SIZE = max(engine.HEARTBEAT_POOL_SIZE, -(-loops // BEATS_PER_KEPT))


@dataclass(frozen=True)
class Plan:
    """The case every process of it runs its share of worker loops for."""

    url: str
    data: dict[str, Any]
    trial_s: float
    ramp_s: float
    timeout_s: float


def _script(cfg: Any, trial_s: float) -> Callable[[Any], Any]:
    """Two reports over about ``trial_s`` seconds (+-50 %, by trial number); PBT: to the
    sweep's last step, an interval at a time."""

    def script(sim: Any) -> Any:
        per = trial_s * (0.5 + ((sim.number * 7919) % 1000) / 1000) / 2
        steps = cfg.trial.steps if cfg.is_population else sim.start_step + 2
        value = curve(lambda p, s: float(p["x"]) + 1.0 / s, steps=steps, seconds_per_step=per)
        return value(sim)

    return script


def _controllers(plan: Plan, first: int, count: int, timers: Timers) -> list[Controller]:
    cfg = parse_sweep(plan.data)
    clock = SystemClock()
    script = _script(cfg, plan.trial_s)
    out = []
    for i in range(first, first + count):  # the schema is made: storages open without DDL
        storage = Storage(plan.url, create=False, clock=clock)
        session = open_session(cfg, storage, NullTracker(), None)
        pool = LocalPool([Device("cpu", i)])
        launcher = SimulatedLauncher(
            clock, script, recorder_factory=lambda spec: TimedRecorder(spec, clock, timers)
        )
        record = worker_record(pool, "default", None, [cfg.name], clock.time())
        registry = Storage(plan.url, create=False)
        controller = Controller(
            pool, FixedSweeps([session]), lambda _, la=launcher: la, clock=clock,
            timing=Timing(), worker=record, registry=registry, until=Until(done=True),
            counts_only=True,  # as a hyperfleet worker leaves a sweep
        )  # fmt: skip
        out.append(controller)
    return out


def serve(plan: Plan, first: int, count: int, start: Callable[[], None]) -> dict[str, Any]:
    """Run ``count`` worker loops (threads of this process) until the sweep is done; after
    they are built, ``start()`` waits for the other processes. What their timers took."""
    timers = Timers()
    _size_pools(count)
    controllers = _controllers(plan, first, count, timers)
    startup.resume()  # what start-up made, frozen, as a worker process does once it started
    errors: list[BaseException] = []

    def loop(c: Controller) -> None:
        try:
            c.run()
        except BaseException as exc:  # noqa: BLE001 - reported after the case
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(c,), daemon=True) for c in controllers]
    pauses: list[tuple[float, float, int]] = []
    with timed_driver(timers), gc_pauses(pauses):
        start()
        t0 = time.monotonic()
        for th in threads:
            th.start()
            time.sleep(plan.ramp_s / count)
        for th in threads:
            th.join(max(0.0, t0 + plan.timeout_s - time.monotonic()))
        for c in controllers:
            c.request_stop()
    return {"claims": timers.claims, "empty": timers.empty_claims, "gc": pauses,
            "closes": timers.closes,
            "suggest": timers.suggest, "platform": dict(timers.platform),
            "claim_wait": timers.claim_wait, "refills": timers.refills,
            "loops_failed": [repr(e) for e in errors]}  # fmt: skip


def _orphaned_exit(parent: int) -> None:
    """End this process when its parent is gone (a harness stopped with SIGKILL left its
    processes of worker loops running against a stopped database, into the next case)."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def _child(plan: Plan, first: int, count: int, barrier: Any, results: Any) -> None:
    startup.pause()  # as ``hyperfleet worker`` starts (``hyperfleet.startup``): resumed in serve
    threading.Thread(target=_orphaned_exit, args=(os.getppid(),), daemon=True).start()
    try:
        results.put(serve(plan, first, count, lambda: barrier.wait()))
    except BaseException as exc:  # noqa: BLE001 - the parent raises it
        results.put({"error": repr(exc)})
        barrier.abort()


def _spread(plan: Plan, workers: int, processes: int, sampler: Sampler) -> list[dict[str, Any]]:
    """The worker loops over ``processes`` processes (spawned: a fresh interpreter each, as
    separate workers are), started together once every process has built its loops."""
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(processes + 1), ctx.Queue()
    share = [workers // processes + (i < workers % processes) for i in range(processes)]
    firsts = [sum(share[:i]) for i in range(processes)]
    procs = [ctx.Process(target=_child, args=(plan, f, n, barrier, results))
             for f, n in zip(firsts, share, strict=True)]  # fmt: skip
    for p in procs:
        p.start()
    barrier.wait(timeout=plan.timeout_s)
    sampler.start()
    parts = [results.get(timeout=plan.timeout_s + 60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return parts


def run_case(
    server: str,
    scheduler: str,
    workers: int,
    trials: int,
    *,
    trial_s: float = 1.0,
    ramp_s: float = 1.0,
    window: int = 100,
    sample_s: float = 0.5,
    timeout_s: float = 900.0,
    processes: int | None = None,
    ahead: int | None = None,
) -> CaseResult:
    """One sweep of ``trials`` simulated trials (each ``trial_s`` seconds of wall time, with a
    spread of +-50 %) on ``workers`` worker loops that start over ``ramp_s`` seconds, on a new
    database of ``server``; what it measured (see the module docstring). ``processes``: how
    many processes run the loops (default: one per ``PER_PROCESS``), each spawned and started
    as a ``hyperfleet worker`` is, however small the case (in this process, a case would run
    unfrozen, after what earlier cases left: TPE's 10,000-trial case measured 2.72x there,
    1.72x alone);
    ``ahead``: the sweep's ``budget.ahead`` (None: its default)."""
    url = new_database(server)
    scratch = Path(tempfile.mkdtemp(prefix="hyperfleet-scale-"))
    data = sweep_config(scheduler, trials, workers, scratch / "runs", ahead)
    data["storage"] = url
    cfg = parse_sweep(data)
    plan = Plan(url, data, trial_s, ramp_s, timeout_s)
    first = Storage(url)
    submitted = time.monotonic()
    open_session(cfg, first, NullTracker(), None)  # submitted: every worker continues it
    submit_s = time.monotonic() - submitted
    processes = processes or -(-workers // PER_PROCESS)
    sampler = Sampler(url, sample_s)
    t0 = time.monotonic()
    try:
        parts = _spread(plan, workers, processes, sampler)
    finally:
        wall = time.monotonic() - t0
        if sampler.is_alive():
            sampler.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    failed = [p["error"] for p in parts if "error" in p]
    if failed:
        raise RuntimeError(f"a process of worker loops failed: {failed[0]}")
    records = first.trials.of(cfg.name)
    leases = first.leases.all(cfg.name)
    first.close()
    r = _result(cfg, scheduler, workers, trials, wall, parts, sampler.samples, records,
                leases, window, since=t0)  # fmt: skip
    r.trial_s, r.ramp_s, r.ahead, r.submit_s = trial_s, ramp_s, ahead, round(submit_s, 2)
    return r


def _result(
    cfg: Any, scheduler: str, workers: int, trials: int, wall: float,
    parts: list[dict[str, Any]], samples: list[dict[str, float]], records: list[Any],
    leases: list[Any], window: int, since: float,
) -> CaseResult:  # fmt: skip
    split = [(d, w, f) for p in parts for _, d, w, f in p["claims"]]
    failed = [e for p in parts for e in p.get("loops_failed", [])]
    claims = [c[0] for c in split]
    refills = [float(x) for p in parts for x in p.get("refills", [])]
    suggest = [(n, d) for p in parts for n, d, _ in p["suggest"]]
    suggest_cpu = [(n, c) for p in parts for n, _, c in p["suggest"]]
    platform_by: dict[int, float] = defaultdict(float)
    for p in parts:
        for number, seconds in p["platform"].items():
            platform_by[int(number)] += seconds
    done = sum(r.state == TrialState.COMPLETE for r in records)
    span = (samples[-1]["at"] - samples[0]["at"]) if len(samples) > 1 else float("nan")
    xacts = (samples[-1]["xacts"] - samples[0]["xacts"]) / span if len(samples) > 1 else 0.0
    conns = max((int(s["conns"]) - 1 for s in samples), default=0)  # not the sampler's own
    waits = [s["lock_waits"] for s in samples]
    platform = sorted(platform_by.items())
    wait_by = {int(n): w for p in parts for n, w in p.get("claim_wait", {}).items()}
    nowait = [(n, v - wait_by.get(n, 0.0)) for n, v in platform]
    row_waits = [s.get("row_waits", 0.0) for s in samples]
    busy_mean, busy_peak = machine_busy(samples)
    slow = slow_claims([([(a, d) for a, d, *_ in p["claims"]], p["gc"]) for p in parts],
                       SLOW_S, since)  # fmt: skip
    runnable = [s["runnable"] for s in samples if "runnable" in s]
    return CaseResult(
        scheduler=scheduler,
        workers=workers,
        trials=trials,
        wall_s=round(wall, 2),
        trials_done=done,
        claimed_twice=claimed_twice(leases),
        launched_again=launched_again(leases),
        claim_p50_ms=round(1000 * _pct(claims, 0.5), 2),
        claim_p99_ms=round(1000 * _pct(claims, 0.99), 2),
        claims=len(claims),
        empty_claims=sum(int(p["empty"]) for p in parts),
        xact_per_s=round(xacts, 1),
        connections_max=conns,
        connections_per_worker=round(conns / workers, 3),
        lock_wait_samples=round(sum(w > 0 for w in waits) / max(1, len(waits)), 3),
        lock_waits_max=int(max(waits, default=0)),
        suggest_first_ms=round(_mean_ms(suggest, True, window), 2),
        suggest_last_ms=round(_mean_ms(suggest, False, window), 2),
        suggest_cpu_first_ms=round(_mean_ms(suggest_cpu, True, window), 2),
        suggest_cpu_last_ms=round(_mean_ms(suggest_cpu, False, window), 2),
        platform_first_ms=round(_mean_ms(platform, True, window), 2),
        platform_last_ms=round(_mean_ms(platform, False, window), 2),
        waiting_share=round(sum(platform_by.values()) / (workers * wall), 4),
        claim_wait_first_ms=round(_mean_ms(sorted(wait_by.items()), True, window), 2),
        claim_wait_last_ms=round(_mean_ms(sorted(wait_by.items()), False, window), 2),
        platform_nowait_first_ms=round(_mean_ms(nowait, True, window), 2),
        platform_nowait_last_ms=round(_mean_ms(nowait, False, window), 2),
        advisory_wait_samples=round(
            sum(s.get("advisory_waits", 0.0) > 0 for s in samples) / max(1, len(samples)), 3
        ),
        row_wait_samples=round(sum(w > 0 for w in row_waits) / max(1, len(row_waits)), 3),
        row_waits_max=int(max(row_waits, default=0)),
        in_server_mean=_mean(samples, "in_server"),
        on_client_mean=_mean(samples, "on_client"),
        claims_lockfree=sum(1 for c in split if c[1] == 0.0),
        refill_total_s=round(sum(refills), 2),
        refill_p99_ms=round(1000 * _pct(refills, 0.99), 2),
        cpu_busy_mean=busy_mean,
        cpu_busy_peak=busy_peak,
        loops_failed=len(failed),
        first_loop_error=failed[0] if failed else None,
        runnable_max=max(runnable, default=float("nan")),
        timeline=timeline(parts, samples, since, TIMELINE_S, SLOW_S),
        **slow,
        **claim_split(split),  # type: ignore[arg-type]
    )
