"""``sweep stop``, ``sweep pause`` and ``sweep resume``, and the same on ``hyperfleet.load(...)``.

Each is a change of the sweep's status in storage (:mod:`hyperfleet.platform.storage.lifecycle`),
checked first against the status it finds: a sweep that is not there (with the closest stored
name), a sweep that is done or already in the asked status, a sweep resumed that is not paused
are refused with one line that names the problem and the fix (``ConfigError``), and nothing is
written. The workers serving the sweep do the rest on their loop
(:mod:`hyperfleet.platform.controller.lifecycle`): a paused sweep's running trials go back to the
queue and no trial of it is claimed; a stopped sweep's running trials end and it is never served
again. A stopped sweep whose trials no worker runs (submitted and not opened yet, interrupted)
has its MLflow run ended here.

``sweep run`` and ``sweep submit`` refuse a paused or stopped sweep (:func:`check_runnable`):
a paused one is resumed, a stopped one is run under a new name.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from hyperfleet.errors import ConfigError
from hyperfleet.platform.credentials import masked
from hyperfleet.platform.storage import Storage, SweepRecord
from hyperfleet.platform.storage.results import no_sweep
from hyperfleet.spec.states import SweepStatus, TrialState

logger = logging.getLogger(__name__)

__all__ = ["Changed", "check_runnable", "pause", "resume", "stop"]

S = SweepStatus
STOPPABLE = (S.CREATED, S.SUBMITTED, S.RUNNING, S.INTERRUPTED, S.PAUSED)
PAUSABLE = (S.CREATED, S.SUBMITTED, S.RUNNING, S.INTERRUPTED)


@dataclass(frozen=True)
class Changed:
    """A status change made: the sweep, its status now, its trials running as it was made."""

    name: str
    status: SweepStatus
    running: int

    def line(self, storage_url: str) -> str:
        """What the command prints."""
        url = masked(storage_url)
        if self.status is S.STOPPED:
            return (
                f"sweep {self.name!r} stopped: its {self.running} running trial(s) end within "
                f"seconds (FAIL, 'stopped'; reports and checkpoints kept); no worker runs it again"
            )
        if self.status is S.PAUSED:
            return (
                f"sweep {self.name!r} paused: its {self.running} running trial(s) go back to the "
                f"queue within seconds and no trial is claimed; continue it with: hyperfleet "
                f"sweep resume {self.name} --storage {url}"
            )
        return (
            f"sweep {self.name!r} resumed: workers of {url} claim its trials again, the paused "
            f"ones from their checkpoints"
        )


def _stored(storage: Storage, name: str, url: str) -> SweepRecord:
    row = storage.sweeps.get(name)
    if row is None:
        known = [r.name for r in storage.sweeps.all()]
        raise ConfigError(no_sweep(name, known, masked(url)))
    return row


def _refusal(name: str, status: SweepStatus, verb: str, url: str) -> str:
    """Why sweep ``name`` in ``status`` cannot be ``verb``-ed (stop, pause, resume), and what to
    do instead."""
    where = f"--storage {masked(url)}"
    if status is S.DONE:
        return (
            f"sweep: {name!r} is done (it ran its budget); there is nothing to {verb}: see its "
            f"results with hyperfleet sweep status {name} {where}"
        )
    if status is S.STOPPED:
        return (
            f"sweep: {name!r} was stopped; a stopped sweep is not run again: to go on "
            f"searching, run its file under a new name (name:)"
        )
    if verb == "pause":  # paused already
        return f"sweep: {name!r} is already paused; continue it with hyperfleet sweep resume {name}"
    return (
        f"sweep: {name!r} is {status}, not paused; only a paused sweep resumes (to continue an "
        f"interrupted one, run hyperfleet sweep run with its file again)"
    )


def _change(
    url: str, name: str, to: SweepStatus, allowed: Iterable[SweepStatus], verb: str
) -> Changed:
    """Sweep ``name``'s status set to ``to`` from one of ``allowed``, else ``ConfigError``."""
    allowed = tuple(allowed)
    reader = Storage.open_readonly(url)  # a mistyped path or name creates nothing
    try:
        row = _stored(reader, name, url)
    finally:
        reader.close()
    if row.status not in allowed:
        raise ConfigError(_refusal(name, row.status, verb, url))
    storage = Storage(url, create=False)
    try:
        if not storage.lifecycle.change(name, to, allowed):  # changed since it was read
            now = storage.lifecycle.status(name) or row.status
            raise ConfigError(_refusal(name, now, verb, url))
        running = len(storage.trials.of(name, TrialState.RUNNING))
    finally:
        storage.close()
    logger.info("sweep %s: %s -> %s", name, row.status, to)
    return Changed(name, to, running)


def stop(storage_url: str, name: str) -> Changed:
    """Stop sweep ``name`` (see the module docstring): STOPPED for every worker."""
    changed = _change(storage_url, name, S.STOPPED, STOPPABLE, "stop")
    if changed.running == 0:
        _end_run(storage_url, name)
    return changed


def pause(storage_url: str, name: str) -> Changed:
    """Pause sweep ``name``: no trial of it is claimed until :func:`resume`."""
    return _change(storage_url, name, S.PAUSED, PAUSABLE, "pause")


def resume(storage_url: str, name: str) -> Changed:
    """Resume paused sweep ``name``: handed to the workers again (``submitted``; the first
    worker to open it marks it ``running``), its trials claimed, the paused ones resumed from
    their checkpoints."""
    return _change(storage_url, name, S.SUBMITTED, (S.PAUSED,), "resume")


def _end_run(storage_url: str, name: str) -> None:
    """The MLflow run of stopped sweep ``name`` ended KILLED (best effort: a warning when
    MLflow cannot be written now), for a sweep whose trials no worker runs."""
    from hyperfleet.platform.tracking.marks import end_stopped

    storage = Storage.open_readonly(storage_url)
    try:
        row = storage.sweeps.get(name)
    finally:
        storage.close()
    if row is None or row.config is None or row.mlflow_parent_run_id is None:
        return
    try:
        end_stopped(row.config.tracking_uri, row.mlflow_parent_run_id)
    except Exception as exc:  # noqa: BLE001 - MLflow's side is best effort; storage says it
        logger.warning("sweep %s: its MLflow run could not be ended as stopped: %s", name, exc)


def check_runnable(row: SweepRecord | None) -> None:
    """``ConfigError`` when the stored sweep is paused or stopped: ``sweep run`` and ``sweep
    submit`` neither undo a user's pause nor run a stopped sweep again."""
    if row is None:
        return
    if row.status is S.PAUSED:
        raise ConfigError(
            f"sweep: {row.name!r} is paused; resume it first: hyperfleet sweep resume {row.name}"
        )
    if row.status is S.STOPPED:
        raise ConfigError(_refusal(row.name, row.status, "run", ""))
