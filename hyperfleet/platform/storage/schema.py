"""Every ``hf_*`` table of the platform, in one schema with a version.

Beside Optuna's RDB tables (the search history: trials, params, intermediate and final values)
the platform keeps what it must survive a crash with:

* ``hf_sweeps`` — one row per sweep: its validated configuration, status and MLflow ids;
* ``hf_trials`` — one row per trial: state, params, worker (host, pid), heartbeat, last report,
  outcome, error tail, MLflow run, log and directory, and the number of ranks its reports ran
  at (``sizes``: one ``[first step, ranks]`` pair per size, so an elastic trial's resizes);
* ``hf_pbt_populations``, ``hf_pbt_members``, ``hf_lineage`` — population-based training: a
  lock row per sweep, one row per member, and every exploit/explore event
  (:mod:`hyperfleet.platform.storage.population` reads and writes them);
* ``hf_workers`` — one row per worker process (host, pool, devices, advertised address,
  heartbeat, state); trials and leases name the worker that holds them. A worker started by a
  batch job carries the job's id, and its state and reason as the scheduler last said them
  (``job_id``, ``job_state``, ``job_reason``); an elastic pool's job whose worker has not
  registered yet has a row of its own (state ``pending``, ``host`` empty);
* ``hf_gangs`` — trials that span hosts: the rendezvous endpoint, the spec, the workers that
  joined as its nodes;
* ``hf_leases`` — one row per launch of a trial: which worker (host, pid) held which devices
  from when to when (a paused or resumed trial has several), and, for a device shared among
  small trials (``trial.resources.per_device``), which share; the dashboard's device timeline
  and the utilisation figures come from it;
* ``hf_ahead`` — suggestions made ahead of the claims that will take them (a fleet's claims
  take one in a short transaction instead of queueing for the scheduler, :mod:`.ahead`);
* ``hf_meta`` — ``schema_version``: a database written by a newer hyperfleet is refused with a
  clear message instead of being misread.

Only :func:`create_schema` runs DDL; it is called when a sweep is created or continued, and
it upgrades an older schema in place (:data:`UPGRADES`: columns added with defaults, so rows
written before read as they were meant). Trial processes and readers (``sweep status``, the
dashboard) never create or upgrade anything; a reader of an older schema reads it as it is.
"""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from hyperfleet.errors import StorageError

SCHEMA_VERSION = 5
"""1: hf_sweeps, hf_trials and the PBT tables without hf_meta; 2: hf_meta and hf_leases, then
hf_workers, hf_gangs and hf_trials.worker, retries, notes and hf_leases.worker (added while
version 2 was stamped: a version-2 database may lack them); 3: hf_leases.share and
hf_leases.per_device (devices shared among small trials), hf_workers.job_id, job_state and
job_reason (a batch job's worker; added on two branches, each stamping 3 without the other's);
4: hf_ahead (an older hyperfleet would take its suggestions for phantoms and requeue them while
newer workers take them: it must refuse the database); 5: hf_trials.sizes (an elastic trial's
number of ranks at each report)."""


class Base(DeclarativeBase):
    """Declarative base of every hyperfleet table (prefix ``hf_``)."""


metadata = Base.metadata


class SweepRow(Base):
    __tablename__ = "hf_sweeps"
    name: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    study_name: Mapped[str] = mapped_column(sa.String(256))
    config: Mapped[dict[str, Any]] = mapped_column(sa.JSON)
    created_at: Mapped[float] = mapped_column(sa.Float)
    updated_at: Mapped[float] = mapped_column(sa.Float)
    status: Mapped[str] = mapped_column(sa.String(32), default="created")
    mlflow_experiment_id: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    mlflow_parent_run_id: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)


