"""Run a function on N real processes joined in a gloo process group (test helper).

``run_distributed(fn, world_size, *args)`` starts ``world_size`` processes with
``torch.multiprocessing`` (forked from a fork server that has imported torch once), joins them
through a *file* rendezvous in a fresh temporary directory (no ports, so tests can run side by
side), calls ``fn(rank, world_size, *args)`` on each and
returns the per-rank results in rank order. ``fn`` must be importable (a module-level function)
and its result picklable. If any rank raises, the test fails with that rank's traceback; if the
ranks do not finish within ``timeout`` seconds, they are killed and the test fails.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _worker(
    rank: int,
    world_size: int,
    rdzv_dir: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    timeout: float,
) -> None:
    out = Path(rdzv_dir) / f"result-{rank}.pkl"
    torch.set_num_threads(1)
    try:
        from datetime import timedelta

        dist.init_process_group(
            "gloo",
            init_method=f"file://{rdzv_dir}/rdzv",
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=timeout),
        )
        result: tuple[str, Any] = ("ok", fn(rank, world_size, *args))
    except BaseException:  # noqa: BLE001 - any failure, SystemExit included, goes to the parent
        result = ("error", traceback.format_exc())
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    tmp = out.with_suffix(".tmp")
    tmp.write_bytes(pickle.dumps(result))
    os.replace(tmp, out)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the result is written: skip the interpreter's slow teardown


# What the ranks import, loaded once by the fork server: a rank imports only the test module
# that holds ``fn`` (a module that fails to import here is skipped, and imported by the rank).
_PRELOAD = [
    "torch",
    "torch.distributed",
    "torch.distributed.pipelining",
    "torch.nn.parallel",
    "numpy",
    "pytest",
    "hyperfleet.trials.async_ps",
    "hyperfleet.trials.context",
    "hyperfleet.trials.data",
    "hyperfleet.trials.parallel.step",
    "hyperfleet.trials.reshard",
]


def run_distributed(
    fn: Callable[..., Any], world_size: int, *args: Any, timeout: float = 60
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` gloo processes; results by rank."""
    # A fork server imports torch once per test session; every rank is then a cheap fork of it
    # (spawning would re-import torch in each rank, seconds per process).
    multiprocessing.set_forkserver_preload(_PRELOAD)
    with tempfile.TemporaryDirectory(prefix="hf-dist-") as rdzv_dir:
        ctx = mp.start_processes(
            _worker,
            args=(world_size, rdzv_dir, fn, args, timeout),
            nprocs=world_size,
            join=False,
            start_method="forkserver",
        )
        failure: str | None = None
        try:
            if not _join(ctx, timeout, Path(rdzv_dir)):
                failure = f"distributed run of {fn.__name__} timed out after {timeout}s"
        except mp.ProcessRaisedException as exc:  # pragma: no cover - _worker catches
            failure = str(exc)
        except mp.ProcessExitedException as exc:
            failure = f"a rank of {fn.__name__} died: {exc}"
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
                    p.join()
        results: list[Any] = []
        errors: list[str] = []
        for rank in range(world_size):
            path = Path(rdzv_dir) / f"result-{rank}.pkl"
            if not path.exists():
                results.append(None)
                continue
            status, value = pickle.loads(path.read_bytes())
            if status == "error":
                errors.append(f"--- rank {rank} raised:\n{value}")
            results.append(value)
        if errors:
            pytest.fail("\n".join(errors), pytrace=False)
        if failure:
            pytest.fail(failure, pytrace=False)
        return results


def _join(ctx: mp.ProcessContext, timeout: float, rdzv_dir: Path) -> bool:
    """Wait for all processes; False on timeout. Once a rank has failed, the others get a few
    seconds to finish (they usually fail too, on a closed connection) before being killed."""
    deadline = time.monotonic() + timeout
    while not ctx.join(timeout=0.25):
        now = time.monotonic()
        if now > deadline:
            return False
        if deadline - now > _GRACE_AFTER_FAILURE and _any_rank_failed(rdzv_dir):
            deadline = now + _GRACE_AFTER_FAILURE
    return True


_GRACE_AFTER_FAILURE = 3.0


def _any_rank_failed(rdzv_dir: Path) -> bool:
    for path in rdzv_dir.glob("result-*.pkl"):
        try:
            if pickle.loads(path.read_bytes())[0] == "error":
                return True
        except (OSError, EOFError, pickle.UnpicklingError):
            continue
    return False
