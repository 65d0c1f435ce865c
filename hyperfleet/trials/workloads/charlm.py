"""``charlm``: a small GPT-style byte-level language model (vocabulary 256).

The corpus (default: the running Python's standard-library source) is turned once into a
cached, memory-mapped uint8 token file that later trials reuse. The last 10% of it is held out
for validation. Every step draws a global batch of random windows, a deterministic function of
``seed`` and the step, and each data-parallel rank trains on its slice. Metrics: ``loss``,
``val_loss`` and ``tokens_per_s``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from hyperfleet.trials.context import TrialContext
from hyperfleet.trials.data.text import prepare_text_corpus
from hyperfleet.trials.models.gpt import GPT, GPTConfig
from hyperfleet.trials.workloads.common import checked_params, rank_slice, unwrap, wrap_ddp


def windows(tokens: np.ndarray, starts: np.ndarray, seq_len: int) -> tuple[torch.Tensor, ...]:
    rows = np.stack([np.asarray(tokens[s : s + seq_len + 1]) for s in starts])
    t = torch.from_numpy(rows.astype(np.int64))
    return t[:, :-1], t[:, 1:]


def batch_starts(n: int, batch: int, seq_len: int, step: int, seed: int) -> np.ndarray:
    return np.random.default_rng([seed, step]).integers(0, n - seq_len - 1, size=batch)


@torch.no_grad()
def evaluate(model: torch.nn.Module, val: np.ndarray, p: dict[str, Any], device: Any) -> float:
    model.eval()
    seq = int(p["seq_len"])
    starts = np.linspace(0, len(val) - seq - 2, int(p["eval_batches"]) * 8).astype(np.int64)
    losses = []
    for chunk in np.array_split(starts, int(p["eval_batches"])):
        x, y = windows(val, chunk, seq)
        logits = model(x.to(device))
        losses.append(float(F.cross_entropy(logits.flatten(0, 1), y.to(device).flatten())))
    model.train()
    return float(np.mean(losses))


def main(ctx: TrialContext) -> None:
    p = checked_params("charlm", ctx.params)
    tokens = prepare_text_corpus(p["corpus"] or None, max_bytes=int(p["corpus_bytes"]))
    cut = int(0.9 * len(tokens))
    train, val = tokens[:cut], tokens[cut:]
    torch.manual_seed(p["seed"])
    cfg = GPTConfig(
        seq_len=int(p["seq_len"]),
        n_layer=int(p["n_layer"]),
        n_head=int(p["n_head"]),
        n_embd=int(p["n_embd"]),
        dropout=float(p["dropout"]),
    )
    model = GPT(cfg).to(ctx.device)
    opt = torch.optim.AdamW(model.parameters(), lr=p["lr"], weight_decay=p["weight_decay"])
    step = 0
    state = ctx.load_checkpoint()
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        torch.set_rng_state(state["rng"])
        step = int(state["step"])
    ddp = wrap_ddp(model, ctx.world_size, ctx.device)
    batch = int(p["batch_size"])
    mine = rank_slice(batch, ctx.rank, ctx.world_size)
    tokens_seen, t0 = 0, time.perf_counter()
    while step < ctx.max_steps:
        starts = batch_starts(len(train), batch, cfg.seq_len, step, p["seed"])[mine]
        x, y = (t.to(ctx.device) for t in windows(train, starts, cfg.seq_len))
        loss = F.cross_entropy(ddp(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        tokens_seen += x.numel() * ctx.world_size
        if ctx.should_eval(step):
            elapsed = time.perf_counter() - t0
            metrics = {
                "loss": loss.item(),
                "val_loss": evaluate(unwrap(ddp), val, p, ctx.device),
                "tokens_per_s": tokens_seen / max(elapsed, 1e-9),
            }
            ckpt = {
                "step": step,
                "model": unwrap(ddp).state_dict(),
                "optim": opt.state_dict(),
                "rng": torch.get_rng_state(),
            }
            ctx.report(step, metrics, checkpoint=ckpt)
            tokens_seen, t0 = 0, time.perf_counter()