class TrialRow(Base):
    __tablename__ = "hf_trials"
    __table_args__ = (
        sa.UniqueConstraint("sweep", "number"),
        # a sweep's trials in one state (the RUNNING ones a claim counts, the stale ones
        # recovery reads) and a worker's RUNNING trials (its heartbeat): read by index, so
        # their cost follows what is running, not the sweep's history
        sa.Index("ix_hf_trials_sweep_state", "sweep", "state"),
        sa.Index("ix_hf_trials_worker_state", "worker", "state"),
    )
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    sweep: Mapped[str] = mapped_column(sa.ForeignKey("hf_sweeps.name"), index=True)
    number: Mapped[int] = mapped_column(sa.Integer)
    state: Mapped[str] = mapped_column(sa.String(16))
    params: Mapped[dict[str, Any]] = mapped_column(sa.JSON, default=dict)
    host: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    pid: Mapped[int | None] = mapped_column(sa.Integer, nullable=True)
    heartbeat_at: Mapped[float | None] = mapped_column(sa.Float, nullable=True)
    started_at: Mapped[float | None] = mapped_column(sa.Float, nullable=True)
    ended_at: Mapped[float | None] = mapped_column(sa.Float, nullable=True)
    attempts: Mapped[int] = mapped_column(sa.Integer, default=0)
    last_step: Mapped[int | None] = mapped_column(sa.Integer, nullable=True)
    metrics: Mapped[dict[str, Any]] = mapped_column(sa.JSON, default=dict)
    outcome: Mapped[str | None] = mapped_column(sa.String(16), nullable=True)
    error: Mapped[str | None] = mapped_column(sa.Text, nullable=True)
    mlflow_run_id: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    log_path: Mapped[str | None] = mapped_column(sa.Text, nullable=True)
    trial_dir: Mapped[str | None] = mapped_column(sa.Text, nullable=True)
    worker: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)  # hf_workers.id
    retries: Mapped[int] = mapped_column(sa.Integer, default=0)  # relaunches after losses/crashes
    notes: Mapped[str | None] = mapped_column(sa.Text, nullable=True)  # warnings for the user
    # [[first step, ranks], ...]: the ranks its reports from each step on ran at (a resize adds
    # one); None: never recorded (a row of an older schema, or no report yet)
    sizes: Mapped[list[list[int]] | None] = mapped_column(sa.JSON, nullable=True)


class WorkerRow(Base):
    __tablename__ = "hf_workers"
    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    host: Mapped[str] = mapped_column(sa.String(255))
    pid: Mapped[int] = mapped_column(sa.Integer)
    pool: Mapped[str] = mapped_column(sa.String(128), default="default")
    devices: Mapped[list[str]] = mapped_column(sa.JSON)
    address: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)  # advertised
    sweeps: Mapped[list[str] | None] = mapped_column(sa.JSON, nullable=True)  # None: all
    started_at: Mapped[float] = mapped_column(sa.Float)
    heartbeat_at: Mapped[float] = mapped_column(sa.Float)
    state: Mapped[str] = mapped_column(sa.String(16))  # WorkerState
    job_id: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    job_state: Mapped[str | None] = mapped_column(sa.String(32), nullable=True)  # JobState
    job_reason: Mapped[str | None] = mapped_column(sa.Text, nullable=True)


class GangRow(Base):
    """A trial spanning ``nodes`` hosts: its rendezvous, and which workers joined as nodes."""

    __tablename__ = "hf_gangs"
    __table_args__ = (sa.UniqueConstraint("sweep", "trial", "attempt"),)
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    sweep: Mapped[str] = mapped_column(sa.String(128), index=True)
    trial: Mapped[int] = mapped_column(sa.Integer)
    attempt: Mapped[int] = mapped_column(sa.Integer)
    nodes: Mapped[int] = mapped_column(sa.Integer)
    per_node: Mapped[int] = mapped_column(sa.Integer)  # devices on each node
    endpoint: Mapped[str] = mapped_column(sa.String(255))  # host:port of the c10d rendezvous
    rdzv_id: Mapped[str] = mapped_column(sa.String(255))
    spec: Mapped[dict[str, Any]] = mapped_column(sa.JSON)  # the TrialSpec every node runs
    members: Mapped[list[str]] = mapped_column(sa.JSON)  # worker ids, node 0 (the leader) first
    deadline: Mapped[float] = mapped_column(sa.Float)  # unfilled by then: the leader gives up
    state: Mapped[str] = mapped_column(sa.String(16))  # open | full | over


class LeaseRow(Base):
    __tablename__ = "hf_leases"
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    sweep: Mapped[str] = mapped_column(sa.String(128), index=True)
    trial: Mapped[int] = mapped_column(sa.Integer)
    host: Mapped[str] = mapped_column(sa.String(255))
    pid: Mapped[int] = mapped_column(sa.Integer)
    devices: Mapped[list[str]] = mapped_column(sa.JSON)  # e.g. ["cuda:0", "cuda:1"]
    started_at: Mapped[float] = mapped_column(sa.Float)
    ended_at: Mapped[float | None] = mapped_column(sa.Float, nullable=True)
    state: Mapped[str | None] = mapped_column(sa.String(16), nullable=True)  # how it ended
    worker: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    share: Mapped[int] = mapped_column(sa.Integer, default=0, server_default="0")
    per_device: Mapped[int] = mapped_column(sa.Integer, default=1, server_default="1")


