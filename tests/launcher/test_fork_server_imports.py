"""Which in-process sweeps' fork servers import torch ahead: not one of a function shipped by
value whose code never names it."""

from __future__ import annotations

from typing import Any

from hyperfleet.platform.launcher.inprocess import names_torch
from hyperfleet.platform.sweeps.shipping import shipped

PLAIN = """
import time

def objective(ctx):
    time.sleep(0.005)
    ctx.report(1, {"loss": ctx.params["x"] ** 2})
"""

USES_IT = """
def objective(ctx):
    import torch
    ctx.report(1, {"loss": float(torch.zeros(1).sum())})
"""


def _code(source: str) -> str | None:
    """The shipped code of ``objective`` defined in a notebook-like ``__main__``."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(source, "<cell>", "exec"), namespace)
    workload, code = shipped(namespace["objective"])
    assert code is not None, workload
    return code


def test_a_shipped_function_that_never_names_it_needs_no_torch_ahead() -> None:
    assert not names_torch(_code(PLAIN))


def test_a_shipped_function_that_imports_it_and_a_workload_named_by_path_need_it() -> None:
    assert names_torch(_code(USES_IT))
    assert names_torch(None), "a built-in workload or a module's function may use it"
    assert names_torch("not base64!"), "unreadable: the safe side"
