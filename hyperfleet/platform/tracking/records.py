"""What a sweep's MLflow runs say, as plain data: names, params, states, the best and Pareto marks.

Pure functions of the sweep's config and its trials (no MLflow here); the tracker writes what
they return. The choices they encode:

* **Run names.** ``trial-0007 lr=0.0123 hidden=48``: the number as in the trial's directory,
  then the sampled values (4 significant digits), so chart legends and the runs table say
  which configuration a curve is. PBT members, whose hyperparameters change during the run,
  are named ``trial-0007`` only.
* **Params.** A trial run's params are its workload params (the sampled ones and the fixed
  ones, defaults included: a handful) and its sampled system knobs (``trial.precision``); the
  full resolved trial configuration is one artifact, ``config.json``, not 70 params. The
  sweep's run has the search space (``space.lr = float [0.0001, 0.1] log``), the objective,
  the scheduler, the pruner, the budget and the workload.
* **States.** MLflow's run status has five values and its UI draws FAILED and KILLED with the
  same red cross, so a pruned trial ends FINISHED (it did what was asked of it), a trial
  stopped to be resumed later (interrupted, or paused by PBT) ends SCHEDULED (a clock: it will
  run again), and a failed one FAILED. The ``hyperfleet.state`` tag says which hyperfleet
  state it is (COMPLETE, PRUNED, FAIL, WAITING, RUNNING); a pruned trial has the metric
  ``pruned_at_step``, a stopped one ``stopped_at_step`` (one point per stop). A sweep a user
  stopped (``sweep stop``) ends KILLED, its ``hyperfleet.state`` STOPPED; the trials it ran
  then end FAIL with the error :data:`STOPPED_ERROR` (the ``hyperfleet.error`` tag).
* **The best trial.** Its run is tagged ``hyperfleet.best = true``; the sweep's run has
  ``best/<metric>``, the best value so far after each completed trial (step k: the k-th
  trial to complete), so it draws a best-so-far curve. With several objectives the runs on
  the Pareto front are tagged ``hyperfleet.pareto = true`` and the sweep's run has
  ``pareto/size`` per completed trial instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.urls import mlflow_runs_anchor
from hyperfleet.spec.states import TrialState

STATUS: dict[str, str] = {  # hyperfleet state -> MLflow run status
    TrialState.COMPLETE: "FINISHED",
    TrialState.PRUNED: "FINISHED",
    TrialState.FAIL: "FAILED",
    TrialState.WAITING: "SCHEDULED",
    TrialState.PAUSED: "SCHEDULED",
    TrialState.RUNNING: TrialState.RUNNING.value,  # MLflow spells it the same
}
RUN_RUNNING = STATUS[TrialState.RUNNING]
"""MLflow's status of a run at work."""
STATE_TAG = "hyperfleet.state"
STOPPED_TAG = "STOPPED"
"""The sweep run's ``hyperfleet.state`` once a user stopped the sweep (its status KILLED)."""
STOPPED_NOTE = "Stopped (`hyperfleet sweep stop`): its running trials ended; it is not run again."
STOPPED_ERROR = "stopped with its sweep (hyperfleet sweep stop)"
"""A trial's error, and its run's ``hyperfleet.error`` tag, when a user stopped its sweep while
it ran: it ends FAIL (not retried), its reports and checkpoints kept."""
BEST_TAG = "hyperfleet.best"
PARETO_TAG = "hyperfleet.pareto"
MODEL_TAG = "hyperfleet.model"
KIND_TAG = "mlflow.experimentKind"
KIND = "custom_model_development"  # MLflow 3 opens the model-training view, not GenAI's
NOTE_TAG = "mlflow.note.content"  # the description MLflow shows on a run's or experiment's page
_PARAM_LIMIT = 6000
_NAME_LIMIT = 250


def tracked_state(state: str) -> str:
    """hyperfleet's state for the ``hyperfleet.state`` tag (PAUSED and WAITING both wait)."""
    return TrialState.WAITING if state == TrialState.PAUSED else state


def fmt(value: Any) -> str:
    """A value as a name or param shows it: floats with 4 significant digits."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def run_name(number: int, sampled: Mapping[str, Any] | None = None) -> str:
    """``trial-0007 lr=0.0123 hidden=48`` (see the module docstring)."""
    name = f"trial-{number:04d}"
    for key, value in (sampled or {}).items():
        part = f" {key.removeprefix('trial.')}={fmt(value)}"
        if len(name) + len(part) > _NAME_LIMIT:
            return name + " ..."
        name += part
    return name


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = str(value)[:_PARAM_LIMIT]


def flatten_params(params: Mapping[str, Any]) -> dict[str, str]:
    """Nested mappings as dotted keys with string values (MLflow params)."""
    out: dict[str, str] = {}
    _flatten("", params, out)
    return out


def child_params(params: Mapping[str, Any], knobs: Mapping[str, Any]) -> dict[str, str]:
    """A trial run's params: workload params and sampled system knobs."""
    out = {
        str(k): (json.dumps(v) if isinstance(v, (list, dict)) else str(v))
        for k, v in params.items()
    }
    out.update({k: str(v) for k, v in knobs.items()})
    return {k: v[:_PARAM_LIMIT] for k, v in out.items()}


