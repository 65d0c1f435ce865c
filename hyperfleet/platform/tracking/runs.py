"""Writing runs: the sweep's experiment, finding a trial's run by its tags, and a trial run's end.

Both compare with what MLflow already holds and write only the difference, so writing them
again (a retry after a lost answer, a continued sweep, ``hyperfleet mlflow sync``) adds nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hyperfleet.errors import ConfigError
from hyperfleet.platform.credentials import mask_text
from hyperfleet.platform.tracking.artifacts import (
    ERROR_FILE,
    failure_note,
    line_tail,
    log_trial_files,
)
from hyperfleet.platform.tracking.client import is_transient, log_batches, unreachable
from hyperfleet.platform.tracking.records import (
    KIND,
    KIND_TAG,
    NOTE_TAG,
    RUN_RUNNING,
    STATE_TAG,
    STATUS,
    tracked_state,
)
from hyperfleet.platform.tracking.spool import Spool
from hyperfleet.spec.states import TrialState

PRUNED_SUFFIX = " (pruned)"  # a pruned trial's run name ends with it: MLflow shows it FINISHED
RUN_NAME_TAG = "mlflow.runName"  # setting it renames the run
ERROR_TAG_LIMIT = 4000

EXPERIMENT_NOTE = (
    "Sweeps run by **hyperfleet**: one run per sweep (its search space, scheduler and best "
    "trial), with a nested run per trial (its metric curves, system metrics, config, log and, "
    "for the best trial, its model)."
)


def ensure_experiment(client: Any, name: str, location: str | None) -> str:
    """The experiment's id, created if needed; tagged for MLflow's model-training view."""
    from mlflow.exceptions import MlflowException

    exp = client.get_experiment_by_name(name)
    if exp is None:
        try:
            tags = {KIND_TAG: KIND, NOTE_TAG: EXPERIMENT_NOTE}
            return str(client.create_experiment(name, artifact_location=location, tags=tags))
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            exp = client.get_experiment_by_name(name)  # another controller created it
    if exp.lifecycle_stage == "deleted":
        raise ConfigError(
            f"tracking.experiment: {name!r} is deleted in MLflow; restore it "
            f"(mlflow experiments restore --experiment-id {exp.experiment_id}) or use another name"
        )
    if KIND_TAG not in exp.tags:  # an experiment made before: open it as model training too
        client.set_experiment_tag(exp.experiment_id, KIND_TAG, KIND)
    return str(exp.experiment_id)


def find_trial_run(
    client: Any, experiment_id: str | None, parent_id: str | None, sweep: str, number: int
) -> Any:
    """Trial ``number``'s run under the sweep's run ``parent_id``, found by its tags; None when
    there is none."""
    found = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}' "
        f"and tags.`hyperfleet.sweep` = '{sweep}' "
        f"and tags.`hyperfleet.trial` = '{number}'",
        max_results=5,
    )
    return found[0] if found else None


def check_run(client: Any, uri: str, sweep: str, run_id: str) -> None:
    """A continued sweep's run ``run_id`` is in the store at ``uri``: else (another host's
    store, another server) one line, before anything is written there."""
    try:
        client.get_run(run_id)
    except Exception as exc:
        if is_transient(exc):
            raise unreachable(uri, exc) from None
        if getattr(exc, "error_code", "") != "RESOURCE_DOES_NOT_EXIST":
            raise
        raise ConfigError(
            f"tracking.uri: {uri} does not hold sweep {sweep!r}'s MLflow run {run_id}; "
            f"give the tracking store the sweep was submitted with"
        ) from None


def end_trial_run(
    client: Any,
    run_id: str,
    state: str,
    final: Mapping[str, float],
    error: str,
    now: int,
    trial_dir: Path | None,
    spool: Spool | None = None,
    fresh: bool = False,
) -> int:
    """A trial run's end in hyperfleet ``state`` at ``now`` (ms): the trial's last reports
    (what its ``spool`` still holds), its state tag, error, ``final/`` metrics,
    ``pruned_at_step``/``stopped_at_step`` (the last report's step), its files and its
    status, each written only if the run does not show it yet; the points shipped from the
    spool. ``fresh``: the caller created the run RUNNING and nothing has ended it since, so
    what it holds of these is known without reading it."""
    from mlflow.entities import Metric

    last_step = -1 if spool is None else spool.through("report")
    run = None
    if fresh:
        have: Mapping[str, float] = {}
        held_tags, held_status = {STATE_TAG: TrialState.RUNNING}, RUN_RUNNING
    else:
        run = client.get_run(run_id)
        have, held_tags, held_status = run.data.metrics, run.data.tags, run.info.status
    tags = {STATE_TAG: tracked_state(state)}
    if state == TrialState.FAIL and error:
        tags["hyperfleet.error"] = line_tail(error, ERROR_TAG_LIMIT)
        tags[NOTE_TAG] = failure_note(error, trial_dir)
    if tracked_state(state) == TrialState.PRUNED:  # the runs table shows the name, not the tag
        name = (run or client.get_run(run_id)).info.run_name or ""
        if not name.endswith(PRUNED_SUFFIX):
            tags[RUN_NAME_TAG] = name + PRUNED_SUFFIX
    tags = {k: v for k, v in tags.items() if held_tags.get(k) != v}
    metrics = [
        Metric(f"final/{k}", float(v), now, 0)
        for k, v in final.items()
        if have.get(f"final/{k}") != float(v)
    ]
    stops: dict[str, str] = {
        TrialState.PRUNED: "pruned_at_step",
        TrialState.WAITING: "stopped_at_step",
    }
    key = stops.get(tracked_state(state))
    if key is not None and last_step >= 0 and have.get(key) != float(last_step):
        metrics.append(Metric(key, float(last_step), now, last_step))
    status = STATUS.get(state, "FAILED")
    shipped = 0
    if spool is not None:  # the reports first, the end with their last request
        points = [(m.key, m.value, m.timestamp, m.step) for m in metrics]
        shipped = spool.ship(client, run_id, last=(points, tags))
    elif tags or metrics:
        log_batches(client, run_id, tags=tags, metrics=metrics)
    if trial_dir is not None and (tags or held_status != status):  # not if done before
        log_trial_files(client, run_id, trial_dir)
    if NOTE_TAG in tags:  # the whole error, which the description shows the end of
        client.log_text(run_id, mask_text(error), ERROR_FILE)
    if held_status != status:
        client.set_terminated(run_id, status, end_time=now)
    return shipped
