"""``hyperfleet sweep ...``: run a sweep file, and list, inspect, enqueue into and replay the
sweeps of a storage (``sweep submit`` is the fleet's, :mod:`hyperfleet.platform.cli.fleet`).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from hyperfleet.errors import ConfigError
from hyperfleet.platform.cli import fleet as cli_fleet
from hyperfleet.platform.cli.common import (
    HELP_MARKUP,
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
from hyperfleet.platform.clock import STALE_AFTER_S
from hyperfleet.platform.credentials import keep, masked
from hyperfleet.platform.urls import DEFAULT_STORAGE

sweep_app = typer.Typer(
    no_args_is_help=True, help="Run and inspect sweeps.", rich_markup_mode=HELP_MARKUP
)


def _tool(name: str) -> str:
    """A console script installed beside this interpreter, as a user can type it anywhere:
    its bare name when that is the one on ``PATH``, else its absolute path."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        return name
    found = shutil.which(name)
    if found is not None and Path(found).resolve() == path.resolve():
        return name
    return str(path.absolute())


def _hints(console: Console, summary: Any, storage_url: str, tracking: str, derived: str) -> None:
    """How to open the sweep in MLflow and in the dashboard: each command on a line of its
    own, with absolute paths, so that it can be copied whole and run from anywhere."""
    from hyperfleet.platform.storage.ownership import absolute_uri
    from hyperfleet.platform.tracking.server import ui_hint

    storage_url, tracking, derived = map(absolute_uri, (storage_url, tracking, derived))
    hint = ui_hint(_tool("hyperfleet"), storage_url, tracking, derived, summary.experiment_id)
    dash = f"{_tool('hyperfleet')} dashboard --storage {masked(storage_url)}"
    for label, line in (("Open MLflow:", hint), ("Open dashboard:", dash)):
        console.print(label, markup=False, highlight=False)
        console.print(f"  {line}", soft_wrap=True, markup=False, highlight=False)


