"""``hyperfleet stack up|down|status``: the native stack
(:mod:`hyperfleet.platform.services.stack`), registered on the app by
:mod:`hyperfleet.platform.cli`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from hyperfleet.platform.cli.common import HELP_MARKUP, _guard, err, out
from hyperfleet.platform.services import DEFAULT_ADDRESS, DEFAULT_STATE, DEFAULT_WORKERS, PORTS

stack_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=HELP_MARKUP,
    help="The shared stack as local processes: PostgreSQL, MLflow server, workers, dashboard.",
)

DEFAULT = Path(DEFAULT_STATE)
StateDir = Annotated[Path, typer.Option(help="Where the stack keeps its data, logs and pids.")]


@stack_app.command("up")
def stack_up(
    state_dir: StateDir = DEFAULT,
    address: Annotated[
        str, typer.Option(help="Address to serve on; 0.0.0.0 lets other hosts' workers in.")
    ] = DEFAULT_ADDRESS,
    postgres_port: Annotated[int, typer.Option(help="PostgreSQL port.")] = PORTS["postgres"],
    mlflow_port: Annotated[int, typer.Option(help="MLflow server port.")] = PORTS["mlflow"],
    dashboard_port: Annotated[int, typer.Option(help="Dashboard port.")] = PORTS["dashboard"],
    workers: Annotated[int, typer.Option(help="Workers to start on this host.")] = DEFAULT_WORKERS,
    devices: Annotated[
        str | None,
        typer.Option(help="Each worker's devices (default: GPUs split, else cpu:2 each)."),
    ] = None,
) -> None:
    """Start the stack; print its URLs. Stop it with `hyperfleet stack down`."""
    from hyperfleet.platform.services.stack import StackConfig, up, worker_devices

    def start() -> StackConfig:
        user = os.environ.get("POSTGRES_USER") or "hyperfleet"
        cfg = StackConfig(
            state_dir.resolve(), address,
            {"postgres": postgres_port, "mlflow": mlflow_port, "dashboard": dashboard_port},
            workers, worker_devices(workers, devices),
            user, os.environ.get("POSTGRES_PASSWORD", ""),
        )  # fmt: skip
        up(cfg)
        return cfg

    cfg = _guard(start)
    env = cfg.state_dir / "stack.env"
    try:
        env_shown = env.relative_to(Path.cwd())
    except ValueError:
        env_shown = env
    pg = f"{cfg.public}:{cfg.ports['postgres']}"
    lines = [
        f"stack up ({cfg.state_dir}):",
        f"  MLflow:     {cfg.tracking_uri}",
        f"  dashboard:  {cfg.dashboard_url}",
        f"  PostgreSQL: {pg} (storage URL and PGPASSWORD in {env_shown}, mode 0600)",
        f"  workers:    {cfg.workers} ({', '.join(cfg.devices) or '-'})",
        f"next: source {env_shown}",
        '      hyperfleet sweep submit FILE --storage "$HYPERFLEET_STORAGE" '
        '--tracking-uri "$HYPERFLEET_TRACKING_URI"',
        "stop: hyperfleet stack down"
        + ("" if state_dir == DEFAULT else f" --state-dir {state_dir}"),
    ]
    print("\n".join(lines), flush=True)


@stack_app.command("down")
def stack_down(state_dir: StateDir = DEFAULT) -> None:
    """Stop every process of the stack (workers drain first); its data stays."""
    from hyperfleet.platform.services.stack import down

    stopped = _guard(lambda: down(state_dir.resolve()))
    err.print(f"stopped: {', '.join(stopped) or 'nothing was running'}",
              markup=False, highlight=False)  # fmt: skip


@stack_app.command("status")
def stack_status(
    state_dir: StateDir = DEFAULT,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Each service of the stack: pid, state, URL. Exit 1 when one is not running."""
    from hyperfleet.platform.services.stack import status

    rows = _guard(lambda: status(state_dir.resolve()))
    if as_json:
        print(json.dumps(rows))
    else:
        table = Table()
        for col in ("service", "pid", "state", "url"):
            table.add_column(col)
        for r in rows:
            table.add_row(r["service"], str(r["pid"] or "-"), r["state"], r["url"])
        out.print(table)
    if len(rows) == 1 or any(r["state"] != "running" for r in rows):
        raise typer.Exit(1)
