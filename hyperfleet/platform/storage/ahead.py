"""Suggestions made ahead: a fleet's claims take a trial without queueing for the scheduler.

A claim asks the sweep's scheduler for a trial and records it RUNNING under the sweep's claim
lock (:mod:`.locks`), so that no trial is handed out twice and the budget holds. With hundreds
of workers the lock is a queue: every claim waits for every suggestion before it. For
schedulers whose suggestions do not depend on who takes them (Optuna's:
``Capabilities.ahead``) the scheduler's trials can be made before they are asked for, under
the same lock, and kept in ``hf_ahead`` (the trial is RUNNING in the scheduler's history,
which counts it in the budget and shows it to the sampler as pending). A claim then takes the
lowest-numbered one in one short transaction (:meth:`AheadStore.take`): the row moves
from ``hf_ahead`` to a RUNNING ``hf_trials`` record under this worker, atomically, so a trial
is always either ahead or recorded (the look for phantoms counts both) and never both.

``budget.max_concurrent`` is counted in that transaction. On PostgreSQL it runs without the
claim lock, so the count and the record are serialised by a transaction-level advisory lock
of their own (released at commit, even if the client dies); every claim of such a scheduler
records its trial under it (:meth:`AheadStore.record_claim`), so takes and fresh suggestions
cannot both fill the last slot. There a take is **one statement**, a call of the database
function :data:`TAKE_FUNCTION` (made on first use) in its own transaction: the lock is held
for the server's few milliseconds only, never across a round trip to the client. (Taken over
five round trips, it was held while the client waited for its CPU: 256 simulated workers'
first takes, all at once on 2 cores, queued on it for up to 11 s; a worker far from its
database would hold it for five of its round trips.) The threads of one process queue on a
lock of the process first (as for the claim lock, :mod:`.locks`): without it, a process of
many worker loops had every pooled connection waiting for the advisory lock, and its
heartbeats timed out waiting for a connection (1,000 simulated workers: workers taken for
lost). On SQLite (one host) the take runs
under the claim lock, whose file lock already serialises them.

:class:`AheadStore` is the part ``storage.ahead`` of :class:`~.store.Storage` (:mod:`.part`);
it records a claim's trial row through :mod:`.trial_rows`.
"""

from __future__ import annotations

import logging
import os
import threading
import zlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Unpack

import sqlalchemy as sa

from hyperfleet.errors import first_line
from hyperfleet.platform.storage.locks import local_lock
from hyperfleet.platform.storage.part import Part
from hyperfleet.platform.storage.records import TrialFields, json_safe
from hyperfleet.platform.storage.retry import retried
from hyperfleet.platform.storage.schema import TrialRow, ahead_table
from hyperfleet.platform.storage.trial_rows import set_fields, trial_row
from hyperfleet.spec.states import TrialState

logger = logging.getLogger(__name__)

Made = tuple[int, Mapping[str, Any]]
"""A suggestion as it is kept ahead: the trial's number and its params."""


def _take_key(sweep: str) -> int:
    """A 63-bit advisory lock key for ``sweep``'s takes (another key than its claim lock's)."""
    return (zlib.crc32(b"hyperfleet-take") << 31) ^ zlib.crc32(sweep.encode())


TAKE_FUNCTION = "hf_take_v1"
"""The PostgreSQL function of a take (:data:`_TAKE_SQL`); a changed body gets a new name."""

_TAKE_ARGS = "text, integer, bigint, text, integer, text, double precision"

# Each statement of a VOLATILE plpgsql function takes a fresh snapshot (READ COMMITTED): the
# count after the advisory lock sees every take committed before it was granted.
_TAKE_SQL = f"""
CREATE OR REPLACE FUNCTION {TAKE_FUNCTION}(
    p_sweep text, p_limit integer, p_key bigint, p_host text, p_pid integer,
    p_worker text, p_now double precision)
RETURNS TABLE (taken integer, taken_params json, left_ahead bigint)
LANGUAGE plpgsql VOLATILE AS $take$
DECLARE
    n integer;
    p json;
BEGIN
    SELECT a.number, a.params INTO n, p FROM hf_ahead a
     WHERE a.sweep = p_sweep ORDER BY a.number LIMIT 1 FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(p_key);
    IF (SELECT count(*) FROM hf_trials t
         WHERE t.sweep = p_sweep AND t.state = 'RUNNING') >= p_limit THEN
        RETURN;
    END IF;
    DELETE FROM hf_ahead a WHERE a.sweep = p_sweep AND a.number = n;
    INSERT INTO hf_trials AS t (sweep, number, state, params, metrics, attempts, retries,
                                host, pid, worker, heartbeat_at, started_at)
    VALUES (p_sweep, n, 'RUNNING', '{{}}', '{{}}', 0, 0, p_host, p_pid, p_worker, p_now, p_now)
    ON CONFLICT (sweep, number) DO UPDATE SET
        state = 'RUNNING', host = p_host, pid = p_pid, worker = p_worker,
        heartbeat_at = p_now, started_at = p_now, ended_at = NULL, outcome = NULL;
    RETURN QUERY SELECT n, p, (SELECT count(*) FROM hf_ahead a WHERE a.sweep = p_sweep);
END
$take$
"""

