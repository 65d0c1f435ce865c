"""Workloads of the launcher tests: they read the process state a trial may inherit from the
trial before it (and how the process started), train a little with DDP, and then change that
state on purpose."""

from __future__ import annotations

import gc
import logging
import os

import torch

import hyperfleet


def probe(ctx: hyperfleet.TrialContext) -> None:
    """Report what this trial found (``leaks``: 0 when the process looked fresh) and a DDP
    loss from ``params.seed`` (each rank says its rank in the log); then leave changed state
    behind, and raise if ``params.fail``."""
    leaks = sum([
        "HF_TEST_LEAK" in os.environ,
        os.getcwd() == "/",
        not torch.is_grad_enabled(),
        torch.get_num_threads() == 3,
        any(isinstance(h, logging.NullHandler) for h in logging.getLogger().handlers),
        torch.initial_seed() == 12345,
    ])  # fmt: skip
    print(f"probe: rank {ctx.rank} of {ctx.world_size}", flush=True)
    torch.manual_seed(int(ctx.params["seed"]))
    model = ctx.wrap(torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(),
                                         torch.nn.Linear(8, 1)))  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=float(ctx.params["lr"]))
    x, y = torch.randn(16, 6), torch.randn(16, 1)
    for _ in range(ctx.max_steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    metrics = {"loss": ctx.mean_over_data(loss.item()), "leaks": float(leaks), **collector()}
    os.environ["HF_TEST_LEAK"] = "1"
    os.chdir("/")
    torch.set_grad_enabled(False)
    torch.set_num_threads(3)
    torch.manual_seed(12345)
    logging.getLogger().addHandler(logging.NullHandler())
    if ctx.params.get("fail"):
        raise RuntimeError("injected failure after leaving state behind")
    ctx.report(ctx.max_steps, metrics)


def collector() -> dict[str, float]:
    """Whether the garbage collector runs in this trial's process (``gc_on``), and whether the
    process froze what its start-up made (``gc_frozen``: :mod:`hyperfleet.startup`)."""
    return {"gc_on": float(gc.isenabled()), "gc_frozen": float(gc.get_freeze_count() > 0)}


def started(ctx: hyperfleet.TrialContext) -> None:
    """Only :func:`collector`'s report (a trial of the in-process pool)."""
    ctx.report(ctx.max_steps, {"loss": 0.0, **collector()})


def threads(ctx: hyperfleet.TrialContext) -> None:
    """Report the intra-op threads this trial's torch runs on, and what set them."""
    cap = float(os.environ.get("OMP_NUM_THREADS", "0"))
    ctx.report(1, {"loss": 0.0, "threads": float(torch.get_num_threads()), "omp": cap})


def imported_here(ctx: hyperfleet.TrialContext) -> None:
    """Report whether this trial's process imported ``tests.launcher.ahead_probe`` itself (1)
    or inherited it from the process it was forked from (0); -1: not imported at all."""
    import sys

    probe = sys.modules.get("tests.launcher.ahead_probe")
    here = -1.0 if probe is None else float(os.getpid() == probe.IMPORTED_BY)
    ctx.report(1, {"loss": here})
