"""A PBT / PB2 population as stored: its records and the SQL store that keeps them.

The population schedulers (:mod:`hyperfleet.platform.schedulers.pbt`) hold no state in memory:
every member's hyperparameters, latest score, progress and checkpoint pointer live in a store
(the protocol they talk to is ``schedulers.pbt.population.PopulationStore``), so a scheduler
object can be rebuilt in any process and several of them may report and decide at once.
:class:`SqlPopulationStore` is that store on the platform's database; readers (the dashboard,
MLflow lineage, ``sweep replay``) use its plain reads and :func:`replay_schedule`.

Concurrency. A read-modify-write of the population goes through
:meth:`SqlPopulationStore.transaction`, which serialises the transactions *of one sweep* by
updating the sweep's row in ``hf_pbt_populations`` first (unless ``exclusive=False``: an
asynchronous PBT decision without time-sharing changes its own member alone and reads its
donor, so it holds those two rows and no more, below). On PostgreSQL that UPDATE takes a row
lock held to commit; on SQLite the UPDATE is the transaction's first statement, so it takes the
database's write lock before anything is read (with the connection's busy timeout as the wait)
and WAL lets readers go on meanwhile. What changes one member from its own row alone (a report,
a decision that is not a ready check) goes through :meth:`SqlPopulationStore.member_transaction`
instead: on PostgreSQL it locks that member's row only (``FOR UPDATE``), so the fleet's reports
neither queue behind each other nor behind a decision. A population transaction therefore
reads the members without locking them (a report may commit meanwhile: as if it came after
the decision) and locks, ``FOR UPDATE``, the rows whose exact state it acts on: a donor before
it is copied (``fresh``: the scheduler picks again if the donor moved on) and every row it
writes (``put``: :class:`PopulationConflictError` if a report changed it since the read; the
scheduler decides again). A member's transaction that runs after the decision sees the rows
the decision wrote (its lock waits for the decision's commit). On SQLite both take the
database's write lock (there is no finer lock), so nothing changes between read and write.

Lineage. Every exploit and explore is a :class:`LineageEvent`, unique by
``(sweep, member, generation, kind)`` where ``generation`` counts the member's exploits. The
event is written in the same transaction that changes the member, and a retried decision finds
it there, so a crash and retry neither loses nor duplicates one.

Tables (:mod:`hyperfleet.platform.storage.schema`, created with the rest of the platform's
schema): ``hf_pbt_populations`` (one lock row per sweep), ``hf_pbt_members`` (one row per
member) and ``hf_lineage``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from hyperfleet.errors import StorageError
from hyperfleet.platform.storage.schema import lineage_table, members_table, populations_table
from hyperfleet.spec.states import MemberState

__all__ = [
    "LineageEvent",
    "Member",
    "MemberState",
    "PopulationConflictError",
    "PopulationReader",
    "SqlPopulationStore",
    "lineage_key",
    "replay_schedule",
]


@dataclass(frozen=True)
class Member:
    """One member of a population, as stored. Change it with ``dataclasses.replace``."""

    number: int
    params: dict[str, Any]
    initial: dict[str, Any]
    state: MemberState = MemberState.RUNNING
    step: int = 0  # step of the weights the member holds (last report, or the donor's step)
    score: float | None = None  # objective at ``step`` (the donor's after an exploit)
    steps_trained: int = 0  # steps this member computed itself (time-sharing fairness)
    last_check: int = 0  # step of the last ready check (next one at + perturbation_interval)
    ckpt_member: int | None = None  # whose checkpoint holds this member's weights ...
    ckpt_step: int | None = None  # ... and at which step (None: start fresh)
    reports: int = 0  # reports recorded so far (tells a retried decide from a new one)
    decision: dict[str, Any] | None = None  # the last decision, returned again on retry
    generation: int = 0  # exploits so far (part of the lineage key)
    barrier: bool = False  # synchronous PBT: waiting for the rest of the population
    failures: int = 0
    check_score: float | None = None  # score at the last ready check (PB2's improvement)
    history: list[list[Any]] = field(default_factory=list)  # PB2 data: [step, params, delta]
    updated: float = 0.0

    def repeats(self, step: int, score: float | None) -> bool:
        """Whether a report at ``step`` with ``score`` is the one the last decision answered,
        repeated after that decision rewound the member (an exploit from behind): the same
        step, report count and score. A deterministic workload's first report after the
        exploit can match too: a caller that knows a report is new says so (``first_try``)."""
        d = self.decision
        return (
            d is not None
            and d["step"] == step
            and d["reports"] == self.reports
            and d.get("score") == (None if score is None else float(score))
        )


@dataclass(frozen=True)
class LineageEvent:
    """One exploit (member copies donor) or explore (member perturbs the copied params)."""

    sweep: str
    member: int
    generation: int
    kind: str  # "exploit" | "explore"
    step: int  # the member's step when it decided
    donor: int
    donor_step: int  # the step of the donor's checkpoint the member continues from
    old_params: dict[str, Any]
    new_params: dict[str, Any]
    member_score: float | None
    donor_score: float | None
    time: float = 0.0
    seq: int = 0  # order of insertion (set by the store)


def lineage_key(e: LineageEvent) -> tuple[str, int, int, str]:
    """The key that makes a lineage event unique."""
    return (e.sweep, e.member, e.generation, e.kind)


class PopulationReader(Protocol):
    """What :func:`replay_schedule` reads: a population's members and its lineage."""

    def members(self, sweep: str) -> dict[int, Member]: ...

    def lineage(self, sweep: str, member: int | None = None) -> list[LineageEvent]: ...


