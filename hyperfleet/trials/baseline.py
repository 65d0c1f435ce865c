"""A process's state as it started, put back before the next trial in the same process.

A warm process group (:mod:`hyperfleet.platform.launcher.warm`) and the in-process pool run
trial after trial in the same processes. :class:`Baseline` captures what a fresh process would
have had and :meth:`Baseline.restore` puts it back, so a trial's metrics do not depend on the
trials before it (the list is in :mod:`hyperfleet.trials.runtime`'s docstring, "Reuse").
"""

from __future__ import annotations

import importlib
import logging
import os
import random
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Baseline", "fresh_seeds"]


def fresh_seeds() -> None:
    """Seed torch's (every device's), Python's and NumPy's default generators from fresh
    entropy, as a new process starts with them."""
    import numpy as np
    import torch

    torch.seed()
    random.seed()
    np.random.seed()


@dataclass
class Baseline:
    """The process state a trial may change, as the process started; :meth:`restore` puts it
    back before the next trial in the same process (see the module docstring)."""

    cwd: str
    environ: dict[str, str]
    grad_enabled: bool
    default_dtype: Any
    threads: int
    deterministic: tuple[bool, bool]  # (mode, warn_only)
    matmul_precision: str
    flags: dict[str, bool] = field(default_factory=dict)
    log_handlers: list[logging.Handler] = field(default_factory=list)
    log_level: int = logging.WARNING

    @classmethod
    def capture(cls) -> Baseline:
        import torch

        root = logging.getLogger()
        return cls(
            cwd=os.getcwd(),
            environ=dict(os.environ),
            grad_enabled=torch.is_grad_enabled(),
            default_dtype=torch.get_default_dtype(),
            threads=torch.get_num_threads(),
            deterministic=_deterministic(),
            matmul_precision=torch.get_float32_matmul_precision(),
            flags={name: bool(_flag(name)) for name in _TORCH_FLAGS},
            log_handlers=list(root.handlers),
            log_level=root.level,
        )

    def restore(self) -> None:
        import torch

        os.chdir(self.cwd)
        if dict(os.environ) != self.environ:
            os.environ.clear()
            os.environ.update(self.environ)
        fresh_seeds()
        torch.set_grad_enabled(self.grad_enabled)
        torch.set_default_dtype(self.default_dtype)
        torch.set_num_threads(self.threads)
        if _deterministic() != self.deterministic:
            # only when a trial changed it: the call imports torch._inductor (~1.5 s of CPU)
            mode, warn_only = self.deterministic
            torch.use_deterministic_algorithms(mode, warn_only=warn_only)
        torch.set_float32_matmul_precision(self.matmul_precision)
        for name, value in self.flags.items():
            module, _, attr = name.rpartition(".")
            setattr(_module(module), attr, value)
        torch.clear_autocast_cache()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        root = logging.getLogger()
        root.handlers[:] = self.log_handlers
        root.setLevel(self.log_level)


_TORCH_FLAGS = (
    "torch.backends.cudnn.benchmark",
    "torch.backends.cudnn.deterministic",
    "torch.backends.cudnn.allow_tf32",
    "torch.backends.cuda.matmul.allow_tf32",
)


def _deterministic() -> tuple[bool, bool]:
    import torch

    return (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )


def _module(dotted: str) -> Any:

    head, *rest = dotted.split(".")
    obj: Any = importlib.import_module(head)
    for part in rest:
        obj = getattr(obj, part)
    return obj


def _flag(name: str) -> Any:
    module, _, attr = name.rpartition(".")
    return getattr(_module(module), attr)
