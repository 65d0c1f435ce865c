"""``digits``: an MLP classifier on scikit-learn's bundled 8x8 digits (1,797 images).

The split (80% train, 20% validation) is a deterministic function of ``seed``; batches come
from a per-replica :class:`ArrayLoader` (disjoint, balanced parts of a seeded order per epoch),
whose position is part of the checkpoint, so a resumed trial sees exactly the batches it would
have seen, at any data-parallel width.

``sync.mode: allreduce`` (default): DDP through ``ctx.wrap`` and ``ctx.backward_step`` (with
``grad_accum``, ``grad_clip``, ``precision`` and ``comm`` of the trial config); ``batch_size``
is the global batch of one optimizer step. ``sync.mode: async-ps``: rank 0 is a parameter server
(:mod:`hyperfleet.trials.async_ps`) that holds the weights and the optimizer and reports; the
other ranks are workers that push gradients of ``batch_size`` rows each, asynchronously (each
push is one of the trial's steps), computed under ``precision`` (fp32 or bf16). Metrics:
``loss`` (train), ``val_loss``, ``val_accuracy``, ``samples_per_s``, ``step_time_s``.
"""

from __future__ import annotations

import gzip
import importlib.util
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 - the usual name

from hyperfleet.errors import ConfigError
from hyperfleet.spec.wire import CONTINUE, Decision, DecisionKind
from hyperfleet.trials.context import TrialContext
from hyperfleet.trials.data import ArrayLoader
from hyperfleet.trials.distributed import broadcast_object
from hyperfleet.trials.parallel.precision import autocast
from hyperfleet.trials.workloads.common import checked_params, per_rank_batch, unwrap

