"""Optuna's own sampler conformance suites (``optuna.testing.pytest_samplers``) run against
every sampler the platform builds.

Optuna ships four suites, each a class whose ``sampler`` fixture (a factory of samplers) a
subclass overrides: ``BasicSamplerTestCase`` (values inside each distribution, of the right
type, whole optimisations), ``RelativeSamplerTestCase`` (``sample_relative`` over numerical,
categorical and mixed spaces; a trial's relative params), ``MultiObjectiveSamplerTestCase``
and ``SingleOnlySamplerTestCase`` (a ValueError for a multi-objective study). Each class
below is one sampler, built the way a sweep builds it (``build_sampler`` from a scheduler
config, as ``tests/platform/schedulers/runner.py::scheduler_config`` validates one), or
directly where the wrapper is the thing under test; it runs all four suites and names, one
line each, the tests that do not apply to it and why (``NOT_APPLICABLE``): they are skipped
with that reason. The start-up phases are short (Optuna's own tests use none) so that the
suites reach each sampler's model: a relative-sampling test samples after one finished trial.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import optuna
import pytest
from optuna.samplers import BaseSampler
from optuna.testing.pytest_samplers import (
    BasicSamplerTestCase,
    MultiObjectiveSamplerTestCase,
    RelativeSamplerTestCase,
    SingleOnlySamplerTestCase,
)

from hyperfleet.platform.schedulers.optuna.delegating import DelegatingSampler
from hyperfleet.platform.schedulers.optuna.gp import PendingAwareGPSampler
from hyperfleet.platform.schedulers.optuna.history import HistoryCappedSampler
from hyperfleet.platform.schedulers.optuna.samplers import (
    AskTellGridSampler,
    BranchGridSampler,
    TrialSeededSampler,
    build_sampler,
)
from hyperfleet.platform.schedulers.optuna.skopt_sampler import SkoptSampler
from tests.platform.schedulers.runner import scheduler_config

optuna.logging.set_verbosity(optuna.logging.WARNING)

SUITES: tuple[type, ...] = (
    BasicSamplerTestCase,
    RelativeSamplerTestCase,
    MultiObjectiveSamplerTestCase,
    SingleOnlySamplerTestCase,
)


def suite_of(test_name: str) -> str:
    """The name of Optuna's suite that defines ``test_name``."""
    for suite in SUITES:
        if test_name in vars(suite):
            return suite.__name__
    raise AssertionError(f"{test_name} is in none of Optuna's sampler suites")


def built(raw: Mapping[str, Any], **kwargs: Any) -> Callable[[], BaseSampler]:
    """A factory of the sampler a sweep with scheduler config ``raw`` gets."""
    cfg = scheduler_config(raw)
    return lambda: build_sampler(cfg, **kwargs)


class SamplerSuites(
    BasicSamplerTestCase,
    RelativeSamplerTestCase,
    MultiObjectiveSamplerTestCase,
    SingleOnlySamplerTestCase,
):
    """Optuna's four sampler suites against ``make()``'s sampler (an instance of ``kind``)."""

    make: ClassVar[Callable[[], BaseSampler]]
    kind: ClassVar[type]  # what make() returns
    inner: ClassVar[type | None] = None  # what that wraps (``.inner``), for a wrapper
    # test name, or one of Optuna's suite classes by name -> why it does not apply
    NOT_APPLICABLE: ClassVar[dict[str, str]] = {}

    @pytest.fixture
    def sampler(self) -> Callable[[], BaseSampler]:
        make = type(self).make

        def factory() -> BaseSampler:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                sampler = make()
            assert isinstance(sampler, self.kind), sampler
            if self.inner is not None:
                assert isinstance(sampler.inner, self.inner), sampler.inner  # type: ignore[attr-defined]
            return sampler

        return factory

    @pytest.fixture(autouse=True)
    def _applies(self, request: pytest.FixtureRequest) -> None:
        name = request.node.originalname
        reason = self.NOT_APPLICABLE.get(name) or self.NOT_APPLICABLE.get(suite_of(name))
        if reason:
            pytest.skip(reason)


SINGLE_ONLY = "a single-objective sampler (build_sampler refuses it for several objectives)"
MULTI_CAPABLE = "samples multi-objective studies, so it raises no ValueError for them"

# The tests that call sample_relative with a search space of their own, after one trial.
SAMPLE_RELATIVE = (
    "test_sample_relative_numerical",
    "test_sample_relative_categorical",
    "test_sample_relative_mixed",
)
# The tests that call sample_independent on trials made in storage (no before_trial) with a
# distribution of their own.
SAMPLE_INDEPENDENT = (
    "test_float",
    "test_int",
    "test_categorical",
    "test_conditional_sample_independent",
    "test_multi_objective_sample_independent",
)


