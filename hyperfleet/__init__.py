"""hyperfleet: hyperparameter sweeps of distributed PyTorch trials, logged to MLflow.

The top-level package stays import-light: ``TrialContext`` (which needs torch), the Python
API (``run``, ``submit``, ``load``: :mod:`hyperfleet.api`, which imports the platform) and
``trial`` (a script trial's program asks for its context) are loaded only when first used, so
``import hyperfleet`` imports neither torch nor the platform.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hyperfleet.errors import (
    ConfigError,
    HyperfleetError,
    LaunchError,
    PoolError,
    StorageError,
    SweepStoppedError,
    TrialPruned,
)

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "HyperfleetError",
    "LaunchError",
    "PoolError",
    "StorageError",
    "SweepStoppedError",
    "TrialContext",
    "TrialPruned",
    "__version__",
    "load",
    "run",
    "submit",
    "trial",
]

_API = ("load", "run", "submit")  # hyperfleet.api's functions

if TYPE_CHECKING:
    from hyperfleet.api import load, run, submit
    from hyperfleet.platform.launcher.script.push import trial
    from hyperfleet.trials.context import TrialContext


def __getattr__(name: str) -> Any:
    if name == "TrialContext":
        from hyperfleet.trials.context import TrialContext

        return TrialContext
    if name in _API:
        from hyperfleet import api

        return getattr(api, name)
    if name == "trial":  # the context inside a script trial's program (launcher/script/push.py)
        from hyperfleet.platform.launcher.script.push import trial

        return trial
    raise AttributeError(f"module 'hyperfleet' has no attribute {name!r}")
