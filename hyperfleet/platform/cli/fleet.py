"""Commands of a fleet: ``hyperfleet worker``, ``hyperfleet workers``, ``hyperfleet sweep submit``
(registered on the app by :mod:`hyperfleet.platform.cli`)."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from hyperfleet.errors import ConfigError
from hyperfleet.platform.cli.common import (
    WIDE_HELP,
    TimeoutOverride,
    TrialsOverride,
    _guard,
    err,
    load_file,
    out,
    print_table,
    storage_option,
    tracking_option,
)
from hyperfleet.platform.clock import HEARTBEAT_EVERY_S, STALE_AFTER_S
from hyperfleet.platform.credentials import masked
from hyperfleet.platform.elastic.resize import ElasticKnobs
from hyperfleet.platform.urls import DEFAULT_STORAGE

if TYPE_CHECKING:
    from hyperfleet.platform.storage.results import SweepSummary

STORAGE_HELP = "Storage URL (PostgreSQL for many hosts)."
POLICY = ElasticKnobs()  # the resize policy's defaults, as a worker's options give them


def _duration(value: str | None, option: str) -> float | None:
    if value is None:
        return None
    from hyperfleet.spec.sections import parse_duration

    try:
        return float(parse_duration(value))
    except ValueError as exc:
        raise ConfigError(f"{option}: {exc}") from None


def elastic_knobs(enabled: bool, min_interval: int, share: float) -> ElasticKnobs:
    """The worker's resize policy from its options; ``ConfigError`` naming the option."""
    if min_interval < 1:
        raise ConfigError(f"--elastic-interval: must be at least 1 (got {min_interval})")
    if not 0 < share <= 1:
        raise ConfigError(
            f"--elastic-share: must be above 0 and at most 1 (got {share:g}); 0.5 shares "
            f"idle devices down the ranks, 1 gives them all to the best-ranked trial"
        )
    return ElasticKnobs(enabled=enabled, min_interval=min_interval, share=share)


def worker(
    storage: Annotated[str, storage_option(STORAGE_HELP)] = DEFAULT_STORAGE,
    sweep: Annotated[
        list[str] | None, typer.Option(help="Serve only this sweep (repeatable).")
    ] = None,
    devices: Annotated[str, typer.Option(help="auto | cpu:N | cuda:0,1")] = "auto",
    pool: Annotated[str, typer.Option(help="Pool name; sweeps may ask for one.")] = "default",
    advertise_address: Annotated[
        str | None, typer.Option(help="Address other hosts reach this one at (multi-node).")
    ] = None,
    tracking_uri: Annotated[
        str | None, tracking_option("MLflow URI for sweeps whose file names none.")
    ] = None,
    max_trials: Annotated[int | None, typer.Option(help="Exit after this many trials.")] = None,
    exit_when_idle: Annotated[
        str | None,
        typer.Option(
            help="Exit after this long with no trial to run here or to watch over elsewhere "
            "(e.g. 5m)."
        ),
    ] = None,
    heartbeat: Annotated[str, typer.Option(help="Heartbeat interval.")] = f"{HEARTBEAT_EVERY_S:g}s",
    stale_after: Annotated[
        str, typer.Option(help="A worker silent this long is gone; its trials are requeued.")
    ] = f"{STALE_AFTER_S:g}s",
    no_elastic: Annotated[
        bool, typer.Option("--no-elastic", help="Resize no elastic trial (each stays at its min).")
    ] = False,
    elastic_interval: Annotated[
        int, typer.Option(help="Reports an elastic trial makes between two of its resizes.")
    ] = POLICY.min_interval,
    elastic_share: Annotated[
        float,
        typer.Option(
            help="Of the idle devices, the most one elastic trial grows by while another "
            "could take some (1: all to the best-ranked)."
        ),
    ] = POLICY.share,
) -> None:
    """Serve the sweeps of a storage with this host's devices until stopped (SIGTERM drains)."""
    from hyperfleet.platform.controller import Timing, Until
    from hyperfleet.platform.pool import LocalPool
    from hyperfleet.platform.sweeps.preflight import check_storage, check_urls
    from hyperfleet.platform.tracking.client import check_env
    from hyperfleet.platform.worker import run_worker

    def start() -> tuple[dict[str, SweepSummary], bool]:
        knobs = elastic_knobs(not no_elastic, elastic_interval, elastic_share)
        check_urls(storage, tracking_uri)
        check_env()
        check_storage(storage)
        local = LocalPool.from_spec(devices)
        beat, stale = _duration(heartbeat, "--heartbeat"), _duration(stale_after, "--stale-after")
        assert beat is not None and stale is not None
        if stale <= beat:
            raise ConfigError("--stale-after: must be longer than --heartbeat, e.g. 10x")
        until = Until(
            done=False, idle=_duration(exit_when_idle, "--exit-when-idle"), max_trials=max_trials
        )
        timing = Timing(heartbeat_every=beat, stale_after=stale, rescan_every=beat)
        return run_worker(
            storage, local, sweeps=sweep or None, pool_name=pool, address=advertise_address,
            tracking_uri=tracking_uri, until=until, timing=timing, counts_only=True,
            elastic=knobs,
        )  # fmt: skip

    summaries, signalled = _guard(start)
    for name, summary in summaries.items():
        counts = ", ".join(f"{k} {v}" for k, v in summary.state_counts.items() if v)
        err.print(f"sweep {name}: {counts or 'no trials'}", markup=False, highlight=False)
    if signalled:
        raise typer.Exit(130)


