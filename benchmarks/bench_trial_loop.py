"""charlm's whole trial loop (``ctx`` helpers) over a hand-written PyTorch loop, in process.

The trial side is ``hyperfleet.trials.workloads.charlm.main`` itself, run with a single-rank
``TrialContext`` (fp32, no accumulation): the sharded-cache corpus, the per-rank ``TokenLoader``,
``ctx.wrap`` / ``ctx.autocast`` / ``ctx.backward_step``, the throughput meter, one evaluation and
one report with a full-state checkpoint at the end. The hand loop is what one writes without the
platform: the same GPT, AdamW, corpus and loader, ``forward, zero_grad, backward, step``.

Each loop runs ``n`` and ``2n`` steps; the difference of the two wall times is the cost of
``n`` training steps alone (start-up, evaluation and the final checkpoint cancel). The two
alternate over several rounds so machine load hits both alike; medians are printed, and
``ratio = trial-loop steps/s / hand steps/s`` (goal >= 0.97), by wall clock and by process
CPU time (steadier on a shared machine).
Usage: ``python benchmarks/bench_trial_loop.py [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F  # noqa: N812

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hyperfleet.spec.trial import TrialConfig
from hyperfleet.spec.workloads import BUILTIN
from hyperfleet.trials.checkpoint import CheckpointManager
from hyperfleet.trials.context import CONTINUE, TrialContext
from hyperfleet.trials.data import TokenLoader
from hyperfleet.trials.distributed import DistEnv
from hyperfleet.trials.models.gpt import GPT, GPTConfig
from hyperfleet.trials.workloads import charlm

PARAMS: dict[str, Any] = {
    **(BUILTIN["charlm"].params or {}),
    "corpus_bytes": 400_000,
    "eval_batches": 1,
}


def trial_loop(steps: int, root: Path) -> tuple[float, float]:
    """Wall and CPU seconds of ``charlm.main`` for ``steps`` steps (one report, at the end)."""
    cfg = TrialConfig.model_validate({"workload": "charlm", "steps": steps})
    ctx = TrialContext(
        params=PARAMS, env=DistEnv(0, 1, 0, torch.device("cpu"), "gloo"), max_steps=steps,
        eval_every=steps, trial_number=0, sweep="bench", config=cfg, workdir=root,
        checkpoints=CheckpointManager(root / f"ck-{time.monotonic_ns()}"),
        reporter=lambda step, metrics: CONTINUE,
    )  # fmt: skip
    t0, c0 = time.perf_counter(), time.process_time()
    charlm.main(ctx)
    return time.perf_counter() - t0, time.process_time() - c0


def hand_loop(steps: int, root: Path) -> tuple[float, float]:
    """Wall and CPU seconds of the same training written directly in PyTorch."""
    p = PARAMS
    t0, c0 = time.perf_counter(), time.process_time()
    train, _ = charlm.split_corpus(p)
    loader = TokenLoader(train, int(p["seq_len"]), int(p["batch_size"]), seed=int(p["seed"]))
    torch.manual_seed(int(p["seed"]))
    model = GPT(GPTConfig(seq_len=p["seq_len"], n_layer=p["n_layer"], n_head=p["n_head"],
                          n_embd=p["n_embd"], dropout=p["dropout"]))  # fmt: skip
    opt = torch.optim.AdamW(model.parameters(), lr=p["lr"], weight_decay=p["weight_decay"])
    for _ in range(steps):
        x, y = loader.next_batch()
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    loss.item()
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer steps and rounds (< 60 s)")
    args = ap.parse_args()
    n, rounds = (40, 3) if args.quick else (150, 5)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ.setdefault("HYPERFLEET_CACHE", str(root / "cache"))
        trial_loop(2, root)  # warm the corpus cache and the code paths
        hand_loop(2, root)
        per_step: dict[str, list[tuple[float, float]]] = {"trial": [], "hand": []}
        for _ in range(rounds):
            for name, fn in (("trial", trial_loop), ("hand", hand_loop)):
                (w2, c2), (w1, c1) = fn(2 * n, root), fn(n, root)
                per_step[name].append(((w2 - w1) / n, (c2 - c1) / n))
    trial, hand = (statistics.median(w for w, _ in per_step[k]) for k in ("trial", "hand"))
    trial_cpu, hand_cpu = (statistics.median(c for _, c in per_step[k]) for k in ("trial", "hand"))
    tokens = int(PARAMS["batch_size"]) * int(PARAMS["seq_len"])
    print(f"charlm {PARAMS['n_layer']}x{PARAMS['n_embd']}, batch {PARAMS['batch_size']}x"
          f"{PARAMS['seq_len']}, {n} steps marginal, {rounds} rounds, "
          f"{torch.get_num_threads()} thread(s)")  # fmt: skip
    print(f"hand loop : {1 / hand:8.1f} steps/s  {tokens / hand:10.0f} tokens/s")
    print(f"trial loop: {1 / trial:8.1f} steps/s  {tokens / trial:10.0f} tokens/s")
    print(f"ratio trial/hand = {hand / trial:.3f} by wall clock, {hand_cpu / trial_cpu:.3f} by "
          f"CPU time  (goal >= 0.97)")  # fmt: skip


if __name__ == "__main__":
    main()