# --------------------------------------------------------------------------- SQL

_MEMBER_FIELDS = [c.name for c in members_table.columns if c.name not in ("sweep", "member")]


def _member_from_row(row: Any) -> Member:
    values = {k: row[k] for k in _MEMBER_FIELDS}
    values["state"] = MemberState(values["state"])
    values["barrier"] = bool(values["barrier"])
    return Member(number=row["member"], **values)


def _member_to_row(sweep: str, m: Member) -> dict[str, Any]:
    row = {k: getattr(m, k) for k in _MEMBER_FIELDS}
    row["state"] = m.state.value
    return {"sweep": sweep, "member": m.number, **row}


class PopulationConflictError(StorageError):
    """A member row a population transaction writes changed after the transaction read it
    (only a member's own transaction writes beside it): the decision is made again."""


class _SqlTxn:
    def __init__(self, conn: Connection, sweep: str) -> None:
        self._conn = conn
        self._sweep = sweep
        self._known: set[int] = set()
        self._locked: set[int] = set()  # rows read FOR UPDATE: no one else changes them now
        self._read: dict[int, Member] | None = None  # read once (the sweep is locked), kept

    def members(self) -> dict[int, Member]:
        if self._read is None:
            t = members_table
            query = sa.select(t).where(t.c.sweep == self._sweep).order_by(t.c.member)
            rows = self._conn.execute(query).mappings().all()
            self._read = {r["member"]: _member_from_row(r) for r in rows}
            self._known |= set(self._read)
        return dict(self._read)

    def fresh(self, number: int) -> Member | None:
        if number in self._locked and self._read is not None:
            return self._read.get(number)
        t = members_table
        query = sa.select(t).where(t.c.sweep == self._sweep, t.c.member == number)
        row = self._conn.execute(query.with_for_update()).mappings().first()
        self._locked.add(number)
        if row is None:
            return None
        m = _member_from_row(row)
        self._known.add(number)
        if self._read is not None:
            self._read[number] = m
        return m

    def put(self, member: Member) -> None:
        read = None if self._read is None else self._read.get(member.number)
        unlocked = read is not None and member.number not in self._locked
        if unlocked and self.fresh(member.number) != read:  # a report came between
            raise PopulationConflictError(f"member {member.number} changed under a decision")
        if self._read is not None:
            self._read[member.number] = member
        t = members_table
        row = _member_to_row(self._sweep, member)
        if member.number not in self._known:
            exists = self._conn.execute(
                sa.select(t.c.member).where(t.c.sweep == self._sweep, t.c.member == member.number)
            ).first()
            if exists is None:
                self._conn.execute(t.insert().values(**row))
                self._known.add(member.number)
                return
        self._conn.execute(
            t.update().where(t.c.sweep == self._sweep, t.c.member == member.number).values(**row)
        )

    def add_lineage(self, event: LineageEvent) -> bool:
        t = lineage_table
        exists = self._conn.execute(
            sa.select(t.c.id).where(
                t.c.sweep == event.sweep,
                t.c.member == event.member,
                t.c.generation == event.generation,
                t.c.kind == event.kind,
            )
        ).first()
        if exists is not None:
            return False
        values = asdict(event)
        values.pop("seq")
        self._conn.execute(t.insert().values(**values))
        return True


class _SqlMemberTxn:
    """One member's row, locked (PostgreSQL: ``FOR UPDATE``), and plain reads of the rest."""

    def __init__(self, conn: Connection, sweep: str, number: int) -> None:
        self._conn = conn
        self._sweep = sweep
        self._number = number

    def member(self) -> Member | None:
        t = members_table
        query = (
            sa.select(t).where(t.c.sweep == self._sweep, t.c.member == self._number)
        ).with_for_update()
        row = self._conn.execute(query).mappings().first()
        return None if row is None else _member_from_row(row)

    def put(self, member: Member) -> None:
        if member.number != self._number:
            raise ValueError(f"member {member.number} written in member {self._number}'s txn")
        t = members_table
        row = _member_to_row(self._sweep, member)
        self._conn.execute(
            t.update().where(t.c.sweep == self._sweep, t.c.member == member.number).values(**row)
        )

    def members(self) -> dict[int, Member]:
        """Every member, read without locks: committed rows, and this member as written."""
        t = members_table
        query = sa.select(t).where(t.c.sweep == self._sweep).order_by(t.c.member)
        return {r["member"]: _member_from_row(r) for r in self._conn.execute(query).mappings()}