#: what each version added to an existing table, as ``(table, column, its SQL type and
#: default)``: ``create_schema`` adds them to a database of an older version (the defaults
#: make rows written before read as they were meant: a whole device, no retry). Every column
#: is looked for whatever version is stamped: columns were added under one stamp (version 2's
#: hf_trials.worker) and on parallel branches under the same one (version 3's), so the stamp
#: alone does not say what a database holds. ``tests/platform/schema_history`` holds the
#: tables of every past version.
UPGRADES: dict[int, list[tuple[str, str, str]]] = {
    2: [
        ("hf_trials", "worker", "VARCHAR(64)"),
        ("hf_trials", "retries", "INTEGER NOT NULL DEFAULT 0"),
        ("hf_trials", "notes", "TEXT"),
        ("hf_leases", "worker", "VARCHAR(64)"),
    ],
    3: [
        ("hf_leases", "share", "INTEGER NOT NULL DEFAULT 0"),
        ("hf_leases", "per_device", "INTEGER NOT NULL DEFAULT 1"),
        ("hf_workers", "job_id", "VARCHAR(64)"),
        ("hf_workers", "job_state", "VARCHAR(32)"),
        ("hf_workers", "job_reason", "TEXT"),
    ],
    5: [("hf_trials", "sizes", "JSON")],
}

_ADDED = [added for version in sorted(UPGRADES) for added in UPGRADES[version]]


#: indexes added to existing tables after their first release: ``create_schema`` makes them
#: in an older database (``IF NOT EXISTS``). No version: an index changes no reader's view.
ADDED_INDEXES: list[str] = ["ix_hf_trials_sweep_state", "ix_hf_trials_worker_state"]


meta_table = sa.Table(
    "hf_meta",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.String(255), nullable=False),
)

