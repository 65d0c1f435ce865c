"""From a suggestion to a trial ready to launch: knobs applied, params merged, its MLflow child
run, and the :class:`~hyperfleet.spec.wire.TrialSpec` its processes will read.

A suggestion may sample system knobs (space keys ``trial.*``): they are applied to a copy of
the trial config, and a combination that breaks a layout rule is reported as ``problems``
(the controller records that trial as FAIL with the reason instead of launching it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config import apply_overrides, layout_problems, split_params
from hyperfleet.platform.controller.session import SweepSession
from hyperfleet.platform.credentials import public
from hyperfleet.platform.schedulers import Suggestion
from hyperfleet.platform.storage import TrialRecord
from hyperfleet.platform.tracking import ChildRun
from hyperfleet.spec.trial import TrialConfig
from hyperfleet.spec.wire import TrialSpec, trial_dir
from hyperfleet.spec.workloads import merged_params


@dataclass(frozen=True)
class PreparedTrial:
    number: int
    spec: TrialSpec
    stored_params: dict[str, Any]  # what the trial's row records: params and sampled knobs
    problems: list[str]  # a layout rule the sampled knobs break (the trial is not launched)
    prior: TrialRecord | None  # the trial's row before this launch (a resumed trial)


def trial_config(session: SweepSession, knobs: dict[str, Any]) -> tuple[TrialConfig, list[str]]:
    """The trial config with the sampled system knobs applied, and its layout problems."""
    cfg = session.cfg
    if not knobs:
        return cfg.trial, []
    try:
        trial = apply_overrides(cfg.trial, knobs)
    except ConfigError as exc:
        return cfg.trial, exc.problems
    return trial, layout_problems(cfg.model_copy(update={"trial": trial}))


def _child_run(
    session: SweepSession,
    s: Suggestion,
    trial: TrialConfig,
    params: dict[str, Any],
    knobs: dict[str, Any],
    prior: TrialRecord | None,
) -> str:
    """The trial's MLflow run: named ``trial-0007 lr=... hidden=...``, its workload params and
    sampled knobs as params, the resolved trial config as an artifact; resumed if it has one."""
    prior_id = prior.mlflow_run_id if prior is not None else None
    run = ChildRun(
        sweep=session.name,
        parent_id=session.parent_run_id,
        number=s.trial_number,
        params=params,
        sampled=dict(s.params),
        knobs=knobs,
        config=trial.model_dump(mode="json"),
        tags={} if prior_id else session.scheduler.suggestion_info(s.trial_number),
        prior_run_id=prior_id,
        population=session.cfg.is_population,
    )
    return session.tracker.child(run)


def prepare(session: SweepSession, s: Suggestion) -> PreparedTrial:
    """Everything the controller needs to launch (or reject) the suggested trial."""
    number = s.trial_number
    prior = session.storage.trials.get(session.name, number)
    sampled, knobs = split_params(s.params)
    trial, problems = trial_config(session, knobs)
    searched = sorted(session.cfg.dims)
    params = merged_params(trial.workload, trial.params, sampled, searched=searched)
    run_id = _child_run(session, s, trial, params, knobs, prior)
    through = prior.last_step if prior else None
    if s.restore is not None:  # continues from another checkpoint: later steps are new
        through = s.restore.step
    spec = TrialSpec(
        sweep=session.name,
        number=number,
        trial=trial,
        params=params,
        workdir=str(session.workdir),
        trial_dir=str(trial_dir(session.workdir, session.name, number)),
        replica=session.replica(),
        restore=s.restore,
        reported_through=through,
        storage=session.storage.url,  # both without a password (see .credentials)
        tracking_uri=None if session.tracking_uri is None else public(session.tracking_uri),
        run_id=run_id,
        searched=searched,
        sweep_config=session.cfg.model_dump(mode="json"),
    )
    return PreparedTrial(number, spec, {**params, **knobs}, problems, prior)
