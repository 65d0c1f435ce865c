"""The best trial's model in MLflow, logged by a short subprocess when the sweep closes.

Building a model needs torch, which the controller never imports; so the controller runs
``python -m hyperfleet.trials.export`` on the best trial's ``spec.json``. That process finds the
workload's export hook (:mod:`hyperfleet.trials.export`), rebuilds the model from the trial's
last checkpoint, logs it with ``mlflow.pytorch.log_model`` (input example, signature) to the
trial's run, registers it when ``tracking.register_model`` names a model, and tags the run
``hyperfleet.model`` with the model's URI. A run already tagged is not logged again, so closing
a sweep twice logs one model; ``tracking.log_model: false`` logs none. A model that cannot be
logged (no hook, no checkpoint, an error) is a warning, never a failed sweep; the subprocess's
output is kept in the trial's ``export.log``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Protocol

from hyperfleet.errors import ConfigError
from hyperfleet.platform.credentials import reveal
from hyperfleet.platform.tracking.base import SweepView
from hyperfleet.platform.tracking.marks import ParentRun, marked
from hyperfleet.platform.tracking.records import BEST_TAG, MODEL_TAG
from hyperfleet.spec.wire import SPEC_FILE
from hyperfleet.spec.workloads import BUILTIN, unpickle_workload

logger = logging.getLogger(__name__)


class ModelSource(ParentRun, Protocol):
    """What :func:`export_best` reads of the sweep's MLflow tracker
    (:class:`~.tracker.SweepTracker`, which calls it and which it therefore does not import)."""

    @property
    def log_model(self) -> bool: ...
    @property
    def register_model(self) -> str | None: ...
    @property
    def uri(self) -> str: ...
    def trial_dir(self, number: int) -> Path | None: ...


EXPORT_TIMEOUT_S = 900
NO_HOOK = 3  # the export process's exit status when the workload has no export hook


def _module_file(module: str) -> Path | None:
    """Where ``module``'s source is, found without importing anything: below the working
    directory (where trials find ``examples.x``-style modules), else through the import
    system's finders for its top-level package (an editable install is found only there)."""
    top, *rest = module.split(".")
    roots = [Path.cwd()]
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: found, not imported
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        roots += [Path(p).parent for p in spec.submodule_search_locations]
    elif spec is not None and spec.origin and not rest:
        return Path(spec.origin)
    for root in roots:
        base = root.joinpath(top, *rest)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def may_export(workload: str | None, code: str | None = None) -> bool:
    """False when the workload surely has no export hook (saves starting torch for nothing):
    a custom workload whose module's source never mentions ``hyperfleet_export``, one
    shipped by value (``code``) without a ``hyperfleet_export`` attribute, or none (a script
    trial's program, ``trial.command``)."""
    if not workload:
        return False
    if code is not None:
        try:
            fn = unpickle_workload(code)
        except ConfigError:
            return False  # its trials could not have run it either
        return callable(getattr(fn, "hyperfleet_export", None))
    if workload in BUILTIN or ":" not in workload:
        return True
    path = _module_file(workload.partition(":")[0])
    try:
        return path is None or "hyperfleet_export" in path.read_text(errors="replace")
    except OSError:
        return True


def export_best(tracker: ModelSource, view: SweepView) -> None:
    """Log the best trial's model (see the module docstring); never raises."""
    tag, numbers = marked(view)
    if tag != BEST_TAG or not numbers or not tracker.log_model:
        return
    number = numbers[0]
    stored = next((t.mlflow_run_id for t in view.trials if t.number == number), None)
    try:
        run_id = tracker.run_id_of(number, stored)
        if run_id is None or MODEL_TAG in tracker.client.get_run(run_id).data.tags:
            return
    except Exception:
        logger.warning("could not check the best trial's run for a model", exc_info=True)
        return
    workload = view.config.trial.workload
    if not may_export(workload, view.config.trial.code):
        logger.info("workload %s has no export hook: no model logged", workload or "(a program)")
        return
    directory = tracker.trial_dir(number)
    if directory is None or not (directory / SPEC_FILE).is_file():
        logger.warning("trial %d has no spec.json; its model is not logged", number)
        return
    params = next((dict(t.params) for t in view.trials if t.number == number), {})
    cmd = [
        sys.executable,
        "-m",
        "hyperfleet.trials.export",
        str(directory / SPEC_FILE),
        "--run-id",
        run_id,
        "--params",
        json.dumps(params, default=str),
    ]
    if tracker.register_model:
        cmd += ["--register", tracker.register_model]
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": reveal(tracker.uri),  # the environment: no command line
        "MLFLOW_EXPERIMENT_ID": str(tracker.experiment_id),
        "CUDA_VISIBLE_DEVICES": "",  # the model is rebuilt on the CPU
    }
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, env=env, timeout=EXPORT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        logger.warning("the best trial's model was not logged: %s", exc)
        return
    (directory / "export.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode == NO_HOOK:
        logger.info("trial %d's workload has no export hook: no model logged", number)
    elif proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        logger.warning(
            "the best trial's model was not logged (%s; see %s)", tail[0], directory / "export.log"
        )
    else:
        logger.info("trial %d's model logged to MLflow", number)