def because(reason: str, *tests: str) -> dict[str, str]:
    """``tests`` skipped, each with ``reason``."""
    return dict.fromkeys(tests, reason)


def multi_capable_without_relative(reason: str) -> dict[str, str]:
    """What a sampler of multi-objective studies skips when it does not sample relative in
    the suite's ``sample_relative`` tests, for ``reason``."""
    return {"SingleOnlySamplerTestCase": MULTI_CAPABLE, **because(reason, *SAMPLE_RELATIVE)}


# -- TPE: the seeding wrapper, the capped history, the grouped branches ---------------------


class TestSeededTPE(SamplerSuites):
    """A sweep's default TPE: TrialSeededSampler(HistoryCappedSampler(TPESampler), cap 500)."""

    make = staticmethod(built({"type": "tpe", "n_startup_trials": 0, "seed": 0}))
    kind = TrialSeededSampler
    inner = HistoryCappedSampler
    NOT_APPLICABLE: ClassVar[dict[str, str]] = {"SingleOnlySamplerTestCase": MULTI_CAPABLE}


class TestHistoryCappedTPE(SamplerSuites):
    """HistoryCappedSampler(TPESampler) unseeded, its cap (2) reached after two trials."""

    make = staticmethod(built({"type": "tpe", "n_startup_trials": 0, "max_history": 2}))
    kind = HistoryCappedSampler
    inner = optuna.samplers.TPESampler
    NOT_APPLICABLE: ClassVar[dict[str, str]] = {"SingleOnlySamplerTestCase": MULTI_CAPABLE}


class TestSeededGroupedTPE(SamplerSuites):
    """TPE on a conditional space (``cells=[]``): grouped multivariate, no cap, seeded."""

    make = staticmethod(
        built({"type": "tpe", "n_startup_trials": 0, "max_history": None, "seed": 0}, cells=[])
    )
    kind = TrialSeededSampler
    inner = optuna.samplers.TPESampler
    NOT_APPLICABLE: ClassVar[dict[str, str]] = multi_capable_without_relative(
        "grouped TPE samples the groups its infer_relative_search_space found, which the "
        "test never calls (Optuna's own TPESampler(group=True) answers {} there too)"
    )


# -- the other Optuna samplers, seeded by the platform's wrapper ---------------------------


class TestSeededRandom(SamplerSuites):
    make = staticmethod(built({"type": "random", "seed": 0}))
    kind = TrialSeededSampler
    inner = optuna.samplers.RandomSampler
    NOT_APPLICABLE: ClassVar[dict[str, str]] = multi_capable_without_relative(
        "RandomSampler has no relative sampling (sample_relative: {})"
    )


class TestSeededQMC(SamplerSuites):
    make = staticmethod(built({"type": "qmc", "scramble": True, "seed": 0}))
    kind = TrialSeededSampler
    inner = optuna.samplers.QMCSampler
    NOT_APPLICABLE: ClassVar[dict[str, str]] = {"SingleOnlySamplerTestCase": MULTI_CAPABLE}


class TestSeededCmaEs(SamplerSuites):
    make = staticmethod(built({"type": "cmaes", "n_startup_trials": 0, "seed": 0}))
    kind = TrialSeededSampler
    inner = optuna.samplers.CmaEsSampler
    NOT_APPLICABLE: ClassVar[dict[str, str]] = {"MultiObjectiveSamplerTestCase": SINGLE_ONLY}


class TestSeededNSGA2(SamplerSuites):
    make = staticmethod(built({"type": "nsga2", "population_size": 4, "seed": 0}))
    kind = TrialSeededSampler
    inner = optuna.samplers.NSGAIISampler
    NOT_APPLICABLE: ClassVar[dict[str, str]] = multi_capable_without_relative(
        "NSGA-II samples relative from its second generation on (population_size >= 2 "
        "finished trials); the test samples after one"
    )


# -- the GP with each way of handling trials in flight -------------------------------------


class TestSeededGPKrigingBeliever(SamplerSuites):
    make = staticmethod(
        built({"type": "gp", "n_startup_trials": 1, "pending": "kriging_believer", "seed": 0})
    )
    kind = TrialSeededSampler
    inner = PendingAwareGPSampler
    NOT_APPLICABLE: ClassVar[dict[str, str]] = {"SingleOnlySamplerTestCase": MULTI_CAPABLE}


