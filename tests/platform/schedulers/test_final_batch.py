"""The budget's final batch (``final_batch``) and the gp sampler's value transform.

The samplers are built from config as the platform builds them, with the sweep's trial budget
(``build_sampler(..., n_trials=)``), on an in-memory study holding four finished Branin
trials; what each suggestion optimised is read from the sampler's inputs (the acquisition
handed to Optuna's optimiser, the arguments of ``skopt.Optimizer``, the values the GP is
fitted to).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import optuna
import pytest
import skopt

from hyperfleet.platform.schedulers.optuna.final_batch import FINAL_KAPPA, in_final_batch
from hyperfleet.platform.schedulers.optuna.samplers import build_sampler
from hyperfleet.platform.schedulers.optuna.skopt_support import transformed
from hyperfleet.testing.functions import BRANIN
from tests.platform.schedulers.runner import scheduler_config

optuna.logging.set_verbosity(optuna.logging.WARNING)

N_START = 4
FINISHED = ([-2.0, 3.0], [7.0, 12.0], [1.0, 9.0], [9.0, 1.0])
DISTS = {
    f"x{i}": optuna.distributions.FloatDistribution(lo, hi)
    for i, (lo, hi) in enumerate(BRANIN.bounds)
}


def study_with(raw: dict[str, Any], n_trials: int | None = None) -> optuna.Study:
    sampler = build_sampler(scheduler_config({**raw, "seed": 0}), n_trials=n_trials)
    study = optuna.create_study(sampler=sampler)
    for x in FINISHED:
        params = {f"x{i}": v for i, v in enumerate(x)}
        study.add_trial(
            optuna.trial.create_trial(params=params, distributions=DISTS, value=BRANIN.fn(x))
        )
    return study


def start(study: optuna.Study) -> optuna.Trial:
    trial = study.ask()
    for name, d in DISTS.items():
        trial.suggest_float(name, d.low, d.high)
    return trial


def test_final_batch_is_the_trials_whose_results_no_later_suggestion_sees() -> None:
    study = optuna.create_study()
    for _ in range(4):
        study.tell(study.ask(), 1.0)
    one = study.ask()  # one at a time: only the last trial of the budget
    trials = study.get_trials(deepcopy=False)
    assert in_final_batch(5, trials, one.number)
    assert not in_final_batch(6, trials, one.number)
    assert not in_final_batch(None, trials, one.number)
    others = [study.ask(), study.ask()]  # with two more in flight: the last three
    trials = study.get_trials(deepcopy=False)
    assert in_final_batch(9, trials, others[-1].number)
    assert not in_final_batch(10, trials, others[-1].number)
    study.tell(others[0], state=optuna.trial.TrialState.FAIL)  # a failed trial used its slot
    trials = study.get_trials(deepcopy=False)
    assert not in_final_batch(9, trials, others[-1].number)  # one fewer in flight


def test_gp_final_batch_exploits_on_the_believer_model(gp_acqf: list[Any]) -> None:
    from optuna._gp.acqf import UCB, LogEI

    gp = {"type": "gp", "n_startup_trials": N_START}
    # Budget 6: A (5th) still has B after it, B (6th) is the last with A in flight.
    study = study_with(gp, n_trials=6)
    a, b = start(study), start(study)
    assert isinstance(gp_acqf[0], LogEI)
    final = gp_acqf[1]
    assert isinstance(final, UCB) and final._beta == pytest.approx(FINAL_KAPPA**2)
    # The model already holds A's point (kriging believer): B does not repeat it.
    assert final._gpr._X_train.shape[0] == N_START + 1
    assert not np.allclose(list(a.params.values()), list(b.params.values()))
    # Without a budget, no final batch.
    gp_acqf.clear()
    study = study_with(gp, n_trials=None)
    start(study), start(study)
    assert [type(f) for f in gp_acqf] == [LogEI, LogEI]


def test_skopt_final_batch_uses_lcb_with_small_kappa(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[str, float]] = []
    init = skopt.Optimizer.__init__

    def spy(self: Any, *args: Any, **kwargs: Any) -> None:
        made.append((kwargs["acq_func"], kwargs["acq_func_kwargs"]["kappa"]))
        init(self, *args, **kwargs)

    monkeypatch.setattr(skopt.Optimizer, "__init__", spy)
    raw = {"type": "skopt", "n_initial_points": N_START, "acq_func": "EI", "kappa": 3.0}
    study = study_with({**raw, "acq_optimizer": "sampling"}, n_trials=6)
    start(study), start(study)
    assert made == [("EI", 3.0), ("LCB", FINAL_KAPPA)]


@pytest.mark.parametrize("transform", ["yeo-johnson", "standardize"])
def test_gp_fits_the_values_transformed(monkeypatch: pytest.MonkeyPatch, transform: str) -> None:
    from optuna.samplers._gp import sampler as gp_sampler

    gp = gp_sampler.gp  # the GP module as the sampler sees it (a lazy import in Optuna)
    fitted: list[np.ndarray] = []
    fit = gp.fit_kernel_params

    def spy(*args: Any, **kwargs: Any) -> Any:
        fitted.append(np.array(kwargs["Y"]))
        return fit(*args, **kwargs)

    monkeypatch.setattr(gp, "fit_kernel_params", spy)
    study = study_with({"type": "gp", "n_startup_trials": N_START, "value_transform": transform})
    start(study)
    values = np.array([BRANIN.fn(x) for x in FINISHED])
    plain = -(values - values.mean()) / values.std()  # Optuna's: maximised, standardised
    expected = (
        -np.array(transformed(values, "yeo-johnson")) if transform != "standardize" else plain
    )
    assert len(fitted) == 1 and np.allclose(fitted[0], expected, atol=1e-6)
    assert list(np.argsort(fitted[0])) == list(np.argsort(plain))  # the order is kept
    if transform == "yeo-johnson":
        assert not np.allclose(fitted[0], plain, atol=1e-3)


def test_transform_compresses_a_tail_of_bad_values_only() -> None:
    # Losses with a long tail of bad values (a domain's high edges): compressed, order kept.
    bad_tail = np.array([-1.0, -0.9, -0.5, 0.0, 2.0, 10.0, 50.0, 160.0])
    zs = np.array(transformed(bad_tail, "yeo-johnson"))
    plain = (bad_tail - bad_tail.mean()) / bad_tail.std()
    assert list(np.argsort(zs)) == list(range(len(zs)))
    assert zs[-1] - zs[-2] < plain[-1] - plain[-2]  # the worst two moved closer
    assert zs[1] - zs[0] > plain[1] - plain[0]  # the best two pulled apart
    # A long tail of good values (Hartmann-6: most near 0, the best down to -3.3): untouched.
    good_tail = np.array([-3.3, -3.2, -1.0, -0.2, -0.1, -0.05, -0.01, 0.0])
    plain = (good_tail - good_tail.mean()) / good_tail.std()
    assert np.allclose(transformed(good_tail, "yeo-johnson"), plain)
