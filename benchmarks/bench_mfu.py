"""Model-FLOPs utilisation of charlm's GPT at GPT-2 small's size, against torchtitan's figure.

The training stack a GPU needs, in one loop: bf16 autocast, ``torch.compile`` (``--no-compile``
turns it off), AdamW with ``fused=True`` on CUDA, attention through
``F.scaled_dot_product_attention(is_causal=True)`` (FlashAttention's kernel on a GPU that has
it), and a data path that keeps the GPU fed: charlm's byte corpus through the trial's
``TokenLoader``, batches assembled and pinned on a host thread two ahead, copied with
``non_blocking`` on a side stream while the previous step computes. The loss stays on the device
until the end, so the host never waits for the GPU between steps.

Model FLOPs are counted as torchtitan counts them (``6 * (N - N_embedding)`` plus attention's
``12 * L * H * Q * T`` per token) by the trial's ``ThroughputMeter``, against the card's dense
bf16 peak (``PEAK_FLOPS``: H100/H200 989, A100 312 TFLOP/s). Without CUDA the script runs a tiny
model for a few steps on the CPU, so every part of the path executes, and says that it measured
no GPU. At ``gpt2-small`` the vocabulary is GPT-2's 50257 (``--vocab 256`` for charlm's
bytes), so the parameters and FLOPs are GPT-2 small's (its head untied: 163M parameters); the
tokens are bytes either way. ``tiny`` (the CPU's default) keeps charlm's 256.
Usage: ``python benchmarks/bench_mfu.py [--size gpt2-small|tiny] [--steps N] [--no-compile]
[--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import math
import queue
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hyperfleet.trials.data import TokenLoader, prepare_corpus
from hyperfleet.trials.models.gpt import GPT, GPTConfig
from hyperfleet.trials.parallel.throughput import ThroughputMeter, transformer_flops_per_token

SIZES = {  # seq_len, layers, heads, width, batch rows, vocabulary, timed steps, warm-up steps
    "gpt2-small": (1024, 12, 12, 768, 16, 50257, 30, 5),
    "tiny": (64, 2, 2, 64, 4, 256, 4, 1),
}
TORCHTITAN_MFU = {"H100": (0.33, 0.39), "H200": (0.33, 0.39)}
"""torchtitan's reported bf16 MFU range on H100-class cards (matched in the device name)."""
NO_GPU = "no GPU was available: the path ran on the CPU, and no MFU was measured"

Batch = tuple[torch.Tensor, torch.Tensor]


def host_batches(loader: TokenLoader, pin: bool, depth: int = 2) -> Iterator[Batch]:
    """The loader's batches, assembled (and pinned) on a daemon thread ``depth`` ahead."""
    q: queue.Queue[Batch] = queue.Queue(maxsize=depth)

    def fill() -> None:
        while True:
            x, y = loader.next_batch()
            q.put((x.pin_memory(), y.pin_memory()) if pin else (x, y))

    threading.Thread(target=fill, daemon=True, name="host-batches").start()
    while True:
        yield q.get()


def device_batches(host: Iterator[Batch], dev: torch.device) -> Iterator[Batch]:
    """Host batches on ``dev``; on CUDA each one is copied on a side stream a step ahead."""
    if dev.type != "cuda":
        for x, y in host:
            yield x.to(dev), y.to(dev)
        return
    stream = torch.cuda.Stream(dev)

    def copy() -> Batch:
        x, y = next(host)
        with torch.cuda.stream(stream):
            return x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)

    ahead = copy()
    while True:
        torch.cuda.current_stream(dev).wait_stream(stream)
        x, y = ahead
        x.record_stream(torch.cuda.current_stream(dev))
        y.record_stream(torch.cuda.current_stream(dev))
        ahead = copy()
        yield x, y


def build(cfg: GPTConfig, dev: torch.device, compile_model: bool) -> tuple[nn.Module, GPT]:
    """The model on ``dev`` (compiled when asked) and its plain module."""
    torch.manual_seed(0)
    model = GPT(cfg).to(dev)
    return (torch.compile(model) if compile_model else model), model  # type: ignore[return-value]


def titan_mfu(device_name: str) -> tuple[float, float] | None:
    """torchtitan's reported MFU range for the card's class, if it reports one."""
    return next((v for k, v in TORCHTITAN_MFU.items() if k in device_name), None)


def flops_per_token(model: GPT, cfg: GPTConfig) -> float:
    n = sum(p.numel() for p in model.parameters())
    emb = sum(
        p.numel() for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters()
    )
    head_dim = cfg.n_embd // cfg.n_head
    return transformer_flops_per_token(n, emb, cfg.n_layer, cfg.n_head, head_dim, cfg.seq_len)


