"""``hyperfleet pool slurm``: an elastic pool of workers as Slurm jobs
(:mod:`hyperfleet.platform.elastic.pool`)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Annotated

import typer

from hyperfleet.errors import ConfigError
from hyperfleet.platform.cli.common import HELP_MARKUP, _guard, err, storage_option, tracking_option
from hyperfleet.platform.cli.fleet import STORAGE_HELP, _duration
from hyperfleet.platform.elastic import BACKOFF_BASE_S, DECIDE_EVERY_S
from hyperfleet.platform.urls import DEFAULT_STORAGE

pool_app = typer.Typer(
    no_args_is_help=True,
    help="Elastic pools: workers started by a batch scheduler as the queue grows.",
    rich_markup_mode=HELP_MARKUP,
)


@pool_app.command("slurm")
def slurm(
    max_workers: Annotated[int, typer.Option(help="Worker jobs alive at most.")],
    storage: Annotated[str, storage_option(STORAGE_HELP)] = DEFAULT_STORAGE,
    tracking_uri: Annotated[
        str | None, tracking_option("MLflow URI for sweeps whose file names none.")
    ] = None,
    min_workers: Annotated[
        int, typer.Option(help="Worker jobs kept up even with nothing queued.")
    ] = 0,
    idle: Annotated[str, typer.Option(help="A worker with nothing to run exits after.")] = "5m",
    sbatch_arg: Annotated[
        list[str] | None,
        typer.Option(help="An sbatch option for every job, e.g. --sbatch-arg=--gres=gpu:1."),
    ] = None,
    pool: Annotated[str, typer.Option(help="The workers' pool; sweeps may ask for one.")] = (
        "default"
    ),
    devices: Annotated[
        str, typer.Option(help="Each worker's --devices (cpu:N, cuda:0,1 or auto).")
    ] = "auto",
    start_timeout: Annotated[
        str, typer.Option(help="A job pending this long is cancelled and retried later.")
    ] = "10m",
    backoff: Annotated[
        str, typer.Option(help="Wait after a start failure; doubles with each in a row.")
    ] = f"{BACKOFF_BASE_S:g}s",
    every: Annotated[str, typer.Option(help="Time between decisions.")] = f"{DECIDE_EVERY_S:g}s",
    log_dir: Annotated[Path, typer.Option(help="Where the jobs' output goes.")] = Path(
        "hyperfleet-slurm"
    ),
    once: Annotated[bool, typer.Option("--once", help="One decision, then exit (cron).")] = False,
) -> None:
    """Submit Slurm jobs running `hyperfleet worker --exit-when-idle` as the queue needs
    them, never more than --max-workers alive; show them in `hyperfleet workers`. Slurm not
    answering is retried with backoff; SIGTERM or Ctrl-C cancels the jobs it submitted."""
    from hyperfleet.platform.elastic.pool import ElasticPool, PoolSettings, describe
    from hyperfleet.platform.elastic.slurm import Slurm
    from hyperfleet.platform.sweeps.preflight import check_urls

    def settings() -> PoolSettings:
        check_urls(storage, tracking_uri)
        if max_workers < 1:
            raise ConfigError(f"--max-workers: {max_workers}; give 1 or more")
        if not 0 <= min_workers <= max_workers:
            raise ConfigError(f"--min-workers: {min_workers}; give 0 to --max-workers")
        seconds = {
            flag: _duration(value, flag)
            for flag, value in (
                ("--idle", idle), ("--start-timeout", start_timeout), ("--backoff", backoff),
                ("--every", every),
            )
        }  # fmt: skip
        return PoolSettings(
            storage=storage, max_workers=max_workers, tracking_uri=tracking_uri, pool=pool,
            min_workers=min_workers, idle=seconds["--idle"] or 0.0, devices=devices,
            start_timeout=seconds["--start-timeout"] or 0.0,
            backoff=seconds["--backoff"] or 0.0,
        )  # fmt: skip

    chosen = _guard(settings)
    backend = Slurm(sbatch_args=sbatch_arg or (), log_dir=log_dir)
    elastic = _guard(lambda: ElasticPool(chosen, backend))

    def say(line: str) -> None:
        err.print(f"pool {chosen.pool}: {line}", markup=False, highlight=False, soft_wrap=True)

    try:
        if once:
            say(describe(_guard(elastic.step)))
            return
        stopped = threading.Event()
        from hyperfleet.platform.worker import draining_on_signals

        with draining_on_signals(stopped.set):
            _guard(
                lambda: elastic.run(
                    stopped.is_set, _duration(every, "--every") or DECIDE_EVERY_S, say
                )
            )
            # stopped by a signal: the jobs it submitted go too (their workers drain)
            _guard(lambda: elastic.release(say))
    finally:
        elastic.close()
