"""Training throughput of a Lightning trainer with hyperfleet's callback, against the same
trainer without it.

Both contenders fit ``examples/lightning/digits.py``'s module for the same steps on one CPU
process, validating every ``--eval-every`` steps and keeping a checkpoint there:

* **lightning**: a plain ``lightning.Trainer`` whose own ``ModelCheckpoint`` saves every
  ``--eval-every`` steps (the last one kept), as one trains without hyperfleet;
* **hyperfleet**: the example's ``main(ctx)`` in the real trial runtime (``run_trial``, a
  recorder that only keeps the reports): the callback reports at every validation and its
  checkpoints go through the trial's checkpoint manager (atomic, checksummed, ``keep: 2``).

They alternate for ``--rounds`` rounds; the table gives each one's median steps per second
and per CPU second of the process (torch on one thread; on a shared machine the CPU time is
what the other processes' load disturbs least), the ratio of the medians (hyperfleet /
lightning) and the median of each round's ratio (its two runs back to back). The hyperfleet time
includes the trial runtime's start (loading the workload, its context), so the ratio is a
lower bound of the callback's own.

    python benchmarks/bench_lightning.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning
import lightning.pytorch as pl
import torch

from examples.lightning.digits import DigitsModule
from hyperfleet.spec.trial import TrialConfig
from hyperfleet.spec.wire import CONTINUE, Decision, TrialSpec
from hyperfleet.testing.launchers import QuietRecorder
from hyperfleet.trials.runtime import run_trial

PARAMS = {"lr": 0.01, "hidden": 256, "batch_size": 64, "seed": 0, "decay": 1.0}


class KeepReports(QuietRecorder):
    """A recorder that keeps the reports (no storage, no scheduler: every report CONTINUEs)."""

    def __init__(self, spec: TrialSpec) -> None:
        super().__init__(spec)
        self.reports: list[int] = []

    def __call__(self, step: int, metrics: Mapping[str, float]) -> Decision:
        self.reports.append(step)
        return CONTINUE


def plain(steps: int, every: int, root: Path) -> tuple[float, float]:
    """Steps per second and per CPU second of the trainer without hyperfleet (its own
    ModelCheckpoint)."""
    start, cpu = time.perf_counter(), time.process_time()
    torch.manual_seed(0)
    ckpt = pl.callbacks.ModelCheckpoint(dirpath=root, every_n_train_steps=every, save_top_k=1)
    trainer = pl.Trainer(
        max_steps=steps, val_check_interval=every, check_val_every_n_epoch=None,
        num_sanity_val_steps=0, logger=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[ckpt], accelerator="cpu", devices=1,
        default_root_dir=str(root),
    )  # fmt: skip
    trainer.fit(DigitsModule(**PARAMS))  # type: ignore[arg-type]
    assert trainer.global_step == steps
    return steps / (time.perf_counter() - start), steps / (time.process_time() - cpu)


def with_callback(steps: int, every: int, root: Path) -> tuple[float, float]:
    """Steps per second and per CPU second of the same trainer with the callback, in the
    trial runtime."""
    trial = TrialConfig.model_validate({
        "workload": "examples.lightning.digits:main", "steps": steps, "eval_every": every,
        "resources": {"devices": 0}, "checkpoint": {"keep": 2},
    })  # fmt: skip
    spec = TrialSpec(sweep="bench", number=0, trial=trial, params=PARAMS, workdir=str(root),
                     trial_dir=str(root / "trial-0000"))  # fmt: skip
    recorders: list[KeepReports] = []

    def factory(s: TrialSpec) -> KeepReports:
        recorders.append(KeepReports(s))
        return recorders[-1]

    start, cpu = time.perf_counter(), time.process_time()
    run_trial(spec, factory)
    elapsed, used = time.perf_counter() - start, time.process_time() - cpu
    assert recorders[0].reports == list(range(every, steps + 1, every)), recorders[0].reports
    return steps / elapsed, steps / used


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smoke size (60 steps, 2 rounds)")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", type=Path, help="write the raw results here")
    args = ap.parse_args()
    steps, every, rounds = args.steps, args.eval_every, args.rounds
    if args.quick:
        steps, every, rounds = 60, 20, 2
    torch.set_num_threads(1)
    runs: dict[str, list[tuple[float, float]]] = {"lightning": [], "hyperfleet": []}
    with tempfile.TemporaryDirectory() as d:
        plain(every, every, Path(d) / "warm")  # imports and first-call costs out of the way
        for r in range(rounds):
            runs["lightning"].append(plain(steps, every, Path(d) / f"pl-{r}"))
            runs["hyperfleet"].append(with_callback(steps, every, Path(d) / f"hf-{r}"))
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
          f"{platform.node()}, load {os.getloadavg()[0]:.2f}, lightning {lightning.__version__}, "
          f"torch {torch.__version__}; {steps} steps, eval+checkpoint every {every}, "
          f"{rounds} rounds alternated")  # fmt: skip
    print("| measure | lightning (median) | hyperfleet (median) | ratio of medians | "
          "median of the rounds' ratios |")  # fmt: skip
    print("| --- | --- | --- | --- | --- |")
    result: dict[str, Any] = {"runs": runs, "steps": steps, "every": every}
    for i, name in enumerate(("steps/s", "steps per CPU s")):
        pl_, hf = ([r[i] for r in runs[k]] for k in ("lightning", "hyperfleet"))
        pairs = [h / p for h, p in zip(hf, pl_, strict=True)]
        ratio = statistics.median(hf) / statistics.median(pl_)
        print(f"| {name} | {statistics.median(pl_):.1f} | {statistics.median(hf):.1f} | "
              f"{ratio:.3f} | {statistics.median(pairs):.3f} |")  # fmt: skip
        result[name] = {"ratio": ratio, "round_ratios": pairs}
    for k, values in runs.items():
        print(f"{k} rounds (steps/s, per CPU s): "
              + ", ".join(f"{w:.1f}/{c:.1f}" for w, c in values))  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