def workers(
    storage: Annotated[str, storage_option(STORAGE_HELP)] = DEFAULT_STORAGE,
    stale_after: Annotated[
        str, typer.Option(help="Heartbeat age after which one is gone.")
    ] = f"{STALE_AFTER_S:g}s",
    show_all: Annotated[bool, typer.Option("--all", help="Stopped and lost workers too.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    wide: Annotated[bool, typer.Option("--wide", help=WIDE_HELP)] = False,
) -> None:
    """Workers of a storage: host, pool, devices, busy devices, current trials, heartbeat age,
    and for a worker a batch scheduler runs (or a job of an elastic pool not started yet) the
    job's id, state and reason."""
    from hyperfleet.platform.storage import Storage
    from hyperfleet.spec.states import WorkerState

    def rows() -> list[list[str]]:
        st = Storage.open_readonly(storage)
        limit = _duration(stale_after, "--stale-after") or STALE_AFTER_S
        now = time.time()
        running: dict[str, list[str]] = {}
        busy: dict[str, set[str]] = {}  # devices held, whole or in shares
        for s in st.sweeps.all():
            for lease in st.leases.all(s.name):
                if lease.ended_at is None and lease.worker:
                    running.setdefault(lease.worker, []).append(f"{s.name}/{lease.trial}")
                    busy.setdefault(lease.worker, set()).update(lease.devices)
        table = []
        for w in st.workers.all():
            age = now - w.heartbeat_at
            state = "lost" if w.state == WorkerState.ACTIVE and age > limit else w.state
            if not show_all and state in (WorkerState.STOPPED, "lost"):
                continue
            table.append([
                w.id, w.host or "-", w.pool, ",".join(w.devices) or "-",
                str(len(busy.get(w.id, ()))), ", ".join(running.get(w.id, [])) or "-",
                f"{age:.0f}s", state, w.job_id or "-", job_status(w.job_state, w.job_reason),
            ])  # fmt: skip
        st.close()
        return table

    columns = (
        "worker", "host", "pool", "devices", "busy", "trials", "heartbeat", "state", "job",
        "job state",
    )  # fmt: skip
    found = _guard(rows)
    if as_json:
        print(json.dumps([dict(zip(columns, row, strict=True)) for row in found]))
        return
    table = Table()
    for col in columns:
        table.add_column(col)
    for row in found:
        table.add_row(*row)
    print_table(table, wide)


def job_status(state: str | None, reason: str | None) -> str:
    """A job's state and, when Slurm gives one, its reason: ``PENDING (Resources)``."""
    if state is None:
        return "-"
    return f"{state} ({reason})" if reason else state


def sweep_submit(
    file: Path,
    storage: Annotated[str | None, storage_option("Storage URL (overrides the file).")] = None,
    tracking_uri: Annotated[str | None, tracking_option("MLflow tracking URI.")] = None,
    trials: TrialsOverride = None,
    timeout: TimeoutOverride = None,
) -> None:
    """Create the sweep (or update its budget) for workers to take; returns at once
    (``--trials`` and ``--timeout`` replace the file's budget, as for ``sweep run``)."""
    from hyperfleet.platform.config.overrides import budget_override
    from hyperfleet.platform.sweeps.preflight import check_urls
    from hyperfleet.platform.sweeps.run import default_urls, submit_sweep

    _guard(lambda: check_urls(storage, tracking_uri))
    override = _guard(lambda: budget_override(trials, timeout))
    cfg = _guard(lambda: load_file(file, override))
    if override:
        out.print(override.line(), markup=False, highlight=False, soft_wrap=True)
    default_storage, default_tracking = default_urls(cfg)
    url = storage or default_storage
    summary = _guard(
        lambda: submit_sweep(cfg, url, tracking_uri or default_tracking, sweep_file=file)
    )
    done = sum(summary.state_counts.values())
    when = dt.datetime.now().isoformat(timespec="seconds")
    shown = masked(url)
    out.print(f"submitted sweep {cfg.name!r} to {shown} at {when} ({done} trials so far); "
              f"run workers with: hyperfleet worker --storage {shown}")  # fmt: skip
