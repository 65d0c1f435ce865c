"""``hyperfleet sweep ...``: run a sweep file, and list, inspect, enqueue into and replay the
sweeps of a storage (``sweep submit`` is the fleet's, :mod:`hyperfleet.platform.cli.fleet`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from hyperfleet.errors import ConfigError
from hyperfleet.platform.cli import fleet as cli_fleet
from hyperfleet.platform.cli.common import _guard, err, out
from hyperfleet.platform.clock import STALE_AFTER_S
from hyperfleet.platform.credentials import keep, masked
from hyperfleet.platform.urls import DEFAULT_STORAGE

sweep_app = typer.Typer(no_args_is_help=True, help="Run and inspect sweeps.")


def _tool(name: str) -> str:
    """The path of a console script installed beside this interpreter."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        return name
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _results_table(summary: Any) -> Table:
    from hyperfleet.spec.states import TrialState

    table = Table(title=f"sweep {summary.sweep}")
    for col in ("trial", "state", "value", "params", "steps", "seconds", "worker"):
        table.add_column(col)
    best = summary.best()
    for t in summary.trials:
        value = ", ".join(f"{v:.4g}" for v in t.values) if t.values else "-"
        mark = " *" if best is not None and t.number == best.number else ""
        params = ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in t.params.items()
        )
        table.add_row(
            f"{t.number}{mark}",
            t.state,
            value,
            params,
            "-" if t.last_step is None else str(t.last_step),
            "-" if t.duration_s is None else f"{t.duration_s:.1f}",
            (t.worker or t.host or "-") if t.state == TrialState.RUNNING else "",
        )
    return table


def _pareto_table(summary: Any) -> Table:
    table = Table(title="Pareto front")
    table.add_column("trial")
    for metric, direction in zip(summary.metrics, summary.directions, strict=True):
        table.add_column(f"{metric} ({direction[:3]})")
    table.add_column("params")
    for t in sorted(summary.pareto_front(), key=lambda t: t.values):
        table.add_row(str(t.number), *(f"{v:.4g}" for v in t.values), str(t.params))
    return table


