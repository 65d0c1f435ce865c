"""hyperfleet: hyperparameter sweeps of distributed PyTorch trials, logged to MLflow.

The top-level package stays import-light: ``TrialContext`` (which needs torch) is loaded only
when first used, so ``import hyperfleet.platform`` never imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hyperfleet.errors import (
    ConfigError,
    HyperfleetError,
    LaunchError,
    PoolError,
    StorageError,
    TrialPruned,
)

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "HyperfleetError",
    "LaunchError",
    "PoolError",
    "StorageError",
    "TrialContext",
    "TrialPruned",
    "__version__",
]

if TYPE_CHECKING:
    from hyperfleet.trials.context import TrialContext


def __getattr__(name: str) -> Any:
    if name == "TrialContext":
        from hyperfleet.trials.context import TrialContext

        return TrialContext
    raise AttributeError(f"module 'hyperfleet' has no attribute {name!r}")
