"""Bayesian schedulers with trials in flight: every running trial is a pending point.

Two ``Study`` objects on one SQLite file stand for two workers (each has its own storage
cache and its own sampler, built from config as a fresh process builds it); in the last two
tests worker 1 is a separate Python process. Worker 1 claims
trial A and samples it; worker 2 then asks for trial B. What B's sampler was given is checked
on its inputs (the points told to ``skopt.Optimizer``, the running trials handed to Optuna's
GP acquisition), never by timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
import skopt

from hyperfleet.platform.schedulers.optuna.samplers import build_sampler
from hyperfleet.platform.schedulers.optuna.skopt_sampler import ATTR_PENDING, ATTR_SAMPLER
from hyperfleet.testing.functions import BRANIN
from tests.platform.schedulers.runner import scheduler_config

optuna.logging.set_verbosity(optuna.logging.WARNING)

N_START = 4
SKOPT = {"type": "skopt", "n_initial_points": N_START, "acq_optimizer": "sampling"}
GP = {"type": "gp", "n_startup_trials": N_START}
LIARS = ["cl_min", "cl_mean", "cl_max", "kriging_believer"]
NAMES = [f"x{i}" for i in range(BRANIN.dim)]


def worker(raw: dict[str, Any], url: str, seed: int = 0) -> optuna.Study:
    """A study object as a worker process opens it: own sampler, own storage cache."""
    sampler = build_sampler(scheduler_config({**raw, "seed": seed}))
    return optuna.create_study(storage=url, study_name="bo", sampler=sampler, load_if_exists=True)


def start(study: optuna.Study, names: list[str] = NAMES) -> optuna.Trial:
    """Ask a trial and suggest ``names`` (the platform suggests every parameter at once)."""
    trial = study.ask()
    for name, (lo, hi) in zip(NAMES, BRANIN.bounds, strict=True):
        if name in names:
            trial.suggest_float(name, lo, hi)
    return trial


def prefilled(raw: dict[str, Any], tmp_path: Path) -> tuple[str, optuna.Study]:
    """An SQLite study with N_START finished Branin trials (spread over the box)."""
    url = f"sqlite:///{tmp_path / 'bo.db'}"
    study = worker(raw, url)
    for x in ([-2.0, 3.0], [7.0, 12.0], [1.0, 9.0], [9.0, 1.0]):
        study.add_trial(
            optuna.trial.create_trial(
                params=dict(zip(NAMES, x, strict=True)),
                distributions={
                    n: optuna.distributions.FloatDistribution(lo, hi)
                    for n, (lo, hi) in zip(NAMES, BRANIN.bounds, strict=True)
                },
                value=BRANIN.fn(x),
            )
        )
    return url, study


@pytest.fixture
def skopt_told(monkeypatch: pytest.MonkeyPatch) -> list[list[list[Any]]]:
    """The points given to each ``skopt.Optimizer.tell`` call, in order."""
    told: list[list[list[Any]]] = []
    tell = skopt.Optimizer.tell

    def spy(self: Any, x: Any, y: Any, fit: bool = True) -> Any:
        told.append([list(p) for p in x])
        return tell(self, x, y, fit)

    monkeypatch.setattr(skopt.Optimizer, "tell", spy)
    return told


def close(a: list[float], b: list[float]) -> bool:
    return bool(np.allclose(a, b, rtol=0, atol=1e-9))


@pytest.mark.parametrize("liar", LIARS)
def test_skopt_takes_another_workers_running_trial_as_pending(
    liar: str, tmp_path: Path, skopt_told: list[list[list[Any]]]
) -> None:
    raw = {**SKOPT, "liar": liar}
    url, one = prefilled(raw, tmp_path)
    a = start(one)
    two = worker(raw, url)  # worker 2 opens the study after A was claimed
    b = start(two)
    x_a, x_b = [a.params[n] for n in NAMES], [b.params[n] for n in NAMES]
    assert not close(x_a, x_b)
    # A's suggestion saw no pending point; B's saw A's point beside the 4 finished ones.
    assert len(skopt_told) == 2 and len(skopt_told[0]) == N_START
    assert len(skopt_told[1]) == N_START + 1 and close(skopt_told[1][-1], x_a)
    frozen_b = two._storage.get_trial(b._trial_id)
    assert frozen_b.user_attrs[ATTR_SAMPLER] == "skopt"
    assert frozen_b.user_attrs[ATTR_PENDING] == [a.number]


def test_skopt_pending_includes_a_trial_still_being_suggested(
    tmp_path: Path, skopt_told: list[list[list[Any]]]
) -> None:
    # Worker 1 has made A's suggestion but has written only x0 when worker 2 asks: A's whole
    # point is already in storage (the suggestion is stored as soon as it is made).
    url, one = prefilled(SKOPT, tmp_path)
    a = start(one, names=["x0"])
    suggested = a.relative_params
    assert set(suggested) == set(NAMES) and set(a.params) == {"x0"}
    b = start(worker(SKOPT, url))
    assert len(skopt_told[-1]) == N_START + 1
    assert close(skopt_told[-1][-1], [suggested[n] for n in NAMES])
    assert not close([suggested[n] for n in NAMES], [b.params[n] for n in NAMES])


def test_skopt_pending_includes_an_enqueued_trial_not_yet_suggested(
    tmp_path: Path, skopt_told: list[list[list[Any]]]
) -> None:
    # A point queued by hand (sweep enqueue), popped by worker 1, none of its params set yet.
    url, one = prefilled(SKOPT, tmp_path)
    one.enqueue_trial({"x0": 2.5, "x1": 7.5})
    a = one.ask()
    assert a.params == {}
    b = start(worker(SKOPT, url))
    assert close(skopt_told[-1][-1], [2.5, 7.5])
    assert b.study._storage.get_trial(b._trial_id).user_attrs[ATTR_PENDING] == [a.number]


def test_skopt_in_one_process_two_in_flight(
    tmp_path: Path, skopt_told: list[list[list[Any]]]
) -> None:
    _, study = prefilled(SKOPT, tmp_path)
    a, b = start(study), start(study)
    x_a, x_b = [a.params[n] for n in NAMES], [b.params[n] for n in NAMES]
    assert not close(x_a, x_b)
    assert close(skopt_told[-1][-1], x_a)
    assert study._storage.get_trial(b._trial_id).user_attrs[ATTR_PENDING] == [a.number]


@pytest.fixture
def gp_running(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The numbers of the running trials each GP suggestion was given, in order."""
    from optuna.samplers import GPSampler

    seen: list[list[int]] = []
    impl = GPSampler._sample_relative_impl

    def spy(self: Any, study: Any, completed: Any, running: Any, space: Any) -> Any:
        seen.append([t.number for t in running])
        return impl(self, study, completed, running, space)

    monkeypatch.setattr(GPSampler, "_sample_relative_impl", spy)
    return seen