class TestGPQLogEI(SamplerSuites):
    """PendingAwareGPSampler as build_sampler makes it, unwrapped (no seed)."""

    make = staticmethod(built({"type": "gp", "n_startup_trials": 1, "pending": "qlogei"}))
    kind = PendingAwareGPSampler
    NOT_APPLICABLE: ClassVar[dict[str, str]] = {"SingleOnlySamplerTestCase": MULTI_CAPABLE}


# -- skopt ----------------------------------------------------------------------------------


class TestSeededSkopt(SamplerSuites):
    make = staticmethod(
        built({"type": "skopt", "n_initial_points": 1, "n_candidates": 200, "seed": 0})
    )
    kind = TrialSeededSampler
    inner = SkoptSampler
    NOT_APPLICABLE: ClassVar[dict[str, str]] = {"MultiObjectiveSamplerTestCase": SINGLE_ONLY}


class TestSkopt(SamplerSuites):
    """SkoptSampler unwrapped (no seed), with a constant liar for the trials in flight."""

    make = staticmethod(
        built({"type": "skopt", "n_initial_points": 1, "n_candidates": 200, "liar": "cl_max"})
    )
    kind = SkoptSampler
    NOT_APPLICABLE: ClassVar[dict[str, str]] = {"MultiObjectiveSamplerTestCase": SINGLE_ONLY}


# -- grids ----------------------------------------------------------------------------------

GRID_ONLY = because(
    "a grid answers a trial from the cell before_trial gives it, not from the test's "
    "distribution; these trials never had before_trial",
    *SAMPLE_INDEPENDENT,
)
GRID_NO_RELATIVE = because(
    "a grid sampler has no relative sampling (sample_relative: {})", *SAMPLE_RELATIVE
)


@pytest.mark.filterwarnings("ignore:The value .* is out of range of the parameter:UserWarning")
class TestSeededGrid(SamplerSuites):
    """A sweep's grid: TrialSeededSampler(AskTellGridSampler) over values valid in the spaces
    the suite's objectives suggest x, y and z from (1 is also the choice True; a value past
    a range's end, as 2 in [0, 1], is only warned about by Optuna)."""

    make = staticmethod(
        built({"type": "grid", "seed": 0}, grid={"x": [1], "y": [1, 2], "z": [1, 2]})
    )
    kind = TrialSeededSampler
    inner = AskTellGridSampler
    NOT_APPLICABLE: ClassVar[dict[str, str]] = {
        "SingleOnlySamplerTestCase": MULTI_CAPABLE,
        **GRID_ONLY,
        **GRID_NO_RELATIVE,
        **because(
            "asserts the best of x + 2 and x + 1 with x in [0.1, 0.2], a value the grid lacks",
            "test_nan_objective_value",
        ),
    }


# The cells of the suite's conditional objective (x: True -> y, False -> z), as
# ``space.cells`` makes them for a conditional space.
SUITE_CELLS = [
    {"x": True, "y": 0.25},
    {"x": True, "y": 0.75},
    {"x": False, "z": 0.25},
    {"x": False, "z": 0.75},
]


class TestBranchGrid(SamplerSuites):
    """BranchGridSampler over the cells of the suite's conditional objective, unseeded."""

    make = staticmethod(built({"type": "grid"}, cells=SUITE_CELLS))
    kind = BranchGridSampler
    NOT_APPLICABLE: ClassVar[dict[str, str]] = {
        "SingleOnlySamplerTestCase": MULTI_CAPABLE,
        **GRID_ONLY,
        **GRID_NO_RELATIVE,
        **because(
            "the objective's space is not the cells' conditional one (x in {True, False}, "
            "then y or z), so a cell has no value, or no valid one, for some of its params",
            "test_nan_objective_value",
            "test_partial_fixed_sampling",
            "test_single_parameter_objective",
            "test_combination_of_different_distributions_objective",
            "test_dynamic_range_objective",
            "test_trial_relative_params",
        ),
    }


# -- the delegating base class itself -------------------------------------------------------


class TestDelegating(SamplerSuites):
    """DelegatingSampler over TPE (multivariate): every call handed on, no hook."""

    make = staticmethod(
        lambda: DelegatingSampler(optuna.samplers.TPESampler(n_startup_trials=0, multivariate=True))
    )
    kind = DelegatingSampler
    inner = optuna.samplers.TPESampler
    NOT_APPLICABLE: ClassVar[dict[str, str]] = {"SingleOnlySamplerTestCase": MULTI_CAPABLE}
