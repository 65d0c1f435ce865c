"""Throughput of a ``transformers.Trainer`` with ``HyperfleetCallback`` beside the same Trainer
without it, side by side in one process.

Both train the tiny GPT-2 of ``examples/transformers/byte_gpt2.py`` (same params, same seed,
same data) for the same steps, evaluating and checkpointing at the same steps: the plain
Trainer by its own ``eval_strategy``/``save_strategy`` (``save_total_limit`` as ``keep``), the
callback's by a trial context in this process (its report recorded by a stand-in that answers
CONTINUE, the Trainer's checkpoint filed by the trial's ``CheckpointManager``: packed,
checksummed, fsynced, pruned). Rounds alternate the two; each prints optimizer steps per second
of ``trainer.train()``, of wall time and of the process's CPU time, and the median ratio
callback / plain is the figure (the target is >= 0.95).

    python benchmarks/bench_transformers.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import transformers
from transformers import Trainer, TrainingArguments

from examples.transformers import byte_gpt2
from hyperfleet.integrations.transformers import HyperfleetCallback
from hyperfleet.spec.trial import TrialConfig
from hyperfleet.spec.wire import CONTINUE, Decision
from hyperfleet.trials.checkpoint import CheckpointManager
from hyperfleet.trials.context import TrialContext
from hyperfleet.trials.distributed import DistEnv


def continue_always(step: int, metrics: Mapping[str, float]) -> Decision:
    return CONTINUE


def context(root: Path, steps: int, every: int, params: dict[str, Any]) -> TrialContext:
    config = TrialConfig.model_validate({
        "workload": "examples.transformers.byte_gpt2:main", "steps": steps, "eval_every": every,
        "resources": {"devices": 0}, "checkpoint": {"keep": 2},
    })  # fmt: skip
    return TrialContext(
        params=params, env=DistEnv(0, 1, 0, torch.device("cpu"), "gloo"), max_steps=steps,
        eval_every=every, trial_number=0, sweep="bench", config=config, workdir=root,
        checkpoints=CheckpointManager(root / "checkpoints", keep=2), reporter=continue_always,
        fresh=True,
    )  # fmt: skip


def plain(root: Path, steps: int, every: int, p: dict[str, Any]) -> Trainer:
    train, val = byte_gpt2.datasets(p)
    args = TrainingArguments(
        output_dir=str(root / "plain"), learning_rate=p["lr"], max_steps=steps,
        lr_scheduler_type=p["schedule"], per_device_train_batch_size=p["batch_size"],
        per_device_eval_batch_size=p["batch_size"], eval_strategy="steps", eval_steps=every,
        save_strategy="steps", save_steps=every, save_total_limit=2, use_cpu=True,
        report_to="none", disable_tqdm=True, seed=p["seed"],
    )  # fmt: skip
    return Trainer(model=byte_gpt2.model(p), args=args, train_dataset=train, eval_dataset=val)


def with_callback(root: Path, steps: int, every: int, p: dict[str, Any]) -> Trainer:
    ctx = context(root / "trial", steps, every, p)
    return byte_gpt2.trainer(ctx, HyperfleetCallback(ctx))


def steps_per_s(build: Any, steps: int, every: int, p: dict[str, Any]) -> tuple[float, float]:
    """Steps per second of ``trainer.train()``: of wall time, and of this process's CPU time
    (which a shared machine's load moves much less)."""
    with tempfile.TemporaryDirectory() as d:
        trainer = build(Path(d), steps, every, p)
        wall, cpu = time.perf_counter(), time.process_time()
        trainer.train()
        return steps / (time.perf_counter() - wall), steps / (time.process_time() - cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="40 steps, 3 rounds")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--json", type=Path, default=None, help="write the raw figures here")
    args = ap.parse_args()
    steps = args.steps or (40 if args.quick else 200)
    rounds = args.rounds or (3 if args.quick else 5)
    p = dict(byte_gpt2.PARAMS)
    byte_gpt2.datasets(p)  # the corpus cache, before any timing
    rows: list[dict[str, float]] = []
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; {steps} steps, eval+checkpoint every "
          f"{args.eval_every}")  # fmt: skip
    print(f"{'round':>5} {'plain steps/s':>14} {'callback steps/s':>17} {'ratio':>6} "
          f"{'plain /cpu-s':>13} {'callback /cpu-s':>16} {'ratio':>6}")  # fmt: skip
    for r in range(rounds):
        order = [("plain", plain), ("callback", with_callback)]
        if r % 2:
            order.reverse()
        got: dict[str, float] = {}
        for name, build in order:
            got[name], got[f"{name}_cpu"] = steps_per_s(build, steps, args.eval_every, p)
        got["ratio"] = got["callback"] / got["plain"]
        got["ratio_cpu"] = got["callback_cpu"] / got["plain_cpu"]
        rows.append(got)
        print(
            f"{r:>5} {got['plain']:14.2f} {got['callback']:17.2f} {got['ratio']:6.3f} "
            f"{got['plain_cpu']:13.2f} {got['callback_cpu']:16.2f} {got['ratio_cpu']:6.3f}"
        )
    median = statistics.median(row["ratio"] for row in rows)
    median_cpu = statistics.median(row["ratio_cpu"] for row in rows)
    print(f"median ratio callback / plain: {median:.3f} of wall time, {median_cpu:.3f} of CPU "
          f"time (target >= 0.95)")  # fmt: skip
    if args.json:
        args.json.write_text(
            json.dumps({"steps": steps, "rows": rows, "median": median, "median_cpu": median_cpu})
        )


if __name__ == "__main__":
    main()