def test_gp_takes_another_workers_running_trial_as_pending(
    tmp_path: Path, gp_running: list[list[int]]
) -> None:
    url, one = prefilled(GP, tmp_path)
    a = start(one)
    two = worker(GP, url)
    b = start(two)
    assert gp_running == [[], [a.number]]
    assert not close([a.params[n] for n in NAMES], [b.params[n] for n in NAMES])


def test_gp_pending_includes_a_trial_still_being_suggested(
    tmp_path: Path, gp_running: list[list[int]]
) -> None:
    url, one = prefilled(GP, tmp_path)
    a = start(one, names=["x0"])
    b = start(worker(GP, url))
    assert gp_running == [[], [a.number]]
    assert not close([a.relative_params[n] for n in NAMES], [b.params[n] for n in NAMES])


# Another process claims trial A: a fresh interpreter, its own storage connection and sampler,
# which asks, suggests every parameter, and exits with A left RUNNING in the shared file.
CLAIM = """
import json, sys
import optuna
from hyperfleet.platform.config.scheduler_parsing import parse_scheduler_config
from hyperfleet.platform.schedulers.optuna.gp import PendingAwareGPSampler
from hyperfleet.platform.schedulers.optuna.samplers import build_sampler
from hyperfleet.testing.functions import BRANIN
optuna.logging.set_verbosity(optuna.logging.WARNING)
raw, url = json.loads(sys.argv[1]), sys.argv[2]
sampler = build_sampler(parse_scheduler_config({**raw, "seed": 0}))
study = optuna.load_study(study_name="bo", storage=url, sampler=sampler)
trial = study.ask()
params = {f"x{i}": trial.suggest_float(f"x{i}", lo, hi) for i, (lo, hi) in enumerate(BRANIN.bounds)}
print(json.dumps({"number": trial.number, "params": params}))
"""