def train(args: argparse.Namespace, cfg: GPTConfig, rows: int, dev: torch.device) -> dict:
    """Warm-up steps (compilation), then ``args.steps`` timed steps; the run's figures."""
    compile_model = args.compile if args.compile is not None else dev.type == "cuda"
    net, model = build(cfg, dev, compile_model)
    cuda = dev.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=cuda)
    n_params = sum(p.numel() for p in model.parameters())
    meter = ThroughputMeter(n_params, dev, flops_per_token=flops_per_token(model, cfg))
    corpus = prepare_corpus(None, max_bytes=args.corpus_bytes)
    loader = TokenLoader(corpus, cfg.seq_len, rows, seed=0)
    batches = device_batches(host_batches(loader, pin=cuda), dev)
    losses: list[torch.Tensor] = []
    t0 = time.perf_counter()
    for i in range(args.warmup + args.steps):
        if i == args.warmup:
            warm_s = time.perf_counter() - t0
            meter.start()
        x, y = next(batches)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            logits = net(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
        if i >= args.warmup:
            meter.step(samples=rows, tokens=rows * cfg.seq_len)
    metrics = meter.stop()
    return {
        "params": n_params,
        "compiled": compile_model,
        "warmup_s": warm_s,
        "first_loss": float(losses[0]),
        "final_loss": float(losses[-1]),
        "flops_per_token": meter.flops_per_token,
        "peak": meter.peak,
        **metrics,
    }


def report(res: dict) -> str:
    """One markdown table of the run, and the MFU line (or the line that says there was none)."""
    mfu = res.get("mfu")
    titan = res.get("torchtitan_mfu")
    achieved = res["flops_per_token"] * res["tokens_per_s"]
    rows = [
        ("device", res["device"]),
        ("model", f"GPT {res['shape']}, {res['params'] / 1e6:.1f}M params, vocab {res['vocab']}"),
        ("batch", f"{res['rows']}x{res['seq_len']}, {res['steps']} timed steps"),
        ("torch.compile", "on" if res["compiled"] else "off"),
        ("warm-up (incl. compile)", f"{res['warmup_s']:.1f} s"),
        ("loss first / last", f"{res['first_loss']:.3f} / {res['final_loss']:.3f}"),
        ("tokens/s", f"{res['tokens_per_s']:,.0f}"),
        ("step time", f"{res['step_time_s'] * 1e3:.1f} ms"),
        ("model TFLOP/s", f"{achieved / 1e12:.2f}"),
        ("peak bf16 TFLOP/s", f"{res['peak'] / 1e12:.0f}" if res.get("peak") else "unknown"),
        ("MFU", f"{mfu:.3f}" if mfu is not None else "-"),
        ("torchtitan MFU, this card class", f"{titan[0]:.2f}-{titan[1]:.2f}" if titan else "none"),
    ]  # fmt: skip
    lines = ["| measure | value |", "| --- | --- |", *(f"| {k} | {v} |" for k, v in rows)]
    if res["device_type"] != "cuda":
        lines.append(NO_GPU)
    elif mfu is None:
        lines.append(f"MFU not measured: no peak known for {res['device']} (HYPERFLEET_PEAK_FLOPS)")
    else:
        lines.append(f"MFU {mfu:.3f} on {res['device']}")
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(SIZES), help="gpt2-small on CUDA, tiny on CPU")
    ap.add_argument("--vocab", type=int, help="50257 (GPT-2's, gpt2-small's default) or 256")
    ap.add_argument("--rows", type=int, help="sequences per step (the size's default)")
    ap.add_argument("--steps", type=int, help="timed steps (gpt2-small 30, tiny 4)")
    ap.add_argument("--warmup", type=int, help="untimed steps first (gpt2-small 5, tiny 1)")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                    help="torch.compile the model (default: on CUDA only)")  # fmt: skip
    ap.add_argument("--corpus-bytes", type=int, default=4_000_000, help="charlm's corpus size")
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    args = ap.parse_args(argv)
    for name in ("vocab", "steps", "warmup", "rows", "corpus_bytes"):
        value = getattr(args, name)
        if value is not None and value < (256 if name == "vocab" else 1):
            low = 256 if name == "vocab" else 1
            ap.exit(2, f"--{name.replace('_', '-')}: {value}; give an integer >= {low}\n")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    size = args.size or ("gpt2-small" if dev.type == "cuda" else "tiny")
    seq, layers, heads, width, rows, vocab, steps, warmup = SIZES[size]
    rows, args.vocab = args.rows or rows, args.vocab or vocab
    args.steps, args.warmup = args.steps or steps, args.warmup or warmup
    cfg = GPTConfig(vocab_size=args.vocab, seq_len=seq, n_layer=layers, n_head=heads, n_embd=width)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    res = train(args, cfg, rows, dev)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    res.update(device=name, device_type=dev.type, size=size, shape=f"{layers}x{width}",
               vocab=args.vocab, rows=rows, seq_len=seq, steps=args.steps,
               torchtitan_mfu=titan_mfu(name))  # fmt: skip
    if not math.isfinite(res["final_loss"]):
        print(f"the final loss is {res['final_loss']}: the run diverged", file=sys.stderr)
    print(report(res), flush=True)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2) + "\n")
    return res


if __name__ == "__main__":
    main()