_ACTS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits (1797 images of 8x8, targets 0-9), as ``load_digits`` returns them.

    Read from the file scikit-learn ships (``sklearn/datasets/data/digits.csv.gz``, found
    without importing scikit-learn, whose import costs a rank about 1.7 s of CPU); through
    ``sklearn.datasets.load_digits`` when that file is not where this release keeps it.
    """
    spec = importlib.util.find_spec("sklearn")
    origin = Path(spec.origin) if spec is not None and spec.origin else None
    data_file = origin.parent / "datasets" / "data" / "digits.csv.gz" if origin else None
    if data_file is None or not data_file.is_file():
        from sklearn.datasets import load_digits as sklearn_digits

        x, y = sklearn_digits(return_X_y=True)
        return x, y
    with gzip.open(data_file, mode="rt", encoding="utf-8") as f:
        data = np.loadtxt(f, delimiter=",")
    return data[:, :-1], data[:, -1].astype(int, copy=False)


def load_split(seed: int) -> tuple[np.ndarray, ...]:
    x, y = load_digits()
    order = np.random.default_rng(seed).permutation(len(x))
    x = (x[order] / 16.0).astype(np.float32)
    y = y[order].astype(np.int64)
    cut = int(0.8 * len(x))
    return x[:cut], y[:cut], x[cut:], y[cut:]


def build_model(hidden: int, act: str) -> nn.Module:
    if act not in _ACTS:
        raise ValueError(f"digits: act must be one of {', '.join(_ACTS)}, got {act!r}")
    a = _ACTS[act]
    return nn.Sequential(
        nn.Linear(64, hidden), a(), nn.Linear(hidden, hidden), a(), nn.Linear(hidden, 10)
    )


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, prefix: str) -> dict[str, float]:
    model.eval()
    logits = model(x)
    model.train()
    return {
        f"{prefix}loss": float(F.cross_entropy(logits.float(), y)),
        f"{prefix}accuracy": float((logits.argmax(1) == y).float().mean()),
    }


def _setup(ctx: TrialContext, p: dict[str, Any]) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(int(p["seed"]))
    model = build_model(int(p["hidden"]), str(p["act"])).to(ctx.device)
    return model, torch.optim.AdamW(
        model.parameters(), lr=float(p["lr"]), weight_decay=float(p["weight_decay"])
    )


def main(ctx: TrialContext) -> None:
    p: dict[str, Any] = checked_params("digits", ctx.params)
    if ctx.pipelined:
        raise ConfigError(
            "trial.parallel.pipeline: digits is a 3-layer MLP trained data-parallel; "
            "use pipeline: 1 (or the charlm workload for pipelines)"
        )
    sync = ctx.config.sync
    if sync.mode == "async-ps":
        train_async(ctx, p, sync.staleness)
        return
    xtr, ytr, xva, yva = load_split(int(p["seed"]))
    val = (torch.from_numpy(xva).to(ctx.device), torch.from_numpy(yva).to(ctx.device))
    accum = ctx.config.grad_accum
    rows = per_rank_batch(int(p["batch_size"]), ctx.data_size, accum)
    loader = ArrayLoader([xtr, ytr], rows, ctx.data_rank, ctx.data_size, seed=int(p["seed"]))
    model, _ = _setup(ctx, p)
    net = ctx.wrap(model)
    opt = torch.optim.AdamW(net.parameters(), lr=float(p["lr"]), weight_decay=p["weight_decay"])
    state = ctx.load_checkpoint()
    step = 0 if state is None else ctx.restore(state, model=net, optimizer=opt, loader=loader)
    meter = ctx.throughput(sum(q.numel() for q in model.parameters()))
    meter.start()
    while step < ctx.max_steps:
        out = None
        while out is None:
            x, y = (t.to(ctx.device) for t in loader.next_batch())
            with ctx.autocast():
                loss = F.cross_entropy(net(x).float(), y)
            out = ctx.backward_step(loss, opt)
        step += 1
        meter.step(samples=int(p["batch_size"]))
        if ctx.should_eval(step):
            metrics = meter.stop()
            metrics["loss"] = ctx.mean_over_data(out.loss)
            metrics.update(evaluate(unwrap(net), *val, prefix="val_"))
            metrics.update(ctx.precision_metrics())
            ckpt = ctx.state(step, model=net, optimizer=opt, loader=loader)
            ctx.report(step, metrics, checkpoint=ckpt)
            meter.start()


def train_async(ctx: TrialContext, p: dict[str, Any], staleness: int | None) -> None:
    """Rank 0 serves parameters and reports; ranks 1.. push gradients (see the docstring)."""
    from hyperfleet.trials import async_ps

    xtr, ytr, xva, yva = load_split(int(p["seed"]))
    model, opt = _setup(ctx, p)  # every rank, so that restore (collective) sees one layout
    state = ctx.load_checkpoint()
    start = 0 if state is None else ctx.restore(state, model=model, optimizer=opt)
    rows = int(p["batch_size"])
    decision: Decision = CONTINUE
    async_ps.init_rpc(ctx.rank, ctx.world_size, init_method="env://")
    finished = False
    try:
        if start >= ctx.max_steps:
            pass  # resumed at its last step: nothing left to train
        elif ctx.is_main:
            val = (torch.from_numpy(xva), torch.from_numpy(yva))
            probe = (torch.from_numpy(xtr[:512]), torch.from_numpy(ytr[:512]))
            clock = {"t": time.perf_counter(), "v": 0}

            def progress(version: int, net: nn.Module) -> bool:
                nonlocal decision
                step, now = start + version, time.perf_counter()
                done = max(version - clock["v"], 1)
                metrics = {
                    "samples_per_s": done * rows / max(now - clock["t"], 1e-9),
                    "step_time_s": (now - clock["t"]) / done,
                    "loss": evaluate(net, *probe, prefix="")["loss"],
                    **evaluate(net, *val, prefix="val_"),
                }
                ckpt = ctx.state(step, model=net, optimizer=opt, local=True)
                decision = ctx.record(step, metrics, ckpt)
                clock.update(t=time.perf_counter(), v=version)
                return decision.kind == DecisionKind.CONTINUE  # else the server stops here

            async_ps.serve(
                model, opt, ctx.max_steps - start, on_progress=progress, every=ctx.eval_every
            )
        else:
            n_workers = ctx.world_size - 1
            loader = ArrayLoader([xtr, ytr], rows, ctx.rank - 1, n_workers, seed=int(p["seed"]))

            precision = ctx.config.precision

            def xent(net: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
                with autocast(precision, ctx.device.type):  # bf16 (fp16 is refused up front)
                    logits = net(batch[0])
                return F.cross_entropy(logits.float(), batch[1])

            async_ps.work(ctx.rank, model, xent, loader, staleness)
        finished = True
    finally:
        async_ps.shutdown(graceful=finished)  # failing (e.g. a peer died): don't wait for it
    ctx.follow(broadcast_object(decision, ctx.env))