def describe_space(spec: Mapping[str, Any]) -> str:
    """``float [0.0001, 0.1] log``, ``int [16, 256] step 16``, ``one of [relu, gelu]``."""
    kind = spec.get("type")
    if kind == "categorical":
        return "one of [" + ", ".join(fmt(c) for c in spec.get("choices", [])) + "]"
    text = f"{kind} [{fmt(spec.get('low'))}, {fmt(spec.get('high'))}]"
    if spec.get("log"):
        text += " log"
    step = spec.get("step")
    if step not in (None, 1):
        text += f" step {fmt(step)}"
    return text


def _section(name: str, data: Mapping[str, Any] | None, out: dict[str, str]) -> None:
    if not data:
        return
    out[name] = str(data.get("type", ""))
    for key, value in data.items():
        if key == "type" or value is None:
            continue
        out[f"{name}.{key}"] = json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def objectives(config: SweepConfig) -> list[tuple[str, str]]:
    """``(metric, mode)`` of each objective of a sweep config."""
    return [(o.metric, o.mode) for o in config.all_objectives]


def parent_params(config: SweepConfig) -> dict[str, str]:
    """The sweep run's params (see the module docstring)."""
    trial = config.trial
    out = {
        "objective": ", ".join(f"{m} ({mode})" for m, mode in objectives(config)),
        "workload": str(trial.workload),
        "trial.steps": str(trial.steps),
        "trial.devices": str(trial.resources.devices),
    }
    _section("scheduler", config.scheduler.model_dump(mode="json"), out)
    _section("pruner", config.pruner.model_dump(mode="json"), out)
    for key, value in config.budget.model_dump(mode="json").items():
        if value is not None:
            out[f"budget.{key}"] = str(value)
    for name, spec in config.space.items():
        out[f"space.{name}"] = describe_space(spec.model_dump(mode="json"))
    for name, value in trial.params.items():
        out[f"fixed.{name}"] = str(value)
    return {k: v[:_PARAM_LIMIT] for k, v in out.items()}


# -- the best trial and the Pareto front ----------------------------------------------------


@dataclass(frozen=True)
class Done:
    """A completed trial as the marks need it."""

    number: int
    values: Sequence[float]
    ended_at: float  # seconds since the epoch


@dataclass(frozen=True)
class SeriesPoint:
    key: str
    value: float
    timestamp: int  # ms
    step: int


def _key(values: Sequence[float], modes: Sequence[str]) -> list[float]:
    return [-v if m == "max" else v for v, m in zip(values, modes, strict=True)]


def _dominates(a: list[float], b: list[float]) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True)) and a != b


def pareto(done: Iterable[Done], modes: Sequence[str]) -> list[int]:
    """Numbers of the completed trials no other completed trial dominates."""
    keyed = [(d.number, _key(d.values, modes)) for d in done]
    return [n for n, k in keyed if not any(_dominates(o, k) for _, o in keyed)]


def best(done: Iterable[Done], modes: Sequence[str]) -> Done | None:
    """The best completed trial of a single-objective sweep (ties: the earlier one)."""
    if len(modes) != 1:
        return None
    ranked = sorted(done, key=lambda d: (_key(d.values, modes), d.ended_at, d.number))
    return ranked[0] if ranked else None


def parent_series(
    done: Sequence[Done], metrics: Sequence[str], modes: Sequence[str]
) -> list[SeriesPoint]:
    """``best/<metric>`` (one objective) or ``pareto/size`` after each completed trial."""
    ordered = sorted(done, key=lambda d: (d.ended_at, d.number))
    points = []
    for k, d in enumerate(ordered, start=1):
        ts = int(d.ended_at * 1000)
        if len(metrics) == 1:
            value = best(ordered[:k], modes)
            assert value is not None
            points.append(SeriesPoint(f"best/{metrics[0]}", float(value.values[0]), ts, k))
        else:
            points.append(SeriesPoint("pareto/size", float(len(pareto(ordered[:k], modes))), ts, k))
    return points


def state_counts(states: Iterable[str]) -> dict[str, float]:
    """``trials/<state>`` metrics of the sweep's run."""
    shown = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL, TrialState.WAITING)
    counts: dict[str, int] = dict.fromkeys(shown, 0)
    for state in states:
        key = tracked_state(state)
        counts[key] = counts.get(key, 0) + 1
    return {f"trials/{k.lower()}": float(v) for k, v in counts.items() if k != TrialState.RUNNING}


def sweep_note(
    name: str,
    config: SweepConfig,
    counts: Mapping[str, float],
    marked: str,
    interrupted: bool,
    experiment_id: str | None = None,
) -> str:
    """The sweep run's description (markdown), shown on its page in MLflow; with
    ``experiment_id``, it links to the trials' runs table (relative: whatever address the UI
    is served at)."""
    done = ", ".join(f"{int(v)} {k.split('/')[1]}" for k, v in counts.items() if v)
    lines = [
        f"**hyperfleet sweep `{name}`**: {config.scheduler.type} over {len(config.space)} "
        f"parameters, workload `{config.trial.workload}`.",
        "",
        f"Trials: {done or 'none yet'}. {marked}",
    ]
    if experiment_id:
        lines += ["", f"[The trials' runs]({mlflow_runs_anchor(experiment_id)})"]
    if interrupted:
        lines += ["", "Interrupted: run the same `hyperfleet sweep run` again to continue."]
    return "\n".join(lines)
