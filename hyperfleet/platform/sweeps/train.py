"""``hyperfleet train``: one run of a sweep file's trial configuration, no search, no tracking.

Searched parameters take the workload's default, else a representative value of their range
(the geometric middle of a log range, the middle of a linear one, the first choice);
``--param NAME=VALUE`` overrides any of them. The trial runs under torchrun exactly as in a
sweep, with its output on this terminal and its metrics printed at every report.
"""

from __future__ import annotations

import json
import math
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config import CategoricalParam, IntParam, ParamSpec, SweepConfig, walk
from hyperfleet.platform.launcher.torchrun import torchrun_command, trial_env
from hyperfleet.platform.pool import LocalPool
from hyperfleet.platform.sweeps.enqueue import value_problem
from hyperfleet.spec.wire import SPEC_FILE, TrialSpec
from hyperfleet.spec.workloads import declared_params, merged_params


def representative(spec: ParamSpec) -> Any:
    if isinstance(spec, CategoricalParam):
        return spec.values[0]
    mid = math.sqrt(spec.low * spec.high) if spec.log else (spec.low + spec.high) / 2
    return round(mid) if isinstance(spec, IntParam) else float(mid)


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise ConfigError(f"--param: {item!r} is not NAME=VALUE; e.g. --param lr=0.01")
        try:
            parsed[name] = json.loads(raw)
        except json.JSONDecodeError:
            parsed[name] = raw
    return parsed


def single_params(cfg: SweepConfig, overrides: dict[str, Any]) -> dict[str, Any]:
    dims = cfg.dims
    _refuse([value_problem(f"--param {n}", dims[n], v) for n, v in overrides.items() if n in dims])
    defaults = declared_params(cfg.trial.workload) or {}
    # the branches the overrides choose, else each categorical's first choice
    opened = walk(
        cfg.space, lambda name, spec: overrides[name] if name in overrides else representative(spec)
    )
    searched = {n: v for n, v in opened.items() if n not in defaults}
    params = merged_params(cfg.trial.workload, cfg.trial.params, searched)
    known = set(params) | set(cfg.dims)
    unknown = sorted(set(overrides) - known) if defaults else []
    if unknown:
        raise ConfigError(
            f"--param: unknown parameter {', '.join(unknown)}; expected one of "
            f"{', '.join(sorted(known))}"
        )
    _refuse([_like_default(n, params[n], v) for n, v in overrides.items() if n not in dims])
    params.update(overrides)
    return params


def _like_default(name: str, default: Any, value: Any) -> str | None:
    """The line refusing ``value`` for a fixed param whose default is a number or a bool of
    another type than ``value`` (``--param batch_size=big``), else None."""
    if default is None or isinstance(default, str):
        return None
    if isinstance(default, bool):
        fits = isinstance(value, bool)
        kind = "a bool (true or false)"
    elif isinstance(default, (int, float)):
        fits = isinstance(value, (int, float)) and not isinstance(value, bool)
        fits = fits and (isinstance(default, float) or value == int(value))
        kind = "a float" if isinstance(default, float) else "an int"
    else:
        return None
    if fits:
        return None
    return f"--param {name}: {value!r} is not {kind}; expected {kind} like its default {default!r}"


def _refuse(problems: list[str | None]) -> None:
    lines = [p for p in problems if p is not None]
    if lines:
        raise ConfigError(lines)


def run_single(
    cfg: SweepConfig,
    devices: str,
    overrides: Sequence[str],
    schedule: Sequence[tuple[int, dict[str, Any]]] | None = None,
) -> int:
    """One run under torchrun, output on this terminal; ``schedule``: ``[(start_step,
    params), ...]`` changes the params at those steps (a replayed PBT member)."""
    if cfg.trial.command is not None:
        raise ConfigError(
            "trial.command: hyperfleet train runs a workload function; run the program "
            "itself, or sweep it with sweep run"
        )
    params = single_params(cfg, parse_overrides(overrides))
    if schedule:
        params = merged_params(cfg.trial.workload, cfg.trial.params, schedule[0][1])
    k = max(1, cfg.trial.resources.devices)
    pool = LocalPool.from_spec(devices, min_cpu_slots=k)
    lease = pool.try_acquire(k)
    assert lease is not None
    with tempfile.TemporaryDirectory(prefix="hyperfleet-train-") as tmp:
        spec = TrialSpec(
            sweep=cfg.name,
            number=0,
            trial=cfg.trial,
            params=params,
            workdir=tmp,
            trial_dir=str(Path(tmp) / "trial"),
            schedule=[(int(step), dict(p)) for step, p in schedule] if schedule else None,
        )
        spec_path = spec.write(Path(tmp) / SPEC_FILE)
        cmd = torchrun_command(spec_path, k, f"train-{cfg.name}")
        env = trial_env(lease, pool.threads_per_process())
        return subprocess.run(cmd, env=env, check=False).returncode
