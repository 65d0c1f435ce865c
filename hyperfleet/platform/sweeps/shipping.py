"""How a workload given to ``hyperfleet.run``/``submit`` as a Python object reaches its trials.

A function every trial process can import (``package.module:function``, top level of an
importable module) travels by reference, as a sweep file names it. A function those processes
cannot import travels by value: one defined in ``__main__`` (a script run as a program, or a
notebook cell, whose module is the kernel's ``__main__``), a lambda or a function nested in
another. It is pickled with cloudpickle, which copies the function's code and what it refers to
in ``__main__`` (globals, closures, helper functions) but refers to importable modules by name,
and goes base64-encoded into the sweep's ``trial.code``: stored with the sweep's config, so
the controller validates it, every trial's ``spec.json`` carries it (in-process forks, torchrun
ranks, PBT members exploiting in place) and workers on other hosts read it from the shared
storage like the rest of the config. Trial processes need the same Python and the packages the
function uses; a function whose pickle exceeds :data:`MAX_CODE_BYTES` (it closes over large
data) is refused: load the data inside the function instead.
"""

from __future__ import annotations

import base64
import importlib
from collections.abc import Callable
from typing import Any

from hyperfleet.errors import ConfigError

MAX_CODE_BYTES = 8 * 1024 * 1024
"""The largest pickled workload stored with a sweep (it is copied into every trial's spec)."""


def _importable(fn: Callable[..., Any], module: str, qualname: str) -> bool:
    """Whether ``module:qualname`` imports back to ``fn`` in another process."""
    if module == "__main__" or "<" in qualname or "." in qualname:
        return False
    try:
        return getattr(importlib.import_module(module), qualname, None) is fn
    except Exception:  # noqa: BLE001 - a module that does not import travels by value
        return False


def shipped(fn: Callable[..., Any]) -> tuple[str, str | None]:
    """``(trial.workload, trial.code)`` for the function ``fn``: its ``module:function`` and
    no code when importable, else its name under ``__main__`` and its pickle (base64)."""
    if not callable(fn):
        raise ConfigError(
            f"workload: expected a function of the trial context or a 'package.module:function' "
            f"string, got a {type(fn).__name__}"
        )
    module = str(getattr(fn, "__module__", None) or "__main__")
    qualname = str(getattr(fn, "__qualname__", None) or type(fn).__name__)
    if _importable(fn, module, qualname):
        return f"{module}:{qualname}", None
    import cloudpickle

    try:
        data = cloudpickle.dumps(fn)
    except Exception as exc:  # noqa: BLE001 - what it closes over cannot be pickled
        raise ConfigError(
            f"workload: {qualname} cannot be pickled to ship it to its trials "
            f"({type(exc).__name__}: {exc}); create what it refers to inside the function"
        ) from None
    if len(data) > MAX_CODE_BYTES:
        raise ConfigError(
            f"workload: {qualname} pickles to {len(data) / 2**20:.1f} MiB with what it refers "
            f"to (over {MAX_CODE_BYTES // 2**20} MiB); load large data inside the function"
        )
    return f"__main__:{qualname}", base64.b64encode(data).decode()


def with_workload(
    data: dict[str, Any], workload: Callable[..., Any] | str | None
) -> dict[str, Any]:
    """The sweep mapping ``data`` with its ``trial.workload`` (and ``trial.code``) set from
    ``workload``; unchanged when ``workload`` is None (the mapping names its own)."""
    if workload is None:
        return data
    trial = data.get("trial")
    if trial is not None and not isinstance(trial, dict):
        return data  # validation names the malformed section
    trial = dict(trial or {})
    if isinstance(workload, str):
        trial["workload"] = workload
        trial.pop("code", None)
    else:
        trial["workload"], code = shipped(workload)
        trial.pop("code", None)
        if code is not None:
            trial["code"] = code
    return {**data, "trial": trial}
