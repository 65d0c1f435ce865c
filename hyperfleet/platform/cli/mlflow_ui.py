"""``hyperfleet mlflow``: open the MLflow UI on a sweep's stores; ``mlflow sync``: send what it
missed. Registered by :mod:`hyperfleet.platform.cli`, which hands in its error guard (one line
on stderr and exit 2 for a user error) and consoles."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer

from hyperfleet import startup
from hyperfleet.platform.cli.common import storage_option, tracking_option
from hyperfleet.platform.credentials import libpq_env, masked
from hyperfleet.platform.urls import MLFLOW_UI_PORT

T = TypeVar("T")
Guard = Callable[[Callable[[], Any]], Any]

STORAGE_HELP = "Storage URL of the sweep(s)."
SWEEP_HELP = "The sweep (default: the most recent one in the storage)."
TRACKING_HELP = "MLflow tracking URI, if the sweep ran with --tracking-uri."
PORT_HELP = (
    f"Port to serve on; refused when in use. Default: {MLFLOW_UI_PORT}, or a free port when "
    f"{MLFLOW_UI_PORT} is in use (the command prints the one it chose)."
)


def _stores(
    storage: str, sweep: str | None, tracking_uri: str | None
) -> tuple[str, str, str | None]:
    """``(tracking URI, workdir, experiment id)`` of the sweep named, or the latest one."""
    from hyperfleet.errors import ConfigError
    from hyperfleet.platform.storage import Storage
    from hyperfleet.platform.sweeps.preflight import check_urls
    from hyperfleet.platform.tracking.sync import stores_of, unknown_sweep

    check_urls(storage, tracking_uri)
    rows = Storage.open_readonly(storage).sweeps.all()
    if sweep is not None:
        known = [r.name for r in rows]
        rows = [r for r in rows if r.name == sweep]
        if not rows:
            raise ConfigError(unknown_sweep(sweep, known, masked(storage)))
    if not rows:
        raise ConfigError(f"--storage: no sweeps in {masked(storage)}; run one or check the URL")
    row = max(rows, key=lambda r: r.created_at)
    uri, _experiment, workdir = stores_of(row.parsed(), tracking_uri)
    return uri, workdir, row.mlflow_experiment_id


def build_app(guard: Guard, out: Any, err: Any, default_storage: str) -> typer.Typer:
    """The ``mlflow`` command group."""
    app = typer.Typer(invoke_without_command=True, help="Browse a sweep in MLflow.")

    @app.callback()
    def ui(
        ctx: typer.Context,
        storage: Annotated[str, storage_option(STORAGE_HELP)] = default_storage,
        sweep: Annotated[str | None, typer.Option(help=SWEEP_HELP)] = None,
        tracking_uri: Annotated[str | None, tracking_option(TRACKING_HELP)] = None,
        host: Annotated[str, typer.Option(help="Interface to serve on.")] = "127.0.0.1",
        port: Annotated[int | None, typer.Option(help=PORT_HELP, show_default=False)] = None,
    ) -> None:
        """Open the MLflow UI on the stores a sweep used and print the link to its runs
        table (Ctrl-C stops it)."""
        if ctx.invoked_subcommand is not None:
            return
        from hyperfleet.platform.services.ports import port_to_serve
        from hyperfleet.platform.tracking.client import is_server
        from hyperfleet.platform.tracking.server import experiment_url, server_env, ui_command

        uri, workdir, experiment_id = guard(lambda: _stores(storage, sweep, tracking_uri))
        if is_server(uri):
            out.print(f"MLflow: {masked(experiment_url(uri, experiment_id))}", soft_wrap=True)
            return
        serve, note = guard(lambda: port_to_serve(host, port, MLFLOW_UI_PORT))
        cmd = guard(lambda: ui_command(uri, workdir, host, serve))
        if note is not None:
            err.print(note, markup=False, highlight=False, soft_wrap=True)
        link = experiment_url(f"http://{host}:{serve}", experiment_id)
        err.print(f"MLflow UI: {link} (Ctrl-C stops it)", soft_wrap=True)
        os.execvpe(cmd[0], cmd, {**server_env(), **libpq_env(uri)})  # no password in cmd

    @app.command("sync")
    def sync(
        storage: Annotated[str, storage_option(STORAGE_HELP)] = default_storage,
        sweep: Annotated[str | None, typer.Option(help="One sweep (default: every one).")] = None,
        tracking_uri: Annotated[str | None, tracking_option(TRACKING_HELP)] = None,
    ) -> None:
        """Send MLflow what it missed (an outage, a controller that died): spooled reports,
        runs created late, run ends, marks, the best model. Safe to run again."""
        from hyperfleet.platform.storage import Storage
        from hyperfleet.platform.sweeps.preflight import check_urls
        from hyperfleet.platform.tracking.sync import sync_sweep

        guard(lambda: check_urls(storage, tracking_uri))
        st = guard(lambda: Storage(storage, create=False))
        names = [sweep] if sweep else [r.name for r in guard(st.sweeps.all)]
        incomplete = False
        for name in names:
            result = guard(functools.partial(sync_sweep, st, name, tracking_uri))
            startup.resume()  # started: MLflow imported (the rest may be a long run)
            incomplete |= not result.complete
            out.print(
                f"{name}: {result.trials} trials, {result.points} spooled points sent, "
                f"{result.created} runs created" + ("" if result.complete else "; incomplete"),
                soft_wrap=True,
            )
        if incomplete:
            err.print("MLflow went away during the sync; run it again when it is back")
            raise typer.Exit(1)

    return app
