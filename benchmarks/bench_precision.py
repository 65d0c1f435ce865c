"""Training speed of fp32, bf16 and fp16 (loss scaling) side by side, through the step helper.

One process, charlm's GPT on random tokens, the trial's own ``Parallelism`` (autocast, the
GradScaler and its shared overflow verdict, clipping) on the best device here: CUDA when there
is one, else CPU. The precisions alternate over several rounds so machine load hits all alike;
medians of steps/s are printed with ``ratio = steps/s / fp32 steps/s`` and, on CUDA, the
model-FLOPs utilisation. On CPUs without native fp16 arithmetic fp16 is emulated: this shows
by how much, and why docs/trials.md steers CPU users to bf16.
Usage: ``python benchmarks/bench_precision.py [--quick | --large]`` (``--large``: GPT-2 small's
shape, 12 layers of width 768 over 1024 tokens, where a GPU's tensor cores have work to do).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.nn import functional as F  # noqa: N812

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hyperfleet.spec.trial import CommConfig, ParallelConfig
from hyperfleet.trials.models.gpt import GPT, GPTConfig
from hyperfleet.trials.parallel import Parallelism

PRECISIONS = ("fp32", "bf16", "fp16")


def run(precision: str, cfg: GPTConfig, rows: int, steps: int, dev: torch.device) -> dict:
    """Steps/s (after 2 warm-up steps), final loss, skipped steps and MFU of one precision."""
    torch.manual_seed(0)
    par = Parallelism(ParallelConfig(), CommConfig(), precision, dev, grad_clip=1.0)  # type: ignore[arg-type]
    model = par.wrap(GPT(cfg))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    n_params = sum(p.numel() for p in model.parameters())
    meter = par.throughput(n_params)
    g = torch.Generator().manual_seed(1)
    data = torch.randint(0, cfg.vocab_size, (rows, cfg.seq_len + 1), generator=g).to(dev)
    x, y = data[:, :-1], data[:, 1:]
    start = 0.0
    for i in range(steps + 2):
        if i == 2:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            meter.start()
        with par.autocast():
            logits = model(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        out = par.backward_step(loss, opt)
        assert out is not None
        if i >= 2:
            meter.step(samples=rows, tokens=rows * cfg.seq_len)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    metrics = meter.stop()
    return {
        "steps_per_s": steps / (time.perf_counter() - start),
        "loss": out.loss,
        "skipped": par.precision.skipped_steps,
        "mfu": metrics.get("mfu"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a small model, fewer rounds")
    ap.add_argument("--large", action="store_true", help="GPT-2 small's shape (for a GPU)")
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shape, rows, steps, rounds = (128, 4, 4, 256), 16, 10, 5  # seq_len, layers, heads, width
    if args.large:
        shape, rows, steps, rounds = (1024, 12, 12, 768), 16, 20, 3
    elif dev.type == "cuda":
        shape, rows, steps, rounds = (256, 8, 8, 512), 32, 30, 3
    elif args.quick:
        shape, rows, steps, rounds = (64, 2, 4, 128), 16, 8, 3
    cfg = GPTConfig(seq_len=shape[0], n_layer=shape[1], n_head=shape[2], n_embd=shape[3])
    print(f"device {dev} ({torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu'}), "
          f"GPT {cfg.n_layer}x{cfg.n_embd}, batch {rows}x{cfg.seq_len}, {steps} steps x "
          f"{rounds} rounds")  # fmt: skip
    results: dict[str, list[dict]] = {p: [] for p in PRECISIONS}
    for _ in range(rounds):
        for precision in PRECISIONS:
            results[precision].append(run(precision, cfg, rows, steps, dev))
    base = statistics.median(r["steps_per_s"] for r in results["fp32"])
    print("| precision | steps/s | ratio to fp32 | final loss | skipped steps | MFU |")
    print("| --- | --- | --- | --- | --- | --- |")
    for precision, runs in results.items():
        speed = statistics.median(r["steps_per_s"] for r in runs)
        mfu = [r["mfu"] for r in runs if r["mfu"] is not None]
        mfu_s = f"{statistics.median(mfu):.3f}" if mfu else "-"
        print(f"| {precision} | {speed:.2f} | {speed / base:.2f} | {runs[-1]['loss']:.3f} | "
              f"{runs[-1]['skipped']} | {mfu_s} |")  # fmt: skip


if __name__ == "__main__":
    main()