def claim_in_another_process(raw: dict[str, Any], url: str) -> tuple[int, list[float]]:
    """Trial A claimed by another process; its number and point, read back from storage."""
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run(
        [sys.executable, "-c", CLAIM, json.dumps(raw), url],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    claimed = json.loads(out.strip().splitlines()[-1])
    trial = optuna.load_study(study_name="bo", storage=url).trials[claimed["number"]]
    assert trial.state == optuna.trial.TrialState.RUNNING
    assert trial.params == claimed["params"]
    return trial.number, [trial.params[n] for n in NAMES]


def test_skopt_takes_a_trial_claimed_by_another_process_as_pending(
    tmp_path: Path, skopt_told: list[list[list[Any]]]
) -> None:
    url, _ = prefilled(SKOPT, tmp_path)
    number, x_a = claim_in_another_process(SKOPT, url)
    two = worker(SKOPT, url)
    b = start(two)
    # This process made one suggestion, and it was given A's point beside the finished ones.
    assert len(skopt_told) == 1 and len(skopt_told[0]) == N_START + 1
    assert close(skopt_told[0][-1], x_a)
    assert two._storage.get_trial(b._trial_id).user_attrs[ATTR_PENDING] == [number]
    assert not close(x_a, [b.params[n] for n in NAMES])


def test_gp_takes_a_trial_claimed_by_another_process_as_pending(
    tmp_path: Path, gp_running: list[list[int]]
) -> None:
    url, _ = prefilled(GP, tmp_path)
    number, x_a = claim_in_another_process(GP, url)
    b = start(worker(GP, url))
    assert gp_running == [[number]]
    assert not close(x_a, [b.params[n] for n in NAMES])


def unit(x: list[float]) -> list[float]:
    """A Branin point in the unit box, as the GP sees it."""
    return [(v - lo) / (hi - lo) for v, (lo, hi) in zip(x, BRANIN.bounds, strict=True)]


def test_gp_kriging_believer_conditions_the_model_on_the_running_point(
    tmp_path: Path, gp_acqf: list[Any]
) -> None:
    import torch
    from optuna._gp.acqf import LogEI

    url, one = prefilled(GP, tmp_path)
    a = start(one)
    b = start(worker(GP, url))
    x_a = [a.params[n] for n in NAMES]
    assert len(gp_acqf) == 2
    acqf = gp_acqf[1]
    # B's acquisition is analytic LogEI on a GP that has A's point among its data.
    assert isinstance(acqf, LogEI)
    train = acqf._gpr._X_train.numpy()
    assert train.shape == (N_START + 1, 2) and close(list(train[-1]), unit(x_a))
    # A's believed value is the model's prediction there: its uncertainty is gone, and it
    # counts as an observation for the best value B must beat.
    model = acqf._gpr
    mean_a, var_a = model.posterior(torch.tensor(unit(x_a), dtype=torch.float64))
    assert float(var_a) < 0.05 * float(model.kernel_scale)
    assert float(model._y_train[-1]) == pytest.approx(float(mean_a), abs=0.05)
    assert acqf._threshold == pytest.approx(float(model._y_train.max()))
    assert not close(x_a, [b.params[n] for n in NAMES])


def test_gp_qlogei_keeps_optunas_batch_acquisition(tmp_path: Path, gp_acqf: list[Any]) -> None:
    from optuna._gp.acqf import LogEI, qLogEI

    raw = {**GP, "pending": "qlogei"}
    url, one = prefilled(raw, tmp_path)
    start(one)
    start(worker(raw, url))
    assert isinstance(gp_acqf[0], LogEI) and isinstance(gp_acqf[1], qLogEI)


def test_gp_start_up_counts_trials_in_flight(tmp_path: Path, gp_running: list[list[int]]) -> None:
    # N_START trials placed at random by two workers; half of them finished. The next
    # suggestion is the model's, with the three running trials as pending points; with one
    # finished it is still random. Counting finished trials only (Optuna's GPSampler) would
    # keep sampling at random until N_START had finished.
    url = f"sqlite:///{tmp_path / 'bo.db'}"
    one, two = worker(GP, url), worker(GP, url, seed=1)
    placed = [start(one), start(two), start(one), start(two)]
    one.tell(placed[0], BRANIN.fn([placed[0].params[n] for n in NAMES]))
    early = start(one)
    one.tell(placed[1], BRANIN.fn([placed[1].params[n] for n in NAMES]))
    late = start(two)
    running = [*sorted(t.number for t in placed[2:]), early.number]
    assert gp_running == [running]  # one GP suggestion: the late one, with 3 pending
    assert early.params and late.params
