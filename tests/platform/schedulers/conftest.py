from __future__ import annotations

from typing import Any

import pytest

from hyperfleet.platform.schedulers.optuna.gp import PendingAwareGPSampler


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: a test that takes more than ~30 s")


@pytest.fixture
def gp_acqf(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The acquisition function each GP suggestion optimised, in order."""
    seen: list[Any] = []
    optimize = PendingAwareGPSampler._optimize_acqf

    def spy(self: Any, acqf: Any, best_params: Any) -> Any:
        seen.append(acqf)
        return optimize(self, acqf, best_params)

    monkeypatch.setattr(PendingAwareGPSampler, "_optimize_acqf", spy)
    return seen