_TAKE_FIELDS = frozenset(
    {"state", "host", "pid", "worker", "heartbeat_at", "started_at", "ended_at", "outcome"}
)
"""What a claim's take records (``Claims._fields``): what the function sets."""

_MAKING_KEY = zlib.crc32(b"hyperfleet-take-function")  # the advisory lock of making it
_MADE: set[tuple[int, str]] = set()  # (pid, database URL) whose function is known made
_MADE_LOCK = threading.Lock()


_REFUSED: set[tuple[int, str]] = set()  # ... whose user may not make it


def ensure_take_function(engine: sa.engine.Engine, again: bool = False) -> bool:
    """Make :data:`TAKE_FUNCTION` in ``engine``'s PostgreSQL database unless it is there
    (once per process and database, or ``again``: it was found missing; processes racing to
    make it wait for each other on an advisory lock: concurrent ``CREATE OR REPLACE
    FUNCTION`` of one name can fail). False when the database's user may not make it (only
    the tables' rows granted): takes then run as separate statements, and a warning says so."""
    key = (os.getpid(), str(engine.url))
    with _MADE_LOCK:
        if again:
            _MADE.discard(key)
        if key in _MADE or key in _REFUSED:
            return key in _MADE
        look = sa.text(f"SELECT to_regprocedure('{TAKE_FUNCTION}({_TAKE_ARGS})') IS NOT NULL")
        try:
            with engine.begin() as conn:
                if not conn.execute(look).scalar():
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MAKING_KEY})
                    if not conn.execute(look).scalar():
                        conn.execute(sa.text(_TAKE_SQL))
        except sa.exc.ProgrammingError as exc:  # insufficient privilege
            logger.warning(
                "storage: cannot make the function %s (%s); claims take suggestions made "
                "ahead in several statements instead (grant CREATE on the schema to use it)",
                TAKE_FUNCTION, first_line(exc.orig),
            )  # fmt: skip
            _REFUSED.add(key)
            return False
        _MADE.add(key)
        return True