@sweep_app.command("run")
def sweep_run(
    file: Path,
    storage: Annotated[str | None, storage_option("Storage URL (overrides the file).")] = None,
    tracking_uri: Annotated[str | None, tracking_option("MLflow tracking URI.")] = None,
    devices: Annotated[str, typer.Option(help="auto | cpu:N | cuda:0,1")] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="End with one JSON line.")] = False,
    stop_at_timeout: Annotated[
        bool,
        typer.Option(
            "--stop-at-timeout", help="At budget.timeout stop running trials too (requeued)."
        ),
    ] = False,
    trials: TrialsOverride = None,
    timeout: TimeoutOverride = None,
) -> None:
    """Create the sweep (or continue it) and run it to its budget (``--trials`` and
    ``--timeout`` replace the file's: a smoke run)."""
    # only what reading the sweep file needs is imported before its first trials' processes
    # start: the stores' libraries (SQLAlchemy, Optuna, MLflow) come after, while they start
    from hyperfleet.platform.launcher.launchers import prestarted
    from hyperfleet.platform.pool import parse_devices

    if storage is not None or tracking_uri is not None:
        from hyperfleet.platform.sweeps.preflight import check_urls

        _guard(lambda: check_urls(storage, tracking_uri))
    from hyperfleet.platform.config.overrides import budget_override

    override = _guard(lambda: budget_override(trials, timeout))
    cfg = _guard(lambda: load_file(file, override))
    if stop_at_timeout:
        budget = cfg.budget.model_copy(update={"stop_at_timeout": True})
        cfg = cfg.model_copy(update={"budget": budget})
    _guard(lambda: parse_devices(devices))
    default_storage, default_tracking = cfg.storage_url, cfg.tracking_uri
    storage_url = storage or default_storage
    tracking = tracking_uri or default_tracking
    launchers = prestarted(cfg, devices, storage_url)
    try:
        from hyperfleet.platform.sweeps.run import SweepRunner
        from hyperfleet.platform.tracking.client import check_env

        _guard(check_env)
        runner = _guard(
            lambda: SweepRunner(
                cfg, storage_url, tracking, devices=devices, sweep_file=file, launchers=launchers
            )
        )
    except BaseException:  # refused before anything ran: the started processes end at once
        if launchers is not None:
            launchers.abandon()
        raise
    console = err if as_json else out
    if override:
        console.print(override.line(), markup=False, highlight=False, soft_wrap=True)
    summary = _guard(lambda: _run_with_progress(runner, console))
    _summary(console, summary)
    _hints(console, summary, storage_url, tracking, default_tracking)
    if summary.interrupted:
        console.print("interrupted: run the same command again to continue the sweep")
    if as_json:
        print(json.dumps(summary.to_json()), flush=True)
    if summary.interrupted:
        raise typer.Exit(130)
    from hyperfleet.platform.storage.results import NO_COMPLETE_EXIT, STOPPED_EXIT, none_complete

    if summary.stopped is not None:  # its first trials all failed alike: the cause, exit 6
        err.print(f"error: sweep {summary.sweep} {summary.stopped}", markup=False,
                  highlight=False, soft_wrap=True)  # fmt: skip
        raise typer.Exit(STOPPED_EXIT)
    failed = none_complete(summary)
    if failed is not None:  # ended, and no trial COMPLETE: how many failed, and the first why
        err.print(failed, markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(NO_COMPLETE_EXIT)


def _summary(console: Console, summary: Any) -> None:
    """The results table, the failed trials with their reasons, the best trial (or the
    Pareto front)."""
    from hyperfleet.platform.cli.render import (
        best_line,
        failure_lines,
        pareto_table,
        results_table,
    )

    console.print(results_table(summary))
    for line in failure_lines(summary):
        console.print(line, style="red", markup=False, highlight=False, soft_wrap=True)
    best = best_line(summary)
    if best is not None:
        console.print(best, markup=False, highlight=False, soft_wrap=True)
    if len(summary.directions) > 1:
        console.print(pareto_table(summary))


def _run_with_progress(runner: Any, console: Console) -> Any:
    """Run the sweep with a live view on stderr when it is a terminal (the best so far, each
    running trial's step and latest value, an ETA: :mod:`~hyperfleet.platform.sweeps.board`;
    its last frame, read once more as the sweep ends, stays above the results table), and one
    line per ended trial on ``console`` when that is not a terminal (a pipe, a CI log)."""
    from rich.live import Live

    from hyperfleet.platform.sweeps.board import Board
    from hyperfleet.platform.sweeps.display import TrialLines

    lines = None
    if not console.is_terminal:
        lines = TrialLines(runner.cfg, runner.storage_url, _printer(console))
    if not err.is_terminal:
        runner.on_progress = lines
        return _closing(lines, runner.run)
    board = Board(runner.cfg, runner.storage_url)

    def update(p: Any) -> None:
        board.update(p)
        if lines is not None:
            lines(p)

    runner.on_progress = update
    # stdout is not redirected through the view when the trial lines go to it as they come
    live = Live(board, console=err, transient=False, refresh_per_second=2,
                redirect_stdout=lines is None)  # fmt: skip
    try:
        with live:
            try:
                return _closing(lines, runner.run)
            finally:
                board.settle()
                live.refresh()
    finally:
        board.close()


def _printer(console: Console) -> Any:
    def show(line: str) -> None:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
        console.file.flush()

    return show


def _closing(lines: Any, run: Any) -> Any:
    """``run()``, then the trial lines not shown yet (none if it raised)."""
    if lines is None:
        return run()
    try:
        summary = run()
    except BaseException:
        lines.close(show=False)
        raise
    lines.close()
    return summary


@sweep_app.command("status")
def sweep_status(
    name: str,
    storage: Annotated[str, storage_option("Storage URL.")] = DEFAULT_STORAGE,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Trials of a sweep, their states and values, the best one and the errors of failures."""
    from hyperfleet.platform.storage import Storage
    from hyperfleet.platform.storage.results import summarize
    from hyperfleet.spec.states import SweepStatus, TrialState

    def read() -> tuple[Any, str | None]:
        from hyperfleet.platform.worker import unschedulable

        st = Storage.open_readonly(storage)
        summary = summarize(st, name)
        row = st.sweeps.get(name)
        waiting = row is not None and row.status in (SweepStatus.SUBMITTED, SweepStatus.RUNNING)
        # the stored config as the sweep file's models parse it, never its semantic checks:
        # those load the workload (unpickle trial.code, import module:function), and a reader
        # runs no stored code (docs/operations.md, "Security")
        reason = (
            unschedulable(row.config, st, STALE_AFTER_S)
            if waiting and row and row.config is not None
            else None
        )
        st.close()
        return summary, reason

    summary, reason = _guard(read)
    if as_json:
        data = summary.to_json()
        data["trials"] = [t.__dict__ for t in summary.trials]
        data["unschedulable"] = reason
        print(json.dumps(data, default=str))
        return
    from hyperfleet.platform.cli.render import best_line, pareto_table, results_table

    out.print(results_table(summary))
    if reason is not None:
        out.print(f"unschedulable: {reason}", style="bold red", markup=False, highlight=False)
    if summary.stopped is not None:
        out.print(summary.stopped, style="bold red", markup=False, highlight=False, soft_wrap=True)
    _store_outages(summary)
    for t in summary.trials:
        if t.notes:
            out.print(f"trial {t.number}: {t.notes}", markup=False, highlight=False)
        if t.state == TrialState.FAIL and t.error:
            out.print(f"trial {t.number} failed:", style="bold red")
            out.print(t.error, markup=False, highlight=False)
    best = best_line(summary)
    if best is not None:
        out.print(best, markup=False, highlight=False, soft_wrap=True)
    if len(summary.directions) > 1:
        out.print(pareto_table(summary))


def _store_outages(summary: Any) -> None:
    """A line per checkpoint replica store the trials last recorded as unreachable (from
    their notes; ``summary``: a ``SweepSummary``)."""
    from hyperfleet.platform.sweeps.display import store_lines

    for line in store_lines(summary.trials):
        out.print(line, style="bold yellow", markup=False, highlight=False, soft_wrap=True)


@sweep_app.command("list")
def sweep_list(
    storage: Annotated[str, storage_option("Storage URL.")] = DEFAULT_STORAGE,
    wide: Annotated[bool, typer.Option("--wide", help=WIDE_HELP)] = False,
) -> None:
    """Sweeps in a storage: objective, progress (ended/budget), best value, state."""
    from hyperfleet.platform.cli.render import list_table
    from hyperfleet.platform.storage import Storage
    from hyperfleet.platform.storage.ownership import absolute_uri

    def read() -> Table:
        st = Storage.open_readonly(storage)
        try:
            title = f"sweeps in {masked(absolute_uri(storage))}"
            return list_table(st, st.sweeps.all(), title)
        finally:
            st.close()

    print_table(_guard(read), wide)


@sweep_app.command("enqueue")
def sweep_enqueue(
    target: Annotated[str, typer.Argument(help="A sweep file, or the name of a stored sweep.")],
    params: Annotated[str, typer.Option(help='JSON object, e.g. {"lr": 0.01, "hidden": 64}.')],
    storage: Annotated[str | None, storage_option("Storage URL.")] = None,
) -> None:
    """Queue a user-chosen point; the sweep runs it before any suggestion (warm start)."""
    from hyperfleet.platform.storage import Storage
    from hyperfleet.platform.storage.results import no_sweep
    from hyperfleet.platform.sweeps.enqueue import enqueue
    from hyperfleet.platform.sweeps.run import default_urls

    def run() -> int:
        try:
            point = json.loads(params)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--params: not JSON ({exc.msg}); e.g. '{{\"lr\": 0.01}}'") from None
        if not isinstance(point, dict) or not point:
            raise ConfigError("--params: expected a non-empty JSON object of name: value")
        if Path(target).is_file():
            cfg = load_file(target)
            url = storage or default_urls(cfg)[0]
        else:
            url = keep(storage or DEFAULT_STORAGE)  # shown without its password
            st = Storage.open_readonly(url)
            row = st.sweeps.get(target)
            if row is None:
                known = [r.name for r in st.sweeps.all()]
                raise ConfigError(no_sweep(target, known, url) + "; or give its file")
            cfg = row.parsed()  # the stored config, its workload neither unpickled nor imported
        return enqueue(cfg, url, point)

    number = _guard(run)
    out.print(f"queued as trial {number}")


@sweep_app.command("replay")
def sweep_replay(
    name: str,
    member: Annotated[int, typer.Option(help="PBT member (trial number) to replay.")],
    storage: Annotated[str, storage_option("Storage URL.")] = DEFAULT_STORAGE,
    devices: Annotated[str, typer.Option(help="auto | cpu:N | cuda:0,1")] = "auto",
) -> None:
    """Re-run a PBT member's hyperparameter schedule as one plain training run."""
    from hyperfleet.platform.config import parse_sweep
    from hyperfleet.platform.storage import Storage
    from hyperfleet.platform.storage.population import replay_schedule
    from hyperfleet.platform.storage.results import no_sweep
    from hyperfleet.platform.sweeps.train import run_single

    def plan() -> tuple[Any, list[tuple[int, dict[str, Any]]]]:
        st = Storage.open_readonly(storage)
        row = st.sweeps.get(name)
        if row is None:
            known = [r.name for r in st.sweeps.all()]
            raise ConfigError(no_sweep(name, known, masked(storage)))
        cfg = parse_sweep(row.stored_config)
        if not cfg.is_population:
            raise ConfigError(f"sweep: {name!r} is not a PBT sweep; replay needs scheduler pbt/pb2")
        members = sorted(st.population.members(name))
        if member not in members:
            have = f"members {members[0]}-{members[-1]}" if members else "no members yet"
            raise ConfigError(f"--member: sweep {name!r} has no member {member} ({have})")
        return cfg, replay_schedule(st.population, name, member)

    cfg, schedule = _guard(plan)
    for start, params in schedule:
        err.print(f"from step {start}: {params}", markup=False, highlight=False)
    raise typer.Exit(_guard(lambda: run_single(cfg, devices, [], schedule)))


sweep_app.command("submit")(cli_fleet.sweep_submit)
