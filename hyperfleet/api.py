"""hyperfleet from Python: ``run``, ``submit`` and ``load`` a sweep, in a script or a notebook.

``config`` is what a sweep file holds, as a dict with the same schema or the path of the file;
``workload`` is a function of the trial context, a ``"package.module:function"`` string, or
None when the config names its own ``trial.workload``. A function the trial processes cannot
import (defined in ``__main__`` or a notebook cell, a lambda, a nested function) is shipped to
them by value (:mod:`hyperfleet.platform.sweeps.shipping`)::

    import hyperfleet

    def train(ctx):
        for step in range(1, ctx.max_steps + 1):
            ctx.report(step, {"loss": (ctx.params["x"] - 0.3) ** 2 + 1 / step})

    result = hyperfleet.run({
        "name": "quad", "objective": {"metric": "loss", "mode": "min"},
        "budget": {"trials": 8, "max_concurrent": 2},
        "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        "trial": {"steps": 5, "eval_every": 1, "resources": {"devices": 0}},
    }, train)
    result.best_params, result.trials   # a dict, a pandas DataFrame

The same path as the command line: validation (``platform.config.parse_sweep``) raises
:class:`~hyperfleet.errors.ConfigError` whose ``problems`` are the lines ``hyperfleet validate``
prints, and ``run`` is ``sweep run`` (``platform.sweeps.run.SweepRunner``): an interrupt
(Ctrl-C, Jupyter's stop button) requeues the running trials, then raises ``KeyboardInterrupt``;
running the same config again continues the sweep to its budget. Running it with a changed
function (or space) is refused with the ways on: a new name, ``resume=True`` (continue with the
new code) or ``overwrite=True`` (drop the stored sweep and start over).
This module imports the platform only when called, so ``import hyperfleet`` stays cheap.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hyperfleet.platform.config import SweepConfig
    from hyperfleet.platform.config.overrides import BudgetOverride
    from hyperfleet.platform.sweeps.outcome import SweepResult

__all__ = ["load", "run", "submit"]

Config = Mapping[str, Any] | str | Path
Workload = Callable[..., Any] | str | None


def _config(
    config: Config, workload: Workload, override: BudgetOverride | None = None
) -> tuple[SweepConfig, Path | None]:
    """The validated sweep config (``override``: a run's budget values in place of the
    config's) and the file it came from (None for a mapping)."""
    from hyperfleet.errors import ConfigError
    from hyperfleet.platform.config import read_yaml
    from hyperfleet.platform.config.overrides import BudgetOverride, parse_with
    from hyperfleet.platform.sweeps.shipping import with_workload

    if isinstance(config, (str, Path)):
        path: Path | None = Path(config)
        data = read_yaml(config)
    elif isinstance(config, Mapping):
        path, data = None, dict(config)
    else:
        raise ConfigError(
            f"config: expected a dict of the sweep file's settings or its path, "
            f"got a {type(config).__name__}"
        )
    return parse_with(with_workload(data, workload), override or BudgetOverride()), path


def _not_while_importing_main(call: str) -> None:
    """``HyperfleetError`` when a process multiprocessing started (an in-process trial
    worker) is importing the caller's script, as spawn and forkserver children do: a script
    that calls ``run`` at its top level would start a sweep in each of them."""
    import multiprocessing

    from hyperfleet.errors import HyperfleetError

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise HyperfleetError(
            f"hyperfleet.{call}: called while a worker process imports this script; put the "
            f'call under `if __name__ == "__main__":`'
        )


def _urls(cfg: SweepConfig, storage: str | None, tracking_uri: str | None) -> tuple[str, str]:
    from hyperfleet.platform.sweeps.run import default_urls

    default_storage, default_tracking = default_urls(cfg)
    return storage or default_storage, tracking_uri or default_tracking


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _both(trials: Any, line: Any) -> Any:
    """The controller's ``on_progress``: the trial lines first (they learn the best so far),
    then the progress line; None without progress."""
    if trials is None or line is None:
        return None

    def on_progress(p: Any) -> None:
        trials(p)
        line(p)

    return on_progress


def run(
    config: Config,
    workload: Workload = None,
    *,
    storage: str | None = None,
    tracking_uri: str | None = None,
    devices: str = "auto",
    progress: bool = True,
    trials: int | None = None,
    timeout: float | str | None = None,
    overwrite: bool = False,
    resume: bool = False,
) -> SweepResult:
    """Create the sweep (or continue it) and run it on this host until its budget is spent,
    as ``hyperfleet sweep run`` does; its :class:`SweepResult`.

    ``storage``/``tracking_uri`` override the config's (``--storage``, ``--tracking-uri``);
    ``devices``: ``auto``, ``cpu:N`` or ``cuda:0,1``; ``progress``: show a progress line;
    ``trials``/``timeout`` replace the config's ``budget.trials``/``budget.timeout`` for
    this run, and are stored with the sweep (``--trials``, ``--timeout``).
    A stored sweep of the name whose workload's code (or space) differs from this call's is
    refused with ``ConfigError``, unless ``resume=True`` (continue it, later trials running
    this code) or ``overwrite=True`` (drop it: its rows, files and MLflow runs, and start
    over; see :mod:`hyperfleet.platform.sweeps.replace`).
    Raises ``ConfigError`` before anything is written when the config is invalid,
    ``KeyboardInterrupt`` once an interrupt has requeued the running trials, and
    ``SweepStoppedError`` (its ``cause``: the failure line) when the sweep stopped before its
    budget because its first trials all failed alike (``budget.stop_after_alike_failures``)."""
    from hyperfleet.errors import SweepStoppedError
    from hyperfleet.platform.config.overrides import API_NAMES, budget_override
    from hyperfleet.platform.pool import parse_devices
    from hyperfleet.platform.storage.results import none_complete
    from hyperfleet.platform.sweeps.display import ProgressLine, TrialLines
    from hyperfleet.platform.sweeps.outcome import SweepResult
    from hyperfleet.platform.sweeps.preflight import check_urls
    from hyperfleet.platform.sweeps.replace import check_stored
    from hyperfleet.platform.sweeps.run import SweepRunner
    from hyperfleet.platform.tracking.client import check_env

    _not_while_importing_main("run")
    check_urls(storage, tracking_uri)
    override = budget_override(trials, timeout, API_NAMES)
    cfg, path = _config(config, workload, override)
    check_env()
    parse_devices(devices)
    storage_url, tracking = _urls(cfg, storage, tracking_uri)
    replace = check_stored(cfg, storage_url, overwrite=overwrite, resume=resume)
    # a line per ended trial, as `sweep run` prints them piped, and the count with the best
    trial_lines: TrialLines | None = None
    line: ProgressLine | None = None
    if progress:
        lines = trial_lines = TrialLines(cfg, storage_url, _stderr)
        line = ProgressLine(cfg.name, best=lambda: lines.best)
    runner = SweepRunner(
        cfg, storage_url, tracking, devices=devices, on_progress=_both(trial_lines, line),
        sweep_file=path, replace=replace,
    )  # fmt: skip
    if progress and override:
        _stderr(str(override.line()))
    try:
        summary = runner.run()
    except BaseException:
        if trial_lines is not None:
            trial_lines.close(show=False)
        raise
    if trial_lines is not None:
        trial_lines.close()
    result = SweepResult(name=cfg.name, storage=storage_url, summary=summary)
    if summary.interrupted:
        if line is not None:
            line.end("interrupted; running trials requeued")
        raise KeyboardInterrupt(
            f"sweep {cfg.name!r} interrupted: its running trials were requeued; run the same "
            f"config again to continue it"
        )
    if line is not None:
        line.end(repr(result))
    if summary.stopped is not None:  # its first trials all failed alike: name the cause
        assert summary.stop_cause is not None
        raise SweepStoppedError(f"sweep {cfg.name!r} {summary.stopped}", summary.stop_cause, result)
    failed = none_complete(summary)
    if failed is not None:  # as `sweep run` says it: how many failed, and the first one's why
        print(failed, file=sys.stderr, flush=True)
    return result


def submit(
    config: Config,
    workload: Workload = None,
    *,
    storage: str | None = None,
    tracking_uri: str | None = None,
    overwrite: bool = False,
    resume: bool = False,
) -> SweepResult:
    """Create the sweep (or update a stored one's budget) for workers to run
    (``hyperfleet worker --storage URL``), as ``hyperfleet sweep submit`` does, and return at
    once; the sweep's result so far. A function workload is stored with the sweep, so workers
    on other hosts run it without importing anything of the caller's. ``overwrite`` and
    ``resume``: as for :func:`run`."""
    from hyperfleet.platform.sweeps.outcome import SweepResult
    from hyperfleet.platform.sweeps.preflight import check_urls
    from hyperfleet.platform.sweeps.replace import check_stored
    from hyperfleet.platform.sweeps.run import submit_sweep

    _not_while_importing_main("submit")
    check_urls(storage, tracking_uri)
    cfg, path = _config(config, workload)
    storage_url, tracking = _urls(cfg, storage, tracking_uri)
    replace = check_stored(cfg, storage_url, overwrite=overwrite, resume=resume)
    summary = submit_sweep(cfg, storage_url, tracking, sweep_file=path, replace=replace)
    return SweepResult(name=cfg.name, storage=storage_url, summary=summary)


def load(name: str, storage: str | None = None) -> SweepResult:
    """The result of the stored sweep ``name`` (read-only; running or ended). ``storage``:
    its storage URL, by default ``hyperfleet-runs/hyperfleet.db`` in the working directory.

    The result is the sweep's handle too: ``load(name).pause()``, ``.resume()`` and ``.stop()``
    do what ``hyperfleet sweep pause``, ``resume`` and ``stop`` do, ``.status`` reads its
    status."""
    from hyperfleet.platform.sweeps.outcome import read_result
    from hyperfleet.platform.sweeps.preflight import check_urls
    from hyperfleet.platform.urls import DEFAULT_STORAGE

    check_urls(storage, None)
    return read_result(storage or DEFAULT_STORAGE, name)