class AheadStore(Part):
    """``hf_ahead``: suggestions made ahead, kept, taken and counted (see the module docstring)."""

    @property
    def takes_without_lock(self) -> bool:
        """Claims may take a suggestion made ahead without the sweep's claim lock
        (PostgreSQL; on SQLite the claim lock serialises them)."""
        return self.engine.dialect.name == "postgresql"

    def _serialise(self, s: Any, sweep: str) -> None:
        if self.takes_without_lock:
            s.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _take_key(sweep)})

    @contextmanager
    def _queued(self, sweep: str) -> Iterator[None]:
        """This process's threads one at a time into a take or a claim's record (see the
        module docstring): at most one pooled connection waits for the advisory lock."""
        if not self.takes_without_lock:
            yield
            return
        with local_lock(self.engine, f"take:{sweep}"):
            yield

    @staticmethod
    def _running(s: Any, sweep: str) -> int:
        q = sa.select(sa.func.count()).where(
            TrialRow.sweep == sweep, TrialRow.state == TrialState.RUNNING
        )
        return int(s.scalar(q) or 0)

    def _record(self, s: Any, sweep: str, number: int, fields: TrialFields) -> None:
        set_fields(s, trial_row(s, sweep, number, lock=True), sweep, number, fields)

    def take(
        self, sweep: str, limit: int, **fields: Unpack[TrialFields]
    ) -> tuple[Made, int] | None:
        """The lowest-numbered suggestion made ahead, recorded with ``fields`` (RUNNING under
        this worker) unless ``limit`` trials already run; with how many are left ahead.
        None when none is ahead or the sweep is full. Not retried here: a retry after a
        commit whose answer was lost would take a second trial (the caller's claim retries
        as a whole). PostgreSQL: one statement (see the module docstring)."""
        if self.takes_without_lock and ensure_take_function(self.engine):
            try:
                return self._take_in_one_statement(sweep, limit, fields)
            except sa.exc.ProgrammingError as exc:  # dropped since (a database made anew)
                if "does not exist" not in str(exc.orig) or not ensure_take_function(
                    self.engine, again=True
                ):
                    raise
                return self._take_in_one_statement(sweep, limit, fields)
        t = ahead_table
        with self._queued(sweep), self.session() as s:
            # the row first, locked (a take never waits for another's row): a fleet's idle
            # workers that find none take no lock; then the count under the advisory lock
            row = s.execute(
                sa.select(t.c.number, t.c.params).where(t.c.sweep == sweep)
                .order_by(t.c.number).limit(1).with_for_update(skip_locked=True)
            ).first()  # fmt: skip
            if row is None:
                return None
            self._serialise(s, sweep)
            if self._running(s, sweep) >= limit:
                return None
            number, params = int(row[0]), dict(row[1])
            s.execute(sa.delete(t).where(t.c.sweep == sweep, t.c.number == number))
            self._record(s, sweep, number, fields)
            left = s.scalar(sa.select(sa.func.count()).where(t.c.sweep == sweep))
            return (number, params), int(left or 0)

    def _take_in_one_statement(
        self, sweep: str, limit: int, fields: TrialFields
    ) -> tuple[Made, int] | None:
        if set(fields) != _TAKE_FIELDS or fields.get("state") != TrialState.RUNNING:
            raise ValueError(f"a take records a claim's fields, not {sorted(fields)}")
        call = sa.text(
            f"SELECT taken, taken_params, left_ahead FROM {TAKE_FUNCTION}"
            "(:sweep, :limit, :key, :host, :pid, :worker, :now)"
        )
        args = {
            "sweep": sweep, "limit": limit, "key": _take_key(sweep), "host": fields["host"],
            "pid": fields["pid"], "worker": fields["worker"], "now": fields["heartbeat_at"],
        }  # fmt: skip
        with self._queued(sweep), self.engine.connect() as conn:
            # its own transaction: committed (the lock released) as the statement ends
            row = conn.execution_options(isolation_level="AUTOCOMMIT").execute(call, args).first()
        if row is None:
            return None
        return (int(row[0]), dict(row[1])), int(row[2])

    def record_claim(
        self, sweep: str, made: Sequence[Made], limit: int, **fields: Unpack[TrialFields]
    ) -> bool:
        """Under the claim lock, after the scheduler made ``made``: the first recorded with
        ``fields`` (RUNNING under this worker) unless ``limit`` trials already run (a take
        filled the last slot meanwhile), the rest (and then the first) kept ahead; whether
        the first was recorded. One transaction: every suggestion is recorded or ahead."""
        if not made:
            raise ValueError("record_claim needs a suggestion")
        with self._queued(sweep), self.session() as s:
            self._serialise(s, sweep)
            first = self._running(s, sweep) < limit
            if first:
                self._record(s, sweep, made[0][0], fields)
            self._insert(s, sweep, made[1:] if first else made)
            return first

    @retried
    def put(self, sweep: str, made: Sequence[Made]) -> None:
        """Keep ``made`` ahead (under the claim lock, right after the scheduler made them)."""
        with self.session() as s:
            self._insert(s, sweep, made)

    def _insert(self, s: Any, sweep: str, made: Sequence[Made]) -> None:
        if not made:
            return
        now = self.now()
        rows = [
            {"sweep": sweep, "number": n, "params": json_safe(dict(p)), "made_at": now}
            for n, p in made
        ]
        s.execute(sa.insert(ahead_table), rows)

    @retried
    def of(self, sweep: str) -> list[Made]:
        """The sweep's suggestions made ahead, by number."""
        t = ahead_table
        with self.session() as s:
            q = sa.select(t.c.number, t.c.params).where(t.c.sweep == sweep).order_by(t.c.number)
            return [(int(n), dict(p)) for n, p in s.execute(q)]

    @retried
    def count(self, sweep: str) -> int:
        """How many suggestions of the sweep are made ahead."""
        t = ahead_table
        with self.session() as s:
            q = sa.select(sa.func.count()).select_from(t).where(t.c.sweep == sweep)
            return int(s.scalar(q) or 0)

    @staticmethod
    def _recorded(sweep: str) -> sa.CompoundSelect:
        t = ahead_table
        return sa.union(
            sa.select(TrialRow.number).where(
                TrialRow.sweep == sweep, TrialRow.state == TrialState.RUNNING
            ),
            sa.select(t.c.number).where(t.c.sweep == sweep),
        )

    @retried
    def recorded(self, sweep: str) -> set[int]:
        """The sweep's trials that have a record: RUNNING under a worker, or made ahead (the
        look for phantoms). One statement, so one snapshot: a take moving a trial from one
        to the other between two reads would hide it from both."""
        with self.session() as s:
            return {int(n) for n in s.scalars(self._recorded(sweep))}

    @retried
    def recorded_count(self, sweep: str) -> int:
        """How many :meth:`recorded` holds, counted by the database."""
        q = sa.select(sa.func.count()).select_from(self._recorded(sweep).subquery())
        with self.session() as s:
            return int(s.scalar(q) or 0)