class SqlPopulationStore:
    """Population state in SQL tables beside the platform's own (SQLite or PostgreSQL).

    ``engine`` is the platform's SQLAlchemy engine (``Storage.engine``: WAL and a busy
    timeout on SQLite, so concurrent writers wait instead of failing), whose schema the
    storage created.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._known_sweeps: set[str] = set()

    def members(self, sweep: str) -> dict[int, Member]:
        """A plain read: every decision commits whole, so it sees a consistent population."""
        t = members_table
        query = sa.select(t).where(t.c.sweep == sweep).order_by(t.c.member)
        with self.engine.connect() as conn:
            return {r["member"]: _member_from_row(r) for r in conn.execute(query).mappings()}

    def _ensure_sweep(self, sweep: str) -> None:
        if sweep in self._known_sweeps:
            return
        try:  # an INSERT first: on SQLite it waits for the write lock instead of failing
            with self.engine.begin() as conn:
                conn.execute(populations_table.insert().values(sweep=sweep, version=0))
        except sa.exc.IntegrityError:
            pass  # it exists (maybe another process created it just now)
        self._known_sweeps.add(sweep)

    @contextmanager
    def transaction(self, sweep: str, exclusive: bool = True) -> Iterator[_SqlTxn]:
        """A population transaction; ``exclusive=False`` (PostgreSQL): without the sweep's
        lock, so several run at once, each holding only the rows it takes ``fresh`` or
        writes (a deadlock between two of them is a ``PopulationConflictError``)."""
        self._ensure_sweep(sweep)
        t = populations_table
        bump = t.update().where(t.c.sweep == sweep).values(version=t.c.version + 1)
        try:
            with self.engine.begin() as conn:
                if exclusive or conn.dialect.name != "postgresql":
                    conn.execute(bump)  # the per-sweep lock, held to commit
                yield _SqlTxn(conn, sweep)
        except sa.exc.OperationalError as exc:
            if "deadlock detected" in str(exc.orig):
                raise PopulationConflictError(f"population store: {exc.orig}") from exc
            raise StorageError(f"population store: {exc.orig}") from exc

    @contextmanager
    def member_transaction(self, sweep: str, number: int) -> Iterator[_SqlMemberTxn]:
        """A transaction that changes member ``number`` alone (see the module docstring)."""
        self._ensure_sweep(sweep)
        t = populations_table
        try:
            with self.engine.begin() as conn:
                if conn.dialect.name != "postgresql":  # SQLite: its write lock, taken first
                    conn.execute(t.update().where(t.c.sweep == sweep).values(version=t.c.version))
                yield _SqlMemberTxn(conn, sweep, number)
        except sa.exc.OperationalError as exc:
            raise StorageError(f"population store: {exc.orig}") from exc

    def lineage(self, sweep: str, member: int | None = None) -> list[LineageEvent]:
        t = lineage_table
        query = sa.select(t).where(t.c.sweep == sweep).order_by(t.c.id)
        if member is not None:
            query = query.where(t.c.member == member)
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        names = set(LineageEvent.__dataclass_fields__) - {"seq"}
        return [LineageEvent(**{k: r[k] for k in names}, seq=r["id"]) for r in rows]


def replay_schedule(
    store: PopulationReader, sweep: str, member: int
) -> list[tuple[int, dict[str, Any]]]:
    """The piecewise hyperparameter schedule that produced ``member``'s current weights.

    Returns ``[(start_step, params), ...]``, steps ascending: train with ``params`` from
    ``start_step`` until the next entry's step. It follows the lineage back through donors: the
    member's last exploit replaced its weights by the donor's at ``donor_step``, so what came
    before is the donor's schedule up to that step (as it stood when the exploit happened),
    and so on to some member's initial parameters at step 0. Re-running it as one plain run
    (``hyperfleet sweep replay``) retrains the member's weights without a population.
    """
    members = store.members(sweep)
    if member not in members:
        raise KeyError(f"sweep {sweep!r} has no member {member}")
    explores = [e for e in store.lineage(sweep) if e.kind == "explore"]
    pieces: list[tuple[int, dict[str, Any]]] = []
    current, before = member, float("inf")
    while True:
        earlier = [e for e in explores if e.member == current and e.seq < before]
        if not earlier:
            pieces.append((0, dict(members[current].initial)))
            break
        last = max(earlier, key=lambda e: e.seq)
        pieces.append((last.donor_step, dict(last.new_params)))
        current, before = last.donor, last.seq
    schedule: list[tuple[int, dict[str, Any]]] = []
    for step, params in reversed(pieces):
        if schedule and schedule[-1][0] >= step:
            schedule.pop()  # a later segment starting at the same step wins
        if not schedule or schedule[-1][1] != params:
            schedule.append((step, params))
    return schedule