ahead_table = sa.Table(
    "hf_ahead",
    metadata,
    sa.Column("sweep", sa.String(128), primary_key=True),
    sa.Column("number", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("params", sa.JSON, nullable=False),
    sa.Column("made_at", sa.Float, nullable=False),
)
"""Suggestions made ahead (see :mod:`hyperfleet.platform.storage.ahead`): the scheduler's
trial, RUNNING in its own history, not yet claimed by a worker."""

# -- population-based training (see storage/population.py) --------------------------------------

populations_table = sa.Table(
    "hf_pbt_populations",
    metadata,
    sa.Column("sweep", sa.String(255), primary_key=True),
    sa.Column("version", sa.Integer, nullable=False, default=0),
)


def _columns(kind: Any, *names: str, nullable: bool = False) -> list[sa.Column[Any]]:
    """Columns of one type, ``NOT NULL`` unless ``nullable``."""
    return [sa.Column(name, kind, nullable=nullable) for name in names]


members_table = sa.Table(
    "hf_pbt_members",
    metadata,
    sa.Column("sweep", sa.String(255), primary_key=True),
    sa.Column("member", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("state", sa.String(16), nullable=False),
    *_columns(sa.JSON, "params", "initial", "history"),
    *_columns(sa.JSON, "decision", nullable=True),
    *_columns(sa.Integer, "step", "last_check", "steps_trained"),  # steps
    *_columns(sa.Integer, "generation", "reports", "failures"),  # counts
    *_columns(sa.Integer, "ckpt_member", "ckpt_step", nullable=True),  # the checkpoint to load
    *_columns(sa.Float, "score", "check_score", nullable=True),
    sa.Column("barrier", sa.Boolean, nullable=False),
    sa.Column("updated", sa.Float, nullable=False),
)


lineage_table = sa.Table(
    "hf_lineage",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("sweep", sa.String(255), nullable=False, index=True),
    sa.Column("time", sa.Float, nullable=False),
    sa.Column("step", sa.Integer, nullable=False),
    sa.Column("member", sa.Integer, nullable=False),
    sa.Column("generation", sa.Integer, nullable=False),
    sa.Column("donor", sa.Integer, nullable=False),
    sa.Column("donor_step", sa.Integer, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("old_params", sa.JSON, nullable=False),
    sa.Column("new_params", sa.JSON, nullable=False),
    sa.Column("member_score", sa.Float, nullable=True),
    sa.Column("donor_score", sa.Float, nullable=True),
    sa.UniqueConstraint("sweep", "member", "generation", "kind", name="uq_hf_lineage_event"),
)


_CREATE_ATTEMPTS = 20


def create_schema(engine: Engine) -> None:
    """Create the missing ``hf_*`` tables, add the columns an older schema lacks and stamp the
    schema version (idempotent; safe when several processes do it at once). A database
    without a stamp is judged by what it holds (:func:`held_version`), never stamped current
    before its tables have every column."""
    with engine.connect() as conn:
        found = held_version(conn)
    _check_version(found, engine.url)
    for attempt in range(_CREATE_ATTEMPTS):
        try:
            metadata.create_all(engine)
            break
        except (sa.exc.OperationalError, sa.exc.ProgrammingError, sa.exc.IntegrityError) as exc:
            # A racing process created a table between create_all's check and its CREATE;
            # the next pass skips what exists now (it may race on a later table again).
            raced = "already exists" in str(exc.orig) or "duplicate key" in str(exc.orig)
            if not raced or attempt == _CREATE_ATTEMPTS - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
    if found is not None:
        upgrade(engine, found)
    with engine.begin() as conn:
        try:
            with conn.begin_nested():
                conn.execute(
                    meta_table.insert().values(key="schema_version", value=str(SCHEMA_VERSION))
                )
        except sa.exc.IntegrityError:  # stamped meanwhile, by a racing process or before
            _check_version(schema_version(conn), engine.url)
    add_indexes(engine)


def held_version(conn: Connection) -> int | None:
    """The schema version of a database: its stamp; without one, what it holds (hyperfleet's
    sweeps without ``hf_meta``: version 1, from before the stamp); None for a database
    without hyperfleet's tables (a new one)."""
    found = schema_version(conn)
    if found is None and sa.inspect(conn).has_table(SweepRow.__tablename__):
        return 1
    return found


def add_indexes(engine: Engine) -> None:
    """Make the :data:`ADDED_INDEXES` a database made before them lacks (another process
    making one at the same moment is no error)."""
    by_name = {
        str(ix.name): (table.name, ix) for table in metadata.tables.values() for ix in table.indexes
    }
    for name in ADDED_INDEXES:
        table, index = by_name[name]
        try:
            with engine.begin() as conn:
                conn.execute(sa.schema.CreateIndex(index, if_not_exists=True))
        except (sa.exc.IntegrityError, sa.exc.ProgrammingError, sa.exc.OperationalError):
            if name not in {ix["name"] for ix in sa.inspect(engine).get_indexes(table)}:
                raise


def upgrade(engine: Engine, found: int) -> None:
    """Bring a database of schema version ``found`` (or of none, its tables just made) to
    :data:`SCHEMA_VERSION`: add every column of :data:`UPGRADES` it lacks, whatever its stamp
    says (a column another process added meanwhile is kept), then stamp the version."""
    inspector = sa.inspect(engine)
    held = {t: {c["name"] for c in inspector.get_columns(t)} for t, _, _ in _ADDED}
    for table, column, kind in _ADDED:
        if column not in held[table]:
            _add_column(engine, table, column, kind)
    if found >= SCHEMA_VERSION:
        return
    with engine.begin() as conn:
        conn.execute(
            meta_table.update()
            .where(meta_table.c.key == "schema_version")
            .where(sa.cast(meta_table.c.value, sa.Integer) < SCHEMA_VERSION)
            .values(value=str(SCHEMA_VERSION))
        )


def _add_column(engine: Engine, table: str, column: str, kind: str) -> None:
    """``ALTER TABLE table ADD COLUMN column kind``, unless the table has it (a racing process
    may add it between the look and the change: its error is then no error)."""

    def present() -> bool:
        return column in {c["name"] for c in sa.inspect(engine).get_columns(table)}

    if present():
        return
    quote = engine.dialect.identifier_preparer.quote
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f"ALTER TABLE {quote(table)} ADD COLUMN {quote(column)} {kind}"))
    except (sa.exc.OperationalError, sa.exc.ProgrammingError):
        if not present():
            raise


def schema_version(conn: Connection) -> int | None:
    """The stored schema version; None before it was stamped (or without ``hf_meta``)."""
    if not sa.inspect(conn).has_table(meta_table.name):
        return None
    row = conn.execute(
        sa.select(meta_table.c.value).where(meta_table.c.key == "schema_version")
    ).first()
    return None if row is None else int(row[0])


def check_readable(engine: Engine) -> None:
    """``StorageError`` unless the database holds a hyperfleet schema this version can read."""
    with engine.connect() as conn:
        if not sa.inspect(conn).has_table(SweepRow.__tablename__):
            raise StorageError(
                f"storage: {engine.url.render_as_string(hide_password=True)} holds no "
                f"hyperfleet sweeps; check the URL or run a sweep first"
            )
        _check_version(schema_version(conn), engine.url)


def _check_version(found: int | None, url: Any) -> None:
    if found is not None and found > SCHEMA_VERSION:
        raise StorageError(
            f"storage: {url.render_as_string(hide_password=True)} has schema version {found}, "
            f"newer than this hyperfleet's {SCHEMA_VERSION}; upgrade hyperfleet"
        )
