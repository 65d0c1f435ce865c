"""What the scale harness measures with (:mod:`benchmarks.scale_harness`): timers around the
driver's own claim, preparation, start, refill of the suggestions made ahead (counted in the
platform's time of the trial just launched) and end, the schedulers' ``suggest`` and rank 0's
recorder (thin wrappers, restored after a case: nothing of the path is replaced), the wait for
the sweep's claim lock inside each claim (so the platform's time can be read without the
queue), whether a claim was its worker's first (the start-up wave, told apart from the steady
state), and a sampler of PostgreSQL's own counters (lock waits told apart: advisory, the claim
lock; row locks, e.g. a PBT population's)."""

from __future__ import annotations

import contextlib
import gc
import itertools
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from hyperfleet.platform.controller import driver as driver_mod
from hyperfleet.platform.recorder import RankZeroRecorder
from hyperfleet.platform.schedulers.base import Scheduler
from hyperfleet.platform.storage import Storage
from hyperfleet.spec.recorder import Recorder


@dataclass
class Timers:
    """Durations of the platform's calls, by trial number, from every worker thread."""

    # claims won: (start on time.monotonic(), seconds, seconds waited for the claim lock, the
    # worker's first)
    claims: list[tuple[float, float, float, bool]] = field(default_factory=list)
    _claimed: set[int] = field(default_factory=set)  # drivers that won a claim
    empty_claims: int = 0  # claims that got no trial (nothing to run now)
    # (trial, seconds, of them this thread's CPU: the rest waited for the database or for
    # the interpreter's lock, which the process's other loops held)
    suggest: list[tuple[int, float, float]] = field(default_factory=list)
    platform: dict[int, float] = field(default_factory=lambda: defaultdict(float))
    claim_wait: dict[int, float] = field(default_factory=dict)  # waited for the claim lock
    refills: list[float] = field(default_factory=list)  # each launch's refill of the ahead
    closes: list[tuple[float, float]] = field(default_factory=list)  # (start, seconds)
    _waited: threading.local = field(default_factory=threading.local)

    def add(self, number: int, seconds: float) -> None:
        self.platform[number] += seconds


@contextlib.contextmanager
def timed_driver(t: Timers) -> Iterator[None]:
    """Wrap the driver's claim, preparation, start and end, and the schedulers' ``suggest``,
    with timers (restored on exit)."""
    drv = driver_mod.SweepDriver
    saved = (drv._claim, drv._start, drv._end, driver_mod.prepare)
    saved_refill, saved_close = drv.refill_ahead, drv.close
    saved_lock = Storage.claim_lock

    def claim(self: Any) -> Any:
        t._waited.seconds = 0.0
        t0 = time.perf_counter()
        s = saved[0](self)
        dt = time.perf_counter() - t0
        waited = t._waited.seconds
        if s is None:
            t.empty_claims += 1
        else:
            first = id(self) not in t._claimed  # the start-up wave: each worker's first claim
            t._claimed.add(id(self))
            t.claims.append((time.monotonic() - dt, dt, waited, first))
            t.add(s.trial_number, dt)
            t.claim_wait[s.trial_number] = waited
        return s

    @contextlib.contextmanager
    def claim_lock(self: Any, sweep: str) -> Iterator[None]:
        t0 = time.perf_counter()
        with saved_lock(self, sweep):
            t._waited.seconds = getattr(t._waited, "seconds", 0.0) + time.perf_counter() - t0
            yield

    def start(self: Any, p: Any, lease: Any, pool: Any) -> Any:
        t0 = time.perf_counter()
        r = saved[1](self, p, lease, pool)
        t.add(p.number, time.perf_counter() - t0)
        return r

    def refill(self: Any, number: int | None = None) -> int:  # suggestions made ahead
        t0 = time.perf_counter()
        made = saved_refill(self, number)
        dt = time.perf_counter() - t0
        if number is not None:  # after a launch: the trial's; between launches: nobody's
            t.add(number, dt)
        if number is not None or made:
            t.refills.append(dt)
        return made

    def close(self: Any, *args: Any) -> Any:  # the sweep's end, by each worker
        t0 = time.monotonic()
        try:
            return saved_close(self, *args)
        finally:
            t.closes.append((t0, time.monotonic() - t0))

    def end(self: Any, r: Any, *args: Any) -> None:
        t0 = time.perf_counter()
        saved[2](self, r, *args)
        t.add(r.number, time.perf_counter() - t0)

    def prepare(session: Any, suggestion: Any) -> Any:
        t0 = time.perf_counter()
        p = saved[3](session, suggestion)
        t.add(suggestion.trial_number, time.perf_counter() - t0)
        return p

    suggests: dict[type, Callable[..., Any]] = {}
    for cls in _scheduler_classes():
        suggests[cls] = cls.suggest
        cls.suggest = _timed_suggest(cls.suggest, t)  # type: ignore[method-assign]
    drv._claim, drv._start, drv._end = claim, start, end  # type: ignore[method-assign]
    drv.refill_ahead, drv.close = refill, close  # type: ignore[method-assign]
    driver_mod.prepare = prepare  # type: ignore[assignment]
    Storage.claim_lock = claim_lock  # type: ignore[assignment,method-assign]
    try:
        yield
    finally:
        drv._claim, drv._start, drv._end, driver_mod.prepare = saved  # type: ignore[method-assign]
        drv.refill_ahead, drv.close = saved_refill, saved_close  # type: ignore[method-assign]
        Storage.claim_lock = saved_lock  # type: ignore[method-assign]
        for cls, fn in suggests.items():
            cls.suggest = fn  # type: ignore[method-assign]


