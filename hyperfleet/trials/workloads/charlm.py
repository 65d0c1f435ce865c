"""``charlm``: a small GPT-style byte-level language model (vocabulary 256), any layout.

Data. The corpus (default: the running Python's standard-library source) is prepared once into
the shared cache of checksummed token shards (:func:`hyperfleet.trials.data.prepare_corpus`);
later trials find a verified cache hit and tokenise nothing. The last 10% of its tokens are held
out for validation. Training windows come from a per-data-replica :class:`TokenLoader` (the
replica's index on the data axis, so both stages of one pipeline read the same batch); its
position is part of the checkpoint, so a resumed trial sees exactly the windows it would have.

One loop serves every layout through the ``ctx`` helpers: plain or DDP data parallelism
(``ctx.wrap`` + ``ctx.backward_step`` over ``grad_accum`` micro-batches, under
``ctx.autocast()``), or a pipeline (``ctx.pipeline`` over ``GPT.layers()``, any schedule, hybrid
with data parallelism). ``batch_size`` is the global batch of one optimizer step, so the
optimisation is the same whatever the layout.

Metrics: ``loss`` (averaged over data replicas), ``val_loss``, ``tokens_per_s``,
``samples_per_s``, ``step_time_s`` (training steps only, not evaluation), on CUDA ``mfu``, and
with fp16 ``loss_scale`` and ``skipped_steps``.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 - the usual name

from hyperfleet.errors import ConfigError
from hyperfleet.trials.context import TrialContext
from hyperfleet.trials.data import TokenLoader, prepare_corpus
from hyperfleet.trials.models.gpt import GPT, GPTConfig
from hyperfleet.trials.workloads.common import checked_params, per_rank_batch, unwrap

logger = logging.getLogger(__name__)

VAL_FRACTION = 0.1


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def split_corpus(p: dict[str, Any]) -> tuple[list[np.ndarray], np.ndarray]:
    """Training shards (memory-mapped views) and the held-out tail, from the shared cache."""
    corpus = prepare_corpus(p["corpus"] or None, max_bytes=int(p["corpus_bytes"]))
    what = "prepared" if corpus.prepared else "cache hit"
    logger.info("corpus %s: %s (%d tokens)", corpus.directory, what, corpus.total_tokens)
    cut = int((1 - VAL_FRACTION) * corpus.total_tokens)
    train, val, start = [], [], 0
    for shard in corpus.shards():
        lo, hi = start, start + len(shard)
        if lo < cut:
            train.append(shard[: min(hi, cut) - lo])
        if hi > cut:
            val.append(shard[max(cut - lo, 0) :])
        start = hi
    return train, np.concatenate(val)


def val_batches(
    val: np.ndarray, windows: int, rows: int, seq: int, part: int, parts: int
) -> list[tuple[torch.Tensor, ...]]:
    """Part ``part`` of ``parts`` of the held-out set: ``windows`` fixed windows spread over
    the split (the same set for every layout), in batches of ``rows``."""
    starts = np.linspace(0, len(val) - seq - 2, windows).astype(np.int64)
    chunks = np.array_split(starts, windows // rows)
    out = []
    for chunk in chunks[part::parts]:
        t = torch.from_numpy(np.stack([val[s : s + seq + 1] for s in chunk]).astype(np.int64))
        out.append((t[:, :-1], t[:, 1:]))
    return out


@torch.no_grad()
def evaluate(ctx: TrialContext, model: Any, batches: list[tuple[torch.Tensor, ...]]) -> float:
    """Mean loss over the held-out set; each data replica evaluates its part (collective)."""
    dev = ctx.device
    if ctx.pipelined:
        losses = [model.evaluate(x.to(dev), y.to(dev)) for x, y in batches]
    else:
        net = unwrap(model)
        net.eval()
        losses = []
        for x, y in batches:
            with ctx.autocast():
                losses.append(float(lm_loss(net(x.to(dev)), y.to(dev))))
        net.train()
    return ctx.mean_over_data(float(np.mean(losses)))


def build(ctx: TrialContext, p: dict[str, Any]) -> tuple[Any, torch.optim.Optimizer, int]:
    """The model (wrapped, or a pipeline runner), its optimizer and its parameter count."""
    cfg = GPTConfig(
        seq_len=int(p["seq_len"]),
        n_layer=int(p["n_layer"]),
        n_head=int(p["n_head"]),
        n_embd=int(p["n_embd"]),
        dropout=float(p["dropout"]),
    )
    torch.manual_seed(int(p["seed"]))  # the same initial weights on every rank
    model = GPT(cfg)
    n_params = sum(q.numel() for q in model.parameters())

    def make_opt(params: list[nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=float(p["lr"]), weight_decay=float(p["weight_decay"]))

    if ctx.pipelined:
        runner = ctx.pipeline(model.layers(), lm_loss, make_opt)
        return runner, runner.optimizer, n_params
    net = ctx.wrap(model)
    return net, make_opt(list(net.parameters())), n_params


def main(ctx: TrialContext) -> None:
    p = checked_params("charlm", ctx.params)
    accum = ctx.config.grad_accum
    rows = per_rank_batch(int(p["batch_size"]), ctx.data_size, accum)
    if ctx.pipelined and rows % ctx.config.parallel.n_microbatches:
        raise ConfigError(
            f"trial.params.batch_size: {p['batch_size']} per {ctx.data_size} replica(s) is not "
            f"a multiple of parallel.microbatches {ctx.config.parallel.n_microbatches}"
        )
    train, val = split_corpus(p)
    seq = int(p["seq_len"])
    loader = TokenLoader(train, seq, rows, ctx.data_rank, ctx.data_size, seed=int(p["seed"]))
    windows = int(p["eval_batches"]) * int(p["batch_size"])
    held_out = val_batches(val, windows, rows, seq, ctx.data_rank, ctx.data_size)
    model, opt, n_params = build(ctx, p)
    state = ctx.load_checkpoint()
    step = 0
    if state is not None:
        step = ctx.restore(state, model=model, optimizer=opt, loader=loader)
    else:
        torch.manual_seed(int(p["seed"]) * 1000 + 1 + ctx.rank)  # dropout differs per rank
    dev = ctx.device
    meter = ctx.throughput(n_params)
    meter.start()
    while step < ctx.max_steps:
        if ctx.pipelined:
            x, y = loader.next_batch()
            out = model.train_step(x.to(dev), y.to(dev))
        else:
            for _ in range(accum):
                x, y = loader.next_batch()
                with ctx.autocast():
                    loss = lm_loss(model(x.to(dev)), y.to(dev))
                done = ctx.backward_step(loss, opt)
            assert done is not None
            out = done
        step += 1
        meter.step(samples=int(p["batch_size"]), tokens=int(p["batch_size"]) * seq)
        if ctx.should_eval(step):
            metrics = meter.stop()
            metrics["loss"] = ctx.mean_over_data(out.loss)
            metrics["val_loss"] = evaluate(ctx, model, held_out)
            metrics.update(ctx.precision_metrics())
            ckpt = ctx.state(step, model=model, optimizer=opt, loader=loader)
            ctx.report(step, metrics, checkpoint=ckpt)
            meter.start()
