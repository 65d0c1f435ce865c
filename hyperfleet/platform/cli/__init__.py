"""The ``hyperfleet`` command line.

Every user error is one line on stderr and exit status 2 (``--debug`` shows the traceback);
nothing is written to storage or MLflow before the sweep file has been validated.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path
from typing import Annotated

import typer

from hyperfleet import startup
from hyperfleet.errors import HyperfleetError
from hyperfleet.platform.cli import delete as cli_delete
from hyperfleet.platform.cli import fleet as cli_fleet
from hyperfleet.platform.cli import lifecycle as _lifecycle  # noqa: F401 - sweep stop/pause/resume
from hyperfleet.platform.cli import pool as cli_pool
from hyperfleet.platform.cli import stack as cli_stack
from hyperfleet.platform.cli.common import (
    HELP_MARKUP,
    _guard,
    _state,
    err,
    load_file,
    out,
    storage_option,
    tracking_option,
)
from hyperfleet.platform.cli.mlflow_ui import build_app
from hyperfleet.platform.cli.sweep import sweep_app
from hyperfleet.platform.credentials import keep
from hyperfleet.platform.urls import DASHBOARD_PORT, DEFAULT_STORAGE
from hyperfleet.spec.workloads import DEFAULT_WORKLOAD, add_import_path

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help=__doc__, rich_markup_mode=HELP_MARKUP
)
sweep_app.command("delete")(cli_delete.sweep_delete)
app.add_typer(sweep_app, name="sweep")
app.add_typer(cli_stack.stack_app, name="stack")
app.add_typer(cli_pool.pool_app, name="pool")


def _version(shown: bool) -> None:
    """``--version``: the installed package's version, and exit."""
    if shown:
        from importlib.metadata import version

        out.print(f"hyperfleet {version('hyperfleet')}", markup=False, highlight=False)
        raise typer.Exit()


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log what happens.")] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    _state["debug"] = debug
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s: %(message)s",
        stream=sys.stderr,
    )


@app.command()
def validate(file: Path) -> None:
    """Check a sweep file; exit 0 when valid, else 2 with one line per problem."""
    from hyperfleet.platform.schedulers import check_scheduler

    cfg = _guard(lambda: load_file(file))
    _guard(lambda: check_scheduler(cfg))  # as `sweep run` builds it before storing anything
    out.print(f"{file}: valid sweep {cfg.name!r} ({len(cfg.dims)} parameters)")


@app.command()
def init(
    file: Path,
    workload: Annotated[
        str, typer.Option(help="a built-in workload's name or package.module:function")
    ] = DEFAULT_WORKLOAD,
) -> None:
    """Write the recommended sweep (tpe with asha, warm trials) for a workload to FILE;
    refuses to overwrite."""
    import yaml

    from hyperfleet.errors import ConfigError
    from hyperfleet.platform.config.recommended import recommended_sweep

    if file.exists():
        _guard(lambda: _raise(ConfigError(f"{file}: exists; give a new file name")))
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", file.stem) or "sweep"
    data = _guard(lambda: recommended_sweep(workload, name))
    _guard(lambda: file.write_text(yaml.safe_dump(data, sort_keys=False)))
    budget = data["budget"]
    out.print(f"{file}: wrote sweep {name!r} (tpe with asha; a smoke budget of "
              f"{budget['trials']} trials, {budget['timeout']}) for {workload}; "
              f"run: hyperfleet sweep run {file}", markup=False, highlight=False,
              soft_wrap=True)  # fmt: skip


def _raise(exc: Exception) -> None:
    raise exc


@app.command()
def train(
    file: Path,
    devices: Annotated[str, typer.Option(help="auto | cpu:N | cuda:0,1")] = "auto",
    param: Annotated[list[str] | None, typer.Option(help="NAME=VALUE (JSON value).")] = None,
) -> None:
    """One training run of the file's trial configuration, without search or tracking."""
    from hyperfleet.platform.sweeps.train import run_single

    cfg = _guard(lambda: load_file(file))
    code = _guard(lambda: run_single(cfg, devices, param or []))
    raise typer.Exit(code)


@app.command()
def dashboard(
    storage: Annotated[str, storage_option("Storage URL (read only).")] = DEFAULT_STORAGE,
    tracking_uri: Annotated[
        str | None,
        tracking_option("MLflow tracking URI (default: each sweep's tracking.uri)."),
    ] = None,
    host: Annotated[
        str, typer.Option(help="Address to serve on; 0.0.0.0 serves every interface.")
    ] = "127.0.0.1",
    port: Annotated[
        int | None,
        typer.Option(
            help=f"Port to serve on; refused when in use. Default: {DASHBOARD_PORT}, or a free "
            f"port when {DASHBOARD_PORT} is in use (the command prints the one it chose).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve the Streamlit dashboard on a storage (read only: nothing is created or written)."""
    import importlib.util

    from hyperfleet.platform.services.ports import port_to_serve
    from hyperfleet.platform.storage import Storage
    from hyperfleet.platform.sweeps.preflight import check_urls

    _guard(lambda: check_urls(storage, tracking_uri))
    port, note = _guard(lambda: port_to_serve(host, port, DASHBOARD_PORT))
    if note is not None:
        err.print(note, markup=False, highlight=False, soft_wrap=True)
    try:  # a storage that is not there yet is reported, and the page waits for it
        Storage.open_readonly(storage).close()
    except HyperfleetError as exc:
        err.print(f"warning: {exc}", markup=False, highlight=False, soft_wrap=True)
    # Streamlit gets the URLs without their password; the password is in its environment
    storage, tracking_uri = keep(storage), tracking_uri and keep(tracking_uri)
    spec = importlib.util.find_spec("hyperfleet.dashboards.app")  # its path, not imported
    assert spec is not None and spec.origin is not None
    argv = [sys.executable, "-m", "streamlit", "run", spec.origin,
            "--server.address", host, "--server.port", str(port), "--server.headless", "true",
            "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
            "--client.toolbarMode", "viewer",
            "--", "--storage", storage]  # fmt: skip
    if tracking_uri:
        argv += ["--tracking-uri", tracking_uri]
    err.print(f"dashboard: http://{host}:{port} (storage {storage})", markup=False, highlight=False)
    sys.stderr.flush()
    os.execv(sys.executable, argv)


app.command("worker")(cli_fleet.worker)
app.command("workers")(cli_fleet.workers)
app.add_typer(build_app(_guard, out, err, DEFAULT_STORAGE), name="mlflow")


def main() -> None:
    """The ``hyperfleet`` command. It ends without the interpreter's teardown (freeing every
    module's objects one by one: up to a second with MLflow, Optuna and SQLAlchemy loaded)
    once the command has returned: by then it has closed its storage, MLflow outbox and
    trial processes, and its output is flushed here. The garbage collector is held off while
    the command starts (:mod:`hyperfleet.startup`): a short command ends paused; a sweep or
    worker resumes it once its controller has opened its sweeps, ``mlflow sync`` once it
    has synced its first sweep (``train`` waits on torchrun, allocating nearly nothing
    meanwhile; ``stack up`` returns once its services run; ``dashboard`` becomes Streamlit)."""
    startup.pause()
    _state["program"] = True
    add_import_path(Path.cwd())  # a workload module here is found, as by `python -m`
    try:
        app()
        code = 0
    except SystemExit as exc:  # how click ends every command
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
