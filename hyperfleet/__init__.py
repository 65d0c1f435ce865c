"""hyperfleet: hyperparameter sweeps of distributed PyTorch trials, logged to MLflow.

The top-level package stays import-light: ``TrialContext`` (which needs torch) and ``trial``
(a script trial's program asks for its context) are loaded only when first used, so ``import
hyperfleet.platform`` never imports torch.
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
    "trial",
]

if TYPE_CHECKING:
    from hyperfleet.platform.launcher.push import trial
    from hyperfleet.trials.context import TrialContext


def __getattr__(name: str) -> Any:
    if name == "TrialContext":
        from hyperfleet.trials.context import TrialContext

        return TrialContext
    if name == "trial":  # the context inside a script trial's program (launcher/push.py)
        from hyperfleet.platform.launcher.push import trial

        return trial
    raise AttributeError(f"module 'hyperfleet' has no attribute {name!r}")