PAUSE_S = 0.005  # garbage collections kept: this long or longer


@contextlib.contextmanager
def gc_pauses(into: list[tuple[float, float, int]]) -> Iterator[None]:
    """Record this process's garbage collections of :data:`PAUSE_S` or longer into ``into``
    as (start on ``time.monotonic()``, seconds, generation): a collection holds the
    interpreter's lock, so every worker loop of the process waits for it."""
    began: list[float] = [0.0]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.monotonic()
            return
        seconds = time.monotonic() - began[0]
        if seconds >= PAUSE_S:
            into.append((began[0], seconds, info["generation"]))

    gc.callbacks.append(callback)
    try:
        yield
    finally:
        gc.callbacks.remove(callback)


def slow_claims(
    parts: list[tuple[list[tuple[float, float]], list[tuple[float, float, int]]]],
    over: float,
    since: float,
) -> dict[str, Any]:
    """The claims that took longer than ``over`` seconds, each with the garbage collections
    of its own process during it: ``parts``, per process, its claims (start, seconds) and
    its collections (:func:`gc_pauses`); ``since``: the case's start (``time.monotonic()``).
    A slow claim that a collection overlapped waited for it; one that none did waited for
    something else (the machine's CPU, its interpreter's other threads, the database)."""
    slow: list[dict[str, float | int]] = []
    for process, (claims, pauses) in enumerate(parts):
        for start, seconds in claims:
            if seconds <= over:
                continue
            end = start + seconds
            in_gc = sum(max(0.0, min(end, a + d) - max(start, a)) for a, d, _ in pauses)
            slow.append({"at_s": round(start - since, 2), "ms": round(1000 * seconds, 1),
                         "gc_ms": round(1000 * in_gc, 1), "process": process})  # fmt: skip
    pauses = [d for _, gcs in parts for _, d, _ in gcs]
    slow.sort(key=lambda c: -c["ms"])
    return {
        "claims_slow": len(slow),
        "claims_slow_in_gc": sum(1 for c in slow if c["gc_ms"] > 0),
        "gc_pauses": len(pauses),
        "gc_pause_max_ms": round(1000 * max(pauses, default=0.0), 1),
        "gc_pause_total_s": round(sum(pauses), 2),
        "slowest_claims": slow[:20],
    }


