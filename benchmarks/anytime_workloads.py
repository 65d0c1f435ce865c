"""The training code of the anytime benchmark: one function per workload that every system runs.

Each system — hyperfleet's sweeps, Ray Tune, plain Optuna — calls :func:`train` with the
parameters it suggested and a ``report(step, value, state)`` callback of its own that returns
whether to go on (its pruner's or scheduler's say); the training itself is the same code. At
each evaluation :func:`train` appends ``seconds value`` to the file ``$ANYTIME_LOG`` (seconds
since ``$ANYTIME_T0``, the harness's start of the system's command), so the best model found
at each moment is read the same way whatever ran it, start-up and overhead included.

Workloads (the objective is ``val_loss``, minimised):

- ``digits``: a 3-layer MLP on scikit-learn's 8x8 digits (the ``digits`` workload's model and
  split); space: ``lr``, ``hidden``, ``weight_decay``, ``batch_size``, ``act``.
- ``charlm``: the ``charlm`` workload's GPT (2 layers, byte-level) on the Python standard
  library's source; space: ``lr``, ``warmup`` (linear warm-up steps, then cosine decay to 10 %),
  ``width``, ``dropout``, ``weight_decay``.

Batches are a function of ``(seed, step)`` (no loader state), so a checkpoint is the model, the
optimiser and the step: PBT's exploit resumes another member's state exactly.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

#: the search space of each workload, in hyperfleet's sweep-file form (peers translate it)
SPACES: dict[str, dict[str, dict[str, Any]]] = {
    "digits": {
        "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
        "hidden": {"type": "int", "low": 16, "high": 256, "log": True},
        "weight_decay": {"type": "float", "low": 1e-6, "high": 1e-1, "log": True},
        "batch_size": {"type": "categorical", "choices": [16, 32, 64, 128]},
        "act": {"type": "categorical", "choices": ["relu", "gelu", "tanh"]},
    },
    "charlm": {
        "lr": {"type": "float", "low": 1e-4, "high": 3e-2, "log": True},
        "warmup": {"type": "int", "low": 0, "high": 100},
        "width": {"type": "categorical", "choices": [32, 64, 96, 128]},
        "dropout": {"type": "float", "low": 0.0, "high": 0.3},
        "weight_decay": {"type": "float", "low": 1e-6, "high": 1e-1, "log": True},
    },
}
#: training steps of a complete trial, and the interval of evaluations (a pruner's rungs)
STEPS = {"digits": 300, "charlm": 150}
EVAL_EVERY = {"digits": 25, "charlm": 25}
CHARLM_BYTES = 400_000

Report = Callable[[int, float, Callable[[], dict[str, Any]]], bool]


def log_value(value: float) -> None:
    """Append ``seconds value`` to ``$ANYTIME_LOG`` (one short write: atomic with O_APPEND)."""
    path = os.environ.get("ANYTIME_LOG")
    if path:
        t = time.time() - float(os.environ.get("ANYTIME_T0", "0"))
        with open(path, "a") as f:
            f.write(f"{t:.3f} {value:.6g}\n")


def train(workload: str, params: dict[str, Any], report: Report,
          state: dict[str, Any] | None = None, steps: int | None = None) -> float:  # fmt: skip
    """Train ``workload`` with ``params`` from ``state`` (or from scratch) to ``steps``; at each
    evaluation call ``report(step, val_loss, state_fn)`` and stop when it returns False.
    Returns the last validation loss."""
    import torch

    threads = os.environ.get("OMP_NUM_THREADS")
    if threads:
        torch.set_num_threads(int(threads))
    build = _digits if workload == "digits" else _charlm
    model, batch, evaluate, lr_at = build(params)
    opt = torch.optim.AdamW(model.parameters(), lr=float(params["lr"]),
                            weight_decay=float(params["weight_decay"]))  # fmt: skip
    step = 0
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = int(state["step"])
        for group in opt.param_groups:  # PBT's explore may have changed them
            group["lr"], group["weight_decay"] = float(params["lr"]), params["weight_decay"]
    total, every, value = steps or STEPS[workload], EVAL_EVERY[workload], math.inf
    seed = int(params.get("seed", 0))
    while step < total:
        step += 1
        for group in opt.param_groups:
            group["lr"] = float(params["lr"]) * lr_at(step, total)
        x, y = batch(np.random.default_rng((seed, step)))
        loss = model.loss(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % every == 0 or step == total:
            value = evaluate()
            if not math.isfinite(value):
                value = 1e3  # diverged: a bad model, not a missing one
            log_value(value)

            def state_fn(at: int = step) -> dict[str, Any]:
                return {"model": model.state_dict(), "opt": opt.state_dict(), "step": at}

            if not report(step, value, state_fn):
                break
    return value


def _digits(p: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    import torch
    from torch.nn import functional as F  # noqa: N812

    from hyperfleet.trials.workloads.digits import build_model, load_split

    xtr, ytr, xva, yva = (torch.from_numpy(a) for a in load_split(0))
    torch.manual_seed(int(p.get("seed", 0)))
    net = build_model(int(p["hidden"]), str(p["act"]))
    net.loss = lambda x, y: F.cross_entropy(net(x), y)  # type: ignore[assignment]
    rows = int(p["batch_size"])

    def batch(rng: np.random.Generator) -> tuple[Any, Any]:
        ids = torch.from_numpy(rng.integers(0, len(xtr), rows))
        return xtr[ids], ytr[ids]

    @torch.no_grad()
    def evaluate() -> float:
        net.eval()
        value = float(F.cross_entropy(net(xva), yva))
        net.train()
        return value

    return net, batch, evaluate, lambda step, total: 1.0


def prepare_data(workload: str, cache: str | os.PathLike[str]) -> None:
    """Prepare ``workload``'s data in ``cache`` (the runs' ``$HYPERFLEET_CACHE``) before any
    system is timed: charlm's corpus is built once per cache (about 2 s of CPU), which the
    first system to run charlm paid on its clock otherwise."""
    if workload == "charlm":
        from hyperfleet.trials.data import prepare_corpus

        prepare_corpus(None, cache_dir=Path(cache) / "corpora", max_bytes=CHARLM_BYTES)


def _charlm(p: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    import torch
    from torch.nn import functional as F  # noqa: N812

    from hyperfleet.trials.data import prepare_corpus
    from hyperfleet.trials.models.gpt import GPT, GPTConfig

    corpus = prepare_corpus(None, max_bytes=CHARLM_BYTES)
    tokens = np.concatenate([np.asarray(s) for s in corpus.shards()]).astype(np.int64)
    cut, seq, rows = int(0.9 * len(tokens)), 64, 16
    train_tokens, val_tokens = tokens[:cut], tokens[cut:]
    torch.manual_seed(int(p.get("seed", 0)))
    width = int(p["width"])
    net = GPT(GPTConfig(seq_len=seq, n_layer=2, n_head=2, n_embd=width,
                        dropout=float(p["dropout"])))  # fmt: skip

    def lm_loss(x: Any, y: Any) -> Any:
        return F.cross_entropy(net(x).flatten(0, 1), y.flatten())

    net.loss = lm_loss  # type: ignore[assignment]

    def windows(source: np.ndarray, starts: np.ndarray) -> tuple[Any, Any]:
        t = torch.from_numpy(np.stack([source[s : s + seq + 1] for s in starts]))
        return t[:, :-1], t[:, 1:]

    def batch(rng: np.random.Generator) -> tuple[Any, Any]:
        return windows(train_tokens, rng.integers(0, len(train_tokens) - seq - 1, rows))

    val = windows(val_tokens, np.linspace(0, len(val_tokens) - seq - 2, 64).astype(np.int64))

    @torch.no_grad()
    def evaluate() -> float:
        net.eval()
        value = float(lm_loss(*val))
        net.train()
        return value

    warmup = int(p["warmup"])

    def lr_at(step: int, total: int) -> float:
        if step <= warmup:
            return step / max(warmup, 1)
        done = (step - warmup) / max(total - warmup, 1)
        return 0.1 + 0.45 * (1 + math.cos(math.pi * min(done, 1.0)))

    return net, batch, evaluate, lr_at


# -- hyperfleet's side: the workloads a sweep names ---------------------------------------


def _hyperfleet(workload: str, ctx: Any) -> None:
    """A trial of ``workload``; it checkpoints at its reports only where the sweep's
    ``trial.params`` say ``checkpoints: true`` (PBT's), as Ray's and Optuna's runs do."""
    keep = bool(ctx.params.get("checkpoints", False))

    def report(step: int, value: float, state: Callable[[], dict[str, Any]]) -> bool:
        ctx.report(step, {"val_loss": value}, checkpoint=state() if keep else None)  # may prune
        return True

    train(workload, dict(ctx.params), report, ctx.load_checkpoint(), ctx.max_steps)


def hyperfleet_digits(ctx: Any) -> None:
    """``trial.workload: benchmarks.anytime_workloads:hyperfleet_digits``."""
    _hyperfleet("digits", ctx)


def hyperfleet_charlm(ctx: Any) -> None:
    """``trial.workload: benchmarks.anytime_workloads:hyperfleet_charlm``."""
    _hyperfleet("charlm", ctx)