@sweep_app.command("run")
def sweep_run(
    file: Path,
    storage: Annotated[str | None, typer.Option(help="Storage URL (overrides the file).")] = None,
    tracking_uri: Annotated[str | None, typer.Option(help="MLflow tracking URI.")] = None,
    devices: Annotated[str, typer.Option(help="auto | cpu:N | cuda:0,1")] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="End with one JSON line.")] = False,
    stop_at_timeout: Annotated[
        bool,
        typer.Option(
            "--stop-at-timeout", help="At budget.timeout stop running trials too (requeued)."
        ),
    ] = False,
) -> None:
    """Create the sweep (or continue it) and run it to its budget."""
    from hyperfleet.platform.config import load_sweep
    from hyperfleet.platform.pool import parse_devices
    from hyperfleet.platform.sweeps.preflight import check_urls
    from hyperfleet.platform.sweeps.run import SweepRunner, default_urls
    from hyperfleet.platform.tracking.client import check_env

    _guard(lambda: check_urls(storage, tracking_uri))
    cfg = _guard(lambda: load_sweep(file))
    _guard(check_env)
    if stop_at_timeout:
        budget = cfg.budget.model_copy(update={"stop_at_timeout": True})
        cfg = cfg.model_copy(update={"budget": budget})
    _guard(lambda: parse_devices(devices))
    default_storage, default_tracking = default_urls(cfg)
    storage_url = storage or default_storage
    tracking = tracking_uri or default_tracking
    runner = _guard(
        lambda: SweepRunner(cfg, storage_url, tracking, devices=devices, sweep_file=file)
    )
    summary = _guard(lambda: _run_with_progress(runner))
    console = err if as_json else out
    console.print(_results_table(summary))
    best = summary.best()
    if best is not None and best.values:
        console.print(
            f"best: trial {best.number}, {cfg.all_objectives[0].metric} = {best.values[0]:.4g}"
        )
    if len(summary.directions) > 1:
        console.print(_pareto_table(summary))
    from hyperfleet.platform.tracking.server import ui_hint

    hint = ui_hint(
        _tool("hyperfleet"), storage_url, tracking, default_tracking, summary.experiment_id
    )
    dash = f"{_tool('hyperfleet')} dashboard --storage {masked(storage_url)}"
    console.print("Open MLflow:    " + hint, soft_wrap=True, markup=False, highlight=False)
    console.print("Open dashboard: " + dash, soft_wrap=True, markup=False, highlight=False)
    if summary.interrupted:
        console.print("interrupted: run the same command again to continue the sweep")
    if as_json:
        print(json.dumps(summary.to_json()), flush=True)
    if summary.interrupted:
        raise typer.Exit(130)
    from hyperfleet.platform.sweeps.results import NO_COMPLETE_EXIT, none_complete

    failed = none_complete(summary)
    if failed is not None:  # ended, and no trial COMPLETE: how many failed, and the first why
        err.print(failed, markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(NO_COMPLETE_EXIT)


def _run_with_progress(runner: Any) -> Any:
    """Run the sweep with a progress bar on stderr (gone once it ends: errors and the results
    table follow without it)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = [
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[running]} running"),
        TimeElapsedColumn(),
    ]
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task(runner.cfg.name, total=None, running=0)

        def update(p: Any) -> None:
            bar.update(task, completed=p.finished, running=p.running, total=p.budget)

        runner.on_progress = update
        return runner.run()


@sweep_app.command("status")
def sweep_status(
    name: str,
    storage: Annotated[str, typer.Option(help="Storage URL.")] = DEFAULT_STORAGE,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Trials of a sweep, their states and values, the best one and the errors of failures."""
    from hyperfleet.platform.storage import Storage
    from hyperfleet.platform.sweeps.results import summarize
    from hyperfleet.spec.states import SweepStatus, TrialState

    def read() -> tuple[Any, str | None]:
        from hyperfleet.platform.config import parse_sweep
        from hyperfleet.platform.worker import unschedulable

        st = Storage.open_readonly(storage)
        summary = summarize(st, name)
        row = st.get_sweep(name)
        waiting = row is not None and row.status in (SweepStatus.SUBMITTED, SweepStatus.RUNNING)
        reason = (
            unschedulable(parse_sweep(row.stored_config), st, STALE_AFTER_S)
            if waiting and row
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
    out.print(_results_table(summary))
    if reason is not None:
        out.print(f"unschedulable: {reason}", style="bold red", markup=False, highlight=False)
    for t in summary.trials:
        if t.notes:
            out.print(f"trial {t.number}: {t.notes}", markup=False, highlight=False)
        if t.state == TrialState.FAIL and t.error:
            out.print(f"trial {t.number} failed:", style="bold red")
            out.print(t.error, markup=False, highlight=False)
    best = summary.best()
    if best is not None and best.values:
        out.print(f"best: trial {best.number} = {best.values[0]:.4g} {best.params}")
    if len(summary.directions) > 1:
        out.print(_pareto_table(summary))


@sweep_app.command("list")
def sweep_list(
    storage: Annotated[str, typer.Option(help="Storage URL.")] = DEFAULT_STORAGE,
) -> None:
    """Sweeps in a storage."""
    from hyperfleet.platform.storage import Storage

    rows = _guard(lambda: Storage.open_readonly(storage).list_sweeps())
    table = Table()
    for col in ("sweep", "status", "created"):
        table.add_column(col)
    import datetime as dt

    for r in rows:
        created = dt.datetime.fromtimestamp(r.created_at).isoformat(timespec="seconds")
        table.add_row(r.name, r.status, created)
    out.print(table)


@sweep_app.command("enqueue")
def sweep_enqueue(
    target: Annotated[str, typer.Argument(help="A sweep file, or the name of a stored sweep.")],
    params: Annotated[str, typer.Option(help='JSON object, e.g. {"lr": 0.01, "hidden": 64}.')],
    storage: Annotated[str | None, typer.Option(help="Storage URL.")] = None,
) -> None:
    """Queue a user-chosen point; the sweep runs it before any suggestion (warm start)."""
    from hyperfleet.platform.config import load_sweep, parse_sweep
    from hyperfleet.platform.storage import Storage
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
            cfg = load_sweep(target)
            url = storage or default_urls(cfg)[0]
        else:
            url = keep(storage or DEFAULT_STORAGE)  # shown without its password
            row = Storage.open_readonly(url).get_sweep(target)
            if row is None:
                raise ConfigError(f"sweep: no sweep named {target!r} in {url}; give its file")
            cfg = parse_sweep(row.stored_config)
        return enqueue(cfg, url, point)

    number = _guard(run)
    out.print(f"queued as trial {number}")


@sweep_app.command("replay")
def sweep_replay(
    name: str,
    member: Annotated[int, typer.Option(help="PBT member (trial number) to replay.")],
    storage: Annotated[str, typer.Option(help="Storage URL.")] = DEFAULT_STORAGE,
    devices: Annotated[str, typer.Option(help="auto | cpu:N | cuda:0,1")] = "auto",
) -> None:
    """Re-run a PBT member's hyperparameter schedule as one plain training run."""
    from hyperfleet.platform.config import parse_sweep
    from hyperfleet.platform.storage import Storage
    from hyperfleet.platform.storage.population import SqlPopulationStore, replay_schedule
    from hyperfleet.platform.sweeps.train import run_single

    def plan() -> tuple[Any, list[tuple[int, dict[str, Any]]]]:
        st = Storage.open_readonly(storage)
        row = st.get_sweep(name)
        if row is None:
            raise ConfigError(f"sweep: no sweep named {name!r} in {masked(storage)}")
        cfg = parse_sweep(row.stored_config)
        if not cfg.is_population:
            raise ConfigError(f"sweep: {name!r} is not a PBT sweep; replay needs scheduler pbt/pb2")
        schedule = replay_schedule(SqlPopulationStore(st.engine), name, member)
        if not schedule:
            raise ConfigError(f"--member: sweep {name!r} has no member {member}")
        return cfg, schedule

    cfg, schedule = _guard(plan)
    for start, params in schedule:
        err.print(f"from step {start}: {params}", markup=False, highlight=False)
    raise typer.Exit(_guard(lambda: run_single(cfg, devices, [], schedule)))


sweep_app.command("submit")(cli_fleet.sweep_submit)