def timeline(
    parts: list[dict[str, Any]],
    samples: list[dict[str, float]],
    since: float,
    every: float,
    over: float,
) -> list[dict[str, float]]:
    """The case in slices of ``every`` seconds from ``since``: claims and claims over
    ``over`` seconds, the processes' garbage collections (seconds, by their start), sweep
    closes and their seconds, the machine's busy share and its most runnable threads, so a
    burst of slow claims can be read against what else the fleet did then."""
    rows: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))

    def at(t: float) -> dict[str, float]:
        return rows[int((t - since) // every)]

    for p in parts:
        for start, seconds, *_ in p["claims"]:
            at(start)["claims"] += 1
            at(start)["slow"] += seconds > over
        for start, seconds, _ in p["gc"]:
            at(start)["gc_s"] += seconds
        for start, seconds in p["closes"]:
            at(start)["closes"] += 1
            at(start)["close_s"] += seconds
    for a, b in itertools.pairwise(samples):
        if "cpu_busy" in a and "cpu_busy" in b:
            row = at(b["at"])
            share = (b["cpu_busy"] - a["cpu_busy"]) / max(b["cpu_total"] - a["cpu_total"], 1e-9)
            row["busy"] = max(row["busy"], share)
            row["runnable"] = max(row["runnable"], b.get("runnable", 0.0))
    return [{"at_s": k * every, **{n: round(v, 3) for n, v in rows[k].items()}}
            for k in sorted(rows)]  # fmt: skip


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank; NaN when empty)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def claim_split(claims: list[tuple[float, float, bool]]) -> dict[str, float | int]:
    """Claim p50/p99 (ms) of the start-up wave (each worker's first claim: every worker asks
    at once, so they queue on the sweep's claim lock) and of the steady state (every later
    claim, as trials end); in the steady state, the p99 of the claim-lock wait and of the
    claim less that wait (the critical section and the work around it), to tell a queue from
    a slow section. ``claims``: (seconds, seconds waited for the lock, first) per claim."""
    first = [d for d, _, f in claims if f]
    steady = [(d, w) for d, w, f in claims if not f]
    ms = lambda v: round(1000 * v, 2)  # noqa: E731 - local shorthand
    return {
        "claim_first_p50_ms": ms(pct(first, 0.5)),
        "claim_first_p99_ms": ms(pct(first, 0.99)),
        "claim_steady_p50_ms": ms(pct([d for d, _ in steady], 0.5)),
        "claim_steady_p99_ms": ms(pct([d for d, _ in steady], 0.99)),
        "claims_steady": len(steady),
        "claim_steady_wait_p99_ms": ms(pct([w for _, w in steady], 0.99)),
        "claim_steady_inside_p99_ms": ms(pct([d - w for d, w in steady], 0.99)),
    }


def claimed_twice(leases: list[Any]) -> int:
    """Trials held by two launches at once (their lease rows overlap): the platform's own
    record, whichever process claimed them."""
    by_trial: dict[int, list[Any]] = defaultdict(list)
    for lease in leases:
        by_trial[lease.trial].append(lease)
    twice = 0
    for held in by_trial.values():
        held.sort(key=lambda x: x.started_at)
        ends = [x.ended_at if x.ended_at is not None else float("inf") for x in held]
        twice += any(held[i + 1].started_at < ends[i] for i in range(len(held) - 1))
    return twice


def launched_again(leases: list[Any]) -> int:
    """Launches of trials launched before (a requeue: its worker taken for lost, its
    heartbeat late, its process crashed)."""
    by_trial = Counter(lease.trial for lease in leases)
    return sum(n - 1 for n in by_trial.values())


def _scheduler_classes() -> list[type[Scheduler]]:
    from hyperfleet.platform.schedulers.optuna.scheduler import OptunaScheduler
    from hyperfleet.platform.schedulers.pbt.population_scheduler import PopulationScheduler
    from hyperfleet.platform.schedulers.pbt.scheduler import PBTScheduler

    found = [OptunaScheduler, PopulationScheduler, PBTScheduler]
    return [cls for cls in found if "suggest" in cls.__dict__]


def _timed_suggest(fn: Callable[..., Any], t: Timers) -> Callable[..., Any]:
    def suggest(self: Any) -> Any:
        t0, c0 = time.perf_counter(), time.thread_time()
        s = fn(self)
        if s is not None:
            cpu = time.thread_time() - c0
            t.suggest.append((s.trial_number, time.perf_counter() - t0, cpu))
        return s

    return suggest


class TimedRecorder(Recorder):
    """Rank 0's recorder of a simulated trial, its building and every call timed."""

    def __init__(self, spec: Any, clock: Any, t: Timers) -> None:
        t0 = time.perf_counter()
        self.inner = RankZeroRecorder(spec, clock=clock)
        self.number, self.t = spec.number, t
        t.add(self.number, time.perf_counter() - t0)

    def _timed(self, fn: Callable[..., Any], *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.t.add(self.number, time.perf_counter() - t0)

    def __call__(self, step: int, metrics: Mapping[str, float]) -> Any:
        return self._timed(self.inner, step, metrics)

    def finish(self, outcome: str) -> None:
        self._timed(self.inner.finish, outcome)

    def rewind(self, step: int, params: Mapping[str, Any], donor: int) -> None:
        self._timed(self.inner.rewind, step, params, donor)

    def pinned_steps(self) -> set[int] | None:
        return self.inner.pinned_steps()

    def note(self, message: str, restart: bool = True) -> None:
        self.inner.note(message, restart)

    def check(self) -> None:
        self.inner.check()


def machine_ticks() -> tuple[float, float, float]:
    """This machine's CPU time so far, busy and in all (``/proc/stat``'s first line, in
    ticks; busy: all but idle and I/O wait), and its threads that can run now (its
    ``procs_running``: more than its cores, and they queue); NaN where there is no
    ``/proc/stat``."""
    try:
        with open("/proc/stat") as f:
            lines = f.read().splitlines()
    except OSError:
        return float("nan"), float("nan"), float("nan")
    ticks = [float(x) for x in lines[0].split()[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0.0)
    running = next((float(x.split()[1]) for x in lines if x.startswith("procs_running ")), 0.0)
    return sum(ticks) - idle, sum(ticks), running


def machine_busy(samples: list[dict[str, float]], window_s: float = 5.0) -> tuple[float, float]:
    """The share of this machine's CPU that was busy over the samples (every process: the
    worker loops, PostgreSQL, the rest), on the whole and in the busiest ``window_s``: where
    the machine that runs every simulated worker is saturated, its CPU queue is in what the
    harness measures, and a claim's time is no longer the platform's alone."""
    ticks = [(s["at"], s["cpu_busy"], s["cpu_total"]) for s in samples if "cpu_busy" in s]
    if len(ticks) < 2:
        return float("nan"), float("nan")

    def share(a: tuple[float, float, float], b: tuple[float, float, float]) -> float:
        return (b[1] - a[1]) / max(b[2] - a[2], 1e-9)

    whole, peak, j = share(ticks[0], ticks[-1]), None, 0
    for i in range(1, len(ticks)):
        while ticks[i][0] - ticks[j][0] > window_s:
            j += 1
        if ticks[i][0] - ticks[j][0] >= window_s / 2:  # a window worth the name
            peak = max(peak or 0.0, share(ticks[j], ticks[i]))
    return round(whole, 3), round(whole if peak is None else peak, 3)  # a short case: whole


class Sampler(threading.Thread):
    """PostgreSQL's own counters for one database, every ``every`` seconds. Besides the lock
    waits: the sessions running a statement (``in_server``; the sampler's own is on another
    database) and those inside a transaction waiting for their client's next statement
    (``on_client``): a transaction that waits on its client's CPU or interpreter lock, not
    on the database."""

    def __init__(self, url: str, every: float) -> None:
        super().__init__(name="pg-sampler", daemon=True)
        self.db = url.rsplit("/", 1)[1]
        self.engine = sa.create_engine(url.rsplit("/", 1)[0] + "/postgres", pool_size=1)
        self.every = every
        self.samples: list[dict[str, float]] = []
        self._halt = threading.Event()

    def sample(self) -> dict[str, float]:
        busy, total, runnable = machine_ticks()
        q = """SELECT (SELECT xact_commit + xact_rollback FROM pg_stat_database
                       WHERE datname = :db) AS xacts,
                      (SELECT count(*) FROM pg_stat_activity WHERE datname = :db) AS conns,
                      (SELECT count(*) FROM pg_stat_activity WHERE datname = :db
                       AND wait_event_type = 'Lock') AS lock_waits,
                      (SELECT count(*) FROM pg_locks l JOIN pg_database d ON l.database = d.oid
                       WHERE d.datname = :db AND NOT l.granted) AS ungranted,
                      (SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                       WHERE a.datname = :db AND NOT l.granted
                       AND l.locktype = 'advisory') AS advisory_waits,
                      (SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                       WHERE a.datname = :db AND NOT l.granted
                       AND l.locktype IN ('transactionid', 'tuple')) AS row_waits,
                      (SELECT count(*) FROM pg_stat_activity WHERE datname = :db
                       AND state = 'active' AND wait_event_type IS DISTINCT FROM 'Lock')
                       AS in_server,
                      (SELECT count(*) FROM pg_stat_activity WHERE datname = :db
                       AND state = 'idle in transaction') AS on_client"""
        with self.engine.connect() as conn:
            row = conn.execute(sa.text(q), {"db": self.db}).one()
        return {"at": time.monotonic(), "cpu_busy": busy, "cpu_total": total,
                "runnable": runnable,
                **{k: float(v or 0) for k, v in row._mapping.items()}}  # fmt: skip

    def run(self) -> None:
        while not self._halt.wait(self.every):
            self.samples.append(self.sample())

    def stop(self) -> None:
        self._halt.set()
        self.join()
        self.samples.append(self.sample())
        self.engine.dispose()
